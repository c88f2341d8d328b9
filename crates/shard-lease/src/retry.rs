//! Which DynamoDB errors are worth retrying — [`classify`], the one
//! classification of DynamoDB SDK errors, for the lease table and the
//! daemon's other tables — and the part of that answer every AWS service
//! shares ([`is_transport_or_server_failure`]). The daemon classifies its
//! own Kinesis and S3 errors on top of the shared part.
//!
//! DynamoDB's errors are matched as the typed variants each operation
//! models (`Modeled`); only the common errors that no operation models
//! are matched by their code (`UNMODELED_THROTTLING_CODES`).

use std::error::Error as StdError;

use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemError;
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
use aws_sdk_dynamodb::operation::describe_time_to_live::DescribeTimeToLiveError;
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::scan::ScanError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_time_to_live::UpdateTimeToLiveError;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// Codes of DynamoDB "Common Errors" that mean "slow down" and that the SDK
/// models for no operation, so they arrive as an unmodeled error with this
/// code: `ThrottlingException`, which the control-plane calls (CreateTable,
/// DescribeTable) answer when made too often.
const UNMODELED_THROTTLING_CODES: &[&str] = &["ThrottlingException"];

/// What a DynamoDB error is, for the lease table and for the daemon's other
/// DynamoDB tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ConditionalCheckFailedException`: the row did not match the write's
    /// condition.
    ConditionalCheckFailed,
    /// `ResourceNotFoundException`: the table does not exist.
    ResourceNotFound,
    /// `ResourceInUseException`: the table is being created or deleted.
    ResourceInUse,
    /// `ProvisionedThroughputExceededException`, `RequestLimitExceeded`,
    /// `ThrottlingException`, `LimitExceededException`: slow down.
    Throttled,
    /// `InternalServerError`, `TransactionConflictException`: try again.
    Transient,
    /// Anything else (bad requests, denied access, …).
    Other,
}

/// The errors each DynamoDB operation the lease table and the daemon's
/// other tables call models (DynamoDB API reference, each operation's
/// "Errors"), matched as typed variants.
pub trait Modeled: ProvideErrorMetadata + StdError + Send + Sync + 'static {
    /// What this error is; [`Kind::Other`] for the variants not listed.
    fn kind(&self) -> Kind;
}

/// Implements a trait with one method, `fn kind(&self) -> Kind`, for AWS
/// SDK operation error enums, from tables of the typed variants each
/// operation models; every other variant is `Kind::Other`. Operations that
/// model the same errors share a table. Used for the lease table's DynamoDB
/// errors here and for the daemon's Kinesis errors.
///
/// ```text
/// modeled_kinds! {
///     Modeled => Kind;
///     PutItemError, UpdateItemError => {
///         ConditionalCheckFailedException => ConditionalCheckFailed,
///         ResourceNotFoundException => ResourceNotFound,
///     }
/// }
/// ```
#[macro_export]
macro_rules! modeled_kinds {
    ($modeled:path => $kind:ident; $($($error:ty),+ => $table:tt)+) => {
        $($($crate::modeled_kinds!(@impl $modeled, $kind, $error, $table);)+)+
    };
    (@impl $modeled:path, $kind:ident, $error:ty, { $($variant:ident => $which:ident),+ $(,)? }) => {
        impl $modeled for $error {
            fn kind(&self) -> $kind {
                match self {
                    $(Self::$variant(_) => $kind::$which,)+
                    _ => $kind::Other,
                }
            }
        }
    };
}

crate::modeled_kinds! {
    Modeled => Kind;
    CreateTableError => {
        InternalServerError => Transient,
        LimitExceededException => Throttled,
        ResourceInUseException => ResourceInUse,
    }
    DescribeTableError, DescribeTimeToLiveError => {
        InternalServerError => Transient,
        ResourceNotFoundException => ResourceNotFound,
    }
    UpdateTimeToLiveError => {
        InternalServerError => Transient,
        LimitExceededException => Throttled,
        ResourceInUseException => ResourceInUse,
        ResourceNotFoundException => ResourceNotFound,
    }
    ScanError, GetItemError, BatchGetItemError => {
        InternalServerError => Transient,
        ProvisionedThroughputExceededException => Throttled,
        RequestLimitExceeded => Throttled,
        ThrottlingException => Throttled,
        ResourceNotFoundException => ResourceNotFound,
    }
    PutItemError, UpdateItemError, DeleteItemError => {
        ConditionalCheckFailedException => ConditionalCheckFailed,
        InternalServerError => Transient,
        ProvisionedThroughputExceededException => Throttled,
        RequestLimitExceeded => Throttled,
        ThrottlingException => Throttled,
        ResourceNotFoundException => ResourceNotFound,
        TransactionConflictException => Transient,
    }
}

/// What a failed DynamoDB call's error is: its modeled variant's [`Kind`],
/// or [`Kind::Throttled`] for an unmodeled error with one of the
/// [`UNMODELED_THROTTLING_CODES`]; `None` when DynamoDB did not answer (a
/// timeout, a failed connection, an unreadable response).
pub fn kind<E: Modeled>(err: &SdkError<E, HttpResponse>) -> Option<Kind> {
    let service_error = err.as_service_error()?;
    Some(match service_error.kind() {
        Kind::Other
            if service_error
                .code()
                .is_some_and(|code| UNMODELED_THROTTLING_CODES.contains(&code)) =>
        {
            Kind::Throttled
        }
        kind => kind,
    })
}

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

/// Whether a failed DynamoDB call is worth retrying after a backoff: a
/// transport or server failure, or a throttling or transient error
/// ([`Kind::Throttled`], [`Kind::Transient`]). False for everything else —
/// bad requests, missing tables, denied access, conditional-check failures
/// — which the caller must handle as what it is.
pub(crate) fn is_retriable<E: Modeled>(err: &SdkError<E, HttpResponse>) -> bool {
    is_transport_or_server_failure(err)
        || matches!(kind(err), Some(Kind::Throttled | Kind::Transient))
}

/// Whether DynamoDB throttled the call ([`Kind::Throttled`], or HTTP 429),
/// as opposed to failing for another reason. Used to label retries in
/// metrics.
pub(crate) fn is_throttling<E: Modeled>(err: &SdkError<E, HttpResponse>) -> bool {
    let too_many =
        matches!(err, SdkError::ServiceError(context) if context.raw().status().as_u16() == 429);
    too_many || kind(err) == Some(Kind::Throttled)
}

/// Codes of DynamoDB's common errors that say a request can never succeed
/// as sent ("Error handling with DynamoDB", Amazon DynamoDB Developer
/// Guide): `ValidationException` — an item over 400 KB, a key that does not
/// match the schema — and `SerializationException`. No operation models
/// them, so they arrive as unmodeled errors with these codes.
pub const REFUSED_CODES: &[&str] = &["ValidationException", "SerializationException"];

/// How a failed DynamoDB call is retried ([`classify`]): throttling and
/// transient failures soon, persistent ones slowly until an operator fixes
/// them; a missing table or a refused request not at all (final: the
/// caller recreates the table, goes on without the item, or stops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// DynamoDB throttled the call ([`Kind::Throttled`], or HTTP 429).
    Throttling,
    /// A transport or server failure, or a transient error
    /// ([`Kind::Transient`]): a retry after a backoff may succeed.
    Transient,
    /// Anything else — denied access, a bad request, a failed condition —
    /// that only an operator (or the caller) can fix.
    Persistent,
    /// Final: the table does not exist (`ResourceNotFoundException`).
    TableMissing,
    /// Final: the request can never succeed as sent ([`REFUSED_CODES`]).
    Refused,
}

impl ErrorClass {
    /// Whether a retry after a backoff may succeed ([`Self::Throttling`]
    /// or [`Self::Transient`]).
    pub fn is_retriable(self) -> bool {
        matches!(self, Self::Throttling | Self::Transient)
    }

    /// Whether DynamoDB throttled the call.
    pub fn is_throttling(self) -> bool {
        self == Self::Throttling
    }
}

/// How the failed DynamoDB call `err` is retried: the one classification of
/// DynamoDB SDK errors, for the lease table and the daemon's other tables.
/// A refused request ([`REFUSED_CODES`]) first, then a missing table, then
/// throttling ([`is_throttling`]), then what else is retriable
/// ([`is_retriable`]).
pub fn classify<E: Modeled>(err: &SdkError<E, HttpResponse>) -> ErrorClass {
    let code = err.as_service_error().and_then(ProvideErrorMetadata::code);
    if code.is_some_and(|code| REFUSED_CODES.contains(&code)) {
        ErrorClass::Refused
    } else if kind(err) == Some(Kind::ResourceNotFound) {
        ErrorClass::TableMissing
    } else if is_throttling(err) {
        ErrorClass::Throttling
    } else if is_retriable(err) {
        ErrorClass::Transient
    } else {
        ErrorClass::Persistent
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::error::{
        ConditionalCheckFailedException, ProvisionedThroughputExceededException,
    };
    use aws_smithy_runtime_api::client::result::{ServiceError, TimeoutError};
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    use super::*;

    fn service_error<E>(err: E, status: u16) -> SdkError<E, HttpResponse> {
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

    #[test]
    fn an_unmodeled_throttling_code_is_throttling() {
        // DescribeTable does not model ThrottlingException.
        let throttled = DescribeTableError::generic(
            ErrorMetadata::builder().code("ThrottlingException").build(),
        );
        let err = service_error(throttled, 400);
        assert_eq!(kind(&err), Some(Kind::Throttled));
        assert!(is_retriable(&err));
        assert!(is_throttling(&err));
        let denied = DescribeTableError::generic(
            ErrorMetadata::builder()
                .code("AccessDeniedException")
                .build(),
        );
        let err = service_error(denied, 400);
        assert_eq!(kind(&err), Some(Kind::Other));
        assert!(!is_retriable(&err));
        assert!(!is_throttling(&err));
    }

    #[test]
    fn modeled_variants_are_matched_by_type() {
        let missing = DescribeTableError::ResourceNotFoundException(
            aws_sdk_dynamodb::types::error::ResourceNotFoundException::builder().build(),
        );
        assert_eq!(
            kind(&service_error(missing, 400)),
            Some(Kind::ResourceNotFound)
        );
        let in_use = CreateTableError::ResourceInUseException(
            aws_sdk_dynamodb::types::error::ResourceInUseException::builder().build(),
        );
        assert_eq!(kind(&service_error(in_use, 400)), Some(Kind::ResourceInUse));
        let failed = PutItemError::ConditionalCheckFailedException(
            ConditionalCheckFailedException::builder().build(),
        );
        assert_eq!(
            kind(&service_error(failed, 400)),
            Some(Kind::ConditionalCheckFailed)
        );
        let timeout: SdkError<ScanError, HttpResponse> =
            SdkError::TimeoutError(TimeoutError::builder().source("slow").build());
        assert_eq!(kind(&timeout), None);
    }

    #[test]
    fn classify_says_how_each_answer_is_retried() {
        let refused =
            PutItemError::generic(ErrorMetadata::builder().code("ValidationException").build());
        assert_eq!(classify(&service_error(refused, 400)), ErrorClass::Refused);
        let missing = GetItemError::ResourceNotFoundException(
            aws_sdk_dynamodb::types::error::ResourceNotFoundException::builder().build(),
        );
        assert_eq!(
            classify(&service_error(missing, 400)),
            ErrorClass::TableMissing
        );
        let throttled = DescribeTableError::generic(
            ErrorMetadata::builder().code("ThrottlingException").build(),
        );
        assert_eq!(
            classify(&service_error(throttled, 400)),
            ErrorClass::Throttling
        );
        let too_many = ScanError::generic(ErrorMetadata::builder().code("Whatever").build());
        assert_eq!(
            classify(&service_error(too_many, 429)),
            ErrorClass::Throttling
        );
        let unavailable = ScanError::generic(ErrorMetadata::builder().code("Whatever").build());
        assert_eq!(
            classify(&service_error(unavailable, 503)),
            ErrorClass::Transient
        );
        let timeout: SdkError<ScanError, HttpResponse> =
            SdkError::TimeoutError(TimeoutError::builder().source("slow").build());
        assert_eq!(classify(&timeout), ErrorClass::Transient);
        let denied = ScanError::generic(
            ErrorMetadata::builder()
                .code("AccessDeniedException")
                .build(),
        );
        let denied = classify(&service_error(denied, 400));
        assert_eq!(denied, ErrorClass::Persistent);
        assert!(!denied.is_retriable() && !denied.is_throttling());
        assert!(ErrorClass::Throttling.is_retriable() && ErrorClass::Throttling.is_throttling());
        assert!(ErrorClass::Transient.is_retriable() && !ErrorClass::Transient.is_throttling());
    }
}
