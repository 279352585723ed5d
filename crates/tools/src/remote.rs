//! The same calls, sent to a running `joch serve`.

use async_trait::async_trait;
use serde_json::Value;

use crate::{Error, ToolCall, ToolDefinition, ToolExecutor, ToolOutput};

/// A client of a remote joch's REST API, with the embedded gateway's trait.
#[derive(Clone)]
pub struct RemoteGateway {
    http: reqwest::Client,
    base: String,
    namespace: String,
    token: Option<String>,
    agent: Option<String>,
    execution: Option<String>,
}

impl RemoteGateway {
    /// A client of the joch at `base` (`http://127.0.0.1:7070`), in `namespace`.
    pub fn new(base: impl Into<String>, namespace: &str) -> Self {
        joch_backends::install_crypto_provider();
        Self {
            http: reqwest::Client::new(),
            base: base.into().trim_end_matches('/').to_owned(),
            namespace: namespace.to_owned(),
            token: None,
            agent: None,
            execution: None,
        }
    }

    /// Authenticates with a bearer token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Records the calls as made by `agent`.
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Records the calls as part of the run `execution`.
    pub fn with_execution(mut self, execution: impl Into<String>) -> Self {
        self.execution = Some(execution.into());
        self
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<(u16, Value), Error> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let response = request
            .send()
            .await
            .map_err(|e| Error::Transport(e.to_string()))?;
        let status = response.status().as_u16();
        let body: Value = response
            .json()
            .await
            .map_err(|e| Error::Transport(format!("an answer that is not JSON: {e}")))?;
        if status >= 400 && status != 429 {
            let text = |field: &str| body[field].as_str().unwrap_or_default().to_owned();
            return Err(Error::Api {
                status,
                code: text("code"),
                message: text("message"),
            });
        }
        Ok((status, body))
    }

    /// Approves a paused call as the token's holder: the server refuses
    /// (403 `forbidden`) a token that made the call itself.
    pub async fn approve(&self, approval: &str) -> Result<joch_core::Approval, Error> {
        self.decide(approval, "approve", serde_json::json!({}))
            .await
    }

    /// Denies a paused call as the token's holder, telling the model `message`.
    pub async fn deny(&self, approval: &str, message: &str) -> Result<joch_core::Approval, Error> {
        let body = serde_json::json!({"message": message});
        self.decide(approval, "deny", body).await
    }

    /// Cancels call `name` as the token's holder, which may cancel the
    /// calls it made (an admin any; others get 403 `forbidden`). Returns the
    /// call as it then stands (`Failed`, `error.code: cancelled`, once it
    /// stopped).
    pub async fn cancel(&self, name: &str) -> Result<joch_core::ToolCall, Error> {
        let url = self.url(&format!("toolcalls/{name}/cancel"));
        let (_, answer) = self.send(self.http.post(url)).await?;
        serde_json::from_value(answer)
            .map_err(|e| Error::Transport(format!("an unexpected ToolCall: {e}")))
    }

    async fn decide(
        &self,
        approval: &str,
        verb: &str,
        body: Value,
    ) -> Result<joch_core::Approval, Error> {
        let url = self.url(&format!("approvals/{approval}/{verb}"));
        let (_, answer) = self.send(self.http.post(url).json(&body)).await?;
        serde_json::from_value(answer)
            .map_err(|e| Error::Transport(format!("an unexpected Approval: {e}")))
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1/namespaces/{}/{path}", self.base, self.namespace)
    }
}

#[async_trait]
impl ToolExecutor for RemoteGateway {
    async fn tool_definitions(&self) -> Result<Vec<ToolDefinition>, Error> {
        let (_, list) = self.send(self.http.get(self.url("tools"))).await?;
        let tools: Vec<joch_core::Tool> = serde_json::from_value(list["items"].clone())
            .map_err(|e| Error::Transport(format!("an unexpected tool list: {e}")))?;
        Ok(tools.iter().map(ToolDefinition::from).collect())
    }

    async fn execute_tool_call(&self, call: &ToolCall) -> Result<ToolOutput, Error> {
        let manifest = call.manifest(self.agent.as_deref(), self.execution.as_deref());
        let request = self.http.post(self.url("toolcalls")).json(&manifest);
        let (status, body) = self.send(request).await?;
        let record: joch_core::ToolCall = serde_json::from_value(body)
            .map_err(|e| Error::Transport(format!("an unexpected ToolCall: {e}")))?;
        // 200 answers a repeat of an idempotency key with the first call.
        Ok(ToolOutput::of(call, record, status == 200))
    }
}
