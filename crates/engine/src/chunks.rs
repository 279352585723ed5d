//! A running call's output chunks, passed on as `output_chunk` events of its
//! execution's timeline, in order, before its `tool_completed`.
//!
//! A backend reports chunks synchronously (it must not wait on the store),
//! so they queue here and one task per call appends them. Chunks that
//! arrive while an append is in flight share the next event, so a fast
//! stream costs few store writes; each event and each call's total are
//! bounded, and what is left out is counted, not lost: the final result
//! holds everything.

use joch_core::{OutputChunks, ToolCall};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::Engine;

/// Most bytes of chunks one event carries.
const EVENT_BYTES: usize = 64 * 1024;
/// Most `output_chunk` events one call appends.
const EVENTS_PER_CALL: usize = 1000;

/// The backend's side: queues chunks for the relay task.
#[derive(Debug)]
pub(crate) struct ChunkRelay(mpsc::UnboundedSender<Value>);

impl OutputChunks for ChunkRelay {
    fn chunk(&self, data: Value) {
        let _ = self.0.send(data);
    }
}

impl Engine {
    /// A relay for `call`'s chunks and the task appending them, which ends
    /// once the relay is dropped and everything queued is written. `None`
    /// for a call outside an execution: it has no timeline to show them on.
    pub(crate) fn relay_chunks(&self, call: &ToolCall) -> Option<(ChunkRelay, JoinHandle<()>)> {
        call.spec.execution_ref.as_ref()?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        let (engine, call) = (self.clone(), call.clone());
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
                if let Err(e) = engine.emit_for(&call, "output_chunk", data).await {
                    tracing::warn!(call = %call.metadata.name, error = %e, "cannot record output chunks");
                }
            }
            if omitted > 0 {
                let data = json!({"index": index, "chunks": [], "omitted": omitted});
                let _ = engine.emit_for(&call, "output_chunk", data).await;
            }
        });
        Some((ChunkRelay(tx), task))
    }
}
