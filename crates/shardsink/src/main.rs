//! The `shardsink` binary: the daemon and its subcommands (see
//! `shardsink --help` and the library's `cli` module).

/// jemalloc as the process's allocator (see the dependency's note in
/// Cargo.toml): peak resident memory stays closer to what the memory budget
/// counts.
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    shardsink::cli::main()
}
