//! The B+tree as a replicated service ([`partita_service::StateMachine`]): commands
//! are [`Op`]s, replies [`OpResult`]s, undo records the tree's own [`Undo`]s.
//!
//! State partitioning (paper 001 §III-C, §IV): a key's position is the key itself, so
//! a partition holds a range of keys. Splitting and merging:
//!
//! | operation | partitions | sub-command in partition p | merge |
//! | --- | --- | --- | --- |
//! | insert, delete, read, update | the key's | the same | the only sub-result |
//! | query `min..=max` | every partition overlapping the range | the range clipped to p | concatenation in partition order |
//! | next `k` | the key's and every later one | the same | the first non-null in partition order |
//! | prev `k` | the key's and every earlier one | the same | the last non-null in partition order |
//! | batch | the partitions of its keys | the ops of p, in order | results put back in the batch's order |

pub use crate::ops::{BatchOp, Op, OpResult};
use crate::psmr::{Groups, KeyPartition};
use crate::{BPlusTree, Undo};
use partita_service::{
    Access, ExecutionWork, MergeError, Objects, ServiceCodec, SharedExecution, SplitError,
    StateMachine, ThreadLayout,
};
use partita_types::{mask_partitions, ClientId, Command, NodeId, PartitionId, PartitionMap};
use std::ops::Bound;

/// Next and prev read at most this many keys up to their neighbour (see
/// `StateMachine::access`); further apart, they conflict with everything.
pub const NEIGHBOUR_SPAN_MAX: u64 = 64;

/// Every key of `lo..=hi`, read; everything if that is more than [`NEIGHBOUR_SPAN_MAX`]
/// keys apart.
fn span(lo: u64, hi: u64) -> Access {
    if hi - lo > NEIGHBOUR_SPAN_MAX {
        return Access::everything();
    }
    let mut a = Access::default();
    for k in lo..=hi {
        a.add(k, false);
    }
    a
}

/// What a next of `key` reads, the tree's next key being `next`: every key from `key`
/// to it (at most [`NEIGHBOUR_SPAN_MAX`] keys; beyond, or with no next key,
/// everything). That is enough wherever it is proposed: only an insert inside that
/// range or an update of the neighbour can change its answer, and such a command
/// conflicts with it; a delete of the neighbour does too (it writes a key of the
/// range). A command that only a later, larger range would cover cannot change the
/// answer while the neighbour stands.
pub fn next_access(key: u64, next: Option<u64>) -> Access {
    match next {
        Some(n) if n > key => span(key, n),
        _ => Access::everything(),
    }
}

/// What a prev of `key` reads, the tree's previous key being `prev`: as
/// [`next_access`], downwards; with no previous key, every key from 0 to `key` (only an
/// insert below it can change the answer), or everything if that is too many.
pub fn prev_access(key: u64, prev: Option<u64>) -> Access {
    match prev {
        Some(p) if p < key => span(p, key),
        _ => span(0, key),
    }
}

impl ServiceCodec for BPlusTree {
    const NAME: &'static str = "btree";
    type Command = Op;
    type Reply = OpResult;
    type Key = u64;
    fn is_read_only(op: &Op) -> bool {
        !op.is_mutation()
    }
    fn objects(op: &Op) -> Objects<u64> {
        match op {
            Op::Insert { key, .. }
            | Op::Delete { key }
            | Op::Read { key }
            | Op::Update { key, .. } => Objects::key(*key),
            Op::Query { min, max } if min > max => Objects::key(*min),
            Op::Query { min, max } => Objects {
                keys: Vec::new(),
                ranges: vec![(Bound::Included(*min), Bound::Included(*max))],
            },
            Op::Next { key } => Objects {
                keys: vec![*key],
                ranges: vec![(Bound::Excluded(*key), Bound::Unbounded)],
            },
            Op::Prev { key } => Objects {
                keys: vec![*key],
                ranges: vec![(Bound::Unbounded, Bound::Excluded(*key))],
            },
            Op::Batch(ops) => Objects {
                keys: ops.iter().map(batch_key).collect(),
                ranges: Vec::new(),
            },
        }
    }
    fn split(op: &Op, map: &PartitionMap) -> Result<Vec<(PartitionId, Op)>, SplitError> {
        Ok(partitions_of(op, map)
            .into_iter()
            .map(|p| (p, sub_op(op, map, p)))
            .collect())
    }
    fn merge(
        op: &Op,
        parts: Vec<(PartitionId, OpResult)>,
        map: &PartitionMap,
    ) -> Result<OpResult, MergeError> {
        merge(op, parts, map).map_err(MergeError)
    }
    fn thread_group(op: &Op, layout: &ThreadLayout, optimistic: bool) -> Option<usize> {
        let part = KeyPartition::of(layout).ok()?;
        let groups = if optimistic {
            part.oc_g(op)
        } else {
            part.cc_g(op)
        };
        match groups {
            Groups::One(t) => Some(t),
            Groups::All => None,
        }
    }
}

impl StateMachine for BPlusTree {
    type Undo = Undo;

    fn new() -> Self {
        BPlusTree::new()
    }

    /// As `objects`, narrowed for next and prev ([`next_access`], [`prev_access`]).
    fn access(&self, op: &Op) -> Access {
        match *op {
            Op::Next { key } => next_access(key, self.get_next(key).map(|(n, _)| n)),
            Op::Prev { key } => prev_access(key, self.get_prev(key).map(|(p, _)| p)),
            _ => Access::of(&Self::objects(op), op.is_mutation()),
        }
    }

    fn execute(&mut self, op: &Op) -> OpResult {
        self.apply(op)
    }

    fn execute_undoable(&mut self, op: &Op) -> (OpResult, Undo) {
        BPlusTree::execute(self, op)
    }

    fn undo(&mut self, undo: Undo) {
        self.apply_undo(&undo)
    }

    fn snapshot(&self) -> Vec<u8> {
        BPlusTree::snapshot(self)
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        BPlusTree::restore(bytes).map_err(|e| e.to_string())
    }

    fn digest(&self) -> u64 {
        BPlusTree::digest(self)
    }

    fn len(&self) -> u64 {
        BPlusTree::len(self) as u64
    }

    fn op_count(op: &Op) -> u64 {
        op.btree_ops() as u64
    }

    fn account(op: &Op, result: &OpResult, work: &mut ExecutionWork) {
        work.commands += 1;
        work.ops += op.btree_ops() as u64;
        let k = match op {
            Op::Insert { .. } => 0,
            Op::Delete { .. } => 1,
            Op::Update { .. } => 2,
            Op::Read { .. } => 3,
            Op::Next { .. } => 4,
            Op::Prev { .. } => 5,
            Op::Query { .. } => 6,
            Op::Batch(ops) => {
                for b in ops {
                    match b {
                        BatchOp::Insert { .. } => work.by_kind[0] += 1,
                        BatchOp::Delete { .. } => work.by_kind[1] += 1,
                    }
                }
                return;
            }
        };
        work.by_kind[k] += 1;
        if let OpResult::Entries(v) = result {
            work.query_entries += v.len() as u64;
        }
    }

    fn thread_check(&self, op: &Op, t: usize, layout: &ThreadLayout) -> Result<(), String> {
        let part = KeyPartition::of(layout)?;
        part.verdict(self, t, op).reason(t)
    }

    fn shape_changes(&self) -> u64 {
        self.structure_stats().total()
    }

    fn shared(&mut self, layout: &ThreadLayout) -> Option<Box<dyn SharedExecution<Self> + '_>> {
        crate::shared::shared(self, layout)
    }
}

/// A command for an unpartitioned B+tree: `op` for group 0 (tests and tools).
pub fn command(client: ClientId, seq: u64, reply_to: NodeId, op: &Op) -> Command {
    Command::single(client, seq, reply_to, BPlusTree::encode_command(op))
}

fn batch_key(b: &BatchOp) -> u64 {
    match b {
        BatchOp::Insert { key, .. } | BatchOp::Delete { key } => *key,
    }
}

/// The partitions `op` addresses, one bit per partition.
pub fn mask(op: &Op, map: &PartitionMap) -> u64 {
    match op {
        Op::Batch(ops) if ops.is_empty() => 1,
        _ => BPlusTree::objects(op).partitions(map),
    }
}

/// The partitions `op` addresses, in order.
pub fn partitions_of(op: &Op, map: &PartitionMap) -> Vec<PartitionId> {
    mask_partitions(mask(op, map))
}

/// The sub-command of `op` that partition `p` (one it addresses) executes.
fn sub_op(op: &Op, map: &PartitionMap, p: PartitionId) -> Op {
    if !map.is_partitioned() {
        return op.clone();
    }
    match op {
        Op::Query { min, max } if min <= max => {
            let (lo, hi) = map.range(p);
            Op::Query {
                min: (*min).max(lo),
                max: (*max).min(hi),
            }
        }
        Op::Batch(ops) if !ops.is_empty() => Op::Batch(
            ops.iter()
                .copied()
                .filter(|b| map.of_key(batch_key(b)) == p)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Merge the sub-results of `op` (one per addressed partition, any order) into the
/// result of the whole command.
fn merge(
    op: &Op,
    parts: Vec<(PartitionId, OpResult)>,
    map: &PartitionMap,
) -> Result<OpResult, String> {
    let want = partitions_of(op, map);
    let mut sorted = parts;
    sorted.sort_by_key(|(p, _)| *p);
    let got: Vec<PartitionId> = sorted.iter().map(|(p, _)| *p).collect();
    if got != want {
        return Err(format!(
            "{} addresses partitions {want:?}, but sub-results came from {got:?}",
            op.name()
        ));
    }
    if sorted.len() == 1 {
        return Ok(sorted.pop().expect("one").1);
    }
    let kind = |what: &str, r: &OpResult| format!("{} sub-result {r:?} is not {what}", op.name());
    match op {
        Op::Query { .. } => {
            let mut all = Vec::new();
            for (_, r) in sorted {
                match r {
                    OpResult::Entries(e) => all.extend(e),
                    other => return Err(kind("entries", &other)),
                }
            }
            Ok(OpResult::Entries(all))
        }
        Op::Next { .. } | Op::Prev { .. } => {
            let mut found = None;
            for (_, r) in sorted {
                match r {
                    // next: the first non-null in partition order; prev: the last.
                    OpResult::Entry(Some(e))
                        if found.is_none() || matches!(op, Op::Prev { .. }) =>
                    {
                        found = Some(e)
                    }
                    OpResult::Entry(_) => {}
                    other => return Err(kind("an entry", &other)),
                }
            }
            Ok(OpResult::Entry(found))
        }
        Op::Batch(ops) => {
            let mut per: Vec<(PartitionId, std::vec::IntoIter<OpResult>)> = Vec::new();
            for (p, r) in sorted {
                match r {
                    OpResult::Batch(rs) => per.push((p, rs.into_iter())),
                    other => return Err(kind("a batch", &other)),
                }
            }
            let mut out = Vec::with_capacity(ops.len());
            for b in ops {
                let p = map.of_key(batch_key(b));
                let it = &mut per
                    .iter_mut()
                    .find(|(q, _)| *q == p)
                    .expect("every addressed partition answered")
                    .1;
                out.push(
                    it.next()
                        .ok_or_else(|| format!("partition {p} returned too few batch results"))?,
                );
            }
            if per.iter_mut().any(|(_, it)| it.next().is_some()) {
                return Err("a partition returned too many batch results".into());
            }
            Ok(OpResult::Batch(out))
        }
        other => Err(format!(
            "{} addresses one partition, yet {} sub-results arrived",
            other.name(),
            got.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Next and prev read up to their neighbour; a prev with none reads every key down
    /// to 0 (only an insert below can change its answer), so the smallest key's prev,
    /// a hot one under skewed workloads, conflicts with an insert below it and with a
    /// write of its own key, not with every command.
    #[test]
    fn next_and_prev_read_up_to_their_neighbour_and_prev_with_none_down_to_0() {
        let mut t = BPlusTree::new();
        for k in [10, 12, 200] {
            t.insert(k, k);
        }
        let w = |k| Access::of(&Objects::key(k), true);
        let next = t.access(&Op::Next { key: 10 });
        assert!(!next.everything);
        assert_eq!(next.objects, vec![(10, false), (11, false), (12, false)]);
        assert!(next.conflicts(&w(11)) && !next.conflicts(&w(13)));
        // 12 to 200 is more than NEIGHBOUR_SPAN_MAX keys; nothing above 200.
        assert!(t.access(&Op::Next { key: 12 }).everything);
        assert!(t.access(&Op::Next { key: 200 }).everything);
        let prev = t.access(&Op::Prev { key: 12 });
        assert_eq!(prev.objects, vec![(10, false), (11, false), (12, false)]);
        let first = t.access(&Op::Prev { key: 10 });
        assert!(!first.everything);
        assert_eq!(first.objects.len(), 11);
        assert!(first.conflicts(&w(0)) && first.conflicts(&w(10)) && !first.conflicts(&w(11)));
        assert!(!first.conflicts(&t.access(&Op::Read { key: 10 })));
        // Below the smallest key by more than the span: everything.
        assert!(BPlusTree::new().access(&Op::Prev { key: 1_000 }).everything);
    }

    fn map4() -> PartitionMap {
        PartitionMap::new(4, 400).unwrap()
    }

    fn split(op: &Op, map: &PartitionMap) -> Vec<(PartitionId, Op)> {
        <BPlusTree as ServiceCodec>::split(op, map).unwrap()
    }

    fn merge(
        op: &Op,
        parts: &[(PartitionId, OpResult)],
        map: &PartitionMap,
    ) -> Result<OpResult, MergeError> {
        <BPlusTree as ServiceCodec>::merge(op, parts.to_vec(), map)
    }

    #[test]
    fn queries_split_into_clipped_ranges_and_merge_in_order() {
        let m = map4();
        let q = Op::Query { min: 150, max: 250 };
        assert_eq!(
            split(&q, &m),
            vec![
                (1, Op::Query { min: 150, max: 199 }),
                (2, Op::Query { min: 200, max: 250 })
            ]
        );
        let merged = merge(
            &q,
            &[
                (2, OpResult::Entries(vec![(200, 1), (250, 2)])),
                (1, OpResult::Entries(vec![(150, 3)])),
            ],
            &m,
        )
        .unwrap();
        assert_eq!(
            merged,
            OpResult::Entries(vec![(150, 3), (200, 1), (250, 2)])
        );
        assert!(merge(&q, &[(1, OpResult::Entries(vec![]))], &m).is_err());
        assert_eq!(partitions_of(&Op::Query { min: 9, max: 3 }, &m), vec![0]);
    }

    #[test]
    fn next_and_prev_address_every_partition_that_may_hold_the_answer() {
        let m = map4();
        assert_eq!(partitions_of(&Op::Next { key: 150 }, &m), vec![1, 2, 3]);
        assert_eq!(partitions_of(&Op::Prev { key: 150 }, &m), vec![0, 1]);
        let n = Op::Next { key: 150 };
        let r = merge(
            &n,
            &[
                (1, OpResult::Entry(None)),
                (2, OpResult::Entry(Some((210, 1)))),
                (3, OpResult::Entry(Some((300, 2)))),
            ],
            &m,
        )
        .unwrap();
        assert_eq!(r, OpResult::Entry(Some((210, 1))));
        let p = Op::Prev { key: 150 };
        let r = merge(
            &p,
            &[
                (0, OpResult::Entry(Some((5, 1)))),
                (1, OpResult::Entry(Some((120, 2)))),
            ],
            &m,
        )
        .unwrap();
        assert_eq!(r, OpResult::Entry(Some((120, 2))));
        // The edges: next of the largest key, prev of 0.
        assert_eq!(partitions_of(&Op::Next { key: u64::MAX }, &m), vec![3]);
        assert_eq!(partitions_of(&Op::Prev { key: 0 }, &m), vec![0]);
    }

    #[test]
    fn batches_split_by_key_and_merge_back_in_batch_order() {
        let m = map4();
        let b = Op::Batch(vec![
            BatchOp::Insert { key: 310, value: 1 },
            BatchOp::Delete { key: 5 },
            BatchOp::Insert { key: 320, value: 2 },
        ]);
        assert_eq!(
            split(&b, &m),
            vec![
                (0, Op::Batch(vec![BatchOp::Delete { key: 5 }])),
                (
                    3,
                    Op::Batch(vec![
                        BatchOp::Insert { key: 310, value: 1 },
                        BatchOp::Insert { key: 320, value: 2 }
                    ])
                )
            ]
        );
        let r = merge(
            &b,
            &[
                (
                    3,
                    OpResult::Batch(vec![OpResult::Inserted(true), OpResult::Inserted(false)]),
                ),
                (0, OpResult::Batch(vec![OpResult::Removed(Some(7))])),
            ],
            &m,
        )
        .unwrap();
        assert_eq!(
            r,
            OpResult::Batch(vec![
                OpResult::Inserted(true),
                OpResult::Removed(Some(7)),
                OpResult::Inserted(false)
            ])
        );
        assert_eq!(partitions_of(&Op::Batch(vec![]), &m), vec![0]);
    }

    #[test]
    fn one_partition_is_classic_smr() {
        let m = PartitionMap::single();
        let q = Op::Query {
            min: 0,
            max: u64::MAX,
        };
        assert_eq!(split(&q, &m), vec![(0, q.clone())]);
        assert_eq!(partitions_of(&Op::Next { key: 3 }, &m), vec![0]);
    }

    #[test]
    fn the_envelope_carries_each_partitions_sub_command() {
        let m = map4();
        let q = Op::Query { min: 150, max: 250 };
        let c = partita_service::envelope::<BPlusTree>(9, 4, 2, &q, &m).unwrap();
        assert_eq!(c.body.groups(), 0b0110);
        let p2 = BPlusTree::decode_command(c.body.payload_for(2).unwrap()).unwrap();
        assert_eq!(p2, Op::Query { min: 200, max: 250 });
        let single = command(9, 5, 2, &Op::Read { key: 3 });
        assert_eq!(single.body.groups(), 1);
    }
}
