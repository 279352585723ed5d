use serde_json::json;

use super::*;

fn kinds_in(text: &str) -> Vec<&'static str> {
    static DETECTORS: LazyLock<Detectors> = LazyLock::new(Detectors::default);
    let mut kinds: Vec<&str> = DETECTORS.spans(text).into_iter().map(|(k, _)| k).collect();
    kinds.dedup();
    kinds
}

/// For every kind: true positives, and near misses that must not match.
#[test]
fn each_kind_finds_its_own_and_not_its_near_misses() {
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "aws_access_key",
            &["key AKIAIOSFODNN7EXAMPLE here", "ASIAY34FZKBOKMUTVV7A"],
            &[
                "AKIAIOSFODNN7EXAMPL",
                "akiaiosfodnn7example",
                "XAKIAIOSFODNN7EXAMPLE",
            ],
        ),
        (
            "github_token",
            &[
                "ghp_0123456789abcdefghijABCDEFGHIJ012345",
                "token=gho_abcdefghijABCDEFGHIJ0123456789abcdef;",
            ],
            &[
                "ghp_0123456789abcdef",
                "ghx_0123456789abcdefghijABCDEFGHIJ012345",
            ],
        ),
        (
            "gitlab_token",
            &["glpat-abcdefghij0123456789"],
            &["glpat-short", "glpat_abcdefghij0123456789"],
        ),
        (
            "slack_token",
            &[
                "xoxb-123456789012-abcdefABCDEF",
                "https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX",
            ],
            &["xoxz-123456789012-abcdef", "xoxb-12-ab"],
        ),
        (
            "private_key",
            &[
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
                "-----BEGIN OPENSSH PRIVATE KEY-----\ntruncated",
            ],
            &[
                "-----BEGIN PUBLIC KEY-----\nMIIBI\n-----END PUBLIC KEY-----",
                "BEGIN PRIVATE KEY",
            ],
        ),
        (
            "jwt",
            &[jwt],
            &["eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJ9"],
        ),
        (
            "card",
            &[
                "4111 1111 1111 1111",
                "card 5555-5555-5555-4444.",
                "378282246310005",
            ],
            &[
                "4111 1111 1111 1112",
                "4111111111111112",
                "1234567812345670",
                "411111111111",
            ],
        ),
        (
            "email",
            &["write to alice@example.com", "bob.o+tag@mail.example.co.uk"],
            &["alice@localhost", "@handle", "alice@example."],
        ),
        (
            "iban",
            &["IBAN DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432"],
            &[
                "DE89 3704 0044 0532 0130 01",
                "GB82WEST1234569876543",
                "XX82WEST12345698765432",
            ],
        ),
    ];
    assert_eq!(
        cases.iter().map(|(k, _, _)| *k).collect::<Vec<_>>(),
        builtin_kinds().collect::<Vec<_>>(),
        "every built-in kind has cases"
    );
    for (kind, hits, misses) in cases {
        for hit in *hits {
            assert_eq!(kinds_in(hit), [*kind], "{kind} in {hit:?}");
        }
        for miss in *misses {
            assert!(!kinds_in(miss).contains(kind), "{kind} is not in {miss:?}");
        }
    }
}

#[test]
fn scans_name_kind_and_path_never_the_value() {
    let detectors = Detectors::default();
    let input = json!({
        "body": "card 4111 1111 1111 1111, mail alice@example.com",
        "items": [{"note": "AKIAIOSFODNN7EXAMPLE"}, {"note": "fine"}],
        "odd key": "carol@example.org",
        "n": 4111111111111111u64,
        "m": 12
    });
    let found = detectors.scan("input", &input);
    let seen: Vec<(&str, &str)> = found
        .iter()
        .map(|d| (d.kind.as_str(), d.path.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("card", "input.body"),
            ("email", "input.body"),
            ("aws_access_key", "input.items[0].note"),
            ("card", "input.n"),
            ("email", "input[\"odd key\"]"),
        ]
    );
    let counts = detectors.counts(&found);
    assert_eq!(counts["email"], json!(2));
    assert_eq!(counts["card"], json!(2));
    assert_eq!(counts["iban"], json!(0));
    assert!(!serde_json::to_string(&found).unwrap().contains("4111"));
}

#[test]
fn redaction_removes_only_the_span() {
    let detectors = Detectors::default();
    let mut value = json!({
        "body": "pay with 4111 1111 1111 1111 today, or mail alice@example.com",
        "other": "nothing here",
        "list": ["AKIAIOSFODNN7EXAMPLE and 5555555555554444"]
    });
    let replaced = detectors.redact(&mut value, &["card".to_owned()]);
    assert_eq!(replaced, 2);
    assert_eq!(
        value,
        json!({
            "body": "pay with [REDACTED:card] today, or mail alice@example.com",
            "other": "nothing here",
            "list": ["AKIAIOSFODNN7EXAMPLE and [REDACTED:card]"]
        })
    );
    detectors.redact(&mut value, &["*".to_owned()]);
    assert_eq!(
        value["body"],
        json!("pay with [REDACTED:card] today, or mail [REDACTED:email]")
    );
    assert_eq!(
        value["list"][0],
        json!("[REDACTED:aws_access_key] and [REDACTED:card]")
    );
}

#[test]
fn numbers_and_keys_are_scanned_and_keys_are_named_redacted() {
    let detectors = Detectors::default();
    let value = json!({
        "card": 4111111111111111u64,
        "luhn_fails": 4111111111111112u64,
        "count": 42,
        "price": 4.5,
        "4111111111111111": {"mail": "alice@example.com"},
        "5555555555554444": "fine",
        "[REDACTED:card]": "already here",
        "alice@example.com": true
    });
    let found = detectors.scan("output", &value);
    let seen: Vec<(&str, &str)> = found
        .iter()
        .map(|d| (d.kind.as_str(), d.path.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("card", "output[\"[REDACTED:card] (2)\"]#key"),
            ("email", "output[\"[REDACTED:card] (2)\"].mail"),
            ("card", "output[\"[REDACTED:card] (3)\"]#key"),
            ("email", "output[\"[REDACTED:email]\"]#key"),
            ("card", "output.card"),
        ],
        "a key's path holds its redacted form and #key, never the value"
    );
    assert!(!serde_json::to_string(&found).unwrap().contains("4111"));
    assert!(!serde_json::to_string(&found).unwrap().contains("5555"));
    assert_eq!(detectors.counts(&found)["card"], json!(3));
}

#[test]
fn numbers_are_redacted_whole_and_keys_span_by_span() {
    let detectors = Detectors::default();
    let mut value = json!({
        "card": 4111111111111111u64,
        "list": [5555555555554444u64, 7],
        "luhn_fails": 4111111111111112u64,
        "count": 42,
        "card 4111111111111111 of alice@example.com": {"inner": 6011111111111117u64},
        "5555555555554444": "a",
        "4111111111111111": "b"
    });
    let replaced = detectors.redact(&mut value, &["card".to_owned()]);
    assert_eq!(replaced, 6);
    assert_eq!(
        value,
        json!({
            "card": "[REDACTED:card]",
            "list": ["[REDACTED:card]", 7],
            "luhn_fails": 4111111111111112u64,
            "count": 42,
            "card [REDACTED:card] of alice@example.com": {"inner": "[REDACTED:card]"},
            "[REDACTED:card]": "b",
            "[REDACTED:card] (2)": "a"
        }),
        "no member is lost when two keys redact alike; numbers that are not cards stay numbers"
    );
    assert_eq!(
        detectors.redact(&mut value, &["email".to_owned()]),
        1,
        "a key's other kinds are left to their own rule"
    );
    assert!(
        value
            .get("card [REDACTED:card] of [REDACTED:email]")
            .is_some()
    );

    let custom = Detectors::new(&[CustomDetector {
        name: "employee_no".into(),
        pattern: r"\b9[0-9]{5}\b".into(),
    }])
    .unwrap();
    let mut value = json!({"who": 912345, "other": 812345, "912345": 1});
    assert_eq!(custom.redact(&mut value, &["*".to_owned()]), 2);
    assert_eq!(
        value,
        json!({"who": "[REDACTED:employee_no]", "other": 812345, "[REDACTED:employee_no]": 1})
    );
}

#[test]
fn custom_detectors_report_their_name_and_bad_ones_are_refused() {
    let custom = |name: &str, pattern: &str| CustomDetector {
        name: name.to_owned(),
        pattern: pattern.to_owned(),
    };
    let detectors = Detectors::new(&[custom("employee_id", r"\bEMP-[0-9]{6}\b")]).unwrap();
    assert_eq!(detectors.kinds().last(), Some(&"employee_id"));
    let found = detectors.scan("output", &json!({"who": "EMP-004211 asked"}));
    assert_eq!(
        found,
        [Detection {
            kind: "employee_id".into(),
            path: "output.who".into()
        }]
    );
    let mut value = json!("EMP-004211 asked");
    detectors.redact(&mut value, &["employee_id".to_owned()]);
    assert_eq!(value, json!("[REDACTED:employee_id] asked"));
    assert!(detectors.scan("output", &json!("EMP-42")).is_empty());

    for (bad, error) in [
        (custom("card", "x"), DetectorError::Name("card".into())),
        (
            custom("Bad-Name", "x"),
            DetectorError::Name("Bad-Name".into()),
        ),
    ] {
        assert_eq!(Detectors::new(&[bad]).unwrap_err(), error);
    }
    assert!(matches!(
        Detectors::new(&[custom("broken", "(")]),
        Err(DetectorError::Pattern { .. })
    ));
}

#[test]
fn luhn_and_iban_checks() {
    for (number, valid) in [
        ("4111111111111111", true),
        ("4111111111111112", false),
        ("79927398713", false), // valid Luhn, but too short for a card
        ("6011 1111 1111 1117", true),
    ] {
        assert_eq!(luhn(number), valid, "{number}");
    }
    for (text, valid) in [
        ("DE89370400440532013000", true),
        ("DE89 3704 0044 0532 0130 00", true),
        ("DE88370400440532013000", false),
        ("NL91ABNA0417164300", true),
        ("NL91ABNA041716430", false),
    ] {
        assert_eq!(iban(text), valid, "{text}");
    }
}

#[test]
fn policies_that_read_detections_are_told_apart() {
    assert!(reads_detections(
        r#"{"when":{"input.detected.card":{"gte":1}}}"#
    ));
    assert!(reads_detections(
        r#"{"modify":{"redactDetected":["card"]}}"#
    ));
    assert!(!reads_detections(r#"{"when":{"tool.name":"x"}}"#));
}
