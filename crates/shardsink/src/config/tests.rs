use std::time::Duration;

use super::values::parse_byte_size;
use super::*;
use crate::read::mode::ReadMode;

fn parse(args: &[&str]) -> Result<Config, clap::Error> {
    parse_flags_only(args)
}

/// The daemon's settings from `args` after a stream, a bucket and a
/// worker id.
pub(crate) fn valid(args: &[&str]) -> Result<Settings, ConfigError> {
    let mut all = vec![
        "--stream",
        "orders",
        "--bucket",
        "archive",
        "--worker-id",
        "w1",
    ];
    all.extend_from_slice(args);
    parse(&all).unwrap().validate()
}

#[test]
fn defaults_are_the_documented_ones() {
    let settings = valid(&[]).unwrap();
    let config = &settings.config;
    assert_eq!(config.buffer_max_bytes, 64 * 1024 * 1024);
    assert_eq!(config.buffer_max_records, 100_000);
    assert_eq!(config.buffer_max_age, Duration::from_secs(60));
    assert_eq!(config.compression, CompressionCodec::Zstd);
    assert_eq!(config.initial_position, InitialPosition::TrimHorizon);
    assert_eq!(settings.prefix, "orders");
    assert_eq!(settings.lease_table, "shardsink-orders");
    let named = valid(&["--application-name", "audit"]).unwrap();
    assert_eq!(named.lease_table, "audit-orders");
    assert!(!config.archive.s3_force_path_style);
    assert_eq!(settings.lease_renewal_interval, Duration::from_secs(10) / 3);
    assert_eq!(settings.lease_taking_interval, Duration::from_secs(2));
    assert_eq!(
        settings.metrics_address,
        Some("0.0.0.0:9898".parse().unwrap())
    );
    assert_eq!(config.log_format, LogFormat::Auto);
    assert_eq!(
        valid(&["--metrics-address", "off"])
            .unwrap()
            .metrics_address,
        None
    );
}

#[test]
fn output_settings_resolve_to_a_format_and_layouts() {
    use crate::output::format::Format;

    let settings = valid(&[]).unwrap();
    assert_eq!(settings.output.format, Format::Envelope);
    assert_eq!(settings.output.layout.style(), KeyStyle::Plain);
    assert_eq!(settings.output.layout.time_bucket(), TimeBucket::Minute);
    assert_eq!(settings.output.error_layout.prefix(), "orders-errors");
    let json = valid(&["--format", "json"]).unwrap();
    assert_eq!(
        json.output.format,
        Format::Json {
            metadata_field: Some("_kinesis".to_owned())
        }
    );
    let bare = valid(&["--format", "JSON", "--metadata-field", ""]).unwrap();
    assert_eq!(
        bare.output.format,
        Format::Json {
            metadata_field: None
        }
    );
    let raw = valid(&["--format", "raw"]).unwrap();
    assert_eq!(
        raw.output.format,
        Format::Raw {
            delimiter: b"\n".to_vec()
        }
    );
    let crlf = valid(&["--format", "raw", "--record-delimiter", "\\r\\n"]).unwrap();
    assert_eq!(
        crlf.output.format,
        Format::Raw {
            delimiter: b"\r\n".to_vec()
        }
    );
    let none = valid(&["--format", "raw", "--record-delimiter", ""]).unwrap();
    assert_eq!(
        none.output.format,
        Format::Raw {
            delimiter: Vec::new()
        }
    );
    let hive = valid(&[
        "--key-layout",
        "hive",
        "--time-bucket",
        "hour",
        "--buffer-max-age",
        "15m",
        "--error-prefix",
        "errors/orders/",
    ])
    .unwrap();
    assert_eq!(hive.output.layout.style(), KeyStyle::Hive);
    assert_eq!(hive.output.layout.time_bucket(), TimeBucket::Hour);
    assert_eq!(hive.output.error_layout.prefix(), "errors/orders");
    assert_eq!(hive.output.error_layout.style(), KeyStyle::Hive);
    assert_eq!(hive.config.buffer_max_age, Duration::from_secs(900));
}

#[test]
fn a_parquet_schema_file_is_read_at_start() {
    use crate::output::format::Format;

    let dir = std::env::temp_dir().join(format!("shardsink-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("schema.json");
    std::fs::write(&path, r#"[{"name":"user_id","type":"int64"}]"#).unwrap();
    let path_text = path.to_str().unwrap();
    let settings = valid(&["--format", "parquet", "--parquet-schema", path_text]).unwrap();
    assert!(matches!(
        settings.output.format,
        Format::Parquet { schema: Some(_) }
    ));
    std::fs::write(&path, r#"[{"name":"user_id","type":"uint128"}]"#).unwrap();
    let err = valid(&["--format", "parquet", "--parquet-schema", path_text]).unwrap_err();
    assert_eq!(err.flag, "--parquet-schema");
    let missing = dir.join("missing.json");
    let err = valid(&[
        "--format",
        "parquet",
        "--parquet-schema",
        missing.to_str().unwrap(),
    ])
    .unwrap_err();
    assert_eq!(err.flag, "--parquet-schema");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn settings_of_another_format_are_refused() {
    let cases: [(&[&str], &str); 9] = [
        (&["--parquet-schema", "s.json"], "--parquet-schema"),
        (
            &["--format", "json", "--parquet-schema", "s.json"],
            "--parquet-schema",
        ),
        (
            &["--format", "parquet", "--record-delimiter", "|"],
            "--record-delimiter",
        ),
        (&["--record-delimiter", "|"], "--record-delimiter"),
        (
            &["--format", "raw", "--metadata-field", "m"],
            "--metadata-field",
        ),
        (&["--error-prefix", "orders"], "--error-prefix"),
        (&["--error-prefix", "orders/errors"], "--error-prefix"),
        (&["--buffer-max-age", "16m"], "--buffer-max-age"),
        (&["--error-prefix", "/errors"], "--error-prefix"),
    ];
    for (args, flag) in cases {
        let err = valid(args).unwrap_err();
        assert_eq!(err.flag, flag, "{args:?}: {err}");
    }
    // Outside the prefix, even when it starts with the same letters.
    assert!(valid(&["--error-prefix", "orders-bad"]).is_ok());
    let err = parse(&["--record-delimiter", "\\q"]).unwrap_err();
    assert!(one_line_error(&err).contains("--record-delimiter"), "{err}");
}

#[test]
fn accepts_a_stream_arn() {
    let settings = valid(&[
        "--stream",
        "arn:aws:kinesis:eu-west-1:123456789012:stream/clicks",
    ])
    .unwrap();
    assert_eq!(settings.stream.name(), "clicks");
    assert!(settings.stream.stream_name().is_none());
    assert_eq!(settings.prefix, "clicks");
    let err = valid(&["--stream", "arn:aws:s3:::bucket"]).unwrap_err();
    assert_eq!(err.flag, "--stream");
}

#[test]
fn positions_are_kinesis_names_case_insensitive() {
    assert_eq!(
        valid(&["--initial-position", "latest"])
            .unwrap()
            .config
            .initial_position,
        InitialPosition::Latest
    );
    let settings = valid(&[
        "--initial-position",
        "AT_TIMESTAMP",
        "--initial-timestamp",
        "2026-11-21T00:00:00Z",
    ])
    .unwrap();
    assert_eq!(
        settings.config.initial_position,
        InitialPosition::AtTimestamp
    );
}

#[test]
fn validation_names_the_setting() {
    let cases: [(&[&str], &str); 12] = [
        (
            &["--initial-position", "AT_TIMESTAMP"],
            "--initial-timestamp",
        ),
        (&["--buffer-max-records", "0"], "--buffer-max-records"),
        (&["--buffer-max-bytes", "0"], "--buffer-max-bytes"),
        (
            &["--compression", "gzip", "--compression-level", "12"],
            "--compression-level",
        ),
        (
            &["--compression", "none", "--compression-level", "1"],
            "--compression-level",
        ),
        (&["--prefix", "/abs"], "--prefix"),
        (&["--bucket", "Not_A_Bucket"], "--bucket"),
        (
            &["--max-records-per-read", "10001"],
            "--max-records-per-read",
        ),
        (&["--lease-table", "x"], "--lease-table"),
        (&["--application-name", "my app"], "--application-name"),
        (
            &["--lease-renewal-interval", "10s"],
            "--lease-renewal-interval",
        ),
        (&["--metrics-address", "localhost"], "--metrics-address"),
    ];
    for (args, flag) in cases {
        let err = valid(args).unwrap_err();
        assert_eq!(err.flag, flag, "{args:?}");
        assert!(
            err.to_string()
                .starts_with(&format!("invalid setting {flag} (SHARDSINK_")),
            "{err}"
        );
    }
}

#[test]
fn prefix_loses_its_trailing_slash() {
    assert_eq!(
        valid(&["--prefix", "raw/orders/"]).unwrap().prefix,
        "raw/orders"
    );
    assert_eq!(valid(&["--prefix", ""]).unwrap().prefix, "");
}

#[test]
fn parse_errors_render_as_one_line_naming_the_flag() {
    let err = parse(&["--stream", "s", "--bucket", "bkt", "--compression", "lz4"]).unwrap_err();
    let line = one_line_error(&err);
    assert!(!line.contains('\n'));
    assert!(
        line.starts_with(
            "invalid setting --compression (SHARDSINK_COMPRESSION): invalid value \"lz4\""
        ),
        "{line}"
    );
    assert!(line.contains("none, gzip, zstd"), "{line}");

    // A missing bucket is refused by validation, in the same one line.
    let err = parse(&["--stream", "s"]).unwrap().validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid setting --bucket (SHARDSINK_BUCKET): required, not set"
    );

    let err = parse(&[
        "--stream",
        "s",
        "--bucket",
        "bkt",
        "--buffer-max-age",
        "soon",
    ])
    .unwrap_err();
    let line = one_line_error(&err);
    assert!(
        line.starts_with(
            "invalid setting --buffer-max-age (SHARDSINK_BUFFER_MAX_AGE): invalid value \"soon\""
        ),
        "{line}"
    );
    assert!(!line.contains('\n'));
}

#[test]
fn configuration_reference_names_every_setting() {
    use clap::CommandFactory as _;
    let reference = include_str!("../../../../docs/CONFIGURATION.md");
    for arg in Config::command().get_arguments() {
        let Some(flag) = arg.get_long() else { continue };
        if matches!(flag, "help" | "version") {
            continue;
        }
        assert!(
            reference.contains(&format!("`--{flag}`")),
            "docs/CONFIGURATION.md lacks --{flag}"
        );
        let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
        assert!(
            env.starts_with("SHARDSINK_") && reference.contains(&format!("`{env}`")),
            "docs/CONFIGURATION.md lacks {env} for --{flag}"
        );
        if let Some(default) = arg.get_default_values().first().and_then(|d| d.to_str()) {
            assert!(
                reference.contains(&format!("`{default}`")),
                "docs/CONFIGURATION.md lacks the default {default} of --{flag}"
            );
        }
    }
}

#[test]
fn failover_time_leaves_room_to_write() {
    let failover = |value: &str| valid(&["--failover-time", value]).map(|s| s.config.failover_time);
    assert_eq!(failover("2s").unwrap(), Duration::from_secs(2));
    assert_eq!(failover("1h").unwrap(), Duration::from_secs(3_600));
    for bad in ["1s", "500ms", "2h"] {
        let err = failover(bad).unwrap_err();
        assert_eq!(err.flag, "--failover-time", "{bad}");
    }
}

#[test]
fn byte_sizes_accept_units() {
    assert_eq!(parse_byte_size("64MiB").unwrap(), 64 << 20);
    assert_eq!(parse_byte_size("1048576").unwrap(), 1 << 20);
    assert!(parse_byte_size("lots").is_err());
}

#[test]
fn path_style_reads_true_and_false() {
    let base = ["--stream", "s", "--bucket", "bkt"];
    let mut with = base.to_vec();
    with.push("--s3-force-path-style");
    assert!(parse(&with).unwrap().archive.s3_force_path_style);
    let mut off = base.to_vec();
    off.extend(["--s3-force-path-style", "false"]);
    assert!(!parse(&off).unwrap().archive.s3_force_path_style);
}

#[test]
fn read_mode_defaults_to_polling_and_fan_out_names_its_consumer() {
    let polling = valid(&[]).unwrap();
    assert_eq!(polling.config.read_mode, ReadMode::Polling);
    assert_eq!(polling.consumer_name, None);

    let fan_out = valid(&["--read-mode", "fan-out"]).unwrap();
    assert_eq!(fan_out.config.read_mode, ReadMode::FanOut);
    assert_eq!(fan_out.consumer_name.as_deref(), Some("shardsink"));
    let named = valid(&["--read-mode", "FAN-OUT", "--application-name", "audit"]).unwrap();
    assert_eq!(named.consumer_name.as_deref(), Some("audit"));
    let own = valid(&["--read-mode", "fan-out", "--consumer-name", "archiver.1"]).unwrap();
    assert_eq!(own.consumer_name.as_deref(), Some("archiver.1"));
}

#[test]
fn a_consumer_name_is_checked_and_used_only_with_fan_out() {
    let polling = valid(&["--consumer-name", "archiver"]).unwrap();
    assert_eq!(
        polling.consumer_name, None,
        "set for a switch of mode, not used"
    );
    let err = valid(&["--consumer-name", "a b"]).unwrap_err();
    assert_eq!(err.flag, "--consumer-name");
    let err = valid(&["--read-mode", "fan-out", "--consumer-name", "a b"]).unwrap_err();
    assert_eq!(err.flag, "--consumer-name");
    assert!(parse(&["--stream", "s", "--read-mode", "push"]).is_err());
}
