//! Histories generated from a linearizable map with random concurrent clients must all
//! pass; corrupting one result must be caught.

use crate::common;

use common::*;
use partita_btree::{Op, OpResult};
use partita_checker::gen::{generate, GenConfig, Generated, OpMix};
use partita_checker::{check, check_with_final_state, CheckError, CheckOptions, Initial, Status};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn opts_for(cfg: &GenConfig) -> CheckOptions {
    CheckOptions::with_initial(cfg.initial.clone())
}

fn assert_valid(cfg: &GenConfig) -> Generated {
    let g = generate(cfg);
    let opts = opts_for(cfg);
    match check(&g.events, &opts) {
        Ok(s) => assert!(s.ops_checked > 0),
        Err(e) => panic!("seed {}: generated history rejected: {e}", cfg.seed),
    }
    if let Err(e) = check_with_final_state(&g.events, &opts, &g.final_state) {
        panic!("seed {}: final state rejected: {e}", cfg.seed);
    }
    g
}

#[test]
fn point_histories_pass() {
    for seed in 0..40 {
        assert_valid(&GenConfig {
            seed,
            clients: 8,
            ops: 400,
            keys: 8,
            values: 4,
            mix: OpMix::point_only(),
            ..GenConfig::default()
        });
    }
}

#[test]
fn mixed_histories_pass() {
    for seed in 0..40 {
        assert_valid(&GenConfig {
            seed,
            clients: 8,
            ops: 400,
            keys: 24,
            values: 4,
            mix: OpMix::all(),
            ..GenConfig::default()
        });
    }
}

#[test]
fn histories_with_info_and_fail_pass() {
    for seed in 0..40 {
        assert_valid(&GenConfig {
            seed,
            clients: 6,
            ops: 300,
            keys: 12,
            values: 4,
            info_rate: 0.1,
            fail_rate: 0.05,
            ..GenConfig::default()
        });
    }
}

#[test]
fn histories_over_a_preload_pass() {
    for seed in 0..20 {
        assert_valid(&GenConfig {
            seed,
            clients: 8,
            ops: 400,
            keys: 64,
            initial: Initial::Preload {
                count: 20,
                stride: 2,
            },
            info_rate: 0.05,
            ..GenConfig::default()
        });
    }
}

#[test]
fn large_preload_costs_only_what_is_touched() {
    let cfg = GenConfig {
        seed: 1,
        clients: 8,
        ops: 2_000,
        keys: 1 << 20,
        initial: Initial::Preload {
            count: 1 << 19,
            stride: 2,
        },
        max_range: 64,
        ..GenConfig::default()
    };
    let g = generate(&cfg);
    let s = check(&g.events, &opts_for(&cfg)).unwrap();
    assert!(s.groups > 100, "{s:?}");
}

#[test]
fn many_clients_contending_on_few_keys() {
    let g = assert_valid(&GenConfig {
        seed: 3,
        clients: 32,
        ops: 3_000,
        keys: 4,
        values: 3,
        info_rate: 0.02,
        ..GenConfig::default()
    });
    assert!(g.events.len() == 3_000);
}

#[test]
fn long_single_group_histories() {
    // Wide range queries merge every key into one sub-history: the global search, over
    // 20k operations of 16 or 32 clients, some of them timing out.
    for (seed, clients, values) in [(11, 16, 1_000_000_000), (12, 32, 8)] {
        let cfg = GenConfig {
            seed,
            clients,
            ops: 20_000,
            keys: 256,
            values,
            max_range: 256,
            info_rate: 0.01,
            ..GenConfig::default()
        };
        let g = generate(&cfg);
        let s = check(&g.events, &opts_for(&cfg)).unwrap();
        assert!(s.largest_group > 19_000, "{s:?}");
        // About one state per operation: no real backtracking.
        assert!(s.states < 60_000, "{s:?}");
        check_with_final_state(&g.events, &opts_for(&cfg), &g.final_state).unwrap();
    }
}

/// An ok read after every operation completed, returning a value nobody ever wrote:
/// certainly not linearizable.
#[test]
fn appended_impossible_read_is_caught() {
    for seed in 0..20 {
        let cfg = GenConfig {
            seed,
            info_rate: 0.05,
            ..GenConfig::default()
        };
        let mut g = generate(&cfg);
        let end = g.events.iter().map(|e| e.ret_ns).max().unwrap();
        g.events.push(ok(
            1000,
            read(3),
            end + 1,
            end + 2,
            OpResult::Value(Some(1_000_000)),
        ));
        let v = assert_violation(&g.events, &opts_for(&cfg));
        assert_eq!(v.index, Some(g.events.len() - 1));
    }
}

fn ok_reads(g: &Generated) -> Vec<usize> {
    g.events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.status == Status::Ok && matches!(e.op, Op::Read { .. }))
        .map(|(i, _)| i)
        .collect()
}

/// One read result replaced by a value never written anywhere: always caught.
#[test]
fn single_corrupted_read_is_caught() {
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    for seed in 0..50 {
        let cfg = GenConfig {
            seed,
            info_rate: 0.05,
            ..GenConfig::default()
        };
        let mut g = generate(&cfg);
        let reads = ok_reads(&g);
        let victim = reads[rng.gen_range(0..reads.len())];
        g.events[victim].result = Some(OpResult::Value(Some(cfg.values + 1)));
        let v = assert_violation(&g.events, &opts_for(&cfg));
        assert_eq!(v.index, Some(victim), "seed {seed}");
    }
}

/// One read result replaced by another plausible value (absent <-> some written value):
/// not always wrong (a concurrent write may explain it), but usually.
#[test]
fn plausible_corruptions_are_caught_most_of_the_time() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (mut caught, mut tries) = (0, 0);
    for seed in 0..100 {
        let cfg = GenConfig {
            seed,
            clients: 4,
            ops: 200,
            keys: 16,
            values: 4,
            ..GenConfig::default()
        };
        let mut g = generate(&cfg);
        let reads = ok_reads(&g);
        let victim = reads[rng.gen_range(0..reads.len())];
        let Some(OpResult::Value(v)) = g.events[victim].result.clone() else {
            unreachable!()
        };
        let corrupted = match v {
            Some(x) if rng.gen_bool(0.5) => Some(x % cfg.values + 1),
            Some(_) => None,
            None => Some(rng.gen_range(1..=cfg.values)),
        };
        g.events[victim].result = Some(OpResult::Value(corrupted));
        tries += 1;
        match check(&g.events, &opts_for(&cfg)) {
            Err(CheckError::NotLinearizable(_)) => caught += 1,
            Ok(_) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(caught * 10 >= tries * 7, "caught only {caught} of {tries}");
}

/// Dropping one entry from a final state that no info operation can explain is caught.
#[test]
fn corrupted_final_state_is_caught() {
    let mut caught = 0;
    for seed in 0..30 {
        let cfg = GenConfig {
            seed,
            ..GenConfig::default()
        };
        let mut g = generate(&cfg);
        if g.final_state.is_empty() {
            continue;
        }
        let i = seed as usize % g.final_state.len();
        g.final_state.remove(i);
        if check_with_final_state(&g.events, &opts_for(&cfg), &g.final_state).is_err() {
            caught += 1;
        }
    }
    assert!(caught >= 25, "caught only {caught} of 30");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn generated_histories_are_linearizable(
        seed in any::<u64>(),
        clients in 1u32..20,
        ops in 1usize..300,
        keys in 1u64..40,
        values in 1u64..6,
        info_pct in 0u32..20,
        fail_pct in 0u32..10,
        points_only in any::<bool>(),
        preload in 0u64..10,
    ) {
        let cfg = GenConfig {
            seed,
            clients,
            ops,
            keys,
            values,
            info_rate: info_pct as f64 / 100.0,
            fail_rate: fail_pct as f64 / 100.0,
            mix: if points_only { OpMix::point_only() } else { OpMix::all() },
            initial: Initial::Preload { count: preload, stride: 3 },
            ..GenConfig::default()
        };
        let g = generate(&cfg);
        let opts = opts_for(&cfg);
        prop_assert!(check(&g.events, &opts).is_ok(), "{:?}", check(&g.events, &opts));
        let fin = check_with_final_state(&g.events, &opts, &g.final_state);
        prop_assert!(fin.is_ok(), "{:?}", fin);
    }
}
