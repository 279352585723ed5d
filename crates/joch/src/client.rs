//! The CLI's HTTP client: every verb but `serve` talks to a server.

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::cli::ClientArgs;

pub struct Client {
    http: reqwest::Client,
    base: String,
}

/// An answer from the server: status and JSON body.
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Client {
    pub fn new(args: &ClientArgs) -> anyhow::Result<Self> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &args.token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .context("the token has characters a header cannot carry")?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .context("cannot build an HTTP client")?;
        Ok(Self {
            http,
            base: args.server.trim_end_matches('/').to_owned(),
        })
    }

    /// Sends a request and returns whatever the server answered.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Answer> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach the joch server at {}", self.base))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .context("reading the server's answer")?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok(Answer { status, body })
    }

    /// Opens a long-lived GET (an event stream) and returns the response as it starts.
    pub async fn stream(&self, path: &str) -> anyhow::Result<reqwest::Response> {
        let url = format!("{}{path}", self.base);
        self.http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("cannot reach the joch server at {}", self.base))
    }

    /// Like [`Client::send`], but a non-2xx answer is an error showing the
    /// server's `code` and `message`.
    pub async fn expect_ok(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let answer = self.send(method, path, body).await?;
        if !answer.status.is_success() {
            bail!("{}", describe_error(&answer));
        }
        Ok(answer.body)
    }
}

/// `404 tool_not_found: Tool "x" not found`.
pub fn describe_error(answer: &Answer) -> String {
    let code = answer
        .body
        .get("code")
        .and_then(Value::as_str)
        .unwrap_or("error");
    let message = answer
        .body
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| answer.body.to_string());
    format!("{} {code}: {message}", answer.status.as_u16())
}
