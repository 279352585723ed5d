use serde_json::json;

use super::MAX_SUBSCRIPTIONS;
use crate::engine::test_engine;
use crate::{EngineError, Principal};

/// What a session asked is kept in its record, bounded, and a touch from
/// an older copy of the record does not undo it.
#[tokio::test]
async fn a_sessions_subscriptions_are_kept_bounded_and_survive_a_stale_touch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = test_engine(&dir);
    let mcp = engine.mcp();
    let id = (mcp.open_session(&Principal::local(), "ns", json!({})))
        .await
        .expect("opened");
    let stale = mcp.open_session_by_id(&id).await.expect("the record");
    for n in 0..MAX_SUBSCRIPTIONS {
        mcp.remember(&id, |s| {
            s.subscribed.insert(format!("docs.note://{n}"));
        })
        .await
        .expect("within the cap");
    }
    let refused = mcp
        .remember(&id, |s| {
            s.subscribed.insert("docs.note://one-more".to_owned());
        })
        .await;
    assert!(
        matches!(refused, Err(EngineError::Invalid(_))),
        "{refused:?}"
    );
    mcp.remember(&id, |s| s.log_level = Some("debug".to_owned()))
        .await
        .expect("a level");

    mcp.touch_session(stale).await.expect("touched");
    // A touch is not synced: readers see it once its batch commits.
    let mut kept = mcp.open_session_by_id(&id).await.expect("the record");
    for _ in 0..100 {
        if kept.version > MAX_SUBSCRIPTIONS as u64 + 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        kept = mcp.open_session_by_id(&id).await.expect("the record");
    }
    assert_eq!(kept.subscribed.len(), MAX_SUBSCRIPTIONS);
    assert_eq!(kept.log_level.as_deref(), Some("debug"));
    // Opened, each subscription, the level, then the touch.
    assert_eq!(
        kept.version,
        MAX_SUBSCRIPTIONS as u64 + 3,
        "the touch was written"
    );
}

/// The store's kind of a session record is the kind a missing one is
/// reported as (`error.rs` spells it without reaching into this part).
#[test]
fn a_missing_sessions_kind_is_the_records_kind() {
    assert_eq!(
        crate::NotFoundKind::McpSession.as_str(),
        super::MCP_SESSION_KIND
    );
}
