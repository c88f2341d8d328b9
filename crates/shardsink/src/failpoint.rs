//! Crash points for tests: with the `failpoints` feature compiled in, the
//! `FAILPOINTS` environment variable (the `fail` crate's syntax, e.g.
//! `after-put=3*off->return`) makes the process abort at a named point — no
//! cleanup, no flush, like SIGKILL. `sleep(ms)` delays there instead. Without
//! the feature this compiles to nothing.
//!
//! Points, in the order a batch passes them: `before-pending`,
//! `after-pending` (batch recorded in the lease row, not yet PUT),
//! `after-put` (object written, not yet checkpointed), `after-checkpoint`.

/// Aborts the process if the failpoint `name` is switched on with `return`.
#[inline]
pub fn crash_point(name: &'static str) {
    #[cfg(feature = "failpoints")]
    if fail::eval(name, |_| ()).is_some() {
        tracing::error!(failpoint = name, "failpoint triggered: aborting");
        std::process::abort();
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
