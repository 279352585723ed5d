//! What calls cost: a tool's price (`Tool.spec.cost`), a call's cost
//! (`ToolCall.status.cost`), and the `Budget` resource that caps spend.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::MAX_PRICE;
use crate::names::validate_name;
use crate::object::{Object, check_type};
use crate::{FieldError, ObjectMeta, ValidationError};

/// The currency when a price names none.
pub const DEFAULT_CURRENCY: &str = "USD";

fn usd() -> String {
    DEFAULT_CURRENCY.to_owned()
}

/// `Tool.spec.cost`: a fixed price per call, and/or a price per unit read
/// from the tool's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCost {
    /// ISO 4217 code or any unit of account, e.g. `USD`, `credits`.
    #[serde(default = "usd")]
    pub currency: String,
    /// Charged for every call that runs.
    #[serde(default)]
    pub per_call: f64,
    /// Charged per unit the output reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_unit: Option<PerUnit>,
}

/// `cost.perUnit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PerUnit {
    /// JSON pointer (RFC 6901) to a number in the output, e.g. `/usage/total_tokens`.
    pub pointer: String,
    /// Price of one unit.
    pub price: f64,
    /// What a unit is, e.g. `token`, `page`.
    #[serde(default = "unit")]
    pub unit: String,
}

fn unit() -> String {
    "unit".to_owned()
}

/// `ToolCall.status.cost`: what one call cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallCost {
    /// The total, in `currency`.
    pub amount: f64,
    /// The tool's currency.
    pub currency: String,
    /// Units read from the output, for a per-unit price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<f64>,
    /// What a unit is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

impl ToolCost {
    /// The cost of a call that ran and answered `output` (`None` when it
    /// failed without one: the per-call price is still charged).
    pub fn of(&self, output: Option<&Value>) -> CallCost {
        let units = self.per_unit.as_ref().and_then(|per| {
            output
                .and_then(|o| o.pointer(&per.pointer))
                .and_then(Value::as_f64)
                .filter(|u| u.is_finite() && *u >= 0.0)
        });
        let variable = match (&self.per_unit, units) {
            (Some(per), Some(units)) => per.price * units,
            _ => 0.0,
        };
        // Units come from the tool's output: whatever it reports, one call
        // costs at most `MAX_PRICE`, so the sums of reports cannot overflow.
        let amount = (self.per_call + variable).min(MAX_PRICE);
        CallCost {
            // Whole millionths: what reports sum, so a record and a report agree.
            amount: from_micros(to_micros(amount)),
            currency: self.currency.clone(),
            units,
            unit: units.and(self.per_unit.as_ref().map(|p| p.unit.clone())),
        }
    }

    /// Field errors for a price that is negative, over [`MAX_PRICE`], or
    /// has a bad pointer.
    pub fn problems(&self, at: &str) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let mut check = |field: &str, value: f64| {
            if !(0.0..=MAX_PRICE).contains(&value) {
                errors.push(FieldError {
                    field: format!("{at}.{field}"),
                    message: format!("must be a number between 0 and {MAX_PRICE}, got {value}"),
                });
            }
        };
        check("perCall", self.per_call);
        if let Some(per) = &self.per_unit {
            check("perUnit.price", per.price);
            if !per.pointer.starts_with('/') {
                errors.push(FieldError {
                    field: format!("{at}.perUnit.pointer"),
                    message: format!(
                        "{:?} is not a JSON pointer such as /usage/tokens",
                        per.pointer
                    ),
                });
            }
        }
        if self.currency.trim().is_empty() {
            errors.push(FieldError {
                field: format!("{at}.currency"),
                message: "must not be empty".to_owned(),
            });
        }
        errors
    }
}

/// Whole millionths of a currency unit: what the store sums, exactly.
pub fn to_micros(amount: f64) -> i64 {
    (amount * 1_000_000.0).round() as i64
}

/// The amount of `micros` millionths.
pub fn from_micros(micros: i64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// A cap on spend, in a namespace, optionally for one agent or one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Budget`.
    #[serde(default = "budget_kind")]
    pub kind: String,
    /// Name, namespace.
    pub metadata: ObjectMeta,
    /// What it caps.
    pub spec: BudgetSpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn budget_kind() -> String {
    Budget::KIND.to_owned()
}

/// `Budget.spec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetSpec {
    /// Whose calls count: the whole namespace, or one agent or tool.
    #[serde(default)]
    pub scope: BudgetScope,
    /// The caps, in `currency`.
    pub limits: BudgetLimits,
    /// What reaching them does.
    #[serde(default)]
    pub enforcement: Enforcement,
    /// Calls in other currencies do not count (default `USD`).
    #[serde(default = "usd")]
    pub currency: String,
}

/// `spec.scope`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetScope {
    /// Only this agent's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Only this tool's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// `spec.limits`: any of the three.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BudgetLimits {
    /// Per execution (one agent run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_run_usd: Option<f64>,
    /// Per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily_usd: Option<f64>,
    /// Per UTC calendar month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_usd: Option<f64>,
}

/// `spec.enforcement`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Enforcement {
    /// `alert`: a `warning` event once spend passes `softLimitPct`.
    #[serde(default = "alert")]
    pub on_soft_limit: String,
    /// `deny`: a call that would pass a limit is denied; `alert`: warned only.
    #[serde(default = "deny")]
    pub on_hard_limit: String,
    /// The soft limit, in percent of each limit (default 80).
    #[serde(default = "eighty")]
    pub soft_limit_pct: f64,
}

impl Default for Enforcement {
    fn default() -> Self {
        Self {
            on_soft_limit: alert(),
            on_hard_limit: deny(),
            soft_limit_pct: eighty(),
        }
    }
}

fn alert() -> String {
    "alert".to_owned()
}

fn deny() -> String {
    "deny".to_owned()
}

fn eighty() -> f64 {
    80.0
}

/// The window a limit applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The call's execution.
    Run,
    /// Since 00:00 UTC.
    Day,
    /// Since the first of the month, 00:00 UTC.
    Month,
}

impl Window {
    /// `perRunUsd`, `dailyUsd`, `monthlyUsd`.
    pub fn field(self) -> &'static str {
        match self {
            Window::Run => "perRunUsd",
            Window::Day => "dailyUsd",
            Window::Month => "monthlyUsd",
        }
    }
}

impl BudgetLimits {
    /// The limits that are set, with their windows.
    pub fn set(&self) -> Vec<(Window, f64)> {
        [
            (Window::Run, self.per_run_usd),
            (Window::Day, self.daily_usd),
            (Window::Month, self.monthly_usd),
        ]
        .into_iter()
        .filter_map(|(w, limit)| limit.map(|l| (w, l)))
        .collect()
    }
}

/// Where spend stands against one limit, for a call about to cost `next`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Standing {
    /// Below the soft limit.
    Fine,
    /// At or past the soft limit, within the hard one.
    Soft,
    /// The call would pass the limit.
    Over,
}

/// Compares spend plus the next call against a limit.
pub fn standing(spent: f64, next: f64, limit: f64, soft_pct: f64) -> Standing {
    let after = spent + next;
    if after > limit {
        Standing::Over
    } else if after >= limit * soft_pct / 100.0 {
        Standing::Soft
    } else {
        Standing::Fine
    }
}

impl Object for Budget {
    const KIND: &'static str = "Budget";
    const PLURAL: &'static str = "budgets";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Budget>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)?;
        let spec = &self.spec;
        let mut errors = Vec::new();
        let mut problem = |field: &str, message: &str| {
            errors.push(FieldError {
                field: field.to_owned(),
                message: message.to_owned(),
            })
        };
        let limits = spec.limits.set();
        if limits.is_empty() {
            problem(
                "spec.limits",
                "set at least one of perRunUsd, dailyUsd, monthlyUsd",
            );
        }
        for (window, limit) in limits {
            if !limit.is_finite() || limit < 0.0 {
                problem(
                    &format!("spec.limits.{}", window.field()),
                    "must be a finite number, zero or more",
                );
            }
        }
        let pct = spec.enforcement.soft_limit_pct;
        if !(0.0..=100.0).contains(&pct) {
            problem("spec.enforcement.softLimitPct", "must be between 0 and 100");
        }
        if spec.enforcement.on_soft_limit != "alert" {
            problem("spec.enforcement.onSoftLimit", "must be alert");
        }
        if !matches!(spec.enforcement.on_hard_limit.as_str(), "deny" | "alert") {
            problem("spec.enforcement.onHardLimit", "must be deny or alert");
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationError(errors))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_call_costs_its_fixed_price_plus_its_units() {
        let price = ToolCost {
            currency: "USD".to_owned(),
            per_call: 0.01,
            per_unit: Some(PerUnit {
                pointer: "/usage/tokens".to_owned(),
                price: 0.000002,
                unit: "token".to_owned(),
            }),
        };
        let cost = price.of(Some(&json!({"usage": {"tokens": 1500}})));
        assert_eq!(to_micros(cost.amount), 13_000);
        assert_eq!(cost.units, Some(1500.0));
        assert_eq!(cost.unit.as_deref(), Some("token"));
        let fixed_only = price.of(None);
        assert_eq!(to_micros(fixed_only.amount), 10_000);
        assert_eq!(fixed_only.units, None);
    }

    #[test]
    fn standing_against_a_limit() {
        assert_eq!(standing(1.0, 0.5, 10.0, 80.0), Standing::Fine);
        assert_eq!(standing(7.5, 0.5, 10.0, 80.0), Standing::Soft);
        assert_eq!(standing(9.8, 0.5, 10.0, 80.0), Standing::Over);
        assert_eq!(standing(10.0, 0.0, 10.0, 80.0), Standing::Soft);
    }

    #[test]
    fn budgets_are_checked_field_by_field() {
        let budget: Budget = serde_json::from_value(json!({
            "metadata": {"name": "b"},
            "spec": {"limits": {"dailyUsd": -1.0}, "enforcement": {"softLimitPct": 120.0}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let fields: Vec<String> = budget
            .validate()
            .err()
            .map(|e| e.0.into_iter().map(|f| f.field).collect())
            .unwrap_or_default();
        assert_eq!(
            fields,
            ["spec.limits.dailyUsd", "spec.enforcement.softLimitPct"]
        );
    }
}
