//! Console sessions: a person signs in once with a bearer token and the
//! browser then holds only a random session id (in a cookie).
//!
//! Sessions are records in the store, so any replica serves any page, and
//! they keep the token's hash, not the token nor a copy of its rights: the
//! principal is looked up again on every use, so revoking the token ends
//! its sessions at once. Each session has its own CSRF token and an
//! expiry; an expired session is deleted when next presented, or by the
//! sweep (`sweep.rs`) if it never is. The store
//! keys a session by the hash of its id, so reading the database does not
//! give a usable session.

use std::time::Duration;

use joch_core::object::IndexFields;
use joch_core::token::hash;
use joch_core::{Namespaces, Principal, PrincipalKind, Time};
use joch_store::{Durability, Record, StoreErrorKind};
use serde::{Deserialize, Serialize};

use super::Identity;
use crate::EngineError;
use crate::clock::now;

/// Kind and namespace of session records, which no API serves.
pub(crate) const SESSION_KIND: &str = "ConsoleSession";
pub(crate) const SESSION_NAMESPACE: &str = "joch-system";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    /// The token signed in with (empty for a sign-in through the identity
    /// provider).
    #[serde(default)]
    token_hash: String,
    /// The principal an ID token gave, kept for the session's life: the
    /// identity provider is not asked again until the session ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    principal: Option<SignedIn>,
    csrf: String,
    expires_at_ms: i64,
}

/// The principal of an identity provider's ID token (kind `Jwt`).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SignedIn {
    name: String,
    /// Its namespaces (a JWT's are always listed).
    #[serde(default)]
    namespaces: Vec<String>,
    /// Its one namespace, as sessions signed in before JWTs could claim
    /// several recorded it.
    #[serde(default, skip_serializing)]
    namespace: Option<String>,
    role: joch_core::token::Role,
    #[serde(default)]
    tools: Option<joch_core::ToolSelector>,
}

impl From<Principal> for SignedIn {
    fn from(p: Principal) -> Self {
        SignedIn {
            name: p.name,
            namespaces: p
                .namespaces
                .listed()
                .map(<[String]>::to_vec)
                .unwrap_or_default(),
            namespace: None,
            role: p.role,
            tools: p.tools,
        }
    }
}

impl From<SignedIn> for Principal {
    fn from(s: SignedIn) -> Self {
        Principal {
            kind: PrincipalKind::Jwt,
            name: s.name,
            // Never every namespace: one listed nowhere acts nowhere.
            namespaces: Namespaces::several(s.namespaces.into_iter().chain(s.namespace))
                .unwrap_or(Namespaces::Only(Vec::new())),
            role: s.role,
            tools: s.tools,
            presented: Default::default(),
        }
    }
}

/// A session just opened: what the browser is given.
#[derive(Debug, Clone)]
pub struct SessionOpened {
    /// The secret session id, for the cookie.
    pub id: String,
    /// The session's CSRF token, for every form.
    pub csrf: String,
    /// When it ends.
    pub expires_at: Time,
}

/// A live session, as presented.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    /// Who it signs in, as the token stands now.
    pub principal: Principal,
    /// The CSRF token every form and action must carry.
    pub csrf: String,
}

pub(crate) fn secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl Identity {
    /// Opens a session for `principal`, given by the identity provider's
    /// ID token (see `signin.rs`), lasting `ttl`.
    pub(super) async fn open_principal_session(
        &self,
        principal: Principal,
        ttl: Duration,
    ) -> Result<SessionOpened, EngineError> {
        self.store_session(String::new(), Some(principal.into()), ttl)
            .await
    }

    async fn store_session(
        &self,
        token_hash: String,
        principal: Option<SignedIn>,
        ttl: Duration,
    ) -> Result<SessionOpened, EngineError> {
        let id = secret();
        // A lifetime too long to record lasts as long as one can.
        let expires = now()
            .checked_add(ttl)
            .or_else(|| now().checked_add(Duration::from_secs(100 * 366 * 86_400)))
            .unwrap_or_else(now)
            .0;
        let stored = Stored {
            token_hash,
            principal,
            csrf: secret(),
            expires_at_ms: expires.timestamp_millis(),
        };
        let body = serde_json::to_string(&stored).expect("a session serialises");
        let record = Record {
            kind: SESSION_KIND.to_owned(),
            namespace: SESSION_NAMESPACE.to_owned(),
            name: hash(&id),
            resource_version: 1,
            labels: Default::default(),
            index: IndexFields::default(),
            body,
        };
        self.store.create(record, Durability::Sync).await?;
        Ok(SessionOpened {
            id,
            csrf: stored.csrf,
            expires_at: Time(expires),
        })
    }

    /// Opens a session for the holder of `token`, lasting `ttl`; `None`
    /// when the token is unknown (or a JWT, whose sign-in is the identity
    /// provider's, not a pasted token's).
    pub async fn open_session(
        &self,
        token: &str,
        ttl: Duration,
    ) -> Result<Option<SessionOpened>, EngineError> {
        match self.authenticate(token).await? {
            Some(p) if matches!(p.kind, PrincipalKind::Root | PrincipalKind::Token) => {}
            _ => return Ok(None),
        }
        self.store_session(hash(token), None, ttl).await.map(Some)
    }

    /// The session `id` stands for, if it is open, unexpired and its token
    /// still valid.
    pub async fn session(&self, id: &str) -> Result<Option<ConsoleSession>, EngineError> {
        let record = match self
            .store
            .get(SESSION_KIND, SESSION_NAMESPACE, &hash(id))
            .await
        {
            Ok(record) => record,
            Err(e) if e.kind() == StoreErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Ok(stored) = serde_json::from_str::<Stored>(&record.body) else {
            return Ok(None);
        };
        if stored.expires_at_ms <= now().0.timestamp_millis() {
            self.close_session(id).await?;
            return Ok(None);
        }
        let principal = match stored.principal {
            Some(signed_in) => Some(signed_in.into()),
            None => self.principal_by_hash(&stored.token_hash).await?,
        };
        Ok(principal.map(|principal| ConsoleSession {
            principal,
            csrf: stored.csrf,
        }))
    }

    /// Ends the session `id` (signing out); a session already gone is fine.
    pub async fn close_session(&self, id: &str) -> Result<(), EngineError> {
        match self
            .store
            .delete(SESSION_KIND, SESSION_NAMESPACE, &hash(id), None)
            .await
        {
            Err(e) if e.kind() != StoreErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
