use serde_json::{Map, Value, json};

use super::*;

fn args(value: Value) -> Map<String, Value> {
    let mut map = value.as_object().cloned().unwrap_or_default();
    map.insert("callId".into(), json!("call-1"));
    map
}

fn numbered(n: usize) -> Vec<u8> {
    (1..=n)
        .map(|i| format!("line {i}\n"))
        .collect::<String>()
        .into_bytes()
}

fn answer(tool: &str, a: Value, content: &[u8]) -> Value {
    run(tool, &args(a), content).unwrap_or_else(|e| panic!("{tool}: {e:?}"))
}

#[test]
fn head_and_tail_take_lines_and_cap_them() {
    let content = numbered(5000);
    let head = answer("artifact_head", json!({"lines": 2}), &content);
    assert_eq!(head["text"], "line 1\nline 2\n");
    assert_eq!(head["truncated"], false);
    let tail = answer("artifact_tail", json!({"lines": 2}), &content);
    assert_eq!(tail["text"], "line 4999\nline 5000\n");
    assert_eq!(tail["firstLine"], 4999);
    let capped = answer("artifact_head", json!({"lines": 100000}), &content);
    assert_eq!(capped["lines"], MAX_LINES);
    assert_eq!(capped["truncated"], true);
    let empty = answer("artifact_head", json!({}), b"");
    assert_eq!(empty["lines"], 0);
}

#[test]
fn results_never_exceed_the_byte_bound() {
    let long = "x".repeat(MAX_RESULT_BYTES * 3);
    let head = answer("artifact_head", json!({"lines": 1}), long.as_bytes());
    assert!(head["text"].as_str().unwrap().len() <= MAX_RESULT_BYTES);
    assert_eq!(head["truncated"], true);
    let slice = answer(
        "artifact_slice",
        json!({"unit": "bytes", "start": 0}),
        long.as_bytes(),
    );
    assert_eq!(slice["end"], MAX_RESULT_BYTES);
    assert_eq!(slice["truncated"], true);
}

#[test]
fn grep_numbers_matches_with_merged_context() {
    let content = numbered(30);
    let found = answer(
        "artifact_grep",
        json!({"pattern": "^line (3|4|20)$", "context": 1}),
        &content,
    );
    assert_eq!(found["matches"], 3);
    assert_eq!(
        found["text"],
        "2-line 2\n3:line 3\n4:line 4\n5-line 5\n--\n19-line 19\n20:line 20\n21-line 21\n"
    );
    let capped = answer(
        "artifact_grep",
        json!({"pattern": "line", "maxMatches": 2}),
        &content,
    );
    assert_eq!(capped["matches"], 2);
    assert_eq!(capped["truncated"], true);
    let folded = answer(
        "artifact_grep",
        json!({"pattern": "LINE 7$", "ignoreCase": true}),
        &content,
    );
    assert_eq!(folded["text"], "7:line 7\n");
}

#[test]
fn bad_arguments_are_named() {
    let content = numbered(3);
    let code = |tool: &str, a: Value| run(tool, &args(a), &content).unwrap_err().code;
    assert_eq!(
        code("artifact_grep", json!({"pattern": "("})),
        "invalid_regex"
    );
    assert_eq!(code("artifact_grep", json!({})), "invalid_arguments");
    assert_eq!(
        code("artifact_head", json!({"line": 3})),
        "invalid_arguments"
    );
    assert_eq!(
        code("artifact_slice", json!({"start": 0})),
        "invalid_arguments"
    );
    assert_eq!(
        code("artifact_slice", json!({"start": 5, "end": 2})),
        "invalid_arguments"
    );
    assert_eq!(code("artifact_jq", json!({"path": ".a"})), "not_json");
    assert_eq!(code("artifact_ls", json!({})), "unknown_artifact_tool");
    assert!(call_id(&Map::new()).is_err());
}

#[test]
fn slices_by_lines_and_bytes() {
    let content = numbered(10);
    let lines = answer("artifact_slice", json!({"start": 3, "end": 4}), &content);
    assert_eq!(lines["text"], "line 3\nline 4\n");
    let bytes = answer(
        "artifact_slice",
        json!({"unit": "bytes", "start": 2, "end": 6}),
        &content,
    );
    assert_eq!(bytes["text"], "ne 1");
    let past = answer(
        "artifact_slice",
        json!({"unit": "bytes", "start": 1000}),
        &content,
    );
    assert_eq!(past["text"], "");
    for start in [u64::MAX, u64::MAX - 1] {
        let far = answer("artifact_slice", json!({"start": start}), &content);
        assert_eq!(far["text"], "", "a start past every line is an empty slice");
    }
}

#[test]
fn jq_selects_from_documents_and_json_lines() {
    let doc = br#"{"items": [{"id": 7, "tags": ["a", "b"]}], "a/b": 1}"#;
    for (path, expected) in [
        (".items[0].id", json!(7)),
        ("items.0.tags[1]", json!("b")),
        ("/items/0/id", json!(7)),
        ("/a~1b", json!(1)),
        (".", serde_json::from_slice::<Value>(doc).unwrap()),
    ] {
        assert_eq!(
            answer("artifact_jq", json!({"path": path}), doc)["json"],
            expected,
            "{path}"
        );
    }
    let missing = run("artifact_jq", &args(json!({"path": ".nope"})), doc).unwrap_err();
    assert_eq!(missing.code, "path_not_found");
    let lines = b"{\"n\": 1}\n{\"n\": 2}\nnot json\n{\"m\": 3}\n";
    let picked = answer("artifact_jq", json!({"path": ".n"}), lines);
    assert_eq!(picked["json"], json!([1, 2]));
    assert_eq!(picked["jsonLines"], true);
}

#[test]
fn definitions_offer_only_the_given_calls() {
    let defs = definitions(&["call-1".to_owned()]);
    assert_eq!(defs.len(), NAMES.len());
    for def in &defs {
        assert!(is_artifact_tool(def["name"].as_str().unwrap()));
        assert_eq!(
            def["inputSchema"]["properties"]["callId"]["enum"],
            json!(["call-1"])
        );
    }
}
