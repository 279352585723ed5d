//! Argument normalisation (seed 001): a JSON string is accepted as a
//! convenience, and the result is always a plain object.

use serde_json::{Map, Value};

/// Why arguments could not be normalised into an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// A string was given but it does not hold JSON.
    #[error("arguments are a string that is not valid JSON: {0}")]
    NotJson(String),
    /// The value (or the JSON inside the string) is not an object.
    #[error("arguments must be a JSON object, got {0}")]
    NotAnObject(&'static str),
}

/// Turns call arguments into an object: objects pass through, a string holding
/// a JSON object is parsed, `null` (or an absent input) is the empty object.
pub fn normalize_args(input: Value) -> Result<Map<String, Value>, ArgsError> {
    match input {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        Value::String(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(other) => Err(ArgsError::NotAnObject(type_name(&other))),
            Err(e) => Err(ArgsError::NotJson(e.to_string())),
        },
        other => Err(ArgsError::NotAnObject(type_name(&other))),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn normalisation_table() {
        let obj = json!({"a": 1, "b": [true]});
        let cases: Vec<(Value, Result<Value, &str>)> = vec![
            (obj.clone(), Ok(obj.clone())),
            (Value::String(obj.to_string()), Ok(obj.clone())),
            (Value::Null, Ok(json!({}))),
            (json!("[1,2]"), Err("an array")),
            (json!("not json"), Err("not valid JSON")),
            (json!(42), Err("a number")),
            (json!([1]), Err("an array")),
        ];
        for (input, expected) in cases {
            let got = normalize_args(input.clone());
            match (got, expected) {
                (Ok(map), Ok(want)) => assert_eq!(Value::Object(map), want, "{input}"),
                (Err(e), Err(fragment)) => {
                    assert!(e.to_string().contains(fragment), "{input}: {e}")
                }
                (got, want) => panic!("{input}: got {got:?}, want {want:?}"),
            }
        }
    }
}
