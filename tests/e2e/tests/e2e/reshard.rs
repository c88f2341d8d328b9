//! Resharding: split one shard and then merge two, while two
//! workers run and a producer writes. Every record ends up in S3 once, and
//! parents are fully read before their children: whenever S3 holds any record
//! of a child shard, it already holds every record of each of its parents —
//! checked on every poll during the run, so for every partition key the
//! parent's records precede the child's.
//!
//! Needs a Kinesis that reshards (kinesis-mock: the LocalStack profile);
//! moto keeps routing records to a closed parent, so the test is skipped
//! there.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use anyhow::Result;
use shardsink_e2e::archive::Archive;
use shardsink_e2e::check::RecordId;
use shardsink_e2e::fixtures::{open_shard_hash_ranges, wait_stream_active};
use shardsink_e2e::producer::{BackgroundOptions, BackgroundProducer, ProducedRecord};
use shardsink_e2e::{Daemon, Finish, Scenario, TestEnv, Versioning, outcome, require_env, scaled};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_and_merge_while_producing() {
    let env = require_env!();
    if std::env::var("SHARDSINK_TEST_PROFILE").as_deref() == Ok("moto") {
        outcome::skip_unless_profile(
            "localstack",
            "moto cannot reshard (records keep going to the closed parent)",
        );
        return;
    }
    let scenario = Scenario::create(&env, "reshard", 2, Versioning::Enabled)
        .await
        .unwrap();
    let base = scenario
        .settings
        .clone()
        .set("buffer-max-records", "50")
        .set("buffer-max-age", "2s")
        .set("shard-sync-interval", "2s");
    let producer = BackgroundProducer::start(
        &env,
        &scenario.stream,
        BackgroundOptions {
            records_per_second: 60,
            seed: shardsink_e2e::env::seed("reshard", None),
            label: "reshard".to_owned(),
            ..BackgroundOptions::default()
        },
    );
    let mut daemons = [
        Daemon::spawn(&base.clone().set("worker-id", "r1")).unwrap(),
        Daemon::spawn(&base.clone().set("worker-id", "r2")).unwrap(),
    ];
    let mut reader = scenario.archive_reader();
    let mut parents: BTreeMap<String, Vec<String>> = BTreeMap::new();

    // Let both shards be read for a while, then split shard 0 at the middle
    // of its hash range, then merge its upper child with shard 1.
    watch(&mut reader, &producer, &parents, Duration::from_secs(4))
        .await
        .unwrap();
    let before = open_shard_hash_ranges(&env, &scenario.stream)
        .await
        .unwrap();
    let (low, high) = before["shardId-000000000000"];
    env.kinesis
        .split_shard()
        .stream_name(&scenario.stream)
        .shard_to_split("shardId-000000000000")
        .new_starting_hash_key((low + (high - low) / 2 + 1).to_string())
        .send()
        .await
        .unwrap();
    wait_stream_active(&env, &scenario.stream, scaled(Duration::from_secs(60)))
        .await
        .unwrap();
    record_parents(&env, &scenario.stream, &mut parents)
        .await
        .unwrap();
    println!("after split: {parents:?}");
    watch(&mut reader, &producer, &parents, Duration::from_secs(6))
        .await
        .unwrap();

    let after_split = open_shard_hash_ranges(&env, &scenario.stream)
        .await
        .unwrap();
    let upper_child = after_split
        .iter()
        .filter(|(id, _)| {
            parents
                .get(*id)
                .is_some_and(|p| p.contains(&"shardId-000000000000".to_owned()))
        })
        .max_by_key(|(_, (start, _))| *start)
        .map(|(id, _)| id.clone())
        .unwrap();
    env.kinesis
        .merge_shards()
        .stream_name(&scenario.stream)
        .shard_to_merge(&upper_child)
        .adjacent_shard_to_merge("shardId-000000000001")
        .send()
        .await
        .unwrap();
    wait_stream_active(&env, &scenario.stream, scaled(Duration::from_secs(60)))
        .await
        .unwrap();
    record_parents(&env, &scenario.stream, &mut parents)
        .await
        .unwrap();
    println!("after merge: {parents:?}");
    assert!(
        parents.values().any(|p| p.len() == 2),
        "a merged shard has two parents"
    );
    watch(&mut reader, &producer, &parents, Duration::from_secs(6))
        .await
        .unwrap();

    let produced = producer.stop().await.unwrap();
    // Versioned bucket: nothing overwritten either.
    let how = Finish::stopping_all(daemons.iter_mut().collect(), 180);
    let archive = scenario.finish(&mut reader, &produced, how).await.archive;
    let problems = order_problems(&produced, &archive, &parents);
    assert!(
        problems.is_empty(),
        "children written before their parents were complete: {problems:#?}"
    );
    let rows = scenario.lease_rows().await.unwrap();
    for parent in parents.values().flatten().collect::<BTreeSet<_>>() {
        let row = rows.iter().find(|r| &r.lease_key == parent);
        assert_eq!(
            row.and_then(|r| r.checkpoint.as_deref()),
            Some("SHARD_END"),
            "parent {parent} must be checkpointed at SHARD_END"
        );
    }
}

/// Polls S3 for `span`, checking the parent-before-child order each time.
async fn watch(
    reader: &mut shardsink_e2e::ArchiveReader,
    producer: &BackgroundProducer,
    parents: &BTreeMap<String, Vec<String>>,
    span: Duration,
) -> Result<()> {
    let until = std::time::Instant::now() + span;
    while std::time::Instant::now() < until {
        let produced = producer.produced();
        let archive = reader.read().await?;
        let problems = order_problems(&produced, &archive, parents);
        anyhow::ensure!(
            problems.is_empty(),
            "order broken during the run: {problems:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// For every child shard with a record in S3: every produced record of each
/// parent must be in S3 too.
fn order_problems(
    produced: &[ProducedRecord],
    archive: &Archive,
    parents: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let archived: HashSet<RecordId> = archive.records().map(RecordId::of_archived).collect();
    let shards_in_s3: BTreeSet<&str> = archive.records().map(|r| r.shard_id.as_str()).collect();
    let mut problems = Vec::new();
    for (child, child_parents) in parents {
        if !shards_in_s3.contains(child.as_str()) {
            continue;
        }
        for parent in child_parents {
            let missing = produced
                .iter()
                .filter(|r| &r.shard_id == parent && !archived.contains(&RecordId::of_produced(r)))
                .count();
            if missing > 0 {
                problems.push(format!("{child} has records in S3 while {missing} records of its parent {parent} do not"));
            }
        }
    }
    problems
}

/// Child shard → parents, from ListShards.
async fn record_parents(
    env: &TestEnv,
    stream: &str,
    parents: &mut BTreeMap<String, Vec<String>>,
) -> Result<()> {
    let output = env.kinesis.list_shards().stream_name(stream).send().await?;
    for shard in output.shards() {
        let ids: Vec<String> = shard
            .parent_shard_id()
            .into_iter()
            .chain(shard.adjacent_parent_shard_id())
            .map(str::to_owned)
            .collect();
        if !ids.is_empty() {
            parents.insert(shard.shard_id().to_owned(), ids);
        }
    }
    Ok(())
}
