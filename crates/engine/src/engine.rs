//! The engine: its parts and its settings.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use joch_core::token::ApiToken;
use joch_core::{
    Approval, Budget, Endpoint, McpServer, Namespace, Object, Policy, Tool, ToolBackend, ToolCall,
};
use joch_store::{Change, Store};

use crate::approvals::Approvals;
use crate::artifacts::Artifacts;
use crate::audit::Audit;
use crate::calls::{self, Calls};
use crate::events::Events;
use crate::identity::Identity;
use crate::identity::rules::Visibility;
use crate::lists::Lists;
use crate::mcp::Mcp;
use crate::policies::{Policies, PolicyEngine};
use crate::resources::Resources;
use crate::resources::catalog::Catalog;
use crate::vault::Vault;

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
    pub policy_budget: crate::policies::PolicyBudget,
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
            policy_budget: crate::policies::PolicyBudget::default(),
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

/// The parts, bottom up: what the store and configuration give, the parts
/// with walls (each built with the parts it needs, see `Engine::new`),
/// then the state of the parts still written as methods of `Engine`
/// (calls, approvals, mcp; lifecycle keeps none).
pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) config: EngineConfig,
    /// The configuration calls read, and its snapshots.
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) events: Arc<Events>,
    pub(crate) resources: Arc<Resources>,
    pub(crate) identity: Arc<Identity>,
    pub(crate) audit: Audit,
    pub(crate) vault: Vault,
    pub(crate) policies: Arc<Policies>,
    pub(crate) artifacts: Arc<Artifacts>,
    /// The call path, which owns the approvals part.
    pub(crate) calls: Calls,
    pub(crate) approvals: Approvals,
    /// Upstream listings and relays.
    pub(crate) mcp: Mcp,
}

impl Inner {
    /// Drops what the parts cached of `kind` and wakes whoever waits on it;
    /// for a write by this process or, heard from the store
    /// (`lifecycle/replicas.rs`), another.
    pub(crate) fn touched_kind(&self, kind: &str) {
        self.catalog.touched(kind);
        match kind {
            ToolCall::KIND => self.calls.settled(),
            "Event" => self.events.appended(),
            Approval::KIND => self.approvals.changed(),
            Change::ANYTHING => {
                for kind in [
                    Tool::KIND,
                    Policy::KIND,
                    Budget::KIND,
                    Namespace::KIND,
                    ApiToken::KIND,
                    Endpoint::KIND,
                    McpServer::KIND,
                    ToolCall::KIND,
                    "Event",
                    Approval::KIND,
                ] {
                    self.touched_kind(kind);
                }
            }
            _ => {}
        }
    }
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
        let backends: HashMap<_, _> = backends.into_iter().map(|b| (b.kind(), b)).collect();
        let catalog = Arc::new(Catalog::new(store.clone()));
        let lists = Lists::new(
            store.clone(),
            config.default_list_limit,
            config.max_list_limit,
        );
        let visibility = Visibility::new(store.clone(), catalog.clone());
        let events = Arc::new(Events::new(store.clone(), visibility.clone()));
        let resources = Arc::new(Resources::new(
            store.clone(),
            catalog.clone(),
            visibility.clone(),
            lists.clone(),
            config.host_access.clone(),
        ));
        let audit = Audit::new(store.clone(), visibility.clone());
        let identity = Arc::new(Identity::new(
            store.clone(),
            catalog.clone(),
            resources.clone(),
            config.root_token_hash.clone(),
            config.jwt.clone(),
            config.sign_ins.clone(),
        ));
        let vault = Vault::new(store.clone(), config.credentials.clone());
        let policies = Arc::new(Policies::new(store.clone(), catalog.clone(), policy));
        let mcp = Mcp::new(
            store.clone(),
            backends.clone(),
            catalog.clone(),
            resources.clone(),
            events.clone(),
            config.mcp_sessions.clone(),
            config.host_access.clone(),
        );
        let artifacts = Arc::new(Artifacts::new(
            store.clone(),
            config.artifacts.clone(),
            catalog.clone(),
            visibility.clone(),
        ));
        let needs = calls::Needs {
            store: store.clone(),
            backends: backends.clone(),
            config: config.clone(),
            lists: lists.clone(),
            catalog: catalog.clone(),
            visibility: visibility.clone(),
            events: events.clone(),
            resources: resources.clone(),
            policies: policies.clone(),
            artifacts: artifacts.clone(),
            mcp: mcp.clone(),
        };
        let calls = Calls::new(needs, |decided| {
            Approvals::new(
                store.clone(),
                catalog.clone(),
                visibility.clone(),
                lists.clone(),
                resources.clone(),
                config.credentials.clone(),
                config.replica.clone(),
                decided,
            )
        });
        let approvals = calls.approvals().clone();
        Self {
            inner: Arc::new(Inner {
                store,
                config,
                catalog,
                events,
                resources,
                identity,
                audit,
                vault,
                policies,
                artifacts,
                calls,
                approvals,
                mcp,
            }),
        }
    }

    /// The store, for health checks.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }
}

/// An engine over a fresh SQLite file in `dir`, with no backends: for the
/// engine's own tests.
#[cfg(test)]
pub(crate) fn test_engine(dir: &tempfile::TempDir) -> Engine {
    let store = joch_store::SqliteStore::open(dir.path().join("joch.db")).expect("store");
    Engine::new(
        Arc::new(store),
        Vec::new(),
        Arc::new(crate::policies::StandardPolicyEngine::default()),
        EngineConfig::default(),
    )
}
