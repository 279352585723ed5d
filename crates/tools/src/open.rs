//! Opening a store and wiring the engine over it, as `joch serve` does.

#[cfg(feature = "sqlite")]
use std::path::PathBuf;
use std::sync::Arc;

use joch_backends::{
    ActionsExecutor, HttpTokenEndpoint, McpClients, NoopBackend, RestConfig, WebhookBackend,
};
use joch_core::ToolBackend;
use joch_engine::policies::StandardPolicyEngine;
use joch_engine::{Credentials, Engine, EngineConfig, Running, Workers};
use joch_store::Store;
#[cfg(feature = "sqlite")]
use joch_store::{FileBlobs, SqliteStore};
#[cfg(feature = "postgres")]
use joch_store::{PostgresOptions, PostgresStore};

use crate::Error;

/// Where the records live.
#[derive(Debug, Clone)]
pub enum StoreLocation {
    #[cfg(feature = "sqlite")]
    /// The embedded default: one SQLite file, this process's alone.
    Sqlite(PathBuf),
    #[cfg(feature = "postgres")]
    /// A PostgreSQL database that several replicas may share.
    Postgres {
        /// `postgres://user:password@host:port/database`.
        url: String,
        /// This process's pool size.
        max_connections: u32,
    },
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(feature = "sqlite")]
            StoreLocation::Sqlite(path) => write!(f, "sqlite {}", path.display()),
            // Never the user or password: this line lands in logs.
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres { url, .. } => {
                let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
                let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
                let host = host.split_once('?').map_or(host, |(h, _)| h);
                write!(f, "postgres {host}")
            }
        }
    }
}

/// Starts joch: opens the store, wires the backends (webhooks, declarative
/// actions, MCP servers, the no-op tool) and the engine, finishes what a
/// crash left unfinished, and starts `workers`. Unless `config.artifacts`
/// says where, artifacts are kept in files beside a SQLite database, or in
/// a PostgreSQL database itself (so that every replica reads them).
pub async fn open_engine(
    location: &StoreLocation,
    mut config: EngineConfig,
    workers: Workers,
) -> Result<Running, Error> {
    let store: Arc<dyn Store> = match location {
        #[cfg(feature = "sqlite")]
        StoreLocation::Sqlite(db) => {
            let store = SqliteStore::open(db).map_err(|e| {
                Error::Invalid(format!("cannot open the database {}: {e}", db.display()))
            })?;
            config
                .artifacts
                .get_or_insert_with(|| Arc::new(FileBlobs::beside(db)));
            Arc::new(store)
        }
        #[cfg(feature = "postgres")]
        StoreLocation::Postgres {
            url,
            max_connections,
        } => {
            let options = PostgresOptions {
                max_connections: *max_connections,
                ..PostgresOptions::default()
            };
            let store = PostgresStore::connect(url, options)
                .await
                .map_err(|e| Error::Invalid(format!("cannot open the store ({location}): {e}")))?;
            config
                .artifacts
                .get_or_insert_with(|| Arc::new(store.blobs()));
            Arc::new(store)
        }
    };
    start(store, config, workers).await
}

/// Starts joch on a store already open, as [`open_engine`] does once it
/// opened one: the backends, the engine, recovery, then `workers`.
pub async fn start(
    store: Arc<dyn Store>,
    mut config: EngineConfig,
    workers: Workers,
) -> Result<Running, Error> {
    joch_backends::install_crypto_provider();
    let webhook = WebhookBackend::new(RestConfig::default())
        .map_err(|e| Error::Invalid(format!("cannot build the webhook client: {e}")))?;
    let token_endpoint = HttpTokenEndpoint::new()
        .map_err(|e| Error::Invalid(format!("cannot build the token client: {e}")))?;
    let credentials = Arc::new(
        Credentials::new(
            store.clone(),
            config.vault.clone(),
            Arc::new(token_endpoint),
        )
        .with_public_url(config.public_url.clone()),
    );
    config.credentials = Some(credentials.clone());
    let actions = ActionsExecutor::new(webhook.clone()).with_credentials(credentials.clone());
    let backends: Vec<Arc<dyn ToolBackend>> = vec![
        Arc::new(webhook),
        Arc::new(actions),
        Arc::new(
            McpClients::new()
                .with_credentials(credentials)
                .with_user_connections(config.mcp_user_connections)
                .with_user_connection_idle(config.mcp_user_connection_idle),
        ),
        Arc::new(NoopBackend),
    ];
    let policy = Arc::new(StandardPolicyEngine::with_budget(config.policy_budget));
    let engine = Engine::new(store, backends, policy, config);
    Ok(engine.start(workers).await?)
}
