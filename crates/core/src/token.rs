//! `ApiToken`: a bearer token bound to a namespace and a role. Only the
//! token's sha256 is stored; the token itself is shown once, at creation.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::names::validate_name;
use crate::object::{Object, check_type};
use crate::{ObjectMeta, ValidationError};

/// What a token may do in its namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Call tools and read calls, events and tools (gateway, MCP, hooks).
    Agent,
    /// What an agent may, and decide approvals.
    Approver,
    /// Everything in the namespace: tools, policies, endpoints, MCP
    /// servers, budgets, tokens, settings, audit.
    Admin,
}

impl Role {
    /// `agent`, `approver`, `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }
}

/// A bearer token of a namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiToken {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `ApiToken`.
    #[serde(default = "token_kind")]
    pub kind: String,
    /// Name (who holds it: recorded as the approver of its decisions), namespace.
    pub metadata: ObjectMeta,
    /// Its role and hash.
    pub spec: ApiTokenSpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn token_kind() -> String {
    ApiToken::KIND.to_owned()
}

/// `ApiToken.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiTokenSpec {
    /// What it may do.
    pub role: Role,
    /// `sha256` of the token, lowercase hex.
    pub hash: String,
    /// The tools that exist for its holder; absent: every tool of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<crate::principal::ToolSelector>,
}

/// The stored form of a token: its sha256, lowercase hex.
pub fn hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Object for ApiToken {
    const KIND: &'static str = "ApiToken";
    const PLURAL: &'static str = "tokens";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<ApiToken>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)?;
        if self.spec.hash.len() != 64 {
            return Err(ValidationError::field("spec.hash", "must be a sha256, hex"));
        }
        if let Some(labels) = self.spec.tools.as_ref().and_then(|t| t.labels.as_deref()) {
            crate::LabelSelector::parse(labels)
                .map_err(|e| ValidationError::field("spec.tools.labels", e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_stored_as_their_sha256() {
        assert_eq!(
            super::hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
