//! The `shardsink` binary.
//!
//! - `shardsink [SETTINGS]` runs the daemon. Exit codes: 0 after a clean
//!   shutdown, 1 when start-up fails, 2 for a bad or missing setting (one line
//!   on stderr naming it).
//! - `shardsink verify …` audits an archive (exit 0 exact, 1 not, 2 bad
//!   arguments); see `shardsink verify --help`.
//! - `shardsink health [--ready]` probes a running shardsink's `/healthz`
//!   (or `/readyz`), for container health checks (exit 0 healthy, 1 not).

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser as _;
use clap::error::ErrorKind;
use shardsink::config::{Config, ConfigError, LogFormat, one_line_error};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("health") => health_main(&args[1..]),
        Some("verify") => verify_main(&args[1..]),
        _ => daemon_main(),
    }
}

/// Parses with `parse`, or prints clap's help/version, or one line naming the
/// bad argument and returns exit code 2.
fn parse_or_exit<T>(parse: impl FnOnce() -> Result<T, clap::Error>) -> Result<T, ExitCode> {
    match parse() {
        Ok(value) => Ok(value),
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            err.exit()
        }
        Err(err) => {
            eprintln!("shardsink: {}", one_line_error(&err));
            Err(ExitCode::from(2))
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|err| {
            eprintln!("shardsink: failed to start the async runtime: {err}");
            ExitCode::from(1)
        })
}

fn daemon_main() -> ExitCode {
    let config = match parse_or_exit(Config::try_parse) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let settings = match config.validate() {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("shardsink: {err}");
            return ExitCode::from(2);
        }
    };
    shardsink::ops::log::init(settings.config.log_format);
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();

    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(shardsink::run(settings, shardsink::ops::shutdown::signal())) {
        Ok(_) => ExitCode::SUCCESS,
        Err(err) => match err.downcast_ref::<ConfigError>() {
            Some(config_error) => {
                // One line naming the setting, as for settings refused at parse time.
                eprintln!("shardsink: {config_error}");
                ExitCode::from(2)
            }
            None => {
                tracing::error!(error = format!("{err:#}"), "shardsink failed");
                ExitCode::from(1)
            }
        },
    }
}

/// Probes a running shardsink's health endpoint: exit 0 when it answers 200.
#[derive(Debug, clap::Parser)]
#[command(name = "shardsink health")]
struct HealthArgs {
    /// Address of the running shardsink's endpoints. [default: the port of
    /// SHARDSINK_METRICS_ADDRESS on 127.0.0.1, else 127.0.0.1:9898]
    #[arg(long, env = "SHARDSINK_HEALTH_ADDRESS", value_name = "HOST:PORT")]
    address: Option<SocketAddr>,
    /// Ask /readyz (ready to work) instead of /healthz (alive).
    #[arg(long)]
    ready: bool,
}

fn health_main(args: &[String]) -> ExitCode {
    let args = match parse_or_exit(|| HealthArgs::try_parse_from(args)) {
        Ok(args) => args,
        Err(code) => return code,
    };
    let path = if args.ready { "/readyz" } else { "/healthz" };
    // Follow the daemon's own setting, so moving the port moves the probe.
    let address = args.address.unwrap_or_else(|| {
        let port = std::env::var("SHARDSINK_METRICS_ADDRESS")
            .ok()
            .and_then(|address| address.parse::<SocketAddr>().ok())
            .map_or(9898, |address| address.port());
        SocketAddr::from(([127, 0, 0, 1], port))
    });
    match shardsink::ops::http::probe(address, path) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!(
                "shardsink: {path} on {} says not {}",
                address,
                if args.ready { "ready" } else { "healthy" }
            );
            ExitCode::from(1)
        }
        Err(err) => {
            eprintln!("shardsink: {err}");
            ExitCode::from(1)
        }
    }
}

fn verify_main(args: &[String]) -> ExitCode {
    let args = match parse_or_exit(|| shardsink::verify::VerifyArgs::try_parse_from(args)) {
        Ok(args) => args,
        Err(code) => return code,
    };
    shardsink::ops::log::init(LogFormat::Text);
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(shardsink::verify::run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(err) => {
            eprintln!("shardsink verify: {err:#}");
            ExitCode::from(2)
        }
    }
}
