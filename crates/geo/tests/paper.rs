//! The paper's own numbers (paper 004 §III-C, §III-D, §VI-B): Fig. 2's topology and
//! workload, Table I, the hot-replica example and the cache key "011050".

use partita_geo::{
    best, best_among, cost, cost_op_us, hot_replicas, AccessStats, CacheKey, Config, Optimizer,
    OptimizerOptions, PlanSource, Topology,
};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// Fig. 2(b): reads 10/100/50 and writes 10/1/5 from clients of A/B/C.
fn fig2_workload() -> AccessStats {
    AccessStats::from_counts(vec![10, 100, 50], vec![10, 1, 5]).unwrap()
}

fn set(replicas: &[usize]) -> Config {
    Config::from_replicas(replicas.iter().copied()).unwrap()
}

/// A row of Table I: P_{X,i}, W_i, R_i, [δ_{A,i}, δ_{B,i}, δ_{C,i}], C_{X,i} (ms).
type Row = (&'static [usize], u32, u32, [u32; 3], f64);

/// Table I, row by row.
const TABLE_I: [Row; 7] = [
    (&[A], 0, 0, [0, 150, 70], 19000.0),
    (&[B], 0, 0, [150, 0, 90], 7950.0),
    (&[C], 0, 0, [70, 90, 0], 10490.0),
    (&[A, B], 150, 0, [0, 0, 70], 6250.0),
    (&[A, C], 70, 0, [0, 90, 0], 10210.0),
    (&[B, C], 90, 0, [70, 0, 0], 2840.0),
    (&[A, B, C], 150, 0, [0, 0, 0], 2400.0),
];

#[test]
fn table_i_every_row() {
    let t = Topology::paper_three_regions();
    let s = fig2_workload();
    for (members, w_ms, r_ms, deltas_ms, c_ms) in TABLE_I {
        let p = set(members);
        assert_eq!(t.write_rtt_us(p), w_ms * 1000, "W for {p}");
        assert_eq!(r_ms, 0, "R_i = 0 in every row");
        for g in [A, B, C] {
            assert_eq!(t.nearest(g, p).1, deltas_ms[g] * 1000, "δ_{g} for {p}");
        }
        assert_eq!(cost(&s, p, &t), c_ms, "C for {}", t.describe(p));
        assert_eq!(cost_op_us(&s, p, &t), (c_ms as u128) * 1000);
    }
    // The three numbers issue 18 quotes.
    assert_eq!(cost(&s, set(&[A, B, C]), &t), 2400.0);
    assert_eq!(cost(&s, set(&[B, C]), &t), 2840.0);
    assert_eq!(cost(&s, set(&[A]), &t), 19000.0);
}

#[test]
fn table_i_best_is_a_b_c_at_2400() {
    let t = Topology::paper_three_regions();
    let s = fig2_workload();
    assert_eq!(best(&s, &t), (set(&[A, B, C]), 2400.0));
    let search = best_among(&s, &t, t.all());
    assert_eq!(
        search.evaluations, 7,
        "C(3,1) + C(3,2) + C(3,3) configurations"
    );
    assert_eq!(search.cost_ms(), 2400.0);
    // {A,B,C} is strictly the cheapest: no tie-break was needed.
    let mut costs: Vec<f64> = t.all().subsets().map(|p| cost(&s, p, &t)).collect();
    costs.sort_by(f64::total_cmp);
    assert_eq!(&costs[..2], &[2400.0, 2840.0]);
}

#[test]
fn paper_regions_are_fig_2_and_section_vi_b() {
    let t = Topology::paper_three_regions();
    assert_eq!(
        (t.name(A), t.name(B), t.name(C)),
        ("California", "Europe", "Virginia")
    );
    assert_eq!(t.rtt_ms(A, C), 70.0, "California–Virginia");
    assert_eq!(t.rtt_ms(C, B), 90.0, "Virginia–Europe");
    assert_eq!(t.rtt_ms(A, B), 150.0, "California–Europe");
}

/// With §VI-D's θ = 10%, A (20 operations against B's 101) is hot, so the heuristic
/// enumerates all 7 configurations and agrees with brute force.
#[test]
fn hot_replicas_at_ten_percent_keep_a() {
    let t = Topology::paper_three_regions();
    let s = fig2_workload();
    assert_eq!(hot_replicas(&s, 100), Some(t.all()));
    let mut o = Optimizer::new(t, OptimizerOptions::hot()).unwrap();
    let plan = o.optimize(&s).unwrap();
    assert_eq!(plan.config, set(&[A, B, C]));
    assert_eq!(plan.evaluations, 7);
    assert_eq!(plan.cost_op_us, Some(2_400_000));
}

/// §III-D's example drops A and goes from 7 configurations to 3; that needs θ above
/// 20/101 = 19.8%. The heuristic then settles for {B,C} at 2840 instead of 2400.
#[test]
fn hot_replicas_example_of_section_iii_d() {
    let t = Topology::paper_three_regions();
    let s = fig2_workload();
    assert_eq!(hot_replicas(&s, 198), Some(t.all()), "20·1000 ≥ 198·101");
    assert_eq!(
        hot_replicas(&s, 199),
        Some(set(&[B, C])),
        "20·1000 < 199·101"
    );
    let options = OptimizerOptions {
        hot_theta_permille: Some(200),
        cache_entries_max: None,
    };
    let mut o = Optimizer::new(t, options).unwrap();
    let plan = o.optimize(&s).unwrap();
    assert_eq!(plan.candidates, Some(set(&[B, C])));
    assert_eq!(plan.evaluations, 3);
    assert_eq!(plan.config, set(&[B, C]));
    assert_eq!(plan.cost_op_us, Some(2_840_000));
}

/// §III-D: L_A = 20/176 ≈ 0.11, U_A = 10/20 = 0.50, "in this case 011050". B and C
/// follow in index order: L_B = 101/176 → 57, U_B = 1/101 → 0; L_C = 55/176 → 31,
/// U_C = 5/55 → 9.
#[test]
fn cache_key_of_fig_2() {
    let k = CacheKey::of(&fig2_workload()).unwrap();
    assert_eq!((k.load_hundredths(A), k.update_hundredths(A)), (11, 50));
    assert!(k.to_string().starts_with("011050"));
    assert_eq!(k.to_string(), "011050057000031009");
}

#[test]
fn cache_hit_for_a_multiple_of_fig_2() {
    let t = Topology::paper_three_regions();
    let mut o = Optimizer::new(t, OptimizerOptions::hot_cached(16)).unwrap();
    let first = o.optimize(&fig2_workload()).unwrap();
    assert_eq!(first.source, PlanSource::Computed);
    let again = o.optimize(&fig2_workload().scaled(10)).unwrap();
    assert_eq!(again.source, PlanSource::Cache);
    assert_eq!((again.config, again.evaluations), (set(&[A, B, C]), 0));
    let c = o.counters();
    assert_eq!(
        (c.calls, c.computed, c.cache_hits, c.evaluations),
        (2, 1, 1, 7)
    );
    let cache = o.cache().unwrap().counters();
    assert_eq!((cache.hits, cache.misses), (1, 1));
    o.invariants();
}

/// The cache is an approximation: two workloads that truncate to the same key can
/// have different best configurations, and the second then gets the first's. Here A
/// reads 50 or 52 times; {B,C} costs 90·60 + 70·50 = 8900 < 9000 = 150·60 for {A,B,C}
/// in the first, and 9040 > 9000 in the second.
#[test]
fn cache_trades_accuracy_for_hits() {
    let t = Topology::paper_three_regions();
    let s1 = AccessStats::from_counts(vec![50, 1000, 500], vec![0, 10, 50]).unwrap();
    let s2 = AccessStats::from_counts(vec![52, 1000, 500], vec![0, 10, 50]).unwrap();
    assert_eq!(CacheKey::of(&s1), CacheKey::of(&s2));
    assert_eq!(CacheKey::of(&s1).unwrap().to_string(), "003000062000034009");
    assert_eq!(best(&s1, &t), (set(&[B, C]), 8900.0));
    assert_eq!(best(&s2, &t), (set(&[A, B, C]), 9000.0));
    let mut o = Optimizer::new(t.clone(), OptimizerOptions::cached(16)).unwrap();
    o.optimize(&s1).unwrap();
    let plan = o.optimize(&s2).unwrap();
    assert_eq!(
        (plan.source, plan.config),
        (PlanSource::Cache, set(&[B, C]))
    );
    assert_eq!(cost(&s2, plan.config, &t), 9040.0);
}

#[test]
fn empty_statistics_give_no_plan() {
    let mut o = Optimizer::new(
        Topology::paper_three_regions(),
        OptimizerOptions::hot_cached(4),
    )
    .unwrap();
    assert_eq!(o.optimize(&AccessStats::new(3)), None);
    let c = o.counters();
    assert_eq!((c.calls, c.skipped_empty, c.evaluations), (1, 1, 0));
    assert_eq!(
        o.cache().unwrap().counters().misses,
        0,
        "no lookup without a key"
    );
    o.invariants();
}

#[test]
fn options_are_validated() {
    let t = Topology::paper_three_regions();
    let bad_theta = OptimizerOptions {
        hot_theta_permille: Some(1001),
        cache_entries_max: None,
    };
    assert!(Optimizer::new(t.clone(), bad_theta).is_err());
    assert!(Optimizer::new(t.clone(), OptimizerOptions::cached(0)).is_err());
    let labels: Vec<&str> = [
        OptimizerOptions::brute_force(),
        OptimizerOptions::hot(),
        OptimizerOptions::cached(1),
        OptimizerOptions::hot_cached(1),
    ]
    .iter()
    .map(OptimizerOptions::label)
    .collect();
    assert_eq!(labels, ["brute-force", "hot", "lru", "hot+lru"]);
    let cache = partita_geo::LruCache::new(5).unwrap();
    assert_eq!(
        Optimizer::with_cache(t.clone(), OptimizerOptions::cached(6), cache.clone()).unwrap_err(),
        partita_geo::GeoError::CacheCapacityMismatch {
            cache: 5,
            options: Some(6)
        }
    );
    assert!(Optimizer::with_cache(t, OptimizerOptions::cached(5), cache).is_ok());
}
