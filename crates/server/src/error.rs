//! `ApiError`: the one error type of the HTTP surface.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use joch_engine::EngineError;
use serde_json::{Value, json};

/// An API failure: a status, a stable snake_case `code`, a message for
/// people and structured `details`.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable cause, e.g. `tool_not_found`.
    pub code: String,
    /// For people.
    pub message: String,
    /// Structured detail (fields at fault, limits, ...); `{}` when none.
    pub details: Value,
}

impl ApiError {
    /// An error with empty details.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
            details: json!({}),
        }
    }

    /// Adds details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let message = e.to_string();
        match e {
            EngineError::NotFound { kind, name } => ApiError::new(
                StatusCode::NOT_FOUND,
                &format!("{}_not_found", kind.to_lowercase()),
                message,
            )
            .with_details(json!({"kind": kind, "name": name})),
            EngineError::AlreadyExists { kind, name } => {
                ApiError::new(StatusCode::CONFLICT, "already_exists", message)
                    .with_details(json!({"kind": kind, "name": name}))
            }
            EngineError::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            EngineError::Invalid(v) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_resource",
                message,
            )
            .with_details(json!({"fields": v.0})),
            EngineError::InvalidIdempotencyKey(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "invalid_idempotency_key", message)
            }
            EngineError::IdempotencyKeyReused { call } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                message,
            )
            .with_details(json!({"toolCall": call})),
            EngineError::IdempotencyKeyInUse { call } => {
                ApiError::new(StatusCode::CONFLICT, "idempotency_key_in_use", message)
                    .with_details(json!({"toolCall": call}))
            }
            EngineError::Refused { code, .. } => ApiError::new(StatusCode::CONFLICT, code, message),
            EngineError::Forbidden(_) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", message),
            EngineError::BadRequest(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
            }
            EngineError::Unavailable(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                message,
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = %self.code, message = %self.message, "request failed");
        }
        let body = json!({"code": self.code, "message": self.message, "details": self.details});
        (self.status, axum::Json(body)).into_response()
    }
}
