//! `partita experiment geo --sim`'s model at a small scale: behaviour, not timings.
//!
//! - Every system (GeoPaxos+ before and after the optimizer, GeoPaxos, Multi-Paxos,
//!   EPaxos) ends with every replica's tree digest equal and a linearizable history
//!   (`partita_checker`), on the emulated WAN, with DOPs and splits happening.
//! - Europe clients' requests on Europe-local objects take less time under GeoPaxos+
//!   than under Multi-Paxos with its leader in California.
//! - Planted bugs are caught by the check they break: GeoPaxos's merge executing before
//!   a timestamp is safe, and EPaxos committing on the fast path when the answers'
//!   dependencies differ.

use partita_checker::{check, CheckError, CheckOptions, Initial};
use partita_consensus::epaxos::EpaxosBugs;
use partita_experiments::experiment::geo::model::{
    self, run_point, Bugs, CostMode, Outcome, System,
};
use partita_experiments::experiment::geo::workload::{Access, WorkloadSpec};
use partita_experiments::experiment::geo::{calibrate, point_spec, GeoSimOptions, Trees};
use partita_geo::replica::GeoBugs;

const KEYS: u64 = 400;

fn options() -> GeoSimOptions {
    GeoSimOptions {
        keys: KEYS,
        order: 4,
        warmup_window_ops: 2_000,
        dop_every_ms: 300,
        measure_costs: false,
        cost_mode: CostMode::Table,
        ..GeoSimOptions::full()
    }
}

fn workload(access: Access, read_percent: u32, local_percent: u32) -> WorkloadSpec {
    WorkloadSpec {
        access,
        read_percent,
        local_percent,
        zipf_s: 0.99,
        keys: KEYS,
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    trees: &Trees,
    system: System,
    w: WorkloadSpec,
    clients: usize,
    measure_ms: u64,
    seed: u64,
    bugs: Bugs,
    history: bool,
) -> (Outcome, Initial) {
    let o = options();
    let mut spec = point_spec(
        &o,
        trees,
        &calibrate::recorded(),
        system,
        true,
        3,
        w,
        clients,
        seed,
    );
    spec.warmup_ns = 200_000_000;
    spec.start_spread_ns = 50_000_000;
    spec.measure_ns = measure_ms * 1_000_000;
    spec.drain = true;
    spec.drain_max_ns = 20_000_000_000;
    spec.record_history = history;
    spec.bugs = bugs;
    // The tree's entries before the run: the preload, and for DBT_a the warm-up
    // window's inserts.
    let initial = Initial::Entries(
        spec.tree
            .entries()
            .map(|(k, v)| (k, model::u64_of(v)))
            .collect(),
    );
    (run_point(spec), initial)
}

fn linearizable((o, initial): &(Outcome, Initial)) -> Result<(), String> {
    let opts = CheckOptions::with_initial(initial.clone());
    match check(&o.history, &opts) {
        Ok(_) => Ok(()),
        Err(CheckError::NotLinearizable(v)) => Err(format!("not linearizable: {v}")),
        Err(e) => Err(format!("unknown: {e}")),
    }
}

const SYSTEMS: [System; 5] = [
    System::GeoPaxosPlus,
    System::GeoPaxosPlusBefore,
    System::GeoPaxos,
    System::MultiPaxos { leader: 0 },
    System::Epaxos,
];

#[test]
fn every_system_converges_and_is_linearizable() {
    let trees = Trees::default();
    for system in SYSTEMS {
        for (seed, access) in [(1, Access::Skewed), (2, Access::Locality)] {
            let w = workload(access, 70, 90);
            let run = run(&trees, system, w, 30, 3_000, seed, Bugs::default(), true);
            let o = &run.0;
            let r = &o.result;
            assert_eq!(
                r.drained,
                Some(true),
                "{system:?} {access:?}: work left over"
            );
            assert!(
                r.digests_equal == Some(true),
                "{system:?} {access:?}: digests {:?}",
                o.digests
            );
            assert!(r.ops > 50, "{system:?} {access:?}: only {} ops", r.ops);
            assert!(
                o.history.len() as u64 >= r.ops,
                "every answered request is in the history"
            );
            linearizable(&run).unwrap_or_else(|e| panic!("{system:?} {access:?}: {e}"));
            if let Some(g) = &r.geo {
                if system == System::GeoPaxosPlus {
                    assert!(g.dops >= 3, "{system:?}: {} DOPs", g.dops);
                }
                if system == System::GeoPaxosPlusBefore {
                    // Random configurations put writes on several serializers.
                    assert!(g.executed_multi_serializer > 0, "{g:?}");
                }
            }
            if let Some(e) = &r.epaxos {
                assert!(e.fast_commits > 0, "{e:?}");
                if access == Access::Skewed {
                    assert!(e.slow_commits > 0, "conflicts take the slow path: {e:?}");
                }
            }
        }
    }
}

#[test]
fn europe_local_objects_are_faster_under_geopaxos_plus_than_multipaxos_in_california() {
    let trees = Trees::default();
    // Every request of a client is on its own region's keys.
    let w = workload(Access::Locality, 90, 100);
    let gp = run(
        &trees,
        System::GeoPaxosPlus,
        w,
        9,
        1_500,
        5,
        Bugs::default(),
        false,
    )
    .0;
    let mp = run(
        &trees,
        System::MultiPaxos { leader: 0 },
        w,
        9,
        1_500,
        5,
        Bugs::default(),
        false,
    )
    .0;
    let eu = |o: &Outcome| {
        let e = &o.result.regions[1];
        assert_eq!(e.region, "Europe");
        assert!(e.ops > 10, "{e:?}");
        e.mean_ms
    };
    let (g, m) = (eu(&gp), eu(&mp));
    // GeoPaxos+: the Europe serializer decides after a round trip to Virginia (90 ms);
    // Multi-Paxos: to California and back (150 ms) plus its round trip to Virginia.
    assert!(g < m, "GeoPaxos+ {g:.1} ms against Multi-Paxos {m:.1} ms");
    assert!(g < 150.0, "GeoPaxos+ Europe mean {g:.1} ms");
    assert!(m > 200.0, "Multi-Paxos Europe mean {m:.1} ms");
}

#[test]
fn the_geopaxos_merge_executing_before_safe_is_caught() {
    let trees = Trees::default();
    let bugs = Bugs {
        geo: GeoBugs {
            execute_before_safe: true,
            ..GeoBugs::default()
        },
        ..Bugs::default()
    };
    let mut caught = 0;
    for seed in 0..12 {
        let w = workload(Access::Skewed, 50, 90);
        let o = run(
            &trees,
            System::GeoPaxosPlusBefore,
            w,
            24,
            1_000,
            seed,
            bugs,
            true,
        );
        if o.0.result.digests_equal != Some(true) || linearizable(&o).is_err() {
            caught += 1;
        }
    }
    assert!(caught >= 3, "caught in {caught} of 12 seeds");
}

#[test]
fn epaxos_skipping_the_slow_path_is_caught() {
    let trees = Trees::default();
    let bugs = Bugs {
        epaxos: EpaxosBugs {
            skip_slow_path_when_deps_differ: true,
        },
        ..Bugs::default()
    };
    let mut caught = 0;
    for seed in 0..12 {
        let w = workload(Access::Skewed, 50, 90);
        let o = run(&trees, System::Epaxos, w, 24, 1_000, seed, bugs, true);
        if o.0.result.digests_equal != Some(true) || linearizable(&o).is_err() {
            caught += 1;
        }
    }
    assert!(caught >= 3, "caught in {caught} of 12 seeds");
}
