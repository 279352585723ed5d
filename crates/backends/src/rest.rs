//! `type: rest`: the call's input is POSTed (or sent with the tool's method)
//! as a JSON body; a 2xx JSON answer is the output. Anything else (a timeout,
//! a refused connection, a non-2xx status, a body that is not JSON or is too
//! large) is a failure recorded on the call.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use joch_core::artifact::is_media_type;
use joch_core::{
    Backend, ErrorCode, Invocation, RestEndpoint, ToolBackend, ToolFailure, ToolOutput,
};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Method, Response};
use serde_json::{Value, json};

mod stream;

/// Settings shared by every webhook call.
#[derive(Debug, Clone)]
pub struct RestConfig {
    /// Largest response body accepted, in bytes (default 16 MiB).
    pub max_response_bytes: usize,
    /// How much of a failing response's body is kept on the record (default 2 KiB).
    pub max_error_body_bytes: usize,
    /// Extra tries after a connection error or timeout, for tools where a
    /// repeat is safe (default 2).
    pub transport_retries: u32,
    /// Wait before the first retry, doubled for each next one (default 100 ms).
    pub retry_backoff: Duration,
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            max_response_bytes: 16 * 1024 * 1024,
            max_error_body_bytes: 2048,
            transport_retries: 2,
            retry_backoff: Duration::from_millis(100),
        }
    }
}

/// Executes `type: rest` tools over HTTP.
#[derive(Debug, Clone)]
pub struct WebhookBackend {
    client: Client,
    config: RestConfig,
}

impl WebhookBackend {
    /// A backend with its own connection pool. Redirects are not followed: a
    /// webhook that moved must be reconfigured, not silently chased.
    pub fn new(config: RestConfig) -> Result<Self, reqwest::Error> {
        install_crypto_provider();
        let client = crate::outbound::client_builder().build()?;
        Ok(Self { client, config })
    }
}

/// Makes ring rustls' process-wide TLS provider, unless one is already set.
/// reqwest is built without a provider of its own so that only ring (small,
/// quick to build) is compiled in.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[async_trait]
impl ToolBackend for WebhookBackend {
    fn kind(&self) -> &'static str {
        "rest"
    }

    async fn invoke(&self, call: Invocation<'_>) -> Result<Value, ToolFailure> {
        match &call.tool.spec.backend {
            Backend::Rest(rest) => {
                self.send(&rest.endpoint, &BTreeMap::new(), call.args, &call)
                    .await
            }
            other => Err(failure(
                ErrorCode::InvalidToolConfig,
                format!("a {:?} tool is not a webhook", other.kind()),
            )),
        }
    }

    /// A webhook may also answer media (`image/*`, `audio/*`, `video/*`,
    /// `application/pdf`) or text that is not JSON (JSON lines, CSV): those
    /// come back as bytes with their media type.
    async fn invoke_output(&self, call: Invocation<'_>) -> Result<ToolOutput, ToolFailure> {
        match &call.tool.spec.backend {
            Backend::Rest(rest) => {
                self.send_output(&rest.endpoint, &BTreeMap::new(), call.args, &call)
                    .await
            }
            _ => self.invoke(call).await.map(ToolOutput::Json),
        }
    }
}

impl WebhookBackend {
    /// Sends one request for `call` to `endpoint` with `body` as JSON, plus
    /// `secret_headers` (resolved by the caller, never recorded). Retries a
    /// transport error only when a repeat is safe.
    pub async fn send<B: serde::Serialize + ?Sized + Sync>(
        &self,
        endpoint: &RestEndpoint,
        secret_headers: &BTreeMap<String, String>,
        body: &B,
        call: &Invocation<'_>,
    ) -> Result<Value, ToolFailure> {
        match self
            .send_output(endpoint, secret_headers, body, call)
            .await?
        {
            ToolOutput::Json(value) => Ok(value),
            ToolOutput::Bytes { media_type, .. } => Err(failure(
                ErrorCode::BackendInvalidResponse,
                format!("webhook answered {media_type:?}, not JSON"),
            )),
        }
    }

    /// [`WebhookBackend::send`], keeping a body that is not JSON as bytes
    /// when its `Content-Type` says it is media or text.
    pub async fn send_output<B: serde::Serialize + ?Sized + Sync>(
        &self,
        endpoint: &RestEndpoint,
        secret_headers: &BTreeMap<String, String>,
        body: &B,
        call: &Invocation<'_>,
    ) -> Result<ToolOutput, ToolFailure> {
        crate::outbound::check_url(&endpoint.url)
            .map_err(|reason| failure(ErrorCode::OutboundForbidden, reason))?;
        let method = Method::from_bytes(endpoint.method.as_bytes()).map_err(|_| {
            failure(
                ErrorCode::InvalidToolConfig,
                format!("invalid HTTP method {:?}", endpoint.method),
            )
        })?;
        let headers = headers(&endpoint.headers, secret_headers, call)?;
        let timeout = Duration::from_millis(endpoint.timeout_ms);
        let request = self
            .client
            .request(method, &endpoint.url)
            .headers(headers)
            .timeout(timeout)
            .json(body);

        // A transport error leaves unknown whether the webhook acted. Sending
        // again is safe only if acting twice is harmless (an idempotent tool)
        // or the receiver can tell a repeat (it gets the idempotency key).
        let retry_safe =
            call.tool.spec.side_effects.is_repeatable() || call.idempotency_key.is_some();
        let retries = if retry_safe {
            self.config.transport_retries
        } else {
            0
        };
        let response = self
            .send_retrying(request, retries, endpoint.timeout_ms)
            .await?;
        let status = response.status();
        let media_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let streaming = stream::Streaming::of(media_type.as_deref());
        let reporter = streaming
            .zip(call.chunks)
            .map(|(streaming, sink)| stream::LineReporter::new(streaming, sink));
        let body = read_limited(
            response,
            self.config.max_response_bytes,
            endpoint.timeout_ms,
            reporter,
        )
        .await?;
        if !status.is_success() {
            let shown = &body[..body.len().min(self.config.max_error_body_bytes)];
            return Err(ToolFailure {
                code: ErrorCode::BackendHttpStatus.as_str().to_owned(),
                message: format!("webhook answered HTTP {}", status.as_u16()),
                details: Some(
                    json!({"status": status.as_u16(), "body": String::from_utf8_lossy(shown)}),
                ),
            });
        }
        output(media_type, streaming, body)
    }

    /// Sends `request`, again after a connection or timeout failure up to
    /// `retries` times, backing off.
    async fn send_retrying(
        &self,
        request: reqwest::RequestBuilder,
        retries: u32,
        timeout_ms: u64,
    ) -> Result<reqwest::Response, ToolFailure> {
        let mut attempt = 0;
        loop {
            let this_try = request.try_clone().ok_or_else(|| {
                failure(
                    ErrorCode::BackendError,
                    "webhook request cannot be repeated".to_owned(),
                )
            })?;
            match this_try.send().await {
                Ok(response) => return Ok(response),
                Err(e) if attempt < retries && (e.is_connect() || e.is_timeout()) => {
                    attempt += 1;
                    tokio::time::sleep(self.config.retry_backoff * 2u32.pow(attempt - 1)).await;
                }
                Err(e) => return Err(transport_failure(&e, timeout_ms)),
            }
        }
    }
}

/// Structured text a tool may answer instead of JSON: JSON lines, CSV,
/// TSV, Markdown. Not `text/plain` or `text/html`, which are as often a
/// proxy's error page as a result, and stay failures.
fn is_text(media_type: &str) -> bool {
    let essence = joch_core::artifact::media_essence(media_type);
    matches!(
        essence.as_str(),
        "application/x-ndjson"
            | "application/jsonl"
            | "application/jsonlines"
            | "application/json-seq"
            | "text/csv"
            | "text/tab-separated-values"
            | "text/markdown"
    )
}

fn headers(
    configured: &BTreeMap<String, String>,
    secret: &BTreeMap<String, String>,
    call: &Invocation<'_>,
) -> Result<HeaderMap, ToolFailure> {
    let mut headers = HeaderMap::new();
    for (name, value) in configured.iter().chain(secret) {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            failure(
                ErrorCode::InvalidToolConfig,
                format!("invalid header name {name:?}"),
            )
        })?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            failure(
                ErrorCode::InvalidToolConfig,
                format!("invalid value for header {name}"),
            )
        })?;
        headers.insert(name, value);
    }
    if let Some(key) = call
        .idempotency_key
        .and_then(|k| HeaderValue::from_str(k).ok())
    {
        headers.insert(HeaderName::from_static("idempotency-key"), key);
    }
    // Let the receiver deduplicate: the same call id and attempt means a retry.
    let ids = [
        ("joch-call-id", call.call_id.to_owned()),
        ("joch-attempt", call.attempt.to_string()),
    ];
    for (name, value) in ids {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(headers)
}

/// Reads the whole body, up to `limit` bytes, reporting its lines as they
/// arrive when it streams and someone listens.
async fn read_limited(
    mut response: Response,
    limit: usize,
    timeout_ms: u64,
    mut reporter: Option<stream::LineReporter<'_>>,
) -> Result<Vec<u8>, ToolFailure> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| transport_failure(&e, timeout_ms))?
    {
        if body.len() + chunk.len() > limit {
            return Err(failure(
                ErrorCode::BackendResponseTooLarge,
                format!("webhook response exceeds {limit} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
        if let Some(reporter) = &mut reporter {
            reporter.advance(&body);
        }
    }
    if let Some(reporter) = reporter {
        reporter.finish(&body);
    }
    Ok(body)
}

fn transport_failure(e: &reqwest::Error, timeout_ms: u64) -> ToolFailure {
    if e.is_timeout() {
        failure(
            ErrorCode::BackendTimeout,
            format!("webhook did not answer within {timeout_ms} ms"),
        )
    } else if e.is_connect() {
        failure(
            ErrorCode::BackendUnreachable,
            format!("cannot connect to webhook: {}", root_cause(e)),
        )
    } else {
        failure(
            ErrorCode::BackendError,
            format!("webhook request failed: {}", root_cause(e)),
        )
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

fn failure(code: ErrorCode, message: String) -> ToolFailure {
    ToolFailure {
        code: code.as_str().to_owned(),
        message,
        details: None,
    }
}

/// A successful answer's body as the tool's output: media as bytes, an
/// empty body as null, an event stream assembled, JSON parsed, other text
/// as bytes of its type; anything else is the webhook's mistake.
fn output(
    media_type: Option<String>,
    streaming: Option<stream::Streaming>,
    body: Vec<u8>,
) -> Result<ToolOutput, ToolFailure> {
    if let Some(media_type) = media_type.as_deref().filter(|m| is_media_type(m)) {
        return Ok(ToolOutput::Bytes {
            media_type: media_type.to_owned(),
            bytes: body,
        });
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(ToolOutput::Json(Value::Null));
    }
    if streaming == Some(stream::Streaming::EventStream) {
        return Ok(ToolOutput::Json(stream::Streaming::assemble_events(&body)));
    }
    match serde_json::from_slice(&body) {
        Ok(value) => Ok(ToolOutput::Json(value)),
        Err(_) if media_type.as_deref().is_some_and(is_text) => Ok(ToolOutput::Bytes {
            media_type: media_type.unwrap_or_default(),
            bytes: body,
        }),
        Err(e) => Err(failure(
            ErrorCode::BackendInvalidResponse,
            format!("webhook answered a body that is not JSON: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests;
