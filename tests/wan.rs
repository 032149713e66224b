//! The emulated WAN on real processes: the paper's three regions (`[wan] preset =
//! "paper"`: California–Virginia 70 ms, Virginia–Europe 90 ms, California–Europe
//! 150 ms round trips), one `partita node` per region (each an acceptor and a replica,
//! Virginia leads), clients in Europe. The nodes delay the frames between regions, the
//! clients their own requests and replies; nothing in the cores knows. Checked:
//! behaviour, not performance:
//!
//! - every operation of a client in Europe takes at least the Europe–Virginia round
//!   trip (90 ms): its request must reach the leader and the outcome come back;
//! - the history is linearizable with the final contents, and the replicas converge;
//! - the control: the same commands from a client in Virginia, answered by the same
//!   replica (Virginia's), are faster by about that round trip, so the bound above
//!   comes from the client's emulated delay and is not met for free;
//! - every node says in its log that the WAN is emulated, and with which matrix.

use partita_btree::{Op, OpResult};
use partita_client::{node_status, Client, ClientOptions};
use partita_config::{ClusterConfig, Durability};
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::launch::{pick_base_port, LocalCluster};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The Europe–Virginia round trip of the paper's matrix.
const EU_VA_RTT: Duration = Duration::from_millis(90);

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

fn start(dir: &Path) -> LocalCluster {
    let mut cfg = ClusterConfig::paper_wan_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.cluster.durability = Durability::Memory;
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    LocalCluster::start_with(&exe(), &file, &cfg, dir, &[], None).unwrap()
}

/// The replicas' digests once all three executed what was decided.
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
        if replicas.len() == 3 && replicas.iter().all(|(e, _)| *e == decided) {
            return replicas.into_iter().map(|(_, d)| d).collect();
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not converge: {replicas:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Median latency of `n` inserts by one client in `region`, answered by node 2
/// (Virginia's replica).
async fn median_latency(cluster: &ClusterConfig, region: &str, n: u64) -> Duration {
    let opts = ClientOptions {
        region: Some(region.into()),
        replica: Some(2),
        ..ClientOptions::default()
    };
    let mut c = Client::<partita_btree::BPlusTree>::connect(cluster.clone(), opts)
        .await
        .unwrap();
    let mut lat = Vec::new();
    for i in 0..n {
        let start = Instant::now();
        c.execute(Op::Insert {
            key: 1_000_000 + i,
            value: i,
        })
        .await
        .unwrap();
        lat.push(start.elapsed());
    }
    lat.sort();
    lat[lat.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_in_europe_pays_the_emulated_round_trip_and_stays_linearizable() {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start(dir.path());
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let cluster = bench::place_clients(lc.cluster.clone(), Some("europe")).unwrap();
    let line = bench::wan_line(&cluster).unwrap();
    assert!(
        line.starts_with("WAN emulated in the driver: California–Virginia 70 ms")
            && line.ends_with("clients in Europe"),
        "{line}"
    );

    // Concurrent clients in Europe on a few contended keys, every operation kind.
    let preload = 20;
    bench::preload(&cluster, preload, false).await.unwrap();
    let cfg = BenchConfig {
        give_up: None,
        workload: Workload::Mixed,
        clients: 4,
        duration: Duration::from_secs(3),
        think_ms: 0,
        preload,
        seed: 18,
        trim: 0.1,
        progress: false,
        key_space: Some(2 * preload),
    };
    let (result, records) = bench::run(&cluster, &cfg).await.unwrap();
    let done: Vec<_> = records.iter().filter(|r| r.result.is_some()).collect();
    assert!(done.len() >= 20, "too little work to judge: {result}");
    for r in &done {
        let took = Duration::from_nanos(r.ret_ns - r.call_ns);
        assert!(
            took >= EU_VA_RTT,
            "{:?} took {took:?}, less than the emulated Europe–Virginia round trip",
            r.op
        );
    }

    // The final contents, through the replicated path, then the verdict.
    let mut client = Client::<partita_btree::BPlusTree>::connect(
        cluster.clone(),
        ClientOptions {
            give_up: Duration::from_secs(30),
            ..ClientOptions::default()
        },
    )
    .await
    .unwrap();
    let OpResult::Entries(final_entries) = client
        .execute(Op::Query {
            min: 0,
            max: u64::MAX,
        })
        .await
        .unwrap()
    else {
        panic!("a query answers entries")
    };
    let summary = partita_harness::history::judge(&records, preload, &final_entries)
        .unwrap_or_else(|e| panic!("{} operations: {e}", records.len()));
    eprintln!(
        "{} operations from Europe, p50 {:.1} ms: {summary:?}",
        records.len(),
        result.latency_ms_p50
    );
    let digests = converged(&cluster).await;
    assert!(digests.windows(2).all(|d| d[0] == d[1]), "{digests:?}");

    // The control: the client's own delay is what makes the difference.
    let from_virginia = median_latency(&cluster, "Virginia", 7).await;
    let from_europe = median_latency(&cluster, "Europe", 7).await;
    eprintln!("median insert answered in Virginia: from Virginia {from_virginia:?}, from Europe {from_europe:?}");
    assert!(
        from_europe >= from_virginia + EU_VA_RTT * 2 / 3,
        "a client in Europe must pay the Europe–Virginia round trip on top: \
         {from_europe:?} vs {from_virginia:?}"
    );

    lc.stop(Duration::from_secs(5));
    for n in 1..=3 {
        let log = std::fs::read_to_string(dir.path().join(format!("node-{n}.log"))).unwrap();
        assert!(
            log.contains("WAN emulated in the driver: California–Virginia 70 ms"),
            "node {n}'s log does not say the WAN is emulated:\n{log}"
        );
    }
}
