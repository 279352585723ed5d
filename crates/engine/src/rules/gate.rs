//! The gate: one typed question, [`may`], that every entry point of the
//! engine asks with the caller's principal before it reads or changes
//! anything. Which role may take which action is data ([`ActionKind::allowance`]),
//! so that `docs/identity.md` prints the same table (a test compares them).
//!
//! The rules that depend on more than the role stay beside it in the
//! rulebook and are asked after the gate: whether a tool exists for the
//! principal (`sees`), who decides a given approval (`decider`), whose
//! standing decision stands for a call (`stands_for`).

use joch_core::token::Role;
use joch_core::{Principal, PrincipalKind, ToolCall};

use crate::EngineError;

/// Refuses a principal bound to another namespace, as if the namespace's
/// resources did not exist.
pub(crate) fn acts_in(principal: &Principal, namespace: &str) -> Result<(), EngineError> {
    if principal.namespaces.contains(namespace) {
        return Ok(());
    }
    Err(EngineError::NotFound {
        kind: crate::NotFoundKind::Namespace,
        name: namespace.to_owned(),
    })
}

/// True when `principal` acts in more than one namespace (the root token
/// and the local caller act in every one; a JWT may claim several), so
/// that a surface showing one namespace at a time offers it the others.
pub fn acts_in_several(principal: &Principal) -> bool {
    principal.namespaces.are_several()
}

/// The operator: whoever started `joch serve`, i.e. the local caller (no
/// authentication) or the root token. Only the operator decides what runs
/// on joch's host and what it reads there, and reads what concerns every
/// namespace at once.
pub fn is_operator(by: &Principal) -> bool {
    matches!(by.kind, PrincipalKind::Local | PrincipalKind::Root)
}

/// What a namespace holds that a principal reads or writes, named by the
/// plural its REST path uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collection {
    /// Tools.
    Tools,
    /// The ledger's calls.
    ToolCalls,
    /// Executions, their events and their artifact tools.
    Executions,
    /// Approvals.
    Approvals,
    /// Execution contexts of calls.
    CallContexts,
    /// Artifacts.
    Artifacts,
    /// Policies.
    Policies,
    /// Standing decisions.
    StandingApprovals,
    /// Endpoints.
    Endpoints,
    /// Budgets.
    Budgets,
    /// Upstream MCP servers.
    McpServers,
    /// The namespace's own settings.
    Namespaces,
    /// API tokens.
    Tokens,
    /// Upstream credentials in the vault.
    Credentials,
    /// The audit: entries, checkpoints, verification.
    Audit,
    /// Cost totals.
    Costs,
}

impl Collection {
    /// Every collection, in the order the docs list them.
    pub const ALL: &'static [Collection] = &[
        Collection::Tools,
        Collection::ToolCalls,
        Collection::Executions,
        Collection::Approvals,
        Collection::CallContexts,
        Collection::Artifacts,
        Collection::Policies,
        Collection::StandingApprovals,
        Collection::Endpoints,
        Collection::Budgets,
        Collection::McpServers,
        Collection::Namespaces,
        Collection::Tokens,
        Collection::Credentials,
        Collection::Audit,
        Collection::Costs,
    ];

    /// The plural (REST path segment).
    pub fn as_str(self) -> &'static str {
        match self {
            Collection::Tools => "tools",
            Collection::ToolCalls => "toolcalls",
            Collection::Executions => "executions",
            Collection::Approvals => "approvals",
            Collection::CallContexts => "callcontexts",
            Collection::Artifacts => "artifacts",
            Collection::Policies => "policies",
            Collection::StandingApprovals => "standingapprovals",
            Collection::Endpoints => "endpoints",
            Collection::Budgets => "budgets",
            Collection::McpServers => "mcpservers",
            Collection::Namespaces => "namespaces",
            Collection::Tokens => "tokens",
            Collection::Credentials => "credentials",
            Collection::Audit => "audit",
            Collection::Costs => "costs",
        }
    }

    /// The collection of a plural (a resource's `Object::PLURAL`).
    pub fn parse(plural: &str) -> Option<Collection> {
        Collection::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == plural)
    }

    /// Whether clients write it (the ledger's records, the audit and costs
    /// are joch's).
    pub fn written(self) -> bool {
        !matches!(
            self,
            Collection::ToolCalls
                | Collection::Approvals
                | Collection::CallContexts
                | Collection::Artifacts
                | Collection::Audit
                | Collection::Costs
        )
    }

    /// What an `agent` reads: what it calls tools with and what its calls made.
    fn agent_reads(self) -> bool {
        matches!(
            self,
            Collection::Tools
                | Collection::ToolCalls
                | Collection::Executions
                | Collection::Approvals
                | Collection::CallContexts
                | Collection::Artifacts
        )
    }
}

/// What a principal asks to do. The calls it names let the gate tell a
/// principal's own calls from others'.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    /// Call a tool (REST, MCP, hooks, batches, artifact tools).
    CallTool,
    /// Cancel `call`.
    CancelCall(&'a ToolCall),
    /// Report the result of hook-mode `call`.
    ReportResult(&'a ToolCall),
    /// Finish an execution.
    CompleteExecution,
    /// Decide an approval (who decides which one is `rules::decider`'s).
    DecideApproval,
    /// Decide "always": a standing decision for a tool's later calls.
    DecideStanding,
    /// Change a recorded call's labels.
    RelabelCall,
    /// Replay a recorded call.
    ReplayCall,
    /// Settle an `Unknown` call.
    ResolveCall,
    /// Accept an upstream tool's changed definition.
    AcceptToolChange,
    /// Try policies on the ledger (back-testing).
    BackTest,
    /// Read a collection.
    Read(Collection),
    /// Create, replace or delete in a collection.
    Write(Collection),
    /// Read the process's metrics, which name every namespace.
    ReadMetrics,
}

/// An [`Action`] without the calls it names: a row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// [`Action::CallTool`].
    CallTool,
    /// [`Action::CancelCall`].
    CancelCall,
    /// [`Action::ReportResult`].
    ReportResult,
    /// [`Action::CompleteExecution`].
    CompleteExecution,
    /// [`Action::DecideApproval`].
    DecideApproval,
    /// [`Action::DecideStanding`].
    DecideStanding,
    /// [`Action::RelabelCall`].
    RelabelCall,
    /// [`Action::ReplayCall`].
    ReplayCall,
    /// [`Action::ResolveCall`].
    ResolveCall,
    /// [`Action::AcceptToolChange`].
    AcceptToolChange,
    /// [`Action::BackTest`].
    BackTest,
    /// [`Action::Read`].
    Read(Collection),
    /// [`Action::Write`].
    Write(Collection),
    /// [`Action::ReadMetrics`].
    ReadMetrics,
}

/// Whether a role may take an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    /// Yes.
    Yes,
    /// Only on the calls the principal made.
    Own,
    /// No.
    No,
}

impl Allowance {
    /// As the docs' table writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Allowance::Yes => "yes",
            Allowance::Own => "own calls",
            Allowance::No => "no",
        }
    }
}

impl ActionKind {
    /// Every action, in the order of the docs' table.
    pub fn all() -> Vec<ActionKind> {
        let mut all = vec![
            ActionKind::CallTool,
            ActionKind::CancelCall,
            ActionKind::ReportResult,
            ActionKind::CompleteExecution,
            ActionKind::DecideApproval,
            ActionKind::DecideStanding,
            ActionKind::RelabelCall,
            ActionKind::ReplayCall,
            ActionKind::ResolveCall,
            ActionKind::AcceptToolChange,
            ActionKind::BackTest,
        ];
        all.extend(Collection::ALL.iter().map(|c| ActionKind::Read(*c)));
        all.extend(
            Collection::ALL
                .iter()
                .filter(|c| c.written())
                .map(|c| ActionKind::Write(*c)),
        );
        all.push(ActionKind::ReadMetrics);
        all
    }

    /// The action's name in the docs and in refusals.
    pub fn name(self) -> String {
        let fixed = match self {
            ActionKind::CallTool => "call tools",
            ActionKind::CancelCall => "cancel calls",
            ActionKind::ReportResult => "report hook results",
            ActionKind::CompleteExecution => "complete executions",
            ActionKind::DecideApproval => "decide approvals",
            ActionKind::DecideStanding => "decide approvals always",
            ActionKind::RelabelCall => "relabel calls",
            ActionKind::ReplayCall => "replay calls",
            ActionKind::ResolveCall => "resolve calls",
            ActionKind::AcceptToolChange => "accept upstream tool definitions",
            ActionKind::BackTest => "back-test policies",
            ActionKind::Read(c) => return format!("read {c}", c = c.as_str()),
            ActionKind::Write(Collection::Tokens) => "manage tokens",
            ActionKind::Write(Collection::Credentials) => "manage credentials",
            ActionKind::Write(c) => return format!("write {c}", c = c.as_str()),
            ActionKind::ReadMetrics => "read /metrics",
        };
        fixed.to_owned()
    }

    /// Whether `role` may take this action. The operator (local caller,
    /// root token) may take every action.
    pub fn allowance(self, role: Role) -> Allowance {
        use Allowance::{No, Own, Yes};
        match (self, role) {
            (ActionKind::ReadMetrics, _) => No,
            (_, Role::Admin) => Yes,
            (ActionKind::CallTool | ActionKind::CompleteExecution, _) => Yes,
            (ActionKind::CancelCall | ActionKind::ReportResult, _) => Own,
            (ActionKind::DecideApproval | ActionKind::DecideStanding, Role::Approver) => Yes,
            (ActionKind::Read(c), Role::Agent) if c.agent_reads() => Yes,
            (ActionKind::Read(Collection::Tokens | Collection::Credentials), _) => No,
            (ActionKind::Read(_), Role::Approver) => Yes,
            _ => No,
        }
    }
}

/// The role table as docs/identity.md prints it (a test keeps the two
/// equal): one row per action, one column per role, and the operator's.
pub fn table() -> String {
    let mut out =
        String::from("| action | agent | approver | admin | operator |\n|---|---|---|---|---|\n");
    for kind in ActionKind::all() {
        let cell = |role| kind.allowance(role).as_str();
        out.push_str(&format!(
            "| {} | {} | {} | {} | yes |\n",
            kind.name(),
            cell(Role::Agent),
            cell(Role::Approver),
            cell(Role::Admin),
        ));
    }
    out
}

impl Action<'_> {
    /// The row of the table this action is.
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::CallTool => ActionKind::CallTool,
            Action::CancelCall(_) => ActionKind::CancelCall,
            Action::ReportResult(_) => ActionKind::ReportResult,
            Action::CompleteExecution => ActionKind::CompleteExecution,
            Action::DecideApproval => ActionKind::DecideApproval,
            Action::DecideStanding => ActionKind::DecideStanding,
            Action::RelabelCall => ActionKind::RelabelCall,
            Action::ReplayCall => ActionKind::ReplayCall,
            Action::ResolveCall => ActionKind::ResolveCall,
            Action::AcceptToolChange => ActionKind::AcceptToolChange,
            Action::BackTest => ActionKind::BackTest,
            Action::Read(c) => ActionKind::Read(*c),
            Action::Write(c) => ActionKind::Write(*c),
            Action::ReadMetrics => ActionKind::ReadMetrics,
        }
    }

    /// The call whose maker an [`Allowance::Own`] is compared with.
    fn call(&self) -> Option<&ToolCall> {
        match self {
            Action::CancelCall(call) | Action::ReportResult(call) => Some(call),
            _ => None,
        }
    }
}

/// Refuses `by` an action its role does not allow (`403 forbidden`), the
/// one question every surface's request reaches the engine with. The
/// operator may do anything; a principal may take an [`Allowance::Own`]
/// action on a call it made (or one recorded without a maker).
pub fn may(by: &Principal, action: &Action<'_>) -> Result<(), EngineError> {
    let kind = action.kind();
    if is_operator(by) {
        return Ok(());
    }
    let allowed = match kind.allowance(by.role) {
        Allowance::Yes => true,
        Allowance::Own => action
            .call()
            .is_none_or(|call| call.status.principal.as_ref().is_none_or(|p| by.is(p))),
        Allowance::No => false,
    };
    if allowed {
        return Ok(());
    }
    Err(EngineError::Forbidden(refusal(by, action)))
}

/// [`acts_in`] `namespace`, then [`may`]: the question of every namespaced
/// entry point.
pub fn may_in(by: &Principal, namespace: &str, action: &Action<'_>) -> Result<(), EngineError> {
    acts_in(by, namespace)?;
    may(by, action)
}

/// Why `by` may not take `action`, as the rulebook has always said it.
fn refusal(by: &Principal, action: &Action<'_>) -> String {
    let role = by.role.as_str();
    match action {
        Action::CancelCall(call) => format!(
            "only the principal that made call {:?} (or an admin) may cancel it",
            call.metadata.name
        ),
        Action::ReportResult(call) => format!(
            "only the principal that made call {:?} may report its result",
            call.metadata.name
        ),
        Action::ReadMetrics => "only the operator (the root token) may read /metrics".to_owned(),
        other => format!(
            "a principal with role {role} cannot {}",
            other.kind().name()
        ),
    }
}

/// [`may_in`] to read (`write` false) or write the collection named
/// `plural` (a resource's `Object::PLURAL`); a kind that belongs to no
/// collection is the operator's alone.
pub(crate) fn may_touch(
    by: &Principal,
    namespace: &str,
    plural: &str,
    write: bool,
) -> Result<(), EngineError> {
    acts_in(by, namespace)?;
    match (Collection::parse(plural), write) {
        (Some(c), false) => may(by, &Action::Read(c)),
        (Some(c), true) => may(by, &Action::Write(c)),
        (None, _) if is_operator(by) => Ok(()),
        (None, _) => Err(EngineError::Forbidden(format!(
            "a principal with role {} cannot touch {plural}",
            by.role.as_str()
        ))),
    }
}

#[cfg(test)]
mod tests;
