//! E2 (`--event-id` with `--deep` and `--stream`; docs/DESIGN.md, "Each
//! event once"): the main and error prefixes hold at most one copy of an
//! event per window. Without I/O: the gap check reads the stream
//! (`stream.rs`) and hands each shard's records to its [`ShardEvents`].
//!
//! Each user record read from the stream in a batch decided with the
//! settings checked gets its [`EventKey`] from the daemon's own
//! [`EventIdSource::key`](crate::events::id::EventIdSource::key). A record is
//! *kept* when it is in no duplicates object. Then:
//! - no two kept records with the same key (id, and payload with
//!   `--event-fingerprint payload`) arrived within `--event-dedup-window` of
//!   each other in one scope — a shard and its ancestors (`local`), or the
//!   stream (`dynamodb`);
//! - every duplicate has an id, and its `duplicateOf` names a kept record
//!   of the same key that arrived within the window, in its scope (when
//!   that record was read).
//!
//! Only batches whose decisions object was made with the settings checked
//! count: records archived before event deduplication was on, or decided
//! with other settings, were never compared with these (their window
//! started empty).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sequence_range::RangeSet;

use super::keys::ArchivedKey;
use crate::aws::ShardInfo;
use crate::config::EventSettings;
use crate::events::rule::{CopyRef, EventKey, Rule};
use crate::events::store::ancestors;
use crate::read::record::ShardRecord;

/// One user record read from the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EventCopy {
    /// `None`: the record has no id with these settings.
    pub(super) key: Option<EventKey>,
    /// `ApproximateArrivalTimestamp`, ms since the Unix epoch.
    pub(super) arrival_millis: i64,
    pub(super) copy: CopyRef,
}

/// A shard's user records as the gap check reads them, with their event
/// keys: only records of the shard's batches decided with the settings.
#[derive(Debug)]
pub(super) struct ShardEvents {
    settings: EventSettings,
    shard_id: Arc<str>,
    decided: RangeSet,
    copies: Vec<EventCopy>,
}

impl ShardEvents {
    pub(super) fn new(settings: &EventSettings, shard_id: &str, decided: RangeSet) -> Self {
        Self {
            settings: settings.clone(),
            shard_id: Arc::from(shard_id),
            decided,
            copies: Vec::new(),
        }
    }

    /// The next record of the shard.
    pub(super) fn observe(&mut self, record: &ShardRecord) {
        if !self.decided.contains(&record.sequence_number) {
            return;
        }
        for user in record.views(&self.shard_id) {
            self.copies.push(EventCopy {
                key: self.settings.source.key(&user, self.settings.fingerprint),
                arrival_millis: user.arrival_millis,
                copy: CopyRef {
                    shard_id: self.shard_id.clone(),
                    sequence_number: record.sequence_number.clone(),
                    sub_sequence_number: user.sub_sequence_number,
                },
            });
        }
    }

    pub(super) fn finish(self) -> Vec<EventCopy> {
        self.copies
    }
}

/// The committed batches (those `is_committed` accepts) whose decisions
/// object was made with the settings `description` (its
/// `x-amz-meta-shardsink-format`, given beside each object's key), by
/// shard; and the keys of the decisions objects of committed batches made
/// with other settings.
pub(super) fn decided_batches<'a>(
    decisions: impl IntoIterator<Item = (&'a ArchivedKey, Option<&'a str>)>,
    is_committed: impl Fn(&ArchivedKey) -> bool,
    description: &str,
) -> (HashMap<String, RangeSet>, Vec<String>) {
    let mut decided: HashMap<String, RangeSet> = HashMap::new();
    let mut other_settings = Vec::new();
    for (object, format) in decisions {
        if !is_committed(object) {
            continue;
        }
        if format == Some(description) {
            decided
                .entry(object.shard_id.clone())
                .or_default()
                .insert(object.range.clone());
        } else {
            other_settings.push(object.key.clone());
        }
    }
    (decided, other_settings)
}

/// Where the daemon keeps each event once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Scope {
    /// `--event-dedup-store dynamodb`: the whole stream.
    Stream,
    /// `--event-dedup-store local`: a shard and its ancestors (as far as
    /// the daemon looks back), by shard.
    Lineage(HashMap<String, Vec<String>>),
}

impl Scope {
    /// The local scope of the stream's `shards`.
    pub(super) fn lineage(shards: &[ShardInfo]) -> Self {
        Self::Lineage(
            shards
                .iter()
                .map(|shard| {
                    (
                        shard.shard_id.clone(),
                        ancestors(&shard.parent_shard_ids, shards),
                    )
                })
                .collect(),
        )
    }

    /// Whether copies of shards `a` and `b` are compared by the daemon.
    fn shares(&self, a: &str, b: &str) -> bool {
        let descends = |child: &str, parent: &str| match self {
            Self::Stream => true,
            Self::Lineage(lineage) => lineage
                .get(child)
                .is_some_and(|ancestors| ancestors.iter().any(|id| id == parent)),
        };
        a == b || descends(a, b) || descends(b, a)
    }

    /// How the summary names it.
    pub(super) fn describe(&self) -> &'static str {
        match self {
            Self::Stream => "stream-wide (dynamodb)",
            Self::Lineage(_) => "per shard and its ancestors (local)",
        }
    }
}

/// Two kept copies of one event within the window of each other, in one
/// scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeptTwice {
    pub(super) key: EventKey,
    /// The copy and its arrival (ms since the epoch) that arrived first.
    pub(super) earlier: (CopyRef, i64),
    pub(super) later: (CopyRef, i64),
}

/// A duplicate whose `duplicateOf` does not name a kept copy of its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BadDuplicate {
    pub(super) copy: CopyRef,
    pub(super) of: CopyRef,
    pub(super) reason: String,
}

/// What the window check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct WindowResult {
    /// User records read in decided batches.
    pub(super) user_records: u64,
    /// Of them, the duplicates whose accepted copy was read.
    pub(super) duplicates_checked: u64,
    pub(super) kept_twice: Vec<KeptTwice>,
    pub(super) bad_duplicates: Vec<BadDuplicate>,
}

impl WindowResult {
    /// Whether E2 holds for every record read.
    pub(super) fn is_clean(&self) -> bool {
        self.kept_twice.is_empty() && self.bad_duplicates.is_empty()
    }
}

/// Checks E2 over the user records read (`copies`, every shard's), given
/// the duplicates objects' records and the copies their `duplicateOf`
/// names (`duplicates`). A kept copy with an earlier kept copy of its key
/// within the window and its scope is reported once, with the nearest such
/// copy.
pub(super) fn check_window(
    copies: &[EventCopy],
    duplicates: &HashMap<CopyRef, CopyRef>,
    rule: &Rule,
    scope: &Scope,
) -> WindowResult {
    let window = rule.window_millis;
    let mut result = WindowResult {
        user_records: copies.len() as u64,
        ..WindowResult::default()
    };

    let mut kept: Vec<(EventKey, &EventCopy)> = copies
        .iter()
        .filter(|copy| !duplicates.contains_key(&copy.copy))
        .filter_map(|copy| Some((copy.key?, copy)))
        .collect();
    kept.sort_by(|(a_key, a), (b_key, b)| {
        (a_key, a.arrival_millis)
            .cmp(&(b_key, b.arrival_millis))
            .then_with(|| a.copy.position_cmp(&b.copy))
    });
    for (at, (key, later)) in kept.iter().enumerate() {
        let earlier = kept[..at]
            .iter()
            .rev()
            .take_while(|(other, copy)| {
                other == key && later.arrival_millis - copy.arrival_millis <= window
            })
            .find(|(_, copy)| scope.shares(&copy.copy.shard_id, &later.copy.shard_id));
        if let Some((_, earlier)) = earlier {
            result.kept_twice.push(KeptTwice {
                key: *key,
                earlier: (earlier.copy.clone(), earlier.arrival_millis),
                later: (later.copy.clone(), later.arrival_millis),
            });
        }
    }

    let named: HashSet<&CopyRef> = duplicates.values().collect();
    let read: HashMap<&CopyRef, &EventCopy> = copies
        .iter()
        .filter(|copy| named.contains(&copy.copy))
        .map(|copy| (&copy.copy, copy))
        .collect();
    for copy in copies {
        let Some(of) = duplicates.get(&copy.copy) else {
            continue;
        };
        let bad = |reason: String| BadDuplicate {
            copy: copy.copy.clone(),
            of: of.clone(),
            reason,
        };
        let Some(key) = copy.key else {
            result.bad_duplicates.push(bad(
                "the duplicate has no event id with these settings".to_owned()
            ));
            continue;
        };
        let Some(accepted) = read.get(of) else {
            continue;
        };
        result.duplicates_checked += 1;
        let apart = (copy.arrival_millis - accepted.arrival_millis).abs();
        let reason = if duplicates.contains_key(of) {
            Some("that copy is a duplicate itself".to_owned())
        } else if accepted.key != Some(key) {
            Some("that copy is another event".to_owned())
        } else if apart > window {
            Some(format!(
                "the two arrived {apart} ms apart, outside the window"
            ))
        } else if !scope.shares(&copy.copy.shard_id, &of.shard_id) {
            Some("that copy is outside the duplicate's scope".to_owned())
        } else {
            None
        };
        if let Some(reason) = reason {
            result.bad_duplicates.push(bad(reason));
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::test_support::{MINUTE_MILLIS, n};

    const WINDOW: Rule = Rule {
        window_millis: 60_000,
        match_fingerprint: true,
    };

    fn key(id: u128) -> Option<EventKey> {
        Some(EventKey { id, fingerprint: 7 })
    }

    fn copy(shard: &str, sequence_number: u64, key: Option<EventKey>, second: i64) -> EventCopy {
        EventCopy {
            key,
            arrival_millis: MINUTE_MILLIS + 1_000 * second,
            copy: CopyRef {
                shard_id: Arc::from(shard),
                sequence_number: n(sequence_number),
                sub_sequence_number: None,
            },
        }
    }

    fn shard(id: &str, parents: &[&str]) -> ShardInfo {
        ShardInfo {
            shard_id: id.to_owned(),
            parent_shard_ids: parents.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    /// Shard `a` split into `b` and `c`.
    fn split() -> Scope {
        Scope::lineage(&[shard("a", &[]), shard("b", &["a"]), shard("c", &["a"])])
    }

    #[test]
    fn two_kept_copies_within_the_window_break_e2() {
        let copies = [
            copy("a", 1, key(1), 0),
            copy("a", 2, key(1), 30),
            copy("a", 3, key(2), 30),
        ];
        let result = check_window(&copies, &HashMap::new(), &WINDOW, &split());
        assert_eq!(result.kept_twice.len(), 1, "{result:?}");
        assert_eq!(result.kept_twice[0].earlier.0, copies[0].copy);
        assert_eq!(result.kept_twice[0].later.0, copies[1].copy);
        assert!(!result.is_clean());

        // The second copy in a duplicates object: E2 holds.
        let duplicates = HashMap::from([(copies[1].copy.clone(), copies[0].copy.clone())]);
        let result = check_window(&copies, &duplicates, &WINDOW, &split());
        assert!(result.is_clean(), "{result:?}");
        assert_eq!((result.user_records, result.duplicates_checked), (3, 1));
    }

    #[test]
    fn the_window_and_the_scope_bound_the_check() {
        // Exactly the window apart: still within it (the rule's Δ ≤ window).
        let at_edge = [copy("a", 1, key(1), 0), copy("a", 2, key(1), 60)];
        assert_eq!(
            check_window(&at_edge, &HashMap::new(), &WINDOW, &split())
                .kept_twice
                .len(),
            1
        );
        // Past the window: expired, both kept.
        let past = [copy("a", 1, key(1), 0), copy("a", 2, key(1), 61)];
        assert!(check_window(&past, &HashMap::new(), &WINDOW, &split()).is_clean());
        // Another payload: the same id reused, both kept.
        let reused = [
            copy("a", 1, key(1), 0),
            copy(
                "a",
                2,
                Some(EventKey {
                    id: 1,
                    fingerprint: 8,
                }),
                1,
            ),
        ];
        assert!(check_window(&reused, &HashMap::new(), &WINDOW, &split()).is_clean());
        // Records without an id are never compared.
        let no_id = [copy("a", 1, None, 0), copy("a", 2, None, 1)];
        assert!(check_window(&no_id, &HashMap::new(), &WINDOW, &split()).is_clean());
        // Sibling shards do not share a local store; a parent and its child
        // do; the stream scope holds them all.
        let siblings = [copy("b", 1, key(1), 0), copy("c", 1, key(1), 1)];
        assert!(check_window(&siblings, &HashMap::new(), &WINDOW, &split()).is_clean());
        assert!(!check_window(&siblings, &HashMap::new(), &WINDOW, &Scope::Stream).is_clean());
        let lineage = [copy("a", 9, key(1), 0), copy("c", 1, key(1), 1)];
        assert!(!check_window(&lineage, &HashMap::new(), &WINDOW, &split()).is_clean());
    }

    #[test]
    fn a_duplicate_names_a_kept_copy_of_its_event() {
        let copies = [
            copy("a", 1, key(1), 0),
            copy("a", 2, key(1), 10),
            copy("a", 3, key(2), 20),
            copy("a", 4, key(1), 100),
            copy("a", 5, None, 5),
        ];
        let named = |dup: usize, of: usize| (copies[dup].copy.clone(), copies[of].copy.clone());
        let reasons = |pairs: &[(usize, usize)]| {
            let duplicates: HashMap<CopyRef, CopyRef> =
                pairs.iter().map(|&(dup, of)| named(dup, of)).collect();
            check_window(&copies, &duplicates, &WINDOW, &split())
                .bad_duplicates
                .into_iter()
                .map(|bad| bad.reason)
                .collect::<Vec<_>>()
        };
        assert!(reasons(&[(1, 0)]).is_empty());
        assert_eq!(reasons(&[(2, 0)]), ["that copy is another event"]);
        assert_eq!(
            reasons(&[(3, 0)]),
            ["the two arrived 100000 ms apart, outside the window"]
        );
        assert_eq!(
            reasons(&[(1, 0), (0, 1)]).len(),
            2,
            "each names a duplicate"
        );
        assert_eq!(
            reasons(&[(4, 0)]),
            ["the duplicate has no event id with these settings"]
        );
        // The copy named was not read (trimmed, or before --since): not
        // checked.
        let unread = HashMap::from([(copies[1].copy.clone(), copy("a", 0, key(1), 0).copy)]);
        let result = check_window(&copies, &unread, &WINDOW, &split());
        assert!(result.is_clean() && result.duplicates_checked == 0);
    }
}
