//! Equality-based label selectors, as in Kubernetes: `app=web,tier!=db,canary,!legacy`.

use std::collections::BTreeMap;

use crate::ValidationError;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `k=v`, `k==v`, `k!=v`, `k` and `!k`, separated by commas.
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let mut requirements = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let requirement = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(key(k)?, value(v)?)
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(key(k)?, value(v)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::Absent(key(k)?)
            } else {
                Requirement::Exists(key(part)?)
            };
            requirements.push(requirement);
        }
        Ok(Self(requirements))
    }

    /// True when `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::Absent(k) => !labels.contains_key(k),
        })
    }

    /// True when the selector has no requirement and so matches everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn key(k: &str) -> Result<String, ValidationError> {
    let k = k.trim();
    let ok = !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
    if ok {
        Ok(k.to_owned())
    } else {
        Err(ValidationError::field(
            "labelSelector",
            format!("invalid label key {k:?}"),
        ))
    }
}

fn value(v: &str) -> Result<String, ValidationError> {
    let v = v.trim();
    let ok = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(v.to_owned())
    } else {
        Err(ValidationError::field(
            "labelSelector",
            format!("invalid label value {v:?}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_table() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web, tier=front", true),
            ("app=web,tier=back", false),
        ];
        for (text, want) in cases {
            assert_eq!(
                LabelSelector::parse(text).unwrap().matches(&l),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn bad_selectors_are_refused() {
        for text in ["a b=c", "=v", "k=v v", "k=(x)"] {
            assert!(LabelSelector::parse(text).is_err(), "{text:?}");
        }
    }
}
