//! OpenTelemetry trace export, on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, off otherwise. OTLP over
//! HTTP: protobuf, or JSON with `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`.
//! The SDK reads the other standard variables itself (`OTEL_SERVICE_NAME`,
//! `OTEL_BSP_SCHEDULE_DELAY`, headers, timeouts).

use anyhow::Context;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The exporting provider, when export is configured. Shut it down before
/// exiting, so that the last spans are sent.
pub fn provider() -> anyhow::Result<Option<SdkTracerProvider>> {
    let configured = [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty()));
    if !configured {
        return Ok(None);
    }
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Ok("http/json") => Protocol::HttpJson,
        Ok("http/protobuf") | Err(_) => Protocol::HttpBinary,
        Ok(other) => anyhow::bail!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={other:?}: joch exports http/protobuf or http/json"
        ),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .context("cannot build the OTLP span exporter")?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "joch".to_owned());
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(Resource::builder().with_service_name(service).build())
            .build(),
    ))
}

/// The tracing layer that turns spans into OpenTelemetry spans.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("joch"))
}
