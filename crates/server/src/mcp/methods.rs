//! The MCP methods the front serves: tools (`handler.rs`), and the
//! upstream servers' resources, prompts, completion and logging
//! (`surface.rs`).
//!
//! Every list and read answers with SEP-2549's caching hints: `cacheScope`
//! `private` (what a caller sees is decided for that caller), `ttlMs` the
//! upstream's (the shortest of those a list was made of), or 0.

// Logging is deprecated by SEP-2577 (protocol 2026-07-28) but is part of
// 2025-11-25, which the front serves.
#![allow(deprecated)]

use joch_core::mcp_surface::McpOperation;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, GetTaskParams, GetTaskResult, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities,
    ServerConfig, SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};

use super::convert::{call_result, is_mcp_tool, refused, tool_definition};
use super::handler::{JochMcp, Ran};
use super::surface::Asked;
use super::{deferred, rounds, tasks};

/// What joch says of itself in `initialize`: tools, and the upstream
/// servers' resources, prompts, completion and logging, each of whose
/// lists may change.
pub fn server_config() -> ServerConfig {
    let capabilities: ServerCapabilities = serde_json::from_value(json!({
        "tools": {"listChanged": true},
        "resources": {"subscribe": true, "listChanged": true},
        "prompts": {"listChanged": true},
        "completions": {},
        "logging": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }))
    .expect("the capabilities are valid");
    ServerConfig::new(capabilities)
        .with_server_info(Implementation::new("joch", env!("CARGO_PKG_VERSION")))
}

impl ServerHandler for JochMcp {
    fn get_info(&self) -> ServerConfig {
        server_config().with_instructions(
            "Every tool call is recorded by joch and decided on by the namespace's policies. \
             A refused call answers with isError and a JSON reason you can act on.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let namespace = self.namespace(&context.extensions)?;
        let by = self.principal(&context.extensions)?;
        let tools = self
            .all_tools(&by, &namespace)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let mut definitions: Vec<Value> = tools.iter().map(tool_definition).collect();
        let mut ttl = self.tools_ttl(&by, &namespace, &tools).await;
        // The forged artifact tools, while the session's execution has handles.
        if let Some(execution) = self.execution(&context.meta, &context.extensions) {
            let forged = self
                .engine
                .artifacts()
                .tool_definitions(&by, &namespace, &execution)
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            if !forged.is_empty() {
                ttl = 0;
            }
            definitions.extend(forged);
        }
        let tools = definitions
            .into_iter()
            .map(|definition| {
                serde_json::from_value(definition)
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))
            })
            .collect::<Result<Vec<rmcp::model::Tool>, _>>()?;
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(ttl)
            .with_cache_scope(CacheScope::Private))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let namespace = self.namespace(&context.extensions)?;
        let by = self.principal(&context.extensions)?;
        let tool = self
            .engine
            .resources()
            .cached_tool(&by, &namespace, request.name.as_ref())
            .await
            .ok();
        let tool_is_mcp = tool.as_deref().is_some_and(is_mcp_tool);
        if tasks::wanted(&context) && !deferred::is_retry(&request) {
            return self.start_task(&by, &namespace, &request, &context).await;
        }
        // Protocol 2026-07-28 has no session to wait on: a call deferred to
        // a person answers `input_required` and is resumed by a retry.
        let defer = deferred::stateless(&context);
        let round = request.request_state.as_deref().and_then(rounds::parse);
        let ran = if let (true, Some(round)) = (defer, round) {
            // The client answers its call's upstream (`rounds.rs`).
            match self
                .answer_round(&by, &namespace, round, (&request).into(), &context)
                .await?
            {
                Ok(settled) => Ok(Ran::Settled(Box::new(settled))),
                Err(asked) => return Ok(asked.into()),
            }
        } else if defer && deferred::is_retry(&request) {
            match self
                .resume(
                    &by,
                    &namespace,
                    (&request).into(),
                    tool.as_deref(),
                    &context,
                )
                .await?
            {
                Ok(settled) => Ok(Ran::Settled(Box::new(settled))),
                Err(waiting) => return Ok(waiting.into()),
            }
        } else {
            let (call, _name) = self.call_for(&request, &context);
            self.run_call(&by, &namespace, call, tool.as_deref(), &context, defer)
                .await
        };
        let result = match ran {
            Ok(Ran::Settled(settled)) => {
                if let (true, Some(round)) = (defer, rounds::asked(&settled)) {
                    return Ok(rounds::input_required(&settled, round).into());
                }
                if let (true, Some(refused)) = (defer, rounds::refusal(&settled)) {
                    return Err(refused);
                }
                // A new handle widens the artifact tools' callId enum.
                if settled.handle().is_some() && !settled.spec.from_artifact_tool {
                    let _ = context.peer.notify_tool_list_changed().await;
                }
                call_result(&settled, tool_is_mcp)
            }
            Ok(Ran::Deferred(approval)) => {
                return Ok(self
                    .input_required(
                        &approval,
                        tool.as_deref(),
                        &context,
                        joch_core::RunsOn::Retry,
                    )
                    .into());
            }
            Err(e) => {
                let e = crate::ApiError::from(e);
                refused(e.code.as_str(), &e.message)
            }
        };
        let result: CallToolResult = serde_json::from_value(result)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(result.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        tasks_declared(&context)?;
        self.get_task_of(request, &context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tasks_declared(&context)?;
        self.update_task_of(request, &context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tasks_declared(&context)?;
        self.cancel_task_of(request, &context).await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let (Ok(namespace), Ok(by)) = (
            self.namespace(&context.extensions),
            self.principal(&context.extensions),
        ) {
            self.serve_directly(&context.extensions, &context.peer);
            self.restore(&context.extensions).await;
            self.watch_tools(by, namespace.clone(), context.peer.clone());
            self.relay_notices(namespace, context.peer.clone());
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let (resources, ttl) = self
            .list_all("resources/list", "resources", "uri", &context.extensions)
            .await?;
        Ok(ListResourcesResult::with_all_items(resources)
            .with_ttl_ms(ttl)
            .with_cache_scope(CacheScope::Private))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let (templates, ttl) = self
            .list_all(
                "resources/templates/list",
                "resourceTemplates",
                "uriTemplate",
                &context.extensions,
            )
            .await?;
        Ok(ListResourceTemplatesResult::with_all_items(templates)
            .with_ttl_ms(ttl)
            .with_cache_scope(CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let asked = Asked {
            operation: McpOperation::ReadResource,
            exposed: &request.uri,
            arguments: None,
            state: request.request_state.as_deref(),
            responses: request.input_responses.as_ref(),
        };
        match self.read_or_get(asked, &context).await? {
            Ok(result) => {
                let mut read: ReadResourceResult =
                    serde_json::from_value(result).map_err(internal)?;
                // The upstream's freshness, for this caller only (SEP-2549).
                read.ttl_ms = Some(read.ttl_ms.unwrap_or(0));
                read.cache_scope = Some(CacheScope::Private);
                Ok(read.into())
            }
            Err(waiting) => Ok(ReadResourceResponse::InputRequired(waiting)),
        }
    }

    /// 2026-07-28: what a session is told, on a `subscriptions/listen`
    /// stream (`listen.rs`).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(super::listen::accepted(requested))
    }

    async fn listen(&self, subscription: SubscriptionContext) -> Result<(), ErrorData> {
        self.listen_for(subscription).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscription(request.uri, true, &context.extensions)
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscription(request.uri, false, &context.extensions)
            .await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let (prompts, ttl) = self
            .list_all("prompts/list", "prompts", "name", &context.extensions)
            .await?;
        Ok(ListPromptsResult::with_all_items(prompts)
            .with_ttl_ms(ttl)
            .with_cache_scope(CacheScope::Private))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let asked = Asked {
            operation: McpOperation::GetPrompt,
            exposed: &request.name,
            arguments: request.arguments.clone().map(Value::Object),
            state: request.request_state.as_deref(),
            responses: request.input_responses.as_ref(),
        };
        match self.read_or_get(asked, &context).await? {
            Ok(result) => Ok(serde_json::from_value::<GetPromptResult>(result)
                .map_err(internal)?
                .into()),
            Err(waiting) => Ok(GetPromptResponse::InputRequired(waiting)),
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let params = serde_json::to_value(&request).map_err(internal)?;
        let pointer = match params.pointer("/ref/type").and_then(Value::as_str) {
            Some("ref/resource") => "/ref/uri",
            _ => "/ref/name",
        };
        let result = self
            .pass_on("completion/complete", params, pointer, &context.extensions)
            .await?;
        serde_json::from_value(result).map_err(internal)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let level = serde_json::to_value(request.level).map_err(internal)?;
        let level = level.as_str().unwrap_or("info").to_owned();
        self.set_log_level(level, &context.extensions).await
    }
}

/// SEP-2575, SEP-2663: the tasks methods serve a client that declared the
/// tasks extension; another is told what it lacks (`-32021`, with
/// `data.requiredCapabilities`).
fn tasks_declared(context: &RequestContext<RoleServer>) -> Result<(), ErrorData> {
    if tasks::wanted(context) {
        return Ok(());
    }
    let required = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let required = serde_json::from_value(required).map_err(internal)?;
    Err(ErrorData::missing_required_client_capability(required))
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(e.to_string(), None)
}

impl JochMcp {
    /// `tools/list`'s `ttlMs`: what is left of the shortest freshness of
    /// the upstream listings its tools come from (`McpServer.status`'s
    /// `toolsTtlMs` from its `lastRefreshAt`). joch's own tools, and an
    /// upstream's that gave no `ttlMs`, count as 0: a change to them is
    /// told (`tools/list_changed`), so they are never assumed fresh.
    async fn tools_ttl(
        &self,
        by: &joch_engine::Principal,
        namespace: &str,
        tools: &[joch_core::Tool],
    ) -> u64 {
        use joch_core::mcp::SERVER_LABEL;
        if tools.is_empty() || !tools.iter().all(is_mcp_tool) {
            return 0;
        }
        let Ok(servers) = self.engine.mcp().servers(by, namespace).await else {
            return 0;
        };
        let now = joch_core::Time(chrono::Utc::now());
        let ttl_of = |tool: &joch_core::Tool| {
            let server = tool.metadata.labels.get(SERVER_LABEL)?;
            let server = servers.iter().find(|s| &s.metadata.name == server)?;
            let since = server.status.last_refresh_at?.millis_until(now);
            Some(server.status.tools_ttl_ms?.saturating_sub(since))
        };
        tools
            .iter()
            .map(|tool| ttl_of(tool).unwrap_or(0))
            .min()
            .unwrap_or(0)
    }
}
