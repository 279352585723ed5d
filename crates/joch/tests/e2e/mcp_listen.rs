//! What an upstream of protocol 2026-07-28 (the official Rust SDK) says
//! outside a request, on the `subscriptions/listen` stream joch keeps open
//! (the default `protocol: auto`), reaches joch's sessions as a legacy
//! session's notifications do: a resource update the subscribed session,
//! a prompt list change every session, a tool list change joch (which
//! re-lists the tools). A stream the server ends is opened again, a
//! bounded number of times.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListPromptsResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    SubscriptionFilter,
};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext, SubscriptionSink};
use rmcp::{ErrorData, ServerHandler};
use serde_json::json;

use crate::harness::{Joch, NS};
use crate::mcp::{apply, server};
use crate::mcp_surface::peers::{User, answer, connect, serve};

/// A server of 2026-07-28 (only) whose `touch` changes `note://a`, the
/// prompts and the tools (`late` appears) and says so on every listen
/// stream; `end` ends every stream (the server's graceful teardown). With
/// `short`, every stream ends at once.
#[derive(Clone, Default)]
pub(crate) struct Feed {
    sinks: Arc<Mutex<Vec<SubscriptionSink>>>,
    /// How many streams were opened.
    listens: Arc<AtomicUsize>,
    end: Arc<tokio::sync::Notify>,
    late: Arc<AtomicBool>,
    short: bool,
}

impl Feed {
    fn listens(&self) -> usize {
        self.listens.load(Ordering::SeqCst)
    }

    pub(crate) async fn wait_for_listens(&self, at_least: usize) {
        for _ in 0..250 {
            if self.listens() >= at_least {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("joch opened {} streams, not {at_least}", self.listens());
    }
}

impl ServerHandler for Feed {
    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities = serde_json::from_value(json!({
            "tools": {"listChanged": true}, "prompts": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true}}))
        .unwrap();
        ServerConfig::new(capabilities)
    }

    fn supported_protocol_versions(
        &self,
    ) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        std::borrow::Cow::Owned(vec![rmcp::model::ProtocolVersion::V_2026_07_28])
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.listens.fetch_add(1, Ordering::SeqCst);
        if self.short {
            return Ok(());
        }
        self.sinks.lock().unwrap().push(context.sink().clone());
        tokio::select! {
            () = context.cancelled() => {}
            () = self.end.notified() => {}
        }
        Ok(())
    }

    async fn list_resources(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = json!([{"uri": "note://a", "name": "a"}]);
        Ok(ListResourcesResult::with_all_items(
            serde_json::from_value(resources).unwrap(),
        ))
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompt = serde_json::from_value(json!({"name": "greet"})).unwrap();
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let late = self.late.load(Ordering::SeqCst);
        let names = ["touch", "end", "late"];
        let tools = names[..names.len() - usize::from(!late)]
            .iter()
            .map(|name| {
                serde_json::from_value(json!({"name": name, "inputSchema": {"type": "object"},
                                          "annotations": {"readOnlyHint": true}}))
                .unwrap()
            });
        Ok(ListToolsResult::with_all_items(tools.collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "end" {
            self.sinks.lock().unwrap().clear();
            self.end.notify_waiters();
            return Ok(CallToolResult::success(vec![ContentBlock::text("ended")]).into());
        }
        self.late.store(true, Ordering::SeqCst);
        let sinks = self.sinks.lock().unwrap().clone();
        for sink in sinks {
            // A stream that did not ask for the URI refuses it.
            let _ = sink.notify_resource_updated("note://a").await;
            let _ = sink.notify_prompt_list_changed().await;
            let _ = sink.notify_tool_list_changed().await;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text("touched")]).into())
    }
}

async fn tool_listed(joch: &Joch, name: &str) -> bool {
    for _ in 0..100 {
        let (status, _) = joch.get(&format!("/v1/namespaces/{NS}/tools/{name}")).await;
        if status == StatusCode::OK {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

// `resources/subscribe` is the 2025-11-25 way, which the front serves.
#[allow(deprecated)]
#[tokio::test]
async fn an_upstream_of_2026_07_28_tells_joch_sessions_what_changed_through_its_listen_stream() {
    let feed = Feed::default();
    let joch = Joch::start().await;
    // No `protocol`: `auto` is the default.
    apply(&joch, server("docs", &serve(feed.clone()).await, json!({}))).await;
    let subscriber = User::default();
    let client = connect(&joch, subscriber.clone()).await;
    client
        .subscribe(rmcp::model::SubscribeRequestParams::new("docs.note://a"))
        .await
        .unwrap();
    let bystander = User::default();
    let other = connect(&joch, bystander.clone()).await;
    feed.wait_for_listens(1).await;

    assert_eq!(answer(&other, "docs.touch").await, "touched");
    assert!(
        subscriber.heard("updated docs.note://a").await,
        "{:?}",
        subscriber.asked
    );
    assert!(
        subscriber.heard("prompts changed").await,
        "{:?}",
        subscriber.asked
    );
    assert!(
        bystander.heard("prompts changed").await,
        "{:?}",
        bystander.asked
    );
    let updates = |user: &User| {
        let asked = user.asked.lock().unwrap();
        asked.iter().filter(|a| a.starts_with("updated")).count()
    };
    assert_eq!(updates(&bystander), 0, "{:?}", bystander.asked);
    assert_eq!(
        updates(&subscriber),
        1,
        "one stream at a time: {:?}",
        subscriber.asked
    );
    // The server said its tools changed: joch re-listed them.
    assert!(
        tool_listed(&joch, "docs.late").await,
        "the new tool was not adopted"
    );

    // The server ends its streams: joch opens one again, still asking
    // for the subscribed URI.
    let before = feed.listens();
    assert_eq!(answer(&other, "docs.end").await, "ended");
    feed.wait_for_listens(before + 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(answer(&other, "docs.touch").await, "touched");
    assert!(
        heard_times(&subscriber, "updated docs.note://a", 2).await,
        "{:?}",
        subscriber.asked
    );

    // Unsubscribed, the session hears the list changes and no update.
    client
        .unsubscribe(rmcp::model::UnsubscribeRequestParams::new("docs.note://a"))
        .await
        .unwrap();
    assert_eq!(answer(&other, "docs.touch").await, "touched");
    assert!(
        heard_times(&subscriber, "prompts changed", 3).await,
        "{:?}",
        subscriber.asked
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(updates(&subscriber), 2, "{:?}", subscriber.asked);
}

/// Waits until `user` heard `what` `times` times (true), or 2 s.
async fn heard_times(user: &User, what: &str, times: usize) -> bool {
    for _ in 0..100 {
        let heard = user
            .asked
            .lock()
            .unwrap()
            .iter()
            .filter(|a| *a == what)
            .count();
        if heard == times {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn a_stream_that_keeps_ending_is_opened_again_a_bounded_number_of_times() {
    let feed = Feed {
        short: true,
        ..Feed::default()
    };
    let joch = Joch::start().await;
    apply(&joch, server("docs", &serve(feed.clone()).await, json!({}))).await;
    // 1 + 5 retries, paused 0.1 + 0.2 + 0.4 + 0.8 + 1.6 s.
    feed.wait_for_listens(6).await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(feed.listens(), 6, "joch did not stop opening streams");
}
