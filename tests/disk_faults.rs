//! Crashes at every persistence step: each node runs with `--failpoint NAME=N`, so
//! the process aborts the Nth time it reaches that point of its real file code (WAL
//! append, fsync, segment roll and rename, truncation, checkpoint write, rename and
//! removal; an acceptor's promise is a WAL record), under load with a history. Then
//! every node restarts without the failpoint on its data directory, and the verdict is
//! the nemesis's: the history (with the final contents read back) is linearizable, so
//! nothing acknowledged was lost, and the replicas converge. Each test also checks that
//! its point really fired (the node's log says so).

use partita_config::{ClusterConfig, Durability};
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::launch::{pick_base_port, LocalCluster};
use partita_harness::nemesis;
use std::path::PathBuf;
use std::time::Duration;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

async fn crash_at(point: &str, nth: u64) {
    let (verdict, converged) = run_crash(point, nth, &[]).await;
    assert!(verdict.is_ok(), "{point}: {verdict:?}");
    assert!(converged.is_ok(), "{point}: {converged:?}");
}

/// One run: load, the crash at `point`, every node restarted; the checker's verdict and
/// the convergence check.
async fn run_crash(
    point: &str,
    nth: u64,
    extra_args: &[&str],
) -> (
    Result<partita_checker::CheckSummary, partita_checker::CheckError>,
    Result<String, nemesis::Failed>,
) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.cluster.durability = Durability::Fsync;
    // Small segments and frequent checkpoints: rolls, truncations and checkpoint
    // writes happen within seconds.
    cfg.storage.wal_segment_bytes_max = 4096;
    cfg.storage.checkpoint_instances = 40;
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut args = vec!["--failpoint".to_string(), format!("{point}={nth}")];
    args.extend(extra_args.iter().map(|a| a.to_string()));
    let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, dir.path(), &args, None).unwrap();
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let preload = 100;
    bench::preload(&cfg, preload, false).await.unwrap();
    let load = BenchConfig {
        // Every node runs with the failpoint and may crash at it: commands sent to a
        // cluster that is down until the restart below can only end unknown, so the
        // clients give up on them soon.
        give_up: Some(Duration::from_secs(2)),
        workload: Workload::Mixed,
        clients: 4,
        duration: Duration::from_secs(4),
        think_ms: 1,
        preload,
        seed: 5,
        trim: 0.0,
        progress: false,
        key_space: Some(2 * preload),
    };
    let (_, records) = bench::run(&cfg, &load).await.unwrap();
    let fired: Vec<u32> = cfg
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|id| {
            std::fs::read_to_string(dir.path().join(format!("node-{id}.log")))
                .is_ok_and(|l| l.contains(&format!("failpoint {point}:")))
        })
        .collect();
    assert!(!fired.is_empty(), "failpoint {point}={nth} never fired");
    if point == "wal-fsync-error" {
        for (id, child) in lc.children.iter_mut().filter(|(id, _)| fired.contains(id)) {
            assert!(
                matches!(child.try_wait(), Ok(Some(_))),
                "node {id} kept running after its fsync failed"
            );
        }
        for id in &fired {
            let log = std::fs::read_to_string(dir.path().join(format!("node-{id}.log"))).unwrap();
            assert!(
                log.contains("fsync") && log.contains(".log"),
                "node {id} stopped without naming the failed fsync and its segment:\n{log}"
            );
        }
    }
    // Every node back, without the failpoint, on its data directory.
    lc.stop(Duration::from_secs(5));
    let restart_args: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
    for n in cfg.nodes.clone() {
        lc.spawn(&exe(), n.id, &restart_args).unwrap();
    }
    lc.wait_ready(Duration::from_secs(30)).await.unwrap();
    let final_entries = nemesis::read_all(&cfg).await.unwrap();
    let converged = nemesis::converged(&cfg, Duration::from_secs(60)).await;
    lc.stop(Duration::from_secs(5));
    let verdict = partita_harness::history::judge(&records, preload, &final_entries);
    eprintln!(
        "{point}={nth}: fired at nodes {fired:?}; {} operations; {verdict:?}; {converged:?}",
        records.len()
    );
    (verdict, converged)
}

/// An fsync that fails is fatal: the acceptor stops and says why (naming the segment),
/// and once restarted nothing acknowledged is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_the_node_and_loses_nothing() {
    let (verdict, converged) = run_crash("wal-fsync-error", 200, &[]).await;
    assert!(verdict.is_ok(), "{verdict:?}");
    assert!(converged.is_ok(), "{converged:?}");
}

/// Control: the same run with replicas that lose acknowledged writes must be judged not
/// linearizable (not merely fail): the check after the crash can fail, and for this
/// reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_after_a_crash_catches_lost_writes() {
    let (verdict, _) = run_crash("wal-fsync", 200, &["--unsafe", "lose-acked-writes"]).await;
    assert!(
        matches!(
            verdict,
            Err(partita_checker::CheckError::NotLinearizable(_))
        ),
        "lost writes after a crash went unnoticed: {verdict:?}"
    );
}

macro_rules! crash_tests {
    ($($name:ident: $point:literal at $nth:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            crash_at($point, $nth).await;
        }
    )*};
}

crash_tests! {
    crash_after_a_preallocation: "wal-preallocate" at 2;
    crash_after_a_wal_append: "wal-append" at 200;
    crash_before_a_wal_fsync: "wal-fsync" at 200;
    crash_before_a_segment_roll: "wal-roll" at 2;
    crash_before_a_segment_rename: "wal-segment-rename" at 2;
    crash_before_a_segment_is_deleted: "wal-truncate" at 1;
    crash_after_a_checkpoint_write: "checkpoint-write" at 2;
    crash_before_a_checkpoint_rename: "checkpoint-rename" at 2;
    crash_before_an_old_checkpoint_is_removed: "checkpoint-remove" at 1;
}
