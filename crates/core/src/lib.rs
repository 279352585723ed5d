//! joch-core: the vocabulary every other joch crate speaks.
//!
//! It owns the resources (`Tool`, `ToolCall`) in their Kubernetes shape, the
//! `Phase` state machine that a call moves through, argument normalisation,
//! the content checksum, name and label-selector rules, and the `ToolBackend`
//! seam that executes a tool.
//!
//! It must not do I/O: no files, no sockets, no clock reads, no async runtime.
//! Times and ids are handed in by the engine, so everything here is
//! deterministic and unit-testable.
#![warn(missing_docs)]

pub mod actions;
pub mod approval;
pub mod artifact;
pub mod artifact_tools;
pub mod audit;
pub mod backend;
pub mod backtest;
pub mod checksum;
pub mod codes;
pub mod cost;
pub mod credential;
pub mod detect;
pub mod endpoint;
pub mod envelope;
pub mod error;
pub mod execution;
pub mod expr;
pub mod host;
pub mod limits;
pub mod mcp;
pub mod mcp_surface;
pub mod meta;
pub mod names;
pub mod namespace;
pub mod normalize;
pub mod object;
pub mod patch;
pub mod phase;
pub mod policy;
pub mod principal;
pub mod redact;
pub mod selector;
pub mod template;
pub mod token;
pub mod tool;
pub mod toolcall;
pub mod traceparent;

pub use approval::{Approval, ApprovalPhase, StandingApproval};
pub use artifact::{Artifact, ArtifactRef, ArtifactRole};
pub use backend::{
    ActionInputs, Invocation, OutputChunks, ToolBackend, ToolDiscovery, ToolFailure, ToolOutput,
};
pub use checksum::{checksum, run_digest};
pub use codes::{ApprovalActionKind, DecisionKind, ErrorCode, EventKind, HookAnswer, RefusalCode};
pub use cost::{Budget, CallCost, ToolCost};
pub use endpoint::Endpoint;
pub use error::{FieldError, ValidationError};
pub use execution::{DenialPolicy, Execution, ExecutionPhase};
pub use mcp::McpServer;
pub use meta::{API_VERSION, ObjectMeta, ObjectRef, Time};
pub use namespace::Namespace;
pub use object::Object;
pub use phase::{IllegalTransition, Phase};
pub use policy::{Hook, Policy};
pub use principal::{Namespaces, Principal, PrincipalKind, PrincipalRef, ToolSelector};
pub use selector::LabelSelector;
pub use tool::{
    Backend, Observability, RestBackend, RestEndpoint, SideEffectLevel, SideEffects, Tool, ToolSpec,
};
pub use toolcall::{
    CallApproval, CallError, CallMode, CallSideEffects, HookDecision, Resolution, RunsOn, ToolCall,
    ToolCallSpec, ToolCallStatus,
};
