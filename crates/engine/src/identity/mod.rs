//! The identity part: who a request is (API tokens and JWTs in
//! `tokens.rs`, console sessions in `sessions.rs`, OIDC sign-in in
//! `signin.rs`, its caps in `pending.rs`, the sweep of both in
//! `sweep.rs`), and the rulebook of what each principal may do
//! (`rules.rs`), which every other part asks with the caller's principal.

mod host;
mod pending;
pub(crate) mod rules;
mod sessions;
mod signin;
mod sweep;
mod tokens;

pub use host::HostAccess;
pub(crate) use host::may_use_host;
pub use pending::{SignInLimits, TOO_MANY_SIGN_INS};
pub use rules::{
    Action, ActionKind, Allowance, Collection, acts_in_several, is_operator, may, may_in,
    table as action_table,
};
pub use sessions::{ConsoleSession, SessionOpened};
pub use signin::{SignInPending, SignInStarted, pkce_challenge};
pub use tokens::JwtConfig;

pub(crate) use pending::Turns;
pub(crate) use tokens::{TokenIndex, index};
