//! Names joch gives calls before they are recorded.
//!
//! A call named by its caller may name one already recorded, so the engine
//! reads the store before it runs such a call (a call written only when it
//! settles would otherwise fail to be written after its side effect). A
//! name the engine minted cannot be taken: a surface that needs its call's
//! name before the call is recorded (MCP follows the call's output and
//! relays its upstream's questions by name) takes one here, and the engine
//! skips that read for it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::Calls;

/// The names minted and not yet recorded.
#[derive(Default)]
pub(in crate::calls) struct Minted(Arc<Mutex<HashSet<String>>>);

impl Minted {
    fn names(&self) -> MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `name` was minted and not yet used; it is used up either way.
    pub(in crate::calls) fn take(&self, name: &str) -> bool {
        self.names().remove(name)
    }
}

/// A call name minted by the engine, good for one call while held.
pub struct MintedName {
    name: String,
    minted: Arc<Mutex<HashSet<String>>>,
}

impl MintedName {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl Drop for MintedName {
    fn drop(&mut self) {
        self.minted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.name);
    }
}

impl Calls {
    /// A fresh call name, `prefix` and a UUIDv7: a call given it (while
    /// this is held) is recorded without reading whether its name is taken.
    pub fn mint_name(&self, prefix: &str) -> MintedName {
        let name = format!("{prefix}{}", uuid::Uuid::now_v7().simple());
        let minted = &self.inner.minted;
        minted.names().insert(name.clone());
        MintedName {
            name,
            minted: minted.0.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_minted_name_spares_one_read_while_it_is_held() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = crate::engine::test_engine(&dir);
        let minted = &engine.calls().inner.minted;
        let name = engine.calls().mint_name("mcp-");
        assert!(name.as_str().starts_with("mcp-"));
        assert_ne!(name.as_str(), engine.calls().mint_name("mcp-").as_str());
        assert!(!minted.take("mcp-chosen-by-a-client"));
        assert!(minted.take(name.as_str()), "minted here");
        assert!(!minted.take(name.as_str()), "good for one call only");

        let dropped = engine.calls().mint_name("");
        let text = dropped.as_str().to_owned();
        drop(dropped);
        assert!(!minted.take(&text), "forgotten once dropped");
        assert!(minted.names().is_empty());
    }
}
