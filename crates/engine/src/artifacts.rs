//! Results kept as artifacts: media returned as itself with only its
//! reference on the record, and large results handed back as handles.
//!
//! Ordering is the crash rule: a blob is stored durably
//! ([`Blobs::put`]) before the `Artifact` record and the settled call
//! that name it are written, so no record ever points at a missing blob.

mod tools;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use joch_core::artifact::{
    Artifact, ArtifactRef, ArtifactRole, ArtifactSpec, ByteRange, InlineInputs, handle,
    is_media_type, is_sha256,
};
use joch_core::{ObjectMeta, ObjectRef, Principal, Tool, ToolCall};
use joch_store::{Blobs, Durability, ListQuery, Store, StoreError};
use serde_json::{Map, Value, json};

use crate::EngineError;
use crate::catalog::Catalog;
use crate::clock::now;
use crate::rules::{Action, Collection, Visibility, may_in};

/// What a settled result becomes: what the caller gets, and what the
/// record keeps instead of the result when any of it became an artifact.
pub(crate) struct Spooled {
    pub(crate) answer: Value,
    pub(crate) recorded: Option<Value>,
}

/// The artifacts part: keeps results as artifacts when they settle, reads
/// them back as a principal may, collects blobs no artifact names, and
/// runs the artifact tools' reads (their calls are recorded by the calls
/// part, `calls/artifact_tools.rs`).
pub struct Artifacts {
    store: Arc<dyn Store>,
    /// Where contents are kept; `None` keeps no artifacts.
    blobs: Option<Arc<dyn Blobs>>,
    catalog: Arc<Catalog>,
    visibility: Visibility,
}

impl Artifacts {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        blobs: Option<Arc<dyn Blobs>>,
        catalog: Arc<Catalog>,
        visibility: Visibility,
    ) -> Self {
        Self {
            store,
            blobs,
            catalog,
            visibility,
        }
    }

    fn blobs(&self) -> Result<&dyn Blobs, EngineError> {
        self.blobs.as_deref().ok_or_else(|| EngineError::Refused {
            code: joch_core::RefusalCode::ArtifactsDisabled,
            message: "this server keeps no artifacts (none is configured)".to_owned(),
        })
    }

    /// Decides what of a successful result is kept as artifacts: media
    /// blocks always (when artifacts are enabled), the whole result when it
    /// is not to be inlined. Without an artifact directory, results stay as
    /// they were.
    pub(crate) async fn spool(
        &self,
        call: &mut ToolCall,
        tool: &Tool,
        answer: Value,
        text_type: Option<&str>,
    ) -> Result<Spooled, EngineError> {
        if self.blobs.is_none() {
            return Ok(Spooled {
                answer,
                recorded: None,
            });
        }
        if has_media(&answer) {
            let recorded = self.keep_media(call, &answer).await?;
            return Ok(Spooled { answer, recorded });
        }
        let max_inline_bytes = match tool.spec.max_inline_bytes {
            Some(max) => Some(max),
            None => {
                self.catalog
                    .namespace(&call.metadata.namespace)
                    .await?
                    .spec
                    .max_inline_bytes
            }
        };
        let inputs = InlineInputs {
            call: call.spec.inline,
            call_set_by_policy: call.status.hook_decisions.iter().any(|d| {
                d.hook == joch_core::Hook::Request.step()
                    && d.decision == joch_core::DecisionKind::Modify
            }),
            tool: tool.spec.inline,
            max_inline_bytes,
        };
        // The hot path: nothing could turn inlining off, so nothing is
        // serialised or copied.
        if inputs.call != Some(false) && inputs.tool != Some(false) && max_inline_bytes.is_none() {
            return Ok(Spooled {
                answer,
                recorded: None,
            });
        }
        let (content, default_type) = content_of(&answer);
        let media_type = match (&answer, text_type) {
            (Value::String(_), Some(text_type)) => text_type,
            _ => default_type,
        };
        let Some(reason) = inputs.handle_reason(content.len() as u64) else {
            return Ok(Spooled {
                answer,
                recorded: None,
            });
        };
        let reference = self
            .store_artifact(call, &content, media_type, ArtifactRole::Handle, reason)
            .await?;
        let handle = handle(&call.metadata.name, &reference, &content);
        call.status.artifacts.push(reference);
        Ok(Spooled {
            answer: handle.clone(),
            recorded: Some(handle),
        })
    }

    /// Stores each media block of an MCP-shaped result (`content[]` items of
    /// type image or audio with `data`, or resources with a media `blob`)
    /// and returns the result as the record keeps it: the bytes replaced by
    /// the artifact's id, size and hash (`None` if no block was stored).
    async fn keep_media(
        &self,
        call: &mut ToolCall,
        answer: &Value,
    ) -> Result<Option<Value>, EngineError> {
        let mut recorded = answer.clone();
        let Some(blocks) = recorded.get_mut("content").and_then(Value::as_array_mut) else {
            return Ok(None);
        };
        let mut stored = false;
        for block in blocks {
            let Some((holder, field, media_type)) = media_slot(block) else {
                continue;
            };
            let Some(bytes) = holder
                .get(field)
                .and_then(Value::as_str)
                .and_then(|data| BASE64.decode(data).ok())
            else {
                continue;
            };
            let reference = self
                .store_artifact(call, &bytes, &media_type, ArtifactRole::Media, "media")
                .await?;
            if let Some(holder) = block_holder(block) {
                holder.remove(field);
                holder.insert(
                    "artifact".to_owned(),
                    json!({"id": reference.id, "size": reference.size, "sha256": reference.id}),
                );
            }
            call.status.artifacts.push(reference);
            stored = true;
        }
        Ok(stored.then_some(recorded))
    }

    /// Writes `content` durably as a blob, then records its `Artifact`
    /// (deferred: it commits with the settled call that follows it).
    async fn store_artifact(
        &self,
        call: &ToolCall,
        content: &[u8],
        media_type: &str,
        role: ArtifactRole,
        reason: &str,
    ) -> Result<ArtifactRef, EngineError> {
        let blob = self
            .blobs()?
            .put(content.to_vec())
            .await
            .map_err(EngineError::artifacts("cannot write artifact"))?;
        let mut artifact = Artifact {
            api_version: joch_core::API_VERSION.to_owned(),
            kind: <Artifact as joch_core::Object>::KIND.to_owned(),
            metadata: ObjectMeta {
                name: blob.sha256.clone(),
                namespace: call.metadata.namespace.clone(),
                uid: uuid::Uuid::new_v4().to_string(),
                creation_timestamp: Some(now()),
                ..ObjectMeta::default()
            },
            spec: ArtifactSpec {
                sha256: blob.sha256.clone(),
                media_type: media_type.to_owned(),
                size: blob.size,
                role,
                produced_by: ObjectRef::new(call.metadata.name.clone()),
                execution_ref: call.spec.execution_ref.clone(),
            },
        };
        match self
            .store
            .create_object(&mut artifact, Durability::Deferred)
            .await
        {
            // The same bytes again: one artifact, first producer kept.
            Ok(()) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(ArtifactRef {
            id: blob.sha256,
            media_type: media_type.to_owned(),
            size: blob.size,
            role,
            reason: reason.to_owned(),
        })
    }

    /// An artifact's metadata.
    ///
    /// An artifact exists for `by` when the call that produced it does
    /// (`Visibility::sees_call`); else it answers as missing.
    pub async fn get(
        &self,
        by: &Principal,
        namespace: &str,
        id: &str,
    ) -> Result<Artifact, EngineError> {
        may_in(by, namespace, &Action::Read(Collection::Artifacts))?;
        crate::resources::valid_namespace(namespace)?;
        let missing = || EngineError::NotFound {
            kind: crate::NotFoundKind::Artifact,
            name: id.to_owned(),
        };
        if !is_sha256(id) {
            return Err(missing());
        }
        let artifact: Artifact = self.store.get_object(namespace, id).await?;
        if by.tools.is_some() {
            let producer = &artifact.spec.produced_by.name;
            let seen = match self.store.get_object(namespace, producer).await {
                Ok(call) => self.visibility.sees_call(by, namespace, &call).await?,
                Err(joch_store::StoreError::NotFound { .. }) => false,
                Err(e) => return Err(e.into()),
            };
            if !seen {
                return Err(missing());
            }
        }
        Ok(artifact)
    }

    /// An artifact's bytes, all or `range` of them.
    pub async fn read(
        &self,
        by: &Principal,
        namespace: &str,
        id: &str,
        range: Option<ByteRange>,
    ) -> Result<(Artifact, Vec<u8>), EngineError> {
        let artifact = self.get(by, namespace, id).await?;
        let bytes = self
            .blobs()?
            .read(&artifact.spec.sha256, range.map(|r| (r.start, r.len())))
            .await
            .map_err(EngineError::artifacts(format!("cannot read artifact {id}")))?;
        Ok((artifact, bytes))
    }

    /// Deletes blobs no `Artifact` of any namespace names, once older than
    /// `grace`; returns how many went. Safe to run while calls settle.
    pub async fn collect_orphans(&self, grace: Duration) -> Result<usize, EngineError> {
        let Some(blobs) = self.blobs.clone() else {
            return Ok(0);
        };
        let mut referenced = HashSet::new();
        let mut continue_from = None;
        loop {
            let page = self
                .store
                .list_objects::<Artifact>(ListQuery {
                    limit: 1000,
                    continue_from,
                    ..ListQuery::default()
                })
                .await?;
            referenced.extend(page.items.into_iter().map(|a| a.spec.sha256));
            match page.continue_token {
                Some(token) => continue_from = Some(token),
                None => break,
            }
        }
        blobs
            .collect_orphans(referenced, grace)
            .await
            .map_err(EngineError::artifacts("cannot collect artifacts"))
    }
}

/// The bytes an artifact of `answer` holds, and their media type: a string
/// as itself, an MCP result of text blocks as their text, anything else as
/// pretty JSON (one value per line helps the line tools).
fn content_of(answer: &Value) -> (Vec<u8>, &'static str) {
    if let Value::String(text) = answer {
        return (text.clone().into_bytes(), "text/plain; charset=utf-8");
    }
    if let Some(blocks) = answer.get("content").and_then(Value::as_array) {
        let texts: Option<Vec<&str>> = blocks
            .iter()
            .map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        if let Some(texts) = texts.filter(|t| !t.is_empty()) {
            return (texts.join("\n").into_bytes(), "text/plain; charset=utf-8");
        }
    }
    let json = serde_json::to_vec_pretty(answer).unwrap_or_default();
    (json, "application/json")
}

/// True when an MCP-shaped result carries media bytes.
fn has_media(answer: &Value) -> bool {
    answer
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|blocks| blocks.iter().any(|b| media_slot(b).is_some()))
}

/// Where a content block's media bytes are: image and audio blocks hold
/// `data`, embedded resources `resource.blob`.
fn media_slot(block: &Value) -> Option<(&Map<String, Value>, &'static str, String)> {
    let kind = block.get("type").and_then(Value::as_str)?;
    let (holder, field) = match kind {
        "image" | "audio" => (block.as_object()?, "data"),
        "resource" => (block.get("resource")?.as_object()?, "blob"),
        _ => return None,
    };
    let media_type = holder.get("mimeType").and_then(Value::as_str)?.to_owned();
    let is_media = kind != "resource" || is_media_type(&media_type);
    (is_media && holder.get(field).is_some_and(Value::is_string))
        .then_some((holder, field, media_type))
}

fn block_holder(block: &mut Value) -> Option<&mut Map<String, Value>> {
    if block.get("type").and_then(Value::as_str) == Some("resource") {
        block.get_mut("resource")?.as_object_mut()
    } else {
        block.as_object_mut()
    }
}

/// A webhook's media body as an MCP-shaped result, so every surface
/// returns media one way: image and audio as such, video and documents as
/// embedded resources.
pub(crate) fn media_result(media_type: &str, bytes: &[u8]) -> Value {
    let data = BASE64.encode(bytes);
    let block = if media_type.starts_with("image/") || media_type.starts_with("audio/") {
        let kind = media_type.split('/').next().unwrap_or("image");
        json!({"type": kind, "data": data, "mimeType": media_type})
    } else {
        json!({"type": "resource", "resource": {"uri": "joch:webhook-result", "mimeType": media_type, "blob": data}})
    };
    json!({"content": [block]})
}
