//! Equation 1 (the cost of a configuration), Equation 2 (the best configuration, by
//! enumeration) and the hot-replica restriction of §III-D.

use crate::set::Config;
use crate::stats::AccessStats;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// θ of the hot-replica heuristic as the paper's experiments set it (§VI-D: "10% in
/// our case"), in per mille.
pub const THETA_PAPER_PERMILLE: u32 = 100;

/// Equation 1, exactly, in operation·microseconds:
///
/// C_{X,i} = Σ_{g=1..N} w_{X,g}·(W_i + δ_g) + r_{X,g}·(R_i + δ_g)
///
/// with R_i = 0, W_i = max{δ_{k,h} | k, h ∈ P_i} ([`Topology::write_rtt_us`]) and
/// δ_g = min{δ_{g,h} | h ∈ P_i} ([`Topology::nearest`]; 0 when g ∈ P_i). The sum is
/// exact: counts are `u64`, δ is `u32` µs, so each product stays below 2^96 and the
/// whole sum far below 2^128.
///
/// # Panics
/// When `stats` and `topology` have different numbers of replicas, or `config` names a
/// replica the topology does not have (bugs in the caller).
pub fn cost_op_us(stats: &AccessStats, config: Config, topology: &Topology) -> u128 {
    check_inputs(stats, topology);
    topology.check(config);
    // R_i: "since we can always read from a serializer, R_i = 0" (§III-B).
    const READ_US: u128 = 0;
    let write_us = u128::from(topology.write_rtt_us(config));
    let mut sum = 0u128;
    for g in 0..topology.n() {
        let (w, r) = (u128::from(stats.writes(g)), u128::from(stats.reads(g)));
        if w == 0 && r == 0 {
            continue;
        }
        let delta_us = u128::from(topology.nearest(g, config).1);
        sum += w * (write_us + delta_us) + r * (READ_US + delta_us);
    }
    sum
}

/// Equation 1 in operation·milliseconds, the unit of Table I (Fig. 2's workload costs
/// 2400 in {A,B,C}): [`cost_op_us`] / 1000.
pub fn cost(stats: &AccessStats, config: Config, topology: &Topology) -> f64 {
    op_us_to_ms(cost_op_us(stats, config, topology))
}

/// The result of a search over the subsets of a candidate set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Search {
    /// The best configuration (ties broken as [`best_among`] says).
    pub config: Config,
    /// Its cost by Equation 1, in operation·microseconds.
    pub cost_op_us: u128,
    /// How many configurations were evaluated with Equation 1: 2^|candidates| − 1.
    pub evaluations: u64,
}

impl Search {
    /// The cost in operation·milliseconds (Table I's unit).
    pub fn cost_ms(&self) -> f64 {
        op_us_to_ms(self.cost_op_us)
    }
}

/// Equation 2 restricted to the non-empty subsets of `candidates`: evaluates every one
/// with Equation 1 and returns the cheapest.
///
/// **Tie-breaking** (the paper is silent): among configurations of equal cost, the one
/// with fewer serializers wins (fewer Paxos groups per write, which Equation 1 does not
/// charge), then the one with the smaller bitmask, i.e. the one that comes first in
/// [`Config::subsets`] order. So the result is a function of the inputs alone and every
/// replica computes the same.
///
/// # Panics
/// As [`cost_op_us`].
pub fn best_among(stats: &AccessStats, topology: &Topology, candidates: Config) -> Search {
    check_inputs(stats, topology);
    topology.check(candidates);
    let mut best: Option<(u128, usize, Config)> = None;
    let mut evaluations = 0u64;
    for config in candidates.subsets() {
        let c = cost_op_us(stats, config, topology);
        evaluations += 1;
        // Subsets come in ascending mask order, so "strictly better on (cost, len)"
        // keeps the smaller mask among full ties.
        if best.is_none_or(|(bc, bl, _)| (c, config.len()) < (bc, bl)) {
            best = Some((c, config.len(), config));
        }
    }
    let (cost_op_us, _, config) = best.expect("a configuration has at least one subset");
    assert_eq!(evaluations, (1u64 << candidates.len()) - 1);
    assert!(config.is_subset_of(candidates));
    Search {
        config,
        cost_op_us,
        evaluations,
    }
}

/// Brute force (Equation 2 over every non-empty subset of the replicas, 2^N − 1
/// configurations): the best configuration and its cost in operation·milliseconds.
/// Ties are broken as in [`best_among`]; statistics with no operations cost 0 in every
/// configuration and so give `{0}`.
pub fn best(stats: &AccessStats, topology: &Topology) -> (Config, f64) {
    let s = best_among(stats, topology, topology.all());
    (s.config, s.cost_ms())
}

/// The hot replicas of §III-D and §VI-D: those whose operation count reaches θ times
/// the count of the most accessed replica, ops_g ≥ θ · max_h ops_h, with θ given in per
/// mille (the paper uses 10%, [`THETA_PAPER_PERMILLE`]). The comparison is exact
/// integer arithmetic: ops_g · 1000 ≥ θ‰ · max_h ops_h.
///
/// `None` when no operation was counted (then every replica is "hot" by the formula,
/// and there is nothing to optimize). Otherwise the most accessed replica is always
/// hot, so the set is not empty.
///
/// # Panics
/// When `theta_permille` is above 1000.
pub fn hot_replicas(stats: &AccessStats, theta_permille: u32) -> Option<Config> {
    assert!(theta_permille <= 1000, "θ = {theta_permille}‰ above 100%");
    let ops_max = (0..stats.n()).map(|g| stats.ops(g)).max()?;
    if ops_max == 0 {
        return None;
    }
    let hot = Config::from_replicas(
        (0..stats.n()).filter(|&g| stats.ops(g) * 1000 >= u128::from(theta_permille) * ops_max),
    );
    assert!(hot.is_some(), "the most accessed replica is hot");
    hot
}

fn op_us_to_ms(op_us: u128) -> f64 {
    op_us as f64 / 1000.0
}

fn check_inputs(stats: &AccessStats, topology: &Topology) {
    assert_eq!(
        stats.n(),
        topology.n(),
        "statistics for {} replicas, topology of {}",
        stats.n(),
        topology.n()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two() -> Topology {
        Topology::from_rtt_ms(&["x", "y"], &[&[0.0, 10.0], &[10.0, 0.0]]).unwrap()
    }

    #[test]
    fn ties_prefer_fewer_serializers_then_lower_mask() {
        let t = two();
        // Only reads, equally from both: {0} and {1} cost 10·ops, {0,1} costs 0.
        let s = AccessStats::from_counts(vec![5, 5], vec![0, 0]).unwrap();
        assert_eq!(best_among(&s, &t, t.all()).config, t.all());
        // Only writes, equally from both: everything costs 50·10 ms.
        let s = AccessStats::from_counts(vec![0, 0], vec![5, 5]).unwrap();
        let b = best_among(&s, &t, t.all());
        assert_eq!(b.config, Config::single(0));
        assert_eq!(b.cost_op_us, 50_000);
        assert_eq!(b.evaluations, 3);
        // No operations: everything costs 0, the first single replica wins.
        assert_eq!(best(&AccessStats::new(2), &t), (Config::single(0), 0.0));
    }

    #[test]
    fn hot_threshold_is_inclusive_and_exact() {
        let s = AccessStats::from_counts(vec![10, 100, 9], vec![0, 0, 0]).unwrap();
        assert_eq!(hot_replicas(&s, 100), Config::from_replicas([0, 1]));
        assert_eq!(hot_replicas(&s, 0), Some(Config::all(3)));
        assert_eq!(hot_replicas(&s, 1000), Some(Config::single(1)));
        assert_eq!(hot_replicas(&AccessStats::new(3), 100), None);
    }

    #[test]
    #[should_panic(expected = "statistics for 3 replicas")]
    fn mismatched_stats_panic() {
        cost(&AccessStats::new(3), Config::single(0), &two());
    }

    #[test]
    #[should_panic(expected = "outside this 2-replica topology")]
    fn foreign_config_panics() {
        cost(&AccessStats::new(2), Config::single(2), &two());
    }
}
