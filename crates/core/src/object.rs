//! What every stored resource has in common.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{ObjectMeta, ValidationError};

/// A resource kind that the store keeps and the API serves.
pub trait Object: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {
    /// `kind` in manifests, e.g. `Tool`.
    const KIND: &'static str;
    /// Path segment of the collection, e.g. `tools`.
    const PLURAL: &'static str;

    /// The object's metadata.
    fn metadata(&self) -> &ObjectMeta;
    /// The object's metadata, for the server to fill in.
    fn metadata_mut(&mut self) -> &mut ObjectMeta;
    /// Checks what serde cannot: names, cross-field rules.
    fn validate(&self) -> Result<(), ValidationError>;
    /// Rewrites another accepted shape of a manifest into this kind's
    /// (e.g. seed 002's tool JSON into a `Tool`); the default accepts none.
    fn upgrade(manifest: serde_json::Value) -> serde_json::Value {
        manifest
    }

    /// Secondary index values the store keeps in columns so lists can filter
    /// on them without reading every body.
    fn index(&self) -> IndexFields {
        IndexFields::default()
    }

    /// The audit entry a write of this object must append, stamped `at`: for
    /// a settled ToolCall or a decided Approval, `None` for everything else.
    /// The store's typed writes append it in the same write as the record,
    /// so no path can store a settled record without its entry.
    fn audit_entry(&self, _at: crate::Time) -> Option<crate::audit::AuditEntry> {
        None
    }
}

/// Columns a store indexes besides kind, namespace and name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexFields {
    /// For a ToolCall, the tool it calls.
    pub tool: Option<String>,
    /// For a ToolCall, its phase.
    pub phase: Option<String>,
    /// For a ToolCall, the execution (agent run) it belongs to.
    pub execution: Option<String>,
    /// For a ToolCall, its checksum (counting repeats in an execution).
    pub checksum: Option<String>,
    /// For a ToolCall, the agent that made it.
    pub agent: Option<String>,
    /// For a ToolCall that ran, its cost (summed by cost reports and budgets).
    pub cost: Option<IndexedCost>,
    /// For a ToolCall, when it was created, in unix milliseconds: lists
    /// narrow to a time range by it. Set once, when the record is created
    /// (an update never changes it).
    pub created_ms: Option<i64>,
}

/// A call's cost as the store keeps it: exact millionths, so sums are exact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexedCost {
    /// Millionths of a unit of `currency`.
    pub micros: i64,
    /// The tool's currency.
    pub currency: String,
    /// When the call settled, in unix milliseconds.
    pub at_ms: i64,
}

/// Checks the `apiVersion` and `kind` header of a manifest against `T`.
pub fn check_type<T: Object>(api_version: &str, kind: &str) -> Result<(), ValidationError> {
    if api_version != crate::API_VERSION {
        return Err(ValidationError::field(
            "apiVersion",
            format!("must be {:?}, got {api_version:?}", crate::API_VERSION),
        ));
    }
    if kind != T::KIND {
        return Err(ValidationError::field(
            "kind",
            format!("must be {:?}, got {kind:?}", T::KIND),
        ));
    }
    Ok(())
}
