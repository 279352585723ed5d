//! How many sign-ins may be under way: starting one is anonymous (anyone
//! who reaches `/ui/signin/oidc` writes a record), so each client address
//! may have at most [`SignInLimits::per_client`] pending, and all clients
//! together [`SignInLimits::total`]; expired ones are swept (`sweep.rs`).
//!
//! The counts are the store's (each record carries its client's key in an
//! indexed column), so they hold across restarts and replicas. Within a
//! replica, the check and the write of one client run one at a time
//! ([`Turns`]), so concurrent starts cannot slip past the cap together;
//! across replicas a client may get one more per replica racing.

use std::hash::BuildHasher;
use std::net::IpAddr;
use std::time::Duration;

use joch_core::object::IndexFields;
use joch_store::{ListQuery, StoreErrorKind};
use serde::{Deserialize, Serialize};

use super::Identity;
use crate::EngineError;
use crate::clock::now;
use crate::identity::sessions::SESSION_NAMESPACE;

/// The stable code of a sign-in refused beyond a cap (429).
pub const TOO_MANY_SIGN_INS: joch_core::RefusalCode = joch_core::RefusalCode::TooManySignIns;

/// Kind of the pending sign-in records, which no API serves.
pub(super) const SIGN_IN_KIND: &str = "OidcSignIn";

/// A sign-in under way, as its record keeps it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Pending {
    pub(super) binding_hash: String,
    pub(super) nonce: String,
    pub(super) verifier: String,
    pub(super) expires_at_ms: i64,
}

/// Locks serialising sign-in starts, one taken per client key: a fixed
/// number, whatever the number of clients.
const TURNS: usize = 64;

/// Bounds on console sign-ins through the identity provider, each with a
/// documented default.
#[derive(Debug, Clone)]
pub struct SignInLimits {
    /// How long a started sign-in may take at the identity provider
    /// (default 600 s).
    pub ttl: Duration,
    /// Most sign-ins under way from one client address (default 20): an
    /// IPv4 address, or an IPv6 /64 (what one host is usually given).
    pub per_client: u64,
    /// Most sign-ins under way from all clients together (default 10 000).
    pub total: u64,
    /// How often expired sign-ins and console sessions are deleted
    /// (default 60 s).
    pub sweep_every: Duration,
}

impl Default for SignInLimits {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(600),
            per_client: 20,
            total: 10_000,
            sweep_every: Duration::from_secs(60),
        }
    }
}

/// One lock per stripe of client keys (see the module).
pub(crate) struct Turns {
    locks: [tokio::sync::Mutex<()>; TURNS],
    hasher: std::collections::hash_map::RandomState,
}

impl Default for Turns {
    fn default() -> Self {
        Self {
            locks: std::array::from_fn(|_| tokio::sync::Mutex::new(())),
            hasher: Default::default(),
        }
    }
}

impl Turns {
    /// Waits for `key`'s turn; it lasts as long as the guard.
    pub(crate) async fn take(&self, key: &str) -> tokio::sync::MutexGuard<'_, ()> {
        let stripe = (self.hasher.hash_one(key) % TURNS as u64) as usize;
        self.locks[stripe].lock().await
    }
}

/// The key a client's sign-ins are counted under: its IPv4 address, its
/// IPv6 /64, or `unknown` when the surface could not tell (all such
/// clients share one cap).
pub(crate) fn client_key(client: Option<IpAddr>) -> String {
    match client.map(|ip| ip.to_canonical()) {
        Some(IpAddr::V4(v4)) => v4.to_string(),
        Some(IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        None => "unknown".to_owned(),
    }
}

fn sign_ins(client: Option<&str>) -> ListQuery {
    ListQuery {
        kind: SIGN_IN_KIND.to_owned(),
        namespace: SESSION_NAMESPACE.to_owned(),
        index: IndexFields {
            execution: client.map(str::to_owned),
            ..IndexFields::default()
        },
        ..ListQuery::default()
    }
}

fn refused(message: String, retry_after: Duration) -> EngineError {
    EngineError::Throttled {
        code: TOO_MANY_SIGN_INS,
        message,
        retry_after,
    }
}

impl Identity {
    /// The bounds sign-ins are kept within.
    pub fn sign_in_limits(&self) -> &SignInLimits {
        &self.sign_ins
    }

    /// Refuses a new sign-in of `key` beyond a cap, with how long to wait.
    /// Called in `key`'s turn.
    pub(super) async fn room_for_sign_in(&self, key: &str) -> Result<(), EngineError> {
        let limits = &self.sign_ins;
        let store = &self.store;
        if store
            .count_at_most(sign_ins(Some(key)), limits.per_client)
            .await?
            >= limits.per_client
        {
            self.room_for_client(key, limits.per_client).await?;
        }
        if store.count_at_most(sign_ins(None), limits.total).await? >= limits.total {
            let total = limits.total;
            return Err(refused(
                format!(
                    "joch has {total} sign-ins under way, the most it keeps; try again once \
                     expired ones are removed"
                ),
                limits.sweep_every,
            ));
        }
        Ok(())
    }

    /// At the cap by count: expired sign-ins of `key` not yet swept are
    /// deleted now; refused if `cap` are still live, until the oldest of
    /// them expires.
    async fn room_for_client(&self, key: &str, cap: u64) -> Result<(), EngineError> {
        let store = &self.store;
        let now_ms = now().0.timestamp_millis();
        let (mut live, mut first_expiry) = (0u64, i64::MAX);
        let mut continue_from = None;
        loop {
            let page = store
                .list(ListQuery {
                    limit: 500,
                    continue_from,
                    ..sign_ins(Some(key))
                })
                .await?;
            for record in &page.items {
                let expires = serde_json::from_str::<Pending>(&record.body)
                    .map_or(i64::MIN, |p| p.expires_at_ms);
                if expires > now_ms {
                    live += 1;
                    first_expiry = first_expiry.min(expires);
                    continue;
                }
                match store
                    .delete(SIGN_IN_KIND, SESSION_NAMESPACE, &record.name, None)
                    .await
                {
                    Err(e) if e.kind() != StoreErrorKind::NotFound => return Err(e.into()),
                    _ => {}
                }
            }
            match page.continue_token {
                Some(token) if !page.items.is_empty() => continue_from = Some(token),
                _ => break,
            }
        }
        if live < cap {
            return Ok(());
        }
        let wait_ms = u64::try_from(first_expiry.saturating_sub(now_ms)).unwrap_or(0);
        let wait = wait_ms.div_ceil(1000).max(1);
        Err(refused(
            format!(
                "this address has {live} sign-ins under way, the most it may; finish one at the \
                 identity provider, or try again in {wait} s when the oldest expires"
            ),
            Duration::from_secs(wait),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_counted_by_address_or_ipv6_prefix() {
        for (client, key) in [
            (Some("192.0.2.7"), "192.0.2.7"),
            (Some("::ffff:192.0.2.7"), "192.0.2.7"),
            (Some("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64"),
            (Some("2001:db8:1:2:bbbb::9"), "2001:db8:1:2::/64"),
            (Some("::1"), "0:0:0:0::/64"),
            (None, "unknown"),
        ] {
            let ip = client.map(|c| c.parse().expect("an address"));
            assert_eq!(client_key(ip), key, "{client:?}");
        }
    }
}
