//! The questions joch asks and the decisions answers make.

use serde_json::json;

use super::*;

fn approval(kind: &str, routing: Value, payload: Value) -> Approval {
    serde_json::from_value(json!({
        "metadata": {"name": "mcp-1", "namespace": "ns"},
        "spec": {
            "action": {"type": kind, "toolCallRef": {"name": "mcp-1"}},
            "policyRef": {"name": "ask-first", "version": "3"},
            "risk": {"level": "external_write", "summary": "Creates a ticket the customer sees."},
            "routing": routing,
            "options": [],
            "payload": payload,
        }
    }))
    .expect("a valid approval")
}

fn tool_with(input_schema: Value) -> Tool {
    serde_json::from_value(json!({
        "metadata": {"name": "wire"},
        "spec": {"description": "", "inputSchema": input_schema, "backend": {"type": "noop"}}
    }))
    .expect("a valid tool")
}

fn user_input(arg: &str) -> Approval {
    approval(
        "user_input",
        json!({}),
        json!({"tool": "wire", "input": {"amount": 5}, "userInput": {"targetArg": arg, "prompt": "Type the code"}}),
    )
}

fn schema_of(params: &ElicitRequestParams) -> Value {
    match params {
        ElicitRequestParams::FormElicitationParams {
            requested_schema, ..
        } => serde_json::to_value(requested_schema).expect("serializable"),
        other => panic!("not a form: {other:?}"),
    }
}

#[test]
fn only_user_input_and_opted_in_approvals_are_asked() {
    let payload = json!({"tool": "t", "input": {}});
    assert!(!may_ask(&approval("tool_call", json!({}), payload.clone())));
    assert!(may_ask(&approval(
        "tool_call",
        json!({"askUser": true}),
        payload.clone()
    )));
    assert!(may_ask(&approval("user_input", json!({}), payload)));
}

#[test]
fn an_approval_asks_yes_or_no_naming_tool_arguments_and_reason() {
    let a = approval(
        "tool_call",
        json!({"askUser": true}),
        json!({"tool": "zendesk.create", "input": {"subject": "hi", "card": "[REDACTED]"}, "reason": "for the model"}),
    );
    let (question, params) = request(&a, None);
    assert_eq!(question, Question::Approve);
    let ElicitRequestParams::FormElicitationParams { message, .. } = &params else {
        panic!("not a form");
    };
    assert!(message.contains("\"zendesk.create\""), "{message}");
    assert!(
        message.contains(r#"{"card":"[REDACTED]","subject":"hi"}"#),
        "{message}"
    );
    assert!(
        message.contains("Creates a ticket the customer sees. (policy ask-first, version 3)"),
        "{message}"
    );
    let schema = schema_of(&params);
    assert_eq!(schema["required"], json!(["approve"]));
    assert_eq!(schema["properties"]["approve"]["type"], "boolean");
    assert_eq!(schema["properties"]["reason"]["type"], "string");
}

#[test]
fn a_value_is_asked_with_the_type_the_tool_declares() {
    let props = json!({"type": "object", "properties": {
        "n": {"type": "number"}, "i": {"type": ["integer", "null"]}, "b": {"type": "boolean"},
        "s": {"type": "string", "description": "the code"}, "e": {"type": "string", "enum": ["a", "b"]},
        "o": {"type": "object"}, "nested": {"type": "object", "properties": {"x": {"type": "integer"}}}
    }});
    let tool = tool_with(props);
    for (arg, kind, json) in [
        ("n", Some("number"), false),
        ("i", Some("integer"), false),
        ("b", Some("boolean"), false),
        ("s", Some("string"), false),
        ("e", Some("string"), false),
        ("o", Some("string"), true),
        ("nested.x", Some("integer"), false),
        ("missing", Some("string"), false),
    ] {
        let (question, params) = request(&user_input(arg), Some(&tool));
        assert_eq!(
            question,
            Question::Value {
                arg: arg.to_owned(),
                json
            },
            "{arg}"
        );
        let schema = schema_of(&params);
        assert_eq!(schema["required"], json!([arg]), "{arg}");
        assert_eq!(schema["properties"][arg]["type"].as_str(), kind, "{arg}");
        assert_eq!(
            schema["properties"][arg]["description"], "Type the code",
            "{arg}"
        );
    }
    let (_, params) = request(&user_input("e"), Some(&tool));
    assert_eq!(
        schema_of(&params)["properties"]["e"]["enum"],
        json!(["a", "b"])
    );
    // Without the tool (deleted meanwhile), text.
    let (_, params) = request(&user_input("n"), None);
    assert_eq!(schema_of(&params)["properties"]["n"]["type"], "string");
}

#[test]
fn answers_become_decisions() {
    let answer = |action: ElicitationAction, content: Option<Value>| {
        let result = ElicitResult::new(action);
        match content {
            Some(c) => result.with_content(c),
            None => result,
        }
    };
    let approve = Question::Approve;
    let rejected = |message: &str, rationale: Option<&str>| {
        Some(Verdict::Reject(ApprovalDecision {
            message: Some(message.to_owned()),
            rationale: rationale.map(str::to_owned),
            ..ApprovalDecision::default()
        }))
    };
    let cases = [
        (
            answer(
                ElicitationAction::Accept,
                Some(json!({"approve": true, "reason": "looks fine"})),
            ),
            Some(Verdict::Approve(ApprovalDecision {
                rationale: Some("looks fine".to_owned()),
                ..ApprovalDecision::default()
            })),
        ),
        (
            answer(
                ElicitationAction::Accept,
                Some(json!({"approve": false, "reason": "wrong customer"})),
            ),
            rejected("wrong customer", Some("wrong customer")),
        ),
        (
            answer(
                ElicitationAction::Accept,
                Some(json!({"approve": false, "reason": " "})),
            ),
            rejected("the user did not approve the call", None),
        ),
        (
            answer(ElicitationAction::Decline, None),
            rejected(
                "the user declined in the MCP client",
                Some("the user declined in the MCP client"),
            ),
        ),
        // Dismissed without an explicit choice: no decision.
        (answer(ElicitationAction::Cancel, None), None),
        (answer(ElicitationAction::Accept, None), None),
        (
            answer(ElicitationAction::Accept, Some(json!({"approve": "yes"}))),
            None,
        ),
    ];
    for (result, expected) in cases {
        assert_eq!(verdict(&approve, &result), expected, "{result:?}");
    }

    let value = |question: Question, content: Value| match verdict(
        &question,
        &answer(ElicitationAction::Accept, Some(content)),
    ) {
        Some(Verdict::Approve(d)) => d.value,
        other => panic!("not an approval: {other:?}"),
    };
    let code = Question::Value {
        arg: "code".to_owned(),
        json: false,
    };
    assert_eq!(
        value(code.clone(), json!({"code": "4242"})),
        Some(json!("4242"))
    );
    assert_eq!(
        verdict(&code, &answer(ElicitationAction::Accept, Some(json!({})))),
        None
    );
    let object = Question::Value {
        arg: "o".to_owned(),
        json: true,
    };
    assert_eq!(
        value(object.clone(), json!({"o": "{\"a\": 1}"})),
        Some(json!({"a": 1}))
    );
    assert_eq!(
        value(object, json!({"o": "not json"})),
        Some(json!("not json"))
    );
}

#[test]
fn a_consent_is_a_url_to_open_whose_answer_decides_nothing() {
    let url = "https://as.example/authorize?state=ns.x";
    let consent = approval(
        "consent",
        json!({}),
        json!({"tool": "mail", "input": {}, "consentUrl": url}),
    );
    assert!(is_consent(&consent) && !may_ask(&consent));
    let (question, params) = request(&consent, None);
    assert_eq!(question, Question::OpenUrl);
    match params {
        ElicitRequestParams::UrlElicitationParams {
            url: sent, message, ..
        } => {
            assert_eq!(sent, url);
            assert_eq!(message, "Creates a ticket the customer sees.");
        }
        other => panic!("not a URL: {other:?}"),
    }
    let answer = ElicitResult::new;
    for action in [
        ElicitationAction::Accept,
        ElicitationAction::Decline,
        ElicitationAction::Cancel,
    ] {
        assert_eq!(
            verdict(&question, &answer(action.clone())),
            None,
            "{action:?}"
        );
    }
}
