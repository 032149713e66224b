//! The log itself: opening (with recovery), appending, syncing, prefix truncation.

use std::collections::VecDeque;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::WalError;
use crate::format::{
    encode_record, scan_segment, AfterDamage, SegmentHeader, MAX_RECORD_LEN, RECORD_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};

/// Log sequence number: position of a record in the log. The first record ever
/// written has LSN 1; LSN 0 means "nothing".
pub type Lsn = u64;

/// How hard [`Wal::sync`] tries (shared with the cluster file and the command line).
pub use partita_types::Durability;

/// Parameters of [`Wal::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// Written into every segment header and checked on open, so a data directory of
    /// another cluster is refused instead of silently adopted.
    pub cluster_id: u64,
    /// Same as `cluster_id`, for the node within the cluster.
    pub node_id: u32,
    /// A new segment is started when the next record would push the active segment
    /// past this size. A single record larger than this gets a segment of its own.
    pub segment_bytes_max: u64,
    pub durability: Durability,
    /// With [`Durability::Fsync`]: the active segment is extended with written zeros
    /// this many bytes at a time ahead of its records, so that syncing records
    /// appended inside the extension is an `fdatasync` of data alone. Appending past
    /// the end of a file changes its size, which costs ext4 a journal commit (a second
    /// write and cache flush) on every sync: 4 KiB synced writes take 159 µs appended
    /// and 87 µs over written zeros on this project's test machine (fallocate's
    /// unwritten extents, 140 µs, need the same commit when first written). A segment
    /// is cut back to its records when it is closed; recovery drops a zero tail as
    /// it always has (see [`crate::TornTail`]). 0: off.
    pub preallocate_bytes: u64,
}

impl WalOptions {
    pub const DEFAULT_SEGMENT_BYTES_MAX: u64 = partita_types::WAL_SEGMENT_BYTES_MAX_DEFAULT;
    /// Anything smaller is a configuration mistake (it would not hold a header).
    pub const MIN_SEGMENT_BYTES_MAX: u64 = 64;
    /// 1 MiB: written in about 1.5 ms on the test machine's disk, once per MiB of log.
    pub const DEFAULT_PREALLOCATE_BYTES: u64 = partita_types::WAL_PREALLOCATE_BYTES_DEFAULT;

    /// Production defaults: 64 MiB segments, [`Durability::Fsync`].
    pub fn new(cluster_id: u64, node_id: u32) -> WalOptions {
        WalOptions {
            cluster_id,
            node_id,
            segment_bytes_max: Self::DEFAULT_SEGMENT_BYTES_MAX,
            durability: Durability::Fsync,
            preallocate_bytes: Self::DEFAULT_PREALLOCATE_BYTES,
        }
    }

    fn validate(&self) -> Result<(), WalError> {
        if self.segment_bytes_max < Self::MIN_SEGMENT_BYTES_MAX {
            return Err(WalError::InvalidOptions(format!(
                "segment_bytes_max {} is below the minimum {}",
                self.segment_bytes_max,
                Self::MIN_SEGMENT_BYTES_MAX
            )));
        }
        Ok(())
    }

    fn fsync(&self) -> bool {
        self.durability == Durability::Fsync
    }
}

/// One recovered record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub lsn: Lsn,
    pub payload: Vec<u8>,
}

/// A torn tail that recovery cut off (also reported with `tracing::warn!`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    pub segment: PathBuf,
    /// The segment was truncated to this length.
    pub offset: u64,
    pub bytes_dropped: u64,
    /// Why the first dropped byte did not start a valid record.
    pub reason: String,
    /// Every dropped byte was zero: the segment's preallocated end
    /// ([`WalOptions::preallocate_bytes`]), or an extension whose data never reached
    /// the disk. Logged at debug level rather than as a warning.
    pub all_zero: bool,
}

/// What [`Wal::open`] found on disk: every valid record, in LSN order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Consecutive LSNs, starting at the first LSN still retained (1 unless a prefix
    /// was truncated).
    pub records: Vec<Record>,
    /// Set when a torn tail was cut off the last segment.
    pub torn_tail: Option<TornTail>,
}

impl Recovered {
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Record> {
        self.records.iter()
    }
}

impl IntoIterator for Recovered {
    type Item = Record;
    type IntoIter = std::vec::IntoIter<Record>;
    fn into_iter(self) -> Self::IntoIter {
        self.records.into_iter()
    }
}

impl<'a> IntoIterator for &'a Recovered {
    type Item = &'a Record;
    type IntoIter = std::slice::Iter<'a, Record>;
    fn into_iter(self) -> Self::IntoIter {
        self.records.iter()
    }
}

/// Counters since [`Wal::open`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Records appended.
    pub records: u64,
    /// Bytes appended, record headers included, segment headers excluded.
    pub bytes: u64,
    /// [`Wal::sync`] calls that had something to make durable.
    pub syncs: u64,
    /// `fdatasync`/`fsync` calls on segment files (syncs, segment roll-overs, open).
    pub fsyncs: u64,
    /// `fsync` calls on the directory (segment creation and deletion, open).
    pub dir_fsyncs: u64,
    pub segments_created: u64,
    pub segments_deleted: u64,
    /// Writes (or segment creations) refused for lack of space; see
    /// [`WalError::NoSpace`].
    pub no_space: u64,
    /// Extensions of the active segment with zeros
    /// ([`WalOptions::preallocate_bytes`]).
    pub preallocations: u64,
}

/// Our own write buffer is flushed to the file once it holds this much, so a long run
/// of appends without a sync does not grow memory without bound.
const WRITE_BUF_MAX: usize = 1 << 20;

/// Zeros written at a time when a segment is extended.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

const LOCK_FILE: &str = "LOCK";

pub(crate) fn segment_file_name(first_lsn: Lsn) -> String {
    format!("wal-{first_lsn:020}.log")
}

/// `wal-<20 digits>.log` -> first LSN.
fn parse_segment_file_name(name: &str) -> Option<Lsn> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[derive(Debug)]
struct ClosedSegment {
    path: PathBuf,
    first_lsn: Lsn,
    /// One past the last LSN in the segment.
    end_lsn: Lsn,
}

#[derive(Debug)]
struct ActiveSegment {
    path: PathBuf,
    file: File,
    first_lsn: Lsn,
    /// Logical length: header plus every appended record, buffered ones included.
    len: u64,
    records: u64,
    /// Length and record count as of the last sync: what a full disk cuts back to.
    synced_len: u64,
    synced_records: u64,
    /// The file's length: `len` plus the zeros written ahead of the records
    /// ([`WalOptions::preallocate_bytes`]), or less while records are buffered.
    allocated: u64,
}

/// A segmented, append-only write-ahead log. See the crate documentation.
pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    /// Full segments, oldest first. Their LSN ranges are contiguous and end where the
    /// active segment begins.
    closed: VecDeque<ClosedSegment>,
    active: ActiveSegment,
    /// Encoded records not yet written to `active.file`.
    buf: Vec<u8>,
    next_lsn: Lsn,
    durable_lsn: Lsn,
    poisoned: Option<String>,
    stats: WalStats,
    /// Held (flock) for the lifetime of the Wal; two writers on one log would
    /// interleave garbage.
    _lock: File,
    /// Test hook: make the next segment fsync fail.
    #[cfg(test)]
    pub(crate) fail_next_fsync: bool,
    /// Test hook: the next this many segment writes fail with "no space left".
    #[cfg(test)]
    pub(crate) fail_writes_no_space: u32,
    /// Test hook: the next segment creation fails with "no space left".
    #[cfg(test)]
    pub(crate) fail_next_create_no_space: bool,
}

impl fmt::Debug for Wal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("opts", &self.opts)
            .field("segments", &(self.closed.len() + 1))
            .field("active", &self.active.path)
            .field("next_lsn", &self.next_lsn)
            .field("durable_lsn", &self.durable_lsn)
            .field("buffered_bytes", &self.buf.len())
            .field("poisoned", &self.poisoned)
            .finish()
    }
}

/// Header of one segment found on disk, validated, records not yet read.
struct FoundSegment {
    path: PathBuf,
    header: SegmentHeader,
}

impl Wal {
    /// Open (or create) the log in `dir` and recover its records.
    ///
    /// Every check happens before anything on disk is modified, so any error leaves
    /// the directory exactly as it was (apart from the `LOCK` file, which is created
    /// if missing). See the crate documentation for the recovery rules.
    pub fn open(dir: impl AsRef<Path>, opts: WalOptions) -> Result<(Wal, Recovered), WalError> {
        opts.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let mut stats = WalStats::default();

        let existed = dir.is_dir();
        fs::create_dir_all(&dir).map_err(|e| WalError::io(&dir, e))?;
        if !existed && opts.fsync() {
            // Make the new directory's own entry durable, or a crash could lose the
            // whole log after we reported records durable.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fsync_dir(parent)?;
                stats.dir_fsyncs += 1;
            }
        }
        let lock = lock_dir(&dir)?;

        // Phase 1: list and validate every header. Foreign or damaged headers are
        // reported before any record is looked at.
        let (found, stale_tmps) = find_segments(&dir, &opts)?;

        // Phase 2: read records, check LSN continuity, classify damage.
        let mut records = Vec::new();
        let mut torn_tail = None;
        let mut closed = VecDeque::new();
        let mut last: Option<(PathBuf, Lsn, u64, u64)> = None; // path, first, count, valid_end
        for (i, seg) in found.iter().enumerate() {
            let is_last = i + 1 == found.len();
            if let Some((prev_path, prev_first, prev_count, _)) = &last {
                let expected = prev_first + prev_count;
                if seg.header.first_lsn != expected {
                    return Err(WalError::Corrupt {
                        segment: seg.path.clone(),
                        offset: 0,
                        reason: format!(
                            "LSN sequence broken: {} ends before LSN {expected} but this \
                             segment starts at LSN {} (a segment is missing or damaged)",
                            prev_path.display(),
                            seg.header.first_lsn
                        ),
                    });
                }
                closed.push_back(ClosedSegment {
                    path: prev_path.clone(),
                    first_lsn: *prev_first,
                    end_lsn: expected,
                });
            }
            let image = fs::read(&seg.path).map_err(|e| WalError::io(&seg.path, e))?;
            // Re-check: the file could have changed since phase 1 (it must not, we
            // hold the lock, but the cost is nil and a mismatch would be a disaster).
            if SegmentHeader::decode(&image).as_ref() != Ok(&seg.header) {
                return Err(WalError::BadHeader {
                    segment: seg.path.clone(),
                    reason: "header changed while the log was being opened".into(),
                });
            }
            let scan = scan_segment(&image);
            if let Some(damage) = scan.damage {
                match damage.after {
                    AfterDamage::Nothing => {}
                    AfterDamage::ValidRecordAt(after) => {
                        return Err(WalError::Corrupt {
                            segment: seg.path.clone(),
                            offset: damage.offset as u64,
                            reason: format!(
                                "{}; a valid record follows at offset {after}, so this is \
                                 not a torn tail",
                                damage.reason
                            ),
                        });
                    }
                    AfterDamage::Undecided { checksummed } => {
                        return Err(WalError::Corrupt {
                            segment: seg.path.clone(),
                            offset: damage.offset as u64,
                            reason: format!(
                                "{}; the {} bytes after it could not be searched for valid \
                                 records within the scan budget ({checksummed} bytes \
                                 checksummed), so it cannot be called a torn tail",
                                damage.reason,
                                image.len() - damage.offset
                            ),
                        });
                    }
                }
                if !is_last {
                    return Err(WalError::Corrupt {
                        segment: seg.path.clone(),
                        offset: damage.offset as u64,
                        reason: format!(
                            "{}; this is not the last segment (a segment is only closed \
                             after it was synced, so its tail cannot be torn)",
                            damage.reason
                        ),
                    });
                }
                torn_tail = Some(TornTail {
                    segment: seg.path.clone(),
                    offset: damage.offset as u64,
                    bytes_dropped: (image.len() - damage.offset) as u64,
                    reason: damage.reason,
                    all_zero: image[damage.offset..].iter().all(|&b| b == 0),
                });
            }
            let first = seg.header.first_lsn;
            records.extend(scan.records.iter().enumerate().map(|(k, r)| Record {
                lsn: first + k as u64,
                payload: image[r.clone()].to_vec(),
            }));
            last = Some((
                seg.path.clone(),
                first,
                scan.records.len() as u64,
                scan.valid_end as u64,
            ));
        }

        // Phase 3: everything checked; now (and only now) modify the directory.
        for tmp in stale_tmps {
            // A crash between creating a segment's temp file and renaming it; the
            // segment never existed as far as the log is concerned.
            tracing::warn!(path = %tmp.display(), "removing unfinished segment file");
            fs::remove_file(&tmp).map_err(|e| WalError::io(&tmp, e))?;
        }

        let active = match last {
            None => create_segment(&dir, &opts, 1, &mut stats)?,
            Some((path, first_lsn, count, valid_end)) => {
                let mut file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| WalError::io(&path, e))?;
                if let Some(t) = &torn_tail {
                    if t.all_zero {
                        tracing::debug!(
                            segment = %t.segment.display(),
                            offset = t.offset,
                            bytes_dropped = t.bytes_dropped,
                            "WAL segment ends in zeros (preallocated, or never written); cutting them"
                        );
                    } else {
                        tracing::warn!(
                            segment = %t.segment.display(),
                            offset = t.offset,
                            bytes_dropped = t.bytes_dropped,
                            reason = %t.reason,
                            "WAL has a torn tail (a write that was never synced); truncating it"
                        );
                    }
                    file.set_len(valid_end)
                        .map_err(|e| WalError::io(&path, e))?;
                }
                file.seek(SeekFrom::Start(valid_end))
                    .map_err(|e| WalError::io(&path, e))?;
                ActiveSegment {
                    path,
                    file,
                    first_lsn,
                    len: valid_end,
                    records: count,
                    synced_len: valid_end,
                    synced_records: count,
                    allocated: valid_end,
                }
            }
        };

        if opts.fsync() {
            // What we recovered may so far only live in the page cache (the previous
            // process died between write and fsync). We are about to act on it, so it
            // must be as durable as anything we sync later; likewise the truncation
            // of a torn tail and the directory entries.
            for seg in &closed {
                let f = File::open(&seg.path).map_err(|e| WalError::io(&seg.path, e))?;
                fsync_file(&f, &seg.path)?;
                stats.fsyncs += 1;
            }
            fsync_file(&active.file, &active.path)?;
            stats.fsyncs += 1;
            fsync_dir(&dir)?;
            stats.dir_fsyncs += 1;
        }

        let next_lsn = active.first_lsn + active.records;
        if let (Some(first), Some(last)) = (records.first(), records.last()) {
            assert_eq!(last.lsn + 1, next_lsn, "recovered LSNs end at next_lsn");
            assert_eq!(
                first.lsn + records.len() as u64,
                next_lsn,
                "recovered LSNs are consecutive"
            );
        }
        tracing::debug!(
            dir = %dir.display(),
            segments = closed.len() + 1,
            records = records.len(),
            next_lsn,
            "WAL opened"
        );
        let wal = Wal {
            dir,
            opts,
            closed,
            active,
            buf: Vec::new(),
            next_lsn,
            durable_lsn: next_lsn - 1,
            poisoned: None,
            stats,
            _lock: lock,
            #[cfg(test)]
            fail_next_fsync: false,
            #[cfg(test)]
            fail_writes_no_space: 0,
            #[cfg(test)]
            fail_next_create_no_space: false,
        };
        Ok((wal, Recovered { records, torn_tail }))
    }

    /// Append one record and return its LSN. The record is buffered: it is durable
    /// only once a later [`Wal::sync`] returns an LSN at least as large.
    ///
    /// Errors: [`WalError::RecordTooLarge`] (nothing written, WAL still usable);
    /// [`WalError::NoSpace`] when the disk is full (every record after
    /// [`Wal::durable_lsn`] is discarded, the WAL stays usable: append them again once
    /// there is space); or a fatal I/O error (the WAL is poisoned) when a buffer flush
    /// or segment roll-over fails otherwise.
    pub fn append(&mut self, payload: &[u8]) -> Result<Lsn, WalError> {
        self.check_poisoned()?;
        if payload.len() > MAX_RECORD_LEN {
            return Err(WalError::RecordTooLarge {
                len: payload.len(),
                max: MAX_RECORD_LEN,
            });
        }
        let rec_len = (RECORD_HEADER_LEN + payload.len()) as u64;
        if self.active.records > 0 && self.active.len + rec_len > self.opts.segment_bytes_max {
            self.roll()?;
        }
        encode_record(&mut self.buf, payload);
        self.active.len += rec_len;
        self.active.records += 1;
        let lsn = self.next_lsn;
        self.next_lsn += 1;
        self.stats.records += 1;
        self.stats.bytes += rec_len;
        if self.buf.len() >= WRITE_BUF_MAX {
            self.write_out()?;
        }
        Ok(lsn)
    }

    /// Make every appended record durable and return the highest durable LSN (0 if
    /// the log is empty). With [`Durability::Memory`] the records are only handed to
    /// the OS. A no-op when nothing was appended since the last sync.
    ///
    /// A failed fsync returns [`WalError::FsyncFailed`] and poisons the WAL: it is
    /// never retried, see [`WalError::FsyncFailed`]. A full disk while writing returns
    /// [`WalError::NoSpace`]: the unsynced records are discarded (see [`Wal::append`]).
    pub fn sync(&mut self) -> Result<Lsn, WalError> {
        self.check_poisoned()?;
        let written = self.next_lsn - 1;
        if written == self.durable_lsn {
            debug_assert!(self.buf.is_empty());
            return Ok(written);
        }
        self.write_out()?;
        if self.opts.fsync() {
            self.fsync_active()?;
        }
        self.stats.syncs += 1;
        self.durable_lsn = written;
        self.mark_synced();
        Ok(written)
    }

    /// Delete whole closed segments whose records all have LSNs below `below_lsn`
    /// (after a checkpoint made them unnecessary). The active segment is never
    /// deleted, so a few records below `below_lsn` may survive; recovery will return
    /// them. Returns the number of segments deleted.
    pub fn truncate_prefix(&mut self, below_lsn: Lsn) -> Result<usize, WalError> {
        self.check_poisoned()?;
        let mut deleted = 0;
        while let Some(seg) = self.closed.front() {
            if seg.end_lsn > below_lsn {
                break;
            }
            // Oldest first, with a directory fsync after each unlink: whatever a crash
            // leaves behind is a contiguous suffix of the log, never a log with a hole
            // (which recovery would rightly call corrupt).
            crate::failpoint::hit("wal-truncate");
            fs::remove_file(&seg.path).map_err(|e| WalError::io(&seg.path, e))?;
            tracing::debug!(segment = %seg.path.display(), "deleted WAL segment");
            self.closed.pop_front();
            deleted += 1;
            self.stats.segments_deleted += 1;
            if self.opts.fsync() {
                self.fsync_dir()?;
            }
        }
        Ok(deleted)
    }

    /// LSN the next [`Wal::append`] will return.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// LSN of the last appended record (0 if none), durable or not.
    pub fn last_lsn(&self) -> Lsn {
        self.next_lsn - 1
    }

    /// Highest LSN known durable (0 if none).
    pub fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// Lowest LSN still stored (after prefix truncation), i.e. the first LSN of the
    /// oldest segment. Equal to `next_lsn()` when the log holds no record.
    pub fn first_lsn(&self) -> Lsn {
        self.closed
            .front()
            .map_or(self.active.first_lsn, |s| s.first_lsn)
    }

    /// Number of segment files, the active one included.
    pub fn segment_count(&self) -> usize {
        self.closed.len() + 1
    }

    pub fn stats(&self) -> WalStats {
        self.stats
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn options(&self) -> &WalOptions {
        &self.opts
    }

    fn check_poisoned(&self) -> Result<(), WalError> {
        match &self.poisoned {
            None => Ok(()),
            Some(cause) => Err(WalError::Poisoned {
                cause: cause.clone(),
            }),
        }
    }

    /// Record a fatal error; from now on every call fails.
    fn poison(&mut self, err: WalError) -> WalError {
        tracing::error!(error = %err, dir = %self.dir.display(), "WAL poisoned");
        self.poisoned = Some(err.to_string());
        err
    }

    fn mark_synced(&mut self) {
        self.active.synced_len = self.active.len;
        self.active.synced_records = self.active.records;
        debug_assert_eq!(
            self.active.first_lsn + self.active.records,
            self.durable_lsn + 1,
            "the synced prefix of the active segment ends at the durable LSN"
        );
    }

    fn write_out(&mut self) -> Result<(), WalError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        #[cfg(test)]
        if self.fail_writes_no_space > 0 {
            self.fail_writes_no_space -= 1;
            // Like a real full disk: part of the buffer may have reached the file.
            let half = self.buf.len() / 2;
            let _ = self.active.file.write_all(&self.buf[..half]);
            return Err(self.discard_unsynced(no_space_error()));
        }
        if self.opts.fsync()
            && self.opts.preallocate_bytes > 0
            && self.active.len > self.active.allocated
        {
            // The buffer would extend the file: extend it with zeros first, well past
            // the buffer's end (not past the segment's size, unless one record is
            // larger), so that the syncs of the next appends change no metadata.
            let end = self.active.len;
            let target = end.max(
                (self.active.allocated + self.opts.preallocate_bytes)
                    .min(self.opts.segment_bytes_max),
            );
            if let Err(e) = self.preallocate(target) {
                if is_no_space(&e) {
                    return Err(self.discard_unsynced(e));
                }
                let err = WalError::io(&self.active.path, e);
                return Err(self.poison(err));
            }
        }
        if let Err(e) = self.active.file.write_all(&self.buf) {
            if is_no_space(&e) {
                return Err(self.discard_unsynced(e));
            }
            let err = WalError::io(&self.active.path, e);
            return Err(self.poison(err));
        }
        crate::failpoint::hit("wal-append");
        self.buf.clear();
        self.active.allocated = self.active.allocated.max(self.active.len);
        Ok(())
    }

    /// Write zeros from the active segment's allocated end up to `target` (positioned
    /// writes: the file's cursor, where the records go, does not move).
    fn preallocate(&mut self, target: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut at = self.active.allocated;
        while at < target {
            let n = (target - at).min(ZEROS.len() as u64) as usize;
            self.active.file.write_all_at(&ZEROS[..n], at)?;
            at += n as u64;
        }
        crate::failpoint::hit("wal-preallocate");
        self.active.allocated = target;
        self.stats.preallocations += 1;
        Ok(())
    }

    fn fsync_active(&mut self) -> Result<(), WalError> {
        self.stats.fsyncs += 1;
        crate::failpoint::hit("wal-fsync");
        if crate::failpoint::error("wal-fsync-error") {
            let err = WalError::FsyncFailed {
                path: self.active.path.clone(),
                source: io::Error::other("injected fsync failure (failpoint wal-fsync-error)"),
            };
            return Err(self.poison(err));
        }
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next_fsync) {
            let err = WalError::FsyncFailed {
                path: self.active.path.clone(),
                source: io::Error::other("injected fsync failure"),
            };
            return Err(self.poison(err));
        }
        if let Err(e) = fsync_file(&self.active.file, &self.active.path) {
            return Err(self.poison(e));
        }
        Ok(())
    }

    fn fsync_dir(&mut self) -> Result<(), WalError> {
        self.stats.dir_fsyncs += 1;
        if let Err(e) = fsync_dir(&self.dir) {
            return Err(self.poison(e));
        }
        Ok(())
    }

    /// The disk is full: cut the active segment back to its last synced length (a
    /// write that failed half way leaves an unknown tail) and forget every record
    /// after the durable LSN, so that the log is exactly what was synced and the
    /// caller can append them again later. Nothing acknowledged is touched: only
    /// records no sync ever covered. Poisons the WAL only if the cut itself fails.
    fn discard_unsynced(&mut self, cause: io::Error) -> WalError {
        let path = self.active.path.clone();
        let keep = self.active.synced_len;
        let cut = self
            .active
            .file
            .set_len(keep)
            .and_then(|()| self.active.file.seek(SeekFrom::Start(keep)).map(drop));
        if let Err(e) = cut {
            return self.poison(WalError::io(&path, e));
        }
        self.active.allocated = keep;
        let discarded = self.next_lsn - 1 - self.durable_lsn;
        self.stats.records -= discarded;
        self.stats.bytes -= self.active.len - keep;
        self.stats.no_space += 1;
        self.buf.clear();
        self.active.len = keep;
        self.active.records = self.active.synced_records;
        self.next_lsn = self.durable_lsn + 1;
        debug_assert_eq!(self.active.first_lsn + self.active.records, self.next_lsn);
        tracing::debug!(segment = %path.display(), discarded, "disk full: unsynced WAL records discarded");
        WalError::NoSpace {
            path,
            source: cause,
            durable_lsn: self.durable_lsn,
            discarded,
        }
    }

    /// Close the active segment and start a new one at `next_lsn`.
    fn roll(&mut self) -> Result<(), WalError> {
        // The closed segment must be complete and durable *before* the next segment
        // exists: recovery treats a damaged tail in a non-last segment as corruption,
        // which is only sound if such a tail can never be a torn write.
        self.write_out()?;
        if self.active.allocated > self.active.len {
            // Cut the zeros written ahead: a closed segment ends at its last record
            // (recovery calls anything after it in a closed segment corruption). The
            // fsync below makes the new length durable with the records.
            let len = self.active.len;
            if let Err(e) = self.active.file.set_len(len) {
                let err = WalError::io(&self.active.path, e);
                return Err(self.poison(err));
            }
            self.active.allocated = len;
        }
        if self.opts.fsync() {
            self.fsync_active()?;
        }
        self.durable_lsn = self.next_lsn - 1;
        self.mark_synced();
        crate::failpoint::hit("wal-roll");
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next_create_no_space) {
            let path = self.dir.join(segment_file_name(self.next_lsn));
            self.stats.no_space += 1;
            return Err(WalError::NoSpace {
                path,
                source: no_space_error(),
                durable_lsn: self.durable_lsn,
                discarded: 0,
            });
        }
        let new = match create_segment(&self.dir, &self.opts, self.next_lsn, &mut self.stats) {
            Ok(seg) => seg,
            // Nothing is lost: the old segment is complete and synced, the record that
            // needed the new one was not appended, and a half-made segment exists only
            // under its temporary name (removed). The next append tries again.
            Err(WalError::Io { path, source }) if is_no_space(&source) => {
                let tmp = self
                    .dir
                    .join(format!("{}.tmp", segment_file_name(self.next_lsn)));
                let _ = fs::remove_file(&tmp);
                self.stats.no_space += 1;
                return Err(WalError::NoSpace {
                    path,
                    source,
                    durable_lsn: self.durable_lsn,
                    discarded: 0,
                });
            }
            Err(e) => return Err(self.poison(e)),
        };
        let old = std::mem::replace(&mut self.active, new);
        assert!(
            old.first_lsn < self.next_lsn,
            "closed segments are never empty"
        );
        self.closed.push_back(ClosedSegment {
            path: old.path,
            first_lsn: old.first_lsn,
            end_lsn: self.next_lsn,
        });
        Ok(())
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // Hand buffered records to the OS (no fsync): harmless, and spares a process
        // that exits cleanly from losing its last appends. Durability still requires
        // sync(). A poisoned WAL writes nothing more.
        if self.poisoned.is_none() && !self.buf.is_empty() {
            let _ = self.active.file.write_all(&self.buf);
        }
    }
}

/// List the directory, validate every segment header, return the segments sorted by
/// first LSN plus any stale temp files. Modifies nothing.
fn find_segments(
    dir: &Path,
    opts: &WalOptions,
) -> Result<(Vec<FoundSegment>, Vec<PathBuf>), WalError> {
    let mut named = Vec::new();
    let mut stale_tmps = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| WalError::io(dir, e))? {
        let entry = entry.map_err(|e| WalError::io(dir, e))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Some(lsn) = parse_segment_file_name(&name) {
            named.push((lsn, path));
        } else if name.starts_with("wal-") && name.ends_with(".log.tmp") {
            stale_tmps.push(path);
        } else if name.starts_with("wal-") && name.ends_with(".log") {
            // Looks like ours but we cannot place it; ignoring it could hide data.
            return Err(WalError::BadHeader {
                segment: path,
                reason: "file name does not follow wal-<20-digit first LSN>.log".into(),
            });
        }
    }
    named.sort();

    let mut found = Vec::with_capacity(named.len());
    for (name_lsn, path) in named {
        let mut head = Vec::with_capacity(SEGMENT_HEADER_LEN);
        File::open(&path)
            .and_then(|f| f.take(SEGMENT_HEADER_LEN as u64).read_to_end(&mut head))
            .map_err(|e| WalError::io(&path, e))?;
        let header = SegmentHeader::decode(&head).map_err(|reason| WalError::BadHeader {
            segment: path.clone(),
            reason,
        })?;
        if header.cluster_id != opts.cluster_id || header.node_id != opts.node_id {
            return Err(WalError::ForeignHeader {
                segment: path,
                expected_cluster_id: opts.cluster_id,
                expected_node_id: opts.node_id,
                found_cluster_id: header.cluster_id,
                found_node_id: header.node_id,
            });
        }
        if header.first_lsn != name_lsn || header.first_lsn == 0 {
            return Err(WalError::BadHeader {
                segment: path,
                reason: format!(
                    "header says first LSN {} but the file name says {name_lsn}",
                    header.first_lsn
                ),
            });
        }
        found.push(FoundSegment { path, header });
    }
    Ok((found, stale_tmps))
}

/// Create segment `first_lsn` atomically: header written and synced under a temp
/// name, then renamed, then the directory synced. A segment file with its final name
/// therefore always has a complete header, so a damaged header is never a crash
/// artefact and recovery may refuse it outright.
fn create_segment(
    dir: &Path,
    opts: &WalOptions,
    first_lsn: Lsn,
    stats: &mut WalStats,
) -> Result<ActiveSegment, WalError> {
    let name = segment_file_name(first_lsn);
    let path = dir.join(&name);
    let tmp = dir.join(format!("{name}.tmp"));
    if path.exists() {
        return Err(WalError::Corrupt {
            segment: path,
            offset: 0,
            reason: "refusing to overwrite an existing segment when starting a new one".into(),
        });
    }
    let header = SegmentHeader {
        cluster_id: opts.cluster_id,
        node_id: opts.node_id,
        first_lsn,
    }
    .encode();
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| WalError::io(&tmp, e))?;
    file.write_all(&header).map_err(|e| WalError::io(&tmp, e))?;
    if opts.fsync() {
        fsync_file(&file, &tmp)?;
        stats.fsyncs += 1;
    }
    crate::failpoint::hit("wal-segment-rename");
    fs::rename(&tmp, &path).map_err(|e| WalError::io(&path, e))?;
    if opts.fsync() {
        fsync_dir(dir)?;
        stats.dir_fsyncs += 1;
    }
    stats.segments_created += 1;
    tracing::debug!(segment = %path.display(), first_lsn, "created WAL segment");
    Ok(ActiveSegment {
        path,
        file,
        first_lsn,
        len: SEGMENT_HEADER_LEN as u64,
        records: 0,
        synced_len: SEGMENT_HEADER_LEN as u64,
        synced_records: 0,
        allocated: SEGMENT_HEADER_LEN as u64,
    })
}

/// A write that failed because the disk (or the user's quota) is full: the one I/O
/// error the WAL survives, because nothing is lost and space may come back.
pub(crate) fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

#[cfg(test)]
pub(crate) fn no_space_error() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

/// The only place segment data is fsynced (besides the test hook).
fn fsync_file(file: &File, path: &Path) -> Result<(), WalError> {
    // fdatasync: the file size is part of the data it flushes, other metadata
    // (mtime) is not needed to read the log back.
    file.sync_data().map_err(|source| WalError::FsyncFailed {
        path: path.to_path_buf(),
        source,
    })
}

fn fsync_dir(dir: &Path) -> Result<(), WalError> {
    let d = File::open(dir).map_err(|e| WalError::io(dir, e))?;
    d.sync_all().map_err(|source| WalError::FsyncFailed {
        path: dir.to_path_buf(),
        source,
    })
}

#[cfg(unix)]
fn lock_dir(dir: &Path) -> Result<File, WalError> {
    use std::os::unix::io::AsRawFd;
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| WalError::io(&path, e))?;
    // SAFETY: flock on a file descriptor we own and keep open; no memory involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::WouldBlock {
            return Err(WalError::Locked {
                dir: dir.to_path_buf(),
            });
        }
        return Err(WalError::io(&path, err));
    }
    Ok(file)
}

#[cfg(not(unix))]
fn lock_dir(dir: &Path) -> Result<File, WalError> {
    // No advisory locking off unix; the lock file is still created for symmetry.
    let path = dir.join(LOCK_FILE);
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| WalError::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> WalOptions {
        WalOptions {
            segment_bytes_max: 256,
            ..WalOptions::new(1, 1)
        }
    }

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(segment_file_name(1), "wal-00000000000000000001.log");
        assert_eq!(parse_segment_file_name(&segment_file_name(1)), Some(1));
        assert_eq!(
            parse_segment_file_name(&segment_file_name(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_segment_file_name("wal-1.log"), None);
        assert_eq!(
            parse_segment_file_name("wal-0000000000000000000x.log"),
            None
        );
        assert_eq!(
            parse_segment_file_name("wal-99999999999999999999.log"),
            None
        );
    }

    #[test]
    fn failed_fsync_poisons_forever() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        wal.append(b"one").unwrap();
        assert_eq!(wal.sync().unwrap(), 1);
        wal.append(b"two").unwrap();
        wal.fail_next_fsync = true;
        assert!(matches!(wal.sync(), Err(WalError::FsyncFailed { .. })));
        assert!(wal.is_poisoned());
        assert_eq!(wal.durable_lsn(), 1, "the failed sync made nothing durable");
        // Never retried, never "fixed" by a later call.
        assert!(matches!(wal.sync(), Err(WalError::Poisoned { .. })));
        assert!(matches!(wal.append(b"x"), Err(WalError::Poisoned { .. })));
        assert!(matches!(
            wal.truncate_prefix(10),
            Err(WalError::Poisoned { .. })
        ));
        let fsyncs = wal.stats().fsyncs;
        let _ = wal.sync();
        assert_eq!(wal.stats().fsyncs, fsyncs, "no fsync retry");
    }

    #[test]
    fn failed_fsync_during_roll_poisons() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        wal.append(&[7; 150]).unwrap();
        wal.fail_next_fsync = true;
        // The second record does not fit: roll-over syncs the old segment first.
        assert!(matches!(
            wal.append(&[8; 150]),
            Err(WalError::FsyncFailed { .. })
        ));
        assert!(wal.is_poisoned());
        assert_eq!(wal.segment_count(), 1, "no new segment after a failed sync");
    }

    fn reopen_payloads(dir: &Path) -> Vec<Vec<u8>> {
        let (_, rec) = Wal::open(dir, opts()).unwrap();
        rec.into_iter().map(|r| r.payload).collect()
    }

    #[test]
    fn full_disk_discards_only_unsynced_records_and_the_wal_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        wal.append(b"one").unwrap();
        wal.append(b"two").unwrap();
        assert_eq!(wal.sync().unwrap(), 2);
        let seg = wal.active.path.clone();
        // The records' length; the file runs ahead of it in zeros (preallocation).
        let synced_len = wal.active.synced_len;
        assert!(fs::metadata(&seg).unwrap().len() >= synced_len);
        wal.append(b"three").unwrap();
        wal.append(b"four").unwrap();
        wal.fail_writes_no_space = 1;
        match wal.sync() {
            Err(WalError::NoSpace {
                durable_lsn,
                discarded,
                ..
            }) => {
                assert_eq!(durable_lsn, 2);
                assert_eq!(discarded, 2);
            }
            other => panic!("expected NoSpace, got {other:?}"),
        }
        assert!(!wal.is_poisoned(), "a full disk is not fatal");
        assert_eq!(wal.durable_lsn(), 2);
        assert_eq!(wal.next_lsn(), 3, "the unsynced records are forgotten");
        assert_eq!(
            fs::metadata(&seg).unwrap().len(),
            synced_len,
            "the half-written tail is cut back to the synced length"
        );
        assert_eq!(wal.stats().no_space, 1);
        // Space returns: the same records are appended again at the same LSNs.
        assert_eq!(wal.append(b"three").unwrap(), 3);
        assert_eq!(wal.append(b"four").unwrap(), 4);
        assert_eq!(wal.sync().unwrap(), 4);
        drop(wal);
        let got = reopen_payloads(dir.path());
        assert_eq!(
            got,
            vec![
                b"one".to_vec(),
                b"two".to_vec(),
                b"three".to_vec(),
                b"four".to_vec()
            ]
        );
    }

    #[test]
    fn full_disk_at_segment_roll_keeps_the_synced_segment() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        wal.append(&[7; 150]).unwrap();
        wal.fail_next_create_no_space = true;
        // The second record does not fit: the roll syncs the first, then cannot make
        // the next segment.
        assert!(matches!(
            wal.append(&[8; 150]),
            Err(WalError::NoSpace { discarded: 0, .. })
        ));
        assert!(!wal.is_poisoned());
        assert_eq!(
            wal.durable_lsn(),
            1,
            "the roll made the first record durable"
        );
        assert_eq!(wal.segment_count(), 1);
        assert_eq!(wal.append(&[8; 150]).unwrap(), 2);
        assert_eq!(wal.sync().unwrap(), 2);
        assert_eq!(wal.segment_count(), 2);
        drop(wal);
        assert_eq!(
            reopen_payloads(dir.path()),
            vec![vec![7; 150], vec![8; 150]]
        );
    }

    #[test]
    fn real_no_space_errors_are_recognised_and_others_are_not() {
        assert!(is_no_space(&io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(is_no_space(&io::Error::from_raw_os_error(libc::EDQUOT)));
        assert!(!is_no_space(&io::Error::from_raw_os_error(libc::EIO)));
        assert!(!is_no_space(&io::Error::from_raw_os_error(libc::EROFS)));
    }
}
