//! The engine's public face: one handle per part, each a borrowed view of
//! the engine whose methods are that part's operations, so that a caller
//! reads `engine.approvals().approve(..)` and the engine's own type stays
//! small. A handle holds nothing but the engine; it is made per use.

use std::ops::Deref;

use crate::Engine;

macro_rules! parts {
    ($($(#[$doc:meta])* $accessor:ident -> $part:ident;)*) => {$(
        $(#[$doc])*
        pub struct $part<'e>(pub(crate) &'e Engine);

        impl Deref for $part<'_> {
            type Target = Engine;

            fn deref(&self) -> &Engine {
                self.0
            }
        }

        impl Engine {
            $(#[$doc])*
            pub fn $accessor(&self) -> $part<'_> {
                $part(self)
            }
        }
    )*};
}

parts! {
    /// Tool calls: make, submit, batch, hook, resume, replay, read and follow them.
    calls -> Calls;
    /// Approvals: the inbox, and the decisions people make.
    approvals -> Approvals;
    /// Configured resources (Tools, Policies, Endpoints, Budgets, Namespaces...).
    resources -> Resources;
    /// MCP: upstream servers, the front's sessions, relays to attached clients.
    mcp -> Mcp;
    /// Who a request is: tokens, console sessions, OIDC sign-in.
    identity -> Identity;
    /// The tamper-evident audit: its entries, checkpoints and verification.
    audit -> Audit;
    /// Artifacts: large results kept by handle, and the tools that read them.
    artifacts -> Artifacts;
    /// Policies tried before they are enforced: back-testing on the ledger.
    policies -> Policies;
    /// Upstream credentials in the token vault.
    vault -> Vault;
}
