//! Sensitive-data detectors: credentials, payment cards, e-mail addresses
//! and IBANs found in the strings, numbers and object keys of a call's
//! input or output, as facts a policy reads (`input.detected.<kind>`,
//! `output.detected.<kind>`) and spans a policy may redact
//! (`modify.redactDetected`).
//!
//! A detection names its kind and JSON path, never the matched value. Pure
//! functions over JSON; patterns compile once per process (built-ins) or
//! once per namespace snapshot (custom ones).

use std::collections::{HashMap, HashSet};
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
    /// Where: `input.body`, `output.content[0].text`; in a key, the
    /// member's path (its key written redacted) and `#key`:
    /// `output["[REDACTED:card]"]#key`.
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

    /// Every detection in the strings, numbers (their decimal text) and
    /// object keys of `value`, under `root` (`input`, `output`): one per
    /// kind per string, number or key, in document order, a member's key
    /// before its value. A key's detection is at its member's path plus
    /// `#key`; a key with a detection is written in every path redacted
    /// (as `redact` with `*` would write it), so no path holds a matched
    /// value.
    pub fn scan(&self, root: &str, value: &Value) -> Vec<Detection> {
        let mut found = Vec::new();
        self.walk(value, root.to_owned(), &mut |path, text| {
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
    /// strings, numbers and keys it was found in (0 when none), so `gte: 1`
    /// and CEL's `input.detected.card > 0` both read naturally.
    pub fn counts(&self, detections: &[Detection]) -> Map<String, Value> {
        self.kinds()
            .into_iter()
            .map(|kind| {
                let n = detections.iter().filter(|d| d.kind == kind).count();
                (kind.to_owned(), Value::from(n))
            })
            .collect()
    }

    /// Replaces each span of `kinds` (`*`: every kind) in the strings and
    /// keys of `value` with `[REDACTED:<kind>]`, leaving the rest of each
    /// string; a number with such a span becomes the string
    /// `[REDACTED:<kind>]` whole. A redacted key that another key of its
    /// object already has gets ` (2)`, ` (3)`… so no member is lost.
    /// Returns how many spans (numbers counting one) it replaced.
    pub fn redact(&self, value: &mut Value, kinds: &[String]) -> usize {
        let wanted = |kind: &str| kinds.iter().any(|k| k == "*" || k == kind);
        self.redact_in(value, &wanted)
    }

    fn redact_in(&self, value: &mut Value, wanted: &dyn Fn(&str) -> bool) -> usize {
        match value {
            Value::String(text) => match self.redact_text(text, wanted) {
                Some((redacted, spans)) => {
                    *text = redacted;
                    spans
                }
                None => 0,
            },
            Value::Number(number) => {
                let text = number.to_string();
                match self.wanted_spans(&text, wanted).first() {
                    Some((kind, _)) => {
                        *value = Value::String(redaction(kind));
                        1
                    }
                    None => 0,
                }
            }
            Value::Array(items) => items.iter_mut().map(|i| self.redact_in(i, wanted)).sum(),
            Value::Object(fields) => {
                let mut replaced: usize = fields
                    .values_mut()
                    .map(|item| self.redact_in(item, wanted))
                    .sum();
                if let Some(keys) = self.redacted_keys(fields, wanted) {
                    let members = std::mem::take(fields);
                    for ((_, item), (key, spans)) in members.into_iter().zip(keys) {
                        fields.insert(key, item);
                        replaced += spans;
                    }
                }
                replaced
            }
            Value::Null | Value::Bool(_) => 0,
        }
    }

    /// The spans of `text` of the `wanted` kinds, by start, longest first.
    fn wanted_spans(&self, text: &str, wanted: &dyn Fn(&str) -> bool) -> Vec<(&str, Range<usize>)> {
        let mut spans: Vec<(&str, Range<usize>)> = self
            .spans(text)
            .into_iter()
            .filter(|(kind, _)| wanted(kind))
            .collect();
        spans.sort_by_key(|(_, span)| (span.start, std::cmp::Reverse(span.end)));
        spans
    }

    /// `text` with its spans of the `wanted` kinds replaced, and how many
    /// it replaced; `None` when it has none.
    fn redact_text(&self, text: &str, wanted: &dyn Fn(&str) -> bool) -> Option<(String, usize)> {
        let spans = self.wanted_spans(text, wanted);
        if spans.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let (mut at, mut replaced) = (0, 0);
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
        Some((out, replaced))
    }

    /// The keys of `fields` in order, each with its spans of the `wanted`
    /// kinds redacted (and how many), made unique within the object;
    /// `None` when no key has such a span.
    fn redacted_keys(
        &self,
        fields: &Map<String, Value>,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Option<Vec<(String, usize)>> {
        let renamed: Vec<Option<(String, usize)>> = fields
            .keys()
            .map(|key| self.redact_text(key, wanted))
            .collect();
        if renamed.iter().all(Option::is_none) {
            return None;
        }
        let mut unique = UniqueKeys::default();
        for (key, renamed) in fields.keys().zip(&renamed) {
            if renamed.is_none() {
                unique.taken.insert(key.clone());
            }
        }
        let keys = fields
            .keys()
            .zip(renamed)
            .map(|(key, renamed)| match renamed {
                Some((text, spans)) => (unique.claim(text), spans),
                None => (key.clone(), 0),
            });
        Some(keys.collect())
    }

    /// Calls `visit` with the path and text of every string, number (its
    /// decimal text) and key with a detection (at `<member's path>#key`)
    /// in `value`.
    fn walk(&self, value: &Value, path: String, visit: &mut dyn FnMut(&str, &str)) {
        match value {
            Value::String(text) => visit(&path, text),
            Value::Number(number) => visit(&path, &number.to_string()),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.walk(item, format!("{path}[{i}]"), visit);
                }
            }
            Value::Object(fields) => {
                let shown = self.redacted_keys(fields, &|_| true);
                for (i, (key, item)) in fields.iter().enumerate() {
                    let (name, spans) = shown
                        .as_ref()
                        .map_or((key.as_str(), 0), |s| (s[i].0.as_str(), s[i].1));
                    let member = child(&path, name);
                    if spans > 0 {
                        visit(&format!("{member}#key"), key);
                    }
                    self.walk(item, member, visit);
                }
            }
            Value::Null | Value::Bool(_) => {}
        }
    }
}

/// The keys of one object being renamed: a redacted key another already
/// has becomes `key (2)`, `key (3)`…
#[derive(Default)]
struct UniqueKeys {
    taken: HashSet<String>,
    /// The last suffix tried per redacted key, so many equal keys cost one
    /// step each.
    next: HashMap<String, usize>,
}

impl UniqueKeys {
    fn claim(&mut self, key: String) -> String {
        let mut candidate = key.clone();
        let n = self.next.entry(key.clone()).or_insert(1);
        while self.taken.contains(&candidate) {
            *n += 1;
            candidate = format!("{key} ({n})");
        }
        self.taken.insert(candidate.clone());
        candidate
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
