//! The `Namespace` resource: a tenant's settings. A namespace exists
//! implicitly as soon as something is created in it; this resource only
//! carries settings that differ from the server's defaults.

use serde::{Deserialize, Serialize};

use crate::limits;
use crate::names::validate_namespace;
use crate::object::{Object, check_type};
use crate::{FieldError, ObjectMeta, ValidationError};

/// A namespace's settings. Its name is the namespace's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Namespace {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Namespace`.
    #[serde(default = "namespace_kind")]
    pub kind: String,
    /// Name (the namespace itself).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The settings.
    #[serde(default)]
    pub spec: NamespaceSpec,
}

impl Namespace {
    /// The settings of a namespace that has none stored: every default.
    pub fn named(namespace: &str) -> Self {
        Self {
            api_version: api_version(),
            kind: namespace_kind(),
            metadata: ObjectMeta {
                name: namespace.to_owned(),
                namespace: namespace.to_owned(),
                ..ObjectMeta::default()
            },
            spec: NamespaceSpec::default(),
        }
    }
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn namespace_kind() -> String {
    Namespace::KIND.to_owned()
}

/// `Namespace.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceSpec {
    /// How long idempotency keys hold in this namespace when a tool sets no
    /// window of its own (default: the server's, 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_window_seconds: Option<u64>,
    /// Where this namespace's tools may send calls (webhooks, Endpoints,
    /// MCP servers over HTTP); absent: anywhere but link-local and cloud
    /// metadata addresses, which are never allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbound: Option<Outbound>,
    /// Caps on how fast calls may come, each for the namespace, one agent
    /// or one tool; a call over any is denied (`rate_limited`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RateLimit>,
    /// Results of this namespace's tools larger than this many bytes go
    /// back as a handle to an artifact (default: no limit); a tool's own
    /// `maxInlineBytes` takes precedence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_inline_bytes: Option<u64>,
    /// How the model-facing outputs of this namespace's untrusted tools
    /// are framed when a tool sets nothing itself (default `none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_envelope: Option<crate::envelope::OutputEnvelope>,
    /// Custom sensitive-data detectors, beside the built-in ones, for
    /// policies that read `input.detected.<name>` or `output.detected.<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detectors: Vec<crate::detect::CustomDetector>,
    /// A call's `callerId` names the end user whose upstream tokens
    /// (`oauth2` `perUser`) it uses (default false: the authenticated
    /// principal does, and a call whose `callerId` names someone else is
    /// refused). Set it where a trusted front end authenticates its users
    /// and calls joch with one token for all of them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trust_caller_id: bool,
}

/// One entry of `spec.rateLimits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimit {
    /// Names the limit in the decisions it makes.
    pub name: String,
    /// `namespace` (one budget for all calls), `agent` (one per agent) or
    /// `tool` (one per tool).
    pub per: RateScope,
    /// Only this agent's or tool's calls, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<String>,
    /// Sustained calls per minute (a rate limit)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_minute: Option<u32>,
    /// ...or per day (a quota, replenished continuously): exactly one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls_per_day: Option<u32>,
    /// Calls allowed back to back before the sustained rate applies
    /// (default: the whole minute's or day's allowance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// What a rate limit counts separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateScope {
    /// Every call of the namespace together.
    Namespace,
    /// Each agent's calls.
    Agent,
    /// Each tool's calls.
    Tool,
}

/// `spec.outbound`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Outbound {
    /// Host names or addresses, exact (`api.zendesk.com`, `127.0.0.1`) or a
    /// subdomain wildcard (`*.example.com`).
    pub allowed_hosts: Vec<String>,
}

impl Outbound {
    /// Whether a call may go to `url`; `Err` says why not.
    pub fn allows(&self, url: &str) -> Result<(), String> {
        let host = url
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or(url)
            .split(['/', '?', '#'])
            .next()
            .unwrap_or_default();
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        let host = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.split(':').next().unwrap_or_default(),
        }
        .to_ascii_lowercase();
        let allowed = self.allowed_hosts.iter().any(|pattern| {
            let pattern = pattern.to_ascii_lowercase();
            match pattern.strip_prefix("*.") {
                Some(domain) => host.ends_with(&format!(".{domain}")),
                None => host == pattern,
            }
        });
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "host {host:?} is not in the namespace's outbound.allowedHosts"
            ))
        }
    }
}

impl RateLimit {
    /// The allowance and the period it is spread over.
    pub fn rate(&self) -> Option<(u32, std::time::Duration)> {
        match (self.calls_per_minute, self.calls_per_day) {
            (Some(n), _) => Some((n, std::time::Duration::from_secs(60))),
            (None, Some(n)) => Some((n, std::time::Duration::from_secs(86_400))),
            (None, None) => None,
        }
    }
}

impl Object for Namespace {
    const KIND: &'static str = "Namespace";
    const PLURAL: &'static str = "namespaces";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Namespace>(&self.api_version, &self.kind)?;
        validate_namespace(&self.metadata.name)?;
        if let Err(e) = crate::detect::Detectors::new(&self.spec.detectors) {
            return Err(ValidationError::field("spec.detectors", e.to_string()));
        }
        let spec = &self.spec;
        let mut errors = limits::problems(&[
            (
                "spec.idempotencyWindowSeconds",
                limits::IDEMPOTENCY_WINDOW_SECONDS,
                spec.idempotency_window_seconds,
            ),
            (
                "spec.maxInlineBytes",
                limits::INLINE_BYTES,
                spec.max_inline_bytes,
            ),
        ]);
        for (i, limit) in spec.rate_limits.iter().enumerate() {
            errors.extend(limit.problems(&format!("spec.rateLimits[{i}]")));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationError(errors))
        }
    }
}

impl RateLimit {
    /// Field errors, under `at`, for a limit without exactly one rate, or
    /// with a number out of its range.
    fn problems(&self, at: &str) -> Vec<FieldError> {
        if self.calls_per_minute.is_some() == self.calls_per_day.is_some() {
            let message = "give exactly one of callsPerMinute and callsPerDay";
            return vec![FieldError {
                field: at.to_owned(),
                message: message.to_owned(),
            }];
        }
        let number = |n: Option<u32>| n.map(u64::from);
        limits::problems(&[
            (
                &format!("{at}.callsPerMinute"),
                limits::CALLS_PER_MINUTE,
                number(self.calls_per_minute),
            ),
            (
                &format!("{at}.callsPerDay"),
                limits::CALLS_PER_DAY,
                number(self.calls_per_day),
            ),
            (&format!("{at}.burst"), limits::BURST, number(self.burst)),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::Outbound;

    #[test]
    fn hosts_match_exactly_or_by_subdomain_wildcard() {
        let outbound = Outbound {
            allowed_hosts: vec![
                "api.zendesk.com".into(),
                "*.example.com".into(),
                "127.0.0.1".into(),
            ],
        };
        for ok in [
            "https://api.zendesk.com/v2/tickets",
            "https://API.Zendesk.com:443/x",
            "https://hooks.example.com/a?b=c",
            "http://127.0.0.1:8080/echo",
            "https://user@api.zendesk.com/",
        ] {
            assert!(outbound.allows(ok).is_ok(), "{ok}");
        }
        for refused in [
            "https://zendesk.com/",
            "https://example.com/",
            "https://evil.com/?next=api.zendesk.com",
            "https://api.zendesk.com.evil.com/",
            "http://[::1]:8080/",
        ] {
            assert!(outbound.allows(refused).is_err(), "{refused}");
        }
    }
}
