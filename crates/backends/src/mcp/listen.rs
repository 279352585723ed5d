//! What a server of protocol 2026-07-28 says outside a request. That
//! protocol has no session: list changes and resource updates come on a
//! `subscriptions/listen` stream the client opens, naming what it wants.
//! joch keeps one such stream per server (on a connection that carries no
//! user's token), asking for every list change the server offers and for
//! the updates of the URIs the front's sessions subscribed to, and passes
//! what arrives on exactly as a legacy session's notifications
//! (`Upstream::notice`): tool list changes re-list the server's tools,
//! resource updates reach the subscribed sessions, list changes every one.
//!
//! A stream that ends (the server closed it, the transport dropped it, the
//! server refused it) is opened again, after a pause that doubles each
//! time, at most `MAX_RETRIES` times in a row; one that lasted
//! `STEADY` counts as a success. A front session's subscription opens a
//! stream with the new filter before the old one is dropped, so no update
//! is missed in between.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use joch_core::{CallError, ErrorCode, McpServer};
use rmcp::model::{ErrorCode as McpCode, ServerNotification, SubscriptionFilter};
use rmcp::service::{Peer, RoleClient, ServiceError, Subscription};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::Client;
use super::handler::Upstream;

/// How many times in a row a stream is opened again before joch stops
/// (until the next connection to the server, or the next subscription).
const MAX_RETRIES: u32 = 5;

/// The first pause before opening a stream again; doubled each time.
const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// A stream that lasted this long resets the count of retries.
const STEADY: Duration = Duration::from_secs(30);

/// The streams of every server, by `namespace/name`.
#[derive(Default)]
pub(super) struct Listeners {
    servers: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Listening>>>>,
}

/// One server's stream.
#[derive(Default)]
struct Listening {
    /// The URIs the front's sessions subscribed to, with how many times.
    uris: BTreeMap<String, usize>,
    running: Option<Running>,
}

/// The task relaying one server's stream.
struct Running {
    /// The connection it listens on.
    peer: Peer<RoleClient>,
    /// Hands it a stream opened with a new filter.
    swap: mpsc::UnboundedSender<Swap>,
    /// Which task it is.
    task: Arc<()>,
}

impl Running {
    fn live(&self) -> bool {
        !self.peer.is_transport_closed() && !self.swap.is_closed()
    }
}

/// A stream opened with a new filter, and who waits until the one it
/// replaces is dropped.
type Swap = (Subscription, oneshot::Sender<()>);

/// True when `client` negotiated protocol 2026-07-28 or later (no session).
pub(super) fn sessionless(client: &Client) -> bool {
    client
        .peer()
        .peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize())
}

impl Listeners {
    fn listening(&self, server: &McpServer) -> Arc<tokio::sync::Mutex<Listening>> {
        let key = format!("{}/{}", server.metadata.namespace, server.metadata.name);
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers.entry(key).or_default().clone()
    }

    /// Stops the stream of the server `key` (`namespace/name`), which was
    /// deleted, and forgets what was asked of it.
    pub(super) fn forget(&self, key: &str) {
        let removed = self
            .servers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        if let Some(listening) = removed {
            if let Ok(mut guard) = listening.try_lock() {
                // Dropping its sender ends the relaying task.
                guard.running = None;
            }
        }
    }

    /// Makes sure a stream of `server` runs, on `client` if the one there
    /// was went with its connection. (One that gave up on a live
    /// connection is not opened again here, but by a new subscription.)
    /// Never waits: a stream being changed is left alone.
    pub(super) fn ensure(&self, server: &McpServer, client: &Client) {
        let listening = self.listening(server);
        let Ok(mut guard) = listening.try_lock() else {
            return;
        };
        if guard
            .running
            .as_ref()
            .is_some_and(|r| !r.peer.is_transport_closed())
        {
            return;
        }
        let first = filter(&guard.uris, client.peer());
        if first.is_none() {
            return;
        }
        guard.running = Some(run(listening.clone(), client, None));
    }

    /// Adds `uri` to the updates asked of `server` (`on`), or takes one
    /// subscription to it away; a changed filter is acknowledged by the
    /// server before this returns.
    pub(super) async fn subscribe(
        &self,
        server: &McpServer,
        client: &Client,
        uri: &str,
        on: bool,
    ) -> Result<(), CallError> {
        let offered = client.peer().peer_info().and_then(|i| {
            let resources = i.capabilities.resources.as_ref()?;
            resources.subscribe
        });
        if offered != Some(true) {
            return Err(CallError::new(
                ErrorCode::McpError,
                format!(
                    "MCP server {:?} does not offer resource subscriptions",
                    server.metadata.name
                ),
            ));
        }
        let listening = self.listening(server);
        let mut guard = listening.lock().await;
        if !count(&mut guard.uris, uri, on) {
            return Ok(());
        }
        let running = guard.running.as_ref().filter(|r| r.live());
        let peer = running.map_or_else(|| client.peer().clone(), |r| r.peer.clone());
        let Some(wanted) = filter(&guard.uris, &peer) else {
            // Nothing left to listen to: the stream ends with its task.
            guard.running = None;
            return Ok(());
        };
        let opened = match peer.listen(wanted).await {
            Ok(opened) => opened,
            Err(e) => {
                count(&mut guard.uris, uri, !on);
                return Err(refused(server, &e));
            }
        };
        let Some(running) = running else {
            guard.running = Some(run(listening.clone(), client, Some(opened)));
            return Ok(());
        };
        // Once the old stream is dropped, whatever it would still carry
        // is not passed on (see `handler.rs`): the new one carries it.
        let (done, swapped) = oneshot::channel();
        let _ = running.swap.send((opened, done));
        drop(guard);
        let _ = swapped.await;
        Ok(())
    }
}

/// Counts one more (`on`) or one less subscription to `uri`; true when
/// that changes whether it is asked for.
fn count(uris: &mut BTreeMap<String, usize>, uri: &str, on: bool) -> bool {
    let count = uris.entry(uri.to_owned()).or_default();
    let before = *count;
    *count = if on {
        before + 1
    } else {
        before.saturating_sub(1)
    };
    uris.retain(|_, n| *n > 0);
    // The first subscription adds it; the last one taken away removes it.
    if on { before == 0 } else { before == 1 }
}

/// What to ask `peer`'s server for: every list change it offers, and the
/// updates of `uris`; `None` when it offers nothing to listen to.
fn filter(uris: &BTreeMap<String, usize>, peer: &Peer<RoleClient>) -> Option<SubscriptionFilter> {
    let info = peer.peer_info()?;
    let wanted = SubscriptionFilter::builder()
        .tools_list_changed()
        .prompts_list_changed()
        .resources_list_changed()
        .resource_subscriptions(uris.keys().cloned())
        .build()
        .supported_by(&info.capabilities);
    let none = wanted.tools_list_changed.is_none()
        && wanted.prompts_list_changed.is_none()
        && wanted.resources_list_changed.is_none()
        && wanted
            .resource_subscriptions
            .as_ref()
            .is_none_or(Vec::is_empty);
    (!none).then_some(wanted)
}

fn refused(server: &McpServer, error: &ServiceError) -> CallError {
    let name = &server.metadata.name;
    CallError::new(
        ErrorCode::McpError,
        format!("MCP server {name:?} refused to send resource updates: {error}"),
    )
}

/// Spawns the task relaying the streams of `client`'s server, from
/// `first` if it is already open.
fn run(
    listening: Arc<tokio::sync::Mutex<Listening>>,
    client: &Client,
    first: Option<Subscription>,
) -> Running {
    let (swap, swaps) = mpsc::unbounded_channel();
    let peer = client.peer().clone();
    let task = Arc::new(());
    let relay = Relay {
        listening,
        task: task.clone(),
        peer: peer.clone(),
        handler: client.service().clone(),
        swaps,
    };
    tokio::spawn(relay.run(first));
    Running { peer, swap, task }
}

struct Relay {
    listening: Arc<tokio::sync::Mutex<Listening>>,
    task: Arc<()>,
    peer: Peer<RoleClient>,
    handler: Upstream,
    swaps: mpsc::UnboundedReceiver<Swap>,
}

impl Relay {
    async fn run(mut self, mut current: Option<Subscription>) {
        let mut retries = 0;
        loop {
            let stream = match current.take() {
                Some(stream) => Ok(Some(stream)),
                None => self.open().await,
            };
            let opened = Instant::now();
            match stream {
                Ok(Some(stream)) => self.relay(stream).await,
                // Nothing to listen to any more, or joch was told to stop.
                Ok(None) => return,
                // A server that offers list changes and yet has no stream
                // to send them on: asking again cannot help.
                Err(ServiceError::McpError(e)) if e.code == McpCode::METHOD_NOT_FOUND => {
                    tracing::debug!(server = %self.handler.server.1, "no subscriptions/listen: {}", e.message);
                    return;
                }
                Err(e) => {
                    tracing::debug!(server = %self.handler.server.1, "subscriptions/listen: {e}")
                }
            }
            if self.peer.is_transport_closed() || self.swaps.is_closed() {
                return;
            }
            retries = if opened.elapsed() >= STEADY {
                1
            } else {
                retries + 1
            };
            if retries > MAX_RETRIES {
                tracing::warn!(
                    server = %self.handler.server.1,
                    "the server's subscriptions/listen stream ended {MAX_RETRIES} times in a row: \
                     its list changes and resource updates are not relayed until joch reconnects"
                );
                return;
            }
            tokio::time::sleep(FIRST_PAUSE * 2u32.pow(retries - 1)).await;
        }
    }

    /// Opens a stream with the filter wanted now, unless this task is no
    /// longer the server's.
    async fn open(&self) -> Result<Option<Subscription>, ServiceError> {
        let guard = self.listening.lock().await;
        let ours = guard
            .running
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(&r.task, &self.task));
        let Some(wanted) = filter(&guard.uris, &self.peer).filter(|_| ours) else {
            return Ok(None);
        };
        self.peer.listen(wanted).await.map(Some)
    }

    /// Passes on what `stream` (and the streams that replace it) carry
    /// until the last one ends.
    async fn relay(&mut self, mut stream: Subscription) {
        loop {
            tokio::select! {
                next = stream.next() => match next {
                    Ok(Some(notification)) => self.pass_on(notification),
                    Ok(None) | Err(_) => return,
                },
                swapped = self.swaps.recv() => match swapped {
                    Some((newer, done)) => {
                        stream = newer;
                        let _ = done.send(());
                    }
                    None => return,
                },
            }
        }
    }

    fn pass_on(&self, notification: ServerNotification) {
        let (method, params) = match notification {
            ServerNotification::ToolListChangedNotification(_) => {
                ("notifications/tools/list_changed", Value::Null)
            }
            ServerNotification::PromptListChangedNotification(_) => {
                ("notifications/prompts/list_changed", Value::Null)
            }
            ServerNotification::ResourceListChangedNotification(_) => {
                ("notifications/resources/list_changed", Value::Null)
            }
            // Without the stream's `_meta` (its subscription id is joch's).
            ServerNotification::ResourceUpdatedNotification(updated) => (
                "notifications/resources/updated",
                json!({"uri": updated.params.uri}),
            ),
            // rmcp ends a stream that carries anything else.
            _ => return,
        };
        self.handler.notice(method, params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_is_asked_for_while_any_subscription_to_it_lasts() {
        let mut uris = BTreeMap::new();
        for (on, changed, left) in [
            (true, true, 1),
            (true, false, 2),
            (false, false, 1),
            (false, true, 0),
            (false, false, 0),
        ] {
            assert_eq!(count(&mut uris, "note://a", on), changed, "{on} {left}");
            assert_eq!(uris.get("note://a").copied().unwrap_or(0), left);
        }
    }
}
