//! Which AWS errors are worth retrying: one function for every service
//! shardsink calls (DynamoDB here; Kinesis and S3 in the daemon).

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// Error codes that mean "try again later" in the services shardsink calls.
///
/// Sources: the error lists of the DynamoDB API reference ("Common Errors" and
/// each operation's errors), the Kinesis API reference (`GetRecords`,
/// `GetShardIterator`, `ListShards`), and the S3 API reference "List of error
/// codes" (`SlowDown`, `InternalError`, `RequestTimeout`; 409
/// `ConditionalRequestConflict` for concurrent conditional writes to one key).
const RETRIABLE_CODES: &[&str] = &[
    // DynamoDB
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "TransactionConflictException",
    "LimitExceededException",
    // Kinesis
    "KMSThrottlingException",
    "InternalFailure",
    "ServiceUnavailable",
    // S3
    "SlowDown",
    "InternalError",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "ConditionalRequestConflict",
    "OperationAborted",
];

/// Whether a failed AWS call is worth retrying after a backoff.
///
/// True for timeouts, connection failures and unreadable responses (the
/// request may not have arrived), HTTP 5xx and 429, and the throttling or
/// transient codes in [`RETRIABLE_CODES`]. False for everything else — bad
/// requests, missing resources, denied access, conditional-check failures —
/// which the caller must handle as what it is.
///
/// The SDK already retries some of these itself (standard retry mode); this is
/// for the loop around it, which keeps going with capped backoff instead of
/// giving up, so a long throttling storm never turns into a crash loop.
pub fn is_retriable<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            status >= 500
                || status == 429
                || context
                    .err()
                    .code()
                    .is_some_and(|code| RETRIABLE_CODES.contains(&code))
        }
        // Construction failures are bugs or bad configuration; other variants
        // are added by the SDK over time, so default to "not retriable".
        _ => false,
    }
}

/// Error codes that mean "slow down": throttling by the service.
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "KMSThrottlingException",
    "LimitExceededException",
    "SlowDown",
];

/// Whether a failed AWS call was throttled (a throttling code, HTTP 429, or
/// S3's 503 `SlowDown`), as opposed to failing for another reason. Used to
/// label retries in metrics.
pub fn is_throttling<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            status == 429
                || context
                    .err()
                    .code()
                    .is_some_and(|code| THROTTLING_CODES.contains(&code))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_runtime_api::client::result::{ServiceError, TimeoutError};
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    fn service_error(err: UpdateItemError, status: u16) -> SdkError<UpdateItemError, HttpResponse> {
        let raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        SdkError::ServiceError(ServiceError::builder().source(err).raw(raw).build())
    }

    #[test]
    fn throttling_and_5xx_are_retriable() {
        let throttled = UpdateItemError::ProvisionedThroughputExceededException(
            ProvisionedThroughputExceededException::builder()
                .meta(
                    ErrorMetadata::builder()
                        .code("ProvisionedThroughputExceededException")
                        .build(),
                )
                .build(),
        );
        assert!(is_retriable(&service_error(throttled, 400)));
        let unknown = UpdateItemError::generic(ErrorMetadata::builder().code("Whatever").build());
        assert!(is_retriable(&service_error(unknown, 503)));
        let slow_down = UpdateItemError::generic(ErrorMetadata::builder().code("SlowDown").build());
        assert!(is_retriable(&service_error(slow_down, 400)));
        let timeout: SdkError<UpdateItemError, HttpResponse> =
            SdkError::TimeoutError(TimeoutError::builder().source("slow").build());
        assert!(is_retriable(&timeout));
    }

    #[test]
    fn conditional_check_failure_is_not_retriable() {
        let failed = UpdateItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder()
                .meta(
                    ErrorMetadata::builder()
                        .code("ConditionalCheckFailedException")
                        .build(),
                )
                .build(),
        );
        assert!(!is_retriable(&service_error(failed, 400)));
    }
}
