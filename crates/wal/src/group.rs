//! Group commit: one background thread owns the [`Wal`], drains everything queued,
//! appends it all and covers it with a single sync.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::WalError;
use crate::format::MAX_RECORD_LEN;
use crate::wal::{Lsn, Wal};

/// Reported by the group-commit thread through the callback given to
/// [`GroupCommit::spawn`].
#[derive(Debug)]
pub enum Completion {
    /// These records are durable. `tokens[i]` was given LSN `first_lsn + i`; tokens
    /// are in submission order, and batches are reported in LSN order, so the
    /// concatenation of all `tokens` is exactly the submission order.
    Durable {
        tokens: Vec<u64>,
        first_lsn: Lsn,
        /// `first_lsn + tokens.len() - 1`: everything up to here is durable.
        durable_lsn: Lsn,
        /// How long writing and syncing the batch took.
        elapsed: Duration,
    },
    /// Fatal WAL error (typically [`WalError::FsyncFailed`]). `tokens` are every
    /// submission not reported durable (the failed batch and whatever was still
    /// queued): they may or may not be on disk, and must not be acknowledged. The
    /// thread stops after this; it is the last completion ever reported.
    Failed { tokens: Vec<u64>, error: WalError },
}

/// Parameters of [`GroupCommit::spawn`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// Bound of the submission queue, in records. [`GroupCommit::submit`] blocks and
    /// [`GroupCommit::try_submit`] fails while it is full: backpressure instead of
    /// unbounded memory when the disk is slower than the submitters. It is also the
    /// largest possible batch.
    pub queue_records_max: usize,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        GroupCommitOptions {
            queue_records_max: 4096,
        }
    }
}

/// Why a submission was not accepted.
#[derive(thiserror::Error)]
pub enum SubmitError {
    /// Only from [`GroupCommit::try_submit`]: the queue is full. The payload is
    /// handed back.
    #[error("group commit queue is full")]
    Full { payload: Vec<u8>, token: u64 },
    /// The thread was shut down or stopped after a fatal error.
    #[error("the group commit thread has stopped (shut down or fatal WAL error)")]
    Stopped,
    #[error("record of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { len: usize, max: usize },
}

impl fmt::Debug for SubmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubmitError::Full { payload, token } => f
                .debug_struct("Full")
                .field("payload_len", &payload.len())
                .field("token", token)
                .finish(),
            SubmitError::Stopped => f.write_str("Stopped"),
            SubmitError::TooLarge { len, max } => f
                .debug_struct("TooLarge")
                .field("len", len)
                .field("max", max)
                .finish(),
        }
    }
}

/// Counters of a [`GroupCommit`] since it was spawned (a snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Records made durable.
    pub records: u64,
    /// Bytes appended (record headers included).
    pub bytes: u64,
    /// Batches, i.e. `Wal::sync` calls: one per batch.
    pub syncs: u64,
    /// Actual `fdatasync` calls on segment files (0 with `Durability::Memory`);
    /// slightly above `syncs` when segments roll over.
    pub fsyncs: u64,
    /// Largest batch so far, in records.
    pub max_batch: u64,
    /// Highest durable LSN reported so far.
    pub durable_lsn: Lsn,
    /// Times the disk was found full (each stall counts once, however many retries).
    pub no_space_stalls: u64,
    /// Retries of a batch held back by a full disk.
    pub no_space_retries: u64,
}

#[derive(Default)]
struct StatCells {
    records: AtomicU64,
    bytes: AtomicU64,
    syncs: AtomicU64,
    fsyncs: AtomicU64,
    max_batch: AtomicU64,
    durable_lsn: AtomicU64,
    no_space_stalls: AtomicU64,
    no_space_retries: AtomicU64,
}

struct Queue {
    items: VecDeque<(Vec<u8>, u64)>,
    /// Set by shutdown: the thread drains what is queued, then exits.
    closing: bool,
    /// Set by the thread when it exits for any reason: nobody will ever drain again.
    stopped: bool,
    truncate_below: Option<Lsn>,
    /// Set while a batch is held back by a full disk: why, for status pages.
    stall: Option<String>,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signals the thread: items queued, truncation requested, or closing.
    work: Condvar,
    /// Signals submitters: room in the queue, or stopped.
    room: Condvar,
    capacity: usize,
    stats: StatCells,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while holding this lock, but if something ever did the queue
        // itself would still be consistent (every mutation is a single push/take).
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Owns a [`Wal`] on a dedicated thread and commits submissions in groups.
///
/// The thread loop: wait for submissions; take *everything* queued; append it all;
/// one [`Wal::sync`]; report one [`Completion::Durable`]. While a sync is in flight
/// new submissions pile up in the queue and form the next batch, so the batch size
/// adapts to the disk's fsync latency with no timer and no added latency when idle.
///
/// Completions are delivered by calling `on_complete` on the WAL thread. It should be
/// quick (forward into a channel, e.g. a tokio `mpsc::UnboundedSender`, or wake a
/// task): the next batch waits for it. A callback was chosen over a fixed channel type
/// so the runtime can use whatever its event loop needs without this crate depending
/// on tokio.
pub struct GroupCommit {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Wal>>,
}

impl fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCommit")
            .field("capacity", &self.shared.capacity)
            .field("stats", &self.stats())
            .finish()
    }
}

impl GroupCommit {
    /// Move `wal` onto a new thread. `on_complete` receives every completion, in LSN
    /// order, on that thread.
    pub fn spawn<F>(
        wal: Wal,
        opts: GroupCommitOptions,
        on_complete: F,
    ) -> Result<GroupCommit, WalError>
    where
        F: FnMut(Completion) + Send + 'static,
    {
        if opts.queue_records_max == 0 {
            return Err(WalError::InvalidOptions(
                "queue_records_max must be at least 1".into(),
            ));
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                closing: false,
                stopped: false,
                truncate_below: None,
                stall: None,
            }),
            work: Condvar::new(),
            room: Condvar::new(),
            capacity: opts.queue_records_max,
            stats: StatCells::default(),
        });
        shared
            .stats
            .durable_lsn
            .store(wal.durable_lsn(), Ordering::Relaxed);
        let dir = wal.dir().to_path_buf();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("partita-wal".into())
            .spawn(move || run(wal, &thread_shared, on_complete))
            .map_err(|e| WalError::io(dir, e))?;
        Ok(GroupCommit {
            shared,
            thread: Some(thread),
        })
    }

    /// Queue one record; blocks while the queue is full. `token` is the caller's name
    /// for the record, echoed in the [`Completion`]. From async code prefer
    /// [`GroupCommit::try_submit`] (or `spawn_blocking`), as this may block.
    pub fn submit(&self, payload: Vec<u8>, token: u64) -> Result<(), SubmitError> {
        check_len(&payload)?;
        let mut q = self.shared.lock();
        loop {
            if q.stopped || q.closing {
                return Err(SubmitError::Stopped);
            }
            if q.items.len() < self.shared.capacity {
                break;
            }
            q = self.shared.room.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        q.items.push_back((payload, token));
        drop(q);
        self.shared.work.notify_one();
        Ok(())
    }

    /// Like [`GroupCommit::submit`] but never blocks: a full queue returns
    /// [`SubmitError::Full`] with the payload.
    pub fn try_submit(&self, payload: Vec<u8>, token: u64) -> Result<(), SubmitError> {
        check_len(&payload)?;
        let mut q = self.shared.lock();
        if q.stopped || q.closing {
            return Err(SubmitError::Stopped);
        }
        if q.items.len() >= self.shared.capacity {
            return Err(SubmitError::Full { payload, token });
        }
        q.items.push_back((payload, token));
        drop(q);
        self.shared.work.notify_one();
        Ok(())
    }

    /// Ask the thread to run [`Wal::truncate_prefix`]`(below_lsn)` after its current
    /// batch. Asynchronous and idempotent (the largest requested bound wins); a
    /// failure is logged, and reported as [`Completion::Failed`] only if it poisoned
    /// the WAL.
    pub fn request_truncate_prefix(&self, below_lsn: Lsn) {
        let mut q = self.shared.lock();
        q.truncate_below = Some(q.truncate_below.map_or(below_lsn, |b| b.max(below_lsn)));
        drop(q);
        self.shared.work.notify_one();
    }

    /// While the disk is full: why nothing is being made durable (the records wait,
    /// in order, and are written as soon as there is space; see
    /// [`WalError::NoSpace`]). `None` when writing normally.
    pub fn stalled(&self) -> Option<String> {
        self.shared.lock().stall.clone()
    }

    /// Whether the thread has exited (after [`Completion::Failed`]).
    pub fn is_stopped(&self) -> bool {
        self.shared.lock().stopped
    }

    pub fn stats(&self) -> GroupCommitStats {
        let s = &self.shared.stats;
        GroupCommitStats {
            records: s.records.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
            syncs: s.syncs.load(Ordering::Relaxed),
            fsyncs: s.fsyncs.load(Ordering::Relaxed),
            max_batch: s.max_batch.load(Ordering::Relaxed),
            durable_lsn: s.durable_lsn.load(Ordering::Relaxed),
            no_space_stalls: s.no_space_stalls.load(Ordering::Relaxed),
            no_space_retries: s.no_space_retries.load(Ordering::Relaxed),
        }
    }

    /// Stop accepting submissions, let the thread commit (and report) everything
    /// already queued, and hand the `Wal` back. If the thread stopped on a fatal error
    /// the returned `Wal` is poisoned.
    pub fn shutdown(mut self) -> Wal {
        self.close_and_join()
            .expect("shutdown joins the thread exactly once")
    }

    fn close_and_join(&mut self) -> Option<Wal> {
        let thread = self.thread.take()?;
        self.shared.lock().closing = true;
        self.shared.work.notify_one();
        self.shared.room.notify_all();
        match thread.join() {
            Ok(wal) => Some(wal),
            // The completion callback panicked: surface it rather than hide it.
            Err(panic) if !std::thread::panicking() => std::panic::resume_unwind(panic),
            Err(_) => None,
        }
    }
}

impl Drop for GroupCommit {
    /// Same as [`GroupCommit::shutdown`], dropping the `Wal`.
    fn drop(&mut self) {
        self.close_and_join();
    }
}

fn check_len(payload: &[u8]) -> Result<(), SubmitError> {
    // Checked here so that in the thread an append error is always an I/O error,
    // i.e. fatal, never one record's problem.
    if payload.len() > MAX_RECORD_LEN {
        return Err(SubmitError::TooLarge {
            len: payload.len(),
            max: MAX_RECORD_LEN,
        });
    }
    Ok(())
}

/// Marks the queue stopped when the thread exits, also by panic, so that submitters
/// blocked on a full queue wake up and get `Stopped` instead of hanging forever.
struct StopOnExit<'a>(&'a Shared);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        self.0.lock().stopped = true;
        self.0.room.notify_all();
    }
}

/// First pause before retrying a batch held back by a full disk; doubles up to
/// [`NO_SPACE_RETRY_MAX`].
const NO_SPACE_RETRY_MIN: Duration = Duration::from_millis(50);
const NO_SPACE_RETRY_MAX: Duration = Duration::from_secs(1);
/// While stalled, the warning is repeated this often (retries in between are quiet).
const NO_SPACE_WARN_EVERY: Duration = Duration::from_secs(10);

type Batch = VecDeque<(Vec<u8>, u64)>;

/// A batch that found the disk full, waiting for space.
struct Held {
    batch: Batch,
    since: Instant,
    pause: Duration,
    last_warned: Instant,
    error: WalError,
}

fn run<F: FnMut(Completion)>(mut wal: Wal, shared: &Shared, mut on_complete: F) -> Wal {
    let _stop = StopOnExit(shared);
    let mut held: Option<Held> = None;
    loop {
        let (batch, truncate_below, closing) = {
            let mut q = shared.lock();
            match &held {
                None => {
                    while q.items.is_empty() && q.truncate_below.is_none() && !q.closing {
                        q = shared.work.wait(q).unwrap_or_else(|e| e.into_inner());
                    }
                }
                Some(h) => {
                    // Retry after a pause; a truncation (which frees space) or closing
                    // cuts it short. New submissions stay queued behind the held
                    // batch (order is the log's order) and, once the queue is full,
                    // are refused: backpressure, not unbounded memory.
                    let deadline = Instant::now() + h.pause;
                    while q.truncate_below.is_none() && !q.closing {
                        let now = Instant::now();
                        if now >= deadline {
                            break;
                        }
                        q = shared
                            .work
                            .wait_timeout(q, deadline - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            }
            // A held batch is retried alone: new submissions wait behind it.
            let batch = if held.is_none() {
                std::mem::take(&mut q.items)
            } else {
                Batch::new()
            };
            (batch, q.truncate_below.take(), q.closing)
        };
        // The whole queue was taken: there is room for everyone waiting.
        if !batch.is_empty() {
            shared.room.notify_all();
        }

        // Truncation first while stalled: deleting old segments may be what frees the
        // space the held batch needs.
        if let Some(below) = truncate_below {
            if let Err(error) = wal.truncate_prefix(below) {
                tracing::warn!(%error, below, "WAL prefix truncation failed");
                if wal.is_poisoned() {
                    let tokens = held
                        .take()
                        .map(|h| h.batch.iter().map(|(_, t)| *t).collect())
                        .unwrap_or_default();
                    fail(shared, tokens, error, &mut on_complete);
                    return wal;
                }
            }
        }

        let (to_commit, previous) = match held.take() {
            Some(mut h) => {
                shared
                    .stats
                    .no_space_retries
                    .fetch_add(1, Ordering::Relaxed);
                (std::mem::take(&mut h.batch), Some(h))
            }
            None => (batch, None),
        };
        if !to_commit.is_empty() {
            match commit_batch(&mut wal, shared, to_commit, &mut on_complete) {
                Ok(()) => {
                    if let Some(h) = previous {
                        shared.lock().stall = None;
                        tracing::warn!(
                            stalled_ms = h.since.elapsed().as_millis() as u64,
                            "disk has space again: the WAL is writing, the node votes again"
                        );
                    }
                }
                Err(BatchError::Fatal(tokens, error)) => {
                    fail(shared, tokens, error, &mut on_complete);
                    return wal;
                }
                Err(BatchError::NoSpace(rest, error)) => {
                    let now = Instant::now();
                    let h = match previous {
                        None => {
                            shared.stats.no_space_stalls.fetch_add(1, Ordering::Relaxed);
                            tracing::error!(%error, records = rest.len(), "disk full: the WAL holds these records back and writes nothing (the node stops voting) until space returns; nothing durable is lost");
                            Held {
                                batch: rest,
                                since: now,
                                pause: NO_SPACE_RETRY_MIN,
                                last_warned: now,
                                error,
                            }
                        }
                        Some(h) => {
                            let mut last_warned = h.last_warned;
                            if now - h.last_warned >= NO_SPACE_WARN_EVERY {
                                tracing::error!(%error, stalled_s = h.since.elapsed().as_secs(), records = rest.len(), "disk still full: the WAL is still holding records back");
                                last_warned = now;
                            }
                            Held {
                                batch: rest,
                                since: h.since,
                                pause: (h.pause * 2).min(NO_SPACE_RETRY_MAX),
                                last_warned,
                                error,
                            }
                        }
                    };
                    shared.lock().stall = Some(format!(
                        "disk full since {:.1} s ago, WAL writes held back: {}",
                        h.since.elapsed().as_secs_f64(),
                        h.error
                    ));
                    held = Some(h);
                }
            }
        }
        // `closing` was read under the same lock that emptied the queue, and no
        // submission is accepted once it is set, so nothing can be left behind. A
        // batch still held back by a full disk at shutdown is reported failed: it was
        // never durable.
        if closing {
            if let Some(h) = held.take() {
                let tokens = h.batch.iter().map(|(_, t)| *t).collect();
                fail(shared, tokens, h.error, &mut on_complete);
                return wal;
            }
            if !shared.lock().items.is_empty() {
                continue;
            }
            return wal;
        }
    }
}

enum BatchError {
    /// The WAL is poisoned: these tokens were not reported durable.
    Fatal(Vec<u64>, WalError),
    /// The disk is full: the durable prefix was reported, these were not written.
    NoSpace(Batch, WalError),
}

/// Append and sync one batch, report it. On a full disk reports the prefix that is
/// durable (a segment roll-over syncs) and hands back the rest.
fn commit_batch<F: FnMut(Completion)>(
    wal: &mut Wal,
    shared: &Shared,
    mut batch: Batch,
    on_complete: &mut F,
) -> Result<(), BatchError> {
    let first_lsn = wal.next_lsn();
    debug_assert_eq!(wal.durable_lsn() + 1, first_lsn, "batches start durable");
    let before = wal.stats();
    let started = Instant::now();
    let mut result = Ok(());
    for (payload, _) in &batch {
        result = wal.append(payload).map(drop);
        if result.is_err() {
            break;
        }
    }
    let durable_lsn = match result.and_then(|()| wal.sync()) {
        Ok(lsn) => lsn,
        Err(error @ WalError::NoSpace { .. }) => {
            let durable = (wal.durable_lsn() + 1 - first_lsn) as usize;
            let rest = batch.split_off(durable);
            if durable > 0 {
                report(wal, shared, batch, first_lsn, before, started, on_complete);
            }
            return Err(BatchError::NoSpace(rest, error));
        }
        Err(error) => {
            return Err(BatchError::Fatal(
                batch.into_iter().map(|(_, t)| t).collect(),
                error,
            ))
        }
    };
    assert_eq!(
        durable_lsn,
        first_lsn + batch.len() as u64 - 1,
        "one batch, consecutive LSNs, all durable"
    );
    report(wal, shared, batch, first_lsn, before, started, on_complete);
    Ok(())
}

/// Count and report `batch`, durable from `first_lsn` on.
fn report<F: FnMut(Completion)>(
    wal: &Wal,
    shared: &Shared,
    batch: Batch,
    first_lsn: Lsn,
    before: crate::wal::WalStats,
    started: Instant,
    on_complete: &mut F,
) {
    let n = batch.len() as u64;
    let durable_lsn = first_lsn + n - 1;
    let ws = wal.stats();
    let s = &shared.stats;
    s.records.fetch_add(n, Ordering::Relaxed);
    s.bytes
        .fetch_add(ws.bytes - before.bytes, Ordering::Relaxed);
    s.syncs.fetch_add(1, Ordering::Relaxed);
    s.fsyncs
        .fetch_add(ws.fsyncs - before.fsyncs, Ordering::Relaxed);
    s.max_batch.fetch_max(n, Ordering::Relaxed);
    s.durable_lsn.store(durable_lsn, Ordering::Relaxed);
    on_complete(Completion::Durable {
        tokens: batch.into_iter().map(|(_, t)| t).collect(),
        first_lsn,
        durable_lsn,
        elapsed: started.elapsed(),
    });
}

/// Stop for good: refuse new submissions, report every unreported token as failed.
fn fail<F: FnMut(Completion)>(
    shared: &Shared,
    mut tokens: Vec<u64>,
    error: WalError,
    on_complete: &mut F,
) {
    tracing::error!(%error, "WAL group commit stopped on a fatal error");
    let rest = {
        let mut q = shared.lock();
        q.stopped = true;
        std::mem::take(&mut q.items)
    };
    shared.room.notify_all();
    tokens.extend(rest.into_iter().map(|(_, token)| token));
    on_complete(Completion::Failed { tokens, error });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::WalOptions;
    use std::sync::mpsc;

    #[test]
    fn fsync_failure_is_reported_once_and_stops_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), WalOptions::new(9, 2)).unwrap();
        let (tx, rx) = mpsc::channel();
        // First batch succeeds, then the next fsync fails.
        wal.append(b"pre").unwrap();
        wal.sync().unwrap();
        let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
            tx.send(c).unwrap();
        })
        .unwrap();
        gc.submit(b"a".to_vec(), 1).unwrap();
        match rx.recv().unwrap() {
            Completion::Durable { tokens, .. } => assert_eq!(tokens, vec![1]),
            other => panic!("unexpected {other:?}"),
        }
        let wal = gc.shutdown();
        let mut wal = wal;
        wal.fail_next_fsync = true;
        let (tx, rx) = mpsc::channel();
        let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
            tx.send(c).unwrap();
        })
        .unwrap();
        gc.submit(b"b".to_vec(), 2).unwrap();
        match rx.recv().unwrap() {
            Completion::Failed { tokens, error } => {
                assert!(tokens.contains(&2));
                assert!(matches!(error, WalError::FsyncFailed { .. }), "{error}");
            }
            other => panic!("unexpected {other:?}"),
        }
        // The thread is gone; later submissions are refused, not silently queued.
        while !gc.is_stopped() {
            std::thread::yield_now();
        }
        assert!(matches!(
            gc.submit(b"c".to_vec(), 3),
            Err(SubmitError::Stopped)
        ));
        let wal = gc.shutdown();
        assert!(wal.is_poisoned());
        assert!(rx.recv().is_err(), "Failed is the last completion");
    }

    #[test]
    fn full_disk_holds_the_batch_back_then_writes_it_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), WalOptions::new(9, 2)).unwrap();
        // The first write and two retries find the disk full.
        wal.fail_writes_no_space = 3;
        let (tx, rx) = mpsc::channel();
        let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
            tx.send(c).unwrap();
        })
        .unwrap();
        gc.submit(b"a".to_vec(), 1).unwrap();
        gc.submit(b"b".to_vec(), 2).unwrap();
        // Says why while it holds them back.
        let mut saw_stall = false;
        let mut submitted_during_stall = false;
        let mut durable = Vec::new();
        while durable.len() < 2 {
            if let Some(why) = gc.stalled() {
                assert!(why.contains("disk full"), "{why}");
                saw_stall = true;
            }
            match rx.recv_timeout(Duration::from_millis(5)) {
                Ok(Completion::Durable { tokens, .. }) => durable.extend(tokens),
                Ok(other) => panic!("unexpected {other:?}"),
                Err(_) => {}
            }
            if saw_stall && durable.is_empty() && !submitted_during_stall {
                // Submissions made during the stall queue behind the held batch.
                gc.try_submit(b"c".to_vec(), 3).unwrap();
                submitted_during_stall = true;
            }
        }
        assert!(saw_stall, "the stall was never visible");
        while durable.len() < 3 {
            if let Completion::Durable { tokens, .. } = rx.recv().unwrap() {
                durable.extend(tokens);
            }
        }
        assert_eq!(durable, vec![1, 2, 3], "in submission order, nothing lost");
        assert_eq!(gc.stalled(), None);
        let st = gc.stats();
        assert_eq!(st.no_space_stalls, 1);
        assert_eq!(st.no_space_retries, 3);
        let wal = gc.shutdown();
        assert!(!wal.is_poisoned());
        drop(wal);
        let (_, rec) = Wal::open(dir.path(), WalOptions::new(9, 2)).unwrap();
        let got: Vec<Vec<u8>> = rec.into_iter().map(|r| r.payload).collect();
        assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn shutdown_while_the_disk_is_full_reports_the_held_records_failed() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), WalOptions::new(9, 2)).unwrap();
        wal.fail_writes_no_space = u32::MAX;
        let (tx, rx) = mpsc::channel();
        let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
            tx.send(c).unwrap();
        })
        .unwrap();
        gc.submit(b"a".to_vec(), 1).unwrap();
        while gc.stalled().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let wal = gc.shutdown();
        match rx.recv().unwrap() {
            Completion::Failed { tokens, error } => {
                assert_eq!(tokens, vec![1]);
                assert!(matches!(error, WalError::NoSpace { .. }), "{error}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(!wal.is_poisoned(), "nothing was written: the log is intact");
    }
}
