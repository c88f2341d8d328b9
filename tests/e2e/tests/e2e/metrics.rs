//! Metrics and health on a real run: scrape `/metrics`, `/healthz`
//! and `/readyz` from the running daemon, and check that the counters match
//! the records actually produced and the objects actually in S3.

use std::time::Duration;

use shardsink_e2e::http::{free_address, get, sample};
use shardsink_e2e::producer::small_record_specs;
use shardsink_e2e::{
    Daemon, Scenario, Versioning, exactly_once, require_env, scaled, stop_gracefully,
    wait_for_archive, wait_until,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_match_what_was_produced_and_written() {
    let env = require_env!();
    let scenario = Scenario::create(&env, "metrics", 2, Versioning::Off)
        .await
        .unwrap();
    let produced = scenario
        .put(&small_record_specs(300, 2, "metrics"))
        .await
        .unwrap();
    let address = free_address();
    let settings = scenario
        .settings
        .clone()
        .set("buffer-max-records", "50")
        .set("metrics-address", address.to_string());
    let mut daemon = Daemon::spawn(&settings).unwrap();

    wait_until(
        scaled(Duration::from_secs(30)),
        "/readyz answers 200",
        || async move { Ok::<_, anyhow::Error>(matches!(get(address, "/readyz"), Ok((200, _)))) },
    )
    .await
    .unwrap();
    let mut reader = scenario.archive_reader();
    let archive = wait_for_archive(
        &mut reader,
        &produced,
        &mut daemon,
        scaled(Duration::from_secs(90)),
    )
    .await
    .unwrap();
    exactly_once(&produced, &archive).assert_exact();

    let (status, _) = get(address, "/healthz").unwrap();
    assert_eq!(status, 200);
    // Counters are updated right after each PUT and checkpoint; poll until
    // the last batch is counted.
    let objects = archive.objects.len() as f64;
    let records = produced.len() as f64;
    wait_until(
        scaled(Duration::from_secs(20)),
        "metrics count every object",
        || async move {
            let (_, text) = get(address, "/metrics")?;
            Ok::<_, anyhow::Error>(
                sample(
                    &text,
                    "shardsink_batches_written_total{outcome=\"created\"}",
                ) == Some(objects),
            )
        },
    )
    .await
    .unwrap();
    let (status, text) = get(address, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        sample(&text, "shardsink_records_read_total"),
        Some(records),
        "{text}"
    );
    assert_eq!(
        sample(&text, "shardsink_records_written_total"),
        Some(records),
        "{text}"
    );
    assert_eq!(
        sample(&text, "shardsink_duplicates_excluded_total"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(sample(&text, "shardsink_leases_held"), Some(2.0), "{text}");
    let objects_bytes: f64 = archive.objects.iter().map(|o| o.size as f64).sum();
    assert_eq!(
        sample(&text, "shardsink_written_bytes_total"),
        Some(objects_bytes),
        "{text}"
    );
    for shard in ["shardId-000000000000", "shardId-000000000001"] {
        let behind = sample(
            &text,
            &format!("shardsink_millis_behind_latest{{shard_id=\"{shard}\"}}"),
        );
        assert_eq!(behind, Some(0.0), "caught up on {shard}: {text}");
        let age = sample(
            &text,
            &format!("shardsink_seconds_since_checkpoint{{shard_id=\"{shard}\"}}"),
        );
        assert!(
            age.is_some_and(|a| a >= 0.0),
            "{shard} has a checkpoint age: {text}"
        );
    }
    assert!(text.contains("shardsink_build_info{version=\""), "{text}");
    assert!(
        sample(&text, "shardsink_checkpoints_total{result=\"ok\"}").is_some_and(|n| n >= objects),
        "{text}"
    );

    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap();
    assert!(
        get(address, "/healthz").is_err(),
        "the endpoints stop with the process"
    );
}
