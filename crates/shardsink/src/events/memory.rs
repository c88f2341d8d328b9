//! An event store in memory, for tests: the same contract as the local
//! store and the DynamoDB store ([`store`](super::store)), written as
//! plainly as possible — every accepted copy in one list.

use std::sync::Mutex;

use super::rule::{AcceptedCopy, Decision, EventKey, Rule};
use super::store::{Candidate, Lineage, precedes_in_shard};

/// Accepted copies in a list, with their event keys.
#[derive(Debug, Default)]
pub struct MemoryStore {
    copies: Mutex<Vec<(EventKey, AcceptedCopy)>>,
}

impl MemoryStore {
    /// Decides `candidates` in order and keeps the accepted ones.
    pub fn decide(
        &self,
        lineage: &Lineage,
        rule: &Rule,
        candidates: &[Candidate],
    ) -> Vec<Decision> {
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        candidates
            .iter()
            .map(|candidate| {
                let prior: Vec<&AcceptedCopy> = copies
                    .iter()
                    .filter(|(key, copy)| {
                        key.id == candidate.key.id
                            && if copy.copy.shard_id == lineage.shard_id {
                                precedes_in_shard(&copy.copy, &candidate.copy)
                            } else {
                                lineage.ancestors.contains(&copy.copy.shard_id)
                            }
                    })
                    .map(|(_, copy)| copy)
                    .collect();
                let decision = rule.decide(&candidate.key, candidate.arrival_millis, prior);
                if decision.accepts() {
                    let copy = candidate.accepted();
                    if !copies.iter().any(|(_, c)| c.copy == copy.copy) {
                        copies.push((candidate.key, copy));
                    }
                }
                decision
            })
            .collect()
    }

    /// Keeps copies decided elsewhere (once each).
    pub fn insert(&self, new: &[(EventKey, AcceptedCopy)]) {
        let mut copies = self.copies.lock().unwrap_or_else(|e| e.into_inner());
        for (key, copy) in new {
            if !copies.iter().any(|(_, c)| c.copy == copy.copy) {
                copies.push((*key, copy.clone()));
            }
        }
    }
}
