//! Bad configuration: exit code 2 and exactly one line on stderr, naming the
//! setting. The daemon's AWS endpoints point at a closed port, so these
//! runs need no servers; they follow the same skip rule as the other tests
//! all the same (the binary is only guaranteed to be built when the
//! end-to-end suite is run on purpose).

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

/// A stream or bucket that does not exist is a bad setting too, found by the
/// first AWS call: exit code 2 and one `invalid setting` line naming it
/// (progress lines logged before the call may precede it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_or_bucket_that_does_not_exist() {
    let env = require_env!();
    let scenario =
        shardsink_e2e::Scenario::create(&env, "missing", 1, shardsink_e2e::Versioning::Off)
            .await
            .unwrap();
    let endpoints: Vec<(String, String)> = [
        "AWS_ENDPOINT_URL_S3",
        "AWS_ENDPOINT_URL_KINESIS",
        "AWS_ENDPOINT_URL_DYNAMODB",
    ]
    .iter()
    .filter_map(|name| {
        std::env::var(name)
            .ok()
            .map(|value| ((*name).to_owned(), value))
    })
    .collect();
    let envs: Vec<(&str, &str)> = endpoints
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let cases = [
        (
            [
                "--stream",
                "no-such-stream-e2e",
                "--bucket",
                scenario.bucket.as_str(),
            ],
            "--stream",
        ),
        (
            [
                "--stream",
                scenario.stream.as_str(),
                "--bucket",
                "no-such-bucket-e2e",
            ],
            "--bucket",
        ),
    ];
    for (names, flag) in cases {
        let mut args = names.to_vec();
        args.extend([
            "--s3-force-path-style",
            "--metrics-address",
            "off",
            "--worker-id",
            "e2e-missing",
        ]);
        let run = run_to_exit(&args, &envs, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            run.status.code(),
            Some(2),
            "{args:?}: {}\n{}",
            run.status,
            run.stderr
        );
        let errors: Vec<&str> = run
            .stderr
            .lines()
            .filter(|line| line.contains("invalid setting"))
            .collect();
        assert_eq!(
            errors.len(),
            1,
            "{args:?} must print one error line:\n{}",
            run.stderr
        );
        assert!(
            errors[0].starts_with(&format!("shardsink: invalid setting {flag} ")),
            "{}",
            errors[0]
        );
    }
}

#[tokio::test]
async fn settings_of_another_format() {
    let _env = require_env!();
    let base = ["--stream", STREAM, "--bucket", BUCKET];
    for (extra, name) in [
        (&["--parquet-schema", "schema.json"][..], "--parquet-schema"),
        (
            &["--format", "parquet", "--record-delimiter", "|"],
            "--record-delimiter",
        ),
        (
            &["--format", "raw", "--metadata-field", "meta"],
            "--metadata-field",
        ),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        rejects(&args, &[], &[name]).await;
    }
}

#[tokio::test]
async fn an_error_prefix_under_the_prefix() {
    let _env = require_env!();
    rejects(
        &[],
        &[
            ("SHARDSINK_STREAM", STREAM),
            ("SHARDSINK_BUCKET", BUCKET),
            ("SHARDSINK_ERROR_PREFIX", "orders/errors"),
        ],
        &["--error-prefix"],
    )
    .await;
}

#[tokio::test]
async fn a_parquet_schema_that_does_not_parse() {
    let _env = require_env!();
    let path =
        std::env::temp_dir().join(format!("shardsink-bad-schema-{}.json", std::process::id()));
    std::fs::write(&path, r#"[{"name": "user_id", "type": "uint128"}]"#).unwrap();
    rejects(
        &[
            "--stream",
            STREAM,
            "--bucket",
            BUCKET,
            "--format",
            "parquet",
            "--parquet-schema",
            path.to_str().unwrap(),
        ],
        &[],
        &["--parquet-schema"],
    )
    .await;
    std::fs::remove_file(&path).unwrap();
}

#[tokio::test]
async fn a_buffer_age_past_fifteen_minutes() {
    let _env = require_env!();
    rejects(
        &[
            "--stream",
            STREAM,
            "--bucket",
            BUCKET,
            "--buffer-max-age",
            "20m",
        ],
        &[],
        &["--buffer-max-age"],
    )
    .await;
}
