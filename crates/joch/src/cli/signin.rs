//! `serve`'s flags for the console's sign-ins through the identity
//! provider: its client id, and the bounds on the sign-ins anyone who
//! reaches `/ui/signin/oidc` may start.

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct SignInArgs {
    /// The console's client id at the --jwt-issuer: turns on "Sign in with"
    /// the issuer (OpenID Connect, code flow with PKCE; redirect URI
    /// `<public URL>/ui/signin/oidc/callback`). A confidential client's
    /// secret is read from JOCH_OIDC_CLIENT_SECRET, never a flag.
    #[arg(long, env = "JOCH_OIDC_CLIENT_ID", requires = "jwt_issuer")]
    pub oidc_client_id: Option<String>,
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
