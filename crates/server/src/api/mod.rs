//! Routes: `/v1/namespaces/{ns}/{plural}[/{name}]`, health, and structured
//! answers for unknown routes and methods.

mod approvals;
pub(crate) mod artifacts;
mod audit;
mod contexts;
mod costs;
mod credentials;
mod executions;
mod health;
mod mcpservers;
mod namespaces;
mod openapi;
mod policytests;
mod resources;
mod tokens;
mod toolcalls;
mod tools;

#[cfg(test)]
mod tests;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use joch_core::{
    API_VERSION, Budget, Endpoint, Execution, McpServer, Object, Policy, StandingApproval, Tool,
};
use joch_engine::ListParams;
use joch_engine::ObjectList;
use resources::{create, delete, get as read, list, replace};
use serde::{Deserialize, Serialize};

use crate::{ApiError, ApiWord, AppState, hooks};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .merge(health())
        .merge(configuration())
        .merge(executions())
        .merge(calls())
        .merge(administration())
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                ApiWord::RouteNotFound,
                "no such endpoint",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                ApiWord::MethodNotAllowed,
                "this endpoint does not take that method",
            )
        })
}

/// Liveness, readiness and the OpenAPI document.
fn health() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(openapi::serve))
}

/// Namespaces and the resources clients configure.
fn configuration() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/namespaces/{ns}",
            get(namespaces::get).put(namespaces::put),
        )
        .route(
            "/v1/namespaces/{ns}/tools",
            get(tools::list).post(create::<Tool>),
        )
        .route(
            "/v1/namespaces/{ns}/tools/{name}",
            get(tools::get).put(replace::<Tool>).delete(delete::<Tool>),
        )
        .route(
            "/v1/namespaces/{ns}/policies",
            get(list::<Policy>).post(create::<Policy>),
        )
        .route(
            "/v1/namespaces/{ns}/policies/{name}",
            get(read::<Policy>)
                .put(replace::<Policy>)
                .delete(delete::<Policy>)
                // `POST …/policies/test`: a policy named `test` stays readable.
                .post(policytests::test),
        )
        .route(
            "/v1/namespaces/{ns}/standingapprovals",
            get(list::<StandingApproval>),
        )
        .route(
            "/v1/namespaces/{ns}/standingapprovals/{name}",
            get(read::<StandingApproval>).delete(delete::<StandingApproval>),
        )
        .route(
            "/v1/namespaces/{ns}/endpoints",
            get(list::<Endpoint>).post(create::<Endpoint>),
        )
        .route(
            "/v1/namespaces/{ns}/endpoints/{name}",
            get(read::<Endpoint>)
                .put(replace::<Endpoint>)
                .delete(delete::<Endpoint>),
        )
        .route(
            "/v1/namespaces/{ns}/budgets",
            get(list::<Budget>).post(create::<Budget>),
        )
        .route(
            "/v1/namespaces/{ns}/budgets/{name}",
            get(read::<Budget>)
                .put(replace::<Budget>)
                .delete(delete::<Budget>),
        )
        .route(
            "/v1/namespaces/{ns}/mcpservers",
            get(list::<McpServer>).post(mcpservers::create),
        )
        .route(
            "/v1/namespaces/{ns}/mcpservers/{name}",
            get(read::<McpServer>)
                .put(mcpservers::replace)
                .delete(mcpservers::delete),
        )
        .route(
            "/v1/namespaces/{ns}/mcpservers/{name}/accept",
            post(mcpservers::accept),
        )
        .route(
            "/v1/namespaces/{ns}/mcpservers/{name}/refresh",
            post(mcpservers::refresh),
        )
}

/// Executions: their batches, events and artifacts, and the calls' contexts.
fn executions() -> Router<AppState> {
    Router::new()
        .route("/v1/namespaces/{ns}/artifacts/{name}", get(artifacts::get))
        .route(
            "/v1/namespaces/{ns}/artifacts/{name}/content",
            get(artifacts::content),
        )
        .route(
            "/v1/namespaces/{ns}/executions/{name}/artifacttools",
            get(artifacts::tools),
        )
        .route(
            "/v1/namespaces/{ns}/executions/{name}/artifacttools/{tool}",
            post(artifacts::call),
        )
        .route(
            "/v1/namespaces/{ns}/executions",
            get(list::<Execution>).post(create::<Execution>),
        )
        .route(
            "/v1/namespaces/{ns}/executions/{name}",
            get(read::<Execution>)
                .put(replace::<Execution>)
                .delete(delete::<Execution>),
        )
        .route(
            "/v1/namespaces/{ns}/executions/{name}/batches",
            post(executions::batch),
        )
        .route(
            "/v1/namespaces/{ns}/executions/{name}/events",
            get(executions::events),
        )
        .route(
            "/v1/namespaces/{ns}/executions/{name}/complete",
            post(executions::complete),
        )
        .route(
            "/v1/namespaces/{ns}/callcontexts/{name}",
            get(contexts::get),
        )
}

/// Tool calls, their approvals, and hook mode.
fn calls() -> Router<AppState> {
    Router::new()
        .route("/v1/hooks/aos", post(hooks::aos::default_namespace))
        .route(
            "/v1/namespaces/{ns}/hooks/aos",
            post(hooks::aos::in_namespace),
        )
        .route("/v1/hooks/claude", post(hooks::claude::default_namespace))
        .route(
            "/v1/namespaces/{ns}/hooks/claude",
            post(hooks::claude::in_namespace),
        )
        .route("/v1/namespaces/{ns}/approvals", get(approvals::list))
        .route("/v1/namespaces/{ns}/approvals/{name}", get(approvals::get))
        .route(
            "/v1/namespaces/{ns}/approvals/{name}/approve",
            post(approvals::approve),
        )
        .route(
            "/v1/namespaces/{ns}/approvals/{name}/deny",
            post(approvals::deny),
        )
        .route(
            "/v1/namespaces/{ns}/approvals/{name}/edit",
            post(approvals::edit),
        )
        .route(
            "/v1/namespaces/{ns}/toolcalls",
            get(toolcalls::list).post(toolcalls::create),
        )
        .route(
            "/v1/namespaces/{ns}/toolcalls/{name}",
            get(toolcalls::get).put(toolcalls::relabel),
        )
        .route(
            "/v1/namespaces/{ns}/toolcalls/{name}/replay",
            post(toolcalls::replay),
        )
        .route(
            "/v1/namespaces/{ns}/toolcalls/{name}/cancel",
            post(toolcalls::cancel),
        )
        .route(
            "/v1/namespaces/{ns}/toolcalls/{name}/resolve",
            post(toolcalls::resolve),
        )
}

/// Tokens, upstream credentials (and the OAuth callback and client
/// metadata they use), the audit and costs.
fn administration() -> Router<AppState> {
    Router::new()
        .route(
            "/v1/namespaces/{ns}/tokens",
            get(tokens::list).post(tokens::create),
        )
        .route("/oauth/callback", get(credentials::callback))
        .route(
            "/oauth/client-metadata.json",
            get(credentials::client_metadata),
        )
        .route("/v1/namespaces/{ns}/credentials", get(credentials::list))
        .route(
            "/v1/namespaces/{ns}/credentials/{name}",
            axum::routing::delete(credentials::revoke),
        )
        .route(
            "/v1/namespaces/{ns}/tokens/{name}",
            axum::routing::delete(tokens::revoke),
        )
        .route("/v1/namespaces/{ns}/audit", get(audit::list))
        .route("/v1/namespaces/{ns}/audit/verify", get(audit::verify))
        .route(
            "/v1/namespaces/{ns}/audit/checkpoints",
            get(audit::checkpoints),
        )
        .route("/v1/namespaces/{ns}/costs", get(costs::in_namespace))
        .route("/v1/costs", get(costs::everywhere))
}

/// Query parameters of every list endpoint.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ListQueryParams {
    label_selector: Option<String>,
    limit: Option<usize>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
    tool: Option<String>,
    phase: Option<String>,
    execution: Option<String>,
    agent: Option<String>,
    /// ToolCalls created at or after this RFC 3339 instant.
    created_since: Option<String>,
    /// ToolCalls created before this RFC 3339 instant.
    created_before: Option<String>,
}

impl From<ListQueryParams> for ListParams {
    fn from(q: ListQueryParams) -> Self {
        ListParams {
            label_selector: q.label_selector,
            limit: q.limit,
            continue_token: q.continue_token,
            tool: q.tool,
            phase: q.phase,
            execution: q.execution,
            agent: q.agent,
            created_since: q.created_since,
            created_before: q.created_before,
        }
    }
}

/// `{apiVersion, kind: ToolList, metadata: {continue}, items}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct List<T> {
    api_version: &'static str,
    kind: String,
    metadata: ListMeta,
    items: Vec<T>,
}

#[derive(Serialize)]
struct ListMeta {
    #[serde(rename = "continue", skip_serializing_if = "Option::is_none")]
    continue_token: Option<String>,
}

impl<T: Object> From<ObjectList<T>> for List<T> {
    fn from(list: ObjectList<T>) -> Self {
        List {
            api_version: API_VERSION,
            kind: format!("{}List", T::KIND),
            metadata: ListMeta {
                continue_token: list.continue_token,
            },
            items: list.items,
        }
    }
}
