//! Command-line flags. Every flag has a `JOCH_*` environment variable; these
//! structs are the only place joch reads its environment.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod edge;
mod signin;

pub use edge::EdgeArgs;
pub use signin::SignInArgs;

/// joch: a tool-call gateway and durable ledger for AI agents.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Cli {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Log lines as text or as JSON objects (to stderr; level from JOCH_LOG).
    #[arg(long, global = true, env = "JOCH_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How CLI verbs reach the server.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Base URL of a running joch server.
    #[arg(
        long,
        global = true,
        env = "JOCH_SERVER",
        default_value = "http://127.0.0.1:7070"
    )]
    pub server: String,
    /// Bearer token for a joch that requires one.
    #[arg(long, global = true, env = "JOCH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Debug, Subcommand)]
// Parsed once at start: boxing `serve`'s many flags would save nothing.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Create or replace resources from YAML or JSON files (multi-document).
    Apply(ApplyArgs),
    /// List resources: tools, toolcalls, policies, approvals, executions.
    Get(GetArgs),
    /// Show one resource in full.
    Describe(DescribeArgs),
    /// Call a tool through the gateway and print the settled record.
    Call(CallArgs),
    /// Replay a recorded call as a new call.
    Replay(ReplayArgs),
    /// Settle a call whose outcome is Unknown, as an operator decided.
    Resolve(ResolveArgs),
    /// Approve a call waiting for approval (or edit its arguments).
    Approve(DecideArgs),
    /// Deny a call waiting for approval.
    Deny(DecideArgs),
    /// Print an execution's event timeline.
    Logs(LogsArgs),
    /// What calls cost, grouped by tool, agent, execution or namespace.
    Costs(CostsArgs),
    /// Check or export a namespace's tamper-evident audit chain.
    Audit(AuditArgs),
    /// Create, list and revoke a namespace's bearer tokens.
    Token(TokenArgs),
    /// List and revoke the token vault's upstream credentials.
    Credentials(crate::credentials::CredentialsArgs),
    /// Serve a namespace's tools over MCP on stdin/stdout; `mcp accept`
    /// adopts changed upstream tool definitions.
    Mcp(McpArgs),
    /// Back-test a candidate policy on the ledger: `policy test -f FILE`.
    Policy(PolicyArgs),
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub action: PolicyAction,
    #[arg(short, long, global = true, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// What the candidate, with the policies in force, would have decided
    /// on the recorded calls of a window (reads only; changes nothing).
    Test {
        /// The candidate Policy (YAML or JSON).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
        /// The window: calls made this long ago or later (`7d`, `12h`).
        #[arg(long, default_value = "7d")]
        since: String,
        /// The policy in force the candidate replaces (default: its namesake).
        #[arg(long, value_name = "NAME")]
        replace: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
    #[arg(short, long, global = true, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// Create a token and print it (it is shown this once).
    Create {
        /// Who holds it.
        #[arg(value_name = "NAME")]
        holder: String,
        /// agent, approver or admin.
        #[arg(long)]
        role: String,
        /// Only these tools exist for it: a name glob (`crm.*`); repeatable.
        #[arg(long = "tool", value_name = "GLOB")]
        tools: Vec<String>,
        /// Only tools with these labels exist for it (`team=crm`).
        #[arg(long, value_name = "SELECTOR")]
        tool_labels: Option<String>,
    },
    /// List the namespace's tokens (names and roles).
    List,
    /// Revoke a token.
    Revoke {
        #[arg(value_name = "NAME")]
        holder: String,
    },
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(subcommand)]
    pub action: AuditAction,
    #[arg(short, long, global = true, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Check the chain and the records against each other in both
    /// directions; print every finding and exit 1 when not intact. With
    /// --checkpoints, also prove the chain still extends each signed
    /// checkpoint; with --bundle, do so offline, from `joch audit export`.
    Verify(VerifyArgs),
    /// Write the chain as JSON lines, oldest first: the bundle that
    /// `joch audit verify --bundle` checks offline.
    Export,
    /// The namespace's signed checkpoints.
    Checkpoints {
        #[command(subcommand)]
        action: CheckpointsAction,
    },
    /// Make an Ed25519 key pair for `joch serve --audit-signing-key`: the
    /// private seed in FILE (64 hex digits), the public key in FILE.pub.
    Keygen {
        /// Where to write the private key; it must not exist.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum CheckpointsAction {
    /// Write them as JSON lines (namespace, seq, head, at, keyId,
    /// signature), for an auditor to keep outside joch.
    Export,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Checkpoints kept outside joch (`joch audit checkpoints export`).
    #[arg(long, value_name = "FILE", requires = "public_key")]
    pub checkpoints: Option<PathBuf>,
    /// The public key they were signed with (FILE.pub of `joch audit keygen`).
    #[arg(long, value_name = "FILE", requires = "checkpoints")]
    pub public_key: Option<PathBuf>,
    /// Verify this exported chain offline, with no server or database.
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CostsArgs {
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// tool, agent, execution or namespace.
    #[arg(long, default_value = "tool")]
    pub group_by: String,
    /// An RFC 3339 time, or a duration back from now such as 24h.
    #[arg(long)]
    pub since: Option<String>,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    #[command(subcommand)]
    pub action: Option<McpAction>,
    #[arg(short, long, global = true, default_value = "default")]
    pub namespace: String,
    /// Run the engine in this process on this SQLite file instead of
    /// proxying to the server (`--server`).
    #[arg(long)]
    pub db: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum McpAction {
    /// Accept the current upstream definition of a quarantined or drifted
    /// tool (every held tool of the server when TOOL is omitted).
    Accept {
        /// The McpServer.
        #[arg(value_name = "SERVER")]
        mcp_server: String,
        /// The tool's name on that server (without the `server.` prefix).
        tool: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The execution.
    #[arg(short = 'e', long)]
    pub execution: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Keep printing events as they happen.
    #[arg(short, long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The approval (its name is the call's).
    pub name: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Who decides.
    #[arg(long = "by", env = "JOCH_APPROVER", default_value = "cli")]
    pub by: String,
    /// Why, for the record.
    #[arg(long)]
    pub rationale: Option<String>,
    /// For the model, when denying.
    #[arg(long)]
    pub message: Option<String>,
    /// Approve these arguments (JSON) instead of the original ones.
    #[arg(long)]
    pub input: Option<String>,
    /// The value a user-input request asks for (JSON).
    #[arg(long)]
    pub value: Option<String>,
    /// Let the decision stand for later calls of the same tool in the namespace.
    #[arg(long)]
    pub always: bool,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The call to replay.
    pub name: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Execute again even a tool that is not read-only or idempotent.
    #[arg(long = "override")]
    pub override_writes: bool,
    /// Run nothing: the new call carries the recorded outcome.
    #[arg(long)]
    pub record: bool,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("outcome").required(true).args(["succeeded", "failed"]))]
pub struct ResolveArgs {
    /// The Unknown call.
    pub name: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// The side effect happened.
    #[arg(long)]
    pub succeeded: bool,
    /// The side effect did not happen.
    #[arg(long)]
    pub failed: bool,
    /// Why you decided so; kept on the record.
    #[arg(long, default_value = "resolved by an operator")]
    pub reason: String,
    /// The outcome as JSON, when known.
    #[arg(long)]
    pub output: Option<String>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "JOCH_ADDR", default_value = "127.0.0.1:7070")]
    pub addr: SocketAddr,
    /// SQLite database file, created if missing (when --store is not given).
    #[arg(long, env = "JOCH_DB", default_value = "./joch.db")]
    pub db: PathBuf,
    /// A shared PostgreSQL store instead of the SQLite file:
    /// `postgres://user:password@host:port/database`. Several joch replicas
    /// may serve one such store at once.
    #[arg(long, env = "JOCH_STORE")]
    pub store: Option<String>,
    /// Most connections this replica opens to PostgreSQL.
    #[arg(long, env = "JOCH_STORE_MAX_CONNECTIONS", default_value_t = 16)]
    pub store_max_connections: u32,
    /// With a shared store: how long a replica that stopped renewing its
    /// lease (it died, or lost the database) is trusted before another
    /// replica takes over its unfinished calls.
    #[arg(long, env = "JOCH_LEASE_SECONDS", default_value_t = 15)]
    pub lease_seconds: u64,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "JOCH_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// How long a client has to send a request's headers, from its first
    /// byte (or from connecting, for a connection's first request); a
    /// slower one is disconnected.
    #[arg(long, env = "JOCH_HEADER_READ_TIMEOUT_MS", default_value_t = 5000)]
    pub header_read_timeout_ms: u64,
    /// How long a keep-alive connection may sit between requests before it
    /// is closed. A request in progress (an event follow, an MCP stream, a
    /// wait for approval) is never idle.
    #[arg(long, env = "JOCH_IDLE_TIMEOUT_SECONDS", default_value_t = 60)]
    pub idle_timeout_seconds: u64,
    /// The slowest a request body may arrive, on average after a grace of
    /// the header-read timeout, in bytes per second; a slower one is
    /// refused and its connection closed.
    #[arg(long, env = "JOCH_BODY_MIN_BYTES_PER_SECOND", default_value_t = 1024)]
    pub body_min_bytes_per_second: u64,
    /// Most client connections open at once; beyond it a new connection is
    /// answered 503 at once. Never more than three quarters of the
    /// open-files limit, which leaves room for the store and backends.
    #[arg(long, env = "JOCH_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Most long-lived answers (event follows, MCP requests and streams)
    /// one caller may have open at once; all unauthenticated callers count
    /// as one. Beyond it: 429 too_many_streams.
    #[arg(long, env = "JOCH_MAX_STREAMS_PER_PRINCIPAL", default_value_t = 256)]
    pub max_streams_per_principal: usize,
    /// An MCP session with no request for this long is closed (its client
    /// must initialize again).
    #[arg(long, env = "JOCH_MCP_SESSION_IDLE_SECONDS", default_value_t = 300)]
    pub mcp_session_idle_seconds: u64,
    /// Most MCP sessions open in one namespace, over all replicas. Beyond
    /// it, initialize answers 429 too_many_mcp_sessions.
    #[arg(
        long,
        env = "JOCH_MAX_MCP_SESSIONS_PER_NAMESPACE",
        default_value_t = 100_000
    )]
    pub max_mcp_sessions_per_namespace: u64,
    /// Most MCP sessions one caller may have open, over all namespaces and
    /// replicas; all unauthenticated callers count as one.
    #[arg(
        long,
        env = "JOCH_MAX_MCP_SESSIONS_PER_PRINCIPAL",
        default_value_t = 10_000
    )]
    pub max_mcp_sessions_per_principal: u64,
    /// Connections to upstream MCP servers taking each user's own token
    /// kept open at most, over all users (the least recently used idle one
    /// closes for a new user).
    #[arg(long, env = "JOCH_MAX_MCP_USER_CONNECTIONS", default_value_t = 64)]
    pub max_mcp_user_connections: usize,
    /// A connection to an upstream MCP server carrying one user's token,
    /// unused this long, is closed (the next call of that user opens one).
    #[arg(
        long,
        env = "JOCH_MCP_USER_CONNECTION_IDLE_SECONDS",
        default_value_t = 120
    )]
    pub mcp_user_connection_idle_seconds: u64,
    /// Also serve demo webhooks under /demo and apply the example tools.
    #[arg(long)]
    pub demo: bool,
    /// How long a call waits for approval when its policy sets no deadline.
    #[arg(long, env = "JOCH_APPROVAL_TIMEOUT_SECONDS", default_value_t = 300)]
    pub approval_timeout_seconds: u64,
    /// What an expired approval decides when its policy says nothing: deny or approve.
    #[arg(long, env = "JOCH_APPROVAL_FALLBACK", default_value = "deny")]
    pub approval_fallback: ApprovalFallback,
    /// How long a hook-mode call may run in the agent before, with no
    /// result reported, it is marked Unknown.
    #[arg(long, env = "JOCH_HOOK_RESULT_TIMEOUT_SECONDS", default_value_t = 600)]
    pub hook_result_timeout_seconds: u64,
    /// A directory for artifact contents (handles, media). Default:
    /// `<db>.artifacts` beside a SQLite database; with --store, the
    /// PostgreSQL database itself, which every replica reads.
    #[arg(long, env = "JOCH_ARTIFACTS_DIR")]
    pub artifacts_dir: Option<PathBuf>,
    /// How old an artifact file no record names must be before it is
    /// deleted (at startup, then as often); covers writes in flight.
    #[arg(long, env = "JOCH_ARTIFACT_GRACE_SECONDS", default_value_t = 3600)]
    pub artifact_grace_seconds: u64,
    /// How long a call whose tool may safely run twice (read-only or
    /// idempotent, no idempotency key) may run before its `Running` record
    /// is written; one that settles sooner is written once, settled. 0
    /// writes every call as it starts.
    #[arg(long, env = "JOCH_INTENT_GRACE_MS", default_value_t = 100)]
    pub intent_grace_ms: u64,
    /// Listen on a non-loopback address without authentication.
    #[arg(long, env = "JOCH_INSECURE")]
    pub insecure: bool,
    /// joch's base URL as its clients reach it (scheme, host, port; behind
    /// a proxy, the proxy's): the resource named by the OAuth
    /// protected-resource metadata and 401 challenges, and the audience
    /// JWTs are issued for. Default: `http://` and the listening address.
    #[arg(long, env = "JOCH_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Accept JWTs of this identity provider (`iss`), whose signing keys
    /// --jwt-jwks gives. Turns authentication on, and is named as the
    /// authorization server in the protected-resource metadata.
    #[arg(long, env = "JOCH_JWT_ISSUER", requires = "jwt_jwks")]
    pub jwt_issuer: Option<String>,
    /// The one `aud` JWTs must carry. Default: a resource of this joch,
    /// i.e. --public-url or the URL of one of its MCP endpoints (the
    /// namespace's own, for a namespaced endpoint).
    #[arg(long, env = "JOCH_JWT_AUDIENCE", requires = "jwt_issuer")]
    pub jwt_audience: Option<String>,
    /// The provider's signing keys: a JWKS file, or an http(s) URL read at start.
    #[arg(long, env = "JOCH_JWT_JWKS", requires = "jwt_issuer")]
    pub jwt_jwks: Option<String>,
    #[command(flatten)]
    pub sign_ins: SignInArgs,
    #[command(flatten)]
    pub edge: EdgeArgs,
    /// The root token (admin in every namespace). Setting it turns
    /// authentication on; read from the environment only, never a flag.
    #[arg(skip = std::env::var("JOCH_ADMIN_TOKEN").ok().filter(|t| !t.is_empty()))]
    pub admin_token: Option<String>,
    /// The token vault's keys: a file of base64 32-byte keys, one a line;
    /// the first seals, the others only open (rotation). Overrides
    /// JOCH_VAULT_KEY (one key, read from the environment only).
    #[arg(long, env = "JOCH_VAULT_KEY_FILE", value_name = "FILE")]
    pub vault_key_file: Option<PathBuf>,
    /// Put calls' arguments and results on their trace spans (off: spans
    /// carry names, ids and outcomes only).
    #[arg(long, env = "JOCH_TRACE_CONTENT")]
    pub trace_content: bool,
    /// Sign each namespace's audit chain head with this Ed25519 key (a file
    /// of 64 hex digits, from `joch audit keygen`); unset, nothing is signed.
    #[arg(long, env = "JOCH_AUDIT_SIGNING_KEY", value_name = "FILE")]
    pub audit_signing_key: Option<PathBuf>,
    /// Sign a moving chain head at least this often, in seconds.
    #[arg(long, env = "JOCH_AUDIT_CHECKPOINT_SECONDS", default_value_t = 60)]
    pub audit_checkpoint_seconds: u64,
    /// Or sooner, once this many entries were appended since the last.
    #[arg(long, env = "JOCH_AUDIT_CHECKPOINT_ENTRIES", default_value_t = 10_000)]
    pub audit_checkpoint_entries: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApprovalFallback {
    Deny,
    Approve,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A file, or a directory of .yaml/.yml/.json files; `-` reads stdin.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Namespace for resources that name none.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ResourceKind {
    #[value(alias = "tool")]
    Tools,
    #[value(alias = "toolcall", alias = "tc")]
    Toolcalls,
    #[value(alias = "policy")]
    Policies,
    #[value(alias = "approval")]
    Approvals,
    #[value(alias = "execution")]
    Executions,
    #[value(alias = "mcpserver")]
    Mcpservers,
}

impl ResourceKind {
    pub fn plural(self) -> &'static str {
        match self {
            ResourceKind::Tools => "tools",
            ResourceKind::Toolcalls => "toolcalls",
            ResourceKind::Policies => "policies",
            ResourceKind::Approvals => "approvals",
            ResourceKind::Executions => "executions",
            ResourceKind::Mcpservers => "mcpservers",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Wide,
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// What to list.
    pub kind: ResourceKind,
    /// One resource by name, instead of a list.
    pub name: Option<String>,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Table (default), wide table, YAML or JSON.
    #[arg(short, long)]
    pub output: Option<OutputFormat>,
    /// Only resources whose labels match, e.g. `team=support`.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Most items to show.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Tool calls in this phase only, e.g. `Unknown`.
    #[arg(long)]
    pub phase: Option<String>,
    /// Tool calls of this tool only.
    #[arg(long)]
    pub tool: Option<String>,
    /// Tool calls of this execution only.
    #[arg(long)]
    pub execution: Option<String>,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// What kind of resource.
    pub kind: ResourceKind,
    /// Its name.
    pub name: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
}

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The tool's name.
    pub tool: String,
    /// The arguments, as a JSON object.
    #[arg(long, default_value = "{}")]
    pub input: String,
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// Call id to use (a provider's id, say); one is minted if absent.
    #[arg(long)]
    pub id: Option<String>,
    /// The user or session the call is made for (`spec.callerId`).
    #[arg(long)]
    pub caller: Option<String>,
    /// The execution (agent run) the call belongs to.
    #[arg(short = 'e', long)]
    pub execution: Option<String>,
    /// The agent making the call.
    #[arg(long)]
    pub agent: Option<String>,
    /// How to print the settled record (default yaml).
    #[arg(short, long, default_value = "yaml")]
    pub output: RecordFormat,
}

/// How `joch call` prints the record it gets back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordFormat {
    Yaml,
    Json,
}
