//! S-SMR and DS-SMR worlds in the simulator's experiment mode: Chirper on
//! `DsReplica`s over Multi-Ring Paxos, clients driving the client proxy. Behaviour,
//! not speed: commands complete under both schemes, S-SMR never consults, moves or
//! retries, DS-SMR with posts across communities does, and a run is a pure function
//! of its spec.

use partita_config::{ClusterConfig, Role};
use partita_dssmr::chirper::{GraphSpec, Workload};
use partita_dssmr::client::Scheme;
use partita_sim::bench::{run_with_dssmr, BenchSpec, Workload as BtreeWorkload};
use partita_sim::queue::SECONDS;
use partita_sim::swarm::DsParams;

fn cluster(scheme: Scheme, data: u32) -> ClusterConfig {
    let partitions = data + u32::from(scheme == Scheme::Dssmr);
    let mut c = ClusterConfig::default_local(7100, 9);
    c.storage.checkpoint_instances = 0;
    c.cluster.service = "chirper".into();
    c.chirper = Some(partita_config::ChirperSection::default());
    c.execution = if scheme == Scheme::Dssmr {
        partita_config::ExecutionSection::Dssmr(Default::default())
    } else {
        partita_config::ExecutionSection::Ssmr
    };
    let template = c
        .nodes
        .iter()
        .find(|n| n.roles.contains(&Role::Replica))
        .cloned()
        .unwrap();
    c.nodes.retain(|n| n.roles.contains(&Role::Acceptor));
    for i in 0..2 * partitions {
        let mut n = template.clone();
        n.id = 4 + i;
        n.addr = format!("127.0.0.1:{}", 7100 + n.id);
        n.partition = Some(i / 2);
        c.nodes.push(n);
    }
    c.partitioning.partitions = partitions;
    c.with_multiring(partitions, 1).unwrap()
}

fn spec(scheme: Scheme, workload: Workload) -> BenchSpec {
    spec_with(scheme, workload, false)
}

fn spec_with(scheme: Scheme, workload: Workload, await_moves: bool) -> BenchSpec {
    let mut s = BenchSpec::new(cluster(scheme, 2), BtreeWorkload::Update, 40);
    s.duration_ns = SECONDS / 2;
    s.dssmr = Some(DsParams {
        scheme,
        graph: GraphSpec {
            users: 600,
            communities: 8,
            mean_followers: 6.0,
            p_local: 0.95,
            seed: 3,
            scattered: false,
        },
        workload,
        gather_where_most: false,
        await_moves,
        static_map: partita_dssmr::StaticMap::Service,
        kv_pairs: 0,
        swarm: false,
    });
    s
}

#[test]
fn chirper_runs_on_both_schemes() {
    let (s, ss) = run_with_dssmr(spec(Scheme::Ssmr, Workload::Mix));
    assert!(s.commands > 500, "S-SMR completed {} commands", s.commands);
    assert_eq!(
        ss.consults + ss.objects_moved + ss.retries + ss.fallbacks,
        0,
        "{ss:?}"
    );
    let (d, ds) = run_with_dssmr(spec(Scheme::Dssmr, Workload::Post));
    assert!(d.commands > 200, "DS-SMR completed {} commands", d.commands);
    assert!(
        ds.objects_moved > 0 && ds.retries > 0 && ds.cache_hits > 0,
        "{ds:?}"
    );
    assert_eq!(ds.moves_per_s.len(), 10);
    // Deterministic.
    let (again, ds2) = run_with_dssmr(spec(Scheme::Dssmr, Workload::Post));
    assert_eq!(again.commands, d.commands);
    assert_eq!(ds2, ds);
}

#[test]
fn moves_go_with_the_access_unless_awaited() {
    // The paper's proxy sends a command's moves and its access at once (the moves on
    // a session of their own); with `await_moves` each move is waited for first.
    let (at_once, a) = run_with_dssmr(spec_with(Scheme::Dssmr, Workload::Post, false));
    let (awaited, w) = run_with_dssmr(spec_with(Scheme::Dssmr, Workload::Post, true));
    for (name, r, s) in [("at once", &at_once, &a), ("awaited", &awaited, &w)] {
        assert!(r.commands > 200, "{name}: {} commands", r.commands);
        assert!(s.move_commands > 0 && s.objects_moved > 0, "{name}: {s:?}");
    }
    assert!(a.ahead_of_moves > 0, "{a:?}");
    assert_eq!(w.ahead_of_moves, 0, "{w:?}");
    eprintln!(
        "Post, 2 partitions: at once {:.0} cps, {a:?}; awaited {:.0} cps, {w:?}",
        at_once.throughput_cmds_per_s, awaited.throughput_cmds_per_s
    );
}
