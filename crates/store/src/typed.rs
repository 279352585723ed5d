//! Typed access to the store: objects in, objects out.
//!
//! `resourceVersion` is a per-object counter: creation writes `1`, every
//! update writes the next number, conditional on the stored one being the
//! previous. Clients treat it as opaque and only compare it for equality.
//!
//! A write of an object the audit covers (a settled ToolCall, a decided
//! Approval: [`Object::audit_entry`]) appends its entry to the namespace's
//! chain in the same write, whichever path writes it: the chain cannot miss
//! a settled record because some caller forgot it. The engine writes
//! objects only through these functions, never through raw [`Store`] writes.

use joch_core::{Object, Time};

use crate::{Durability, IdempotencyClaim, ListQuery, Record, Store, StoreError};

/// One page of typed objects.
#[derive(Debug, Clone)]
pub struct ObjectList<T> {
    /// The objects, newest first.
    pub items: Vec<T>,
    /// Token for the next page.
    pub continue_token: Option<String>,
}

impl dyn Store {
    /// Stores a new object as version 1 and sets its `resourceVersion`; an
    /// audited one (see the module) with its audit entry, in one write. On
    /// error `object` is left as it was.
    pub async fn create_object<T: Object>(
        &self,
        object: &mut T,
        durability: Durability,
    ) -> Result<(), StoreError> {
        object.metadata_mut().resource_version = "1".to_owned();
        let result = match (record_of(object), object.audit_entry(now())) {
            (Ok(record), None) => self.create(record, durability).await,
            (Ok(record), Some(entry)) => {
                self.create_audited(record, entry.body(), durability).await
            }
            (Err(e), _) => Err(e),
        };
        if result.is_err() {
            object.metadata_mut().resource_version.clear();
        }
        result
    }

    /// Stores a new object as version 1 together with its idempotency claim.
    pub async fn create_object_claimed<T: Object>(
        &self,
        object: &mut T,
        claim: IdempotencyClaim,
        durability: Durability,
    ) -> Result<(), StoreError> {
        if object.audit_entry(now()).is_some() {
            // Claims are made when a call is admitted, long before it settles.
            return Err(StoreError::Unavailable(format!(
                "{} {:?} is settled: it cannot be created with an idempotency claim",
                T::KIND,
                object.metadata().name
            )));
        }
        object.metadata_mut().resource_version = "1".to_owned();
        self.create_claimed(record_of(object)?, claim, durability)
            .await
    }

    /// Replaces the stored object if its `resourceVersion` is still the one
    /// `object` carries, then advances `object`'s version; an audited one
    /// (see the module) with its audit entry, in one write. On error `object`
    /// is left as it was.
    pub async fn update_object<T: Object>(
        &self,
        object: &mut T,
        durability: Durability,
    ) -> Result<(), StoreError> {
        let previous = object.metadata().resource_version.clone();
        let expected = previous.parse::<u64>().map_err(|_| conflict(object, 0))?;
        object.metadata_mut().resource_version = (expected + 1).to_string();
        let result = match (record_of(object), object.audit_entry(now())) {
            (Ok(record), None) => self.update(record, expected, durability).await,
            (Ok(record), Some(entry)) => {
                self.update_audited(record, expected, entry.body(), durability)
                    .await
            }
            (Err(e), _) => Err(e),
        };
        if result.is_err() {
            object.metadata_mut().resource_version = previous;
        }
        result
    }

    /// Reads one object.
    pub async fn get_object<T: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<T, StoreError> {
        object_of(&self.get(T::KIND, namespace, name).await?)
    }

    /// Deletes an object, if `expected_version` (when given) is current.
    pub async fn delete_object<T: Object>(
        &self,
        namespace: &str,
        name: &str,
        expected_version: Option<&str>,
    ) -> Result<T, StoreError> {
        let expected = match expected_version {
            Some(v) => Some(v.parse::<u64>().map_err(|_| StoreError::Conflict {
                kind: T::KIND.to_owned(),
                name: name.to_owned(),
                expected: 0,
            })?),
            None => None,
        };
        object_of(&self.delete(T::KIND, namespace, name, expected).await?)
    }

    /// Lists objects of `T`'s kind; `query.kind` is set from `T`.
    pub async fn list_objects<T: Object>(
        &self,
        mut query: ListQuery,
    ) -> Result<ObjectList<T>, StoreError> {
        query.kind = T::KIND.to_owned();
        let page = self.list(query).await?;
        let items = page.items.iter().map(object_of).collect::<Result<_, _>>()?;
        Ok(ObjectList {
            items,
            continue_token: page.continue_token,
        })
    }
}

/// When an audit entry is appended: the store's clock, read as it writes.
fn now() -> Time {
    Time(chrono::Utc::now())
}

fn record_of<T: Object>(object: &T) -> Result<Record, StoreError> {
    let meta = object.metadata();
    // Objects are trees of strings, numbers and string-keyed maps; a failure
    // here would be a bug, reported as an error rather than a crash.
    let body = serde_json::to_string(object).map_err(|e| {
        StoreError::Unavailable(format!(
            "{} {:?} cannot be encoded: {e}",
            T::KIND,
            meta.name
        ))
    })?;
    Ok(Record {
        kind: T::KIND.to_owned(),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        resource_version: meta.resource_version.parse().unwrap_or(0),
        labels: meta.labels.clone(),
        index: object.index(),
        body,
    })
}

fn object_of<T: Object>(record: &Record) -> Result<T, StoreError> {
    serde_json::from_str(&record.body).map_err(|e| {
        StoreError::Unavailable(format!(
            "stored {} {:?} cannot be read: {e}",
            record.kind, record.name
        ))
    })
}

fn conflict<T: Object>(object: &T, expected: u64) -> StoreError {
    StoreError::Conflict {
        kind: T::KIND.to_owned(),
        name: object.metadata().name.clone(),
        expected,
    }
}
