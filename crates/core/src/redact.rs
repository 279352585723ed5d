//! Redaction of named fields before a value is recorded or logged.

use serde_json::Value;

/// What a redacted field is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// What of a value a record keeps: all of it, with the fields `redact`
/// names replaced by [`REDACTED`], or, when it is not to be kept
/// (`observability.logArgs` / `logResult` false), only the marker.
pub fn recorded_value(mut value: Value, keep: bool, redact: &[String]) -> Value {
    if !keep {
        return Value::String(REDACTED.to_owned());
    }
    redact_fields(&mut value, redact);
    value
}

/// Replaces each field named by a dotted path (`card.number`, `password`)
/// with [`REDACTED`], wherever the path exists. A path segment that meets an
/// array applies to each element, so `items.secret` covers every item.
pub fn redact_fields(value: &mut Value, paths: &[String]) {
    for path in paths {
        let segments: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
        redact_path(value, &segments);
    }
}

fn redact_path(value: &mut Value, segments: &[&str]) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    match value {
        Value::Object(map) => {
            if let Some(child) = map.get_mut(*first) {
                if rest.is_empty() {
                    *child = Value::String(REDACTED.to_owned());
                } else {
                    redact_path(child, rest);
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| redact_path(item, segments)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn redacts_nested_and_array_fields_only() {
        let mut v = json!({
            "password": "hunter2",
            "card": {"number": "4111", "brand": "visa"},
            "items": [{"secret": 1, "id": 1}, {"id": 2}],
            "keep": "me"
        });
        redact_fields(
            &mut v,
            &[
                "password".into(),
                "card.number".into(),
                "items.secret".into(),
                "absent.path".into(),
            ],
        );
        assert_eq!(
            v,
            json!({
                "password": REDACTED,
                "card": {"number": REDACTED, "brand": "visa"},
                "items": [{"secret": REDACTED, "id": 1}, {"id": 2}],
                "keep": "me"
            })
        );
    }
}
