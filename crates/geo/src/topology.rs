//! [`Topology`]: the replicas (regions) and the latency δ between every pair
//! (paper 004 §III-B: "the topology is a graph that represents the cost between pairs
//! of replicas in terms of latency").

use crate::error::GeoError;
use crate::set::{Config, Replica};
use crate::REPLICAS_MAX;
use serde::{Deserialize, Serialize};

/// The replicas and the symmetric matrix of δ, the **round-trip** latency between
/// every pair, in whole microseconds (`u32`, so up to about 71 minutes).
///
/// Why round trips: the paper calls δ "the latency between replicas A and B", the edge
/// weight of Fig. 2(a) (150, 70 and 90 ms), and Table I is reproduced only with δ equal
/// to those weights. §VI-B gives the same three numbers as the latencies between its
/// EC2 regions ("approximately 70 msec" between the US regions, "90 and 150 msec" to
/// Europe), which are round-trip times, and §III-A speaks of "a full round-trip between
/// replicas C and B" as the price of a remote serializer. Equation 1 is linear in δ, so
/// feeding one-way latencies instead would halve every cost and change no argmin; only
/// the absolute costs (Table I's 2400) depend on the choice.
///
/// Invariants (checked by every constructor): 1 to [`REPLICAS_MAX`] replicas, one name
/// each, `rtt(a, a) = 0`, `rtt(a, b) = rtt(b, a)`. The triangle inequality is not
/// required (measured latencies need not obey it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "TopologyRepr", into = "TopologyRepr")]
pub struct Topology {
    names: Vec<String>,
    /// Row-major `n × n`.
    rtt_us: Vec<u32>,
}

/// The serialized form, validated on the way in.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct TopologyRepr {
    names: Vec<String>,
    rtt_us: Vec<Vec<u32>>,
}

impl TryFrom<TopologyRepr> for Topology {
    type Error = GeoError;

    fn try_from(r: TopologyRepr) -> Result<Topology, GeoError> {
        Topology::from_rtt_us(r.names, r.rtt_us)
    }
}

impl From<Topology> for TopologyRepr {
    fn from(t: Topology) -> TopologyRepr {
        let n = t.n();
        TopologyRepr {
            rtt_us: (0..n)
                .map(|a| (0..n).map(|b| t.rtt_us(a, b)).collect())
                .collect(),
            names: t.names,
        }
    }
}

impl Topology {
    /// A topology from round-trip times in whole microseconds, one row per replica.
    pub fn from_rtt_us(names: Vec<String>, rtt_us: Vec<Vec<u32>>) -> Result<Topology, GeoError> {
        let n = names.len();
        check_n(n)?;
        if rtt_us.len() != n {
            // A missing row has no cells; an extra row is reported with its length.
            let row = rtt_us.len().min(n);
            return Err(GeoError::NotSquare {
                row,
                len: rtt_us.get(row).map_or(0, Vec::len),
                n,
            });
        }
        let mut flat = Vec::with_capacity(n * n);
        for (a, row) in rtt_us.iter().enumerate() {
            if row.len() != n {
                return Err(GeoError::NotSquare {
                    row: a,
                    len: row.len(),
                    n,
                });
            }
            flat.extend_from_slice(row);
        }
        for a in 0..n {
            if flat[a * n + a] != 0 {
                return Err(GeoError::NonZeroDiagonal {
                    r: a,
                    value: f64::from(flat[a * n + a]) / 1000.0,
                });
            }
            for b in 0..a {
                let (ab, ba) = (flat[a * n + b], flat[b * n + a]);
                if ab != ba {
                    return Err(GeoError::Asymmetric {
                        a,
                        b,
                        ab: f64::from(ab) / 1000.0,
                        ba: f64::from(ba) / 1000.0,
                    });
                }
            }
        }
        let t = Topology {
            names,
            rtt_us: flat,
        };
        t.invariants();
        Ok(t)
    }

    /// A topology from round-trip times in milliseconds (rounded to the microsecond).
    pub fn from_rtt_ms(names: &[&str], rtt_ms: &[&[f64]]) -> Result<Topology, GeoError> {
        let n = names.len();
        check_n(n)?;
        let mut rows = Vec::with_capacity(n);
        for (a, row) in rtt_ms.iter().enumerate() {
            let mut out = Vec::with_capacity(row.len());
            for (b, &ms) in row.iter().enumerate() {
                let us = (ms * 1000.0).round();
                if !ms.is_finite() || !(0.0..=f64::from(u32::MAX)).contains(&us) {
                    return Err(GeoError::BadLatency { a, b, value: ms });
                }
                out.push(us as u32);
            }
            rows.push(out);
        }
        Topology::from_rtt_us(names.iter().map(|s| s.to_string()).collect(), rows)
    }

    /// The paper's three regions (§VI-B, and Fig. 2(a) for §III-C's example), indexed
    /// so that they are Fig. 2's replicas A, B and C:
    ///
    /// | index | Fig. 2 | region | RTT to California | to Europe | to Virginia |
    /// |---|---|---|---|---|---|
    /// | 0 | A | California | 0 | 150 ms | 70 ms |
    /// | 1 | B | Europe | 150 ms | 0 | 90 ms |
    /// | 2 | C | Virginia | 70 ms | 90 ms | 0 |
    ///
    /// Fig. 2 does not name regions; this labelling is the only one consistent with
    /// its edge weights (δ_AB = 150, δ_AC = 70, δ_BC = 90, read off Table I's δ columns)
    /// and §VI-B's California–Virginia 70, Virginia–Europe 90, California–Europe 150.
    pub fn paper_three_regions() -> Topology {
        Topology::from_rtt_ms(
            &["California", "Europe", "Virginia"],
            &[&[0.0, 150.0, 70.0], &[150.0, 0.0, 90.0], &[70.0, 90.0, 0.0]],
        )
        .expect("the paper's topology is valid")
    }

    /// The number of replicas `n` (1 to [`REPLICAS_MAX`]).
    pub fn n(&self) -> usize {
        self.names.len()
    }

    /// The name of replica `r`.
    pub fn name(&self, r: Replica) -> &str {
        &self.names[r]
    }

    /// Every replica: the configuration searched by brute force.
    pub fn all(&self) -> Config {
        Config::all(self.n())
    }

    /// δ_{a,b}: the round-trip time between replicas `a` and `b`, in microseconds.
    pub fn rtt_us(&self, a: Replica, b: Replica) -> u32 {
        let n = self.n();
        assert!(a < n && b < n, "replica out of range: {a}, {b} (n = {n})");
        self.rtt_us[a * n + b]
    }

    /// δ_{a,b} in milliseconds.
    pub fn rtt_ms(&self, a: Replica, b: Replica) -> f64 {
        f64::from(self.rtt_us(a, b)) / 1000.0
    }

    /// W_i of Equation 1: the latency of a write in `config`, the largest δ between two
    /// of its members (0 for a single serializer), in microseconds.
    pub fn write_rtt_us(&self, config: Config) -> u32 {
        self.check(config);
        let mut w = 0;
        for k in config.iter() {
            for h in config.iter().filter(|&h| h > k) {
                w = w.max(self.rtt_us(k, h));
            }
        }
        w
    }

    /// The member of `config` closest to replica `from` and δ_g of Equation 1, the
    /// round-trip time to it (0 when `from` is a member). Ties go to the lowest index,
    /// so every replica answers the same. This is also the serializer a READ issued at
    /// `from` uses (§IV-B, Algorithm 1 line 24).
    pub fn nearest(&self, from: Replica, config: Config) -> (Replica, u32) {
        self.check(config);
        let mut best = (Replica::MAX, u32::MAX);
        for h in config.iter() {
            let d = self.rtt_us(from, h);
            if d < best.1 {
                best = (h, d);
            }
        }
        debug_assert!(!config.contains(from) || best.1 == 0);
        best
    }

    /// `{California,Virginia}`: a configuration with replica names.
    pub fn describe(&self, config: Config) -> String {
        self.check(config);
        let names: Vec<&str> = config.iter().map(|r| self.name(r)).collect();
        format!("{{{}}}", names.join(","))
    }

    /// Panics when `config` names a replica this topology does not have (a bug).
    pub(crate) fn check(&self, config: Config) {
        assert!(
            config.span() <= self.n(),
            "configuration {config} names a replica outside this {}-replica topology",
            self.n()
        );
    }

    /// The constructor's checks, again: square, zero diagonal, symmetric.
    pub fn invariants(&self) {
        let n = self.n();
        assert!((1..=REPLICAS_MAX).contains(&n));
        assert_eq!(self.rtt_us.len(), n * n);
        for a in 0..n {
            assert_eq!(self.rtt_us[a * n + a], 0);
            for b in 0..n {
                assert_eq!(self.rtt_us[a * n + b], self.rtt_us[b * n + a]);
            }
        }
    }
}

fn check_n(n: usize) -> Result<(), GeoError> {
    if n == 0 {
        return Err(GeoError::NoReplicas);
    }
    if n > REPLICAS_MAX {
        return Err(GeoError::TooManyReplicas {
            n,
            max: REPLICAS_MAX,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_regions() {
        let t = Topology::paper_three_regions();
        assert_eq!(t.n(), 3);
        assert_eq!(t.rtt_us(0, 1), 150_000);
        assert_eq!(t.rtt_us(2, 0), 70_000);
        assert_eq!(t.rtt_ms(1, 2), 90.0);
        assert_eq!(t.write_rtt_us(t.all()), 150_000);
        assert_eq!(t.write_rtt_us(Config::single(1)), 0);
        assert_eq!(t.nearest(1, Config::from_mask(0b101).unwrap()), (2, 90_000));
        assert_eq!(
            t.describe(Config::from_mask(0b110).unwrap()),
            "{Europe,Virginia}"
        );
    }

    #[test]
    fn nearest_breaks_ties_by_lowest_index() {
        let t = Topology::from_rtt_ms(
            &["a", "b", "c"],
            &[&[0.0, 5.0, 5.0], &[5.0, 0.0, 1.0], &[5.0, 1.0, 0.0]],
        )
        .unwrap();
        assert_eq!(t.nearest(0, Config::from_mask(0b110).unwrap()), (1, 5000));
    }

    #[test]
    fn bad_matrices_are_refused() {
        let e = |names: &[&str], m: &[&[f64]]| Topology::from_rtt_ms(names, m).unwrap_err();
        assert_eq!(e(&[], &[]), GeoError::NoReplicas);
        assert!(matches!(
            e(&["a", "b"], &[&[0.0, 1.0], &[2.0, 0.0]]),
            GeoError::Asymmetric { a: 1, b: 0, .. }
        ));
        assert!(matches!(
            e(&["a", "b"], &[&[0.0, 1.0], &[1.0, 0.5]]),
            GeoError::NonZeroDiagonal { r: 1, .. }
        ));
        assert!(matches!(
            e(&["a", "b"], &[&[0.0, 1.0], &[1.0]]),
            GeoError::NotSquare { row: 1, .. }
        ));
        assert!(matches!(
            e(&["a", "b"], &[&[0.0, 1.0]]),
            GeoError::NotSquare { row: 1, len: 0, .. }
        ));
        assert!(matches!(
            e(&["a", "b"], &[&[0.0, -1.0], &[-1.0, 0.0]]),
            GeoError::BadLatency { a: 0, b: 1, .. }
        ));
        assert!(matches!(
            e(&["a", "b"], &[&[0.0, f64::NAN], &[f64::NAN, 0.0]]),
            GeoError::BadLatency { .. }
        ));
        let names: Vec<String> = (0..=REPLICAS_MAX).map(|i| i.to_string()).collect();
        assert!(matches!(
            Topology::from_rtt_us(names, vec![]),
            Err(GeoError::TooManyReplicas { .. })
        ));
    }

    #[test]
    fn serde_round_trip_validates() {
        let t = Topology::paper_three_regions();
        let s = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Topology>(&s).unwrap(), t);
        let bad = r#"{"names":["a","b"],"rtt_us":[[0,1],[2,0]]}"#;
        assert!(serde_json::from_str::<Topology>(bad).is_err());
    }
}
