//! The swarm: hundreds of seeds, each with its own cluster shape and fault classes, both
//! protocols; every run must pass every check (invariants after every handler,
//! agreement, liveness after healing, convergence, linearizability and final state).
//!
//! `cargo test --workspace` runs 320 seeds of 1,000 commands (split over four tests so
//! that the harness runs them in parallel: 25–66 s each in the dev profile on 2 cores);
//! a quarter of them run the key-value store, judged by the key-value checker.
//! The soak runs a range given by `PARTITA_SIM_SEEDS=A..B` (with `PARTITA_SIM_OPS`,
//! default 2000):
//!
//! ```sh
//! PARTITA_SIM_SEEDS=0..100000 cargo test --release -p partita-sim --test it swarm::soak -- --ignored --nocapture
//! ```

use partita_sim::{run_seed, RingsChoice, SimOptions};

const OPS: u64 = 1000;

fn swarm(seeds: std::ops::Range<u64>, ops: u64) {
    let opts = SimOptions {
        ops,
        trace_tail: 25,
        ..SimOptions::default()
    };
    let mut failures = Vec::new();
    let mut ok_ops = 0;
    // Seeds on the key-value store (a quarter, drawn apart), and those of them with
    // P-SMR's worker threads.
    let (mut kv, mut kv_psmr) = (0, 0);
    for seed in seeds.clone() {
        let r = run_seed(seed, &opts);
        ok_ops += r.ops_ok;
        if r.params.service == "kv" {
            kv += 1;
            kv_psmr += u32::from(r.params.psmr_threads > 0);
        }
        if !r.passed {
            eprintln!("{r}\n");
            failures.push(r.one_line());
        }
    }
    assert!(ok_ops > 0, "no command completed in seeds {seeds:?}");
    eprintln!("seeds {seeds:?}: {kv} on the key-value store, {kv_psmr} of them with P-SMR threads");
    assert!(kv > 0, "no seed of {seeds:?} ran the key-value store");
    assert!(
        failures.is_empty(),
        "{} of {} seeds failed:\n{}",
        failures.len(),
        seeds.end - seeds.start,
        failures.join("\n")
    );
}

#[test]
fn swarm_seeds_0_to_80() {
    swarm(0..80, OPS);
}

#[test]
fn swarm_seeds_80_to_160() {
    swarm(80..160, OPS);
}

#[test]
fn swarm_seeds_160_to_240() {
    swarm(160..240, OPS);
}

#[test]
fn swarm_seeds_240_to_320() {
    swarm(240..320, OPS);
}

/// Seeds the soak found failing, each with the swarm's draws and 2,000 operations as
/// the soak ran them: 4439 and 7457 (a batch for two partitions half applied on
/// Multi-Ring Paxos after its client gave up), 18130 (opt-PSMR's conservative
/// resubmission dropped by the coordinator as a copy of the original in flight),
/// 45849 and 47931 (a P-SMR replica holding delivered values back for a checkpoint
/// took a transferred checkpoint between its own and the delivery stream's position,
/// and the node asked the learner to skip backwards: a panic).
#[test]
fn soak_regressions() {
    let opts = SimOptions {
        trace_tail: 25,
        ..SimOptions::default()
    };
    for seed in [4439, 7457, 18130, 45849] {
        let r = run_seed(seed, &opts);
        assert!(r.passed, "{r}");
    }
    // 47931 as the soak found it, on one stream (the swarm has since drawn it
    // Multi-Ring Paxos, now that P-SMR seeds may draw rings).
    let one_stream = SimOptions {
        rings: RingsChoice::Fixed(0),
        ..opts
    };
    let r = run_seed(47931, &one_stream);
    assert!(r.passed, "{r}");
}

/// The long soak: `PARTITA_SIM_SEEDS=A..B` (default 0..1000), `PARTITA_SIM_OPS` (2000).
#[test]
#[ignore = "long soak: set PARTITA_SIM_SEEDS=A..B and run with --ignored (release build)"]
fn soak() {
    let range = std::env::var("PARTITA_SIM_SEEDS").unwrap_or_else(|_| "0..1000".into());
    let (a, b) = range
        .split_once("..")
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .unwrap_or_else(|| panic!("PARTITA_SIM_SEEDS=`{range}` is not A..B"));
    let ops = std::env::var("PARTITA_SIM_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    swarm(a..b, ops);
}
