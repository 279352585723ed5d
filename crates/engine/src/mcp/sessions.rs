//! MCP sessions of the protocol versions before 2026-07-28, kept in the
//! store so that any replica serves any of them.
//!
//! A session is one small record (kind `McpSession`, named by its id): who
//! opened it, in which namespace, the client's `initialize` parameters and
//! when it was last used. No replica holds anything for an idle session;
//! the MCP front re-creates a session's in-memory worker from the record
//! when a request for it arrives (see `joch-server`'s `mcp/sessions.rs`).
//! Open sessions are capped per namespace and per principal; a session
//! unused for `idle` is removed by the expiry worker `Running` owns.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use joch_core::Principal;
use joch_core::object::IndexFields;
use joch_store::{Durability, ListQuery, Record, StoreErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Mcp;
use crate::EngineError;
use crate::clock::now;

/// The kind session records are stored under; no API serves it.
pub const MCP_SESSION_KIND: &str = "McpSession";

/// Sessions are stored apart from any tenant's objects, so that a
/// session id alone finds its record (the MCP library restores a session
/// knowing only its id); the namespace is in the record.
const SESSIONS_NAMESPACE: &str = "joch-system";

/// Largest `initialize` parameters a session keeps, in bytes of JSON.
pub const MAX_CLIENT_BYTES: usize = 16 * 1024;

/// Most times a change to a session is made again on a newer record.
const MAX_REWRITES: usize = 16;

/// Most resources one session may subscribe to.
pub const MAX_SUBSCRIPTIONS: usize = 256;

/// The stable code of a refusal beyond a cap.
pub const TOO_MANY_SESSIONS: joch_core::RefusalCode = joch_core::RefusalCode::TooManyMcpSessions;

/// Bounds on MCP sessions, each with a documented default.
#[derive(Debug, Clone)]
pub struct McpSessionLimits {
    /// A session unused this long is closed (default 300 s).
    pub idle: Duration,
    /// Most sessions open in one namespace (default 100 000).
    pub per_namespace: u64,
    /// Most sessions one principal may have open, over all namespaces
    /// (default 10 000; every unauthenticated caller is one principal).
    pub per_principal: u64,
}

impl Default for McpSessionLimits {
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(300),
            per_namespace: 100_000,
            per_principal: 10_000,
        }
    }
}

/// One open session, as the store keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpSession {
    /// Its id, the `Mcp-Session-Id` header's value.
    #[serde(skip)]
    pub id: String,
    /// Its namespace.
    pub namespace: String,
    /// Who opened it ([`principal_key`]); only they may use it.
    pub principal: String,
    /// The client's `initialize` parameters, replayed to re-create it.
    pub client: Value,
    /// When it was last used, in unix milliseconds.
    pub last_seen_ms: i64,
    /// The exposed resource URIs it subscribed to, at most
    /// [`MAX_SUBSCRIPTIONS`]: restored with the session on any replica.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub subscribed: BTreeSet<String>,
    /// The level it set with `logging/setLevel`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// 128 random bits that sign the ids of its calls' SSE events
    /// (`streams.rs`); never sent to the client.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    stream_key: String,
    #[serde(skip)]
    version: u64,
}

/// The key a session is bound to and counted under: one per principal.
pub fn principal_key(by: &Principal) -> String {
    let namespace = by.namespaces.key();
    format!("{}:{namespace}/{}", by.kind.as_str(), by.name)
}

impl Mcp {
    async fn check_session_caps(
        &self,
        namespace: &str,
        key: &str,
        limits: &McpSessionLimits,
    ) -> Result<(), EngineError> {
        let in_namespace = ListQuery {
            kind: MCP_SESSION_KIND.to_owned(),
            namespace: SESSIONS_NAMESPACE.to_owned(),
            index: IndexFields {
                tool: Some(namespace.to_owned()),
                ..IndexFields::default()
            },
            ..ListQuery::default()
        };
        let by_principal = ListQuery {
            kind: MCP_SESSION_KIND.to_owned(),
            namespace: SESSIONS_NAMESPACE.to_owned(),
            index: IndexFields {
                execution: Some(key.to_owned()),
                ..IndexFields::default()
            },
            ..ListQuery::default()
        };
        let store = &self.inner.store;
        for (query, cap, whose) in [
            (by_principal, limits.per_principal, "this caller"),
            (in_namespace, limits.per_namespace, "this namespace"),
        ] {
            if store.count(query).await? >= cap {
                return Err(EngineError::Refused {
                    code: TOO_MANY_SESSIONS,
                    message: format!(
                        "{whose} already has {cap} MCP sessions open; close one (DELETE with its \
                         Mcp-Session-Id) or wait for idle ones to expire"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Removes sessions idle longer than the limit, every quarter of it
    /// (at most every 30 s). Every replica may run it: removal is idempotent.
    pub(crate) fn spawn_mcp_session_expiry(&self) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        let idle = engine.inner.sessions.idle;
        let every = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match engine.expire_mcp_sessions().await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(expired = n, "idle MCP sessions closed"),
                    Err(e) => tracing::warn!(error = %e, "could not expire idle MCP sessions"),
                }
            }
        })
    }

    async fn expire_mcp_sessions(&self) -> Result<usize, EngineError> {
        let store = &self.inner.store;
        let idle_ms = i64::try_from(self.inner.sessions.idle.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now().0.timestamp_millis().saturating_sub(idle_ms);
        let mut expired = Vec::new();
        let mut continue_from = None;
        loop {
            let page = store
                .list(ListQuery {
                    kind: MCP_SESSION_KIND.to_owned(),
                    namespace: SESSIONS_NAMESPACE.to_owned(),
                    limit: 1000,
                    continue_from,
                    ..ListQuery::default()
                })
                .await?;
            for record in &page.items {
                let last_seen = serde_json::from_str::<McpSession>(&record.body)
                    .map_or(i64::MIN, |s| s.last_seen_ms);
                if last_seen < cutoff {
                    expired.push(record.name.clone());
                }
            }
            match page.continue_token {
                Some(token) if !page.items.is_empty() => continue_from = Some(token),
                _ => break,
            }
        }
        // Deletes are synced: 64 at a time, they share group commits.
        let mut removed = 0;
        for batch in expired.chunks(64) {
            let mut deletes = tokio::task::JoinSet::new();
            for id in batch {
                let (store, id) = (store.clone(), id.clone());
                deletes.spawn(async move {
                    store
                        .delete(MCP_SESSION_KIND, SESSIONS_NAMESPACE, &id, None)
                        .await
                });
            }
            while let Some(done) = deletes.join_next().await {
                match done.map_err(EngineError::task("expiring MCP sessions"))? {
                    Ok(_) => removed += 1,
                    Err(e) if e.kind() == StoreErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(removed)
    }
}

impl Mcp {
    /// The bounds MCP sessions are kept within.
    pub fn session_limits(&self) -> &McpSessionLimits {
        &self.inner.sessions
    }

    /// Opens a session for `by` in `namespace`, keeping the client's
    /// `initialize` parameters; returns its id (128 random bits). Refused
    /// with [`TOO_MANY_SESSIONS`] beyond a cap, `Invalid` when the
    /// parameters are larger than [`MAX_CLIENT_BYTES`]. The record is
    /// synced: the client's next request may reach another replica (or
    /// another connection of this one) at once.
    pub async fn open_session(
        &self,
        by: &Principal,
        namespace: &str,
        client: Value,
    ) -> Result<String, EngineError> {
        let limits = &self.inner.sessions;
        let key = principal_key(by);
        self.check_session_caps(namespace, &key, limits).await?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let session = McpSession {
            id: id.clone(),
            namespace: namespace.to_owned(),
            principal: key,
            client,
            last_seen_ms: now().0.timestamp_millis(),
            subscribed: BTreeSet::new(),
            log_level: None,
            stream_key: uuid::Uuid::new_v4().simple().to_string(),
            version: 1,
        };
        let record = session_record(&session)?;
        if record.body.len() > MAX_CLIENT_BYTES + 512 {
            return Err(EngineError::Invalid(joch_core::ValidationError::field(
                "params",
                format!("the initialize parameters are larger than {MAX_CLIENT_BYTES} bytes"),
            )));
        }
        self.inner.store.create(record, Durability::Sync).await?;
        Ok(id)
    }

    /// The session `id` of `namespace`, if `by` opened it and it has not
    /// expired; `NotFound` otherwise (another's session is not named).
    pub async fn session(
        &self,
        by: &Principal,
        namespace: &str,
        id: &str,
    ) -> Result<McpSession, EngineError> {
        let session = self.open_session_by_id(id).await?;
        if session.principal != principal_key(by) || session.namespace != namespace {
            return Err(session_not_found(id));
        }
        Ok(session)
    }

    /// The open session `id`, whoever opened it: for re-creating a session
    /// that [`Mcp::session`](crate::Mcp::session) has already admitted.
    pub async fn open_session_by_id(&self, id: &str) -> Result<McpSession, EngineError> {
        let record = match self
            .inner
            .store
            .get(MCP_SESSION_KIND, SESSIONS_NAMESPACE, id)
            .await
        {
            Ok(record) => record,
            Err(e) if e.kind() == StoreErrorKind::NotFound => return Err(session_not_found(id)),
            Err(e) => return Err(e.into()),
        };
        let session = parse_session(record)?;
        let idle_ms = i64::try_from(self.inner.sessions.idle.as_millis()).unwrap_or(i64::MAX);
        if session.last_seen_ms.saturating_add(idle_ms) < now().0.timestamp_millis() {
            return Err(session_not_found(id));
        }
        Ok(session)
    }

    /// Records that `session` was used now. `NotFound` when it was closed
    /// meanwhile (by a DELETE on another replica, or expiry). `session` may
    /// be an older copy: a write since (another replica's touch, a
    /// subscription) is read again and kept.
    pub async fn touch_session(&self, session: McpSession) -> Result<(), EngineError> {
        let mut session = session;
        for _ in 0..2 {
            session.last_seen_ms = now().0.timestamp_millis();
            let expected = session.version;
            session.version += 1;
            let record = session_record(&session)?;
            match self
                .inner
                .store
                .update(record, expected, Durability::Deferred)
                .await
            {
                Err(e) if e.kind() == StoreErrorKind::Conflict => {
                    session = self.open_session_by_id(&session.id).await?;
                }
                other => return Ok(other?),
            }
        }
        // Written again between our read and our write: used just now.
        Ok(())
    }

    /// Changes what session `id` asked of the upstream surface (its
    /// subscriptions, its log level), durably, so that a replica that
    /// re-creates the session restores it. A write that raced another
    /// request of the session is made again on what that one wrote.
    /// Refused beyond [`MAX_SUBSCRIPTIONS`].
    pub async fn remember(
        &self,
        id: &str,
        change: impl Fn(&mut McpSession),
    ) -> Result<(), EngineError> {
        for _ in 0..MAX_REWRITES {
            let mut session = self.open_session_by_id(id).await?;
            change(&mut session);
            if session.subscribed.len() > MAX_SUBSCRIPTIONS {
                return Err(EngineError::Invalid(joch_core::ValidationError::field(
                    "params.uri",
                    format!(
                        "a session may subscribe to at most {MAX_SUBSCRIPTIONS} resources; \
                         unsubscribe from one first"
                    ),
                )));
            }
            let expected = session.version;
            session.version += 1;
            let record = session_record(&session)?;
            match self
                .inner
                .store
                .update(record, expected, Durability::Sync)
                .await
            {
                Err(e) if e.kind() == StoreErrorKind::Conflict => continue,
                other => return Ok(other?),
            }
        }
        Err(unavailable(format!(
            "MCP session {id} was written by other requests {MAX_REWRITES} times in a row; try again"
        )))
    }

    /// Closes `by`'s session `id` (an MCP `DELETE`). `NotFound` if it is
    /// not theirs or not open.
    pub async fn close_session(
        &self,
        by: &Principal,
        namespace: &str,
        id: &str,
    ) -> Result<(), EngineError> {
        self.session(by, namespace, id).await?;
        match self
            .inner
            .store
            .delete(MCP_SESSION_KIND, SESSIONS_NAMESPACE, id, None)
            .await
        {
            Err(e) if e.kind() == StoreErrorKind::NotFound => Ok(()),
            other => other.map(|_| ()).map_err(Into::into),
        }
    }
}

fn session_record(session: &McpSession) -> Result<Record, EngineError> {
    let body = serde_json::to_string(session)
        .map_err(|e| unavailable(format!("session cannot be encoded: {e}")))?;
    Ok(Record {
        kind: MCP_SESSION_KIND.to_owned(),
        namespace: SESSIONS_NAMESPACE.to_owned(),
        name: session.id.clone(),
        resource_version: session.version,
        labels: BTreeMap::new(),
        // Counted per principal and per namespace through these columns,
        // which the store indexes (by kind, namespace, column).
        index: IndexFields {
            execution: Some(session.principal.clone()),
            tool: Some(session.namespace.clone()),
            ..IndexFields::default()
        },
        body,
    })
}

fn parse_session(record: Record) -> Result<McpSession, EngineError> {
    let mut session: McpSession = serde_json::from_str(&record.body)
        .map_err(|e| unavailable(format!("stored MCP session cannot be read: {e}")))?;
    session.id = record.name;
    session.version = record.resource_version;
    Ok(session)
}

fn session_not_found(id: &str) -> EngineError {
    EngineError::NotFound {
        kind: crate::NotFoundKind::McpSession,
        name: id.to_owned(),
    }
}

fn unavailable(message: String) -> EngineError {
    EngineError::Store(joch_store::StoreError::Unavailable(message))
}

mod streams;
pub use streams::StreamSigner;
#[cfg(test)]
mod tests;
