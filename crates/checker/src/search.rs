//! The linearizability search for one independent sub-history.
//!
//! Just-in-time linearization (Lowe, "Testing for linearizability", 2017) with the
//! memoization of Wing & Gong / Lowe / Porcupine, run with an explicit stack.
//!
//! Events (invocations and responses) are visited in time order. An invocation only makes
//! its operation *pending*. Nothing is linearized until the response of a pending
//! operation X is reached: at that point X must be linearized, possibly preceded by some
//! other pending operations. That is a *decision node*; its choices are "linearize X now"
//! (tried first) or "linearize pending operation P first, then decide again".
//!
//! Only pending operations in X's *conflict closure* are offered as P: operations whose
//! footprints (the keys their result depends on or that they change) overlap X's, where
//! at least one of the two mutates, and transitively so. This loses no linearization:
//! take any valid continuation `S · X · T`; the operations of S outside X's causal past
//! commute with everything after them up to X, and since they are pending (their
//! responses come later) they may be moved after X without breaking real-time order.
//! Leaving them pending is also never worse than linearizing them now, because they stay
//! available at every later decision. This is what keeps a search over many keys and
//! many clients from enumerating interleavings of unrelated operations, and what makes
//! `info` operations (pending forever, since they have no response) cheap: they are
//! applied only when some later result needs them, and otherwise never.
//!
//! A configuration is (decision position, set of linearized operations, map state). It is
//! memoized as a 128-bit hash: XOR of a random tag per linearized operation, the
//! incremental hash of the map and a tag of the position. A configuration seen before has
//! already been explored and failed, so the search backtracks. (Two different
//! configurations colliding on 128 bits could make the search skip a branch and report a
//! false violation; with a few million configurations the odds are below 2^-80.)
//!
//! Every new configuration counts as one explored state against the caller's budget.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use partita_types::OpResult;

use crate::model::{mix64, tag128, Model, Subject};

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

/// A choice applied at a node, with what is needed to take it back.
struct Applied {
    op: u32,
    model_mark: usize,
    /// Where `op` sat in `pending`.
    pending_idx: usize,
    /// Length of `pending` after removing `op`; operations pushed past it were invoked
    /// while advancing to the next decision.
    pending_len: usize,
}

struct Node {
    /// Entry index of the response that forces `x`.
    pos: usize,
    x: u32,
    /// 0: X itself is next to try; k >= 1: `others[k - 1]` is.
    stage: usize,
    /// X's conflict closure among the pending operations, computed only when X cannot
    /// simply be linearized (the common case needs none).
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
    entries: Vec<Entry>,
    model: Model,
    linearized: Vec<bool>,
    n_linearized: usize,
    set_hash: u128,
    op_tags: Vec<u128>,
    /// Invoked, not yet linearized, in invocation order.
    pending: Vec<u32>,
    /// Scratch for the closure computation: `stamp[op] == generation` means "in closure".
    stamp: Vec<u32>,
    generation: u32,
    best: Option<(usize, Failure)>,
}

impl<'a, 'b> Search<'a, 'b> {
    /// Walk events from `from`: invocations become pending, responses of linearized
    /// operations are passed; stop at the first response of an unlinearized operation.
    fn advance(&mut self, from: usize) -> Option<usize> {
        for p in from..self.entries.len() {
            let e = self.entries[p];
            if !e.is_ret {
                self.pending.push(e.op);
            } else if !self.linearized[e.op as usize] {
                return Some(p);
            }
        }
        None
    }

    fn conflicts(&self, a: u32, b: u32) -> bool {
        (self.mutates[a as usize] || self.mutates[b as usize])
            && overlaps(
                self.ops[a as usize].footprint,
                self.ops[b as usize].footprint,
            )
    }

    /// Pending operations in the conflict closure of `x`, in invocation order.
    fn closure(&mut self, x: u32) -> Vec<u32> {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.iter_mut().for_each(|s| *s = 0);
            self.generation = 1;
        }
        let g = self.generation;
        self.stamp[x as usize] = g;
        let mut queue = vec![x];
        while let Some(a) = queue.pop() {
            for i in 0..self.pending.len() {
                let p = self.pending[i];
                if self.stamp[p as usize] != g && self.conflicts(a, p) {
                    self.stamp[p as usize] = g;
                    queue.push(p);
                }
            }
        }
        self.pending
            .iter()
            .copied()
            .filter(|&p| p != x && self.stamp[p as usize] == g)
            .collect()
    }

    fn undo(&mut self, a: Applied) {
        self.pending.truncate(a.pending_len);
        self.pending.insert(a.pending_idx, a.op);
        self.linearized[a.op as usize] = false;
        self.n_linearized -= 1;
        self.set_hash ^= self.op_tags[a.op as usize];
        self.model.rollback(a.model_mark);
    }

    fn key(&self, pos: usize) -> u128 {
        self.set_hash ^ self.model.hash() ^ tag128(pos as u64, 0x705)
    }

    /// Remember what the model would have said to `x` at the furthest failing position.
    fn note_failure(&mut self, pos: usize, x: u32) {
        const MAX_ALLOWED: usize = 4;
        let furthest = self.best.as_ref().map_or(true, |(p, _)| pos > *p);
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

    let mut s = Search {
        ops,
        mutates: ops.iter().map(|o| o.subject.is_mutation()).collect(),
        entries,
        model: Model::new(initial),
        linearized: vec![false; ops.len()],
        n_linearized: 0,
        set_hash: 0,
        op_tags: (0..ops.len())
            .map(|i| tag128(i as u64, mix64(ops.len() as u64)))
            .collect(),
        pending: Vec::new(),
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
        let choice = if node.stage == 0 {
            node.stage = 1;
            Some(x)
        } else {
            if node.others.is_none() {
                node.others = Some(s.closure(x));
            }
            let others = node.others.as_ref().expect("closure computed above");
            let c = others.get(node.stage - 1).copied();
            node.stage += 1;
            c
        };
        let Some(c) = choice else {
            // Every choice failed: this configuration cannot be extended.
            s.note_failure(pos, x);
            stack.pop();
            continue;
        };

        let sub = &s.ops[c as usize];
        let model_mark = s.model.mark();
        if !s.model.step(sub.subject, sub.result) {
            s.model.rollback(model_mark);
            continue;
        }
        let pending_idx = s
            .pending
            .iter()
            .position(|&p| p == c)
            .expect("a choice is always pending");
        s.pending.remove(pending_idx);
        s.linearized[c as usize] = true;
        s.n_linearized += 1;
        s.set_hash ^= s.op_tags[c as usize];
        let applied = Applied {
            op: c,
            model_mark,
            pending_idx,
            pending_len: s.pending.len(),
        };
        let next_pos = if c == x {
            match s.advance(pos + 1) {
                Some(q) => q,
                // Every response has been passed: the operations left pending are `info`
                // ones that never took effect.
                None => return Outcome::Linearizable,
            }
        } else {
            pos
        };
        // Either way the node's choice is recorded so that coming back to it undoes it.
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
