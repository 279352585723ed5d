//! The stores a scenario runs on, and [`storetest!`](crate::storetest), which
//! runs one scenario on each (as ripgrep's `rgtest!` runs each test under
//! both regex engines).

use std::path::PathBuf;
use std::sync::Arc;

use joch_store::testsuite::postgres::TestServer;

use super::{Joch, JochBuilder};

/// Where a scenario's joch keeps its records. A restart on the same
/// `TestStore` finds them.
pub enum TestStore {
    /// A SQLite file in a temp dir that lives as long as the store.
    Sqlite {
        db: PathBuf,
        dir: Arc<tempfile::TempDir>,
    },
    /// A fresh database on the PostgreSQL test server.
    Postgres(String),
}

impl TestStore {
    /// A fresh SQLite file.
    pub fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        TestStore::Sqlite {
            db: dir.path().join("joch.db"),
            dir: Arc::new(dir),
        }
    }

    /// A fresh database on the test server (`JOCH_TEST_POSTGRES`), and
    /// what drops it once the scenario is over; or `None` after saying on
    /// stderr that `test` is skipped.
    pub async fn postgres(test: &str) -> Option<(Self, Database)> {
        let server = TestServer::from_env(test)?;
        let (name, url) = server
            .unique_database("joch_e2e")
            .await
            .expect("create a database on the test server");
        Some((TestStore::Postgres(url), Database { server, name }))
    }

    /// A [`Joch::builder`] on this store.
    pub fn joch(&self) -> JochBuilder {
        Joch::builder().store(self)
    }
}

/// A scenario's PostgreSQL database, dropped when the scenario passed (a
/// failed one's stays, to look at).
pub struct Database {
    server: TestServer,
    name: String,
}

impl Database {
    /// Drops the database, closing what still connects to it.
    pub async fn drop(self) {
        self.server
            .drop_database(&self.name)
            .await
            .expect("drop the scenario's database");
    }
}

/// The URL of a fresh database on the test server (`JOCH_TEST_POSTGRES`),
/// or `None` after saying on stderr that `test` is skipped.
pub async fn postgres_database(test: &str) -> Option<String> {
    let server = TestServer::from_env(test)?;
    let (_, url) = server
        .unique_database("joch_e2e")
        .await
        .expect("create a database on the test server");
    Some(url)
}

/// One scenario, two tests: `NAME::sqlite` and `NAME::postgres`, the body
/// run with `$store` a [`TestStore`] of each kind. The PostgreSQL one skips
/// (saying so) when `JOCH_TEST_POSTGRES` is unset. A test attribute before
/// the name (`#[tokio::test(flavor = "multi_thread")]`) replaces the
/// default `#[tokio::test]`.
#[macro_export]
macro_rules! storetest {
    ($name:ident, |$store:ident| $body:block) => {
        $crate::storetest!(
            #[tokio::test]
            $name,
            |$store| $body
        );
    };
    (#[$test:meta] $name:ident, |$store:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[$test]
            async fn sqlite() {
                let $store = $crate::harness::TestStore::sqlite();
                $body
            }

            #[$test]
            async fn postgres() {
                let Some((store, database)) =
                    $crate::harness::TestStore::postgres(concat!(module_path!(), "::postgres"))
                        .await
                else {
                    return;
                };
                {
                    // The scenario's servers stop at the end of this block.
                    let $store = store;
                    $body
                }
                database.drop().await;
            }
        }
    };
}
