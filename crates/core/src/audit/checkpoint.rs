//! Signed checkpoints: a namespace's chain head, signed with Ed25519 by the
//! joch that wrote it. An auditor keeps them outside joch; a chain that no
//! longer extends one was cut or rewritten, which the chain alone cannot
//! show once its newest entries and their records are gone together.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Time;
use crate::checksum::hex;

/// What a signature covers is prefixed with this, so that no other message
/// signed with the same key can pass for a checkpoint.
const DOMAIN: &str = "joch-audit-checkpoint-v1\n";

/// A signed statement that a namespace's chain had entry `seq` with hash
/// `head` at time `at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkpoint {
    /// The chain's namespace.
    pub namespace: String,
    /// The entry signed: the chain's newest when signed.
    pub seq: u64,
    /// That entry's hash.
    pub head: String,
    /// When it was signed.
    pub at: Time,
    /// [`key_id`] of the signing key.
    pub key_id: String,
    /// Ed25519 over `DOMAIN` + the RFC 8785 JSON of the other fields, hex.
    pub signature: String,
}

/// Why a key or checkpoint was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    /// The key's text is not 64 hex digits.
    #[error("not an Ed25519 key: {0}")]
    BadKey(String),
    /// The checkpoint names another key.
    #[error("checkpoint {seq} of {namespace} was signed by key {key_id}, not this one")]
    OtherKey {
        /// Its namespace.
        namespace: String,
        /// Its entry.
        seq: u64,
        /// The key it names.
        key_id: String,
    },
    /// The signature does not verify: the checkpoint was altered or forged.
    #[error("checkpoint {seq} of {namespace} has a bad signature: it was altered or forged")]
    BadSignature {
        /// Its namespace.
        namespace: String,
        /// Its entry.
        seq: u64,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    namespace: &'a str,
    seq: u64,
    head: &'a str,
    at: Time,
    key_id: &'a str,
}

impl Checkpoint {
    /// Signs entry `seq`, hash `head`, of `namespace`'s chain.
    pub fn sign(key: &SigningKey, namespace: &str, seq: u64, head: &str, at: Time) -> Self {
        let mut checkpoint = Self {
            namespace: namespace.to_owned(),
            seq,
            head: head.to_owned(),
            at,
            key_id: key_id(&key.verifying_key()),
            signature: String::new(),
        };
        checkpoint.signature = hex(&key.sign(&checkpoint.message()).to_bytes());
        checkpoint
    }

    /// Succeeds when `key` signed this checkpoint as it stands.
    pub fn verify(&self, key: &VerifyingKey) -> Result<(), CheckpointError> {
        if self.key_id != key_id(key) {
            return Err(CheckpointError::OtherKey {
                namespace: self.namespace.clone(),
                seq: self.seq,
                key_id: self.key_id.clone(),
            });
        }
        let bad = || CheckpointError::BadSignature {
            namespace: self.namespace.clone(),
            seq: self.seq,
        };
        let bytes: [u8; 64] = unhex(&self.signature)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(bad)?;
        key.verify(&self.message(), &Signature::from_bytes(&bytes))
            .map_err(|_| bad())
    }

    fn message(&self) -> Vec<u8> {
        let body = Body {
            namespace: &self.namespace,
            seq: self.seq,
            head: &self.head,
            at: self.at,
            key_id: &self.key_id,
        };
        let mut message = DOMAIN.as_bytes().to_vec();
        message.extend(serde_jcs::to_vec(&body).unwrap_or_default());
        message
    }
}

/// A key's id: the first 16 hex digits of the SHA-256 of its public key.
pub fn key_id(key: &VerifyingKey) -> String {
    hex(&Sha256::digest(key.as_bytes()))[..16].to_owned()
}

/// A signing key from its file's text: the 32-byte seed as 64 hex digits.
pub fn signing_key_from_hex(text: &str) -> Result<SigningKey, CheckpointError> {
    Ok(SigningKey::from_bytes(&key_bytes(text)?))
}

/// A public key from its file's text: 64 hex digits.
pub fn verifying_key_from_hex(text: &str) -> Result<VerifyingKey, CheckpointError> {
    VerifyingKey::from_bytes(&key_bytes(text)?)
        .map_err(|_| CheckpointError::BadKey("not a point on the curve".to_owned()))
}

fn key_bytes(text: &str) -> Result<[u8; 32], CheckpointError> {
    unhex(text.trim())
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| CheckpointError::BadKey("expected 64 hex digits".to_owned()))
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn a_checkpoint_verifies_only_as_signed() {
        let at = Time(chrono::DateTime::UNIX_EPOCH);
        let signed = Checkpoint::sign(&key(1), "ns", 7, "abc", at);
        let public = key(1).verifying_key();
        assert_eq!(signed.verify(&public), Ok(()));
        let mut moved = signed.clone();
        moved.seq = 6;
        assert!(matches!(
            moved.verify(&public),
            Err(CheckpointError::BadSignature { .. })
        ));
        let mut garbled = signed.clone();
        garbled.signature = "zz".to_owned();
        assert!(matches!(
            garbled.verify(&public),
            Err(CheckpointError::BadSignature { .. })
        ));
        assert!(matches!(
            signed.verify(&key(2).verifying_key()),
            Err(CheckpointError::OtherKey { .. })
        ));
    }

    #[test]
    fn keys_read_from_hex() {
        let seed = "01".repeat(32);
        let signing = signing_key_from_hex(&format!("{seed}\n")).expect("a seed");
        assert_eq!(signing.to_bytes(), [1; 32]);
        let public = hex(signing.verifying_key().as_bytes());
        assert_eq!(verifying_key_from_hex(&public), Ok(signing.verifying_key()));
        assert_eq!(key_id(&signing.verifying_key()).len(), 16);
        for bad in ["", "0", &"g".repeat(64), &"01".repeat(31)] {
            assert!(signing_key_from_hex(bad).is_err(), "{bad:?}");
        }
    }
}
