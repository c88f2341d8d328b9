//! Liveness through the worker loop's long steps: a sync round whose calls
//! time out and are retried, a sync round over a slow lease table, a
//! start-up write that goes unanswered — alive all along — and a loop stuck
//! in a call that can never return, which is not.

use super::*;
use crate::aws::clients::{api_timeouts, rebuilt, sdk_retries};
use crate::fake_aws::Link;

/// The liveness window of [`settings`]: 60 s, the floor.
const WINDOW: Duration = Duration::from_secs(60);

/// A worker whose health the test reads: the health, the sender that stops
/// the worker, and the worker.
fn start_watched(
    settings: Settings,
    clients: AwsClients,
) -> (
    Arc<Health>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<Summary>>,
) {
    let health = Arc::new(Health::new(settings.lease_taking_interval));
    let (stop, stopped) = oneshot::channel::<()>();
    let worker = tokio::spawn(run_worker(
        settings,
        clients,
        Arc::new(Metrics::new()),
        health.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    (health, stop, worker)
}

/// Waits until the worker has started and holds its leases (start-up
/// retries back off for up to two minutes).
async fn until_ready(health: &Health) {
    for _ in 0..1_500 {
        if health.readiness().is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not ready: {:?}", health.readiness());
}

/// `kinesis` with the daemon's own attempt timeouts and SDK retries.
fn with_daemon_timeouts(kinesis: &aws_sdk_kinesis::Client) -> aws_sdk_kinesis::Client {
    rebuilt!(
        aws_sdk_kinesis,
        kinesis,
        timeout_config(api_timeouts()).retry_config(sdk_retries())
    )
}

/// Kinesis unreachable (requests taken, never answered): each sync round
/// that lists shards spends three 30 s attempts on DescribeStreamSummary
/// and three on ListShards — three minutes, against a 60 s window. Each
/// attempt's timeout wakes the round, so the loop is alive throughout.
#[tokio::test(start_paused = true)]
async fn a_sync_round_against_an_unreachable_kinesis_stays_live() {
    // No shard: only the loop calls Kinesis.
    let (stream, bucket, table) = fakes_with_records(0, 0);
    let mut clients = fake_aws::clients(stream, bucket, table);
    let kinesis = Link::new();
    clients.kinesis = with_daemon_timeouts(&kinesis.kinesis(&clients.kinesis));
    let mut settings = settings("worker-a");
    settings.config.shard_sync_interval = Duration::from_secs(10);
    let (health, stop, worker) = start_watched(settings, clients);
    until_ready(&health).await;

    kinesis.cut();
    for second in 0..300 {
        assert!(health.is_live(), "not live {second} s into the outage");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let held = kinesis.held();
    let attempts = |operation: &str| held.iter().filter(|op| *op == operation).count();
    assert!(
        attempts("DescribeStreamSummary") >= 3 && attempts("ListShards") >= 3,
        "a whole sync round ran into the outage: {held:?}"
    );
    kinesis.restore();
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
}

/// A lease table that answers every call after 2.5 s: the first round
/// creates and takes 30 leases, one call each — over two minutes in one
/// round. Every attempt's end counts.
#[tokio::test(start_paused = true)]
async fn a_sync_round_over_a_slow_lease_table_stays_live() {
    let shards = 30;
    let (stream, bucket, table) = fakes_with_records(shards, 0);
    let mut clients = fake_aws::clients(stream, bucket, table.clone());
    let dynamodb = Link::new();
    clients.dynamodb = dynamodb.dynamodb(&clients.dynamodb);
    dynamodb.slow(Duration::from_millis(2_500));
    let start = tokio::time::Instant::now();
    let mut settings = settings("worker-a");
    // Fewer reads of the idle shards: a faster test.
    settings.config.idle_time_between_reads = Duration::from_secs(10);
    let (health, stop, worker) = start_watched(settings, clients);

    let mut all_taken_after = None;
    while all_taken_after.is_none() {
        assert!(
            health.is_live(),
            "not live {:?} into the round",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        if owners(&table).get("worker-a") == Some(&(shards as usize)) {
            all_taken_after = Some(start.elapsed());
        }
    }
    assert!(
        all_taken_after > Some(WINDOW * 2),
        "the round was long: {all_taken_after:?}"
    );
    dynamodb.restore();
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
}

/// Start-up records the key layout in a marker object, and S3 takes every
/// PUT but never answers. Each attempt times out after 30 s (a small PUT's
/// timeout, not a batch's five minutes) and the check is made again: alive
/// throughout, and started once S3 answers.
#[tokio::test(start_paused = true)]
async fn start_up_stays_live_while_its_marker_writes_go_unanswered() {
    let (stream, bucket, table) = fakes_with_records(1, 0);
    let mut clients = fake_aws::clients(stream, bucket, table);
    let puts = Link::only(|request| request.method() == "PUT");
    clients.s3 = puts.s3(&clients.s3);
    puts.cut();
    let (health, stop, worker) = start_watched(settings("worker-a"), clients);
    for second in 0..300 {
        assert!(health.is_live(), "not live {second} s into start-up");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(puts.held().len() >= 2, "PUTs retried: {:?}", puts.held());
    assert!(health.readiness().is_err(), "still starting");
    puts.restore();
    until_ready(&health).await;
    stop.send(()).unwrap();
    worker.await.unwrap().unwrap();
}

/// The same outage, with a client that has no timeout: the call can never
/// return, nothing wakes the round, and liveness fails one window after
/// the loop last moved.
#[tokio::test(start_paused = true)]
async fn a_loop_stuck_in_a_call_that_never_returns_is_not_live() {
    let (stream, bucket, table) = fakes_with_records(0, 0);
    let mut clients = fake_aws::clients(stream, bucket, table);
    let kinesis = Link::new();
    // The fakes set no attempt timeout.
    clients.kinesis = kinesis.kinesis(&clients.kinesis);
    let mut settings = settings("worker-a");
    settings.config.shard_sync_interval = Duration::from_secs(1);
    let (health, _stop, worker) = start_watched(settings, clients);
    until_ready(&health).await;

    kinesis.cut();
    while !kinesis
        .held()
        .iter()
        .any(|op| op == "DescribeStreamSummary")
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(WINDOW - Duration::from_secs(1)).await;
    assert!(health.is_live(), "within the window");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !health.is_live(),
        "stuck for longer than the window: {:?}",
        kinesis.held()
    );
    worker.abort();
}
