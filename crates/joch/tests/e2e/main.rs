//! End-to-end tests: the real `joch` binary over HTTP, with real webhooks,
//! on real SQLite files, and on PostgreSQL where the store makes a
//! difference (`storetest!`, with `JOCH_TEST_POSTGRES`). One test binary, a
//! module per area; `harness` starts servers (`Joch::builder()`).

#![allow(clippy::unwrap_used)]

mod harness;
mod host_access;

mod approval_binding;
mod approvals;
mod artifacts;
mod audit;
mod audit_tamper;
mod auth;
mod backtest;
mod calls;
mod cancels;
mod cli;
mod console;
mod console_pages;
mod console_signins;
mod costs;
mod crash;
mod declarative;
mod docs;
mod edge;
mod elicitation;
mod errors;
mod events;
mod exhaustion;
mod faults;
mod gate;
mod hooks;
mod hooks_claude;
mod idempotency;
mod library;
mod limits;
mod load;
mod mcp;
mod mcp_abandoned;
mod mcp_answers;
mod mcp_client;
mod mcp_direct;
mod mcp_front;
mod mcp_front_listen;
mod mcp_listen;
mod mcp_resume;
mod mcp_rounds;
mod mcp_sessions;
mod mcp_stateless;
mod mcp_surface;
mod mcp_tasks;
mod mcp_upstream;
mod metrics;
mod openapi;
mod pg_restart;
mod policies;
mod policy_budget;
mod ranges;
mod recovery;
mod replay;
mod replicas;
mod resources;
mod rulebook;
mod streaming;
mod timings;
mod traces;
mod trust;
mod visibility;
