//! `{{path}}` templates of declarative tools: any text, checked and rendered
//! against a fixed scope, never panics.
#![no_main]

use joch_core::template;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|text: &str| {
    let scopes = json!({
        "args": {"to": "a@b.c", "n": 3, "list": [1, {"x": "y"}], "nested": {"deep": {"er": null}}},
        "context": {"ticket": "T-1"},
    });
    let _ = template::check(text);
    let _ = template::render(text, &scopes);
    let _ = template::render_text(text, &scopes);
    let _ = template::render_value(&json!({"field": text, "list": [text]}), &scopes);
    let _ = template::lookup(&scopes, text);
});
