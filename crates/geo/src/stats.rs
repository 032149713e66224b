//! [`AccessStats`]: an object's workload, its read and write counts by the replica
//! the operations came from (paper 004 §III-B; the `reads[N]` and `writes[N]` fields
//! of Table II's tree node).

use crate::error::GeoError;
use crate::set::Replica;
use crate::REPLICAS_MAX;
use serde::{Deserialize, Serialize};

/// Per-object access counters: r_{X,g} and w_{X,g} of Equation 1, the number of reads
/// and writes on the object issued by clients of replica `g` in the current window.
///
/// The paper counts "in some pre-defined time frame" (§III-B) and resets the counters
/// after computing the serializers (§VI-D), so the window is one optimization epoch:
/// call [`AccessStats::reset`] after each DOP. It mentions no decay.
///
/// Counters saturate at `u64::MAX` instead of wrapping, so that replicas that apply
/// the same increments still agree however long a window lasts.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "StatsRepr", into = "StatsRepr")]
pub struct AccessStats {
    reads: Vec<u64>,
    writes: Vec<u64>,
}

#[derive(Clone, Serialize, Deserialize)]
struct StatsRepr {
    reads: Vec<u64>,
    writes: Vec<u64>,
}

impl TryFrom<StatsRepr> for AccessStats {
    type Error = GeoError;

    fn try_from(r: StatsRepr) -> Result<AccessStats, GeoError> {
        AccessStats::from_counts(r.reads, r.writes)
    }
}

impl From<AccessStats> for StatsRepr {
    fn from(s: AccessStats) -> StatsRepr {
        StatsRepr {
            reads: s.reads,
            writes: s.writes,
        }
    }
}

impl AccessStats {
    /// Zero counters for an `n`-replica topology.
    ///
    /// # Panics
    /// When `n` is 0 or above [`REPLICAS_MAX`].
    pub fn new(n: usize) -> AccessStats {
        assert!(
            (1..=REPLICAS_MAX).contains(&n),
            "n = {n} outside 1..=REPLICAS_MAX"
        );
        AccessStats {
            reads: vec![0; n],
            writes: vec![0; n],
        }
    }

    /// Counters with the given values, `reads[g]` and `writes[g]` for replica `g`.
    pub fn from_counts(reads: Vec<u64>, writes: Vec<u64>) -> Result<AccessStats, GeoError> {
        if reads.len() != writes.len() {
            return Err(GeoError::CounterLengths {
                reads: reads.len(),
                writes: writes.len(),
            });
        }
        if reads.is_empty() {
            return Err(GeoError::NoReplicas);
        }
        if reads.len() > REPLICAS_MAX {
            return Err(GeoError::TooManyReplicas {
                n: reads.len(),
                max: REPLICAS_MAX,
            });
        }
        Ok(AccessStats { reads, writes })
    }

    /// The number of replicas counted.
    pub fn n(&self) -> usize {
        self.reads.len()
    }

    /// Counts one read issued at replica `origin`.
    pub fn record_read(&mut self, origin: Replica) {
        self.add_reads(origin, 1);
    }

    /// Counts one write issued at replica `origin`.
    pub fn record_write(&mut self, origin: Replica) {
        self.add_writes(origin, 1);
    }

    /// Counts `k` reads issued at replica `origin`.
    pub fn add_reads(&mut self, origin: Replica, k: u64) {
        let c = &mut self.reads[origin];
        *c = c.saturating_add(k);
    }

    /// Counts `k` writes issued at replica `origin`.
    pub fn add_writes(&mut self, origin: Replica, k: u64) {
        let c = &mut self.writes[origin];
        *c = c.saturating_add(k);
    }

    /// r_{X,g}.
    pub fn reads(&self, g: Replica) -> u64 {
        self.reads[g]
    }

    /// w_{X,g}.
    pub fn writes(&self, g: Replica) -> u64 {
        self.writes[g]
    }

    /// All read counters, by replica.
    pub fn read_counts(&self) -> &[u64] {
        &self.reads
    }

    /// All write counters, by replica.
    pub fn write_counts(&self) -> &[u64] {
        &self.writes
    }

    /// Operations issued at `g`, r_{X,g} + w_{X,g}.
    pub fn ops(&self, g: Replica) -> u128 {
        u128::from(self.reads[g]) + u128::from(self.writes[g])
    }

    /// Σ_g w_{X,g}.
    pub fn total_writes(&self) -> u128 {
        self.writes.iter().map(|&w| u128::from(w)).sum()
    }

    /// Σ_g (r_{X,g} + w_{X,g}).
    pub fn total_ops(&self) -> u128 {
        (0..self.n()).map(|g| self.ops(g)).sum()
    }

    /// Whether no operation was counted: every configuration then costs 0, and the
    /// [`crate::Optimizer`] leaves such an object alone.
    pub fn is_empty(&self) -> bool {
        self.reads.iter().chain(&self.writes).all(|&c| c == 0)
    }

    /// Zeroes every counter: the end of an optimization window (§VI-D).
    pub fn reset(&mut self) {
        self.reads.fill(0);
        self.writes.fill(0);
    }

    /// Every counter multiplied by `k` (saturating). Equation 1 is linear in the
    /// counts, so scaled statistics have the same best configuration and the same
    /// cache key: what the tests use to check the cache.
    pub fn scaled(&self, k: u64) -> AccessStats {
        AccessStats {
            reads: self.reads.iter().map(|c| c.saturating_mul(k)).collect(),
            writes: self.writes.iter().map(|c| c.saturating_mul(k)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters() {
        let mut s = AccessStats::new(3);
        assert!(s.is_empty());
        s.record_read(1);
        s.record_read(1);
        s.record_write(2);
        s.add_writes(0, u64::MAX);
        s.record_write(0);
        assert_eq!(s.reads(1), 2);
        assert_eq!(s.writes(2), 1);
        assert_eq!(s.writes(0), u64::MAX, "saturates");
        assert_eq!(s.ops(1), 2);
        assert_eq!(s.total_writes(), u128::from(u64::MAX) + 1);
        assert_eq!(s.total_ops(), u128::from(u64::MAX) + 3);
        s.reset();
        assert!(s.is_empty());
        assert_eq!(s.n(), 3);
    }

    #[test]
    fn from_counts_is_checked() {
        assert!(AccessStats::from_counts(vec![1], vec![1, 2]).is_err());
        assert!(AccessStats::from_counts(vec![], vec![]).is_err());
        assert!(
            AccessStats::from_counts(vec![0; REPLICAS_MAX + 1], vec![0; REPLICAS_MAX + 1]).is_err()
        );
        let s = AccessStats::from_counts(vec![1, 2], vec![3, 4]).unwrap();
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<AccessStats>(&j).unwrap(), s);
        assert!(serde_json::from_str::<AccessStats>(r#"{"reads":[1],"writes":[]}"#).is_err());
        assert_eq!(s.scaled(3).write_counts(), &[9, 12]);
    }
}
