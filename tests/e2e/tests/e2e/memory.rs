//! The memory budget (DESIGN.md, "Memory budget, in every phase") across a
//! crash and a restart, with records near the 1 MiB maximum: the process's
//! peak resident memory (`VmHWM`) stays under twice `--buffer-memory-limit`
//! plus 100 MiB for everything that is not records (runtime, AWS clients,
//! compression, the binary itself), while it reads, writes, is killed with
//! batches written but not checkpointed, and replays them.
//!
//! 8 shards hold about 22 MiB of incompressible 0.9–1 MiB records each. The
//! first daemon (`--buffer-memory-limit 64MiB`; the record limit out of the
//! way, so batches end at the memory or age limit) is held by the
//! `after-put` failpoint right after each PUT, before the checkpoint: every
//! batch it writes stays pending in its lease row, and its shard reads no
//! further. The batch's lines and body are released before the failpoint, so
//! what the first process holds is what the other shards read and buffer.
//! Once at least two shards have such a batch and no more join for a few
//! seconds (or every shard has one), its peak is read and it is killed with
//! SIGKILL. The restarted daemon must replay those batches — their records
//! read again into memory, each PUT finds its object (412) and the object is
//! streamed back and compared — and archive the rest.
//! Every record ends up in exactly one object (contract line 1), and each
//! pending batch under exactly its recorded key and range (line 6).
//!
//! GetRecords asks for at most 10 records, so that no response is over
//! Kinesis's 10 MiB (moto would return a whole shard in one response).
//!
//! The second test runs the same with each event once (`--event-id
//! partition-key`, the local event store under a temporary directory): the
//! bound grows by the store's documented budget ([`STORE_BUDGET_MIB`],
//! `LocalOptions` in the daemon), and each batch also writes its decisions
//! object before its main object.
//!
//! The third test loses the lease table too, with each event once on:
//! the first daemon (a limit of 1 GiB, so that every shard can hold a
//! batch of all its records) is held by the `after-decisions-put`
//! failpoint right after each batch's decisions object, before its main
//! object; once every shard has such a batch, it is killed and the lease
//! table deleted. The restarted daemon (64 MiB, two records a read) finds,
//! on every shard, an uncommitted batch (a decisions object without its
//! main object) and rebuilds it exactly — once such a replay started, its
//! reads go past the limit, so they must take turns. Its peak stays within
//! the same bound.
//!
//! LocalStack's Kinesis (kinesis-mock) cannot move this volume in
//! reasonable time (putting it alone takes minutes, and 10 MiB reads time
//! out), so on that profile the test says so and stops.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use shardsink_e2e::archive::list_objects;
use shardsink_e2e::fixtures::{PendingBatch, delete_lease_table};
use shardsink_e2e::outcome;
use shardsink_e2e::producer::MAX_RECORD_BYTES;
use shardsink_e2e::wait::wait_for;
use shardsink_e2e::{
    Archive, Daemon, Finish, ProducedRecord, RecordSpec, Scenario, Settings, TestEnv, Versioning,
    require_env, scaled, wait_for_archive,
};

const SHARDS: usize = 8;

/// Records per shard: 23 by default, about 22 MiB of data, 29 MiB as JSON
/// Lines (base64); more with `SHARDSINK_E2E_MEMORY_RECORDS` (each replay of
/// the third test then holds more: with 40, the restart without turns for
/// uncommitted batches went over its bound).
fn records_per_shard() -> usize {
    std::env::var("SHARDSINK_E2E_MEMORY_RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(23)
}
/// Smallest record data; the largest fills the 1 MiB record limit.
const MIN_RECORD_BYTES: usize = 900 * 1024;
const MIB: u64 = 1024 * 1024;
/// `--buffer-memory-limit`, in MiB.
const MEMORY_LIMIT_MIB: u64 = 64;
/// What a process may use besides records (runtime, clients, compression).
const OVERHEAD_MIB: u64 = 100;
/// Peak resident memory allowed for each process.
const PEAK_RSS_BOUND_MIB: u64 = 2 * MEMORY_LIMIT_MIB + OVERHEAD_MIB;
/// The local event store's documented memory budget (docs/OPERATIONS.md,
/// "Event deduplication"; `LocalOptions`): block cache, memtables,
/// the write epoch's index, in-memory filters, recent keys.
const STORE_BUDGET_MIB: u64 = 225;
/// GetRecords `Limit`: 10 records of at most 1 MiB, like Kinesis's 10 MiB
/// per response.
const READ_LIMIT: usize = 10;
/// GetRecords `Limit` of the third test.
const REPLAY_READ_LIMIT: usize = 2;
/// Written pending batches the first process must have before it is killed.
const MIN_PENDING: usize = 2;
/// No new pending batch for this long: the first process is killed with
/// the pending batches it has.
const SETTLED: Duration = Duration::from_secs(5);
/// How long the `after-put` failpoint holds each write: longer than the test.
const AFTER_PUT_DELAY_MS: u64 = 600_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_memory_stays_bounded_across_a_restart_with_large_records() {
    peak_memory_across_a_restart(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_memory_stays_bounded_with_the_local_event_store() {
    let store = tempfile::tempdir().unwrap();
    peak_memory_across_a_restart(Some(store.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peak_memory_stays_bounded_after_a_lost_lease_table_with_events() {
    let store = tempfile::tempdir().unwrap();
    peak_memory_after_a_lost_table(store.path()).await;
}

/// Whether the test runs on this profile (it records the skip when not).
fn runs_here() -> bool {
    let localstack = std::env::var("SHARDSINK_TEST_PROFILE").as_deref() == Ok("localstack");
    if localstack {
        outcome::skip_unless_profile(
            "moto",
            "kinesis-mock cannot serve 170 MiB of 1 MiB records in reasonable time",
        );
    }
    !localstack
}

/// A stream of `SHARDS` shards with [`records_per_shard`] large records
/// each.
async fn large_stream(env: &TestEnv, name: &str) -> (Scenario, Vec<ProducedRecord>) {
    let start = Instant::now();
    let scenario = Scenario::create(env, name, i32::try_from(SHARDS).unwrap(), Versioning::Off)
        .await
        .unwrap();
    let seed = shardsink_e2e::env::seed("memory record contents", None);
    let specs = large_record_specs(&scenario, seed);
    let bytes: usize = specs.iter().map(RecordSpec::size).sum();
    let produced = scenario.put(&specs).await.unwrap();
    drop(specs);
    println!(
        "produced {} records, {} MiB, in {:.1?}",
        produced.len(),
        bytes as u64 / MIB,
        start.elapsed()
    );
    let mut per_shard: BTreeMap<&str, usize> = BTreeMap::new();
    for record in &produced {
        *per_shard.entry(record.shard_id.as_str()).or_default() += 1;
    }
    assert_eq!(
        per_shard.values().copied().collect::<Vec<_>>(),
        vec![records_per_shard(); SHARDS],
        "records per shard: {per_shard:?}"
    );
    (scenario, produced)
}

/// The daemon's settings for the restart (`--buffer-memory-limit
/// 64MiB`), with the local event store in `event_store` when given, and
/// the bound of its peak resident memory, MiB.
fn restart_settings(scenario: &Scenario, event_store: Option<&std::path::Path>) -> (Settings, u64) {
    let settings = scenario
        .settings
        .clone()
        .set("buffer-memory-limit", format!("{MEMORY_LIMIT_MIB}MiB"))
        .set("buffer-max-records", "100000")
        .set("buffer-max-age", "20s")
        // Kinesis returns at most 10 MiB per GetRecords call, which the
        // budget's read reservation counts on; moto returns a whole shard at
        // once.
        .set("max-records-per-read", READ_LIMIT.to_string());
    match event_store {
        Some(dir) => (
            settings
                .set("event-id", "partition-key")
                .set("event-dedup-store", "local")
                .set("event-dedup-dir", dir.to_str().unwrap()),
            PEAK_RSS_BOUND_MIB + STORE_BUDGET_MIB,
        ),
        None => (settings, PEAK_RSS_BOUND_MIB),
    }
}

/// Fails when a process's peak (`(which, bytes)`) is over `bound_mib`.
fn assert_peaks_within(bound_mib: u64, peaks: &[(&str, u64)], with_store: bool) {
    let over: Vec<String> = peaks
        .iter()
        .filter(|&&(_, peak)| peak > bound_mib * MIB)
        .map(|(which, peak)| format!("the {which} process peaked at {} MiB", peak / MIB))
        .collect();
    let store = if with_store {
        format!(" + the event store's {STORE_BUDGET_MIB} MiB")
    } else {
        String::new()
    };
    assert!(
        over.is_empty(),
        "{} resident, over {bound_mib} MiB \
         (2 × --buffer-memory-limit {MEMORY_LIMIT_MIB}MiB + {OVERHEAD_MIB} MiB{store})",
        over.join(" and ")
    );
}

/// The test, with the local event store in `event_store` when given.
async fn peak_memory_across_a_restart(event_store: Option<&std::path::Path>) {
    let env = require_env!();
    if !runs_here() {
        return;
    }
    let start = Instant::now();
    let name = if event_store.is_some() {
        "memory-events"
    } else {
        "memory"
    };
    let (scenario, produced) = large_stream(&env, name).await;
    let (settings, bound_mib) = restart_settings(&scenario, event_store);

    // First process: each shard is held after its first PUT, its batch
    // written and pending (not checkpointed).
    let mut first = Daemon::spawn(
        &settings
            .clone()
            .failpoints(format!("after-put=return(delay:{AFTER_PUT_DELAY_MS})")),
    )
    .unwrap();
    let prefix = settings.prefix();
    let written_pending = || async {
        let rows = scenario.lease_rows().await?;
        let batches: Vec<PendingBatch> =
            rows.iter().filter_map(|row| row.pending_batch()).collect();
        let listed: HashSet<String> = list_objects(&env, &scenario.bucket, &prefix)
            .await?
            .into_iter()
            .map(|object| object.key)
            .collect();
        anyhow::Ok(
            batches
                .into_iter()
                .filter(|batch| listed.contains(&batch.key))
                .collect::<Vec<_>>(),
        )
    };
    let mut pending: Vec<PendingBatch> = wait_for(
        scaled(Duration::from_secs(120)),
        &format!("a written pending batch in {MIN_PENDING} lease rows"),
        || async {
            let batches = written_pending().await?;
            Ok((batches.len() >= MIN_PENDING).then_some(batches))
        },
    )
    .await
    .unwrap_or_else(|error| never_held(&error, &mut first));
    // More shards may still be filling the budget; kill once they stopped.
    let mut settled_since = Instant::now();
    while settled_since.elapsed() < SETTLED && pending.len() < SHARDS {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = written_pending().await.unwrap();
        if now.len() > pending.len() {
            pending = now;
            settled_since = Instant::now();
        }
    }
    let first_peak = first.peak_rss_bytes().unwrap();
    println!(
        "{} pending batches written after {:.1?}; first process peak RSS {} MiB",
        pending.len(),
        start.elapsed(),
        first_peak / MIB
    );
    first.kill().unwrap();

    // Second process: replays the pending batches, then archives the rest.
    let (archive, second_peak) =
        restart_and_archive(&scenario, &settings, &produced, 180, bound_mib).await;
    println!(
        "archived after {:.1?}; restarted process peak RSS {} MiB",
        start.elapsed(),
        second_peak / MIB
    );
    // Line 6: each pending batch was written under its key, with its range.
    assert_written_as_recorded(&archive, &pending, "pending");
    // With events on, every batch decided its records first.
    if event_store.is_some() {
        assert_all_decided(&archive);
    }
    // The objects are large: once checked, they go with the bucket.
    scenario.cleanup().await;

    println!(
        "peak RSS: first process {} MiB, restarted process {} MiB (bound {bound_mib} MiB); \
         wall time {:.1?}",
        first_peak / MIB,
        second_peak / MIB,
        start.elapsed()
    );
    assert_peaks_within(
        bound_mib,
        &[("first", first_peak), ("restarted", second_peak)],
        event_store.is_some(),
    );
}

/// The third test (see the module documentation), with the local event
/// store in `event_store`.
async fn peak_memory_after_a_lost_table(event_store: &std::path::Path) {
    let env = require_env!();
    if !runs_here() {
        return;
    }
    let start = Instant::now();
    let (mut scenario, produced) = large_stream(&env, "memory-lost").await;
    let (settings, bound_mib) = restart_settings(&scenario, Some(event_store));
    // Two records a read: each rebuilt batch spans several reads, which go
    // past the limit once its replay started. Hour buckets: a shard's
    // records make one batch, whenever a minute ended while they were put.
    let settings = settings
        .set("max-records-per-read", REPLAY_READ_LIMIT.to_string())
        .set("time-bucket", "hour");
    // The archive is read with these settings' layout.
    scenario.settings = settings.clone();

    // First process: every shard writes a batch of its records and is held
    // between its decisions object and its main object.
    let mut first = Daemon::spawn(
        &settings
            .clone()
            .set("buffer-memory-limit", "1GiB")
            .set("buffer-max-records", records_per_shard().to_string())
            .set("buffer-max-age", "10m")
            .failpoints(format!(
                "after-decisions-put=return(delay:{AFTER_PUT_DELAY_MS})"
            )),
    )
    .unwrap();
    let prefix = settings.prefix();
    let uncommitted: Vec<PendingBatch> = wait_for(
        scaled(Duration::from_secs(180)),
        &format!("a batch with its decisions object in S3 on each of {SHARDS} shards"),
        || async {
            let batches = decided_pending(&env, &scenario, &prefix).await?;
            Ok((batches.len() == SHARDS).then_some(batches))
        },
    )
    .await
    .unwrap_or_else(|error| never_held(&error, &mut first));
    let first_peak = first.peak_rss_bytes().unwrap();
    first.kill().unwrap();
    let table = settings.lease_table();
    assert!(delete_lease_table(&env, &table).await.unwrap());
    println!(
        "{} uncommitted batches after {:.1?}, lease table deleted; first process peak RSS {} MiB",
        uncommitted.len(),
        start.elapsed(),
        first_peak / MIB
    );

    // Second process: finds the uncommitted batches by their decisions
    // objects and rebuilds them, then archives the rest.
    let (archive, second_peak) =
        restart_and_archive(&scenario, &settings, &produced, 300, bound_mib).await;
    // Each uncommitted batch is rebuilt exactly: under the key it was meant
    // for, with its range and its decisions.
    assert_written_as_recorded(&archive, &uncommitted, "uncommitted");
    assert_all_decided(&archive);
    scenario.cleanup().await;

    println!(
        "peak RSS: first process {} MiB (--buffer-memory-limit 1GiB), restarted process {} MiB \
         (bound {bound_mib} MiB); wall time {:.1?}",
        first_peak / MIB,
        second_peak / MIB,
        start.elapsed()
    );
    assert_peaks_within(bound_mib, &[("restarted", second_peak)], true);
}

/// Fails the test: the first daemon did not get to its failpoint.
fn never_held(error: &anyhow::Error, first: &mut Daemon) -> ! {
    panic!(
        "{error:#} (first shardsink {}) — is the binary built with `--features failpoints`?",
        first.exit_status().map_or_else(
            || "running".to_owned(),
            |status| format!("exited: {status}")
        )
    )
}

/// Starts the daemon with `settings`, waits (up to `timeout_secs`, scaled)
/// until every record of `produced` is archived, reads its peak resident
/// memory, then stops it and checks the archive. The archive and the peak.
async fn restart_and_archive(
    scenario: &Scenario,
    settings: &Settings,
    produced: &[ProducedRecord],
    timeout_secs: u64,
    bound_mib: u64,
) -> (Archive, u64) {
    let mut daemon = Daemon::spawn(settings).unwrap();
    let mut reader = scenario.archive_reader();
    let archived = wait_for_archive(
        &mut reader,
        produced,
        &mut daemon,
        scaled(Duration::from_secs(timeout_secs)),
    )
    .await;
    let peak = daemon.peak_rss_bytes().unwrap();
    if let Err(error) = archived {
        panic!(
            "{error:#} (restarted process peak RSS so far {} MiB, bound {bound_mib} MiB)",
            peak / MIB
        );
    }
    // Everything is archived already: this stops it and checks.
    let how = Finish::stopping(&mut daemon, 180);
    let archive = scenario.finish(&mut reader, produced, how).await.archive;
    (archive, peak)
}

/// Each of `batches` (`what` they are, for the message) was written under
/// its key, with its range.
fn assert_written_as_recorded(archive: &Archive, batches: &[PendingBatch], what: &str) {
    for batch in batches {
        let object = archive.object(&batch.key).unwrap_or_else(|| {
            panic!(
                "the {what} batch {} of {} is not in the archive",
                batch.key, batch.shard_id
            )
        });
        assert_eq!(
            (object.key.first.as_str(), object.key.last.as_str()),
            (batch.first.as_str(), batch.last.as_str()),
            "{what} batch {}",
            batch.key
        );
    }
}

/// Every main object has its decisions object.
fn assert_all_decided(archive: &Archive) {
    let undecided: Vec<&str> = archive
        .objects
        .iter()
        .filter(|object| archive.decisions_of(&object.key).is_none())
        .map(|object| object.key.key.as_str())
        .collect();
    assert!(
        undecided.is_empty(),
        "main objects without decisions: {undecided:?}"
    );
}

/// The pending batches of the lease rows whose decisions object is in S3
/// (under `{prefix}/_events/`, the main key's path with `.events.zst` for
/// its extension) and whose main object is not.
async fn decided_pending(
    env: &TestEnv,
    scenario: &Scenario,
    prefix: &str,
) -> anyhow::Result<Vec<PendingBatch>> {
    let rows = scenario.lease_rows().await?;
    let listed: HashSet<String> = list_objects(env, &scenario.bucket, prefix)
        .await?
        .into_iter()
        .map(|object| object.key)
        .collect();
    let decisions_key = |key: &str| {
        let path = key.strip_prefix(&format!("{prefix}/"))?;
        let (folder, name) = path.rsplit_once('/')?;
        let stem = name.split('.').next()?;
        Some(format!("{prefix}/_events/{folder}/{stem}.events.zst"))
    };
    Ok(rows
        .iter()
        .filter_map(|row| row.pending_batch())
        .filter(|batch| !listed.contains(&batch.key))
        .filter(|batch| decisions_key(&batch.key).is_some_and(|key| listed.contains(&key)))
        .collect())
}

/// [`records_per_shard`] records for each shard, in round-robin order so every
/// `PutRecords` call spreads over the shards: explicit hash keys inside the
/// shard's range, random (incompressible) data of `MIN_RECORD_BYTES` up to
/// the 1 MiB record limit, starting with a label that names the record.
fn large_record_specs(scenario: &Scenario, seed: u64) -> Vec<RecordSpec> {
    let mut rng = StdRng::seed_from_u64(seed);
    let records = records_per_shard();
    let mut specs = Vec::with_capacity(SHARDS * records);
    for i in 0..records {
        for (s, shard) in scenario.shards.iter().enumerate() {
            let (low, high) = shard.hash_key_range;
            let partition_key = format!("memory-{s}-{i}");
            let len = rng.random_range(MIN_RECORD_BYTES..=MAX_RECORD_BYTES - partition_key.len());
            let mut data = format!("memory shard {s} record {i} ").into_bytes();
            let label = data.len();
            data.resize(len, 0);
            fill_random(&mut data[label..], rng.random());
            specs.push(RecordSpec {
                partition_key,
                explicit_hash_key: Some(rng.random_range(low..=high).to_string()),
                data,
            });
        }
    }
    specs
}

/// Fills `out` with pseudo-random bytes (SplitMix64 from `seed`): as
/// incompressible as `StdRng`'s, and fast enough unoptimized for 170 MiB.
fn fill_random(out: &mut [u8], mut seed: u64) {
    for chunk in out.chunks_mut(8) {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
}
