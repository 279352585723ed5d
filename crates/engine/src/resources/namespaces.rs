//! A namespace's settings: read (defaults when none are stored) and written.

use joch_core::{Namespace, Principal};

use super::Resources;
use crate::EngineError;

/// Most namespaces offered to a principal of every namespace.
const NAMESPACES_OFFERED: usize = 200;

impl Resources {
    /// Reads a namespace's settings (defaults when it has none stored).
    pub async fn get_namespace(
        &self,
        by: &Principal,
        namespace: &str,
    ) -> Result<Namespace, EngineError> {
        crate::rules::may_in(
            by,
            namespace,
            &crate::rules::Action::Read(crate::rules::Collection::Namespaces),
        )?;
        crate::resources::valid_namespace(namespace)?;
        Ok(Namespace::clone(&*self.catalog.namespace(namespace).await?))
    }

    /// Creates or replaces a namespace's settings, as `by`.
    pub async fn put_namespace(
        &self,
        by: &Principal,
        namespace: &str,
        mut settings: Namespace,
    ) -> Result<Namespace, EngineError> {
        if settings.metadata.name.is_empty() {
            settings.metadata.name = namespace.to_owned();
        } else if settings.metadata.name != namespace {
            return Err(EngineError::PathMismatch(format!(
                "a Namespace's name is the namespace: {:?} is not {namespace:?}",
                settings.metadata.name
            )));
        }
        match self.create(by, namespace, settings.clone()).await {
            Err(EngineError::AlreadyExists { .. }) => {
                self.replace(by, namespace, namespace, settings).await
            }
            other => other,
        }
    }

    /// The namespaces a surface offers `by` to switch to: its own, or for a
    /// principal of every namespace (the root token, the local caller) each
    /// one with an audit chain (every namespace anything was written in)
    /// and `default`, sorted, at most [`NAMESPACES_OFFERED`].
    pub async fn offered_namespaces(&self, by: &Principal) -> Result<Vec<String>, EngineError> {
        use crate::rules::{Action, Collection, may};
        may(by, &Action::Read(Collection::Namespaces))?;
        if let Some(listed) = by.namespaces.listed() {
            return Ok(listed.to_vec());
        }
        let heads = self.store.audit_heads().await?;
        let mut names: std::collections::BTreeSet<String> =
            heads.into_iter().map(|head| head.namespace).collect();
        names.insert("default".to_owned());
        Ok(names.into_iter().take(NAMESPACES_OFFERED).collect())
    }
}
