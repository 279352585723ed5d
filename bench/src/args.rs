//! The bench's command line.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(about = "Compare calling a webhook directly with calling it through joch")]
pub(crate) struct Args {
    /// Measured calls per scenario.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) calls: usize,
    /// Calls in flight at once (worker tasks sharing one HTTP client).
    #[arg(long, default_value_t = 64)]
    pub(crate) concurrency: usize,
    /// Unmeasured calls per scenario first, to open connections and warm caches.
    #[arg(long, default_value_t = 500)]
    pub(crate) warmup: usize,
    /// Measured calls per scenario with a single caller (latency at rest).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) single_calls: usize,
    /// Synced writes timed to find the disk's floor.
    #[arg(long, default_value_t = 200)]
    pub(crate) floor_samples: usize,
    /// A PostgreSQL server (`postgres://user@host:port/db`) on which to also
    /// measure the no-op tool with 1, 2 and 3 replicas, each in a fresh
    /// database the bench creates.
    #[arg(long, env = "JOCH_BENCH_POSTGRES")]
    pub(crate) postgres: Option<String>,
    /// Only these joch scenarios (comma-separated: noop, read_only,
    /// external_write); the direct baseline always runs.
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// The replica counts of the PostgreSQL closed loops (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub(crate) replicas: Vec<usize>,
    /// Give each joch scenario's namespace one CEL policy that never
    /// matches, so that every call evaluates it (the policy path's cost).
    #[arg(long)]
    pub(crate) with_policy: bool,
    /// Also measure latency at these offered rates, in calls/s
    /// (comma-separated; open loop, see `open_loop.rs`).
    #[arg(long, value_delimiter = ',')]
    pub(crate) offered_rate: Vec<usize>,
    /// How long each offered rate is held.
    #[arg(long, default_value_t = 5)]
    pub(crate) offered_seconds: usize,
    /// Only measure issue 21's costs: detectors per KiB of output, and a
    /// back-test over a ledger of `--ledger-calls` calls.
    #[arg(long)]
    pub(crate) trust: bool,
    /// Calls in the back-test's ledger.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) ledger_calls: usize,
    /// Instead of the scenarios above, soak a `joch serve` process for this
    /// many seconds with fresh client-chosen names, slow clients and
    /// abandoned MCP sessions (see `soak.rs`); 0: off.
    #[arg(long, default_value_t = 0)]
    pub(crate) soak_seconds: u64,
    /// The soak's run without hostile clients, whose p99 is the reference.
    #[arg(long, default_value_t = 120)]
    pub(crate) soak_baseline_seconds: u64,
    /// The `joch` binary the soak runs (default: beside this one).
    #[arg(long)]
    pub(crate) soak_joch: Option<std::path::PathBuf>,
    /// Runs each scenario's joch, and each PostgreSQL replica, as a `joch
    /// serve` process of its own (the binary of `--soak-joch`) instead of in
    /// the bench's process, so that the client's work and joch's share no
    /// runtime (the RSS and commits/s figures are then the client's alone,
    /// and empty).
    #[arg(long)]
    pub(crate) joch_process: bool,
    /// With `--joch-process`: each PostgreSQL replica may use at most this
    /// many cores (a cgroup of its own; Linux, as root), as if each had a
    /// machine of its own, so that a replica added brings CPU as it would
    /// in a cluster.
    #[arg(long, requires = "joch_process")]
    pub(crate) replica_cpus: Option<f64>,
    /// The open-files limit the soaked joch runs under.
    #[arg(long, default_value_t = 1024)]
    pub(crate) soak_open_files: u64,
    /// Half-open connections the soak keeps open at all times.
    #[arg(long, default_value_t = 300)]
    pub(crate) soak_slow: usize,
    /// Normal callers in flight at once during the soak.
    #[arg(long, default_value_t = 8)]
    pub(crate) soak_concurrency: usize,
    /// How often the soak opens and abandons an MCP session, in ms (0: never).
    #[arg(long, default_value_t = 2000)]
    pub(crate) soak_mcp_every_ms: u64,
    /// Instead of the scenarios above, compare MCP with REST on a `joch
    /// serve` process (the binary of `--soak-joch`; see `mcp.rs`).
    #[arg(long)]
    pub(crate) mcp: bool,
    /// Callers at once in the MCP comparison's throughput runs.
    #[arg(long, default_value_t = 32)]
    pub(crate) mcp_concurrency: usize,
    /// Instead of the scenarios above, open this many MCP sessions and
    /// abandon them, and report joch's RSS (see `abandoned.rs`); 0: off.
    #[arg(long, default_value_t = 0)]
    pub(crate) mcp_abandoned: usize,
    /// The session idle time the abandoned sessions' joch runs with.
    #[arg(long, default_value_t = 10)]
    pub(crate) mcp_abandoned_idle_seconds: u64,
}
