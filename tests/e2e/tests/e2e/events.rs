//! Each event once, end to end: a producer that retries on purpose puts
//! every event (a JSON payload with an `id`) one to three times — at once
//! or a few seconds later, plain or inside KPL aggregates — while two
//! workers with `--event-id json-pointer:/id` archive the stream through
//! SIGKILLs, lease moves and, with the local store, a lost lease table, a
//! lost store directory, and a split after which the children's retries
//! must find the parent's copies (on a Kinesis that reshards: not moto).
//! Then S3 is read record by record against the stream's records (shard,
//! sequence number, sub-sequence number):
//! - E1: every produced user record is in exactly one place — the main
//!   prefix, the duplicates prefix, or the error prefix (kept records the
//!   `json` format cannot represent) — with its fields and arrival time;
//! - E2: the main and error prefixes hold each event once (every copy
//!   arrives within the default one-hour window, so exactly once), and
//!   every duplicate's `duplicateOf` names a kept record of the same event
//!   and payload — in its own shard before it, or in an ancestor of the
//!   shard, with the local store; anywhere in the stream with the
//!   DynamoDB store;
//! - every batch has its decisions object, which agrees with where the
//!   batch put each record; nothing in the versioned bucket was ever
//!   overwritten; after the last graceful stop of a stream never resharded
//!   every checkpoint is at its shard's last record.
//!
//! The seed is printed; `SHARDSINK_E2E_SEED=<seed>` repeats a run's events,
//! copies and choices (timing still varies).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use shardsink_e2e::archive::{Archive, CopyRef, Outcome};
use shardsink_e2e::check::RecordId;
use shardsink_e2e::check::events::{
    EventReport, EventRules, Lineage, Scope, each_event_once, json_pointer_id,
    rebuilt_window_from_s3,
};
use shardsink_e2e::env::profile;
use shardsink_e2e::fixtures::{clear_lease_table, delete_lease_table, list_shards};
use shardsink_e2e::payloads::{Payloads, event_payloads};
use shardsink_e2e::producer::{RecordSpec, RetryOptions, RetryingProducer, shard_of};
use shardsink_e2e::{
    ArchiveReader, Daemon, Finish, ProducedRecord, Scenario, Settings, Versioning, outcome,
    require_env, scaled, stop_gracefully, wait_for_archive, wait_for_growth, wait_until,
};

/// The pointer every run reads event ids at.
const EVENT_ID: &str = "/id";
/// Shards of every stream here.
const SHARDS: i32 = 2;

/// Every copy of an event arrives within minutes: well inside the default
/// window of one hour.
fn rules(scope: Scope) -> EventRules {
    EventRules {
        window: Duration::from_secs(3600),
        fingerprint: true,
        scope,
    }
}

/// Settings both tests share: small batches written quickly, quick lease
/// balancing, events read at [`EVENT_ID`].
fn base(scenario: &Scenario) -> Settings {
    scenario
        .settings
        .clone()
        .set("buffer-max-records", "40")
        .set("buffer-max-age", "1s")
        .set("shard-sync-interval", "2s")
        .set("failover-time", "4s")
        .set("event-id", format!("json-pointer:{EVENT_ID}"))
}

/// Waits until the workers own the leases in these numbers.
async fn owners(scenario: &Scenario, owners: &[(&str, usize)]) {
    let found = scenario
        .wait_for_lease_owners(owners, scaled(Duration::from_secs(60)))
        .await
        .unwrap();
    println!("leases: {found:?}");
}

/// The records the archive places now: the baseline of a later [`growth`],
/// taken before the daemon that should grow it starts (or before the
/// records it should write are put), so that a daemon quicker than the
/// test cannot have grown it already.
async fn placed(reader: &mut ArchiveReader) -> usize {
    reader.read().await.unwrap().placed_count()
}

/// Waits until the archive places more than `baseline` records.
async fn growth(reader: &mut ArchiveReader, daemon: &mut Daemon, baseline: usize) -> Archive {
    wait_for_growth(reader, daemon, baseline, scaled(Duration::from_secs(60)))
        .await
        .unwrap()
}

/// Contract lines 3 and 4 right after a SIGKILL: every record at or below
/// a checkpoint is placed, and each shard's placed records are a gap-free
/// prefix of what was produced.
async fn check_frozen(
    scenario: &Scenario,
    reader: &mut ArchiveReader,
    produced: &[ProducedRecord],
    what: &str,
) {
    let (_, archive) = scenario.assert_frozen(reader, produced, what).await;
    println!(
        "{what}: {} of {} records placed",
        archive.placed_count(),
        produced.len()
    );
}

/// The produced records whose payload the `json` format cannot represent.
fn rejected_records(payloads: &Payloads, produced: &[ProducedRecord]) -> HashSet<RecordId> {
    let rejected: HashSet<&[u8]> = payloads
        .specs
        .iter()
        .zip(&payloads.rejected)
        .filter(|(_, rejected)| **rejected)
        .map(|(spec, _)| spec.data.as_slice())
        .collect();
    produced
        .iter()
        .filter(|record| rejected.contains(record.data.as_slice()))
        .map(RecordId::of_produced)
        .collect()
}

/// What every run asserts of its report beyond the problems: exactly one
/// kept copy per event (every copy is in the window), every other copy of
/// an event a duplicate, only the outcomes these copies can have, every
/// batch with its decisions.
fn assert_each_event_exactly_once(report: &EventReport, produced: &[ProducedRecord]) {
    // E2. After a lease move or a lost store, the local store's new owner
    // rebuilds the shard's window from the decisions objects before it
    // decides the next record; the window must hold every accepted copy
    // that precedes that record, also one that arrived in the same
    // millisecond (a PutRecords call split by the batch boundary). An event
    // kept twice in consecutive batches of a shard whose window was rebuilt
    // between them is a rebuild that left such a copy out.
    report.assert_ok();
    assert_eq!(
        report.kept_with_id, report.events,
        "one kept copy per event"
    );
    assert_eq!(
        report.duplicates,
        report.records_with_id - report.events,
        "every other copy of an event is a duplicate"
    );
    assert!(report.duplicates > 0 && report.records_without_id > 0);
    assert_eq!(report.batches_with_decisions, report.batches);
    let decided: usize = report.outcomes.values().sum();
    assert_eq!(decided, produced.len(), "a decision for every record");
    assert_eq!(
        report.outcomes.get(&Outcome::Duplicate),
        Some(&report.duplicates)
    );
    assert_eq!(
        report.outcomes.get(&Outcome::IdMissing),
        Some(&report.records_without_id)
    );
    assert_eq!(
        report.outcomes.get(&Outcome::Unique),
        Some(&report.kept_with_id)
    );
}

/// Duplicates that are KPL user records, and duplicates whose accepted
/// copy is one: the producer's aggregates took part.
fn kpl_duplicates(archive: &Archive) -> (usize, usize) {
    let duplicates = archive
        .duplicates()
        .filter(|r| r.sub_sequence_number.is_some())
        .count();
    let of_aggregated = archive
        .duplicates()
        .filter(|r| {
            r.duplicate_of
                .as_ref()
                .is_some_and(|of| of.sub_sequence_number.is_some())
        })
        .count();
    (duplicates, of_aggregated)
}

/// Duplicates whose accepted copy is kept in their own batch, and those
/// whose accepted copy is in another batch (a late retry, or another
/// shard's copy).
fn duplicates_by_batch(archive: &Archive) -> (usize, usize) {
    let batch_of: HashMap<CopyRef, String> = archive
        .objects
        .iter()
        .chain(&archive.error_objects)
        .flat_map(|o| {
            o.records
                .iter()
                .map(move |r| (r.copy_ref(), o.key.batch_path()))
        })
        .collect();
    let mut same = 0;
    let mut across = 0;
    for object in &archive.duplicate_objects {
        for record in &object.records {
            let of = record
                .duplicate_of
                .as_ref()
                .expect("a duplicate names its copy");
            if batch_of.get(of) == Some(&object.key.batch_path()) {
                same += 1;
            } else {
                across += 1;
            }
        }
    }
    (same, across)
}

/// Local store: worker A takes both shards and is killed once it has
/// written, then restarted; B joins and takes one lease (its store knows
/// nothing of that shard); B writes a batch and is killed, and A takes its
/// shard back (A's store is behind for it); A is stopped, the lease table lost (deleted or emptied)
/// and A's store directory deleted; A restarts alone and takes both shards
/// again (every shard read from the oldest record), then B joins. Late
/// retries are put between these steps, so copies of one event are decided
/// by different workers and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_store_each_event_once_across_kills_moves_and_lost_state() {
    let env = require_env!();
    let seed = shardsink_e2e::env::seed("events with the local store", None);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut scenario = Scenario::create(&env, "ev-local", SHARDS, Versioning::Enabled)
        .await
        .unwrap();
    scenario.settings = base(&scenario).set("format", "json");
    let stores = tempfile::tempdir().unwrap();
    let store_a = stores.path().join("a");
    let store_b = stores.path().join("b");
    let worker = |id: &str, store: &Path| {
        scenario
            .settings
            .clone()
            .set("worker-id", id)
            .set("event-dedup-store", "local")
            .set("event-dedup-dir", store.to_str().unwrap())
    };
    let (settings_a, settings_b) = (worker("ev-a", &store_a), worker("ev-b", &store_b));

    let payloads = event_payloads(300, seed, "ev", 6);
    let options = RetryOptions {
        rounds: 4,
        kpl_share: 0.3,
        other_shard_share: 0.0,
        shards: scenario.shards.clone(),
    };
    let mut producer = RetryingProducer::plan(&payloads.specs, &options, seed);
    println!(
        "{} events, {} user records in {} rounds",
        payloads.specs.len(),
        producer.copies(),
        producer.rounds()
    );
    let mut produced = Vec::new();
    let mut reader = scenario.archive_reader();

    // A alone: killed once it has written some of the first round, and
    // restarted.
    scenario.put_round(&mut producer, &mut produced).await;
    let baseline = placed(&mut reader).await;
    let mut a = Daemon::spawn(&settings_a).unwrap();
    owners(&scenario, &[("ev-a", 2)]).await;
    growth(&mut reader, &mut a, baseline).await;
    a.kill().unwrap();
    check_frozen(&scenario, &mut reader, &produced, "kill 1 (A)").await;
    scenario.put_round(&mut producer, &mut produced).await;
    let baseline = placed(&mut reader).await;
    let mut a = Daemon::spawn(&settings_a).unwrap();
    growth(&mut reader, &mut a, baseline).await;

    // B joins and takes a lease; once B has written a batch of it, B is
    // killed and A takes the lease back.
    let mut b = Daemon::spawn(&settings_b).unwrap();
    owners(&scenario, &[("ev-a", 1), ("ev-b", 1)]).await;
    scenario.put_round(&mut producer, &mut produced).await;
    wait_until(scaled(Duration::from_secs(60)), "B writes a batch", || {
        let log = b.log();
        async move { log.contains("\"batch written\"") }
    })
    .await
    .unwrap();
    b.kill().unwrap();
    check_frozen(&scenario, &mut reader, &produced, "kill 2 (B)").await;
    owners(&scenario, &[("ev-a", 2)]).await;
    wait_for_archive(
        &mut reader,
        &produced,
        &mut a,
        scaled(Duration::from_secs(90)),
    )
    .await
    .unwrap();

    // Everything lost but S3: the lease table, and A's store.
    stop_gracefully(&mut a, scaled(Duration::from_secs(40)))
        .await
        .unwrap();
    let table = scenario.settings.lease_table();
    if rng.random_bool(0.5) {
        assert!(delete_lease_table(&env, &table).await.unwrap());
        println!("lease table {table} deleted");
    } else {
        assert!(clear_lease_table(&env, &table).await.unwrap() > 0);
        println!("lease table {table} emptied");
    }
    assert!(
        store_a.is_dir(),
        "A kept its store in {}",
        store_a.display()
    );
    std::fs::remove_dir_all(&store_a).unwrap();
    scenario.put_round(&mut producer, &mut produced).await;
    assert_eq!(producer.rounds_left(), 0);
    let baseline = placed(&mut reader).await;
    let mut a = Daemon::spawn(&settings_a).unwrap();
    owners(&scenario, &[("ev-a", 2)]).await;
    growth(&mut reader, &mut a, baseline).await;
    let mut b = Daemon::spawn(&settings_b).unwrap();
    owners(&scenario, &[("ev-a", 1), ("ev-b", 1)]).await;

    let rejected = rejected_records(&payloads, &produced);
    let how = Finish::stopping_all(vec![&mut a, &mut b], 120)
        .events()
        .verify_deep()
        .rejected(rejected.iter().cloned())
        .ground_truth()
        .clean_shutdown();
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;
    // A rebuilt its window from S3, its store directory being gone.
    let log = a.log();
    assert!(
        log.contains("event store behind the archive") && log.contains("event window rebuilt"),
        "A did not rebuild its window; log {}",
        a.log_path().display()
    );

    let report = each_event_once(
        &produced,
        &archive,
        &json_pointer_id(EVENT_ID),
        rules(Scope::Shard(Lineage::default())),
    );
    assert_each_event_exactly_once(&report, &produced);
    assert_eq!(report.cross_shard_duplicates, 0);
    // Kept copies the format rejects are in the error prefix; duplicates of
    // them in the duplicates prefix.
    let in_errors: usize = archive.error_objects.iter().map(|o| o.records.len()).sum();
    let rejected_duplicates = archive
        .duplicates()
        .filter(|r| rejected.contains(&RecordId::of_archived(r)))
        .count();
    assert_eq!(in_errors + rejected_duplicates, rejected.len());
    assert!(in_errors > 0 && rejected_duplicates > 0);
    let (kpl, of_kpl) = kpl_duplicates(&archive);
    assert!(
        kpl > 0 && of_kpl > 0,
        "{kpl} KPL duplicates, {of_kpl} of KPL copies"
    );
    let (same, across) = duplicates_by_batch(&archive);
    println!("duplicates of a copy in their own batch: {same}, in another batch: {across}");
    assert!(across > 0, "no duplicate of a copy in another batch");
}

/// Whether the table exists.
async fn table_exists(scenario: &Scenario, table: &str) -> bool {
    match scenario
        .env
        .dynamodb
        .describe_table()
        .table_name(table)
        .send()
        .await
    {
        Ok(_) => true,
        Err(error)
            if error
                .as_service_error()
                .is_some_and(DescribeTableError::is_resource_not_found_exception) =>
        {
            false
        }
        Err(error) => panic!("DescribeTable {table}: {error:?}"),
    }
}

/// DynamoDB store (stream scope): some retries are put under another
/// partition key and land on the other shard. Workers A and B take a
/// lease each; A is killed as more records come and B takes its shard over;
/// A restarts and takes one back. Each event is kept once in the whole
/// stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_store_each_event_once_across_shards() {
    let env = require_env!();
    let seed = shardsink_e2e::env::seed("events with the DynamoDB store", None);
    let mut scenario = Scenario::create(&env, "ev-ddb", SHARDS, Versioning::Enabled)
        .await
        .unwrap();
    scenario.settings = base(&scenario).set("event-dedup-store", "dynamodb");
    // The daemon's default name, unique per run; the scenario deletes it.
    let event_table = scenario.settings.event_table();
    assert_eq!(event_table, scenario.resources().event_table);
    let settings_a = scenario.settings.clone().set("worker-id", "ev-a");
    let settings_b = scenario.settings.clone().set("worker-id", "ev-b");

    let payloads = event_payloads(300, seed, "ev", 6);
    let options = RetryOptions {
        rounds: 3,
        kpl_share: 0.3,
        other_shard_share: 0.4,
        shards: scenario.shards.clone(),
    };
    let mut producer = RetryingProducer::plan(&payloads.specs, &options, seed);
    println!(
        "{} events, {} user records ({} retries under another partition key) in {} rounds",
        payloads.specs.len(),
        producer.copies(),
        producer.other_shard_copies(),
        producer.rounds()
    );
    assert!(producer.other_shard_copies() > 0);
    let mut produced = Vec::new();
    let mut reader = scenario.archive_reader();

    scenario.put_round(&mut producer, &mut produced).await;
    let baseline = placed(&mut reader).await;
    let mut a = Daemon::spawn(&settings_a).unwrap();
    let mut b = Daemon::spawn(&settings_b).unwrap();
    owners(&scenario, &[("ev-a", 1), ("ev-b", 1)]).await;
    assert!(
        table_exists(&scenario, &event_table).await,
        "{event_table} created"
    );
    growth(&mut reader, &mut a, baseline).await;

    // A is killed once the archive grew after the second round was put;
    // B takes its shard once the lease expired.
    let baseline = placed(&mut reader).await;
    scenario.put_round(&mut producer, &mut produced).await;
    growth(&mut reader, &mut b, baseline).await;
    a.kill().unwrap();
    check_frozen(&scenario, &mut reader, &produced, "kill (A)").await;
    owners(&scenario, &[("ev-b", 2)]).await;
    let baseline = placed(&mut reader).await;
    scenario.put_round(&mut producer, &mut produced).await;
    assert_eq!(producer.rounds_left(), 0);
    growth(&mut reader, &mut b, baseline).await;

    // A is back and takes a lease from B.
    let mut a = Daemon::spawn(&settings_a).unwrap();
    owners(&scenario, &[("ev-a", 1), ("ev-b", 1)]).await;

    let how = Finish::stopping_all(vec![&mut b, &mut a], 120)
        .events()
        .verify_deep()
        .ground_truth()
        .clean_shutdown();
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;
    assert!(
        archive.error_objects.is_empty(),
        "the envelope format rejects nothing"
    );
    let report = each_event_once(
        &produced,
        &archive,
        &json_pointer_id(EVENT_ID),
        rules(Scope::Stream),
    );
    assert_each_event_exactly_once(&report, &produced);
    // Copies the producer put on the other shard were found there.
    let shards_of_event: HashMap<String, HashSet<&str>> =
        produced.iter().fold(HashMap::new(), |mut map, record| {
            if let Some(id) = json_pointer_id(EVENT_ID)(record) {
                map.entry(id).or_default().insert(record.shard_id.as_str());
            }
            map
        });
    let on_two_shards = shards_of_event.values().filter(|s| s.len() > 1).count();
    assert!(on_two_shards > 0, "no event has copies on two shards");
    assert!(
        report.cross_shard_duplicates > 0,
        "{on_two_shards} events have copies on two shards, and no duplicate names a copy on \
         the other shard"
    );
    let (kpl, of_kpl) = kpl_duplicates(&archive);
    assert!(
        kpl > 0 && of_kpl > 0,
        "{kpl} KPL duplicates, {of_kpl} of KPL copies"
    );
    let (_, across) = duplicates_by_batch(&archive);
    assert!(across > report.cross_shard_duplicates);
}

/// A partition key that maps to `shard_id`.
fn key_on(scenario: &Scenario, shard_id: &str) -> String {
    (0..10_000)
        .map(|n| format!("lag-{n}"))
        .find(|key| shard_of(key, &scenario.shards).as_deref() == Some(shard_id))
        .expect("a partition key for every shard")
}

/// The window is a distance, whichever copy arrived first. With the
/// DynamoDB store (stream scope) a lagging shard can decide a copy that arrived
/// *before* one another shard already kept: worker B is frozen (SIGSTOP)
/// while one copy of an event goes to its shard, and a second copy goes to
/// worker A's shard more than a window (5 s) later and is archived; then B
/// resumes and decides its copy against A's. Both copies are kept — the
/// earlier one is not a duplicate of a copy that arrived outside its window
/// — and `verify --deep` and the independent check agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_store_measures_the_window_both_ways_for_a_lagging_shard() {
    let env = require_env!();
    let mut scenario = Scenario::create(&env, "ev-lag", SHARDS, Versioning::Enabled)
        .await
        .unwrap();
    let window = Duration::from_secs(5);
    scenario.settings = base(&scenario)
        .set("event-dedup-store", "dynamodb")
        .set("event-dedup-window", "5s")
        // B stays frozen (about 12 s) well within its lease; new leases
        // are taken after one failover time.
        .set("failover-time", "30s");
    let mut a = Daemon::spawn(&scenario.settings.clone().set("worker-id", "ev-a")).unwrap();
    owners(&scenario, &[("ev-a", SHARDS as usize)]).await;
    let mut b = Daemon::spawn(&scenario.settings.clone().set("worker-id", "ev-b")).unwrap();
    owners(&scenario, &[("ev-a", 1), ("ev-b", 1)]).await;
    let rows = scenario.lease_rows().await.unwrap();
    let shard_of_worker = |worker: &str| {
        rows.iter()
            .find(|row| row.lease_owner.as_deref() == Some(worker))
            .map(|row| row.lease_key.clone())
            .unwrap()
    };
    let (key_a, key_b) = (
        key_on(&scenario, &shard_of_worker("ev-a")),
        key_on(&scenario, &shard_of_worker("ev-b")),
    );
    let event = br#"{"id":"lagging","v":1}"#;
    let mut reader = scenario.archive_reader();
    // B stole its lease from A: until A's task for that shard has noticed,
    // it could still read and decide B's copy itself.
    wait_until(
        scaled(Duration::from_secs(60)),
        "A stops the shard B took",
        || {
            let log = a.log();
            async move { log.contains("lease lost; stopped the shard") }
        },
    )
    .await
    .unwrap();

    b.pause().unwrap();
    let mut produced = scenario
        .put(&[RecordSpec::new(&key_b, event.as_slice())])
        .await
        .unwrap();
    tokio::time::sleep(window * 2 - Duration::from_secs(1)).await;
    produced.extend(
        scenario
            .put(&[RecordSpec::new(&key_a, event.as_slice())])
            .await
            .unwrap(),
    );
    wait_until(
        scaled(Duration::from_secs(60)),
        "A archives its copy",
        || {
            let log = a.log();
            async move { log.contains("\"batch written\"") }
        },
    )
    .await
    .unwrap();
    b.resume().unwrap();

    let how = Finish::stopping_all(vec![&mut a, &mut b], 120)
        .events()
        .verify_deep()
        .ground_truth()
        .clean_shutdown();
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;
    let report = each_event_once(
        &produced,
        &archive,
        &json_pointer_id(EVENT_ID),
        EventRules {
            window,
            fingerprint: true,
            scope: Scope::Stream,
        },
    );
    report.assert_ok();
    let arrivals: Vec<chrono::DateTime<chrono::Utc>> = archive
        .records()
        .chain(archive.duplicates())
        .map(|r| r.approximate_arrival_timestamp.parse().unwrap())
        .collect();
    let apart = (arrivals[1] - arrivals[0]).abs();
    println!("the two copies arrived {apart} apart (window {window:?})");
    assert!(
        apart.to_std().unwrap() > window,
        "the test needs copies more than a window apart"
    );
    assert_eq!(
        (report.kept_with_id, report.duplicates),
        (2, 0),
        "both copies kept: they arrived more than a window apart"
    );
}

/// Local store, across a split: the first round's events are decided in
/// the parent; once the parent is checkpointed at `SHARD_END` the worker
/// is killed and its store directory deleted. Late retries of those events
/// go to the children (the same partition keys); the restarted worker
/// rebuilds the ended parent's window from its decisions objects and
/// decides them duplicates of the parent's copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_store_each_event_once_across_a_split_and_a_lost_store() {
    let env = require_env!();
    if profile().as_deref() == Some("moto") {
        outcome::skip_unless_profile(
            "localstack",
            "moto cannot reshard (records keep going to the closed parent)",
        );
        return;
    }
    let seed = shardsink_e2e::env::seed("events across a split", None);
    let mut scenario = Scenario::create(&env, "ev-split", 1, Versioning::Enabled)
        .await
        .unwrap();
    scenario.settings = base(&scenario).set("format", "json");
    let stores = tempfile::tempdir().unwrap();
    let store = stores.path().join("store");
    let settings = scenario
        .settings
        .clone()
        .set("event-dedup-store", "local")
        .set("event-dedup-dir", store.to_str().unwrap());
    let payloads = event_payloads(180, seed, "ev-split", 6);
    let options = RetryOptions {
        rounds: 3,
        kpl_share: 0.3,
        other_shard_share: 0.0,
        shards: scenario.shards.clone(),
    };
    let mut producer = RetryingProducer::plan(&payloads.specs, &options, seed);
    let mut produced = Vec::new();
    let mut reader = scenario.archive_reader();

    scenario.put_round(&mut producer, &mut produced).await;
    let mut daemon = Daemon::spawn(&settings).unwrap();
    wait_for_archive(
        &mut reader,
        &produced,
        &mut daemon,
        scaled(Duration::from_secs(90)),
    )
    .await
    .unwrap();
    let parent = "shardId-000000000000";
    let children = scenario
        .split_then_lose_the_host(parent, &mut daemon, &store)
        .await;

    scenario.put_round(&mut producer, &mut produced).await;
    scenario.put_round(&mut producer, &mut produced).await;
    assert_eq!(producer.rounds_left(), 0);
    let mut daemon = Daemon::spawn(&settings).unwrap();
    let rejected = rejected_records(&payloads, &produced);
    let how = Finish::stopping(&mut daemon, 120)
        .events()
        .verify_deep()
        .rejected(rejected)
        .ground_truth();
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;
    assert!(
        rebuilt_window_from_s3(&daemon.log_entries(), parent),
        "no rebuild of {parent}'s window: {}",
        daemon.log_path().display()
    );

    let lineage = Lineage::of(&list_shards(&env, &scenario.stream).await.unwrap());
    let report = each_event_once(
        &produced,
        &archive,
        &json_pointer_id(EVENT_ID),
        rules(Scope::Shard(lineage)),
    );
    assert_each_event_exactly_once(&report, &produced);
    let of_the_parent = archive
        .duplicates()
        .filter(|record| {
            children.contains(&record.shard_id)
                && record
                    .duplicate_of
                    .as_ref()
                    .is_some_and(|of| of.shard_id == parent)
        })
        .count();
    println!(
        "{} duplicates, {of_the_parent} of them in a child naming the parent's copy",
        report.duplicates
    );
    assert!(
        of_the_parent > 0,
        "no retry in a child was decided a duplicate of the parent's copy"
    );
}
