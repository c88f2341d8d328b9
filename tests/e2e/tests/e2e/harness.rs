//! Self-tests of the harness against the local servers, without the daemon:
//! the producer and the ground truth agree, the archive reader and the
//! checker accept a correct archive written by the harness's reference
//! encoder and catch every planted fault, lease rows and object versions
//! read back as written.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use shardsink_e2e::archive::{
    self, Compression, ObjectKey, encode_line, get_object, list_object_versions, overwritten_keys,
    put_object, put_object_with_metadata,
};
use shardsink_e2e::check::{checkpoint_problems, exactly_once};
use shardsink_e2e::cleanup::{Resources, delete_bucket};
use shardsink_e2e::fixtures::{Versioning, create_bucket, delete_lease_table, read_lease_rows};
use shardsink_e2e::producer::{
    BackgroundOptions, BackgroundProducer, MAX_RECORD_BYTES, ProducedRecord, kpl_record_specs,
    mixed_record_specs, put_kpl_records, small_record_specs,
};
use shardsink_e2e::seq::Seq;
use shardsink_e2e::stream::{GroundTruth, read_stream};
use shardsink_e2e::{Scenario, TestEnv, require_env, unique_name};

/// Writes `produced` the way the contract says shardsink must: per shard
/// and arrival minute, batches of at most `batch` records in sequence order,
/// compression cycling through none, gzip and zstd, with the format and
/// record count in the objects' metadata. Returns the keys.
async fn write_reference_archive(
    scenario: &Scenario,
    produced: &[ProducedRecord],
    truth: &GroundTruth,
    batch: usize,
) -> Vec<String> {
    let prefix = scenario.settings.prefix();
    let mut groups: BTreeMap<(String, String), Vec<&ProducedRecord>> = BTreeMap::new();
    for record in produced {
        let arrival = truth
            .get(&record.shard_id, &record.sequence_number)
            .expect("every produced record is in the stream")
            .approximate_arrival_timestamp;
        let minute = archive::truncate_to_minute(arrival).to_rfc3339();
        groups
            .entry((record.shard_id.clone(), minute))
            .or_default()
            .push(record);
    }
    let mut keys = Vec::new();
    for ((shard_id, _), mut records) in groups {
        records.sort_by(|a, b| {
            Seq::parse(&a.sequence_number)
                .unwrap()
                .cmp(&Seq::parse(&b.sequence_number).unwrap())
                .then(a.sub_sequence_number.cmp(&b.sub_sequence_number))
        });
        for chunk in records.chunks(batch) {
            let truth_of = |r: &ProducedRecord| truth.get(&r.shard_id, &r.sequence_number).unwrap();
            let first = Seq::parse(&chunk[0].sequence_number).unwrap();
            let last = Seq::parse(&chunk[chunk.len() - 1].sequence_number).unwrap();
            let compression =
                [Compression::None, Compression::Gzip, Compression::Zstd][keys.len() % 3];
            let key = ObjectKey::format(
                &prefix,
                archive::truncate_to_minute(truth_of(chunk[0]).approximate_arrival_timestamp),
                &shard_id,
                &first,
                &last,
                compression,
            );
            let body: String = chunk
                .iter()
                .map(|r| {
                    encode_line(
                        &r.shard_id,
                        &r.sequence_number,
                        r.sub_sequence_number,
                        &r.partition_key,
                        &truth_of(r).arrival_text(),
                        &r.data,
                    )
                })
                .collect();
            put_object_with_metadata(
                &scenario.env,
                &scenario.bucket,
                &key,
                compression.compress(body.as_bytes()).unwrap(),
                &[
                    ("shardsink-format", "envelope"),
                    ("shardsink-records", &chunk.len().to_string()),
                ],
            )
            .await
            .unwrap();
            keys.push(key);
        }
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_matches_the_stream() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "h-producer", 3, Versioning::Off)
        .await
        .unwrap();
    let specs = mixed_record_specs(1_500, 11);
    let mut produced = scenario.put(&specs).await.unwrap();
    assert_eq!(produced.len(), specs.len());
    for (spec, record) in specs.iter().zip(&produced) {
        assert_eq!(spec.data, record.data);
        assert_eq!(spec.partition_key, record.partition_key);
    }
    produced.extend(
        put_kpl_records(&env, &scenario.stream, &kpl_record_specs(10, 11))
            .await
            .unwrap(),
    );

    let truth = read_stream(&env, &scenario.stream).await.unwrap();
    assert_eq!(truth.len(), 1_500 + 10);
    let problems = truth.check_produced(&produced);
    assert!(problems.is_empty(), "{problems:#?}");
    // The near-1 MiB records went through unchanged.
    let biggest = truth
        .records
        .iter()
        .map(|r| r.data.len() + r.partition_key.len())
        .max()
        .unwrap();
    assert_eq!(biggest, MAX_RECORD_BYTES);
    // Every shard got records, and sequence numbers rise in each shard.
    let mut per_shard: HashMap<&str, Vec<Seq>> = HashMap::new();
    for record in &truth.records {
        per_shard
            .entry(&record.shard_id)
            .or_default()
            .push(Seq::parse(&record.sequence_number).unwrap());
    }
    assert_eq!(per_shard.len(), 3, "records in {:?}", per_shard.keys());
    for (shard, seqs) in per_shard {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{shard} not in sequence order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checker_accepts_a_reference_archive_and_catches_faults() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "h-checker", 2, Versioning::Off)
        .await
        .unwrap();
    let mut produced = scenario
        .put(&small_record_specs(400, 5, "h"))
        .await
        .unwrap();
    produced.extend(
        put_kpl_records(&env, &scenario.stream, &kpl_record_specs(8, 5))
            .await
            .unwrap(),
    );
    let truth = read_stream(&env, &scenario.stream).await.unwrap();
    let keys = write_reference_archive(&scenario, &produced, &truth, 50).await;
    assert!(keys.len() >= 8, "{} objects", keys.len());

    let mut reader = scenario.archive_reader();
    let archive = reader.read().await.unwrap();
    assert_eq!(archive.objects.len(), keys.len());
    let mut report = exactly_once(&produced, &archive);
    report.check_arrival_times(&archive, &truth);
    report.assert_exact();
    assert!(archive.records().any(|r| r.sub_sequence_number.is_some()));

    // Fault 1: an object disappears → its records are missing; a checkpoint
    // past them breaks contract line 3.
    let victim = archive.objects[1].clone();
    archive::delete_object(&env, &scenario.bucket, &victim.key.key)
        .await
        .unwrap();
    // Fault 2: a batch is written twice under another key.
    let twin = archive
        .objects
        .iter()
        .enumerate()
        .find(|(i, o)| *i != 1 && o.key.compression != Compression::None)
        .map(|(_, o)| o.clone())
        .unwrap();
    let twin_body = get_object(&env, &scenario.bucket, &twin.key.key)
        .await
        .unwrap()
        .unwrap();
    let twin_key = twin
        .key
        .key
        .replace(twin.key.compression.extension(), ".jsonl");
    let twin_body = twin.key.compression.decompress(&twin_body).unwrap();
    put_object(&env, &scenario.bucket, &twin_key, twin_body)
        .await
        .unwrap();
    // Fault 3: a record nobody produced, with a wrong arrival time, in a
    // key that lies about its range.
    let stranger_key = ObjectKey::format(
        &scenario.settings.prefix(),
        twin.key.bucket_start,
        &twin.key.shard_id,
        &Seq::parse("999999").unwrap(),
        &Seq::parse("999999").unwrap(),
        Compression::None,
    );
    let stranger = encode_line(
        &twin.key.shard_id,
        "1000000",
        None,
        "x",
        "2001-01-01T00:00:00.000Z",
        b"?",
    );
    put_object(&env, &scenario.bucket, &stranger_key, stranger.into_bytes())
        .await
        .unwrap();
    // Fault 4: garbage under the prefix and outside it.
    put_object(
        &env,
        &scenario.bucket,
        &format!("{}/not-a-batch.txt", scenario.settings.prefix()),
        b"x".to_vec(),
    )
    .await
    .unwrap();
    put_object(&env, &scenario.bucket, "elsewhere/object", b"x".to_vec())
        .await
        .unwrap();

    let archive = reader.read().await.unwrap();
    let mut report = exactly_once(&produced, &archive);
    report.check_arrival_times(&archive, &truth);
    println!("{}", report.summary());
    assert_eq!(report.missing.len(), victim.records.len());
    assert_eq!(report.duplicated.len(), twin.records.len());
    assert!(
        report
            .duplicated
            .iter()
            .all(|d| d.locations.len() == 2 && d.locations.iter().any(|l| l.contains(".jsonl:")))
    );
    assert_eq!(report.unexpected.len(), 1);
    assert!(report.mismatched.is_empty(), "{}", report.summary());
    let formats: Vec<String> = report
        .archive_problems
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        formats
            .iter()
            .any(|p| p.contains("outside the key's range")),
        "{formats:#?}"
    );
    assert!(
        formats.iter().any(|p| p.contains("not-a-batch.txt")),
        "{formats:#?}"
    );
    assert!(
        formats.iter().any(|p| p.contains("elsewhere/object")),
        "{formats:#?}"
    );
    assert!(
        formats
            .iter()
            .any(|p| p.contains("not in the key's minute")),
        "{formats:#?}"
    );

    // Contract line 3 check: a checkpoint at the victim's last record.
    let rows = vec![shardsink_e2e::LeaseRow {
        lease_key: victim.key.shard_id.clone(),
        lease_owner: None,
        lease_counter: Some(1),
        checkpoint: Some(victim.key.last.to_string()),
        checkpoint_sub_sequence_number: None,
        pending_checkpoint: None,
        pending_batch_key: None,
        pending_batch_first_sequence_number: None,
        item: HashMap::new(),
    }];
    let problems = checkpoint_problems(&rows, &produced, &archive);
    assert!(problems.len() >= victim.records.len(), "{problems:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_producer_produces_until_stopped() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "h-bg", 2, Versioning::Off)
        .await
        .unwrap();
    let producer = BackgroundProducer::start(
        &env,
        &scenario.stream,
        BackgroundOptions {
            records_per_second: 200,
            ..BackgroundOptions::default()
        },
    );
    shardsink_e2e::wait_until(Duration::from_secs(30), "300 records produced", || async {
        producer.count() >= 300
    })
    .await
    .unwrap();
    let produced = producer.stop().await.unwrap();
    let truth = read_stream(&env, &scenario.stream).await.unwrap();
    assert_eq!(truth.len(), produced.len());
    let problems = truth.check_produced(&produced);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A table shaped like the daemon's lease table (key `leaseKey`).
async fn create_lease_table(env: &TestEnv, table: &str) {
    env.dynamodb
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseKey")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("leaseKey")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_rows_and_versions_read_back() {
    let env = require_env!();
    let table = unique_name("h-lease");
    create_lease_table(&env, &table).await;
    let s = |v: &str| AttributeValue::S(v.to_owned());
    env.dynamodb
        .put_item()
        .table_name(&table)
        .item("leaseKey", s("shardId-000000000001"))
        .item("leaseOwner", s("w"))
        .item("leaseCounter", AttributeValue::N("7".to_owned()))
        .item("checkpoint", s("10"))
        .item("pendingCheckpoint", s("12"))
        .item(
            "pendingBatchKey",
            s("p/2026/11/21/05/27/shardId-000000000001/99788-00211-00212.jsonl.zst"),
        )
        .item("pendingBatchFirstSequenceNumber", s("11"))
        .send()
        .await
        .unwrap();
    env.dynamodb
        .put_item()
        .table_name(&table)
        .item("leaseKey", s("shardId-000000000000"))
        .item("leaseCounter", AttributeValue::N("1".to_owned()))
        .item("checkpoint", s("TRIM_HORIZON"))
        .send()
        .await
        .unwrap();
    let rows = read_lease_rows(&env, &table).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].lease_key, "shardId-000000000000");
    assert_eq!(rows[0].checkpoint_sequence_number(), None);
    assert!(!rows[0].has_pending());
    assert_eq!(rows[1].lease_counter, Some(7));
    assert_eq!(
        rows[1].checkpoint_sequence_number(),
        Some(Seq::parse("10").unwrap())
    );
    let pending = rows[1].pending_batch().unwrap();
    assert_eq!(
        (pending.first.as_str(), pending.last.as_str()),
        ("11", "12")
    );
    assert!(
        shardsink_e2e::fixtures::clear_lease_table(&env, &table)
            .await
            .unwrap()
            == 2
    );
    assert!(read_lease_rows(&env, &table).await.unwrap().is_empty());
    assert!(delete_lease_table(&env, &table).await.unwrap());
    assert!(!delete_lease_table(&env, &table).await.unwrap());
    assert!(read_lease_rows(&env, &table).await.unwrap().is_empty());

    let bucket = unique_name("h-versions");
    create_bucket(&env, &bucket, Versioning::Enabled)
        .await
        .unwrap();
    put_object(&env, &bucket, "p/a", b"1".to_vec())
        .await
        .unwrap();
    put_object(&env, &bucket, "p/b", b"1".to_vec())
        .await
        .unwrap();
    assert!(overwritten_keys(&list_object_versions(&env, &bucket, "p/").await.unwrap()).is_empty());
    put_object(&env, &bucket, "p/a", b"2".to_vec())
        .await
        .unwrap();
    archive::delete_object(&env, &bucket, "p/b").await.unwrap();
    let problems = overwritten_keys(&list_object_versions(&env, &bucket, "p/").await.unwrap());
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert_eq!(delete_bucket(&env, &bucket).await.unwrap(), Some(4));
    assert_eq!(delete_bucket(&env, &bucket).await.unwrap(), None);
}

/// A scenario with something in each of its resources: objects (with
/// `versioning`, an overwritten one and a delete marker too) and a lease
/// table.
async fn filled_scenario(env: &TestEnv, name: &str, versioning: Versioning) -> Scenario {
    let scenario = Scenario::create(env, name, 1, versioning).await.unwrap();
    for (key, body) in [("p/a", "1"), ("p/a", "2"), ("p/b", "1"), ("q", "1")] {
        put_object(env, &scenario.bucket, key, body.as_bytes().to_vec())
            .await
            .unwrap();
    }
    archive::delete_object(env, &scenario.bucket, "p/b")
        .await
        .unwrap();
    create_lease_table(env, &scenario.settings.lease_table()).await;
    assert_eq!(
        scenario.resources().existing(env).await.unwrap().len(),
        3,
        "{:?}",
        scenario.resources()
    );
    scenario
}

/// Waits until none of `resources` exists (a stream's deletion takes a
/// moment on some servers).
async fn assert_gone(env: &TestEnv, resources: &Resources) {
    shardsink_e2e::wait_until(
        shardsink_e2e::scaled(Duration::from_secs(30)),
        &format!("{resources:?} deleted"),
        || async { Ok::<_, anyhow::Error>(resources.existing(env).await?.is_empty()) },
    )
    .await
    .unwrap();
}

/// A scenario's stream, bucket (every object, version and delete marker)
/// and lease table go when it is dropped, also when its test panics; an
/// explicit cleanup does the same once, and the drop after it nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_resources_go_when_it_is_dropped() {
    let env = require_env!();
    // A panicking task: the scenario is dropped on a worker thread while
    // the panic unwinds.
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let task_env = env.clone();
    let task = tokio::spawn(async move {
        let scenario = filled_scenario(&task_env, "h-panic", Versioning::Off).await;
        sender.send(scenario.resources().clone()).unwrap();
        panic!("deliberate panic with a scenario alive");
    });
    assert!(task.await.unwrap_err().is_panic());
    assert_gone(&env, &receiver.await.unwrap()).await;

    let scenario = filled_scenario(&env, "h-cleanup", Versioning::Enabled).await;
    let resources = scenario.resources().clone();
    scenario.cleanup().await;
    assert_gone(&env, &resources).await;
    scenario.cleanup().await;
    drop(scenario);
    assert_gone(&env, &resources).await;
}
