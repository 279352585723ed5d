//! joch's own extractors: bodies (JSON or YAML), query strings and path
//! segments, whose every rejection is a structured [`ApiError`].

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use joch_core::{API_VERSION, Object};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::ApiError;

/// A resource manifest in the body, as JSON or (with a YAML content type)
/// YAML, checked to be of kind `T`.
pub struct Manifest<T>(pub T);

impl<S: Send + Sync, T: Object> FromRequest<S> for Manifest<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let value = T::upgrade(body_value(req, state).await?);
        check_type::<T>(&value)?;
        Ok(Manifest(typed(value)?))
    }
}

/// A plain JSON or YAML request body (not a resource), e.g. a replay request.
/// An empty body is read as `{}`.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let empty = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|l| l == "0");
        let value = if empty {
            json!({})
        } else {
            body_value(req, state).await?
        };
        Ok(Body(typed(value)?))
    }
}

async fn body_value<S: Send + Sync>(req: Request, state: &S) -> Result<Value, ApiError> {
    let format = Format::of(req.headers().get(header::CONTENT_TYPE));
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "request body is larger than the server accepts",
            )
        } else {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "malformed_body",
                rejection.body_text(),
            )
        }
    })?;
    format.parse(&bytes)
}

/// Deserialises a parsed body, naming the field at fault.
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_resource",
            format!("{field}: {}", e.inner()),
        )
        .with_details(json!({"fields": [{"field": field, "message": e.inner().to_string()}]}))
    })
}

enum Format {
    Json,
    Yaml,
}

impl Format {
    /// YAML when the content type says so; JSON otherwise, including
    /// curl's default `application/x-www-form-urlencoded` for `-d`.
    fn of(content_type: Option<&header::HeaderValue>) -> Format {
        let mime = content_type
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let mime = joch_core::artifact::media_essence(mime);
        match mime.as_str() {
            "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml" => Format::Yaml,
            m if m.ends_with("+yaml") => Format::Yaml,
            _ => Format::Json,
        }
    }

    fn parse(&self, bytes: &[u8]) -> Result<Value, ApiError> {
        let malformed = |message: String, details: Value| {
            ApiError::new(StatusCode::BAD_REQUEST, "malformed_body", message).with_details(details)
        };
        match self {
            Format::Json => serde_json::from_slice(bytes).map_err(|e| {
                malformed(
                    format!("body is not valid JSON: {e}"),
                    json!({"line": e.line(), "column": e.column()}),
                )
            }),
            Format::Yaml => serde_yaml_ng::from_slice(bytes).map_err(|e| {
                let at = e
                    .location()
                    .map(|l| json!({"line": l.line(), "column": l.column()}))
                    .unwrap_or(json!({}));
                malformed(format!("body is not valid YAML: {e}"), at)
            }),
        }
    }
}

/// A wrong `apiVersion` or `kind` is a 400: the client sent the wrong thing
/// altogether, not a thing with a bad field. Absent ones are filled in.
fn check_type<T: Object>(value: &Value) -> Result<(), ApiError> {
    if !value.is_object() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_body",
            "body must be a JSON or YAML object",
        ));
    }
    if let Some(v) = value
        .get("apiVersion")
        .filter(|v| v.as_str() != Some(API_VERSION))
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_api_version",
            format!("apiVersion must be {API_VERSION:?}, got {v}"),
        ));
    }
    if let Some(k) = value.get("kind").filter(|k| k.as_str() != Some(T::KIND)) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_kind",
            format!("this endpoint takes kind {:?}, got {k}", T::KIND),
        ));
    }
    Ok(())
}

/// Query parameters; a malformed query string is a 400 `bad_request`.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))
    }
}

/// Path parameters; an undecodable segment is a 400 `bad_request`.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))
    }
}

/// Who is asking, as the authentication middleware established it: a
/// token's, a JWT's or root's principal, or the local one when joch has no
/// authentication. Every engine entry point that makes, decides or settles
/// a call takes it. Missing (a route the middleware did not cover) is 401,
/// never a silent local caller.
pub struct Caller(pub joch_engine::Principal);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<joch_engine::Principal>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "this request carries no authenticated principal",
                )
            })
    }
}
