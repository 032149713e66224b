//! State partitioning on real processes (paper 001 §III-C): a cluster whose B+tree is
//! cut into two key ranges, each with two replicas, ordered by one Ring Paxos (or
//! Multi-Paxos) instance. Concurrent clients run every operation, many of them across
//! the partition border (range queries, next, prev, batches); the history must be
//! linearizable with the final contents, the replicas of each partition must converge,
//! and each partition must hold only its own keys. A third run adds speculative
//! execution with early replies: each partition's answerer replies tentatively and
//! confirms later, and clients merge only confirmed sub-results of one instance. A
//! fourth puts two standalone batchers in front of the leader: every client enters
//! through one of them. A fifth runs P-SMR inside the partitions (paper 002's worker
//! threads at every replica of paper 001's partitions): each replica's two threads
//! split its partition's keys, and both must have run commands alone.
//!
//! The checks' controls: `crates/checker` rejects paper 001's Figure 4 history, and the
//! simulator's `independent-partitions` control shows that sub-commands ordered
//! independently are caught.

use partita_btree::{Op, OpResult};
use partita_client::{node_status, Client, ClientOptions};
use partita_config::{ClusterConfig, Durability};
use partita_consensus::Protocol;
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::launch::{pick_base_port, LocalCluster};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

async fn judge(protocol: Protocol, early_replies: bool, batchers: u32) {
    judge_with(protocol, early_replies, batchers, 0).await
}

async fn judge_with(protocol: Protocol, early_replies: bool, batchers: u32, threads: usize) {
    let dir = tempfile::tempdir().unwrap();
    let preload = 100;
    let key_space = 2 * preload;
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1)
        .with_partitions(2, 2, key_space)
        .unwrap()
        .with_batchers(batchers)
        .unwrap();
    cfg.set_protocol(protocol);
    cfg.cluster.durability = Durability::Fsync;
    if early_replies {
        cfg.execution = partita_config::ExecutionSection::speculative(true);
    }
    if threads > 0 {
        cfg = cfg.with_psmr(threads, false, key_space - 1).unwrap();
    }
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let cfg = ClusterConfig::load(&file).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, dir.path(), &[], None).unwrap();
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    bench::preload(&cfg, preload, false).await.unwrap();
    let run = BenchConfig {
        give_up: None,
        workload: Workload::Mixed,
        clients: 6,
        duration: Duration::from_secs(3),
        think_ms: 1,
        preload,
        seed: 11,
        trim: 0.1,
        progress: false,
        key_space: Some(key_space),
    };
    let (result, records) = bench::run(&cfg, &run).await.unwrap();
    assert!(result.commands > 100, "too little work to judge: {result}");
    let map = cfg.partition_map();
    let crossing = records
        .iter()
        .filter(|r| partita_btree::service::mask(&r.op, &map).count_ones() > 1)
        .count();
    assert!(
        crossing > 10,
        "only {crossing} commands crossed the partition border"
    );

    // The final contents through the replicated path: one command for both partitions.
    let mut client =
        Client::<partita_btree::BPlusTree>::connect(cfg.clone(), ClientOptions::default())
            .await
            .unwrap();
    let last = client
        .execute(Op::Query {
            min: 0,
            max: u64::MAX,
        })
        .await
        .unwrap();
    let OpResult::Entries(final_entries) = last else {
        panic!("query returned {last:?}")
    };

    // Each partition's replicas converge on the same instance and digest, and hold only
    // keys of their range.
    let layout = cfg.partition_layout();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut st = Vec::new();
        for n in &cfg.nodes {
            st.push((
                n.id,
                node_status(cfg.addr(n.id), Duration::from_secs(1)).await,
            ));
        }
        let decided = st
            .iter()
            .filter_map(|(_, s)| s.as_ref()?.decided_up_to)
            .max()
            .unwrap_or(0);
        let caught_up = layout.replicas.iter().flatten().all(|r| {
            st.iter().any(|(id, s)| {
                id == r
                    && s.as_ref()
                        .is_some_and(|s| s.executed_up_to == Some(decided))
            })
        });
        if caught_up {
            for (p, members) in layout.replicas.iter().enumerate() {
                let digests: Vec<(String, u64)> = members
                    .iter()
                    .map(|r| {
                        let s = st
                            .iter()
                            .find(|(id, _)| id == r)
                            .unwrap()
                            .1
                            .as_ref()
                            .unwrap();
                        (format!("node {r} (partition {p})"), s.digest.unwrap())
                    })
                    .collect();
                partita_checker::check_convergence(&digests)
                    .unwrap_or_else(|e| panic!("partition {p} diverged: {e}"));
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not catch up with decided instance {decided}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for p in 0..2u32 {
        let (lo, hi) = map.range(p);
        let mut c = Client::<partita_btree::BPlusTree>::connect(
            cfg.clone(),
            ClientOptions {
                replica: Some(layout.replicas[p as usize][0]),
                ..ClientOptions::default()
            },
        )
        .await
        .unwrap();
        // A query inside one partition is answered by that partition alone.
        let OpResult::Entries(part) = c.execute(Op::Query { min: lo, max: hi }).await.unwrap()
        else {
            panic!("not entries")
        };
        assert!(part.iter().all(|(k, _)| (lo..=hi).contains(k)));
    }
    if early_replies {
        // Each partition's answerers must have replied early and confirmed: the
        // history below is then made of confirmed sub-results.
        for (p, members) in layout.replicas.iter().enumerate() {
            let mut n = (0, 0);
            for r in members {
                let s = node_status(cfg.addr(*r), Duration::from_secs(1))
                    .await
                    .expect("a status");
                for (k, v) in s.counters {
                    match k.as_str() {
                        "early_tentative_replies" => n.0 += v,
                        "early_confirmations" => n.1 += v,
                        _ => {}
                    }
                }
            }
            eprintln!("partition {p}: early replies (tentative, confirmations) {n:?}");
            assert!(
                n.0 > 50 && n.1 > 50,
                "partition {p}: early replies unused: {n:?}"
            );
        }
    }
    if threads > 0 {
        // Every replica ran commands on its threads alone (reads and updates of its
        // partition's keys) and in synchronous mode (inserts, deletes, crossing ranges).
        for r in layout.replicas.iter().flatten() {
            let s = node_status(cfg.addr(*r), Duration::from_secs(1))
                .await
                .expect("a status");
            let c = |name: &str| s.counter(name).unwrap_or(0);
            let (parallel, synchronous) = (c("psmr_parallel"), c("psmr_synchronous"));
            eprintln!("replica {r}: P-SMR {parallel} alone, {synchronous} synchronous");
            assert!(
                parallel > 20 && synchronous > 20,
                "replica {r}: P-SMR threads unused: {:?}",
                s.counters
            );
        }
    }
    for b in cfg.membership().batchers {
        let s = node_status(cfg.addr(b), Duration::from_secs(1))
            .await
            .expect("a status");
        let forwarded = s
            .counters
            .iter()
            .find(|(k, _)| k == "batcher_commands_forwarded")
            .map_or(0, |(_, v)| *v);
        eprintln!("batcher {b}: {forwarded} commands forwarded");
        assert!(forwarded > 50, "batcher {b} idle: {:?}", s.counters);
    }
    lc.stop(Duration::from_secs(5));

    let events: Vec<_> = records
        .iter()
        .map(partita_harness::history::to_event)
        .collect();
    let opts = partita_checker::CheckOptions {
        initial: partita_harness::history::preload_initial(preload),
        ..Default::default()
    };
    match partita_checker::check_with_final_state(&events, &opts, &final_entries) {
        Ok(summary) => eprintln!(
            "{protocol}, 2 partitions: {} operations ({crossing} across partitions) linearizable ({summary:?})",
            events.len()
        ),
        Err(v) => panic!("{protocol}, 2 partitions: history not linearizable: {v}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_paxos_partitioned_cluster_is_linearizable_and_converges() {
    judge(Protocol::RingPaxos, false, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_with_batchers_is_linearizable_and_converges() {
    judge(Protocol::MultiPaxos, false, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_with_early_replies_is_linearizable_and_converges() {
    judge(Protocol::RingPaxos, true, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_cluster_with_psmr_threads_is_linearizable_and_converges() {
    judge_with(Protocol::RingPaxos, false, 0, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_paxos_partitioned_cluster_is_linearizable_and_converges() {
    judge(Protocol::MultiPaxos, false, 0).await;
}
