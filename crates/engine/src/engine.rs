//! The engine: a facade over its parts. `Engine::new` builds them bottom
//! up, each handed the parts it needs; one accessor per part hands it out,
//! so that a caller reads `engine.approvals().approve(..)`; `start` starts
//! their workers. No part reaches back to `Engine`.

use std::collections::HashMap;
use std::sync::Arc;

use joch_core::ToolBackend;
use joch_store::Store;

use crate::EngineError;
use crate::approvals::Approvals;
use crate::artifacts::Artifacts;
use crate::audit::Audit;
use crate::calls::{self, Calls, RecoveryReport};
use crate::catalog::Catalog;
use crate::config::EngineConfig;
use crate::events::Events;
use crate::identity::Identity;
use crate::lifecycle::{self, Lifecycle, Started, Workers};
use crate::lists::Lists;
use crate::mcp::Mcp;
use crate::policies::{Policies, PolicyEngine};
use crate::resources::Resources;
use crate::rules::Visibility;
use crate::vault::Vault;

/// The call path and the resource operations, over one store and a set of
/// backends. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// The parts the facade hands out (the others are inside them).
struct Inner {
    store: Arc<dyn Store>,
    resources: Arc<Resources>,
    identity: Arc<Identity>,
    audit: Audit,
    vault: Vault,
    policies: Arc<Policies>,
    artifacts: Arc<Artifacts>,
    /// The call path, which owns the approvals part.
    calls: Calls,
    approvals: Approvals,
    mcp: Mcp,
    lifecycle: Lifecycle,
}

impl Engine {
    /// An engine over `store`, executing tools with `backends` (one per
    /// `spec.backend.type`; a later one of the same type replaces an earlier).
    pub fn new(
        store: Arc<dyn Store>,
        backends: Vec<Arc<dyn ToolBackend>>,
        policy: Arc<dyn PolicyEngine>,
        config: EngineConfig,
    ) -> Self {
        let backends: HashMap<_, _> = backends.into_iter().map(|b| (b.kind(), b)).collect();
        let catalog = Arc::new(Catalog::new(store.clone()));
        let lists = Lists::new(
            store.clone(),
            config.default_list_limit,
            config.max_list_limit,
        );
        let visibility = Visibility::new(store.clone(), catalog.clone());
        let events = Arc::new(Events::new(store.clone(), visibility.clone()));
        let resources = Arc::new(Resources::new(
            store.clone(),
            catalog.clone(),
            visibility.clone(),
            lists.clone(),
            config.host_access.clone(),
        ));
        let audit = Audit::new(store.clone(), visibility.clone());
        let identity = Arc::new(Identity::new(
            store.clone(),
            catalog.clone(),
            resources.clone(),
            config.root_token_hash.clone(),
            config.jwt.clone(),
            config.sign_ins.clone(),
        ));
        let vault = Vault::new(store.clone(), config.credentials.clone());
        let policies = Arc::new(Policies::new(store.clone(), catalog.clone(), policy));
        let mcp = Mcp::new(
            store.clone(),
            backends.clone(),
            catalog.clone(),
            resources.clone(),
            events.clone(),
            config.mcp_sessions.clone(),
            config.host_access.clone(),
        );
        let artifacts = Arc::new(Artifacts::new(
            store.clone(),
            config.artifacts.clone(),
            catalog.clone(),
            visibility.clone(),
        ));
        let needs = calls::Needs {
            store: store.clone(),
            backends: backends.clone(),
            settings: calls::Settings::of(&config),
            lists: lists.clone(),
            catalog: catalog.clone(),
            visibility: visibility.clone(),
            events: events.clone(),
            resources: resources.clone(),
            policies: policies.clone(),
            artifacts: artifacts.clone(),
            mcp: mcp.clone(),
        };
        let calls = Calls::new(needs, |decided| {
            let needs = crate::approvals::Needs {
                store: store.clone(),
                catalog: catalog.clone(),
                visibility: visibility.clone(),
                lists: lists.clone(),
                resources: resources.clone(),
                credentials: config.credentials.clone(),
                replica: config.replica.clone(),
            };
            Approvals::new(needs, decided)
        });
        let approvals = calls.approvals().clone();
        let lifecycle = Lifecycle::new(lifecycle::Needs {
            store: store.clone(),
            replica: config.replica.clone(),
            catalog,
            events,
            calls: calls.clone(),
            approvals: approvals.clone(),
            mcp: mcp.clone(),
            identity: identity.clone(),
            audit: audit.clone(),
            artifacts: artifacts.clone(),
        });
        let inner = Inner {
            store,
            resources,
            identity,
            audit,
            vault,
            policies,
            artifacts,
            calls,
            approvals,
            mcp,
            lifecycle,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The store, for health checks.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Starts joch on this engine: reconciles the calls a crash left
    /// unfinished (re-arming approval deadlines), then starts `workers`
    /// (`lifecycle/running.rs`). Nothing is answered before recovery is done.
    pub async fn start(self, workers: Workers) -> Result<Running, EngineError> {
        let started = self.inner.lifecycle.start(workers).await?;
        Ok(Running {
            engine: self,
            started,
        })
    }

    /// Tool calls: make, submit, batch, hook, resume, replay, read and follow them.
    pub fn calls(&self) -> &Calls {
        &self.inner.calls
    }

    /// Approvals: the inbox, and the decisions people make.
    pub fn approvals(&self) -> &Approvals {
        &self.inner.approvals
    }

    /// MCP: upstream servers, the front's sessions, relays to attached clients.
    pub fn mcp(&self) -> &Mcp {
        &self.inner.mcp
    }

    /// The tamper-evident audit: its entries, checkpoints and verification.
    pub fn audit(&self) -> &Audit {
        &self.inner.audit
    }

    /// Upstream credentials in the token vault.
    pub fn vault(&self) -> &Vault {
        &self.inner.vault
    }

    /// Policies tried before they are enforced: back-testing on the ledger.
    pub fn policies(&self) -> &Policies {
        &self.inner.policies
    }

    /// Configured resources (Tools, Policies, Endpoints, Budgets, Namespaces...).
    pub fn resources(&self) -> &Resources {
        &self.inner.resources
    }

    /// Who a request is: tokens, console sessions, OIDC sign-in.
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// Artifacts: large results kept by handle, and the tools that read them.
    pub fn artifacts(&self) -> &Artifacts {
        &self.inner.artifacts
    }

    /// The lifecycle part, for the engine's own tests.
    #[cfg(test)]
    pub(crate) fn lifecycle(&self) -> &Lifecycle {
        &self.inner.lifecycle
    }
}

/// A started engine and the workers it owns. Dropping it stops them;
/// [`Running::shutdown`] also signs the audit chains' last heads.
pub struct Running {
    engine: Engine,
    started: Started,
}

impl Running {
    /// The engine: cheap to clone, for every surface to call.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// What recovery found and did at start.
    pub fn recovered(&self) -> &RecoveryReport {
        self.started.recovered()
    }

    /// Stops the workers; with a checkpoint signer, signs the audit
    /// chains' last heads first (so that a tail cut after this stop is
    /// caught) and answers how many it signed.
    pub async fn shutdown(self) -> Result<usize, EngineError> {
        self.started.shutdown().await
    }
}

/// An engine over a fresh SQLite file in `dir`, with no backends: for the
/// engine's own tests.
#[cfg(test)]
pub(crate) fn test_engine(dir: &tempfile::TempDir) -> Engine {
    let store = joch_store::SqliteStore::open(dir.path().join("joch.db")).expect("store");
    Engine::new(
        Arc::new(store),
        Vec::new(),
        Arc::new(crate::policies::StandardPolicyEngine::default()),
        EngineConfig::default(),
    )
}
