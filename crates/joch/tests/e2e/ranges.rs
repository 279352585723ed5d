//! `GET …/toolcalls?createdSince=&createdBefore=`: the ledger narrowed to a
//! time range by the store's creation-time index, on both stores.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Joch, NS, Webhook, rest_tool};

/// Calls named `names`, one after another.
async fn calls(joch: &Joch, names: &[&str]) {
    for name in names {
        let (status, call) = joch
            .post_call(json!({"metadata": {"name": name}, "spec": {"toolRef": {"name": "echo"}, "input": {}}}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{call}");
    }
}

/// Every page's call names from `query`, following `continue`.
async fn pages(joch: &Joch, query: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut path = format!("/v1/namespaces/{NS}/toolcalls?{query}");
    loop {
        let (status, list) = joch.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {list}");
        let names = list["items"].as_array().unwrap().iter();
        pages.push(
            names
                .map(|c| c["metadata"]["name"].as_str().unwrap().to_owned())
                .collect(),
        );
        match list["metadata"]["continue"].as_str() {
            Some(token) => path = format!("/v1/namespaces/{NS}/toolcalls?{query}&continue={token}"),
            None => return pages,
        }
    }
}

/// An instant between calls made before and after it, as RFC 3339.
async fn instant_between() -> String {
    tokio::time::sleep(Duration::from_millis(15)).await;
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    tokio::time::sleep(Duration::from_millis(15)).await;
    at
}

crate::storetest!(a_time_range_narrows_the_list_and_pages_within_it, |store| {
    let webhook = Webhook::start().await;
    let joch = store.joch().start().await;
    joch.create_tool(rest_tool(
        "echo",
        &format!("{}/echo", webhook.base),
        json!({}),
    ))
    .await;
    calls(&joch, &["old-1", "old-2"]).await;
    let middle = instant_between().await;
    calls(&joch, &["mid-1"]).await;
    let end = instant_between().await;
    calls(&joch, &["new-1", "new-2"]).await;

    assert_eq!(
        pages(&joch, &format!("createdSince={middle}&limit=2")).await,
        [vec!["new-2", "new-1"], vec!["mid-1"]]
    );
    assert_eq!(
        pages(&joch, &format!("createdBefore={middle}")).await,
        [vec!["old-2", "old-1"]]
    );
    let within = format!("createdSince={middle}&createdBefore={end}");
    assert_eq!(pages(&joch, &within).await, [vec!["mid-1"]]);
    assert_eq!(
        pages(&joch, &format!("{within}&tool=other")).await,
        [Vec::<String>::new()]
    );
    // Any offset is one instant: +01:00 an hour later on the clock.
    let shifted = chrono::DateTime::parse_from_rfc3339(&end)
        .unwrap()
        .with_timezone(&chrono::FixedOffset::east_opt(3600).unwrap())
        .to_rfc3339();
    assert_eq!(
        pages(
            &joch,
            &format!("createdSince={}", shifted.replace('+', "%2B"))
        )
        .await,
        [vec!["new-2", "new-1"]]
    );
});

#[tokio::test]
async fn a_bad_time_bound_is_a_structured_400_naming_it() {
    let joch = Joch::builder().start().await;
    for (query, parameter) in [
        ("createdSince=yesterday", "createdSince"),
        ("createdBefore=2026-05-10", "createdBefore"),
        ("createdSince=2026-05-10T00:00:00Z&continue=12", "continue"),
    ] {
        let (status, body): (StatusCode, Value) = joch
            .get(&format!("/v1/namespaces/{NS}/toolcalls?{query}"))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["code"], "bad_request", "{body}");
        assert_eq!(body["details"]["parameter"], parameter, "{body}");
        assert!(
            body["message"].as_str().unwrap().contains(parameter),
            "{body}"
        );
    }
}
