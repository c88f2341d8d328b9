//! The `shardsink` command line ([`Cli`], clap with subcommands) and
//! [`main`], which the binary runs:
//!
//! - `shardsink [SETTINGS]` runs the daemon. Exit codes: 0 after a clean
//!   shutdown, 1 when start-up fails, 2 for a bad or missing setting (one
//!   line on stderr naming it).
//! - `shardsink verify …` audits an archive (exit 0 exact, 1 not, 2 bad
//!   arguments); see `shardsink verify --help`.
//! - `shardsink health [--ready]` probes a running shardsink's `/healthz`
//!   (or `/readyz`), for container health checks (exit 0 healthy, 1 not).

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser as _;
use clap::error::ErrorKind;

use crate::config::{Config, ConfigError, LogFormat, one_line_error};
use crate::ops::shutdown::ShutdownSignals;
use crate::ops::{http, log};
use crate::verify::VerifyArgs;

/// Copies every record of a Kinesis data stream to S3 exactly once.
///
/// AWS credentials, region and endpoints come from the standard sources:
/// AWS_REGION, AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the ECS
/// task role, AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_{KINESIS,S3,DYNAMODB}.
/// Logs go to stderr; SHARDSINK_LOG (or RUST_LOG) sets the filter, e.g.
/// SHARDSINK_LOG=debug. Exit codes: 0 after a clean shutdown, 1 when start-up
/// fails, 2 for a bad setting. See docs/CONFIGURATION.md.
#[derive(Debug, clap::Parser)]
#[command(
    name = "shardsink",
    version,
    max_term_width = 100,
    args_override_self = true
)]
pub struct Cli {
    /// Without a subcommand: run the daemon.
    #[command(subcommand)]
    command: Option<Command>,
    /// The daemon's settings (checked when the daemon runs).
    #[command(flatten)]
    daemon: Config,
}

/// What else the binary does.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Audit an archive: every record once, no overlap, no gap.
    Verify(VerifyArgs),
    /// Ask a running shardsink whether it is alive (or ready).
    Health(HealthArgs),
}

/// Probes a running shardsink's health endpoint: exit 0 when it answers 200.
#[derive(Debug, clap::Args)]
struct HealthArgs {
    /// Address of the running shardsink's endpoints. [default: the port of
    /// SHARDSINK_METRICS_ADDRESS on 127.0.0.1, else 127.0.0.1:9898]
    #[arg(long, env = "SHARDSINK_HEALTH_ADDRESS", value_name = "HOST:PORT")]
    address: Option<SocketAddr>,
    /// Ask /readyz (ready to work) instead of /healthz (alive).
    #[arg(long)]
    ready: bool,
}

/// Parses the command line and runs what it says; the process's exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
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
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Some(Command::Verify(args)) => verify(args),
        Some(Command::Health(args)) => health(&args),
        None => daemon(cli.daemon),
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

fn daemon(config: Config) -> ExitCode {
    // The runtime first, so the signal handlers are in place before anything
    // slow (AWS configuration, the endpoints' bind) can happen.
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let signals = {
        let _entered = runtime.enter();
        ShutdownSignals::install()
    };
    let settings = match config.validate() {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("shardsink: {err}");
            return ExitCode::from(2);
        }
    };
    log::init(settings.config.log_format);
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();

    match runtime.block_on(crate::run(settings, signals.received())) {
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

fn health(args: &HealthArgs) -> ExitCode {
    let path = if args.ready { "/readyz" } else { "/healthz" };
    // Follow the daemon's own setting, so moving the port moves the probe.
    let address = args.address.unwrap_or_else(|| {
        let port = std::env::var("SHARDSINK_METRICS_ADDRESS")
            .ok()
            .and_then(|address| address.parse::<SocketAddr>().ok())
            .map_or(9898, |address| address.port());
        SocketAddr::from(([127, 0, 0, 1], port))
    });
    match http::probe(address, path) {
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

fn verify(args: VerifyArgs) -> ExitCode {
    log::init(LogFormat::Text);
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(crate::verify::run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(err) => {
            eprintln!("shardsink verify: {err:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, FromArgMatches as _};

    use super::*;

    /// Parses `args` with every environment lookup switched off, so that a
    /// developer's `SHARDSINK_*` variables cannot change the outcome.
    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let no_env = |command: clap::Command| command.mut_args(|arg| arg.env(None::<&str>));
        let command = no_env(Cli::command())
            .mut_subcommand("verify", no_env)
            .mut_subcommand("health", no_env);
        let mut argv = vec!["shardsink"];
        argv.extend_from_slice(args);
        Cli::from_arg_matches(&command.try_get_matches_from(argv)?)
    }

    #[test]
    fn subcommands_need_none_of_the_daemons_settings() {
        let cli = parse(&["health", "--ready"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Health(HealthArgs { ready: true, .. }))
        ));
        let cli = parse(&["verify", "--bucket", "archive", "--prefix", "orders"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Verify(_))));
    }

    #[test]
    fn without_a_subcommand_the_daemon_runs_and_needs_its_settings() {
        let cli = parse(&["--stream", "orders", "--bucket", "archive"]).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.daemon.validate().unwrap().bucket, "archive");
        let cli = parse(&["--stream", "orders"]).unwrap();
        assert_eq!(
            cli.daemon.validate().unwrap_err().to_string(),
            "invalid setting --bucket (SHARDSINK_BUCKET): required, not set"
        );
    }
}
