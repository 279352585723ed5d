//! Which names joch accepts for namespaces, resources and call ids.
//!
//! Tool names may contain dots (`zendesk.create_ticket`) and call ids come
//! verbatim from model providers (`call_abc123`, `toolu_01A...`), so the rule
//! is wider than Kubernetes' DNS labels, but still safe in a URL path segment,
//! a log line and a SQL parameter.

use crate::ValidationError;

/// Longest accepted name, in bytes.
pub const MAX_NAME_LEN: usize = 253;

/// Checks a resource or call name: 1 to 253 characters of `[A-Za-z0-9._:-]`,
/// starting and ending with a letter or digit.
pub fn validate_name(field: &str, name: &str) -> Result<(), ValidationError> {
    let problem = if name.is_empty() {
        Some("must not be empty".to_owned())
    } else if name.len() > MAX_NAME_LEN {
        Some(format!("must be at most {MAX_NAME_LEN} characters"))
    } else if let Some(c) = name.chars().find(|c| !is_name_char(*c)) {
        Some(format!(
            "must contain only letters, digits, '.', '_', ':' and '-', found {c:?}"
        ))
    } else if !starts_and_ends_alphanumeric(name) {
        Some("must start and end with a letter or digit".to_owned())
    } else {
        None
    };
    match problem {
        Some(message) => Err(ValidationError::field(field, message)),
        None => Ok(()),
    }
}

/// Checks a namespace name: like a DNS label, 1 to 63 characters of
/// `[a-z0-9-]`, starting and ending with a letter or digit.
pub fn validate_namespace(namespace: &str) -> Result<(), ValidationError> {
    let ok = !namespace.is_empty()
        && namespace.len() <= 63
        && namespace
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && starts_and_ends_alphanumeric(namespace);
    if ok {
        Ok(())
    } else {
        Err(ValidationError::field(
            "metadata.namespace",
            format!(
                "{namespace:?} is not a valid namespace: 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
            ),
        ))
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

fn starts_and_ends_alphanumeric(name: &str) -> bool {
    let first = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let last = name
        .chars()
        .last()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    first && last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let cases = [
            ("zendesk.create_ticket", true),
            ("call_abc123", true),
            ("toolu_01ABCdef", true),
            ("0f8fad5b-d9cb-469f-a165-70867728950e", true),
            ("", false),
            ("has space", false),
            ("slash/in", false),
            (".leading", false),
            ("trailing-", false),
            ("ünïcode", false),
        ];
        for (name, ok) in cases {
            assert_eq!(validate_name("metadata.name", name).is_ok(), ok, "{name:?}");
        }
        assert!(validate_name("n", &"a".repeat(253)).is_ok());
        assert!(validate_name("n", &"a".repeat(254)).is_err());
    }

    #[test]
    fn namespaces() {
        for (ns, ok) in [
            ("default", true),
            ("support-platform", true),
            ("Upper", false),
            ("a.b", false),
            ("-a", false),
            ("", false),
        ] {
            assert_eq!(validate_namespace(ns).is_ok(), ok, "{ns:?}");
        }
    }
}
