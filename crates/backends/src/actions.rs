//! `type: actions`: runs a declarative tool's action chain (seed 002).
//!
//! The executor reads the context and Endpoints the engine loaded, and
//! returns what changed (`contextChanges`, a possible `handoff`) in its
//! result for the engine to persist: it never writes state itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use joch_core::actions::{Action, ContextChange, ValidationRule};
use joch_core::credential::{UpstreamCredentials, UpstreamRef};
use joch_core::expr::evaluate_bool;
use joch_core::{Backend, ErrorCode, Invocation, ToolBackend, ToolFailure};
use serde_json::{Map, Value, json};

use crate::WebhookBackend;
use joch_core::template::{lookup, render_text, render_value};

/// Runs declarative tools; its `webhook` actions go through the webhook backend.
pub struct ActionsExecutor {
    webhook: WebhookBackend,
    /// Where `spec.auth.oauth2` tokens of Endpoints come from.
    credentials: Option<Arc<dyn UpstreamCredentials>>,
}

impl ActionsExecutor {
    /// An executor sending its webhook actions through `webhook`.
    pub fn new(webhook: WebhookBackend) -> Self {
        Self {
            webhook,
            credentials: None,
        }
    }

    /// The same, getting OAuth tokens of Endpoints from `credentials`.
    pub fn with_credentials(mut self, credentials: Arc<dyn UpstreamCredentials>) -> Self {
        self.credentials = Some(credentials);
        self
    }
}

/// Scopes the context may be written under; other keys go to `workflow`.
const CONTEXT_ROOTS: [&str; 4] = ["user", "workflow", "agents", "flags"];

/// One chain run: scopes as they evolve, and everything the result reports.
struct Run<'a> {
    call: Invocation<'a>,
    scopes: Value,
    changes: Vec<ContextChange>,
    response: Option<String>,
    handoff: Option<Value>,
    values: Map<String, Value>,
    trace: Vec<Value>,
}

/// Why the chain stopped.
struct Stop {
    action: String,
    message: String,
}

#[async_trait]
impl ToolBackend for ActionsExecutor {
    fn kind(&self) -> &'static str {
        "actions"
    }

    async fn invoke(&self, call: Invocation<'_>) -> Result<Value, ToolFailure> {
        let Backend::Actions(tool) = &call.tool.spec.backend else {
            return Err(ToolFailure::new(
                ErrorCode::InvalidToolConfig,
                "not a declarative tool",
            ));
        };
        let mut scopes = Value::Object(call.actions.map(|a| a.context.clone()).unwrap_or_default());
        scopes["params"] = Value::Object(call.args.clone());
        scopes["webhook"] = json!({});
        let mut run = Run {
            call,
            scopes,
            changes: Vec::new(),
            response: None,
            handoff: None,
            values: Map::new(),
            trace: Vec::new(),
        };
        match self.run_chain(&mut run, &tool.actions).await {
            Ok(()) => {
                // on_success failing is still a failure of the call.
                match self.run_chain(&mut run, &tool.on_success).await {
                    Ok(()) => Ok(result(&run, true, None)),
                    Err(stop) => Err(failure(&run, &stop)),
                }
            }
            Err(stop) => {
                let _ = self.run_chain(&mut run, &tool.on_failure).await;
                Err(failure(&run, &stop))
            }
        }
    }
}

impl ActionsExecutor {
    fn run_chain<'s>(
        &'s self,
        run: &'s mut Run<'_>,
        actions: &'s [Action],
    ) -> futures_boxed::BoxFuture<'s, Result<(), Stop>> {
        Box::pin(async move {
            for action in actions {
                let started = Instant::now();
                // Reserve the entry so a conditional's own line precedes its branch's.
                let slot = run.trace.len();
                run.trace.push(Value::Null);
                let outcome = self.run_one(run, action).await;
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let (status, error) = match &outcome {
                    Ok(Some(note)) => (note.clone(), None),
                    Ok(None) => ("ok".to_owned(), None),
                    Err(stop) => ("failed".to_owned(), Some(stop.message.clone())),
                };
                run.trace[slot] = json!({"type": action.kind(), "durationMs": ms, "outcome": status, "error": error});
                outcome?;
            }
            Ok(())
        })
    }

    /// Runs one action; `Ok(Some(note))` is a success worth noting in the trace.
    async fn run_one(&self, run: &mut Run<'_>, action: &Action) -> Result<Option<String>, Stop> {
        let stop = |message: String| Stop {
            action: action.kind().to_owned(),
            message,
        };
        match action {
            Action::Validate { rules } => validate(run, rules).map_err(stop)?,
            Action::ContextSet { data } => context_set(run, data).map_err(stop)?,
            Action::ContextGet { keys } => {
                for key in keys {
                    let value = lookup(&run.scopes, key)
                        .ok_or_else(|| stop(format!("the context has nothing at {key:?}")))?;
                    run.values.insert(key.clone(), value.clone());
                }
            }
            Action::Webhook {
                endpoint,
                body,
                continue_on_error,
            } => {
                let sent = self.webhook_action(run, endpoint, body.as_ref()).await;
                match sent {
                    Ok(response) => {
                        let path = format!("{endpoint}.response");
                        if let Value::Object(webhook) = &mut run.scopes["webhook"] {
                            ContextChange {
                                op: "set".into(),
                                path,
                                value: response,
                            }
                            .apply(webhook);
                        }
                    }
                    Err(message) if *continue_on_error => {
                        return Ok(Some(format!("failed, continued: {message}")));
                    }
                    Err(message) => return Err(stop(message)),
                }
            }
            Action::Handoff { agent, reason } => {
                let agent = render_text(agent, &run.scopes).map_err(stop)?;
                let reason = reason
                    .as_ref()
                    .map(|r| render_text(r, &run.scopes))
                    .transpose()
                    .map_err(stop)?;
                run.handoff = Some(json!({"agent": agent, "reason": reason}));
            }
            Action::Respond { message } => {
                run.response = Some(render_text(message, &run.scopes).map_err(stop)?);
            }
            Action::FlagSet { flags } => {
                for (name, value) in flags {
                    let value = render_value(value, &run.scopes).map_err(stop)?;
                    run.change(ContextChange {
                        op: "set".into(),
                        path: format!("flags.{name}"),
                        value,
                    });
                }
            }
            Action::Conditional {
                condition,
                then,
                otherwise,
            } => {
                let holds = evaluate_bool(condition, &run.scopes).map_err(stop)?;
                self.run_chain(run, if holds { then } else { otherwise })
                    .await?;
                return Ok(Some(format!(
                    "took {}",
                    if holds { "then" } else { "else" }
                )));
            }
        }
        Ok(None)
    }

    async fn webhook_action(
        &self,
        run: &Run<'_>,
        endpoint: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let spec = run
            .call
            .actions
            .and_then(|a| a.endpoints.get(endpoint))
            .ok_or_else(|| format!("no Endpoint {endpoint:?} in the namespace"))?;
        let body = match body {
            Some(template) => render_value(template, &run.scopes)?,
            None => run.scopes["params"].clone(),
        };
        let mut secrets = spec
            .secret_headers
            .iter()
            .map(|(header, source)| Ok((header.clone(), crate::secret(source)?)))
            .collect::<Result<BTreeMap<_, _>, String>>()?;
        if let Some(auth) = &spec.auth {
            let upstream = UpstreamRef::endpoint(endpoint);
            let credentials = self.credentials.as_deref();
            let value = crate::oauth::authorization(
                auth,
                run.call.namespace,
                &upstream,
                &spec.url,
                credentials,
                run.call.actions.and_then(|a| a.upstream_user.as_deref()),
            )
            .await
            .map_err(|e| e.message)?;
            secrets.insert("authorization".to_owned(), value);
        }
        self.webhook
            .send(&spec.as_rest(), &secrets, &body, &run.call)
            .await
            .map_err(|f| f.message)
    }
}

impl Run<'_> {
    /// Records a change and applies it at once, so later actions see it.
    fn change(&mut self, change: ContextChange) {
        if let Value::Object(scopes) = &mut self.scopes {
            change.apply(scopes);
        }
        self.changes.push(change);
    }
}

fn result(run: &Run<'_>, success: bool, error: Option<&str>) -> Value {
    let mut out = json!({
        "success": success,
        "response": run.response,
        "contextChanges": run.changes,
        "trace": run.trace,
    });
    if let Some(handoff) = &run.handoff {
        out["handoff"] = handoff.clone();
    }
    if !run.values.is_empty() {
        out["values"] = Value::Object(run.values.clone());
    }
    if let Some(error) = error {
        out["error"] = json!(error);
    }
    out
}

fn failure(run: &Run<'_>, stop: &Stop) -> ToolFailure {
    ToolFailure {
        code: ErrorCode::ActionFailed.as_str().to_owned(),
        message: format!("{} failed: {}", stop.action, stop.message),
        details: Some(result(run, false, Some(&stop.message))),
    }
}

/// A boxed future, so `conditional` can run a nested chain.
mod futures_boxed {
    pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
}

/// The parameters against the tool's input schema, then each rule.
fn validate(run: &Run<'_>, rules: &[ValidationRule]) -> Result<(), String> {
    let schema = &run.call.tool.spec.input_schema;
    let validator = jsonschema::validator_for(schema).map_err(|e| e.to_string())?;
    if let Some(error) = validator.iter_errors(&run.scopes["params"]).next() {
        return Err(format!("invalid parameters: {error}"));
    }
    for rule in rules {
        if !evaluate_bool(&rule.expr, &run.scopes)? {
            return Err(match &rule.message {
                Some(m) => render_text(m, &run.scopes)?,
                None => format!("rule {:?} does not hold", rule.expr),
            });
        }
    }
    Ok(())
}

/// Sets (or, for a key ending in `[+]`, appends to) each key of the
/// context; a key outside the context's roots is under `workflow`.
fn context_set(run: &mut Run<'_>, data: &Map<String, Value>) -> Result<(), String> {
    for (key, value) in data {
        let value = render_value(value, &run.scopes)?;
        let (path, append) = match key.strip_suffix("[+]") {
            Some(path) => (path, true),
            None => (key.as_str(), false),
        };
        let root = path.split('.').next().unwrap_or_default();
        let path = if CONTEXT_ROOTS.contains(&root) {
            path.to_owned()
        } else {
            format!("workflow.{path}")
        };
        let op = if append { "append" } else { "set" };
        run.change(ContextChange {
            op: op.to_owned(),
            path,
            value,
        });
    }
    Ok(())
}
