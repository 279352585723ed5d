//! Nonce-keyed output envelopes (seed 001): what a tool returns is text the
//! model reads, and an untrusted tool may return text that poses as
//! instructions, or as the end of its own output. joch wraps the
//! model-facing output of such a call in an envelope keyed by a nonce drawn
//! after the tool answered, naming the call and its checksum:
//!
//! ```text
//! <joch-output nonce="9f0c…" call="call-abc" checksum="sha256:…">
//! …the output, neutralised…
//! </joch-output nonce="9f0c…">
//! ```
//!
//! Inside, every occurrence of a marker (`<joch-output`, `</joch-output`, in
//! any case, with spaces, `_` for `-`, or a look-alike `<`) has its `<`
//! written `&lt;`, and any occurrence of the nonce is replaced: the output
//! can neither close its envelope nor forge another. Pure functions; the
//! engine draws the nonce.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The envelope's tag name.
pub const TAG: &str = "joch-output";

/// What a nonce found inside an output becomes.
const NONCE_REPLACED: &str = "[nonce]";

/// Anything a model could read as the start of an envelope marker: `<` (or
/// a look-alike), an optional `/`, the tag with `-`, `_`, spaces or
/// invisible characters between its parts.
static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    let gap = r"[\s\x{200B}-\x{200D}\x{2060}\x{FEFF}\x{00AD}]*";
    Regex::new(&format!(
        r"(?i)[<\x{{FF1C}}\x{{FE64}}\x{{2039}}\x{{27E8}}\x{{3008}}]{gap}[/\x{{2215}}\x{{FF0F}}]?{gap}joch(?:{gap}[_-]?{gap})output"
    ))
    .expect("the marker pattern is valid")
});

/// `outputEnvelope`: how the model-facing output of a call is framed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputEnvelope {
    /// As the tool returned it.
    #[default]
    None,
    /// In an envelope keyed by a fresh nonce per call (untrusted tools only).
    Nonce,
}

/// `trust`: whether a tool's output may be shown to the model as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trust {
    /// Written or vetted by the operator: never enveloped.
    Trusted,
    /// Text from elsewhere (a webhook, an MCP upstream): enveloped when
    /// `outputEnvelope: nonce`.
    Untrusted,
}

/// What an envelope names: the nonce, the call, the call's checksum.
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    /// Fresh and unguessable per call, drawn after the tool answered.
    pub nonce: &'a str,
    /// The call's id (`metadata.name`).
    pub call_id: &'a str,
    /// The call's `status.checksum`.
    pub checksum: &'a str,
}

impl Envelope<'_> {
    /// `text` neutralised and framed: exactly one opening and one closing
    /// marker, both joch's.
    pub fn render(&self, text: &str) -> String {
        let body = neutralise(text, self.nonce);
        format!(
            "<{TAG} nonce=\"{nonce}\" call=\"{call}\" checksum=\"{checksum}\">\n{body}\n</{TAG} nonce=\"{nonce}\">",
            nonce = attribute(self.nonce),
            call = attribute(self.call_id),
            checksum = attribute(self.checksum),
        )
    }

    /// A model-facing output, enveloped: a string is framed as it is; an MCP
    /// `CallToolResult` (a `content` array) keeps its shape, each text block
    /// framed; anything else is framed as its JSON text.
    pub fn wrap(&self, output: Value) -> Value {
        match output {
            Value::String(text) => Value::String(self.render(&text)),
            Value::Object(mut result) if result.get("content").is_some_and(Value::is_array) => {
                if let Some(Value::Array(blocks)) = result.get_mut("content") {
                    for block in blocks.iter_mut() {
                        if block.get("type").and_then(Value::as_str) != Some("text") {
                            continue;
                        }
                        if let Some(Value::String(text)) = block.get_mut("text") {
                            *text = self.render(text);
                        }
                    }
                }
                Value::Object(result)
            }
            other => Value::String(self.render(&other.to_string())),
        }
    }
}

/// `text` with every envelope marker defused (its `<` written `&lt;`) and
/// every occurrence of `nonce` replaced.
pub fn neutralise<'t>(text: &'t str, nonce: &str) -> Cow<'t, str> {
    let defused = MARKER.replace_all(text, |caps: &regex::Captures<'_>| {
        let found = &caps[0];
        let rest = found
            .char_indices()
            .nth(1)
            .map_or("", |(at, _)| &found[at..]);
        format!("&lt;{rest}")
    });
    if nonce.is_empty() || !defused.contains(nonce) {
        return defused;
    }
    Cow::Owned(defused.replace(nonce, NONCE_REPLACED))
}

/// How many envelope markers `text` holds, opening and closing alike.
pub fn markers_in(text: &str) -> usize {
    MARKER.find_iter(text).count()
}

/// An attribute value that cannot end its quotes or its tag.
fn attribute(value: &str) -> Cow<'_, str> {
    if value.contains(['"', '<', '>', '&', '\n']) {
        Cow::Owned(
            value
                .replace('&', "&amp;")
                .replace('"', "&quot;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('\n', " "),
        )
    } else {
        Cow::Borrowed(value)
    }
}

#[cfg(test)]
mod tests;
