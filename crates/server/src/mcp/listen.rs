//! `subscriptions/listen` (2026-07-28): a client without a session asks
//! for what changes outside its requests on one request whose stream stays
//! open, naming what it wants (rmcp acknowledges the filter, cut to what
//! joch declares, and ends the stream when the client cancels it).
//!
//! What a session is told reaches a listener the same way: a change of the
//! namespace's tool list (a Tool written here, or on another replica and
//! heard from the store) when the list the caller sees changed; the
//! namespace's upstream servers' prompt and resource list changes; and the
//! updates of the URIs it names, which joch asks of their servers while
//! the stream lasts, as a session's `resources/subscribe` does.

use rmcp::ErrorData;
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{SubscriptionContext, SubscriptionSendError};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

use super::handler::JochMcp;
use joch_engine::UpstreamNotice;

/// Everything asked for that joch declares (rmcp cuts the rest).
pub(super) fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    requested.clone()
}

impl JochMcp {
    /// Relays to the listener until it goes, then takes its resource
    /// subscriptions back.
    pub(super) async fn listen_for(
        &self,
        subscription: SubscriptionContext,
    ) -> Result<(), ErrorData> {
        let extensions = subscription.request_context().extensions.clone();
        let namespace = self.namespace(&extensions)?;
        let by = self.principal(&extensions)?;
        let accepted = subscription.accepted().clone();
        let uris = accepted.resource_subscriptions.clone().unwrap_or_default();
        for uri in &uris {
            let asked = json!({"uri": uri});
            if let Err(e) = self
                .pass_on("resources/subscribe", asked, "/uri", &extensions)
                .await
            {
                tracing::debug!(uri, error = %e.message, "a listened URI's updates were not asked for");
            }
        }
        let mut tools = self.engine.resources().tool_changes();
        let mut seen = self.fingerprint(&by, &namespace).await;
        let mut notices = self.engine.mcp().upstream_notices();
        let wants_tools = accepted.tools_list_changed == Some(true);
        loop {
            let notification = tokio::select! {
                () = subscription.cancelled() => break,
                changed = tools.changed(), if wants_tools => {
                    if changed.is_err() {
                        break;
                    }
                    let now = self.fingerprint(&by, &namespace).await;
                    if now == seen {
                        continue;
                    }
                    seen = now;
                    notification("notifications/tools/list_changed", serde_json::Value::Null)
                }
                notice = notices.recv() => match notice {
                    Ok(notice) if notice.namespace == namespace => self.listened(notice).await,
                    Ok(_) | Err(RecvError::Lagged(_)) => None,
                    Err(RecvError::Closed) => break,
                },
            };
            let Some(notification) = notification else {
                continue;
            };
            match subscription.sink().send(notification).await {
                Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => {}
                Err(_) => break,
            }
        }
        for uri in &uris {
            let asked = json!({"uri": uri});
            let _ = self
                .pass_on("resources/unsubscribe", asked, "/uri", &extensions)
                .await;
        }
        Ok(())
    }

    /// An upstream server's notice as the listener sees it: URIs with the
    /// server's prefix; tool list changes are left to the engine, which
    /// lists the server's tools again (and the Tools written wake `tools`).
    async fn listened(&self, mut notice: UpstreamNotice) -> Option<ServerNotification> {
        let server = self
            .engine
            .mcp()
            .get_server(&notice.namespace, &notice.server)
            .await?;
        match notice.method.as_str() {
            "notifications/resources/updated" => {
                let uri = notice.params["uri"].as_str()?.to_owned();
                notice.params["uri"] = json!(format!("{}{uri}", server.surface_prefix()));
            }
            "notifications/prompts/list_changed" | "notifications/resources/list_changed" => {}
            _ => return None,
        }
        notification(&notice.method, notice.params)
    }
}

fn notification(method: &str, params: serde_json::Value) -> Option<ServerNotification> {
    let mut message = json!({"method": method});
    if !params.is_null() {
        message["params"] = params;
    }
    serde_json::from_value(message).ok()
}
