//! `/v1/namespaces/{ns}/credentials[/{name}]`: the token vault. Lists show
//! whose token it is, for which upstream and until when; never the sealed
//! token.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Html;
use joch_core::credential::Credential;
use joch_engine::ConsentReply;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::extract::{Caller, Path, Query};
use crate::{ApiError, ApiWord, AppState};

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

/// What an authorization server sends the user's browser back with
/// (RFC 6749 §4.1.2).
#[derive(Deserialize)]
pub(crate) struct Callback {
    state: String,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    error: Option<String>,
    /// The authorization server's issuer (RFC 9207).
    #[serde(default)]
    iss: Option<String>,
}

/// `GET /oauth/callback`: a user's consent comes back; the waiting call
/// runs (or, declined, is denied). No principal: the single-use `state`
/// is the authority (see the engine's `oauth_callback`).
pub(crate) async fn callback(
    State(state): State<AppState>,
    Query(back): Query<Callback>,
) -> Result<Html<&'static str>, ApiError> {
    let reply = match (&back.code, &back.error) {
        (_, Some(error)) => ConsentReply::Declined(error),
        (Some(code), None) => ConsentReply::Code(code, back.iss.as_deref()),
        (None, None) => {
            let message = "give code (the user consented) or error (they did not)";
            return Err(
                ApiError::new(StatusCode::BAD_REQUEST, ApiWord::BadRequest, message)
                    .with_details(json!({"parameter": "code"})),
            );
        }
    };
    let declined = matches!(reply, ConsentReply::Declined(_));
    state
        .engine
        .approvals()
        .oauth_callback(&back.state, reply)
        .await?;
    Ok(Html(if declined {
        "<!doctype html><title>joch</title><p>Consent declined: the call will not run. You may close this window.</p>"
    } else {
        "<!doctype html><title>joch</title><p>Consent recorded: the call runs now. You may close this window.</p>"
    }))
}

/// `GET /oauth/client-metadata.json`: joch's Client ID Metadata Document,
/// whose URL is joch's client id at servers that take one.
pub(crate) async fn client_metadata(
    State(state): State<AppState>,
) -> Result<Json<Value>, ApiError> {
    state
        .engine
        .vault()
        .client_metadata()
        .map(Json)
        .ok_or_else(|| {
            let message = "joch serves no client metadata: it has no token vault";
            ApiError::new(StatusCode::NOT_FOUND, ApiWord::NotFound, message)
        })
}
