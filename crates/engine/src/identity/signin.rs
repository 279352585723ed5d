//! Signing in to the console through the identity provider (OpenID Connect,
//! authorization code with PKCE), the engine's half: the surface fetches
//! the provider's documents and exchanges the code; the engine keeps each
//! sign-in's secrets and decides who the ID token signs in.
//!
//! A sign-in is started with a fresh `state`, `nonce` and PKCE verifier,
//! kept in the store (keyed by the state's hash, so any replica finishes
//! it) for [`crate::SignInLimits::ttl`] and bound to the browser that
//! started it by a secret the browser holds in a cookie. Finishing takes the record once:
//! a replayed or foreign callback finds nothing. The ID token must be the
//! provider's (JWKS, `iss`, `exp`), issued to the console (`aud`) for this
//! sign-in (`nonce`), and maps to a principal as an access token does.
//! Starting is anonymous, so it is capped per client address and in all
//! (`pending.rs`), and expired sign-ins are swept (`sweep.rs`).

use std::net::IpAddr;
use std::time::Duration;

use base64::Engine as _;
use joch_core::object::IndexFields;
use joch_core::token::hash;
use joch_store::{Durability, Record, StoreErrorKind};
use sha2::{Digest, Sha256};

use super::Identity;
use crate::clock::now;
use crate::identity::pending::{Pending, SIGN_IN_KIND, client_key};
use crate::identity::sessions::{SESSION_NAMESPACE, secret};
use crate::{EngineError, SessionOpened};

/// A sign-in just started: what goes to the provider and to the browser.
#[derive(Debug, Clone)]
pub struct SignInStarted {
    /// The `state` parameter, echoed back by the provider.
    pub state: String,
    /// The `nonce` parameter, which the ID token must carry.
    pub nonce: String,
    /// The PKCE `code_challenge` (S256 of the verifier).
    pub challenge: String,
    /// The secret binding the sign-in to this browser, for its cookie.
    pub binding: String,
}

/// A sign-in taken back at the callback.
#[derive(Debug, Clone)]
pub struct SignInPending {
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The PKCE `code_verifier` for the token request.
    pub verifier: String,
}

/// The PKCE S256 challenge of `verifier` (RFC 7636 §4.2).
pub fn pkce_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

impl Identity {
    /// Starts a sign-in through the identity provider for the client at
    /// `client` (see the module); `None` when the surface cannot tell, and
    /// all such clients share one cap. Refused with
    /// [`TOO_MANY_SIGN_INS`](crate::TOO_MANY_SIGN_INS) (`Throttled`, with
    /// how long to wait) beyond [`crate::SignInLimits::per_client`] under way
    /// from the client's address, or [`crate::SignInLimits::total`] from all.
    /// The record is synced: the provider may send the browser back to
    /// another replica.
    pub async fn begin_sign_in(
        &self,
        client: Option<IpAddr>,
    ) -> Result<SignInStarted, EngineError> {
        let key = client_key(client);
        let _turn = self.turns.take(&key).await;
        self.room_for_sign_in(&key).await?;
        let ttl = self.sign_ins.ttl;
        let started = SignInStarted {
            state: secret(),
            nonce: secret(),
            challenge: String::new(),
            binding: secret(),
        };
        let pending = Pending {
            binding_hash: hash(&started.binding),
            nonce: started.nonce.clone(),
            verifier: secret(),
            expires_at_ms: (now().0
                + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX / 2))
            .timestamp_millis(),
        };
        let record = Record {
            kind: SIGN_IN_KIND.to_owned(),
            namespace: SESSION_NAMESPACE.to_owned(),
            name: hash(&started.state),
            resource_version: 1,
            labels: Default::default(),
            // Counted per client through this indexed column (`pending.rs`).
            index: IndexFields {
                execution: Some(key),
                ..IndexFields::default()
            },
            body: serde_json::to_string(&pending).expect("a sign-in serialises"),
        };
        self.store.create(record, Durability::Sync).await?;
        Ok(SignInStarted {
            challenge: pkce_challenge(&pending.verifier),
            ..started
        })
    }

    /// Takes back, once, the sign-in `state` names, if it has not expired
    /// and `binding` is the secret of the browser that started it.
    pub async fn take_sign_in(
        &self,
        state: &str,
        binding: &str,
    ) -> Result<Option<SignInPending>, EngineError> {
        let store = &self.store;
        let name = hash(state);
        let record = match store.get(SIGN_IN_KIND, SESSION_NAMESPACE, &name).await {
            Ok(record) => record,
            Err(e) if e.kind() == StoreErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Ok(pending) = serde_json::from_str::<Pending>(&record.body) else {
            return Ok(None);
        };
        if pending.binding_hash != hash(binding) {
            return Ok(None);
        }
        // Deleted before use: of two callbacks racing, one finds nothing.
        match store
            .delete(SIGN_IN_KIND, SESSION_NAMESPACE, &name, None)
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind() == StoreErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        if pending.expires_at_ms <= now().0.timestamp_millis() {
            return Ok(None);
        }
        Ok(Some(SignInPending {
            nonce: pending.nonce,
            verifier: pending.verifier,
        }))
    }

    /// Opens a console session for the principal of `id_token`, if it is
    /// the configured provider's, issued to `client_id` for the sign-in
    /// whose nonce is `nonce`; `None` otherwise (or without a provider).
    pub async fn open_id_session(
        &self,
        id_token: &str,
        client_id: &str,
        nonce: &str,
        ttl: Duration,
    ) -> Result<Option<SessionOpened>, EngineError> {
        let Some(jwt) = &self.jwt else {
            return Ok(None);
        };
        let Some(principal) = jwt.id_token_principal(id_token, client_id, nonce) else {
            return Ok(None);
        };
        self.open_principal_session(principal, ttl).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BASE64URL(SHA256(verifier)) without padding (RFC 7636 §4.2), as
    /// Python's `hashlib` and `base64.urlsafe_b64encode` compute it.
    #[test]
    fn the_challenge_is_s256_of_the_verifier() {
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r7wW1gXk-cFgxk"),
            "QNqBtUGXmxNHCkvrQFE4isHtTqC8SDl0Yy3NFHzmYuU"
        );
        assert_eq!(
            pkce_challenge(""),
            "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
        );
    }

    #[tokio::test]
    async fn a_sign_in_is_taken_once_by_its_own_browser() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = crate::engine::test_engine(&dir);
        let started = engine
            .identity()
            .begin_sign_in(None)
            .await
            .expect("started");
        let foreign = engine
            .identity()
            .take_sign_in(&started.state, "another browser")
            .await;
        assert!(foreign.expect("read").is_none());
        let taken = engine
            .identity()
            .take_sign_in(&started.state, &started.binding)
            .await
            .expect("read")
            .expect("the browser's own");
        assert_eq!(taken.nonce, started.nonce);
        assert_eq!(pkce_challenge(&taken.verifier), started.challenge);
        let again = engine
            .identity()
            .take_sign_in(&started.state, &started.binding)
            .await;
        assert!(again.expect("read").is_none(), "once only");
    }
}
