//! Hook mode with Claude Code's HTTP hooks: `PreToolUse` asks joch, a
//! `PostToolUse` reports the result, and a call may wait for the user.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::harness::{Joch, NS};
use crate::policies::apply_policy;

fn claude(event: &str, tool: &str, id: &str, extra: Value) -> Value {
    let mut body = json!({
        "session_id": "abc123",
        "transcript_path": "/home/u/.claude/projects/x/abc123.jsonl",
        "cwd": "/home/u/project",
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": tool,
        "tool_use_id": id,
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    body
}

async fn claude_hook(joch: &Joch, body: Value) -> Value {
    let (status, answer) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/hooks/claude"),
            Some(body),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

#[tokio::test]
async fn claude_code_hooks_deny_rm_rf_and_record_an_edit() {
    let joch = Joch::start().await;
    apply_policy(
        &joch,
        "shell-safety",
        json!({
            "version": "2",
            "appliesTo": {"tools": ["Bash"]},
            "rules": [{"name": "no-rm-rf", "when": {"expr": "input.command.contains('rm -rf')"}, "action": {"deny": {"reason": "recursive deletes are not allowed"}}}]
        }),
    )
    .await;

    let rm = claude_hook(
        &joch,
        claude(
            "PreToolUse",
            "Bash",
            "toolu_01RM",
            json!({"tool_input": {"command": "rm -rf /", "description": "clean up"}}),
        ),
    )
    .await;
    let out = &rm["hookSpecificOutput"];
    assert_eq!(out["hookEventName"], "PreToolUse");
    assert_eq!(out["permissionDecision"], "deny", "{rm}");
    assert_eq!(
        out["permissionDecisionReason"],
        "recursive deletes are not allowed"
    );
    let denied = joch.get_call("toolu_01RM").await;
    assert_eq!(denied["status"]["phase"], "Denied");
    assert_eq!(
        denied["status"]["hookDecisions"][0]["policyId"],
        "shell-safety"
    );

    let edit_input =
        json!({"file_path": "/home/u/project/README.md", "old_string": "teh", "new_string": "the"});
    let edit = claude_hook(
        &joch,
        claude(
            "PreToolUse",
            "Edit",
            "toolu_01ED",
            json!({"tool_input": edit_input}),
        ),
    )
    .await;
    assert_eq!(
        edit["hookSpecificOutput"]["permissionDecision"], "allow",
        "{edit}"
    );
    let after = claude_hook(
        &joch,
        claude(
            "PostToolUse",
            "Edit",
            "toolu_01ED",
            json!({"tool_input": edit_input, "tool_response": {"filePath": "/home/u/project/README.md", "success": true}}),
        ),
    )
    .await;
    assert_eq!(after, json!({}), "nothing to block");
    let call = joch.get_call("toolu_01ED").await;
    assert_eq!(call["status"]["phase"], "Succeeded");
    assert_eq!(call["spec"]["mode"], "hook");
    assert_eq!(call["spec"]["input"], edit_input);
    assert_eq!(call["spec"]["executionRef"]["name"], "abc123");
    assert_eq!(call["spec"]["agentRef"]["name"], "claude-code");
    assert_eq!(call["status"]["output"]["success"], true);

    claude_hook(
        &joch,
        claude(
            "PreToolUse",
            "Bash",
            "toolu_01LS",
            json!({"tool_input": {"command": "ls /nope"}}),
        ),
    )
    .await;
    claude_hook(
        &joch,
        claude("PostToolUseFailure", "Bash", "toolu_01LS", json!({"tool_input": {"command": "ls /nope"}, "error": "ls: /nope: No such file or directory"})),
    )
    .await;
    let failed = joch.get_call("toolu_01LS").await;
    assert_eq!(failed["status"]["phase"], "Failed");
    assert_eq!(
        failed["status"]["error"]["message"],
        "ls: /nope: No such file or directory"
    );

    let (status, unsupported) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/hooks/claude"),
            Some(claude("Stop", "Bash", "x", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(unsupported["code"], "unsupported_hook_event");
}

#[tokio::test]
async fn claude_can_ask_its_own_user_and_a_reported_result_approves() {
    let joch = Joch::start().await;
    apply_policy(
        &joch,
        "writes-need-a-person",
        json!({"version": "1", "appliesTo": {"tools": ["Write"]}, "rules": [{"name": "person", "require": {"approval": "human"}}]}),
    )
    .await;
    let ask_path = format!("/v1/namespaces/{NS}/hooks/claude?onDefer=ask");
    let input = json!({"file_path": "/tmp/x", "content": "hi"});
    let (status, asked) = joch
        .send(
            Method::POST,
            &ask_path,
            Some(claude(
                "PreToolUse",
                "Write",
                "toolu_01WR",
                json!({"tool_input": input}),
            )),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(
        asked["hookSpecificOutput"]["permissionDecision"], "ask",
        "{asked}"
    );
    assert_eq!(
        joch.get_call("toolu_01WR").await["status"]["phase"],
        "AwaitingApproval"
    );

    // The user said yes in Claude Code: the tool ran and its result arrives.
    claude_hook(
        &joch,
        claude(
            "PostToolUse",
            "Write",
            "toolu_01WR",
            json!({"tool_input": input, "tool_response": {"success": true}}),
        ),
    )
    .await;
    let call = joch.get_call("toolu_01WR").await;
    assert_eq!(call["status"]["phase"], "Succeeded", "{call}");
    assert_eq!(call["spec"]["approval"]["status"], "approved");
    assert_eq!(
        call["spec"]["approval"]["approvedBy"],
        "user of claude-code"
    );
    let (_, approval) = joch
        .get(&format!("/v1/namespaces/{NS}/approvals/toolu_01WR"))
        .await;
    assert_eq!(approval["status"]["phase"], "Approved");

    let (status, bad) = joch
        .send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/hooks/claude?onDefer=maybe"),
            Some(claude("PreToolUse", "Write", "toolu_02", json!({}))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
}
