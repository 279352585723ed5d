//! The sweep: pending sign-ins and console sessions past their expiry are
//! deleted every [`SignInLimits::sweep_every`](crate::SignInLimits), so
//! that neither a sign-in never finished nor a session never presented
//! again stays in the store. Both keep their expiry in their body
//! (`expiresAtMs`); a body that cannot be read is deleted too, as nothing
//! could use it. Every replica may sweep: a delete is idempotent.

use std::sync::Arc;
use std::time::Duration;

use joch_store::{ListQuery, StoreErrorKind};
use serde::Deserialize;

use super::Identity;
use crate::EngineError;
use crate::clock::now;
use crate::identity::pending::SIGN_IN_KIND;
use crate::identity::sessions::{SESSION_KIND, SESSION_NAMESPACE};

/// Records read per page, and deletes in flight at once (synced deletes
/// share group commits).
const PAGE: usize = 500;
const DELETES_AT_ONCE: usize = 64;

/// What a sign-in's or a session's body says of its end.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Expiring {
    expires_at_ms: i64,
}

impl Identity {
    /// Sweeps every `sweep_every` of the sign-in limits (at least every
    /// 100 ms), beside the call path.
    pub(crate) fn spawn_sign_in_sweeper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let identity = Arc::clone(self);
        let every = (identity.sign_ins.sweep_every).max(Duration::from_millis(100));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match identity.sweep_expired().await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(removed = n, "swept expired sign-ins and sessions"),
                    Err(e) => tracing::warn!(error = %e, "could not sweep expired sign-ins"),
                }
            }
        })
    }

    /// Deletes the pending sign-ins and console sessions that have expired;
    /// answers how many it deleted.
    pub async fn sweep_expired(&self) -> Result<usize, EngineError> {
        let mut removed = 0;
        for kind in [SIGN_IN_KIND, SESSION_KIND] {
            removed += self.sweep_kind(kind).await?;
        }
        Ok(removed)
    }

    async fn sweep_kind(&self, kind: &str) -> Result<usize, EngineError> {
        let now_ms = now().0.timestamp_millis();
        let mut removed = 0;
        let mut continue_from = None;
        loop {
            let page = self
                .store
                .list(ListQuery {
                    kind: kind.to_owned(),
                    namespace: SESSION_NAMESPACE.to_owned(),
                    limit: PAGE,
                    continue_from,
                    ..ListQuery::default()
                })
                .await?;
            let expired: Vec<String> = page
                .items
                .iter()
                .filter(|record| {
                    serde_json::from_str::<Expiring>(&record.body)
                        .map_or(true, |e| e.expires_at_ms <= now_ms)
                })
                .map(|record| record.name.clone())
                .collect();
            removed += self.delete_all(kind, &expired).await?;
            match page.continue_token {
                Some(token) if !page.items.is_empty() => continue_from = Some(token),
                _ => break,
            }
        }
        Ok(removed)
    }

    /// Deletes `names` of `kind`, [`DELETES_AT_ONCE`] at a time; one
    /// already gone (taken by its callback, signed out) is not counted.
    async fn delete_all(&self, kind: &str, names: &[String]) -> Result<usize, EngineError> {
        let mut removed = 0;
        for batch in names.chunks(DELETES_AT_ONCE) {
            let mut deletes = tokio::task::JoinSet::new();
            for name in batch {
                let (store, kind, name) = (self.store.clone(), kind.to_owned(), name.clone());
                deletes.spawn(
                    async move { store.delete(&kind, SESSION_NAMESPACE, &name, None).await },
                );
            }
            while let Some(done) = deletes.join_next().await {
                match done.map_err(EngineError::task("sweeping expired sign-ins"))? {
                    Ok(_) => removed += 1,
                    Err(e) if e.kind() == StoreErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use joch_core::token::Role;
    use joch_store::ListQuery;

    use crate::identity::pending::SIGN_IN_KIND;
    use crate::identity::sessions::{SESSION_KIND, SESSION_NAMESPACE};
    use crate::{Engine, EngineConfig, EngineError, SignInLimits, TOO_MANY_SIGN_INS};

    fn engine(dir: &tempfile::TempDir, limits: SignInLimits) -> Engine {
        let store = joch_store::SqliteStore::open(dir.path().join("joch.db")).expect("store");
        Engine::new(
            Arc::new(store),
            Vec::new(),
            Arc::new(crate::policies::StandardPolicyEngine::default()),
            EngineConfig {
                sign_ins: limits,
                ..EngineConfig::default()
            },
        )
    }

    async fn stored(engine: &Engine, kind: &str) -> u64 {
        let query = ListQuery {
            kind: kind.to_owned(),
            namespace: SESSION_NAMESPACE.to_owned(),
            ..ListQuery::default()
        };
        engine.store().count(query).await.expect("count")
    }

    /// Beyond the cap, a client is refused saying how long to wait; another
    /// client is not; once the sign-ins expire the sweep deletes them all
    /// and the client may start again.
    #[tokio::test]
    async fn sign_ins_are_capped_per_client_and_swept_once_expired() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = SignInLimits {
            ttl: Duration::from_millis(600),
            per_client: 3,
            ..SignInLimits::default()
        };
        let engine = engine(&dir, limits);
        let (one, other) = (
            Some("192.0.2.1".parse().expect("ip")),
            Some("192.0.2.2".parse().expect("ip")),
        );
        for _ in 0..3 {
            engine.identity().begin_sign_in(one).await.expect("room");
        }
        match engine.identity().begin_sign_in(one).await {
            Err(EngineError::Throttled {
                code, retry_after, ..
            }) => {
                assert_eq!(code, TOO_MANY_SIGN_INS);
                assert_eq!(retry_after, Duration::from_secs(1));
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
        engine.identity().begin_sign_in(other).await.expect("room");
        assert_eq!(stored(&engine, SIGN_IN_KIND).await, 4);
        assert_eq!(engine.identity().sweep_expired().await.expect("sweep"), 0);

        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(engine.identity().sweep_expired().await.expect("sweep"), 4);
        assert_eq!(stored(&engine, SIGN_IN_KIND).await, 0);
        engine
            .identity()
            .begin_sign_in(one)
            .await
            .expect("room again");
    }

    /// Expired sign-ins not yet swept do not hold a client's place.
    #[tokio::test]
    async fn expired_sign_ins_make_room_before_the_sweep() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = SignInLimits {
            ttl: Duration::from_millis(300),
            per_client: 2,
            ..SignInLimits::default()
        };
        let engine = engine(&dir, limits);
        for _ in 0..2 {
            engine.identity().begin_sign_in(None).await.expect("room");
        }
        assert!(engine.identity().begin_sign_in(None).await.is_err());
        tokio::time::sleep(Duration::from_millis(400)).await;
        engine.identity().begin_sign_in(None).await.expect("room");
        assert_eq!(stored(&engine, SIGN_IN_KIND).await, 1);
    }

    /// All clients together are capped too.
    #[tokio::test]
    async fn sign_ins_are_capped_in_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = SignInLimits {
            total: 2,
            ..SignInLimits::default()
        };
        let engine = engine(&dir, limits);
        for n in 1..=2 {
            let ip = format!("192.0.2.{n}").parse().expect("ip");
            engine
                .identity()
                .begin_sign_in(Some(ip))
                .await
                .expect("room");
        }
        let ip = "198.51.100.9".parse().expect("ip");
        match engine.identity().begin_sign_in(Some(ip)).await {
            Err(EngineError::Throttled { message, .. }) => {
                assert!(message.contains("2 sign-ins under way"), "{message}");
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }

    /// A session that expired and is never presented again is swept; a
    /// live one stays.
    #[tokio::test]
    async fn expired_sessions_are_swept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = engine(&dir, SignInLimits::default());
        let (_, secret) = engine
            .identity()
            .create_token("ns", "alice", Role::Approver, None)
            .await
            .expect("token");
        let identity = engine.identity();
        let live = identity
            .open_session(&secret, Duration::from_secs(3600))
            .await
            .expect("open")
            .expect("a session");
        identity
            .open_session(&secret, Duration::ZERO)
            .await
            .expect("open")
            .expect("a session");
        assert_eq!(stored(&engine, SESSION_KIND).await, 2);
        assert_eq!(identity.sweep_expired().await.expect("sweep"), 1);
        assert_eq!(stored(&engine, SESSION_KIND).await, 1);
        assert!(identity.session(&live.id).await.expect("read").is_some());
    }
}
