//! `joch serve`: open the store, wire the engine and serve HTTP.

use anyhow::Context;
use joch_engine::{CheckpointSigning, EngineConfig, McpSessionLimits, RecoveryReport, Workers};
use joch_server::ServerConfig;
use joch_tools::{StoreLocation, open_engine};

use joch_core::policy::OnTimeout;

use crate::cli::{ApprovalFallback, ServeArgs};
use crate::demo;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    refuse_open_without_auth(&args)?;
    // Bound first: the default public URL, and so the JWT audience, is the
    // address actually bound (port 0 picks one).
    let listener = crate::listen::bind(args.addr)
        .with_context(|| format!("cannot listen on {}", args.addr))?;
    let addr = listener
        .local_addr()
        .context("cannot read the bound address")?;
    let public_url = public_url(args.public_url.as_deref(), addr)?;
    let jwt = jwt_config(&args, &public_url).await?;
    let location = store_location(&args);
    let config = engine_config(&args, jwt.clone(), public_url.clone())?;
    let mut server = server_config(&args, jwt, public_url);
    // Everything is read: joch's own variables leave its environment.
    if let Err(e) = crate::scrub::own_variables() {
        tracing::warn!(error = %e, "could not blank joch's variables in its environment block");
    }
    let running = open_engine(&location, config, workers(&args)?).await?;
    let engine = running.engine().clone();

    let metrics = install_metrics()?;
    server.metrics = Some(joch_server::Metrics(std::sync::Arc::new(move || {
        metrics.render()
    })));
    let extra = match args.demo {
        true => demo::routes(),
        false => axum::Router::new(),
    };
    let app = joch_server::router(engine.clone(), server, extra);
    announce(&engine, addr, &location, running.recovered()).await?;
    if args.demo {
        demo::apply_examples(&engine, addr).await?;
    }

    let timeouts = crate::watchdog::Timeouts {
        header_read: std::time::Duration::from_millis(args.header_read_timeout_ms.max(1)),
        idle: std::time::Duration::from_secs(args.idle_timeout_seconds.max(1)),
        body_min_rate: args.body_min_bytes_per_second.max(1),
    };
    crate::listen::run(
        listener,
        app,
        timeouts,
        args.max_connections,
        shutdown_signal(),
    )
    .await?;
    // With a signing key, the last heads are signed, so that a tail cut
    // after this stop is caught.
    match running.shutdown().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(signed = n, "signed the audit chains' last heads"),
        Err(e) => tracing::warn!(error = %e, "could not sign the audit chains' last heads"),
    }
    tracing::info!("joch stopped");
    Ok(())
}

/// Anyone who reaches an unauthenticated joch can run tools and decide
/// approvals: only this machine may, unless told otherwise.
fn refuse_open_without_auth(args: &ServeArgs) -> anyhow::Result<()> {
    let authenticated = args.admin_token.is_some() || args.jwt_issuer.is_some();
    if !args.addr.ip().is_loopback() && !args.insecure && !authenticated {
        anyhow::bail!(
            "refusing to listen on {} without authentication: anyone who can reach it could run tools \
             and approve calls. Set JOCH_ADMIN_TOKEN, listen on 127.0.0.1, or pass --insecure",
            args.addr
        );
    }
    Ok(())
}

fn engine_config(
    args: &ServeArgs,
    jwt: Option<joch_engine::JwtConfig>,
    public_url: String,
) -> anyhow::Result<EngineConfig> {
    Ok(EngineConfig {
        approval_timeout: std::time::Duration::from_secs(args.approval_timeout_seconds),
        approval_fallback: match args.approval_fallback {
            ApprovalFallback::Deny => OnTimeout::Deny,
            ApprovalFallback::Approve => OnTimeout::Approve,
        },
        trace_content: args.trace_content,
        root_token_hash: args.admin_token.as_deref().map(joch_core::token::hash),
        jwt,
        replica: args.store.is_some().then(replica_name),
        artifacts: args.artifacts_dir.clone().map(|dir| {
            std::sync::Arc::new(joch_store::FileBlobs::new(dir))
                as std::sync::Arc<dyn joch_store::Blobs>
        }),
        intent_grace: std::time::Duration::from_millis(args.intent_grace_ms),
        mcp_sessions: McpSessionLimits {
            idle: std::time::Duration::from_secs(args.mcp_session_idle_seconds.max(1)),
            per_namespace: args.max_mcp_sessions_per_namespace,
            per_principal: args.max_mcp_sessions_per_principal,
        },
        vault: vault_keys(args)?,
        public_url: Some(public_url),
        mcp_user_connections: args.max_mcp_user_connections,
        mcp_user_connection_idle: std::time::Duration::from_secs(
            args.mcp_user_connection_idle_seconds.max(1),
        ),
        host_access: args.edge.host_access(
            [&args.audit_signing_key, &args.vault_key_file]
                .into_iter()
                .flatten()
                .cloned()
                .chain([args.db.clone()])
                .collect(),
        ),
        policy_budget: args.edge.policy_budget(),
        sign_ins: args.sign_ins.limits(),
        ..EngineConfig::default()
    })
}

fn store_location(args: &ServeArgs) -> StoreLocation {
    match &args.store {
        Some(url) => StoreLocation::Postgres {
            url: url.clone(),
            max_connections: args.store_max_connections,
        },
        None => StoreLocation::Sqlite(args.db.clone()),
    }
}

fn workers(args: &ServeArgs) -> anyhow::Result<Workers> {
    Ok(Workers {
        lease_ttl: std::time::Duration::from_secs(args.lease_seconds.max(3)),
        hook_result_timeout: std::time::Duration::from_secs(
            args.hook_result_timeout_seconds.max(1),
        ),
        artifact_grace: std::time::Duration::from_secs(args.artifact_grace_seconds.max(1)),
        checkpoint_signing: checkpoint_signing(args)?,
        ..Workers::default()
    })
}

fn server_config(
    args: &ServeArgs,
    jwt: Option<joch_engine::JwtConfig>,
    public_url: String,
) -> ServerConfig {
    // The public URL's host is served, besides the loopback names, IP
    // addresses and the hosts the operator lists (a web page cannot
    // rebind another DNS name onto joch's address).
    let public_host = reqwest::Url::parse(&public_url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned));
    ServerConfig {
        max_body_bytes: args.max_body_bytes,
        max_streams_per_principal: args.max_streams_per_principal.max(1),
        allowed_hosts: public_host
            .into_iter()
            .chain(args.edge.allowed_host.iter().cloned())
            .collect(),
        allowed_origins: args.edge.allowed_origin.clone(),
        console_oidc: console_oidc(args, jwt.as_ref()),
        authorization_servers: jwt.map(|jwt| jwt.issuer).into_iter().collect(),
        public_url,
        ..ServerConfig::default()
    }
}

/// The line tests and scripts read to find the port (keep its shape), and
/// what recovery did.
async fn announce(
    engine: &joch_engine::Engine,
    addr: std::net::SocketAddr,
    location: &StoreLocation,
    recovered: &RecoveryReport,
) -> anyhow::Result<()> {
    println!(
        "joch listening on http://{addr} (store: {location}; {})",
        if engine.identity().auth_required().await? {
            "authentication: bearer tokens"
        } else if addr.ip().is_loopback() {
            "no authentication: loopback only"
        } else {
            "no authentication: INSECURE, reachable from the network"
        }
    );
    if *recovered != RecoveryReport::default() {
        println!(
            "recovered unfinished calls: {} resumed, {} re-run, {} interrupted (now Unknown), {} abandoned",
            recovered.resumed, recovered.rerun, recovered.interrupted, recovered.abandoned
        );
    }
    Ok(())
}

fn checkpoint_signing(args: &ServeArgs) -> anyhow::Result<Option<CheckpointSigning>> {
    let Some(path) = &args.audit_signing_key else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the audit signing key {}", path.display()))?;
    let key = joch_core::audit::signing_key_from_hex(&text)
        .with_context(|| format!("{} is not an audit signing key", path.display()))?;
    Ok(Some(CheckpointSigning {
        key,
        every: std::time::Duration::from_secs(args.audit_checkpoint_seconds.max(1)),
        every_entries: args.audit_checkpoint_entries.max(1),
    }))
}

/// The base URL clients reach joch at, without a trailing slash: as
/// configured (normalised, so that it compares equal to the URL a client
/// derives from it: lowercase host, no default port), or the bound address
/// over plain HTTP.
fn public_url(configured: Option<&str>, addr: std::net::SocketAddr) -> anyhow::Result<String> {
    let Some(url) = configured else {
        return Ok(format!("http://{addr}"));
    };
    let parsed =
        reqwest::Url::parse(url).with_context(|| format!("--public-url {url} is not a URL"))?;
    anyhow::ensure!(
        matches!(parsed.scheme(), "http" | "https")
            && parsed.query().is_none()
            && parsed.fragment().is_none(),
        "--public-url {url}: expected an http(s) URL without query or fragment"
    );
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

/// The console as a client of the identity provider, when a client id is
/// given.
fn console_oidc(
    args: &ServeArgs,
    jwt: Option<&joch_engine::JwtConfig>,
) -> Option<joch_server::OidcClient> {
    Some(joch_server::OidcClient {
        issuer: jwt?.issuer.clone(),
        client_id: args.sign_ins.oidc_client_id.clone()?,
        client_secret: std::env::var("JOCH_OIDC_CLIENT_SECRET")
            .ok()
            .filter(|s| !s.is_empty()),
    })
}

/// The identity provider whose JWTs authenticate, if one is configured.
/// Without --jwt-audience, a JWT must be issued for a resource of this
/// joch: its public URL or one of its MCP endpoints.
async fn jwt_config(
    args: &ServeArgs,
    public_url: &str,
) -> anyhow::Result<Option<joch_engine::JwtConfig>> {
    let (Some(issuer), Some(jwks)) = (&args.jwt_issuer, &args.jwt_jwks) else {
        return Ok(None);
    };
    Ok(Some(joch_engine::JwtConfig {
        issuer: issuer.clone(),
        audiences: match &args.jwt_audience {
            Some(audience) => vec![audience.clone()],
            None => joch_server::resource_audiences(public_url),
        },
        keys: load_jwks(jwks).await?,
    }))
}

/// An identity provider's JWKS, from a file or an http(s) URL.
async fn load_jwks(source: &str) -> anyhow::Result<jsonwebtoken::jwk::JwkSet> {
    let text = if source.starts_with("http://") || source.starts_with("https://") {
        reqwest::get(source)
            .await
            .and_then(|r| r.error_for_status())
            .with_context(|| format!("cannot fetch the JWKS at {source}"))?
            .text()
            .await
            .with_context(|| format!("cannot read the JWKS at {source}"))?
    } else {
        std::fs::read_to_string(source)
            .with_context(|| format!("cannot read the JWKS file {source}"))?
    };
    serde_json::from_str(&text).with_context(|| format!("{source} is not a JWKS"))
}

/// This replica's name: the host's (a pod's name in Kubernetes) and a
/// random suffix, since a restarted process is a new replica.
fn replica_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "joch".to_owned());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
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

/// Installs the process-wide Prometheus recorder the engine's metrics go to.
/// Latencies get explicit buckets so they render as Prometheus histograms.
/// The recorder keeps every observation until it is drained into its
/// buckets: upkeep drains it every few seconds, so memory stays flat
/// whether or not anything scrapes `/metrics`.
fn install_metrics() -> anyhow::Result<metrics_exporter_prometheus::PrometheusHandle> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    const MS: [f64; 15] = [
        0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0,
        30000.0,
    ];
    const SECONDS: [f64; 12] = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0, 10.0, 60.0, 300.0,
    ];
    const SIZES: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_ms".to_owned()), &MS)?
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &SECONDS)?
        .set_buckets_for_metric(Matcher::Full("joch_store_batch_size".to_owned()), &SIZES)?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// The vault's keys: `--vault-key-file`, else `JOCH_VAULT_KEY`, else none.
fn vault_keys(args: &ServeArgs) -> anyhow::Result<Option<joch_engine::VaultKeys>> {
    let text = match &args.vault_key_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the vault key file {}", path.display()))?,
        None => match std::env::var("JOCH_VAULT_KEY") {
            Ok(key) if !key.is_empty() => key,
            _ => return Ok(None),
        },
    };
    joch_engine::VaultKeys::parse(&text)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("the vault key: {e}"))
}
