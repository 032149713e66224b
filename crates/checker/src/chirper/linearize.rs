//! A generic linearizability search: Lowe's just-in-time linearization (as in
//! Porcupine), with Wing & Gong's memoization of configurations, for any sequential
//! [`Model`], plus three reductions that keep it from exploring equivalent or doomed
//! orders.
//!
//! # Algorithm
//!
//! Every operation contributes two entries, its call and its return, sorted by time
//! (calls before returns at equal times, so operations that merely touch count as
//! concurrent; an operation without a return time returns at infinity). The entries
//! form a doubly linked list. The *candidates* are the calls before the first return:
//! exactly the operations that real time allows next. The search walks them:
//!
//! - at a **call**, it tries to linearize that operation now: the model steps from the
//!   current state and must produce the observed result (any result, if none was
//!   observed). If it does and the resulting configuration is new, the operation's
//!   call and return are *lifted* out of the list, the previous state is pushed on an
//!   explicit stack, and the walk restarts at the head. Otherwise the walk moves on;
//! - at the first **return**, every candidate was tried, so the last choice was
//!   wrong: pop it, *unlift* its entries, restore the state and resume the walk past
//!   its call. With nothing to pop, the history is not linearizable.
//!
//! The search succeeds once every operation with a return time is linearized:
//! operations without one (timeouts: *info*, here *optional*, operations) may have
//! taken effect at any later point or never.
//!
//! A *configuration* is the set of linearized operations with the model state. Two
//! paths reaching the same configuration have the same futures, so each is explored
//! once (the memo, below).
//!
//! # Reductions
//!
//! Each skips only orders for which an equivalent one is explored, so none changes
//! the verdict (a differential test compares the verdicts with an exhaustive search
//! on thousands of small histories):
//!
//! 1. **Operations that change nothing go first, without branching.** A candidate
//!    whose observed result implies it changed nothing ([`Model::changes_nothing`]:
//!    a read, a follow that answered "already following") and that fits the current
//!    state is linearized at once, and if that fails the configuration fails: in any
//!    completion it can be moved to the front, since it changes nothing for the
//!    operations it passes and real time lets it go now. So a read never waits behind
//!    a concurrent write it did not see. Such candidates are tried first; optional
//!    ones are dropped outright.
//! 2. **Optional operations go last, and only where they matter.** At each
//!    configuration, optional candidates are tried only after the required ones.
//!    And right after an optional operation X, the next operation must not commute
//!    with X from the state before X (same result, same state in either order), or
//!    be an optional one of higher index. Any linearization can be rewritten into
//!    this form: repeatedly move an optional operation after a required successor it
//!    commutes with, or after a commuting optional successor of lower index (a
//!    measure decreases each time), and drop the optional operations left at the
//!    end. Since what may follow X depends on X and the state before it, both are
//!    part of the configuration for the memo.
//! 3. **Look-ahead.** After each step the model may declare the configuration doomed
//!    ([`Model::doomed`]): some pending operation can no longer be linearized,
//!    whatever follows. The search then backtracks at once instead of discovering the
//!    dead end after exploring everything in between. Soundness rests on the model's
//!    argument.
//!
//! # The memo
//!
//! The memo holds a 128-bit fingerprint per configuration: the XOR of a pseudo-random
//! 128-bit key per linearized operation (Zobrist hashing, updated in O(1)), the
//! model's fingerprint of the state ([`Model::fingerprint`]) and, after an optional
//! operation, a key for it mixed with the fingerprint of the state before it. Storing
//! fingerprints rather than sets and states keeps the memo at 16 bytes (plus table
//! overhead) per configuration; the price is that two distinct configurations might
//! share a fingerprint, and the second would then be wrongly skipped. For distinct
//! linearized sets the keys differ by the XOR of their symmetric difference's keys,
//! uniformly random; for equal sets by the difference of two state fingerprints,
//! which the model must make behave like a random function. Either way a given pair
//! collides with probability about 2^-128, so over N configurations the odds of any
//! collision are below N²/2^129: under 10^-25 for the 10^7 configurations of a long
//! search. A collision could only turn "linearizable" into a false violation (or an
//! unknown verdict), never hide a violation: success exhibits a linearization.
//!
//! # Bounds and reports
//!
//! The number of configurations explored is capped: past the budget the answer is
//! [`Outcome::Unknown`], never a guess. The search is iterative (no recursion); its
//! memory is the memo, the list (two entries per operation) and a stack of at most one
//! saved state per linearized operation.
//!
//! When the search fails, [`Stuck`] reports the deepest configuration reached (the
//! longest linearizable prefix found) and the operation that could not be linearized
//! after it: the one whose return forced the search back, or the one the look-ahead
//! found doomed.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A sequential specification, executed by the search.
pub trait Model {
    /// The state. Cloned once per linearized operation (on the stack), so it should be
    /// cheap to clone (e.g. `Arc`-shared parts).
    type State: Clone;
    type Op;
    type Result;

    /// Execute `op` on `state`: the next state and the result.
    fn step(&self, state: &Self::State, op: &Self::Op) -> (Self::State, Self::Result);

    /// Whether an `observed` result agrees with the `model`'s.
    fn accepts(&self, model: &Self::Result, observed: &Self::Result) -> bool;

    /// A 128-bit fingerprint of `state`: equal for equal states and, for distinct
    /// states, equal with probability about 2^-128 (see the module documentation).
    /// [`fingerprint_of`] provides one from `Hash`.
    fn fingerprint(&self, state: &Self::State) -> u128;

    /// Look ahead from the configuration reached by linearizing operation `last`
    /// (an index into the operations given to [`search`]): `state` is the state and
    /// `done[i]` tells whether operation i is linearized (`done[last]` is true).
    /// `Some(i)` says that operation i (not linearized) can no longer be, whatever
    /// comes next: the search then backtracks at once rather than discovering the
    /// dead end later. A model may return `Some` only when a necessary condition
    /// provably fails, or the search loses completeness. The default never prunes.
    fn doomed(&self, state: &Self::State, done: &[bool], last: usize) -> Option<usize> {
        let _ = (state, done, last);
        None
    }

    /// Whether linearizing `op` with result `observed` never changes the state, in
    /// any state (`observed` `None`: with any result): reads, and operations whose
    /// result says they changed nothing (a failed follow, say). The search
    /// linearizes such an operation without branching as soon as its result fits
    /// (see the module documentation), and leaves out those without a return time
    /// altogether. The default is `false` (always safe).
    fn changes_nothing(&self, op: &Self::Op, observed: Option<&Self::Result>) -> bool {
        let _ = (op, observed);
        false
    }

    /// The next state if `op` may be linearized now with result `observed` (`None`:
    /// any result). The default steps and compares; a model may override it to
    /// avoid building results or states that are then thrown away.
    fn try_step(
        &self,
        state: &Self::State,
        op: &Self::Op,
        observed: Option<&Self::Result>,
    ) -> Option<Self::State> {
        let (next, result) = self.step(state, op);
        match observed {
            Some(seen) if !self.accepts(&result, seen) => None,
            _ => Some(next),
        }
    }
}

/// A 128-bit fingerprint of any hashable value: two SipHash passes (std's
/// `DefaultHasher`, fixed keys) over the value behind distinct one-byte prefixes.
/// Deterministic within one build of the program.
pub fn fingerprint_of<T: Hash + ?Sized>(value: &T) -> u128 {
    let half = |prefix: u8| {
        let mut h = DefaultHasher::new();
        prefix.hash(&mut h);
        value.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

/// One operation of a history, as the search sees it.
#[derive(Debug)]
pub struct Operation<'a, O, R> {
    pub op: &'a O,
    /// Invocation time.
    pub invoked: u64,
    /// Response time; `None`: never returned (the operation may take effect at any
    /// time after `invoked`, or never). A return time before `invoked` is taken as
    /// `invoked`.
    pub returned: Option<u64>,
    /// The observed result; `None`: any result is accepted.
    pub result: Option<&'a R>,
}

impl<O, R> Clone for Operation<'_, O, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<O, R> Copy for Operation<'_, O, R> {}

/// Where a failed search got stuck.
#[derive(Clone, Debug)]
pub struct Stuck<S> {
    /// Index (in the operations given) of the operation that could not be linearized
    /// after the longest linearizable prefix found.
    pub op: usize,
    /// Length of that prefix.
    pub prefix_len: usize,
    /// The model state after it.
    pub state: S,
    /// Configurations explored in all.
    pub explored: u64,
}

/// The verdict of [`search`].
#[derive(Clone, Debug)]
pub enum Outcome<S> {
    Linearizable {
        explored: u64,
    },
    NotLinearizable(Stuck<S>),
    /// The budget ran out first.
    Unknown {
        explored: u64,
    },
}

const NIL: usize = usize::MAX;
const HEAD: usize = 0;

/// A list entry; entry `HEAD` is the sentinel.
#[derive(Clone, Copy)]
struct Node {
    prev: usize,
    next: usize,
    op: usize,
    is_call: bool,
    /// The call's return entry (for calls).
    ret: usize,
}

/// The doubly linked list of call and return entries.
struct Entries {
    nodes: Vec<Node>,
}

impl Entries {
    /// The entries of the operations `keep` selects.
    fn new<O, R>(ops: &[Operation<'_, O, R>], keep: impl Fn(usize) -> bool) -> Entries {
        // (time, is_return, op): calls sort before returns at equal times.
        let mut sorted: Vec<(u128, bool, usize)> = Vec::with_capacity(2 * ops.len());
        for (i, o) in ops.iter().enumerate().filter(|(i, _)| keep(*i)) {
            sorted.push((u128::from(o.invoked), false, i));
            let ret = o
                .returned
                .map_or(u128::MAX, |r| u128::from(r.max(o.invoked)));
            sorted.push((ret, true, i));
        }
        sorted.sort_unstable();
        let mut nodes = Vec::with_capacity(sorted.len() + 1);
        nodes.push(Node {
            prev: NIL,
            next: NIL,
            op: NIL,
            is_call: false,
            ret: NIL,
        });
        let mut ret_of = vec![NIL; ops.len()];
        for (k, &(_, is_return, op)) in sorted.iter().enumerate() {
            let id = k + 1;
            nodes[id - 1].next = id;
            nodes.push(Node {
                prev: id - 1,
                next: NIL,
                op,
                is_call: !is_return,
                ret: NIL,
            });
            if is_return {
                ret_of[op] = id;
            }
        }
        for node in nodes.iter_mut().skip(1) {
            if node.is_call {
                node.ret = ret_of[node.op];
            }
        }
        Entries { nodes }
    }

    fn unlink(&mut self, id: usize) {
        let Node { prev, next, .. } = self.nodes[id];
        self.nodes[prev].next = next;
        if next != NIL {
            self.nodes[next].prev = prev;
        }
    }

    fn relink(&mut self, id: usize) {
        let Node { prev, next, .. } = self.nodes[id];
        self.nodes[prev].next = id;
        if next != NIL {
            self.nodes[next].prev = id;
        }
    }

    /// Take a call and its return out of the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.nodes[call].ret);
    }

    /// Undo the matching [`Entries::lift`] (lifts and unlifts nest like a stack).
    fn unlift(&mut self, call: usize) {
        self.relink(self.nodes[call].ret);
        self.relink(call);
    }
}

/// Hasher for keys that are already uniformly random: folds them to 64 bits.
#[derive(Default)]
struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = self.0.rotate_left(23) ^ u64::from_le_bytes(word);
        }
    }

    fn write_u128(&mut self, x: u128) {
        self.0 ^= (x as u64) ^ ((x >> 64) as u64);
    }
}

/// SplitMix64: the pseudo-random per-operation keys of the memo's fingerprints.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which candidates a walk of the list considers (see [`search`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pass {
    /// Required operations that change nothing: the first that fits is taken
    /// without branching.
    Forced,
    /// Other required operations.
    Required,
    /// Operations without a return time.
    Optional,
}

impl Pass {
    /// The pass after this one at a configuration.
    fn next(self) -> Option<Pass> {
        match self {
            Pass::Forced => Some(Pass::Optional),
            Pass::Optional => Some(Pass::Required),
            Pass::Required => None,
        }
    }
}

/// A linearized operation on the search's stack.
struct Frame<S> {
    /// Its call entry.
    call: usize,
    /// The state before it.
    before: S,
    /// The pass that chose it.
    pass: Pass,
}

/// Whether operation `y`, linearized at state `after_x` (reached by applying `x` to
/// `before`) with `y_then` resulting, could equally go before `x`: same result for
/// `y` (when it has an observed one) and same state after both.
fn commute<M: Model>(
    model: &M,
    before: &M::State,
    x: &M::Op,
    y: &Operation<'_, M::Op, M::Result>,
    y_then: &M::State,
) -> bool {
    let (y_first, y_result) = model.step(before, y.op);
    if let Some(seen) = y.result {
        if !model.accepts(&y_result, seen) {
            return false;
        }
    }
    let (both, _) = model.step(&y_first, x);
    model.fingerprint(&both) == model.fingerprint(y_then)
}

/// Decide whether `ops` (in any order) are linearizable with respect to `model`
/// starting from `initial`, exploring at most `max_configurations` configurations.
pub fn search<M: Model>(
    model: &M,
    initial: &M::State,
    ops: &[Operation<'_, M::Op, M::Result>],
    max_configurations: u64,
) -> Outcome<M::State> {
    // Operations that returned must all be linearized; the others are optional.
    let mut required = ops.iter().filter(|o| o.returned.is_some()).count();
    if required == 0 {
        return Outcome::Linearizable { explored: 0 };
    }
    let pass_of: Vec<Pass> = ops
        .iter()
        .map(|o| match o.returned {
            None => Pass::Optional,
            Some(_) if model.changes_nothing(o.op, o.result) => Pass::Forced,
            Some(_) => Pass::Required,
        })
        .collect();
    // Optional operations that change nothing cannot matter.
    let mut list = Entries::new(ops, |i| {
        pass_of[i] != Pass::Optional || !model.changes_nothing(ops[i].op, None)
    });
    let mut seed = 0x5eed_c41e_u64;
    let keys: Vec<u128> = (0..ops.len())
        .map(|_| (u128::from(splitmix64(&mut seed)) << 64) | u128::from(splitmix64(&mut seed)))
        .collect();
    let constraint_keys: Vec<u128> = (0..ops.len())
        .map(|_| (u128::from(splitmix64(&mut seed)) << 64) | u128::from(splitmix64(&mut seed)))
        .collect();
    let mut memo: HashSet<u128, BuildHasherDefault<FoldHasher>> = HashSet::default();
    let mut explored = 0u64;
    let mut stack: Vec<Frame<M::State>> = Vec::new();
    let mut done = vec![false; ops.len()];
    let mut state = initial.clone();
    let mut linearized = 0u128; // Zobrist hash of the linearized set
    let mut best: Option<Stuck<M::State>> = None;

    // Walk the list from `entry` to the first return, trying the calls of `pass`.
    let mut entry = list.nodes[HEAD].next;
    let mut pass = Pass::Forced;
    loop {
        // `None` at the end of the list: unreachable, as a required operation's
        // return precedes it while any is left, but treated as a return all the same.
        let node = (entry != NIL).then(|| list.nodes[entry]);
        match node {
            Some(node) if node.is_call => {
                let call = entry;
                entry = node.next;
                let i = node.op;
                if pass_of[i] != pass {
                    continue;
                }
                let o = &ops[i];
                let Some(next) = model.try_step(&state, o.op, o.result) else {
                    continue;
                };
                // Right after an optional operation, only one that does not commute
                // with it, or a later optional one (see the module documentation).
                if let Some(top) = stack.last().filter(|f| f.pass == Pass::Optional) {
                    let x = list.nodes[top.call].op;
                    let later_optional = pass == Pass::Optional && i > x;
                    if !later_optional && commute(model, &top.before, ops[x].op, o, &next) {
                        continue;
                    }
                }
                let set = linearized ^ keys[i];
                // What may follow an optional operation depends on it and on the
                // state before it: part of the configuration.
                let constraint = if pass == Pass::Optional {
                    constraint_keys[i] ^ model.fingerprint(&state).rotate_left(64)
                } else {
                    0
                };
                if memo.insert(set ^ constraint ^ model.fingerprint(&next)) {
                    explored += 1;
                    if explored > max_configurations {
                        return Outcome::Unknown { explored };
                    }
                    done[i] = true;
                    match model.doomed(&next, &done, i) {
                        None => {
                            stack.push(Frame {
                                call,
                                before: std::mem::replace(&mut state, next),
                                pass,
                            });
                            linearized = set;
                            list.lift(call);
                            if pass != Pass::Optional {
                                required -= 1;
                                if required == 0 {
                                    return Outcome::Linearizable { explored };
                                }
                            }
                            entry = list.nodes[HEAD].next;
                            pass = Pass::Forced;
                            continue;
                        }
                        Some(culprit) => {
                            done[i] = false;
                            let depth = stack.len() + 1;
                            if best.as_ref().is_none_or(|b| depth > b.prefix_len) {
                                best = Some(Stuck {
                                    op: culprit,
                                    prefix_len: depth,
                                    state: next,
                                    explored,
                                });
                            }
                        }
                    }
                }
                // The configuration it leads to failed (now or before). Another
                // choice may do, unless this one was forced.
                if pass != Pass::Forced {
                    continue;
                }
            }
            _ => {
                // The end of a walk: on to the next pass, or a dead end.
                if let Some(next) = pass.next() {
                    pass = next;
                    entry = list.nodes[HEAD].next;
                    continue;
                }
                let depth = stack.len();
                if let Some(node) = node {
                    if best.as_ref().is_none_or(|b| depth > b.prefix_len) {
                        best = Some(Stuck {
                            op: node.op,
                            prefix_len: depth,
                            state: state.clone(),
                            explored,
                        });
                    }
                }
            }
        }
        // A dead end: undo linearizations until one that had alternatives.
        loop {
            let Some(frame) = stack.pop() else {
                let mut stuck = best.unwrap_or(Stuck {
                    op: 0,
                    prefix_len: 0,
                    state,
                    explored,
                });
                stuck.explored = explored;
                return Outcome::NotLinearizable(stuck);
            };
            state = frame.before;
            let op = list.nodes[frame.call].op;
            linearized ^= keys[op];
            done[op] = false;
            if frame.pass != Pass::Optional {
                required += 1;
            }
            list.unlift(frame.call);
            if frame.pass != Pass::Forced {
                // Resume the walk that chose it, after it.
                entry = list.nodes[frame.call].next;
                pass = frame.pass;
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register holding an i64, with writes and reads.
    struct Register;

    #[derive(Debug)]
    enum RegOp {
        Write(i64),
        Read,
    }

    impl Model for Register {
        type State = i64;
        type Op = RegOp;
        type Result = Option<i64>;

        fn step(&self, state: &i64, op: &RegOp) -> (i64, Option<i64>) {
            match op {
                RegOp::Write(v) => (*v, None),
                RegOp::Read => (*state, Some(*state)),
            }
        }

        fn accepts(&self, model: &Option<i64>, observed: &Option<i64>) -> bool {
            model == observed
        }

        fn fingerprint(&self, state: &i64) -> u128 {
            fingerprint_of(state)
        }
    }

    fn op<'a>(
        op: &'a RegOp,
        invoked: u64,
        returned: Option<u64>,
        result: Option<&'a Option<i64>>,
    ) -> Operation<'a, RegOp, Option<i64>> {
        Operation {
            op,
            invoked,
            returned,
            result,
        }
    }

    const NONE: Option<i64> = None;

    #[test]
    fn register_histories() {
        let (w1, w2, r) = (RegOp::Write(1), RegOp::Write(2), RegOp::Read);
        let (one, two, zero) = (Some(1), Some(2), Some(0));
        // Sequential write then read of the write.
        let h = [
            op(&w1, 0, Some(1), Some(&NONE)),
            op(&r, 2, Some(3), Some(&one)),
        ];
        assert!(matches!(
            search(&Register, &0, &h, 100),
            Outcome::Linearizable { explored: 2 }
        ));
        // A stale read after the write returned.
        let h = [
            op(&w1, 0, Some(1), Some(&NONE)),
            op(&r, 2, Some(3), Some(&zero)),
        ];
        match search(&Register, &0, &h, 100) {
            Outcome::NotLinearizable(s) => {
                assert_eq!((s.op, s.prefix_len, s.state), (1, 1, 1));
            }
            other => panic!("{other:?}"),
        }
        // Concurrent: either value.
        for seen in [&zero, &one] {
            let h = [
                op(&w1, 0, Some(5), Some(&NONE)),
                op(&r, 1, Some(3), Some(seen)),
            ];
            assert!(matches!(
                search(&Register, &0, &h, 100),
                Outcome::Linearizable { .. }
            ));
        }
        // Touching intervals count as concurrent.
        let h = [
            op(&w1, 0, Some(2), Some(&NONE)),
            op(&r, 2, Some(3), Some(&zero)),
        ];
        assert!(matches!(
            search(&Register, &0, &h, 100),
            Outcome::Linearizable { .. }
        ));
        // Reads must agree on an order of two concurrent writes.
        let h = [
            op(&w1, 0, Some(10), Some(&NONE)),
            op(&w2, 0, Some(10), Some(&NONE)),
            op(&r, 20, Some(21), Some(&one)),
            op(&r, 22, Some(23), Some(&two)),
        ];
        assert!(matches!(
            search(&Register, &0, &h, 100),
            Outcome::NotLinearizable(Stuck { op: 3, .. })
        ));
        // An info write may happen late, or never; not before its invocation.
        let h = [
            op(&w2, 5, None, None),
            op(&r, 10, Some(11), Some(&zero)),
            op(&r, 12, Some(13), Some(&two)),
        ];
        assert!(matches!(
            search(&Register, &0, &h, 100),
            Outcome::Linearizable { .. }
        ));
        let h = [op(&w2, 5, None, None), op(&r, 0, Some(1), Some(&two))];
        assert!(matches!(
            search(&Register, &0, &h, 100),
            Outcome::NotLinearizable(Stuck { op: 1, .. })
        ));
        // Nothing required: trivially fine.
        let h = [op(&w2, 5, None, None)];
        assert!(matches!(
            search(&Register, &0, &h, 0),
            Outcome::Linearizable { explored: 0 }
        ));
        // The budget.
        let h = [
            op(&w1, 0, Some(1), Some(&NONE)),
            op(&r, 2, Some(3), Some(&one)),
        ];
        assert!(matches!(
            search(&Register, &0, &h, 1),
            Outcome::Unknown { explored: 2 }
        ));
    }

    #[test]
    fn deep_histories_do_not_recurse() {
        // 20,000 sequential write/read pairs: a 40,000-deep linearization.
        let writes: Vec<RegOp> = (0..20_000).map(RegOp::Write).collect();
        let reads: Vec<Option<i64>> = (0..20_000).map(Some).collect();
        let mut h = Vec::new();
        for (i, (w, r)) in writes.iter().zip(&reads).enumerate() {
            let t = 4 * i as u64;
            h.push(op(w, t, Some(t + 1), Some(&NONE)));
            h.push(op(&RegOp::Read, t + 2, Some(t + 3), Some(r)));
        }
        match search(&Register, &-1, &h, 1_000_000) {
            Outcome::Linearizable { explored } => assert_eq!(explored, 40_000),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fingerprints_differ() {
        let a = fingerprint_of(&(1u64, 2u64));
        assert_eq!(a, fingerprint_of(&(1u64, 2u64)));
        assert_ne!(a, fingerprint_of(&(2u64, 1u64)));
        assert_ne!(a >> 64, a & u128::from(u64::MAX));
    }
}
