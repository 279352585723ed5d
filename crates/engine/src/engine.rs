//! The engine: its parts and its settings.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use joch_core::object::IndexFields;
use joch_core::{LabelSelector, Time, ToolBackend};
use joch_store::{ListQuery, Store};

use crate::EngineError;
use crate::catalog::Catalog;
use crate::policy::PolicyEngine;

/// Engine settings, each with a documented default.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Items per list page when the client gives no `limit` (default 500).
    pub default_list_limit: usize,
    /// Largest `limit` a client may ask for (default 5 000).
    pub max_list_limit: usize,
    /// How long an idempotency key collapses repeats when the tool sets no
    /// window of its own (default 24 h).
    pub idempotency_window: Duration,
    /// How long a deferred call waits for a person when its policy sets no
    /// deadline (default 300 s); then the fallback applies.
    pub approval_timeout: Duration,
    /// What an expired approval decides when its policy names no
    /// `onTimeout` (default deny: the call ends `TimedOut`).
    pub approval_fallback: joch_core::policy::OnTimeout,
    /// Put calls' arguments and results on their trace spans (default
    /// false: traces leave the ledger's trust boundary).
    pub trace_content: bool,
    /// sha256 of the root token, which acts as admin in every namespace
    /// (default none: without it and without tokens, no authentication).
    pub root_token_hash: Option<String>,
    /// An identity provider whose JWTs authenticate (default none).
    pub jwt: Option<crate::identity::JwtConfig>,
    /// This process's name among several sharing one store (default none:
    /// the store is this process's alone). Recorded on the calls it runs;
    /// see `replicas.rs`.
    pub replica: Option<String>,
    /// Where artifact contents are kept (the binary's defaults: files in
    /// `<db>.artifacts` with SQLite, the database itself with PostgreSQL);
    /// `None` keeps no artifacts: every result inline.
    pub artifacts: Option<Arc<dyn joch_store::Blobs>>,
    /// How long a call that needs no durable intent may run before its
    /// `Running` record is written (default 100 ms); one that settles
    /// sooner is written once, settled. Zero writes every call as it
    /// starts. See `admission::Intent`.
    pub intent_grace: Duration,
    /// Bounds on MCP sessions (see `mcp/sessions.rs`).
    pub mcp_sessions: crate::McpSessionLimits,
    /// The token vault's keys (default none: no upstream token can be kept,
    /// and `spec.auth.oauth2` upstreams fail saying so).
    pub vault: Option<crate::VaultKeys>,
    /// The token vault the backends use, built by the opener from `vault`
    /// (default none: credentials list empty).
    pub credentials: Option<Arc<crate::Credentials>>,
    /// joch's public URL (`--public-url`), under which users' consents
    /// come back (`/oauth/callback`) and joch's Client ID Metadata
    /// Document is served (default none: per-user upstreams cannot ask
    /// for consent, and their calls fail with `consent_required`).
    pub public_url: Option<String>,
    /// How many connections to upstream MCP servers that take each user's
    /// own token are kept open at most, over all users (default 64): the
    /// least recently used idle one closes for a new user.
    pub mcp_user_connections: usize,
    /// How long a connection to an upstream MCP server carrying one user's
    /// token stays open unused before it is closed (default 2 minutes).
    pub mcp_user_connection_idle: Duration,
    /// What namespaces may take from joch's host: stdio commands, secret
    /// variables and files (default: nothing; the operator, anything but
    /// joch's own secrets).
    pub host_access: crate::HostAccess,
    /// What one policy's evaluation for one call may spend (the standard
    /// policy engine's budget; `joch_tools::start` hands it over).
    pub policy_budget: crate::policy::PolicyBudget,
    /// Bounds on console sign-ins through the identity provider, and how
    /// often expired ones and expired console sessions are swept (see
    /// `identity/pending.rs`).
    pub sign_ins: crate::SignInLimits,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            default_list_limit: 500,
            max_list_limit: 5_000,
            idempotency_window: Duration::from_secs(24 * 60 * 60),
            approval_timeout: Duration::from_secs(300),
            approval_fallback: joch_core::policy::OnTimeout::Deny,
            trace_content: false,
            root_token_hash: None,
            jwt: None,
            replica: None,
            artifacts: None,
            intent_grace: Duration::from_millis(100),
            mcp_sessions: crate::McpSessionLimits::default(),
            vault: None,
            credentials: None,
            public_url: None,
            mcp_user_connections: 64,
            mcp_user_connection_idle: Duration::from_secs(120),
            host_access: crate::HostAccess::default(),
            policy_budget: crate::policy::PolicyBudget::default(),
            sign_ins: crate::SignInLimits::default(),
        }
    }
}

/// The call path and the resource operations, over one store and a set of
/// backends. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) backends: HashMap<&'static str, Arc<dyn ToolBackend>>,
    /// The configuration calls read, and its snapshots.
    pub(crate) catalog: Catalog,
    pub(crate) config: EngineConfig,
    /// The call path's signals and followers.
    pub(crate) calls: crate::calls::State,
    /// Deadline timers and the inbox's signal.
    pub(crate) approvals: crate::approvals::State,
    /// The events' signal.
    pub(crate) events: crate::events::State,
    /// Upstream listings and relays.
    pub(crate) mcp: crate::mcp::State,
    /// Sign-in starts of one client, one at a time.
    pub(crate) sign_in_turns: crate::identity::Turns,
    pub(crate) policy: Arc<dyn PolicyEngine>,
}

impl Engine {
    /// An engine over `store`, executing tools with `backends` (one per
    /// `spec.backend.type`; a later one of the same type replaces an earlier).
    pub fn new(
        store: Arc<dyn Store>,
        backends: Vec<Arc<dyn ToolBackend>>,
        policy: Arc<dyn PolicyEngine>,
        config: EngineConfig,
    ) -> Self {
        let backends = backends.into_iter().map(|b| (b.kind(), b)).collect();
        Self {
            inner: Arc::new(Inner {
                store: store.clone(),
                backends,
                catalog: Catalog::new(store),
                config,
                calls: Default::default(),
                approvals: Default::default(),
                events: Default::default(),
                mcp: Default::default(),
                sign_in_turns: Default::default(),
                policy,
            }),
        }
    }

    /// Runs `work` as a task of its own and waits for it. A caller that goes
    /// away (its connection closed, its future dropped) cannot stop what it
    /// started halfway: between a call's record and its settlement, it would
    /// leave the call `Pending` or `Running` on a live replica with nothing
    /// to finish it.
    pub(crate) async fn to_completion<T, F>(
        &self,
        what: &'static str,
        work: impl FnOnce(Engine) -> F,
    ) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, EngineError>> + Send + 'static,
    {
        let work = tracing::Instrument::in_current_span(work(self.clone()));
        tokio::spawn(work).await.map_err(EngineError::task(what))?
    }

    /// The store, for health checks.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }
}

/// Query parameters of a list, as the client gave them.
#[derive(Debug, Clone, Default)]
pub struct ListParams {
    /// `labelSelector`, e.g. `team=support,!canary`.
    pub label_selector: Option<String>,
    /// Page size.
    pub limit: Option<usize>,
    /// `continue` token from the previous page.
    pub continue_token: Option<String>,
    /// ToolCalls of this tool only.
    pub tool: Option<String>,
    /// ToolCalls in this phase only.
    pub phase: Option<String>,
    /// ToolCalls of this execution only.
    pub execution: Option<String>,
    /// ToolCalls made by this agent only.
    pub agent: Option<String>,
    /// `createdSince`: ToolCalls created at or after this RFC 3339 instant.
    /// With either bound the list runs by creation time (see
    /// [`joch_store::ListQuery::created_since_ms`]).
    pub created_since: Option<String>,
    /// `createdBefore`: ToolCalls created before this RFC 3339 instant.
    pub created_before: Option<String>,
}

impl Inner {
    /// A page of objects of `T`, as a client asked for it.
    pub(crate) async fn list<T: joch_core::Object>(
        &self,
        namespace: &str,
        params: ListParams,
    ) -> Result<joch_store::ObjectList<T>, EngineError> {
        crate::catalog::valid_namespace(namespace)?;
        let query = self.list_query(namespace, params)?;
        Ok(self.store.list_objects(query).await?)
    }

    pub(crate) fn list_query(
        &self,
        namespace: &str,
        params: ListParams,
    ) -> Result<ListQuery, EngineError> {
        let selector = match &params.label_selector {
            Some(text) => LabelSelector::parse(text).map_err(|e| EngineError::InvalidQuery {
                parameter: "labelSelector",
                message: e.to_string(),
            })?,
            None => LabelSelector::default(),
        };
        if let Some(phase) = &params.phase {
            if joch_core::Phase::parse(phase).is_none() {
                return Err(EngineError::InvalidQuery {
                    parameter: "phase",
                    message: format!("unknown phase {phase:?}"),
                });
            }
        }
        let limit = params.limit.unwrap_or(self.config.default_list_limit);
        if limit == 0 || limit > self.config.max_list_limit {
            return Err(EngineError::InvalidQuery {
                parameter: "limit",
                message: format!("limit must be between 1 and {}", self.config.max_list_limit),
            });
        }
        let created_since_ms = crate::list_range::bound("createdSince", &params.created_since)?;
        let created_before_ms = crate::list_range::bound("createdBefore", &params.created_before)?;
        Ok(ListQuery {
            kind: String::new(),
            namespace: namespace.to_owned(),
            selector,
            index: IndexFields {
                tool: params.tool,
                phase: params.phase,
                execution: params.execution,
                agent: params.agent,
                checksum: None,
                ..IndexFields::default()
            },
            limit,
            continue_from: params.continue_token,
            created_since_ms,
            created_before_ms,
            every_row: false,
        })
    }
}

/// The current time, the engine's only clock read.
pub(crate) fn now() -> Time {
    Time(Utc::now())
}

/// A name for a call the caller did not name: a UUIDv7, so names sort by
/// creation and new index entries land together at the end of the index
/// (random names would dirty a different page of it with every call).
pub(crate) fn new_call_name() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// An engine over a fresh SQLite file in `dir`, with no backends: for the
/// engine's own tests.
#[cfg(test)]
pub(crate) fn test_engine(dir: &tempfile::TempDir) -> Engine {
    let store = joch_store::SqliteStore::open(dir.path().join("joch.db")).expect("store");
    Engine::new(
        Arc::new(store),
        Vec::new(),
        Arc::new(crate::policy::StandardPolicyEngine::default()),
        EngineConfig::default(),
    )
}
