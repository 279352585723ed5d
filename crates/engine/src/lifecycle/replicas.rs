//! Several joch processes on one shared store (PostgreSQL).
//!
//! Each replica hears the others' writes through [`Store::changes`], so its
//! caches and waiting callers act on them at once. Each holds a lease (a
//! `ReplicaLease` record it renews); the calls it runs carry its name in
//! `status.replica`. When a lease lapses, the survivors race to claim it
//! with a conditional update: the one whose claim wins reconciles the dead
//! replica's unfinished calls by the same rules as a restart
//! (`calls/recovery.rs`), then deletes the lease. A claim lapses like a lease, so
//! a reconciliation that fails or whose reaper dies is taken up again. Every
//! step of that reconciliation is itself a conditional update, so a call is
//! re-run at most once even then.

use std::time::Duration;

use joch_core::object::IndexFields;
use joch_core::token::ApiToken;
use joch_core::{
    Approval, Budget, Endpoint, McpServer, Namespace, Object, Phase, Policy, Tool, ToolCall,
};
use joch_store::{Change, Durability, ListQuery, Record, StoreErrorKind};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use super::Lifecycle;
use crate::EngineError;
use crate::calls::RecoveryReport;
use crate::clock::now;

/// Kind and namespace of lease records, which no API serves.
const LEASE_KIND: &str = "ReplicaLease";
const LEASE_NAMESPACE: &str = "joch-system";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Lease {
    expires_at_ms: i64,
    /// The survivor reconciling this lapsed replica's calls, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reaper: Option<String>,
}

impl Lease {
    fn body(expires_at_ms: i64, reaper: Option<&str>) -> String {
        let lease = Lease {
            expires_at_ms,
            reaper: reaper.map(str::to_owned),
        };
        serde_json::to_string(&lease).expect("a lease serialises")
    }
}

impl Lifecycle {
    /// Acts on the writes of other processes sharing the store, as they
    /// commit. Does nothing for a store only this process writes.
    pub(in crate::lifecycle) fn follow_store_changes(&self) -> Option<tokio::task::JoinHandle<()>> {
        let mut changes = self.inner.store.changes()?;
        // Weak: the task stops once the engine is dropped.
        let inner = std::sync::Arc::downgrade(&self.inner);
        Some(tokio::spawn(async move {
            loop {
                let change = match changes.recv().await {
                    Ok(change) => change,
                    Err(RecvError::Lagged(_)) => Change::anything(),
                    Err(RecvError::Closed) => return,
                };
                let Some(inner) = inner.upgrade() else { return };
                let lifecycle = Lifecycle { inner };
                let inner = &lifecycle.inner;
                match change.kind.as_str() {
                    crate::calls::CANCEL_KIND => {
                        inner.calls.cancel_heard(&change.namespace, &change.name);
                    }
                    Change::ANYTHING => inner.calls.recheck_cancels(),
                    McpServer::KIND => {
                        // Another replica wrote or deleted it: connections
                        // here to what it no longer is are closed.
                        let mcp = inner.mcp.clone();
                        let (namespace, name) = (change.namespace.clone(), change.name.clone());
                        tokio::spawn(async move {
                            mcp.mcp_server_changed(&namespace, &name).await;
                        });
                    }
                    _ => {}
                }
                lifecycle.touched_kind(&change.kind);
            }
        }))
    }

    /// Holds this replica's lease, renewing it every third of `ttl`, and
    /// reconciles the calls of replicas whose lease lapsed. Needs
    /// `EngineConfig::replica`.
    pub(in crate::lifecycle) fn spawn_replica_lease(
        &self,
        ttl: Duration,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let me = self.inner.replica.clone()?;
        let lifecycle = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(ttl / 3);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = lifecycle.renew_lease(&me, ttl).await {
                    tracing::warn!(error = %e, "cannot renew this replica's lease");
                    continue;
                }
                if let Err(e) = lifecycle.reap_lapsed_replicas(&me, ttl).await {
                    tracing::warn!(error = %e, "cannot reconcile the calls of a lapsed replica");
                }
            }
        }))
    }

    async fn renew_lease(&self, me: &str, ttl: Duration) -> Result<(), EngineError> {
        let store = &self.inner.store;
        let expires_at_ms = now().0.timestamp_millis().saturating_add(millis(ttl));
        let body = Lease::body(expires_at_ms, None);
        match store.get(LEASE_KIND, LEASE_NAMESPACE, me).await {
            Ok(mut lease) => {
                let version = lease.resource_version;
                lease.resource_version += 1;
                lease.body = body;
                store.update(lease, version, Durability::Sync).await?;
            }
            Err(e) if e.kind() == StoreErrorKind::NotFound => {
                let lease = Record {
                    kind: LEASE_KIND.to_owned(),
                    namespace: LEASE_NAMESPACE.to_owned(),
                    name: me.to_owned(),
                    resource_version: 1,
                    labels: Default::default(),
                    index: IndexFields::default(),
                    body,
                };
                store.create(lease, Durability::Sync).await?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Claims each lapsed lease (or lapsed claim) whose conditional update
    /// this replica wins, reconciles that replica's calls, and only then
    /// deletes the lease: a reconciliation that fails is retried once the
    /// claim lapses, here or on another survivor.
    async fn reap_lapsed_replicas(&self, me: &str, ttl: Duration) -> Result<(), EngineError> {
        let store = &self.inner.store;
        let query = ListQuery {
            kind: LEASE_KIND.to_owned(),
            namespace: LEASE_NAMESPACE.to_owned(),
            limit: 1000,
            ..ListQuery::default()
        };
        let now_ms = now().0.timestamp_millis();
        for mut lease in store.list(query).await?.items {
            let lapsed = serde_json::from_str::<Lease>(&lease.body)
                .map_or(true, |l| l.expires_at_ms < now_ms);
            if lease.name == me || !lapsed {
                continue;
            }
            // It may have died between a commit and that commit's change
            // notification: everything here waiting or cached re-reads.
            self.touched_kind(Change::ANYTHING);
            self.inner.calls.recheck_cancels();
            let version = lease.resource_version;
            lease.resource_version += 1;
            lease.body = Lease::body(now_ms.saturating_add(millis(ttl)), Some(me));
            match store.update(lease.clone(), version, Durability::Sync).await {
                Ok(_) => {}
                // Another survivor claimed it, or the replica renewed just now.
                Err(e)
                    if matches!(
                        e.kind(),
                        StoreErrorKind::Conflict | StoreErrorKind::NotFound
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(e.into()),
            }
            let report = self.recover_replica(&lease.name).await?;
            tracing::warn!(replica = %lease.name, ?report, "took over the calls of a replica whose lease lapsed");
            let claimed = Some(lease.resource_version);
            match store
                .delete(LEASE_KIND, LEASE_NAMESPACE, &lease.name, claimed)
                .await
            {
                Ok(_) => {}
                Err(e) if e.kind() == StoreErrorKind::Conflict => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reconciles the unfinished calls `replica` ran, as a restart would.
    pub(in crate::lifecycle) async fn recover_replica(
        &self,
        replica: &str,
    ) -> Result<RecoveryReport, EngineError> {
        let mut report = RecoveryReport::default();
        for phase in [Phase::Running, Phase::Pending] {
            for call in self.inner.calls.calls_in(phase).await? {
                if call.status.replica.as_deref() == Some(replica) {
                    self.inner.calls.reconcile(call, &mut report).await?;
                }
            }
        }
        // Any replica may decide an approval: those it decided but did not
        // act on are found by the decider, not by who recorded the call.
        for call in self.inner.calls.calls_in(Phase::AwaitingApproval).await? {
            self.inner
                .calls
                .reconcile_awaiting(call, Some(replica), &mut report)
                .await?;
        }
        // Its approvals' deadlines were timers in its memory.
        report.approvals_pending = self.inner.approvals.rearm_pending_approvals().await?;
        Ok(report)
    }
}

impl Lifecycle {
    /// Drops what the parts cached of `kind` and wakes whoever waits on
    /// it, for a write heard from another replica.
    fn touched_kind(&self, kind: &str) {
        let parts = &self.inner;
        parts.catalog.touched(kind);
        match kind {
            ToolCall::KIND => parts.calls.settled(),
            "Event" => parts.events.appended(),
            Approval::KIND => parts.approvals.changed(),
            Change::ANYTHING => {
                for kind in [
                    Tool::KIND,
                    Policy::KIND,
                    Budget::KIND,
                    Namespace::KIND,
                    ApiToken::KIND,
                    Endpoint::KIND,
                    McpServer::KIND,
                    ToolCall::KIND,
                    "Event",
                    Approval::KIND,
                ] {
                    self.touched_kind(kind);
                }
            }
            _ => {}
        }
    }
}

/// `d` in whole milliseconds, saturating: lease arithmetic never overflows.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
