//! `/v1/namespaces/{ns}/tokens[/{name}]`: bearer tokens. A token's secret is
//! in the answer to its creation and nowhere else; lists show names and roles.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use joch_core::ToolSelector;
use joch_core::token::{ApiToken, Role};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::extract::{Body, Caller, Path};
use crate::{ApiError, AppState};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewToken {
    /// Who holds it; recorded as the approver of its decisions.
    name: String,
    /// `agent`, `approver` or `admin`.
    #[schema(value_type = String, pattern = "^(agent|approver|admin)$")]
    role: Role,
    /// The tools that exist for its holder (`{"names": ["crm.*"],
    /// "labels": "team=crm"}`); absent: every tool of the namespace.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    tools: Option<ToolSelector>,
}

fn shown(token: &ApiToken) -> Value {
    let mut spec = json!({"role": token.spec.role});
    if let Some(tools) = &token.spec.tools {
        spec["tools"] = json!(tools);
    }
    json!({
        "apiVersion": token.api_version,
        "kind": token.kind,
        "metadata": token.metadata,
        "spec": spec,
    })
}

pub(crate) async fn create(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
    Body(new): Body<NewToken>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let (token, secret) = state
        .engine
        .identity()
        .issue_token(&by, &ns, &new.name, new.role, new.tools)
        .await?;
    let mut answer = shown(&token);
    answer["token"] = json!(secret);
    Ok((StatusCode::CREATED, Json(answer)))
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let tokens = state.engine.identity().list_tokens(&by, &ns).await?;
    Ok(Json(
        json!({"items": tokens.iter().map(shown).collect::<Vec<_>>()}),
    ))
}

pub(crate) async fn revoke(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let token = state
        .engine
        .identity()
        .revoke_token(&by, &ns, &name)
        .await?;
    Ok(Json(shown(&token)))
}
