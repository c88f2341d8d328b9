//! The worker as a whole, against in-memory AWS fakes.

mod liveness;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use sequence_range::SequenceNumber;
use tokio::sync::oneshot;

use super::*;
use crate::config::parse_flags_only;
use crate::fake_aws::{self, FakeBucket, FakeStream, FakeTable};
use crate::test_wait::{wait_until, wait_until_within};

/// 2020-01-01T00:00:00Z: minutes long over, so batches close at once.
const PAST: i64 = 1_577_836_800_000;

fn settings(worker_id: &str) -> Settings {
    parse_flags_only(&[
        "--stream",
        "s",
        "--bucket",
        "bucket",
        "--worker-id",
        worker_id,
        "--failover-time",
        "2s",
        "--buffer-max-records",
        "5",
        "--idle-time-between-reads",
        "200ms",
        "--metrics-address",
        "off",
    ])
    .unwrap()
    .validate()
    .unwrap()
}

fn start(
    settings: Settings,
    clients: AwsClients,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<Summary>>,
) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(run_with_clients(settings, clients, async move {
        let _ = stopped.await;
    }));
    (stop, task)
}

/// In-memory Kinesis, S3 and DynamoDB; `shards` shards of `per_shard`
/// records each, two seconds apart.
fn fakes_with_records(
    shards: u64,
    per_shard: u64,
) -> (Arc<FakeStream>, Arc<FakeBucket>, Arc<FakeTable>) {
    let stream = Arc::new(FakeStream::default());
    let base =
        SequenceNumber::parse("49590338271490256608559692538361571095921575989136588898").unwrap();
    for s in 0..shards {
        let shard = stream.shard(&format!("shardId-{s:012}"));
        for i in 1..=per_shard {
            let seq = SequenceNumber::from(base.to_biguint() + i * 1_000).to_string();
            shard.push(&seq, PAST + i as i64 * 2_000, format!("{s}-{i}").as_bytes());
        }
    }
    (stream, Default::default(), Default::default())
}

/// Every one of `records` records is in exactly one line of the bucket.
fn assert_each_record_once(bucket: &FakeBucket, records: u64) {
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (_, line) in bucket.lines() {
        let id = (
            line["shardId"].as_str().unwrap().to_owned(),
            line["sequenceNumber"].as_str().unwrap().to_owned(),
        );
        *seen.entry(id).or_default() += 1;
    }
    assert_eq!(seen.len() as u64, records, "every record in S3");
    assert!(
        seen.values().all(|n| *n == 1),
        "no record twice: {:?}",
        seen.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
}

/// Another worker steals both leases of this one. Until this worker's
/// tasks notice (at their next renewal or conditional write), the table
/// shows the other worker above its target, so the plan steals one back:
/// it must wait until the old task of that shard stopped — one task per
/// shard — then take it over cleanly.
#[tokio::test(start_paused = true)]
async fn a_lost_shard_is_not_taken_back_before_its_task_stopped() {
    let (shards, per_shard) = (2, 40);
    let (stream, bucket, table) = fakes_with_records(shards, per_shard);
    let (stop, worker) = start(
        settings("worker-a"),
        fake_aws::clients(stream, bucket.clone(), table.clone()),
    );
    wait_until("worker-a to take both leases", || {
        owners(&table).get("worker-a") == Some(&2)
    })
    .await;
    // Right after a renewal, with nothing left to write: the next scan
    // (every 400 ms) comes before the next renewal (every 667 ms).
    let counters = || -> Vec<String> {
        table
            .items
            .lock()
            .unwrap()
            .values()
            .filter_map(|item| item.get("leaseCounter")?.as_n().ok().cloned())
            .collect()
    };
    wait_until("every record in S3", || {
        bucket.lines().len() >= (shards * per_shard) as usize
    })
    .await;
    let before = counters();
    wait_until_within("a lease renewal", Duration::from_secs(5), || {
        counters() != before
    })
    .await;
    for item in table.items.lock().unwrap().values_mut() {
        if item.contains_key("leaseOwner") {
            let counter: u64 = item["leaseCounter"].as_n().unwrap().parse().unwrap();
            item.insert(
                "leaseOwner".to_owned(),
                AttributeValue::S("worker-b".to_owned()),
            );
            item.insert(
                "leaseCounter".to_owned(),
                AttributeValue::N((counter + 1).to_string()),
            );
        }
    }
    // worker-b is not running: both leases expire after the failover
    // time, and worker-a takes each back once its old task has stopped.
    wait_until("worker-a to take both leases back", || {
        owners(&table).get("worker-a") == Some(&2)
    })
    .await;
    assert_each_record_once(&bucket, shards * per_shard);
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
    assert_each_record_once(&bucket, shards * per_shard);
}

/// A lease whose shard is missing from the shard list is deleted only
/// when that list was read this round and nobody renews the lease: a
/// failed ListShards (the last list kept, perhaps from before a
/// reshard) deletes nothing. A deleted lease that was not at SHARD_END
/// leaves a retention gap marker.
#[tokio::test(start_paused = true)]
async fn a_failed_shard_list_deletes_no_lease() {
    use shard_lease::{Checkpoint, Lease, LeaseTable};

    let (stream, bucket, table) = fakes_with_records(1, 5);
    let clients = fake_aws::clients(stream.clone(), bucket.clone(), table.clone());
    let mut settings = settings("worker-a");
    settings.config.shard_sync_interval = Duration::from_secs(1);
    let (stop, worker) = start(settings, clients.clone());
    let has_row = |key: &str| table.items.lock().unwrap().contains_key(key);
    wait_until("worker-a to take the lease", || {
        owners(&table).get("worker-a") == Some(&1)
    })
    .await;
    // A child this worker's list does not show yet, as another worker
    // would create it; and every ListShards fails from now on.
    let child = "shardId-000000000009";
    stream.failing_lists.store(usize::MAX, Ordering::SeqCst);
    LeaseTable::new(clients.dynamodb.clone(), "shardsink-s")
        .create_lease(&Lease::new(child, Checkpoint::TrimHorizon, vec![]))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(has_row(child), "deleted on the strength of a stale list");

    // Lists read again, and the shard is not in the stream: the lease
    // goes once it stood still for the failover time.
    stream.failing_lists.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !has_row(child),
        "a lease of a shard gone from the stream stays"
    );
    // Its records were never read: that is said in S3 before the row,
    // the last trace of them, goes.
    let marker = format!("s/_retention-gaps/{child}/TRIM_HORIZON.json");
    assert!(
        bucket.objects.lock().unwrap().contains_key(&marker),
        "no retention gap marker {marker}"
    );
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
}

fn owners(table: &FakeTable) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (key, item) in table.items.lock().unwrap().iter() {
        if key.starts_with("shardId-") {
            let owner = item
                .get("leaseOwner")
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default();
            *counts.entry(owner).or_default() += 1;
        }
    }
    counts
}

/// Two workers, lease writes throttled every third call.
/// The leases spread 2/2 through steals, nothing panics, and — checked at
/// every PUT — only the worker that recorded a batch in the lease row can
/// create its object, so no worker ever writes for a shard it does not
/// hold. At the end every record is in S3 exactly once.
#[tokio::test(start_paused = true)]
async fn two_workers_share_shards_under_throttling_without_double_writes() {
    let (shards, per_shard) = (4, 40);
    let (stream, bucket, table) = fakes_with_records(shards, per_shard);
    table.throttle_every.store(3, Ordering::SeqCst);
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (rows, seen) = (table.clone(), violations.clone());
    *bucket.on_put.lock().unwrap() = Some(Box::new(move |key: &str, creates: bool| {
        // The key layout record is written once at start-up, for no shard.
        if !creates || key.ends_with("/_shardsink.json") {
            return;
        }
        let shard = key.rsplit('/').nth(1).unwrap_or_default().to_owned();
        let pending = rows.items.lock().unwrap().get(&shard).and_then(|row| {
            row.get("pendingBatchKey")
                .and_then(|v| v.as_s().ok())
                .cloned()
        });
        if pending.as_deref() != Some(key) {
            seen.lock()
                .unwrap()
                .push(format!("{key} created while the row records {pending:?}"));
        }
    }));

    let clients = || fake_aws::clients(stream.clone(), bucket.clone(), table.clone());
    let (stop_a, a) = start(settings("worker-a"), clients());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (stop_b, b) = start(settings("worker-b"), clients());
    wait_until("the leases to spread 2/2", || {
        let counts = owners(&table);
        counts.get("worker-a") == Some(&2) && counts.get("worker-b") == Some(&2)
    })
    .await;
    // Twenty seconds of renewals, scans and writes under throttling, each
    // PUT checked against the lease row.
    tokio::time::sleep(Duration::from_secs(20)).await;
    // Every record written while both run, not at shutdown.
    wait_until("every record in S3", || {
        bucket.lines().len() >= (shards * per_shard) as usize
    })
    .await;
    assert_each_record_once(&bucket, shards * per_shard);
    // Releases are best effort (a few retries, then the lease expires):
    // under every-third-call throttling the calls of the two workers can
    // line up so that one release is throttled every time.
    table.throttle_every.store(0, Ordering::SeqCst);
    let _ = (stop_a.send(()), stop_b.send(()));
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();

    assert_eq!(*violations.lock().unwrap(), Vec::<String>::new());
    assert_each_record_once(&bucket, shards * per_shard);
    assert_eq!(
        owners(&table).get(""),
        Some(&4),
        "both released their leases at shutdown"
    );
}

/// `GET path` on `address`: the status code and the body.
async fn http_get(address: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(start_paused = true)]
async fn start_up_that_keeps_failing_is_alive_and_not_ready() {
    // A permission still being fixed (DescribeStreamSummary denied for
    // five minutes), then a lease table that takes minutes to become
    // ACTIVE: far past the 60 s liveness window. A restart would not
    // help, so /healthz stays 200; /readyz says why it is not ready.
    let (stream, bucket, table) = fakes_with_records(1, 1);
    stream.failing_describes.store(1_000, Ordering::SeqCst);
    table.creating_polls.store(1_000, Ordering::SeqCst);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let mut settings = settings("worker-a");
    settings.metrics_address = Some(address);
    let (stop, worker) = start(
        settings,
        fake_aws::clients(stream.clone(), bucket, table.clone()),
    );

    tokio::time::sleep(Duration::from_secs(300)).await;
    assert!(
        stream.failing_describes.load(Ordering::SeqCst) > 0,
        "still failing"
    );
    assert_eq!(http_get(address, "/healthz").await.0, 200);
    let (status, body) = http_get(address, "/readyz").await;
    assert_eq!(status, 503);
    assert!(
        body.contains("starting: describe stream failed") && body.contains("AccessDenied"),
        "{body}"
    );

    // Fixed: the stream is found within one backoff (at most 120 s
    // with jitter); the table is still being created.
    stream.failing_describes.store(0, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(150)).await;
    assert!(
        table.creating_polls.load(Ordering::SeqCst) > 0,
        "still creating"
    );
    assert_eq!(http_get(address, "/healthz").await.0, 200);
    let (status, body) = http_get(address, "/readyz").await;
    assert_eq!(status, 503);
    assert!(body.contains("lease table"), "{body}");

    table.creating_polls.store(0, Ordering::SeqCst);
    let mut ready = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if http_get(address, "/readyz").await.0 == 200 {
            ready = true;
            break;
        }
    }
    assert!(ready, "ready once started and the lease is held");
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_stream_retention_is_read_at_start_up_and_with_each_shard_list() {
    let (stream, bucket, table) = fakes_with_records(1, 1);
    stream.retention_hours.store(48, Ordering::SeqCst);
    let metrics = Arc::new(Metrics::new());
    let settings = settings("worker-a");
    let health = Arc::new(Health::new(settings.lease_taking_interval));
    let mut worker = Worker::new(
        settings,
        fake_aws::clients(stream.clone(), bucket, table),
        metrics.clone(),
        health,
    );
    let retention = |metrics: &Metrics| {
        metrics
            .encode()
            .lines()
            .find_map(|line| line.strip_prefix("shardsink_stream_retention_seconds "))
            .map(str::to_owned)
    };
    assert_eq!(retention(&metrics), None, "unknown before start-up");
    let token = CancellationToken::new();
    assert!(worker.start_up(&token).await.unwrap());
    assert_eq!(retention(&metrics).as_deref(), Some("172800.0"));

    // Raised during an outage: read again with the shard list, which the
    // first round of lease work reads.
    stream.retention_hours.store(168, Ordering::SeqCst);
    worker.sync(&token).await.unwrap();
    assert_eq!(retention(&metrics).as_deref(), Some("604800.0"));
    token.cancel();
}
