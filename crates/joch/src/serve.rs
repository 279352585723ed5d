//! `joch serve`: open the store, wire the engine and serve HTTP.

use std::sync::Arc;

use anyhow::Context;
use joch_backends::{ActionsExecutor, RestConfig, WebhookBackend};
use joch_core::ToolBackend;
use joch_engine::policy::StandardPolicyEngine;
use joch_engine::{Engine, EngineConfig, RecoveryReport};
use joch_server::ServerConfig;
use joch_store::{SqliteStore, Store};

use joch_core::policy::OnTimeout;

use crate::cli::{ApprovalFallback, ServeArgs};
use crate::demo;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&args.db)
            .with_context(|| format!("cannot open the database {}", args.db.display()))?,
    );
    let webhook =
        WebhookBackend::new(RestConfig::default()).context("cannot build the webhook client")?;
    let actions = ActionsExecutor::new(webhook.clone());
    let backends: Vec<Arc<dyn ToolBackend>> = vec![Arc::new(webhook), Arc::new(actions)];
    let policy = Arc::new(StandardPolicyEngine::default());
    let config = EngineConfig {
        approval_timeout: std::time::Duration::from_secs(args.approval_timeout_seconds),
        approval_fallback: match args.approval_fallback {
            ApprovalFallback::Deny => OnTimeout::Deny,
            ApprovalFallback::Approve => OnTimeout::Approve,
        },
        ..EngineConfig::default()
    };
    let engine = Engine::new(store, backends, policy, config);
    let recovered = engine
        .recover()
        .await
        .context("cannot recover unfinished calls")?;
    engine.spawn_key_purger(std::time::Duration::from_secs(60));

    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let addr = listener
        .local_addr()
        .context("cannot read the bound address")?;
    let mut app = joch_server::router(
        engine.clone(),
        ServerConfig {
            max_body_bytes: args.max_body_bytes,
        },
    );
    if args.demo {
        app = app.merge(demo::routes());
    }
    // Tests and scripts read this line to find the port: keep its shape.
    println!(
        "joch listening on http://{addr} (store: sqlite {})",
        args.db.display()
    );
    if args.demo {
        demo::apply_examples(&engine, addr).await?;
    }
    if recovered != RecoveryReport::default() {
        println!(
            "recovered unfinished calls: {} resumed, {} re-run, {} interrupted (now Unknown), {} abandoned",
            recovered.resumed, recovered.rerun, recovered.interrupted, recovered.abandoned
        );
    }

    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("server failed")?;
    tracing::info!("joch stopped");
    Ok(())
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return interrupt.await.unwrap_or_default(),
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    interrupt.await.unwrap_or_default();
}
