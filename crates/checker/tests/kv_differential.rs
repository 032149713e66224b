//! The key-value checker against a brute-force oracle on small histories, valid and
//! not: every order of the operations that respects real time is tried on the model,
//! each `info` operation placed anywhere after its invocation or left out. This keeps
//! the revision-guided search honest in both directions (no false alarm, no miss).

use std::collections::{BTreeMap, HashSet};

use partita_checker::history::Status;
use partita_checker::kv::gen::{generate_kv, KvGenConfig};
use partita_checker::kv::model::eval;
use partita_checker::kv::{
    check_kv, Entry, KvCheckError, KvCheckOptions, KvEvent, KvResult, ModelStore,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type State = (u64, BTreeMap<Vec<u8>, Entry>);

/// Is there an order of the `ok` operations and some of the `info` ones, respecting
/// real time, in which every `ok` result agrees with the model?
fn oracle(events: &[KvEvent]) -> bool {
    let ops: Vec<&KvEvent> = events
        .iter()
        .filter(|e| e.status == Status::Ok || (e.status == Status::Info && e.op.may_write()))
        .collect();
    assert!(ops.len() <= 20, "the oracle is for small histories");
    let mut seen = HashSet::new();
    search(&ops, 0, (1, BTreeMap::new()), &mut seen)
}

fn search(ops: &[&KvEvent], placed: u32, state: State, seen: &mut HashSet<(u32, State)>) -> bool {
    let all_ok = (0..ops.len()).all(|i| placed & (1 << i) != 0 || ops[i].status == Status::Info);
    if all_ok {
        return true;
    }
    if !seen.insert((placed, state.clone())) {
        return false;
    }
    for i in 0..ops.len() {
        if placed & (1 << i) != 0 {
            continue;
        }
        // Every unplaced ok operation that returned before this one was invoked must
        // come first.
        let blocked = (0..ops.len()).any(|j| {
            j != i
                && placed & (1 << j) == 0
                && ops[j].status == Status::Ok
                && ops[j].ret_ns < ops[i].call_ns
        });
        if blocked {
            continue;
        }
        let effect = eval(&state.1, state.0, &ops[i].op);
        if let Some(r) = &ops[i].result {
            if !r.agrees_with(&effect.result) {
                continue;
            }
        }
        let mut next = state.clone();
        if !effect.changes.is_empty() {
            next.0 += 1;
            for (k, e) in effect.changes {
                match e {
                    Some(e) => next.1.insert(k, e),
                    None => next.1.remove(&k),
                };
            }
        }
        if search(ops, placed | (1 << i), next, seen) {
            return true;
        }
    }
    false
}

/// Change one `ok` result a little (a revision, a value, a count, a flag).
fn corrupt(events: &mut [KvEvent], rng: &mut ChaCha8Rng) {
    let oks: Vec<usize> = (0..events.len())
        .filter(|&i| events[i].status == Status::Ok)
        .collect();
    if oks.is_empty() {
        return;
    }
    let i = oks[rng.gen_range(0..oks.len())];
    let r = events[i].result.as_mut().expect("ok");
    let bump = |x: &mut u64, rng: &mut ChaCha8Rng| {
        if *x > 1 && rng.gen_bool(0.5) {
            *x -= 1
        } else {
            *x += 1
        }
    };
    match r {
        KvResult::Put { revision, .. } => bump(revision, rng),
        KvResult::Get {
            value,
            mod_revision,
            version,
            revision,
        } => match rng.gen_range(0..3) {
            0 => {
                if let Some(r) = revision {
                    bump(r, rng)
                } else {
                    *version += 1
                }
            }
            1 if value.is_some() => *value = None,
            _ => {
                *value = Some(b"v0".to_vec());
                *mod_revision = Some(mod_revision.unwrap_or(2));
                *version = (*version).max(1);
            }
        },
        KvResult::Del {
            deleted, revision, ..
        } => {
            if rng.gen_bool(0.5) {
                bump(deleted, rng)
            } else {
                bump(revision, rng)
            }
        }
        KvResult::Range {
            entries, revision, ..
        } => {
            if entries.is_empty() || rng.gen_bool(0.5) {
                bump(revision, rng)
            } else {
                entries.pop();
            }
        }
        KvResult::Txn { revision, .. } => match revision {
            Some(r) => bump(r, rng),
            None => *revision = Some(1),
        },
    }
}

#[test]
fn the_checker_agrees_with_brute_force() {
    // [not linearizable, linearizable] x [as generated, corrupted]
    let mut counts = [0usize; 4];
    let seeds: u64 = std::env::var("KV_DIFFERENTIAL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    for seed in 0..seeds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let cfg = KvGenConfig {
            seed,
            clients: rng.gen_range(2..=4),
            ops: rng.gen_range(3..=11),
            keys: rng.gen_range(1..=3),
            values: 2,
            info_rate: [0.0, 0.15, 0.3][rng.gen_range(0..3)],
            fail_rate: 0.1,
            max_latency_ns: 100,
            max_think_ns: 30,
            read_revisions: rng.gen_bool(0.6),
            ..KvGenConfig::default()
        };
        let mut events = generate_kv(&cfg, &mut ModelStore::default());
        let corrupted = rng.gen_bool(0.5);
        if corrupted {
            corrupt(&mut events, &mut rng);
        }
        let expected = oracle(&events);
        assert!(
            corrupted || expected,
            "seed {seed}: the oracle rejects a generated history"
        );
        let got = match check_kv(&events, &KvCheckOptions::default()) {
            Ok(_) => true,
            Err(KvCheckError::NotLinearizable(_)) => false,
            Err(e) => panic!("seed {seed}: {e}"),
        };
        if got != expected {
            let lines: Vec<String> = events.iter().map(|e| e.describe()).collect();
            panic!(
                "seed {seed}: checker says {got}, oracle says {expected}:\n{}",
                lines.join("\n")
            );
        }
        counts[usize::from(expected) * 2 + usize::from(corrupted)] += 1;
    }
    // Both verdicts are exercised: generated histories pass, most corrupted ones fail,
    // and some corruptions happen to stay linearizable (a revision bump on a read that a
    // concurrent write explains).
    assert_eq!(counts[0], 0);
    assert!(
        counts[1] * 5 > seeds as usize && counts[2] * 5 > seeds as usize && counts[3] > 0,
        "{counts:?}"
    );
}
