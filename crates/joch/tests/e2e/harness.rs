//! Starts the real `joch serve` binary on a free loopback port, real webhook
//! servers, and gives each test a few-line vocabulary over HTTP.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use reqwest::Method;
use serde_json::{Value, json};

mod stores;

pub use stores::{TestStore, postgres_database};

pub const NS: &str = "e2e";

/// Where a test server's warnings go: nowhere, so that a green run prints
/// only what the tests say (many tests provoke warnings on purpose);
/// `JOCH_TEST_LOG=1` shows them, to debug a failing test.
pub fn server_log() -> Stdio {
    match std::env::var_os("JOCH_TEST_LOG") {
        Some(_) => Stdio::inherit(),
        None => Stdio::null(),
    }
}

/// How a test starts `joch serve`; [`Joch::builder`] makes one.
#[derive(Default)]
pub struct JochBuilder {
    db: Option<PathBuf>,
    /// The directory of a [`TestStore`]'s file, kept as long as the server.
    store_dir: Option<Arc<tempfile::TempDir>>,
    postgres: Option<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: Option<(String, PathBuf)>,
    open_files: Option<u64>,
}

impl JochBuilder {
    /// Keeps the records in the SQLite file `db` (a restart on the same
    /// file finds them), instead of a fresh one.
    pub fn db(mut self, db: &Path) -> Self {
        self.db = Some(db.to_owned());
        self
    }

    /// Keeps the records in the PostgreSQL database at `url` (`--store`).
    pub fn postgres(mut self, url: &str) -> Self {
        self.postgres = Some(url.to_owned());
        self
    }

    /// Runs on `store`, the SQLite file or PostgreSQL database of a
    /// [`storetest!`](crate::storetest).
    pub fn store(self, store: &TestStore) -> Self {
        match store {
            TestStore::Sqlite { db, dir } => Self {
                store_dir: Some(Arc::clone(dir)),
                ..self.db(db)
            },
            TestStore::Postgres(url) => self.postgres(url),
        }
    }

    /// One more `serve` flag.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    /// More `serve` flags.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// An environment variable of the server process.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Writes the server's logs at `level` and above to the file `log`.
    pub fn log(mut self, level: &str, log: &Path) -> Self {
        self.log = Some((level.to_owned(), log.to_owned()));
        self
    }

    /// Runs the server with at most `n` open files (soft and hard limit).
    pub fn open_files(mut self, n: u64) -> Self {
        self.open_files = Some(n);
        self
    }

    /// Starts the server and waits until it is ready.
    pub async fn start(self) -> Joch {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = self.db.unwrap_or_else(|| dir.path().join("joch.db"));
        let mut args = self.args;
        if let Some(url) = self.postgres {
            // A killed replica's calls are taken over once its lease lapses:
            // short, so that recovery scenarios end in seconds.
            if !args.iter().any(|a| a.starts_with("--lease-seconds")) {
                args.splice(0..0, ["--lease-seconds".to_owned(), "2".to_owned()]);
            }
            args.splice(0..0, ["--store".to_owned(), url]);
        }
        let (level, stderr) = match self.log {
            Some((level, path)) => {
                let file = std::fs::File::create(path).expect("log file");
                (level, Stdio::from(file))
            }
            None => ("warn".to_owned(), server_log()),
        };
        let command = match self.open_files {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_joch"));
                sh
            }
            None => Command::new(env!("CARGO_BIN_EXE_joch")),
        };
        let mut joch = Joch::launch(command, &db, &args, &self.env, &level, stderr).await;
        joch._dir = Some(dir);
        joch._store_dir = self.store_dir;
        joch
    }
}

/// A running `joch serve` process, killed (SIGKILL) on drop.
pub struct Joch {
    child: Child,
    pub base: String,
    pub http: reqwest::Client,
    _dir: Option<tempfile::TempDir>,
    _store_dir: Option<Arc<tempfile::TempDir>>,
}

impl Joch {
    /// A server on a fresh SQLite database: `Joch::builder().start()`.
    pub async fn start() -> Joch {
        Joch::builder().start().await
    }

    /// How to start `joch serve`: on a fresh SQLite database in a temp dir,
    /// logging warnings nowhere (see [`server_log`]), unless told otherwise.
    pub fn builder() -> JochBuilder {
        JochBuilder::default()
    }

    async fn launch(
        mut command: Command,
        db: &Path,
        flags: &[String],
        env: &[(String, String)],
        level: &str,
        stderr: Stdio,
    ) -> Joch {
        let mut child = command
            .args(flags.iter().filter(|f| f.starts_with("--log-format")))
            .args(["serve", "--addr", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(flags.iter().filter(|f| !f.starts_with("--log-format")))
            .env("JOCH_LOG", level)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn joch");
        let stdout = child.stdout.take().expect("stdout");
        let base = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let line = lines
                .next()
                .expect("joch printed nothing")
                .expect("read stdout");
            // Keep draining so the server never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            let at = line
                .find("http://")
                .expect("startup line names the address");
            line[at..]
                .split_whitespace()
                .next()
                .expect("address")
                .to_owned()
        })
        .await
        .expect("read startup line");
        joch_backends::install_crypto_provider();
        let joch = Joch {
            child,
            base,
            http: reqwest::Client::new(),
            _dir: None,
            _store_dir: None,
        };
        joch.wait_ready().await;
        joch
    }

    async fn wait_ready(&self) {
        for _ in 0..100 {
            if let Ok(r) = self.http.get(format!("{}/readyz", self.base)).send().await {
                if r.status() == StatusCode::OK {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("joch at {} never became ready", self.base);
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9`: no shutdown handler runs.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits: the shutdown handlers run.
    pub fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
        let _ = self.child.wait();
    }

    /// Sends `body` (JSON) and returns status and JSON answer.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        answer(request).await
    }

    /// Sends `method`, without a body, to each of `paths` at once; the
    /// answers in the order of `paths`.
    pub async fn send_each(
        &self,
        method: Method,
        paths: impl IntoIterator<Item = String>,
    ) -> Vec<(StatusCode, Value)> {
        let paths: Vec<String> = paths.into_iter().collect();
        let sends = paths
            .iter()
            .map(|path| self.send(method.clone(), path, None));
        futures_util::future::join_all(sends).await
    }

    /// [`Joch::send`] with a bearer token.
    pub async fn send_as(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        answer(request).await
    }

    /// Sends a raw body with a content type.
    pub async fn send_raw(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(body);
        answer(request).await
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(Method::GET, path, None).await
    }

    /// Creates a tool in [`NS`], asserting success.
    pub async fn create_tool(&self, tool: Value) -> Value {
        let (status, body) = self
            .send(
                Method::POST,
                &format!("/v1/namespaces/{NS}/tools"),
                Some(tool),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body
    }

    /// POSTs a ToolCall of `tool` with `input` and returns status and record.
    pub async fn call(&self, tool: &str, input: Value) -> (StatusCode, Value) {
        self.post_call(json!({"spec": {"toolRef": {"name": tool}, "input": input}}))
            .await
    }

    pub async fn post_call(&self, call: Value) -> (StatusCode, Value) {
        self.send(
            Method::POST,
            &format!("/v1/namespaces/{NS}/toolcalls"),
            Some(call),
        )
        .await
    }

    pub async fn get_call(&self, name: &str) -> Value {
        self.get_call_in(NS, name).await
    }

    pub async fn get_call_in(&self, namespace: &str, name: &str) -> Value {
        let (status, body) = self
            .get(&format!("/v1/namespaces/{namespace}/toolcalls/{name}"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    /// Runs the `joch` CLI against this server.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_joch"))
            .args(args)
            .env("JOCH_SERVER", &self.base)
            .output()
            .expect("run joch cli")
    }
}

impl Drop for Joch {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request");
    let status = response.status();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("answer is not JSON ({status}): {text}"));
    (status, body)
}

/// A real HTTP server standing in for a tool's webhook. It counts the calls
/// each route receives.
pub struct Webhook {
    pub base: String,
    pub hits: Arc<AtomicUsize>,
    /// What `/record` received (`{"apiKey": header, "body": body}`) and
    /// `/slow-record` (`{"body": body}`), in order.
    recorded: Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Webhook {
    pub async fn start() -> Webhook {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        let slow_counted = Arc::clone(&hits);
        let hang_counted = Arc::clone(&hits);
        let hanging = Arc::clone(&hits);
        let recorded = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorder = Arc::clone(&recorded);
        let app = Router::new()
            .route(
                "/echo",
                post(move |axum::Json(body): axum::Json<Value>| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    async move { axum::Json(json!({"echo": body})) }
                }),
            )
            .route(
                "/record",
                post(
                    move |headers: axum::http::HeaderMap, axum::Json(body): axum::Json<Value>| {
                        let recorder = Arc::clone(&recorder);
                        async move {
                            let key = headers
                                .get("x-api-key")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned);
                            let mut seen = recorder.lock().unwrap();
                            seen.push(json!({"apiKey": key, "body": body}));
                            axum::Json(json!({"stored": seen.len()}))
                        }
                    },
                ),
            )
            .route(
                "/slow-record",
                post({
                    let recorder = Arc::clone(&recorded);
                    move |axum::Json(body): axum::Json<Value>| {
                        let recorder = Arc::clone(&recorder);
                        async move {
                            // The side effect happens on arrival; the answer takes a while.
                            recorder.lock().unwrap().push(json!({"body": body}));
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            axum::Json(json!({"stored": true}))
                        }
                    }
                }),
            )
            .route(
                "/slow-echo",
                post(move |axum::Json(body): axum::Json<Value>| {
                    let counted = Arc::clone(&slow_counted);
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        axum::Json(json!({"echo": body}))
                    }
                }),
            )
            .route(
                "/hang-first",
                post(move |axum::Json(body): axum::Json<Value>| {
                    let counted = Arc::clone(&hang_counted);
                    async move {
                        // The first call never answers in time; the rest answer at once.
                        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                            tokio::time::sleep(Duration::from_secs(30)).await;
                        }
                        axum::Json(json!({"echo": body}))
                    }
                }),
            )
            .route(
                "/hang",
                post(move || {
                    hanging.fetch_add(1, Ordering::SeqCst);
                    async {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        axum::Json(json!({}))
                    }
                }),
            )
            .route(
                "/headers",
                post(|headers: axum::http::HeaderMap| async move {
                    let pairs = headers
                        .iter()
                        .map(|(k, v)| (k.to_string(), json!(v.to_str().unwrap_or_default())));
                    axum::Json(Value::Object(pairs.collect()))
                }),
            )
            .route(
                "/fail",
                post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "database exploded") }),
            )
            .route("/text", post(|| async { "not json" }))
            .route(
                "/slow",
                post(|| async {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    axum::Json(json!({}))
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind webhook");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await.expect("webhook") });
        Webhook {
            base,
            hits,
            recorded,
        }
    }

    pub fn recorded(&self) -> Vec<Value> {
        self.recorded.lock().unwrap().clone()
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Polls a call until it reaches `phase` (or fails the test after ~10 s:
/// on PostgreSQL, a killed replica's calls wait for its lease to lapse).
pub async fn wait_for_phase(joch: &Joch, name: &str, phase: &str) -> Value {
    let mut call = Value::Null;
    for _ in 0..500 {
        call = joch.get_call(name).await;
        if call["status"]["phase"] == phase {
            return call;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{name} never reached {phase}: {call}");
}

/// Polls the webhook until it has received `n` calls.
pub async fn wait_for_hits(webhook: &Webhook, n: usize) {
    for _ in 0..250 {
        if webhook.hits() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the webhook got {} calls, expected {n}", webhook.hits());
}

/// A rest tool manifest calling `url`.
pub fn rest_tool(name: &str, url: &str, side_effects: Value) -> Value {
    json!({
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": name},
        "spec": {
            "description": format!("test tool {name}"),
            "inputSchema": {"type": "object"},
            "sideEffects": side_effects,
            "backend": {"type": "rest", "endpoint": {"url": url, "timeoutMs": 1000}}
        }
    })
}

/// Asserts the status and error `code` of an answer, and the error shape.
#[track_caller]
pub fn assert_error(answer: &(StatusCode, Value), status: StatusCode, code: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(body["details"].is_object(), "{body}");
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a test MCP server lists: one read-only tool `name` that takes any
/// object.
pub fn one_read_only_tool(name: &str) -> rmcp::model::ListToolsResult {
    let tool = serde_json::json!({"name": name, "inputSchema": {"type": "object"},
                                  "annotations": {"readOnlyHint": true}});
    rmcp::model::ListToolsResult::with_all_items(vec![
        serde_json::from_value(tool).expect("a tool"),
    ])
}
