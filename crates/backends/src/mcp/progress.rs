//! Upstream progress notifications as output chunks: a call that someone
//! watches is sent with a progress token, and what the server reports
//! against that token is passed on while the call runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken};
use rmcp::service::{NotificationContext, RoleClient};
use serde_json::{Value, json};
use tokio::sync::mpsc;

type Routes = HashMap<String, mpsc::UnboundedSender<Value>>;

/// Routes progress notifications to the call whose token they carry.
/// Cheap to clone; the clones share their routes.
#[derive(Clone, Default)]
pub(super) struct ProgressRoutes(Arc<Mutex<Routes>>);

/// A registered token; dropping it stops the routing.
pub(super) struct Route {
    routes: ProgressRoutes,
    token: String,
}

impl Drop for Route {
    fn drop(&mut self) {
        self.routes.lock().remove(&self.token);
    }
}

impl ProgressRoutes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes progress reported against `token` (the one rmcp gave the
    /// request) to the returned receiver, until the route is dropped.
    pub(super) fn route(&self, token: &ProgressToken) -> (Route, mpsc::UnboundedReceiver<Value>) {
        let token = key(token);
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().insert(token.clone(), tx);
        let route = Route {
            routes: self.clone(),
            token,
        };
        (route, rx)
    }
}

impl ProgressRoutes {
    /// Passes a progress notification to the call whose token it carries.
    pub(super) fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        if let Some(route) = self.lock().get(&key(&params.progress_token)) {
            let mut chunk = json!({"progress": params.progress});
            if let Some(total) = params.total {
                chunk["total"] = json!(total);
            }
            if let Some(message) = &params.message {
                chunk["message"] = json!(message);
            }
            let _ = route.send(chunk);
        }
    }
}

fn key(token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::String(token) => token.to_string(),
        NumberOrString::Number(n) => n.to_string(),
    }
}
