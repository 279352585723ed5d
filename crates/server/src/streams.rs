//! Long-lived answers (event follows, MCP streams) are exempt from the
//! listener's idle timeout, so they are counted per principal and capped:
//! one caller cannot hold every connection joch may open. Each count lives
//! as long as its answer; a principal with none open has no entry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use joch_engine::Principal;

use crate::{ApiError, ApiWord, AppState};

/// Open streams by principal.
#[derive(Default)]
pub(crate) struct Streams {
    open: Mutex<HashMap<String, usize>>,
}

/// One open stream, counted until dropped.
pub(crate) struct Held {
    streams: Arc<Streams>,
    key: String,
}

impl Streams {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a stream for `principal` (all unauthenticated callers are
    /// one), or refuses it past `cap`.
    pub(crate) fn open(
        self: &Arc<Self>,
        principal: Option<&Principal>,
        cap: usize,
    ) -> Result<Held, ApiError> {
        let key = principal.map_or_else(
            || "(unauthenticated)".to_owned(),
            |p| {
                let namespace = p.namespaces.key();
                format!("{}:{namespace}/{}", p.kind.as_str(), p.name)
            },
        );
        let mut open = self.lock();
        let count = open.entry(key.clone()).or_default();
        if *count >= cap {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ApiWord::TooManyStreams,
                format!("this caller already has {cap} streams open; close one first"),
            ));
        }
        *count += 1;
        Ok(Held {
            streams: self.clone(),
            key,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        if let Some(count) = open.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// A body that keeps its stream counted until it ends or is dropped.
pub(crate) fn hold(body: Body, held: Held) -> Body {
    Body::from_stream(body.into_data_stream().map(move |chunk| {
        let _counted = &held;
        chunk
    }))
}

/// Middleware for the MCP endpoint: every answer is a stream.
pub(crate) async fn limit(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let cap = state.config.max_streams_per_principal;
    let held = match state
        .streams
        .open(request.extensions().get::<Principal>(), cap)
    {
        Ok(held) => held,
        Err(e) => return e.into_response(),
    };
    next.run(request).await.map(|body| hold(body, held))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_capped_per_principal_and_freed_with_their_answer() {
        let streams = Arc::new(Streams::default());
        let alice = Principal {
            name: "alice".to_owned(),
            namespaces: joch_core::Namespaces::one("team"),
            ..Principal::local()
        };
        let first = streams.open(Some(&alice), 2).expect("first");
        let _second = streams.open(Some(&alice), 2).expect("second");
        let refused = streams
            .open(Some(&alice), 2)
            .err()
            .expect("a third is refused");
        assert_eq!(refused.code, "too_many_streams");
        let _other = streams
            .open(None, 2)
            .expect("another caller has its own count");
        drop(first);
        let third = streams.open(Some(&alice), 2).expect("room again");
        drop(third);
        drop(_second);
        assert!(
            !streams.lock().contains_key("team/alice"),
            "no entry once none are open"
        );
    }
}
