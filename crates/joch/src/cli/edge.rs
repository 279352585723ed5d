//! `serve`'s flags that keep joch the operator's: the host names it
//! answers to and the origins that may write to it (`server/src/edge.rs`),
//! what namespaces may take from its host (`engine/src/rules/host.rs`),
//! and what one policy's evaluation may spend.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct EdgeArgs {
    /// A host name joch answers to, besides the loopback names, IP
    /// addresses and --public-url's host (repeat, or comma-separate in
    /// JOCH_ALLOWED_HOSTS; `*`: any, behind a proxy that checks). Other
    /// `Host`s are refused 421, against DNS rebinding.
    #[arg(long, env = "JOCH_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_host: Vec<String>,
    /// An origin (`https://ops.example`) whose web pages may send joch
    /// requests that change something, besides joch's own pages (repeat,
    /// or comma-separate in JOCH_ALLOWED_ORIGINS). Others are refused 403.
    #[arg(long, env = "JOCH_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origin: Vec<String>,
    /// A command line a namespace's stdio McpServer may run: a glob over
    /// the program and its arguments joined by spaces (repeat, or
    /// comma-separate in JOCH_ALLOW_STDIO_COMMANDS). Without it, only the
    /// operator (no authentication, or the root token) runs commands.
    #[arg(long, env = "JOCH_ALLOW_STDIO_COMMANDS", value_delimiter = ',')]
    pub allow_stdio_command: Vec<String>,
    /// A prefix of the environment variables a namespace's secret
    /// references (`{env: NAME}`) may read (repeat; never `JOCH_`).
    #[arg(long, env = "JOCH_SECRET_ENV_PREFIXES", value_delimiter = ',')]
    pub secret_env_prefix: Vec<String>,
    /// A directory whose files a namespace's secret references
    /// (`{file: PATH}`) may read (repeat).
    #[arg(long, env = "JOCH_SECRET_DIRS", value_delimiter = ',')]
    pub secret_dir: Vec<PathBuf>,
    /// How long one policy's evaluation for one call may take, CEL or
    /// Rego, before it fails and denies the call.
    #[arg(long, env = "JOCH_POLICY_TIME_BUDGET_MS", default_value_t = 100)]
    pub policy_time_budget_ms: u64,
    /// How many steps one CEL expression's evaluation may take: items its
    /// comprehensions range over, and sizes of what `+` builds.
    #[arg(long, env = "JOCH_POLICY_CEL_STEPS", default_value_t = 1_000_000)]
    pub policy_cel_steps: u64,
}

impl EdgeArgs {
    /// The engine's allow-lists; `own_files` are joch's own secret files.
    pub fn host_access(&self, own_files: Vec<PathBuf>) -> joch_engine::HostAccess {
        joch_engine::HostAccess {
            stdio_commands: self.allow_stdio_command.clone(),
            secret_env_prefixes: self.secret_env_prefix.clone(),
            secret_dirs: self.secret_dir.clone(),
            own_files,
        }
    }

    /// The policy engine's budget, within 1 ms to a minute and at least one step.
    pub fn policy_budget(&self) -> joch_engine::policies::PolicyBudget {
        joch_engine::policies::PolicyBudget {
            time: std::time::Duration::from_millis(self.policy_time_budget_ms.clamp(1, 60_000)),
            cel_steps: self.policy_cel_steps.max(1),
        }
    }
}
