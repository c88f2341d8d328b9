use std::sync::Arc;
use std::time::Duration;

use shard_lease::test_util::{FakeTable, fake_client};
use shard_lease::{Checkpoint, HeldLease, Lease, LeaseTable};

use super::*;
use crate::table::test_support::{events_table, live_files, memory_catalog, staged};

const INTERVAL: Duration = Duration::from_secs(60);
const FAILOVER: Duration = Duration::from_secs(10);

struct World {
    leases: LeaseTable,
    catalog: Arc<dyn Catalog>,
    ident: TableIdent,
    table: iceberg::table::Table,
}

async fn world() -> World {
    let fake = Arc::new(FakeTable::keyed_by("leaseKey"));
    let leases = LeaseTable::new(fake_client(fake), "leases");
    let catalog = memory_catalog().await;
    let (ident, table) = events_table(&catalog).await;
    World {
        leases,
        catalog: Arc::new(catalog),
        ident,
        table,
    }
}

impl World {
    fn committer(&self, worker: &str) -> Committer {
        Committer::new(
            self.leases.clone(),
            self.catalog.clone(),
            self.ident.clone(),
            CommitterOptions {
                worker_id: worker.to_owned(),
                interval: INTERVAL,
                failover_time: FAILOVER,
                snapshot_retention: Duration::from_secs(86_400),
            },
        )
    }

    /// A lease on `shard` held by `worker`.
    async fn held(&self, shard: &str, worker: &str) -> HeldLease {
        let lease = Lease::new(shard, Checkpoint::TrimHorizon, Vec::new());
        self.leases.create_lease(&lease).await.unwrap();
        let observed = self.leases.get_lease(shard).await.unwrap().unwrap();
        let taken = self.leases.take_lease(&observed, worker).await.unwrap();
        HeldLease::new(self.leases.clone(), taken, tokio::time::Instant::now())
    }

    async fn stage(&self, held: &HeldLease, after: &str, last: &str) {
        let batch = staged(&self.table, held.shard_id(), after, last, 20000);
        held.stage_batch(&serde_json::to_string(&batch).unwrap())
            .await
            .unwrap();
    }

    async fn snapshots(&self) -> usize {
        let table = self.catalog.load_table(&self.ident).await.unwrap();
        table.metadata().snapshots().count()
    }
}

#[tokio::test(start_paused = true)]
async fn one_worker_commits_every_worker_s_staged_batches_once_per_interval() {
    let w = world().await;
    let s0 = w.held("s0", "a").await;
    let s1 = w.held("s1", "b").await;
    w.stage(&s0, "TRIM_HORIZON", "10").await;
    w.stage(&s1, "TRIM_HORIZON", "20").await;
    let (mut a, mut b) = (w.committer("a"), w.committer("b"));

    assert_eq!(a.round().await.unwrap(), Round::Took);
    assert_eq!(
        b.round().await.unwrap(),
        Round::Following {
            owner: Some("a".to_owned())
        }
    );
    // Within the interval the committer only renews.
    tokio::time::advance(INTERVAL / 2).await;
    assert_eq!(a.round().await.unwrap(), Round::Renewed);
    assert_eq!(w.snapshots().await, 0);

    tokio::time::advance(INTERVAL / 2).await;
    let Round::Committed(outcome) = a.round().await.unwrap() else {
        panic!("no commit after an interval");
    };
    assert_eq!(outcome.state().shards["s0"], "10");
    assert_eq!(outcome.state().shards["s1"], "20");
    let table = w.catalog.load_table(&w.ident).await.unwrap();
    assert_eq!(live_files(&table).await.len(), 2);

    // The other worker reads the published state for its shards.
    b.round().await.unwrap();
    assert_eq!(b.published().unwrap().shards["s1"], "20");

    // Many rounds in the next interval: one commit, with the new batch.
    w.stage(&s1, "20", "30").await;
    for _ in 0..10 {
        tokio::time::advance(INTERVAL / 10).await;
        a.round().await.unwrap();
        b.round().await.unwrap();
    }
    assert_eq!(w.snapshots().await, 2);
    assert_eq!(a.published().unwrap().shards["s1"], "30");
}

#[tokio::test(start_paused = true)]
async fn a_committer_that_stops_renewing_is_replaced_after_the_failover_time() {
    let w = world().await;
    let s0 = w.held("s0", "a").await;
    w.stage(&s0, "TRIM_HORIZON", "10").await;
    let (mut a, mut b) = (w.committer("a"), w.committer("b"));
    assert_eq!(a.round().await.unwrap(), Round::Took);
    b.round().await.unwrap();
    // A stops (paused, or gone); B sees the counter stand still.
    tokio::time::advance(FAILOVER / 2).await;
    assert!(matches!(b.round().await.unwrap(), Round::Following { .. }));
    tokio::time::advance(FAILOVER).await;
    assert_eq!(b.round().await.unwrap(), Round::Took);
    // B's first commit waits one interval from the take.
    assert_eq!(b.round().await.unwrap(), Round::Renewed);
    tokio::time::advance(INTERVAL).await;
    assert!(matches!(b.round().await.unwrap(), Round::Committed(_)));
    // A, back, is no longer the committer: its writes fail on the counter
    // and it follows.
    let round = a.round().await.unwrap();
    assert_eq!(
        round,
        Round::Following {
            owner: Some("b".to_owned())
        }
    );
    assert_eq!(w.snapshots().await, 1);
}

/// The rate at the scale of a deployment: 100 shards on 4 workers, each
/// shard staging a batch a minute for one (virtual) hour, every worker
/// running a round each renewal interval as the daemon does, owners
/// dropping what each published state covers; the committer stops halfway
/// (a paused or lost worker) and another takes over. The snapshots the
/// table gets are counted, and reported: at most one a commit interval
/// (docs/DESIGN.md, "Rate").
#[tokio::test(start_paused = true)]
async fn an_hour_of_100_shards_on_4_workers_makes_at_most_one_commit_a_minute() {
    const SHARDS: usize = 100;
    const RENEWAL: Duration = Duration::from_millis(3_333);
    let w = world().await;
    let workers = ["w0", "w1", "w2", "w3"];
    let mut held = Vec::new();
    for shard in 0..SHARDS {
        let worker = workers[shard % workers.len()];
        held.push(w.held(&format!("shard-{shard:03}"), worker).await);
    }
    let mut committers: Vec<Committer> = workers.iter().map(|id| w.committer(id)).collect();
    // Each shard's last staged sequence number.
    let mut last = vec![0_u64; SHARDS];
    let started = tokio::time::Instant::now();
    let hour = Duration::from_secs(3_600);
    let mut next_stage = started;
    let mut stopped: Option<usize> = None;
    while started.elapsed() < hour {
        if tokio::time::Instant::now() >= next_stage {
            next_stage += Duration::from_secs(60);
            for (shard, lease) in held.iter().enumerate() {
                drop_committed(lease, committers[shard % workers.len()].published()).await;
                let after = match last[shard] {
                    0 => "TRIM_HORIZON".to_owned(),
                    n => n.to_string(),
                };
                last[shard] += 10;
                w.stage(lease, &after, &last[shard].to_string()).await;
            }
        }
        // Halfway, the committer stops for five minutes.
        let minute = started.elapsed().as_secs() / 60;
        if minute == 30 && stopped.is_none() {
            stopped = committers.iter().position(|c| {
                c.row
                    .as_ref()
                    .is_some_and(|row| row.is_owned_by(&c.options.worker_id))
            });
        }
        for (index, committer) in committers.iter_mut().enumerate() {
            if stopped == Some(index) && (30..35).contains(&minute) {
                continue;
            }
            committer.round().await.unwrap();
        }
        tokio::time::advance(RENEWAL).await;
    }
    let commits = w.snapshots().await;
    println!(
        "{SHARDS} shards, {} workers, one hour: {commits} table commits",
        workers.len()
    );
    assert!(stopped.is_some(), "a committer was stopped halfway");
    assert!(
        commits >= 50,
        "commits went on across the failover: {commits}"
    );
    assert!(commits <= 60, "at most one commit a minute: {commits}");
    // Every batch staged before the last commit is in the table once.
    let table = w.catalog.load_table(&w.ident).await.unwrap();
    let files = live_files(&table).await;
    let distinct: std::collections::HashSet<_> = files.iter().collect();
    assert_eq!(distinct.len(), files.len(), "no data file twice");
}

/// What an owner does with a published state: drops the staged batches it
/// covers and moves the checkpoint to the shard's committed end.
async fn drop_committed(lease: &HeldLease, published: Option<&CommitState>) {
    let Some(end) = published.and_then(|state| state.committed_end(lease.shard_id()).unwrap())
    else {
        return;
    };
    let row = lease.snapshot().await;
    let keep: Vec<String> = row
        .staged_batches
        .iter()
        .filter(|entry| StagedBatch::last_of(entry).is_none_or(|last| last > end))
        .cloned()
        .collect();
    if keep.len() < row.staged_batches.len() {
        lease
            .checkpoint_committed(&Checkpoint::SequenceNumber(end), &keep)
            .await
            .unwrap();
    }
}
