//! [`AttemptsAsProgress`]: an SDK interceptor that reports the start and
//! the end of every attempt — an answer, an error, a timeout — to the worker
//! loop's health ([`Health::attempt_seen`]). A long step of the loop that is
//! retrying a call thereby keeps the loop alive; calls made by other tasks
//! count for nothing (see `ops::health`).

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

use crate::ops::health::Health;

/// Tells [`Health`] of each attempt. The SDK runs `read_after_attempt`
/// after an attempt's timeout too (aws-smithy-runtime's orchestrator runs it
/// outside the timeout), so an unanswered attempt is reported when it ends.
#[derive(Debug, Clone, Copy)]
pub struct AttemptsAsProgress;

impl Intercept for AttemptsAsProgress {
    fn name(&self) -> &'static str {
        "AttemptsAsProgress"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        Health::attempt_seen();
        Ok(())
    }

    fn read_after_attempt(
        &self,
        _context: &FinalizerInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        Health::attempt_seen();
        Ok(())
    }
}
