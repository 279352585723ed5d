//! `ConsentRequest`: a consent under way, kept server-side between the
//! authorization request joch sends a user to and the callback that
//! brings the code back. Found by the hash of its `state` (never the state
//! itself), used once, and worthless after its deadline. The PKCE verifier
//! is sealed like a token.

use serde::{Deserialize, Serialize};

use super::UpstreamRef;
use crate::names::validate_name;
use crate::object::{Object, check_type};
use crate::{ObjectMeta, Time, ValidationError};

/// A consent under way for one call and one user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConsentRequest {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `ConsentRequest`.
    #[serde(default = "consent_kind")]
    pub kind: String,
    /// Name (from the state's hash), namespace (the call's).
    pub metadata: ObjectMeta,
    /// For whom, for which call, until when.
    pub spec: ConsentRequestSpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn consent_kind() -> String {
    ConsentRequest::KIND.to_owned()
}

/// `ConsentRequest.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConsentRequestSpec {
    /// The Endpoint or McpServer the token is for.
    pub upstream: UpstreamRef,
    /// The end user who consents (the call's `status.upstreamUser`).
    pub user: String,
    /// The call that waits for the consent (its Approval has its name).
    pub call: String,
    /// After this the callback is refused: the call's deadline applied.
    pub expires_at: Time,
    /// The vault key `sealed` is sealed under.
    pub key_id: String,
    /// The PKCE verifier and redirect URI, sealed.
    pub sealed: String,
}

impl ConsentRequest {
    /// The record name for a consent whose state hashes to `state_hash`.
    pub fn name_for(state_hash: &str) -> String {
        format!("consent-{}", &state_hash[..state_hash.len().min(40)])
    }
}

impl Object for ConsentRequest {
    const KIND: &'static str = "ConsentRequest";
    const PLURAL: &'static str = "consentrequests";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<ConsentRequest>(&self.api_version, &self.kind)?;
        validate_name("metadata.name", &self.metadata.name)
    }
}
