//! `ApiError`: the one error type of the HTTP surface.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use joch_core::RefusalCode;
use joch_engine::EngineError;
use serde_json::{Value, json};

/// The closed set of causes the HTTP surface names itself: each with one
/// wire string ([`ApiWord::as_str`]).
macro_rules! api_words {
    ($($variant:ident = $text:literal,)*) => {
        /// A cause the HTTP surface names itself (beside the engine's
        /// refusals and `{kind}_not_found`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ApiWord {
            $(
                #[doc = $text]
                $variant,
            )*
        }

        impl ApiWord {
            /// Every word, in declaration order.
            pub const ALL: &'static [ApiWord] = &[$(ApiWord::$variant,)*];

            /// The wire string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ApiWord::$variant => $text,)*
                }
            }
        }
    };
}

api_words! {
        AlreadyExists = "already_exists",
        BadRequest = "bad_request",
        Conflict = "conflict",
        CrossSiteRequest = "cross_site_request",
        CsrfRefused = "csrf_refused",
        Forbidden = "forbidden",
        IdempotencyKeyInUse = "idempotency_key_in_use",
        IdempotencyKeyReused = "idempotency_key_reused",
        Internal = "internal",
        InternalError = "internal_error",
        InvalidApiVersion = "invalid_api_version",
        InvalidIdempotencyKey = "invalid_idempotency_key",
        InvalidKind = "invalid_kind",
        InvalidNamespace = "invalid_namespace",
        InvalidParameter = "invalid_parameter",
        InvalidResource = "invalid_resource",
        MalformedBody = "malformed_body",
        MethodNotAllowed = "method_not_allowed",
        MisdirectedRequest = "misdirected_request",
        NotAcceptable = "not_acceptable",
        NotFound = "not_found",
        PayloadTooLarge = "payload_too_large",
        RangeNotSatisfiable = "range_not_satisfiable",
        RouteNotFound = "route_not_found",
        SessionNotFound = "session_not_found",
        StoreUnavailable = "store_unavailable",
        TooManyStreams = "too_many_streams",
        UnknownEventId = "unknown_event_id",
        Unauthenticated = "unauthenticated",
        Unauthorized = "unauthorized",
        UnsupportedHookEvent = "unsupported_hook_event",
        UnsupportedMediaType = "unsupported_media_type",
}

/// The stable, machine-readable cause of an API failure (`code`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiCode {
    /// One of the HTTP surface's own words.
    Word(ApiWord),
    /// The engine refused in the resource's state, or beyond a cap.
    Refused(RefusalCode),
    /// `{kind}_not_found`, the kind lowercased (`tool_not_found`).
    NotFound(String),
}

impl ApiCode {
    /// The missing `kind`'s code.
    pub fn not_found(kind: &str) -> Self {
        ApiCode::NotFound(format!("{}_not_found", kind.to_lowercase()))
    }

    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            ApiCode::Word(word) => word.as_str(),
            ApiCode::Refused(code) => code.as_str(),
            ApiCode::NotFound(code) => code,
        }
    }
}

impl From<ApiWord> for ApiCode {
    fn from(word: ApiWord) -> Self {
        ApiCode::Word(word)
    }
}

impl From<RefusalCode> for ApiCode {
    fn from(code: RefusalCode) -> Self {
        ApiCode::Refused(code)
    }
}

impl PartialEq<&str> for ApiCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl serde::Serialize for ApiCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// An API failure: a status, a stable snake_case `code`, a message for
/// people and structured `details`.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable cause, e.g. `tool_not_found`.
    pub code: ApiCode,
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
    pub fn new(status: StatusCode, code: impl Into<ApiCode>, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.into(),
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
                ApiCode::not_found(kind.as_str()),
                message,
            )
            .with_details(json!({"kind": kind.as_str(), "name": name})),
            EngineError::AlreadyExists { kind, name } => {
                ApiError::new(StatusCode::CONFLICT, ApiWord::AlreadyExists, message)
                    .with_details(json!({"kind": kind, "name": name}))
            }
            EngineError::Conflict(_) => {
                ApiError::new(StatusCode::CONFLICT, ApiWord::Conflict, message)
            }
            EngineError::Invalid(v) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ApiWord::InvalidResource,
                message,
            )
            .with_details(json!({"fields": v.0})),
            EngineError::InvalidIdempotencyKey(_) => ApiError::new(
                StatusCode::BAD_REQUEST,
                ApiWord::InvalidIdempotencyKey,
                message,
            ),
            EngineError::IdempotencyKeyReused { call } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ApiWord::IdempotencyKeyReused,
                message,
            )
            .with_details(json!({"toolCall": call})),
            EngineError::IdempotencyKeyInUse { call } => {
                ApiError::new(StatusCode::CONFLICT, ApiWord::IdempotencyKeyInUse, message)
                    .with_details(json!({"toolCall": call}))
            }
            EngineError::Refused { code, .. } => ApiError::new(StatusCode::CONFLICT, code, message),
            EngineError::Throttled {
                code, retry_after, ..
            } => ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message)
                .with_details(json!({"retryAfterSeconds": retry_after.as_secs().max(1)}))
                .with_retry_after(retry_after),
            EngineError::Forbidden(_) => {
                ApiError::new(StatusCode::FORBIDDEN, ApiWord::Forbidden, message)
            }
            EngineError::InvalidQuery { parameter, .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, ApiWord::BadRequest, message)
                    .with_details(json!({"parameter": parameter}))
            }
            EngineError::InvalidDecision(_)
            | EngineError::Misdirected(_)
            | EngineError::PathMismatch(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, ApiWord::BadRequest, message)
            }
            EngineError::Store(_) | EngineError::Contended(_) | EngineError::Artifacts { .. } => {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ApiWord::StoreUnavailable,
                    message,
                )
            }
            EngineError::TaskFailed { .. } => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ApiWord::InternalError,
                message,
            ),
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
    code: ApiCode,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_one_snake_case_word_on_the_wire() {
        let mut seen = std::collections::HashSet::new();
        for word in ApiWord::ALL {
            let text = word.as_str();
            assert!(
                text.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{text}"
            );
            assert!(seen.insert(text), "{text} twice");
        }
        let body = |code: ApiCode| {
            serde_json::to_value(ApiError::new(StatusCode::CONFLICT, code, "m").code).unwrap()
        };
        assert_eq!(body(ApiWord::BadRequest.into()), "bad_request");
        assert_eq!(
            body(RefusalCode::ApprovalDecided.into()),
            "approval_decided"
        );
        assert_eq!(body(ApiCode::not_found("ToolCall")), "toolcall_not_found");
    }
}
