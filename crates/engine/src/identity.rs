//! The identity part: who a request is (API tokens and JWTs in
//! `tokens.rs`, console sessions in `sessions.rs`, OIDC sign-in in
//! `signin.rs`, its caps in `pending.rs`, the sweep of both in
//! `sweep.rs`). The rulebook of what each principal may do is a module of
//! its own (`crate::rules`), below every part, re-exported here.

mod pending;
mod sessions;
mod signin;
mod sweep;
mod tokens;

pub use crate::rules::host::HostAccess;
pub(crate) use crate::rules::host::may_use_host;
pub use crate::rules::{
    Action, ActionKind, Allowance, Collection, acts_in_several, is_operator, may, may_in,
    table as action_table,
};
pub use pending::{SignInLimits, TOO_MANY_SIGN_INS};
pub use sessions::{ConsoleSession, SessionOpened};
pub use signin::{SignInPending, SignInStarted, pkce_challenge};
pub use tokens::JwtConfig;

use std::sync::Arc;

use joch_store::Store;

use crate::catalog::Catalog;
use crate::resources::Resources;
use pending::Turns;

/// The identity part: authenticates tokens and JWTs, opens console
/// sessions and sign-ins, and sweeps expired ones. Tokens are resources
/// (written through [`Resources`], read from the catalog's snapshot).
pub struct Identity {
    store: Arc<dyn Store>,
    catalog: Arc<Catalog>,
    resources: Arc<Resources>,
    /// sha256 of the root token (see `EngineConfig::root_token_hash`).
    root_token_hash: Option<String>,
    jwt: Option<JwtConfig>,
    sign_ins: SignInLimits,
    /// Sign-in starts of one client, one at a time.
    turns: Turns,
}

impl Identity {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        catalog: Arc<Catalog>,
        resources: Arc<Resources>,
        root_token_hash: Option<String>,
        jwt: Option<JwtConfig>,
        sign_ins: SignInLimits,
    ) -> Self {
        Self {
            store,
            catalog,
            resources,
            root_token_hash,
            jwt,
            sign_ins,
            turns: Turns::default(),
        }
    }
}
