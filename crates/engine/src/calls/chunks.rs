//! A running call's output chunks, passed on as `output_chunk` events of its
//! execution's timeline, in order, before its `tool_completed`.
//!
//! A backend reports chunks synchronously (it must not wait on the store),
//! so they queue here and one task per call appends them; the task starts
//! with the first chunk, so a call whose backend never streams costs
//! nothing. Chunks that arrive while an append is in flight share the next
//! event, so a fast stream costs few store writes; each event and each
//! call's total are bounded, and what is left out is counted, not lost:
//! the final result holds everything.
//!
//! A surface that can show progress live (the MCP front, to the client's
//! `progressToken`) follows a call's chunks while it waits for the call:
//! [`Calls::follow_chunks`](crate::Calls::follow_chunks). Followers live as long as the request that
//! waits, and each holds at most [`FOLLOW_QUEUE`] chunks not yet taken (the
//! rest are dropped for it: the timeline and the result keep them).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use joch_core::{EventKind, OutputChunks, ToolCall};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::Calls;

/// Most bytes of chunks one event carries.
const EVENT_BYTES: usize = 64 * 1024;
/// Most `output_chunk` events one call appends.
const EVENTS_PER_CALL: usize = 1000;

/// Chunks a follower may have waiting before further ones skip it.
pub const FOLLOW_QUEUE: usize = 64;

/// Followers of running calls, by `namespace/call`.
pub(in crate::calls) type Followers = Mutex<HashMap<String, mpsc::Sender<Value>>>;

/// One call's chunks as they arrive, for as long as this lives.
pub struct ChunkFollower {
    engine: Calls,
    key: String,
    chunks: mpsc::Receiver<Value>,
}

impl ChunkFollower {
    /// The next chunk; `None` once the follower is no longer fed.
    pub async fn next(&mut self) -> Option<Value> {
        self.chunks.recv().await
    }

    /// The next chunk already received, if any: what a call reported
    /// before it ended, to pass on before its result.
    pub fn try_next(&mut self) -> Option<Value> {
        self.chunks.try_recv().ok()
    }
}

impl Drop for ChunkFollower {
    fn drop(&mut self) {
        followers(&self.engine).remove(&self.key);
    }
}

fn followers(engine: &Calls) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<Value>>> {
    engine
        .inner
        .followers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Where a call's chunks go: its execution's timeline (none for a call
/// outside an execution: only its follower hears them).
#[derive(Clone)]
struct Timeline {
    engine: Calls,
    namespace: String,
    execution: Option<String>,
    tool: String,
    call: String,
}

/// The backend's side: queues chunks for the task appending them.
pub(in crate::calls) struct ChunkRelay {
    timeline: Timeline,
    started: Mutex<Option<(mpsc::UnboundedSender<Value>, JoinHandle<()>)>>,
    /// The call's follower, looked up at the first chunk.
    follower: OnceLock<Option<mpsc::Sender<Value>>>,
}

impl std::fmt::Debug for ChunkRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkRelay")
            .field("call", &self.timeline.call)
            .finish_non_exhaustive()
    }
}

impl OutputChunks for ChunkRelay {
    fn chunk(&self, data: Value) {
        let follower = self.follower.get_or_init(|| {
            let key = format!("{}/{}", self.timeline.namespace, self.timeline.call);
            followers(&self.timeline.engine).get(&key).cloned()
        });
        if let Some(follower) = follower {
            // A follower that does not keep up misses chunks, never the call.
            let _ = follower.try_send(data.clone());
        }
        if self.timeline.execution.is_none() {
            return;
        }
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        let (queue, _) = started.get_or_insert_with(|| append(self.timeline.clone()));
        let _ = queue.send(data);
    }
}

impl ChunkRelay {
    /// Waits until every chunk reported is written.
    pub(in crate::calls) async fn finish(self) {
        let started = self.started.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some((queue, task)) = started {
            drop(queue);
            let _ = task.await;
        }
    }
}

impl Calls {
    /// A relay for `call`'s chunks; `None` for a call outside an execution
    /// (it has no timeline to show them on) that nobody follows (a client
    /// of protocol 2026-07-28, which has no session, follows its call's).
    pub(in crate::calls) fn relay_chunks(&self, call: &ToolCall) -> Option<ChunkRelay> {
        let execution = call.spec.execution_ref.as_ref().map(|e| e.name.clone());
        if execution.is_none() {
            let key = format!("{}/{}", call.metadata.namespace, call.metadata.name);
            followers(self).get(&key)?;
        }
        Some(ChunkRelay {
            timeline: Timeline {
                engine: self.clone(),
                namespace: call.metadata.namespace.clone(),
                execution,
                tool: call.tool_name().to_owned(),
                call: call.metadata.name.clone(),
            },
            started: Mutex::new(None),
            follower: OnceLock::new(),
        })
    }
}

impl Calls {
    /// Follows the chunks of the call `name` that is about to run in this
    /// process, until the follower is dropped.
    pub fn follow_chunks(&self, namespace: &str, name: &str) -> ChunkFollower {
        let key = format!("{namespace}/{name}");
        let (feed, chunks) = mpsc::channel(FOLLOW_QUEUE);
        followers(self).insert(key.clone(), feed);
        ChunkFollower {
            engine: self.clone(),
            key,
            chunks,
        }
    }
}

/// The task appending what arrives on the returned queue, until it closes.
fn append(timeline: Timeline) -> (mpsc::UnboundedSender<Value>, JoinHandle<()>) {
    let (queue, mut rx) = mpsc::unbounded_channel::<Value>();
    let task = tokio::spawn(async move {
        let (mut index, mut events, mut omitted) = (0usize, 0usize, 0usize);
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            let mut size = 0;
            while size < EVENT_BYTES {
                match rx.try_recv() {
                    Ok(next) => {
                        size += next.to_string().len();
                        batch.push(next);
                    }
                    Err(_) => break,
                }
            }
            if events == EVENTS_PER_CALL {
                omitted += batch.len();
                continue;
            }
            let data = json!({"index": index, "chunks": batch});
            index += batch.len();
            events += 1;
            timeline.emit(data).await;
        }
        if omitted > 0 {
            timeline
                .emit(json!({"index": index, "chunks": [], "omitted": omitted}))
                .await;
        }
    });
    (queue, task)
}

impl Timeline {
    async fn emit(&self, mut data: Value) {
        data["tool_name"] = json!(self.tool);
        data["tool_call_id"] = json!(self.call);
        let written = self
            .engine
            .inner
            .events
            .emit(
                &self.namespace,
                self.execution.as_deref().unwrap_or_default(),
                EventKind::OutputChunk,
                data,
            )
            .await;
        if let Err(e) = written {
            tracing::warn!(call = %self.call, error = %e, "cannot record output chunks");
        }
    }
}
