//! A page part kept live over Server-Sent Events (the inbox, an
//! execution's timeline): rendered at once, then again whenever the engine
//! says something changed (or every `every`, for stores shared with
//! processes that do not notify), and sent only when it differs from what
//! the page shows.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::response::sse::Event as SseEvent;
use futures_util::stream::{self, Stream};
use joch_engine::EngineError;
use tokio::sync::watch;

/// The stream of `event`s: `render` gives the part's HTML and a mark of
/// what it shows; a part whose mark is the one last sent (at first,
/// `shown`, the page's) is not sent again. The stream ends when `render`
/// fails (the page reloads and says why).
pub(crate) fn refreshed<R, F>(
    event: &'static str,
    changes: watch::Receiver<u64>,
    every: Duration,
    shown: Option<String>,
    render: R,
) -> impl Stream<Item = Result<SseEvent, Infallible>>
where
    R: Fn() -> F,
    F: Future<Output = Result<(String, String), EngineError>>,
{
    stream::unfold(
        (changes, shown, render, true),
        move |(mut changes, shown, render, first)| async move {
            let mut first = first;
            loop {
                if !first {
                    let _ = tokio::time::timeout(every, changes.changed()).await;
                }
                first = false;
                let (mark, html) = match render().await {
                    Ok(part) => part,
                    Err(e) => {
                        tracing::warn!(error = %e, event, "live stream stopped");
                        return None;
                    }
                };
                if shown.as_deref() == Some(mark.as_str()) {
                    continue;
                }
                let sse = SseEvent::default().event(event).data(html);
                return Some((Ok(sse), (changes, Some(mark), render, false)));
            }
        },
    )
}
