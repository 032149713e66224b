//! The sequential specification: an ordered map u64 -> u64.
//!
//! [`apply_op`] is the plain reference semantics (the generator uses it to produce
//! linearizable histories). `Model` is the same map as the search needs it: checking an
//! observed result without allocating, undoing changes in LIFO order while the search
//! backtracks, and an incrementally maintained 128-bit hash of the contents so that a
//! search configuration can be memoized in O(1).

use std::collections::BTreeMap;
use std::ops::Bound::{self, Excluded, Unbounded};

use partita_btree::{BatchOp, Op, OpResult};

/// Execute `op` on `map` and return its result (the specification, see
/// `partita_btree::ops`).
pub fn apply_op(map: &mut BTreeMap<u64, u64>, op: &Op) -> OpResult {
    match op {
        Op::Insert { key, value } => {
            let absent = !map.contains_key(key);
            if absent {
                map.insert(*key, *value);
            }
            OpResult::Inserted(absent)
        }
        Op::Delete { key } => OpResult::Removed(map.remove(key)),
        Op::Read { key } => OpResult::Value(map.get(key).copied()),
        Op::Update { key, value } => match map.get_mut(key) {
            Some(v) => OpResult::Old(Some(std::mem::replace(v, *value))),
            None => OpResult::Old(None),
        },
        Op::Query { min, max } => OpResult::Entries(if min > max {
            Vec::new()
        } else {
            map.range(min..=max).map(|(k, v)| (*k, *v)).collect()
        }),
        Op::Next { key } => OpResult::Entry(
            map.range((Excluded(*key), Unbounded))
                .next()
                .map(|(k, v)| (*k, *v)),
        ),
        Op::Prev { key } => OpResult::Entry(map.range(..*key).next_back().map(|(k, v)| (*k, *v))),
        Op::Batch(ops) => {
            OpResult::Batch(ops.iter().map(|b| apply_op(map, &Op::from(*b))).collect())
        }
    }
}

/// What the search linearizes: a client operation, or the synthetic observation of the
/// final state that [`crate::check_with_final_state`] adds.
#[derive(Clone, Debug)]
pub(crate) enum Subject<'a> {
    Op(&'a Op),
    /// "These keys have exactly these values" (None = absent).
    Observe(Vec<(u64, Option<u64>)>),
}

impl Subject<'_> {
    /// Whether linearizing it with the observed `result` (`None`: unknown) can change the
    /// map. An insert that reports `inserted=false`, a delete or update that found nothing
    /// (or an update to the same value) is, as observed, a read: the search treats it as
    /// one, which is what lets it skip ordering such operations among themselves.
    pub(crate) fn changes_state(&self, result: Option<&OpResult>) -> bool {
        match self {
            Subject::Op(op) => match result {
                None => op.is_mutation(),
                Some(r) => op_changes_state(op, r),
            },
            Subject::Observe(_) => false,
        }
    }
}

fn op_changes_state(op: &Op, r: &OpResult) -> bool {
    match (op, r) {
        (Op::Insert { .. }, OpResult::Inserted(inserted)) => *inserted,
        (Op::Delete { .. }, OpResult::Removed(old)) => old.is_some(),
        (Op::Update { value, .. }, OpResult::Old(old)) => old.is_some_and(|o| o != *value),
        (Op::Batch(ops), OpResult::Batch(rs)) => ops
            .iter()
            .zip(rs)
            .any(|(b, r)| op_changes_state(&Op::from(*b), r)),
        // Read-only operations, and results of the wrong kind (which never match).
        _ => false,
    }
}

/// What an operation needs of one key when it is linearized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Exactly this value (None: absent).
    Is(Option<u64>),
    /// Present, any value.
    Present,
    /// Nothing can satisfy it (e.g. a query result out of its range).
    Never,
}

impl Need {
    pub(crate) fn accepts(self, v: Option<u64>) -> bool {
        match self {
            Need::Is(x) => x == v,
            Need::Present => v.is_some(),
            Need::Never => false,
        }
    }
}

/// The state of `key` after `op` (observed result `result`, None: unknown) runs on it from
/// `v`, or None when that result is impossible from `v`. Only `op`'s accesses to `key`
/// count; an operation that does not touch `key` leaves it alone.
pub(crate) fn effect_on_key(
    op: &Op,
    result: Option<&OpResult>,
    key: u64,
    v: Option<u64>,
) -> Option<Option<u64>> {
    match (op, result) {
        (Op::Insert { key: k, value }, r) if *k == key => match r {
            Some(OpResult::Inserted(b)) if *b != v.is_none() => None,
            Some(OpResult::Inserted(_)) | None => Some(v.or(Some(*value))),
            Some(_) => None,
        },
        (Op::Delete { key: k }, r) if *k == key => match r {
            Some(OpResult::Removed(old)) if *old != v => None,
            Some(OpResult::Removed(_)) | None => Some(None),
            Some(_) => None,
        },
        (Op::Update { key: k, value }, r) if *k == key => match r {
            Some(OpResult::Old(old)) if *old != v => None,
            Some(OpResult::Old(_)) | None => Some(v.map(|_| *value)),
            Some(_) => None,
        },
        (Op::Batch(bs), r) => {
            let rs = match r {
                Some(OpResult::Batch(rs)) if rs.len() == bs.len() => Some(rs),
                Some(_) => return None,
                None => None,
            };
            let mut cur = v;
            for (i, b) in bs.iter().enumerate() {
                cur = effect_on_key(&Op::from(*b), rs.map(|rs| &rs[i]), key, cur)?;
            }
            Some(cur)
        }
        _ => Some(v),
    }
}

/// SplitMix64 finalizer: a cheap bijective mixer with good avalanche.
pub(crate) fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// 128-bit pseudo-random tag of a value, from two independent mixes.
pub(crate) fn tag128(x: u64, salt: u64) -> u128 {
    let a = mix64(x ^ mix64(salt));
    let b = mix64(a ^ x.rotate_left(29) ^ mix64(salt ^ 0x9e37_79b9_7f4a_7c15));
    ((a as u128) << 64) | b as u128
}

/// Hash contribution of one entry. The state hash is the XOR over all entries, so that
/// adding or removing an entry updates it in O(1) and equal maps hash equally no matter
/// in which order they were built.
fn entry_hash(key: u64, value: u64) -> u128 {
    tag128(key ^ mix64(value ^ 0x5151_5151_0000_0001), 0xe17a)
}

/// The ordered map with an undo log and an incremental hash.
pub(crate) struct Model {
    map: BTreeMap<u64, u64>,
    hash: u128,
    /// (key, value before the change), most recent last.
    undo: Vec<(u64, Option<u64>)>,
}

impl Model {
    pub(crate) fn new(entries: impl IntoIterator<Item = (u64, u64)>) -> Model {
        let map: BTreeMap<u64, u64> = entries.into_iter().collect();
        let hash = map.iter().fold(0, |h, (k, v)| h ^ entry_hash(*k, *v));
        Model {
            map,
            hash,
            undo: Vec::new(),
        }
    }

    pub(crate) fn hash(&self) -> u128 {
        self.hash
    }

    pub(crate) fn get(&self, key: u64) -> Option<u64> {
        self.map.get(&key).copied()
    }

    /// Set `key` to `value` (None: remove), logging the old value.
    fn put(&mut self, key: u64, value: Option<u64>) {
        let old = match value {
            Some(v) => self.map.insert(key, v),
            None => self.map.remove(&key),
        };
        if let Some(o) = old {
            self.hash ^= entry_hash(key, o);
        }
        if let Some(v) = value {
            self.hash ^= entry_hash(key, v);
        }
        self.undo.push((key, old));
    }

    /// A point to [`Model::rollback`] to.
    pub(crate) fn mark(&self) -> usize {
        self.undo.len()
    }

    /// Undo every change made since `mark`.
    pub(crate) fn rollback(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let (key, old) = self.undo.pop().expect("undo log shorter than mark");
            let cur = match old {
                Some(v) => self.map.insert(key, v),
                None => self.map.remove(&key),
            };
            if let Some(c) = cur {
                self.hash ^= entry_hash(key, c);
            }
            if let Some(o) = old {
                self.hash ^= entry_hash(key, o);
            }
        }
    }

    /// Apply `s` if its observed result (`None`: unknown, anything goes) is what the model
    /// returns now. Returns false on a mismatch; the caller then rolls back to a mark
    /// taken before (a batch may have applied a prefix of its ops).
    pub(crate) fn step(&mut self, s: &Subject<'_>, expected: Option<&OpResult>) -> bool {
        match s {
            Subject::Op(op) => self.step_op(op, expected),
            Subject::Observe(points) => points.iter().all(|&(k, v)| self.get(k) == v),
        }
    }

    fn step_op(&mut self, op: &Op, exp: Option<&OpResult>) -> bool {
        // `exp != Some(x)` with x built on the stack: none of these allocate.
        let differs = |r: OpResult| exp.is_some_and(|e| *e != r);
        match op {
            Op::Insert { key, value } => {
                let absent = !self.map.contains_key(key);
                if differs(OpResult::Inserted(absent)) {
                    return false;
                }
                if absent {
                    self.put(*key, Some(*value));
                }
                true
            }
            Op::Delete { key } => {
                let old = self.get(*key);
                if differs(OpResult::Removed(old)) {
                    return false;
                }
                if old.is_some() {
                    self.put(*key, None);
                }
                true
            }
            Op::Read { key } => !differs(OpResult::Value(self.get(*key))),
            Op::Update { key, value } => {
                let old = self.get(*key);
                if differs(OpResult::Old(old)) {
                    return false;
                }
                if old.is_some() {
                    self.put(*key, Some(*value));
                }
                true
            }
            Op::Query { min, max } => match exp {
                None => true,
                Some(OpResult::Entries(es)) if min > max => es.is_empty(),
                Some(OpResult::Entries(es)) => self
                    .map
                    .range(min..=max)
                    .map(|(k, v)| (*k, *v))
                    .eq(es.iter().copied()),
                Some(_) => false,
            },
            Op::Next { key } => !differs(OpResult::Entry(
                self.map
                    .range((Excluded(*key), Unbounded))
                    .next()
                    .map(|(k, v)| (*k, *v)),
            )),
            Op::Prev { key } => !differs(OpResult::Entry(
                self.map.range(..*key).next_back().map(|(k, v)| (*k, *v)),
            )),
            Op::Batch(ops) => {
                let results = match exp {
                    None => None,
                    Some(OpResult::Batch(rs)) if rs.len() == ops.len() => Some(rs),
                    Some(_) => return false,
                };
                ops.iter()
                    .enumerate()
                    .all(|(i, b)| self.step_op(&Op::from(*b), results.map(|rs| &rs[i])))
            }
        }
    }

    /// How far the current state is from one in which `s` would return `result`: the
    /// number of keys whose state contradicts what the result implies (a batch counts its
    /// mismatching sub-operations). 0 means the step would succeed. The search uses it to
    /// try first the operations that bring a stuck operation closer to its result.
    pub(crate) fn distance(&mut self, s: &Subject<'_>, result: Option<&OpResult>) -> usize {
        let Some(result) = result else {
            return match s {
                Subject::Observe(points) => {
                    points.iter().filter(|&&(k, v)| self.get(k) != v).count()
                }
                Subject::Op(_) => 0,
            };
        };
        let Subject::Op(op) = s else {
            return 0;
        };
        let present_between = |map: &BTreeMap<u64, u64>, lo: Bound<u64>, hi: Bound<u64>| {
            // A heuristic: beyond a few dozen, "far" is all the search needs to know.
            map.range((lo, hi)).take(64).count()
        };
        match (op, result) {
            (Op::Query { min, max }, OpResult::Entries(es)) => {
                if min > max {
                    return es.len();
                }
                // Keys present on one side only or with different values.
                let mut model = self.map.range(min..=max).peekable();
                let mut seen = es.iter().peekable();
                let mut d = 0;
                for _ in 0..4096 {
                    match (model.peek(), seen.peek()) {
                        (None, None) => break,
                        (Some(_), None) => {
                            model.next();
                            d += 1;
                        }
                        (None, Some(_)) => {
                            seen.next();
                            d += 1;
                        }
                        (Some((mk, mv)), Some((sk, sv))) => {
                            if **mk == *sk {
                                d += usize::from(**mv != *sv);
                                model.next();
                                seen.next();
                            } else if **mk < *sk {
                                model.next();
                                d += 1;
                            } else {
                                seen.next();
                                d += 1;
                            }
                        }
                    }
                }
                d
            }
            (Op::Next { key }, OpResult::Entry(e)) => match e {
                Some((k, v)) if k > key => {
                    present_between(&self.map, Excluded(*key), Excluded(*k))
                        + usize::from(self.get(*k) != Some(*v))
                }
                Some(_) => 1,
                None => present_between(&self.map, Excluded(*key), Unbounded),
            },
            (Op::Prev { key }, OpResult::Entry(e)) => match e {
                Some((k, v)) if k < key => {
                    present_between(&self.map, Excluded(*k), Excluded(*key))
                        + usize::from(self.get(*k) != Some(*v))
                }
                Some(_) => 1,
                None => present_between(&self.map, Unbounded, Excluded(*key)),
            },
            (Op::Batch(ops), OpResult::Batch(rs)) if ops.len() == rs.len() => {
                let mark = self.mark();
                let d = ops
                    .iter()
                    .zip(rs)
                    .filter(|(b, r)| self.exec(&Op::from(**b)) != **r)
                    .count();
                self.rollback(mark);
                d
            }
            (Op::Batch(_), _) => usize::MAX / 2,
            (op, r) => usize::from(self.eval(op) != *r),
        }
    }

    /// The needs of `s` (with observed `result`) on individual keys that the current state
    /// does not meet, at most `cap` of them. Empty when the step would succeed, except for
    /// needs a batch has on keys it changed itself (only its first access to a key counts).
    pub(crate) fn unmet_needs(
        &self,
        s: &Subject<'_>,
        result: Option<&OpResult>,
        cap: usize,
    ) -> Vec<(u64, Need)> {
        let mut out: Vec<(u64, Need)> = Vec::new();
        let need = |out: &mut Vec<(u64, Need)>, key: u64, n: Need| {
            if out.len() < cap && !n.accepts(self.get(key)) {
                out.push((key, n));
            }
        };
        let never = |out: &mut Vec<(u64, Need)>, key: u64| out.push((key, Need::Never));
        let op = match (s, result) {
            (Subject::Observe(points), _) => {
                for &(k, v) in points {
                    need(&mut out, k, Need::Is(v));
                }
                return out;
            }
            (Subject::Op(_), None) => return out,
            (Subject::Op(op), Some(_)) => *op,
        };
        let result = result.expect("matched Some above");
        match (op, result) {
            (Op::Read { key }, OpResult::Value(v))
            | (Op::Delete { key }, OpResult::Removed(v))
            | (Op::Update { key, .. }, OpResult::Old(v)) => need(&mut out, *key, Need::Is(*v)),
            (Op::Insert { key, .. }, OpResult::Inserted(true)) => {
                need(&mut out, *key, Need::Is(None))
            }
            (Op::Insert { key, .. }, OpResult::Inserted(false)) => {
                need(&mut out, *key, Need::Present)
            }
            (Op::Query { min, max }, OpResult::Entries(es)) => {
                let sorted = es.windows(2).all(|w| w[0].0 < w[1].0);
                let inside = es.iter().all(|e| (*min..=*max).contains(&e.0));
                if !sorted || !inside {
                    never(&mut out, *min);
                    return out;
                }
                for (k, _) in self.map.range(min..=max) {
                    if es.binary_search_by_key(k, |e| e.0).is_err() {
                        need(&mut out, *k, Need::Is(None));
                    }
                }
                for &(k, v) in es {
                    need(&mut out, k, Need::Is(Some(v)));
                }
            }
            (Op::Next { key: x }, OpResult::Entry(e))
            | (Op::Prev { key: x }, OpResult::Entry(e)) => {
                let next = matches!(op, Op::Next { .. });
                let gap: (Bound<u64>, Bound<u64>) = match (next, e) {
                    (true, Some((k, _))) if k > x => (Excluded(*x), Excluded(*k)),
                    (false, Some((k, _))) if k < x => (Excluded(*k), Excluded(*x)),
                    (_, Some((k, _))) => {
                        never(&mut out, *k);
                        return out;
                    }
                    (true, None) => (Excluded(*x), Unbounded),
                    (false, None) => (Unbounded, Excluded(*x)),
                };
                for (k, _) in self.map.range(gap).take(cap) {
                    need(&mut out, *k, Need::Is(None));
                }
                if let Some((k, v)) = e {
                    need(&mut out, *k, Need::Is(Some(*v)));
                }
            }
            (Op::Batch(bs), OpResult::Batch(rs)) if bs.len() == rs.len() => {
                let mut seen: Vec<u64> = Vec::new();
                for (b, r) in bs.iter().zip(rs) {
                    let sub = Op::from(*b);
                    let key = match b {
                        BatchOp::Insert { key, .. } | BatchOp::Delete { key } => *key,
                    };
                    if seen.contains(&key) {
                        continue;
                    }
                    seen.push(key);
                    let n = self.unmet_needs(&Subject::Op(&sub), Some(r), 1);
                    out.extend(n);
                    if out.len() >= cap {
                        break;
                    }
                }
            }
            (_, _) => never(&mut out, 0),
        }
        out
    }

    /// What `op` would return in the current state (no net change). Diagnostics only.
    pub(crate) fn eval(&mut self, op: &Op) -> OpResult {
        let mark = self.mark();
        let r = self.exec(op);
        self.rollback(mark);
        r
    }

    fn exec(&mut self, op: &Op) -> OpResult {
        match op {
            Op::Insert { key, value } => {
                let absent = !self.map.contains_key(key);
                if absent {
                    self.put(*key, Some(*value));
                }
                OpResult::Inserted(absent)
            }
            Op::Delete { key } => {
                let old = self.get(*key);
                if old.is_some() {
                    self.put(*key, None);
                }
                OpResult::Removed(old)
            }
            Op::Update { key, value } => {
                let old = self.get(*key);
                if old.is_some() {
                    self.put(*key, Some(*value));
                }
                OpResult::Old(old)
            }
            Op::Batch(ops) => {
                OpResult::Batch(ops.iter().map(|b| self.exec(&Op::from(*b))).collect())
            }
            // Read-only: the reference semantics on the map itself are exact.
            read_only => apply_op(&mut self.map, read_only),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_op(rng: &mut ChaCha8Rng) -> Op {
        let key = rng.gen_range(0..12u64);
        let value = rng.gen_range(0..4u64);
        match rng.gen_range(0..8) {
            0 => Op::Insert { key, value },
            1 => Op::Delete { key },
            2 => Op::Read { key },
            3 => Op::Update { key, value },
            4 => Op::Query {
                min: key,
                max: rng.gen_range(0..14),
            },
            5 => Op::Next { key },
            6 => Op::Prev { key },
            _ => Op::Batch(
                (0..rng.gen_range(0..4))
                    .map(|_| {
                        let key = rng.gen_range(0..12);
                        if rng.gen_bool(0.5) {
                            BatchOp::Insert { key, value }
                        } else {
                            BatchOp::Delete { key }
                        }
                    })
                    .collect(),
            ),
        }
    }

    /// The search's model agrees with the reference semantics: `step` accepts exactly the
    /// reference result and ends in the same state; rollback restores map and hash.
    #[test]
    fn model_agrees_with_reference() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut reference = BTreeMap::new();
        let mut model = Model::new([]);
        for _ in 0..5000 {
            let op = random_op(&mut rng);
            let before_hash = model.hash();
            let before_map = model.map.clone();
            assert_eq!(model.eval(&op), apply_op(&mut reference.clone(), &op));
            assert_eq!(model.hash(), before_hash);
            let mark = model.mark();
            let expected = apply_op(&mut reference, &op);
            // A different result of the same kind must be refused.
            let wrong = match &expected {
                OpResult::Inserted(b) => OpResult::Inserted(!b),
                OpResult::Value(v) => OpResult::Value(v.map_or(Some(99), |_| None)),
                OpResult::Entries(es) => {
                    let mut es = es.clone();
                    es.push((1000, 0));
                    OpResult::Entries(es)
                }
                _ => OpResult::Removed(Some(1234)),
            };
            if !model.step(&Subject::Op(&op), Some(&wrong)) {
                model.rollback(mark);
            } else {
                panic!("{op:?} accepted wrong result {wrong:?}");
            }
            assert_eq!(model.map, before_map);
            assert_eq!(model.hash(), before_hash);
            assert!(model.step(&Subject::Op(&op), Some(&expected)));
            assert_eq!(model.map, reference);
            assert_eq!(
                model.hash(),
                Model::new(reference.iter().map(|(k, v)| (*k, *v))).hash()
            );
            if rng.gen_bool(0.3) {
                model.rollback(mark);
                assert_eq!(model.map, before_map);
                assert_eq!(model.hash(), before_hash);
                reference = before_map;
            }
        }
    }
}
