//! The linearizability search for one independent sub-history.
//!
//! Just-in-time linearization (Lowe, "Testing for linearizability", 2017) with the
//! memoization of Wing & Gong / Lowe / Porcupine, run with an explicit stack, plus
//! reductions that keep it from enumerating orders that cannot matter and pruning that
//! keeps it from wandering far down a doomed branch.
//!
//! Events (invocations and responses) are visited in time order. An invocation makes its
//! operation *pending*. There are three kinds of operation:
//!
//! * **Reads are linearized eagerly.** A pending operation that does not change the map
//!   given its observed result (read, query, next, prev, but also `inserted=false`,
//!   `removed=null`, `old=null`) is linearized, without branching, as soon as its result
//!   matches the model. That loses nothing: in any valid continuation the read can be
//!   moved to this point (real time allows it, since everything that must precede it is
//!   linearized already and nothing that must follow it has been invoked; it changes
//!   nothing and sees the same state). Pending reads are re-examined when invoked and
//!   whenever a mutation touching their footprint is applied.
//! * **`ok` mutations are linearized lazily.** Nothing is decided until the response of a
//!   pending operation X is reached: X must be linearized now, possibly preceded by other
//!   pending mutations. That is a *decision node*; its choices are "linearize X now"
//!   (tried first) or "linearize pending mutation P first, then decide again". Only
//!   mutations in X's *conflict closure* are offered as P: pending operations whose
//!   footprints (the keys their result depends on or that they change) overlap X's, where
//!   at least one of the two mutates, and transitively so (a pending read may connect two
//!   mutations). That loses nothing either: in any valid continuation `S · X · T`, the
//!   operations of S outside X's causal past commute with everything after them up to X,
//!   and being pending (responding later), they may move after X without breaking real
//!   time; they stay available at every later decision. Candidates are ranked (a
//!   heuristic only) by how much closer they bring X to its observed result.
//! * **`info` mutations** (no response: they may take effect at any time after their
//!   invocation, or never) are decided at their invocation: apply now (tried first:
//!   a timed-out operation usually did take effect, soon), or leave pending, from where
//!   any later decision node may still apply it as part of a closure (most recently
//!   invoked first). Applying one where it would change nothing is never tried: leaving
//!   it pending covers that outcome and more.
//!
//! **Pruning** (sound: it only ever rejects configurations from which no valid
//! continuation exists). For each key an operation needs in another state than the model's
//! (e.g. a read of 5 while the model has 7), the states reachable for that key through the
//! mutations that could still come before it are over-approximated (each usable any
//! number of times, in any order); if the needed one is not among them the configuration
//! is dead. This is checked when a decision node's X cannot simply be linearized (before
//! enumerating subsets of its closure) and, after every applied mutation, for the pending
//! operations it touches and the next few not yet invoked operations on its keys. The
//! latter catches a value written at the wrong time right away, rather than when the read
//! that contradicts it responds, which with chronological backtracking could mean
//! re-exploring everything in between.
//!
//! A configuration is (decision position, set of linearized operations, map state). It is
//! memoized as a 128-bit hash: XOR of a random tag per linearized operation, the
//! incremental hash of the map and a tag of the position. A configuration seen before has
//! already been explored and failed, so the search backtracks. (Two different
//! configurations colliding on 128 bits could make the search skip a branch and report a
//! false violation; with a few million configurations the odds are below 2^-80.)
//!
//! Every new configuration counts as one explored state against the caller's budget.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use partita_btree::OpResult;

use crate::model::{effect_on_key, mix64, tag128, Model, Need, Subject};

/// One operation of a sub-history, as the search needs it.
pub(crate) struct SubOp<'a> {
    pub subject: &'a Subject<'a>,
    /// Observed result; `None` means unknown (an `info` mutation): any result is fine.
    pub result: Option<&'a OpResult>,
    pub call: u64,
    /// `None`: no response (`info`), the operation may take effect at any time after
    /// `call`, or never.
    pub ret: Option<u64>,
    /// Inclusive key intervals the result depends on or the operation changes.
    pub footprint: &'a [(u64, u64)],
}

/// Why the search failed, from the configuration that got furthest.
pub(crate) struct Failure {
    /// Local index of the operation that could not be linearized before its response.
    pub op: usize,
    /// How many operations were linearized in that configuration.
    pub linearized: usize,
    /// What the model would have answered to it (distinct, a few at most), or for an
    /// observation of the final state the model's values at the keys that disagree.
    pub allowed: Vec<Expected>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expected {
    Result(OpResult),
    /// (key, model value) for each observed key whose value differs.
    Values(Vec<(u64, Option<u64>)>),
}

pub(crate) enum Outcome {
    Linearizable,
    Violation(Failure),
    /// The budget ran out first.
    GaveUp,
}

/// Identity hasher: memo keys are already uniformly random.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u128(&mut self, x: u128) {
        self.0 = (x as u64) ^ ((x >> 64) as u64);
    }
}

type Memo = HashSet<u128, BuildHasherDefault<PassThrough>>;

#[derive(Clone, Copy)]
struct Entry {
    time: u64,
    is_ret: bool,
    op: u32,
}

/// A change to the pending list, logged so that backtracking can replay it backwards.
#[derive(Clone, Copy)]
enum Edit {
    /// `op` was invoked (pushed at the end).
    Invoked,
    /// `op`, which sat at `idx`, was linearized.
    Linearized { idx: u32, op: u32 },
    /// `info` operation `op` was linearized.
    LinearizedInfo { op: u32 },
}

/// A choice applied at a node, with the marks to take it back.
struct Applied {
    model_mark: usize,
    edit_mark: usize,
}

struct Node {
    /// Entry index of the response that forces `x` (choices: `x`, then `others`) or of the
    /// invocation of `info` operation `x` (choices: apply it, leave it pending).
    pos: usize,
    x: u32,
    /// Choices tried so far (at a response: 0 means X itself is next, k >= 1 means
    /// `others[k - 1]` is).
    stage: usize,
    /// Mutations in X's conflict closure, computed only when X cannot simply be
    /// linearized (the common case needs none).
    others: Option<Vec<u32>>,
    applied: Option<Applied>,
}

impl Node {
    fn new(pos: usize, x: u32) -> Node {
        Node {
            pos,
            x,
            stage: 0,
            others: None,
            applied: None,
        }
    }
}

fn overlaps(a: &[(u64, u64)], b: &[(u64, u64)]) -> bool {
    a.iter()
        .any(|&(alo, ahi)| b.iter().any(|&(blo, bhi)| alo <= bhi && blo <= ahi))
}

struct Search<'a, 'b> {
    ops: &'b [SubOp<'a>],
    mutates: Vec<bool>,
    /// `info` mutation: no response, may take effect or not.
    optional: Vec<bool>,
    entries: Vec<Entry>,
    /// Entry index of each operation's invocation and response.
    call_pos: Vec<usize>,
    ret_pos: Vec<Option<usize>>,
    /// Operations whose footprint is a set of single keys, by key, in invocation order.
    by_key: HashMap<u64, Vec<(u32, u32)>>,
    model: Model,
    linearized: Vec<bool>,
    n_linearized: usize,
    set_hash: u128,
    op_tags: Vec<u128>,
    /// `ok` operations invoked and not yet linearized, in invocation order. (`info`
    /// operations are pending from their invocation on until linearized, which may be
    /// never; they are found through `info_by_key` instead, so that those that never took
    /// effect do not slow down every scan of this list.)
    pending: Vec<u32>,
    /// `info` operations (all mutations of single keys) by key, in invocation order.
    info_by_key: BTreeMap<u64, Vec<u32>>,
    edits: Vec<Edit>,
    /// Scratch for the closure computation: `stamp[op] == generation` means "in closure".
    stamp: Vec<u32>,
    generation: u32,
    best: Option<(usize, Failure)>,
}

impl Search<'_, '_> {
    /// Walk events from `from`: invocations become pending (reads that already match are
    /// linearized at once), responses of linearized operations are passed; stop at the
    /// first response of an unlinearized operation.
    fn advance(&mut self, from: usize) -> Option<usize> {
        for p in from..self.entries.len() {
            let e = self.entries[p];
            if !e.is_ret && self.optional[e.op as usize] {
                // A decision: apply the `info` operation now, or leave it pending.
                return Some(p);
            }
            if !e.is_ret {
                self.pending.push(e.op);
                self.edits.push(Edit::Invoked);
                if !self.mutates[e.op as usize] {
                    self.try_read(self.pending.len() - 1);
                }
            } else if !self.linearized[e.op as usize] {
                return Some(p);
            }
        }
        None
    }

    /// Mark `op` linearized: the part common to `ok` and `info` operations.
    fn mark_linearized(&mut self, op: u32) {
        self.linearized[op as usize] = true;
        self.n_linearized += 1;
        self.set_hash ^= self.op_tags[op as usize];
    }

    /// Linearize `info` operation `op`.
    fn linearize_info(&mut self, op: u32) {
        self.mark_linearized(op);
        self.edits.push(Edit::LinearizedInfo { op });
    }

    /// `info` operations touching `lo..=hi`, invoked before entry `before`, not linearized
    /// (a batch touching several of those keys comes once per key).
    fn pending_info(&self, lo: u64, hi: u64, before: usize) -> impl Iterator<Item = u32> + '_ {
        self.info_by_key
            .range(lo..=hi)
            .flat_map(|(_, ops)| ops.iter().copied())
            .filter(move |&o| self.call_pos[o as usize] < before && !self.linearized[o as usize])
    }

    /// Linearize the pending operation at `idx`.
    fn linearize(&mut self, idx: usize) {
        let op = self.pending.remove(idx);
        self.mark_linearized(op);
        self.edits.push(Edit::Linearized {
            idx: idx as u32,
            op,
        });
    }

    /// Linearize the pending read at `idx` if its result matches the state. True if it did.
    fn try_read(&mut self, idx: usize) -> bool {
        let sub = &self.ops[self.pending[idx] as usize];
        // Given its result the step cannot change the map, but an update to the same value
        // logs an undo record; keep the log balanced on failure too.
        let mark = self.model.mark();
        if self.model.step(sub.subject, sub.result) {
            self.linearize(idx);
            true
        } else {
            self.model.rollback(mark);
            false
        }
    }

    /// After mutation `m` was applied: linearize the pending reads it may have satisfied.
    fn saturate_after(&mut self, m: u32) {
        let mut i = 0;
        while i < self.pending.len() {
            let p = self.pending[i] as usize;
            let affected =
                !self.mutates[p] && overlaps(self.ops[p].footprint, self.ops[m as usize].footprint);
            if !(affected && self.try_read(i)) {
                i += 1;
            }
        }
    }

    fn undo(&mut self, a: Applied) {
        self.model.rollback(a.model_mark);
        while self.edits.len() > a.edit_mark {
            match self.edits.pop().expect("edit log shorter than mark") {
                Edit::Invoked => {
                    self.pending.pop();
                }
                Edit::Linearized { idx, op } => {
                    self.pending.insert(idx as usize, op);
                    self.unmark_linearized(op);
                }
                Edit::LinearizedInfo { op } => self.unmark_linearized(op),
            }
        }
    }

    fn unmark_linearized(&mut self, op: u32) {
        self.linearized[op as usize] = false;
        self.n_linearized -= 1;
        self.set_hash ^= self.op_tags[op as usize];
    }

    fn conflicts(&self, a: u32, b: u32) -> bool {
        (self.mutates[a as usize] || self.mutates[b as usize])
            && overlaps(
                self.ops[a as usize].footprint,
                self.ops[b as usize].footprint,
            )
    }

    /// Pending mutations in the conflict closure of `x` (at decision position `pos`),
    /// most promising first.
    fn closure(&mut self, x: u32, pos: usize) -> Vec<u32> {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.generation = 1;
        }
        let g = self.generation;
        self.stamp[x as usize] = g;
        let mut queue = vec![x];
        let mut infos: Vec<u32> = Vec::new();
        while let Some(a) = queue.pop() {
            for i in 0..self.pending.len() {
                let p = self.pending[i];
                if self.stamp[p as usize] != g && self.conflicts(a, p) {
                    self.stamp[p as usize] = g;
                    queue.push(p);
                }
            }
            // `info` operations are mutations: touching a key of `a` is a conflict.
            let found: Vec<u32> = self.ops[a as usize]
                .footprint
                .iter()
                .flat_map(|&(lo, hi)| self.pending_info(lo, hi, pos))
                .filter(|&i| self.stamp[i as usize] != g)
                .collect();
            for i in found {
                if self.stamp[i as usize] != g {
                    self.stamp[i as usize] = g;
                    queue.push(i);
                    infos.push(i);
                }
            }
        }
        // Most recently invoked first: an `info` operation that takes effect long after
        // it was invoked is possible but rare, and an old one that never took effect
        // stays pending forever.
        infos.sort_unstable_by_key(|&i| Reverse(self.call_pos[i as usize]));
        let members: Vec<u32> = self
            .pending
            .iter()
            .copied()
            .filter(|&p| p != x && self.stamp[p as usize] == g && self.mutates[p as usize])
            .chain(infos)
            .collect();
        // Order (a heuristic only: every member stays a candidate unless it cannot be
        // applied here at all): first what brings X closest to its observed result, then
        // `ok` before `info`, then invocation order.
        let xs = &self.ops[x as usize];
        let base = self.model.distance(xs.subject, xs.result);
        let mut ranked: Vec<(Reverse<usize>, usize, bool, usize, u32)> =
            Vec::with_capacity(members.len());
        for (order, p) in members.into_iter().enumerate() {
            let sub = &self.ops[p as usize];
            let mark = self.model.mark();
            if self.model.step(sub.subject, sub.result) {
                let d = self.model.distance(xs.subject, xs.result);
                let (gain, harm) = (base.saturating_sub(d), d.saturating_sub(base));
                ranked.push((Reverse(gain), harm, self.optional[p as usize], order, p));
            }
            self.model.rollback(mark);
        }
        ranked.sort_unstable();
        ranked.into_iter().map(|r| r.4).collect()
    }

    /// Whether `x` could still be linearized at this point by applying some pending
    /// mutations first, judged key by key: each key x needs in another state must be able
    /// to reach it through pending mutations touching it (each usable any number of times
    /// and in any order, which over-approximates, so a "no" is certain). Saves enumerating
    /// every subset of x's conflict closure when x is already doomed.
    ///
    /// `upcoming` are the entries after the current position up to x's response: the
    /// mutations invoked there may also come before x.
    fn feasible(&self, x: u32, upcoming: std::ops::Range<usize>) -> bool {
        const MAX_NEEDS: usize = 64;
        let xs = &self.ops[x as usize];
        let needs = self.model.unmet_needs(xs.subject, xs.result, MAX_NEEDS);
        needs
            .into_iter()
            .all(|(key, need)| self.reachable(key, need, upcoming.clone()))
    }

    /// Lookahead after mutation `m` was applied at position `pos`: every pending `ok`
    /// operation it may have affected must remain feasible before its own response.
    /// Without this, a wrong choice (typically an `info` batch applied at the wrong time)
    /// would only show when that other operation's response is reached, possibly far later,
    /// and backtracking to it would re-explore everything in between.
    ///
    /// The same goes for the next few `ok` operations on each key `m` changed that have
    /// not been invoked yet (point operations only, which are indexed by key): a value
    /// written at the wrong time is usually contradicted by one of the next reads of that
    /// key.
    ///
    /// Returns an operation that became infeasible, if any.
    fn doomed_by(&self, m: u32, pos: usize) -> Option<u32> {
        const LOOKAHEAD: usize = 3;
        let fp = self.ops[m as usize].footprint;
        let check = |y: u32| match self.ret_pos[y as usize] {
            Some(r) => self.feasible(y, pos + 1..r.max(pos + 1)),
            None => true,
        };
        if let Some(&y) = self
            .pending
            .iter()
            .find(|&&y| overlaps(self.ops[y as usize].footprint, fp) && !check(y))
        {
            return Some(y);
        }
        fp.iter().filter(|r| r.0 == r.1).find_map(|&(key, _)| {
            let ops = self.by_key.get(&key)?;
            let first = ops.partition_point(|&(c, _)| c as usize <= pos);
            ops[first..]
                .iter()
                .map(|&(_, o)| o)
                .filter(|&o| !self.optional[o as usize])
                .take(LOOKAHEAD)
                .find(|&y| !check(y))
        })
    }

    fn reachable(&self, key: u64, need: Need, upcoming: std::ops::Range<usize>) -> bool {
        if need == Need::Never {
            return false;
        }
        if need.accepts(self.model.get(key)) {
            return true;
        }
        // Mutations are point operations, so `by_key` lists every one touching `key`.
        let on_key: &[(u32, u32)] = self.by_key.get(&key).map_or(&[], Vec::as_slice);
        let from = on_key.partition_point(|&(c, _)| (c as usize) < upcoming.start);
        let to = from + on_key[from..].partition_point(|&(c, _)| (c as usize) < upcoming.end);
        let touches = |o: u32| {
            self.ops[o as usize]
                .footprint
                .iter()
                .any(|&(lo, hi)| lo <= key && key <= hi)
        };
        let writers: Vec<&SubOp<'_>> = self
            .pending
            .iter()
            .copied()
            .filter(|&o| touches(o))
            .chain(self.pending_info(key, key, upcoming.start))
            .chain(on_key[from..to].iter().map(|&(_, o)| o))
            .filter(|&o| self.mutates[o as usize])
            .map(|o| &self.ops[o as usize])
            .collect();
        let mut values = vec![self.model.get(key)];
        let mut i = 0;
        while i < values.len() {
            if need.accepts(values[i]) {
                return true;
            }
            for w in &writers {
                let Subject::Op(op) = w.subject else { continue };
                if let Some(post) = effect_on_key(op, w.result, key, values[i]) {
                    if !values.contains(&post) {
                        values.push(post);
                    }
                }
            }
            i += 1;
        }
        false
    }

    fn key(&self, pos: usize) -> u128 {
        self.set_hash ^ self.model.hash() ^ tag128(pos as u64, 0x705)
    }

    /// Remember what the model would have said to `x` at the furthest failing position.
    fn note_failure(&mut self, pos: usize, x: u32) {
        const MAX_ALLOWED: usize = 4;
        let furthest = self.best.as_ref().is_none_or(|(p, _)| pos > *p);
        let same = self
            .best
            .as_ref()
            .is_some_and(|(p, f)| pos == *p && f.allowed.len() < MAX_ALLOWED);
        if !furthest && !same {
            return;
        }
        let expected = match self.ops[x as usize].subject {
            Subject::Op(op) => Expected::Result(self.model.eval(op)),
            Subject::Observe(points) => Expected::Values(
                points
                    .iter()
                    .filter(|&&(k, v)| self.model.get(k) != v)
                    .map(|&(k, _)| (k, self.model.get(k)))
                    .collect(),
            ),
        };
        if furthest {
            self.best = Some((
                pos,
                Failure {
                    op: x as usize,
                    linearized: self.n_linearized,
                    allowed: vec![expected],
                },
            ));
        } else if let Some((_, f)) = &mut self.best {
            if !f.allowed.contains(&expected) {
                f.allowed.push(expected);
            }
        }
    }
}

/// Check one sub-history starting from `initial`. `states` is incremented per explored
/// configuration; the search gives up when it reaches `limit`.
pub(crate) fn search(
    ops: &[SubOp<'_>],
    initial: Vec<(u64, u64)>,
    states: &mut u64,
    limit: u64,
) -> Outcome {
    let mut entries = Vec::with_capacity(ops.len() * 2);
    for (i, op) in ops.iter().enumerate() {
        entries.push(Entry {
            time: op.call,
            is_ret: false,
            op: i as u32,
        });
        if let Some(ret) = op.ret {
            entries.push(Entry {
                time: ret,
                is_ret: true,
                op: i as u32,
            });
        }
    }
    // At equal times invocations come first: treating such operations as concurrent is
    // the lenient reading of a clock tie, so a tie never causes a false violation.
    entries.sort_by_key(|e| (e.time, e.is_ret, e.op));
    let mut call_pos = vec![0; ops.len()];
    let mut ret_pos = vec![None; ops.len()];
    let mut by_key: HashMap<u64, Vec<(u32, u32)>> = HashMap::new();
    let mut info_by_key: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        if e.is_ret {
            ret_pos[e.op as usize] = Some(i);
        } else {
            call_pos[e.op as usize] = i;
            let fp = ops[e.op as usize].footprint;
            if fp.iter().all(|r| r.0 == r.1) {
                for &(k, _) in fp {
                    by_key.entry(k).or_default().push((i as u32, e.op));
                    if ops[e.op as usize].ret.is_none() {
                        info_by_key.entry(k).or_default().push(e.op);
                    }
                }
            }
        }
    }

    let mut s = Search {
        ops,
        mutates: ops
            .iter()
            .map(|o| o.subject.changes_state(o.result))
            .collect(),
        optional: ops.iter().map(|o| o.ret.is_none()).collect(),
        call_pos,
        ret_pos,
        by_key,
        entries,
        model: Model::new(initial),
        linearized: vec![false; ops.len()],
        n_linearized: 0,
        set_hash: 0,
        op_tags: (0..ops.len())
            .map(|i| tag128(i as u64, mix64(ops.len() as u64)))
            .collect(),
        pending: Vec::new(),
        info_by_key,
        edits: Vec::new(),
        stamp: vec![0; ops.len()],
        generation: 0,
        best: None,
    };
    let mut memo = Memo::default();

    let Some(first) = s.advance(0) else {
        return Outcome::Linearizable;
    };
    memo.insert(s.key(first));
    *states += 1;
    let mut stack = vec![Node::new(first, s.entries[first].op)];

    while let Some(node) = stack.last_mut() {
        if let Some(a) = node.applied.take() {
            s.undo(a);
        }
        let (pos, x) = (node.pos, node.x);
        let invoke = !s.entries[pos].is_ret;
        // What to do at this node: Some(op) linearizes op, None (at an invocation) leaves
        // the operation pending.
        let choice: Option<u32> = if invoke {
            node.stage += 1;
            match node.stage {
                1 => Some(x),
                2 => None,
                _ => {
                    stack.pop();
                    continue;
                }
            }
        } else if node.stage == 0 {
            node.stage = 1;
            // A pending read that matched would have been linearized already.
            if !s.mutates[x as usize] {
                continue;
            }
            Some(x)
        } else {
            if node.others.is_none() {
                node.others = Some(if s.feasible(x, pos..pos) {
                    s.closure(x, pos)
                } else {
                    Vec::new()
                });
            }
            let others = node.others.as_ref().expect("closure computed above");
            let c = others.get(node.stage - 1).copied();
            node.stage += 1;
            if c.is_none() {
                // Every choice failed: this configuration cannot be extended.
                s.note_failure(pos, x);
                stack.pop();
                continue;
            }
            c
        };

        let applied = Applied {
            model_mark: s.model.mark(),
            edit_mark: s.edits.len(),
        };
        if let Some(c) = choice {
            let sub = &s.ops[c as usize];
            let before = s.model.hash();
            // An `info` operation that would change nothing here is better left pending:
            // it can still be applied later, or never, which includes this outcome.
            if !s.model.step(sub.subject, sub.result)
                || (s.optional[c as usize] && s.model.hash() == before)
            {
                s.undo(applied);
                continue;
            }
            if s.optional[c as usize] {
                s.linearize_info(c);
            } else {
                let idx = s
                    .pending
                    .iter()
                    .position(|&p| p == c)
                    .expect("a choice is always pending");
                s.linearize(idx);
            }
            s.saturate_after(c);
            if s.mutates[c as usize] {
                if let Some(y) = s.doomed_by(c, pos) {
                    // Blame the operation that can no longer be satisfied, as of its
                    // response: that is where this line of linearization would fail.
                    let at = s.ret_pos[y as usize].expect("only ok operations are checked");
                    s.note_failure(at, y);
                    s.undo(applied);
                    continue;
                }
            }
        }
        let next_pos = if invoke || s.linearized[x as usize] {
            match s.advance(pos + 1) {
                Some(q) => q,
                // Every response has been passed: the operations left pending are `info`
                // ones that never took effect.
                None => return Outcome::Linearizable,
            }
        } else {
            pos
        };
        // Recorded on the node so that coming back to it undoes the choice.
        stack.last_mut().expect("node is on the stack").applied = Some(applied);
        if !memo.insert(s.key(next_pos)) {
            continue;
        }
        *states += 1;
        if *states >= limit {
            return Outcome::GaveUp;
        }
        let next_x = s.entries[next_pos].op;
        stack.push(Node::new(next_pos, next_x));
    }
    Outcome::Violation(
        s.best
            .map(|(_, f)| f)
            .expect("a failed search noted its failure"),
    )
}
