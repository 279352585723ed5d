//! One start: [`Engine::start`] finishes what a crash left unfinished, then
//! starts every worker that runs beside the call path, and answers a
//! [`Running`] handle that owns them and stops them. `joch serve`,
//! `joch mcp --db`, the embedded gateway and the bench all start joch so.

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{CheckpointSigner, CheckpointSigning, Engine, EngineError, RecoveryReport};

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

/// A started engine and the workers it owns. Dropping it stops them;
/// [`Running::shutdown`] also signs the audit chains' last heads.
pub struct Running {
    engine: Engine,
    recovered: RecoveryReport,
    tasks: Vec<JoinHandle<()>>,
    signer: Option<CheckpointSigner>,
}

impl Engine {
    /// Starts joch on this engine: reconciles the calls a crash left
    /// unfinished (re-arming approval deadlines), then starts `workers`.
    /// Nothing is answered before recovery is done.
    pub async fn start(self, workers: Workers) -> Result<Running, EngineError> {
        let recovered = self.calls().recover().await?;
        let mut tasks = Vec::new();
        tasks.extend(self.follow_store_changes());
        tasks.extend(self.spawn_replica_lease(workers.lease_ttl));
        tasks.push(self.spawn_artifact_collector(workers.artifact_grace));
        tasks.push(self.calls().spawn_key_purger(workers.key_purge_every));
        tasks.push(self.inner.mcp.spawn_mcp_session_expiry());
        tasks.push(self.inner.identity.spawn_sign_in_sweeper());
        tasks.push(self.inner.mcp.spawn_mcp_refresher(workers.mcp_refresh_tick));
        tasks.push(self.calls().spawn_overdue_sweeper(workers.hook_result_timeout));
        let signer = workers
            .checkpoint_signing
            .map(|signing| self.audit().spawn_checkpoint_signer(signing));
        Ok(Running {
            engine: self,
            recovered,
            tasks,
            signer,
        })
    }

    /// Deletes artifact files no record names, older than `grace`: once at
    /// start (after recovery, so a crash's orphans go), then every `grace`.
    fn spawn_artifact_collector(&self, grace: Duration) -> JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            loop {
                match engine.artifacts().collect_orphans(grace).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(removed = n, "collected orphan artifact files"),
                    Err(e) => tracing::warn!(error = %e, "cannot collect orphan artifact files"),
                }
                tokio::time::sleep(grace).await;
            }
        })
    }
}

impl Running {
    /// The engine: cheap to clone, for every surface to call.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// What recovery found and did at start.
    pub fn recovered(&self) -> &RecoveryReport {
        &self.recovered
    }

    /// Stops the workers; with a checkpoint signer, signs the audit
    /// chains' last heads first (so that a tail cut after this stop is
    /// caught) and answers how many it signed.
    pub async fn shutdown(mut self) -> Result<usize, EngineError> {
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

impl Drop for Running {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}
