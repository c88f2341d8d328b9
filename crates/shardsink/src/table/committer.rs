//! [`Committer`]: the one worker that commits every worker's staged batches
//! to the table, at most once per `--iceberg-commit-interval`.
//!
//! The committer is elected through the lease table's committer row
//! (`iceberg#committer`, `shard_lease::CommitterLease`): its owner renews it
//! every round; another worker takes it once its counter has not moved for
//! the failover time, judged on that worker's own clock as shard leases are.
//! The row also carries the state of the latest commit (`committed`), which
//! every worker reads to move its shards' checkpoints.
//!
//! Each round, on every worker ([`Committer::round`]):
//! 1. read the committer row;
//! 2. as its owner: renew it, or — once the interval has passed since this
//!    worker's last commit or since it took the row — gather the staged
//!    batches of every lease row, commit them
//!    ([`commit_staged`]), and publish the state in the row;
//! 3. otherwise take the row when it is missing or expired.
//!
//! After a commit, at most once an hour, the committer also expires the
//! snapshots older than the retention (`table::expiry`).
//!
//! The row only keeps commits rare: exactness does not depend on it
//! (docs/DESIGN.md, "Iceberg tables"). Two workers that both believe they
//! hold it (one of them paused past its expiry) commit on the table's
//! compare-and-swap, and the plan keeps every record once.

use std::sync::Arc;
use std::time::Duration;

use iceberg::{Catalog, TableIdent};
use shard_lease::{CommitterLease, LeaseError, LeaseTable};
use tokio::time::Instant;
use tracing::{info, warn};

use super::commit::{CommitError, CommitOutcome, commit_staged};
use super::expiry::{EXPIRY_INTERVAL, cutoff, expire_snapshots};
use super::state::{CommitState, StagedBatch};
use crate::ops::failpoint::failpoint;

/// How the committer runs.
#[derive(Debug, Clone)]
pub struct CommitterOptions {
    /// This worker's id.
    pub worker_id: String,
    /// `--iceberg-commit-interval`: at most one commit per interval.
    pub interval: Duration,
    /// `--failover-time`: a committer row whose counter has not moved for
    /// this long is taken.
    pub failover_time: Duration,
    /// `--iceberg-snapshot-retention`: snapshots older than this are
    /// expired, at most once an hour, after a commit.
    pub snapshot_retention: Duration,
}

/// What a round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Another worker is the committer (`None`: nobody could be seen).
    Following {
        /// The committer's worker id.
        owner: Option<String>,
    },
    /// This worker became the committer; it commits after one interval.
    Took,
    /// This worker is the committer and renewed the row.
    Renewed,
    /// This worker committed (or found nothing to commit) and published
    /// the table's state.
    Committed(CommitOutcome),
}

/// Why a round failed; the next round tries again.
#[derive(Debug, thiserror::Error)]
pub enum CommitterError {
    /// A lease-table call failed.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The commit failed.
    #[error(transparent)]
    Commit(#[from] CommitError),
}

impl CommitterError {
    /// Whether the catalog no longer has the table
    /// ([`CommitError::is_table_missing`]).
    pub fn is_table_missing(&self) -> bool {
        matches!(self, Self::Commit(err) if err.is_table_missing())
    }
}

/// One worker's part in committing: see the module documentation.
#[derive(Debug)]
pub struct Committer {
    leases: LeaseTable,
    catalog: Arc<dyn Catalog>,
    table: TableIdent,
    options: CommitterOptions,
    /// The committer row as last read or written.
    row: Option<CommitterLease>,
    /// The row's counter and when this worker first saw it.
    seen: Option<(u64, Instant)>,
    /// When this worker last committed or took the row.
    last_commit: Option<Instant>,
    /// When this worker last expired snapshots.
    last_expiry: Option<Instant>,
    /// The state the row publishes, as last read.
    published: Option<CommitState>,
}

impl Committer {
    /// A worker's committer part for `table` in `catalog`, elected through
    /// `leases`.
    pub fn new(
        leases: LeaseTable,
        catalog: Arc<dyn Catalog>,
        table: TableIdent,
        options: CommitterOptions,
    ) -> Self {
        Self {
            leases,
            catalog,
            table,
            options,
            row: None,
            seen: None,
            last_commit: None,
            last_expiry: None,
            published: None,
        }
    }

    /// The table's state as the committer row last published it: each
    /// shard's committed end, for its owner's checkpoint.
    pub fn published(&self) -> Option<&CommitState> {
        self.published.as_ref()
    }

    /// One round (see the module documentation).
    ///
    /// # Errors
    /// [`CommitterError`]: a lease-table call or the commit failed.
    pub async fn round(&mut self) -> Result<Round, CommitterError> {
        let now = Instant::now();
        let row = self.leases.get_committer().await?;
        self.read_published(row.as_ref());
        let worker_id = self.options.worker_id.clone();
        let Some(row) = row else {
            return self.take(None, now).await;
        };
        if row.is_owned_by(&worker_id) {
            let due = self
                .last_commit
                .is_none_or(|last| now.duration_since(last) >= self.options.interval);
            if due {
                return self.commit(row, now).await;
            }
            self.row = Some(self.leases.renew_committer(&row, &worker_id).await?);
            return Ok(Round::Renewed);
        }
        // Someone else's: taken once its counter stood still long enough.
        let seen_since = match self.seen {
            Some((counter, since)) if counter == row.counter => since,
            _ => {
                self.seen = Some((row.counter, now));
                now
            }
        };
        if row.owner.is_none() || now.duration_since(seen_since) >= self.options.failover_time {
            return self.take(Some(&row), now).await;
        }
        let owner = row.owner.clone();
        self.row = Some(row);
        Ok(Round::Following { owner })
    }

    async fn take(
        &mut self,
        observed: Option<&CommitterLease>,
        now: Instant,
    ) -> Result<Round, CommitterError> {
        match self
            .leases
            .take_committer(observed, &self.options.worker_id)
            .await
        {
            Ok(row) => {
                info!(
                    previous = observed.and_then(|row| row.owner.as_deref()),
                    "became the table committer"
                );
                self.row = Some(row);
                // The first commit waits one interval: the previous
                // committer may have committed just before it stopped.
                self.last_commit = Some(now);
                Ok(Round::Took)
            }
            // Another worker was faster.
            Err(err) if err.is_lease_lost() => Ok(Round::Following { owner: None }),
            Err(err) => Err(err.into()),
        }
    }

    async fn commit(&mut self, row: CommitterLease, now: Instant) -> Result<Round, CommitterError> {
        let staged = self.staged_batches().await?;
        let outcome = commit_staged(self.catalog.as_ref(), &self.table, &staged).await?;
        failpoint("after-table-commit").await;
        let state = outcome.state().to_json();
        let published = self
            .leases
            .publish_committed(&row, &self.options.worker_id, &state)
            .await?;
        failpoint("after-publish").await;
        self.read_published(Some(&published));
        self.row = Some(published);
        self.last_commit = Some(now);
        if self
            .last_expiry
            .is_none_or(|last| now.duration_since(last) >= EXPIRY_INTERVAL)
        {
            self.last_expiry = Some(now);
            let older_than = cutoff(self.options.snapshot_retention);
            if let Err(err) = expire_snapshots(self.catalog.as_ref(), &self.table, older_than).await
            {
                // The next hour tries again; commits go on meanwhile.
                warn!(table = %self.table, error = %err, "snapshot expiry failed");
            }
        }
        Ok(Round::Committed(outcome))
    }

    /// Every lease row's staged batches; an entry that does not parse is
    /// logged and left out (its owner's replay stages the batch again).
    async fn staged_batches(&self) -> Result<Vec<StagedBatch>, LeaseError> {
        let leases = self.leases.list_leases().await?;
        let mut staged = Vec::new();
        for lease in &leases {
            for entry in &lease.staged_batches {
                match serde_json::from_str::<StagedBatch>(entry) {
                    Ok(batch) => staged.push(batch),
                    Err(err) => warn!(
                        shard_id = lease.shard_id(),
                        error = %err,
                        "a staged batch in the lease row does not parse; left out"
                    ),
                }
            }
        }
        Ok(staged)
    }

    fn read_published(&mut self, row: Option<&CommitterLease>) {
        let Some(text) = row.and_then(|row| row.committed.as_deref()) else {
            return;
        };
        match CommitState::from_json(text.as_bytes()) {
            // Never backwards: a row read before a newer publication.
            Ok(state)
                if self
                    .published
                    .as_ref()
                    .is_none_or(|old| old.commit <= state.commit) =>
            {
                self.published = Some(state);
            }
            Ok(_) => {}
            Err(err) => warn!(error = %err, "the committer row's state does not parse"),
        }
    }
}

#[cfg(test)]
mod tests;
