//! joch-engine: the one path every tool call takes.
//!
//! ```text
//! resolve tool → normalise args → checksum → request hook (policies,
//!   approvals) → validate input → claim the key → record Pending
//!   → Running (synced before a side effect) → backend → validate output
//!   → result hook → record Succeeded / Failed (synced before the answer)
//! ```
//! A call that needs no durable intent is written once, settled (see
//! `calls/admission/`).
//!
//! The engine holds an `Arc<dyn Store>` and one `Arc<dyn ToolBackend>` per
//! backend type; it never sees SQL or HTTP. Its errors are `EngineError`:
//! a tool that fails is not an error, it is a call that ends `Failed`.
#![warn(missing_docs)]

mod approvals;
mod artifacts;
mod audit;
mod calls;
mod catalog;
mod clock;
mod config;
mod engine;
mod error;
mod events;
mod glob;
mod identity;
mod lifecycle;
mod lists;
mod mcp;
pub mod policies;
mod resources;
mod rules;
mod signal;
mod telemetry;
mod tracing_spans;
pub mod vault;

pub use approvals::{ApprovalDecision, Approvals, ConsentReply, InboxItem};
pub use artifacts::Artifacts;
pub use audit::{
    Audit, AuditLine, AuditProblem, AuditReport, CheckedEntry, CheckpointSigner, CheckpointSigning,
    RecordAudit,
};
pub use calls::{
    BATCH_LABEL, Batch, CallBucket, CallOutcome, CallWindow, Calls, ChunkFollower, Deferred,
    FOLLOW_QUEUE, HookResult, HookVerdict, MAX_KEY_LEN, MintedName, RecoveryReport, Replay,
    ReplayMode, Resolve, Retry, named_values, validate_key,
};
pub use config::EngineConfig;
pub use engine::{Engine, Running};
pub use error::{EngineError, NotFoundKind};
pub use events::Event;

pub use identity::{
    Action, ActionKind, Allowance, Collection, ConsoleSession, HostAccess, Identity, JwtConfig,
    SessionOpened, SignInLimits, SignInPending, SignInStarted, TOO_MANY_SIGN_INS, action_table,
    acts_in_several, is_operator, may, may_in, pkce_challenge,
};
pub use joch_core::{Principal, PrincipalKind, PrincipalRef, ToolSelector};
pub use joch_store::{CostGroup, CostTotal, ObjectList};
pub use lifecycle::Workers;
pub use lists::ListParams;
pub use mcp::{
    AttachedClient, MAX_CLIENT_BYTES, MAX_SUBSCRIPTIONS, MCP_SESSION_KIND, Mcp, McpSession,
    McpSessionLimits, StreamSigner, TOO_MANY_SESSIONS, UpstreamNotice, drift_timeline,
    principal_key,
};
pub use policies::{Policies, Progress};
pub use resources::{Configurable, Resources};
pub use vault::{Credentials, Vault, VaultKeys};
