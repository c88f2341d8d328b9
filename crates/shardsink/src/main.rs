//! The `shardsink` daemon. Exit codes: 0 after a clean shutdown, 1 when
//! start-up fails, 2 for a bad or missing setting (one line on stderr naming
//! it).

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser as _;
use clap::error::ErrorKind;
use shardsink::config::{Config, ConfigError, LogFormat, one_line_error};
use tracing_subscriber::EnvFilter;

/// Log filter unless `SHARDSINK_LOG` (or `RUST_LOG`) says otherwise: shardsink
/// at info, libraries at warn.
const DEFAULT_LOG_FILTER: &str = "warn,shardsink=info,shard_lease=info";

fn main() -> ExitCode {
    let config = match Config::try_parse() {
        Ok(config) => config,
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
    let settings = match config.validate() {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("shardsink: {err}");
            return ExitCode::from(2);
        }
    };
    init_tracing(settings.config.log_format);
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("shardsink: failed to start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(shardsink::run(settings, shardsink::shutdown::signal())) {
        Ok(_) => ExitCode::SUCCESS,
        Err(err) => match err.downcast_ref::<ConfigError>() {
            Some(config_error) => {
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

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_env("SHARDSINK_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
}
