//! A Rust agent's tool calls through joch embedded in the process: a tool,
//! a policy that denies one kind of call and sends another to a person,
//! and a retried call that does not run twice. Run it:
//!
//! ```sh
//! cargo run -p joch-tools --example embedded
//! ```

use std::time::Duration;

use joch_tools::{EmbeddedGateway, ToolCall, ToolExecutor};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let gateway = EmbeddedGateway::open(dir.path().join("agent.db"), "default")
        .await?
        .with_agent("example-agent");

    // A declarative tool (seed 002's JSON form) that answers from a template.
    gateway
        .apply_manifest(json!({
            "name": "greet",
            "description": "Greets someone",
            "parameters": [{"name": "who", "type": "string", "required": true}],
            "actions": [{"type": "respond", "message": "Hello, {{params.who}}!"}]
        }))
        .await?;
    gateway
        .apply_manifest(json!({
            "apiVersion": "joch.dev/v1alpha1", "kind": "Policy",
            "metadata": {"name": "guests"},
            "spec": {"version": "1", "rules": [
                {"when": {"input.who": "mallory"}, "action": {"deny": {"reason": "not a guest"}}},
                {"when": {"input.who": "the board"}, "require": {"approval": "human"}}
            ]}
        }))
        .await?;
    for tool in gateway.tool_definitions().await? {
        println!("tool {}: {}", tool.name, tool.description);
    }

    let allowed = gateway
        .execute_tool_call(
            &ToolCall::new("greet")
                .with_param("who", "Ada")
                .with_tool_call_id("call_1"),
        )
        .await?;
    println!("allowed: {:?} {}", allowed.phase, json!(allowed.output));

    let again = gateway
        .execute_tool_call(
            &ToolCall::new("greet")
                .with_param("who", "Ada")
                .with_tool_call_id("call_1"),
        )
        .await?;
    println!(
        "retried: {:?}, replayed from the record: {}",
        again.phase, again.replayed
    );

    let denied = gateway
        .execute_tool_call(&ToolCall::new("greet").with_param("who", "mallory"))
        .await?;
    println!("denied: {:?} {}", denied.phase, json!(denied.error));

    // A call that needs a person waits; here "the person" approves from another task.
    let approver = gateway.clone();
    tokio::spawn(async move {
        loop {
            if let Ok(pending) = approver.pending_approvals().await {
                if let Some(approval) = pending.first() {
                    let _ = approver.approve(&approval.metadata.name, "alice").await;
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let approved = gateway
        .execute_tool_call(&ToolCall::new("greet").with_param("who", "the board"))
        .await?;
    println!("approved: {:?} {}", approved.phase, json!(approved.output));

    let ok = allowed.succeeded() && again.replayed && !denied.succeeded() && approved.succeeded();
    if !ok {
        return Err("the example did not go as described".into());
    }
    Ok(())
}
