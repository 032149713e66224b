//! `partita experiment geo --sim` at a small scale: behaviour, not timings.
//!
//! The experiment runs the simulator's benchmark mode (`partita_sim::bench`) on real
//! node cores; convergence, linearizability and the planted bugs of GeoPaxos+'s merge
//! and EPaxos's paths are the swarm's to check (`crates/sim/tests/geo_swarm.rs`). Here:
//!
//! - A client reading keys of its own region waits one round trip to the nearest other
//!   region, and no more, in the median: under GeoPaxos+ (its serializer's leader is
//!   at its replica and needs one more acceptor) and under EPaxos (its replica's fast
//!   quorum is itself and one more replica). A client that entered at another region's
//!   replica (as every client did after its first command was refused while the
//!   cluster started), or a message from next door queued at a port behind one still
//!   crossing an ocean (as the simulator's ports did), fails it.
//! - Every region's clients are measured apart, and a point's clients are spread over
//!   the three regions.

use partita_experiments::experiment::geo::{run_point, Access, GeoSimOptions, System};

fn options() -> GeoSimOptions {
    GeoSimOptions {
        keys: 3_000,
        order: 8,
        wan_ms: 3_000,
        ..GeoSimOptions::full()
    }
}

/// Per region (in name order), the median latency of 9 clients reading keys of their
/// own region's range.
fn local_reads_p50(system: System) -> Vec<(String, f64)> {
    let o = GeoSimOptions {
        local_percent: 100,
        ..options()
    };
    let (r, _) = run_point(&o, system, true, 3, Access::Locality, 100, 9, 7)
        .unwrap_or_else(|e| panic!("{}: {e:#}", system.label()));
    assert!(r.failure.is_none(), "{:?}", r.failure);
    for x in &r.regions {
        assert_eq!(x.clients, 3, "{x:?}");
        assert!(x.commands > 0, "{x:?}");
    }
    r.regions
        .iter()
        .map(|x| (x.region.clone(), x.latency_ms_p50))
        .collect()
}

fn assert_one_round_trip(system: System) {
    let got = local_reads_p50(system);
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["California", "Europe", "Virginia"]);
    // The paper's round trips: California-Virginia 70 ms, Virginia-Europe 90 ms.
    for ((region, p50), nearest) in got.iter().zip([70.0, 90.0, 70.0]) {
        assert!(
            (nearest..nearest * 1.1 + 1.0).contains(p50),
            "{}: {region}'s local reads took {p50:.1} ms in the median, not one round trip to the nearest region ({nearest} ms)",
            system.label()
        );
    }
}

#[test]
fn local_reads_take_one_round_trip_under_geopaxos_plus() {
    assert_one_round_trip(System::GeoPaxosPlus);
}

#[test]
fn local_reads_take_one_round_trip_under_epaxos() {
    assert_one_round_trip(System::Epaxos);
}
