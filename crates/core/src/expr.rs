//! CEL expressions: the one expression language of joch, used by policy
//! rules (`when.expr`) and declarative tools (`conditional.if`, `validate`).
//!
//! An evaluation is metered ([`Budget`]): the CEL library counts no cost
//! of its own, so the expression is instrumented before it runs. Each
//! comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) is
//! charged the size of what it ranges over, each `+` the size of what it
//! builds, and at each charge the caller's clock may say time is up. An
//! expression over budget fails, and its caller fails closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr};
use cel::common::value::CowVal;
use cel::objects::Value as Evaluated;
use serde_json::Value;

/// The function an instrumented expression calls to charge its budget.
const CHARGE: &str = "@joch_charge";

/// CEL's standard library, built once: `Context::default()` would build it
/// anew for every evaluation.
static STANDARD: std::sync::LazyLock<Arc<cel::Env>> =
    std::sync::LazyLock::new(|| Arc::new(cel::Env::stdlib()));

/// Steps an evaluation may take when its caller names no budget: a
/// comprehension over a million items, or a thousand over a thousand.
pub const DEFAULT_STEPS: u64 = 1_000_000;

/// What one evaluation may spend: `steps`, counted as the items each
/// comprehension ranges over and the sizes of what `+` builds; and
/// `expired`, asked at every charge, which the caller's clock answers (the
/// core reads none).
#[derive(Clone)]
pub struct Budget {
    /// Most steps.
    pub steps: u64,
    /// True once the caller's time is up.
    pub expired: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            steps: DEFAULT_STEPS,
            expired: Arc::new(|| false),
        }
    }
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

/// Parses an expression, so bad ones are refused when a resource is written.
pub fn compile(expr: &str) -> Result<cel::Program, String> {
    cel::Program::compile(expr).map_err(|e| format!("invalid CEL expression {expr:?}: {e}"))
}

/// Whether `expr` parses and has no comprehension: its evaluation reads
/// the variables at most a fixed number of times, so it costs no more than
/// reading them.
pub fn is_linear(expr: &str) -> bool {
    compile(expr).is_ok_and(|program| !loops(program.expression()))
}

fn loops(e: &IdedExpr) -> bool {
    let entry = |entry: &IdedEntryExpr| match &entry.expr {
        EntryExpr::MapEntry(m) => loops(&m.key) || loops(&m.value),
        EntryExpr::StructField(f) => loops(&f.value),
    };
    match &e.expr {
        Expr::Comprehension(_) => true,
        Expr::Call(call) => call.target.iter().any(|t| loops(t)) || call.args.iter().any(loops),
        Expr::List(list) => list.elements.iter().any(loops),
        Expr::Map(map) => map.entries.iter().any(entry),
        Expr::Struct(s) => s.entries.iter().any(entry),
        Expr::Select(select) => loops(&select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => false,
    }
}

/// Evaluates `expr` with each top-level key of `vars` as a variable, within
/// the default budget; the result must be a boolean.
pub fn evaluate_bool(expr: &str, vars: &Value) -> Result<bool, String> {
    evaluate_bool_within(expr, vars, &Budget::default())
}

/// [`evaluate_bool`] within `budget`.
pub fn evaluate_bool_within(expr: &str, vars: &Value, budget: &Budget) -> Result<bool, String> {
    let program = compile(expr)?;
    let mut context = cel::Context::with_env(STANDARD.clone());
    if let Value::Object(vars) = vars {
        for (name, value) in vars {
            let value =
                cel::to_value(value).map_err(|e| format!("cannot pass {name} to CEL: {e}"))?;
            context.add_variable_from_value(name.clone(), value);
        }
    }
    let meter = Arc::new(Meter::default());
    context
        .add_function(CHARGE, charging(budget.clone(), meter.clone()))
        .map_err(|e| format!("cannot meter CEL: {e}"))?;
    let mut metered = program.expression().clone();
    meter_expr(&mut metered);
    let result = Evaluated::resolve(&metered, &context);
    // Over budget is a failure even where CEL's error semantics would
    // absorb the refused step (`false || error` is false in `all`).
    match meter.tripped.load(Ordering::Relaxed) {
        STEPS => {
            return Err(format!(
                "CEL expression {expr:?} exceeded its budget of {} steps",
                budget.steps
            ));
        }
        TIME => return Err(format!("CEL expression {expr:?} ran out of time")),
        _ => {}
    }
    match result {
        Ok(Evaluated::Bool(b)) => Ok(b),
        Ok(other) => Err(format!(
            "CEL expression {expr:?} gave {other:?}, not a boolean"
        )),
        Err(e) => Err(format!("CEL expression {expr:?} failed: {e}")),
    }
}

/// What an evaluation spent, and why it was stopped, if it was.
#[derive(Default)]
struct Meter {
    spent: AtomicU64,
    tripped: AtomicU8,
}

/// [`Meter::tripped`]: over its steps, or out of time.
const STEPS: u8 = 1;
const TIME: u8 = 2;

/// A function the CEL library calls with its context, as its own are.
type Native = Box<
    dyn for<'c, 'v> Fn(
            &mut cel::FunctionContext<'c, 'v>,
        ) -> Result<CowVal<'c, 'v>, cel::ExecutionError>
        + Send
        + Sync,
>;

/// The charging function: passes its argument through, adding its size to
/// what was spent, and fails once the budget is spent or time is up.
fn charging(budget: Budget, meter: Arc<Meter>) -> Native {
    Box::new(move |ftx| {
        let value = ftx
            .args
            .pop()
            .ok_or_else(|| cel::ExecutionError::invalid_argument_count(1, 0))?;
        let size = value.as_sizer().map_or(1, |s| {
            u64::try_from(s.size().into_inner()).unwrap_or(1).max(1)
        });
        let total = meter
            .spent
            .fetch_add(size, Ordering::Relaxed)
            .saturating_add(size);
        let tripped = match () {
            () if total > budget.steps => STEPS,
            () if (budget.expired)() => TIME,
            () => return Ok(value),
        };
        meter.tripped.store(tripped, Ordering::Relaxed);
        Err(cel::ExecutionError::function_error(
            CHARGE,
            "the expression's budget is spent",
        ))
    })
}

/// Instruments `e`: every comprehension's range and every `+` pass through
/// the charging function.
fn meter_expr(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                meter_expr(part);
            }
            charged(&mut c.iter_range);
        }
        Expr::Call(call) => {
            call.target.iter_mut().for_each(|t| meter_expr(t));
            call.args.iter_mut().for_each(meter_expr);
            if call.func_name == cel::common::ast::operators::ADD && !accumulates(call) {
                charged(e);
            }
        }
        Expr::List(list) => list.elements.iter_mut().for_each(meter_expr),
        Expr::Map(map) => map.entries.iter_mut().for_each(meter_entry),
        Expr::Struct(s) => s.entries.iter_mut().for_each(meter_entry),
        Expr::Select(select) => meter_expr(&mut select.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn meter_entry(entry: &mut IdedEntryExpr) {
    match &mut entry.expr {
        EntryExpr::MapEntry(m) => {
            meter_expr(&mut m.key);
            meter_expr(&mut m.value);
        }
        EntryExpr::StructField(f) => meter_expr(&mut f.value),
    }
}

/// A macro's own step, `@result + [item]`: its cost is the comprehension's
/// range, charged already (and CEL builds it in place, not by copies).
fn accumulates(call: &CallExpr) -> bool {
    matches!(call.args.first(), Some(IdedExpr { expr: Expr::Ident(name), .. }) if name.starts_with('@'))
}

/// Wraps `e` in a call of the charging function.
fn charged(e: &mut IdedExpr) {
    let inner = std::mem::take(e);
    *e = IdedExpr {
        id: inner.id,
        expr: Expr::Call(CallExpr {
            func_name: CHARGE.to_owned(),
            target: None,
            args: vec![inner],
        }),
    };
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn booleans_errors_and_non_booleans() {
        let vars = json!({"params": {"n": 3, "dishes": ["a"]}});
        assert_eq!(
            evaluate_bool("params.n > 2 && size(params.dishes) == 1", &vars),
            Ok(true)
        );
        assert_eq!(evaluate_bool("params.n < 2", &vars), Ok(false));
        assert!(
            evaluate_bool("params.n", &vars)
                .unwrap_err()
                .contains("not a boolean")
        );
        assert!(evaluate_bool("missing.x == 1", &vars).is_err());
        assert!(compile("params.n >").is_err());
    }

    #[test]
    fn comprehensions_and_concatenations_are_metered() {
        let xs: Vec<u64> = (0..2_000).collect();
        let vars = json!({"input": {"xs": xs}});
        let budget = |steps| Budget {
            steps,
            ..Budget::default()
        };
        // A few passes over 2,000 items fit in 100,000 steps; a pass per
        // item does not, nor a list built per item.
        let once =
            "input.xs.all(x, x >= 0) && input.xs.map(x, string(x) + '!').exists(y, y == '1999!')";
        assert_eq!(
            evaluate_bool_within(once, &vars, &budget(100_000)),
            Ok(true)
        );
        let nested = "input.xs.all(x, input.xs.exists(y, y == x))";
        let refused = evaluate_bool_within(nested, &vars, &budget(100_000)).unwrap_err();
        assert!(
            refused.contains("exceeded its budget of 100000 steps"),
            "{refused}"
        );
        let grown = "input.xs.map(x, input.xs + input.xs).size() > 0";
        assert!(evaluate_bool_within(grown, &vars, &budget(100_000)).is_err());
        assert_eq!(
            evaluate_bool_within(nested, &vars, &budget(u64::MAX)),
            Ok(true)
        );
    }

    #[test]
    fn only_comprehensions_loop() {
        assert!(is_linear(
            "has(input.a) && input.a.b == 'x' || size(input.s) > 2"
        ));
        assert!(is_linear("[input.a, {'k': input.b}].size() == 2"));
        assert!(!is_linear("input.xs.exists(x, x == 1)"));
        assert!(!is_linear("size(input.xs.map(x, x)) > 0 && true"));
        assert!(
            !is_linear("input.a >"),
            "what does not parse is not judged linear"
        );
    }

    #[test]
    fn an_expired_clock_stops_the_evaluation() {
        let vars = json!({"input": {"xs": [1, 2, 3]}});
        let budget = Budget {
            steps: u64::MAX,
            expired: Arc::new(|| true),
        };
        let refused = evaluate_bool_within("input.xs.all(x, x > 0)", &vars, &budget).unwrap_err();
        assert!(refused.contains("ran out of time"), "{refused}");
        // Once tripped, a result CEL's error semantics would give anyway
        // (`all` is false once an item is) is still refused.
        let absorbed = "input.xs.all(x, x < 2 && input.xs.exists(y, y == x))";
        let three = Budget {
            steps: 3,
            ..Budget::default()
        };
        assert!(evaluate_bool_within(absorbed, &vars, &three).is_err());
        // Without a comprehension or a `+`, nothing is charged.
        assert_eq!(
            evaluate_bool_within("input.xs[0] == 1", &vars, &budget),
            Ok(true)
        );
    }
}
