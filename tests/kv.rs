//! The key-value service on real processes: a cluster of `partita node` processes
//! running `service = "kv"`, concurrent clients doing puts, gets, ranges, deletes and
//! transactions on a few contended keys with a recorded history (DESIGN.md §2's
//! key-value format); the history must be linearizable under the key-value model with
//! revisions, and the replicas must converge. The control: the same run on a cluster
//! started with `--unsafe lose-acked-writes` must be reported as a violation by the
//! checker (not merely fail). A third run executes with P-SMR's worker threads (reads
//! on the threads, writes with every thread stopped: see `partita_kv::service`).

use partita_client::node_status;
use partita_config::{ClusterConfig, Durability};
use partita_harness::kvload::{self, KvLoad};
use partita_harness::launch::{pick_base_port, LocalCluster};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

fn start(dir: &Path, args: &[String]) -> LocalCluster {
    start_with(dir, args, 0)
}

fn start_with(dir: &Path, args: &[String], threads: usize) -> LocalCluster {
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = Durability::Memory;
    if threads > 0 {
        cfg = cfg.with_psmr(threads, false, u32::MAX.into()).unwrap();
    }
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    LocalCluster::start_with(&exe(), &file, &cfg, dir, args, None).unwrap()
}

/// Run `clients` concurrent clients of the key-value mix for `secs` seconds; write the
/// history to `path`.
async fn load(cluster: &ClusterConfig, clients: u64, secs: f64, path: &Path) -> usize {
    let mut load = KvLoad::new(clients, Duration::from_secs_f64(secs), 0);
    load.give_up = Duration::from_secs(5);
    let r = kvload::run(cluster, &load).await.unwrap();
    kvload::write_history(path, &r).unwrap();
    r.operations
}

/// The replicas' digests once both executed what the leader decided.
async fn converged(c: &ClusterConfig) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut decided = 0;
        let mut replicas = Vec::new();
        for n in &c.nodes {
            if let Some(s) = node_status(c.addr(n.id), Duration::from_secs(1)).await {
                decided = decided.max(s.decided_up_to.unwrap_or(0));
                if let (Some(e), Some(d)) = (s.executed_up_to, s.digest) {
                    replicas.push((e, d));
                }
            }
        }
        if replicas.len() == 2 && replicas.iter().all(|(e, _)| *e == decided) {
            return replicas.into_iter().map(|(_, d)| d).collect();
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not converge: {replicas:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_histories_on_a_real_cluster_are_linearizable() {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start(dir.path(), &[]);
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let history = dir.path().join("kv.jsonl");
    let ops = load(&lc.cluster, 6, 3.0, &history).await;
    assert!(ops > 200, "only {ops} operations in 3 s");
    let digests = converged(&lc.cluster).await;
    assert_eq!(digests[0], digests[1], "replicas diverge");
    let report = partita_checker::check_history_file(&history, &Default::default()).unwrap();
    assert!(
        matches!(report, partita_checker::ServiceReport::Kv(_)),
        "the history names its service"
    );
    assert!(report.is_linearizable(), "{report}");
    lc.stop(Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_histories_with_psmr_threads_are_linearizable() {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start_with(dir.path(), &[], 2);
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let history = dir.path().join("kv.jsonl");
    let ops = load(&lc.cluster, 6, 3.0, &history).await;
    assert!(ops > 200, "only {ops} operations in 3 s");
    let digests = converged(&lc.cluster).await;
    assert_eq!(digests[0], digests[1], "replicas diverge");
    for r in lc.cluster.with_role(partita_config::Role::Replica) {
        let s = node_status(lc.cluster.addr(r), Duration::from_secs(1))
            .await
            .expect("a status");
        let c = |name: &str| s.counter(name).unwrap_or(0);
        let (alone, synchronous) = (c("psmr_parallel"), c("psmr_synchronous"));
        eprintln!("replica {r}: P-SMR {alone} reads alone, {synchronous} synchronous");
        assert!(
            alone > 20 && synchronous > 20,
            "replica {r}: {:?}",
            s.counters
        );
    }
    let report = partita_checker::check_history_file(&history, &Default::default()).unwrap();
    assert!(report.is_linearizable(), "{report}");
    lc.stop(Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kv_checker_catches_lost_acknowledged_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start(
        dir.path(),
        &["--unsafe".to_string(), "lose-acked-writes".to_string()],
    );
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let history = dir.path().join("kv.jsonl");
    load(&lc.cluster, 6, 3.0, &history).await;
    lc.stop(Duration::from_secs(10));
    let report = partita_checker::check_history_file(&history, &Default::default()).unwrap();
    let partita_checker::ServiceReport::Kv(r) = &report else {
        panic!("a key-value history: {report}")
    };
    assert!(
        matches!(r.verdict, partita_checker::KvVerdict::NotLinearizable(_)),
        "every 5th acknowledged mutation is undone, and the checker must say so: {report}"
    );
}
