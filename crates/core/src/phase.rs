//! The phases of a ToolCall and the only moves allowed between them.
//!
//! ```text
//! Pending ──► AwaitingApproval ──► Running ──► Succeeded | Failed
//!    │              │                 │
//!    │              ├─► Denied        ├─► Denied    (the result hook withheld the output)
//!    │              ├─► TimedOut      ├─► TimedOut
//!    │              └─► Failed        └─► Unknown   (outcome lost: crash, missing hook result)
//!    ├─► Running
//!    └─► Failed | Denied | Skipped    (never ran)
//! ```
//! A terminal phase never changes, except `Unknown`, which a late, authoritative
//! outcome (a hook result arriving after its deadline, an operator's
//! reconciliation) may still settle to `Succeeded` or `Failed`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a ToolCall is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Recorded; not yet decided on or started.
    #[default]
    Pending,
    /// Held until a person approves or denies it.
    AwaitingApproval,
    /// The backend has been (or is being) invoked: its side effect may have happened.
    Running,
    /// The backend returned a result.
    Succeeded,
    /// The call was rejected before running (invalid input) or the backend failed.
    Failed,
    /// A policy or an approver refused the call; the backend never ran.
    Denied,
    /// The backend or the approval did not answer in time.
    TimedOut,
    /// Not run because an earlier call in its batch stopped the batch.
    Skipped,
    /// The call may have run but its outcome was lost.
    Unknown,
}

/// A move the state machine refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a tool call cannot move from {from} to {to}")]
pub struct IllegalTransition {
    /// The phase the call is in.
    pub from: Phase,
    /// The phase that was asked for.
    pub to: Phase,
}

impl Phase {
    /// Every phase, in declaration order.
    pub const ALL: [Phase; 9] = [
        Phase::Pending,
        Phase::AwaitingApproval,
        Phase::Running,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Denied,
        Phase::TimedOut,
        Phase::Skipped,
        Phase::Unknown,
    ];

    /// True once the call has settled and its outcome is final.
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            Phase::Pending | Phase::AwaitingApproval | Phase::Running
        )
    }

    /// Whether the state machine allows moving from `self` to `to`.
    pub fn can_move_to(self, to: Phase) -> bool {
        use Phase::*;
        matches!(
            (self, to),
            (
                Pending,
                AwaitingApproval | Running | Failed | Denied | Skipped | Unknown
            ) | (
                AwaitingApproval,
                Running | Failed | Denied | TimedOut | Skipped | Unknown
            ) | (Running, Succeeded | Failed | Denied | TimedOut | Unknown)
                | (Unknown, Succeeded | Failed)
        )
    }

    /// Checks a move, returning the new phase or the refusal.
    pub fn move_to(self, to: Phase) -> Result<Phase, IllegalTransition> {
        if self.can_move_to(to) {
            Ok(to)
        } else {
            Err(IllegalTransition { from: self, to })
        }
    }

    /// The name used in the API and the store, e.g. `AwaitingApproval`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::AwaitingApproval => "AwaitingApproval",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Denied => "Denied",
            Phase::TimedOut => "TimedOut",
            Phase::Skipped => "Skipped",
            Phase::Unknown => "Unknown",
        }
    }

    /// Parses the API name of a phase.
    pub fn parse(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Phase::{self, *};

    /// Every allowed move; anything not listed must be refused.
    const ALLOWED: &[(Phase, Phase)] = &[
        (Pending, AwaitingApproval),
        (Pending, Running),
        (Pending, Failed),
        (Pending, Denied),
        (Pending, Skipped),
        (Pending, Unknown),
        (AwaitingApproval, Running),
        (AwaitingApproval, Failed),
        (AwaitingApproval, Denied),
        (AwaitingApproval, TimedOut),
        (AwaitingApproval, Skipped),
        (AwaitingApproval, Unknown),
        (Running, Succeeded),
        (Running, Failed),
        (Running, Denied),
        (Running, TimedOut),
        (Running, Unknown),
        (Unknown, Succeeded),
        (Unknown, Failed),
    ];

    #[test]
    fn transition_table_is_exactly_the_allowed_moves() {
        for from in Phase::ALL {
            for to in Phase::ALL {
                let expected = ALLOWED.contains(&(from, to));
                assert_eq!(from.can_move_to(to), expected, "{from} -> {to}");
                assert_eq!(from.move_to(to).is_ok(), expected, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn settled_phases_never_go_back_to_running() {
        for from in Phase::ALL.into_iter().filter(|p| p.is_terminal()) {
            assert!(!from.can_move_to(Running), "{from}");
            assert!(!from.can_move_to(Pending), "{from}");
        }
    }

    #[test]
    fn names_round_trip() {
        for p in Phase::ALL {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
        assert_eq!(Phase::parse("running"), None);
    }
}
