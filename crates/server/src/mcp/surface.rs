//! The namespace's upstream servers' resources, prompts, completion and
//! logging, on the front.
//!
//! Names map as tools' do: a prompt `greet` of server `docs` is
//! `docs.greet` (the server's `toolPrefix`, `<server>.` by default, then
//! the upstream name), and a resource URI is the prefix then the upstream
//! URI (`docs.file:///a.md`; templates likewise). An empty prefix keeps the
//! upstream names. A name goes back to the server whose non-empty prefix it
//! starts with (the longest), else to the first server (by name) with an
//! empty prefix.
//!
//! Reads and gets are calls (governed, recorded: see
//! `joch_core::mcp_surface`); listings, completion, subscriptions and the
//! log level are passed on. Upstream notifications reach the sessions of
//! the server's namespace: list changes always, resource updates for the
//! URIs the session subscribed to, log messages once it set a level.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use joch_core::mcp_surface::{McpOperation, surface_tool_name};
use joch_core::{ErrorCode, McpServer, Phase};
use joch_engine::{McpSession, Principal, UpstreamNotice};
use rmcp::ErrorData;
use rmcp::model::{Extensions, InputRequiredResult, InputResponses};
use rmcp::service::{Peer, RequestContext, RoleServer};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::deferred;
use super::handler::{JochMcp, Ran};

/// A `resources/read` or `prompts/get`, as the client asked it.
pub(crate) struct Asked<'a> {
    pub(crate) operation: McpOperation,
    /// The exposed URI or prompt name.
    pub(crate) exposed: &'a str,
    /// A prompt's arguments.
    pub(crate) arguments: Option<Value>,
    /// A retry's `requestState` and answers (protocol 2026-07-28).
    pub(crate) state: Option<&'a str>,
    pub(crate) responses: Option<&'a InputResponses>,
}

/// What one session asked of the upstream surface.
#[derive(Default)]
pub(crate) struct SessionSurface {
    /// Exposed URIs subscribed to.
    subscribed: Mutex<HashSet<String>>,
    /// The level set by `logging/setLevel`; none: no log messages.
    level: Mutex<Option<String>>,
}

/// MCP log levels, least severe first.
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn rank(level: &str) -> usize {
    LEVELS.iter().position(|l| *l == level).unwrap_or(0)
}

fn subscribe(session: &mut McpSession, uri: &str, on: bool) {
    if on {
        session.subscribed.insert(uri.to_owned());
    } else {
        session.subscribed.remove(uri);
    }
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(e.to_string(), None)
}

fn upstream_error(e: joch_core::CallError) -> ErrorData {
    let data = Some(json!({"code": e.code, "details": e.details}));
    match ErrorCode::parse(&e.code) {
        Some(ErrorCode::Forbidden) => ErrorData::invalid_request(e.message, data),
        Some(ErrorCode::MethodNotFound) => {
            ErrorData::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, e.message, data)
        }
        _ => ErrorData::internal_error(e.message, data),
    }
}

/// SEP-2164 (2026-07-28): a resource that is not there is `-32602`, with
/// the URI asked for in `data.uri` (servers before it said `-32002`).
fn missing_resource(message: String, uri: &str, mut data: Value) -> ErrorData {
    data["uri"] = json!(uri);
    ErrorData::invalid_params(message, Some(data))
}

/// Whether the upstream refused a read because it has no such resource:
/// `-32002` (before SEP-2164) or `-32602` (since).
fn upstream_lacks(error: Option<&joch_core::CallError>) -> bool {
    let code = error
        .filter(|e| e.code == joch_core::ErrorCode::McpError.as_str())
        .and_then(|e| e.details.as_ref())
        .and_then(|d| d["code"].as_i64());
    matches!(code, Some(-32002 | -32602))
}

/// The server an exposed name belongs to, and the upstream name.
pub(crate) fn route<'a>(
    servers: &'a [McpServer],
    exposed: &str,
) -> Option<(&'a McpServer, String)> {
    let prefixed = servers
        .iter()
        .map(|s| (s, s.surface_prefix()))
        .filter(|(_, p)| !p.is_empty() && exposed.starts_with(p.as_str()))
        .max_by_key(|(_, p)| p.len());
    match prefixed {
        Some((server, prefix)) => Some((server, exposed[prefix.len()..].to_owned())),
        None => servers
            .iter()
            .find(|s| s.surface_prefix().is_empty())
            .map(|s| (s, exposed.to_owned())),
    }
}

/// Prefixes the string at `key` of each item of `items`.
fn expose(items: &mut [Value], key: &str, prefix: &str) {
    for item in items {
        if let Some(Value::String(name)) = item.get_mut(key) {
            *name = format!("{prefix}{name}");
        }
    }
}

impl JochMcp {
    async fn servers(
        &self,
        extensions: &Extensions,
    ) -> Result<(Principal, Vec<McpServer>), ErrorData> {
        let namespace = self.namespace(extensions)?;
        let by = self.principal(extensions)?;
        let servers = self
            .engine
            .mcp()
            .servers(&by, &namespace)
            .await
            .map_err(|e| ErrorData::invalid_request(e.to_string(), None))?;
        Ok((by, servers))
    }

    /// Every server's `method` listing (all pages), its `key` entries
    /// (`resources`, `resourceTemplates`, `prompts`) with `name` prefixed.
    /// With the list, how long it may be kept (SEP-2549): the shortest
    /// `ttlMs` of the pages it was made of (0 for a page without one).
    pub(crate) async fn list_all<T: DeserializeOwned>(
        &self,
        method: &str,
        key: &str,
        name: &str,
        extensions: &Extensions,
    ) -> Result<(Vec<T>, u64), ErrorData> {
        let (by, servers) = self.servers(extensions).await?;
        let mut all = Vec::new();
        let mut ttl: Option<u64> = None;
        // A server that is down would hold the listing for its connect timeout.
        let up = servers
            .iter()
            .filter(|s| s.status.phase.as_deref() != Some("Unavailable"));
        for server in up {
            let mut cursor: Option<Value> = None;
            for _ in 0..100 {
                let params = cursor.take().map_or(json!({}), |c| json!({"cursor": c}));
                let page = match self.engine.mcp().request(&by, server, method, params).await {
                    Ok(page) => page,
                    // A server without this capability, or down, lists nothing.
                    Err(e) => {
                        tracing::debug!(server = %server.metadata.name, error = %e.message, "{method}");
                        break;
                    }
                };
                let mut items = page
                    .get(key)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                expose(&mut items, name, &server.surface_prefix());
                all.extend(items);
                let fresh = page.get("ttlMs").and_then(Value::as_u64).unwrap_or(0);
                ttl = Some(ttl.map_or(fresh, |t| t.min(fresh)));
                match page.get("nextCursor").filter(|c| !c.is_null()) {
                    Some(next) => cursor = Some(next.clone()),
                    None => break,
                }
            }
        }
        let items = all
            .into_iter()
            .map(|item| serde_json::from_value(item).map_err(internal))
            .collect::<Result<_, _>>()?;
        Ok((items, ttl.unwrap_or(0)))
    }

    /// `resources/read` or `prompts/get` of an exposed name, as a call of
    /// the server's surface tool; the result with its URIs exposed. Over
    /// protocol 2026-07-28, one deferred to a person answers
    /// `input_required` (`Err`), and its retry resumes it (`deferred.rs`).
    pub(crate) async fn read_or_get(
        &self,
        asked: Asked<'_>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Result<Value, InputRequiredResult>, ErrorData> {
        let (by, servers) = self.servers(&context.extensions).await?;
        let namespace = self.namespace(&context.extensions)?;
        let exposed = asked.exposed;
        let Some((server, upstream)) = route(&servers, exposed) else {
            let message =
                format!("no upstream server of namespace {namespace:?} offers {exposed:?}");
            return Err(match asked.operation {
                McpOperation::ReadResource => missing_resource(message, exposed, json!({})),
                _ => ErrorData::resource_not_found(message, None),
            });
        };
        let operation = asked.operation;
        let tool = surface_tool_name(&server.metadata.name, operation).unwrap_or_default();
        let defer = deferred::stateless(context);
        let input = match operation {
            McpOperation::ReadResource => json!({"uri": upstream}),
            _ => json!({"name": upstream, "arguments": asked.arguments.unwrap_or(json!({}))}),
        };
        let retry = deferred::Retry {
            tool: &tool,
            input,
            state: asked.state,
            responses: asked.responses,
        };
        let round = asked.state.and_then(super::rounds::parse);
        let ran = if let (true, Some(round)) = (defer, round) {
            // The client answers its upstream's questions (`rounds.rs`).
            match self
                .answer_round(&by, &namespace, round, retry, context)
                .await?
            {
                Ok(settled) => Ok(Ran::Settled(Box::new(settled))),
                Err(asked) => return Ok(Err(asked)),
            }
        } else if defer && asked.state.is_some() {
            match self.resume(&by, &namespace, retry, None, context).await? {
                Ok(settled) => Ok(Ran::Settled(Box::new(settled))),
                Err(waiting) => return Ok(Err(waiting)),
            }
        } else {
            let (mut call, _name) = self.call_named(&tool, retry.input, context);
            call.spec.operation = operation;
            self.run_call(&by, &namespace, call, None, context, defer)
                .await
        };
        let settled = match ran {
            Ok(Ran::Settled(settled)) => *settled,
            Ok(Ran::Deferred(approval)) => {
                return Ok(Err(self.input_required(
                    &approval,
                    None,
                    context,
                    joch_core::RunsOn::Retry,
                )));
            }
            Err(e) => {
                let e = crate::ApiError::from(e);
                return Err(ErrorData::invalid_request(
                    e.message.clone(),
                    Some(json!({"code": e.code})),
                ));
            }
        };
        if let (true, Some(round)) = (defer, super::rounds::asked(&settled)) {
            return Ok(Err(super::rounds::input_required(&settled, round)));
        }
        if settled.status.phase != Phase::Succeeded {
            let error = settled.status.error.as_ref();
            let (code, message) = error
                .map(|e| (e.code.clone(), e.message.clone()))
                .unwrap_or_else(|| {
                    (
                        "not_settled".to_owned(),
                        "the call did not finish".to_owned(),
                    )
                });
            let message = format!("{} {exposed}: {message}", operation.as_str());
            let data = json!({"code": code, "tool_call_id": settled.metadata.name,
                              "phase": settled.status.phase.as_str()});
            if operation == McpOperation::ReadResource && upstream_lacks(error) {
                return Err(missing_resource(message, exposed, data));
            }
            return Err(ErrorData::invalid_request(message, Some(data)));
        }
        let mut output = settled.status.output.unwrap_or(Value::Null);
        if let Some(contents) = output.get_mut("contents").and_then(Value::as_array_mut) {
            expose(contents, "uri", &server.surface_prefix());
        }
        Ok(Ok(output))
    }

    /// Passes `method` to the server an exposed name routes to, with the
    /// name at `pointer` in `params` replaced by the upstream one.
    pub(crate) async fn pass_on(
        &self,
        method: &str,
        mut params: Value,
        pointer: &str,
        extensions: &Extensions,
    ) -> Result<Value, ErrorData> {
        let (by, servers) = self.servers(extensions).await?;
        let exposed = params
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let Some((server, upstream)) = route(&servers, &exposed) else {
            return Err(ErrorData::invalid_params(
                format!("no upstream server offers {exposed:?}"),
                None,
            ));
        };
        if let Some(slot) = params.pointer_mut(pointer) {
            *slot = json!(upstream);
        }
        self.engine
            .mcp()
            .request(&by, server, method, params)
            .await
            .map_err(upstream_error)
    }

    /// Subscribes (or unsubscribes) the session to an exposed URI. An HTTP
    /// session remembers it in its record first, so that whichever replica
    /// re-creates the session subscribes again (`restore`).
    pub(crate) async fn subscription(
        &self,
        uri: String,
        on: bool,
        extensions: &Extensions,
    ) -> Result<(), ErrorData> {
        let (method, undo) = if on {
            ("resources/subscribe", false)
        } else {
            ("resources/unsubscribe", true)
        };
        self.remember(extensions, |s| subscribe(s, &uri, on))
            .await?;
        if let Err(e) = self
            .pass_on(method, json!({"uri": uri}), "/uri", extensions)
            .await
        {
            let _ = self
                .remember(extensions, |s| subscribe(s, &uri, undo))
                .await;
            return Err(e);
        }
        let mut subscribed = self
            .surface
            .subscribed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if on {
            subscribed.insert(uri);
        } else {
            subscribed.remove(&uri);
        }
        Ok(())
    }

    /// Sets the session's log level and every upstream server's.
    pub(crate) async fn set_log_level(
        &self,
        level: String,
        extensions: &Extensions,
    ) -> Result<(), ErrorData> {
        self.remember(extensions, |s| s.log_level = Some(level.clone()))
            .await?;
        self.apply_log_level(level, extensions).await
    }

    async fn apply_log_level(
        &self,
        level: String,
        extensions: &Extensions,
    ) -> Result<(), ErrorData> {
        let (by, servers) = self.servers(extensions).await?;
        for server in &servers {
            let _ = self
                .engine
                .mcp()
                .request(&by, server, "logging/setLevel", json!({"level": level}))
                .await;
        }
        *self.surface.level.lock().unwrap_or_else(|e| e.into_inner()) = Some(level);
        Ok(())
    }

    /// Keeps a change of what an HTTP session asked in its record (a stdio
    /// session lives and dies with its process: nothing to keep).
    async fn remember(
        &self,
        extensions: &Extensions,
        change: impl Fn(&mut McpSession),
    ) -> Result<(), ErrorData> {
        let Some(id) = self.session_id(extensions) else {
            return Ok(());
        };
        self.engine.mcp().remember(&id, change).await.map_err(|e| {
            let e = crate::ApiError::from(e);
            ErrorData::invalid_params(e.message.clone(), Some(json!({"code": e.code})))
        })
    }

    /// Restores, in a session re-created here (on another replica, or
    /// after a restart), what it had asked of the upstream surface: its
    /// subscriptions and its log level, upstream as well.
    pub(crate) async fn restore(&self, extensions: &Extensions) {
        let Some(id) = self.session_id(extensions) else {
            return;
        };
        let Ok(session) = self.engine.mcp().open_session_by_id(&id).await else {
            return;
        };
        for uri in session.subscribed {
            let subscribed = self
                .pass_on(
                    "resources/subscribe",
                    json!({"uri": uri}),
                    "/uri",
                    extensions,
                )
                .await;
            if subscribed.is_ok() {
                self.surface
                    .subscribed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(uri);
            }
        }
        if let Some(level) = session.log_level {
            let _ = self.apply_log_level(level, extensions).await;
        }
    }

    /// Passes the namespace's upstream notifications to the session until it ends.
    pub(crate) fn relay_notices(&self, namespace: String, peer: Peer<RoleServer>) {
        let mut notices = self.engine.mcp().upstream_notices();
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                // Woken now and then to see whether the session is gone.
                let received = tokio::select! {
                    received = notices.recv() => Some(received),
                    () = tokio::time::sleep(std::time::Duration::from_secs(30)) => None,
                };
                if peer.is_transport_closed() {
                    return;
                }
                let notice = match received {
                    Some(Ok(notice)) => notice,
                    None | Some(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {
                        continue;
                    }
                    Some(Err(_)) => return,
                };
                if notice.namespace == namespace {
                    this.notice(notice, &peer).await;
                }
            }
        });
    }

    async fn notice(&self, mut notice: UpstreamNotice, peer: &Peer<RoleServer>) {
        let prefix = match self
            .engine
            .mcp()
            .get_server(&notice.namespace, &notice.server)
            .await
        {
            Some(server) => server.surface_prefix(),
            None => return,
        };
        let wanted = match notice.method.as_str() {
            "notifications/resources/updated" => {
                let uri = notice.params["uri"]
                    .as_str()
                    .map(|u| format!("{prefix}{u}"));
                let Some(uri) = uri else { return };
                notice.params["uri"] = json!(uri);
                self.surface
                    .subscribed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&uri)
            }
            // The engine re-lists the tools; `watch_tools` tells the client.
            "notifications/tools/list_changed" => false,
            "notifications/message" => {
                let level = self
                    .surface
                    .level
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let said = notice.params["level"].as_str().unwrap_or("info");
                level.is_some_and(|level| rank(said) >= rank(&level))
            }
            _ => true,
        };
        if !wanted {
            return;
        }
        let mut message = json!({"method": notice.method});
        if !notice.params.is_null() {
            message["params"] = notice.params;
        }
        if let Ok(notification) = serde_json::from_value(message) {
            let _ = peer.send_notification(notification).await;
        }
    }
}

/// Shared by a session's clones.
pub(crate) type SharedSurface = Arc<SessionSurface>;

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, prefix: Option<&str>) -> McpServer {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"http": {"url": "http://127.0.0.1:1/mcp"}, "toolPrefix": prefix},
        }))
        .unwrap()
    }

    #[test]
    fn names_route_to_the_longest_prefix_else_the_unprefixed_server() {
        let servers = vec![
            server("a", None),
            server("ab", Some("a.b.")),
            server("plain", Some("")),
        ];
        let (s, up) = route(&servers, "a.b.test://x").unwrap();
        assert_eq!((s.metadata.name.as_str(), up.as_str()), ("ab", "test://x"));
        let (s, up) = route(&servers, "a.greet").unwrap();
        assert_eq!((s.metadata.name.as_str(), up.as_str()), ("a", "greet"));
        let (s, up) = route(&servers, "test://static").unwrap();
        assert_eq!(
            (s.metadata.name.as_str(), up.as_str()),
            ("plain", "test://static")
        );
        assert!(route(&servers[..2], "other").is_none());
    }
}
