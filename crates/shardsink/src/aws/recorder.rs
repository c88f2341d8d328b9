//! [`OperationRecorder`] (test builds only, feature `failpoints`): an SDK
//! interceptor that appends `service:Operation` for every AWS call to the
//! file named by `SHARDSINK_RECORD_AWS_OPERATIONS`. The IAM policy test
//! compares what a run did with what `deploy/iam-policy.json` grants.

use std::io::Write as _;
use std::path::PathBuf;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// Environment variable naming the file the operations are appended to.
pub const RECORD_ENV: &str = "SHARDSINK_RECORD_AWS_OPERATIONS";

/// Appends one line per AWS call: `service:Operation`.
#[derive(Debug, Clone)]
pub struct OperationRecorder {
    path: PathBuf,
}

impl OperationRecorder {
    /// A recorder when `SHARDSINK_RECORD_AWS_OPERATIONS` is set.
    pub fn from_env() -> Option<Self> {
        std::env::var_os(RECORD_ENV).map(|path| Self { path: path.into() })
    }
}

impl Intercept for OperationRecorder {
    fn name(&self) -> &'static str {
        "OperationRecorder"
    }

    /// After the operation's own configuration (which stores its
    /// [`Metadata`]) is applied; once per call, not per attempt.
    fn read_before_serialization(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(metadata) = cfg.load::<Metadata>() {
            // One short O_APPEND write per line: concurrent writers (tasks,
            // processes) do not interleave.
            let line = format!(
                "{}:{}\n",
                metadata.service().to_lowercase(),
                metadata.name()
            );
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            file.write_all(line.as_bytes())?;
        }
        Ok(())
    }
}
