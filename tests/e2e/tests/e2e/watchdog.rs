//! The systemd watchdog through a Kinesis outage. The test plays systemd:
//! it binds the notify socket and starts the real daemon with
//! `NOTIFY_SOCKET` and `WATCHDOG_USEC` (20 s), its Kinesis endpoint a
//! [`Blackhole`] that takes connections and never answers, for three
//! minutes in all: 45 s from before the daemon starts (start-up describes
//! the stream, and retries), then 135 s while it runs (a lease sync round
//! that lists shards then spends minutes in timed-out attempts). systemd
//! kills a service that goes `WatchdogSec` without `WATCHDOG=1`: no gap may
//! be longer. Once Kinesis answers, the daemon must be ready and archive
//! every record produced before and during the outage, exactly once.

use std::time::{Duration, Instant};

use shardsink_e2e::blackhole::Blackhole;
use shardsink_e2e::env::endpoint_url;
use shardsink_e2e::http::{free_address, get};
use shardsink_e2e::notify::NotifySocket;
use shardsink_e2e::producer::small_record_specs;
use shardsink_e2e::{
    Daemon, Scenario, Versioning, exactly_once, outcome, require_env, scaled, stop_gracefully,
    wait_for_archive, wait_until,
};

/// `WATCHDOG_USEC`: the daemon pings every half of it.
const WATCHDOG: Duration = Duration::from_secs(20);
/// Kinesis unreachable from before the start.
const START_UP_OUTAGE: Duration = Duration::from_secs(45);
/// Kinesis unreachable again while the daemon runs.
const RUNNING_OUTAGE: Duration = Duration::from_secs(135);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_is_fed_through_a_kinesis_outage() {
    let env = require_env!();
    // Three minutes of the daemon's own behaviour, whatever serves Kinesis
    // behind the blackhole: one profile is enough.
    if std::env::var("SHARDSINK_TEST_PROFILE").as_deref() == Ok("localstack") {
        outcome::skip_unless_profile(
            "moto",
            "the outage is the test's own blackhole; it runs once, on moto (3 min)",
        );
        return;
    }
    let scenario = Scenario::create(&env, "watchdog", 1, Versioning::Off)
        .await
        .unwrap();
    let before = scenario
        .put(&small_record_specs(50, 1, "before"))
        .await
        .unwrap();
    let kinesis = Blackhole::start(&endpoint_url("Kinesis").unwrap())
        .await
        .unwrap();
    let notify = NotifySocket::bind().unwrap();
    let address = free_address();
    let settings = scenario
        .settings
        .clone()
        .set("metrics-address", address.to_string())
        .env("AWS_ENDPOINT_URL_KINESIS", kinesis.url())
        .env("NOTIFY_SOCKET", notify.path().to_string_lossy())
        .env("WATCHDOG_USEC", WATCHDOG.as_micros().to_string());

    kinesis.cut();
    let started = Instant::now();
    let mut daemon = Daemon::spawn(&settings).unwrap();
    tokio::time::sleep(START_UP_OUTAGE).await;
    assert!(
        notify.arrivals("READY=1").is_empty(),
        "ready before the stream could be described"
    );
    assert!(kinesis.held() > 0, "start-up never tried Kinesis");
    kinesis.restore();
    let notify = &notify;
    wait_until(
        scaled(Duration::from_secs(90)),
        "READY=1 once Kinesis answers",
        || async move { !notify.arrivals("READY=1").is_empty() },
    )
    .await
    .unwrap();
    let mut reader = scenario.archive_reader();
    wait_for_archive(
        &mut reader,
        &before,
        &mut daemon,
        scaled(Duration::from_secs(60)),
    )
    .await
    .unwrap();

    let held_before = kinesis.held();
    kinesis.cut();
    // Produced straight to the stream, not through the blackhole.
    let during = scenario
        .put(&small_record_specs(50, 2, "during"))
        .await
        .unwrap();
    tokio::time::sleep(RUNNING_OUTAGE).await;
    assert!(daemon.is_running(), "the daemon exited during the outage");
    assert!(
        kinesis.held() > held_before,
        "the running daemon never tried Kinesis"
    );
    kinesis.restore();

    let produced: Vec<_> = before.into_iter().chain(during).collect();
    let archive = wait_for_archive(
        &mut reader,
        &produced,
        &mut daemon,
        scaled(Duration::from_secs(120)),
    )
    .await
    .unwrap();
    wait_until(
        scaled(Duration::from_secs(60)),
        "/readyz answers 200",
        || async move { matches!(get(address, "/readyz"), Ok((200, _))) },
    )
    .await
    .unwrap();
    let observed = Instant::now();

    // From the start to now, with no gap longer than systemd allows.
    let pings = notify.arrivals("WATCHDOG=1");
    let times: Vec<Instant> = std::iter::once(started)
        .chain(pings.iter().copied())
        .chain(std::iter::once(observed))
        .collect();
    let late: Vec<String> = times
        .windows(2)
        .filter(|pair| pair[1] - pair[0] > WATCHDOG)
        .map(|pair| {
            format!(
                "{:.1?} without WATCHDOG=1 from {:.1?} after the start",
                pair[1] - pair[0],
                pair[0] - started
            )
        })
        .collect();
    assert!(
        late.is_empty(),
        "systemd would have killed the daemon ({} pings over {:.1?}): {late:#?}",
        pings.len(),
        observed - started
    );

    stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
        .await
        .unwrap();
    exactly_once(&produced, &archive).assert_exact();
}
