//! [`ConfigError`]: a setting that is missing or invalid, and
//! [`one_line_error`]: clap's parse errors rendered the same way — one line
//! naming the flag and its variable (exit code 2).

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// A setting that is missing or invalid. Printed as one line; the process
/// exits with code 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {flag} ({env}): {message}")]
pub struct ConfigError {
    /// The flag, e.g. `--buffer-max-age`.
    pub flag: String,
    /// The environment variable, e.g. `SHARDSINK_BUFFER_MAX_AGE`.
    pub env: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// A required setting that is not set.
    pub(crate) fn missing(flag: &str) -> Self {
        Self::new(flag, "required, not set")
    }

    pub(crate) fn new(flag: &str, message: impl Into<String>) -> Self {
        Self {
            flag: format!("--{flag}"),
            env: format!("SHARDSINK_{}", flag.replace('-', "_").to_uppercase()),
            message: message.into(),
        }
    }
}

/// Renders a command-line error as one line naming the setting, e.g.
/// `invalid setting --compression (SHARDSINK_COMPRESSION): invalid value "lz4"; possible values: none, gzip, zstd`.
/// Help and version requests are not errors and are rendered as clap renders them.
pub fn one_line_error(err: &clap::Error) -> String {
    let arg = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => Some(arg.clone()),
        Some(ContextValue::Strings(args)) => args.first().cloned(),
        _ => None,
    };
    // clap names an argument as `--flag <VALUE>`; keep the flag.
    let flag = arg
        .as_deref()
        .and_then(|arg| arg.split_whitespace().next())
        .map(str::to_owned);
    let detail = match err.kind() {
        ErrorKind::MissingRequiredArgument => "required, not set".to_owned(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let value = match err.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(value)) => value.clone(),
                _ => String::new(),
            };
            let mut detail = format!("invalid value {value:?}");
            if let Some(ContextValue::Strings(valid)) = err.get(ContextKind::ValidValue) {
                detail.push_str(&format!("; possible values: {}", valid.join(", ")));
            }
            if let Some(source) = std::error::Error::source(err) {
                detail.push_str(&format!(": {source}"));
            }
            detail
        }
        ErrorKind::UnknownArgument => "unknown setting".to_owned(),
        _ => first_line(&err.to_string()),
    };
    match flag {
        Some(flag) => {
            let env = format!(
                "SHARDSINK_{}",
                flag.trim_start_matches('-')
                    .replace('-', "_")
                    .to_uppercase()
            );
            if err.kind() == ErrorKind::UnknownArgument {
                format!("unknown setting {flag}")
            } else {
                format!("invalid setting {flag} ({env}): {detail}")
            }
        }
        None => detail,
    }
}

fn first_line(text: &str) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned()
}
