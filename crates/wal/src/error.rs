//! The one error type of the crate.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong opening or writing the log.
///
/// Recovery errors ([`WalError::Corrupt`], [`WalError::BadHeader`],
/// [`WalError::ForeignHeader`]) are raised *before* anything on disk is touched: the
/// operator gets the files exactly as the crash (or the misconfiguration) left them.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// An I/O error other than a failed fsync. On the write path it poisons the WAL,
    /// because after a failed `write` the length and content of the segment tail are
    /// unknown and appending at a guessed offset could corrupt the log.
    #[error("WAL I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// Damaged data that is *not* a torn tail: a bad record followed by valid data, a
    /// damaged tail of a segment that is not the last one, or a gap or overlap in the
    /// LSN sequence between segments. Nothing is dropped or repaired automatically.
    #[error(
        "WAL corrupt: segment {} at byte offset {offset}: {reason}; refusing to open \
         (nothing was modified, inspect or restore the segment by hand)",
        segment.display()
    )]
    Corrupt {
        segment: PathBuf,
        offset: u64,
        reason: String,
    },

    /// A file named like a segment whose header is not a valid header of this format
    /// (wrong magic, unsupported version, checksum mismatch, too short, name and header
    /// disagree).
    #[error(
        "WAL segment {} has a bad header: {reason}; refusing to open (nothing was modified)",
        segment.display()
    )]
    BadHeader { segment: PathBuf, reason: String },

    /// A valid header that belongs to another cluster or another node: most likely a
    /// data directory was copied or mounted in the wrong place. Appending to it would
    /// mix two nodes' promises, which breaks Paxos safety.
    #[error(
        "WAL segment {} belongs to cluster {found_cluster_id:#018x} node {found_node_id}, \
         but this node is cluster {expected_cluster_id:#018x} node {expected_node_id}; \
         refusing to open (nothing was modified; is the data directory the right one?)",
        segment.display()
    )]
    ForeignHeader {
        segment: PathBuf,
        expected_cluster_id: u64,
        expected_node_id: u32,
        found_cluster_id: u64,
        found_node_id: u32,
    },

    /// `fsync`/`fdatasync` failed. This is fatal: after a failed fsync the kernel may
    /// already have dropped the dirty pages and cleared the error, so a retry could
    /// "succeed" without the data ever reaching the disk (the PostgreSQL fsync lesson).
    /// The WAL is poisoned; the process must restart and recover from what is on disk.
    #[error(
        "fsync failed on {}: {source}; the WAL is poisoned, restart and recover",
        path.display()
    )]
    FsyncFailed {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The disk (or the user's quota) is full. Not fatal: every record after
    /// `durable_lsn` (`discarded` of them) was dropped and the segment cut back to
    /// what was synced, so the log holds exactly the durable records and the WAL
    /// stays usable. Append the discarded records again once space returns. A
    /// failed *fsync* is never this, whatever its errno: see
    /// [`WalError::FsyncFailed`].
    #[error(
        "no space left writing {}: {source}; records after LSN {durable_lsn} were not \
         written ({discarded} discarded, nothing durable lost); retry when space returns",
        path.display()
    )]
    NoSpace {
        path: PathBuf,
        #[source]
        source: io::Error,
        durable_lsn: u64,
        discarded: u64,
    },

    /// An earlier fatal error poisoned this WAL; every later call returns this.
    #[error("the WAL is poisoned by an earlier fatal error ({cause}); restart and recover")]
    Poisoned { cause: String },

    /// A payload larger than [`crate::MAX_RECORD_LEN`]. Not fatal: nothing was written.
    #[error("record of {len} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge { len: usize, max: usize },

    /// Another `Wal` (in this or another process) holds the directory lock.
    #[error("WAL directory {} is locked by another process or handle", dir.display())]
    Locked { dir: PathBuf },

    /// [`crate::WalOptions`] that cannot work.
    #[error("invalid WAL options: {0}")]
    InvalidOptions(String),
}

impl WalError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> WalError {
        WalError::Io {
            path: path.into(),
            source,
        }
    }
}
