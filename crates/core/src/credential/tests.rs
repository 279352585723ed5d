use serde_json::{Value, json};

use super::*;

fn problems(auth: Value) -> Vec<(String, String)> {
    let auth: UpstreamAuth = serde_json::from_value(auth).expect("parses");
    auth.problems("spec.auth")
        .into_iter()
        .map(|e| (e.field, e.message))
        .collect()
}

#[test]
fn mistakes_are_reported_at_their_exact_paths() {
    let good = json!({"oauth2": {
        "grant": "client_credentials", "tokenUrl": "https://as.example/token",
        "clientId": "joch", "clientSecret": {"env": "S"}, "scopes": ["a", "b"],
        "resource": "https://api.example/"
    }});
    let cases = [
        (json!({"bearer": {"env": "T"}}), vec![]),
        (
            json!({"oauth2": {"grant": "client_credentials", "clientId": "discovered"}}),
            vec![],
        ),
        (good, vec![]),
        (json!({}), vec!["spec.auth"]),
        (
            json!({"bearer": {"env": "T"}, "oauth2": {"grant": "client_credentials",
                "tokenUrl": "https://a/t", "clientId": "c"}}),
            vec!["spec.auth"],
        ),
        (
            json!({"bearer": {"env": "T", "file": "/f"}}),
            vec!["spec.auth.bearer"],
        ),
        (
            json!({"oauth2": {"grant": "token_exchange", "perUser": true, "tokenUrl": "ftp://x",
                "clientId": " ", "clientSecret": {}, "scopes": ["ok", "two words"],
                "resource": "urn:x"}}),
            vec![
                "spec.auth.oauth2.perUser",
                "spec.auth.oauth2.tokenUrl",
                "spec.auth.oauth2.clientId",
                "spec.auth.oauth2.resource",
                "spec.auth.oauth2.scopes[1]",
                "spec.auth.oauth2.clientSecret",
            ],
        ),
    ];
    let cases = cases.into_iter().chain([
        (
            json!({"oauth2": {"grant": "authorization_code", "clientId": "c",
                "authorizationUrl": "mailto:x"}}),
            vec![
                "spec.auth.oauth2.perUser",
                "spec.auth.oauth2.authorizationUrl",
            ],
        ),
        (
            json!({"oauth2": {"grant": "client_credentials", "clientId": "c", "perUser": true}}),
            vec!["spec.auth.oauth2.perUser"],
        ),
        (
            json!({"oauth2": {"grant": "authorization_code", "clientId": "c", "perUser": true}}),
            vec![],
        ),
    ]);
    for (auth, fields) in cases {
        let found: Vec<String> = problems(auth.clone()).into_iter().map(|p| p.0).collect();
        assert_eq!(found, fields, "{auth}");
    }
}

#[test]
fn an_issued_token_is_never_shown_by_debug() {
    let token = IssuedToken {
        access_token: "at-secret".to_owned(),
        refresh_token: Some("rt-secret".to_owned()),
        expires_in: Some(60),
        scope: None,
    };
    let shown = format!("{token:?}");
    assert!(!shown.contains("secret"), "{shown}");
}

#[test]
fn credential_names_are_valid_and_do_not_show_the_user() {
    let upstream = UpstreamRef::mcp_server("github");
    let service = Credential::name_for(&upstream, None);
    assert_eq!(service, "mcpserver.github.service");
    let user = Credential::name_for(&upstream, Some("alice@example.com"));
    assert!(user.starts_with("mcpserver.github.user-"), "{user}");
    assert!(!user.contains("alice"));
    for name in [service, user] {
        validate_name("metadata.name", &name).expect("valid");
    }
}
