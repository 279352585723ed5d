//! `joch`: the server (`joch serve`) and a CLI that talks to it over HTTP.

mod apply;
mod audit;
mod cli;
mod client;
mod credentials;
mod demo;
mod listen;
mod logs;
mod mcp;
mod otel;
mod output;
mod policytest;
mod scrub;
mod serve;
mod watchdog;

use clap::Parser;

use crate::cli::{Cli, Command};

// A loaded joch allocates and frees many short-lived JSON values per call,
// often on different threads; glibc's malloc spent ~15% of its CPU on that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // Before any HTTP client is built, the OTLP exporter's included.
    joch_backends::install_crypto_provider();
    // Built outside the async runtime: the exporter's blocking HTTP client
    // must not be created or dropped on a runtime thread.
    let traces = match otel::provider() {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    init_logs(cli.log_format, traces.as_ref());
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(run(cli)));
    if let Some(traces) = traces {
        let _ = traces.shutdown();
    }
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Log lines to stderr (text or JSON, filtered by `JOCH_LOG`), and spans to
/// OTLP when export is on.
fn init_logs(format: cli::LogFormat, traces: Option<&opentelemetry_sdk::trace::SdkTracerProvider>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("JOCH_LOG")
            .unwrap_or_else(|_| "joch=info,rmcp=off,warn".into())
    };
    // Spans are exported whatever the log level: they have their own filter.
    let spans = traces.map(|traces| {
        otel::layer(traces).with_filter(
            tracing_subscriber::filter::Targets::new().with_target("joch", tracing::Level::INFO),
        )
    });
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(spans);
    match format {
        cli::LogFormat::Json => registry
            .with(lines.json().flatten_event(true).with_filter(filter()))
            .init(),
        cli::LogFormat::Text => registry
            .with(
                lines
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_filter(filter()),
            )
            .init(),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Apply(args) => apply::run(&cli.client, args).await,
        Command::Get(args) => output::get(&cli.client, args).await,
        Command::Describe(args) => output::describe(&cli.client, args).await,
        Command::Call(args) => output::call(&cli.client, args).await,
        Command::Replay(args) => output::replay(&cli.client, args).await,
        Command::Resolve(args) => output::resolve(&cli.client, args).await,
        Command::Approve(args) => output::decide(&cli.client, "approve", args).await,
        Command::Deny(args) => output::decide(&cli.client, "deny", args).await,
        Command::Logs(args) => logs::run(&cli.client, args).await,
        Command::Costs(args) => output::costs(&cli.client, args).await,
        Command::Audit(args) => audit::run(&cli.client, args).await,
        Command::Token(args) => audit::tokens(&cli.client, args).await,
        Command::Credentials(args) => credentials::run(&cli.client, args).await,
        Command::Mcp(args) => mcp::run(&cli.client, args).await,
        Command::Policy(args) => policytest::run(&cli.client, args).await,
    }
}
