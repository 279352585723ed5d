//! One start: `Engine::start` finishes what a crash left unfinished, then
//! starts every worker that runs beside the call path, and answers a
//! `Running` handle that owns them and stops them. `joch serve`,
//! `joch mcp --db`, the embedded gateway and the bench all start joch so.

use std::time::Duration;

use tokio::task::JoinHandle;

use super::Lifecycle;
use crate::{CheckpointSigner, CheckpointSigning, EngineError, RecoveryReport};

/// The workers beside the call path, and how often each runs. The
/// defaults are `joch serve`'s.
#[derive(Debug, Clone)]
pub struct Workers {
    /// A replica's lease lasts this long, renewed every third of it (only
    /// with `EngineConfig::replica` set). Default 15 s.
    pub lease_ttl: Duration,
    /// How often expired idempotency keys and idle rate cells are removed.
    /// Default 60 s.
    pub key_purge_every: Duration,
    /// How often upstream MCP servers due a refresh are listed again.
    /// Default 1 s.
    pub mcp_refresh_tick: Duration,
    /// A hook-mode call whose result is not reported within this settles
    /// `Unknown`. Default 600 s.
    pub hook_result_timeout: Duration,
    /// Artifact files no record names, older than this, are deleted (at
    /// start, then this often). Default 1 h.
    pub artifact_grace: Duration,
    /// Signs the audit chains' heads, when a key is given.
    pub checkpoint_signing: Option<CheckpointSigning>,
}

impl Default for Workers {
    fn default() -> Self {
        Workers {
            lease_ttl: Duration::from_secs(15),
            key_purge_every: Duration::from_secs(60),
            mcp_refresh_tick: Duration::from_secs(1),
            hook_result_timeout: Duration::from_secs(600),
            artifact_grace: Duration::from_secs(3600),
            checkpoint_signing: None,
        }
    }
}

/// The workers a start left running, and what its recovery found.
/// Dropping it stops them (the engine's `Running` holds it).
pub(crate) struct Started {
    recovered: RecoveryReport,
    tasks: Vec<JoinHandle<()>>,
    signer: Option<CheckpointSigner>,
}

impl Lifecycle {
    /// Reconciles the calls a crash left unfinished (re-arming approval
    /// deadlines), then starts `workers`. Nothing is answered before
    /// recovery is done.
    pub(crate) async fn start(&self, workers: Workers) -> Result<Started, EngineError> {
        let parts = &self.inner;
        let recovered = parts.calls.recover().await?;
        let mut tasks = Vec::new();
        tasks.extend(self.follow_store_changes());
        tasks.extend(self.spawn_replica_lease(workers.lease_ttl));
        tasks.push(self.spawn_artifact_collector(workers.artifact_grace));
        tasks.push(parts.calls.spawn_key_purger(workers.key_purge_every));
        tasks.push(parts.mcp.spawn_mcp_session_expiry());
        tasks.push(parts.identity.spawn_sign_in_sweeper());
        tasks.push(parts.mcp.spawn_mcp_refresher(workers.mcp_refresh_tick));
        tasks.push(
            parts
                .calls
                .spawn_overdue_sweeper(workers.hook_result_timeout),
        );
        let signer = workers
            .checkpoint_signing
            .map(|signing| parts.audit.spawn_checkpoint_signer(signing));
        Ok(Started {
            recovered,
            tasks,
            signer,
        })
    }

    /// Deletes artifact files no record names, older than `grace`: once at
    /// start (after recovery, so a crash's orphans go), then every `grace`.
    fn spawn_artifact_collector(&self, grace: Duration) -> JoinHandle<()> {
        let artifacts = self.inner.artifacts.clone();
        tokio::spawn(async move {
            loop {
                match artifacts.collect_orphans(grace).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(removed = n, "collected orphan artifact files"),
                    Err(e) => tracing::warn!(error = %e, "cannot collect orphan artifact files"),
                }
                tokio::time::sleep(grace).await;
            }
        })
    }
}

impl Started {
    /// What recovery found and did at start.
    pub(crate) fn recovered(&self) -> &RecoveryReport {
        &self.recovered
    }

    /// Stops the workers; with a checkpoint signer, signs the audit
    /// chains' last heads first and answers how many it signed.
    pub(crate) async fn shutdown(mut self) -> Result<usize, EngineError> {
        self.stop_tasks();
        match self.signer.take() {
            Some(signer) => signer.shutdown().await,
            None => Ok(0),
        }
    }

    fn stop_tasks(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}
