//! The content checksum of a call: `sha256(JCS({tool, args}))`.
//!
//! JCS (RFC 8785) fixes key order, number formatting and string escaping, so
//! two semantically identical calls hash the same whatever their key order or
//! whitespace. It detects a model looping on itself, binds an output to the
//! call that produced it, and guards idempotency keys against reuse with
//! different arguments.

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

#[derive(Serialize)]
struct Canonical<'a> {
    tool: &'a str,
    args: &'a Map<String, Value>,
}

/// Lowercase hex sha256 of the RFC 8785 canonical form of `{tool, args}`.
pub fn checksum(tool: &str, args: &Map<String, Value>) -> String {
    // JCS only fails on values JSON cannot represent (non-finite floats), which
    // a `serde_json::Value` cannot hold.
    digest(&Canonical { tool, args }).expect("a serde_json value is always canonicalisable")
}

/// Lowercase hex sha256 of the RFC 8785 canonical form of any value, or
/// `None` if it has no JSON form (a non-finite float).
pub fn digest<T: Serialize + ?Sized>(value: &T) -> Option<String> {
    serde_jcs::to_vec(value)
        .ok()
        .map(|canonical| hex(&Sha256::digest(&canonical)))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::normalize::normalize_args;

    fn args(v: Value) -> Map<String, Value> {
        normalize_args(v).unwrap()
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a = args(json!({"subject": "hi", "meta": {"x": 1, "y": [1, 2]}, "n": 1.0}));
        let b = args(
            serde_json::from_str(r#"{ "n":1, "meta":{"y":[1,2],"x":1}, "subject":"hi" }"#).unwrap(),
        );
        assert_eq!(checksum("t", &a), checksum("t", &b));
    }

    #[test]
    fn json_string_input_hashes_like_the_object() {
        let object = json!({"b": 2, "a": "x"});
        let string = Value::String(r#"{"a":"x","b":2}"#.to_owned());
        assert_eq!(checksum("t", &args(object)), checksum("t", &args(string)));
    }

    #[test]
    fn tool_and_values_matter() {
        let a = args(json!({"a": 1}));
        assert_ne!(checksum("t1", &a), checksum("t2", &a));
        assert_ne!(checksum("t", &a), checksum("t", &args(json!({"a": 2}))));
        assert_ne!(checksum("t", &a), checksum("t", &args(json!({"a": "1"}))));
    }

    #[test]
    fn matches_a_hand_computed_digest() {
        // sha256 of the canonical text {"args":{"a":1},"tool":"t"}
        let expected = hex(&Sha256::digest(br#"{"args":{"a":1},"tool":"t"}"#));
        assert_eq!(checksum("t", &args(json!({"a": 1}))), expected);
        assert_eq!(expected.len(), 64);
    }
}
