//! Running the real `shardsink` binary: settings as `SHARDSINK_*`
//! environment variables, output to a log file under the target directory,
//! and signals (SIGKILL, SIGTERM, SIGSTOP, SIGCONT).
//!
//! The binary is `$SHARDSINK_BIN`, else `<target>/debug/shardsink` next to
//! the test executable; build it with
//! `cargo build -p shardsink --features failpoints`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// Environment variable naming the binary to test.
pub const BIN_VAR: &str = "SHARDSINK_BIN";

/// The daemon's settings, by flag name without the dashes
/// (`"buffer-max-age"`), passed as `SHARDSINK_<UPPER_SNAKE>` variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    values: BTreeMap<String, String>,
    failpoints: Option<String>,
    /// Other variables for the daemon's environment (`NOTIFY_SOCKET`, an
    /// endpoint), set after the inherited ones.
    env: BTreeMap<String, String>,
    label: String,
}

impl Settings {
    /// `--stream` and `--bucket` only; every other setting at the daemon's
    /// default except `--s3-force-path-style` (always on for local servers).
    /// Log files are grouped under `label` (use the stream name).
    pub fn new(stream: &str, bucket: &str) -> Self {
        Self {
            values: BTreeMap::new(),
            failpoints: None,
            env: BTreeMap::new(),
            label: stream.to_owned(),
        }
        .set("stream", stream)
        .set("bucket", bucket)
        .set("s3-force-path-style", "true")
    }

    /// [`Settings::new`] plus what end-to-end tests want: `--initial-position
    /// TRIM_HORIZON`, a fixed `--worker-id`, `--buffer-max-records 500`,
    /// `--buffer-max-age 5s`, `--failover-time 4s`,
    /// `--idle-time-between-reads 250ms`, `--shard-sync-interval 10s`,
    /// `--shutdown-timeout 20s`, and `--read-mode` as
    /// [`crate::env::read_mode`] says for the profile.
    pub fn for_tests(stream: &str, bucket: &str) -> Self {
        Self::new(stream, bucket)
            .set("read-mode", crate::env::read_mode())
            .set("initial-position", "TRIM_HORIZON")
            .set("worker-id", "e2e-worker")
            .set("buffer-max-records", "500")
            .set("buffer-max-age", "5s")
            .set("failover-time", "4s")
            .set("idle-time-between-reads", "250ms")
            .set("shard-sync-interval", "10s")
            .set("shutdown-timeout", "20s")
            // Many daemons run at once: each serves its endpoints on a free port.
            .set("metrics-address", "127.0.0.1:0")
    }

    /// Sets `--flag value` (flag without the leading dashes).
    #[must_use]
    pub fn set(mut self, flag: &str, value: impl Into<String>) -> Self {
        self.values
            .insert(flag.trim_start_matches('-').to_owned(), value.into());
        self
    }

    /// Removes a setting, so the daemon uses its default.
    #[must_use]
    pub fn unset(mut self, flag: &str) -> Self {
        self.values.remove(flag.trim_start_matches('-'));
        self
    }

    /// Sets the `FAILPOINTS` variable (`fail` crate syntax, e.g.
    /// `after-put=3*off->return`).
    #[must_use]
    pub fn failpoints(mut self, spec: impl Into<String>) -> Self {
        self.failpoints = Some(spec.into());
        self
    }

    /// Sets the variable `name` in the daemon's environment: one that is
    /// not a setting (`NOTIFY_SOCKET`, `WATCHDOG_USEC`), or an inherited one
    /// to override (`AWS_ENDPOINT_URL_KINESIS`).
    #[must_use]
    pub fn env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.insert(name.to_owned(), value.into());
        self
    }

    /// Without failpoints.
    #[must_use]
    pub fn without_failpoints(mut self) -> Self {
        self.failpoints = None;
        self
    }

    /// A setting's value, if set here.
    pub fn get(&self, flag: &str) -> Option<&str> {
        self.values
            .get(flag.trim_start_matches('-'))
            .map(String::as_str)
    }

    /// The `--stream` value.
    pub fn stream(&self) -> &str {
        self.get("stream").unwrap_or_default()
    }

    /// The `--bucket` value.
    pub fn bucket(&self) -> &str {
        self.get("bucket").unwrap_or_default()
    }

    /// The key prefix the daemon uses: `--prefix`, default the stream name.
    pub fn prefix(&self) -> String {
        self.get("prefix").unwrap_or(self.stream()).to_owned()
    }

    /// The lease table the daemon uses: `--lease-table`, default
    /// `shardsink-<stream>`.
    pub fn lease_table(&self) -> String {
        self.get("lease-table")
            .map_or_else(|| format!("shardsink-{}", self.stream()), str::to_owned)
    }

    /// The DynamoDB event table (`--event-dedup-store dynamodb`):
    /// `--event-dedup-table`, default `<lease table>-events`.
    pub fn event_table(&self) -> String {
        self.get("event-dedup-table")
            .map_or_else(|| format!("{}-events", self.lease_table()), str::to_owned)
    }

    /// The environment variables these settings become.
    pub fn env_vars(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .map(|(flag, value)| (env_var_name(flag), value.clone()))
            .collect()
    }

    /// The variables of the settings `shardsink verify` shares with the
    /// daemon ([`ARCHIVE_FLAGS`]): verify run with them audits what a
    /// daemon with these settings writes, in the layout it recorded.
    pub fn archive_env_vars(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .filter(|(flag, _)| ARCHIVE_FLAGS.contains(&flag.as_str()))
            .map(|(flag, value)| (env_var_name(flag), value.clone()))
            .collect()
    }
}

/// The flags `shardsink verify` shares with the daemon: where the archive
/// is, how to reach it, and which records are the same event.
pub const ARCHIVE_FLAGS: [&str; 12] = [
    "stream",
    "bucket",
    "prefix",
    "error-prefix",
    "duplicates-prefix",
    "application-name",
    "lease-table",
    "s3-force-path-style",
    "event-id",
    "event-fingerprint",
    "event-dedup-window",
    "event-dedup-store",
];

/// The variables [`run_verify`] passes on from this process's environment:
/// the local servers' endpoints, the credentials and the region.
const AWS_VARS: [&str; 7] = [
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_KINESIS",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
];

/// Runs `shardsink verify ARGS` against the local servers (the `AWS_*`
/// endpoint, credential and region variables of this process, then
/// `envs`), waits up to 120 s (scaled) and prints what it said.
///
/// # Errors
/// As [`run_to_exit`].
pub async fn run_verify(args: &[&str], envs: &[(&str, &str)]) -> Result<CapturedRun> {
    let mut argv = vec!["verify"];
    argv.extend_from_slice(args);
    let passed: Vec<(&str, String)> = AWS_VARS
        .iter()
        .filter_map(|name| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (*name, v))
        })
        .collect();
    let mut all: Vec<(&str, &str)> = passed.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend_from_slice(envs);
    let run = run_to_exit(&argv, &all, crate::scaled(Duration::from_secs(120))).await?;
    println!(
        "shardsink {argv:?} exited {}\n--- stdout ---\n{}--- stderr ---\n{}",
        run.status, run.stdout, run.stderr
    );
    Ok(run)
}

/// `buffer-max-age` → `SHARDSINK_BUFFER_MAX_AGE`.
pub fn env_var_name(flag: &str) -> String {
    format!(
        "SHARDSINK_{}",
        flag.trim_start_matches('-')
            .replace('-', "_")
            .to_ascii_uppercase()
    )
}

/// The target directory the test executable runs from (`<target>` in
/// `<target>/debug/deps/<test>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    // <target>/<profile>/deps/<exe>
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir)
}

/// The binary under test: `$SHARDSINK_BIN`, else `<target>/debug/shardsink`.
///
/// # Panics
/// When the file does not exist, with the command that builds it.
pub fn binary_path() -> PathBuf {
    let path = match crate::env::env_nonempty(BIN_VAR) {
        Some(path) => PathBuf::from(path),
        None => {
            let exe = std::env::current_exe().expect("the test executable has a path");
            // <target>/<profile>/deps/<exe> → <target>/<profile>/shardsink
            exe.parent()
                .and_then(Path::parent)
                .map(|profile| profile.join("shardsink"))
                .unwrap_or_else(|| target_dir().join("debug").join("shardsink"))
        }
    };
    assert!(
        path.is_file(),
        "shardsink binary not found at {}: build it with `cargo build -p shardsink --features failpoints` \
         or set {BIN_VAR}",
        path.display()
    );
    path
}

/// Where daemon logs go: `<target>/e2e-logs/<label>/`.
pub fn log_dir(label: &str) -> PathBuf {
    target_dir().join("e2e-logs").join(label)
}

/// Log filter variable passed through to the daemon (not a setting).
const LOG_VAR: &str = "SHARDSINK_LOG";

/// A command for `binary` with the inherited `SHARDSINK_*` settings and
/// `FAILPOINTS` removed, so only the test's settings reach the daemon.
/// `SHARDSINK_LOG` and `RUST_LOG` (log filters) pass through.
fn clean_command(binary: &Path) -> Command {
    let mut command = Command::new(binary);
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if (name.starts_with("SHARDSINK_") && name != LOG_VAR) || name == "FAILPOINTS" {
            command.env_remove(name);
        }
    }
    command.stdin(Stdio::null());
    command
}

static SPAWNED: AtomicU32 = AtomicU32::new(0);

/// A running (or exited) shardsink process. Killed (SIGKILL) and reaped on
/// drop; when dropped during a panic, prints the tail of its log.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    log_path: PathBuf,
    status: Option<ExitStatus>,
}

impl Daemon {
    /// Starts the binary with `settings`, stdout and stderr appended to
    /// `<target>/e2e-logs/<label>/daemon-<n>.log` (the path is printed).
    ///
    /// # Errors
    /// The log file cannot be created or the process cannot start.
    ///
    /// # Panics
    /// When the binary is missing ([`binary_path`]).
    pub fn spawn(settings: &Settings) -> Result<Self> {
        Self::spawn_binary(&binary_path(), settings)
    }

    /// [`Daemon::spawn`] with another executable (for testing the harness
    /// itself with a stand-in).
    ///
    /// # Errors
    /// As [`Daemon::spawn`].
    pub fn spawn_binary(binary: &Path, settings: &Settings) -> Result<Self> {
        let dir = log_dir(&settings.label);
        fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
        let n = SPAWNED.fetch_add(1, Ordering::SeqCst);
        let log_path = dir.join(format!("daemon-{n:02}.log"));
        let log = File::create(&log_path)
            .with_context(|| format!("failed to create {}", log_path.display()))?;
        let mut command = clean_command(binary);
        command
            .envs(settings.env_vars())
            .envs(&settings.env)
            .stdout(
                log.try_clone()
                    .context("failed to clone the log file handle")?,
            )
            .stderr(log);
        if let Some(spec) = &settings.failpoints {
            command.env("FAILPOINTS", spec);
        }
        let child = command
            .spawn()
            .with_context(|| format!("failed to start {}", binary.display()))?;
        println!(
            "daemon pid {} started ({}){}; log: {}",
            child.id(),
            binary.display(),
            settings
                .failpoints
                .as_deref()
                .map(|f| format!(" with FAILPOINTS={f}"))
                .unwrap_or_default(),
            log_path.display()
        );
        Ok(Self {
            child,
            log_path,
            status: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file (stdout and stderr).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The log so far (lossy UTF-8; empty if unreadable).
    pub fn log(&self) -> String {
        fs::read(&self.log_path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// The log's JSON lines (`--log-format auto` writes JSON to a file),
    /// parsed, in order; lines that are not JSON objects are left out.
    pub fn log_entries(&self) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(serde_json::Value::is_object)
            .collect()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The process's peak resident set size so far, in bytes: `VmHWM` from
    /// `/proc/<pid>/status` (Linux). Read it while the process runs: once
    /// it has exited the kernel no longer reports it, so call this before
    /// [`Daemon::kill`] or a graceful stop.
    ///
    /// # Errors
    /// The process has already been reaped; the status file cannot be read
    /// or has no `VmHWM` line (an exited, not yet reaped process).
    pub fn peak_rss_bytes(&self) -> Result<u64> {
        if let Some(status) = self.status {
            bail!(
                "cannot read the peak RSS of shardsink (pid {}): it exited ({status})",
                self.pid()
            );
        }
        let path = format!("/proc/{}/status", self.pid());
        let status = fs::read_to_string(&path).with_context(|| format!("failed to read {path}"))?;
        status_kib(&status, "VmHWM")
            .map(|kib| kib * 1024)
            .with_context(|| format!("no VmHWM in {path} (has the process exited?)"))
    }

    /// Whether the process is still running (reaps it if it has exited).
    pub fn is_running(&mut self) -> bool {
        self.exit_status().is_none()
    }

    /// The exit status if the process has exited (without waiting).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// SIGKILL, then reaps the process. Returns its exit status (also when
    /// it had already exited).
    ///
    /// # Errors
    /// The signal or the wait fails.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.exit_status() {
            return Ok(status);
        }
        // `Child::kill` sends SIGKILL on Unix.
        self.child.kill().context("failed to SIGKILL shardsink")?;
        let status = self.child.wait().context("failed to reap shardsink")?;
        self.status = Some(status);
        println!("daemon pid {} killed (SIGKILL)", self.pid());
        Ok(status)
    }

    /// Sends SIGTERM (graceful shutdown: flush, checkpoint, exit 0).
    ///
    /// # Errors
    /// The process has already exited, or `kill -TERM` fails.
    pub fn terminate(&mut self) -> Result<()> {
        self.signal("TERM")
    }

    /// Sends SIGSTOP (freezes the process, e.g. to let its lease expire).
    ///
    /// # Errors
    /// As [`Daemon::terminate`].
    pub fn pause(&mut self) -> Result<()> {
        self.signal("STOP")
    }

    /// Sends SIGCONT (resumes after [`Daemon::pause`]).
    ///
    /// # Errors
    /// As [`Daemon::terminate`].
    pub fn resume(&mut self) -> Result<()> {
        self.signal("CONT")
    }

    fn signal(&mut self, signal: &str) -> Result<()> {
        if let Some(status) = self.exit_status() {
            bail!("cannot send SIG{signal}: shardsink already exited ({status})");
        }
        let pid = self.pid().to_string();
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.clone()])
            .status()
            .context("failed to run `kill`")?;
        if !status.success() {
            bail!("`kill -{signal} {pid}` failed: {status}");
        }
        Ok(())
    }

    /// Waits up to `timeout` for the process to exit and returns its status.
    ///
    /// # Errors
    /// Still running after `timeout` (the process is left running).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.exit_status() {
                return Ok(status);
            }
            if start.elapsed() >= timeout {
                bail!(
                    "shardsink (pid {}) still running after {timeout:?}; log: {}",
                    self.pid(),
                    self.log_path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then [`Daemon::wait_exit`].
    ///
    /// # Errors
    /// As both.
    pub async fn terminate_and_wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.terminate()?;
        self.wait_exit(timeout).await
    }

    /// [`Daemon::wait_exit`] for a process told to stop (SIGTERM): the exit
    /// must be code 0 (flushed, checkpointed, released).
    ///
    /// # Errors
    /// Still running after `timeout`, or another exit (with the log tail).
    pub async fn wait_exit_ok(&mut self, timeout: Duration) -> Result<()> {
        let status = self.wait_exit(timeout).await?;
        if !self.stopped_as_asked(status) {
            bail!(
                "shardsink (pid {}) exited with {status} after SIGTERM, expected code 0; log:\n{}",
                self.pid(),
                self.log_tail(60)
            );
        }
        Ok(())
    }

    /// Whether `status`, the exit of a process sent SIGTERM, is the stop it
    /// was asked for: code 0 (flushed, checkpointed, released), or killed by
    /// that SIGTERM with nothing logged. The second is a signal that arrived
    /// between `exec` and the installation of the daemon's handlers, which
    /// comes before its first log line: no program can catch a signal
    /// before its handler exists, and the process had done nothing yet
    /// (systemd too counts death by SIGTERM as a clean exit). Killed by
    /// SIGTERM after it logged is not a stop as asked: its handlers were
    /// missing.
    pub fn stopped_as_asked(&self, status: ExitStatus) -> bool {
        use std::os::unix::process::ExitStatusExt;
        const SIGTERM: i32 = 15;
        status.code() == Some(0) || (status.signal() == Some(SIGTERM) && self.log().is_empty())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.kill();
        if std::thread::panicking() {
            eprintln!(
                "----- last 200 lines of {} -----\n{}\n----- end of log -----",
                self.log_path.display(),
                self.log_tail(200)
            );
        }
    }
}

/// A `/proc/<pid>/status` field given in kB (`VmHWM:     1234 kB`), in KiB.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        value.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}

/// What a short-lived run printed, and how it ended.
#[derive(Debug)]
pub struct CapturedRun {
    /// The exit status.
    pub status: ExitStatus,
    /// Everything written to stdout (lossy UTF-8).
    pub stdout: String,
    /// Everything written to stderr (lossy UTF-8).
    pub stderr: String,
}

/// Runs the binary with command-line `args` and extra environment `envs`
/// (inherited `SHARDSINK_*` and `FAILPOINTS` removed; AWS endpoints pointed
/// at a closed local port so a run that gets past validation reaches
/// nothing), captures its output, and waits up to `timeout`.
///
/// # Errors
/// The process cannot start, or is still running after `timeout` (then it
/// is killed).
pub async fn run_to_exit(
    args: &[&str],
    envs: &[(&str, &str)],
    timeout: Duration,
) -> Result<CapturedRun> {
    run_binary_to_exit(&binary_path(), args, envs, timeout).await
}

/// [`run_to_exit`] with another executable (for testing the harness itself).
///
/// # Errors
/// As [`run_to_exit`].
pub async fn run_binary_to_exit(
    binary: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
    timeout: Duration,
) -> Result<CapturedRun> {
    let mut command = clean_command(binary);
    command
        .args(args)
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .env("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
        .env("AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:9")
        .env("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:9")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_REGION", "us-east-1")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .with_context(|| format!("failed to start {}", binary.display()))?;
    // Read the pipes on threads so a chatty process cannot block on them.
    let mut stdout = child.stdout.take().context("stdout is piped")?;
    let mut stderr = child.stderr.take().context("stderr is piped")?;
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().context("failed to wait for shardsink")? {
            break status;
        }
        if start.elapsed() >= timeout {
            let _ = child.kill();
            let _ = child.wait();
            bail!("shardsink {args:?} still running after {timeout:?}; killed");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(CapturedRun {
        status,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    /// A stand-in for shardsink: logs its settings, exits 0 on SIGTERM.
    fn stand_in(name: &str, script: &str) -> PathBuf {
        let dir = target_dir().join("e2e-logs").join("stand-ins");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        fs::write(&path, script).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn alive(pid: u32) -> bool {
        Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    #[tokio::test]
    async fn controls_a_process() {
        let binary = stand_in(
            "daemon.sh",
            "#!/bin/sh\necho \"started stream=$SHARDSINK_STREAM fp=$FAILPOINTS\"\n\
             trap 'echo got TERM; exit 0' TERM\nwhile :; do sleep 0.05; done\n",
        );
        let settings = Settings::new("harness-self-test", "b").failpoints("after-put=return");
        let mut daemon = Daemon::spawn_binary(&binary, &settings).unwrap();
        assert!(daemon.is_running());
        daemon.pause().unwrap();
        daemon.resume().unwrap();
        assert!(daemon.wait_exit(Duration::from_millis(300)).await.is_err());
        let status = daemon
            .terminate_and_wait(Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(status.code(), Some(0));
        let log = daemon.log();
        assert!(
            log.contains("started stream=harness-self-test fp=after-put=return"),
            "{log}"
        );
        assert!(log.contains("got TERM"), "{log}");
        assert!(
            daemon.terminate().is_err(),
            "signalling an exited process must fail"
        );

        let mut daemon =
            Daemon::spawn_binary(&binary, &settings.clone().without_failpoints()).unwrap();
        let status = daemon.kill().unwrap();
        assert_eq!(status.code(), None, "SIGKILL leaves no exit code");
        assert!(!daemon.is_running());

        let daemon = Daemon::spawn_binary(&binary, &settings).unwrap();
        let pid = daemon.pid();
        drop(daemon);
        assert!(!alive(pid), "drop must kill the process");
    }

    #[tokio::test]
    async fn death_by_sigterm_is_a_stop_as_asked_only_before_the_first_log_line() {
        let settings = Settings::new("harness-self-test", "b");
        // No handler at all: SIGTERM takes its default action either way.
        let silent = stand_in("silent.sh", "#!/bin/sh\nexec sleep 30\n");
        let mut daemon = Daemon::spawn_binary(&silent, &settings).unwrap();
        let status = daemon
            .terminate_and_wait(Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(status.code(), None, "killed by SIGTERM");
        assert!(daemon.stopped_as_asked(status));

        let talking = stand_in("talking.sh", "#!/bin/sh\necho started\nexec sleep 30\n");
        let mut daemon = Daemon::spawn_binary(&talking, &settings).unwrap();
        while daemon.log().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let status = daemon
            .terminate_and_wait(Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(status.code(), None, "killed by SIGTERM");
        assert!(!daemon.stopped_as_asked(status));
        assert!(daemon.wait_exit_ok(Duration::from_secs(1)).await.is_err());
    }

    #[tokio::test]
    async fn captures_a_short_run() {
        let binary = stand_in(
            "bad-config.sh",
            "#!/bin/sh\necho \"error: invalid value for --compression: $*\" >&2\nexit 2\n",
        );
        let run = run_binary_to_exit(
            &binary,
            &["--compression", "lz4"],
            &[],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(run.status.code(), Some(2));
        assert_eq!(
            run.stderr,
            "error: invalid value for --compression: --compression lz4\n"
        );
        assert_eq!(run.stdout, "");
    }

    #[test]
    fn reads_status_fields() {
        let status =
            "Name:\tshardsink\nVmPeak:\t  812344 kB\nVmHWM:\t  179200 kB\nVmRSS:\t  150000 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(179_200));
        assert_eq!(status_kib(status, "VmRSS"), Some(150_000));
        assert_eq!(status_kib(status, "VmSwap"), None);
        assert_eq!(status_kib("VmHWM:\t?\n", "VmHWM"), None);
    }

    #[tokio::test]
    async fn reads_the_peak_rss_of_a_running_process() {
        let binary = stand_in(
            "sleeper.sh",
            "#!/bin/sh\ntrap 'exit 0' TERM\nwhile :; do sleep 0.05; done\n",
        );
        let mut daemon =
            Daemon::spawn_binary(&binary, &Settings::new("harness-self-test", "b")).unwrap();
        let peak = daemon.peak_rss_bytes().unwrap();
        // Read right after the spawn: any size from a forked child to the
        // shell it became.
        assert!(
            (4 * 1024..1 << 30).contains(&peak),
            "a shell's peak RSS: {peak} bytes"
        );
        daemon.kill().unwrap();
        assert!(
            daemon.peak_rss_bytes().is_err(),
            "an exited process has no peak RSS to read"
        );
    }

    #[test]
    fn env_var_names() {
        assert_eq!(env_var_name("buffer-max-age"), "SHARDSINK_BUFFER_MAX_AGE");
        assert_eq!(
            env_var_name("--s3-force-path-style"),
            "SHARDSINK_S3_FORCE_PATH_STYLE"
        );
    }

    #[test]
    fn defaults_follow_the_stream() {
        let settings = Settings::new("orders", "archive");
        assert_eq!(settings.prefix(), "orders");
        assert_eq!(settings.lease_table(), "shardsink-orders");
        assert_eq!(settings.event_table(), "shardsink-orders-events");
        let settings = settings.set("--prefix", "p").set("lease-table", "t");
        assert_eq!(settings.prefix(), "p");
        assert_eq!(settings.lease_table(), "t");
        assert_eq!(settings.event_table(), "t-events");
        assert_eq!(
            settings.clone().set("event-dedup-table", "m").event_table(),
            "m"
        );
        assert!(settings.env_vars().contains(&(
            "SHARDSINK_S3_FORCE_PATH_STYLE".to_owned(),
            "true".to_owned()
        )));
    }
}
