use std::time::Duration;

use joch_core::token::Role;

use crate::engine::test_engine;

/// A session signs in its token's principal until it is closed, expires,
/// or its token is revoked; an unknown token opens none.
#[tokio::test]
async fn a_session_lasts_until_closed_expired_or_revoked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = test_engine(&dir);
    let (_, secret) = engine
        .identity()
        .create_token("ns", "alice", Role::Approver, None)
        .await
        .expect("token");
    let hour = Duration::from_secs(3600);
    assert!(
        engine
            .identity()
            .open_session("nonsense", hour)
            .await
            .expect("open")
            .is_none()
    );

    let opened = engine
        .identity()
        .open_session(&secret, hour)
        .await
        .expect("open")
        .expect("a session");
    let live = engine
        .identity()
        .session(&opened.id)
        .await
        .expect("read")
        .expect("live");
    assert_eq!(
        (live.principal.name.as_str(), live.csrf),
        ("alice", opened.csrf)
    );
    engine
        .identity()
        .close_session(&opened.id)
        .await
        .expect("close");
    assert!(
        engine
            .identity()
            .session(&opened.id)
            .await
            .expect("read")
            .is_none(),
        "signed out"
    );

    let brief = engine
        .identity()
        .open_session(&secret, Duration::ZERO)
        .await
        .expect("open")
        .expect("a session");
    assert!(
        engine
            .identity()
            .session(&brief.id)
            .await
            .expect("read")
            .is_none(),
        "expired"
    );

    let kept = engine
        .identity()
        .open_session(&secret, hour)
        .await
        .expect("open")
        .expect("a session");
    engine
        .resources()
        .delete::<joch_core::token::ApiToken>(&joch_core::Principal::local(), "ns", "alice", None)
        .await
        .expect("revoke");
    assert!(
        engine
            .identity()
            .session(&kept.id)
            .await
            .expect("read")
            .is_none(),
        "revoked"
    );
}
