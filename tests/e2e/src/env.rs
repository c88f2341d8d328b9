//! The test environment: AWS clients pointed at the local servers, unique
//! resource names, and the "skip or fail" rule when no servers are set up.
//!
//! Endpoints come from the standard AWS variables (`AWS_ENDPOINT_URL_S3`,
//! `AWS_ENDPOINT_URL_KINESIS`, `AWS_ENDPOINT_URL_DYNAMODB`, or the shared
//! `AWS_ENDPOINT_URL`), exactly as the daemon reads them, so the harness and
//! the daemon under test always talk to the same servers.
//! `scripts/local-servers start moto` writes a file exporting them.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Result, bail};
use aws_config::BehaviorVersion;
use aws_sdk_kinesis::config::{Credentials, Region};
use rand::RngExt as _;

use crate::outcome;

/// Environment variable that turns "no local servers" from a skip into a
/// test failure (`SHARDSINK_E2E_REQUIRED=1`), for CI jobs that start servers.
pub const REQUIRED_VAR: &str = "SHARDSINK_E2E_REQUIRED";

/// Why a test skips when no endpoint is set (printed as `skipping: …`).
pub const NO_SERVERS: &str = "no local servers (set AWS_ENDPOINT_URL_*)";

/// The AWS services the harness talks to, with the per-service endpoint
/// variable the SDK (and so the daemon) reads.
const SERVICES: [(&str, &str); 3] = [
    ("S3", "AWS_ENDPOINT_URL_S3"),
    ("Kinesis", "AWS_ENDPOINT_URL_KINESIS"),
    ("DynamoDB", "AWS_ENDPOINT_URL_DYNAMODB"),
];

/// Clients for the local Kinesis, S3 and DynamoDB servers. Cheap to clone
/// (the SDK clients share their connection pools).
#[derive(Clone, Debug)]
pub struct TestEnv {
    /// Kinesis client (endpoint from `AWS_ENDPOINT_URL_KINESIS`).
    pub kinesis: aws_sdk_kinesis::Client,
    /// S3 client, path-style addressing (endpoint from `AWS_ENDPOINT_URL_S3`).
    pub s3: aws_sdk_s3::Client,
    /// DynamoDB client (endpoint from `AWS_ENDPOINT_URL_DYNAMODB`).
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// The region the clients sign for (`AWS_REGION`, default `us-east-1`).
    pub region: String,
}

impl TestEnv {
    /// Builds the clients from the environment.
    ///
    /// Returns `Ok(None)` when no endpoint variable is set at all (no local
    /// servers). Credentials are `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`
    /// (default `test` / `test`); the region is `AWS_REGION` (default
    /// `us-east-1`).
    ///
    /// # Errors
    /// When some services have an endpoint and others do not: the harness
    /// would otherwise send requests to real AWS.
    pub async fn from_env() -> Result<Option<Self>> {
        let shared = env_nonempty("AWS_ENDPOINT_URL");
        let endpoints: Vec<(&str, Option<String>)> = SERVICES
            .iter()
            .map(|(service, var)| (*service, env_nonempty(var).or_else(|| shared.clone())))
            .collect();
        if endpoints.iter().all(|(_, url)| url.is_none()) {
            return Ok(None);
        }
        let unset: Vec<&str> = endpoints
            .iter()
            .filter(|(_, url)| url.is_none())
            .map(|(service, _)| *service)
            .collect();
        if !unset.is_empty() {
            bail!(
                "no local endpoint for {}: set AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL_KINESIS and \
                 AWS_ENDPOINT_URL_DYNAMODB (or AWS_ENDPOINT_URL); refusing to reach real AWS",
                unset.join(", ")
            );
        }
        let endpoint = |service: &str| {
            endpoints
                .iter()
                .find(|(s, _)| *s == service)
                .and_then(|(_, url)| url.clone())
                .expect("every service has an endpoint, checked above")
        };

        let region = env_nonempty("AWS_REGION")
            .or_else(|| env_nonempty("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|| "us-east-1".to_owned());
        let credentials = Credentials::new(
            env_nonempty("AWS_ACCESS_KEY_ID").unwrap_or_else(|| "test".to_owned()),
            env_nonempty("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|| "test".to_owned()),
            env_nonempty("AWS_SESSION_TOKEN"),
            None,
            "shardsink-e2e",
        );
        let sdk_config = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.clone()))
            .credentials_provider(credentials)
            .load()
            .await;

        let kinesis = aws_sdk_kinesis::Client::from_conf(
            aws_sdk_kinesis::config::Builder::from(&sdk_config)
                .endpoint_url(endpoint("Kinesis"))
                .build(),
        );
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk_config)
                .endpoint_url(endpoint("S3"))
                .force_path_style(true)
                .build(),
        );
        let dynamodb = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk_config)
                .endpoint_url(endpoint("DynamoDB"))
                .build(),
        );
        Ok(Some(Self {
            kinesis,
            s3,
            dynamodb,
            region,
        }))
    }

    /// [`TestEnv::from_env`] with the skip rule applied: `None` (after
    /// [`outcome::skip`] with [`NO_SERVERS`]) when no servers are
    /// configured, so a plain `cargo test --workspace` passes without them;
    /// otherwise the calling test is recorded as run ([`outcome::ran`]).
    ///
    /// # Panics
    /// When no servers are configured and `SHARDSINK_E2E_REQUIRED=1`, or the
    /// configuration is partial.
    pub async fn from_env_or_skip() -> Option<Self> {
        match Self::from_env().await {
            Ok(Some(env)) => {
                outcome::ran();
                Some(env)
            }
            Ok(None) if e2e_required() => panic!(
                "{REQUIRED_VAR}=1 but no local servers are configured: start them with \
                 `scripts/local-servers start moto` and `source \"$(scripts/local-servers env moto)\"`"
            ),
            Ok(None) => {
                outcome::skip(NO_SERVERS);
                None
            }
            Err(error) => panic!("bad test environment: {error:#}"),
        }
    }
}

/// Gets a [`TestEnv`] or returns from the calling test (see
/// [`TestEnv::from_env_or_skip`]). Use at the top of every async test:
///
/// ```ignore
/// let env = shardsink_e2e::require_env!();
/// ```
#[macro_export]
macro_rules! require_env {
    () => {
        match $crate::env::TestEnv::from_env_or_skip().await {
            Some(env) => env,
            None => return,
        }
    };
}

/// The endpoint the daemon (and the harness) uses for `service` (`"S3"`,
/// `"Kinesis"` or `"DynamoDB"`): its own variable, else `AWS_ENDPOINT_URL`.
pub fn endpoint_url(service: &str) -> Option<String> {
    let (_, var) = SERVICES.iter().find(|(name, _)| *name == service)?;
    env_nonempty(var).or_else(|| env_nonempty("AWS_ENDPOINT_URL"))
}

/// Whether `SHARDSINK_E2E_REQUIRED` is set to a true value (`1`, `true`,
/// `yes`).
pub fn e2e_required() -> bool {
    env_nonempty(REQUIRED_VAR)
        .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// The profile of the local servers, as `scripts/local-servers env`
/// exports it (`SHARDSINK_TEST_PROFILE`: `moto`, `localstack` or
/// `fanout`); `None`
/// for servers started otherwise.
pub fn profile() -> Option<String> {
    env_nonempty("SHARDSINK_TEST_PROFILE")
}

/// The profile whose Kinesis server implements enhanced fan-out
/// (SubscribeToShard): kinesis-local, the Node build of kinesis-mock.
pub const FAN_OUT_PROFILE: &str = "fanout";

/// The `--read-mode` the daemons of [`crate::Settings::for_tests`] use:
/// `fan-out` on the [`FAN_OUT_PROFILE`], so that the scenarios run there
/// (crashes, lease moves, resharding) read by SubscribeToShard; else
/// `polling`.
pub fn read_mode() -> &'static str {
    if profile().as_deref() == Some(FAN_OUT_PROFILE) {
        "fan-out"
    } else {
        "polling"
    }
}

/// `on_localstack` on the LocalStack profile, else `otherwise` (and the
/// choice is printed): `scripts/test` runs every test on both profiles, so
/// a test whose setting has two values worth running end to end (a key
/// layout) takes one on each profile without running twice as often.
pub fn per_profile<T: std::fmt::Debug>(what: &str, otherwise: T, on_localstack: T) -> T {
    let profile = profile();
    let chosen = if profile.as_deref() == Some("localstack") {
        on_localstack
    } else {
        otherwise
    };
    println!(
        "{what}: {chosen:?} on the {} profile",
        profile.as_deref().unwrap_or("default")
    );
    chosen
}

/// A name for a stream, bucket or table no other test (or earlier run) uses:
/// `{prefix}-{seconds since epoch, base 36}-{8 random hex digits}`, lowercase
/// ASCII, so it is valid for S3 buckets (3–63 chars), Kinesis streams and
/// DynamoDB tables as long as `prefix` is short, lowercase and `[a-z0-9-]`.
pub fn unique_name(prefix: &str) -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let random: u32 = rand::rng().random();
    format!("{prefix}-{}-{random:08x}", to_base36(secs))
}

/// A seed for randomized test choices: `SHARDSINK_E2E_SEED` when set, else
/// `default` when given, else a random one. The seed is printed so a failing
/// run can be repeated.
pub fn seed(what: &str, default: Option<u64>) -> u64 {
    let seed = env_nonempty("SHARDSINK_E2E_SEED")
        .and_then(|s| s.parse().ok())
        .or(default)
        .unwrap_or_else(|| rand::rng().random());
    println!("{what}: seed {seed} (set SHARDSINK_E2E_SEED={seed} to repeat)");
    seed
}

fn to_base36(mut n: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("base-36 digits are ASCII")
}

/// An environment variable's value, or `None` when unset or empty.
pub(crate) fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_valid_bucket_names() {
        let a = unique_name("sink");
        let b = unique_name("sink");
        assert_ne!(a, b);
        assert!(a.len() <= 63, "{a}");
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
            "{a}"
        );
    }

    #[test]
    fn base36() {
        assert_eq!(to_base36(0), "0");
        assert_eq!(to_base36(35), "z");
        assert_eq!(to_base36(36), "10");
    }
}
