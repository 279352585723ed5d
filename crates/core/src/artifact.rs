//! Artifacts (seed 001's `SpooledArtifact` and `Media`): a call's result
//! kept as bytes outside the record, named by the sha256 of its content.
//!
//! This module holds the pure rules: the `Artifact` resource, the reference
//! a record keeps (`status.artifacts`), whether a result is inlined or
//! handed back as a handle, the handle itself, and HTTP range parsing. The
//! bytes live in a blob directory the store crate manages.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::names::validate_name;
use crate::object::{IndexFields, Object, check_type};
use crate::{ObjectMeta, ObjectRef, ValidationError};

/// Bytes of a handle's preview: enough to tell what the artifact is.
pub const PREVIEW_BYTES: usize = 256;

/// The metadata of one stored artifact in one namespace. Its name is the
/// sha256 (lowercase hex) of its content, so the same bytes produced twice
/// are one artifact; `producedBy` names the first call that produced them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Artifact {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Artifact`.
    #[serde(default = "artifact_kind")]
    pub kind: String,
    /// Name (the sha256), namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the bytes are and where they came from.
    pub spec: ArtifactSpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn artifact_kind() -> String {
    Artifact::KIND.to_owned()
}

/// `Artifact.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArtifactSpec {
    /// sha256 of the content, lowercase hex (also the name).
    pub sha256: String,
    /// IANA media type, e.g. `application/json`, `image/png`.
    pub media_type: String,
    /// Content length in bytes.
    pub size: u64,
    /// `handle` (a large result read through artifact tools) or `media`
    /// (an image, audio, video or document returned as itself).
    pub role: ArtifactRole,
    /// The call that produced it.
    pub produced_by: ObjectRef,
    /// That call's execution, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_ref: Option<ObjectRef>,
}

/// Why a result became an artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactRole {
    /// The caller got a handle instead of the content.
    Handle,
    /// Media returned as itself; the record keeps only its reference.
    Media,
}

impl Object for Artifact {
    const KIND: &'static str = "Artifact";
    const PLURAL: &'static str = "artifacts";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Artifact>(&self.api_version, &self.kind)?;
        if !is_sha256(&self.metadata.name) || self.metadata.name != self.spec.sha256 {
            return Err(ValidationError::field(
                "metadata.name",
                "must be the content's sha256 in lowercase hex",
            ));
        }
        validate_name("spec.producedBy.name", &self.spec.produced_by.name)
    }

    fn index(&self) -> IndexFields {
        IndexFields {
            checksum: Some(self.spec.sha256.clone()),
            execution: self.spec.execution_ref.as_ref().map(|r| r.name.clone()),
            ..IndexFields::default()
        }
    }
}

/// True for 64 lowercase hex digits: the only names blob paths are built from.
pub fn is_sha256(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What a record keeps of an artifact (`ToolCall.status.artifacts[]`):
/// enough to find, check and describe it, never the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArtifactRef {
    /// The artifact's id (its sha256).
    pub id: String,
    /// IANA media type.
    pub media_type: String,
    /// Bytes.
    pub size: u64,
    /// `handle` or `media`.
    pub role: ArtifactRole,
    /// Why: `tool`, `policy`, `caller`, `maxInlineBytes` or `media`.
    pub reason: String,
}

/// Whether a result goes inline, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineInputs {
    /// `spec.inline` of the call (the caller's, or a policy's `modify`).
    pub call: Option<bool>,
    /// True when `call` was set by a policy rather than the caller.
    pub call_set_by_policy: bool,
    /// The tool's `spec.inline`.
    pub tool: Option<bool>,
    /// The tool's `spec.maxInlineBytes`, else the namespace's.
    pub max_inline_bytes: Option<u64>,
}

impl InlineInputs {
    /// `None` to inline a result of `size` bytes, or the reason it becomes a
    /// handle. The most specific say wins: the call, then the tool; a size
    /// cap only ever turns inlining off, and there is no global threshold.
    pub fn handle_reason(&self, size: u64) -> Option<&'static str> {
        match (self.call, self.tool) {
            (Some(false), _) if self.call_set_by_policy => return Some("policy"),
            (Some(false), _) => return Some("caller"),
            (None, Some(false)) => return Some("tool"),
            _ => {}
        }
        match self.max_inline_bytes {
            Some(max) if size > max => Some("maxInlineBytes"),
            _ => None,
        }
    }
}

/// The handle a caller gets instead of a result: where the content is,
/// how big it is, a short preview, and which tools read it.
pub fn handle(call_id: &str, reference: &ArtifactRef, content: &[u8]) -> Value {
    let (preview, cut) = preview(content, PREVIEW_BYTES);
    json!({
        "artifact": {
            "id": reference.id,
            "callId": call_id,
            "mediaType": reference.media_type,
            "size": reference.size,
            "preview": preview,
            "previewTruncated": cut,
            "reason": reference.reason,
        },
        "note": "the full result is stored as an artifact: read it with artifact_head, artifact_tail, artifact_grep, artifact_slice or artifact_jq, passing this callId",
    })
}

/// The first `max` bytes of `content` as text (cut at a character
/// boundary, invalid UTF-8 replaced), and whether anything was left out.
pub fn preview(content: &[u8], max: usize) -> (String, bool) {
    if content.len() <= max {
        return (String::from_utf8_lossy(content).into_owned(), false);
    }
    let text = String::from_utf8_lossy(&content[..max]);
    // A multi-byte character split at `max` decodes as U+FFFD: drop it.
    let text = text.trim_end_matches('\u{FFFD}');
    (text.to_owned(), true)
}

/// A media type without its parameters, lowercased: the part that says
/// what the content is (`Text/CSV; charset=utf-8` → `text/csv`).
pub fn media_essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// True for media types joch returns as media (seed 001's `Media`):
/// images, audio, video and PDF documents.
pub fn is_media_type(media_type: &str) -> bool {
    let essence = media_essence(media_type);
    ["image/", "audio/", "video/"]
        .iter()
        .any(|p| essence.starts_with(p))
        || essence == "application/pdf"
}

/// A byte range to serve, inclusive of both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
}

impl ByteRange {
    /// How many bytes the range covers.
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }

    /// Never true: a satisfiable range has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Parses an HTTP `Range` header (RFC 9110 §14.1.2) against a content of
/// `size` bytes: `bytes=a-b`, `bytes=a-` or `bytes=-n`, one range only.
/// `Err` carries why it cannot be satisfied (the answer is then 416).
pub fn parse_range(header: &str, size: u64) -> Result<ByteRange, String> {
    let spec = header
        .trim()
        .strip_prefix("bytes=")
        .ok_or_else(|| format!("range {header:?} is not in bytes (bytes=a-b)"))?;
    if spec.contains(',') {
        return Err("only one range per request is supported".to_owned());
    }
    let (first, last) = spec
        .split_once('-')
        .ok_or_else(|| format!("range {header:?} has no '-'"))?;
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("range {header:?} has a bad number {s:?}"))
    };
    let range = match (first.trim().is_empty(), last.trim().is_empty()) {
        (true, true) => return Err(format!("range {header:?} names no bytes")),
        // The last n bytes.
        (true, false) => {
            let n = number(last)?;
            if n == 0 || size == 0 {
                return Err(format!("range {header:?} is empty"));
            }
            ByteRange {
                start: size.saturating_sub(n),
                end: size - 1,
            }
        }
        (false, true) => ByteRange {
            start: number(first)?,
            end: size.saturating_sub(1),
        },
        (false, false) => ByteRange {
            start: number(first)?,
            end: number(last)?.min(size.saturating_sub(1)),
        },
    };
    if range.start >= size || range.start > range.end {
        return Err(format!(
            "range {header:?} is outside the content's {size} bytes"
        ));
    }
    Ok(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_media_essence_drops_parameters_and_case() {
        assert_eq!(media_essence("Text/CSV; charset=utf-8"), "text/csv");
        assert_eq!(media_essence(" image/png "), "image/png");
        assert_eq!(media_essence(""), "");
        assert!(is_media_type("IMAGE/PNG;q=1"));
        assert!(!is_media_type("application/json"));
    }

    #[test]
    fn ranges_follow_rfc_9110() {
        let ok = |h: &str| parse_range(h, 100).map(|r| (r.start, r.end));
        assert_eq!(ok("bytes=0-9"), Ok((0, 9)));
        assert_eq!(ok("bytes=90-"), Ok((90, 99)));
        assert_eq!(ok("bytes=-10"), Ok((90, 99)));
        assert_eq!(ok("bytes=-1000"), Ok((0, 99)));
        assert_eq!(ok("bytes=95-200"), Ok((95, 99)));
        for bad in [
            "bytes=100-",
            "bytes=5-2",
            "bytes=-0",
            "items=0-1",
            "bytes=a-b",
            "bytes=0-1,4-5",
            "bytes=-",
        ] {
            assert!(ok(bad).is_err(), "{bad}");
        }
        assert!(parse_range("bytes=0-", 0).is_err());
    }

    #[test]
    fn the_most_specific_say_decides_inlining() {
        let inputs = |call, by_policy, tool, max| InlineInputs {
            call,
            call_set_by_policy: by_policy,
            tool,
            max_inline_bytes: max,
        };
        assert_eq!(inputs(None, false, None, None).handle_reason(1 << 30), None);
        assert_eq!(
            inputs(None, false, Some(false), None).handle_reason(1),
            Some("tool")
        );
        assert_eq!(
            inputs(Some(false), true, Some(true), None).handle_reason(1),
            Some("policy")
        );
        assert_eq!(
            inputs(Some(false), false, None, None).handle_reason(1),
            Some("caller")
        );
        assert_eq!(
            inputs(None, false, None, Some(10)).handle_reason(11),
            Some("maxInlineBytes")
        );
        assert_eq!(inputs(None, false, None, Some(10)).handle_reason(10), None);
        // An explicit inline: true still yields to a size cap.
        assert_eq!(
            inputs(Some(true), false, None, Some(10)).handle_reason(11),
            Some("maxInlineBytes")
        );
    }

    #[test]
    fn previews_cut_at_characters() {
        assert_eq!(preview(b"short", 10), ("short".to_owned(), false));
        let (text, cut) = preview("aé".as_bytes(), 2);
        assert_eq!((text.as_str(), cut), ("a", true));
    }

    #[test]
    fn media_types() {
        for media in [
            "image/png",
            "audio/wav",
            "video/mp4",
            "application/pdf; x=y",
        ] {
            assert!(is_media_type(media), "{media}");
        }
        for other in ["application/json", "text/plain", "application/x-ndjson"] {
            assert!(!is_media_type(other), "{other}");
        }
    }

    #[test]
    fn names_must_be_the_hash() {
        let sha = "a".repeat(64);
        let mut artifact = Artifact {
            api_version: api_version(),
            kind: artifact_kind(),
            metadata: ObjectMeta {
                name: sha.clone(),
                ..ObjectMeta::default()
            },
            spec: ArtifactSpec {
                sha256: sha,
                media_type: "text/plain".into(),
                size: 1,
                role: ArtifactRole::Handle,
                produced_by: ObjectRef::new("call-1"),
                execution_ref: None,
            },
        };
        assert!(artifact.validate().is_ok());
        artifact.metadata.name = "../etc".into();
        assert!(artifact.validate().is_err());
    }
}
