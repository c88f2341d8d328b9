//! A crash at each step of a batch's life, through the daemon's failpoints
//! (needs `cargo build -p shardsink --features failpoints`): the fourth time
//! the step is reached the process aborts on the spot. Then, before the
//! restart, every record at or below a checkpoint must already be in S3
//! (contract line 3); after a restart without failpoints every record is in
//! exactly one object (line 1).
//!
//! - `after-pending`: the batch recorded in the lease row but not written;
//!   the restarted daemon must write exactly that batch, under exactly that
//!   key (line 6).
//! - `after-put`: written but not checkpointed; the test deletes the object
//!   and the restarted daemon must write the same key with the same bytes
//!   (line 5).
//! - `after-checkpoint`, `before-pending`: nothing to replay; no duplicate.
//! - `after-error-put`, in the `json` format with payloads it rejects: the
//!   batch's error object written, its main object (the commit marker) not.
//!   The restarted daemon replays the batch — its error object again (412,
//!   same bytes), then its main object — and every record is once in the
//!   main prefix or the error prefix.
//!
//! The recovery run uses a different `--buffer-max-records`, so a replay
//! that ignored the lease row's pending batch would write other keys.
//!
//! Except for `after-put` (which deletes an object on purpose) the bucket is
//! versioned and every key must have exactly one version (line 2).

use std::time::Duration;

use shardsink_e2e::archive::{delete_object, get_object};
use shardsink_e2e::fixtures::PendingBatch;
use shardsink_e2e::payloads::json_payloads;
use shardsink_e2e::producer::small_record_specs;
use shardsink_e2e::seq::Seq;
use shardsink_e2e::{
    Archive, ArchiveReader, Daemon, Finish, LeaseRow, ObjectKey, ProducedRecord, Scenario,
    Settings, TestEnv, Versioning, require_env, scaled,
};

/// Passes before the failpoint fires.
const PASSES: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_pending() {
    let env = require_env!();
    crash_and_recover(&env, "after-pending").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_put() {
    let env = require_env!();
    crash_and_recover(&env, "after-put").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_checkpoint() {
    let env = require_env!();
    crash_and_recover(&env, "after-checkpoint").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_pending() {
    let env = require_env!();
    crash_and_recover(&env, "before-pending").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_error_put() {
    let env = require_env!();
    let mut scenario = Scenario::create(&env, "fp-after-error-put", 2, Versioning::Enabled)
        .await
        .unwrap();
    scenario.settings = scenario
        .settings
        .clone()
        .set("format", "json")
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s")
        .set("compression", "none");
    let payloads = json_payloads(1_500, 1, "error-put before");
    let mut produced = scenario.put(&payloads.specs).await.unwrap();
    let mut rejected = payloads.rejected_ids(&produced);

    // Crash between a batch's two PUTs.
    let mut reader = scenario.archive_reader();
    let (rows, archive) = crash_at(
        &scenario,
        &scenario.settings,
        "after-error-put",
        &produced,
        &mut reader,
    )
    .await;
    // The batch the crash cut: pending, its error object in S3, its main
    // object not.
    let pending: Vec<PendingBatch> = rows.iter().filter_map(|r| r.pending_batch()).collect();
    let cut: Vec<(&PendingBatch, String)> = pending
        .iter()
        .filter(|batch| archive.object(&batch.key).is_none())
        .filter_map(|batch| {
            archive
                .uncommitted_error_objects
                .iter()
                .find(|o| {
                    (o.key.first.as_str(), o.key.last.as_str())
                        == (batch.first.as_str(), batch.last.as_str())
                })
                .map(|o| (batch, o.key.key.clone()))
        })
        .collect();
    assert!(
        !cut.is_empty(),
        "a crash after the error object's PUT leaves a pending batch with its error object \
         and without its main object: pending {pending:#?}, uncommitted error objects {:#?}",
        archive
            .uncommitted_error_objects
            .iter()
            .map(|o| &o.key.key)
            .collect::<Vec<_>>()
    );

    // Recover, with more records, and other batch boundaries.
    let more = json_payloads(300, 2, "error-put after");
    let more_produced = scenario.put(&more.specs).await.unwrap();
    rejected.extend(more.rejected_ids(&more_produced));
    produced.extend(more_produced);
    let mut daemon =
        Daemon::spawn(&scenario.settings.clone().set("buffer-max-records", "70")).unwrap();
    let how = Finish::stopping(&mut daemon, 90)
        .clean_shutdown()
        .verify_deep()
        .rejected(rejected);
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;
    for (batch, error_key) in cut {
        let main = archive
            .object(&batch.key)
            .unwrap_or_else(|| panic!("the cut batch {} was not written", batch.key));
        assert_eq!(
            (main.key.first.as_str(), main.key.last.as_str()),
            (batch.first.as_str(), batch.last.as_str())
        );
        assert!(
            archive.error_objects.iter().any(|o| o.key.key == error_key),
            "{error_key} is its committed error object"
        );
    }
}

/// A pending batch whose object was written before the crash, with the
/// bytes it had.
struct WrittenPending {
    batch: PendingBatch,
    bytes: Vec<u8>,
}

async fn crash_and_recover(env: &TestEnv, failpoint: &str) {
    let versioning = if failpoint == "after-put" {
        Versioning::Off
    } else {
        Versioning::Enabled
    };
    let scenario = Scenario::create(env, &format!("fp-{failpoint}"), 2, versioning)
        .await
        .unwrap();
    let mut produced = scenario
        .put(&small_record_specs(
            1_500,
            1,
            &format!("{failpoint} before"),
        ))
        .await
        .unwrap();
    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", "100")
        .set("buffer-max-age", "2s")
        .set("compression", "none");

    let mut reader = scenario.archive_reader();
    let (rows, _) = crash_at(&scenario, &settings, failpoint, &produced, &mut reader).await;
    let pending: Vec<PendingBatch> = rows.iter().filter_map(|r| r.pending_batch()).collect();
    println!("pending batches at the crash: {pending:#?}");
    for batch in &pending {
        check_pending_key(&scenario, batch);
    }

    let mut written_pending = Vec::new();
    match failpoint {
        "after-pending" => assert!(
            !pending.is_empty(),
            "a crash after recording a batch must leave it in the lease row: {rows:#?}"
        ),
        "after-put" => {
            // The batch whose PUT triggered the failpoint is written and
            // still pending; take it (and any other in the same state) away.
            for batch in &pending {
                if let Some(bytes) = get_object(env, &scenario.bucket, &batch.key).await.unwrap() {
                    delete_object(env, &scenario.bucket, &batch.key)
                        .await
                        .unwrap();
                    written_pending.push(WrittenPending {
                        batch: batch.clone(),
                        bytes,
                    });
                }
            }
            assert!(
                !written_pending.is_empty(),
                "a crash after the PUT must leave a pending batch whose object exists: {pending:#?}"
            );
        }
        _ => {}
    }

    // Recover, with more records arriving after the crash.
    produced.extend(
        scenario
            .put(&small_record_specs(300, 2, &format!("{failpoint} after")))
            .await
            .unwrap(),
    );
    // Different batch boundaries from the first run (see the module docs).
    let mut daemon = Daemon::spawn(&settings.clone().set("buffer-max-records", "70")).unwrap();
    // Line 2 too on the versioned bucket; and a clean shutdown.
    let how = Finish::stopping(&mut daemon, 90).clean_shutdown();
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;

    // Line 6: the recorded batch was written as recorded.
    for batch in &pending {
        let Some(object) = archive.object(&batch.key) else {
            // Batches recorded but never written must be replayed under the
            // same key: the key is a pure function of the records.
            panic!(
                "the pending batch {} recorded before the crash was not written under its key",
                batch.key
            );
        };
        assert_eq!(
            (object.key.first.as_str(), object.key.last.as_str()),
            (batch.first.as_str(), batch.last.as_str()),
            "pending batch {}",
            batch.key
        );
    }
    // Line 5: the replay wrote the same bytes.
    for written in &written_pending {
        let bytes = get_object(env, &scenario.bucket, &written.batch.key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{} was not rewritten", written.batch.key));
        assert!(
            bytes == written.bytes,
            "{} was rewritten with different bytes ({} before, {} after)",
            written.batch.key,
            written.bytes.len(),
            bytes.len()
        );
    }
}

/// Runs the daemon with `settings` until `failpoint` aborts it (the
/// [`PASSES`]+1st time it is reached), then checks contract lines 3 and 4
/// on what the crash left: every record at or below a checkpoint is in S3
/// (in committed batches), and each shard's archive is a gap-free prefix of
/// `produced`. Returns the lease rows and the archive at the crash.
async fn crash_at(
    scenario: &Scenario,
    settings: &Settings,
    failpoint: &str,
    produced: &[ProducedRecord],
    reader: &mut ArchiveReader,
) -> (Vec<LeaseRow>, Archive) {
    let mut daemon = Daemon::spawn(
        &settings
            .clone()
            .failpoints(format!("{failpoint}={PASSES}*off->return")),
    )
    .unwrap();
    let status = daemon
        .wait_exit(scaled(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|error| {
            panic!(
                "{error:#}: the {failpoint} failpoint never fired — is the binary built with \
             `--features failpoints`?"
            )
        });
    assert!(
        !status.success(),
        "the {failpoint} failpoint must abort the process, but it exited with {status}"
    );
    println!("crashed at {failpoint}: {status}");
    scenario
        .assert_frozen(reader, produced, &format!("the crash at {failpoint}"))
        .await
}

/// The recorded key must be a valid key for the recorded shard and range.
fn check_pending_key(scenario: &Scenario, batch: &PendingBatch) {
    let key = ObjectKey::parse(&scenario.settings.prefix(), &batch.key)
        .unwrap_or_else(|e| panic!("pendingBatchKey {:?} does not parse: {e}", batch.key));
    assert_eq!(
        key.shard_id, batch.shard_id,
        "pendingBatchKey {}",
        batch.key
    );
    let first = Seq::parse(&batch.first)
        .unwrap_or_else(|e| panic!("pendingBatchFirstSequenceNumber of {}: {e}", batch.shard_id));
    let last = Seq::parse(&batch.last)
        .unwrap_or_else(|e| panic!("pendingCheckpoint of {}: {e}", batch.shard_id));
    assert_eq!(
        (&key.first, &key.last),
        (&first, &last),
        "pendingBatchKey {}",
        batch.key
    );
}
