//! Create, replace, read, list and delete resources: the same rules for
//! every kind, with each kind's own admission checks.

use joch_core::actions::{Action, ActionsBackend};
use joch_core::host::{HostUse, UsesHost};
use joch_core::{
    Backend, Endpoint, Execution, Object, Policy, StandingApproval, Tool, ValidationError,
};
use joch_store::{Durability, ObjectList};
use serde_json::Value;

use super::Resources;
use crate::clock::now;
use crate::lists::valid_namespace;
use crate::rules::host::may_use_host;
use crate::rules::may_touch;
use crate::{EngineError, ListParams};
use joch_core::Principal;

/// A resource clients configure (as opposed to the ledger's records), with
/// its own admission check beyond [`Object::validate`].
pub trait Configurable: Object {
    /// Checks what needs the engine's parsers: schemas, expressions, modules.
    fn check(&self) -> Result<(), ValidationError>;

    /// Resources this one names, which must exist in its namespace:
    /// (field, kind, name).
    fn references(&self) -> Vec<(String, &'static str, String)> {
        Vec::new()
    }

    /// What it would take from joch's host (commands, secret variables
    /// and files), which the operator's allow-lists bound.
    fn host_uses(&self) -> Vec<HostUse<'_>> {
        Vec::new()
    }

    /// Keeps what clients may not write: on create (`current` is `None`)
    /// the status starts fresh; on replace it is carried over.
    fn keep_status(&mut self, _current: Option<&Self>) {}
}

impl Configurable for Tool {
    fn check(&self) -> Result<(), ValidationError> {
        crate::catalog::schema::compile(self)?;
        match &self.spec.backend {
            Backend::Actions(actions) => check_actions(actions),
            _ => Ok(()),
        }
    }

    fn references(&self) -> Vec<(String, &'static str, String)> {
        match &self.spec.backend {
            Backend::Actions(actions) => actions
                .endpoints()
                .into_iter()
                .map(|(at, name)| (format!("{at}.endpoint"), Endpoint::KIND, name.to_owned()))
                .collect(),
            Backend::Mcp(mcp) => vec![(
                "spec.backend.server".to_owned(),
                joch_core::McpServer::KIND,
                mcp.server.clone(),
            )],
            _ => Vec::new(),
        }
    }
}

impl Configurable for joch_core::Namespace {
    fn check(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

impl Configurable for joch_core::Budget {
    fn check(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

impl Configurable for joch_core::token::ApiToken {
    fn check(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

impl Configurable for Endpoint {
    fn check(&self) -> Result<(), ValidationError> {
        Ok(())
    }

    fn host_uses(&self) -> Vec<HostUse<'_>> {
        UsesHost::host_uses(self)
    }
}

/// Every template parses and every expression compiles, or the field says why.
fn check_actions(actions: &ActionsBackend) -> Result<(), ValidationError> {
    for (at, action) in actions.all() {
        let templates: Vec<(String, Value)> = match action {
            Action::ContextSet { data } => {
                vec![(format!("{at}.data"), Value::Object(data.clone()))]
            }
            Action::FlagSet { flags } => {
                vec![(format!("{at}.flags"), Value::Object(flags.clone()))]
            }
            Action::Webhook {
                body: Some(body), ..
            } => vec![(format!("{at}.body"), body.clone())],
            Action::Respond { message } => {
                vec![(format!("{at}.message"), Value::String(message.clone()))]
            }
            Action::Handoff { agent, reason } => {
                let mut t = vec![(format!("{at}.agent"), Value::String(agent.clone()))];
                t.extend(
                    reason
                        .iter()
                        .map(|r| (format!("{at}.reason"), Value::String(r.clone()))),
                );
                t
            }
            _ => Vec::new(),
        };
        for (field, template) in templates {
            joch_core::template::check_value(&template)
                .map_err(|e| ValidationError::field(field, e))?;
        }
        let expressions: Vec<(String, &str)> = match action {
            Action::Conditional { condition, .. } => vec![(format!("{at}.if"), condition.as_str())],
            Action::Validate { rules } => rules
                .iter()
                .enumerate()
                .map(|(i, r)| (format!("{at}.rules[{i}].expr"), r.expr.as_str()))
                .collect(),
            _ => Vec::new(),
        };
        for (field, expr) in expressions {
            joch_core::expr::compile(expr).map_err(|e| ValidationError::field(field, e))?;
        }
    }
    Ok(())
}

impl Configurable for Policy {
    fn check(&self) -> Result<(), ValidationError> {
        crate::policies::check(self)
    }
}

impl Configurable for Execution {
    fn check(&self) -> Result<(), ValidationError> {
        Ok(())
    }

    fn keep_status(&mut self, current: Option<&Self>) {
        self.status = current.map(|c| c.status.clone()).unwrap_or_default();
    }
}

impl Configurable for StandingApproval {
    fn check(&self) -> Result<(), ValidationError> {
        match self.spec.decision.as_str() {
            "approve" | "reject" => Ok(()),
            other => Err(ValidationError::field(
                "spec.decision",
                format!("must be approve or reject, got {other:?}"),
            )),
        }
    }
}

impl Resources {
    /// Stores a new resource `by` writes, after checking it. Durable when
    /// this returns.
    pub async fn create<T: Configurable>(
        &self,
        by: &Principal,
        namespace: &str,
        mut object: T,
    ) -> Result<T, EngineError> {
        may_touch(by, namespace, T::PLURAL, true)?;
        admit(namespace, &mut object, None)?;
        self.check_written(by, namespace, &object).await?;
        object.keep_status(None);
        self.store
            .create_object(&mut object, Durability::Sync)
            .await?;
        self.touched::<T>();
        Ok(object)
    }

    /// Replaces a resource. With a `resourceVersion`, only if it is still the
    /// current one (`Conflict` otherwise); without, unconditionally. The next
    /// call uses the new version.
    pub async fn replace<T: Configurable>(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        mut object: T,
    ) -> Result<T, EngineError> {
        may_touch(by, namespace, T::PLURAL, true)?;
        admit(namespace, &mut object, Some(name))?;
        self.check_written(by, namespace, &object).await?;
        let current: T = self.store.get_object(namespace, name).await?;
        carry_identity(&current, &mut object);
        object.keep_status(Some(&current));
        self.store
            .update_object(&mut object, Durability::Sync)
            .await?;
        self.touched::<T>();
        Ok(object)
    }

    /// Reads a resource.
    pub(crate) async fn get<T: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<T, EngineError> {
        valid_namespace(namespace)?;
        Ok(self.store.get_object(namespace, name).await?)
    }

    /// Lists resources, newest first.
    pub(crate) async fn list<T: Object>(
        &self,
        namespace: &str,
        params: ListParams,
    ) -> Result<ObjectList<T>, EngineError> {
        self.lists.page(namespace, params).await
    }

    /// Deletes a resource, if `resource_version` (when given) is current.
    /// Calls already recorded keep their record.
    pub async fn delete<T: Configurable>(
        &self,
        by: &Principal,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
    ) -> Result<T, EngineError> {
        valid_namespace(namespace)?;
        may_touch(by, namespace, T::PLURAL, true)?;
        let deleted = self
            .store
            .delete_object(namespace, name, resource_version)
            .await?;
        self.touched::<T>();
        Ok(deleted)
    }

    /// Drops what the call path cached of this kind (only the catalog keeps
    /// anything of a configured kind).
    fn touched<T: Object>(&self) {
        self.catalog.touched(T::KIND);
    }

    /// Each kind's admission, as `by` writes it: its own checks, the
    /// resources it names, and what it would take from the host.
    async fn check_written<T: Configurable>(
        &self,
        by: &Principal,
        namespace: &str,
        object: &T,
    ) -> Result<(), EngineError> {
        object.check()?;
        may_use_host(by, &self.host_access, &object.host_uses())?;
        self.check_references(namespace, object).await
    }

    async fn check_references<T: Configurable>(
        &self,
        namespace: &str,
        object: &T,
    ) -> Result<(), EngineError> {
        for (field, kind, name) in object.references() {
            match self.store.get(kind, namespace, &name).await {
                Ok(_) => {}
                Err(e) if e.kind() == joch_store::StoreErrorKind::NotFound => {
                    return Err(ValidationError::field(
                        field,
                        format!("no {kind} {name:?} in namespace {namespace:?}"),
                    )
                    .into());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Checks an incoming object against the namespace (and name, for a
/// replace) of its URL, fills in what the server owns, and validates it.
pub(crate) fn admit<T: Object>(
    namespace: &str,
    object: &mut T,
    path_name: Option<&str>,
) -> Result<(), EngineError> {
    valid_namespace(namespace)?;
    let meta = object.metadata_mut();
    if meta.namespace.is_empty() {
        meta.namespace = namespace.to_owned();
    } else if meta.namespace != namespace {
        return Err(ValidationError::field(
            "metadata.namespace",
            format!(
                "{:?} does not match the namespace in the URL ({namespace:?})",
                meta.namespace
            ),
        )
        .into());
    }
    if let Some(path_name) = path_name {
        if meta.name.is_empty() {
            meta.name = path_name.to_owned();
        } else if meta.name != path_name {
            return Err(ValidationError::field(
                "metadata.name",
                format!(
                    "{:?} does not match the name in the URL ({path_name:?})",
                    meta.name
                ),
            )
            .into());
        }
    } else {
        meta.uid = uuid::Uuid::new_v4().to_string();
        meta.creation_timestamp = Some(now());
    }
    object.validate()?;
    Ok(())
}

/// A replace keeps the stored object's identity; an absent `resourceVersion`
/// means "whatever is current".
fn carry_identity<T: Object>(current: &T, next: &mut T) {
    let (cur, meta) = (current.metadata(), next.metadata_mut());
    meta.uid = cur.uid.clone();
    meta.creation_timestamp = cur.creation_timestamp;
    if meta.resource_version.is_empty() {
        meta.resource_version = cur.resource_version.clone();
    }
}
