//! Regions in the simulator: the cluster file's `[wan]` matrix gives the links between
//! regions its one-way delays (the same matrix the real processes' drivers delay by),
//! and closed-loop clients see the round trips in virtual time.

use partita_config::{ClusterConfig, Role, WanSection};
use partita_sim::bench::{self, BenchSpec, Workload};
use partita_sim::queue::MILLIS;

/// The paper's deployment (one acceptor-replica per region, Virginia leads) with
/// every client in `client_region`.
fn paper(client_region: &str) -> ClusterConfig {
    let mut c = ClusterConfig::paper_wan_local(7100, 91);
    c.storage.checkpoint_instances = 0;
    c.wan.as_mut().unwrap().clients = vec![client_region.to_string()];
    ClusterConfig::parse(&c.to_toml(), "test").unwrap()
}

fn spec(cluster: ClusterConfig, clients: u32) -> BenchSpec {
    let mut s = BenchSpec::new(cluster, Workload::Update, clients);
    s.duration_ns = 3_000 * MILLIS;
    s.think_ms = 0;
    s
}

/// The client-server baseline with its server in Virginia and a client in Europe: a
/// command costs the Virginia–Europe round trip (90 ms) plus the LAN-scale rest
/// (serialization, jitter of at most 10 µs per link, the server's CPU).
#[test]
fn a_round_trip_between_regions_costs_the_matrixs_rtt() {
    let mut c = ClusterConfig::client_server(7200, 92);
    c.nodes[0].region = Some("Virginia".into());
    c.wan = Some(WanSection {
        clients: vec!["Europe".into()],
        ..WanSection::paper()
    });
    let c = ClusterConfig::parse(&c.to_toml(), "test").unwrap();
    let r = bench::run(spec(c.clone(), 1));
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert!(r.commands > 20, "{r:?}");
    assert!(
        (90.0..91.0).contains(&r.latency_ms_p50) && (90.0..91.0).contains(&r.latency_ms_max),
        "one 90 ms round trip per command: {r:?}"
    );
    assert!(
        r.wan
            .as_deref()
            .is_some_and(|w| w.contains("Virginia–Europe 90 ms")),
        "{:?}",
        r.wan
    );
    // The client in Virginia too: no delay at all.
    let mut local = c;
    local.wan.as_mut().unwrap().clients = vec!["virginia".into()];
    let r = bench::run(spec(local, 1));
    assert!(r.latency_ms_max < 5.0, "{r:?}");
}

/// Ring Paxos over three regions, a client in Europe: at least the Europe–Virginia
/// round trip to reach the leader and hear back; with the client in Virginia the
/// command still waits for a quorum in another region (California, 70 ms away), but
/// no longer for Europe's round trip. Without `[wan]`, the same cluster answers at LAN
/// speed. Deterministic like every run.
#[test]
fn the_paper_matrix_shapes_smr_latency() {
    let eu = bench::run(spec(paper("Europe"), 1));
    assert!(eu.failure.is_none(), "{:?}", eu.failure);
    assert!(eu.commands > 5, "{eu:?}");
    assert_eq!(eu.resubmissions, 0, "no timeouts at these delays: {eu:?}");
    assert!(
        eu.latency_ms_p50 >= 90.0,
        "at least the EU–VA round trip: {eu:?}"
    );
    assert!(eu.latency_ms_max < 500.0, "{eu:?}");
    let va = bench::run(spec(paper("Virginia"), 1));
    assert!(va.failure.is_none(), "{:?}", va.failure);
    assert!(
        va.latency_ms_p50 >= 70.0,
        "a quorum needs another region: {va:?}"
    );
    assert!(va.latency_ms_p50 < eu.latency_ms_p50, "{va:?} vs {eu:?}");
    let mut lan = paper("Europe");
    lan.wan = None;
    for n in &mut lan.nodes {
        n.region = None;
    }
    assert!(lan.nodes.iter().all(|n| n.roles.contains(&Role::Acceptor)));
    let lan = bench::run(spec(lan, 1));
    assert!(lan.failure.is_none(), "{:?}", lan.failure);
    assert!(lan.latency_ms_p50 < 10.0, "{lan:?}");
    assert_eq!(lan.wan, None);
    // The same spec replays exactly.
    let again = bench::run(spec(paper("Europe"), 1));
    assert_eq!(again.trace_hash, eu.trace_hash);
    eprintln!(
        "simulated WAN, Ring Paxos, 1 client, p50 latency: Europe {:.1} ms, Virginia {:.1} ms, no WAN {:.2} ms",
        eu.latency_ms_p50, va.latency_ms_p50, lan.latency_ms_p50
    );
}
