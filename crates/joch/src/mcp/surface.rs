//! The stdio proxy's relay of everything beside tools: resources, prompts,
//! completion and logging go to joch's server as they came, and its
//! notifications about them come back to the stdio client.

use rmcp::ErrorData;
use rmcp::model::{ClientRequest, ServerNotification};
use rmcp::service::{Peer, RoleServer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{Proxy, unreachable};

impl Proxy {
    /// Sends `method` with `params` to joch's server; its answer as `T`.
    pub(super) async fn forward<P: Serialize, T: DeserializeOwned>(
        &self,
        method: &str,
        params: Option<P>,
    ) -> Result<T, ErrorData> {
        let mut message = json!({"method": method});
        if let Some(params) = params {
            message["params"] = serde_json::to_value(params)
                .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        }
        let request: ClientRequest = serde_json::from_value(message)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let answer = self
            .upstream()
            .await?
            .send_request(request)
            .await
            .map_err(|e| match e {
                rmcp::ServiceError::McpError(e) => e,
                other => unreachable(other),
            })?;
        let mut answer = serde_json::to_value(answer)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        // `subscribe`, `unsubscribe` and `setLevel` answer `{}`.
        if answer.is_null() {
            answer = json!({});
        }
        serde_json::from_value(answer).map_err(|e| {
            ErrorData::internal_error(format!("joch answered {method} with {e}"), None)
        })
    }
}

/// Passes a notification of joch's server on to the stdio client.
pub(super) async fn pass_on(downstream: Option<&Peer<RoleServer>>, method: &str, params: Value) {
    let Some(peer) = downstream else { return };
    let mut message = json!({"method": method});
    if !params.is_null() {
        message["params"] = params;
    }
    if let Ok(notification) = serde_json::from_value::<ServerNotification>(message) {
        let _ = peer.send_notification(notification).await;
    }
}
