//! The engine's public face: one accessor per part, so that a caller reads
//! `engine.approvals().approve(..)` and the engine's own type stays small.
//! A part with walls (resources, identity, audit, artifacts, vault,
//! policies) is a type of its own that `Engine::new` builds, handed out by
//! reference. The others (calls, approvals, mcp) are still borrowed views
//! of the engine (a handle holding nothing but the engine, made per use),
//! until each becomes a type of its own.

use crate::policies::Policies;
use crate::{Approvals, Artifacts, Audit, Calls, Engine, Identity, Mcp, Resources, Vault};

/// The parts with walls: each a type owning its state, built by
/// `Engine::new` with the parts it needs, and handed out by reference.
impl Engine {
    /// Tool calls: make, submit, batch, hook, resume, replay, read and follow them.
    pub fn calls(&self) -> &Calls {
        &self.inner.calls
    }

    /// Approvals: the inbox, and the decisions people make.
    pub fn approvals(&self) -> &Approvals {
        &self.inner.approvals
    }

    /// The tamper-evident audit: its entries, checkpoints and verification.
    pub fn audit(&self) -> &Audit {
        &self.inner.audit
    }

    /// Upstream credentials in the token vault.
    pub fn vault(&self) -> &Vault {
        &self.inner.vault
    }

    /// Policies tried before they are enforced: back-testing on the ledger.
    pub fn policies(&self) -> &Policies {
        &self.inner.policies
    }

    /// Configured resources (Tools, Policies, Endpoints, Budgets, Namespaces...).
    pub fn resources(&self) -> &Resources {
        &self.inner.resources
    }

    /// Who a request is: tokens, console sessions, OIDC sign-in.
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// MCP: upstream servers, the front's sessions, relays to attached clients.
    pub fn mcp(&self) -> &Mcp {
        &self.inner.mcp
    }

    /// Artifacts: large results kept by handle, and the tools that read them.
    pub fn artifacts(&self) -> &Artifacts {
        &self.inner.artifacts
    }
}
