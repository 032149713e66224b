//! The three access patterns of paper 004 §VI-A and the key each request uses.
//!
//! The key space is `0..keys`; the tree is preloaded with the even keys (value = key),
//! so a write (an INSERT of a 100-byte value) of an odd key adds an entry and may split
//! a leaf, and one of an even key changes nothing (the key is present).
//!
//! - **Locality**: the key space is cut into N equal contiguous ranges, range g owned
//!   by region g; a client of replica g picks, with probability `local_percent`, a key
//!   uniformly in its own range, otherwise uniformly in the whole space.
//! - **Uniform**: every key equally likely, for every client.
//! - **Skewed**: a Zipfian law of exponent `zipf_s` over the ranks `0..keys`, the same
//!   for every client ("some objects have higher probability of being accessed by
//!   every client"); rank r is key `(r · P) mod keys` for a fixed large prime P, so
//!   the hot keys are spread over the leaves instead of all sitting in the first one.

use rand::Rng;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// An access pattern (§VI-A).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Locality,
    Uniform,
    Skewed,
}

impl Access {
    pub const ALL: [Access; 3] = [Access::Locality, Access::Uniform, Access::Skewed];

    pub fn name(self) -> &'static str {
        match self {
            Access::Locality => "locality",
            Access::Uniform => "uniform",
            Access::Skewed => "skewed",
        }
    }
}

/// What the clients of one point issue.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WorkloadSpec {
    pub access: Access,
    /// READs among the requests, in percent; the rest are INSERTs.
    pub read_percent: u32,
    /// Locality: requests on the client's own key range, in percent.
    pub local_percent: u32,
    /// Skewed: the Zipf exponent.
    pub zipf_s: f64,
    /// The key space `0..keys` (the preload holds its even keys).
    pub keys: u64,
}

/// A prime that divides no key-space size used here (it is above all of them), so
/// `r ↦ r · P mod keys` is a permutation of `0..keys`.
const SCATTER_PRIME: u64 = 1_000_000_007;

/// The Zipf CDF over `0..keys`, built once per (keys, exponent) and shared.
struct Zipf {
    keys: u64,
    s_bits: u64,
    cdf: Arc<Vec<f64>>,
}

static ZIPF: Mutex<Option<Zipf>> = Mutex::new(None);

fn zipf_cdf(keys: u64, s: f64) -> Arc<Vec<f64>> {
    let mut z = ZIPF.lock().expect("zipf lock");
    if let Some(z) = z.as_ref() {
        if z.keys == keys && z.s_bits == s.to_bits() {
            return z.cdf.clone();
        }
    }
    let mut cdf = Vec::with_capacity(keys as usize);
    let mut sum = 0.0;
    for r in 0..keys {
        sum += 1.0 / ((r + 1) as f64).powf(s);
        cdf.push(sum);
    }
    let cdf = Arc::new(cdf);
    *z = Some(Zipf {
        keys,
        s_bits: s.to_bits(),
        cdf: cdf.clone(),
    });
    cdf
}

/// Draws keys for the clients of a point.
#[derive(Clone)]
pub struct KeyGen {
    spec: WorkloadSpec,
    n: usize,
    cdf: Option<Arc<Vec<f64>>>,
}

impl KeyGen {
    pub fn new(spec: WorkloadSpec, n: usize) -> KeyGen {
        assert!(
            spec.keys >= n as u64 * 2,
            "a key space of {} for {n} regions",
            spec.keys
        );
        assert!(spec.keys < SCATTER_PRIME, "the scatter needs keys below P");
        assert!(spec.read_percent <= 100 && spec.local_percent <= 100);
        let cdf = (spec.access == Access::Skewed).then(|| zipf_cdf(spec.keys, spec.zipf_s));
        KeyGen { spec, n, cdf }
    }

    /// Region `home`'s own range under locality.
    pub fn range(&self, home: usize) -> (u64, u64) {
        let k = self.spec.keys;
        let lo = k * home as u64 / self.n as u64;
        let hi = k * (home as u64 + 1) / self.n as u64;
        (lo, hi)
    }

    /// A key for a request of a client of replica `home`.
    pub fn key(&self, rng: &mut impl Rng, home: usize) -> u64 {
        let k = self.spec.keys;
        let key = match self.spec.access {
            Access::Uniform => rng.gen_range(0..k),
            Access::Locality => {
                if rng.gen_range(0..100) < self.spec.local_percent {
                    let (lo, hi) = self.range(home);
                    rng.gen_range(lo..hi)
                } else {
                    rng.gen_range(0..k)
                }
            }
            Access::Skewed => {
                let cdf = self.cdf.as_ref().expect("skewed has its CDF");
                let total = *cdf.last().expect("keys > 0");
                let u = rng.gen::<f64>() * total;
                let rank = cdf.partition_point(|&c| c < u).min(cdf.len() - 1) as u64;
                ((rank as u128 * SCATTER_PRIME as u128) % k as u128) as u64
            }
        };
        debug_assert!(key < k);
        key
    }

    /// Whether the next request is a READ.
    pub fn is_read(&self, rng: &mut impl Rng) -> bool {
        rng.gen_range(0..100) < self.spec.read_percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn spec(access: Access) -> WorkloadSpec {
        WorkloadSpec {
            access,
            read_percent: 95,
            local_percent: 90,
            zipf_s: 0.99,
            keys: 10_000,
        }
    }

    #[test]
    fn locality_mostly_hits_the_home_range() {
        let g = KeyGen::new(spec(Access::Locality), 3);
        let mut rng = StdRng::seed_from_u64(1);
        let (lo, hi) = g.range(1);
        let home = (0..10_000)
            .filter(|_| (lo..hi).contains(&g.key(&mut rng, 1)))
            .count();
        // 90% local plus a third of the 10% drawn over everything.
        assert!((9_100..9_500).contains(&home), "{home}");
    }

    #[test]
    fn skewed_has_a_hot_key_shared_by_everyone() {
        let g = KeyGen::new(spec(Access::Skewed), 3);
        let mut rng = StdRng::seed_from_u64(2);
        let mut counts = std::collections::BTreeMap::<u64, u32>::new();
        for i in 0..20_000 {
            *counts.entry(g.key(&mut rng, i % 3)).or_default() += 1;
        }
        let top = counts.values().max().copied().unwrap();
        // Rank 0 takes 1/H(10000, 0.99) ≈ 10% of the draws.
        assert!(top > 1_500, "{top}");
        // Rank 0 is key 0, rank 1 is far away from it.
        assert!(counts[&0] == top);
    }
}
