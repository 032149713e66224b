//! P-SMR and opt-PSMR on the B+tree (paper 002 §IV): how a replica's key space is
//! split among its K worker threads, the two command-to-group mappings (CC-G, the
//! conservative one of P-SMR, and OC-G, the optimistic one of opt-PSMR), and the
//! verdict of the opt-PSMR safety check for one thread.
//!
//! Threads t_0..t_{K-1} own contiguous key ranges: key `k` of the key space
//! `0..=key_max` belongs to t_⌊k·K/(key_max+1)⌋ (the paper's ⌊kK/M⌋ with M+1, so that
//! `key_max` itself maps to the last thread); keys above `key_max` belong to the last
//! thread. A replica of one partition splits its partition's keys
//! `key_min..=key_max` alike, from `key_min` (keys below it belong to the first
//! thread). Group g_i is delivered by t_i alone; [`Groups::All`] (g_all) by every
//! thread, as a barrier.

use crate::hooks::SafetyCheck;
use crate::ops::{BatchOp, Op};
use crate::BPlusTree;
use std::ops::RangeInclusive;

/// The groups a command is multicast to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Groups {
    /// g_i: thread `i` alone executes it, in parallel with the others.
    One(usize),
    /// g_all: every thread delivers it; the lowest executes it once all the others
    /// have signalled, then signals them back (synchronous mode).
    All,
}

/// The key space of one replica split among its worker threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPartition {
    threads: usize,
    key_min: u64,
    key_max: u64,
}

impl KeyPartition {
    /// `threads` workers over the keys `0..=key_max`.
    pub fn new(threads: usize, key_max: u64) -> Result<KeyPartition, String> {
        KeyPartition::of(&partita_service::ThreadLayout::new(threads, key_max)?)
    }

    /// The workers of a replica's layout.
    pub fn of(layout: &partita_service::ThreadLayout) -> Result<KeyPartition, String> {
        let l =
            partita_service::ThreadLayout::within(layout.threads, layout.key_min, layout.key_max)?;
        Ok(KeyPartition {
            threads: l.threads,
            key_min: l.key_min,
            key_max: l.key_max,
        })
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn key_max(&self) -> u64 {
        self.key_max
    }

    /// The keys the threads split.
    fn span(&self) -> u128 {
        self.key_max as u128 - self.key_min as u128 + 1
    }

    /// The thread whose range holds `key`.
    pub fn thread_of(&self, key: u64) -> usize {
        if key > self.key_max {
            return self.threads - 1;
        }
        let Some(k) = key.checked_sub(self.key_min) else {
            return 0;
        };
        (k as u128 * self.threads as u128 / self.span()) as usize
    }

    /// The first key of thread `t` (`t` may be `threads`: one past the key space).
    fn first_key(&self, t: usize) -> u128 {
        // Smallest k with ⌊(k−m)·K/S⌋ ≥ t, i.e. m + ⌈t·S/K⌉.
        self.key_min as u128 + (t as u128 * self.span()).div_ceil(self.threads as u128)
    }

    /// The keys thread `t` owns (the first thread's range runs from 0, the last
    /// thread's to `u64::MAX`).
    pub fn range(&self, t: usize) -> RangeInclusive<u64> {
        assert!(t < self.threads, "thread {t} of {}", self.threads);
        let lo = if t == 0 { 0 } else { self.first_key(t) as u64 };
        let hi = if t + 1 == self.threads {
            u64::MAX
        } else {
            (self.first_key(t + 1) - 1) as u64
        };
        lo..=hi
    }

    /// The thread owning every key of `lo..=hi`, if one does.
    fn owner_of_span(&self, lo: u64, hi: u64) -> Option<usize> {
        let t = self.thread_of(lo);
        (self.thread_of(hi) == t).then_some(t)
    }

    /// CC-G, P-SMR's conservative mapping: reads and updates (whose dependencies are
    /// static: the key) go to their key's thread; inserts and deletes, which may change
    /// the tree's shape and so depend on any command, go to every thread. Range reads
    /// go to the one thread owning the whole range, else to all; batches to all.
    pub fn cc_g(&self, op: &Op) -> Groups {
        match *op {
            Op::Read { key } | Op::Update { key, .. } => Groups::One(self.thread_of(key)),
            Op::Query { min, max } if min <= max => self
                .owner_of_span(min, max)
                .map_or(Groups::All, Groups::One),
            Op::Query { .. } => Groups::One(0), // an empty range reads nothing
            Op::Insert { .. } | Op::Delete { .. } | Op::Batch(_) => Groups::All,
            // The neighbour of a key may lie in any thread's range.
            Op::Next { .. } | Op::Prev { .. } => Groups::All,
        }
    }

    /// OC-G, opt-PSMR's optimistic mapping: static dependencies only, so inserts and
    /// deletes go to their key's thread too (a batch to the thread owning all its
    /// keys, if one does); each such command must pass [`KeyPartition::verdict`]
    /// before it executes, and is resubmitted through CC-G if it fails.
    pub fn oc_g(&self, op: &Op) -> Groups {
        match op {
            Op::Insert { key, .. } | Op::Delete { key } => Groups::One(self.thread_of(*key)),
            Op::Batch(ops) => {
                let keys = ops.iter().map(|o| match *o {
                    BatchOp::Insert { key, .. } | BatchOp::Delete { key } => key,
                });
                let (lo, hi) = keys.fold((u64::MAX, 0), |(lo, hi), k| (lo.min(k), hi.max(k)));
                if lo > hi {
                    return Groups::One(0); // an empty batch changes nothing
                }
                self.owner_of_span(lo, hi).map_or(Groups::All, Groups::One)
            }
            _ => self.cc_g(op),
        }
    }

    /// The opt-PSMR safety check of `op` for thread `t` (§IV-B, Algorithm 1): whether
    /// `t` may execute it alone, in parallel with the other threads. It passes iff the
    /// command changes no node but leaves (no split, merge or borrow) and every leaf it
    /// writes lies wholly inside `t`'s range, so that no other thread can reach that
    /// leaf (the paper's conditions (b) and (c): the neighbours' ranges stay outside
    /// the interval the leaf's ancestors route to it). Deterministic: the same tree and
    /// command give the same verdict at every replica. Reads pass.
    pub fn verdict(&self, tree: &BPlusTree, t: usize, op: &Op) -> Verdict {
        self.verdict_of(tree.safety_check(op), t)
    }

    /// [`KeyPartition::verdict`] from the command's [`SafetyCheck`].
    pub(crate) fn verdict_of(&self, check: SafetyCheck, t: usize) -> Verdict {
        match check {
            SafetyCheck::ReadOnly => Verdict::Pass,
            SafetyCheck::Structural => Verdict::Structural,
            check => {
                let (low, high) = check.interval().expect("a local write has an interval");
                let mine = self.range(t);
                if *mine.start() <= low && high <= *mine.end() {
                    Verdict::Pass
                } else {
                    Verdict::SharedLeaf { low, high }
                }
            }
        }
    }
}

/// The answer of [`KeyPartition::verdict`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The thread may execute the command alone.
    Pass,
    /// It would split, merge or rebalance nodes: only under the g_all barrier.
    Structural,
    /// A leaf it writes is routed keys `[low, high]`, not all of them the thread's.
    SharedLeaf { low: u64, high: u64 },
}

impl Verdict {
    pub fn passed(&self) -> bool {
        matches!(self, Verdict::Pass)
    }

    /// `Ok` if it passed, else why not (thread `t`'s), as replicas answer it.
    pub fn reason(&self, t: usize) -> Result<(), String> {
        match *self {
            Verdict::Pass => Ok(()),
            Verdict::Structural => Err("it would split, merge or rebalance a node".into()),
            Verdict::SharedLeaf { low, high } => Err(format!(
                "its leaf is routed keys {low}..={high}, not all of them thread {t}'s"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranges_tile_the_key_space_and_agree_with_thread_of() {
        for (threads, key_min, key_max) in [
            (1, 0, 0),
            (1, 0, 99),
            (3, 0, 9),
            (4, 0, 99),
            (8, 0, 9_999_999),
            (7, 0, 6),
            // A partition's part of the key space.
            (2, 50, 99),
            (3, 1 << 31, (1 << 32) - 1),
            (4, u64::MAX - 3, u64::MAX),
        ] {
            let layout = partita_service::ThreadLayout::within(threads, key_min, key_max);
            let p = KeyPartition::of(&layout.unwrap()).unwrap();
            let mut next = 0u64;
            for t in 0..threads {
                let r = p.range(t);
                assert_eq!(*r.start(), next, "{threads} threads, {key_min}..={key_max}");
                assert!(r.start() <= r.end());
                assert_eq!(p.thread_of(*r.start()), t);
                if t + 1 < threads {
                    assert_eq!(p.thread_of(*r.end()), t);
                    next = r.end() + 1;
                } else {
                    assert_eq!(*r.end(), u64::MAX);
                }
            }
            assert_eq!(p.thread_of(key_max), threads - 1);
            assert_eq!(p.thread_of(u64::MAX), threads - 1);
            assert_eq!(p.thread_of(key_min), 0);
            // Every thread owns as many of the partition's keys as another, to one.
            let span = key_max as u128 - key_min as u128 + 1;
            for t in 0..threads {
                let r = p.range(t);
                let (lo, hi) = ((*r.start()).max(key_min), (*r.end()).min(key_max));
                let owned = hi as u128 - lo as u128 + 1;
                assert!(owned * threads as u128 >= span - threads as u128);
                assert!(owned * threads as u128 <= span + threads as u128);
            }
        }
        // Two partitions of 2^32 keys, two threads each: the second partition's threads
        // split its half.
        let second = partita_service::ThreadLayout::within(2, 1 << 31, (1 << 32) - 1).unwrap();
        let p = KeyPartition::of(&second).unwrap();
        assert_eq!(p.thread_of((1 << 31) + (1 << 30) - 1), 0);
        assert_eq!(p.thread_of((1 << 31) + (1 << 30)), 1);
        // The paper's setting: 8 threads over 10 million keys, 1.25 million each.
        let p = KeyPartition::new(8, 9_999_999).unwrap();
        assert_eq!(p.range(1), 1_250_000..=2_499_999);
    }

    #[test]
    fn bad_partitions_are_refused_with_the_reason() {
        assert!(KeyPartition::new(0, 10)
            .unwrap_err()
            .contains("at least one"));
        assert!(KeyPartition::new(5, 3)
            .unwrap_err()
            .contains("every thread needs a key"));
        assert!(KeyPartition::new(2000, u64::MAX).is_err());
        assert!(KeyPartition::new(4, u64::MAX).is_ok());
    }

    #[test]
    fn cc_g_and_oc_g_follow_the_paper() {
        let p = KeyPartition::new(4, 99).unwrap();
        let read = Op::Read { key: 60 };
        let ins = Op::Insert { key: 60, value: 1 };
        let del = Op::Delete { key: 10 };
        assert_eq!(p.cc_g(&read), Groups::One(2));
        assert_eq!(p.cc_g(&Op::Update { key: 99, value: 0 }), Groups::One(3));
        assert_eq!(p.cc_g(&ins), Groups::All);
        assert_eq!(p.cc_g(&del), Groups::All);
        assert_eq!(p.oc_g(&ins), Groups::One(2));
        assert_eq!(p.oc_g(&del), Groups::One(0));
        assert_eq!(p.oc_g(&read), Groups::One(2));
        assert_eq!(p.cc_g(&Op::Query { min: 20, max: 40 }), Groups::All);
        assert_eq!(p.cc_g(&Op::Query { min: 26, max: 40 }), Groups::One(1));
        let batch =
            |keys: &[u64]| Op::Batch(keys.iter().map(|&key| BatchOp::Delete { key }).collect());
        assert_eq!(p.oc_g(&batch(&[51, 60, 74])), Groups::One(2));
        assert_eq!(p.oc_g(&batch(&[51, 80])), Groups::All);
        assert_eq!(p.cc_g(&batch(&[51, 60])), Groups::All);
    }

    /// Under OC-G every command goes to one thread, and two commands CC-G would keep
    /// apart (different groups) are never both written by one command of OC-G: the
    /// mappings agree wherever the dependency is static.
    #[test]
    fn oc_g_differs_from_cc_g_only_for_shape_changing_commands() {
        let p = KeyPartition::new(8, 1000).unwrap();
        for key in (0..=1000).step_by(7) {
            for op in [Op::Read { key }, Op::Update { key, value: 1 }] {
                assert_eq!(p.cc_g(&op), p.oc_g(&op));
            }
            assert_eq!(
                p.oc_g(&Op::Insert { key, value: 1 }),
                p.cc_g(&Op::Read { key })
            );
        }
    }

    fn tree_with(keys: &[u64]) -> BPlusTree {
        let mut t = BPlusTree::with_node_keys(4);
        for &k in keys {
            t.insert(k, k);
        }
        t
    }

    /// What a pass promises, checked against the execution (`before` → `after`) of a
    /// command on `key` by thread `t`: no change of shape, and the leaf it wrote holds
    /// only the thread's keys and is routed none of another thread's.
    fn pass_was_safe(
        before: &BPlusTree,
        after: &BPlusTree,
        p: &KeyPartition,
        t: usize,
        key: u64,
    ) -> Result<(), String> {
        if after.structure_stats() != before.structure_stats()
            || (after.internal_count(), after.leaf_count(), after.height())
                != (
                    before.internal_count(),
                    before.leaf_count(),
                    before.height(),
                )
        {
            return Err("a pass changed the tree's shape".into());
        }
        let leaf_of = |tree: &BPlusTree, k: u64| tree.path_to_leaf(k).last().unwrap().id;
        let leaf_keys = |tree: &BPlusTree| -> Vec<u64> {
            let leaf = leaf_of(tree, key);
            tree.iter()
                .map(|(k, _)| k)
                .filter(|&k| leaf_of(tree, k) == leaf)
                .collect()
        };
        let mine = p.range(t);
        for k in leaf_keys(before).iter().chain(leaf_keys(after).iter()) {
            if !mine.contains(k) {
                return Err(format!("leaf key {k} outside thread {t}'s {mine:?}"));
            }
        }
        let leaf = leaf_of(before, key);
        if (*mine.start() > 0 && leaf_of(before, mine.start() - 1) == leaf)
            || (*mine.end() < u64::MAX && leaf_of(before, mine.end() + 1) == leaf)
        {
            return Err(format!("thread {t}'s leaf is routed keys outside {mine:?}"));
        }
        Ok(())
    }

    /// Control: a check that forgets conditions (b) and (c) (it passes every command
    /// that changes no shape, wherever its leaf lies) is caught by `pass_was_safe`.
    #[test]
    fn a_check_without_the_range_condition_is_caught() {
        // Keys in a scrambled order, so leaves are of mixed fill.
        let tree = tree_with(&(0..60).map(|k| k * 37 % 101).collect::<Vec<_>>());
        let p = KeyPartition::new(2, 100).unwrap();
        let mut caught = 0;
        let ops = (0..=100).flat_map(|key| [Op::Insert { key, value: 1 }, Op::Delete { key }]);
        for op in ops {
            let (Op::Insert { key, .. } | Op::Delete { key }) = op else {
                unreachable!()
            };
            let Groups::One(t) = p.oc_g(&op) else {
                unreachable!()
            };
            let planted_bug_passes = tree.safety_check(&op).is_local();
            if planted_bug_passes && !p.verdict(&tree, t, &op).passed() {
                let mut after = tree.clone();
                after.execute(&op);
                let e = pass_was_safe(&tree, &after, &p, t, key)
                    .expect_err("an unsafe pass went unnoticed");
                assert!(e.contains("outside"), "{e}");
                caught += 1;
            }
        }
        assert!(
            caught > 0,
            "the scenario has no leaf shared by the two threads"
        );
    }

    proptest! {
        /// What the verdict promises, checked by doing it: a command that passes for
        /// its thread changes no internal node and writes only leaves every one of
        /// whose keys (before and after) the thread owns; one judged structural does
        /// change the shape when executed.
        #[test]
        fn a_pass_touches_only_the_threads_own_leaves(
            keys in proptest::collection::btree_set(0u64..400, 0..120),
            threads in 1usize..6,
            ops in proptest::collection::vec((any::<bool>(), 0u64..400), 1..40),
        ) {
            let keys: Vec<u64> = keys.into_iter().collect();
            let mut tree = tree_with(&keys);
            let p = KeyPartition::new(threads, 399).unwrap();
            for (insert, key) in ops {
                let op = if insert { Op::Insert { key, value: 7 } } else { Op::Delete { key } };
                let Groups::One(t) = p.oc_g(&op) else { unreachable!() };
                let verdict = p.verdict(&tree, t, &op);
                let before = tree.structure_stats();
                let mut after = tree.clone();
                after.execute(&op);
                match verdict {
                    Verdict::Pass => {
                        if let Err(e) = pass_was_safe(&tree, &after, &p, t, key) {
                            prop_assert!(false, "{}", e);
                        }
                    }
                    Verdict::Structural => {
                        prop_assert!(after.structure_stats().total() > before.total(), "judged structural, changed no shape");
                    }
                    Verdict::SharedLeaf { low, high } => {
                        let mine = p.range(t);
                        prop_assert!(low < *mine.start() || high > *mine.end());
                    }
                }
                tree = after;
            }
        }
    }
}
