//! reqwest's client for rmcp's streamable HTTP transport, which also tells
//! when a session's standalone stream has been answered.
//!
//! rmcp opens a session's standalone stream (`GET`) in the background once
//! the handshake is done, while the first call may already be on its way.
//! A server that asks something there (a question not tied to a request, as
//! the TypeScript SDK's `server.elicitInput()` sends) before the stream is
//! open has nowhere to send it: it drops the question, and the call waits
//! out its time. So a new connection waits, briefly, for that stream's
//! answer before it is used ([`Http::standalone_answered`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use tokio::sync::watch;

/// How long a new connection waits for its standalone stream's answer. A
/// server answers a `GET` at once (or refuses it); one that holds the
/// answer back only costs its connections this much, once each.
const STANDALONE_WAIT: Duration = Duration::from_secs(1);

/// Where a connection's standalone stream stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standalone {
    /// No session (yet): rmcp opens no standalone stream.
    NoSession,
    /// The server gave a session: rmcp opens the stream.
    Expected,
    /// The server answered the stream's `GET` (opened or refused it).
    Answered,
}

/// reqwest's client, watching the standalone stream of the one connection
/// it serves.
#[derive(Clone)]
pub(super) struct Http {
    client: reqwest::Client,
    standalone: Arc<watch::Sender<Standalone>>,
}

impl Http {
    pub(super) fn new(client: reqwest::Client) -> Self {
        let (standalone, _) = watch::channel(Standalone::NoSession);
        Http {
            client,
            standalone: Arc::new(standalone),
        }
    }

    /// Once the handshake is done: waits until the session's standalone
    /// stream has been answered, at most [`STANDALONE_WAIT`]; at once when
    /// the server gave no session.
    pub(super) async fn standalone_answered(&self) {
        let mut state = self.standalone.subscribe();
        let answered = state.wait_for(|s| *s != Standalone::Expected);
        if tokio::time::timeout(STANDALONE_WAIT, answered)
            .await
            .is_err()
        {
            tracing::debug!("the server did not answer the standalone stream in time");
        }
    }
}

impl StreamableHttpClient for Http {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        // rmcp's transport sends with its limits (below); this is for
        // callers without any.
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let response = self
            .client
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        if let StreamableHttpPostResponse::Json(_, Some(_))
        | StreamableHttpPostResponse::Sse(_, Some(_)) = &response
        {
            self.standalone.send_if_modified(|s| {
                let first = *s == Standalone::NoSession;
                if first {
                    *s = Standalone::Expected;
                }
                first
            });
        }
        Ok(response)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        let opened = self
            .client
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await;
        self.standalone.send_replace(Standalone::Answered);
        opened
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, StreamableHttpError<Self::Error>> {
        let opened = self
            .client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.standalone.send_replace(Standalone::Answered);
        opened
    }
}
