//! A user's consent, from the authorization request joch sends them to,
//! to the callback that brings the code back (RFC 6749 §4.1, PKCE per
//! RFC 7636 with S256).
//!
//! Everything the callback needs stays server-side: a `ConsentRequest`
//! record named by the hash of the `state` (the state itself is only in
//! the URL), holding the call, the user, the upstream, a deadline, and the
//! PKCE verifier sealed like a token. The record is deleted conditionally
//! before the code is exchanged, so a state works once, on one replica; a
//! state joch did not issue, or one used or expired, stores nothing.

use aes_gcm::aead::OsRng;
use aes_gcm::aead::rand_core::RngCore;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use joch_core::credential::{
    ConsentRequest, ConsentRequestSpec, Credential, OAuth2, TokenGrant, UpstreamRef,
};
use joch_core::{CallError, Endpoint, McpServer, ObjectMeta, Time};
use joch_store::{Durability, ListQuery, StoreError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Credentials, aad, failed};

/// What a `ConsentRequest` seals.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Pkce {
    verifier: String,
    redirect_uri: String,
    /// The discovered issuer the authorization response's `iss` must be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    issuer: Option<String>,
    /// Its metadata promised `iss` in every authorization response.
    #[serde(default)]
    iss_required: bool,
}

/// RFC 9207: an authorization response's `iss` is the issuer joch sent the
/// user to, compared as strings (no URL normalisation); absent only when
/// that server does not say it sends one. A mismatch means the response
/// may come from another server (a mix-up attack): its code is not used.
fn check_iss(pkce: &Pkce, iss: Option<&str>) -> Result<(), String> {
    let Some(issuer) = &pkce.issuer else {
        return Ok(());
    };
    match iss {
        Some(iss) if iss == issuer => Ok(()),
        Some(iss) => Err(format!(
            "the authorization response came from issuer {iss:?}, not {issuer:?}, where joch sent the user (RFC 9207): its code was not used"
        )),
        None if pkce.iss_required => Err(format!(
            "the authorization response carried no iss, which {issuer:?} says it always sends (RFC 9207): its code was not used"
        )),
        None => Ok(()),
    }
}

/// A consent the callback completed: the token is in the vault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsentGiven {
    /// The call's namespace.
    pub namespace: String,
    /// The call that waited (its Approval has the same name).
    pub call: String,
    /// The user who consented.
    pub user: String,
    /// Other calls of the user that waited for a consent to the same
    /// upstream: the token serves them too (their consents are withdrawn).
    pub also: Vec<String>,
}

/// Why a callback's code gave no token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsentFailed {
    /// joch issued no such state, or it was used or is past its deadline:
    /// nothing changed.
    Unknown(String),
    /// The consent could not be read or taken (the store failed); the
    /// state may work again.
    Unavailable(String),
    /// The state was taken, and the code gave no token (the authorization
    /// server refused it): the waiting call will not get one from it.
    Refused {
        /// What happened, without the code.
        message: String,
        /// The call that waited for it.
        given: ConsentGiven,
    },
}

/// 32 random bytes, base64url: a state, or a PKCE verifier (43 characters).
fn random() -> String {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// `value` percent-encoded for a query (RFC 3986 unreserved kept).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The record a `state` names: `<namespace>.<random>`, hashed.
fn record_of(state: &str) -> Option<(&str, String)> {
    let (namespace, _) = state.split_once('.')?;
    joch_core::names::validate_namespace(namespace).ok()?;
    Some((namespace, record_name(state)))
}

/// The name of the record a state is kept under: its hash, never the state.
fn record_name(state: &str) -> String {
    ConsentRequest::name_for(&joch_core::token::hash(state))
}

/// The consent an upstream needs, as the call's admission asks for it.
pub struct ConsentAsk<'a> {
    /// The call's namespace.
    pub namespace: &'a str,
    /// The call that will wait.
    pub call: &'a str,
    /// The end user.
    pub user: &'a str,
    /// The Endpoint or McpServer.
    pub upstream: &'a UpstreamRef,
    /// Its URL (where discovery starts).
    pub url: &'a str,
    /// Its `oauth2`.
    pub oauth2: &'a OAuth2,
    /// joch's `/oauth/callback`.
    pub redirect_uri: &'a str,
    /// When the consent stops being taken (the call's deadline).
    pub expires_at: Time,
}

impl Credentials {
    /// Starts a consent: keeps its state and PKCE verifier server-side and
    /// answers the URL of the authorization request to send the user to.
    pub async fn begin_consent(&self, ask: ConsentAsk<'_>) -> Result<String, CallError> {
        let keys = self
            .keys
            .as_ref()
            .ok_or_else(|| failed("no vault key is configured: per-user tokens need one"))?;
        let oauth2 = &*self.client(ask.oauth2)?;
        let target = self
            .endpoint
            .authorization_target(oauth2, ask.url)
            .await
            .map_err(failed)?;
        let state = format!("{}.{}", ask.namespace, random());
        let verifier = random();
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let name = record_name(&state);
        let pkce = Pkce {
            verifier,
            redirect_uri: ask.redirect_uri.to_owned(),
            issuer: target.issuer.clone(),
            iss_required: target.iss_required,
        };
        let plain = serde_json::to_vec(&pkce).expect("strings serialise");
        let mut record = ConsentRequest {
            api_version: joch_core::API_VERSION.to_owned(),
            kind: <ConsentRequest as joch_core::Object>::KIND.to_owned(),
            metadata: ObjectMeta {
                name: name.clone(),
                namespace: ask.namespace.to_owned(),
                creation_timestamp: Some(Time(Utc::now())),
                ..ObjectMeta::default()
            },
            spec: ConsentRequestSpec {
                upstream: ask.upstream.clone(),
                user: ask.user.to_owned(),
                call: ask.call.to_owned(),
                expires_at: ask.expires_at,
                key_id: keys.current_id().to_owned(),
                sealed: keys.seal(&plain, &aad(ask.namespace, &name)),
            },
        };
        self.store
            .create_object(&mut record, Durability::Sync)
            .await
            .map_err(|e| failed(format!("the consent cannot be kept: {e}")))?;
        let mut query = vec![
            ("response_type", "code".to_owned()),
            ("client_id", oauth2.client_id.clone()),
            ("redirect_uri", ask.redirect_uri.to_owned()),
            ("state", state),
            ("code_challenge", challenge),
            ("code_challenge_method", "S256".to_owned()),
        ];
        // The scopes configured, else those the upstream asks for.
        let scopes = match oauth2.scopes.is_empty() {
            true => &target.scopes,
            false => &oauth2.scopes,
        };
        if !scopes.is_empty() {
            query.push(("scope", scopes.join(" ")));
        }
        if let Some(resource) = target.resource {
            query.push(("resource", resource));
        }
        let query: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        let separator = if target.url.contains('?') { '&' } else { '?' };
        Ok(format!("{}{separator}{}", target.url, query.join("&")))
    }

    /// Takes the `ConsentRequest` `state` names, once: it is deleted
    /// before anything else. `None`: joch issued no such state, or it was
    /// used already.
    async fn take(&self, state: &str) -> Result<Option<ConsentRequest>, String> {
        let Some((namespace, name)) = record_of(state) else {
            return Ok(None);
        };
        let record = match self
            .store
            .get_object::<ConsentRequest>(namespace, &name)
            .await
        {
            Ok(record) => record,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(format!("the consent cannot be read: {e}")),
        };
        let version = Some(record.metadata.resource_version.as_str());
        match self
            .store
            .delete_object::<ConsentRequest>(namespace, &name, version)
            .await
        {
            Ok(_) => Ok(Some(record)),
            Err(StoreError::NotFound { .. } | StoreError::Conflict { .. }) => Ok(None),
            Err(e) => Err(format!("the consent cannot be taken: {e}")),
        }
    }

    /// Completes the consent `state` names with the authorization server's
    /// `code`: exchanges it (with the PKCE verifier) for the user's token
    /// and keeps it in the vault. Refused, storing nothing, for a state
    /// joch did not issue, used, or past its deadline; refused, the state
    /// spent, when the response's `iss` is not the issuer's (RFC 9207).
    pub async fn complete_consent(
        &self,
        state: &str,
        code: &str,
        iss: Option<&str>,
    ) -> Result<ConsentGiven, ConsentFailed> {
        let unknown = || {
            ConsentFailed::Unknown("this consent link is unknown, used already, or expired: call the tool again for a new one".to_owned())
        };
        let keys = self
            .keys
            .as_ref()
            .ok_or_else(|| ConsentFailed::Unavailable("no vault key is configured".to_owned()))?;
        let record = self
            .take(state)
            .await
            .map_err(ConsentFailed::Unavailable)?
            .ok_or_else(unknown)?;
        if record.spec.expires_at.0 <= Utc::now() {
            return Err(unknown());
        }
        let given = ConsentGiven {
            namespace: record.metadata.namespace.clone(),
            call: record.spec.call.clone(),
            user: record.spec.user.clone(),
            also: Vec::new(),
        };
        let refused = |message: String| ConsentFailed::Refused {
            message,
            given: given.clone(),
        };
        let meta = &record.metadata;
        let plain = keys
            .open(
                &record.spec.key_id,
                &record.spec.sealed,
                &aad(&meta.namespace, &meta.name),
            )
            .map_err(|_| unknown())?;
        let pkce: Pkce = serde_json::from_slice(&plain).map_err(|_| unknown())?;
        check_iss(&pkce, iss).map_err(refused)?;
        let (namespace, spec) = (&meta.namespace, &record.spec);
        let (url, oauth2) = self
            .upstream_oauth2(namespace, &spec.upstream)
            .await
            .map_err(refused)?;
        let oauth2 = self
            .client(&oauth2)
            .map_err(|e| refused(e.message))?
            .into_owned();
        let grant = TokenGrant::Code {
            code: code.to_owned(),
            verifier: pkce.verifier,
            redirect_uri: pkce.redirect_uri,
        };
        let token = self
            .endpoint
            .request(&oauth2, &url, &grant)
            .await
            .map_err(|e| refused(format!("the authorization server refused the code: {e}")))?;
        let user = Some(spec.user.as_str());
        let name = Credential::name_for(&spec.upstream, user);
        let stored = self
            .stored(namespace, &name)
            .await
            .map_err(|e| refused(e.message))?;
        self.keep(
            keys,
            namespace,
            (&spec.upstream, user),
            &oauth2,
            &token,
            stored,
            None,
        )
        .await
        .map_err(|e| refused(format!("the token cannot be kept: {e}")))?;
        let same =
            |r: &ConsentRequest| r.spec.user == spec.user && r.spec.upstream == spec.upstream;
        let also = self.take_where(namespace, same).await;
        Ok(ConsentGiven {
            also: also.into_iter().map(|r| r.spec.call).collect(),
            ..given
        })
    }

    /// Ends a consent the user declined (or the server refused): its
    /// record is taken; answers whose call waited, if joch issued it.
    pub async fn decline_consent(&self, state: &str) -> Result<Option<ConsentGiven>, String> {
        Ok(self.take(state).await?.map(|r| ConsentGiven {
            namespace: r.metadata.namespace,
            call: r.spec.call,
            user: r.spec.user,
            also: Vec::new(),
        }))
    }

    /// Deletes the consents under way for `call` (its approval was
    /// rejected, or its deadline passed), so that their links stop working
    /// at once and no record is left behind.
    pub async fn withdraw_consents(&self, namespace: &str, call: &str) {
        self.take_where(namespace, |r| r.spec.call == call).await;
    }

    /// Takes (deletes) the consents under way in `namespace` that `which`
    /// picks; answers those this replica took (not one a callback took
    /// meanwhile).
    async fn take_where(
        &self,
        namespace: &str,
        which: impl Fn(&ConsentRequest) -> bool,
    ) -> Vec<ConsentRequest> {
        let query = ListQuery {
            namespace: namespace.to_owned(),
            limit: 1_000,
            ..ListQuery::default()
        };
        let under_way = match self.store.list_objects::<ConsentRequest>(query).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::debug!(error = %e, "consents not withdrawn; they expire");
                return Vec::new();
            }
        };
        let mut taken = Vec::new();
        for record in under_way.into_iter().filter(|r| which(r)) {
            let meta = &record.metadata;
            let version = Some(meta.resource_version.as_str());
            let deleted = self
                .store
                .delete_object::<ConsentRequest>(namespace, &meta.name, version)
                .await;
            if deleted.is_ok() {
                taken.push(record);
            }
        }
        taken
    }

    /// The upstream's URL and `oauth2`, as stored now.
    async fn upstream_oauth2(
        &self,
        namespace: &str,
        upstream: &UpstreamRef,
    ) -> Result<(String, OAuth2), String> {
        let missing = || {
            format!(
                "{} {:?} no longer takes oauth2",
                upstream.kind, upstream.name
            )
        };
        let (url, auth) = if upstream.kind == <McpServer as joch_core::Object>::KIND {
            let server = self
                .store
                .get_object::<McpServer>(namespace, &upstream.name)
                .await
                .map_err(|_| missing())?;
            let http = server.spec.http.ok_or_else(missing)?;
            (http.url, http.auth)
        } else {
            let endpoint = self
                .store
                .get_object::<Endpoint>(namespace, &upstream.name)
                .await
                .map_err(|_| missing())?;
            (endpoint.spec.url, endpoint.spec.auth)
        };
        let oauth2 = auth.and_then(|a| a.oauth2).ok_or_else(missing)?;
        Ok((url, oauth2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_name_their_namespace_and_a_hashed_record() {
        let state = format!("team-a.{}", random());
        let (namespace, name) = record_of(&state).unwrap();
        assert_eq!(namespace, "team-a");
        assert!(name.starts_with("consent-") && !name.contains(&state[7..]));
        assert!(record_of("no-dot").is_none());
        assert!(record_of("Bad_NS.x").is_none());
        assert_eq!(random().len(), 43, "a PKCE verifier of 43 characters");
        assert_eq!(encode("a b/c~"), "a%20b%2Fc~");
    }

    #[test]
    fn iss_is_the_issuer_exactly_and_present_when_promised() {
        let pkce = |issuer: Option<&str>, iss_required| Pkce {
            verifier: String::new(),
            redirect_uri: String::new(),
            issuer: issuer.map(str::to_owned),
            iss_required,
        };
        let known = pkce(Some("https://as.example"), true);
        assert!(check_iss(&known, Some("https://as.example")).is_ok());
        assert!(check_iss(&known, Some("https://as.example/")).is_err());
        assert!(check_iss(&known, Some("https://evil.example.com")).is_err());
        assert!(check_iss(&known, None).is_err());
        let unpromised = pkce(Some("https://as.example"), false);
        assert!(check_iss(&unpromised, None).is_ok());
        assert!(check_iss(&unpromised, Some("https://evil.example.com")).is_err());
        // Configured endpoints: no issuer known, nothing to compare.
        assert!(check_iss(&pkce(None, false), Some("https://any")).is_ok());
    }
}
