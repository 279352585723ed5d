//! The engine's settings, each with a documented default: read by the
//! parts they configure, handed over when `Engine::new` builds them.

use std::sync::Arc;
use std::time::Duration;

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
    /// see `lifecycle/replicas.rs`.
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
