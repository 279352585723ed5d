//! The facts a policy sees about a call: the variables of `when` keys, CEL
//! expressions and Rego's `input`.

use std::collections::BTreeMap;
use std::sync::Arc;

use joch_core::detect::{Detection, Detectors};
use joch_core::{Hook, Tool, ToolCall};
use serde_json::{Map, Value, json};

/// Annotation a replay carries when its caller overrode the write gate, so
/// that policies see it (`override`) and the record shows it.
pub const REPLAY_OVERRIDE_ANNOTATION: &str = "joch.dev/replay-override";

/// A call as policies see it.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    /// `{tool, agent, execution, caller, input, output, toolCallCount, replay, cost, labels, hook}`,
    /// and `detected` when the namespace's policies read detections.
    pub value: Value,
    pub tool_name: String,
    pub labels: BTreeMap<String, String>,
    /// Set when a policy of the namespace reads detections: the input was
    /// scanned, and the output will be.
    pub detectors: Option<Arc<Detectors>>,
}

impl Facts {
    /// Facts for the request hook.
    pub fn request(
        call: &ToolCall,
        tool: &Tool,
        args: &Map<String, Value>,
        tool_call_count: usize,
        replay_override: bool,
    ) -> Facts {
        let name = |r: &Option<joch_core::ObjectRef>| r.as_ref().map(|r| r.name.clone());
        let effects = &tool.spec.side_effects;
        let value = json!({
            "hook": "toolCallRequest",
            "tool": {
                "name": tool.metadata.name,
                "sideEffects": {
                    "level": effects.level,
                    "idempotent": effects.idempotent,
                    "requiresApproval": effects.requires_approval,
                },
                "labels": tool.metadata.labels,
            },
            "agent": {"name": name(&call.spec.agent_ref)},
            "execution": name(&call.spec.execution_ref),
            "caller": call.spec.caller_id,
            "input": args,
            "toolCallCount": tool_call_count,
            "replay": call.spec.replay_of.is_some(),
            "override": replay_override,
            // Filled in with the spend so far when a policy reads it.
            "cost": {"runUsd": 0.0, "dailyUsd": 0.0, "monthlyUsd": 0.0, "callUsd": 0.0},
            "labels": call.metadata.labels,
        });
        Facts {
            value,
            tool_name: tool.metadata.name.clone(),
            labels: call.metadata.labels.clone(),
            detectors: None,
        }
    }

    /// Runs `detectors` (when a policy reads detections) on the input:
    /// `input.detected.<kind>` and `detected.input.<kind>` count the strings
    /// each kind was found in. Returns the detections, for the record.
    pub fn detect_input(&mut self, detectors: Option<Arc<Detectors>>) -> Vec<Detection> {
        let Some(detectors) = detectors else {
            return Vec::new();
        };
        let found = detectors.scan("input", &self.value["input"]);
        let counts = Value::Object(detectors.counts(&found));
        self.value["detected"] = json!({"input": counts});
        self.detectors = Some(detectors);
        self.show_input_detections();
        found
    }

    /// The same facts with the input as modified by the request hook (the
    /// detections stay those of the input as sent).
    pub fn with_input(mut self, args: &Map<String, Value>) -> Facts {
        self.value["input"] = Value::Object(args.clone());
        self.show_input_detections();
        self
    }

    fn show_input_detections(&mut self) {
        if let Some(counts) = self.value.pointer("/detected/input").cloned() {
            if let Some(input) = self.value["input"].as_object_mut() {
                input.insert("detected".to_owned(), counts);
            }
        }
    }

    /// The same facts, for the result hook, with the tool's output and,
    /// when detectors run, what they found in it (`output.detected.<kind>`
    /// for an object output, `detected.output.<kind>` always).
    pub fn for_result(&self, output: &Value) -> (Facts, Vec<Detection>) {
        let mut facts = self.clone();
        facts.value["hook"] = json!(Hook::Result.step().trim_start_matches("steps/"));
        facts.value["output"] = output.clone();
        let Some(detectors) = &self.detectors else {
            return (facts, Vec::new());
        };
        let found = detectors.scan("output", output);
        let counts = Value::Object(detectors.counts(&found));
        if let Some(output) = facts.value["output"].as_object_mut() {
            output.insert("detected".to_owned(), counts.clone());
        }
        facts.value["detected"]["output"] = counts;
        (facts, found)
    }
}
