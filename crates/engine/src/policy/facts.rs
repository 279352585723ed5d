//! The facts a policy sees about a call: the variables of `when` keys, CEL
//! expressions and Rego's `input`.

use std::collections::BTreeMap;

use joch_core::{Hook, Tool, ToolCall};
use serde_json::{Map, Value, json};

/// A call as policies see it.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    /// `{tool, agent, execution, caller, input, output, toolCallCount, replay, cost, labels, hook}`.
    pub value: Value,
    pub tool_name: String,
    pub labels: BTreeMap<String, String>,
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
        }
    }

    /// The same facts with the input as modified by the request hook.
    pub fn with_input(mut self, args: &Map<String, Value>) -> Facts {
        self.value["input"] = Value::Object(args.clone());
        self
    }

    /// The same facts, for the result hook, with the tool's output.
    pub fn for_result(&self, output: &Value) -> Facts {
        let mut facts = self.clone();
        facts.value["hook"] = json!(Hook::Result.step().trim_start_matches("steps/"));
        facts.value["output"] = output.clone();
        facts
    }
}
