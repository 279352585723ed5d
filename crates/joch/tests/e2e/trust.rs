//! Trust before enforcing, and trust in outputs: shadow policies,
//! nonce-keyed output envelopes, sensitive-data detectors.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{Joch, NS, Webhook, rest_tool};
use crate::policies::apply_policy;

async fn setup() -> (Webhook, Joch) {
    let webhook = Webhook::start().await;
    let joch = Joch::start().await;
    joch.create_tool(rest_tool(
        "zendesk.create_ticket",
        &format!("{}/echo", webhook.base),
        json!({"level": "external_write"}),
    ))
    .await;
    (webhook, joch)
}

async fn metric(joch: &Joch, series: &str) -> Option<f64> {
    let text = reqwest::get(format!("{}/metrics", joch.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines().find_map(|line| {
        line.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[tokio::test]
async fn a_shadow_policy_records_would_be_denials_and_changes_nothing_until_promoted() {
    let (webhook, joch) = setup().await;
    let shadow = apply_policy(&joch, "no-tickets", json!({"version": "v1", "enforcement": "shadow", "rules": [
        {"when": {"input.priority": "high"}, "action": {"deny": {"reason": "high priority is closed"}}}
    ]}))
    .await;
    let (_, high) = joch
        .call("zendesk.create_ticket", json!({"priority": "high"}))
        .await;
    let (_, low) = joch
        .call("zendesk.create_ticket", json!({"priority": "low"}))
        .await;
    assert_eq!(high["status"]["phase"], "Succeeded", "{high}");
    assert_eq!(low["status"]["phase"], "Succeeded", "{low}");
    assert_eq!(webhook.hits(), 2, "both calls ran");
    assert_eq!(
        high["status"]["hookDecisions"],
        json!([
            {"hook": "steps/toolCallRequest", "decision": "deny", "policyId": "no-tickets", "policyVersion": "v1", "reason": "high priority is closed", "shadow": true},
            {"hook": "steps/toolCallResult", "decision": "allow", "policyId": "no-tickets", "policyVersion": "v1", "reason": "no policy rule matched", "shadow": true}
        ])
    );
    assert_eq!(
        low["status"]["hookDecisions"][0]["decision"], "allow",
        "what the shadow policy would let through is recorded too"
    );
    let name = high["metadata"]["name"].as_str().unwrap();
    assert_eq!(
        joch.get_call(name).await["status"]["hookDecisions"],
        high["status"]["hookDecisions"]
    );
    let series = |decision: &str| {
        format!(
            r#"joch_policy_decisions_total{{policy="no-tickets",decision="{decision}",shadow="true"}}"#
        )
    };
    assert_eq!(metric(&joch, &series("deny")).await, Some(1.0));
    assert_eq!(metric(&joch, &series("allow")).await, Some(3.0));

    // Promotion is a new version that enforces.
    let mut promoted = shadow.clone();
    promoted["spec"]["version"] = json!("v2");
    promoted["spec"]["enforcement"] = json!("enforce");
    let (status, body) = joch
        .send(
            Method::PUT,
            &format!("/v1/namespaces/{NS}/policies/no-tickets"),
            Some(promoted),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, denied) = joch
        .call("zendesk.create_ticket", json!({"priority": "high"}))
        .await;
    assert_eq!(denied["status"]["phase"], "Denied");
    assert_eq!(
        denied["status"]["hookDecisions"],
        json!([{"hook": "steps/toolCallRequest", "decision": "deny", "policyId": "no-tickets", "policyVersion": "v2", "reason": "high priority is closed"}])
    );
    assert_eq!(webhook.hits(), 2);
}
