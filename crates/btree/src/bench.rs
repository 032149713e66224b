//! Benchmark of this tree against `std::collections::BTreeMap<u64, u64>`.
//!
//! Both structures are preloaded with the same `entries` distinct random keys (the
//! tree by bulk load, the map by `FromIterator` over the sorted entries, which std
//! bulk-builds too), then run the same pre-generated operations, timed separately:
//!
//! - `read`: point reads of random present keys;
//! - `update`: alternately insert a fresh random key and delete a random present key,
//!   so the size stays stable;
//! - `range<L>`: inclusive range queries spanning `L` consecutive keys, consuming every
//!   entry (a checksum over keys and values).
//!
//! Operations are generated before the timers start and every phase checks that both
//! structures produced the same checksum, so neither side can skip work.

use crate::BPlusTree;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet};
use std::hint::black_box;
use std::time::Instant;

/// What to run. Phase sizes are operation counts (bounded work, comparable runs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// Entries preloaded.
    pub entries: u64,
    /// Point reads.
    pub reads: u64,
    /// Inserts plus deletes (half each).
    pub updates: u64,
    /// Range queries.
    pub ranges: u64,
    /// Keys per range query.
    pub range_len: u64,
    pub seed: u64,
}

impl Default for BenchConfig {
    /// 12 million entries; phases sized to run about a second each on `BTreeMap`.
    fn default() -> Self {
        BenchConfig {
            entries: 12_000_000,
            reads: 2_000_000,
            updates: 1_000_000,
            ranges: 100_000,
            range_len: 1000,
            seed: 0x5eed,
        }
    }
}

impl BenchConfig {
    pub fn with_entries(entries: u64) -> Self {
        BenchConfig {
            entries,
            ..Default::default()
        }
    }
}

/// Throughput of one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    /// `read`, `update` or `range<L>` (`range1000` by default).
    pub op: String,
    pub partita_ops_per_s: f64,
    pub btreemap_ops_per_s: f64,
    /// `partita_ops_per_s / btreemap_ops_per_s`.
    pub ratio: f64,
}

/// The benchmark's result; serializes as
/// `{"entries": N, "results": [{"op", "partita_ops_per_s", "btreemap_ops_per_s", "ratio"}]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub entries: u64,
    pub results: Vec<PhaseResult>,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "B+tree benchmark, {} entries", self.entries)?;
        writeln!(
            f,
            "{:<12} {:>16} {:>16} {:>8}",
            "op", "partita ops/s", "BTreeMap ops/s", "ratio"
        )?;
        for r in &self.results {
            writeln!(
                f,
                "{:<12} {:>16.0} {:>16.0} {:>7.2}x",
                r.op, r.partita_ops_per_s, r.btreemap_ops_per_s, r.ratio
            )?;
        }
        Ok(())
    }
}

/// `n` distinct random keys, sorted.
fn distinct_sorted_keys(rng: &mut ChaCha8Rng, n: usize) -> Vec<u64> {
    let mut keys: Vec<u64> = Vec::with_capacity(n);
    while keys.len() < n {
        let missing = n - keys.len();
        keys.extend((0..missing).map(|_| rng.gen::<u64>()));
        keys.sort_unstable();
        keys.dedup();
    }
    keys
}

fn value_of(key: u64) -> u64 {
    key.rotate_left(29) ^ 0x0123_4567_89ab_cdef
}

/// Run `f` once, returning (seconds, its checksum).
fn timed(f: impl FnOnce() -> u64) -> (f64, u64) {
    let start = Instant::now();
    let sum = black_box(f());
    (start.elapsed().as_secs_f64().max(1e-9), sum)
}

fn phase(op: String, ops: u64, partita: (f64, u64), btreemap: (f64, u64)) -> PhaseResult {
    assert_eq!(partita.1, btreemap.1, "{op}: partita and BTreeMap disagree");
    let p = ops as f64 / partita.0;
    let b = ops as f64 / btreemap.0;
    PhaseResult {
        op,
        partita_ops_per_s: p,
        btreemap_ops_per_s: b,
        ratio: p / b,
    }
}

/// Run the benchmark (see the module documentation). Needs about 50 bytes of memory
/// per entry for both structures and the key list.
pub fn run(cfg: &BenchConfig) -> BenchReport {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let keys = distinct_sorted_keys(&mut rng, cfg.entries as usize);
    let tree = BPlusTree::bulk_load(keys.iter().map(|&k| (k, value_of(k))));
    let mut tree = tree.expect("sorted distinct keys");
    let mut map: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, value_of(k))).collect();
    let pick = |rng: &mut ChaCha8Rng| -> u64 {
        if keys.is_empty() {
            rng.gen()
        } else {
            keys[rng.gen_range(0..keys.len())]
        }
    };
    let mut results = Vec::new();

    // Point reads.
    let probes: Vec<u64> = (0..cfg.reads).map(|_| pick(&mut rng)).collect();
    let p = timed(|| {
        probes
            .iter()
            .fold(0u64, |acc, &k| acc.wrapping_add(tree.read(k).unwrap_or(1)))
    });
    let b = timed(|| {
        probes.iter().fold(0u64, |acc, &k| {
            acc.wrapping_add(map.get(&k).copied().unwrap_or(1))
        })
    });
    results.push(phase("read".into(), cfg.reads, p, b));
    drop(probes);

    // Inserts and deletes, alternating; deleted keys are distinct present keys.
    let mut deleted = HashSet::new();
    let ops: Vec<(bool, u64)> = (0..cfg.updates)
        .map(|i| {
            if i % 2 == 0 {
                (true, rng.gen())
            } else {
                let mut k = pick(&mut rng);
                for _ in 0..8 {
                    if deleted.insert(k) {
                        break;
                    }
                    k = pick(&mut rng);
                }
                (false, k)
            }
        })
        .collect();
    drop(deleted);
    let p = timed(|| {
        let mut acc = 0u64;
        for &(ins, k) in &ops {
            if ins {
                acc += tree.insert(k, value_of(k)) as u64;
            } else {
                acc = acc.wrapping_add(tree.delete(k).unwrap_or(1));
            }
        }
        acc
    });
    let b = timed(|| {
        let mut acc = 0u64;
        for &(ins, k) in &ops {
            if ins {
                if let Entry::Vacant(e) = map.entry(k) {
                    e.insert(value_of(k));
                    acc += 1;
                }
            } else {
                acc = acc.wrapping_add(map.remove(&k).unwrap_or(1));
            }
        }
        acc
    });
    results.push(phase("update".into(), cfg.updates, p, b));
    assert_eq!(tree.len(), map.len());
    drop(ops);

    // Range queries over `range_len` consecutive (originally loaded) keys.
    let span = (cfg.range_len.max(1) as usize).min(keys.len().max(1));
    let bounds: Vec<(u64, u64)> = (0..cfg.ranges)
        .map(|_| {
            if keys.is_empty() {
                (0, u64::MAX)
            } else {
                let i = rng.gen_range(0..=keys.len() - span);
                (keys[i], keys[i + span - 1])
            }
        })
        .collect();
    let p = timed(|| {
        let mut acc = 0u64;
        for &(lo, hi) in &bounds {
            tree.query_with(lo, hi, |k, v| acc = acc.wrapping_add(k ^ v));
        }
        acc
    });
    let b = timed(|| {
        let mut acc = 0u64;
        for &(lo, hi) in &bounds {
            for (&k, &v) in map.range(lo..=hi) {
                acc = acc.wrapping_add(k ^ v);
            }
        }
        acc
    });
    results.push(phase(format!("range{}", cfg.range_len), cfg.ranges, p, b));

    BenchReport {
        entries: cfg.entries,
        results,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_agrees_and_serializes() {
        let cfg = BenchConfig {
            entries: 5000,
            reads: 2000,
            updates: 2000,
            ranges: 50,
            range_len: 100,
            seed: 1,
        };
        let report = run(&cfg);
        assert_eq!(report.entries, 5000);
        let ops: Vec<&str> = report.results.iter().map(|r| r.op.as_str()).collect();
        assert_eq!(ops, ["read", "update", "range100"]);
        assert!(report.results.iter().all(|r| r.ratio > 0.0));
        assert!(report.to_string().contains("range100"));
    }
}
