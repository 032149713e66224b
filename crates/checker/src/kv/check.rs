//! The revision-guided linearizability check of key-value histories (the algorithm is
//! explained in the [module doc](super)). It relies on etcd's revisions (`mvcc`: one
//! per change, shared by a transaction's writes, and reported in every response
//! header) to place each operation, and searches only where the history does not say.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::history::{fmt_result, Bytes, KvEvent, KvOp, KvResult, Target};
use super::model::{eval, Entry};
use crate::check::DEFAULT_MAX_STATES;
use crate::history::Status;

/// The store before the first operation of a history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvInitial {
    /// Its revision (1 for a new store, as etcd's).
    pub revision: u64,
    /// Its entries (keys once each).
    pub entries: Vec<(Bytes, Entry)>,
}

impl Default for KvInitial {
    fn default() -> Self {
        KvInitial {
            revision: 1,
            entries: Vec::new(),
        }
    }
}

/// How to check a key-value history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvCheckOptions {
    pub initial: KvInitial,
    /// Give up ([`KvCheckError::Unknown`]) after this many search steps: placements of
    /// operations with unknown outcome tried, and revisions executed again after going
    /// back on one. The first pass over the history is free, so a history without
    /// `info` operations never needs any.
    pub max_steps: u64,
}

impl Default for KvCheckOptions {
    fn default() -> Self {
        KvCheckOptions {
            initial: KvInitial::default(),
            max_steps: DEFAULT_MAX_STATES,
        }
    }
}

/// What a successful check covered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvCheckSummary {
    /// Events in the history as given.
    pub events: usize,
    /// `ok` writes (each created a revision).
    pub writes: usize,
    /// `ok` operations that changed nothing and report the revision they read at
    /// (reads, deletes of nothing, transactions that wrote nothing).
    pub reads: usize,
    /// `ok` reads that report no revision (DESIGN.md's get and txn shapes), placed by
    /// their results.
    pub unpinned_reads: usize,
    /// `info` operations that may write.
    pub info_ops: usize,
    /// Of those, how many the linearization found needed (took effect).
    pub info_applied: usize,
    pub failed_ops: usize,
    /// `info` operations that cannot write, left out.
    pub info_reads_dropped: usize,
    /// The initial revision and the last one observed.
    pub first_revision: u64,
    pub last_revision: u64,
    /// Distinct keys written or read by the checked operations.
    pub keys: usize,
    /// Search steps spent (see [`KvCheckOptions::max_steps`]).
    pub steps: u64,
}

impl fmt::Display for KvCheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} kv operations on {} keys, revisions {}..={} ({} writes, {} reads, {} without \
             revision, {} of {} unknown outcomes applied; search steps {})",
            self.writes + self.reads + self.unpinned_reads + self.info_ops,
            self.keys,
            self.first_revision,
            self.last_revision,
            self.writes,
            self.reads,
            self.unpinned_reads,
            self.info_applied,
            self.info_ops,
            self.steps
        )
    }
}

/// Which rule a violation breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvViolationKind {
    /// Two acknowledged writes report creating the same revision.
    DuplicateRevision,
    /// A revision no later than the initial one reported as created, or a read of a
    /// revision older than the initial one.
    BadRevision,
    /// An operation that returned before another was invoked reports a newer revision
    /// (or, for a write and a read of the same revision, the read came first): revisions
    /// go backwards in real time. A stale read that reports its stale revision is one.
    RealTimeOrder,
    /// A result differs from the model's at the revision the operation reports.
    WrongResult,
    /// A revision below the newest observed was created by no operation of the
    /// history (no acknowledged write reports it, and no write of unknown outcome can
    /// have made it).
    MissingWrite,
    /// A read that reports no revision matches the store at no revision real time
    /// allows for it.
    Unplaceable,
}

/// Why a key-value history is not linearizable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvViolation {
    pub kind: KvViolationKind,
    /// The revision at which it went wrong.
    pub revision: u64,
    /// Indices (into the checked events) of the operations involved, the culprit first.
    pub ops: Vec<usize>,
    /// Those events, as recorded.
    pub events: Vec<KvEvent>,
    /// What the model returns to the culprit where the history places it.
    pub expected: Option<KvResult>,
    /// Human-readable account.
    pub message: String,
}

impl fmt::Display for KvViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The search gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvUnknown {
    pub steps: u64,
    pub limit: u64,
    /// The furthest revision any placement reached.
    pub revision: u64,
    pub info_ops: usize,
}

impl fmt::Display for KvUnknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "search gave up after {} steps (limit {}) placing {} operations of unknown \
             outcome; the furthest placement reached revision {}",
            self.steps, self.limit, self.info_ops, self.revision
        )
    }
}

/// A check that did not conclude "linearizable".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KvCheckError {
    #[error("NOT linearizable: {0}")]
    NotLinearizable(Box<KvViolation>),
    #[error("unknown: {0}")]
    Unknown(KvUnknown),
    /// The history breaks its own rules (`ok` without a result, a result of the wrong
    /// kind, a response before the invocation). Parsed histories never do.
    #[error("invalid history: {0}")]
    Invalid(String),
}

impl KvCheckError {
    pub fn violation(&self) -> Option<&KvViolation> {
        match self {
            KvCheckError::NotLinearizable(v) => Some(v),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Preparation.

/// Where an `ok` operation sits in revision order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pin {
    /// It created this revision.
    Write(u64),
    /// It changed nothing and ran at this revision.
    Read(u64),
    /// It changed nothing and reports no revision.
    Unpinned,
}

/// Slots order pinned operations: a write at r comes before every read at r, which
/// come before the write at r + 1.
fn slot(p: Pin) -> u64 {
    match p {
        Pin::Write(r) => r.saturating_mul(2),
        Pin::Read(r) => r.saturating_mul(2).saturating_add(1),
        Pin::Unpinned => unreachable!("unpinned operations have no slot"),
    }
}

fn max_inner_revision(results: &[KvResult]) -> Option<u64> {
    results
        .iter()
        .filter_map(|r| match r {
            KvResult::Put { revision, .. }
            | KvResult::Del { revision, .. }
            | KvResult::Range { revision, .. } => Some(*revision),
            KvResult::Get { revision, .. } => *revision,
            KvResult::Txn { revision, .. } => *revision,
        })
        .max()
}

/// The pin of an `ok` operation, from its result: whether it wrote and at which
/// revision. (A result that lies about either is caught when it is compared with the
/// model at that revision.)
fn pin_of(result: &KvResult) -> Pin {
    match result {
        KvResult::Put { revision, .. } => Pin::Write(*revision),
        KvResult::Get { revision, .. } => revision.map_or(Pin::Unpinned, Pin::Read),
        KvResult::Range { revision, .. } => Pin::Read(*revision),
        KvResult::Del {
            deleted, revision, ..
        } => {
            if *deleted > 0 {
                Pin::Write(*revision)
            } else {
                Pin::Read(*revision)
            }
        }
        KvResult::Txn {
            results, revision, ..
        } => {
            let wrote = results.iter().any(|r| match r {
                KvResult::Put { .. } => true,
                KvResult::Del { deleted, .. } => *deleted > 0,
                _ => false,
            });
            match (wrote, revision.or_else(|| max_inner_revision(results))) {
                (true, Some(r)) => Pin::Write(r),
                (false, Some(r)) => Pin::Read(r),
                // A put or delete result always has a revision, so this is `false`.
                (_, None) => Pin::Unpinned,
            }
        }
    }
}

fn keys_of(op: &KvOp, out: &mut HashSet<Bytes>) {
    match op {
        KvOp::Put { key, .. } | KvOp::Get { key } | KvOp::Del { key, .. } => {
            out.insert(key.clone());
        }
        KvOp::Range { .. } => {}
        KvOp::Txn {
            compare,
            then,
            otherwise,
        } => {
            out.extend(compare.iter().map(|c| c.key.clone()));
            for o in then.iter().chain(otherwise) {
                keys_of(o, out);
            }
        }
    }
}

/// The point keys an operation's outcome depends on, or `None` when it reads a range
/// (then every revision is a possible change point).
fn point_keys(op: &KvOp) -> Option<Vec<&[u8]>> {
    match op {
        KvOp::Put { key, .. } | KvOp::Get { key } => Some(vec![key.as_slice()]),
        KvOp::Del { key, end: None, .. } => Some(vec![key.as_slice()]),
        KvOp::Del { .. } | KvOp::Range { .. } => None,
        KvOp::Txn {
            compare,
            then,
            otherwise,
        } => {
            let mut keys: Vec<&[u8]> = compare.iter().map(|c| c.key.as_slice()).collect();
            for o in then.iter().chain(otherwise) {
                keys.extend(point_keys(o)?);
            }
            Some(keys)
        }
    }
}

// ---------------------------------------------------------------------------------------
// The model, with undo records while a choice may be revisited, and a 128-bit hash of
// its contents for memoization.

/// A fixed 64-bit mixer (SplitMix64's finalizer).
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Two independent 64-bit hashes of a byte string, as one 128-bit value.
fn hash_bytes(seed: u64, b: &[u8]) -> u128 {
    let (mut x, mut y) = (
        mix64(seed ^ b.len() as u64),
        mix64(!seed ^ (b.len() as u64).rotate_left(32)),
    );
    for chunk in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        let w = u64::from_le_bytes(w);
        x = mix64(x ^ w);
        y = mix64(y.rotate_left(17) ^ w ^ 0x9e37_79b9_7f4a_7c15);
    }
    (u128::from(x) << 64) | u128::from(y)
}

fn entry_hash(key: &[u8], e: &Entry) -> u128 {
    let meta = u128::from(mix64(
        e.create_revision ^ mix64(e.mod_revision ^ mix64(e.version)),
    ));
    hash_bytes(1, key) ^ hash_bytes(2, &e.value).rotate_left(7) ^ (meta << 64 | meta)
}

/// A tag per element of a set, so that a set hashes as the XOR of its tags.
fn tag(salt: u64, i: usize) -> u128 {
    let a = mix64(salt ^ mix64(i as u64));
    let b = mix64(a ^ salt.rotate_left(29));
    (u128::from(a) << 64) | u128::from(b)
}

/// Entries changed by one revision: each key with its entry before (for undo).
type Changes = Vec<(Bytes, Option<Entry>)>;

struct Model {
    map: BTreeMap<Bytes, Entry>,
    revision: u64,
    /// Per applied revision since the oldest open choice: the entries it replaced.
    undo: Vec<(u64, Changes)>,
    /// XOR of the entries' hashes (kept only when the search may branch).
    hash: u128,
    hashing: bool,
}

impl Model {
    fn new(initial: &KvInitial, hashing: bool) -> Model {
        let map: BTreeMap<Bytes, Entry> = initial.entries.iter().cloned().collect();
        let hash = if hashing {
            map.iter().fold(0, |h, (k, e)| h ^ entry_hash(k, e))
        } else {
            0
        };
        Model {
            map,
            revision: initial.revision,
            undo: Vec::new(),
            hash,
            hashing,
        }
    }

    fn set(&mut self, key: Bytes, entry: Option<Entry>) -> Option<Entry> {
        if self.hashing {
            if let Some(e) = &entry {
                self.hash ^= entry_hash(&key, e);
            }
        }
        let old = match entry {
            Some(e) => self.map.insert(key.clone(), e),
            None => self.map.remove(&key),
        };
        if self.hashing {
            if let Some(o) = &old {
                self.hash ^= entry_hash(&key, o);
            }
        }
        old
    }

    /// Apply the changes of the write that creates `revision`, keeping what undoes them
    /// when `keep_undo` (only needed while a choice can still be revisited).
    fn apply(&mut self, revision: u64, changes: Vec<(Bytes, Option<Entry>)>, keep_undo: bool) {
        assert_eq!(
            revision,
            self.revision + 1,
            "revisions are applied in order"
        );
        let mut undo = Vec::with_capacity(if keep_undo { changes.len() } else { 0 });
        for (k, e) in changes {
            let old = self.set(k.clone(), e);
            if keep_undo {
                undo.push((k, old));
            }
        }
        if keep_undo {
            self.undo.push((revision, undo));
        }
        self.revision = revision;
    }

    /// Undo the last applied revision (which kept its undo record).
    fn unapply(&mut self) {
        let (revision, undo) = self
            .undo
            .pop()
            .expect("an undo record for every revision since the oldest open choice");
        assert_eq!(
            revision, self.revision,
            "undo records are applied newest first"
        );
        for (k, old) in undo.into_iter().rev() {
            self.set(k, old);
        }
        self.revision -= 1;
    }
}

// ---------------------------------------------------------------------------------------
// The search.

/// A revision no acknowledged write claims: which `info` operation created it.
struct Choice {
    revision: u64,
    /// Indices into `Search::info`, in the order tried.
    candidates: Vec<usize>,
    next: usize,
    current: Option<usize>,
}

/// Why a configuration failed, recorded with the operations involved at that moment
/// (before backtracking changes who created which revision).
#[derive(Clone)]
struct Failure {
    kind: KvViolationKind,
    revision: u64,
    /// Event indices, culprit first.
    ops: Vec<usize>,
    expected: Option<KvResult>,
    message: String,
}

/// Why the search stopped going forward.
enum Stop {
    Failed(Box<Failure>),
    /// A configuration explored before (and found to fail) was reached again.
    Seen,
    /// [`KvCheckOptions::max_steps`] ran out.
    Budget,
}

/// Reads without a revision: each is placed, during the replay, at the first revision
/// where it may sit (real time) and its result matches.
struct Unpinned {
    /// Events, by invocation time.
    ev: Vec<usize>,
    /// Real-time bounds from pinned operations: the newest revision of one that
    /// returned before it was invoked, and the newest revision it may read before one
    /// invoked after it returned.
    lo: Vec<u64>,
    hi: Vec<u64>,
    at: Vec<Option<u64>>,
    /// Placements in the order made, to take back newest first.
    log: Vec<(u64, usize)>,
    /// The unplaced ones: by invocation order, by response time, by deadline.
    open: BTreeSet<usize>,
    open_by_ret: BTreeSet<(u64, usize)>,
    open_by_hi: BTreeSet<(u64, usize)>,
    /// XOR of the tags of the placed ones.
    hash: u128,
}

/// The search's state. Every table is proportional to the history (already in memory)
/// or to its revisions, which step 2 bounds by the writes; the memo, the one thing that
/// grows with the search, is bounded by the step budget.
struct Search<'a> {
    events: &'a [KvEvent],
    opts: &'a KvCheckOptions,
    first: u64,
    last: u64,
    /// Per revision in `first + 1..=last`: the acknowledged write that created it.
    writer: Vec<Option<usize>>,
    /// Per revision in `first..=last`: the pinned reads at it.
    reads_at: Vec<Vec<usize>>,
    /// `info` operations that may write, by invocation time: (event, the newest
    /// revision of an operation that returned before they were invoked).
    info: Vec<(usize, u64)>,
    used: Vec<bool>,
    used_hash: u128,
    /// Per revision in `first + 1..=last`: the `info` operation placed there.
    filled: Vec<Option<usize>>,
    /// Per revision: `(key, value)` a read saw with that mod revision (`None`: keys only).
    witnesses: HashMap<u64, Vec<(Bytes, Option<Bytes>)>>,
    choices: Vec<Choice>,
    model: Model,
    unpinned: Unpinned,
    /// Configurations (revision, model, `info` used, reads placed) at a choice that
    /// were explored and failed. Bounded by the step budget: one per choice reached.
    memo: HashSet<u128>,
    steps: u64,
    best: Option<Box<Failure>>,
}

const SALT_USED: u64 = 0x6a09_e667_f3bc_c908;
const SALT_PLACED: u64 = 0xbb67_ae85_84ca_a73b;
const SALT_REVISION: u64 = 0x3c6e_f372_fe94_f82b;

impl<'a> Search<'a> {
    fn idx(&self, revision: u64) -> usize {
        (revision - self.first) as usize
    }

    fn creator(&self, revision: u64) -> Option<usize> {
        if revision <= self.first {
            return None;
        }
        let i = self.idx(revision);
        let acknowledged = self.writer.get(i).copied().flatten();
        acknowledged.or_else(|| Some(self.info[self.filled.get(i).copied().flatten()?].0))
    }

    fn creator_text(&self, revision: u64) -> String {
        if revision <= self.first {
            return format!("revision {revision} is the initial state's");
        }
        match self.creator(revision) {
            Some(ev) => {
                let e = &self.events[ev];
                let how = if e.status == Status::Info {
                    " (outcome unknown, placed there by the search)"
                } else {
                    ""
                };
                format!("revision {revision} was created by {}{how}", e.describe())
            }
            None => format!("revision {revision} was created by no operation of the history"),
        }
    }

    /// Note a failure; keep the one that got furthest (the first of those).
    fn fail(&mut self, f: Box<Failure>) {
        if self.best.as_ref().is_none_or(|b| f.revision > b.revision) {
            self.best = Some(f);
        }
    }

    /// The failure of operation `ev` whose result differs from the model's `expected`
    /// at `revision`, naming the writers of the entries that differ.
    fn wrong_result(
        &self,
        ev: usize,
        revision: u64,
        expected: KvResult,
        writes: bool,
    ) -> Box<Failure> {
        let e = &self.events[ev];
        let observed = e.result.as_ref().expect("ok operations have results");
        let mut seen = Vec::new();
        observed.observed_mods(&e.op, &mut seen);
        let mut model = Vec::new();
        expected.observed_mods(&e.op, &mut model);
        let mut revs: Vec<u64> = seen
            .iter()
            .filter(|x| !model.contains(x))
            .chain(model.iter().filter(|x| !seen.contains(x)))
            .map(|(_, r)| *r)
            .collect();
        // The entries of the keys it names, as the model holds them: a wrong `prev` or
        // compare outcome comes from whoever wrote those.
        if let Some(keys) = point_keys(&e.op) {
            revs.extend(
                keys.iter()
                    .filter_map(|k| self.model.map.get(*k).map(|x| x.mod_revision)),
            );
        }
        revs.sort_unstable_by(|a, b| b.cmp(a));
        revs.dedup();
        revs.truncate(4);
        let mut ops = vec![ev];
        for c in revs.iter().filter_map(|r| self.creator(*r)) {
            if !ops.contains(&c) {
                ops.push(c);
            }
        }
        let place = if writes {
            format!(
                "it reports creating revision {revision}, but executed at revision {} the model \
                 returns {}",
                revision - 1,
                fmt_result(&expected)
            )
        } else {
            format!(
                "at revision {revision}, where its result places it, the model returns {}",
                fmt_result(&expected)
            )
        };
        let mut message = format!("{}; {place}", e.describe());
        if !revs.is_empty() {
            let who: Vec<String> = revs.iter().map(|r| self.creator_text(*r)).collect();
            message += &format!(". In the model, {}", who.join("; "));
        }
        Box::new(Failure {
            kind: KvViolationKind::WrongResult,
            revision,
            ops,
            expected: Some(expected),
            message,
        })
    }

    fn missing_write(&self, revision: u64) -> Box<Failure> {
        let mut ops = Vec::new();
        let mut message = format!(
            "revision {revision} was created by no operation of the history: no acknowledged \
             write reports it, and no write of unknown outcome could have made it there"
        );
        let near: Vec<String> = [revision - 1, revision + 1]
            .into_iter()
            .filter_map(|r| {
                let ev = self.creator(r).or_else(|| {
                    (r <= self.last)
                        .then(|| self.reads_at[self.idx(r)].first().copied())
                        .flatten()
                })?;
                ops.push(ev);
                Some(format!("{} (revision {r})", self.events[ev].describe()))
            })
            .collect();
        if !near.is_empty() {
            message += &format!("; around it: {}", near.join("; "));
        }
        Box::new(Failure {
            kind: KvViolationKind::MissingWrite,
            revision,
            ops,
            expected: None,
            message,
        })
    }

    fn unplaceable(&self, u: usize, revision: u64) -> Box<Failure> {
        let ev = self.unpinned.ev[u];
        Box::new(Failure {
            kind: KvViolationKind::Unplaceable,
            revision,
            ops: vec![ev],
            expected: None,
            message: format!(
                "{} reports no revision; real time places it at revision {} or later{}, and at \
                 no such revision (up to {revision}) does the model return that",
                self.events[ev].describe(),
                self.unpinned.lo[u],
                match self.unpinned.hi[u] {
                    u64::MAX => String::new(),
                    hi => format!(" but no later than {hi}"),
                }
            ),
        })
    }

    /// Execute the acknowledged write of `revision` and check its result.
    fn apply_write(&mut self, ev: usize, revision: u64) -> Result<(), Box<Failure>> {
        let e = &self.events[ev];
        let effect = eval(&self.model.map, revision - 1, &e.op);
        let observed = e.result.as_ref().expect("ok operations have results");
        if effect.changes.is_empty() || !observed.agrees_with(&effect.result) {
            return Err(self.wrong_result(ev, revision, effect.result, true));
        }
        let keep = !self.choices.is_empty();
        self.model.apply(revision, effect.changes, keep);
        Ok(())
    }

    fn place(&mut self, u: usize, revision: u64) {
        let e = &self.events[self.unpinned.ev[u]];
        let up = &mut self.unpinned;
        up.at[u] = Some(revision);
        up.log.push((revision, u));
        up.open.remove(&u);
        up.open_by_ret.remove(&(e.ret_ns, u));
        up.open_by_hi.remove(&(up.hi[u], u));
        up.hash ^= tag(SALT_PLACED, u);
    }

    /// Take back the current revision: the reads placed at it, then its write.
    fn retreat(&mut self) {
        let revision = self.model.revision;
        while let Some(&(r, u)) = self.unpinned.log.last() {
            if r < revision {
                break;
            }
            self.unpinned.log.pop();
            let ret = self.events[self.unpinned.ev[u]].ret_ns;
            let up = &mut self.unpinned;
            up.at[u] = None;
            up.open.insert(u);
            up.open_by_ret.insert((ret, u));
            up.open_by_hi.insert((up.hi[u], u));
            up.hash ^= tag(SALT_PLACED, u);
        }
        self.model.unapply();
    }

    /// Everything that happens at the current revision once its write is applied: the
    /// pinned reads there are checked, and the unplaced reads without revision that
    /// may sit there and match it are placed (in invocation order, each only once
    /// every read that returned before it was invoked is placed).
    fn settle(&mut self) -> Result<(), Box<Failure>> {
        let revision = self.model.revision;
        let pinned = self
            .reads_at
            .get(self.idx(revision))
            .map_or(&[][..], Vec::as_slice);
        for &ev in pinned {
            let e = &self.events[ev];
            let effect = eval(&self.model.map, revision, &e.op);
            let observed = e.result.as_ref().expect("ok operations have results");
            if !effect.changes.is_empty() || !observed.agrees_with(&effect.result) {
                return Err(self.wrong_result(ev, revision, effect.result, false));
            }
        }
        if self.unpinned.open.is_empty() {
            return Ok(());
        }
        let ready: Vec<usize> = self
            .unpinned
            .open
            .iter()
            .copied()
            .take_while(|&u| self.unpinned.lo[u] <= revision)
            .collect();
        // The earliest response among the unplaced reads invoked before.
        let mut open_ret = u64::MAX;
        for u in ready {
            let e = &self.events[self.unpinned.ev[u]];
            if open_ret >= e.call_ns {
                let effect = eval(&self.model.map, revision, &e.op);
                let observed = e.result.as_ref().expect("ok operations have results");
                if effect.changes.is_empty() && observed.agrees_with(&effect.result) {
                    self.place(u, revision);
                    continue;
                }
            }
            open_ret = open_ret.min(e.ret_ns);
        }
        match self.unpinned.open_by_hi.first() {
            Some(&(hi, u)) if hi <= revision => Err(self.unplaceable(u, revision)),
            _ => Ok(()),
        }
    }

    /// The `info` operations that may have created `revision`, most plausible first.
    fn candidates(&self, revision: u64) -> Vec<usize> {
        let witnesses = self.witnesses.get(&revision).map_or(&[][..], Vec::as_slice);
        // A read without revision that returned before an operation was invoked saw an
        // older revision than the one that operation created: it must be placed by now.
        let open_ret = self.unpinned.open_by_ret.first().map_or(u64::MAX, |x| x.0);
        let relevant = if revision > self.last {
            self.tail_relevant()
        } else {
            None
        };
        let mut seen: HashSet<&KvOp> = HashSet::new();
        let mut out: Vec<usize> = (0..self.info.len())
            .filter(|&i| {
                let (ev, lo) = self.info[i];
                let e = &self.events[ev];
                !self.used[i]
                    && lo < revision
                    && open_ret >= e.call_ns
                    && relevant
                        .as_ref()
                        .is_none_or(|keys| keys.iter().any(|k| may_write_key(&e.op, k)))
                    && witnesses.iter().all(|(k, v)| match v {
                        Some(v) => e.op.may_put(k, v),
                        None => keys_put(&e.op).contains(&k.as_slice()),
                    })
                    // Identical operations are interchangeable; the one invoked first
                    // constrains the rest least, so only it is tried.
                    && seen.insert(&e.op)
            })
            .collect();
        // An operation that timed out usually took effect soon after it was invoked, if
        // at all: try the most recently invoked first, so that old ones that never took
        // effect sink to the end (a heuristic: the order loses nothing).
        out.reverse();
        if revision > self.last && relevant.is_none() {
            // No write could be ruled out: try first those that change a key an unplaced
            // read depends on (a heuristic: the order loses nothing).
            let direct: Option<Vec<&[u8]>> = self
                .unpinned
                .open
                .iter()
                .map(|&u| point_keys(&self.events[self.unpinned.ev[u]].op))
                .try_fold(Vec::new(), |mut all, keys| {
                    all.extend(keys?);
                    Some(all)
                });
            if let Some(direct) = direct {
                out.sort_by_key(|&i| {
                    let op = &self.events[self.info[i].0].op;
                    !direct.iter().any(|k| may_write_key(op, k))
                });
            }
        }
        out
    }

    /// Past the newest revision observed, only unplaced reads without revision are left
    /// to satisfy, and a write can matter to them only by changing a key they read, or
    /// a key compared by a write that can (and so on): the keys of that closure. Any
    /// other write may be moved after all of these (it changes none of their keys, and
    /// an `info` write may take effect as late as it likes), where nothing needs it.
    /// That argument fails when revision numbers themselves are compared (a shifted
    /// revision could change a create or mod revision compare), and when a range is
    /// read: then every write may matter (`None`).
    fn tail_relevant(&self) -> Option<HashSet<&'a [u8]>> {
        let events: &'a [KvEvent] = self.events;
        let mut keys: HashSet<&'a [u8]> = HashSet::new();
        for &u in &self.unpinned.open {
            let op = &events[self.unpinned.ev[u]].op;
            if compares_revisions(op) {
                return None;
            }
            keys.extend(point_keys(op)?);
        }
        let mut taken = vec![false; self.info.len()];
        loop {
            let mut grew = false;
            for (i, &(ev, _)) in self.info.iter().enumerate() {
                let op = &events[ev].op;
                if self.used[i] || taken[i] || !keys.iter().any(|k| may_write_key(op, k)) {
                    continue;
                }
                taken[i] = true;
                if compares_revisions(op) {
                    return None;
                }
                if let KvOp::Txn { compare, .. } = op {
                    for c in compare {
                        grew |= keys.insert(c.key.as_slice());
                    }
                }
            }
            if !grew {
                return Some(keys);
            }
        }
    }

    /// Try the next candidates of the top choice until one fits: applied at the
    /// choice's revision, the reads there agree.
    fn advance_choice(&mut self) -> Result<(), Stop> {
        let top = self.choices.len() - 1;
        let revision = self.choices[top].revision;
        let mut last = None;
        while let Some(&c) = self.choices[top].candidates.get(self.choices[top].next) {
            self.choices[top].next += 1;
            self.steps += 1;
            if self.steps > self.opts.max_steps {
                return Err(Stop::Budget);
            }
            let ev = self.info[c].0;
            let effect = eval(&self.model.map, revision - 1, &self.events[ev].op);
            if effect.changes.is_empty() {
                // Where it changes nothing it cannot have created the revision.
                continue;
            }
            self.model.apply(revision, effect.changes, true);
            self.used[c] = true;
            self.used_hash ^= tag(SALT_USED, c);
            self.choices[top].current = Some(c);
            let i = self.idx(revision);
            self.filled[i] = Some(c);
            match self.settle() {
                Ok(()) => return Ok(()),
                Err(f) => {
                    last = Some(f);
                    self.undo_top_current();
                }
            }
        }
        Err(Stop::Failed(
            last.unwrap_or_else(|| self.missing_write(revision)),
        ))
    }

    /// Take back the top choice's current candidate (the model is at its revision).
    fn undo_top_current(&mut self) {
        let top = self.choices.last_mut().expect("a choice");
        if let Some(c) = top.current.take() {
            let revision = top.revision;
            self.used[c] = false;
            self.used_hash ^= tag(SALT_USED, c);
            let i = self.idx(revision);
            self.filled[i] = None;
            self.retreat();
        }
    }

    /// Go back to the newest choice with untried candidates and take the next one.
    /// `Ok(false)`: none is left.
    fn backtrack(&mut self) -> Result<bool, Stop> {
        while let Some(top) = self.choices.last() {
            let revision = top.revision;
            // Everything above the choice was an acknowledged write; take it back, then
            // the choice's own candidate.
            while self.model.revision > revision {
                self.retreat();
            }
            self.undo_top_current();
            match self.advance_choice() {
                Ok(()) => return Ok(true),
                Err(Stop::Failed(f)) => {
                    self.fail(f);
                    self.choices.pop();
                }
                Err(Stop::Seen) => {
                    self.choices.pop();
                }
                Err(Stop::Budget) => return Err(Stop::Budget),
            }
        }
        Ok(false)
    }

    /// One revision forward: the acknowledged write that created it (or, at a revision
    /// none claims, a new choice among the `info` operations), then what happens at it.
    /// On failure the model is left at the revision before (when it can go back).
    /// `Ok(true)`: the history is accounted for.
    fn forward(&mut self, revision: u64) -> Result<bool, Stop> {
        let tail = revision > self.last;
        if tail && self.unpinned.open.is_empty() {
            return Ok(true);
        }
        // Past the newest revision observed, only a read without revision still to be
        // placed can need more writes: `info` ones that nothing else saw.
        let writer = if tail {
            None
        } else {
            self.writer[self.idx(revision)]
        };
        if tail {
            // A write past the newest revision observed gives the keys it changes a
            // mod revision nobody observed: an unplaced read that saw a key at some mod
            // revision can only be placed while the key still has it.
            for &u in &self.unpinned.open {
                let e = &self.events[self.unpinned.ev[u]];
                let mut mods = Vec::new();
                e.result
                    .as_ref()
                    .expect("ok operations have results")
                    .observed_mods(&e.op, &mut mods);
                let stale = mods
                    .iter()
                    .any(|(k, m)| self.model.map.get(k).map(|x| x.mod_revision) != Some(*m));
                if stale {
                    return Err(Stop::Failed(self.unplaceable(u, revision - 1)));
                }
            }
        }
        let Some(ev) = writer else {
            let key = tag(SALT_REVISION, revision as usize)
                ^ self.model.hash
                ^ self.used_hash.rotate_left(1)
                ^ self.unpinned.hash.rotate_left(2);
            if !self.memo.insert(key) {
                return Err(Stop::Seen);
            }
            let candidates = self.candidates(revision);
            if tail && candidates.is_empty() {
                let u = *self.unpinned.open.first().expect("checked");
                return Err(Stop::Failed(self.unplaceable(u, revision - 1)));
            }
            self.choices.push(Choice {
                revision,
                candidates,
                next: 0,
                current: None,
            });
            return self.advance_choice().map(|()| false).inspect_err(|_| {
                // This choice ran out at once: nothing to come back to.
                self.choices.pop();
            });
        };
        self.apply_write(ev, revision).map_err(Stop::Failed)?;
        self.settle().map(|()| false).map_err(|f| {
            if !self.choices.is_empty() {
                self.retreat();
            }
            Stop::Failed(f)
        })
    }

    fn run(&mut self) -> Result<(), Stop> {
        self.settle().map_err(Stop::Failed)?;
        loop {
            let revision = self.model.revision + 1;
            let stop = match self.forward(revision) {
                Ok(true) => return Ok(()),
                Ok(false) => continue,
                Err(Stop::Budget) => return Err(Stop::Budget),
                Err(stop) => stop,
            };
            if let Stop::Failed(f) = stop {
                self.fail(f);
            }
            // Going back re-executes the revisions in between: they count.
            let back_to = self.choices.last().map_or(revision, |c| c.revision);
            self.steps += revision.saturating_sub(back_to);
            if self.steps > self.opts.max_steps {
                return Err(Stop::Budget);
            }
            if !self.backtrack()? {
                let best = self.best.clone().expect("a failure was noted");
                return Err(Stop::Failed(best));
            }
        }
    }
}

/// Whether `op` compares a create or mod revision.
fn compares_revisions(op: &KvOp) -> bool {
    match op {
        KvOp::Txn { compare, .. } => compare
            .iter()
            .any(|c| matches!(c.target, Target::Mod(_) | Target::Create(_))),
        _ => false,
    }
}

/// Whether `op` may change `key` (a put or delete of it, possibly in a range or a
/// transaction branch).
fn may_write_key(op: &KvOp, key: &[u8]) -> bool {
    match op {
        KvOp::Put { key: k, .. }
        | KvOp::Del {
            key: k, end: None, ..
        } => k == key,
        KvOp::Del {
            key: from,
            end: Some(end),
            ..
        } => key >= from.as_slice() && (end.as_slice() == [0] || key < end.as_slice()),
        KvOp::Txn {
            then, otherwise, ..
        } => then.iter().chain(otherwise).any(|o| may_write_key(o, key)),
        KvOp::Get { .. } | KvOp::Range { .. } => false,
    }
}

/// Operations `op` may put, by key.
fn keys_put(op: &KvOp) -> Vec<&[u8]> {
    match op {
        KvOp::Put { key, .. } => vec![key.as_slice()],
        KvOp::Txn {
            then, otherwise, ..
        } => then.iter().chain(otherwise).flat_map(keys_put).collect(),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------

fn violation(events: &[KvEvent], f: Failure) -> KvCheckError {
    KvCheckError::NotLinearizable(Box::new(KvViolation {
        kind: f.kind,
        revision: f.revision,
        events: f.ops.iter().map(|&i| events[i].clone()).collect(),
        ops: f.ops,
        expected: f.expected,
        message: f.message,
    }))
}

fn real_time_message(events: &[KvEvent], a: (usize, Pin), b: (usize, Pin)) -> String {
    let (ea, eb) = (&events[a.0], &events[b.0]);
    let what = |p: Pin| match p {
        Pin::Write(r) => format!("created revision {r}"),
        Pin::Read(r) => format!("read at revision {r}"),
        Pin::Unpinned => unreachable!(),
    };
    let head = match (a.1, b.1) {
        (Pin::Write(_), Pin::Read(_)) | (Pin::Read(_), Pin::Read(_)) => "stale read",
        (Pin::Write(_), Pin::Write(_)) => "revisions go backwards in real time",
        _ => "a read saw a revision before it was created",
    };
    format!(
        "{head}: {} {} and returned at {} ns, before {} was invoked at {} ns, which {}",
        ea.describe(),
        what(a.1),
        ea.ret_ns,
        eb.describe(),
        eb.call_ns,
        what(b.1)
    )
}

/// Check that `events` is linearizable with respect to the key-value model, starting
/// from `opts.initial`. See the [module documentation](super) for the method.
pub fn check_kv(events: &[KvEvent], opts: &KvCheckOptions) -> Result<KvCheckSummary, KvCheckError> {
    let first = opts.initial.revision;
    let mut summary = KvCheckSummary {
        events: events.len(),
        first_revision: first,
        ..KvCheckSummary::default()
    };
    let mut pinned: Vec<(usize, Pin)> = Vec::new();
    let mut unpinned = Vec::new();
    let mut info = Vec::new();
    let mut keys: HashSet<Bytes> = HashSet::new();
    let mut observed_max = (first, None);
    let mut witnesses: HashMap<u64, Vec<(Bytes, Option<Bytes>)>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        if e.ret_ns < e.call_ns {
            return Err(KvCheckError::Invalid(format!(
                "event {i} ({}) responds before it is invoked",
                e.describe()
            )));
        }
        match e.status {
            Status::Fail => {
                summary.failed_ops += 1;
                continue;
            }
            Status::Info if !e.op.may_write() => {
                summary.info_reads_dropped += 1;
                continue;
            }
            Status::Info => {
                summary.info_ops += 1;
                keys_of(&e.op, &mut keys);
                info.push(i);
                continue;
            }
            Status::Ok => {}
        }
        let Some(result) = &e.result else {
            return Err(KvCheckError::Invalid(format!(
                "event {i} ({}) is ok but has no result",
                e.describe()
            )));
        };
        keys_of(&e.op, &mut keys);
        let mut mods = Vec::new();
        result.observed_mods(&e.op, &mut mods);
        collect_witnesses(&e.op, result, &mut witnesses);
        for (k, m) in mods {
            keys.insert(k);
            if m > observed_max.0 {
                observed_max = (m, Some(i));
            }
        }
        match pin_of(result) {
            Pin::Unpinned => unpinned.push(i),
            p => {
                let r = match p {
                    Pin::Write(r) | Pin::Read(r) => r,
                    Pin::Unpinned => unreachable!(),
                };
                let bad = match p {
                    Pin::Write(r) => r <= first,
                    _ => r < first,
                };
                if bad {
                    return Err(violation(
                        events,
                        Failure {
                            kind: KvViolationKind::BadRevision,
                            revision: r,
                            ops: vec![i],
                            expected: None,
                            message: format!(
                                "{} reports revision {r}, but the history starts at revision \
                                 {first}",
                                e.describe()
                            ),
                        },
                    ));
                }
                if r > observed_max.0 {
                    observed_max = (r, Some(i));
                }
                pinned.push((i, p));
            }
        }
    }
    summary.keys = keys.len();
    summary.unpinned_reads = unpinned.len();

    // Every revision is created once.
    let mut writes: Vec<(u64, usize)> = pinned
        .iter()
        .filter_map(|&(i, p)| match p {
            Pin::Write(r) => Some((r, i)),
            _ => None,
        })
        .collect();
    writes.sort_unstable();
    if let Some(w) = writes.windows(2).find(|w| w[0].0 == w[1].0) {
        let (a, b) = (w[0].1, w[1].1);
        return Err(violation(
            events,
            Failure {
                kind: KvViolationKind::DuplicateRevision,
                revision: w[0].0,
                ops: vec![b, a],
                expected: None,
                message: format!(
                    "revision {} is reported as created by two writes: {} and {}",
                    w[0].0,
                    events[a].describe(),
                    events[b].describe()
                ),
            },
        ));
    }
    summary.writes = writes.len();
    summary.reads = pinned.len() - writes.len();
    let last = observed_max.0;
    summary.last_revision = last;
    // More revisions than writes that could have created them: some is missing. (This
    // also bounds the per-revision tables below by the history's size.)
    let span = last - first;
    if span > (writes.len() + info.len()) as u64 {
        let by = observed_max
            .1
            .expect("a revision above the first was observed");
        return Err(violation(
            events,
            Failure {
                kind: KvViolationKind::MissingWrite,
                revision: last,
                ops: vec![by],
                expected: None,
                message: format!(
                    "{} observed revision {last}, but only {} writes (acknowledged or of unknown \
                     outcome) could have created the {span} revisions after the initial {first}",
                    events[by].describe(),
                    writes.len() + info.len()
                ),
            },
        ));
    }

    // Real time: an operation that returned before another was invoked has a slot no
    // later than the other's.
    let mut by_ret: Vec<(u64, u64, usize, Pin)> = pinned
        .iter()
        .map(|&(i, p)| (events[i].ret_ns, slot(p), i, p))
        .collect();
    by_ret.sort_unstable_by_key(|x| (x.0, x.1));
    let mut running: Vec<(u64, usize, Pin)> = Vec::with_capacity(by_ret.len());
    for &(_, s, i, p) in &by_ret {
        let best = match running.last() {
            Some(&b) if b.0 >= s => b,
            _ => (s, i, p),
        };
        running.push(best);
    }
    let mut by_call: Vec<(u64, usize, Pin)> = pinned
        .iter()
        .map(|&(i, p)| (events[i].call_ns, i, p))
        .collect();
    by_call.sort_unstable_by_key(|x| (x.0, x.1));
    for &(call, i, p) in &by_call {
        let n = by_ret.partition_point(|x| x.0 < call);
        if let Some(&(s, a, pa)) = n.checked_sub(1).map(|k| &running[k]) {
            if s > slot(p) {
                return Err(violation(
                    events,
                    Failure {
                        kind: KvViolationKind::RealTimeOrder,
                        revision: match p {
                            Pin::Write(r) | Pin::Read(r) => r,
                            Pin::Unpinned => unreachable!(),
                        },
                        ops: vec![i, a],
                        expected: None,
                        message: real_time_message(events, (a, pa), (i, p)),
                    },
                ));
            }
        }
    }

    // Bounds for the search: the newest revision of a pinned operation that returned
    // before a time, and the oldest revision a read returning before a time may see.
    let rev_of = |p: Pin| match p {
        Pin::Write(r) | Pin::Read(r) => r,
        Pin::Unpinned => unreachable!(),
    };
    let mut pinned_by_ret: Vec<(u64, u64)> = by_ret.iter().map(|x| (x.0, rev_of(x.3))).collect();
    for i in 1..pinned_by_ret.len() {
        pinned_by_ret[i].1 = pinned_by_ret[i].1.max(pinned_by_ret[i - 1].1);
    }
    let mut pinned_by_call: Vec<(u64, u64)> = by_call
        .iter()
        .map(|&(call, _, p)| {
            let bound = match p {
                Pin::Write(r) => r - 1,
                Pin::Read(r) => r,
                Pin::Unpinned => unreachable!(),
            };
            (call, bound)
        })
        .collect();
    for i in (0..pinned_by_call.len().saturating_sub(1)).rev() {
        pinned_by_call[i].1 = pinned_by_call[i].1.min(pinned_by_call[i + 1].1);
    }
    // The newest revision a pinned operation that returned before `t` reports, and
    // the newest revision a read may see when it returned before `t`.
    let newest_before = |t: u64| -> u64 {
        let n = pinned_by_ret.partition_point(|x| x.0 < t);
        n.checked_sub(1)
            .map_or(first, |k| pinned_by_ret[k].1.max(first))
    };
    let oldest_after = |t: u64| -> u64 {
        let n = pinned_by_call.partition_point(|x| x.0 <= t);
        pinned_by_call.get(n).map_or(u64::MAX, |x| x.1)
    };
    info.sort_by_key(|&i| (events[i].call_ns, i));
    let info: Vec<(usize, u64)> = info
        .into_iter()
        .map(|i| (i, newest_before(events[i].call_ns)))
        .collect();
    // Reads without revision are placed in invocation order.
    unpinned.sort_by_key(|&i| (events[i].call_ns, i));
    let unpinned = Unpinned {
        lo: unpinned
            .iter()
            .map(|&i| newest_before(events[i].call_ns))
            .collect(),
        hi: unpinned
            .iter()
            .map(|&i| oldest_after(events[i].ret_ns))
            .collect(),
        at: vec![None; unpinned.len()],
        log: Vec::new(),
        open: (0..unpinned.len()).collect(),
        open_by_ret: unpinned
            .iter()
            .enumerate()
            .map(|(u, &i)| (events[i].ret_ns, u))
            .collect(),
        open_by_hi: unpinned
            .iter()
            .enumerate()
            .map(|(u, &i)| (oldest_after(events[i].ret_ns), u))
            .collect(),
        hash: 0,
        ev: unpinned,
    };

    let slots = (span + 1) as usize;
    // Revisions past the newest observed may be created by `info` writes only.
    let tail = info.len();
    let mut writer = vec![None; slots];
    for &(r, i) in &writes {
        writer[(r - first) as usize] = Some(i);
    }
    let mut reads_at = vec![Vec::new(); slots];
    for &(i, p) in &pinned {
        if let Pin::Read(r) = p {
            reads_at[(r - first) as usize].push(i);
        }
    }
    let branching = !info.is_empty();
    let mut search = Search {
        events,
        opts,
        first,
        last,
        writer,
        reads_at,
        used: vec![false; info.len()],
        used_hash: 0,
        info,
        filled: vec![None; slots + tail],
        witnesses,
        choices: Vec::new(),
        model: Model::new(&opts.initial, branching),
        unpinned,
        memo: HashSet::new(),
        steps: 0,
        best: None,
    };
    let outcome = search.run();
    summary.steps = search.steps;
    match outcome {
        Ok(()) => {
            summary.info_applied = search.filled.iter().flatten().count();
            Ok(summary)
        }
        Err(Stop::Budget) => Err(KvCheckError::Unknown(KvUnknown {
            steps: search.steps,
            limit: opts.max_steps,
            revision: search.best.as_ref().map_or(first, |b| b.revision),
            info_ops: search.info.len(),
        })),
        Err(Stop::Failed(mut f)) => {
            match search.info.len() {
                0 => {}
                1 => {
                    f.message += " (whether or where the operation of unknown outcome took effect)"
                }
                n => {
                    f.message += &format!(
                        " (under every placement of the {n} operations of unknown outcome)"
                    )
                }
            }
            Err(violation(events, *f))
        }
        Err(Stop::Seen) => unreachable!("the search goes back on a configuration seen before"),
    }
}

/// Every `(key, value)` a result shows with its mod revision: whoever created that
/// revision put exactly that.
fn collect_witnesses(
    op: &KvOp,
    result: &KvResult,
    out: &mut HashMap<u64, Vec<(Bytes, Option<Bytes>)>>,
) {
    match (op, result) {
        (
            KvOp::Get { key },
            KvResult::Get {
                value: Some(v),
                mod_revision: Some(m),
                ..
            },
        ) => out
            .entry(*m)
            .or_default()
            .push((key.clone(), Some(v.clone()))),
        (KvOp::Range { keys_only, .. }, KvResult::Range { entries, .. }) => {
            for (k, v, m) in entries {
                let value = (!keys_only).then(|| v.clone());
                out.entry(*m).or_default().push((k.clone(), value));
            }
        }
        (
            KvOp::Txn {
                then, otherwise, ..
            },
            KvResult::Txn {
                succeeded, results, ..
            },
        ) => {
            let branch = if *succeeded { then } else { otherwise };
            for (o, r) in branch.iter().zip(results) {
                collect_witnesses(o, r, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histories_may_start_from_a_given_store() {
        let kv = |op: KvOp, call, ret, result| KvEvent {
            client: 1,
            op,
            call_ns: call,
            ret_ns: ret,
            status: Status::Ok,
            result: Some(result),
        };
        let get = KvOp::Get { key: "k".into() };
        let put = KvOp::Put {
            key: "k".into(),
            value: "w".into(),
            prev_kv: true,
        };
        let events = vec![
            kv(
                get.clone(),
                0,
                1,
                KvResult::Get {
                    value: Some("v".into()),
                    mod_revision: Some(3),
                    version: 2,
                    revision: Some(5),
                },
            ),
            kv(
                put,
                2,
                3,
                KvResult::Put {
                    revision: 6,
                    prev: Some(Some("v".into())),
                },
            ),
        ];
        let opts = KvCheckOptions {
            initial: KvInitial {
                revision: 5,
                entries: vec![(
                    "k".into(),
                    Entry {
                        value: "v".into(),
                        create_revision: 2,
                        mod_revision: 3,
                        version: 2,
                    },
                )],
            },
            ..KvCheckOptions::default()
        };
        let s = check_kv(&events, &opts).unwrap();
        assert_eq!((s.first_revision, s.last_revision), (5, 6));
        // From an empty store the same history is wrong.
        assert!(check_kv(&events, &KvCheckOptions::default()).is_err());
    }

    #[test]
    fn pins_follow_the_results() {
        assert_eq!(
            pin_of(&KvResult::Put {
                revision: 4,
                prev: None
            }),
            Pin::Write(4)
        );
        assert_eq!(
            pin_of(&KvResult::Del {
                deleted: 0,
                revision: 4,
                prev: None
            }),
            Pin::Read(4)
        );
        assert_eq!(
            pin_of(&KvResult::Get {
                value: None,
                mod_revision: None,
                version: 0,
                revision: None
            }),
            Pin::Unpinned
        );
        let txn = |results, revision| KvResult::Txn {
            succeeded: true,
            results,
            revision,
        };
        assert_eq!(
            pin_of(&txn(
                vec![
                    KvResult::Range {
                        entries: vec![],
                        revision: 4,
                        count: None,
                        more: None
                    },
                    KvResult::Put {
                        revision: 5,
                        prev: None
                    }
                ],
                None
            )),
            Pin::Write(5)
        );
        assert_eq!(pin_of(&txn(vec![], Some(7))), Pin::Read(7));
        assert_eq!(pin_of(&txn(vec![], None)), Pin::Unpinned);
        assert!(slot(Pin::Write(3)) < slot(Pin::Read(3)));
        assert!(slot(Pin::Read(3)) < slot(Pin::Write(4)));
    }
}
