//! Against a real server: `JOCH_TEST_POSTGRES` names it (`scripts/postgres`
//! starts a throwaway one). Without it, the tests that need one say so on
//! stderr and pass.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx_core::connection::Connection;
use sqlx_core::executor::Executor;
use sqlx_postgres::PgConnection;
use tokio::sync::Mutex;

use super::*;
use crate::StoreErrorKind;
use crate::testsuite;

/// The test server's URL, or `None` after saying on stderr that `test` is skipped.
fn server(test: &str) -> Option<String> {
    match std::env::var("JOCH_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipped {test}: JOCH_TEST_POSTGRES is not set \
                 (eval \"$(scripts/postgres start DIR)\" sets it)"
            );
            None
        }
    }
}

/// `url` with its database replaced by `database` (its parameters kept).
fn with_database(url: &str, database: &str) -> String {
    let (base, params) = match url.split_once('?') {
        Some((base, params)) => (base, Some(params)),
        None => (url, None),
    };
    let authority = base.find("://").map_or(0, |i| i + 3);
    let path = base[authority..]
        .find('/')
        .map_or(base.len(), |i| authority + i);
    let mut out = format!("{}/{database}", &base[..path]);
    if let Some(params) = params {
        out.push('?');
        out.push_str(params);
    }
    out
}

/// Each test's databases: new and empty when made, dropped by `drop_all`.
struct Databases {
    server: String,
    made: Mutex<Vec<String>>,
}

/// Numbers databases across the tests of this process; the pid tells apart
/// two test processes on one server.
static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Databases {
    fn new(server: String) -> Self {
        Self {
            server,
            made: Mutex::new(Vec::new()),
        }
    }

    async fn admin(&self) -> PgConnection {
        PgConnection::connect(&self.server)
            .await
            .expect("connect to JOCH_TEST_POSTGRES")
    }

    /// A new, empty database's URL.
    async fn create(&self) -> String {
        let name = format!(
            "joch_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = self.admin().await;
        // A database of that name can only be a leftover of a crashed run.
        admin
            .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
            .await
            .expect("drop leftover");
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create database");
        self.made.lock().await.push(name.clone());
        with_database(&self.server, &name)
    }

    async fn store(&self) -> PostgresStore {
        let url = self.create().await;
        PostgresStore::connect(&url, PostgresOptions::default())
            .await
            .expect("connect")
    }

    async fn drop_all(&self) {
        let mut admin = self.admin().await;
        for name in self.made.lock().await.drain(..) {
            admin
                .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await
                .expect("drop database");
        }
    }
}

#[tokio::test]
async fn postgres_passes_the_store_suite() {
    let Some(server) = server("postgres_passes_the_store_suite") else {
        return;
    };
    let databases = Databases::new(server);
    testsuite::run_all(|| async { Arc::new(databases.store().await) as Arc<dyn Store> }).await;
    databases.drop_all().await;
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

#[test]
fn the_database_is_replaced_in_a_url() {
    assert_eq!(
        with_database("postgres://joch@127.0.0.1:5432/postgres", "x"),
        "postgres://joch@127.0.0.1:5432/x"
    );
    assert_eq!(
        with_database("postgres://u:p@h/db?sslmode=disable", "x"),
        "postgres://u:p@h/x?sslmode=disable"
    );
    assert_eq!(with_database("postgres://h:1", "x"), "postgres://h:1/x");
}

mod audited;
mod replicas;
