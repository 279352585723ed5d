//! The identity part: who a request is (API tokens and JWTs in
//! `tokens.rs`, console sessions in `sessions.rs`, OIDC sign-in in
//! `signin.rs`), and the rulebook of what each principal may do
//! (`rules.rs`), which every other part asks with the caller's principal.

pub(crate) mod rules;
mod sessions;
mod signin;
mod tokens;

pub use rules::may_read;
pub use sessions::{ConsoleSession, SessionOpened};
pub use signin::{SIGN_IN_TTL, SignInPending, SignInStarted, pkce_challenge};
pub use tokens::JwtConfig;

pub(crate) use tokens::{TokenIndex, index};
