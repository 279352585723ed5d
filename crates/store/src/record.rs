//! The raw store interface: records of any kind, as JSON text plus the
//! columns lists filter on.

use std::collections::BTreeMap;

use async_trait::async_trait;
use joch_core::LabelSelector;
use joch_core::object::IndexFields;

use crate::StoreError;

/// How durable a write must be before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledged only once synced to disk: survives `kill -9` and power loss.
    Sync,
    /// Acknowledged once committed, before the commit is synced: it survives
    /// `kill -9`, and power loss once the next `Sync` write is acknowledged
    /// (writes commit in order). So it suits a record whose loss to a power
    /// cut is harmless until a later, synced write follows it: the `Pending`
    /// record of a read-only call, whose result write is synced.
    Deferred,
}

/// One stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `Tool`, `ToolCall`, ...
    pub kind: String,
    /// Tenant.
    pub namespace: String,
    /// Unique within kind and namespace.
    pub name: String,
    /// Incremented by every write; compared by `update` and `delete`.
    pub resource_version: u64,
    /// The object's labels, for `labelSelector`.
    pub labels: BTreeMap<String, String>,
    /// Secondary index columns.
    pub index: IndexFields,
    /// The whole object as JSON.
    pub body: String,
}

impl Record {
    /// The creation time the store indexes: a ToolCall's only, so that
    /// every other kind's rows are in `objects_by_kind` (see
    /// [`ListQuery::creation_condition`]).
    pub fn created_at(&self) -> Option<i64> {
        self.index
            .created_ms
            .filter(|_| self.kind == CREATION_INDEXED)
    }
}

/// A claim on an idempotency key, made atomically with a call's creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyClaim {
    /// The tool the key is scoped to (keys are per namespace and tool).
    pub tool: String,
    /// The key, at most 255 characters.
    pub key: String,
    /// The claiming call's checksum, to tell a retry from a reuse.
    pub checksum: String,
    /// Now, in unix milliseconds: a claim whose expiry has passed is replaced.
    pub now_ms: i64,
    /// When this claim lapses, in unix milliseconds.
    pub expires_at_ms: i64,
}

/// One event of an execution's timeline. The store numbers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// Tenant.
    pub namespace: String,
    /// The execution whose timeline it extends.
    pub execution: String,
    /// 1, 2, 3... within the execution; assigned by [`Store::append_event`].
    pub sequence: u64,
    /// The event as JSON, without its sequence number.
    pub body: String,
}

/// A committed write, as another process sharing the store hears of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The object's kind, or `Event` for a timeline append.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// The object's name, or the execution of an appended event.
    pub name: String,
}

impl Change {
    /// Kind of [`Change::anything`]: changes went unheard, so any object may
    /// have changed.
    pub const ANYTHING: &'static str = "*";

    /// Changes went unheard: anything may have changed.
    pub fn anything() -> Self {
        Self {
            kind: Self::ANYTHING.to_owned(),
            namespace: String::new(),
            name: String::new(),
        }
    }
}

/// One entry of a namespace's audit chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Tenant.
    pub namespace: String,
    /// 1, 2, 3... within the namespace; assigned by [`Store::append_audit`].
    pub seq: u64,
    /// The hash of the entry before (empty for the first).
    pub prev: String,
    /// `sha256(prev + "\n" + body)`.
    pub hash: String,
    /// The entry, canonical JSON.
    pub body: String,
}

/// A list request. Results come newest first.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Kind to list.
    pub kind: String,
    /// Namespace to list; empty lists every namespace (for recovery).
    pub namespace: String,
    /// Only objects whose labels match.
    pub selector: LabelSelector,
    /// Only objects whose index columns equal these values.
    pub index: IndexFields,
    /// At most this many items (the caller bounds it).
    pub limit: usize,
    /// The `continue` token of the previous page.
    pub continue_from: Option<String>,
    /// Only objects created at or after this unix millisecond (kinds that
    /// index their creation: ToolCalls). With either bound, the list runs
    /// by creation time, newest first, served by the `objects_by_created`
    /// index, and its `continue` tokens are of that order.
    pub created_since_ms: Option<i64>,
    /// Only objects created before this unix millisecond (see
    /// [`ListQuery::created_since_ms`]).
    pub created_before_ms: Option<i64>,
    /// Every row of the kind, in `seq` order, whatever its index columns
    /// hold, read from the table rather than an index: for the audit's
    /// verifier, so that a row written around joch (with no creation
    /// time, say) cannot hide from it.
    pub every_row: bool,
}

impl ListQuery {
    /// True when the query bounds creation time, so that the list runs by
    /// creation time rather than by `seq`.
    pub fn is_ranged(&self) -> bool {
        self.created_since_ms.is_some() || self.created_before_ms.is_some()
    }

    /// True when the list runs by creation time, newest first, and its
    /// `continue` tokens are of that order: it is ranged, or it lists a
    /// namespace's ToolCalls narrowed by no indexed column (their only
    /// index by kind is the one by creation; see the SQLite migration
    /// `0011_fewer_pages.sql`).
    pub fn by_creation(&self) -> bool {
        let i = &self.index;
        let narrowed =
            i.tool.is_some() || i.phase.is_some() || i.execution.is_some() || i.checksum.is_some();
        self.is_ranged()
            || (self.kind == CREATION_INDEXED
                && !self.namespace.is_empty()
                && !narrowed
                && !self.every_row)
    }

    /// What the list asks of `created_at` beyond its range, so that a
    /// store's partial indexes serve it: no creation time for any kind but
    /// ToolCall (`objects_by_kind`), one for a list by creation that no
    /// range bounds (`objects_by_created`).
    pub fn creation_condition(&self) -> Option<&'static str> {
        if self.every_row {
            None
        } else if self.kind != CREATION_INDEXED {
            Some("created_at IS NULL")
        } else if self.by_creation() && !self.is_ranged() {
            Some("created_at IS NOT NULL")
        } else {
            None
        }
    }
}

/// The kind whose records carry a creation time (`IndexFields::created_ms`).
pub const CREATION_INDEXED: &str = "ToolCall";

/// Which ToolCall costs to sum, and how to group them.
#[derive(Debug, Clone, Default)]
pub struct CostQuery {
    /// Empty sums every namespace.
    pub namespace: String,
    /// Only calls settled at or after this unix millisecond.
    pub since_ms: Option<i64>,
    /// One total per tool, agent, execution or namespace, or one in all.
    pub group_by: CostGroup,
    /// Only this tool's calls.
    pub tool: Option<String>,
    /// Only this agent's calls.
    pub agent: Option<String>,
    /// Only this execution's calls.
    pub execution: Option<String>,
    /// Only calls priced in this currency.
    pub currency: Option<String>,
}

/// `groupBy` of a cost report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CostGroup {
    /// By tool name.
    Tool,
    /// By agent (calls without one under `""`).
    Agent,
    /// By execution (calls without one under `""`).
    Execution,
    /// By namespace.
    Namespace,
    /// One total.
    #[default]
    All,
}

/// One line of a cost report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostTotal {
    /// The tool, agent, execution or namespace; `""` for none or for `All`.
    pub key: String,
    /// The currency of `micros`.
    pub currency: String,
    /// Millionths of a unit.
    pub micros: i64,
    /// How many calls.
    pub calls: u64,
}

/// A rate limit's allowance for one key, kept in the store so that every
/// replica draws on the same one (GCRA: the cell holds the time at which
/// the allowance is whole again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateCell {
    /// The namespace whose settings set the limit.
    pub namespace: String,
    /// The limit, with its rate: changing the rate starts a new cell.
    pub limit: String,
    /// What the limit counts separately (an agent, a tool, or `""`).
    pub key: String,
    /// Milliseconds between calls at the sustained rate.
    pub interval_ms: i64,
    /// How far ahead of now the cell may run: the burst, in milliseconds.
    pub tolerance_ms: i64,
}

impl RateCell {
    /// How long until a call could be taken from a cell whole again at
    /// `tat`: a call is taken when `max(tat, now) + interval` stays within
    /// `tolerance` of now.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn wait_ms(&self, tat: i64, now_ms: i64) -> u64 {
        let due = tat.max(now_ms) + self.interval_ms - self.tolerance_ms;
        u64::try_from(due - now_ms).unwrap_or(0).max(1)
    }
}

/// One page of a list.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The items, newest first.
    pub items: Vec<Record>,
    /// Token for the next page, when there may be one.
    pub continue_token: Option<String>,
}

/// A namespaced object store with optimistic concurrency.
///
/// Writes are applied in the order they are submitted. A write acknowledged
/// with [`Durability::Sync`] survives a crash, as do all writes submitted
/// before it.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Inserts a new object. `AlreadyExists` if the name is taken.
    async fn create(&self, record: Record, durability: Durability) -> Result<(), StoreError>;

    /// Inserts a new call and claims its idempotency key in one atomic step:
    /// either both happen or neither. `KeyClaimed` if a live claim exists.
    async fn create_claimed(
        &self,
        record: Record,
        claim: IdempotencyClaim,
        durability: Durability,
    ) -> Result<(), StoreError>;

    /// Inserts a new object and appends `audit` to its namespace's audit
    /// chain in the same write: both land, or neither (`AlreadyExists` if
    /// the name is taken). Once this returns, every reader of the chain
    /// finds the entry in it. For a record written once, already settled.
    async fn create_audited(
        &self,
        record: Record,
        audit: String,
        durability: Durability,
    ) -> Result<(), StoreError>;

    /// Removes claims that expired before `now_ms`, and rate cells whose
    /// allowance is whole again by then (such a cell says nothing a missing
    /// one does not); returns how many rows went.
    async fn purge_expired_keys(&self, now_ms: i64) -> Result<usize, StoreError>;

    /// Replaces an object whose stored version is `expected_version`.
    /// `NotFound` if absent, `Conflict` if the version differs.
    async fn update(
        &self,
        record: Record,
        expected_version: u64,
        durability: Durability,
    ) -> Result<(), StoreError>;

    /// Like [`Store::update`], and appends `audit` to the record's namespace's
    /// audit chain in the same write: both land, or neither. Once this
    /// returns, every reader of the chain finds the entry in it.
    async fn update_audited(
        &self,
        record: Record,
        expected_version: u64,
        audit: String,
        durability: Durability,
    ) -> Result<(), StoreError>;

    /// Removes an object, if `expected_version` (when given) is current, and
    /// returns what was removed. Deletes are always synced.
    async fn delete(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
        expected_version: Option<u64>,
    ) -> Result<Record, StoreError>;

    /// Reads one object.
    async fn get(&self, kind: &str, namespace: &str, name: &str) -> Result<Record, StoreError>;

    /// Lists objects, newest first, one page at a time.
    async fn list(&self, query: ListQuery) -> Result<Page, StoreError>;

    /// Appends an event to its execution's timeline, numbering it after the
    /// last one; returns the number. Ordered with every other write.
    async fn append_event(
        &self,
        event: EventRecord,
        durability: Durability,
    ) -> Result<u64, StoreError>;

    /// Appends an entry to the namespace's audit chain, linked to the last
    /// one by hash; returns its number. Ordered with every other write.
    async fn append_audit(
        &self,
        namespace: &str,
        body: String,
        durability: Durability,
    ) -> Result<u64, StoreError>;

    /// The namespace's audit entries numbered above `after`, in order.
    async fn list_audit(
        &self,
        namespace: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, StoreError>;

    /// The namespace's audit entries about records named `name` (a ToolCall
    /// and its Approval share the name), in order; served by an index, not
    /// a walk of the chain.
    async fn audit_of(&self, namespace: &str, name: &str) -> Result<Vec<AuditRecord>, StoreError>;

    /// Each namespace's newest audit entry, for signing checkpoints.
    async fn audit_heads(&self) -> Result<Vec<AuditRecord>, StoreError>;

    /// The execution's events numbered above `after`, oldest first.
    async fn list_events(
        &self,
        namespace: &str,
        execution: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<EventRecord>, StoreError>;

    /// How many objects match the query's kind, namespace and index
    /// columns (its selector, limit and token are ignored).
    async fn count(&self, query: ListQuery) -> Result<u64, StoreError>;

    /// As [`Store::count`], but stops at `cap`: a bounded count, for a
    /// caller that needs to know "this many, or at least `cap`" at a cost
    /// that does not grow past it.
    async fn count_at_most(&self, query: ListQuery, cap: u64) -> Result<u64, StoreError>;

    /// Sums the costs of ToolCalls that match, grouped as asked.
    async fn cost_totals(&self, query: CostQuery) -> Result<Vec<CostTotal>, StoreError>;

    /// Succeeds when the store can serve reads and writes.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Takes one call from `cell` at `now_ms` (Unix milliseconds): `None`
    /// when taken, else how many milliseconds until one could be. Counted
    /// in the store, so that replicas sharing it share the limit.
    async fn take_rate(&self, cell: &RateCell, now_ms: i64) -> Result<Option<u64>, StoreError>;

    /// Writes committed by every process sharing this store, as they commit,
    /// for a store that other processes can share; `None` for a store only
    /// this process writes (it knows its own writes). Best effort: a
    /// listener that falls behind, or loses its connection, misses some, so
    /// whoever waits on a change also polls now and then.
    fn changes(&self) -> Option<tokio::sync::broadcast::Receiver<Change>> {
        None
    }
}
