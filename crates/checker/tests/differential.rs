//! The checker against a brute-force oracle on small histories, valid or not: every
//! order of the operations that respects real time is tried. This is what keeps the
//! search's reductions and pruning honest in both directions (no false alarm, no miss).

use std::collections::BTreeMap;

use partita_btree::OpResult;
use partita_checker::gen::{generate, GenConfig, OpMix};
use partita_checker::{
    apply_op, check, check_with_final_state, CheckError, CheckOptions, Event, Initial, Status,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Is there an order of the non-`fail` operations (each `info` one optionally left out)
/// respecting real time in which every `ok` result matches, ending (if given) in `final_state`?
fn oracle(events: &[Event], initial: &Initial, final_state: Option<&BTreeMap<u64, u64>>) -> bool {
    let ops: Vec<&Event> = events
        .iter()
        .filter(|e| e.status == Status::Ok || (e.status == Status::Info && e.op.is_mutation()))
        .collect();
    let map: BTreeMap<u64, u64> = initial.iter().collect();
    let mut placed = vec![false; ops.len()];
    search(&ops, &mut placed, map, final_state)
}

fn search(
    ops: &[&Event],
    placed: &mut Vec<bool>,
    map: BTreeMap<u64, u64>,
    final_state: Option<&BTreeMap<u64, u64>>,
) -> bool {
    let done = ops
        .iter()
        .zip(placed.iter())
        .all(|(e, &p)| p || e.status == Status::Info);
    if done && final_state.is_none_or(|f| *f == map) {
        return true;
    }
    for i in 0..ops.len() {
        if placed[i] {
            continue;
        }
        // Every unplaced ok operation that responded before this one was invoked must
        // come first.
        let blocked = (0..ops.len()).any(|j| {
            !placed[j] && j != i && ops[j].status == Status::Ok && ops[j].ret_ns < ops[i].call_ns
        });
        if blocked {
            continue;
        }
        let mut next = map.clone();
        let r = apply_op(&mut next, &ops[i].op);
        if ops[i].status == Status::Ok && ops[i].result.as_ref() != Some(&r) {
            continue;
        }
        placed[i] = true;
        let found = search(ops, placed, next, final_state);
        placed[i] = false;
        if found {
            return true;
        }
    }
    false
}

/// A plausible wrong result of the same kind.
fn perturb(r: &OpResult, rng: &mut ChaCha8Rng, values: u64) -> OpResult {
    let mut value = |v: Option<u64>| -> Option<u64> {
        match v {
            Some(_) if rng.gen_bool(0.5) => None,
            _ => Some(rng.gen_range(0..=values)),
        }
    };
    match r {
        OpResult::Inserted(b) => OpResult::Inserted(!b),
        OpResult::Removed(v) => OpResult::Removed(value(*v)),
        OpResult::Value(v) => OpResult::Value(value(*v)),
        OpResult::Old(v) => OpResult::Old(value(*v)),
        OpResult::Entries(es) => {
            let mut es = es.clone();
            if es.is_empty() || rng.gen_bool(0.3) {
                let k = rng.gen_range(0..6);
                if !es.iter().any(|e| e.0 == k) {
                    es.push((k, rng.gen_range(0..=values)));
                    es.sort_unstable();
                }
            } else {
                es.remove(rng.gen_range(0..es.len()));
            }
            OpResult::Entries(es)
        }
        OpResult::Entry(e) => OpResult::Entry(match e {
            Some(_) if rng.gen_bool(0.5) => None,
            _ => Some((rng.gen_range(0..6), rng.gen_range(0..=values))),
        }),
        OpResult::Batch(rs) => {
            let mut rs = rs.clone();
            if !rs.is_empty() {
                let i = rng.gen_range(0..rs.len());
                rs[i] = perturb(&rs[i], rng, values);
            }
            OpResult::Batch(rs)
        }
    }
}

#[test]
fn agrees_with_brute_force() {
    let mut rng = ChaCha8Rng::seed_from_u64(2024);
    let (mut valid, mut invalid, mut final_valid, mut final_invalid) = (0, 0, 0, 0);
    for case in 0..5000u64 {
        let cfg = GenConfig {
            seed: case,
            clients: rng.gen_range(1..7),
            ops: rng.gen_range(1..10),
            keys: rng.gen_range(1..6),
            values: 3,
            mix: if rng.gen_bool(0.3) {
                OpMix::point_only()
            } else {
                OpMix::all()
            },
            info_rate: 0.2,
            fail_rate: 0.05,
            max_latency_ns: 100,
            max_think_ns: 30,
            max_range: 4,
            max_batch: 3,
            initial: if rng.gen_bool(0.3) {
                Initial::Preload {
                    count: 3,
                    stride: 2,
                }
            } else {
                Initial::Empty
            },
        };
        let mut g = generate(&cfg);
        // Corrupt some results, so that about half the histories are not linearizable.
        for e in g.events.iter_mut() {
            if let Some(r) = &e.result {
                if rng.gen_bool(0.15) {
                    e.result = Some(perturb(r, &mut rng, cfg.values));
                }
            }
        }
        let mut final_state: BTreeMap<u64, u64> = g.final_state.iter().copied().collect();
        if rng.gen_bool(0.3) {
            let k = rng.gen_range(0..6);
            if final_state.remove(&k).is_none() {
                final_state.insert(k, rng.gen_range(0..=cfg.values));
            }
        }
        let opts = CheckOptions::with_initial(cfg.initial.clone());

        let expected = oracle(&g.events, &cfg.initial, None);
        let got = check(&g.events, &opts);
        match (&got, expected) {
            (Ok(_), true) => valid += 1,
            (Err(CheckError::NotLinearizable(_)), false) => invalid += 1,
            _ => panic!(
                "case {case}: oracle says {expected}, checker {got:?}\n{:#?}",
                g.events
            ),
        }

        let finals: Vec<(u64, u64)> = final_state.iter().map(|(k, v)| (*k, *v)).collect();
        let expected = oracle(&g.events, &cfg.initial, Some(&final_state));
        let got = check_with_final_state(&g.events, &opts, &finals);
        match (&got, expected) {
            (Ok(_), true) => final_valid += 1,
            (Err(CheckError::NotLinearizable(_)), false) => final_invalid += 1,
            _ => panic!(
                "case {case} with final state {finals:?}: oracle says {expected}, checker {got:?}\n{:#?}",
                g.events
            ),
        }
    }
    eprintln!("{valid} {invalid} {final_valid} {final_invalid}");
    // Both verdicts must be well represented for the comparison to mean anything.
    assert!(
        valid > 1000 && invalid > 1000,
        "{valid} valid, {invalid} invalid"
    );
    assert!(
        final_valid > 1000 && final_invalid > 1000,
        "{final_valid} valid, {final_invalid} invalid with final state"
    );
}

/// Longer generated histories (too long for the oracle) with one corrupted result: when
/// the checker says "linearizable" the corruption must have been harmless, which the
/// oracle cannot tell here, but a violation report must name an operation that exists
/// and was not `fail`.
#[test]
fn violation_reports_name_a_real_operation() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for seed in 0..200 {
        let cfg = GenConfig {
            seed,
            clients: 6,
            ops: 150,
            keys: 10,
            values: 4,
            info_rate: 0.05,
            ..GenConfig::default()
        };
        let mut g = generate(&cfg);
        let oks: Vec<usize> = (0..g.events.len())
            .filter(|&i| g.events[i].status == Status::Ok)
            .collect();
        let i = oks[rng.gen_range(0..oks.len())];
        let r = g.events[i].result.clone().expect("ok has a result");
        g.events[i].result = Some(perturb(&r, &mut rng, cfg.values));
        if let Err(CheckError::NotLinearizable(v)) = check(&g.events, &CheckOptions::default()) {
            if let Some(idx) = v.index {
                assert_ne!(g.events[idx].status, Status::Fail);
                assert_eq!(v.event.as_ref(), Some(&g.events[idx]));
            }
            assert!(!v.message.is_empty());
        }
    }
}
