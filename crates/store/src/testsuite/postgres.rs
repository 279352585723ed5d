//! The one PostgreSQL fixture of the store suite, the end-to-end replica
//! tests and the bench: a server (`JOCH_TEST_POSTGRES` for tests;
//! `scripts/postgres` starts a throwaway one) on which each user makes
//! fresh, empty databases.

use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx_core::connection::Connection;
use sqlx_core::executor::Executor;
use sqlx_postgres::PgConnection;

/// Why a database could not be made or dropped.
pub type FixtureError = Box<dyn std::error::Error + Send + Sync>;

/// A PostgreSQL server on which tests and the bench make databases.
#[derive(Debug, Clone)]
pub struct TestServer {
    url: String,
}

/// Numbers databases across the users of this process; the pid tells apart
/// two processes on one server.
static NEXT: AtomicUsize = AtomicUsize::new(0);

impl TestServer {
    /// The server at `url` (`postgres://user@host:port/database`); its
    /// database is the one connected to for creating others.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into() }
    }

    /// The server `JOCH_TEST_POSTGRES` names, or `None` after saying on
    /// stderr that `test` is skipped.
    pub fn from_env(test: &str) -> Option<Self> {
        match std::env::var("JOCH_TEST_POSTGRES") {
            Ok(url) if !url.is_empty() => Some(Self::new(url)),
            _ => {
                eprintln!(
                    "skipped {test}: JOCH_TEST_POSTGRES is not set \
                     (eval \"$(scripts/postgres start DIR)\" sets it)"
                );
                None
            }
        }
    }

    /// Creates the empty database `name`, dropping one a crashed run may
    /// have left; its URL.
    pub async fn fresh_database(&self, name: &str) -> Result<String, FixtureError> {
        let mut admin = PgConnection::connect(&self.url).await?;
        admin
            .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
            .await?;
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await?;
        Ok(with_database(&self.url, name))
    }

    /// A new, empty database whose name (`{label}_{pid}_{n}`) no other user
    /// of this server has; its name and URL.
    pub async fn unique_database(&self, label: &str) -> Result<(String, String), FixtureError> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{label}_{}_{n}", std::process::id());
        let url = self.fresh_database(&name).await?;
        Ok((name, url))
    }

    /// Drops the database `name`, closing its connections.
    pub async fn drop_database(&self, name: &str) -> Result<(), FixtureError> {
        let mut admin = PgConnection::connect(&self.url).await?;
        admin
            .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
            .await?;
        Ok(())
    }
}

/// `url` with its database replaced by `database` (its parameters kept).
pub fn with_database(url: &str, database: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
