//! `shardsink verify` against real archives: the daemon archives a few
//! hundred records, then the test leaves the archive alone, duplicates one
//! object, or deletes one, and runs the real binary's `verify` on it.
//!
//! - A clean archive (plus a foreign key) is exact: exit 0.
//! - A copy of an object under another extension overlaps it: exit 1 with
//!   both keys named, with or without the stream.
//! - A deleted object in the middle of a shard is a gap only the stream can
//!   show: exit 1 with `--stream`, naming the shard, the missing sequence
//!   numbers and the objects around them; exit 0 from the keys alone
//!   (Kinesis sequence numbers are not consecutive, so a hole between two
//!   key ranges proves nothing).

use std::collections::BTreeSet;
use std::sync::Arc;

use shardsink_e2e::archive::{ArchivedObject, Compression, delete_object, get_object, put_object};
use shardsink_e2e::daemon::{CapturedRun, run_verify};
use shardsink_e2e::producer::small_record_specs;
use shardsink_e2e::{Archive, Daemon, Finish, Scenario, Versioning, require_env};

/// Records per test: a few objects per shard with the small buffers below.
const RECORDS: usize = 240;

/// A stream of two shards archived exactly once by one daemon run (SIGTERM
/// at the end), several objects per shard.
async fn archived(env: &shardsink_e2e::TestEnv, name: &str) -> (Scenario, Archive) {
    let scenario = Scenario::create(env, name, 2, Versioning::Off)
        .await
        .unwrap();
    let seed = shardsink_e2e::env::seed(name, Some(RECORDS as u64));
    let produced = scenario
        .put(&small_record_specs(RECORDS, seed, name))
        .await
        .unwrap();
    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", "20")
        .set("buffer-max-age", "2s");
    let mut daemon = Daemon::spawn(&settings).unwrap();
    let how = Finish::stopping(&mut daemon, 90);
    let archive = scenario
        .finish(&mut scenario.archive_reader(), &produced, how)
        .await
        .archive;
    assert!(
        archive.problems().is_empty(),
        "the daemon's archive has problems before the test touches it: {:#?}",
        archive.problems()
    );
    (scenario, archive)
}

/// Runs `shardsink verify ARGS` against the local servers.
async fn verify(args: &[&str]) -> CapturedRun {
    run_verify(args, &[("SHARDSINK_S3_FORCE_PATH_STYLE", "true")])
        .await
        .unwrap()
}

fn exit_code(run: &CapturedRun) -> Option<i32> {
    run.status.code()
}

/// The objects of `shard_id`, in sequence order.
fn shard_objects(archive: &Archive, shard_id: &str) -> Vec<Arc<ArchivedObject>> {
    let mut objects: Vec<Arc<ArchivedObject>> = archive
        .objects
        .iter()
        .filter(|o| o.key.shard_id == shard_id)
        .cloned()
        .collect();
    objects.sort_by(|a, b| a.key.first.cmp(&b.key.first));
    objects
}

/// A shard with at least three objects, and its objects in sequence order.
fn shard_with_three_objects(archive: &Archive) -> (String, Vec<Arc<ArchivedObject>>) {
    let shards: BTreeSet<&str> = archive
        .objects
        .iter()
        .map(|o| o.key.shard_id.as_str())
        .collect();
    shards
        .into_iter()
        .map(|shard| (shard.to_owned(), shard_objects(archive, shard)))
        .find(|(_, objects)| objects.len() >= 3)
        .unwrap_or_else(|| {
            panic!(
                "no shard has three objects; keys: {:#?}",
                archive
                    .objects
                    .iter()
                    .map(|o| &o.key.key)
                    .collect::<Vec<_>>()
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_archive_is_exact() {
    let env = require_env!();
    let (scenario, archive) = archived(&env, "verify-clean").await;
    // A foreign key is a warning, not a problem.
    let foreign = format!("{}/README.txt", scenario.settings.prefix());
    put_object(&env, &scenario.bucket, &foreign, b"notes\n".to_vec())
        .await
        .unwrap();

    // --prefix and the lease table default to the daemon's defaults.
    let run = verify(&[
        "--bucket",
        &scenario.bucket,
        "--stream",
        &scenario.stream,
        "--deep",
    ])
    .await;
    assert_eq!(exit_code(&run), Some(0), "a clean archive must verify");
    assert_eq!(run.stdout.lines().last(), Some("exact"), "{}", run.stdout);
    for expected in [
        format!("objects:      {}", archive.objects.len()),
        format!("records:      {} lines", archive.record_count()),
        "overlaps:     0".to_owned(),
        "unreadable:   0".to_owned(),
        format!("gaps:         0 missing records in 0 runs ({RECORDS} records checked"),
        "foreign keys: 1".to_owned(),
        format!("foreign key {foreign}"),
    ] {
        assert!(
            run.stdout.contains(&expected),
            "{expected:?} not in the summary"
        );
    }
    for shard in &scenario.shards {
        assert!(
            run.stderr
                .contains(&format!("checked shard {}: ", shard.shard_id)),
            "no progress line for {} on stderr",
            shard.shard_id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_object_overlaps() {
    let env = require_env!();
    let (scenario, archive) = archived(&env, "verify-dup").await;
    let (_, objects) = shard_with_three_objects(&archive);
    let original = &objects[1].key;
    assert_eq!(
        original.compression,
        Compression::Zstd,
        "the daemon's default"
    );
    // The same records under the same name with another extension: a key
    // the daemon's resume skip would also read as the same range.
    let body = get_object(&env, &scenario.bucket, &original.key)
        .await
        .unwrap()
        .unwrap();
    let lines = Compression::Zstd.decompress(&body).unwrap();
    let copy = original
        .key
        .replace(Compression::Zstd.extension(), Compression::Gzip.extension());
    put_object(
        &env,
        &scenario.bucket,
        &copy,
        Compression::Gzip.compress(&lines).unwrap(),
    )
    .await
    .unwrap();

    let prefix = scenario.settings.prefix();
    for args in [
        vec![
            "--bucket",
            scenario.bucket.as_str(),
            "--stream",
            scenario.stream.as_str(),
            "--deep",
        ],
        // The keys alone show it.
        vec![
            "--bucket",
            scenario.bucket.as_str(),
            "--prefix",
            prefix.as_str(),
        ],
    ] {
        let run = verify(&args).await;
        assert_eq!(exit_code(&run), Some(1), "a duplicate must fail {args:?}");
        let overlap = run
            .stdout
            .lines()
            .find(|line| line.contains("overlap in"))
            .unwrap_or_else(|| panic!("no overlap line in:\n{}", run.stdout));
        assert!(
            overlap.contains(&original.key) && overlap.contains(&copy),
            "the overlap line must name {} and {copy}: {overlap}",
            original.key
        );
        assert!(run.stdout.contains("overlaps:     1\n"), "{}", run.stdout);
        assert!(
            run.stdout
                .lines()
                .last()
                .unwrap_or_default()
                .starts_with("NOT exact: 1 overlaps"),
            "{}",
            run.stdout
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_object_is_a_gap_in_the_stream() {
    let env = require_env!();
    let (scenario, archive) = archived(&env, "verify-gap").await;
    let (shard_id, objects) = shard_with_three_objects(&archive);
    // Neither the first nor the newest object of the shard.
    let (before, deleted, after) = (&objects[0].key, &objects[1], &objects[2].key);
    delete_object(&env, &scenario.bucket, &deleted.key.key)
        .await
        .unwrap();
    let missing: BTreeSet<&str> = deleted
        .records
        .iter()
        .map(|r| r.sequence_number.as_str())
        .collect();
    let (first, last) = (deleted.key.first.as_str(), deleted.key.last.as_str());
    let span = if missing.len() == 1 {
        format!("record {first}")
    } else {
        format!("{} records {first} .. {last}", missing.len())
    };

    let run = verify(&[
        "--bucket",
        &scenario.bucket,
        "--stream",
        &scenario.stream,
        "--deep",
    ])
    .await;
    assert_eq!(exit_code(&run), Some(1), "a lost object must fail");
    let gap = run
        .stdout
        .lines()
        .find(|line| line.contains("gap in"))
        .unwrap_or_else(|| panic!("no gap line in:\n{}", run.stdout));
    assert!(
        gap.contains(&format!("gap in {shard_id}: {span} (arrived "))
            && gap.contains(&format!("between {} (", before.key))
            && gap.contains(&format!(" and {} (", after.key)),
        "the gap line must name {shard_id}, {span} and the objects around it: {gap}"
    );
    assert!(
        run.stdout
            .lines()
            .last()
            .unwrap_or_default()
            .ends_with(&format!(
                "0 overlaps, 0 unreadable objects, {} missing records",
                missing.len()
            )),
        "{}",
        run.stdout
    );

    // --since past the lost records starts each shard after them: exact.
    let newest_lost = deleted
        .records
        .iter()
        .map(|r| chrono::DateTime::parse_from_rfc3339(&r.approximate_arrival_timestamp).unwrap())
        .max()
        .unwrap();
    // As verify prints it: UTC, fractional seconds only when not zero.
    let since = (newest_lost + chrono::Duration::milliseconds(1))
        .to_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
    let run = verify(&[
        "--bucket",
        &scenario.bucket,
        "--stream",
        &scenario.stream,
        "--since",
        &since,
    ])
    .await;
    assert_eq!(
        exit_code(&run),
        Some(0),
        "records before --since are not read:\n{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(&format!("records checked, from {since})")),
        "{}",
        run.stdout
    );

    // Without the stream, the keys alone cannot show it.
    let prefix = scenario.settings.prefix();
    let run = verify(&["--bucket", &scenario.bucket, "--prefix", &prefix, "--deep"]).await;
    assert_eq!(
        exit_code(&run),
        Some(0),
        "key ranges alone cannot show a gap"
    );
    assert_eq!(
        run.stdout.lines().last(),
        Some("exact (gaps not checked)"),
        "{}",
        run.stdout
    );
}
