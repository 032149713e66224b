//! The experiment mode: a fault-free closed-loop benchmark in virtual time.

use partita_config::{ClusterConfig, Role};
use partita_sim::bench::{self, BenchSpec, Workload};
use partita_sim::queue::MILLIS;

/// 3 acceptors and `replicas` replicas, as `partita experiment` builds them, with no
/// checkpoints.
fn smr(replicas: u32) -> ClusterConfig {
    let mut c = ClusterConfig::default_local(7100, 77);
    c.nodes.retain(|n| n.roles.contains(&Role::Acceptor));
    for i in 0..replicas {
        c.nodes.push(partita_config::NodeSection {
            id: 4 + i,
            addr: format!("127.0.0.1:{}", 7104 + i),
            roles: vec![Role::Replica],
            partition: None,
            etcd_addr: None,
            region: None,
            join: false,
        });
    }
    c.storage.checkpoint_instances = 0;
    ClusterConfig::parse(&c.to_toml(), "test").unwrap()
}

fn spec(cluster: ClusterConfig, w: Workload, clients: u32) -> BenchSpec {
    let mut s = BenchSpec::new(cluster, w, clients);
    s.duration_ns = 300 * MILLIS;
    s.think_ms = 2;
    s
}

#[test]
fn an_smr_point_runs_and_replays_exactly() {
    let a = bench::run(spec(smr(2), Workload::Batch, 8));
    assert!(a.failure.is_none(), "{:?}", a.failure);
    assert!(a.commands > 100, "{a:?}");
    assert_eq!(a.ops, 7 * a.commands);
    assert!(a.instances > 0 && a.commands_per_instance >= 1.0, "{a:?}");
    assert!(
        a.latency_ms_p50 > 0.1,
        "ordering and fsync take time: {a:?}"
    );
    assert!(a.latency_ms_p50 <= a.latency_ms_p99 && a.latency_ms_p99 <= a.latency_ms_max);
    assert_eq!(a.nodes.len(), 5);
    assert!(a.nodes.iter().all(|n| n.cpu > 0.0 && n.cpu <= 1.0), "{a:?}");
    let b = bench::run(spec(smr(2), Workload::Batch, 8));
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.commands, b.commands);
    assert_eq!(a.latency_ms_p99, b.latency_ms_p99);
    let mut other = spec(smr(2), Workload::Batch, 8);
    other.seed = 2;
    assert_ne!(bench::run(other).trace_hash, a.trace_hash);
}

#[test]
fn client_server_preloads_and_answers_full_ranges() {
    let mut s = spec(ClusterConfig::client_server(7200, 78), Workload::Query, 4);
    s.preload = 5_000;
    let r = bench::run(s);
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(r.mode, "cs");
    assert!(r.commands > 100, "{r:?}");
    // 1000-entry replies: each costs the server's card about 0.13 ms at 1 Gbit/s.
    let server = &r.nodes[0];
    assert!(server.nic_out > 0.05, "{r:?}");
    // Without think time, a single client is bound by the round trip.
    let mut one = spec(ClusterConfig::client_server(7200, 78), Workload::Update, 1);
    one.think_ms = 0;
    let r = bench::run(one);
    assert!(
        r.latency_ms_p50 >= 0.1,
        "at least the 0.1 ms round trip: {r:?}"
    );
}

#[test]
fn an_smr_preload_needs_a_replica_image() {
    let mut s = spec(smr(1), Workload::Update, 1);
    s.preload = 10;
    let r = bench::run(s);
    assert!(
        r.failure.as_deref().is_some_and(|f| f.contains("image")),
        "{:?}",
        r.failure
    );
}
