//! The daemon's HTTP endpoints (`/metrics`, `/healthz`, `/readyz`): an
//! address to serve them on, and a plain GET.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A loopback address nobody listens on right now, for
/// `--metrics-address`.
///
/// # Panics
/// When no port can be bound.
pub fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .expect("a free loopback port")
        .local_addr()
        .expect("a bound socket has an address")
}

/// The value of the sample `name` (with labels, exactly as exposed) in
/// the text exposition format `/metrics` answers; `None` when absent.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
}

/// `GET path` over HTTP/1.0: the status code (0 if unreadable) and the
/// body. Connecting waits up to 2 s, reading up to 5 s.
///
/// # Errors
/// The connection or the exchange failed.
pub fn get(address: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
