//! `joch`: the server (`joch serve`) and a CLI that talks to it over HTTP.

mod apply;
mod cli;
mod client;
mod demo;
mod logs;
mod mcp;
mod output;
mod serve;

use clap::Parser;

use crate::cli::{Cli, Command};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("JOCH_LOG")
        .unwrap_or_else(|_| "joch=info,warn".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        cli::LogFormat::Json => logs.json().flatten_event(true).init(),
        cli::LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    joch_backends::install_crypto_provider();
    let result = match cli.command {
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
        Command::Mcp(args) => mcp::run(&cli.client, args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
