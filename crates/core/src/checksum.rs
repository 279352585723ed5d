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
    // a `serde_json::Value` cannot hold; were it to, serde_json's own form
    // is hashed rather than the call refused or joch stopped.
    let canonical = Canonical { tool, args };
    digest(&canonical).unwrap_or_else(|| {
        hex(&Sha256::digest(
            serde_json::to_vec(&canonical).unwrap_or_default(),
        ))
    })
}

/// What a call runs as, for [`run_digest`].
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Run<'a> {
    tool: &'a str,
    tool_version: Option<&'a str>,
    args: &'a Map<String, Value>,
    principal: Option<&'a crate::PrincipalRef>,
}

/// The digest of a call as it runs (`status.runDigest`, an Approval's
/// `spec.binding.digest`): lowercase hex sha256 of the RFC 8785 form of
/// `{tool, toolVersion, args, principal}`. Unlike [`checksum`], which
/// keys idempotency on what the caller sent, it names which definition of
/// the tool receives which arguments on whose behalf.
pub fn run_digest(
    tool: &str,
    tool_version: Option<&str>,
    args: &Map<String, Value>,
    principal: Option<&crate::PrincipalRef>,
) -> String {
    let run = Run {
        tool,
        tool_version,
        args,
        principal,
    };
    digest(&run).unwrap_or_else(|| {
        hex(&Sha256::digest(
            serde_json::to_vec(&run).unwrap_or_default(),
        ))
    })
}

/// Lowercase hex sha256 of the RFC 8785 canonical form of any value, or
/// `None` if it has no JSON form (a non-finite float).
pub fn digest<T: Serialize + ?Sized>(value: &T) -> Option<String> {
    serde_jcs::to_vec(value)
        .ok()
        .map(|canonical| hex(&Sha256::digest(&canonical)))
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
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

    /// A client's arguments hold any number JSON can: the extremes of
    /// every integer width and of doubles canonicalise, not panic.
    #[test]
    fn extreme_numbers_have_a_checksum() {
        let args = json!({
            "u": u64::MAX, "i": i64::MIN, "big": 1.7976931348623157e308,
            "tiny": 5e-324, "neg_zero": -0.0, "safe": 9007199254740993_u64,
        });
        let args = args.as_object().unwrap();
        assert_eq!(checksum("t", args).len(), 64);
        assert_ne!(checksum("t", args), checksum("u", args));
    }

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
    }

    #[test]
    fn a_run_digest_names_tool_version_arguments_and_principal() {
        let a = args(json!({"amount": 10}));
        let alice = crate::PrincipalRef {
            kind: crate::PrincipalKind::Token,
            name: "alice".to_owned(),
            role: crate::token::Role::Agent,
        };
        let base = run_digest("pay", Some("1"), &a, Some(&alice));
        assert_eq!(base, run_digest("pay", Some("1"), &a, Some(&alice)));
        assert_ne!(base, run_digest("pay", Some("2"), &a, Some(&alice)));
        assert_ne!(
            base,
            run_digest("pay", Some("1"), &args(json!({"amount": 11})), Some(&alice))
        );
        assert_ne!(base, run_digest("pay", Some("1"), &a, None));
        assert_ne!(base, run_digest("payx", Some("1"), &a, Some(&alice)));
        assert_eq!(base.len(), 64);
    }
}

/// Properties over generated arguments: the checksum depends on what the
/// arguments mean, never on how their JSON text happens to be written.
#[cfg(test)]
mod properties {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::checksum;
    use crate::normalize::normalize_args;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e12f64..1e12).prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn object() -> impl Strategy<Value = Map<String, Value>> {
        prop::collection::btree_map("[a-z]{1,6}", json(), 0..6)
            .prop_map(|m| m.into_iter().collect())
    }

    /// JSON text of `value` with every object's keys in the order `rotate`
    /// picks and spaces between tokens: what another client might send.
    fn rewrite(value: &Value, rotate: usize) -> String {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                if !entries.is_empty() {
                    let by = rotate % entries.len();
                    entries.rotate_left(by);
                    entries.reverse();
                }
                let fields: Vec<String> = entries
                    .into_iter()
                    .map(|(k, v)| {
                        format!("{} : {}", Value::from(k.as_str()), rewrite(v, rotate + 1))
                    })
                    .collect();
                format!("{{ {} }}", fields.join(" ,\n "))
            }
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(|v| rewrite(v, rotate + 1)).collect();
                format!("[ {} ]", items.join(" , "))
            }
            other => other.to_string(),
        }
    }

    proptest! {
        #[test]
        fn key_order_and_whitespace_never_change_it(args in object(), rotate in 0usize..7) {
            let text = rewrite(&Value::Object(args.clone()), rotate);
            let parsed = normalize_args(serde_json::from_str(&text).unwrap()).unwrap();
            prop_assert_eq!(checksum("t", &args), checksum("t", &parsed));
        }

        #[test]
        fn a_json_string_hashes_like_its_object(args in object()) {
            let as_string = Value::String(Value::Object(args.clone()).to_string());
            let normalized = normalize_args(as_string).unwrap();
            prop_assert_eq!(checksum("t", &args), checksum("t", &normalized));
        }

        #[test]
        fn it_is_64_hex_digits_and_names_the_tool(args in object(), tool in "[a-z.]{1,12}") {
            let sum = checksum(&tool, &args);
            prop_assert_eq!(sum.len(), 64);
            prop_assert!(sum.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            prop_assert_ne!(sum, checksum(&format!("{tool}x"), &args));
        }

        #[test]
        fn an_added_argument_changes_it(args in object(), extra in json()) {
            let mut more = args.clone();
            let key = "zz-added".to_owned();
            prop_assume!(!more.contains_key(&key));
            more.insert(key, extra);
            prop_assert_ne!(checksum("t", &args), checksum("t", &more));
        }

        #[test]
        fn normalising_never_panics(input in json()) {
            let _ = normalize_args(input);
        }
    }
}
