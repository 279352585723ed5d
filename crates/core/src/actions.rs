//! Declarative tools (seed 002): a tool whose logic is a list of actions,
//! created and changed at run time, with `{{path}}` templates.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `backend` of `type: actions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionsBackend {
    /// Run in order; the first failure stops the chain.
    #[serde(deserialize_with = "indexed")]
    pub actions: Vec<Action>,
    /// Run after every action succeeded.
    #[serde(
        default,
        alias = "on_success",
        deserialize_with = "indexed",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub on_success: Vec<Action>,
    /// Run after an action failed.
    #[serde(
        default,
        alias = "on_failure",
        deserialize_with = "indexed",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub on_failure: Vec<Action>,
}

/// Reads a list of actions, naming the index of one that does not parse
/// (serde alone would only name the whole backend).
fn indexed<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<Action>, D::Error> {
    let raw = Vec::<Value>::deserialize(deserializer)?;
    raw.into_iter()
        .enumerate()
        .map(|(i, value)| {
            serde_json::from_value(value)
                .map_err(|e| serde::de::Error::custom(format!("action [{i}]: {e}")))
        })
        .collect()
}

/// One action. The `type` field picks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Action {
    /// Checks the parameters against the tool's schema, then each rule.
    #[serde(rename = "validate")]
    Validate {
        /// CEL expressions over the scopes that must hold.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        rules: Vec<ValidationRule>,
    },
    /// Writes the context: key → templated value. Keys are dotted paths,
    /// relative to `workflow` unless they start with `user.`, `workflow.`,
    /// `agents.<agent>.` or `flags.`; `key[+]` appends to an array.
    #[serde(rename = "context.set")]
    ContextSet {
        /// Key → value (templated).
        data: Map<String, Value>,
    },
    /// Reads context paths into the tool's result (`values`).
    #[serde(rename = "context.get")]
    ContextGet {
        /// Dotted paths, e.g. `workflow.logged_meals`; a missing one fails.
        keys: Vec<String>,
    },
    /// Calls an `Endpoint` resource of the namespace with a templated body.
    #[serde(rename = "webhook")]
    Webhook {
        /// The Endpoint's name.
        endpoint: String,
        /// The JSON body (templated); the parameters when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<Value>,
        /// Go on with the chain if the call fails.
        #[serde(
            default,
            alias = "continueOnError",
            skip_serializing_if = "std::ops::Not::not"
        )]
        continue_on_error: bool,
    },
    /// Transfers the execution to another agent.
    #[serde(rename = "handoff")]
    Handoff {
        /// The agent taking over (templated).
        agent: String,
        /// Why (templated).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Sets the message returned to the model (templated).
    #[serde(rename = "respond")]
    Respond {
        /// The message.
        message: String,
    },
    /// Sets workflow flags: name → templated value.
    #[serde(rename = "flag.set")]
    FlagSet {
        /// Flag → value.
        flags: Map<String, Value>,
    },
    /// Branches on a condition.
    #[serde(rename = "conditional")]
    Conditional {
        /// A CEL expression over the scopes (`params.meal_type == 'lunch'`).
        #[serde(rename = "if")]
        condition: String,
        /// Run when it holds.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        then: Vec<Action>,
        /// Run otherwise.
        #[serde(default, rename = "else", skip_serializing_if = "Vec::is_empty")]
        otherwise: Vec<Action>,
    },
}

impl Action {
    /// The `type` name.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Validate { .. } => "validate",
            Action::ContextSet { .. } => "context.set",
            Action::ContextGet { .. } => "context.get",
            Action::Webhook { .. } => "webhook",
            Action::Handoff { .. } => "handoff",
            Action::Respond { .. } => "respond",
            Action::FlagSet { .. } => "flag.set",
            Action::Conditional { .. } => "conditional",
        }
    }

    /// Every action in the tree, with its dotted location, for checks.
    pub fn walk<'a>(actions: &'a [Action], at: &str, out: &mut Vec<(String, &'a Action)>) {
        for (i, action) in actions.iter().enumerate() {
            let here = format!("{at}[{i}]");
            out.push((here.clone(), action));
            if let Action::Conditional {
                then, otherwise, ..
            } = action
            {
                Action::walk(then, &format!("{here}.then"), out);
                Action::walk(otherwise, &format!("{here}.else"), out);
            }
        }
    }
}

/// A `validate` rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidationRule {
    /// CEL expression that must be true.
    pub expr: String,
    /// Why it failed, for the model (templated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ActionsBackend {
    /// Every action with its location (`spec.backend.actions[2].then[0]`).
    pub fn all(&self) -> Vec<(String, &Action)> {
        let mut out = Vec::new();
        Action::walk(&self.actions, "spec.backend.actions", &mut out);
        Action::walk(&self.on_success, "spec.backend.onSuccess", &mut out);
        Action::walk(&self.on_failure, "spec.backend.onFailure", &mut out);
        out
    }

    /// The Endpoint names the actions call.
    pub fn endpoints(&self) -> Vec<(String, &str)> {
        self.all()
            .into_iter()
            .filter_map(|(at, a)| match a {
                Action::Webhook { endpoint, .. } => Some((at, endpoint.as_str())),
                _ => None,
            })
            .collect()
    }
}

/// The durable state declarative tools read and write, one per execution:
/// `{user, workflow, agents: {<agent>: {...}}, flags}`. Its name is the
/// execution's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallContext {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `CallContext`.
    #[serde(default = "context_kind")]
    pub kind: String,
    /// Name (the execution's), namespace.
    pub metadata: crate::ObjectMeta,
    /// The state.
    #[serde(default)]
    pub data: Map<String, Value>,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn context_kind() -> String {
    "CallContext".to_owned()
}

impl crate::Object for CallContext {
    const KIND: &'static str = "CallContext";
    const PLURAL: &'static str = "callcontexts";

    fn metadata(&self) -> &crate::ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut crate::ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), crate::ValidationError> {
        crate::names::validate_name("metadata.name", &self.metadata.name)
    }
}

/// One change a declarative tool made to its context, replayable on a newer
/// copy of the context when a concurrent call wrote first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextChange {
    /// `set` or `append`.
    pub op: String,
    /// Dotted path from the context root, e.g. `workflow.logged_meals`.
    pub path: String,
    /// The value set or appended.
    pub value: Value,
}

impl ContextChange {
    /// Applies the change to `root` (creating objects and arrays on the way).
    pub fn apply(&self, root: &mut Map<String, Value>) {
        let mut segments: Vec<&str> = self.path.split('.').filter(|s| !s.is_empty()).collect();
        let Some(last) = segments.pop() else { return };
        let mut at = root;
        for segment in segments {
            let next = at
                .entry(segment.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !next.is_object() {
                *next = Value::Object(Map::new());
            }
            let Value::Object(map) = next else { return };
            at = map;
        }
        match self.op.as_str() {
            "append" => match at
                .entry(last.to_owned())
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                Value::Array(items) => items.push(self.value.clone()),
                other => *other = Value::Array(vec![other.clone(), self.value.clone()]),
            },
            _ => {
                at.insert(last.to_owned(), self.value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_seed_actions_parse() {
        let backend: ActionsBackend = serde_json::from_value(json!({
            "actions": [
                {"type": "validate", "rules": [{"expr": "size(params.dishes) > 0", "message": "no dishes"}]},
                {"type": "context.set", "data": {"logged_meals[+]": "{{params}}"}},
                {"type": "webhook", "endpoint": "meal.log", "body": {"user_id": "{{user.id}}", "meal": "{{params}}"}},
                {"type": "conditional", "if": "params.meal_type == 'dinner'", "then": [{"type": "flag.set", "flags": {"ate_dinner": true}}]}
            ],
            "on_success": [{"type": "respond", "message": "I've logged your {{params.meal_type}}!"}],
            "on_failure": [{"type": "respond", "message": "Sorry, I couldn't log that meal."}]
        }))
        .unwrap();
        let kinds: Vec<_> = backend
            .all()
            .into_iter()
            .map(|(at, a)| format!("{at}={}", a.kind()))
            .collect();
        assert_eq!(
            kinds,
            [
                "spec.backend.actions[0]=validate",
                "spec.backend.actions[1]=context.set",
                "spec.backend.actions[2]=webhook",
                "spec.backend.actions[3]=conditional",
                "spec.backend.actions[3].then[0]=flag.set",
                "spec.backend.onSuccess[0]=respond",
                "spec.backend.onFailure[0]=respond"
            ]
        );
        assert_eq!(
            backend.endpoints(),
            [("spec.backend.actions[2]".to_owned(), "meal.log")]
        );
        let unknown =
            serde_json::from_value::<ActionsBackend>(json!({"actions": [{"type": "teleport"}]}));
        assert!(unknown.is_err());
        let unknown =
            serde_json::from_value::<ActionsBackend>(json!({"actions": [{"type": "teleport"}]}));
        assert!(unknown.unwrap_err().to_string().contains("teleport"));
    }
}

#[cfg(test)]
mod context_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn set_and_append_create_what_is_missing() {
        let mut root = Map::new();
        let change = |op: &str, path: &str, value: Value| ContextChange {
            op: op.into(),
            path: path.into(),
            value,
        };
        change("append", "workflow.logged_meals", json!({"meal": 1})).apply(&mut root);
        change("append", "workflow.logged_meals", json!({"meal": 2})).apply(&mut root);
        change("set", "agents.meal.last_dish", json!("soup")).apply(&mut root);
        change("set", "flags.done", json!(true)).apply(&mut root);
        assert_eq!(
            Value::Object(root),
            json!({"workflow": {"logged_meals": [{"meal": 1}, {"meal": 2}]}, "agents": {"meal": {"last_dish": "soup"}}, "flags": {"done": true}})
        );
    }
}
