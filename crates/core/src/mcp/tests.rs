use super::*;

fn at(seconds: i64) -> Time {
    Time(chrono::DateTime::from_timestamp(seconds, 0).unwrap_or_default())
}

fn echo(description: &str) -> Value {
    json!({"name": "echo", "description": description, "inputSchema": {"type": "object"}})
}

#[test]
fn annotations_map_to_side_effects() {
    let cases = [
        (None, SideEffectLevel::Unknown, false),
        (
            Some(json!({"readOnlyHint": true})),
            SideEffectLevel::ReadOnly,
            true,
        ),
        (Some(json!({})), SideEffectLevel::ExternalWrite, false),
        (
            Some(json!({"destructiveHint": true, "idempotentHint": true})),
            SideEffectLevel::ExternalWrite,
            true,
        ),
        (
            Some(json!({"destructiveHint": false, "openWorldHint": false})),
            SideEffectLevel::LocalWrite,
            false,
        ),
    ];
    for (annotations, level, idempotent) in cases {
        let got = side_effects_from_annotations(annotations.as_ref());
        assert_eq!(
            (got.level, got.idempotent),
            (level, idempotent),
            "{annotations:?}"
        );
    }
}

#[test]
fn hash_ignores_key_order_and_extra_fields() {
    let a = json!({"name": "t", "inputSchema": {"a": 1, "b": 2}, "icons": []});
    let b = json!({"inputSchema": {"b": 2, "a": 1}, "name": "t"});
    assert_eq!(definition_hash(&a), definition_hash(&b));
    assert_ne!(definition_hash(&a), definition_hash(&echo("x")));
}

#[test]
fn quarantine_is_sticky_until_accepted() {
    let (first, outcome) = reconcile(None, &echo("v1"), DriftAction::Quarantine, at(1));
    assert_eq!(outcome, Reconciled::Adopt { drifted: false });
    assert_eq!(first.blocked(DriftAction::Quarantine), None);

    let (drifted, outcome) = reconcile(Some(&first), &echo("v2"), DriftAction::Quarantine, at(2));
    assert_eq!(
        outcome,
        Reconciled::Hold {
            newly_drifted: true
        }
    );
    assert!(drifted.blocked(DriftAction::Quarantine).is_some());
    assert_eq!(drifted.pending_definition, Some(echo("v2")));

    // The server reverting does not lift a quarantine.
    let (reverted, _) = reconcile(Some(&drifted), &echo("v1"), DriftAction::Quarantine, at(3));
    assert!(reverted.blocked(DriftAction::Quarantine).is_some());
}

#[test]
fn deny_lifts_when_the_server_reverts() {
    let (first, _) = reconcile(None, &echo("v1"), DriftAction::Deny, at(1));
    let (drifted, _) = reconcile(Some(&first), &echo("v2"), DriftAction::Deny, at(2));
    assert!(drifted.blocked(DriftAction::Deny).is_some());
    let (reverted, outcome) = reconcile(Some(&drifted), &echo("v1"), DriftAction::Deny, at(3));
    assert_eq!(
        outcome,
        Reconciled::Hold {
            newly_drifted: false
        }
    );
    assert_eq!(reverted.blocked(DriftAction::Deny), None);
}

#[test]
fn alert_adopts_the_new_definition() {
    let (first, _) = reconcile(None, &echo("v1"), DriftAction::Alert, at(1));
    let (adopted, outcome) = reconcile(Some(&first), &echo("v2"), DriftAction::Alert, at(2));
    assert_eq!(outcome, Reconciled::Adopt { drifted: true });
    assert_eq!(adopted.accepted_hash, definition_hash(&echo("v2")));
    assert_eq!(adopted.blocked(DriftAction::Alert), None);
}

#[test]
fn durations_parse() {
    assert_eq!(
        parse_duration("30s"),
        Ok(std::time::Duration::from_secs(30))
    );
    assert_eq!(
        parse_duration("5m"),
        Ok(std::time::Duration::from_secs(300))
    );
    assert_eq!(
        parse_duration("250ms"),
        Ok(std::time::Duration::from_millis(250))
    );
    assert_eq!(parse_duration("2"), Ok(std::time::Duration::from_secs(2)));
    assert!(parse_duration("soon").is_err());
    assert!(parse_duration("3d").is_err());
}

#[test]
fn a_per_user_server_lists_its_tools_with_joch_s_own_credential() {
    let code = json!({"oauth2": {"grant": "authorization_code", "perUser": true, "clientId": "c"}});
    let service = json!({"oauth2": {"grant": "client_credentials", "clientId": "c"}});
    let exchange = json!({"oauth2": {"grant": "token_exchange", "clientId": "c"}});
    let cases = [
        (code.clone(), None, vec!["spec.http.listAuth"]),
        (exchange.clone(), None, vec!["spec.http.listAuth"]),
        (code.clone(), Some(service.clone()), vec![]),
        (exchange, Some(json!({"bearer": {"env": "T"}})), vec![]),
        (
            code.clone(),
            Some(code),
            vec!["spec.http.listAuth.oauth2.grant"],
        ),
        (service.clone(), Some(service), vec!["spec.http.listAuth"]),
    ];
    for (auth, list_auth, fields) in cases {
        let mut http = json!({"url": "http://127.0.0.1:9/mcp", "auth": auth});
        if let Some(list_auth) = list_auth {
            http["listAuth"] = list_auth;
        }
        let server: McpServer = serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"http": http},
        }))
        .expect("a server");
        let got: Vec<String> = match server.validate() {
            Ok(()) => Vec::new(),
            Err(ValidationError(errors)) => errors.into_iter().map(|e| e.field).collect(),
        };
        assert_eq!(got, fields, "{http}");
    }
}
