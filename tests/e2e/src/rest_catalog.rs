//! The Iceberg REST catalog test double, `tests/iceberg/rest_catalog.py`,
//! run by a test: the REST protocol in front of pyiceberg's `SqlCatalog` on
//! a SQLite file, so that a table the daemon writes through
//! `--iceberg-catalog rest` can be read back from that file, independently
//! of the daemon and of the server ([`IcebergTable::rest`]).
//!
//! [`RestCatalogServer::start`] runs the script on a free port of
//! 127.0.0.1 and reads the port from its first stdout line;
//! [`RestCatalogServer::stop`] sends SIGTERM and expects exit status 0.
//! Dropping a server that is still running kills it (SIGKILL), so a test
//! that fails leaves no process behind. The server logs one line per
//! request to `<dir>/rest-catalog.log`.
//!
//! [`IcebergTable::rest`]: crate::table::IcebergTable::rest

use std::fs::{self, File};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::table::CATALOG_NAME;
use crate::wait::scaled;

/// The REST catalog test double.
pub const REST_CATALOG_SCRIPT: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../iceberg/rest_catalog.py");

/// The first stdout line of the script, before the base URL.
const LISTENING: &str = "listening on ";

/// How long the script may take to import pyiceberg, open the catalog and
/// print its address (before [`scaled`]).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `rest_catalog.py`.
#[derive(Debug)]
pub struct RestCatalogServer {
    child: Child,
    /// Kept open: the script's stdout after its first line.
    _stdout: BufReader<ChildStdout>,
    /// `http://127.0.0.1:PORT`, as the script printed it.
    uri: String,
    /// The SQLite file of the SQL catalog behind the server.
    catalog_file: PathBuf,
    /// The script's stderr (one line per request, tracebacks).
    log_path: PathBuf,
}

impl RestCatalogServer {
    /// Starts the server with `python` (the Python of
    /// [`reader_python`](crate::table::reader_python), which has
    /// pyiceberg) on the SQL catalog `dir/rest.db` named [`CATALOG_NAME`]
    /// (a leftover file from an earlier run is removed; `dir` is created
    /// and must be absolute), creating tables under `warehouse`
    /// (`s3://BUCKET/PATH`) and reading and writing metadata files at the
    /// S3 endpoint `s3_endpoint` with the credentials and region of the
    /// environment. Returns once the server has printed its address.
    ///
    /// # Errors
    /// `dir` is not absolute or cannot be created; the script cannot be
    /// run, exits, prints something other than its address first, or
    /// prints nothing within 30 s (scaled), with its log.
    pub fn start(python: &Path, dir: &Path, warehouse: &str, s3_endpoint: &str) -> Result<Self> {
        if !dir.is_absolute() {
            bail!("{} is not absolute", dir.display());
        }
        fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
        let catalog_file = dir.join("rest.db");
        let _ = fs::remove_file(&catalog_file);
        let log_path = dir.join("rest-catalog.log");
        let log = File::create(&log_path)
            .with_context(|| format!("failed to create {}", log_path.display()))?;
        let mut child = Command::new(python)
            .arg(REST_CATALOG_SCRIPT)
            .args(["--port", "0"])
            .arg("--catalog-uri")
            .arg(format!("sqlite:///{}", catalog_file.display()))
            .args(["--catalog-name", CATALOG_NAME])
            .args(["--warehouse", warehouse])
            .args(["--s3-endpoint", s3_endpoint])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("failed to run {} {REST_CATALOG_SCRIPT}", python.display()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        // The first line is read on a thread of its own, so that a server
        // that never prints cannot hold the test past the timeout.
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let read = reader.read_line(&mut line).map(|_| line);
            let _ = sender.send((read, reader));
        });
        let started = match receiver.recv_timeout(scaled(START_TIMEOUT)) {
            Ok((Ok(line), reader)) => match line.trim().strip_prefix(LISTENING) {
                Some(uri) => Ok((uri.to_owned(), reader)),
                None => Err(anyhow::anyhow!(
                    "rest_catalog.py printed {line:?} instead of its address"
                )),
            },
            Ok((Err(error), _)) => Err(error).context("failed to read rest_catalog.py's stdout"),
            Err(_) => Err(anyhow::anyhow!(
                "rest_catalog.py printed no address within {:?}",
                scaled(START_TIMEOUT)
            )),
        };
        match started {
            Ok((uri, reader)) => Ok(Self {
                child,
                _stdout: reader,
                uri,
                catalog_file,
                log_path,
            }),
            Err(error) => {
                let _ = child.kill();
                let status = child.wait();
                Err(error.context(format!(
                    "rest_catalog.py did not start ({status:?}); log {}:\n{}",
                    log_path.display(),
                    tail(&log_path, 40)
                )))
            }
        }
    }

    /// The server's base URL, `http://127.0.0.1:PORT`
    /// (`--iceberg-catalog-uri`).
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The SQLite file of the SQL catalog behind the server (absolute).
    pub fn catalog_file(&self) -> &Path {
        &self.catalog_file
    }

    /// The server's log: its stderr.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path, lines)
    }

    /// Sends SIGTERM and waits up to `timeout` for the server to exit.
    ///
    /// # Errors
    /// The server had already exited, `kill -TERM` fails, it is still
    /// running after `timeout` (then killed), or it exits with another
    /// status than 0; each with the log's tail.
    pub async fn stop(&mut self, timeout: Duration) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "rest_catalog.py exited before it was stopped ({status}); log:\n{}",
                self.log_tail(40)
            );
        }
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .context("failed to run `kill`")?;
        if !sent.success() {
            bail!("`kill -TERM {pid}` failed: {sent}");
        }
        let status = self.wait_exit(timeout).await?;
        if !status.success() {
            bail!(
                "rest_catalog.py exited with {status} after SIGTERM, expected 0; log:\n{}",
                self.log_tail(40)
            );
        }
        Ok(())
    }

    /// The exit status once the server exits within `timeout`.
    async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if start.elapsed() >= timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "rest_catalog.py still running {timeout:?} after SIGTERM (killed); log:\n{}",
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for RestCatalogServer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // `Child::kill` sends SIGKILL on Unix.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "----- last 60 lines of {} -----\n{}\n----- end of log -----",
                self.log_path.display(),
                self.log_tail(60)
            );
        }
    }
}

/// The last `lines` lines of the file at `path` (lossy UTF-8; empty when
/// unreadable).
fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
