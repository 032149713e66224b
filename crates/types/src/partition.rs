//! State partitioning (paper 001 §III-C, §IV): the B+tree's key space is cut into
//! `partitions` equal ranges, each replicated by its own replicas.
//!
//! A command addresses the partitions its keys fall in; for each of them it has a
//! *sub-command* (the part of the operation that partition executes) and the partition
//! answers with a *sub-result*; the client merges the sub-results into the result of the
//! whole command. All of this is a pure function of the operation and the
//! [`PartitionMap`], which every node and client reads from the same cluster file, so the
//! client (to know which replies to wait for and how to merge them), the coordinator (to
//! disseminate each sub-command to its partition's group) and the replicas (to execute
//! only their part) agree on it without sending it around.
//!
//! | operation | partitions | sub-command in partition p | merge |
//! | --- | --- | --- | --- |
//! | insert, delete, read, update | the key's | the same | the only sub-result |
//! | query `min..=max` | every partition overlapping the range | the range clipped to p | concatenation in partition order |
//! | next `k` | the key's and every later one | the same | the first non-null in partition order |
//! | prev `k` | the key's and every earlier one | the same | the last non-null in partition order |
//! | batch | the partitions of its keys | the ops of p, in order | results put back in the batch's order |
//!
//! A command addressed to several partitions is ordered once, as one command, by the
//! one ordering instance: every partition executes its sub-command at the same position
//! of the total order, which is what makes cross-partition queries linearizable
//! (paper 001, Figure 4).

use crate::{BatchOp, NodeId, Op, OpResult};
use serde::{Deserialize, Serialize};

/// A partition, numbered from 0 in key order.
pub type PartitionId = u32;

/// At most this many partitions (a command's partitions are a 64-bit mask).
pub const PARTITIONS_MAX: u32 = 64;

/// How keys map to partitions: `partitions` ranges of `key_space / partitions` keys
/// each (the last one also takes every key at or above `key_space`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMap {
    partitions: u32,
    key_space: u64,
}

impl Default for PartitionMap {
    fn default() -> Self {
        PartitionMap::single()
    }
}

impl PartitionMap {
    /// `partitions` equal ranges over `0..key_space`.
    pub fn new(partitions: u32, key_space: u64) -> Result<PartitionMap, String> {
        if partitions == 0 || partitions > PARTITIONS_MAX {
            return Err(format!(
                "partitions must be between 1 and {PARTITIONS_MAX}, not {partitions}"
            ));
        }
        if key_space < partitions as u64 {
            return Err(format!(
                "key_space ({key_space}) must hold at least one key per partition ({partitions})"
            ));
        }
        Ok(PartitionMap {
            partitions,
            key_space,
        })
    }

    /// One partition holding every key: classic state-machine replication.
    pub fn single() -> PartitionMap {
        PartitionMap {
            partitions: 1,
            key_space: u64::MAX,
        }
    }

    pub fn count(&self) -> u32 {
        self.partitions
    }

    pub fn key_space(&self) -> u64 {
        self.key_space
    }

    pub fn is_partitioned(&self) -> bool {
        self.partitions > 1
    }

    fn width(&self) -> u64 {
        self.key_space / self.partitions as u64
    }

    /// The partition that holds `key`.
    pub fn of_key(&self, key: u64) -> PartitionId {
        if self.partitions == 1 {
            return 0;
        }
        ((key / self.width()).min(self.partitions as u64 - 1)) as PartitionId
    }

    /// The keys of partition `p`, inclusive at both ends.
    pub fn range(&self, p: PartitionId) -> (u64, u64) {
        assert!(p < self.partitions, "partition {p} of {}", self.partitions);
        let lo = p as u64 * self.width();
        let hi = if p + 1 == self.partitions {
            u64::MAX
        } else {
            (p as u64 + 1) * self.width() - 1
        };
        (lo, hi)
    }

    /// The partitions `op` addresses, one bit per partition.
    pub fn mask(&self, op: &Op) -> u64 {
        let bit = |p: PartitionId| 1u64 << p;
        let span = |a: PartitionId, b: PartitionId| (a..=b).fold(0u64, |m, p| m | bit(p));
        match op {
            Op::Insert { key, .. }
            | Op::Delete { key }
            | Op::Read { key }
            | Op::Update { key, .. } => bit(self.of_key(*key)),
            Op::Query { min, max } if min > max => bit(self.of_key(*min)),
            Op::Query { min, max } => span(self.of_key(*min), self.of_key(*max)),
            Op::Next { key } => span(self.of_key(*key), self.partitions - 1),
            Op::Prev { key } => span(0, self.of_key(*key)),
            Op::Batch(ops) if ops.is_empty() => bit(0),
            Op::Batch(ops) => ops
                .iter()
                .fold(0u64, |m, b| m | bit(self.of_key(batch_key(b)))),
        }
    }

    /// The partitions `op` addresses, in order.
    pub fn partitions_of(&self, op: &Op) -> Vec<PartitionId> {
        mask_partitions(self.mask(op))
    }

    /// Whether `op` addresses more than one partition.
    pub fn is_multi(&self, op: &Op) -> bool {
        self.mask(op).count_ones() > 1
    }

    /// The sub-command of `op` that partition `p` executes, or `None` if `op` does not
    /// address `p`.
    pub fn sub_op(&self, op: &Op, p: PartitionId) -> Option<Op> {
        if self.mask(op) & (1u64 << p) == 0 {
            return None;
        }
        if self.partitions == 1 {
            return Some(op.clone());
        }
        Some(match op {
            Op::Query { min, max } if min <= max => {
                let (lo, hi) = self.range(p);
                Op::Query {
                    min: (*min).max(lo),
                    max: (*max).min(hi),
                }
            }
            Op::Batch(ops) if !ops.is_empty() => Op::Batch(
                ops.iter()
                    .copied()
                    .filter(|b| self.of_key(batch_key(b)) == p)
                    .collect(),
            ),
            other => other.clone(),
        })
    }

    /// The sub-commands of `op`, one per addressed partition, in partition order.
    pub fn split(&self, op: &Op) -> Vec<(PartitionId, Op)> {
        self.partitions_of(op)
            .into_iter()
            .map(|p| (p, self.sub_op(op, p).expect("an addressed partition")))
            .collect()
    }

    /// Merge the sub-results of `op` (one per addressed partition, any order) into the
    /// result of the whole command. An error means the sub-results do not fit `op`
    /// (a missing or extra partition, or a result of the wrong kind).
    pub fn merge(&self, op: &Op, parts: &[(PartitionId, OpResult)]) -> Result<OpResult, String> {
        let want = self.partitions_of(op);
        let mut sorted: Vec<&(PartitionId, OpResult)> = parts.iter().collect();
        sorted.sort_by_key(|(p, _)| *p);
        let got: Vec<PartitionId> = sorted.iter().map(|(p, _)| *p).collect();
        if got != want {
            return Err(format!(
                "{} addresses partitions {want:?}, but sub-results came from {got:?}",
                op.name()
            ));
        }
        if sorted.len() == 1 {
            return Ok(sorted[0].1.clone());
        }
        let kind =
            |what: &str, r: &OpResult| format!("{} sub-result {r:?} is not {what}", op.name());
        match op {
            Op::Query { .. } => {
                let mut all = Vec::new();
                for (_, r) in sorted {
                    match r {
                        OpResult::Entries(e) => all.extend_from_slice(e),
                        other => return Err(kind("entries", other)),
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
                            found = Some(*e)
                        }
                        OpResult::Entry(_) => {}
                        other => return Err(kind("an entry", other)),
                    }
                }
                Ok(OpResult::Entry(found))
            }
            Op::Batch(ops) => {
                let mut per: Vec<(PartitionId, std::vec::IntoIter<OpResult>)> = Vec::new();
                for (p, r) in sorted {
                    match r {
                        OpResult::Batch(rs) => per.push((*p, rs.clone().into_iter())),
                        other => return Err(kind("a batch", other)),
                    }
                }
                let mut out = Vec::with_capacity(ops.len());
                for b in ops {
                    let p = self.of_key(batch_key(b));
                    let it = &mut per
                        .iter_mut()
                        .find(|(q, _)| *q == p)
                        .expect("every addressed partition answered")
                        .1;
                    out.push(
                        it.next().ok_or_else(|| {
                            format!("partition {p} returned too few batch results")
                        })?,
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
                parts.len()
            )),
        }
    }
}

fn batch_key(b: &BatchOp) -> u64 {
    match b {
        BatchOp::Insert { key, .. } | BatchOp::Delete { key } => *key,
    }
}

/// The partitions of a mask, in order.
pub fn mask_partitions(mask: u64) -> Vec<PartitionId> {
    (0..64).filter(|p| mask & (1u64 << p) != 0).collect()
}

/// The replicas of every partition, and which of them answers a command.
///
/// A client names one replica (`Command::reply_to`); in a partitioned cluster the
/// replica of the same rank (its index among its partition's replicas, in id order)
/// answers in every other partition the command addresses, wrapping around when a
/// partition has fewer replicas. Every node computes the same answerers from the
/// cluster file.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PartitionLayout {
    pub map: PartitionMap,
    /// `replicas[p]`: the replicas of partition p, in id order.
    pub replicas: Vec<Vec<NodeId>>,
}

impl PartitionLayout {
    /// The replica of partition `p` that answers a command whose client named
    /// `reply_to`. `None` when `p` has no replicas.
    pub fn answerer(&self, reply_to: NodeId, p: PartitionId) -> Option<NodeId> {
        let members = self.replicas.get(p as usize)?;
        if members.is_empty() {
            return None;
        }
        if members.contains(&reply_to) {
            return Some(reply_to);
        }
        let rank = self
            .replicas
            .iter()
            .find_map(|m| m.iter().position(|&r| r == reply_to))
            .unwrap_or(reply_to as usize);
        Some(members[rank % members.len()])
    }

    /// The partition replica `node` belongs to.
    pub fn partition_of_replica(&self, node: NodeId) -> Option<PartitionId> {
        self.replicas
            .iter()
            .position(|m| m.contains(&node))
            .map(|p| p as PartitionId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map4() -> PartitionMap {
        PartitionMap::new(4, 400).unwrap()
    }

    #[test]
    fn keys_fall_in_equal_ranges() {
        let m = map4();
        assert_eq!(m.of_key(0), 0);
        assert_eq!(m.of_key(99), 0);
        assert_eq!(m.of_key(100), 1);
        assert_eq!(m.of_key(399), 3);
        assert_eq!(m.of_key(u64::MAX), 3);
        assert_eq!(m.range(1), (100, 199));
        assert_eq!(m.range(3), (300, u64::MAX));
        assert!(PartitionMap::new(0, 10).is_err());
        assert!(PartitionMap::new(65, 1000).is_err());
        assert!(PartitionMap::new(4, 3).is_err());
    }

    #[test]
    fn queries_split_into_clipped_ranges_and_merge_in_order() {
        let m = map4();
        let q = Op::Query { min: 150, max: 250 };
        assert_eq!(
            m.split(&q),
            vec![
                (1, Op::Query { min: 150, max: 199 }),
                (2, Op::Query { min: 200, max: 250 })
            ]
        );
        let merged = m
            .merge(
                &q,
                &[
                    (2, OpResult::Entries(vec![(200, 1), (250, 2)])),
                    (1, OpResult::Entries(vec![(150, 3)])),
                ],
            )
            .unwrap();
        assert_eq!(
            merged,
            OpResult::Entries(vec![(150, 3), (200, 1), (250, 2)])
        );
        assert!(m.merge(&q, &[(1, OpResult::Entries(vec![]))]).is_err());
        assert_eq!(m.partitions_of(&Op::Query { min: 9, max: 3 }), vec![0]);
    }

    #[test]
    fn next_and_prev_address_every_partition_that_may_hold_the_answer() {
        let m = map4();
        assert_eq!(m.partitions_of(&Op::Next { key: 150 }), vec![1, 2, 3]);
        assert_eq!(m.partitions_of(&Op::Prev { key: 150 }), vec![0, 1]);
        let n = Op::Next { key: 150 };
        let r = m
            .merge(
                &n,
                &[
                    (1, OpResult::Entry(None)),
                    (2, OpResult::Entry(Some((210, 1)))),
                    (3, OpResult::Entry(Some((300, 2)))),
                ],
            )
            .unwrap();
        assert_eq!(r, OpResult::Entry(Some((210, 1))));
        let p = Op::Prev { key: 150 };
        let r = m
            .merge(
                &p,
                &[
                    (0, OpResult::Entry(Some((5, 1)))),
                    (1, OpResult::Entry(Some((120, 2)))),
                ],
            )
            .unwrap();
        assert_eq!(r, OpResult::Entry(Some((120, 2))));
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
            m.split(&b),
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
        let r = m
            .merge(
                &b,
                &[
                    (
                        3,
                        OpResult::Batch(vec![OpResult::Inserted(true), OpResult::Inserted(false)]),
                    ),
                    (0, OpResult::Batch(vec![OpResult::Removed(Some(7))])),
                ],
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
    }

    #[test]
    fn one_partition_is_classic_smr() {
        let m = PartitionMap::single();
        let q = Op::Query {
            min: 0,
            max: u64::MAX,
        };
        assert_eq!(m.split(&q), vec![(0, q.clone())]);
        assert!(!m.is_multi(&Op::Next { key: 3 }));
    }

    #[test]
    fn answerers_keep_the_clients_rank_in_every_partition() {
        let l = PartitionLayout {
            map: PartitionMap::new(2, 100).unwrap(),
            replicas: vec![vec![4, 5], vec![6, 7, 8]],
        };
        assert_eq!(l.answerer(5, 0), Some(5));
        assert_eq!(l.answerer(5, 1), Some(7));
        assert_eq!(l.answerer(8, 0), Some(4));
        assert_eq!(l.partition_of_replica(7), Some(1));
        assert_eq!(l.partition_of_replica(1), None);
    }
}
