//! `serve`'s flags bounding the console's sign-ins through the identity
//! provider, which anyone who reaches `/ui/signin/oidc` may start.

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct SignInArgs {
    /// How long a started sign-in through the identity provider may take
    /// before it expires, in seconds.
    #[arg(long, env = "JOCH_SIGN_IN_TTL_SECONDS", default_value_t = 600)]
    pub sign_in_ttl_seconds: u64,
    /// Most sign-ins under way from one client address (an IPv4 address,
    /// or an IPv6 /64). Beyond it, /ui/signin/oidc answers 429
    /// too_many_sign_ins with Retry-After.
    #[arg(long, env = "JOCH_MAX_SIGN_INS_PER_CLIENT", default_value_t = 20)]
    pub max_sign_ins_per_client: u64,
    /// Most sign-ins under way from all clients together.
    #[arg(long, env = "JOCH_MAX_SIGN_INS", default_value_t = 10_000)]
    pub max_sign_ins: u64,
    /// How often expired sign-ins and expired console sessions are
    /// deleted, in seconds.
    #[arg(long, env = "JOCH_SIGN_IN_SWEEP_SECONDS", default_value_t = 60)]
    pub sign_in_sweep_seconds: u64,
}

impl SignInArgs {
    /// The engine's limits, each at least 1.
    pub fn limits(&self) -> joch_engine::SignInLimits {
        joch_engine::SignInLimits {
            ttl: std::time::Duration::from_secs(self.sign_in_ttl_seconds.max(1)),
            per_client: self.max_sign_ins_per_client.max(1),
            total: self.max_sign_ins.max(1),
            sweep_every: std::time::Duration::from_secs(self.sign_in_sweep_seconds.max(1)),
        }
    }
}
