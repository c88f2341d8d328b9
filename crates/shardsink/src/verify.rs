//! `shardsink verify`: audits an archive. (Being written.)

/// Arguments of `shardsink verify`.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "shardsink verify")]
pub struct VerifyArgs {
    /// Bucket to audit.
    #[arg(long, env = "SHARDSINK_BUCKET")]
    pub bucket: String,
}

/// Runs the audit; `Ok(true)` when the archive is exact.
///
/// # Errors
/// When the audit cannot run.
pub async fn run(args: VerifyArgs) -> anyhow::Result<bool> {
    anyhow::bail!("verify is not implemented yet for bucket {}", args.bucket)
}
