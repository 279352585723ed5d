//! An upstream server's surface beyond tools: resource reads and prompt
//! gets (run as calls of the server's surface tool, see
//! `joch_core::mcp_surface`), and the requests the MCP front passes on
//! without recording them (listings, completion, subscriptions, log level).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use joch_core::mcp_surface::{
    CallClient, ClientCapabilities, InputRound, McpOperation, McpSurface, UpstreamNotices,
};
use joch_core::{CallError, ErrorCode, McpServer};
use rmcp::model::ClientRequest;
use rmcp::service::ServiceError;
use serde_json::{Map, Value, json};

use super::{Client, McpClients, rounds};

/// The methods [`McpSurface::request`] passes on.
const PASSED_ON: [&str; 7] = [
    "resources/list",
    "resources/templates/list",
    "prompts/list",
    "completion/complete",
    "resources/subscribe",
    "resources/unsubscribe",
    "logging/setLevel",
];

impl McpClients {
    /// Reads a resource (`args.uri`) or gets a prompt (`args.name`,
    /// `args.arguments`) for a call of a surface tool.
    pub(super) async fn read_or_get(
        &self,
        server: &McpServer,
        client: &Arc<Client>,
        operation: McpOperation,
        args: &Map<String, Value>,
        (caller, input): (Option<&Arc<dyn CallClient>>, Option<&InputRound>),
    ) -> Result<Value, CallError> {
        let mut params = match operation {
            McpOperation::ReadResource => json!({"uri": args.get("uri")}),
            _ => {
                let mut params = json!({"name": args.get("name")});
                if let Some(arguments) = args.get("arguments") {
                    params["arguments"] = arguments.clone();
                }
                params
            }
        };
        // The answers of a round the caller answered by retrying.
        if let Some(round) = input {
            params["inputResponses"] = round.responses.clone().unwrap_or_else(|| json!({}));
            params["requestState"] = json!(round.state);
        }
        // A server of 2026-07-28 asks its questions as `input_required`
        // (see `rounds.rs`): answered by the caller, then sent again.
        for _ in 0..rounds::MAX_ROUNDS {
            let answer = self
                .send(server, client, operation.as_str(), params.clone())
                .await?;
            if answer.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return Ok(answer);
            }
            if let Some(caller) = caller.filter(|c| c.capabilities().rounds) {
                let asked = serde_json::from_value(answer).map_err(|e| {
                    CallError::new(
                        ErrorCode::McpError,
                        format!("the server's question cannot be read: {e}"),
                    )
                })?;
                return Err(rounds::to_client(asked, caller.capabilities()));
            }
            let asked = answer.get("inputRequests").cloned().unwrap_or_default();
            let asked = serde_json::from_value(asked).map_err(|e| {
                CallError::new(
                    ErrorCode::McpError,
                    format!("the server's question cannot be read: {e}"),
                )
            })?;
            params["inputResponses"] = json!(rounds::answers(asked, caller).await?);
            params["requestState"] = answer.get("requestState").cloned().unwrap_or_default();
        }
        Err(CallError::new(
            ErrorCode::McpError,
            format!(
                "the server still asked for input after {} rounds",
                rounds::MAX_ROUNDS
            ),
        ))
    }

    /// Sends `method` with `params` on `client` and returns the result as JSON.
    async fn send(
        &self,
        server: &McpServer,
        client: &Arc<Client>,
        method: &str,
        params: Value,
    ) -> Result<Value, CallError> {
        let request: ClientRequest = serde_json::from_value(json!({
            "method": method,
            "params": params,
        }))
        .map_err(|e| CallError::new(ErrorCode::InvalidArguments, format!("{method}: {e}")))?;
        let timeout = Duration::from_millis(server.spec.timeout_ms);
        let answer = match tokio::time::timeout(timeout, client.send_request(request)).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => return Err(self.failed(server, client, e).await),
            Err(_) => {
                return Err(self
                    .failed(server, client, ServiceError::Timeout { timeout })
                    .await);
            }
        };
        serde_json::to_value(&answer).map_err(|e| {
            CallError::new(
                ErrorCode::McpError,
                format!("the server's result cannot be read: {e}"),
            )
        })
    }
}

#[async_trait]
impl McpSurface for McpClients {
    async fn request(
        &self,
        server: &McpServer,
        method: &str,
        params: Value,
    ) -> Result<Value, CallError> {
        if !PASSED_ON.contains(&method) {
            return Err(CallError::new(
                ErrorCode::MethodNotFound,
                format!("{method} is not passed on to upstream servers"),
            ));
        }
        let client = self
            .client(server, ClientCapabilities::default(), None)
            .await?;
        let on = match method {
            "resources/subscribe" => true,
            "resources/unsubscribe" => false,
            _ => return self.send(server, &client, method, params).await,
        };
        if !super::listen::sessionless(&client) {
            return self.send(server, &client, method, params).await;
        }
        // Protocol 2026-07-28 has no `resources/subscribe`: the URI joins
        // the server's `subscriptions/listen` stream (`listen.rs`).
        let Some(uri) = params.get("uri").and_then(Value::as_str) else {
            return Err(CallError::new(
                ErrorCode::InvalidArguments,
                format!("{method}: uri is required"),
            ));
        };
        self.listeners.subscribe(server, &client, uri, on).await?;
        Ok(json!({}))
    }

    async fn capabilities(&self, server: &McpServer) -> Result<Value, CallError> {
        let client = self
            .client(server, ClientCapabilities::default(), None)
            .await?;
        let capabilities = client
            .peer()
            .peer_info()
            .map(|info| info.capabilities.clone());
        Ok(serde_json::to_value(capabilities).unwrap_or_default())
    }

    fn set_notices(&self, notices: Arc<dyn UpstreamNotices>) {
        *self.notices.lock().unwrap_or_else(|e| e.into_inner()) = Some(notices);
    }
}
