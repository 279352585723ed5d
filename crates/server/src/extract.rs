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
use crate::ApiWord;

/// A resource manifest in the body, as JSON or (with a YAML content type)
/// YAML, checked to be of kind `T`.
pub struct Manifest<T>(pub T);

impl<S: Send + Sync, T: Object> FromRequest<S> for Manifest<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let (format, bytes) = body_bytes(req, state).await?;
        let value = T::upgrade(format.parse(&bytes)?);
        check_type::<T>(&value)?;
        match serde_path_to_error::deserialize(value) {
            Ok(manifest) => Ok(Manifest(manifest)),
            // Parsed again only now, so that a good manifest is not copied.
            Err(first) => Err(every_problem::<T>(T::upgrade(format.parse(&bytes)?), first)),
        }
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
    let (format, bytes) = body_bytes(req, state).await?;
    format.parse(&bytes)
}

async fn body_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<(Format, Bytes), ApiError> {
    let format = Format::of(req.headers().get(header::CONTENT_TYPE));
    let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ApiWord::PayloadTooLarge,
                "request body is larger than the server accepts",
            )
        } else {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                ApiWord::MalformedBody,
                rejection.body_text(),
            )
        }
    })?;
    Ok((format, bytes))
}

/// Deserialises a parsed body, naming the field at fault.
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            ApiWord::InvalidResource,
            format!("{field}: {}", e.inner()),
        )
        .with_details(json!({"fields": [{"field": field, "message": e.inner().to_string()}]}))
    })
}

/// How many unknown fields one answer names before it stops looking.
const MAX_PROBLEMS: usize = 20;

/// Every unknown field of a manifest (typos, most often), each at its
/// exact path, found by removing each one and trying again; the first
/// problem of another kind ends the list, as later ones may follow from it.
fn every_problem<T: DeserializeOwned>(
    mut value: Value,
    first: serde_path_to_error::Error<serde_json::Error>,
) -> ApiError {
    let mut problems = Vec::new();
    let mut error = Some(first);
    while let Some(e) = error.take() {
        let (at, message) = (e.path().to_string(), e.inner().to_string());
        let unknown = unknown_field(&message).and_then(|name| take_key(&mut value, &at, name));
        let exact = unknown.clone().unwrap_or_else(|| at.clone());
        problems.push(json!({"field": exact, "message": message}));
        if unknown.is_some() && problems.len() < MAX_PROBLEMS {
            error = serde_path_to_error::deserialize::<_, T>(&value).err();
        }
    }
    let message = problems
        .iter()
        .map(|p| {
            format!(
                "{}: {}",
                p["field"].as_str().unwrap_or(""),
                p["message"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        ApiWord::InvalidResource,
        message,
    )
    .with_details(json!({"fields": problems}))
}

/// The field serde's "unknown field `x`, expected ..." names.
fn unknown_field(message: &str) -> Option<&str> {
    message.strip_prefix("unknown field `")?.split('`').next()
}

/// Removes the unknown key `name` that serde reported at `at` (the key's
/// own path, or for a tagged enum the enum's: then the first key of that
/// name below it), answering its exact path.
fn take_key(value: &mut Value, at: &str, name: &str) -> Option<String> {
    let at = at.trim_matches('.');
    let parent = match at.rsplit_once('.') {
        Some((parent, last)) if last == name => parent,
        None if at == name => "",
        _ => at,
    };
    let mut node = value;
    for segment in parent.split('.').filter(|s| !s.is_empty()) {
        let (key, indexes) = segment.split_once('[').unwrap_or((segment, ""));
        node = node.get_mut(key)?;
        for index in indexes.split('[').filter(|i| !i.is_empty()) {
            node = node.get_mut(index.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    let found = take_below(node, name)?;
    Some(match parent {
        "" => found,
        parent => joined(parent, &found),
    })
}

fn take_below(node: &mut Value, name: &str) -> Option<String> {
    match node {
        Value::Object(map) => {
            if map.remove(name).is_some() {
                return Some(name.to_owned());
            }
            map.iter_mut()
                .find_map(|(key, child)| take_below(child, name).map(|at| joined(key, &at)))
        }
        Value::Array(items) => items.iter_mut().enumerate().find_map(|(i, child)| {
            take_below(child, name).map(|at| joined(&format!("[{i}]"), &at))
        }),
        _ => None,
    }
}

/// `a.b`, or `a[0]` for an index.
fn joined(parent: &str, child: &str) -> String {
    match child.starts_with('[') {
        true => format!("{parent}{child}"),
        false => format!("{parent}.{child}"),
    }
}

enum Format {
    Json,
    Yaml,
}

impl Format {
    /// YAML when the content type says so; JSON otherwise (the edge let
    /// only JSON and YAML types through, or no type for an empty body).
    fn of(content_type: Option<&header::HeaderValue>) -> Format {
        let mime = content_type
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        match crate::edge::is_yaml(&joch_core::artifact::media_essence(mime)) {
            true => Format::Yaml,
            false => Format::Json,
        }
    }

    fn parse(&self, bytes: &[u8]) -> Result<Value, ApiError> {
        let malformed = |message: String, details: Value| {
            ApiError::new(StatusCode::BAD_REQUEST, ApiWord::MalformedBody, message)
                .with_details(details)
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
            ApiWord::MalformedBody,
            "body must be a JSON or YAML object",
        ));
    }
    if let Some(v) = value
        .get("apiVersion")
        .filter(|v| v.as_str() != Some(API_VERSION))
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiWord::InvalidApiVersion,
            format!("apiVersion must be {API_VERSION:?}, got {v}"),
        ));
    }
    if let Some(k) = value.get("kind").filter(|k| k.as_str() != Some(T::KIND)) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            ApiWord::InvalidKind,
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
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, ApiWord::BadRequest, e.body_text()))
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
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, ApiWord::BadRequest, e.body_text()))
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
                    ApiWord::Unauthorized,
                    "this request carries no authenticated principal",
                )
            })
    }
}
