//! Which end-to-end tests ran and which skipped, and why.
//!
//! A test that finds no servers, or a server profile that cannot run it,
//! returns early and passes: to the test runner a skip looks like a pass.
//! So every test records what it did — [`ran`] once it has its servers
//! (called by [`require_env!`](crate::require_env)), [`skip`] or
//! [`skip_unless_profile`] when it returns early — in the file named by
//! `SHARDSINK_E2E_OUTCOMES`, one line per call:
//!
//! ```text
//! {binary}\t{test}\tran\t-\t-
//! {binary}\t{test}\tskipped\t{profile it needs, or -}\t{reason}
//! ```
//!
//! `binary` is the test binary (`e2e`: the suite is one binary,
//! `tests/e2e/tests/e2e/main.rs`), `test` the test's name as the test
//! runner lists it (the name of the thread it runs the test on):
//! `module::test`, the module being the scenario family
//! (`reshard::split_and_merge_while_producing`, from `reshard.rs` beside
//! `main.rs`). A later line for the same test wins: a test that
//! has its servers and then finds it cannot run on this profile records
//! `ran`, then `skipped`. `scripts/test` sets the variable per profile and
//! joins the files with the list of tests (`cargo test -p shardsink-e2e --
//! --list`) into a table, failing when a test ran on no profile. Without
//! the variable nothing is written; the skip message is printed either way.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;

use crate::env::env_nonempty;

/// The variable naming the file outcomes are appended to.
pub const OUTCOMES_VAR: &str = "SHARDSINK_E2E_OUTCOMES";

/// Records that the calling test has its servers and runs.
pub fn ran() {
    record("ran", None, None);
}

/// Records that the calling test skips, and prints `skipping: {reason}` on
/// stdout and stderr (which the test runner shows with `--nocapture` or on
/// failure). The caller then returns.
///
/// # Panics
/// When the outcome file is set and cannot be written.
pub fn skip(reason: &str) {
    announce(reason);
    record("skipped", None, Some(reason));
}

/// [`skip`] for a test that the servers of this profile cannot run and
/// that runs on `profile` instead (`scripts/local-servers` profile name):
/// a run that did not include `profile` then warns about the test rather
/// than fail.
///
/// # Panics
/// When the outcome file is set and cannot be written.
pub fn skip_unless_profile(profile: &str, reason: &str) {
    announce(reason);
    record("skipped", Some(profile), Some(reason));
}

fn announce(reason: &str) {
    println!("skipping: {reason}");
    eprintln!("skipping: {reason}");
}

/// Appends one line for the calling test, when the outcome file is set.
fn record(outcome: &str, needs: Option<&str>, reason: Option<&str>) {
    let Some(path) = env_nonempty(OUTCOMES_VAR).map(PathBuf::from) else {
        return;
    };
    let line = format!(
        "{}\t{}\t{outcome}\t{}\t{}\n",
        binary_name(),
        test_name(),
        needs.unwrap_or("-"),
        one_line(reason.unwrap_or("-")),
    );
    // One write of one line with O_APPEND: lines of tests running at once
    // never interleave.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|error| panic!("cannot record to {}: {error}", path.display()));
}

/// The test binary's name: its file name without the 16 hex digits cargo
/// adds (`e2e-0123456789abcdef` → `e2e`).
fn binary_name() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    let stem = exe
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    strip_hash(&stem).to_owned()
}

fn strip_hash(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name
        }
        _ => stem,
    }
}

/// The running test's name: the test runner runs each test on a thread
/// named after it (`module::test` for a test in a module).
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed thread>")
        .to_owned()
}

/// `text` with tabs and line breaks as spaces, for one field of one line.
fn one_line(text: &str) -> String {
    text.replace(['\t', '\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_cargo_adds_is_dropped() {
        assert_eq!(strip_hash("e2e-0123abcdef456789"), "e2e");
        assert_eq!(strip_hash("kill_restart-0123abcdef456789"), "kill_restart");
        assert_eq!(strip_hash("e2e-cafe"), "e2e-cafe", "not a hash");
        assert_eq!(strip_hash("e2e"), "e2e");
    }

    #[test]
    fn the_test_is_named_by_its_thread() {
        assert_eq!(
            test_name(),
            "outcome::tests::the_test_is_named_by_its_thread"
        );
    }

    #[test]
    fn reasons_stay_on_one_line() {
        assert_eq!(one_line("a\tb\nc"), "a b c");
    }
}
