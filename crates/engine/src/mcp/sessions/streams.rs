//! The signature on the ids of a session's SSE events.
//!
//! A client whose `tools/call` stream dropped reconnects with the last
//! event id it saw (`Last-Event-ID`), and gets the call's answer on any
//! replica, from the call's record (see `joch-server`'s `mcp/resume.rs`).
//! The id names the call, so it is signed with a key the session's record
//! keeps and no client ever sees: an id made up, altered, or given out by
//! another session does not verify here.

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::McpSession;

/// Bytes of the HMAC kept in an event id (128 bits).
const TAG_BYTES: usize = 16;

impl McpSession {
    /// What signs this session's event ids; `None` for a session opened
    /// before sessions had a key (its streams are not resumable).
    pub fn stream_signer(&self) -> Option<StreamSigner> {
        (!self.stream_key.is_empty()).then(|| StreamSigner {
            session: self.id.clone(),
            key: self.stream_key.clone(),
        })
    }
}

/// Signs and checks the ids of one session's SSE events.
#[derive(Clone)]
pub struct StreamSigner {
    session: String,
    key: String,
}

impl std::fmt::Debug for StreamSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamSigner")
    }
}

impl StreamSigner {
    /// The signature of `text` (an event id without its signature).
    pub fn sign(&self, text: &str) -> String {
        let parts: [&[u8]; 3] = [self.session.as_bytes(), b"\n", text.as_bytes()];
        let mac = hmac_sha256(self.key.as_bytes(), &parts);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&mac[..TAG_BYTES])
    }

    /// Whether `tag` is this session's signature of `text`.
    pub fn verifies(&self, text: &str, tag: &str) -> bool {
        let expected = self.sign(text);
        // Compared in time independent of where they differ.
        expected.len() == tag.len()
            && expected
                .bytes()
                .zip(tag.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// HMAC-SHA256 (RFC 2104) of the concatenation of `parts`.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, key: &str) -> McpSession {
        McpSession {
            id: id.to_owned(),
            namespace: "default".to_owned(),
            principal: "anonymous".to_owned(),
            client: serde_json::Value::Null,
            last_seen_ms: 0,
            subscribed: Default::default(),
            log_level: None,
            stream_key: key.to_owned(),
            version: 1,
        }
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_tag_verifies_for_its_session_only() {
        let one = session("s1", "k1")
            .stream_signer()
            .expect("a keyed session signs");
        let tag = one.sign("call.d0");
        assert!(one.verifies("call.d0", &tag));
        assert!(!one.verifies("call.d1", &tag), "another text");
        let signer = |id, key| session(id, key).stream_signer().expect("keyed");
        assert!(
            !signer("s2", "k1").verifies("call.d0", &tag),
            "another session"
        );
        assert!(!signer("s1", "k2").verifies("call.d0", &tag), "another key");
        assert!(
            session("s1", "").stream_signer().is_none(),
            "no key, no resumption"
        );
    }
}
