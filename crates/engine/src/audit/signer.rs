//! The checkpoint signer: signs each namespace's chain head with the
//! operator's Ed25519 key, while it moves (every `every`, or sooner once
//! `every_entries` entries were appended) and once more on shutdown.
//!
//! With replicas sharing a PostgreSQL store each may sign: the store keeps
//! one checkpoint per namespace and entry, and any number of checkpoints of
//! one chain are consistent with each other, so a second signer is harmless.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use joch_core::audit::{Checkpoint, SigningKey};
use tokio::sync::Mutex;

use super::Audit;
use crate::EngineError;
use crate::clock::now;

/// How the checkpoint signer signs.
#[derive(Clone)]
pub struct CheckpointSigning {
    /// The operator's Ed25519 key.
    pub key: SigningKey,
    /// Sign a moving head at least this often (default 60 s).
    pub every: Duration,
    /// Or sooner, once this many entries were appended since (default 10 000).
    pub every_entries: u64,
}

impl std::fmt::Debug for CheckpointSigning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointSigning")
            .field(
                "key_id",
                &joch_core::audit::key_id(&self.key.verifying_key()),
            )
            .field("every", &self.every)
            .field("every_entries", &self.every_entries)
            .finish()
    }
}

/// Per namespace, the entry last signed and when.
type Signed = HashMap<String, (u64, Instant)>;

/// The running signer; [`CheckpointSigner::shutdown`] signs a last time.
pub struct CheckpointSigner {
    audit: Audit,
    signing: CheckpointSigning,
    signed: Arc<Mutex<Signed>>,
    task: tokio::task::JoinHandle<()>,
}

impl CheckpointSigner {
    /// Stops the signer and signs every head that moved since it last
    /// signed; returns how many checkpoints it wrote.
    pub async fn shutdown(self) -> Result<usize, EngineError> {
        self.task.abort();
        let mut signed = self.signed.lock().await;
        self.audit
            .sign_heads(&self.signing, &mut signed, true)
            .await
    }
}

impl Audit {
    /// Starts signing checkpoints in the background: every head once at
    /// start, then as [`CheckpointSigning`] says.
    pub(crate) fn spawn_checkpoint_signer(&self, signing: CheckpointSigning) -> CheckpointSigner {
        let signed = Arc::new(Mutex::new(Signed::new()));
        let (audit, task_signing, task_signed) =
            (self.clone(), signing.clone(), Arc::clone(&signed));
        let poll = signing
            .every
            .min(Duration::from_secs(1))
            .max(Duration::from_millis(10));
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(poll);
            loop {
                ticks.tick().await;
                let mut signed = task_signed.lock().await;
                if let Err(e) = audit.sign_heads(&task_signing, &mut signed, false).await {
                    tracing::warn!(error = %e, "could not sign audit checkpoints");
                }
            }
        });
        CheckpointSigner {
            audit: self.clone(),
            signing,
            signed,
            task,
        }
    }

    /// Signs each namespace's head that moved since `signed` and is due (any
    /// that moved, with `all`); returns how many it signed.
    async fn sign_heads(
        &self,
        signing: &CheckpointSigning,
        signed: &mut Signed,
        all: bool,
    ) -> Result<usize, EngineError> {
        let store = &self.store;
        let mut count = 0;
        for head in store.audit_heads().await? {
            let due = is_due(signed.get(&head.namespace), head.seq, signing, all);
            if !due {
                continue;
            }
            let checkpoint =
                Checkpoint::sign(&signing.key, &head.namespace, head.seq, &head.hash, now());
            if store.put_checkpoint(&checkpoint).await? {
                count += 1;
            }
            signed.insert(head.namespace, (head.seq, Instant::now()));
        }
        Ok(count)
    }
}

/// Whether a head at `seq` should be signed, given what was signed last:
/// any head never signed, else one that moved, when `all`, or when the
/// period or the entry count since has run out.
fn is_due(last: Option<&(u64, Instant)>, seq: u64, signing: &CheckpointSigning, all: bool) -> bool {
    match last {
        None => true,
        Some((signed, _)) if *signed >= seq => false,
        Some((signed, at)) => {
            all || at.elapsed() >= signing.every || seq - signed >= signing.every_entries
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_signed_when_new_moved_and_due() {
        let signing = CheckpointSigning {
            key: SigningKey::from_bytes(&[1; 32]),
            every: Duration::from_secs(60),
            every_entries: 10,
        };
        let now = Instant::now();
        let long_ago = now.checked_sub(Duration::from_secs(61)).unwrap_or(now);
        let cases = [
            ("never signed", None, 1, false, true),
            ("unmoved", Some((5, long_ago)), 5, true, false),
            ("moved, not due", Some((5, now)), 9, false, false),
            ("moved, on shutdown", Some((5, now)), 6, true, true),
            ("moved, enough entries", Some((5, now)), 15, false, true),
            (
                "moved, period over",
                Some((5, long_ago)),
                6,
                false,
                long_ago != now,
            ),
        ];
        for (name, last, seq, all, expected) in cases {
            assert_eq!(
                is_due(last.as_ref(), seq, &signing, all),
                expected,
                "{name}"
            );
        }
    }
}
