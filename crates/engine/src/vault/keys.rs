//! The vault's keys: AES-256-GCM, a fresh random 96-bit nonce per seal,
//! the record's namespace and name as associated data (a sealed token
//! copied onto another record does not open). Each key has an id derived
//! from it, recorded beside what it sealed; older keys only open, and what
//! they opened is sealed again under the current key.

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Bytes of an AES-GCM nonce.
const NONCE_LEN: usize = 12;

/// One 256-bit key and its id.
#[derive(Clone)]
pub struct VaultKey {
    /// `k-` and the first 12 hex digits of the key's sha256: tells which
    /// key sealed a record without revealing the key.
    pub id: String,
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for VaultKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VaultKey").field("id", &self.id).finish()
    }
}

impl VaultKey {
    /// A key from its base64 text (standard alphabet, 32 bytes).
    pub fn from_base64(text: &str) -> Result<Self, String> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| "a vault key must be base64".to_owned())?;
        if bytes.len() != 32 {
            return Err(format!(
                "a vault key must be 32 bytes, this one is {}",
                bytes.len()
            ));
        }
        let digest = joch_core::token::hash(&STANDARD.encode(&bytes));
        Ok(Self {
            id: format!("k-{}", &digest[..12]),
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes)),
        })
    }
}

/// The current key, which seals, and older ones, which only open.
#[derive(Debug, Clone)]
pub struct VaultKeys {
    current: VaultKey,
    previous: Vec<VaultKey>,
}

impl VaultKeys {
    /// Keys from text holding one base64 key per line (blank lines and
    /// `#` comments skipped): the first seals, the others only open.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(VaultKey::from_base64);
        let current = keys.next().ok_or("no vault key given")??;
        let previous = keys.collect::<Result<_, _>>()?;
        Ok(Self { current, previous })
    }

    /// The id of the key that seals.
    pub fn current_id(&self) -> &str {
        &self.current.id
    }

    /// `plaintext` sealed under the current key, bound to `aad`: base64 of
    /// nonce ‖ ciphertext.
    pub fn seal(&self, plaintext: &[u8], aad: &str) -> String {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let payload = Payload {
            msg: plaintext,
            aad: aad.as_bytes(),
        };
        let sealed = self
            .current
            .cipher
            .encrypt(&nonce, payload)
            .expect("AES-GCM encrypts any message under 64 GiB");
        let mut out = nonce.to_vec();
        out.extend(sealed);
        STANDARD.encode(out)
    }

    /// Opens what key `key_id` sealed for `aad`. Fails when the key is not
    /// known or the text was altered or moved to another record.
    pub fn open(&self, key_id: &str, sealed: &str, aad: &str) -> Result<Vec<u8>, String> {
        let key = std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|k| k.id == key_id)
            .ok_or_else(|| format!("vault key {key_id} is not configured"))?;
        let bytes = STANDARD
            .decode(sealed)
            .map_err(|_| "a sealed credential is not base64".to_owned())?;
        if bytes.len() < NONCE_LEN {
            return Err("a sealed credential is too short".to_owned());
        }
        let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
        let payload = Payload {
            msg: ciphertext,
            aad: aad.as_bytes(),
        };
        key.cipher
            .decrypt(Nonce::from_slice(nonce), payload)
            .map_err(|_| format!("a credential sealed under {key_id} does not open"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    const B: &str = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";

    #[test]
    fn sealed_text_opens_only_with_its_key_and_record() {
        let keys = VaultKeys::parse(A).unwrap();
        let sealed = keys.seal(b"the-token", "ns/a");
        assert!(!sealed.contains("the-token"));
        assert_ne!(sealed, keys.seal(b"the-token", "ns/a"), "fresh nonce");
        let id = keys.current_id();
        assert_eq!(keys.open(id, &sealed, "ns/a").unwrap(), b"the-token");
        assert!(keys.open(id, &sealed, "ns/b").is_err());
        let other = VaultKeys::parse(B).unwrap();
        assert!(other.open(id, &sealed, "ns/a").is_err());
    }

    #[test]
    fn a_rotated_key_still_opens_what_it_sealed() {
        let old = VaultKeys::parse(A).unwrap();
        let sealed = old.seal(b"t", "x");
        let rotated = VaultKeys::parse(&format!("{B}\n# previous\n{A}\n")).unwrap();
        assert_ne!(rotated.current_id(), old.current_id());
        assert_eq!(rotated.open(old.current_id(), &sealed, "x").unwrap(), b"t");
    }

    #[test]
    fn bad_keys_are_refused_with_a_reason() {
        for (text, reason) in [
            ("", "no vault key given"),
            ("not base64!", "must be base64"),
            ("AAAA", "must be 32 bytes"),
        ] {
            let error = VaultKeys::parse(text).unwrap_err();
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }
}
