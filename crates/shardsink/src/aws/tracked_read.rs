//! [`TrackedRead`]: a reader of a GetObject body that remembers whether
//! reading it failed, so that whoever decodes the body can tell a failed
//! download (a dropped connection: retried) from bytes that do not decode
//! (the object's own fault).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A reader that remembers whether it failed.
pub(crate) struct TrackedRead<R> {
    inner: R,
    failed: Arc<AtomicBool>,
}

impl<R> TrackedRead<R> {
    /// Tracks `inner` (typically a `SyncIoBridge` over a GetObject body,
    /// read on a blocking thread).
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            failed: Arc::default(),
        }
    }

    /// Set once a read of `inner` failed; keep a clone to look at it after
    /// the reader was consumed.
    pub(crate) fn failed(&self) -> Arc<AtomicBool> {
        self.failed.clone()
    }
}

impl<R: io::Read> io::Read for TrackedRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).inspect_err(|_| {
            self.failed.store(true, Ordering::Relaxed);
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    struct Broken;

    impl io::Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::other("connection reset"))
        }
    }

    #[test]
    fn remembers_a_failed_read_only() {
        let mut fine = TrackedRead::new(&b"abc"[..]);
        let mut out = Vec::new();
        fine.read_to_end(&mut out).unwrap();
        assert!(!fine.failed().load(Ordering::Relaxed));
        let mut broken = TrackedRead::new(Broken);
        let failed = broken.failed();
        assert!(broken.read_to_end(&mut out).is_err());
        assert!(failed.load(Ordering::Relaxed));
    }
}
