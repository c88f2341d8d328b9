//! Bad configuration: exit code 2 and exactly one line on stderr, naming the
//! setting. The daemon's AWS endpoints point at a closed port, so these
//! runs need no servers; they follow the same skip rule as the other tests
//! all the same (the binary is only guaranteed to be built when the
//! end-to-end suite is run on purpose).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code

use std::time::Duration;

use shardsink_e2e::daemon::run_to_exit;
use shardsink_e2e::require_env;

/// Valid `--stream` and `--bucket` values, so the setting under test is the
/// only bad one.
const STREAM: &str = "orders";
const BUCKET: &str = "orders-archive";

/// Runs shardsink with `args` and `envs`; asserts exit code 2 and one
/// stderr line that contains one of `names`.
async fn rejects(args: &[&str], envs: &[(&str, &str)], names: &[&str]) {
    let run = run_to_exit(args, envs, Duration::from_secs(20))
        .await
        .unwrap();
    let stderr = run.stderr.trim_end();
    assert_eq!(
        run.status.code(),
        Some(2),
        "shardsink {args:?} {envs:?} must exit with code 2, got {}\nstderr:\n{stderr}\nstdout:\n{}",
        run.status,
        run.stdout
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "shardsink {args:?} {envs:?} must print exactly one line on stderr, printed:\n{stderr}"
    );
    assert!(
        names.iter().any(|name| lines[0].contains(name)),
        "the error line must name {}: {:?}",
        names.join(" or "),
        lines[0]
    );
}

#[tokio::test]
async fn missing_bucket() {
    let _env = require_env!();
    rejects(&["--stream", STREAM], &[], &["--bucket"]).await;
}

#[tokio::test]
async fn unknown_compression() {
    let _env = require_env!();
    rejects(
        &[
            "--stream",
            STREAM,
            "--bucket",
            BUCKET,
            "--compression",
            "lz4",
        ],
        &[],
        &["--compression"],
    )
    .await;
}

#[tokio::test]
async fn unknown_compression_from_the_environment() {
    let _env = require_env!();
    rejects(
        &[],
        &[
            ("SHARDSINK_STREAM", STREAM),
            ("SHARDSINK_BUCKET", BUCKET),
            ("SHARDSINK_COMPRESSION", "lz4"),
        ],
        &["--compression", "SHARDSINK_COMPRESSION"],
    )
    .await;
}

#[tokio::test]
async fn nonsense_buffer_age() {
    let _env = require_env!();
    rejects(
        &[
            "--stream",
            STREAM,
            "--bucket",
            BUCKET,
            "--buffer-max-age",
            "nonsense",
        ],
        &[],
        &["--buffer-max-age"],
    )
    .await;
}

#[tokio::test]
async fn at_timestamp_without_a_timestamp() {
    let _env = require_env!();
    rejects(
        &[
            "--stream",
            STREAM,
            "--bucket",
            BUCKET,
            "--initial-position",
            "AT_TIMESTAMP",
        ],
        &[],
        &["--initial-timestamp", "--initial-position"],
    )
    .await;
}
