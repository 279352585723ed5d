//! Applying a policy's `modify` patch to a JSON value by dotted paths.

use serde_json::{Map, Value};

use crate::policy::Patch;
use crate::redact::redact_fields;

/// Applies `set`, then `remove`, then `redact`. Paths are dotted
/// (`customer.email`); `set` creates missing objects along the way.
pub fn apply_patch(value: &mut Value, patch: &Patch) {
    for (path, new) in &patch.set {
        set_path(value, path, new.clone());
    }
    for path in &patch.remove {
        remove_path(value, path);
    }
    redact_fields(value, &patch.redact);
}

fn set_path(value: &mut Value, path: &str, new: Value) {
    let mut at = value;
    let mut segments = path.split('.').filter(|s| !s.is_empty()).peekable();
    while let Some(segment) = segments.next() {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Value::Object(map) = at else { return };
        if segments.peek().is_none() {
            map.insert(segment.to_owned(), new);
            return;
        }
        at = map
            .entry(segment.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

fn remove_path(value: &mut Value, path: &str) {
    let segments: Vec<&str> = path.split('.').filter(|s| !s.is_empty()).collect();
    let Some((last, parents)) = segments.split_last() else {
        return;
    };
    let mut at = value;
    for segment in parents {
        match at.get_mut(*segment) {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Value::Object(map) = at {
        map.remove(*last);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn set_remove_and_redact() {
        let mut v = json!({"priority": "high", "customer": {"email": "a@b.c", "name": "Ann"}, "debug": true});
        let patch: Patch = serde_json::from_value(json!({
            "set": {"priority": "low", "meta.source": "policy"},
            "remove": ["debug", "absent.path"],
            "redact": ["customer.email"]
        }))
        .unwrap();
        apply_patch(&mut v, &patch);
        assert_eq!(
            v,
            json!({"priority": "low", "meta": {"source": "policy"}, "customer": {"email": "[REDACTED]", "name": "Ann"}})
        );
    }
}
