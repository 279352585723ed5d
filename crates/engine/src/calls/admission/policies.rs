//! The request policies' check: allow, deny, modify the arguments, or defer
//! to a person.

use std::sync::Arc;

use joch_core::{DecisionKind, Hook, Policy};
use serde_json::{Map, Value};

use super::admitting::{Admitting, Verdict};
use crate::calls::Rejection;
use crate::calls::deferral::Deferral;
use crate::policies::{self, Effect, Facts, REPLAY_OVERRIDE_ANNOTATION};
use crate::telemetry;
use crate::{Calls, EngineError};

impl Calls {
    /// Decides on the call with the namespace's request policies. On an
    /// approved call, about to run, a defer is satisfied by that approval
    /// (a deny is not), and the detections were recorded at admission.
    pub(super) async fn request_policies(
        &self,
        a: &mut Admitting<'_>,
    ) -> Result<Verdict, EngineError> {
        a.decided = Some((DecisionKind::Allow, None));
        let namespace = a.call.metadata.namespace.clone();
        a.policies = self.inner.catalog.policies(&namespace).await?;
        if a.policies.is_empty() {
            return Ok(Verdict::Continue);
        }
        let overridden = a
            .call
            .metadata
            .annotations
            .get(REPLAY_OVERRIDE_ANNOTATION)
            .is_some_and(|v| v == "true");
        let count = self.tool_call_count(&a.call).await?;
        let mut request = Facts::request(&a.call, &a.tool, &a.args, count, overridden);
        let policies = a.policies.clone();
        let reads_spend = (self.inner.catalog)
            .reads_spend(&namespace, &policies, reads_spend)
            .await?;
        if reads_spend {
            request.value["cost"] = self.spend_facts(&a.call, &a.tool).await?;
        }
        let found =
            request.detect_input(self.inner.policies.detectors(&namespace, &policies).await?);
        if !a.approved {
            a.call.status.detections.extend(found);
        }
        let request = Arc::new(request);
        let span = tracing::info_span!("evaluate_policies", hook = "toolCallRequest");
        let outcome = policies::decide_apart(
            self.inner.policies.engine(),
            &policies,
            Hook::Request,
            &request,
            span,
        )
        .await;
        let mut records = outcome.records(Hook::Request);
        if a.approved {
            // Seen again just before the approved call runs: on the record
            // goes what differs from admission (a policy published since).
            records.retain(|r| !a.call.status.hook_decisions.contains(r));
        }
        telemetry::record_decisions(&mut a.call, records);
        if let Some(w) = outcome.winner() {
            a.decided = Some((w.verdict.effect.kind(), w.verdict.reason.clone()));
        }
        let verdict = match outcome.winner().map(|w| (w, &w.verdict.effect)) {
            Some((w, Effect::Deny)) => Verdict::Reject(Rejection::by_policy(&a.call, w)),
            Some((w, Effect::Defer(_) | Effect::RequestUserInput(_))) if !a.approved => {
                Verdict::Defer(Deferral::from_decision(w))
            }
            _ => Verdict::Continue,
        };
        // Modified before a person sees it, so that what they approve is what runs.
        if !matches!(verdict, Verdict::Reject(_)) {
            modify(a, &outcome.patches(), &request);
        }
        a.facts = Some(Arc::unwrap_or_clone(request).with_input(&a.args));
        Ok(verdict)
    }
}

/// Applies the policies' patches to the arguments. The input as sent is
/// kept on the record, but not the spans a policy redacted: the record
/// must not hold them.
fn modify(a: &mut Admitting<'_>, patches: &[&joch_core::policy::Patch], request: &Facts) {
    // A policy may ask for a handle instead of an inline result.
    if let Some(inline) = patches.iter().rev().find_map(|p| p.inline) {
        a.call.spec.inline = Some(inline);
    }
    if patches.is_empty() {
        return;
    }
    let detectors = request.detectors.as_deref();
    let mut original = Value::Object(a.args.clone());
    crate::policies::redact_detected(&mut original, patches, detectors);
    a.call.status.original_input.get_or_insert(original);
    let mut patched = Value::Object(std::mem::take(&mut a.args));
    crate::policies::apply_patches(&mut patched, patches, detectors);
    a.args = match patched {
        Value::Object(map) => map,
        _ => Map::new(),
    };
}

/// True when a policy reads `cost.*`, so the spend so far must be summed
/// for it (three indexed sums: not paid by namespaces that never ask).
/// Answered once per policy snapshot, not per call: it encodes the spec.
fn reads_spend(policy: &Policy) -> bool {
    serde_json::to_string(&policy.spec).is_ok_and(|text| text.contains("cost."))
}
