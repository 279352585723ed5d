//! Where live connections are kept: one slot per server, set of declared
//! capabilities and, for a server taking each user's own token, user.
//!
//! A server's shared connections are few (one per capability set). A
//! per-user server's are as many as its active users, so that anyone able
//! to name a new user would otherwise make joch open one more connection
//! each time: they are bounded (`max_user`), and one unused for `idle`
//! (default 2 minutes) is closed. When the bound is reached the least recently used idle one is
//! closed for the newcomer; when every one is carrying a call, the new
//! user's call fails at once (`mcp_unavailable`, saying so) rather than
//! wait or grow.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use joch_core::mcp::McpServerSpec;
use joch_core::{CallError, ErrorCode};

use super::Connection;

/// A per-user connection unused this long is closed, by default.
pub(super) const USER_CONNECTION_IDLE: Duration = Duration::from_secs(120);

/// How many per-user connections are kept open at most, by default.
pub const MAX_USER_CONNECTIONS: usize = 64;

/// One connection's place: its lock makes concurrent first calls share
/// one connection instead of racing.
pub(super) type Slot = Arc<tokio::sync::Mutex<Option<Connection>>>;

struct Entry {
    slot: Slot,
    /// A per-user connection (bounded, closed when idle).
    user: bool,
    used: Instant,
}

type Map = Arc<Mutex<HashMap<String, Entry>>>;

/// The slots, and the bound on per-user ones.
pub(super) struct Slots {
    map: Map,
    pub(super) max_user: usize,
    /// A per-user connection unused this long is closed.
    pub(super) idle: Duration,
    /// Set once the idle sweeper runs (started with the first per-user slot).
    sweeping: OnceLock<()>,
}

impl Default for Slots {
    fn default() -> Self {
        Self {
            map: Map::default(),
            max_user: MAX_USER_CONNECTIONS,
            idle: USER_CONNECTION_IDLE,
            sweeping: OnceLock::new(),
        }
    }
}

fn lock(map: &Map) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
    map.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether connections opened for `a` serve `b`: the same transport.
pub(super) fn same_transport(a: &McpServerSpec, b: &McpServerSpec) -> bool {
    a.stdio == b.stdio && a.http == b.http && a.protocol == b.protocol
}

/// Closes `entry`'s connection if nobody uses it (no call holds it, no
/// connect is under way); true when it did (or there was none).
fn close_if_unused(entry: &Entry) -> bool {
    let Ok(mut guard) = entry.slot.try_lock() else {
        return false;
    };
    if guard
        .as_ref()
        .is_some_and(|c| Arc::strong_count(&c.client) > 1)
    {
        return false;
    }
    if let Some(connection) = guard.take() {
        connection.client.cancellation_token().cancel();
    }
    true
}

/// Closes the per-user connections unused for `idle`.
fn sweep(map: &Map, idle: Duration) {
    let now = Instant::now();
    let closed = |e: &Entry| e.user && now.duration_since(e.used) >= idle && close_if_unused(e);
    let mut map = lock(map);
    let before = map.len();
    map.retain(|_, e| !closed(e));
    if map.len() < before {
        tracing::debug!(
            closed = before - map.len(),
            "idle per-user MCP connections closed"
        );
    }
}

impl Slots {
    /// The slot for `key`, made if there is none. A new per-user slot
    /// beyond the bound takes the place of the least recently used idle
    /// one, or is refused when all are in use.
    pub(super) fn get(&self, key: String, user: bool) -> Result<Slot, CallError> {
        let now = Instant::now();
        let mut map = lock(&self.map);
        if let Some(entry) = map.get_mut(&key) {
            entry.used = now;
            return Ok(entry.slot.clone());
        }
        if user {
            self.start_sweeping();
            let open = map.values().filter(|e| e.user).count();
            if open >= self.max_user {
                let mut idle: Vec<(&String, &Entry)> = map.iter().filter(|(_, e)| e.user).collect();
                idle.sort_by_key(|(_, e)| e.used);
                let Some(evicted) = idle
                    .into_iter()
                    .find(|(_, e)| close_if_unused(e))
                    .map(|(k, _)| k.clone())
                else {
                    return Err(CallError::new(
                        ErrorCode::McpUnavailable,
                        format!(
                            "joch keeps at most {} per-user connections to upstream MCP servers and all are carrying calls: try again shortly",
                            self.max_user
                        ),
                    ));
                };
                map.remove(&evicted);
            }
        }
        let slot = Slot::default();
        map.insert(
            key,
            Entry {
                slot: slot.clone(),
                user,
                used: now,
            },
        );
        Ok(slot)
    }

    /// Closes the connections of the server whose keys start with
    /// `prefix` that were opened for another transport than `current`'s;
    /// with `None` (deleted), every one, and forgets their slots. Answers
    /// how many it closed.
    pub(super) async fn close_stale(&self, prefix: &str, current: Option<&McpServerSpec>) -> usize {
        let slots: Vec<(String, Slot)> = lock(&self.map)
            .iter()
            .filter(|(key, _)| key.starts_with(prefix))
            .map(|(key, e)| (key.clone(), e.slot.clone()))
            .collect();
        let mut closed = 0;
        for (key, slot) in slots {
            let mut slot = slot.lock().await;
            let stale = |c: &Connection| current.is_none_or(|s| !same_transport(&c.spec, s));
            if let Some(connection) = slot.take_if(|c| stale(c)) {
                connection.client.cancellation_token().cancel();
                closed += 1;
            }
            if current.is_none() {
                lock(&self.map).remove(&key);
            }
        }
        closed
    }

    /// The slot for `key`, if there is one (a connection to forget).
    pub(super) fn existing(&self, key: &str) -> Option<Slot> {
        lock(&self.map).get(key).map(|e| e.slot.clone())
    }

    /// Starts, once, a task that closes idle per-user connections even
    /// when no call comes (it ends with the backend).
    fn start_sweeping(&self) {
        self.sweeping.get_or_init(|| {
            let map: Weak<Mutex<HashMap<String, Entry>>> = Arc::downgrade(&self.map);
            let idle = self.idle;
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let mut every = tokio::time::interval(idle / 4);
                    loop {
                        every.tick().await;
                        let Some(map) = map.upgrade() else { return };
                        sweep(&map, idle);
                    }
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounded(max_user: usize) -> Slots {
        Slots {
            max_user,
            ..Slots::default()
        }
    }

    #[tokio::test]
    async fn a_new_user_takes_the_place_of_the_least_recently_used_idle_one() {
        let slots = bounded(2);
        let first = slots.get("s@a".into(), true).unwrap();
        slots.get("s@b".into(), true).unwrap();
        slots.get("s@a".into(), true).unwrap(); // a used again: b is the oldest
        slots.get("s@c".into(), true).unwrap();
        assert!(slots.existing("s@b").is_none(), "b made room");
        assert!(Arc::ptr_eq(&first, &slots.existing("s@a").unwrap()));
        // Shared connections are not counted against the bound.
        for n in 0..5 {
            slots.get(format!("shared{n}@"), false).unwrap();
        }
        assert!(slots.existing("s@c").is_some());
    }

    #[tokio::test]
    async fn idle_per_user_connections_are_swept_busy_ones_kept() {
        let slots = Slots::default();
        slots.get("s@idle".into(), true).unwrap();
        let busy = slots.get("s@busy".into(), true).unwrap();
        slots.get("shared@".into(), false).unwrap();
        for entry in lock(&slots.map).values_mut() {
            entry.used -= USER_CONNECTION_IDLE;
        }
        let _opening = busy.lock().await;
        sweep(&slots.map, USER_CONNECTION_IDLE);
        assert!(slots.existing("s@idle").is_none(), "idle: closed");
        assert!(slots.existing("s@busy").is_some(), "in use: kept");
        assert!(slots.existing("shared@").is_some(), "shared: not swept");
    }

    #[tokio::test]
    async fn a_new_user_is_refused_when_every_connection_is_busy() {
        let slots = bounded(2);
        let a = slots.get("s@a".into(), true).unwrap();
        let b = slots.get("s@b".into(), true).unwrap();
        // Each is opening (its lock held): none may be closed.
        let (_a, _b) = (a.lock().await, b.lock().await);
        let Err(refused) = slots.get("s@c".into(), true) else {
            panic!("a third connection was made room for")
        };
        assert_eq!(refused.code, ErrorCode::McpUnavailable.as_str());
        assert!(refused.message.contains("at most 2"), "{}", refused.message);
    }
}
