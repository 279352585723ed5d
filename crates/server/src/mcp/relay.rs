//! The client of one `tools/call`, as the engine hands it to an upstream
//! MCP tool's backend: the upstream's `sampling/createMessage`,
//! `elicitation/create` and `roots/list` during the call are sent to this client, on the
//! call's own response stream, and its answer goes back upstream; its
//! `notifications/cancelled` for the call cancels the call upstream.

use async_trait::async_trait;
use joch_core::mcp_surface::{CallClient, ClientCapabilities};
use joch_core::{CallError, ErrorCode};
use rmcp::model::{GetExtensions, RequestId, ServerNotification, ServerRequest};
use rmcp::service::{
    ElicitationMode, OriginatingRequestId, Peer, PeerRequestOptions, RequestContext, RoleServer,
};
use serde_json::{Value, json};
use tokio::sync::watch;

/// One call's client.
pub(super) struct FrontClient {
    peer: Peer<RoleServer>,
    /// The `tools/call` request, whose stream the relayed requests ride.
    request: RequestId,
    /// Set when the client cancels the call (see `JochMcp::run_call`).
    cancelled: watch::Receiver<bool>,
    capabilities: ClientCapabilities,
}

impl std::fmt::Debug for FrontClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontClient")
            .field("request", &self.request)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

impl FrontClient {
    /// The client of the request `context`, with what it declared at `initialize`.
    /// At 2026-07-28 (no session) what the request's `_meta` declares, and
    /// the client answers an upstream's questions by retrying
    /// (`rounds.rs`), never on the request's stream.
    pub(super) fn of(
        context: &RequestContext<RoleServer>,
        cancelled: watch::Receiver<bool>,
    ) -> Self {
        let peer = context.peer.clone();
        let capabilities = if super::deferred::stateless(context) {
            let declared = context.client_capabilities().unwrap_or_default();
            let elicitation = declared.elicitation.as_ref();
            // Declared without naming a mode: forms.
            let form = elicitation.is_some_and(|e| e.form.is_some() || e.url.is_none());
            ClientCapabilities {
                sampling: declared.sampling.is_some(),
                elicitation_form: form,
                elicitation_url: elicitation.is_some_and(|e| e.url.is_some()),
                roots: declared.roots.is_some(),
                rounds: true,
            }
        } else {
            let modes = peer.supported_elicitation_modes();
            let declared = peer.peer_info().map(|info| info.capabilities.clone());
            ClientCapabilities {
                sampling: declared.as_ref().is_some_and(|c| c.sampling.is_some()),
                elicitation_form: modes.contains(&ElicitationMode::Form),
                elicitation_url: modes.contains(&ElicitationMode::Url),
                roots: declared.is_some_and(|c| c.roots.is_some()),
                rounds: false,
            }
        };
        Self {
            capabilities,
            peer,
            request: context.id.clone(),
            cancelled,
        }
    }
}

/// Withdraws a relayed request that is dropped before its answer came.
struct Withdraw {
    peer: Peer<RoleServer>,
    id: Option<RequestId>,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        let notice = serde_json::from_value(json!({
            "requestId": id,
            "reason": "the upstream server cancelled its request",
        }));
        if let Ok(notice) = notice {
            tokio::spawn(async move {
                let _ = peer.notify_cancelled(notice).await;
            });
        }
    }
}

#[async_trait]
impl CallClient for FrontClient {
    fn capabilities(&self) -> ClientCapabilities {
        self.capabilities
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value, CallError> {
        if self.capabilities.rounds {
            // A client without a session is asked only through its call's
            // `input_required`, which an upstream on a session cannot wait for.
            return Err(CallError::new(
                ErrorCode::ClientIncapable,
                format!(
                    "the server asked {method} during the call, and a client of protocol 2026-07-28 can only be asked through input_required"
                ),
            ));
        }
        let request = match params {
            Value::Null => json!({"method": method}),
            params => json!({"method": method, "params": params}),
        };
        let mut request: ServerRequest = serde_json::from_value(request)
            .map_err(|e| CallError::new(ErrorCode::InvalidArguments, format!("{method}: {e}")))?;
        request
            .extensions_mut()
            .insert(OriginatingRequestId(self.request.clone()));
        let handle = self
            .peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| CallError::new(ErrorCode::ClientUnavailable, e.to_string()))?;
        let mut withdraw = Withdraw {
            peer: self.peer.clone(),
            id: Some(handle.id.clone()),
        };
        let answer = handle.await_response().await;
        withdraw.id = None;
        let answer = answer.map_err(|e| match e {
            rmcp::service::ServiceError::McpError(e) => CallError {
                code: ErrorCode::ClientError.as_str().to_owned(),
                message: e.message.to_string(),
                details: Some(json!({"code": e.code.0, "data": e.data})),
            },
            other => CallError::new(ErrorCode::ClientUnavailable, other.to_string()),
        })?;
        serde_json::to_value(answer)
            .map_err(|e| CallError::new(ErrorCode::ClientError, e.to_string()))
    }

    fn notify(&self, method: &str, params: Value) {
        let notice: Result<ServerNotification, _> =
            serde_json::from_value(json!({"method": method, "params": params}));
        let Ok(mut notice) = notice else { return };
        notice
            .extensions_mut()
            .insert(OriginatingRequestId(self.request.clone()));
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let _ = peer.send_notification(notice).await;
        });
    }

    async fn cancelled(&self) {
        let mut cancelled = self.cancelled.clone();
        if cancelled.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
