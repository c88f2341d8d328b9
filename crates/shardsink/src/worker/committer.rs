//! The worker's part in committing to an Iceberg table (`--format
//! iceberg`): a task that runs the committer's rounds
//! (`table::committer::Committer`) — taking or renewing the committer row,
//! committing every worker's staged batches once per interval when this
//! worker holds it — and hands each state the row publishes to the shard
//! tasks, which move their checkpoints to it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::ops::log::error_chain;
use crate::ops::metrics::Metrics;
use crate::table::commit::CommitOutcome;
use crate::table::committer::{Committer, Round};
use crate::table::sink::Published;

/// The committer and where its published states go.
#[derive(Debug)]
pub(super) struct CommitterPart {
    pub(super) committer: Committer,
    /// The shard tasks' view of the latest published state.
    pub(super) published: watch::Sender<Published>,
    /// How often a round runs: the commit interval or the lease renewal
    /// interval, whichever is shorter (the row is renewed every round).
    pub(super) round_interval: Duration,
}

impl CommitterPart {
    /// Runs rounds until `token` is cancelled.
    pub(super) fn spawn(self, metrics: Arc<Metrics>, token: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(self.run(metrics, token))
    }

    async fn run(mut self, metrics: Arc<Metrics>, token: CancellationToken) {
        let mut timer = tokio::time::interval(self.round_interval);
        timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Whether the last round found the table gone from the catalog.
        let mut table_missing = false;
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                _ = timer.tick() => {}
            }
            let started = Instant::now();
            match self.committer.round().await {
                Ok(round) => {
                    if std::mem::take(&mut table_missing) {
                        info!("the Iceberg table is in the catalog again; commits go on");
                    }
                    observe(&round, started, &metrics);
                }
                Err(err) if err.is_table_missing() && !table_missing => {
                    table_missing = true;
                    error!(
                        error = %error_chain(&err),
                        "the Iceberg table is not in the catalog (dropped or renamed); staged \
                         batches wait for it. To keep the records it holds, register its newest \
                         metadata file (the highest-numbered *.metadata.json under the table \
                         location's metadata/) under its name again; a restart instead creates \
                         an empty table, which continues from the checkpoints"
                    );
                }
                Err(err) => {
                    warn!(error = %error_chain(&err), "table committer round failed; retrying next round");
                }
            }
            let newer = self.committer.published().is_some_and(|state| {
                self.published
                    .borrow()
                    .as_ref()
                    .is_none_or(|seen| seen.commit < state.commit)
            });
            if newer {
                let state = self.committer.published().cloned().map(Arc::new);
                self.published.send_replace(state);
            }
        }
        metrics.iceberg.committer.set(0);
    }
}

/// Counts what a round did.
fn observe(round: &Round, started: Instant, metrics: &Metrics) {
    let iceberg = &metrics.iceberg;
    match round {
        Round::Following { .. } => {
            iceberg.committer.set(0);
        }
        Round::Took | Round::Renewed => {
            iceberg.committer.set(1);
        }
        Round::Committed(outcome) => {
            iceberg.committer.set(1);
            iceberg.duration.observe(started.elapsed().as_secs_f64());
            match outcome {
                CommitOutcome::Committed {
                    files, conflicts, ..
                } => {
                    iceberg.commits.inc();
                    iceberg.files.observe(*files as f64);
                    iceberg.conflicts.inc_by(u64::from(*conflicts));
                }
                CommitOutcome::NothingToCommit { conflicts, .. } => {
                    iceberg.conflicts.inc_by(u64::from(*conflicts));
                }
            }
        }
    }
}
