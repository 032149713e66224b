//! Property tests of the cost model and the optimizer (proptest): brute force is the
//! true minimum, the hot-replica heuristic's guarantees, the cache against fresh
//! computation, the LRU against a model, and determinism (also across a checkpoint).

use partita_geo::{
    best, best_among, cost_op_us, hot_replicas, AccessStats, CacheKey, Config, LruCache, Optimizer,
    OptimizerOptions, Plan, PlanSource, Topology,
};
use proptest::prelude::*;

/// A random symmetric topology of 1 to 6 replicas with RTTs up to 300 ms (zeros
/// included: two replicas in one region).
fn topology() -> impl Strategy<Value = Topology> {
    (1usize..=6).prop_flat_map(|n| {
        prop::collection::vec(prop_oneof![Just(0u32), 0u32..300_000], n * (n - 1) / 2).prop_map(
            move |upper| {
                // Fill the upper triangle row by row and mirror it.
                let pairs: Vec<(usize, usize)> = (0..n)
                    .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
                    .collect();
                let mut m = vec![vec![0u32; n]; n];
                for (&(a, b), d) in pairs.iter().zip(upper) {
                    m[a][b] = d;
                    m[b][a] = d;
                }
                Topology::from_rtt_us((0..n).map(|i| format!("r{i}")).collect(), m).unwrap()
            },
        )
    })
}

/// Counts in 0..1000, a third of them 0.
fn counts(n: usize) -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(prop_oneof![Just(0u64), 0u64..1000, 0u64..1000], n)
}

fn stats(n: usize) -> impl Strategy<Value = AccessStats> {
    (counts(n), counts(n)).prop_map(|(r, w)| AccessStats::from_counts(r, w).unwrap())
}

fn topology_and_stats() -> impl Strategy<Value = (Topology, AccessStats)> {
    topology().prop_flat_map(|t| {
        let n = t.n();
        (Just(t), stats(n))
    })
}

/// Equation 1 written out independently of the crate's helpers, straight from the
/// matrix: Σ_g w_g·(W + δ_g) + r_g·(0 + δ_g).
fn reference_cost(s: &AccessStats, p: Config, t: &Topology) -> u128 {
    let members: Vec<usize> = (0..t.n()).filter(|&g| p.mask() >> g & 1 == 1).collect();
    let w = members
        .iter()
        .flat_map(|&k| members.iter().map(move |&h| (k, h)))
        .map(|(k, h)| t.rtt_us(k, h))
        .max()
        .unwrap() as u128;
    (0..t.n())
        .map(|g| {
            let d = members.iter().map(|&h| t.rtt_us(g, h)).min().unwrap() as u128;
            s.writes(g) as u128 * (w + d) + s.reads(g) as u128 * d
        })
        .sum()
}

fn all_options() -> [OptimizerOptions; 4] {
    [
        OptimizerOptions::brute_force(),
        OptimizerOptions::hot(),
        OptimizerOptions::cached(8),
        OptimizerOptions::hot_cached(8),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Brute force returns a configuration of minimum cost over all 2^N − 1 subsets,
    /// the first in (serializer count, mask) order among equal costs; Equation 1
    /// agrees with the independent reference on every subset.
    #[test]
    fn brute_force_is_the_true_minimum((t, s) in topology_and_stats()) {
        let mut all: Vec<(u128, usize, u32)> = Vec::new();
        for mask in 1u32..(1 << t.n()) {
            let p = Config::from_mask(mask).unwrap();
            let c = cost_op_us(&s, p, &t);
            prop_assert_eq!(c, reference_cost(&s, p, &t));
            all.push((c, p.len(), mask));
        }
        let expected = *all.iter().min().unwrap();
        let search = best_among(&s, &t, t.all());
        prop_assert_eq!(search.evaluations, (1u64 << t.n()) - 1);
        prop_assert_eq!(
            (search.cost_op_us, search.config.len(), search.config.mask()),
            expected
        );
        let (config, ms) = best(&s, &t);
        prop_assert_eq!(config, search.config);
        prop_assert_eq!(ms, search.cost_op_us as f64 / 1000.0);
    }

    /// Equation 1 is linear in the counts: k·stats costs k times as much everywhere,
    /// so the best configuration does not move.
    #[test]
    fn cost_is_linear_in_the_counts((t, s) in topology_and_stats(), k in 1u64..1000) {
        let ks = s.scaled(k);
        for p in t.all().subsets() {
            prop_assert_eq!(cost_op_us(&ks, p, &t), k as u128 * cost_op_us(&s, p, &t));
        }
        prop_assert_eq!(best(&ks, &t).0, best(&s, &t).0);
    }

    /// The heuristic returns a configuration of hot replicas only, the cheapest among
    /// those, never cheaper than brute force, after 2^|hot| − 1 evaluations.
    #[test]
    fn heuristic_stays_among_hot_replicas(
        (t, s) in topology_and_stats(),
        theta in prop_oneof![Just(100u32), 0u32..=1000],
    ) {
        let options = OptimizerOptions { hot_theta_permille: Some(theta), cache_entries_max: None };
        let mut o = Optimizer::new(t.clone(), options).unwrap();
        let Some(plan) = o.optimize(&s) else {
            prop_assert!(s.is_empty());
            return Ok(());
        };
        let hot = hot_replicas(&s, theta).unwrap();
        // The definition, checked without the crate's helper.
        let ops_max = (0..t.n()).map(|g| s.ops(g)).max().unwrap();
        for g in 0..t.n() {
            prop_assert_eq!(hot.contains(g), s.ops(g) * 1000 >= theta as u128 * ops_max);
        }
        prop_assert_eq!(plan.candidates, Some(hot));
        prop_assert!(plan.config.is_subset_of(hot));
        prop_assert_eq!(plan.evaluations, (1u64 << hot.len()) - 1);
        let among_hot = hot.subsets().map(|p| cost_op_us(&s, p, &t)).min().unwrap();
        prop_assert_eq!(plan.cost_op_us, Some(among_hot));
        prop_assert!(among_hot >= best_among(&s, &t, t.all()).cost_op_us);
    }

    /// When every replica is hot the heuristic is brute force.
    #[test]
    fn heuristic_equals_brute_force_when_every_replica_is_hot(
        t in topology(),
        split in prop::collection::vec((100u64..=1000, 0u64..=100), 6),
    ) {
        // Each replica issues 100 to 1000 operations, so each has at least 10% of the
        // busiest one's: all hot at θ = 10%.
        let n = t.n();
        let reads = split[..n].iter().map(|&(ops, pct)| ops - ops * pct / 100).collect();
        let writes = split[..n].iter().map(|&(ops, pct)| ops * pct / 100).collect();
        let s = AccessStats::from_counts(reads, writes).unwrap();
        prop_assert_eq!(hot_replicas(&s, 100), Some(t.all()));
        let mut hot = Optimizer::new(t.clone(), OptimizerOptions::hot()).unwrap();
        let plan = hot.optimize(&s).unwrap();
        let brute = best_among(&s, &t, t.all());
        prop_assert_eq!((plan.config, plan.cost_op_us), (brute.config, Some(brute.cost_op_us)));
        prop_assert_eq!(plan.evaluations, brute.evaluations);
    }

    /// Statistics that are multiples of each other have the same key, hit the cache,
    /// and get what a fresh computation (same strategy, no cache) gives them.
    #[test]
    fn cache_hit_equals_fresh_computation_for_proportional_stats(
        (t, s) in topology_and_stats(),
        k in 1u64..1000,
        hot in any::<bool>(),
    ) {
        prop_assume!(!s.is_empty());
        let theta = hot.then_some(100);
        let cached = OptimizerOptions { hot_theta_permille: theta, cache_entries_max: Some(4) };
        let fresh = OptimizerOptions { hot_theta_permille: theta, cache_entries_max: None };
        let ks = s.scaled(k);
        prop_assert_eq!(CacheKey::of(&s), CacheKey::of(&ks));
        let mut o = Optimizer::new(t.clone(), cached).unwrap();
        prop_assert_eq!(o.optimize(&s).unwrap().source, PlanSource::Computed);
        let hit = o.optimize(&ks).unwrap();
        prop_assert_eq!(hit.source, PlanSource::Cache);
        prop_assert_eq!(hit.evaluations, 0);
        let mut f = Optimizer::new(t.clone(), fresh).unwrap();
        prop_assert_eq!(hit.config, f.optimize(&ks).unwrap().config);
        o.invariants();
    }

    /// Same options, topology and sequence of statistics: the same plans, counters and
    /// cache, for every strategy; and an optimizer restored from a serialized cache
    /// half-way continues exactly as the original.
    #[test]
    fn optimizers_are_deterministic_and_survive_a_checkpoint(
        t in topology(),
        seq in prop::collection::vec((counts(6), counts(6), 1u64..4), 1..40),
        cut in any::<prop::sample::Index>(),
    ) {
        let n = t.n();
        // Scaled copies make cache hits likely.
        let seq: Vec<AccessStats> = seq
            .into_iter()
            .map(|(r, w, k)| AccessStats::from_counts(r[..n].to_vec(), w[..n].to_vec()).unwrap().scaled(k))
            .collect();
        let cut = cut.index(seq.len());
        for options in all_options() {
            let mut a = Optimizer::new(t.clone(), options).unwrap();
            let mut b = Optimizer::new(t.clone(), options).unwrap();
            let pa: Vec<Option<Plan>> = seq.iter().map(|s| a.optimize(s)).collect();
            let pb: Vec<Option<Plan>> = seq.iter().map(|s| b.optimize(s)).collect();
            prop_assert_eq!(&pa, &pb);
            prop_assert_eq!(&a, &b);
            a.invariants();

            let mut c = Optimizer::new(t.clone(), options).unwrap();
            for s in &seq[..cut] {
                c.optimize(s);
            }
            let mut d = match c.cache() {
                Some(cache) => {
                    let json = serde_json::to_string(cache).unwrap();
                    let restored: LruCache = serde_json::from_str(&json).unwrap();
                    Optimizer::with_cache(t.clone(), options, restored).unwrap()
                }
                None => Optimizer::new(t.clone(), options).unwrap(),
            };
            let tail: Vec<Option<Plan>> = seq[cut..].iter().map(|s| d.optimize(s)).collect();
            prop_assert_eq!(&tail[..], &pa[cut..]);
            prop_assert_eq!(d.cache(), a.cache());
        }
    }

    /// The LRU against a model: a list of keys from most to least recently used.
    #[test]
    fn lru_matches_a_model(
        capacity in 1usize..6,
        ops in prop::collection::vec((any::<bool>(), 0u64..10, 0usize..3), 0..200),
    ) {
        let key = |i: u64| CacheKey::of(&AccessStats::from_counts(vec![i, 9 - i], vec![0, 0]).unwrap()).unwrap();
        let mut c = LruCache::new(capacity).unwrap();
        let mut model: Vec<(CacheKey, Config)> = Vec::new();
        let (mut hits, mut misses, mut evictions) = (0u64, 0u64, 0u64);
        for (insert, i, r) in ops {
            let k = key(i);
            let pos = model.iter().position(|&(mk, _)| mk == k);
            if insert {
                let v = Config::single(r);
                c.insert(k, v);
                match pos {
                    Some(p) => { model.remove(p); }
                    None if model.len() == capacity => { model.pop(); evictions += 1; }
                    None => {}
                }
                model.insert(0, (k, v));
            } else {
                let got = c.get(&k);
                match pos {
                    Some(p) => {
                        let e = model.remove(p);
                        prop_assert_eq!(got, Some(e.1));
                        model.insert(0, e);
                        hits += 1;
                    }
                    None => { prop_assert_eq!(got, None); misses += 1; }
                }
            }
            c.invariants();
            prop_assert_eq!(c.entries().collect::<Vec<_>>(), model.clone());
        }
        let counters = c.counters();
        prop_assert_eq!((counters.hits, counters.misses, counters.evictions), (hits, misses, evictions));
    }
}
