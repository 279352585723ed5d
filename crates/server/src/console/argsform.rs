//! The "edit the arguments" form of an inbox card, generated from the
//! tool's input schema: a field per property of a simple type (string,
//! enum, integer, number, boolean), with the schema's constraints as the
//! browser's own validation (`required`, `minlength`, `maxlength`,
//! `pattern`, `min`, `max`), and the arguments as JSON for everything else
//! (the fallback, and the whole form for a schema without simple
//! properties). Before the form is sent, the console's script checks the
//! fields and the JSON and writes the fields into the JSON, which alone is
//! posted; the engine then checks it against the full schema.

use maud::{Markup, html};
use serde_json::{Map, Value};

/// The fields for the simple properties of `schema`, filled from `input`;
/// empty when the schema has none. Ids are prefixed with `prefix`.
pub(crate) fn fields(prefix: &str, schema: &Value, input: &Value) -> Vec<Markup> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let empty = Map::new();
    let current = input.as_object().unwrap_or(&empty);
    properties
        .iter()
        .filter_map(|(name, property)| {
            let id = format!("{prefix}-arg-{name}");
            field(
                &id,
                name,
                property,
                required.contains(&name.as_str()),
                current.get(name),
            )
        })
        .collect()
}

fn field(
    id: &str,
    name: &str,
    p: &Value,
    required: bool,
    current: Option<&Value>,
) -> Option<Markup> {
    let kind = p.get("type").and_then(Value::as_str)?;
    let number = |key: &str| p.get(key).and_then(Value::as_f64).map(|n| n.to_string());
    let text = current.map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let label = html! {
        label for=(id) { code { (name) } @if required { " (required)" } }
        @if let Some(d) = p.get("description").and_then(Value::as_str) { span.note { " " (d) } }
    };
    let control = match (kind, p.get("enum").and_then(Value::as_array)) {
        ("string", Some(options)) => html! {
            select id=(id) data-arg=(name) data-type="string" required[required] {
                @if !required { option value="" { "—" } }
                @for o in options.iter().filter_map(Value::as_str) {
                    option value=(o) selected[text.as_deref() == Some(o)] { (o) }
                }
            }
        },
        ("string", None) => html! {
            input id=(id) type="text" data-arg=(name) data-type="string" required[required]
                minlength=[p.get("minLength").and_then(Value::as_u64)]
                maxlength=[p.get("maxLength").and_then(Value::as_u64)]
                pattern=[p.get("pattern").and_then(Value::as_str)]
                value=[text];
        },
        ("integer" | "number", None) => html! {
            input id=(id) type="number" data-arg=(name) data-type=(kind) required[required]
                step=(if kind == "integer" { "1" } else { "any" })
                min=[number("minimum")] max=[number("maximum")]
                value=[text];
        },
        ("boolean", None) => html! {
            input id=(id) type="checkbox" data-arg=(name) data-type="boolean"
                checked[current == Some(&Value::Bool(true))];
        },
        _ => return None,
    };
    Some(html! { div.field { (label) (control) } })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn simple_properties_become_constrained_fields() {
        let schema = json!({
            "type": "object", "required": ["subject"],
            "properties": {
                "subject": {"type": "string", "minLength": 1, "description": "One line"},
                "priority": {"type": "string", "enum": ["low", "high"]},
                "count": {"type": "integer", "minimum": 1, "maximum": 5},
                "urgent": {"type": "boolean"},
                "tags": {"type": "array"}
            }
        });
        let input = json!({"subject": "hi", "priority": "high", "count": 2, "urgent": true});
        let html: String = fields("c1", &schema, &input)
            .into_iter()
            .map(Markup::into_string)
            .collect();
        assert!(html.contains(r#"id="c1-arg-subject" type="text" data-arg="subject" data-type="string" required minlength="1" value="hi""#), "{html}");
        assert!(
            html.contains(r#"<option value="high" selected>high</option>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"step="1" min="1" max="5" value="2""#),
            "{html}"
        );
        assert!(html.contains(r#"data-type="boolean" checked"#), "{html}");
        assert!(!html.contains("tags"), "an array stays in the JSON");
        assert!(fields("c1", &json!({"type": "object"}), &input).is_empty());
    }
}
