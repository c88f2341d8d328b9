//! The `shardsink` command line (`Cli`, clap with subcommands) and
//! [`main`], which the binary runs:
//!
//! - `shardsink [SETTINGS]` runs the daemon. Exit codes: 0 after a clean
//!   shutdown, 1 when start-up fails, 2 for a bad or missing setting (one
//!   line on stderr naming it).
//! - `shardsink verify …` audits an archive (exit 0 exact, 1 not, 2 bad
//!   arguments); see `shardsink verify --help`.
//! - `shardsink health [--ready]` probes a running shardsink's `/healthz`
//!   (or `/readyz`), for container health checks (exit 0 healthy, 1 not).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory as _, FromArgMatches as _};

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
    args_override_self = true,
    args_conflicts_with_subcommands = true
)]
pub(crate) struct Cli {
    /// Without a subcommand: run the daemon.
    #[command(subcommand)]
    command: Option<Command>,
    /// The daemon's settings (checked when the daemon runs).
    #[command(flatten)]
    daemon: Config,
}

/// The subcommands alone. Parsed when the first argument names one, so that
/// the daemon's settings — and their `SHARDSINK_*` variables — are not read
/// for them (clap reads a command's environment variables even when one of
/// its subcommands runs).
#[derive(Debug, clap::Parser)]
#[command(name = "shardsink", max_term_width = 100, args_override_self = true)]
struct SubcommandCli {
    #[command(subcommand)]
    command: Command,
}

/// What the command line asks for.
#[derive(Debug)]
enum Invocation {
    /// Run the daemon with these settings.
    Daemon(Box<Config>),
    /// Run a subcommand.
    Subcommand(Command),
}

/// Parses `args` (program name first) with `cli` (from [`Cli`]) or, when
/// the first argument names a subcommand, with `subcommands` (from
/// [`SubcommandCli`]).
fn parse(
    args: &[OsString],
    cli: clap::Command,
    subcommands: clap::Command,
) -> Result<Invocation, clap::Error> {
    let names_subcommand = args
        .get(1)
        .and_then(|arg| arg.to_str())
        .is_some_and(|name| subcommands.find_subcommand(name).is_some());
    if names_subcommand {
        let matches = subcommands.try_get_matches_from(args)?;
        return Ok(Invocation::Subcommand(
            SubcommandCli::from_arg_matches(&matches)?.command,
        ));
    }
    let cli = Cli::from_arg_matches(&cli.try_get_matches_from(args)?)?;
    Ok(match cli.command {
        Some(command) => Invocation::Subcommand(command),
        None => Invocation::Daemon(Box::new(cli.daemon)),
    })
}

/// What else the binary does.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Audit an archive: every record once, no overlap, no gap.
    Verify(Box<VerifyArgs>),
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
    let args: Vec<OsString> = std::env::args_os().collect();
    let invocation = match parse(&args, Cli::command(), SubcommandCli::command()) {
        Ok(invocation) => invocation,
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
    match invocation {
        Invocation::Subcommand(Command::Verify(args)) => verify(*args),
        Invocation::Subcommand(Command::Health(args)) => health(&args),
        Invocation::Daemon(config) => daemon(*config),
    }
}

/// The stack of each runtime thread. Tokio's default, 2 MiB, is not
/// enough for an unoptimised build's deepest path: a lease renewal inside a
/// PUT inside a shard task, through the AWS SDK's layers, each poll frame
/// holding every local of its `async fn` (a test build overflowed it and
/// died of SIGSEGV). Only the pages a thread touches are committed.
const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(THREAD_STACK_BYTES)
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
    use clap::CommandFactory as _;

    use super::*;

    /// Every environment lookup switched off, so that a developer's
    /// `SHARDSINK_*` variables cannot change the outcome.
    fn no_env(command: clap::Command) -> clap::Command {
        command
            .mut_args(|arg| arg.env(None::<&str>))
            .mut_subcommand("verify", |sub| sub.mut_args(|arg| arg.env(None::<&str>)))
            .mut_subcommand("health", |sub| sub.mut_args(|arg| arg.env(None::<&str>)))
    }

    fn parse_with(args: &[&str], cli: clap::Command) -> Result<Invocation, clap::Error> {
        let mut argv = vec![OsString::from("shardsink")];
        argv.extend(args.iter().map(OsString::from));
        parse(&argv, cli, no_env(SubcommandCli::command()))
    }

    fn parse_args(args: &[&str]) -> Result<Invocation, clap::Error> {
        parse_with(args, no_env(Cli::command()))
    }

    fn daemon(invocation: Invocation) -> Config {
        match invocation {
            Invocation::Daemon(config) => *config,
            Invocation::Subcommand(command) => panic!("expected the daemon, got {command:?}"),
        }
    }

    #[test]
    fn subcommands_need_none_of_the_daemons_settings() {
        let invocation = parse_args(&["health", "--ready"]).unwrap();
        assert!(matches!(
            invocation,
            Invocation::Subcommand(Command::Health(HealthArgs { ready: true, .. }))
        ));
        let invocation =
            parse_args(&["verify", "--bucket", "archive", "--prefix", "orders"]).unwrap();
        assert!(matches!(
            invocation,
            Invocation::Subcommand(Command::Verify(_))
        ));
    }

    #[test]
    fn subcommands_do_not_read_the_daemons_environment() {
        // The daemon's --failover-time read from a variable that holds no
        // duration (HOME is set in any test environment).
        let bad_env = no_env(Cli::command()).mut_arg("failover_time", |arg| arg.env("HOME"));
        assert!(parse_with(&["health"], bad_env.clone()).is_ok());
        assert!(parse_with(&["--stream", "s", "--bucket", "b"], bad_env).is_err());
    }

    #[test]
    fn daemon_settings_before_a_subcommand_are_refused() {
        let err = parse_args(&["--bucket", "archive", "verify"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
    }

    #[test]
    fn help_works_whatever_the_daemons_environment_holds() {
        let set_env = no_env(Cli::command()).mut_arg("stream", |arg| arg.env("HOME"));
        for args in [&["help"][..], &["help", "verify"], &["--help"]] {
            let err = parse_with(args, set_env.clone()).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::DisplayHelp, "{args:?}: {err}");
        }
    }

    #[test]
    fn without_a_subcommand_the_daemon_runs_and_needs_its_settings() {
        let config = daemon(parse_args(&["--stream", "orders", "--bucket", "archive"]).unwrap());
        assert_eq!(config.validate().unwrap().bucket, "archive");
        let config = daemon(parse_args(&["--stream", "orders"]).unwrap());
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "invalid setting --bucket (SHARDSINK_BUCKET): required, not set"
        );
    }
}
