//! The tamper-evident audit: a per-namespace hash chain over every settled
//! ToolCall and every Approval decision. Each entry names a record and the
//! digest of its content; its hash covers the previous entry's hash and its
//! own body, so an entry altered, removed or reordered breaks every hash
//! after it, and a record altered after its entry no longer matches its digest.

mod chain;
mod checkpoint;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Time;

pub use chain::{ChainWalk, Finding, FindingKind, LatestEntry, WalkedChain};
pub use checkpoint::{
    Checkpoint, CheckpointError, key_id, signing_key_from_hex, verifying_key_from_hex,
};
pub use ed25519_dalek::{SigningKey, VerifyingKey};

/// The `prev` of a namespace's first entry.
pub const GENESIS: &str = "";

/// What an audit entry says (its body is this, canonical JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditEntry {
    /// `ToolCall` or `Approval`.
    pub kind: String,
    /// The record's name.
    pub name: String,
    /// `sha256(JCS({kind, name, spec, status}))` of the record as stored.
    pub digest: String,
    /// The call's phase, or the approval's.
    pub phase: String,
    /// When it was appended.
    pub at: Time,
}

impl AuditEntry {
    /// The entry for record `kind`/`name` with this content, in `phase`.
    pub fn of<S: Serialize, T: Serialize>(
        kind: &str,
        name: &str,
        spec: &S,
        status: &T,
        phase: &str,
        at: Time,
    ) -> Self {
        Self {
            kind: kind.to_owned(),
            name: name.to_owned(),
            digest: record_digest(kind, name, spec, status),
            phase: phase.to_owned(),
            at,
        }
    }

    /// The entry's body: its RFC 8785 canonical JSON, what the chain hashes.
    pub fn body(&self) -> String {
        serde_jcs::to_string(self).unwrap_or_default()
    }
}

/// Digest of a record's content (not its metadata, which labels may change).
pub fn record_digest<S: Serialize, T: Serialize>(
    kind: &str,
    name: &str,
    spec: &S,
    status: &T,
) -> String {
    // Serialized straight from the record (JCS sorts the keys), not through
    // a `serde_json::Value` copy of it.
    #[derive(Serialize)]
    struct Content<'a, S, T> {
        kind: &'a str,
        name: &'a str,
        spec: &'a S,
        status: &'a T,
    }
    crate::checksum::digest(&Content {
        kind,
        name,
        spec,
        status,
    })
    .unwrap_or_default()
}

/// `sha256(prev + "\n" + body)`, lowercase hex.
pub fn chain_hash(prev: &str, body: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(prev.as_bytes());
    hasher.update(b"\n");
    hasher.update(body.as_bytes());
    crate::checksum::hex(&hasher.finalize())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_chain_depends_on_order_and_content() {
        let a = chain_hash(GENESIS, "a");
        let ab = chain_hash(&a, "b");
        assert_eq!(ab, chain_hash(&chain_hash(GENESIS, "a"), "b"));
        assert_ne!(
            ab,
            chain_hash(&chain_hash(GENESIS, "b"), "a"),
            "order matters"
        );
        assert_ne!(ab, chain_hash(&a, "B"), "content matters");
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn digests_ignore_key_order() {
        let one = record_digest("ToolCall", "c", &json!({"a": 1, "b": 2}), &json!({}));
        let two = record_digest("ToolCall", "c", &json!({"b": 2, "a": 1}), &json!({}));
        assert_eq!(one, two);
    }

    #[test]
    fn a_digest_is_that_of_the_canonical_record() {
        // Chains written before must still verify: the digest is defined on
        // the JSON `{kind, name, spec, status}`, however it is computed.
        let (spec, status) = (
            json!({"toolRef": {"name": "t"}, "input": {"q": "é"}}),
            json!({"phase": "Succeeded"}),
        );
        let expected = crate::checksum::digest(
            &json!({"kind": "ToolCall", "name": "c", "spec": spec, "status": status}),
        );
        assert_eq!(
            Some(record_digest("ToolCall", "c", &spec, &status)),
            expected
        );
        assert_ne!(
            record_digest("ToolCall", "d", &spec, &status),
            record_digest("ToolCall", "c", &spec, &status)
        );
    }
}
