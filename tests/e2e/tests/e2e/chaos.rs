//! Chaos: everything an auditor would throw at shardsink, at once, at random
//! (seeded) moments — then S3 read record by record.
//!
//! Three workers (distinct worker ids, or sometimes two sharing one, as
//! processes on one host with the default id do) archive one stream of 4–6
//! shards into
//! a versioned bucket while two producers write: a steady stream of small
//! records, and a second one putting KPL aggregates and large records (up to
//! the 1 MiB limit). For about 75 s, at random moments, one of these
//! happens:
//! - a worker is SIGKILLed and restarted (same worker id) after 0–3 s;
//! - a worker is frozen with SIGSTOP for 1–12 s (past the 4 s failover time
//!   its leases move: it wakes up as a zombie), then SIGCONT;
//! - a worker is SIGTERMed, must exit with code 0, and is restarted — or,
//!   sometimes, is SIGKILLed 0–0.4 s into its graceful shutdown;
//! - the lease table is deleted, or emptied, under the running workers;
//! - on the LocalStack profile only (moto cannot reshard), an open shard is
//!   split in two, or two adjacent open shards are merged.
//!
//! Checked during the run: no worker ever exits on its own (failures are
//! retried, never a crash), and after every action no checkpoint passes a
//! record that is not in S3 (contract line 3). At the end, with every worker
//! running again and the producers stopped: every produced record is in
//! exactly one object, with its fields and arrival time (line 1, with lines
//! 5–7 exercised by the replays, zombies and lost tables); every key of the
//! versioned bucket has exactly one version (line 2); the stream holds
//! exactly what the producers reported (so the expected side is right);
//! every open shard's checkpoint reaches its last record with no pending
//! batch, before and after a graceful stop of all workers, and every closed
//! parent is at `SHARD_END` (or its ended lease is gone).
//!
//! The seed and every action with its time are printed; repeat a run with
//! `SHARDSINK_E2E_SEED=<seed>` (timing still varies, so a repeat is close,
//! not identical).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use shardsink_e2e::check::{checkpoint_problems, clean_shutdown_problems};
use shardsink_e2e::fixtures::{
    clear_lease_table, delete_lease_table, list_shards, open_shard_hash_ranges, wait_stream_active,
};
use shardsink_e2e::producer::{
    BackgroundOptions, BackgroundProducer, MAX_RECORD_BYTES, ProducedRecord, RecordSpec,
    kpl_record_specs, put_kpl_records, put_records,
};
use shardsink_e2e::{
    Daemon, Finish, Scenario, Settings, TestEnv, Versioning, require_env, scaled, wait_for_archive,
    wait_until,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long actions keep coming.
const CHAOS: Duration = Duration::from_secs(75);
/// The workers' ids.
const WORKERS: [&str; 3] = ["chaos-a", "chaos-b", "chaos-c"];
/// At most this many lease table losses per run: each one makes every shard
/// be read again from `TRIM_HORIZON` with the resume skip.
const MAX_TABLE_LOSSES: usize = 3;
/// At most this many splits and merges per run.
const MAX_RESHARDS: usize = 3;
/// No split beyond this many open shards.
const MAX_OPEN_SHARDS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos() {
    let env = require_env!();
    let can_reshard = std::env::var("SHARDSINK_TEST_PROFILE").as_deref() != Ok("moto");
    let seed = shardsink_e2e::env::seed("chaos", None);
    let mut rng = StdRng::seed_from_u64(seed);
    let shard_count = rng.random_range(4..=6);
    let compression = ["zstd", "gzip", "none"][rng.random_range(0..3usize)];
    let scenario = Scenario::create(&env, "chaos", shard_count, Versioning::Enabled)
        .await
        .unwrap();
    let base = scenario
        .settings
        .clone()
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s")
        .set("shard-sync-interval", "2s")
        .set("failover-time", "4s")
        .set("compression", compression);
    let mut log = ActionLog::new();
    log.note(format!(
        "seed {seed}: {shard_count} shards, compression {compression}, resharding {}",
        if can_reshard {
            "on"
        } else {
            "off (moto cannot reshard)"
        }
    ));

    let steady = BackgroundProducer::start(
        &env,
        &scenario.stream,
        BackgroundOptions {
            records_per_second: 80,
            seed,
            label: "chaos-steady".to_owned(),
            ..BackgroundOptions::default()
        },
    );
    let odd = OddProducer::start(&env, &scenario.stream, seed ^ 0x9e37_79b9_7f4a_7c15);
    // Sometimes two processes share a worker id (as with the default, the
    // host name, on one host): they contend, and must stay exact.
    let mut ids = WORKERS;
    if rng.random_bool(0.3) {
        ids[2] = ids[1];
        log.note(format!("two processes share the worker id {}", ids[1]));
    }
    let mut workers: Vec<Worker> = ids
        .iter()
        .map(|id| Worker::start(id, &base.clone().set("worker-id", *id)))
        .collect();

    // A new deployment waits one failover time before it takes never-owned
    // rows; the chaos starts once the workers are at work.
    wait_until(
        scaled(Duration::from_secs(60)),
        "every lease owned",
        || async {
            let rows = scenario.lease_rows().await?;
            Ok::<_, anyhow::Error>(
                rows.len() == scenario.shards.len() && rows.iter().all(|r| r.lease_owner.is_some()),
            )
        },
    )
    .await
    .unwrap();
    log.note("every lease owned; chaos starts".to_owned());

    let mut reader = scenario.archive_reader();
    let chaos_end = Instant::now() + scaled(CHAOS);
    let mut next_action = Instant::now() + random_ms(&mut rng, 1_000..=4_000);
    let mut background: Option<(String, JoinHandle<Result<String>>)> = None;
    let mut table_losses = 0;
    let mut reshards = 0;
    let mut actions = 0;
    while Instant::now() < chaos_end {
        for worker in &mut workers {
            worker.step(&mut log);
        }
        if let Some((what, task)) = background.take_if(|(_, task)| task.is_finished()) {
            match task.await {
                Ok(Ok(done)) => log.note(format!("{what}: {done}")),
                Ok(Err(error)) => panic!("{what} failed: {error:#}\n{}", log.text()),
                Err(error) => panic!("{what} panicked: {error}\n{}", log.text()),
            }
        }
        if Instant::now() >= next_action {
            let mut choices = vec![Action::Kill, Action::Pause, Action::Terminate];
            if background.is_none() && table_losses < MAX_TABLE_LOSSES {
                choices.push(Action::LoseTable);
            }
            if can_reshard && background.is_none() && reshards < MAX_RESHARDS {
                choices.push(Action::Reshard);
                choices.push(Action::Reshard);
            }
            let action = choices[rng.random_range(0..choices.len())];
            let acted = match action {
                Action::Kill | Action::Pause | Action::Terminate => {
                    let eligible: Vec<usize> = (0..workers.len())
                        .filter(|&i| workers[i].can(action))
                        .collect();
                    if eligible.is_empty() {
                        false
                    } else {
                        let i = eligible[rng.random_range(0..eligible.len())];
                        workers[i].act(action, &mut rng, &mut log).await;
                        true
                    }
                }
                Action::LoseTable => {
                    table_losses += 1;
                    let emptied = rng.random_bool(0.5);
                    let what = if emptied {
                        "empty the lease table"
                    } else {
                        "delete the lease table"
                    };
                    log.note(what.to_owned());
                    let env = env.clone();
                    let table = base.lease_table();
                    let task = tokio::spawn(async move {
                        if emptied {
                            let rows = clear_lease_table(&env, &table).await?;
                            Ok(format!("{rows} rows deleted"))
                        } else {
                            let existed = delete_lease_table(&env, &table).await?;
                            Ok(if existed {
                                "table deleted".to_owned()
                            } else {
                                "table was already missing".to_owned()
                            })
                        }
                    });
                    background = Some((what.to_owned(), task));
                    true
                }
                Action::Reshard => {
                    reshards += 1;
                    let split = rng.random_bool(0.5);
                    let pick = rng.random::<u64>();
                    let what = if split { "split" } else { "merge" };
                    log.note(format!("{what} shards"));
                    let env = env.clone();
                    let stream = scenario.stream.clone();
                    let task =
                        tokio::spawn(async move { reshard(&env, &stream, split, pick).await });
                    background = Some((what.to_owned(), task));
                    true
                }
            };
            if acted {
                actions += 1;
                // Contract line 3 at this instant: rows, then archive, then
                // what was produced (so nothing checkpointed later is held
                // against an older archive).
                let rows = scenario.lease_rows().await.unwrap();
                let archive = reader.read().await.unwrap();
                let mut produced = steady.produced();
                produced.extend(odd.produced());
                let problems = checkpoint_problems(&rows, &produced, &archive);
                assert!(
                    problems.is_empty(),
                    "after action {actions}: {problems:#?}\n{}",
                    log.text()
                );
            }
            next_action = Instant::now() + random_ms(&mut rng, 1_500..=6_000);
        }
        // Sleeping is the point here: the next action lands at a random moment.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Calm: the last table loss or reshard completes, every worker runs.
    if let Some((what, task)) = background.take() {
        let done = task.await.unwrap().unwrap_or_else(|error| {
            panic!("{what} failed: {error:#}\n{}", log.text());
        });
        log.note(format!("{what}: {done}"));
    }
    for worker in &mut workers {
        worker.calm(&mut log).await;
    }
    log.note(format!(
        "chaos over after {actions} actions ({table_losses} table losses, {reshards} reshards); \
         every worker running"
    ));
    let mut produced = steady.stop().await.unwrap();
    produced.extend(odd.stop().await.unwrap());
    log.note(format!(
        "producers stopped: {} user records",
        produced.len()
    ));
    println!("{}", log.text());

    let archive = wait_for_archive(
        &mut reader,
        &produced,
        workers[0].daemon_mut(),
        scaled(Duration::from_secs(120)),
    )
    .await
    .unwrap_or_else(|error| panic!("{error:#}\n{}", log.text()));
    drop(archive);
    for worker in &mut workers {
        worker.assert_running(&log);
    }

    // Every open shard's checkpoint catches up with its last record.
    let open: BTreeSet<String> = list_shards(&env, &scenario.stream)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.ending_sequence_number.is_none())
        .map(|s| s.shard_id)
        .collect();
    let produced_open: Vec<ProducedRecord> = produced
        .iter()
        .filter(|r| open.contains(&r.shard_id))
        .cloned()
        .collect();
    let caught_up = wait_until(
        scaled(Duration::from_secs(60)),
        "every open shard checkpointed at its last record, with no pending batch",
        || async {
            let rows = scenario.lease_rows().await?;
            let problems = clean_shutdown_problems(&rows, &produced_open);
            anyhow::ensure!(problems.is_empty(), "{problems:#?}");
            Ok::<_, anyhow::Error>(true)
        },
    )
    .await;
    if let Err(error) = caught_up {
        panic!("{error:#}\n{}", log.text());
    }

    // All workers stop at once: flush, checkpoint, release, exit 0.
    for worker in &mut workers {
        worker.daemon_mut().terminate().unwrap();
    }
    for worker in &mut workers {
        let id = worker.id.clone();
        if let Err(error) = worker
            .daemon_mut()
            .wait_exit_ok(scaled(Duration::from_secs(40)))
            .await
        {
            panic!("{id} after the final SIGTERM: {error:#}");
        }
    }
    log.note("all workers stopped gracefully".to_owned());
    println!("{}", log.text());

    // Also: the stream holds what was produced, arrival times, and on the
    // versioned bucket one version of every object.
    let how = Finish::stopped().ground_truth();
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;

    let rows = scenario.lease_rows().await.unwrap();
    let problems = clean_shutdown_problems(&rows, &produced_open);
    assert!(
        problems.is_empty(),
        "after the final SIGTERM: {problems:#?}\nrows: {rows:#?}"
    );
    for row in rows.iter().filter(|r| !open.contains(&r.lease_key)) {
        assert_eq!(
            row.checkpoint.as_deref(),
            Some("SHARD_END"),
            "closed shard {} must be read to SHARD_END",
            row.lease_key
        );
    }
    println!(
        "chaos seed {seed}: {} records in {} objects, exactly once",
        produced.len(),
        archive.objects.len()
    );
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Kill,
    Pause,
    Terminate,
    LoseTable,
    Reshard,
}

fn random_ms(rng: &mut StdRng, range: std::ops::RangeInclusive<u64>) -> Duration {
    Duration::from_millis(rng.random_range(range))
}

/// Every action with its time since the test started, printed as it
/// happens and repeated on failure.
struct ActionLog {
    start: Instant,
    lines: Vec<String>,
}

impl ActionLog {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            lines: Vec::new(),
        }
    }

    fn note(&mut self, what: String) {
        let line = format!("[{:7.2}s] {what}", self.start.elapsed().as_secs_f64());
        println!("chaos {line}");
        self.lines.push(line);
    }

    fn text(&self) -> String {
        let mut text = String::from("chaos action log:\n");
        for line in &self.lines {
            let _ = writeln!(text, "  {line}");
        }
        text
    }
}

#[derive(Debug)]
enum State {
    Running,
    /// SIGSTOPped until then.
    Paused(Instant),
    /// SIGTERM sent then; restarted this long after it exits.
    Stopping(Instant, Duration),
    /// Not running; restarted then.
    Down(Instant),
}

/// One worker id and the process currently running it.
struct Worker {
    id: String,
    settings: Settings,
    daemon: Option<Daemon>,
    state: State,
}

impl Worker {
    fn start(id: &str, settings: &Settings) -> Self {
        Self {
            id: id.to_owned(),
            settings: settings.clone(),
            daemon: Some(Daemon::spawn(settings).unwrap()),
            state: State::Running,
        }
    }

    fn daemon_mut(&mut self) -> &mut Daemon {
        self.daemon.as_mut().expect("the worker runs")
    }

    fn describe(&self) -> String {
        match &self.daemon {
            Some(daemon) => format!("{} (pid {})", self.id, daemon.pid()),
            None => self.id.clone(),
        }
    }

    fn can(&self, action: Action) -> bool {
        match action {
            Action::Kill => matches!(self.state, State::Running | State::Paused(_)),
            Action::Pause | Action::Terminate => matches!(self.state, State::Running),
            Action::LoseTable | Action::Reshard => false,
        }
    }

    async fn act(&mut self, action: Action, rng: &mut StdRng, log: &mut ActionLog) {
        let who = self.describe();
        match action {
            Action::Kill => {
                let was_paused = matches!(self.state, State::Paused(_));
                self.daemon_mut().kill().unwrap();
                let delay = random_ms(rng, 0..=3_000);
                log.note(format!(
                    "SIGKILL {who}{}; restart in {delay:.1?}",
                    if was_paused { " (while paused)" } else { "" }
                ));
                self.state = State::Down(Instant::now() + delay);
            }
            Action::Pause => {
                let pause = random_ms(rng, 1_000..=12_000);
                self.daemon_mut().pause().unwrap();
                log.note(format!("SIGSTOP {who} for {pause:.1?}"));
                self.state = State::Paused(Instant::now() + pause);
            }
            Action::Terminate => {
                let delay = random_ms(rng, 0..=3_000);
                // Sometimes the shutdown is cut short, as when ECS's
                // stopTimeout or systemd's TimeoutStopSec runs out.
                let kill_after = rng.random_bool(0.3).then(|| random_ms(rng, 0..=400));
                self.daemon_mut().terminate().unwrap();
                log.note(format!("SIGTERM {who}; restart {delay:.1?} after it exits"));
                self.state = State::Stopping(Instant::now(), delay);
                if let Some(after) = kill_after {
                    tokio::time::sleep(after).await;
                    let daemon = self.daemon_mut();
                    if daemon.exit_status().is_none() {
                        daemon.kill().unwrap();
                        log.note(format!(
                            "SIGKILL {who} {after:.1?} into its graceful shutdown"
                        ));
                        self.state = State::Down(Instant::now() + delay);
                    }
                }
            }
            Action::LoseTable | Action::Reshard => unreachable!("not a worker action"),
        }
    }

    /// Carries out what is due: SIGCONT, restart, the exit after SIGTERM.
    /// Panics if the process exited when nobody asked it to.
    fn step(&mut self, log: &mut ActionLog) {
        let now = Instant::now();
        match self.state {
            State::Running => self.assert_running(log),
            State::Paused(until) => {
                self.assert_running(log);
                if now >= until {
                    self.daemon_mut().resume().unwrap();
                    log.note(format!("SIGCONT {}", self.describe()));
                    self.state = State::Running;
                }
            }
            State::Stopping(since, delay) => {
                let who = self.describe();
                let daemon = self.daemon_mut();
                if let Some(status) = daemon.exit_status() {
                    assert!(
                        daemon.stopped_as_asked(status),
                        "{who} exited with {status} after SIGTERM, expected code 0:\n{}\n{}",
                        daemon.log_tail(60),
                        log.text()
                    );
                    log.note(match status.code() {
                        Some(_) => format!("{who} exited 0 after {:.1?}", since.elapsed()),
                        None => format!(
                            "{who} was killed by the SIGTERM before it installed its handlers"
                        ),
                    });
                    self.state = State::Down(now + delay);
                } else {
                    assert!(
                        since.elapsed() < scaled(Duration::from_secs(40)),
                        "{who} still running 40 s after SIGTERM (shutdown timeout 20 s):\n{}\n{}",
                        daemon.log_tail(60),
                        log.text()
                    );
                }
            }
            State::Down(at) => {
                if now >= at {
                    self.daemon = Some(Daemon::spawn(&self.settings).unwrap());
                    log.note(format!("restart {}", self.describe()));
                    self.state = State::Running;
                }
            }
        }
    }

    /// Brings the worker back to running: SIGCONT if paused, waits for a
    /// SIGTERMed process to exit, restarts it if down.
    async fn calm(&mut self, log: &mut ActionLog) {
        if let State::Paused(_) = self.state {
            self.daemon_mut().resume().unwrap();
            log.note(format!("SIGCONT {} (calm)", self.describe()));
            self.state = State::Running;
        }
        if let State::Stopping(..) = self.state {
            let who = self.describe();
            if let Err(error) = self
                .daemon_mut()
                .wait_exit_ok(scaled(Duration::from_secs(40)))
                .await
            {
                panic!("{who}: {error:#}\n{}", log.text());
            }
            log.note(format!("{who} stopped as asked"));
            self.state = State::Down(Instant::now());
        }
        if let State::Down(_) = self.state {
            self.daemon = Some(Daemon::spawn(&self.settings).unwrap());
            log.note(format!("restart {} (calm)", self.describe()));
            self.state = State::Running;
        }
        self.assert_running(log);
    }

    /// A worker must never exit unless told to: failures are retried.
    fn assert_running(&mut self, log: &ActionLog) {
        let who = self.describe();
        let daemon = self.daemon_mut();
        if let Some(status) = daemon.exit_status() {
            panic!(
                "{who} exited on its own ({status}):\n{}\n{}",
                daemon.log_tail(80),
                log.text()
            );
        }
    }
}

/// Splits a random open shard at the middle of its hash key range, or
/// merges a random pair of adjacent open shards, and waits until the stream
/// is `ACTIVE` again. `pick` chooses the shard or pair.
async fn reshard(env: &TestEnv, stream: &str, split: bool, pick: u64) -> Result<String> {
    let open = open_shard_hash_ranges(env, stream).await?;
    let pairs: Vec<(&String, &String)> = open
        .iter()
        .flat_map(|(a, (_, a_end))| {
            open.iter()
                .filter(move |(_, (b_start, _))| a_end.checked_add(1) == Some(*b_start))
                .map(move |(b, _)| (a, b))
        })
        .collect();
    let split = (split && open.len() < MAX_OPEN_SHARDS) || pairs.is_empty();
    let message = if split {
        let candidates: Vec<(&String, &(u128, u128))> =
            open.iter().filter(|(_, (lo, hi))| hi > lo).collect();
        let (shard, (low, high)) = candidates[usize::try_from(pick).unwrap() % candidates.len()];
        let middle = low + (high - low) / 2 + 1;
        env.kinesis
            .split_shard()
            .stream_name(stream)
            .shard_to_split(shard)
            .new_starting_hash_key(middle.to_string())
            .send()
            .await
            .with_context(|| format!("failed to split {shard}"))?;
        format!("split {shard} at {middle}")
    } else {
        let (a, b) = pairs[usize::try_from(pick).unwrap() % pairs.len()];
        env.kinesis
            .merge_shards()
            .stream_name(stream)
            .shard_to_merge(a)
            .adjacent_shard_to_merge(b)
            .send()
            .await
            .with_context(|| format!("failed to merge {a} and {b}"))?;
        format!("merged {a} and {b}")
    };
    wait_stream_active(env, stream, scaled(Duration::from_secs(60))).await?;
    let now_open = open_shard_hash_ranges(env, stream).await?;
    Ok(format!(
        "{message}; open shards now {:?}",
        now_open.keys().collect::<Vec<_>>()
    ))
}

/// The second, differently shaped producer: every 0.5–2.5 s either one to
/// three KPL aggregates or one large record (32 KiB up to the 1 MiB limit,
/// random bytes after a traceable label).
struct OddProducer {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<()>>,
    produced: Arc<Mutex<Vec<ProducedRecord>>>,
}

impl OddProducer {
    fn start(env: &TestEnv, stream: &str, seed: u64) -> Self {
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        let produced = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&produced);
        let env = env.clone();
        let stream = stream.to_owned();
        let task = tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut index = 0usize;
            loop {
                let pause = random_ms(&mut rng, 500..=2_500);
                tokio::select! {
                    _ = &mut stop_rx => return Ok(()),
                    () = tokio::time::sleep(pause) => {}
                }
                index += 1;
                let records = if rng.random_bool(0.5) {
                    let specs = kpl_record_specs(rng.random_range(1..=3), rng.random());
                    put_kpl_records(&env, &stream, &specs).await?
                } else {
                    let partition_key = format!("large-{index}");
                    let len = if rng.random_bool(0.25) {
                        MAX_RECORD_BYTES - partition_key.len() - rng.random_range(0..=16)
                    } else {
                        rng.random_range(32 * 1024..=256 * 1024)
                    };
                    let mut data = format!("chaos-large #{index} ").into_bytes();
                    let mut noise = vec![0u8; len - data.len()];
                    rng.fill(&mut noise[..]);
                    data.extend(noise);
                    put_records(&env, &stream, &[RecordSpec::new(partition_key, data)]).await?
                };
                sink.lock().expect("producer lock poisoned").extend(records);
            }
        });
        Self {
            stop: Some(stop_tx),
            task,
            produced,
        }
    }

    fn produced(&self) -> Vec<ProducedRecord> {
        self.produced
            .lock()
            .expect("producer lock poisoned")
            .clone()
    }

    async fn stop(mut self) -> Result<Vec<ProducedRecord>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task).await.context("odd producer panicked")??;
        Ok(self.produced())
    }
}

impl Drop for OddProducer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
