use super::*;

fn tool(spec: Value) -> Result<Tool, serde_json::Error> {
    serde_json::from_value(json!({"metadata": {"name": "save_meal"}, "spec": spec}))
}

fn rest() -> Value {
    json!({"type": "rest", "endpoint": {"url": "http://127.0.0.1:1/x"}})
}

#[test]
fn parameters_list_becomes_a_schema() {
    let t = tool(json!({
        "parameters": [
            {"name": "meal_type", "type": "string", "enum": ["breakfast", "lunch", "dinner"]},
            {"name": "dishes", "type": "array", "required": true}
        ],
        "backend": rest()
    }))
    .unwrap();
    assert_eq!(
        t.spec.input_schema,
        json!({
            "type": "object",
            "properties": {
                "meal_type": {"type": "string", "enum": ["breakfast", "lunch", "dinner"]},
                "dishes": {"type": "array"}
            },
            "required": ["dishes"]
        })
    );
}

#[test]
fn defaults_are_risky_and_logged() {
    let t = tool(json!({"backend": rest()})).unwrap();
    assert_eq!(t.api_version, crate::API_VERSION);
    assert_eq!(t.spec.side_effects.level, SideEffectLevel::Unknown);
    assert!(!t.spec.side_effects.is_repeatable());
    assert!(t.spec.observability.log_args && t.spec.observability.log_result);
    let Backend::Rest(r) = &t.spec.backend else {
        panic!("a rest tool")
    };
    assert_eq!(
        (r.endpoint.method.as_str(), r.endpoint.timeout_ms),
        ("POST", 30_000)
    );
    t.validate().unwrap();
}

#[test]
fn malformed_specs_are_refused() {
    let both = tool(json!({"inputSchema": {}, "parameters": [], "backend": rest()}));
    assert!(both.unwrap_err().to_string().contains("not both"));
    let typo = tool(json!({"backend": rest(), "sideEfects": {}}));
    assert!(typo.unwrap_err().to_string().contains("sideEfects"));
    let no_backend = tool(json!({}));
    assert!(no_backend.is_err());
    let bad_level = tool(json!({"backend": rest(), "sideEffects": {"level": "dangerous"}}));
    assert!(bad_level.is_err());
}

#[test]
fn validation_names_each_bad_field() {
    let mut t = tool(json!({
        "inputSchema": 3,
        "backend": {"type": "rest", "endpoint": {"url": "ftp://x", "method": "BREW", "timeoutMs": 0}}
    }))
    .unwrap();
    let fields: Vec<String> = t
        .validate()
        .unwrap_err()
        .0
        .into_iter()
        .map(|e| e.field)
        .collect();
    assert_eq!(
        fields,
        [
            "spec.inputSchema",
            "spec.backend.endpoint.url",
            "spec.backend.endpoint.method",
            "spec.backend.endpoint.timeoutMs"
        ]
    );
    t.kind = "Tol".into();
    assert_eq!(t.validate().unwrap_err().0[0].field, "kind");
}

#[test]
fn serialises_back_to_inputschema_form() {
    let t =
        tool(json!({"parameters": [{"name": "a", "type": "string"}], "backend": rest()})).unwrap();
    let again: Tool = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
    assert_eq!(again, t);
}
