//! `/v1/namespaces/{ns}/credentials[/{name}]`: the token vault. Lists show
//! whose token it is, for which upstream and until when; never the sealed
//! token.

use axum::Json;
use axum::extract::State;
use joch_core::credential::Credential;
use serde_json::{Value, json};

use crate::extract::{Caller, Path};
use crate::{ApiError, AppState};

fn shown(credential: &Credential) -> Value {
    let spec = &credential.spec;
    json!({
        "apiVersion": credential.api_version,
        "kind": credential.kind,
        "metadata": credential.metadata,
        "spec": {
            "upstream": spec.upstream,
            "user": spec.user,
            "grant": spec.grant,
            "scope": spec.scope,
            "obtainedAt": spec.obtained_at,
            "expiresAt": spec.expires_at,
            "keyId": spec.key_id,
        },
    })
}

pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path(ns): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let credentials = state.engine.vault().list(&by, &ns).await?;
    Ok(Json(
        json!({"items": credentials.iter().map(shown).collect::<Vec<_>>()}),
    ))
}

pub(crate) async fn revoke(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let credential = state.engine.vault().revoke(&by, &ns, &name).await?;
    Ok(Json(shown(&credential)))
}
