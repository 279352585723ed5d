//! The small builders `document()` is written with: operations, their
//! parameters and responses, and the shared schemas.

use utoipa::openapi::path::{HttpMethod, Operation, OperationBuilder, Parameter, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type,
};
use utoipa::openapi::{ContentBuilder, PathItem, Ref, RefOr, Required, ResponseBuilder};
use utoipa::{IntoParams, ToSchema};

use crate::api::ListQueryParams;

pub(super) fn operation(summary: &str, tag: &str) -> OperationBuilder {
    let id: String = summary
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(6)
        .collect::<Vec<_>>()
        .join("_")
        .to_lowercase();
    OperationBuilder::new()
        .summary(Some(summary))
        .operation_id(Some(format!("{tag}_{id}")))
        .tag(tag)
        .response(
            "default",
            ResponseBuilder::new()
                .description("Any failure: a structured error")
                .content("application/json", json_content(reference("Error")))
                .build(),
        )
}

pub(super) fn with_path(op: OperationBuilder, names: &[&str]) -> OperationBuilder {
    names
        .iter()
        .fold(op, |op, name| op.parameter(path_param(name)))
}

pub(super) fn path_param(name: &str) -> Parameter {
    Parameter::builder()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

/// Adds the query parameters a handler's `Query<T>` reads.
pub(super) fn params<T: IntoParams>(op: OperationBuilder) -> OperationBuilder {
    T::into_params(|| Some(ParameterIn::Query))
        .into_iter()
        .fold(op, |op, p| op.parameter(p))
}

pub(super) fn list_params(op: OperationBuilder) -> OperationBuilder {
    params::<ListQueryParams>(op)
}

pub(super) fn get(summary: &str, tag: &str, response: utoipa::openapi::Response) -> PathItem {
    PathItem::new(
        HttpMethod::Get,
        operation(summary, tag).response("200", response),
    )
}

/// Several methods on one path: `PathItem` itself only merges.
pub(super) trait WithOperation {
    fn operation<O: Into<Operation>>(self, method: HttpMethod, operation: O) -> Self;
}

impl WithOperation for PathItem {
    fn operation<O: Into<Operation>>(mut self, method: HttpMethod, operation: O) -> Self {
        self.merge_operations(PathItem::new(method, operation));
        self
    }
}

pub(super) fn get_list(summary: &str, tag: &str) -> PathItem {
    PathItem::new(
        HttpMethod::Get,
        list_params(with_path(operation(summary, tag), &["ns"])).response("200", ok(list())),
    )
}

pub(super) fn get_item(summary: &str, tag: &str) -> PathItem {
    PathItem::new(
        HttpMethod::Get,
        with_path(operation(summary, tag), &["ns", "name"]).response("200", ok(resource())),
    )
}

pub(super) fn post_item(
    summary: &str,
    tag: &str,
    request: RefOr<Schema>,
    statuses: &[&str],
) -> PathItem {
    let op = with_path(operation(summary, tag), &["ns", "name"]).request_body(Some(body(request)));
    let op: Operation = statuses
        .iter()
        .fold(op, |op, status| op.response(*status, ok(any_object())))
        .build();
    PathItem::new(HttpMethod::Post, op)
}

pub(super) fn body(schema: RefOr<Schema>) -> utoipa::openapi::request_body::RequestBody {
    RequestBodyBuilder::new()
        .content("application/json", json_content(schema))
        .build()
}

pub(super) fn ok(schema: RefOr<Schema>) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description("Success")
        .content("application/json", json_content(schema))
        .build()
}

/// An answer of raw bytes (an artifact's content).
pub(super) fn bytes(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content("application/octet-stream", ContentBuilder::new().build())
        .build()
}

pub(super) fn json_content(schema: RefOr<Schema>) -> utoipa::openapi::Content {
    ContentBuilder::new().schema(Some(schema)).build()
}

pub(super) fn reference(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

pub(super) fn resource() -> RefOr<Schema> {
    reference("Resource")
}

pub(super) fn list() -> RefOr<Schema> {
    reference("ResourceList")
}

pub(super) fn schema_of<T: ToSchema>() -> RefOr<Schema> {
    T::schema()
}

pub(super) fn any_value() -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .build(),
    ))
}

pub(super) fn any_object() -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .build(),
    ))
}

pub(super) fn array_of(items: RefOr<Schema>) -> RefOr<Schema> {
    RefOr::T(Schema::Array(ArrayBuilder::new().items(items).build()))
}

pub(super) fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

pub(super) fn error_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property(
            "code",
            string().description(Some("Stable snake_case cause")),
        )
        .property("message", string().description(Some("For people")))
        .property("details", any_object())
        .required("code")
        .required("message")
        .required("details")
        .into()
}

pub(super) fn resource_schema() -> Schema {
    let metadata = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("name", string())
        .property("namespace", string())
        .property("resourceVersion", string())
        .property("labels", any_object())
        .property("annotations", any_object())
        .additional_properties(Some(AdditionalProperties::FreeForm(true)));
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(
            "A joch resource: `apiVersion: joch.dev/v1alpha1`, a kind, metadata, spec and status",
        ))
        .property("apiVersion", string())
        .property("kind", string())
        .property("metadata", metadata)
        .property("spec", any_object())
        .property("status", any_object())
        .required("apiVersion")
        .required("kind")
        .required("metadata")
        .additional_properties(Some(AdditionalProperties::FreeForm(true)))
        .into()
}

pub(super) fn list_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("apiVersion", string())
        .property("kind", string())
        .property(
            "metadata",
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .property("continue", string()),
        )
        .property("items", array_of(resource()))
        .required("apiVersion")
        .required("kind")
        .required("items")
        .into()
}

/// `joch_engine::Replay`, which lives outside this crate.
pub(super) fn replay_schema() -> RefOr<Schema> {
    RefOr::T(
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("mode", string().enum_values(Some(["execute", "record"])))
            .property("override", ObjectBuilder::new().schema_type(Type::Boolean))
            .into(),
    )
}
