//! joch-engine: the one path every tool call takes.
//!
//! ```text
//! resolve tool → normalise args → checksum → request hook (policies,
//!   approvals) → validate input → claim the key → record Pending
//!   → Running (synced before a side effect) → backend → validate output
//!   → result hook → record Succeeded / Failed (synced before the answer)
//! ```
//! A call that needs no durable intent is written once, settled (see
//! `admission.rs`).
//!
//! The engine holds an `Arc<dyn Store>` and one `Arc<dyn ToolBackend>` per
//! backend type; it never sees SQL or HTTP. Its errors are `EngineError`:
//! a tool that fails is not an error, it is a call that ends `Failed`.
#![warn(missing_docs)]

mod admission;
mod approvals;
mod artifact_tools;
mod artifacts;
mod audit;
mod backtest;
mod batches;
mod cache;
mod calls;
mod chunks;
mod context;
mod costs;
pub mod credentials;
mod detections;
mod engine;
mod envelopes;
mod error;
mod events;
mod execute;
mod hooked;
mod hooks;
mod idempotency;
mod mcp;
mod mcp_sessions;
mod mcp_surface;
pub mod policy;
mod ratelimit;
mod recovery;
mod replay;
mod replicas;
mod resources;
mod resumed;
mod rules;
mod running;
mod schema;
mod sessions;
mod signin;
mod telemetry;
mod tokens;
mod tracing_spans;

pub use approvals::{ApprovalDecision, ConsentReply, InboxItem};
pub use audit::{
    AuditLine, AuditProblem, AuditReport, CheckedEntry, CheckpointSigner, CheckpointSigning,
    RecordAudit,
};
pub use backtest::Progress;
pub use batches::{BATCH_LABEL, Batch};
pub use calls::CallOutcome;
pub use chunks::{ChunkFollower, FOLLOW_QUEUE};
pub use credentials::{Credentials, VaultKeys};
pub use engine::{Engine, EngineConfig, ListParams};
pub use error::EngineError;
pub use events::Event;
pub use hooked::{Deferred, HookResult, HookVerdict, named_values};
pub use idempotency::{MAX_KEY_LEN, validate_key};
pub use joch_core::{Principal, PrincipalKind, PrincipalRef, ToolSelector};
pub use joch_store::{CostGroup, CostTotal, ObjectList};
pub use mcp::drift_timeline;
pub use mcp_sessions::{
    MAX_CLIENT_BYTES, MCP_SESSION_KIND, McpSession, McpSessionLimits, TOO_MANY_SESSIONS,
    principal_key,
};
pub use mcp_surface::{AttachedClient, UpstreamNotice};
pub use recovery::{RecoveryReport, Resolve};
pub use replay::{Replay, ReplayMode};
pub use resources::Configurable;
pub use rules::may_read;
pub use running::{Running, Workers};
pub use sessions::{ConsoleSession, SessionOpened};
pub use signin::{SIGN_IN_TTL, SignInPending, SignInStarted, pkce_challenge};
pub use tokens::JwtConfig;
