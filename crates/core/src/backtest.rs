//! Back-testing a policy on the ledger: the request (a candidate, a window)
//! and the report (what the candidate set would have decided on each
//! recorded call, against what happened). The engine replays the calls;
//! this module only counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Policy;
use crate::limits::BACKTEST_WINDOW_SECONDS;

/// How many call ids a report names for each kind of change.
pub const SAMPLES: usize = 5;

/// `POST /v1/namespaces/{ns}/policies/test`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyTest {
    /// The candidate, evaluated as enforced.
    pub policy: Policy,
    /// The window: calls created this long ago or later (`7d`, `12h`;
    /// default `7d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The policy in force the candidate replaces (default: a policy of
    /// the candidate's name, if any; otherwise it is added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<String>,
}

/// The length of a window: `7d`, or any duration `parse_duration` reads
/// (`12h`, `30m`), within [`BACKTEST_WINDOW_SECONDS`].
pub fn window(text: &str) -> Result<std::time::Duration, String> {
    let length = match text.trim().strip_suffix('d').map(str::parse::<u64>) {
        Some(Ok(days)) => std::time::Duration::from_secs(days.saturating_mul(86_400)),
        Some(Err(_)) => return Err(format!("{text:?} is not a window such as 7d, 12h or 30m")),
        None => crate::meta::parse_duration(text)?,
    };
    match BACKTEST_WINDOW_SECONDS.check_duration("since", length, text) {
        Some(e) => Err(e.message),
        None => Ok(length),
    }
}

/// A decision as the report counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Runs.
    Allow,
    /// Refused.
    Deny,
    /// Waits for a person (approval or user input).
    Defer,
    /// Runs with a changed input.
    Modify,
}

impl Verdict {
    /// The name used in reports and `hookDecisions`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Defer => "defer",
            Verdict::Modify => "modify",
        }
    }

    /// A recorded decision's name as a verdict (`request_user_input` defers).
    pub fn of(decision: &str) -> Option<Verdict> {
        match decision {
            "allow" => Some(Verdict::Allow),
            "deny" => Some(Verdict::Deny),
            "defer" | "request_user_input" => Some(Verdict::Defer),
            "modify" => Some(Verdict::Modify),
            _ => None,
        }
    }

    /// Precedence when several policies decide: deny, defer, modify, allow.
    pub fn rank(self) -> u8 {
        match self {
            Verdict::Deny => 3,
            Verdict::Defer => 2,
            Verdict::Modify => 1,
            Verdict::Allow => 0,
        }
    }
}

/// Why a recorded call could not be judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unjudged {
    /// The record does not keep the input (`observability.logArgs: false`).
    InputWithheld,
    /// A policy reads an input field the record keeps only as `[REDACTED]`.
    RedactedField,
}

impl Unjudged {
    /// The name used in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Unjudged::InputWithheld => "input_withheld",
            Unjudged::RedactedField => "redacted_field",
        }
    }
}

/// What the candidate set would decide, per verdict, plus the calls it
/// could not judge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    /// Would run.
    pub allow: u64,
    /// Would be refused.
    pub deny: u64,
    /// Would wait for a person.
    pub defer: u64,
    /// Would run with a changed input.
    pub modify: u64,
    /// Could not be judged.
    pub unjudged: u64,
}

impl Tally {
    fn count(&mut self, would: Option<Verdict>) {
        *match would {
            Some(Verdict::Allow) => &mut self.allow,
            Some(Verdict::Deny) => &mut self.deny,
            Some(Verdict::Defer) => &mut self.defer,
            Some(Verdict::Modify) => &mut self.modify,
            None => &mut self.unjudged,
        } += 1;
    }
}

/// A count and the first few call ids counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Samples {
    /// How many calls.
    pub count: u64,
    /// The first [`SAMPLES`] of them, in ledger order.
    pub samples: Vec<String>,
}

impl Samples {
    fn add(&mut self, call: &str) {
        self.count += 1;
        if self.samples.len() < SAMPLES {
            self.samples.push(call.to_owned());
        }
    }
}

/// What a back-test found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTestReport {
    /// Calls in the window.
    pub calls: u64,
    /// Over all of them.
    pub total: Tally,
    /// Per tool.
    pub by_tool: BTreeMap<String, Tally>,
    /// Per agent (`(none)` for calls without one).
    pub by_agent: BTreeMap<String, Tally>,
    /// Decisions that differ from what happened, by `happened->would`
    /// (`allow->deny`).
    pub changes: BTreeMap<String, Samples>,
    /// Calls it could not judge, by reason.
    pub unjudged: BTreeMap<String, Samples>,
}

/// One recorded call, judged.
#[derive(Debug, Clone, Copy)]
pub struct Judged<'a> {
    /// The call's id.
    pub call: &'a str,
    /// Its tool.
    pub tool: &'a str,
    /// Its agent, if any.
    pub agent: Option<&'a str>,
    /// What the policies in force decided when it was made.
    pub happened: Verdict,
    /// What the candidate set decides, or why it cannot.
    pub would: Result<Verdict, Unjudged>,
}

impl PolicyTestReport {
    /// Counts one call, in ledger order.
    pub fn add(&mut self, judged: Judged<'_>) {
        self.calls += 1;
        let would = judged.would.ok();
        self.total.count(would);
        self.by_tool
            .entry(judged.tool.to_owned())
            .or_default()
            .count(would);
        self.by_agent
            .entry(judged.agent.unwrap_or("(none)").to_owned())
            .or_default()
            .count(would);
        match judged.would {
            Ok(would) if would != judged.happened => self
                .changes
                .entry(format!("{}->{}", judged.happened.as_str(), would.as_str()))
                .or_default()
                .add(judged.call),
            Ok(_) => {}
            Err(reason) => self
                .unjudged
                .entry(reason.as_str().to_owned())
                .or_default()
                .add(judged.call),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_tallied_per_tool_and_agent_with_sampled_changes() {
        let mut report = PolicyTestReport::default();
        let judge = |call: &'static str, agent, happened, would| Judged {
            call,
            tool: "t",
            agent,
            happened,
            would,
        };
        for i in 0..7 {
            let call: &'static str = ["c0", "c1", "c2", "c3", "c4", "c5", "c6"][i];
            report.add(judge(call, Some("bot"), Verdict::Allow, Ok(Verdict::Deny)));
        }
        report.add(judge("same", None, Verdict::Defer, Ok(Verdict::Defer)));
        report.add(judge(
            "hidden",
            None,
            Verdict::Allow,
            Err(Unjudged::InputWithheld),
        ));
        assert_eq!(report.calls, 9);
        assert_eq!(
            report.total,
            Tally {
                allow: 0,
                deny: 7,
                defer: 1,
                modify: 0,
                unjudged: 1
            }
        );
        assert_eq!(report.by_agent["bot"].deny, 7);
        assert_eq!(report.by_agent["(none)"].defer, 1);
        assert_eq!(report.by_tool["t"].unjudged, 1);
        let changed = &report.changes["allow->deny"];
        assert_eq!(changed.count, 7);
        assert_eq!(changed.samples, ["c0", "c1", "c2", "c3", "c4"]);
        assert_eq!(
            report.changes.len(),
            1,
            "an unchanged decision is no change"
        );
        assert_eq!(report.unjudged["input_withheld"].samples, ["hidden"]);
    }

    #[test]
    fn windows_are_days_or_durations() {
        assert_eq!(window("7d"), Ok(std::time::Duration::from_secs(7 * 86_400)));
        assert_eq!(
            window("12h"),
            Ok(std::time::Duration::from_secs(12 * 3_600))
        );
        assert!(window("xd").is_err());
        assert!(window("soon").is_err());
        assert!(window("400d").is_ok());
        for out_of_range in ["401d", "100000000d", "18446744073709551615d", "0d", "0s"] {
            let e = window(out_of_range).unwrap_err();
            assert!(
                e.starts_with("must be between 1 and"),
                "{out_of_range}: {e}"
            );
        }
    }

    #[test]
    fn recorded_decision_names_read_as_verdicts() {
        assert_eq!(Verdict::of("request_user_input"), Some(Verdict::Defer));
        assert_eq!(Verdict::of("modify"), Some(Verdict::Modify));
        assert_eq!(Verdict::of("quarantine"), None);
        assert!(Verdict::Deny.rank() > Verdict::Defer.rank());
    }
}
