//! Enhanced fan-out (`--read-mode fan-out`) end to end, on the fanout
//! profile, whose Kinesis server (kinesis-local, the Node build of
//! kinesis-mock) implements SubscribeToShard. There, every daemon of
//! `Settings::for_tests` reads by fan-out, so the crash, lease-move and
//! reshard scenarios of the other families run in fan-out mode too; this
//! family holds what only a change of mode shows.

use std::time::Duration;

use shardsink_e2e::env::{FAN_OUT_PROFILE, read_mode};
use shardsink_e2e::http::{free_address, get, sample};
use shardsink_e2e::producer::small_record_specs;
use shardsink_e2e::{
    Daemon, Finish, Scenario, Versioning, outcome, require_env, scaled, stop_gracefully,
    wait_for_archive,
};

/// Skips (and returns `true`) unless the servers implement SubscribeToShard.
fn no_fan_out() -> bool {
    if read_mode() == "fan-out" {
        return false;
    }
    outcome::skip_unless_profile(
        FAN_OUT_PROFILE,
        "the Kinesis server does not implement SubscribeToShard (the fanout profile's does)",
    );
    true
}

/// Polling, then fan-out, then polling again on one stream and lease
/// table, each run stopped by SIGTERM after new records: each run starts at
/// the checkpoints the other mode left, so the archive holds every record
/// exactly once, and `verify --deep` agrees. Each run's `/metrics` says
/// its mode, and the fan-out run's that its records came in events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switching_the_read_mode_between_runs_keeps_the_archive_exact() {
    let env = require_env!();
    if no_fan_out() {
        return;
    }
    let scenario = Scenario::create(&env, "switch-mode", 2, Versioning::Enabled)
        .await
        .unwrap();
    let base = scenario
        .settings
        .clone()
        .set("buffer-max-records", "40")
        .set("buffer-max-age", "2s");
    let mut reader = scenario.archive_reader();
    let mut produced = Vec::new();
    for (round, mode) in ["polling", "fan-out", "polling"].into_iter().enumerate() {
        produced.extend(
            scenario
                .put(&small_record_specs(
                    120,
                    2,
                    &format!("switch {round} {mode}"),
                ))
                .await
                .unwrap(),
        );
        let address = free_address();
        let mut daemon = Daemon::spawn(
            &base
                .clone()
                .set("read-mode", mode)
                .set("metrics-address", address.to_string()),
        )
        .unwrap();
        wait_for_archive(
            &mut reader,
            &produced,
            &mut daemon,
            scaled(Duration::from_secs(90)),
        )
        .await
        .unwrap();
        let (status, metrics) = get(address, "/metrics").unwrap();
        assert_eq!(status, 200);
        // Absent series count as 0: a family has no sample until one is
        // counted.
        let value = |series: &str| sample(&metrics, series).unwrap_or(0.0);
        assert_eq!(
            value(&format!("shardsink_read_mode{{mode=\"{mode}\"}}")),
            1.0,
            "{metrics}"
        );
        let events = value("shardsink_fan_out_events_total");
        let opened = value("shardsink_fan_out_subscriptions_total{kind=\"opened\"}");
        if mode == "fan-out" {
            assert!(
                events > 0.0 && opened >= 2.0,
                "one subscription a shard at least:\n{metrics}"
            );
        } else {
            assert_eq!((events, opened), (0.0, 0.0), "{metrics}");
        }
        stop_gracefully(&mut daemon, scaled(Duration::from_secs(40)))
            .await
            .unwrap();
        let log = daemon.log();
        assert_eq!(
            log.contains("reading by enhanced fan-out"),
            mode == "fan-out",
            "round {round} reads by {mode}:\n{}",
            daemon.log_tail(40)
        );
        println!(
            "round {round} ({mode}): {} records archived",
            produced.len()
        );
    }
    scenario
        .finish(
            &mut reader,
            &produced,
            Finish::stopped().clean_shutdown().verify_deep(),
        )
        .await;
}
