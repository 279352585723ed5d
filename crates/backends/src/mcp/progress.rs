//! Upstream progress notifications as output chunks: a call that someone
//! watches is sent with a progress token, and what the server reports
//! against that token is passed on while the call runs.
//!
//! rmcp gives a request its token as it sends it, so the route is made
//! just after: a server quick enough to report before then would lose its
//! first reports. Those are kept, a few at most, for the route that comes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken};
use rmcp::service::{NotificationContext, RoleClient};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Reports kept for a token not routed yet, over all tokens (the oldest
/// go first: a route that never comes leaves nothing behind for long).
const EARLY: usize = 64;

#[derive(Default)]
struct Routes {
    live: HashMap<String, mpsc::UnboundedSender<Value>>,
    early: VecDeque<(String, Value)>,
}

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
        self.routes.lock().live.remove(&self.token);
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
        let mut routes = self.lock();
        let early = std::mem::take(&mut routes.early);
        for (of, chunk) in early {
            match of == token {
                true => drop(tx.send(chunk)),
                false => routes.early.push_back((of, chunk)),
            }
        }
        routes.live.insert(token.clone(), tx);
        drop(routes);
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
        self.deliver(params);
    }

    fn deliver(&self, params: ProgressNotificationParam) {
        let mut chunk = json!({"progress": params.progress});
        if let Some(total) = params.total {
            chunk["total"] = json!(total);
        }
        if let Some(message) = &params.message {
            chunk["message"] = json!(message);
        }
        let token = key(&params.progress_token);
        let mut routes = self.lock();
        match routes.live.get(&token) {
            Some(route) => drop(route.send(chunk)),
            None => {
                if routes.early.len() == EARLY {
                    routes.early.pop_front();
                }
                routes.early.push_back((token, chunk));
            }
        }
    }
}

fn key(token: &ProgressToken) -> String {
    match &token.0 {
        NumberOrString::String(token) => token.to_string(),
        NumberOrString::Number(n) => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(token: &str, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(
            ProgressToken(NumberOrString::String(token.into())),
            progress,
        )
    }

    #[test]
    fn reports_that_come_before_their_route_reach_it_in_order() {
        let routes = ProgressRoutes::default();
        routes.deliver(report("7", 1.0));
        routes.deliver(report("8", 5.0));
        routes.deliver(report("7", 2.0));
        let (_route, mut seven) = routes.route(&ProgressToken(NumberOrString::String("7".into())));
        routes.deliver(report("7", 3.0));
        let got: Vec<Value> = std::iter::from_fn(|| seven.try_recv().ok()).collect();
        assert_eq!(
            got,
            [
                json!({"progress": 1.0}),
                json!({"progress": 2.0}),
                json!({"progress": 3.0})
            ]
        );
        // Another token's report waits for its own route.
        assert_eq!(routes.lock().early.len(), 1);
    }

    #[test]
    fn unrouted_reports_are_bounded() {
        let routes = ProgressRoutes::default();
        for i in 0..(EARLY * 3) {
            routes.deliver(report(&i.to_string(), 1.0));
        }
        assert_eq!(routes.lock().early.len(), EARLY);
    }
}
