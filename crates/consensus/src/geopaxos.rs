//! GeoPaxos's timestamp order (paper 004 §II-B and its reference [16]): how a replica
//! turns the decided logs of several serializers into an execution order that is the
//! same, for every pair of conflicting operations, at every replica, without waiting
//! for serializers an operation does not involve.
//!
//! # The setting
//!
//! A GeoPaxos deployment has serializers `0..S` (one per replica in the paper, each a
//! Paxos group whose acceptors sit in different regions). An operation `o` names the
//! serializers that must order it, `dst(o)` (psite: read-one/write-all over the
//! objects it touches, §III-A), and is decided once in the log of each of them. Every
//! replica learns every serializer's log, in log order; it feeds each decided entry to
//! a [`TimestampMerge`], which says when an operation may execute.
//!
//! # Timestamps
//!
//! A log entry carries a *hint*, the counter its serializer's leader proposed (its
//! Lamport clock: one more than the largest counter it has seen anywhere, see
//! [`TimestampMerge::clock`]). Because the hint is part of the decided value, every
//! replica reads the same hints, but a leader change may decide hints out of order, so
//! the merge does not trust them; it derives each entry's timestamp from the log alone:
//!
//! ```text
//! c(g, 0) = 0,   c(g, i) = max(hint(g, i), c(g, i-1) + 1),   τ(g, i) = (c(g, i), g)
//! ```
//!
//! Timestamps are pairs compared lexicographically: unique (the serializer id breaks
//! ties between logs) and strictly increasing along each log. An operation's *final*
//! timestamp is `T(o) = max { τ of o's first entry in L_g | g ∈ dst(o) }` (the paper's
//! "largest of its serializers'"). A later entry of an operation in a log that already
//! holds one (a resubmission by a replica that thought the first was lost) is only a
//! clock tick there.
//!
//! # The execution rule
//!
//! A replica executes `o` as soon as
//!
//! - **R1** every `g ∈ dst(o)` has delivered an entry of `o` (so `T(o)` is known);
//! - **R2** every `g ∈ dst(o)` has delivered an entry with `τ ≥ T(o)` (its *frontier*
//!   has reached `T(o)`: since timestamps grow along a log, every entry of `g` with a
//!   smaller timestamp is then delivered);
//! - **R3** every other unexecuted operation `o'` with an entry of timestamp `< T(o)`
//!   in the log of some `g ∈ dst(o)` has a known final timestamp `T(o') > T(o)`.
//!
//! **Claim 1 (conflicting operations execute in one order everywhere).** Let `o` and
//! `o'` share a serializer `g` and `T(o') < T(o)`. Then `o'`'s entry in `L_g` has
//! `τ ≤ T(o') < T(o)`; when `o` executes, R2 says that entry is delivered, and R3 says
//! `o'` has executed already (its final is not `> T(o)`). So at every replica `o'`
//! executes before `o`: conflicting operations run in the order of their final
//! timestamps. Operations that share no serializer access disjoint objects or only
//! read a common one (a write involves every serializer of its object, §III-A), so
//! they commute and their order may differ between replicas.
//!
//! **Claim 2 (real time).** If `o` executed (and was answered) before `o'` was
//! submitted, and they share `g`, then `o'`'s entry in `L_g` was decided after the
//! entry with `τ ≥ T(o)` that R2 saw (a Paxos leader numbers a new proposal above every
//! instance decided before it), so `T(o') ≥ τ_g(o') > T(o)` and `o'` executes after
//! `o` everywhere. With Claim 1 this makes the histories linearizable.
//!
//! **Claim 3 (liveness).** Among complete unexecuted operations, the one with the
//! smallest final timestamp satisfies R3 once every operation with an entry below it
//! is complete, and R2 once each of its serializers decides one more entry. So two
//! things keep the merge moving: a serializer whose frontier is below a final
//! timestamp that waits on it gets a *clock* entry ([`Entry::Clock`], proposed by its
//! leader when [`TimestampMerge::wanted_clock`] asks for one; the Lamport hint puts it
//! past the waiting timestamp), and an operation missing from some of its
//! serializers (its submitter crashed half-way) is submitted to them again by their
//! leaders ([`TimestampMerge::stalled`]); a duplicate is harmless because only the
//! first entry of an operation in a log counts.
//!
//! The merge itself is pure bookkeeping: no clock, no I/O; a replica learns which
//! operation to execute next from [`TimestampMerge::pop_ready`]. A planted bug
//! ([`MergeBugs`]) drops R2 and R3, which is what the tests' controls must catch.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use thiserror::Error;

/// A serializer's index, `0..S`.
pub type SerializerId = u16;

/// At most this many serializers (a [`SerializerSet`] is a 32-bit mask).
pub const SERIALIZERS_MAX: usize = 32;

/// The largest hint the merge takes (2^62). A leader's clock grows by one per entry
/// it learns, so no correct leader proposes more; a larger hint (a faulty or forged
/// entry) counts as no hint, so that a log's counters never overflow.
pub const HINT_MAX: u64 = 1 << 62;

/// A GeoPaxos timestamp: `(counter, serializer)`, compared lexicographically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Timestamp {
    pub counter: u64,
    pub serializer: SerializerId,
}

impl Timestamp {
    /// Smaller than every timestamp an entry can get (counters start at 1).
    pub const ZERO: Timestamp = Timestamp {
        counter: 0,
        serializer: 0,
    };
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, s{})", self.counter, self.serializer)
    }
}

/// A set of serializers (bit `g` for serializer `g`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SerializerSet(pub u32);

impl SerializerSet {
    pub const EMPTY: SerializerSet = SerializerSet(0);

    /// `{g}`.
    pub fn single(g: SerializerId) -> SerializerSet {
        debug_assert!((g as usize) < SERIALIZERS_MAX);
        SerializerSet(1u32 << g)
    }

    /// All of `0..n`.
    pub fn all(n: usize) -> SerializerSet {
        debug_assert!(n <= SERIALIZERS_MAX);
        if n >= 32 {
            SerializerSet(u32::MAX)
        } else {
            SerializerSet((1u32 << n) - 1)
        }
    }

    pub fn contains(self, g: SerializerId) -> bool {
        (g as usize) < SERIALIZERS_MAX && self.0 & (1u32 << g) != 0
    }

    pub fn insert(&mut self, g: SerializerId) {
        self.0 |= 1u32 << g;
    }

    pub fn union(self, other: SerializerSet) -> SerializerSet {
        SerializerSet(self.0 | other.0)
    }

    pub fn intersects(self, other: SerializerSet) -> bool {
        self.0 & other.0 != 0
    }

    pub fn is_subset_of(self, other: SerializerSet) -> bool {
        self.0 & !other.0 == 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The members in ascending order.
    pub fn iter(self) -> impl Iterator<Item = SerializerId> {
        (0..SERIALIZERS_MAX as u16).filter(move |&g| self.contains(g))
    }
}

/// One decided entry of a serializer's log, as the merge sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Entry<K, V> {
    /// An operation `op` for the serializers `dst`, with its value (what executes) and
    /// the counter the serializer's leader proposed.
    Op {
        op: K,
        dst: SerializerSet,
        hint: u64,
        value: V,
    },
    /// A clock entry: it only moves the serializer's timestamp past `hint`.
    Clock { hint: u64 },
}

impl<K, V> Entry<K, V> {
    /// The hint the entry carries.
    pub fn hint(&self) -> u64 {
        match self {
            Entry::Op { hint, .. } | Entry::Clock { hint } => *hint,
        }
    }

    /// The entry as a serializer's leader proposes it: stamped with the leader's
    /// Lamport clock `clock` as its hint, never a smaller one than it carries.
    pub fn stamped(mut self, clock: u64) -> Entry<K, V> {
        match &mut self {
            Entry::Op { hint, .. } | Entry::Clock { hint } => *hint = (*hint).max(clock),
        }
        self
    }
}

/// An operation the replica may execute now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ready<K, V> {
    pub op: K,
    pub dst: SerializerSet,
    pub timestamp: Timestamp,
    pub value: V,
}

/// An operation some of whose serializers have not ordered it (see
/// [`TimestampMerge::stalled`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stalled<'a, K, V> {
    pub op: &'a K,
    pub dst: SerializerSet,
    pub missing: SerializerSet,
    pub value: &'a V,
}

/// What the merge refuses (the caller fed it something no correct log holds).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MergeError {
    #[error("serializer {serializer} does not exist (the merge has {serializers})")]
    UnknownSerializer {
        serializer: SerializerId,
        serializers: usize,
    },
    #[error("serializer {serializer}: position {got} delivered, {expected} expected")]
    OutOfOrder {
        serializer: SerializerId,
        expected: u64,
        got: u64,
    },
    #[error("a merge needs 1 to {SERIALIZERS_MAX} serializers, not {0}")]
    Serializers(usize),
}

/// Planted bugs for the controls (never on outside tests and the simulator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeBugs {
    /// Execute an operation as soon as its final timestamp is known (R1 only): R2 and
    /// R3 are skipped, so an operation with a smaller timestamp may still arrive.
    pub execute_before_safe: bool,
    /// Skip R2 only: do not wait for the frontiers.
    pub skip_frontier: bool,
    /// Skip R3 only: do not wait for earlier entries whose final is unknown or smaller.
    pub skip_earlier_entries: bool,
}

/// Counters of a merge.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeStats {
    /// Operations handed out by `pop_ready`.
    pub executed: u64,
    /// ... of which had more than one serializer (the only ones that synchronise).
    pub executed_multi: u64,
    /// Entries of each kind delivered.
    pub op_entries: u64,
    pub clock_entries: u64,
    /// Entries of an operation in a log that already held one (within the log's window,
    /// [`TimestampMerge::with_remember`]: resubmitted duplicates, executed or not), and
    /// entries in a log outside the operation's `dst`: both count as clock ticks.
    pub duplicate_entries: u64,
    pub foreign_entries: u64,
}

/// Per serializer: where its log stands.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Log<K: Ord> {
    /// The next position the merge expects.
    next: u64,
    /// The timestamp of the last entry delivered (`ZERO` before the first).
    frontier: Timestamp,
    /// Unexecuted operations with an entry in this log, by that entry's timestamp.
    waiting: BTreeMap<Timestamp, K>,
    /// The part of `waiting` whose operations are not complete yet (final timestamp
    /// unknown): what blocks R3 regardless of the timestamp it is compared with.
    incomplete: BTreeMap<Timestamp, K>,
    /// The operations of this log's last `remember_max` operation entries (in `dst`),
    /// oldest first, and as a set: a later entry of one of them here is a duplicate.
    /// Kept per log, by position, so that every replica forgets the same ones at the
    /// same point of the log, whatever order it executes in.
    seen: BTreeSet<K>,
    seen_order: VecDeque<K>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Pending<V> {
    dst: SerializerSet,
    /// The first entry's timestamp in each serializer of `dst` delivered so far.
    stamps: BTreeMap<SerializerId, Timestamp>,
    value: V,
}

impl<V> Pending<V> {
    fn final_timestamp(&self) -> Option<Timestamp> {
        if self.stamps.len() == self.dst.len() {
            self.stamps.values().copied().max()
        } else {
            None
        }
    }
}

/// The merge at one replica (see the module documentation for the rule and its proof).
///
/// It serializes (serde) with everything it holds: a checkpoint stores it next to the
/// state it describes (per serializer, the next position expected and the operations
/// delivered but not executed), so a replica restored from it continues the same way.
/// Planted bugs are not serialized.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TimestampMerge<K: Ord, V> {
    logs: Vec<Log<K>>,
    pending: BTreeMap<K, Pending<V>>,
    /// Complete pending operations by final timestamp.
    complete: BTreeMap<Timestamp, K>,
    /// Operation entries each log remembers for duplicate detection ([`Log::seen`]).
    remember_max: usize,
    /// The largest counter seen in any log.
    clock: u64,
    #[serde(skip)]
    bugs: MergeBugs,
    stats: MergeStats,
}

impl<K: Ord + Clone + std::fmt::Debug, V: Clone> TimestampMerge<K, V> {
    /// A merge of `serializers` logs, each starting at position 0.
    pub fn new(serializers: usize) -> Result<Self, MergeError> {
        if serializers == 0 || serializers > SERIALIZERS_MAX {
            return Err(MergeError::Serializers(serializers));
        }
        Ok(TimestampMerge {
            logs: (0..serializers)
                .map(|_| Log {
                    next: 0,
                    frontier: Timestamp::ZERO,
                    waiting: BTreeMap::new(),
                    incomplete: BTreeMap::new(),
                    seen: BTreeSet::new(),
                    seen_order: VecDeque::new(),
                })
                .collect(),
            pending: BTreeMap::new(),
            complete: BTreeMap::new(),
            remember_max: 1 << 16,
            clock: 0,
            bugs: MergeBugs::default(),
            stats: MergeStats::default(),
        })
    }

    /// How many operation entries each log remembers for duplicate detection (default
    /// 2^16). A duplicate entry further behind in its log than that is taken for a new
    /// operation, at every replica alike (the window is a stretch of the log, the same
    /// everywhere; an earlier window of executed operations forgot them in execution
    /// order, which differs between replicas for operations that share no
    /// serializer). Taken for new, it is stalled in its other serializers, ordered
    /// there again by their leaders, and executes again; the replica's deduplication
    /// of writes by request id answers a write's second copy from the first.
    pub fn with_remember(mut self, n: usize) -> Self {
        self.remember_max = n.max(1);
        self
    }

    /// Plants bugs (tests and the simulator only).
    pub fn with_bugs(mut self, bugs: MergeBugs) -> Self {
        self.bugs = bugs;
        self
    }

    pub fn serializers(&self) -> usize {
        self.logs.len()
    }

    /// The next position the merge expects from serializer `g`.
    pub fn next_position(&self, g: SerializerId) -> u64 {
        self.logs[g as usize].next
    }

    /// The timestamp of `g`'s last delivered entry.
    pub fn frontier(&self, g: SerializerId) -> Timestamp {
        self.logs[g as usize].frontier
    }

    /// The largest counter in any delivered entry: a serializer leader proposes
    /// `clock() + 1` (its Lamport clock, after what it has learned).
    pub fn clock(&self) -> u64 {
        self.clock
    }

    pub fn stats(&self) -> &MergeStats {
        &self.stats
    }

    /// Operations delivered somewhere but not executed yet.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether `op` was delivered and has not executed yet.
    pub fn is_pending(&self, op: &K) -> bool {
        self.pending.contains_key(op)
    }

    /// Feeds serializer `g`'s decided entry at `position` (positions start at 0 and
    /// come in order per serializer).
    pub fn on_entry(
        &mut self,
        g: SerializerId,
        position: u64,
        entry: Entry<K, V>,
    ) -> Result<(), MergeError> {
        let serializers = self.logs.len();
        let log = self
            .logs
            .get_mut(g as usize)
            .ok_or(MergeError::UnknownSerializer {
                serializer: g,
                serializers,
            })?;
        if position != log.next {
            return Err(MergeError::OutOfOrder {
                serializer: g,
                expected: log.next,
                got: position,
            });
        }
        let hint = entry.hint();
        // A hint above HINT_MAX comes from no correct leader (a clock that ticks once
        // per entry never gets there) and is ignored, identically everywhere: so
        // counters never overflow, whatever a faulty peer got decided.
        let hint = if hint > HINT_MAX { 0 } else { hint };
        let counter = hint.max(log.frontier.counter + 1);
        let ts = Timestamp {
            counter,
            serializer: g,
        };
        log.next += 1;
        log.frontier = ts;
        self.clock = self.clock.max(counter);
        match entry {
            Entry::Clock { .. } => self.stats.clock_entries += 1,
            Entry::Op { op, dst, value, .. } => {
                self.stats.op_entries += 1;
                let all = SerializerSet::all(serializers);
                if !dst.contains(g) || !dst.is_subset_of(all) {
                    self.stats.foreign_entries += 1;
                } else if self.logs[g as usize].seen.contains(&op) {
                    self.stats.duplicate_entries += 1;
                } else {
                    let max = self.remember_max;
                    let log = &mut self.logs[g as usize];
                    log.seen.insert(op.clone());
                    log.seen_order.push_back(op.clone());
                    while log.seen_order.len() > max {
                        if let Some(old) = log.seen_order.pop_front() {
                            log.seen.remove(&old);
                        }
                    }
                    let p = self.pending.entry(op.clone()).or_insert_with(|| Pending {
                        dst,
                        stamps: BTreeMap::new(),
                        value,
                    });
                    if p.dst != dst || p.stamps.contains_key(&g) {
                        // A resubmission with another dst is a new operation to the
                        // submitter (it carries a new id); the same id with another dst
                        // cannot come from a correct replica: a clock tick either way.
                        self.stats.duplicate_entries += 1;
                    } else {
                        p.stamps.insert(g, ts);
                        self.logs[g as usize].waiting.insert(ts, op.clone());
                        match p.final_timestamp() {
                            Some(t) => {
                                // Complete: its other entries no longer block anyone
                                // for want of a final timestamp.
                                for (g2, ts2) in &p.stamps {
                                    self.logs[*g2 as usize].incomplete.remove(ts2);
                                }
                                self.complete.insert(t, op);
                            }
                            None => {
                                self.logs[g as usize].incomplete.insert(ts, op);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether complete operation `op` with final timestamp `t` may execute now (R2, R3).
    fn is_safe(&self, op: &K, t: Timestamp) -> bool {
        if self.bugs.execute_before_safe {
            return true;
        }
        let p = &self.pending[op];
        for g in p.dst.iter() {
            let log = &self.logs[g as usize];
            if log.frontier < t && !self.bugs.skip_frontier {
                return false;
            }
            if self.bugs.skip_earlier_entries {
                continue;
            }
            for (_, other) in log.waiting.range(..t) {
                if other == op {
                    continue;
                }
                match self.pending[other].final_timestamp() {
                    Some(t2) if t2 > t => {}
                    _ => return false,
                }
            }
        }
        true
    }

    /// The smallest complete operation that may execute now, found without
    /// [`Self::is_safe`]'s scan of every earlier entry. Complete operations are taken
    /// in final-timestamp order; one that cannot run *blocks* the serializers of its
    /// `dst` for every later one (it waits there with an entry below their final
    /// timestamps and a final timestamp that is not larger: R3 fails). An operation
    /// none of whose serializers is blocked is safe exactly when each of them has its
    /// frontier at its final timestamp (R2) and no entry of an incomplete operation
    /// below it (R3: an earlier entry of a complete operation would belong to one
    /// taken before, which blocked that serializer). The same answer as trying
    /// `is_safe` on each in order, in time proportional to the operations passed
    /// over.
    fn first_safe(&self) -> Option<(Timestamp, K)> {
        let all = SerializerSet::all(self.logs.len());
        let mut blocked = SerializerSet::EMPTY;
        for (t, op) in &self.complete {
            if blocked == all {
                return None;
            }
            let dst = self.pending[op].dst;
            if dst.0 & blocked.0 == 0 {
                let safe = dst.iter().all(|g| {
                    let log = &self.logs[g as usize];
                    log.frontier >= *t
                        && log
                            .incomplete
                            .first_key_value()
                            .is_none_or(|(first, _)| first > t)
                });
                if safe {
                    return Some((*t, op.clone()));
                }
            }
            blocked = blocked.union(dst);
        }
        None
    }

    /// The next operation to execute, if one may execute now; the caller executes it
    /// before asking again. Among the operations that may, the one with the smallest
    /// final timestamp.
    pub fn pop_ready(&mut self) -> Option<Ready<K, V>> {
        let planted = self.bugs.execute_before_safe
            || self.bugs.skip_frontier
            || self.bugs.skip_earlier_entries;
        let (t, op) = if planted {
            // The planted bugs weaken `is_safe` rule by rule: tried one by one.
            self.complete
                .iter()
                .find(|(t, op)| self.is_safe(op, **t))
                .map(|(t, op)| (*t, op.clone()))?
        } else {
            let found = self.first_safe();
            debug_assert_eq!(
                found,
                self.complete
                    .iter()
                    .find(|(t, op)| self.is_safe(op, **t))
                    .map(|(t, op)| (*t, op.clone())),
                "the fast search and the rule disagree"
            );
            found?
        };
        self.complete.remove(&t);
        let p = self.pending.remove(&op).expect("complete implies pending");
        for (g, ts) in &p.stamps {
            self.logs[*g as usize].waiting.remove(ts);
        }
        self.stats.executed += 1;
        if p.dst.len() > 1 {
            self.stats.executed_multi += 1;
        }
        Some(Ready {
            op,
            dst: p.dst,
            timestamp: t,
            value: p.value,
        })
    }

    /// The counter serializer `g`'s log must reach for a waiting operation to execute,
    /// if it is behind one: its leader proposes a clock entry with a hint at least
    /// this when nothing else is on the way. `None` when `g` holds nothing back.
    pub fn wanted_clock(&self, g: SerializerId) -> Option<u64> {
        let frontier = self.logs.get(g as usize)?.frontier;
        // By final timestamp, newest first: the first of `g` has the largest counter.
        self.complete
            .range((Bound::Excluded(frontier), Bound::Unbounded))
            .rev()
            .find(|(_, op)| self.pending[*op].dst.contains(g))
            .map(|(t, _)| t.counter)
    }

    /// Operations missing from some of their serializers (their submitter stopped
    /// half-way). A serializer's leader that has an operation listed here for a while
    /// submits it again (the first entry counts, so a duplicate is harmless).
    pub fn stalled(&self) -> impl Iterator<Item = Stalled<'_, K, V>> + '_ {
        self.pending.iter().filter_map(|(op, p)| {
            let have = p.stamps.keys().fold(SerializerSet::EMPTY, |mut s, g| {
                s.insert(*g);
                s
            });
            let missing = SerializerSet(p.dst.0 & !have.0);
            (!missing.is_empty()).then_some(Stalled {
                op,
                dst: p.dst,
                missing,
                value: &p.value,
            })
        })
    }

    /// Consistency of the bookkeeping (O(pending)).
    pub fn invariants(&self) {
        for l in &self.logs {
            assert_eq!(
                l.seen.len(),
                l.seen_order.len(),
                "a log's window and its order"
            );
            assert!(l.seen.len() <= self.remember_max, "a log's window too long");
        }
        for (op, p) in &self.pending {
            assert!(!p.dst.is_empty(), "pending {op:?} with empty dst");
            for (g, ts) in &p.stamps {
                assert!(p.dst.contains(*g), "{op:?}: stamp outside dst");
                assert_eq!(ts.serializer, *g);
                assert!(*ts <= self.logs[*g as usize].frontier);
                assert_eq!(self.logs[*g as usize].waiting.get(ts), Some(op));
            }
            if let Some(t) = p.final_timestamp() {
                assert_eq!(self.complete.get(&t), Some(op), "{op:?} not in complete");
            }
        }
        for (t, op) in &self.complete {
            assert_eq!(self.pending[op].final_timestamp(), Some(*t));
        }
        let waiting: usize = self.logs.iter().map(|l| l.waiting.len()).sum();
        let stamps: usize = self.pending.values().map(|p| p.stamps.len()).sum();
        assert_eq!(waiting, stamps, "waiting entries and stamps disagree");
        for l in &self.logs {
            for (ts, op) in &l.incomplete {
                assert_eq!(
                    l.waiting.get(ts),
                    Some(op),
                    "an incomplete entry not waiting"
                );
                assert!(
                    self.pending[op].final_timestamp().is_none(),
                    "{op:?} complete but listed incomplete"
                );
            }
        }
        let incomplete: usize = self.logs.iter().map(|l| l.incomplete.len()).sum();
        let of_incomplete: usize = self
            .pending
            .values()
            .filter(|p| p.final_timestamp().is_none())
            .map(|p| p.stamps.len())
            .sum();
        assert_eq!(
            incomplete, of_incomplete,
            "incomplete entries and stamps disagree"
        );
        for l in &self.logs {
            assert!(l.frontier.counter <= self.clock);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(op: u32, dst: &[SerializerId], hint: u64) -> Entry<u32, &'static str> {
        let mut s = SerializerSet::EMPTY;
        for g in dst {
            s.insert(*g);
        }
        Entry::Op {
            op,
            dst: s,
            hint,
            value: "v",
        }
    }

    #[test]
    fn a_single_serializer_operation_executes_at_once() {
        let mut m = TimestampMerge::<u32, &str>::new(2).unwrap();
        m.on_entry(0, 0, op(1, &[0], 1)).unwrap();
        let r = m.pop_ready().unwrap();
        assert_eq!(r.op, 1);
        assert_eq!(
            r.timestamp,
            Timestamp {
                counter: 1,
                serializer: 0
            }
        );
        assert!(m.pop_ready().is_none());
        m.invariants();
    }

    #[test]
    fn a_hint_no_correct_leader_proposes_is_ignored_and_counters_never_overflow() {
        // Fuzzing finding 3: a decided hint near u64::MAX made the next entry of its
        // log overflow (`frontier + 1`), and the replicas' clocks with it.
        let mut m = TimestampMerge::<u32, &str>::new(1).unwrap();
        m.on_entry(0, 0, op(1, &[0], 7)).unwrap();
        m.on_entry(0, 1, op(2, &[0], u64::MAX)).unwrap();
        m.on_entry(0, 2, Entry::Clock { hint: HINT_MAX + 1 })
            .unwrap();
        m.on_entry(0, 3, op(3, &[0], HINT_MAX)).unwrap();
        m.on_entry(0, 4, op(4, &[0], 0)).unwrap();
        let counters: Vec<(u32, u64)> = std::iter::from_fn(|| m.pop_ready())
            .map(|r| (r.op, r.timestamp.counter))
            .collect();
        // Each entry above HINT_MAX counts as no hint (one more than the last); one at
        // HINT_MAX is taken.
        assert_eq!(
            counters,
            vec![(1, 7), (2, 8), (3, HINT_MAX), (4, HINT_MAX + 1)]
        );
        assert_eq!(m.clock(), HINT_MAX + 1);
        m.invariants();
    }

    /// Replicas that learn the logs in different interleavings execute operations
    /// that share no serializer in different orders. The window of entries that tells a
    /// late duplicate from a new operation is a stretch of each log, so every replica
    /// judges a duplicate alike; it was the last operations executed, which differ.
    #[test]
    fn a_late_duplicate_is_judged_alike_whatever_the_execution_order() {
        let log0 = [
            op(1, &[0], 1),
            op(2, &[0], 2),
            op(3, &[0], 3),
            op(1, &[0], 4),
        ];
        let log1 = [op(7, &[1], 1), op(8, &[1], 2), op(9, &[1], 3)];
        let executed = |interleave: bool| {
            let mut m = TimestampMerge::<u32, &str>::new(2)
                .unwrap()
                .with_remember(3);
            let steps: Vec<(u16, usize)> = if interleave {
                vec![(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2), (0, 3)]
            } else {
                vec![(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2)]
            };
            let mut order = Vec::new();
            for (g, i) in steps {
                let e = if g == 0 { &log0[i] } else { &log1[i] };
                m.on_entry(g, i as u64, e.clone()).unwrap();
                order.extend(std::iter::from_fn(|| m.pop_ready()).map(|r| r.op));
            }
            m.invariants();
            (order, m.stats().duplicate_entries)
        };
        let (a, dup_a) = executed(false);
        let (b, dup_b) = executed(true);
        assert_eq!(a, vec![1, 2, 3, 7, 8, 9]);
        assert_eq!(b, vec![1, 7, 2, 8, 3, 9]);
        assert_eq!(
            (dup_a, dup_b),
            (1, 1),
            "operation 1's second entry is a duplicate at both"
        );
        // Beyond the window (two entries), a new operation at both.
        let mut m = TimestampMerge::<u32, &str>::new(1)
            .unwrap()
            .with_remember(2);
        let mut order = Vec::new();
        for (i, e) in log0.iter().enumerate() {
            m.on_entry(0, i as u64, e.clone()).unwrap();
            order.extend(std::iter::from_fn(|| m.pop_ready()).map(|r| r.op));
        }
        assert_eq!(order, vec![1, 2, 3, 1]);
        assert_eq!(m.stats().duplicate_entries, 0);
    }

    #[test]
    fn the_final_timestamp_is_the_largest_and_waits_for_the_frontier() {
        let mut m = TimestampMerge::<u32, &str>::new(2).unwrap();
        // o1 on {0,1}: stamped 1 at s0, 5 at s1 → final (5, s1).
        m.on_entry(0, 0, op(1, &[0, 1], 1)).unwrap();
        assert!(m.pop_ready().is_none(), "final unknown");
        m.on_entry(1, 0, op(1, &[0, 1], 5)).unwrap();
        // s0's frontier is (1, s0) < (5, s1): an s0 entry below 5 may still come.
        assert!(m.pop_ready().is_none());
        assert_eq!(m.wanted_clock(0), Some(5));
        assert_eq!(m.wanted_clock(1), None);
        // o2 only on s0 with hint 3 → (3, s0) < final of o1: runs first.
        m.on_entry(0, 1, op(2, &[0], 3)).unwrap();
        assert_eq!(m.pop_ready().unwrap().op, 2);
        assert!(m.pop_ready().is_none());
        m.on_entry(0, 2, Entry::Clock { hint: 6 }).unwrap();
        let r = m.pop_ready().unwrap();
        assert_eq!(r.op, 1);
        assert_eq!(
            r.timestamp,
            Timestamp {
                counter: 5,
                serializer: 1
            }
        );
        m.invariants();
    }

    #[test]
    fn hints_out_of_order_still_give_increasing_timestamps() {
        let mut m = TimestampMerge::<u32, &str>::new(1).unwrap();
        m.on_entry(0, 0, op(1, &[0], 10)).unwrap();
        m.on_entry(0, 1, op(2, &[0], 3)).unwrap();
        assert_eq!(m.frontier(0).counter, 11);
        assert_eq!(m.pop_ready().unwrap().op, 1);
        assert_eq!(m.pop_ready().unwrap().op, 2);
    }

    #[test]
    fn duplicates_and_foreign_entries_are_clock_ticks() {
        let mut m = TimestampMerge::<u32, &str>::new(2).unwrap();
        m.on_entry(0, 0, op(1, &[0], 1)).unwrap();
        m.on_entry(0, 1, op(1, &[0], 2)).unwrap();
        m.on_entry(1, 0, op(2, &[0], 3)).unwrap();
        assert_eq!(m.stats().duplicate_entries, 1);
        assert_eq!(m.stats().foreign_entries, 1);
        assert_eq!(m.pop_ready().unwrap().op, 1);
        assert!(m.pop_ready().is_none());
        m.on_entry(0, 2, op(1, &[0], 4)).unwrap();
        assert_eq!(m.stats().duplicate_entries, 2, "late duplicate");
        assert!(m.pop_ready().is_none());
        m.invariants();
    }

    #[test]
    fn stalled_lists_what_a_serializer_never_got() {
        let mut m = TimestampMerge::<u32, &str>::new(3).unwrap();
        m.on_entry(2, 0, op(7, &[0, 2], 1)).unwrap();
        let s: Vec<_> = m.stalled().map(|s| (*s.op, s.missing)).collect();
        assert_eq!(s, vec![(7, SerializerSet::single(0))]);
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(TimestampMerge::<u32, ()>::new(0).is_err());
        assert!(TimestampMerge::<u32, ()>::new(33).is_err());
        let mut m = TimestampMerge::<u32, &str>::new(2).unwrap();
        assert!(matches!(
            m.on_entry(2, 0, Entry::Clock { hint: 1 }),
            Err(MergeError::UnknownSerializer { .. })
        ));
        assert!(matches!(
            m.on_entry(0, 1, Entry::Clock { hint: 1 }),
            Err(MergeError::OutOfOrder { .. })
        ));
        // An op whose dst names a serializer that does not exist: ignored.
        m.on_entry(0, 0, op(1, &[0, 5], 1)).unwrap();
        assert_eq!(m.stats().foreign_entries, 1);
        assert_eq!(m.pending_len(), 0);
    }
}
