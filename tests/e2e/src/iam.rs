//! What the IAM policies in `deploy/` grant, what a run used, and a
//! recording proxy for the calls the daemon cannot record itself.
//!
//! The daemon records the operations of the AWS clients it builds
//! (`--record-aws-operations`, test builds): S3, Kinesis, DynamoDB and the
//! S3 Tables catalog's. The Glue catalog builds its own client, so its
//! calls are seen on the wire instead: [`TargetProxy`] sits between the
//! daemon and the Glue endpoint and records each request's `X-Amz-Target`
//! (`AWSGlue.GetTable`: the AWS JSON protocol names the operation there).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The IAM action an SDK operation needs (Service Authorization Reference:
/// HeadBucket and ListObjectsV2 are authorized by `s3:ListBucket`,
/// HeadObject by `s3:GetObject`; the others by the same-named action).
pub fn iam_action(service: &str, operation: &str) -> String {
    match (service, operation) {
        ("s3", "HeadBucket" | "ListObjectsV2") => "s3:ListBucket".to_owned(),
        ("s3", "HeadObject") => "s3:GetObject".to_owned(),
        (service, operation) => format!("{service}:{operation}"),
    }
}

/// The IAM actions of the operations recorded in `recorded` (the
/// daemon's `--record-aws-operations` file: `service:Operation` lines).
pub fn recorded_actions(recorded: &str) -> BTreeSet<String> {
    recorded
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(service, operation)| iam_action(service, operation))
        .collect()
}

/// The actions the policy file `deploy/{file}` grants, in the statements
/// whose `Sid` `keep` accepts.
///
/// # Panics
/// When the file is missing or not a policy document.
pub fn policy_actions(file: &str, keep: impl Fn(&str) -> bool) -> BTreeSet<String> {
    let path = format!("{}/../../deploy/{file}", env!("CARGO_MANIFEST_DIR"));
    let policy: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut actions = BTreeSet::new();
    for statement in policy["Statement"].as_array().unwrap() {
        if !keep(statement["Sid"].as_str().unwrap_or_default()) {
            continue;
        }
        match &statement["Action"] {
            Value::String(action) => {
                actions.insert(action.clone());
            }
            Value::Array(list) => {
                actions.extend(list.iter().map(|a| a.as_str().unwrap().to_owned()));
            }
            other => panic!("unexpected Action {other} in {path}"),
        }
    }
    actions
}

/// A loopback HTTP/1.1 proxy in front of one endpoint that records the
/// `X-Amz-Target` header of every request (AWS JSON protocol services:
/// `AWSGlue.CreateTable`). Each request goes upstream on a connection of
/// its own, asked to close after the response, which is passed back
/// whole; then the client's connection is closed too (the response says
/// `Connection: close`), so that a response without a length ends. A
/// request body needs a `Content-Length` (the AWS SDKs send one for JSON);
/// a chunked one is refused (the connection is dropped, the test's
/// client fails rather than hangs). `Expect: 100-continue` is answered.
/// Stops accepting when dropped.
#[derive(Debug)]
pub struct TargetProxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    targets: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl TargetProxy {
    /// Listens on a free loopback port and forwards to `upstream`
    /// (`http://host:port`).
    ///
    /// # Errors
    /// When `upstream` is not `http://host:port` or no port can be bound.
    pub async fn start(upstream: &str) -> Result<Self> {
        let upstream = upstream
            .strip_prefix("http://")
            .with_context(|| format!("{upstream} is not an http:// endpoint"))?
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let targets = Arc::new(Mutex::new(Vec::new()));
        let recorded = targets.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, recorded) = (upstream.clone(), recorded.clone());
                tokio::spawn(async move {
                    if let Err(error) = serve(client, &upstream, &recorded).await {
                        eprintln!("target proxy: {error:#}");
                    }
                });
            }
        });
        Ok(Self { url, targets, task })
    }

    /// The targets recorded so far, in order (`AWSGlue.GetTable`, ...).
    pub fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }
}

impl Drop for TargetProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves one request of a client connection, then closes it.
async fn serve(client: TcpStream, upstream: &str, recorded: &Mutex<Vec<String>>) -> Result<()> {
    let (read, mut write) = client.into_split();
    let mut read = BufReader::new(read);
    let mut head = Vec::new();
    let (mut length, mut expect_continue) = (0usize, false);
    loop {
        let mut line = String::new();
        if read.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        if line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let (name, value) = (name.trim(), value.trim());
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().context("Content-Length")?;
            }
            if name.eq_ignore_ascii_case("transfer-encoding") {
                anyhow::bail!("a request body in {value} transfer encoding is not supported");
            }
            if name.eq_ignore_ascii_case("x-amz-target") {
                recorded.lock().unwrap().push(value.to_owned());
            }
            if name.eq_ignore_ascii_case("expect") {
                expect_continue = value.eq_ignore_ascii_case("100-continue");
                continue;
            }
            if name.eq_ignore_ascii_case("connection") {
                continue;
            }
        }
        head.extend_from_slice(line.as_bytes());
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    if expect_continue {
        write.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    let mut body = vec![0; length];
    read.read_exact(&mut body).await?;
    let mut server = TcpStream::connect(upstream).await?;
    server.write_all(&head).await?;
    server.write_all(&body).await?;
    let mut response = Vec::new();
    server.read_to_end(&mut response).await?;
    write.write_all(&response).await?;
    write.shutdown().await?;
    Ok(())
}
