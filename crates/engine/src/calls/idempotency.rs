//! Idempotency keys: where a call's key comes from, and how long it holds.

use std::sync::Arc;
use std::time::Duration;

use joch_core::checksum::digest;
use joch_core::{Tool, ToolCall};
use joch_store::IdempotencyClaim;
use minijinja::{Environment, ErrorKind, UndefinedBehavior, Value as TemplateValue};
use serde_json::{Map, Value, json};

use crate::clock::now;
use crate::{Calls, EngineError};

/// Longest accepted key, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// The call's idempotency key: the caller's (body or `Idempotency-Key`
/// header, set into `spec.sideEffects.idempotencyKey` by the server), else
/// the tool's `idempotencyKeyTemplate` rendered over the call, else none.
pub(in crate::calls) fn key_of(
    call: &ToolCall,
    tool: &Tool,
    args: &Map<String, Value>,
) -> Result<Option<String>, EngineError> {
    let explicit = call
        .spec
        .side_effects
        .as_ref()
        .and_then(|s| s.idempotency_key.clone());
    let key = match (explicit, &tool.spec.side_effects.idempotency_key_template) {
        (Some(key), _) => key,
        (None, Some(template)) => render(template, call, args)?,
        (None, None) => return Ok(None),
    };
    validate_key(&key)?;
    Ok(Some(key))
}

/// Refuses empty keys and keys over [`MAX_KEY_LEN`] characters.
pub fn validate_key(key: &str) -> Result<(), EngineError> {
    let len = key.chars().count();
    if len == 0 || len > MAX_KEY_LEN {
        return Err(EngineError::InvalidIdempotencyKey(format!(
            "an idempotency key must be 1 to {MAX_KEY_LEN} characters, got {len}"
        )));
    }
    Ok(())
}

/// The claim for `key`, living for the tool's window or the default.
pub(in crate::calls) fn claim(
    tool: &Tool,
    key: String,
    checksum: &str,
    default_window: Duration,
) -> IdempotencyClaim {
    let window = tool
        .spec
        .side_effects
        .idempotency_window_seconds
        .map_or(default_window, Duration::from_secs);
    let now_ms = now().0.timestamp_millis();
    let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
    IdempotencyClaim {
        tool: tool.metadata.name.clone(),
        key,
        checksum: checksum.to_owned(),
        now_ms,
        expires_at_ms: now_ms.saturating_add(window_ms),
    }
}

impl Calls {
    /// The namespace's key window when its `Namespace` sets one, else the server's.
    pub(in crate::calls) async fn idempotency_window(
        &self,
        namespace: &str,
    ) -> Result<Duration, EngineError> {
        let settings = self.inner.catalog.namespace(namespace).await?;
        Ok(settings
            .spec
            .idempotency_window_seconds
            .map_or(self.inner.settings.idempotency_window, Duration::from_secs))
    }

    /// Starts a background task that removes expired idempotency keys every
    /// `every`, so the key table does not grow without bound.
    pub(crate) fn spawn_key_purger(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let store = Arc::clone(&self.inner.store);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                match store.purge_expired_keys(now().0.timestamp_millis()).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(
                        purged = n,
                        "expired idempotency keys and idle rate cells removed"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not purge expired idempotency keys and idle rate cells")
                    }
                }
            }
        })
    }
}

/// Renders a key template. Undefined values are errors: a key that silently
/// rendered to a constant would collapse every call into the first.
fn render(
    template: &str,
    call: &ToolCall,
    args: &Map<String, Value>,
) -> Result<String, EngineError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.add_filter(
        "hash",
        |value: TemplateValue| -> Result<String, minijinja::Error> {
            if value.is_undefined() {
                return Err(minijinja::Error::new(
                    ErrorKind::UndefinedError,
                    "cannot hash an undefined value",
                ));
            }
            // 32 hex digits (128 bits) keep keys short and collisions out of reach.
            Ok(digest(&value)
                .map(|d| d[..32].to_owned())
                .unwrap_or_default())
        },
    );
    let name = |r: &Option<joch_core::ObjectRef>| r.as_ref().map(|r| r.name.clone());
    let context = json!({
        "input": args,
        "tool": {"name": call.tool_name()},
        "agent": {"name": name(&call.spec.agent_ref)},
        "execution": {"name": name(&call.spec.execution_ref)},
        "caller": call.spec.caller_id,
    });
    env.render_str(template, minijinja::value::Serde(&context))
        .map_err(|e| {
            EngineError::InvalidIdempotencyKey(format!(
                "idempotencyKeyTemplate cannot be rendered: {e}"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(template: Option<&str>) -> Tool {
        let mut t: Tool = serde_json::from_value(json!({
            "metadata": {"name": "zendesk.create_ticket"},
            "spec": {"backend": {"type": "rest", "endpoint": {"url": "http://127.0.0.1:1/"}}}
        }))
        .unwrap();
        t.spec.side_effects.idempotency_key_template = template.map(str::to_owned);
        t
    }

    fn call(key: Option<&str>) -> ToolCall {
        let mut c: ToolCall =
            serde_json::from_value(json!({"spec": {"toolRef": {"name": "zendesk.create_ticket"}}}))
                .unwrap();
        if let Some(key) = key {
            c.spec.side_effects = Some(joch_core::CallSideEffects {
                idempotency_key: Some(key.into()),
                ..Default::default()
            });
        }
        c
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn the_callers_key_wins_over_the_template() {
        let key = key_of(
            &call(Some("mine")),
            &tool(Some("t-{{ input.a }}")),
            &args(json!({"a": 1})),
        )
        .unwrap();
        assert_eq!(key.as_deref(), Some("mine"));
        assert_eq!(
            key_of(&call(None), &tool(None), &args(json!({}))).unwrap(),
            None
        );
    }

    #[test]
    fn templates_render_paths_and_hashes() {
        let t = tool(Some("zendesk-{{ input.subject | hash }}"));
        let a = key_of(&call(None), &t, &args(json!({"subject": "Refund"})))
            .unwrap()
            .unwrap();
        let b = key_of(
            &call(None),
            &t,
            &args(json!({"subject": "Refund", "other": 1})),
        )
        .unwrap()
        .unwrap();
        let c = key_of(&call(None), &t, &args(json!({"subject": "Other"})))
            .unwrap()
            .unwrap();
        assert_eq!(a, b, "only the subject is in the key");
        assert_ne!(a, c);
        assert_eq!(a.len(), "zendesk-".len() + 32);
        let plain = key_of(
            &call(None),
            &tool(Some("{{ tool.name }}/{{ input.n }}")),
            &args(json!({"n": 7})),
        )
        .unwrap();
        assert_eq!(plain.as_deref(), Some("zendesk.create_ticket/7"));
    }

    #[test]
    fn bad_keys_and_templates_are_refused() {
        let missing = key_of(
            &call(None),
            &tool(Some("k-{{ input.absent }}")),
            &args(json!({})),
        );
        assert!(matches!(
            missing,
            Err(EngineError::InvalidIdempotencyKey(_))
        ));
        let long = "k".repeat(256);
        assert!(key_of(&call(Some(&long)), &tool(None), &args(json!({}))).is_err());
        assert!(key_of(&call(Some(&"k".repeat(255))), &tool(None), &args(json!({}))).is_ok());
        assert!(key_of(&call(Some("")), &tool(None), &args(json!({}))).is_err());
    }
}
