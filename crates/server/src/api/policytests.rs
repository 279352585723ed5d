//! `POST /v1/namespaces/{ns}/policies/test`: back-tests a candidate policy
//! on the ledger. With `Accept: application/x-ndjson` the answer streams a
//! `{"progress": {"read": n}}` line per page of calls read, then
//! `{"report": ...}` (or `{"error": {code, message}}`).

use std::convert::Infallible;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use joch_core::backtest::PolicyTest;
use serde_json::{Value, json};

use crate::extract::{Body, Caller, Path};
use crate::{ApiError, ApiWord, AppState};

/// What streams: progress lines, then the report.
const NDJSON: &str = "application/x-ndjson";

pub(crate) async fn test(
    State(state): State<AppState>,
    Caller(by): Caller,
    Path((ns, verb)): Path<(String, String)>,
    headers: HeaderMap,
    Body(test): Body<PolicyTest>,
) -> Result<Response, ApiError> {
    if verb != "test" {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ApiWord::MethodNotAllowed,
            format!("POST is for …/policies (create) and …/policies/test, not …/policies/{verb}"),
        ));
    }
    let streams = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(NDJSON));
    if !streams {
        let report = state
            .engine
            .policies()
            .test(&by, &ns, test, &mut |_| {})
            .await?;
        return Ok(Json(report).into_response());
    }
    let (lines, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        let progress = lines.clone();
        let mut progress = move |read: u64| {
            let _ = progress.send(json!({"progress": {"read": read}}));
        };
        let policies = state.engine.policies();
        // A client that hangs up drops the test, which stops its threads.
        let answer = tokio::select! {
            answer = policies.test(&by, &ns, test, &mut progress) => answer,
            () = lines.closed() => return,
        };
        let last = match answer {
            Ok(report) => json!({"report": report}),
            Err(e) => {
                let e = ApiError::from(e);
                json!({"error": {"code": e.code, "message": e.message}})
            }
        };
        let _ = lines.send(last);
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let line = rx.recv().await?;
        Some((Ok::<_, Infallible>(format!("{line}\n")), rx))
    });
    Ok((
        [(header::CONTENT_TYPE, NDJSON)],
        axum::body::Body::from_stream(stream),
    )
        .into_response())
}
