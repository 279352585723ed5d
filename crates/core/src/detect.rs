//! Sensitive-data detectors: credentials, payment cards, e-mail addresses
//! and IBANs found in the strings of a call's input or output, as facts a
//! policy reads (`input.detected.<kind>`, `output.detected.<kind>`) and
//! spans a policy may redact (`modify.redactDetected`).
//!
//! A detection names its kind and JSON path, never the matched value. Pure
//! functions over JSON; patterns compile once per process (built-ins) or
//! once per namespace snapshot (custom ones).

use std::ops::Range;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a redacted span becomes: `[REDACTED:<kind>]`.
pub fn redaction(kind: &str) -> String {
    format!("[REDACTED:{kind}]")
}

/// `Namespace.spec.detectors[]`: a custom detector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CustomDetector {
    /// The kind it reports (`[a-z][a-z0-9_]*`, not a built-in's).
    pub name: String,
    /// A regular expression (Rust `regex` syntax); every match is a detection.
    pub pattern: String,
}

/// One finding, as recorded on the call: a kind at a JSON path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Detection {
    /// The detector's kind (`card`, `aws_access_key`, a custom name).
    pub kind: String,
    /// Where: `input.body`, `output.content[0].text`.
    pub path: String,
}

/// Why a custom detector is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectorError {
    /// The name is not `[a-z][a-z0-9_]*`, or is a built-in's.
    #[error("detector name {0:?} must be lowercase letters, digits and _, and not a built-in kind")]
    Name(String),
    /// The pattern does not compile.
    #[error("detector {name:?}: invalid pattern: {message}")]
    Pattern {
        /// The detector.
        name: String,
        /// The regex crate's message.
        message: String,
    },
}

/// One built-in kind: a pattern, and a check a match must pass.
struct Builtin {
    kind: &'static str,
    pattern: &'static str,
    check: fn(&str) -> bool,
}

/// The built-in kinds, in the order facts list them.
const BUILTINS: &[Builtin] = &[
    Builtin {
        kind: "aws_access_key",
        pattern: r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b",
        check: any,
    },
    Builtin {
        kind: "github_token",
        pattern: r"\b(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82})\b",
        check: any,
    },
    Builtin {
        kind: "gitlab_token",
        pattern: r"\bglpat-[A-Za-z0-9_-]{20}(?:[A-Za-z0-9_.-]{0,40})\b",
        check: any,
    },
    Builtin {
        kind: "slack_token",
        pattern: r"\bxox[abposr]-[0-9]{6,}-[A-Za-z0-9-]{6,}\b|https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{20,}",
        check: any,
    },
    Builtin {
        kind: "private_key",
        pattern: r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?:(?s:.*?)-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|(?s:.*))",
        check: any,
    },
    Builtin {
        kind: "jwt",
        pattern: r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}",
        check: any,
    },
    Builtin {
        kind: "card",
        pattern: r"\b[2-6](?:[ -]?[0-9]){12,18}\b",
        check: luhn,
    },
    Builtin {
        kind: "email",
        pattern: r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b",
        check: any,
    },
    Builtin {
        kind: "iban",
        pattern: r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b",
        check: iban,
    },
];

fn any(_: &str) -> bool {
    true
}

/// The Luhn checksum of the digits of `text` holds.
fn luhn(text: &str) -> bool {
    let digits: Vec<u32> = text.chars().filter_map(|c| c.to_digit(10)).collect();
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| match (i % 2 == 1, d * 2) {
            (true, doubled) if doubled > 9 => doubled - 9,
            (true, doubled) => doubled,
            (false, _) => d,
        })
        .sum();
    (13..=19).contains(&digits.len()) && sum % 10 == 0
}

/// ISO 13616: the country's length, and the mod-97 check of the rearranged
/// number.
fn iban(text: &str) -> bool {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let expected = IBAN_LENGTHS
        .iter()
        .find(|(country, _)| compact.starts_with(country))
        .map(|(_, length)| *length);
    if expected != Some(compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder = 0u32;
    for c in tail.chars().chain(head.chars()) {
        let Some(value) = c.to_digit(36) else {
            return false;
        };
        let step = if value < 10 { 10 } else { 100 };
        remainder = (remainder * step + value) % 97;
    }
    remainder == 1
}

/// IBAN lengths of the countries most calls will meet (SEPA and a few more).
const IBAN_LENGTHS: &[(&str, usize)] = &[
    ("AD", 24),
    ("AE", 23),
    ("AT", 20),
    ("BE", 16),
    ("BG", 22),
    ("BH", 22),
    ("BR", 29),
    ("CH", 21),
    ("CY", 28),
    ("CZ", 24),
    ("DE", 22),
    ("DK", 18),
    ("EE", 20),
    ("ES", 24),
    ("FI", 18),
    ("FR", 27),
    ("GB", 22),
    ("GI", 23),
    ("GR", 27),
    ("HR", 21),
    ("HU", 28),
    ("IE", 22),
    ("IL", 23),
    ("IS", 26),
    ("IT", 27),
    ("LI", 21),
    ("LT", 20),
    ("LU", 20),
    ("LV", 21),
    ("MC", 27),
    ("MT", 31),
    ("NL", 18),
    ("NO", 15),
    ("PL", 28),
    ("PT", 25),
    ("RO", 24),
    ("SA", 24),
    ("SE", 24),
    ("SI", 19),
    ("SK", 24),
    ("SM", 27),
    ("TR", 26),
];

/// The built-in patterns, compiled once.
static COMPILED: LazyLock<(RegexSet, Vec<Regex>)> = LazyLock::new(|| {
    let patterns = BUILTINS.iter().map(|b| b.pattern);
    let set = RegexSet::new(patterns.clone()).expect("built-in patterns are valid");
    let each = patterns
        .map(|p| Regex::new(p).expect("built-in patterns are valid"))
        .collect();
    (set, each)
});

/// The built-in kinds' names.
pub fn builtin_kinds() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.kind)
}

/// The built-in detectors and a namespace's custom ones, ready to scan.
#[derive(Debug, Clone, Default)]
pub struct Detectors {
    custom: Vec<(String, Regex)>,
}

impl Detectors {
    /// The built-ins plus `custom`, each compiled; refuses bad names and patterns.
    pub fn new(custom: &[CustomDetector]) -> Result<Detectors, DetectorError> {
        let mut compiled = Vec::with_capacity(custom.len());
        for detector in custom {
            let name = &detector.name;
            let well_formed = name.starts_with(|c: char| c.is_ascii_lowercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !well_formed || builtin_kinds().any(|k| k == name) {
                return Err(DetectorError::Name(name.clone()));
            }
            let regex = Regex::new(&detector.pattern).map_err(|e| DetectorError::Pattern {
                name: name.clone(),
                message: e.to_string(),
            })?;
            compiled.push((name.clone(), regex));
        }
        Ok(Detectors { custom: compiled })
    }

    /// Every kind these detectors report: built-ins, then custom ones.
    pub fn kinds(&self) -> Vec<&str> {
        let mut kinds: Vec<&str> = builtin_kinds().collect();
        kinds.extend(self.custom.iter().map(|(name, _)| name.as_str()));
        kinds
    }

    /// The spans of `text` each kind matches, checks passed, in kind order.
    pub fn spans<'s>(&'s self, text: &str) -> Vec<(&'s str, Range<usize>)> {
        let (set, each) = &*COMPILED;
        let mut found = Vec::new();
        for index in set.matches(text).iter() {
            let builtin = &BUILTINS[index];
            found.extend(
                each[index]
                    .find_iter(text)
                    .filter(|m| (builtin.check)(m.as_str()))
                    .map(|m| (builtin.kind, m.range())),
            );
        }
        for (name, regex) in &self.custom {
            found.extend(
                regex
                    .find_iter(text)
                    .filter(|m| !m.is_empty())
                    .map(|m| (name.as_str(), m.range())),
            );
        }
        found
    }

    /// Every detection in the strings of `value`, under `root` (`input`,
    /// `output`): one per kind per string, in document order.
    pub fn scan(&self, root: &str, value: &Value) -> Vec<Detection> {
        let mut found = Vec::new();
        walk(value, root.to_owned(), &mut |path, text| {
            let mut kinds: Vec<&str> = self.spans(text).into_iter().map(|(k, _)| k).collect();
            kinds.dedup();
            found.extend(kinds.into_iter().map(|kind| Detection {
                kind: kind.to_owned(),
                path: path.to_owned(),
            }));
        });
        found
    }

    /// The facts of `detections`: each kind this detects, with how many
    /// strings it was found in (0 when none), so `gte: 1` and CEL's
    /// `input.detected.card > 0` both read naturally.
    pub fn counts(&self, detections: &[Detection]) -> Map<String, Value> {
        self.kinds()
            .into_iter()
            .map(|kind| {
                let n = detections.iter().filter(|d| d.kind == kind).count();
                (kind.to_owned(), Value::from(n))
            })
            .collect()
    }

    /// Replaces each span of `kinds` (`*`: every kind) in the strings of
    /// `value` with `[REDACTED:<kind>]`, leaving the rest of each string.
    /// Returns how many spans it replaced.
    pub fn redact(&self, value: &mut Value, kinds: &[String]) -> usize {
        let wanted = |kind: &str| kinds.iter().any(|k| k == "*" || k == kind);
        let mut replaced = 0;
        walk_mut(value, &mut |text| {
            let mut spans: Vec<(&str, Range<usize>)> = self
                .spans(text)
                .into_iter()
                .filter(|(kind, _)| wanted(kind))
                .collect();
            if spans.is_empty() {
                return;
            }
            spans.sort_by_key(|(_, span)| (span.start, std::cmp::Reverse(span.end)));
            let mut out = String::with_capacity(text.len());
            let mut at = 0;
            for (kind, span) in spans {
                if span.start < at {
                    continue; // inside a span already redacted
                }
                out.push_str(&text[at..span.start]);
                out.push_str(&redaction(kind));
                at = span.end;
                replaced += 1;
            }
            out.push_str(&text[at..]);
            *text = out;
        });
        replaced
    }
}

/// Calls `visit` with the path and text of every string in `value`.
fn walk(value: &Value, path: String, visit: &mut dyn FnMut(&str, &str)) {
    match value {
        Value::String(text) => visit(&path, text),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, format!("{path}[{i}]"), visit);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                walk(item, child(&path, key), visit);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn walk_mut(value: &mut Value, visit: &mut dyn FnMut(&mut String)) {
    match value {
        Value::String(text) => visit(text),
        Value::Array(items) => items.iter_mut().for_each(|item| walk_mut(item, visit)),
        Value::Object(fields) => fields.values_mut().for_each(|item| walk_mut(item, visit)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `path.key`, or `path["odd key"]` for a key that is not an identifier.
fn child(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match plain {
        true => format!("{path}.{key}"),
        false => format!("{path}[{}]", Value::from(key)),
    }
}

/// True when `text` (a policy's spec, as JSON) reads detections: the
/// engine runs detectors only for namespaces where this holds.
pub fn reads_detections(text: &str) -> bool {
    text.contains("detected") || text.contains("redactDetected")
}

#[cfg(test)]
mod tests;
