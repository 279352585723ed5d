//! Walking a namespace's chain: each entry must follow the one before and
//! hash to what it says, and must extend every checkpoint the walk was given.
//! Used by the server's verify and by `joch audit verify --bundle`, offline.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::{AuditEntry, GENESIS, chain_hash};
use crate::Time;

/// What kind of problem a verification found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// An entry does not follow the one before: entries were removed from
    /// the middle of the chain, or reordered.
    Gap,
    /// An entry's hash does not match its content: the entry was edited.
    EntryEdited,
    /// A record no longer matches its latest entry: the record was edited.
    Edited,
    /// A record the chain names is gone: it was deleted.
    Deleted,
    /// A settled record no entry names, settled after the chain's newest
    /// entry: what cutting the chain's newest entries leaves behind.
    MissingEntry,
    /// A settled record no entry names, settled before the chain's newest
    /// entry: joch appends the entry in the record's own write, so the row
    /// was put in the database behind joch's back.
    ForgedRecord,
    /// The chain ends before an entry a checkpoint signed: its newest
    /// entries were cut.
    Truncated,
    /// The chain's entry at a checkpoint's number is missing or is not the
    /// one the checkpoint signed: the chain was rewritten.
    CheckpointMismatch,
}

impl FindingKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::Gap => "gap",
            FindingKind::EntryEdited => "entry_edited",
            FindingKind::Edited => "edited",
            FindingKind::Deleted => "deleted",
            FindingKind::MissingEntry => "missing_entry",
            FindingKind::ForgedRecord => "forged_record",
            FindingKind::Truncated => "truncated",
            FindingKind::CheckpointMismatch => "checkpoint_mismatch",
        }
    }
}

/// One problem a verification found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// What is wrong.
    pub kind: FindingKind,
    /// The entry at fault, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The record at fault, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For people.
    pub message: String,
}

/// The latest entry naming a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestEntry {
    /// Its number.
    pub seq: u64,
    /// The record's digest it holds.
    pub digest: String,
}

/// Checks a chain fed to it entry by entry, oldest first.
#[derive(Debug, Default)]
pub struct ChainWalk {
    prev: String,
    last_seq: u64,
    entries: u64,
    newest_at: Option<Time>,
    latest: HashMap<(String, String), LatestEntry>,
    checkpoints: BTreeMap<u64, (String, bool)>,
    findings: Vec<Finding>,
}

/// What a walk found.
#[derive(Debug, Default)]
pub struct WalkedChain {
    /// Entries walked.
    pub entries: u64,
    /// The last entry's number (0 for an empty chain).
    pub last_seq: u64,
    /// The newest entry's time.
    pub newest_at: Option<Time>,
    /// Per `(kind, name)`, the latest entry naming it.
    pub latest: HashMap<(String, String), LatestEntry>,
    /// Every problem, in chain order.
    pub findings: Vec<Finding>,
}

impl ChainWalk {
    /// A walk from the namespace's first entry.
    pub fn new() -> Self {
        Self {
            prev: GENESIS.to_owned(),
            ..Self::default()
        }
    }

    /// Requires that entry `seq` exists and hashes to `head` (a checkpoint
    /// whose signature the caller checked).
    pub fn expect(&mut self, seq: u64, head: &str) {
        self.checkpoints.insert(seq, (head.to_owned(), false));
    }

    /// Checks the next entry. After a problem the walk goes on from this
    /// entry, so that every problem is reported, not only the first.
    pub fn push(&mut self, seq: u64, prev: &str, hash: &str, body: &str) {
        self.entries += 1;
        if seq != self.last_seq + 1 || prev != self.prev {
            self.found(
                FindingKind::Gap,
                seq,
                format!(
                    "entry {seq} does not follow entry {}: entries were removed or reordered",
                    self.last_seq
                ),
            );
        }
        if chain_hash(prev, body) != hash {
            self.found(
                FindingKind::EntryEdited,
                seq,
                format!("entry {seq} was edited: its hash does not match its content"),
            );
        }
        if let Some((head, seen)) = self.checkpoints.get_mut(&seq) {
            *seen = true;
            if head != hash {
                let message = format!("entry {seq} is not the one a checkpoint signed");
                self.found(FindingKind::CheckpointMismatch, seq, message);
            }
        }
        if let Ok(entry) = serde_json::from_str::<AuditEntry>(body) {
            self.newest_at = Some(entry.at);
            let latest = LatestEntry {
                seq,
                digest: entry.digest,
            };
            self.latest.insert((entry.kind, entry.name), latest);
        }
        self.prev = hash.to_owned();
        self.last_seq = seq;
    }

    /// Ends the walk: checkpoints past the last entry mean a cut tail.
    pub fn finish(mut self) -> WalkedChain {
        let unseen: Vec<u64> = self
            .checkpoints
            .iter()
            .filter(|(_, (_, seen))| !seen)
            .map(|(seq, _)| *seq)
            .collect();
        let last = self.last_seq;
        for seq in unseen.iter().filter(|s| **s <= last) {
            let message = format!("entry {seq}, which a checkpoint signed, is missing");
            self.found(FindingKind::CheckpointMismatch, *seq, message);
        }
        if let Some(signed) = unseen.iter().copied().filter(|s| *s > last).max() {
            let message = format!(
                "the chain ends at entry {last} but a checkpoint signed entry {signed}: its newest entries were cut"
            );
            self.found(FindingKind::Truncated, signed, message);
        }
        WalkedChain {
            entries: self.entries,
            last_seq: self.last_seq,
            newest_at: self.newest_at,
            latest: self.latest,
            findings: self.findings,
        }
    }

    fn found(&mut self, kind: FindingKind, seq: u64, message: String) {
        self.findings.push(Finding {
            kind,
            seq: Some(seq),
            name: None,
            message,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `n` entries as (seq, prev, hash, body).
    fn chain(n: u64) -> Vec<(u64, String, String, String)> {
        let mut prev = GENESIS.to_owned();
        (1..=n)
            .map(|seq| {
                let body = format!("{{\"n\":{seq}}}");
                let hash = chain_hash(&prev, &body);
                let line = (seq, prev.clone(), hash.clone(), body);
                prev = hash;
                line
            })
            .collect()
    }

    /// Name, chain, checkpoints, findings expected.
    type Case<'a> = (
        &'a str,
        &'a [(u64, String, String, String)],
        Vec<(u64, &'a str)>,
        Vec<FindingKind>,
    );

    fn walk(
        lines: &[(u64, String, String, String)],
        checkpoints: &[(u64, &str)],
    ) -> Vec<FindingKind> {
        let mut walk = ChainWalk::new();
        for (seq, head) in checkpoints {
            walk.expect(*seq, head);
        }
        for (seq, prev, hash, body) in lines {
            walk.push(*seq, prev, hash, body);
        }
        walk.finish().findings.iter().map(|f| f.kind).collect()
    }

    #[test]
    fn each_tampering_is_named() {
        let whole = chain(4);
        let head3 = whole[2].2.clone();
        let mut edited = whole.clone();
        edited[1].3 = "{\"n\":9}".to_owned();
        let mut middle = whole.clone();
        middle.remove(1);
        let cut = whole[..2].to_vec();
        let cases: [Case; 6] = [
            ("intact", &whole, vec![(3, head3.as_str())], vec![]),
            ("edited", &edited, vec![], vec![FindingKind::EntryEdited]),
            ("middle removed", &middle, vec![], vec![FindingKind::Gap]),
            ("tail cut, unsigned", &cut, vec![], vec![]),
            (
                "tail cut, signed",
                &cut,
                vec![(3, head3.as_str())],
                vec![FindingKind::Truncated],
            ),
            (
                "rewritten",
                &whole,
                vec![(3, "0000")],
                vec![FindingKind::CheckpointMismatch],
            ),
        ];
        for (name, lines, checkpoints, expected) in cases {
            assert_eq!(walk(lines, &checkpoints), expected, "{name}");
        }
    }

    #[test]
    fn a_removed_checkpointed_entry_is_named() {
        let mut lines = chain(3);
        let head2 = lines[1].2.clone();
        lines.remove(1);
        assert_eq!(
            walk(&lines, &[(2, head2.as_str())]),
            [FindingKind::Gap, FindingKind::CheckpointMismatch]
        );
    }
}
