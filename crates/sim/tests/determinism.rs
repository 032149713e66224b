//! A run is a pure function of (seed, options, code): the same seed twice gives the same
//! event trace, bit for bit; different seeds give different runs.

use partita_sim::{check_determinism, run_seed, FaultSelection, ProtocolChoice, SimOptions};

fn opts(ops: u64) -> SimOptions {
    SimOptions {
        ops,
        ..SimOptions::default()
    }
}

#[test]
fn the_same_seed_replays_the_same_trace() {
    // Both protocols (even and odd seeds), faults as the swarm draws them.
    for seed in [0, 1, 2, 3, 1000, 1001] {
        if let Err(e) = check_determinism(seed, &opts(300)) {
            panic!("{e}");
        }
    }
}

#[test]
fn the_same_seed_replays_with_every_fault_class_on() {
    let o = SimOptions {
        ops: 300,
        coordinator_crashes: true,
        faults: FaultSelection::Only(partita_sim::FaultClass::ALL.to_vec()),
        protocol: ProtocolChoice::RingPaxos,
        ..SimOptions::default()
    };
    for seed in [7, 8] {
        if let Err(e) = check_determinism(seed, &o) {
            panic!("{e}");
        }
    }
}

#[test]
fn different_seeds_give_different_runs() {
    let a = run_seed(10, &opts(100));
    let b = run_seed(12, &opts(100));
    assert_ne!(a.trace_hash, b.trace_hash);
    assert!(a.events > 1000, "a run processes events: {}", a.events);
}
