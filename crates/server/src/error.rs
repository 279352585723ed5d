//! `ApiError`: the one error type of the HTTP surface.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
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
    /// Seconds after which trying again may succeed: the `Retry-After`
    /// header, when set.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with empty details.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
            details: json!({}),
            retry_after: None,
        }
    }

    /// Adds details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// Says when to try again (`Retry-After`, whole seconds, at least 1).
    pub fn with_retry_after(mut self, after: std::time::Duration) -> Self {
        self.retry_after = Some(after.as_secs().max(1));
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
            EngineError::Refused { code, .. } => {
                ApiError::new(StatusCode::CONFLICT, code.as_str(), message)
            }
            EngineError::Throttled {
                code, retry_after, ..
            } => ApiError::new(StatusCode::TOO_MANY_REQUESTS, code.as_str(), message)
                .with_details(json!({"retryAfterSeconds": retry_after.as_secs().max(1)}))
                .with_retry_after(retry_after),
            EngineError::Forbidden(_) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", message),
            EngineError::InvalidQuery { parameter, .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
                    .with_details(json!({"parameter": parameter}))
            }
            EngineError::InvalidDecision(_)
            | EngineError::Misdirected(_)
            | EngineError::PathMismatch(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
            }
            EngineError::Store(_) | EngineError::Contended(_) | EngineError::Artifacts { .. } => {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    message,
                )
            }
            EngineError::TaskFailed { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"code": self.code, "message": self.message, "details": self.details});
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        if self.status.is_server_error() {
            response.extensions_mut().insert(Failure {
                code: self.code,
                message: self.message,
            });
        }
        response
    }
}

/// What a 5xx answer was about, for the line [`log_server_errors`] writes.
#[derive(Debug, Clone)]
struct Failure {
    code: String,
    message: String,
}

/// Logs every 5xx answer once, whichever surface gave it (a handler's
/// `ApiError`, the MCP service, a panic caught lower down): client
/// mistakes are 4xx and are not logged.
pub(crate) async fn log_server_errors(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    if response.status().is_server_error() {
        let failure = response.extensions().get::<Failure>();
        tracing::error!(
            %method,
            %path,
            status = response.status().as_u16(),
            code = failure.map_or("", |f| f.code.as_str()),
            message = failure.map_or("", |f| f.message.as_str()),
            "request failed"
        );
    }
    response
}
