//! A set of slots kept as disjoint, non-touching intervals, so that runs of
//! consecutive slots cost one entry and "the first slot at or after `x` not in the
//! set" is one lookup. EPaxos's executor asks that for every column of every
//! instance it walks; as a plain set of slots the answer meant stepping over every
//! slot already executed or visited, which made a walk quadratic in the commands in
//! flight.

use std::collections::BTreeMap;

use crate::epaxos::Slot;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotSet {
    /// start → end (inclusive); no two intervals overlap or touch.
    runs: BTreeMap<Slot, Slot>,
}

impl SlotSet {
    pub(crate) fn new() -> SlotSet {
        SlotSet::default()
    }

    /// The interval holding `x`, if any.
    fn run_of(&self, x: Slot) -> Option<(Slot, Slot)> {
        self.runs
            .range(..=x)
            .next_back()
            .filter(|(_, &e)| e >= x)
            .map(|(&s, &e)| (s, e))
    }

    pub(crate) fn contains(&self, x: Slot) -> bool {
        self.run_of(x).is_some()
    }

    /// Adds `x`; false if it was there.
    pub(crate) fn insert(&mut self, x: Slot) -> bool {
        let fresh = !self.contains(x);
        if fresh {
            self.insert_run(x, x);
        }
        fresh
    }

    /// Adds every slot of `a..=e`: one run with the runs it overlaps or touches.
    pub(crate) fn insert_run(&mut self, a: Slot, e: Slot) {
        assert!(a <= e, "an empty run");
        let (mut lo, mut hi) = (a, e);
        // A run holding `a - 1` (and perhaps more of `a..=e`).
        if let Some((s, t)) = a.checked_sub(1).and_then(|p| self.run_of(p)) {
            self.runs.remove(&s);
            lo = s;
            hi = hi.max(t);
        }
        // Runs starting inside `a..=e + 1`.
        while let Some((&s, &t)) = self.runs.range(a..=e.saturating_add(1)).next() {
            self.runs.remove(&s);
            hi = hi.max(t);
        }
        self.runs.insert(lo, hi);
    }

    /// If a run starts at `x`, removes it and returns its last slot (a prefix that
    /// reaches `x - 1` absorbs it).
    pub(crate) fn take_run_at(&mut self, x: Slot) -> Option<Slot> {
        self.runs.remove(&x)
    }

    /// The first slot at or after `x` that is not in the set.
    pub(crate) fn next_absent(&self, x: Slot) -> Slot {
        match self.run_of(x) {
            Some((_, e)) => e + 1,
            None => x,
        }
    }

    pub(crate) fn clear(&mut self) {
        self.runs.clear();
    }

    /// Every slot, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Slot> + '_ {
        self.runs.iter().flat_map(|(&s, &e)| s..=e)
    }

    /// The largest slot.
    pub(crate) fn max(&self) -> Option<Slot> {
        self.runs.last_key_value().map(|(_, &e)| e)
    }

    /// The smallest slot.
    pub(crate) fn min(&self) -> Option<Slot> {
        self.runs.first_key_value().map(|(&s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Against a plain set: every operation, in any order.
        #[test]
        fn behaves_as_a_set(ops in proptest::collection::vec((0u8..4, 0u64..40), 0..200)) {
            let mut s = SlotSet::new();
            let mut m = BTreeSet::new();
            for (op, x) in ops {
                match op {
                    0 => prop_assert_eq!(s.insert(x), m.insert(x)),
                    3 => {
                        let e = x + x % 5;
                        s.insert_run(x, e);
                        m.extend(x..=e);
                    }
                    1 => {
                        let got = s.take_run_at(x);
                        let want = if m.contains(&x) && (x == 0 || !m.contains(&(x - 1))) {
                            let mut e = x;
                            while m.contains(&(e + 1)) { e += 1; }
                            for y in x..=e { m.remove(&y); }
                            Some(e)
                        } else {
                            None
                        };
                        prop_assert_eq!(got, want);
                    }
                    2 => {
                        let mut y = x;
                        while m.contains(&y) { y += 1; }
                        prop_assert_eq!(s.next_absent(x), y);
                    }
                    _ => unreachable!(),
                }
                prop_assert_eq!(s.iter().collect::<Vec<_>>(), m.iter().copied().collect::<Vec<_>>());
                prop_assert_eq!(s.max(), m.last().copied());
                prop_assert_eq!(s.min(), m.first().copied());
                for (a, b) in s.runs.iter().zip(s.runs.iter().skip(1)) {
                    prop_assert!(a.1 + 1 < *b.0, "runs touch: {:?} {:?}", a, b);
                }
            }
        }
    }
}
