//! `GET /openapi.json`: the REST API as an OpenAPI 3.1 document.
//!
//! Query parameters and request bodies come from the very structs the
//! handlers deserialize (`IntoParams` / `ToSchema` derives), so the document
//! cannot promise a parameter a handler does not read. Resources are
//! described by their envelope (`apiVersion`, `kind`, `metadata`, `spec`,
//! `status`); their specs are documented in docs/resources.md. Every operation's
//! `default` response is the structured error every failure answers with.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::path::HttpMethod;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, PathItem,
    PathsBuilder, ResponseBuilder,
};

mod build;

use super::approvals::DecisionBody;
use super::audit::Page as AuditPage;
use super::costs::CostParams;
use super::executions::{BatchBody, BatchParams, EventParams};
use super::mcpservers::AcceptRequest;
use super::resources::DeleteParams;
use super::tokens::NewToken;
use super::toolcalls::{CreateParams, ResolveBody};
use crate::hooks::claude::{HookBody, HookParams};
use build::{
    WithOperation, any_object, any_value, array_of, body, bytes, error_schema, get, get_item,
    get_list, json_content, list, list_params, list_schema, ok, operation, params, post_item,
    replay_schema, resource, resource_schema, schema_of, with_path,
};

/// The document, rendered once.
static DOCUMENT: LazyLock<String> =
    LazyLock::new(|| serde_json::to_string(&document()).unwrap_or_else(|_| "{}".to_owned()));

pub(crate) async fn serve() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
}

/// The kinds served by the generic resource handlers, by URL plural, and
/// whether they take create/replace/delete.
const RESOURCES: &[(&str, &str, bool)] = &[
    ("tools", "Tool", true),
    ("policies", "Policy", true),
    ("executions", "Execution", true),
    ("endpoints", "Endpoint", true),
    ("budgets", "Budget", true),
    ("mcpservers", "McpServer", true),
    ("standingapprovals", "StandingApproval", false),
];

/// Builds the whole document.
pub(crate) fn document() -> OpenApi {
    let parts = [
        basics,
        resources,
        calls,
        executions,
        approvals,
        configuration,
        administration,
        hooks,
    ];
    let paths = parts
        .into_iter()
        .fold(PathsBuilder::new(), |paths, add| add(paths));
    let components = ComponentsBuilder::new()
        .schema("Error", error_schema())
        .schema("Resource", resource_schema())
        .schema("ResourceList", list_schema())
        .security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        )
        .build();
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("joch")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "A tool-call gateway and durable ledger for AI agents. Without tokens \
                     configured joch serves loopback only and needs no authentication.",
                ))
                .build(),
        )
        .paths(paths.build())
        .components(Some(components))
        .security(Some(vec![
            SecurityRequirement::default(),
            SecurityRequirement::new("bearer", Vec::<String>::new()),
        ]))
        .build()
}

/// Health, the document itself and namespaces.
fn basics(paths: PathsBuilder) -> PathsBuilder {
    paths
        .path("/healthz", get("Liveness", "health", ok(any_object())))
        .path(
            "/readyz",
            get("Readiness: the store answers", "health", ok(any_object())),
        )
        .path(
            "/v1/namespaces/{ns}",
            PathItem::new(
                HttpMethod::Get,
                with_path(operation("A namespace's settings", "namespaces"), &["ns"])
                    .response("200", ok(resource())),
            )
            .operation(HttpMethod::Put, {
                let op = operation("Create or replace a namespace's settings", "namespaces")
                    .request_body(Some(body(resource())));
                with_path(op, &["ns"]).response("200", ok(resource()))
            }),
        )
}

/// The resources clients configure: list, read, create, replace, delete.
fn resources(mut paths: PathsBuilder) -> PathsBuilder {
    for &(plural, kind, writable) in RESOURCES {
        let collection = format!("/v1/namespaces/{{ns}}/{plural}");
        let item = format!("{collection}/{{name}}");
        let mut list = with_path(operation(&format!("List {kind}s"), plural), &["ns"])
            .response("200", ok(list()));
        list = list_params(list);
        let mut collection_item = PathItem::new(HttpMethod::Get, list);
        let mut item_ops = PathItem::new(
            HttpMethod::Get,
            with_path(
                operation(&format!("Read a {kind}"), plural),
                &["ns", "name"],
            )
            .response("200", ok(resource())),
        );
        let delete = with_path(
            operation(&format!("Delete a {kind}"), plural),
            &["ns", "name"],
        );
        let delete = params::<DeleteParams>(delete).response("200", ok(resource()));
        if writable {
            collection_item = collection_item.operation(
                HttpMethod::Post,
                with_path(operation(&format!("Create a {kind}"), plural), &["ns"])
                    .request_body(Some(body(resource())))
                    .response("201", ok(resource())),
            );
            item_ops = item_ops.operation(
                HttpMethod::Put,
                with_path(
                    operation(&format!("Replace a {kind}"), plural),
                    &["ns", "name"],
                )
                .request_body(Some(body(resource())))
                .response("200", ok(resource())),
            );
        }
        item_ops = item_ops.operation(HttpMethod::Delete, delete);
        paths = paths.path(collection, collection_item).path(item, item_ops);
    }
    paths
}

/// Tool calls: make, read, cancel, replay, resolve.
fn calls(paths: PathsBuilder) -> PathsBuilder {
    paths
        .path(
            "/v1/namespaces/{ns}/toolcalls",
            get_list("List ToolCalls", "toolcalls").operation(
                HttpMethod::Post,
                params::<CreateParams>(with_path(
                    operation(
                        "Run a tool call: 201 settled, 202 recorded (wait=false), \
                         200 an idempotent repeat, 429 rate limited",
                        "toolcalls",
                    ),
                    &["ns"],
                ))
                .request_body(Some(body(resource())))
                .response("200", ok(resource()))
                .response("201", ok(resource()))
                .response("202", ok(resource()))
                .response("429", ok(resource())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/toolcalls/{name}",
            get_item("Read a ToolCall", "toolcalls").operation(
                HttpMethod::Put,
                with_path(
                    operation("Change a ToolCall's labels", "toolcalls"),
                    &["ns", "name"],
                )
                .request_body(Some(body(resource())))
                .response("200", ok(resource())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/toolcalls/{name}/replay",
            post_item(
                "Replay a settled call as a new one",
                "toolcalls",
                replay_schema(),
                &["201", "200"],
            ),
        )
        .path(
            "/v1/namespaces/{ns}/toolcalls/{name}/cancel",
            PathItem::new(
                HttpMethod::Post,
                with_path(
                    operation(
                        "Cancel a call, on whichever replica runs it; answers it as it stands",
                        "toolcalls",
                    ),
                    &["ns", "name"],
                )
                .response("200", ok(resource())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/toolcalls/{name}/resolve",
            post_item(
                "Settle an Unknown call by hand",
                "toolcalls",
                schema_of::<ResolveBody>(),
                &["200"],
            ),
        )
}

/// Executions' batches, events and artifacts, and call contexts.
fn executions(paths: PathsBuilder) -> PathsBuilder {
    paths
        .path(
            "/v1/namespaces/{ns}/executions/{name}/batches",
            PathItem::new(
                HttpMethod::Post,
                params::<BatchParams>(with_path(
                    operation("Run a batch of calls of one execution", "executions"),
                    &["ns", "name"],
                ))
                .request_body(Some(body(schema_of::<BatchBody>())))
                .response("200", ok(any_object()))
                .response("201", ok(any_object()))
                .response("202", ok(any_object())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/executions/{name}/events",
            PathItem::new(
                HttpMethod::Get,
                params::<EventParams>(with_path(
                    operation(
                        "An execution's timeline; `follow=true` streams it as Server-Sent Events",
                        "executions",
                    ),
                    &["ns", "name"],
                ))
                .response(
                    "200",
                    ResponseBuilder::new()
                        .description("The events")
                        .content("application/json", json_content(any_value()))
                        .content("text/event-stream", ContentBuilder::new().build())
                        .build(),
                ),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/executions/{name}/artifacttools",
            PathItem::new(
                HttpMethod::Get,
                with_path(
                    operation(
                        "The artifact tools an execution offers, callId an enum of its handles",
                        "artifacts",
                    ),
                    &["ns", "name"],
                )
                // `{tools: [{name, description, inputSchema}]}`
                .response("200", ok(any_object())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/executions/{name}/artifacttools/{tool}",
            PathItem::new(
                HttpMethod::Post,
                with_path(
                    operation("Call an artifact tool over a handle of the execution", "artifacts"),
                    &["ns", "name", "tool"],
                )
                .request_body(Some(body(any_object())))
                .response("201", ok(resource())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/artifacts/{name}",
            get_item("An artifact's metadata", "artifacts"),
        )
        .path(
            "/v1/namespaces/{ns}/artifacts/{name}/content",
            PathItem::new(
                HttpMethod::Get,
                with_path(
                    operation("An artifact's bytes; `Range: bytes=a-b` answers 206, an unsatisfiable range 416", "artifacts"),
                    &["ns", "name"],
                )
                .response("200", bytes("The content, in its media type"))
                .response("206", bytes("The requested range")),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/executions/{name}/complete",
            post_item(
                "Mark an execution complete",
                "executions",
                any_object(),
                &["200"],
            ),
        )
        .path(
            "/v1/namespaces/{ns}/callcontexts/{name}",
            get_item("Read a call context", "contexts"),
        )
}

/// Approvals, and the decisions on them.
fn approvals(mut paths: PathsBuilder) -> PathsBuilder {
    paths = paths
        .path(
            "/v1/namespaces/{ns}/approvals",
            get_list("List Approvals", "approvals"),
        )
        .path(
            "/v1/namespaces/{ns}/approvals/{name}",
            get_item("Read an Approval", "approvals"),
        );
    for (verb, summary) in [
        ("approve", "Approve a paused call"),
        ("deny", "Deny a paused call"),
        ("edit", "Approve a paused call with edited arguments"),
    ] {
        paths = paths.path(
            format!("/v1/namespaces/{{ns}}/approvals/{{name}}/{verb}"),
            post_item(summary, "approvals", schema_of::<DecisionBody>(), &["200"]),
        );
    }
    paths
}

/// What acts on configured resources beyond their CRUD.
fn configuration(paths: PathsBuilder) -> PathsBuilder {
    paths
        .path(
            "/v1/namespaces/{ns}/policies/test",
            PathItem::new(
                HttpMethod::Post,
                with_path(
                    operation(
                        "Back-test a candidate policy on the recorded calls \
                         (application/x-ndjson: progress lines, then the report)",
                        "policies",
                    ),
                    &["ns"],
                )
                .request_body(Some(body(any_object())))
                .response("200", ok(any_object())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/mcpservers/{name}/accept",
            post_item(
                "Accept changed upstream tool definitions",
                "mcpservers",
                schema_of::<AcceptRequest>(),
                &["200"],
            ),
        )
        .path(
            "/v1/namespaces/{ns}/mcpservers/{name}/refresh",
            post_item(
                "List the upstream server's tools again",
                "mcpservers",
                any_object(),
                &["200"],
            ),
        )
}

/// Tokens, upstream credentials, the audit and costs.
fn administration(paths: PathsBuilder) -> PathsBuilder {
    paths
        .path(
            "/v1/namespaces/{ns}/tokens",
            PathItem::new(
                HttpMethod::Get,
                with_path(operation("List API tokens", "tokens"), &["ns"])
                    .response("200", ok(any_object())),
            )
            .operation(
                HttpMethod::Post,
                with_path(
                    operation("Create an API token; its secret is shown once", "tokens"),
                    &["ns"],
                )
                .request_body(Some(body(schema_of::<NewToken>())))
                .response("201", ok(any_object())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/tokens/{name}",
            PathItem::new(
                HttpMethod::Delete,
                with_path(operation("Revoke an API token", "tokens"), &["ns", "name"])
                    .response("200", ok(any_object())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/credentials",
            PathItem::new(
                HttpMethod::Get,
                with_path(
                    operation("List the token vault's upstream credentials", "credentials"),
                    &["ns"],
                )
                .response("200", ok(any_object())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/credentials/{name}",
            PathItem::new(
                HttpMethod::Delete,
                with_path(
                    operation("Revoke an upstream credential", "credentials"),
                    &["ns", "name"],
                )
                .response("200", ok(any_object())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/audit",
            PathItem::new(
                HttpMethod::Get,
                params::<AuditPage>(with_path(
                    operation("The namespace's audit chain", "audit"),
                    &["ns"],
                ))
                .response("200", ok(array_of(any_object()))),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/audit/verify",
            PathItem::new(
                HttpMethod::Get,
                with_path(operation("Recompute the audit chain", "audit"), &["ns"])
                    .response("200", ok(any_object())),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/audit/checkpoints",
            PathItem::new(
                HttpMethod::Get,
                with_path(
                    operation("The namespace's signed audit checkpoints", "audit"),
                    &["ns"],
                )
                .response("200", ok(array_of(any_object()))),
            ),
        )
        .path(
            "/v1/namespaces/{ns}/costs",
            PathItem::new(
                HttpMethod::Get,
                params::<CostParams>(with_path(
                    operation("Spend in a namespace", "costs"),
                    &["ns"],
                ))
                .response("200", ok(any_object())),
            ),
        )
        .path(
            "/v1/costs",
            PathItem::new(
                HttpMethod::Get,
                params::<CostParams>(operation("Spend across namespaces", "costs"))
                    .response("200", ok(any_object())),
            ),
        )
}

/// Hook mode, in the default namespace and in a named one.
fn hooks(mut paths: PathsBuilder) -> PathsBuilder {
    for (prefix, ns) in [("/v1", &[][..]), ("/v1/namespaces/{ns}", &["ns"][..])] {
        paths = paths
            .path(
                format!("{prefix}/hooks/aos"),
                PathItem::new(
                    HttpMethod::Post,
                    with_path(
                        operation(
                            "AOS guardian hook (JSON-RPC 2.0: steps/toolCallRequest, \
                             steps/toolCallResult)",
                            "hooks",
                        ),
                        ns,
                    )
                    // A JSON-RPC request, or a batch of them (answered by an array).
                    .request_body(Some(body(any_value())))
                    .response("200", ok(any_value())),
                ),
            )
            .path(
                format!("{prefix}/hooks/claude"),
                PathItem::new(
                    HttpMethod::Post,
                    params::<HookParams>(with_path(
                        operation(
                            "Claude Code / Claude Agent SDK HTTP hook \
                             (PreToolUse, PostToolUse, PostToolUseFailure)",
                            "hooks",
                        ),
                        ns,
                    ))
                    .request_body(Some(body(schema_of::<HookBody>())))
                    .response("200", ok(any_object())),
                ),
            );
    }
    paths
}
