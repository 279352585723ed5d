//! The `Namespace` resource: a tenant's settings. A namespace exists
//! implicitly as soon as something is created in it; this resource only
//! carries settings that differ from the server's defaults.

use serde::{Deserialize, Serialize};

use crate::names::validate_namespace;
use crate::object::{Object, check_type};
use crate::{ObjectMeta, ValidationError};

/// A namespace's settings. Its name is the namespace's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Namespace {
    /// Always `joch.dev/v1alpha1`.
    #[serde(default = "api_version")]
    pub api_version: String,
    /// Always `Namespace`.
    #[serde(default = "namespace_kind")]
    pub kind: String,
    /// Name (the namespace itself).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The settings.
    #[serde(default)]
    pub spec: NamespaceSpec,
}

fn api_version() -> String {
    crate::API_VERSION.to_owned()
}

fn namespace_kind() -> String {
    Namespace::KIND.to_owned()
}

/// `Namespace.spec`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceSpec {
    /// How long idempotency keys hold in this namespace when a tool sets no
    /// window of its own (default: the server's, 24 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_window_seconds: Option<u64>,
}

impl Object for Namespace {
    const KIND: &'static str = "Namespace";
    const PLURAL: &'static str = "namespaces";

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn validate(&self) -> Result<(), ValidationError> {
        check_type::<Namespace>(&self.api_version, &self.kind)?;
        validate_namespace(&self.metadata.name)
    }
}
