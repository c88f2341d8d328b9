//! Which DynamoDB errors are worth retrying, and the part of that answer
//! every AWS service shares ([`is_transport_or_server_failure`]). The daemon
//! classifies its own Kinesis and S3 errors on top of the shared part.

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// DynamoDB error codes that mean "try again later" (DynamoDB API reference,
/// "Common Errors" and each operation's errors).
const RETRIABLE_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "TransactionConflictException",
    "LimitExceededException",
];

/// DynamoDB error codes that mean "slow down".
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
];

/// Whether a failed AWS call — of any service — says nothing against the
/// request itself: a timeout, a failed connection, an unreadable response
/// (the request may not have arrived), HTTP 5xx or 429. A retry after a
/// backoff may succeed.
///
/// The SDK already retries some of these itself (standard retry mode); this
/// is for the loops around it, which keep going with capped backoff instead
/// of giving up, so a long outage never turns into a crash loop.
pub fn is_transport_or_server_failure<E>(err: &SdkError<E, HttpResponse>) -> bool {
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            status >= 500 || status == 429
        }
        // Construction failures are bugs or bad configuration; other variants
        // are added by the SDK over time, so default to "not retriable".
        _ => false,
    }
}

/// The service's error code, if it sent one.
pub fn error_code<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Option<&str> {
    match err {
        SdkError::ServiceError(context) => context.err().code(),
        _ => None,
    }
}

/// Whether a failed DynamoDB call is worth retrying after a backoff: a
/// transport or server failure, or one of DynamoDB's throttling and transient
/// codes. False for everything else — bad requests, missing tables, denied
/// access, conditional-check failures — which the caller must handle as what
/// it is.
pub fn is_retriable<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    is_transport_or_server_failure(err)
        || error_code(err).is_some_and(|code| RETRIABLE_CODES.contains(&code))
}

/// Whether DynamoDB throttled the call (a throttling code, or HTTP 429), as
/// opposed to failing for another reason. Used to label retries in metrics.
pub fn is_throttling<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    let too_many =
        matches!(err, SdkError::ServiceError(context) if context.raw().status().as_u16() == 429);
    too_many || error_code(err).is_some_and(|code| THROTTLING_CODES.contains(&code))
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
