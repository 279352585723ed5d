//! `subscriptions/listen` on joch's front, with rmcp's client in
//! `server/discover` mode (2026-07-28, no session): the stream is
//! acknowledged with what joch declares, and a Tool written while it is
//! open reaches it as `notifications/tools/list_changed` (at 2026-07-28
//! list changes travel only there). A client that did not declare the
//! tasks extension is told so (`-32021`) by the tasks methods. Lists carry
//! SEP-2549's caching hints (`tools/list`'s the shortest of its upstreams').
//! An upstream's resource update and prompt list change reach a listener
//! that asked for them.

use std::time::Duration;

use rmcp::model::{
    ErrorCode, GetTaskParams, ProtocolVersion, ServerNotification, SubscriptionFilter,
};
use rmcp::service::ServiceError;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientLifecycleMode, ClientServiceExt};

use crate::harness::{Joch, NS, rest_tool};
use crate::mcp::{apply, server};
use crate::mcp_listen::Feed;
use crate::mcp_surface::peers::serve;

/// A client of 2026-07-28 (no session) of `joch`'s front.
async fn stateless(joch: &Joch) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let url = format!("{}/v1/namespaces/{NS}/mcp", joch.base);
    let discover = ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    ().serve_with_lifecycle(StreamableHttpClientTransport::from_uri(url), discover)
        .await
        .expect("server/discover")
}

#[tokio::test]
async fn a_listener_hears_an_upstreams_resource_update_and_prompt_list_change() {
    let feed = Feed::default();
    let joch = Joch::start().await;
    let url = serve(feed.clone()).await;
    apply(&joch, server("docs", &url, serde_json::json!({}))).await;
    let client = stateless(&joch).await;
    let filter = SubscriptionFilter::builder()
        .prompts_list_changed()
        .resource_subscription("docs.note://a")
        .build();
    let mut stream = client.peer().listen(filter).await.expect("acknowledged");
    // joch's own stream upstream, then one asking for note://a too.
    feed.wait_for_listens(2).await;
    let touch = rmcp::model::CallToolRequestParams::new("docs.touch");
    client.call_tool(touch).await.unwrap();
    let (mut updated, mut prompts) = (false, false);
    while !(updated && prompts) {
        let heard = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("told within 10 s")
            .expect("the stream is open")
            .expect("a notification");
        match heard {
            ServerNotification::ResourceUpdatedNotification(n) => {
                assert_eq!(n.params.uri, "docs.note://a");
                updated = true;
            }
            ServerNotification::PromptListChangedNotification(_) => prompts = true,
            other => panic!("not asked for: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_listener_hears_that_the_tool_list_changed() {
    let joch = Joch::start().await;
    let client = stateless(&joch).await;
    let filter = SubscriptionFilter::builder()
        .tools_list_changed()
        .prompts_list_changed()
        .build();
    // SEP-2549: for this caller only, and never assumed fresh (a change
    // is told on the stream).
    for listed in [
        serde_json::to_value(client.list_tools(None).await.unwrap()).unwrap(),
        serde_json::to_value(client.list_prompts(None).await.unwrap()).unwrap(),
    ] {
        assert_eq!(listed["ttlMs"], 0, "{listed}");
        assert_eq!(listed["cacheScope"], "private", "{listed}");
    }
    let mut stream = client.peer().listen(filter).await.expect("acknowledged");
    assert_eq!(stream.acknowledged().tools_list_changed, Some(true));
    assert_eq!(stream.acknowledged().prompts_list_changed, Some(true));

    // The acknowledgement may reach the client before joch watches the
    // catalog for this listener: a change made in between is in the list
    // the stream starts from. Changes keep coming until one is told.
    let mut heard = None;
    for n in 0..10 {
        joch.create_tool(rest_tool(
            &format!("late.tool{n}"),
            "http://127.0.0.1:9/unused",
            serde_json::json!({"level": "read_only"}),
        ))
        .await;
        if let Ok(told) = tokio::time::timeout(Duration::from_secs(2), stream.next()).await {
            heard = Some(told.expect("the stream is open").expect("a notification"));
            break;
        }
    }
    let heard = heard.expect("a tool list change told within 10 changes");
    assert!(
        matches!(heard, ServerNotification::ToolListChangedNotification(_)),
        "{heard:?}"
    );
}

#[tokio::test]
async fn tasks_methods_name_the_extension_a_client_did_not_declare() {
    let joch = Joch::start().await;
    let client = stateless(&joch).await;
    let refused = client
        .get_task(GetTaskParams::new("any"))
        .await
        .unwrap_err();
    let ServiceError::McpError(e) = refused else {
        panic!("not an MCP error: {refused:?}")
    };
    assert_eq!(
        e.code,
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        "{e:?}"
    );
    let required = &e.data.as_ref().unwrap()["requiredCapabilities"];
    assert!(
        required["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{e:?}"
    );
}

/// An upstream whose tool list may be cached for `ttl` ms (SEP-2549).
#[derive(Clone)]
struct Cached {
    ttl: u64,
}

impl rmcp::ServerHandler for Cached {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _: Option<rmcp::model::PaginatedRequestParams>,
        _: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let tool = serde_json::from_value(crate::mcp::tool("look", None)).unwrap();
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![tool]).with_ttl_ms(self.ttl))
    }
}

#[tokio::test]
async fn tools_list_relays_the_shortest_upstream_ttl() {
    let joch = Joch::start().await;
    let slow = serve(Cached { ttl: 60_000 }).await;
    let fast = serve(Cached { ttl: 45_000 }).await;
    apply(&joch, server("slow", &slow, serde_json::json!({}))).await;
    apply(&joch, server("fast", &fast, serde_json::json!({}))).await;
    let client = stateless(&joch).await;
    let listed = serde_json::to_value(client.list_tools(None).await.unwrap()).unwrap();
    assert_eq!(
        listed["tools"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    // What is left of the shorter freshness, from when joch listed.
    let ttl = listed["ttlMs"].as_u64().unwrap();
    assert!((30_000..=45_000).contains(&ttl), "{listed}");
    assert_eq!(listed["cacheScope"], "private", "{listed}");
    // A tool of joch's own is never assumed fresh: the list is not either.
    joch.create_tool(rest_tool(
        "own.tool",
        "http://127.0.0.1:9/unused",
        serde_json::json!({"level": "read_only"}),
    ))
    .await;
    // Another client: this one may keep the first list for its 45 s.
    let client = stateless(&joch).await;
    let listed = serde_json::to_value(client.list_tools(None).await.unwrap()).unwrap();
    assert_eq!(
        listed["tools"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );
    assert_eq!(listed["ttlMs"], 0, "{listed}");
}
