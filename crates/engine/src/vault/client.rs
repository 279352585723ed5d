//! Who joch is to an authorization server: a pre-registered `clientId`,
//! or the URL of the Client ID Metadata Document joch serves
//! (`{public URL}/oauth/client-metadata.json`), which the MCP
//! authorization specification lets a client use as its `client_id`
//! without registering: the server fetches the document and checks the
//! redirect URI against it.

use std::borrow::Cow;

use joch_core::CallError;
use joch_core::credential::OAuth2;
use serde_json::{Value, json};

use super::{Credentials, failed};

/// Where users' consents come back under `public_url`.
pub fn callback_url(public_url: &str) -> String {
    format!("{}/oauth/callback", public_url.trim_end_matches('/'))
}

/// Where the Client ID Metadata Document is under `public_url`: its
/// `client_id`.
fn document_url(public_url: &str) -> String {
    format!(
        "{}/oauth/client-metadata.json",
        public_url.trim_end_matches('/')
    )
}

impl Credentials {
    /// The same vault, knowing joch's public URL, so that `clientMetadata`
    /// upstreams can be given the document's URL as the client id.
    pub fn with_public_url(mut self, public_url: Option<String>) -> Self {
        self.public_url = public_url;
        self
    }

    /// `oauth2` with its client id filled in: as written, or the
    /// document's URL for `clientMetadata`.
    pub(super) fn client<'a>(&self, oauth2: &'a OAuth2) -> Result<Cow<'a, OAuth2>, CallError> {
        if !oauth2.client_metadata {
            return Ok(Cow::Borrowed(oauth2));
        }
        let public_url = self.public_url.as_deref().ok_or_else(|| {
            failed("clientMetadata needs joch's public URL (--public-url), where the document is served")
        })?;
        Ok(Cow::Owned(OAuth2 {
            client_id: document_url(public_url),
            ..oauth2.clone()
        }))
    }

    /// joch's Client ID Metadata Document, when joch knows its public URL:
    /// a public client (`none` authentication) using the authorization
    /// code and refresh token grants, redirecting to `/oauth/callback`.
    pub fn client_metadata(&self) -> Option<Value> {
        let public_url = self.public_url.as_deref()?;
        Some(json!({
            "client_id": document_url(public_url),
            "client_name": "joch",
            "client_uri": public_url,
            "redirect_uris": [callback_url(public_url)],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }))
    }
}
