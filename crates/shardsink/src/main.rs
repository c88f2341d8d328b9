//! The `shardsink` binary: the daemon and its subcommands (see
//! `shardsink --help` and the library's `cli` module).

fn main() -> std::process::ExitCode {
    shardsink::cli::main()
}
