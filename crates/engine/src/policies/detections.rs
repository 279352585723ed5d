//! Sensitive-data detectors on the call path: loaded once per policy and
//! namespace snapshot, and only for namespaces whose policies read
//! detections (as `reads_spend` in `calls/admission/policies.rs` does for
//! `cost.*`).

use std::sync::Arc;

use joch_core::Policy;
use joch_core::detect::{Detectors, reads_detections};
use joch_core::patch::apply_patch;
use joch_core::policy::Patch;
use serde_json::Value;

use crate::EngineError;
use crate::policies::Policies;

impl Policies {
    /// The namespace's detectors (built-in and its custom ones) when one of
    /// `policies` reads `*.detected.*` or redacts detections; else `None`.
    pub(crate) async fn detectors(
        &self,
        namespace: &str,
        policies: &[Policy],
    ) -> Result<Option<Arc<Detectors>>, EngineError> {
        self.catalog.detectors(namespace, policies, reads).await
    }
}

/// True when a policy reads detections. Answered once per policy snapshot.
fn reads(policy: &Policy) -> bool {
    serde_json::to_string(&policy.spec).is_ok_and(|text| reads_detections(&text))
}

/// Applies `patches` to `value`, then redacts the spans of the kinds they
/// name in `redactDetected`. Returns whether any span was redacted.
pub(crate) fn apply_patches(
    value: &mut Value,
    patches: &[&Patch],
    detectors: Option<&Detectors>,
) -> bool {
    patches.iter().for_each(|p| apply_patch(value, p));
    redact_detected(value, patches, detectors)
}

/// Redacts, in `value`, the spans of the kinds `patches` name in
/// `redactDetected`. Returns whether any span was redacted.
pub(crate) fn redact_detected(
    value: &mut Value,
    patches: &[&Patch],
    detectors: Option<&Detectors>,
) -> bool {
    let kinds: Vec<String> = patches
        .iter()
        .flat_map(|p| p.redact_detected.iter().cloned())
        .collect();
    match detectors {
        Some(detectors) if !kinds.is_empty() => detectors.redact(value, &kinds) > 0,
        _ => false,
    }
}
