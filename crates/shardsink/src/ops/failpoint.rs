//! Failpoints for tests: with the `failpoints` feature compiled in, the
//! `FAILPOINTS` environment variable (the `fail` crate's syntax) acts at a
//! named point:
//! - `return` aborts the process on the spot — no cleanup, no flush, like
//!   SIGKILL (e.g. `after-put=3*off->return`: the fourth time);
//! - `return(delay:MS)` logs `failpoint reached` and waits MS milliseconds
//!   there, asynchronously, so a test can freeze the process (SIGSTOP) at
//!   exactly that point while other workers go on.
//!
//! Without the feature this compiles to nothing.
//!
//! Points, in the order a batch passes them: `before-pending`,
//! `after-pending` (batch recorded in the lease row, not yet PUT),
//! `after-decisions-put`, `after-error-put`, `after-duplicates-put` (that
//! object written, each when the batch has one; the main object not yet),
//! `after-put` (the main object written, not yet checkpointed),
//! `after-checkpoint`. Into an Iceberg table, instead of the last two:
//! `after-data-files-put` (the batch's data files written, not yet staged
//! in the lease row), `after-stage`; and on the committer,
//! `before-table-commit` (its state object written, the catalog commit not
//! sent), `after-table-commit` (committed, the state not yet published in
//! the committer row), `after-publish` (published; the owners' checkpoints
//! not yet moved).

/// Acts on the failpoint `name` if `FAILPOINTS` switches it on.
#[inline]
pub async fn failpoint(name: &'static str) {
    #[cfg(feature = "failpoints")]
    match fail::eval(name, |arg| arg) {
        None => {}
        Some(Some(arg)) if arg.starts_with("delay:") => {
            let millis: u64 = arg.trim_start_matches("delay:").parse().unwrap_or(0);
            tracing::warn!(failpoint = name, millis, "failpoint reached: waiting");
            tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
        }
        Some(_) => {
            tracing::error!(failpoint = name, "failpoint reached: aborting");
            std::process::abort();
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
