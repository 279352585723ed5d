//! `{{path}}` templates of declarative tools.
//!
//! A string that is one placeholder and nothing else keeps the JSON type of
//! what it names (`"{{params}}"` inserts the object); placeholders inside
//! text render as text (MiniJinja, strict). A path that names nothing is an
//! error that says which path, never a silent empty string.

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value};

/// Renders every string inside `template` (objects and arrays recursively).
pub fn render_value(template: &Value, scopes: &Value) -> Result<Value, String> {
    match template {
        Value::String(text) => render(text, scopes),
        Value::Array(items) => items
            .iter()
            .map(|i| render_value(i, scopes))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| Ok((k.clone(), render_value(v, scopes)?)))
            .collect::<Result<Map<_, _>, String>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// Renders a string: a lone placeholder keeps its type, anything else is text.
pub fn render(text: &str, scopes: &Value) -> Result<Value, String> {
    if let Some(path) = lone_placeholder(text) {
        return lookup(scopes, path).cloned().ok_or_else(|| missing(path));
    }
    render_text(text, scopes).map(Value::String)
}

/// Renders a string as text.
pub fn render_text(text: &str, scopes: &Value) -> Result<String, String> {
    for path in placeholders(text) {
        if is_path(path) && lookup(scopes, path).is_none() {
            return Err(missing(path));
        }
    }
    environment()
        .render_str(text, minijinja::value::Serde(scopes))
        .map_err(|e| format!("template {text:?} cannot be rendered: {e}"))
}

/// Checks a template's syntax without rendering it.
pub fn check(text: &str) -> Result<(), String> {
    environment()
        .template_from_str(text)
        .map(drop)
        .map_err(|e| format!("template {text:?} is invalid: {e}"))
}

/// Every string in `value` that holds a placeholder, checked.
pub fn check_value(value: &Value) -> Result<(), String> {
    match value {
        Value::String(text) if text.contains("{{") || text.contains("{%") => check(text),
        Value::Array(items) => items.iter().try_for_each(check_value),
        Value::Object(map) => map.values().try_for_each(check_value),
        _ => Ok(()),
    }
}

/// The value at a dotted path.
pub fn lookup<'a>(scopes: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(scopes, |at, segment| at.get(segment))
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env
}

fn missing(path: &str) -> String {
    format!("template names {path:?}, which has no value")
}

fn lone_placeholder(text: &str) -> Option<&str> {
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?.trim();
    (is_path(inner) && !inner.contains("{{")).then_some(inner)
}

fn placeholders(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start + 2..].find("}}") else {
            break;
        };
        found.push(rest[start + 2..start + 2 + len].trim());
        rest = &rest[start + 2 + len + 2..];
    }
    found
}

fn is_path(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn whole_values_keep_their_type_and_text_renders() {
        let scopes =
            json!({"params": {"meal_type": "lunch", "dishes": ["soup"]}, "user": {"id": "u1"}});
        assert_eq!(render("{{params}}", &scopes).unwrap(), scopes["params"]);
        assert_eq!(
            render(" {{ params.dishes }} ", &scopes).unwrap(),
            json!(["soup"])
        );
        assert_eq!(
            render("I've logged your {{params.meal_type}}!", &scopes).unwrap(),
            json!("I've logged your lunch!")
        );
        let body = render_value(
            &json!({"user_id": "{{user.id}}", "meal": "{{params}}", "n": 1}),
            &scopes,
        )
        .unwrap();
        assert_eq!(
            body,
            json!({"user_id": "u1", "meal": scopes["params"], "n": 1})
        );
    }

    #[test]
    fn missing_paths_and_bad_syntax_are_errors() {
        let scopes = json!({"params": {}});
        assert!(
            render("{{params.nope}}", &scopes)
                .unwrap_err()
                .contains("params.nope")
        );
        assert!(
            render("hi {{user.name}}", &scopes)
                .unwrap_err()
                .contains("user.name")
        );
        assert!(check("{{ unclosed").is_err());
        assert!(check_value(&json!({"a": ["{{ok}}", "{% if %}"]})).is_err());
    }
}
