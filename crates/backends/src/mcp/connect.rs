//! Opening a connection to an upstream server: the transport (a child
//! process, or streamable HTTP with the headers and token `spec.http`
//! asks for) and the MCP handshake, within `CONNECT_TIMEOUT`; over HTTP,
//! until the session's standalone stream is answered too.

use std::collections::HashMap;

use joch_core::credential::UpstreamAuth;
use joch_core::mcp::{HttpTransport, McpProtocol};
use joch_core::{CallError, ErrorCode, McpServer};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt};

use super::handler::Upstream;
use super::http::Http;
use super::{CONNECT_TIMEOUT, Client};

/// Why a connection did not open.
pub(super) enum Opened {
    /// The server answered 401 to the token sent (the `Authorization`
    /// value), saying so in the error.
    Refused(String, CallError),
    Failed(CallError),
}

impl From<CallError> for Opened {
    fn from(e: CallError) -> Self {
        Opened::Failed(e)
    }
}

impl Opened {
    pub(super) fn into_error(self) -> CallError {
        match self {
            Opened::Refused(_, e) | Opened::Failed(e) => e,
        }
    }
}

/// What of `server`'s `spec.http` authenticates a request for `user`:
/// `auth`, with the user's own token on a per-user server; without a user
/// there (listing tools), `listAuth`. `None`: nothing to send.
pub(super) fn auth_for<'s>(
    server: &'s McpServer,
    user: Option<&'s str>,
) -> Option<(&'s HttpTransport, &'s UpstreamAuth, Option<&'s str>)> {
    let http = server.spec.http.as_ref()?;
    let (auth, user) = match (http.per_user(), user) {
        (Some(_), Some(user)) => (http.auth.as_ref(), Some(user)),
        (Some(_), None) => (http.list_auth.as_ref(), None),
        (None, _) => (http.auth.as_ref(), None),
    };
    Some((http, auth?, user))
}

/// As `spec.protocol` says: `initialize` (the versions before
/// 2026-07-28), or `server/discover` (2026-07-28; [`connect`] falls back
/// to `initialize` for a server that refuses it).
///
/// Not rmcp's `Auto` mode: it also falls back when `server/discover` takes
/// longer than 10 s, so that a server slow to answer (a loaded machine) was
/// spoken to in 2025-11-25, where rmcp sends no `Mcp-Param-*` headers and
/// a server of 2026-07-28 refuses a call that lacks them (the likely cause
/// of one failure under load of
/// `mcp_client::marked_arguments_travel_as_mcp_param_headers_on_every_connection`).
fn lifecycle(server: &McpServer) -> ClientLifecycleMode {
    match server.spec.protocol {
        McpProtocol::Legacy => ClientLifecycleMode::Initialize,
        McpProtocol::Auto => ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        },
    }
}

pub(super) async fn connect(
    server: &McpServer,
    handler: Upstream,
    authorization: Option<&str>,
) -> Result<Client, CallError> {
    let lifecycle = lifecycle(server);
    let modern = !matches!(lifecycle, ClientLifecycleMode::Initialize);
    let first = within_time(
        server,
        handshake(server, handler.clone(), authorization, lifecycle),
    )
    .await;
    match first {
        // A server that refuses `server/discover` (as unknown, or naming
        // only older versions) is spoken to with `initialize`. One that
        // did not answer in time is not thereby an old one: no fallback.
        Ok(Err(e)) if modern && e.code != ErrorCode::UpstreamAuthFailed.as_str() => {
            let legacy = ClientLifecycleMode::Initialize;
            within_time(server, handshake(server, handler, authorization, legacy))
                .await
                .unwrap_or_else(Err)
        }
        first => first.unwrap_or_else(Err),
    }
}

/// The handshake's outcome, or the failure of one that took longer than
/// [`CONNECT_TIMEOUT`] (`Err`).
async fn within_time(
    server: &McpServer,
    handshake: impl Future<Output = Result<Client, CallError>>,
) -> Result<Result<Client, CallError>, CallError> {
    tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| {
            CallError::new(
                ErrorCode::McpUnavailable,
                format!(
                    "MCP server {:?} cannot be reached: no handshake within {} s",
                    server.metadata.name,
                    CONNECT_TIMEOUT.as_secs()
                ),
            )
        })
}

async fn handshake(
    server: &McpServer,
    handler: Upstream,
    authorization: Option<&str>,
    lifecycle: ClientLifecycleMode,
) -> Result<Client, CallError> {
    let name = &server.metadata.name;
    let unavailable = |what: String| {
        CallError::new(
            ErrorCode::McpUnavailable,
            format!("MCP server {name:?} cannot be reached: {what}"),
        )
    };
    let handshake = async {
        if let Some(stdio) = &server.spec.stdio {
            let mut command = tokio::process::Command::new(&stdio.command);
            // joch's own settings and secrets (JOCH_ADMIN_TOKEN, JOCH_VAULT_KEY,
            // the store's URL) are not the server's: it gets the rest of the
            // environment, and what its `spec.stdio.env` names.
            for (key, _) in std::env::vars_os() {
                if key.to_string_lossy().starts_with("JOCH_") {
                    command.env_remove(key);
                }
            }
            command
                .args(&stdio.args)
                .envs(&stdio.env)
                .kill_on_drop(true);
            let (transport, _) = TokioChildProcess::builder(command)
                .stderr(std::process::Stdio::null())
                .spawn()
                .map_err(|e| unavailable(format!("cannot start {:?}: {e}", stdio.command)))?;
            handler
                .clone()
                .serve_with_lifecycle(transport, lifecycle.clone())
                .await
                .map_err(|e| unavailable(e.to_string()))
        } else if let Some(http) = &server.spec.http {
            let mut headers = HashMap::new();
            let secrets = http
                .secret_headers
                .iter()
                .map(|(header, source)| crate::secret(source).map(|value| (header, value)))
                .collect::<Result<Vec<_>, _>>()
                .map_err(unavailable)?;
            let plain = http.headers.iter().map(|(h, v)| (h, v.clone()));
            let auth_header = "authorization".to_owned();
            let auth = authorization.map(|value| (&auth_header, value.to_owned()));
            for (header, value) in plain.chain(secrets).chain(auth) {
                let header = HeaderName::try_from(header.as_str())
                    .map_err(|e| unavailable(format!("header {header:?}: {e}")))?;
                let value = HeaderValue::try_from(value)
                    .map_err(|_| unavailable(format!("header {header}: value is not valid")))?;
                headers.insert(header, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(http.url.as_str())
                .custom_headers(headers);
            crate::outbound::check_url(&http.url).map_err(unavailable)?;
            let client = crate::outbound::client_builder()
                .build()
                .map_err(|e| unavailable(e.to_string()))?;
            let http = Http::new(client);
            let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
            let client = handler
                .serve_with_lifecycle(transport, lifecycle.clone())
                .await
                .map_err(|e| match e.auth_challenge() {
                    Some(_) => CallError::new(
                        ErrorCode::UpstreamAuthFailed,
                        format!(
                            "MCP server {name:?} refused the request's authorization (HTTP 401)"
                        ),
                    ),
                    None => unavailable(e.to_string()),
                })?;
            http.standalone_answered().await;
            Ok(client)
        } else {
            Err(unavailable("the server names no transport".to_owned()))
        }
    };
    handshake.await
}
