//! GeoPaxos+ on real processes (paper 004): three `partita node`s in the paper's
//! regions (California, Virginia, Europe) over the emulated WAN, each an acceptor of
//! every serializer's Multi-Paxos group and a replica hosting one serializer, fsync on;
//! B+tree clients in every region, each at its nearest replica. Judged as every run:
//!
//! - the clients' history is linearizable with the final contents (read back through
//!   the replicated path), starting from the tree the cluster file loads;
//! - the replicas converge (same executed count, same digest of keys, values,
//!   structure and serializers);
//! - with the leader of serializer 0 (node 1, California) killed with SIGKILL under
//!   load and restarted: another node takes serializer 0 over, operations go on, and
//!   the restarted replica rebuilds its tree from its checkpoint (if any) and the
//!   serializers' logs, and delivers again.

use partita_btree::{Op, OpResult};
use partita_client::{node_status, Client, ClientOptions};
use partita_config::ClusterConfig;
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::launch::{pick_base_port, spawn_node, LocalCluster};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Keys loaded at the start (0..KEYS, value = key, placed by range per region).
const KEYS: u64 = 60;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

/// Every replica's (executed, digest) once all three executed the same number of
/// operations with equal digests; fails with what they said after `wait`.
async fn converged(c: &ClusterConfig, wait: Duration) -> Vec<(u64, u64)> {
    let deadline = Instant::now() + wait;
    loop {
        let mut seen = Vec::new();
        for n in &c.nodes {
            if let Some(s) = node_status(c.addr(n.id), Duration::from_secs(1)).await {
                if let (Some(e), Some(d)) = (s.executed_up_to, s.digest) {
                    seen.push((e, d));
                }
            }
        }
        if seen.len() == 3 && seen.windows(2).all(|w| w[0] == w[1]) {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not converge: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every key of `0..keys` read through the replicated path (several clients at once).
async fn final_entries(cluster: &ClusterConfig, keys: u64) -> Vec<(u64, u64)> {
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let cluster = cluster.clone();
        tasks.push(tokio::spawn(async move {
            let opts = ClientOptions {
                give_up: Duration::from_secs(30),
                entry_index: Some(t),
                ..ClientOptions::default()
            };
            let mut c = Client::<partita_btree::BPlusTree>::connect(cluster, opts)
                .await
                .unwrap();
            let mut got = Vec::new();
            for key in (t..keys).step_by(8) {
                match c.execute(Op::Read { key }).await.unwrap() {
                    OpResult::Value(Some(v)) => got.push((key, v)),
                    OpResult::Value(None) => {}
                    other => panic!("a read answered {other:?}"),
                }
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_unstable();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geopaxos_plus_stays_linearizable_with_a_serializer_leader_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg =
        ClusterConfig::paper_geo_local(pick_base_port(), rand::random::<u64>() >> 1, KEYS);
    if let Some(g) = cfg.ordering.geo_mut() {
        // Small nodes: inserts of new keys split leaves (INSERT's psite predicts it).
        g.order = 4;
    }
    if let Some(w) = cfg.wan.as_mut() {
        w.clients = vec!["California".into(), "Virginia".into(), "Europe".into()];
    }
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, dir.path(), &[], None).unwrap();
    if let Err(e) = lc.wait_ready(Duration::from_secs(20)).await {
        let logs: Vec<String> = (1..=3)
            .map(|n| {
                std::fs::read_to_string(dir.path().join(format!("node-{n}.log")))
                    .unwrap_or_default()
            })
            .collect();
        panic!("{e}: {logs:#?}");
    }
    let cluster = lc.cluster.clone();

    // Load from every region: half reads, keys 0..2·KEYS (so inserts add keys).
    let load = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            let cfg = BenchConfig {
                give_up: None,
                workload: Workload::Geo {
                    read_percent: 50,
                    keys: partita_sim::bench::GeoKeys::UNIFORM,
                },
                clients: 6,
                duration: Duration::from_secs(9),
                think_ms: 5,
                preload: 0,
                seed: 4,
                trim: 0.0,
                progress: false,
                key_space: Some(2 * KEYS),
            };
            bench::run(&cluster, &cfg).await.unwrap()
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    // SIGKILL node 1, serializer 0's leader, with operations in flight.
    {
        let (_, child) = lc.children.iter_mut().find(|(id, _)| *id == 1).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarted = spawn_node(&exe(), &lc.cluster_file, 1, dir.path(), &[]).unwrap();
    lc.children.retain(|(id, _)| *id != 1);
    lc.children.push((1, restarted));
    let (result, records) = load.await.unwrap();
    let done = records.iter().filter(|r| r.result.is_some()).count();
    if done < 40 {
        let logs: Vec<String> = (1..=3)
            .map(|n| {
                let l = std::fs::read_to_string(dir.path().join(format!("node-{n}.log")))
                    .unwrap_or_default();
                l.lines().rev().take(15).collect::<Vec<_>>().join("\n")
            })
            .collect();
        let mut st = Vec::new();
        for n in 1..=3 {
            st.push(
                node_status(cluster.addr(n), Duration::from_secs(1))
                    .await
                    .map(|s| {
                        (
                            s.coordinator,
                            s.counters
                                .into_iter()
                                .filter(|c| c.1 > 0)
                                .collect::<Vec<_>>(),
                        )
                    }),
            );
        }
        panic!("too little work to judge: {result}\n{logs:#?}\n{st:#?}");
    }

    let finals = final_entries(&cluster, 2 * KEYS).await;
    let events: Vec<_> = records
        .iter()
        .map(partita_harness::history::to_event)
        .collect();
    let opts = partita_checker::CheckOptions {
        initial: partita_checker::Initial::Preload {
            count: KEYS,
            stride: 1,
        },
        ..Default::default()
    };
    let summary = partita_checker::check_with_final_state(&events, &opts, &finals)
        .unwrap_or_else(|e| panic!("{} operations: {e}", records.len()));
    eprintln!(
        "{} operations ({done} completed): {summary:?}; {result}",
        records.len()
    );

    let replicas = converged(&cluster, Duration::from_secs(30)).await;
    eprintln!("replicas (executed, digest): {replicas:?}");
    let s1 = node_status(cluster.addr(1), Duration::from_secs(1))
        .await
        .unwrap();
    let counter = |name: &str| {
        s1.counters
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v)
    };
    // Counters are the process's: the restarted replica's merge delivered again in
    // its new life (cuts are the barriers, DOPs and opens every serializer ordered).
    assert!(
        counter("geo_cuts") > 0,
        "the restarted replica delivers again: {:?}",
        s1.counters
    );
    lc.stop(Duration::from_secs(5));
}
