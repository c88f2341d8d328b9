//! [`AwsClients`]: the three SDK clients, built from the standard AWS
//! configuration chain.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_smithy_runtime_api::client::interceptors::Intercept;

/// SDK-level attempts per call (standard retry mode: exponential backoff with
/// jitter for throttling and transient errors). shardsink's own loops retry
/// further with capped backoff, so a call never gives up for good.
const SDK_MAX_ATTEMPTS: u32 = 3;

/// A GetRecords response is at most 10 MiB.
const API_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Lease-table calls are tiny: fail a blackholed connection fast, so a
/// renewal can retry well within the failover time.
const DYNAMODB_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);

/// An S3 PUT of a batch carries up to `--buffer-max-bytes` (64 MiB by
/// default): give it time on a slow link. A timed-out PUT is retried with the
/// same key and bytes. Other S3 calls (HeadBucket, ListObjectsV2, GetObject
/// up to its headers) and PUTs of up to [`SMALL_PUT_BYTES`] keep
/// [`API_ATTEMPT_TIMEOUT`]; [`s3_put_timeouts`] is set on PUTs only.
const S3_PUT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(300);

/// A PUT body this small (a marker, a small batch) needs no more time than
/// any other call: 1 MiB in 30 s is 35 KB/s. The worker loop writes markers
/// (the key layout at start-up, retention gaps), and liveness counts on each
/// of its attempts ending within 30 s (see `ops::health`).
const SMALL_PUT_BYTES: usize = 1 << 20;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Timeouts of one S3 PutObject call of `body_bytes`: 5 s to connect, and
/// an attempt 30 s up to [`SMALL_PUT_BYTES`], 300 s above.
pub(crate) fn s3_put_timeouts(body_bytes: usize) -> TimeoutConfig {
    let attempt = if body_bytes <= SMALL_PUT_BYTES {
        API_ATTEMPT_TIMEOUT
    } else {
        S3_PUT_ATTEMPT_TIMEOUT
    };
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(attempt)
        .build()
}

/// Timeouts of Kinesis and S3 calls (S3 PUTs: [`s3_put_timeouts`]): 5 s to
/// connect, 30 s an attempt.
pub(crate) fn api_timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .operation_attempt_timeout(API_ATTEMPT_TIMEOUT)
        .build()
}

/// The SDK's retries of every call: standard mode, [`SDK_MAX_ATTEMPTS`].
pub(crate) fn sdk_retries() -> RetryConfig {
    RetryConfig::standard().with_max_attempts(SDK_MAX_ATTEMPTS)
}

/// The SDK clients shardsink uses.
#[derive(Debug, Clone)]
pub struct AwsClients {
    /// Kinesis Data Streams.
    pub kinesis: aws_sdk_kinesis::Client,
    /// S3.
    pub s3: aws_sdk_s3::Client,
    /// DynamoDB (lease table).
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// The shared configuration the clients were built from (region,
    /// credentials, endpoints), for the clients of an Iceberg catalog
    /// (Glue, S3 Tables).
    pub shared: aws_config::SdkConfig,
}

impl AwsClients {
    /// Loads region, credentials and endpoints the standard way
    /// (`aws_config::defaults`: environment, shared config files, ECS task
    /// role, instance profile; `AWS_ENDPOINT_URL` and the per-service
    /// `AWS_ENDPOINT_URL_KINESIS` / `_S3` / `_DYNAMODB`) and builds the
    /// clients. `force_path_style` addresses S3 buckets by path, as most
    /// local S3 servers need.
    pub async fn from_env(force_path_style: bool) -> Self {
        let shared = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(sdk_retries())
            .timeout_config(api_timeouts())
            .load()
            .await;
        let s3_config =
            aws_sdk_s3::config::Builder::from(&shared).force_path_style(force_path_style);
        let kinesis_config = aws_sdk_kinesis::config::Builder::from(&shared);
        let dynamodb_config = aws_sdk_dynamodb::config::Builder::from(&shared).timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .operation_attempt_timeout(DYNAMODB_ATTEMPT_TIMEOUT)
                .build(),
        );
        // Test builds can record every call (see `recorder`).
        #[cfg(feature = "failpoints")]
        let (s3_config, kinesis_config, dynamodb_config) =
            match super::recorder::OperationRecorder::from_env() {
                Some(recorder) => (
                    s3_config.interceptor(recorder.clone()),
                    kinesis_config.interceptor(recorder.clone()),
                    dynamodb_config.interceptor(recorder),
                ),
                None => (s3_config, kinesis_config, dynamodb_config),
            };
        Self {
            kinesis: aws_sdk_kinesis::Client::from_conf(kinesis_config.build()),
            s3: aws_sdk_s3::Client::from_conf(s3_config.build()),
            dynamodb: aws_sdk_dynamodb::Client::from_conf(dynamodb_config.build()),
            shared,
        }
    }
}

impl AwsClients {
    /// The same clients, each also running `interceptor` on every call.
    pub fn with_interceptor(self, interceptor: impl Intercept + Clone + 'static) -> Self {
        Self {
            kinesis: rebuilt!(
                aws_sdk_kinesis,
                self.kinesis,
                interceptor(interceptor.clone())
            ),
            s3: rebuilt!(aws_sdk_s3, self.s3, interceptor(interceptor.clone())),
            dynamodb: rebuilt!(aws_sdk_dynamodb, self.dynamodb, interceptor(interceptor)),
            shared: self.shared,
        }
    }
}

/// `rebuilt!(aws_sdk_kinesis, client, interceptor(x))`: a client of that SDK
/// crate built from `client`'s configuration with the builder calls given
/// (the SDK crates share no trait for this).
macro_rules! rebuilt {
    ($sdk:ident, $client:expr, $($change:tt)+) => {
        $sdk::Client::from_conf($client.config().to_builder().$($change)+.build())
    };
}
pub(crate) use rebuilt;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_puts_get_the_long_s3_timeout() {
        let clients = AwsClients::from_env(true).await;
        let attempt = |config: Option<&TimeoutConfig>| {
            config.and_then(TimeoutConfig::operation_attempt_timeout)
        };
        // A blackholed LIST or HEAD fails in 30 s, not 5 minutes.
        assert_eq!(
            attempt(clients.s3.config().timeout_config()),
            Some(API_ATTEMPT_TIMEOUT)
        );
        assert_eq!(
            attempt(clients.dynamodb.config().timeout_config()),
            Some(DYNAMODB_ATTEMPT_TIMEOUT)
        );
        // A 64 MiB batch gets five minutes; a marker, like any other call,
        // 30 s: the worker loop writes markers, and stays alive only while
        // its attempts end within the liveness window.
        assert_eq!(
            s3_put_timeouts(64 << 20).operation_attempt_timeout(),
            Some(S3_PUT_ATTEMPT_TIMEOUT)
        );
        assert_eq!(
            s3_put_timeouts(300).operation_attempt_timeout(),
            Some(API_ATTEMPT_TIMEOUT)
        );
        assert_eq!(
            s3_put_timeouts(64 << 20).connect_timeout(),
            Some(CONNECT_TIMEOUT)
        );
    }
}
