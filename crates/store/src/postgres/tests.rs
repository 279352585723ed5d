//! Against a real server: `JOCH_TEST_POSTGRES` names it (`scripts/postgres`
//! starts a throwaway one). Without it, the tests that need one say so on
//! stderr and pass.

use std::sync::Arc;
use std::time::Duration;

use sqlx_core::connection::Connection;
use sqlx_core::executor::Executor;
use sqlx_postgres::PgConnection;
use tokio::sync::Mutex;

use super::*;
use crate::StoreErrorKind;
use crate::testsuite;
use crate::testsuite::postgres::TestServer;

/// The test server, or `None` after saying on stderr that `test` is skipped.
fn server(test: &str) -> Option<TestServer> {
    TestServer::from_env(test)
}

/// Each test's databases: new and empty when made, dropped by `drop_all`.
struct Databases {
    server: TestServer,
    made: Mutex<Vec<String>>,
}

impl Databases {
    fn new(server: TestServer) -> Self {
        Self {
            server,
            made: Mutex::new(Vec::new()),
        }
    }

    /// A new, empty database's URL.
    async fn create(&self) -> String {
        let (name, url) = self
            .server
            .unique_database("joch_test")
            .await
            .expect("create database");
        self.made.lock().await.push(name);
        url
    }

    async fn store(&self) -> PostgresStore {
        let url = self.create().await;
        PostgresStore::connect(&url, PostgresOptions::default())
            .await
            .expect("connect")
    }

    async fn drop_all(&self) {
        for name in self.made.lock().await.drain(..) {
            self.server
                .drop_database(&name)
                .await
                .expect("drop database");
        }
    }
}

/// A store on a new database, dropped after the test.
async fn suite_store(test: &str) -> Option<(Arc<dyn Store>, testsuite::Cleanup)> {
    let server = server(test)?;
    let (name, url) = server
        .unique_database("joch_test")
        .await
        .expect("create database");
    let store = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .expect("connect");
    let store = Arc::new(store);
    let closing = Arc::clone(&store);
    let cleanup = async move {
        closing.close().await;
        server.drop_database(&name).await.expect("drop database");
    };
    Some((store, Box::pin(cleanup)))
}

/// The store suite, one test per behaviour.
mod suite {
    use super::suite_store;

    crate::store_suite!(suite_store);
}

#[tokio::test]
async fn postgres_keeps_blobs_as_files_do() {
    let Some(server) = server("postgres_keeps_blobs_as_files_do") else {
        return;
    };
    let databases = Databases::new(server);
    let (one, other) = (databases.store().await, databases.store().await);
    crate::blobs::suite::put_read_range_and_dedupe(&one.blobs()).await;
    crate::blobs::suite::orphans_go_only_after_the_grace_period(&other.blobs()).await;
    databases.drop_all().await;
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let Some(server) = server("a_newer_schema_is_refused") else {
        return;
    };
    let databases = Databases::new(server);
    let url = databases.create().await;
    let store = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .expect("open");
    store.close().await;
    let mut conn = PgConnection::connect(&url).await.expect("raw");
    conn.execute(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99, 'from the future', true, '\\x00', 0)",
    )
    .await
    .expect("bump");
    conn.close().await.expect("close");
    let err = PostgresStore::connect(&url, PostgresOptions::default())
        .await
        .err()
        .expect("refused");
    assert_eq!(err.kind(), StoreErrorKind::Unavailable);
    assert!(err.to_string().contains("newer"), "{err}");
    databases.drop_all().await;
}

#[tokio::test]
async fn a_closed_store_is_unavailable() {
    let Some(server) = server("a_closed_store_is_unavailable") else {
        return;
    };
    let databases = Databases::new(server);
    let store = databases.store().await;
    store.close().await;
    for err in [
        store.ping().await.expect_err("closed"),
        store.get("Tool", "ns", "a").await.expect_err("closed"),
        // Writes go through the batcher's connections: closed too.
        store
            .create(
                testsuite::record("Tool", "ns", "a"),
                crate::Durability::Sync,
            )
            .await
            .expect_err("closed"),
    ] {
        assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    }
    databases.drop_all().await;
}

/// `scripts/postgres` serves TLS with a self-signed certificate: a URL that
/// requires TLS gets an encrypted connection.
#[tokio::test]
async fn a_url_that_requires_tls_gets_it() {
    let Some(server) = server("a_url_that_requires_tls_gets_it") else {
        return;
    };
    let databases = Databases::new(server);
    let url = databases.create().await;
    let separator = if url.contains('?') { '&' } else { '?' };
    let store = PostgresStore::connect(
        &format!("{url}{separator}sslmode=require"),
        PostgresOptions::default(),
    )
    .await
    .expect("connect over TLS");
    let encrypted: bool =
        sqlx_core::query::query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&store.pool)
            .await
            .and_then(|row| sqlx_core::row::Row::try_get(&row, 0))
            .expect("read pg_stat_ssl");
    assert!(encrypted, "the connection is not encrypted");
    store.ping().await.expect("ping");
    drop(store);
    databases.drop_all().await;
}

/// Needs no server: nothing listens on port 1.
#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_its_password_unsaid() {
    let options = PostgresOptions {
        acquire_timeout: Duration::from_millis(300),
        ..PostgresOptions::default()
    };
    let err = PostgresStore::connect("postgres://joch:hunter2@127.0.0.1:1/joch", options)
        .await
        .err()
        .expect("unreachable");
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("cannot connect to PostgreSQL"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");

    let bad = PostgresStore::connect("postgres://joch:hunter2@[::1", PostgresOptions::default())
        .await
        .err()
        .expect("invalid");
    assert_eq!(bad.kind(), StoreErrorKind::InvalidArgument, "{bad}");
    assert!(!bad.to_string().contains("hunter2"), "{bad}");
}

mod batches;
mod chain;
mod replicas;
mod statistics;
