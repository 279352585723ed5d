//! Console pages over plain HTTP on a local joch (no authentication): what
//! a call's page says of its audit, and an execution's call context.

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::{Joch, NS};

async fn page(joch: &Joch, path: &str) -> String {
    let answer = reqwest::get(format!("{}{path}", joch.base)).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "{path}");
    answer.text().await.unwrap()
}

fn tamper(db: &std::path::Path, sql: &str) {
    let conn = rusqlite::Connection::open(db).unwrap();
    assert_eq!(conn.execute(sql, []).unwrap(), 1, "{sql}");
}

/// A call's page shows its entry, checked; a record edited behind joch's
/// back, or an entry rewritten, shows as not verified.
#[tokio::test]
async fn a_calls_page_shows_its_audit_entry_and_its_verification() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("joch.db");
    let joch = Joch::builder().db(&db).start().await;
    joch.create_tool(json!({
        "metadata": {"name": "nothing"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
    for n in 1..=2 {
        let call = json!({"metadata": {"name": format!("call-{n}")},
            "spec": {"toolRef": {"name": "nothing"}, "input": {"n": n}}});
        assert_eq!(joch.post_call(call).await.0, StatusCode::CREATED);
    }
    let path = format!("/ui/calls/call-2?ns={NS}");
    let html = page(&joch, &path).await;
    assert!(html.contains("data-audit=\"intact\""), "{html}");
    assert!(html.contains("#2") && html.contains("hashes: yes, links: yes"));
    assert!(html.contains("ToolCall as stored matches its latest entry."));

    tamper(
        &db,
        r#"UPDATE objects SET body = replace(body, '"n":2', '"n":9') WHERE kind = 'ToolCall' AND name = 'call-2'"#,
    );
    let html = page(&joch, &path).await;
    assert!(html.contains("data-audit=\"broken\""), "{html}");
    assert!(html.contains("differs from its latest entry"));

    tamper(
        &db,
        &format!(
            "UPDATE audit SET body = replace(body, 'Succeeded', 'Failed') WHERE namespace = '{NS}' AND seq = 1"
        ),
    );
    let html = page(&joch, &format!("/ui/calls/call-1?ns={NS}")).await;
    assert!(html.contains("hashes: NO, links: yes"), "{html}");
}

/// An execution's page shows the call context its declarative tools wrote.
#[tokio::test]
async fn an_executions_page_shows_its_call_context() {
    let joch = Joch::start().await;
    let tool = json!({
        "name": "remember",
        "description": "Remembers a word",
        "parameters": [{"name": "word", "type": "string", "required": true}],
        "actions": [{"type": "context.set", "data": {"flags.seen": "{{params.word}}"}}],
        "on_success": [{"type": "respond", "message": "noted"}]
    });
    joch.create_tool(tool).await;
    let call = json!({"spec": {"toolRef": {"name": "remember"}, "input": {"word": "kestrel"},
        "executionRef": {"name": "run-1"}, "callerId": "user-42"}});
    let (status, body) = joch.post_call(call).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let html = page(&joch, &format!("/ui/executions/run-1?ns={NS}")).await;
    assert!(html.contains("Call context"), "{html}");
    assert!(html.contains("kestrel"), "{html}");
    let none = page(&joch, &format!("/ui/executions/run-2?ns={NS}")).await;
    assert!(none.contains("No call context"), "{none}");
}

/// The store a scenario's joch will open, opened first by the test.
async fn open(store: &crate::harness::TestStore) -> std::sync::Arc<dyn joch_store::Store> {
    match store {
        crate::harness::TestStore::Sqlite { db, .. } => {
            std::sync::Arc::new(joch_store::SqliteStore::open(db).unwrap())
        }
        crate::harness::TestStore::Postgres(url) => std::sync::Arc::new(
            joch_store::PostgresStore::connect(url, Default::default())
                .await
                .unwrap(),
        ),
    }
}

// The overview covers the last hour, read from the store by creation
// time: a call created 61 minutes ago is not counted, one created 59
// minutes ago is, and so is one made now; the last 6 hours count all
// three; a window it does not offer is refused.
crate::storetest!(the_overview_counts_the_calls_of_its_window_only, |store| {
    let written = open(&store).await;
    for (name, tool, minutes_ago) in [("before", "old.tool", 61), ("within", "recent.tool", 59)] {
        let mut call = joch_core::ToolCall::of(name, tool, json!({}));
        call.metadata.namespace = NS.to_owned();
        let at = chrono::Utc::now() - chrono::Duration::minutes(minutes_ago);
        call.metadata.creation_timestamp = Some(joch_core::Time(at));
        call.status.phase = joch_core::Phase::Succeeded;
        written
            .create_object(&mut call, joch_store::Durability::Sync)
            .await
            .unwrap();
    }
    drop(written);
    let joch = store.joch().start().await;
    joch.create_tool(json!({
        "metadata": {"name": "now.tool"},
        "spec": {"description": "", "inputSchema": {"type": "object"}, "backend": {"type": "noop"}}
    }))
    .await;
    let call = json!({"spec": {"toolRef": {"name": "now.tool"}, "input": {}}});
    assert_eq!(joch.post_call(call).await.0, StatusCode::CREATED);

    let html = page(&joch, &format!("/ui/overview?ns={NS}")).await;
    assert!(html.contains("<dt>Calls</dt><dd>2</dd>"), "{html}");
    for tool in ["recent.tool", "now.tool"] {
        let cell = format!("<td data-label=\"Tool\">{tool}</td>");
        assert!(html.contains(&cell), "{tool}: {html}");
    }
    assert!(
        !html.contains("old.tool"),
        "a call before the window: {html}"
    );
    let day = page(&joch, &format!("/ui/overview?ns={NS}&window=6h")).await;
    assert!(
        day.contains("<dt>Calls</dt><dd>3</dd>"),
        "6 hours hold all three: {day}"
    );
    let answer = reqwest::get(format!("{}/ui/overview?ns={NS}&window=2h", joch.base))
        .await
        .unwrap();
    assert_eq!(
        answer.status(),
        StatusCode::BAD_REQUEST,
        "an unknown window"
    );
});
