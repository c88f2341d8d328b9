//! [`LocalStoreError`]: how the local store fails.

use std::path::PathBuf;

/// A failure of the local store; each names the store's directory.
#[derive(Debug, thiserror::Error)]
pub enum LocalStoreError {
    /// The directory could not be created.
    #[error("cannot create the event store directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another process (or another open store in this one) holds the
    /// directory's lock.
    #[error("the event store in {path} is in use by another process")]
    Locked {
        /// The directory.
        path: PathBuf,
    },
    /// fjall could not open or recover the database.
    #[error("cannot open the event store in {path}")]
    Open {
        /// The directory.
        path: PathBuf,
        /// fjall's error.
        #[source]
        source: fjall::Error,
    },
    /// A read or write failed (I/O, or fjall refusing writes after an
    /// earlier failed write).
    #[error("event store I/O failed in {path}")]
    Storage {
        /// The directory.
        path: PathBuf,
        /// fjall's error.
        #[source]
        source: fjall::Error,
    },
    /// A stored value does not decode.
    #[error("corrupt value in the event store in {path}: {key}")]
    Corrupt {
        /// The directory.
        path: PathBuf,
        /// The key: `{shard}/{id hex}`, or what the key holds.
        key: String,
    },
}
