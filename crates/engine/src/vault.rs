//! The token vault: upstream tokens kept as `Credential` records, one per
//! namespace, upstream and user, sealed with AES-256-GCM (see `keys.rs`).
//! A token is fetched when there is none, and again shortly before it
//! expires; one refresh per record at a time in this process (concurrent
//! calls wait for it and share its result). A token is never in a record
//! in clear, nor in an event, a log line or an error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use joch_core::credential::{
    Credential, CredentialSpec, Grant, IssuedToken, OAuth2, TokenEndpoint, TokenGrant,
    UpstreamCredentials, UpstreamRef,
};
use joch_core::{CallError, ErrorCode, ObjectMeta, Principal, Time};
use joch_store::{Durability, ListQuery, Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::EngineError;
use crate::rules::{Action, Collection, may_in};

mod client;
mod consent;
mod exchange;
mod keys;
mod lease;

pub use client::callback_url;
pub use consent::{ConsentAsk, ConsentFailed, ConsentGiven};

pub use keys::{VaultKey, VaultKeys};

/// A token is refreshed when it expires within this margin.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// What a `Credential` seals.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sealed {
    access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refresh_token: Option<String>,
    /// The token URL and client it was issued to: a changed `spec.auth`
    /// gets a new token.
    issuer: String,
}

/// The vault and the token requests behind it.
pub struct Credentials {
    store: Arc<dyn Store>,
    keys: Option<VaultKeys>,
    endpoint: Arc<dyn TokenEndpoint>,
    /// One lock per record name: a refresh in flight is awaited, not repeated.
    refreshing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// joch's public URL, where its Client ID Metadata Document is.
    public_url: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("key", &self.keys.as_ref().map(VaultKeys::current_id))
            .finish_non_exhaustive()
    }
}

fn failed(message: impl Into<String>) -> CallError {
    CallError::new(ErrorCode::UpstreamAuthFailed, message)
}

/// The end user has no token joch can use: only their consent helps.
fn consent_required(upstream: &UpstreamRef, user: &str, why: &str) -> CallError {
    CallError::new(
        ErrorCode::ConsentRequired,
        format!(
            "{} {:?} needs {user:?}'s consent ({why}): call again, and open the consent URL the paused call gives (its approval's consentUrl)",
            upstream.kind, upstream.name
        ),
    )
}

fn issuer(oauth2: &OAuth2) -> String {
    let token_url = oauth2.token_url.as_deref().unwrap_or("(discovered)");
    format!("{token_url} {}", oauth2.client_id)
}

fn aad(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Credentials {
    /// A vault over `store`; without `keys` no token can be kept, and an
    /// oauth2 upstream fails with a message saying so.
    pub fn new(
        store: Arc<dyn Store>,
        keys: Option<VaultKeys>,
        endpoint: Arc<dyn TokenEndpoint>,
    ) -> Self {
        Self {
            store,
            keys,
            endpoint,
            refreshing: Mutex::default(),
            public_url: None,
        }
    }

    fn lock(&self, key: String) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.refreshing.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(key).or_default().clone()
    }

    /// What `stored` seals, if it opens and was issued for `oauth2`.
    fn opened(keys: &VaultKeys, stored: &Credential, oauth2: &OAuth2) -> Option<Sealed> {
        let meta = &stored.metadata;
        let plain = keys
            .open(
                &stored.spec.key_id,
                &stored.spec.sealed,
                &aad(&meta.namespace, &meta.name),
            )
            .ok()?;
        let sealed: Sealed = serde_json::from_slice(&plain).ok()?;
        (sealed.issuer == issuer(oauth2)).then_some(sealed)
    }

    /// The stored token of `name`, if it opens, was issued for `oauth2`
    /// and does not expire within the margin. Sealed under an old key, it
    /// is sealed again under the current one.
    async fn usable(
        &self,
        keys: &VaultKeys,
        stored: &mut Credential,
        oauth2: &OAuth2,
    ) -> Option<String> {
        let sealed = Self::opened(keys, stored, oauth2)?;
        let margin = chrono::Duration::from_std(REFRESH_MARGIN).expect("small");
        let fresh = stored
            .spec
            .expires_at
            .is_none_or(|at| at.0 - margin > Utc::now());
        if !fresh {
            return None;
        }
        let meta = &stored.metadata;
        let aad = aad(&meta.namespace, &meta.name);
        let plain = serde_json::to_vec(&sealed).expect("strings serialise");
        if stored.spec.key_id != keys.current_id() {
            stored.spec.sealed = keys.seal(&plain, &aad);
            stored.spec.key_id = keys.current_id().to_owned();
            // Another replica may have rotated it first: either copy opens.
            let _ = self.store.update_object(stored, Durability::Sync).await;
        }
        Some(sealed.access_token)
    }

    /// Seals `token` into the record for `upstream` and `user`, created or
    /// replaced. A refresh answer without a refresh token keeps the one
    /// `kept_refresh` held (RFC 6749 §6).
    #[allow(clippy::too_many_arguments)]
    async fn keep(
        &self,
        keys: &VaultKeys,
        namespace: &str,
        (upstream, user): (&UpstreamRef, Option<&str>),
        oauth2: &OAuth2,
        token: &IssuedToken,
        stored: Option<Credential>,
        kept_refresh: Option<String>,
    ) -> Result<(), StoreError> {
        let name = Credential::name_for(upstream, user);
        let sealed = Sealed {
            access_token: token.access_token.clone(),
            refresh_token: token.refresh_token.clone().or(kept_refresh),
            issuer: issuer(oauth2),
        };
        let plain = serde_json::to_vec(&sealed).expect("strings serialise");
        let now = Utc::now();
        let spec = CredentialSpec {
            upstream: upstream.clone(),
            user: user.map(str::to_owned),
            grant: oauth2.grant,
            scope: token.scope.clone(),
            obtained_at: Time(now),
            // The upstream's number: an expiry joch cannot record is unknown.
            expires_at: token
                .expires_in
                .and_then(|s| Time(now).checked_add(std::time::Duration::from_secs(s))),
            key_id: keys.current_id().to_owned(),
            sealed: keys.seal(&plain, &aad(namespace, &name)),
            refreshing_until: None,
        };
        match stored {
            Some(mut credential) => {
                credential.spec = spec;
                self.store
                    .update_object(&mut credential, Durability::Sync)
                    .await
            }
            None => {
                let mut credential = Credential {
                    api_version: joch_core::API_VERSION.to_owned(),
                    kind: <Credential as joch_core::Object>::KIND.to_owned(),
                    metadata: ObjectMeta {
                        name,
                        namespace: namespace.to_owned(),
                        creation_timestamp: Some(Time(now)),
                        ..ObjectMeta::default()
                    },
                    spec,
                };
                self.store
                    .create_object(&mut credential, Durability::Sync)
                    .await
            }
        }
    }

    async fn stored(&self, namespace: &str, name: &str) -> Result<Option<Credential>, CallError> {
        match self.store.get_object::<Credential>(namespace, name).await {
            Ok(c) => Ok(Some(c)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(failed(format!("the token vault cannot be read: {e}"))),
        }
    }
}

/// The vault part as people manage it: the credentials kept, their
/// revocation, and joch's Client ID Metadata Document. The backends use
/// [`Credentials`] itself.
pub struct Vault {
    store: Arc<dyn Store>,
    credentials: Option<Arc<Credentials>>,
}

impl Vault {
    pub(crate) fn new(store: Arc<dyn Store>, credentials: Option<Arc<Credentials>>) -> Self {
        Self { store, credentials }
    }

    /// joch's Client ID Metadata Document, served at its own URL for
    /// `clientMetadata` upstreams; `None` without a vault or a public URL.
    pub fn client_metadata(&self) -> Option<serde_json::Value> {
        self.credentials.as_ref()?.client_metadata()
    }

    /// The namespace's credentials, sealed (surfaces show who, for what
    /// and until when, never `spec.sealed`). Only an admin may list them.
    pub async fn list(
        &self,
        by: &Principal,
        namespace: &str,
    ) -> Result<Vec<Credential>, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Credentials))?;
        let query = ListQuery {
            namespace: namespace.to_owned(),
            limit: 5_000,
            ..ListQuery::default()
        };
        Ok(self.store.list_objects(query).await?.items)
    }

    /// Deletes a credential as `by` (an admin): the next call that needs
    /// it obtains a new token.
    pub async fn revoke(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
    ) -> Result<Credential, EngineError> {
        may_in(by, namespace, &Action::Write(Collection::Credentials))?;
        Ok(self.store.delete_object(namespace, name, None).await?)
    }
}

#[async_trait]
impl UpstreamCredentials for Credentials {
    async fn authorization(
        &self,
        namespace: &str,
        upstream: &UpstreamRef,
        url: &str,
        oauth2: &OAuth2,
        user: Option<&str>,
    ) -> Result<String, CallError> {
        let keys = self.keys.as_ref().ok_or_else(|| {
            failed("no vault key is configured (JOCH_VAULT_KEY or --vault-key-file): oauth2 upstreams need one")
        })?;
        let oauth2 = &*self.client(oauth2)?;
        let user = match (oauth2.takes_user(), user) {
            (false, _) => None,
            (true, Some(user)) => Some(user),
            (true, None) => {
                return Err(failed(format!(
                    "{} {:?} takes per-user tokens, and this request names no user",
                    upstream.kind, upstream.name
                )));
            }
        };
        let name = Credential::name_for(upstream, user);
        let lock = self.lock(format!("{namespace}/{name}"));
        let _one_at_a_time = lock.lock().await;
        let deadline = tokio::time::Instant::now() + 2 * lease::REFRESH_LEASE;
        let claimed = loop {
            let mut stored = self.stored(namespace, &name).await?;
            if let Some(credential) = stored.as_mut() {
                if let Some(token) = self.usable(keys, credential, oauth2).await {
                    return Ok(format!("Bearer {token}"));
                }
            }
            if let (Some(user), Grant::TokenExchange) = (user, oauth2.grant) {
                return Err(failed(format!(
                    "{} {:?} takes {user:?}'s own token, exchanged when the call was made, and it has expired: call again",
                    upstream.kind, upstream.name
                )));
            }
            if let Some(user) = user {
                // Only the user's consent gives a first token.
                let held = stored.as_ref().is_some_and(|c| !c.spec.sealed.is_empty());
                if !held {
                    return Err(consent_required(
                        upstream,
                        user,
                        "joch holds no token of theirs",
                    ));
                }
            }
            match self
                .claim(namespace, (upstream, user), oauth2, stored)
                .await?
            {
                lease::Claim::Won(credential) => break *credential,
                lease::Claim::Busy if tokio::time::Instant::now() < deadline => Self::pause().await,
                lease::Claim::Busy => {
                    return Err(failed(format!(
                        "another replica is still obtaining the token for {} {:?}",
                        upstream.kind, upstream.name
                    )));
                }
            }
        };
        let token = self
            .obtain(keys, (upstream, user), url, oauth2, claimed)
            .await?;
        Ok(format!("Bearer {}", token.access_token))
    }

    async fn refused(
        &self,
        namespace: &str,
        upstream: &UpstreamRef,
        oauth2: &OAuth2,
        user: Option<&str>,
        authorization: &str,
    ) {
        let (Some(keys), Ok(oauth2)) = (self.keys.as_ref(), self.client(oauth2)) else {
            return;
        };
        let user = user.filter(|_| oauth2.takes_user());
        let name = Credential::name_for(upstream, user);
        let Ok(Some(mut stored)) = self.stored(namespace, &name).await else {
            return;
        };
        let same = Self::opened(keys, &stored, &oauth2).is_some_and(|s| {
            authorization.strip_prefix("Bearer ") == Some(s.access_token.as_str())
        });
        if same {
            // Stale from now: the next use refreshes it. The write is
            // conditional: a replica that refreshed it first wins.
            stored.spec.expires_at = Some(Time(Utc::now() - chrono::Duration::seconds(1)));
            if let Err(e) = self
                .store
                .update_object(&mut stored, Durability::Sync)
                .await
            {
                tracing::debug!(upstream = %upstream.name, error = %e, "a refused token was replaced meanwhile");
            }
        }
    }
}

impl Credentials {
    /// Asks the token endpoint for a new token of `claimed` (a service
    /// token; or the user's, with their refresh token) and keeps it.
    async fn obtain(
        &self,
        keys: &VaultKeys,
        (upstream, user): (&UpstreamRef, Option<&str>),
        url: &str,
        oauth2: &OAuth2,
        claimed: Credential,
    ) -> Result<IssuedToken, CallError> {
        let refresh_token = Self::opened(keys, &claimed, oauth2).and_then(|s| s.refresh_token);
        let grant = match (user, &refresh_token) {
            (None, _) => TokenGrant::ClientCredentials,
            (Some(_), Some(refresh_token)) => TokenGrant::Refresh {
                refresh_token: refresh_token.clone(),
            },
            (Some(user), None) => {
                self.forget(claimed).await;
                return Err(consent_required(
                    upstream,
                    user,
                    "their token expired and cannot be refreshed",
                ));
            }
        };
        let token = match self.endpoint.request(oauth2, url, &grant).await {
            Ok(token) => token,
            // The authorization server no longer honours the grant (revoked, expired).
            Err(e) if user.is_some() && e.contains("invalid_grant") => {
                self.forget(claimed).await;
                let user = user.unwrap_or_default();
                return Err(consent_required(
                    upstream,
                    user,
                    "their refresh token was refused",
                ));
            }
            Err(e) => {
                self.release(claimed).await;
                return Err(failed(format!(
                    "no token for {} {:?}: {e}",
                    upstream.kind, upstream.name
                )));
            }
        };
        let namespace = claimed.metadata.namespace.clone();
        if let Err(e) = self
            .keep(
                keys,
                &namespace,
                (upstream, user),
                oauth2,
                &token,
                Some(claimed),
                refresh_token,
            )
            .await
        {
            // Another replica kept one meanwhile: this token is as good.
            tracing::debug!(upstream = %upstream.name, error = %e, "token not kept");
        }
        Ok(token)
    }
}
