//! Partita's write-ahead log.
//!
//! Paxos acceptors must not answer a `Prepare` or an `Accept` before the promise or
//! the accepted value is on stable storage: an acceptor that forgets a promise after a
//! crash can let two different values be chosen. This crate is that stable storage: a
//! segmented, append-only log of opaque records, each protected by a CRC32C, with
//! group commit so that one `fdatasync` covers many records.
//!
//! It is plain `std` (files and one thread); the runtime wraps it for its event loop.
//!
//! # On-disk format
//!
//! A log is a directory. It holds a `LOCK` file (an exclusive `flock` held while a
//! [`Wal`] is open, so two processes can never write one log) and segment files named
//! `wal-{first_lsn:020}.log`, e.g. `wal-00000000000000000001.log`. Integers are little
//! endian.
//!
//! Every segment starts with a [`SEGMENT_HEADER_LEN`]-byte header:
//!
//! | offset | size | field                                         |
//! |-------:|-----:|-----------------------------------------------|
//! |      0 |    8 | magic `b"PARTWAL1"`                           |
//! |      8 |    4 | format version ([`FORMAT_VERSION`] = 4)       |
//! |     12 |    4 | node id (u32)                                 |
//! |     16 |    8 | cluster id (u64)                              |
//! |     24 |    8 | first LSN (u64), equal to the one in the name |
//! |     32 |    4 | CRC32C of bytes 0..32                         |
//!
//! followed by records, back to back:
//!
//! ```text
//! len: u32 | crc32c: u32 | payload: [u8; len]
//! ```
//!
//! The CRC covers the four length bytes *and* the payload, so a torn or flipped length
//! is caught. Records carry no LSN: LSNs are consecutive (the first record ever has
//! LSN 1) and implicit from the position, starting at the segment's first LSN. A new
//! segment is started when the next record would make the active one exceed
//! [`WalOptions::segment_bytes_max`] (default 64 MiB); a record bigger than that gets
//! a segment of its own. Payloads are limited to [`MAX_RECORD_LEN`].
//!
//! A segment is created atomically: header written (and synced) under a `.tmp` name,
//! renamed, directory fsynced. Before a segment is closed in favour of a new one, it
//! is synced. Hence two invariants that recovery relies on:
//!
//! * a file with a segment name always has a complete header, so a damaged header is
//!   never a crash artefact;
//! * only the *last* segment can end in a torn write.
//!
//! # Recovery rules ([`Wal::open`])
//!
//! Opening checks everything before modifying anything, and refuses loudly rather
//! than drop data it cannot prove was never acknowledged:
//!
//! 1. The directory is created if missing.
//! 2. Every segment header is validated. Wrong magic, bad header CRC, unsupported
//!    version, or header/name mismatch: [`WalError::BadHeader`]. Valid header of
//!    another cluster id or node id: [`WalError::ForeignHeader`] (a data directory in
//!    the wrong place; adopting it would mix two acceptors' promises). A file named
//!    `wal-*.log` that does not parse as a segment name is also `BadHeader`.
//! 3. Segments must continue each other's LSNs without gap or overlap, otherwise
//!    [`WalError::Corrupt`].
//! 4. Records are read up to the first one that is incomplete or fails its CRC (the
//!    *damage*). Then:
//!    * if a valid record can be found anywhere after the damage (every byte offset is
//!      tried), the damage is in the middle of the log: [`WalError::Corrupt`] with the
//!      segment and offset;
//!    * else if the segment is not the last one: [`WalError::Corrupt`] (closed
//!      segments were synced, so their tails cannot be torn);
//!    * else it is a *torn tail*, the remains of writes that were never synced (hence
//!      never acknowledged): it is truncated away, reported with `tracing::warn!` and
//!      in [`Recovered::torn_tail`], and appending continues from there. A tail of
//!      zeros alone is what preallocation leaves after the last record
//!      ([`WalOptions::preallocate_bytes`]: with fsync the active segment is extended
//!      with written zeros ahead of its records, so that syncs change no file size);
//!      it is cut the same way, reported with `all_zero` set and logged at debug level.
//! 5. On any error nothing was modified (no truncation, no deletion). Otherwise stale
//!    `wal-*.log.tmp` files (a crash during segment creation) are removed, and, with
//!    [`Durability::Fsync`], all segments and the directory are fsynced so that what
//!    was recovered is durable before anybody acts on it.
//!
//! All valid records are returned in [`Recovered`], in LSN order (held in memory:
//! the log is expected to be truncated after checkpoints, see below).
//!
//! Known limitation, on the safe side: the forward scan of rule 4 cannot know which
//! bytes were synced. If a file system persisted unsynced pages out of order (a later
//! record of the unsynced tail reached the disk but an earlier one did not), the tail
//! looks like mid-log corruption and open refuses; likewise if a payload itself
//! contains a valid encoding of a WAL record inside a torn tail. Both need a human,
//! neither loses acknowledged data.
//!
//! # Writing
//!
//! [`Wal::append`] buffers a record and returns its LSN; [`Wal::sync`] writes the
//! buffer and `fdatasync`s ([`Durability::Fsync`]), returning the durable LSN. A failed
//! fsync returns [`WalError::FsyncFailed`] and poisons the log: every later call fails
//! with [`WalError::Poisoned`]. Fsync is never retried, because after a failure Linux
//! may have dropped the dirty pages and cleared the error, so a retry can report
//! success for data that is gone (the PostgreSQL "fsyncgate" lesson). The only
//! recovery is a restart that re-reads what is really on disk. A failed `write` poisons
//! too (the segment tail is then unknown), except for lack of space: a write or a
//! segment creation that fails with ENOSPC or EDQUOT returns [`WalError::NoSpace`],
//! after cutting the active segment back to its last synced length and forgetting the
//! unsynced records, so the log is exactly what was synced and stays usable; the
//! records can be appended again once there is space. [`GroupCommit`] does that by
//! itself: it holds the batch back, retries it, and says why in
//! [`GroupCommit::stalled`].
//!
//! [`Wal::truncate_prefix`] deletes whole closed segments below an LSN (after a
//! checkpoint), oldest first, so a crash midway leaves a contiguous log.
//!
//! # Group commit
//!
//! [`GroupCommit`] moves the `Wal` onto a dedicated thread. Submissions go into a
//! bounded queue; the thread takes everything queued, appends it, syncs once and
//! reports a [`Completion`] through a callback. See [`GroupCommit`] for the
//! details and [`GroupCommitStats`] for what is measured.
//!
//! ```
//! use partita_wal::{Completion, GroupCommit, GroupCommitOptions, Wal, WalOptions};
//! use std::sync::mpsc;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let (wal, recovered) = Wal::open(dir.path(), WalOptions::new(0xC1, 1)).unwrap();
//! assert!(recovered.is_empty());
//!
//! let (tx, rx) = mpsc::channel();
//! let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
//!     let _ = tx.send(c);
//! })
//! .unwrap();
//! gc.submit(b"promise ballot 7".to_vec(), 42).unwrap();
//! match rx.recv().unwrap() {
//!     Completion::Durable { tokens, first_lsn, .. } => {
//!         assert_eq!((tokens, first_lsn), (vec![42], 1));
//!     }
//!     Completion::Failed { error, .. } => panic!("{error}"),
//! }
//! let wal = gc.shutdown();
//! drop(wal);
//!
//! let (_wal, recovered) = Wal::open(dir.path(), WalOptions::new(0xC1, 1)).unwrap();
//! assert_eq!(recovered.records[0].payload, b"promise ballot 7");
//! ```

mod error;
pub mod failpoint;
mod format;
mod group;
mod wal;

pub use error::WalError;
pub use format::{FORMAT_VERSION, MAGIC, MAX_RECORD_LEN, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
pub use group::{Completion, GroupCommit, GroupCommitOptions, GroupCommitStats, SubmitError};
pub use wal::{Durability, Lsn, Record, Recovered, TornTail, Wal, WalOptions, WalStats};

/// File name of the segment whose first record has LSN `first_lsn`.
pub fn segment_file_name(first_lsn: Lsn) -> String {
    wal::segment_file_name(first_lsn)
}

/// What recovery runs on every segment file it reads, for the fuzzers (`fuzz/`) and
/// property tests: the header check, then the record scan. `Ok` carries the payload
/// ranges of the valid records, where the valid records end, and whether damage was
/// found after them.
#[doc(hidden)]
pub fn scan_segment_image(
    buf: &[u8],
) -> Result<(Vec<std::ops::Range<usize>>, usize, bool), String> {
    format::SegmentHeader::decode(buf)?;
    let scan = format::scan_segment(buf);
    Ok((scan.records, scan.valid_end, scan.damage.is_some()))
}

/// A valid segment header for `node_id` of `cluster_id` starting at `first_lsn`, so
/// that the fuzzers reach the record scan.
#[doc(hidden)]
pub fn segment_header(cluster_id: u64, node_id: u32, first_lsn: u64) -> [u8; SEGMENT_HEADER_LEN] {
    format::SegmentHeader {
        cluster_id,
        node_id,
        first_lsn,
    }
    .encode()
}

/// One record as the WAL frames it (length, CRC, payload), for the fuzzers' seeds.
#[doc(hidden)]
pub fn frame_record(out: &mut Vec<u8>, payload: &[u8]) {
    format::encode_record(out, payload)
}
