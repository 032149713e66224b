//! State partitioning (paper 001 §III-C, §IV): the B+tree's key space is cut into
//! `partitions` equal ranges, each replicated by its own replicas.
//!
//! Which partitions a command addresses, what each executes of it (its sub-command)
//! and how the sub-results merge is the service's business (`partita-service`:
//! `ServiceCodec::split` and `merge`), computed from the same [`PartitionMap`], which
//! every node and client reads from the cluster file. The map knows only positions:
//! a service maps each key to a position in `0..=u64::MAX` that keeps the keys' order
//! (the B+tree: the key itself; byte-string keys: their first eight bytes), and the map
//! cuts the positions into equal ranges.
//!
//! A command addressed to several partitions is ordered once, as one command, by the
//! one ordering instance: every partition executes its sub-command at the same position
//! of the total order, which is what makes cross-partition queries linearizable
//! (paper 001, Figure 4).

use crate::{GroupMask, NodeId};
use serde::{Deserialize, Serialize};

/// A partition, numbered from 0 in key order.
pub type PartitionId = u32;

/// At most this many partitions (a command's partitions are a 64-bit mask).
pub const PARTITIONS_MAX: u32 = 64;

/// How positions (keys) map to partitions: `partitions` ranges of
/// `key_space / partitions` positions each (the last one also takes every position at
/// or above `key_space`).
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

    /// The partitions positions `lo..=hi` fall in, one bit per partition (the
    /// partition of `lo` alone when `lo > hi`).
    pub fn mask_of_range(&self, lo: u64, hi: u64) -> GroupMask {
        let (a, b) = (self.of_key(lo), self.of_key(hi.max(lo)));
        (a..=b).fold(0, |m, p| m | (1u64 << p))
    }

    /// Every partition, one bit each.
    pub fn all(&self) -> GroupMask {
        if self.partitions >= 64 {
            u64::MAX
        } else {
            (1u64 << self.partitions) - 1
        }
    }
}

/// The partitions of a mask, in order.
pub fn mask_partitions(mask: GroupMask) -> Vec<PartitionId> {
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
    fn ranges_and_all_make_masks() {
        let m = map4();
        assert_eq!(m.mask_of_range(150, 250), 0b0110);
        assert_eq!(m.mask_of_range(9, 3), 0b0001);
        assert_eq!(m.mask_of_range(0, u64::MAX), 0b1111);
        assert_eq!(m.all(), 0b1111);
        assert_eq!(mask_partitions(0b1010), vec![1, 3]);
        assert_eq!(PartitionMap::single().all(), 1);
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
