//! `partita experiment cost-of-replication` on real processes, at a tiny size: every
//! point is measured on its own fresh cluster, the report keeps each point's
//! configuration, and the figures draw every curve.

use partita::bench::Workload;
use partita::experiment::{self, CostOptions};
use std::path::PathBuf;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_of_replication_small_sweep() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_partita"));
    let opts = CostOptions {
        workloads: vec![Workload::Batch],
        clients: vec![4],
        replicas: vec![1, 2],
        duration: Duration::from_secs(1),
        preload: 1000,
        ..CostOptions::quick()
    };
    let r = experiment::cost_of_replication(&exe, &opts).await.unwrap();
    // CS and SMR against clients, then SMR against 1 and 2 servers.
    assert_eq!(r.points.len(), 4, "{}", experiment::table(&r));
    for p in &r.points {
        assert!(p.result.commands > 10, "{}", experiment::table(&r));
        assert_eq!(p.result.workload, Workload::Batch);
    }
    let servers: Vec<usize> = r
        .points
        .iter()
        .filter(|p| p.x_name == "servers")
        .map(|p| p.result.replicas)
        .collect();
    assert_eq!(servers, vec![1, 2], "replica counts not applied");
    let cs = r.points.iter().find(|p| p.series == "CS").unwrap();
    assert_eq!(cs.result.mode, "cs");
    let dir = tempfile::tempdir().unwrap();
    let files = experiment::write(&r, &dir.path().join("cost.json")).unwrap();
    assert_eq!(files.len(), 3);
    let fig5 = std::fs::read_to_string(&files[1]).unwrap();
    assert!(fig5.contains(">CS<") && fig5.contains(">SMR ring-paxos<"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(json["points"].as_array().unwrap().len(), 4);
    assert_eq!(json["simulated"], false);
}
