//! CEL expressions: the one expression language of joch, used by policy
//! rules (`when.expr`) and declarative tools (`conditional.if`, `validate`).

use serde_json::Value;

/// Parses an expression, so bad ones are refused when a resource is written.
pub fn compile(expr: &str) -> Result<cel::Program, String> {
    cel::Program::compile(expr).map_err(|e| format!("invalid CEL expression {expr:?}: {e}"))
}

/// Evaluates `expr` with each top-level key of `vars` as a variable; the
/// result must be a boolean.
pub fn evaluate_bool(expr: &str, vars: &Value) -> Result<bool, String> {
    let program = compile(expr)?;
    let mut context = cel::Context::default();
    if let Value::Object(vars) = vars {
        for (name, value) in vars {
            let value =
                cel::to_value(value).map_err(|e| format!("cannot pass {name} to CEL: {e}"))?;
            context.add_variable_from_value(name.clone(), value);
        }
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!(
            "CEL expression {expr:?} gave {other:?}, not a boolean"
        )),
        Err(e) => Err(format!("CEL expression {expr:?} failed: {e}")),
    }
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
}
