//! A real full disk. Acceptors 2 and 3 keep their data directories on small tmpfs
//! mounts of their own (this needs root: without it the test says so and does nothing).
//! Under load, a filler file takes all of acceptor 3's space: it stops voting, says why
//! (log and status), and the other two go on deciding. Then acceptor 2's disk fills too:
//! no majority can vote, nothing is decided, and nothing is acknowledged. The fillers
//! are removed: both write what they held back, vote again, and the cluster goes on.
//! Replica 5's checkpoints find a full disk of their own at the same time: it goes on
//! executing, and checkpoints again once there is space. No node process exits at any
//! point. Then every node restarts on its data directory
//! and the history, with the final contents read back, must be linearizable (nothing
//! acknowledged lost) and the replicas must converge.

use partita_config::{ClusterConfig, Durability};
use partita_consensus::Protocol;
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::launch::{pick_base_port, LocalCluster};
use partita_harness::nemesis;
use partita_wire::NodeStatus;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

/// A tmpfs mounted on a directory, unmounted (lazily, so even with files open) when
/// dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .expect("running mount");
        assert!(
            out.status.success(),
            "mounting a tmpfs on {} failed (as root): {}",
            at.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(at.to_path_buf())
    }

    /// Write a filler file until the file system is full.
    fn fill(&self) -> PathBuf {
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0xAB; 64 * 1024];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

async fn status(cfg: &ClusterConfig, id: u32) -> NodeStatus {
    partita_client::node_status(cfg.addr(id), Duration::from_secs(2))
        .await
        .unwrap_or_else(|| panic!("node {id} does not answer its status probe"))
}

fn counter(s: &NodeStatus, name: &str) -> u64 {
    s.counters
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| *v)
}

/// Highest instance decided, as the coordinators report it.
async fn decided(cfg: &ClusterConfig) -> u64 {
    let mut d = 0;
    for n in &cfg.nodes {
        if let Some(s) = partita_client::node_status(cfg.addr(n.id), Duration::from_secs(2)).await {
            d = d.max(s.decided_up_to.unwrap_or(0));
        }
    }
    d
}

async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the run found wrong about voting with full disks (anything else wrong is a
/// panic: a test failure, never taken for a catch by the control).
#[derive(Debug)]
#[allow(dead_code)] // the fields are read through Debug, in the failure message
enum Violation {
    /// An acceptor's vote count grew while its status said its disk was full.
    VotedWithFullDisk { node: u32, before: u64, after: u64 },
    /// Instances were decided while two of three acceptors could not write.
    DecidedWithoutDurableMajority { from: u64, to: u64 },
}

async fn full_disks(protocol: Protocol, node_args: &[&str]) -> Result<(), Violation> {
    let node_args: Vec<String> = node_args.iter().map(|a| a.to_string()).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.cluster.durability = Durability::Fsync;
    cfg.set_protocol(protocol);
    cfg.storage.wal_segment_bytes_max = 256 * 1024;
    cfg.storage.checkpoint_instances = 100;
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    // Declared before the cluster: dropped (unmounted) after its processes stopped.
    let disk2 = Tmpfs::mount(&dir.path().join("node-2"), "4m");
    let disk3 = Tmpfs::mount(&dir.path().join("node-3"), "4m");
    // Replica 5's checkpoints go to a small disk of their own too.
    let disk5 = Tmpfs::mount(&dir.path().join("node-5"), "4m");
    let mut lc =
        LocalCluster::start_with(&exe(), &file, &cfg, dir.path(), &node_args, None).unwrap();
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let preload = 100;
    bench::preload(&cfg, preload, false).await.unwrap();
    let load = BenchConfig {
        give_up: None,
        workload: Workload::Mixed,
        clients: 4,
        duration: Duration::from_secs(16),
        think_ms: 2,
        preload,
        seed: 11,
        trim: 0.0,
        progress: false,
        key_space: Some(2 * preload),
    };
    let load_cfg = cfg.clone();
    let load = tokio::spawn(async move { bench::run(&load_cfg, &load).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // One disk full: acceptor 3 stops voting and says why; the majority goes on.
    let filler3 = disk3.fill();
    let filler5 = disk5.fill();
    wait_for(
        "acceptor 3 reports its full disk",
        Duration::from_secs(10),
        async || status(&cfg, 3).await.wal_stall.is_some(),
    )
    .await;
    let s3 = status(&cfg, 3).await;
    let why = s3.wal_stall.clone().unwrap();
    assert!(
        why.contains("disk full") && why.contains("No space left"),
        "{why}"
    );
    let votes3 = counter(&s3, "acceptor_votes");
    let d0 = decided(&cfg).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let s3 = status(&cfg, 3).await;
    assert!(s3.wal_stall.is_some());
    if counter(&s3, "acceptor_votes") != votes3 {
        return Err(Violation::VotedWithFullDisk {
            node: 3,
            before: votes3,
            after: counter(&s3, "acceptor_votes"),
        });
    }
    let d1 = decided(&cfg).await;
    assert!(
        d1 > d0,
        "two acceptors with space did not go on deciding ({d0} → {d1})"
    );

    // Two disks full: no majority can make a vote durable, so nothing is decided.
    let filler2 = disk2.fill();
    wait_for(
        "acceptor 2 reports its full disk",
        Duration::from_secs(10),
        async || status(&cfg, 2).await.wal_stall.is_some(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let d2 = decided(&cfg).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let d3 = decided(&cfg).await;
    if d3 != d2 {
        return Err(Violation::DecidedWithoutDurableMajority { from: d2, to: d3 });
    }

    // Space returns: both write what they held back and vote again.
    std::fs::remove_file(filler2).unwrap();
    std::fs::remove_file(filler3).unwrap();
    std::fs::remove_file(filler5).unwrap();
    let votes2 = counter(&status(&cfg, 2).await, "acceptor_votes");
    let votes3 = counter(&status(&cfg, 3).await, "acceptor_votes");
    wait_for(
        "both acceptors resume",
        Duration::from_secs(15),
        async || {
            let s2 = status(&cfg, 2).await;
            let s3 = status(&cfg, 3).await;
            s2.wal_stall.is_none()
                && s3.wal_stall.is_none()
                && counter(&s2, "acceptor_votes") > votes2
                && counter(&s3, "acceptor_votes") > votes3
        },
    )
    .await;
    wait_for(
        "the cluster decides again",
        Duration::from_secs(15),
        async || decided(&cfg).await > d3,
    )
    .await;
    let (result, records) = load.await.unwrap().unwrap();
    eprintln!(
        "{protocol:?}: {} operations, {:.0} ops/s over the run",
        records.len(),
        result.throughput_ops_per_s
    );
    for (id, child) in lc.children.iter_mut() {
        assert!(
            matches!(child.try_wait(), Ok(None)),
            "node {id} exited: a full disk must not stop a node"
        );
    }
    for id in [2, 3] {
        let log = std::fs::read_to_string(dir.path().join(format!("node-{id}.log"))).unwrap();
        assert!(
            log.contains("disk full") && log.contains("disk has space again"),
            "node {id}'s log does not say why it stopped voting and that it resumed"
        );
    }

    // A replica whose checkpoint found the disk full goes on and checkpoints later.
    let log5 = std::fs::read_to_string(dir.path().join("node-5.log")).unwrap();
    let refused = log5
        .find("disk full: checkpoint")
        .expect("replica 5 never tried a checkpoint on its full disk");
    assert!(
        log5[refused..].contains("checkpoint written"),
        "replica 5 wrote no checkpoint after space returned"
    );

    // Every node restarts on its data directory: nothing acknowledged is missing.
    lc.stop(Duration::from_secs(5));
    for n in cfg.nodes.clone() {
        lc.spawn(&exe(), n.id, &[]).unwrap();
    }
    lc.wait_ready(Duration::from_secs(30)).await.unwrap();
    let final_entries = nemesis::read_all(&cfg).await.unwrap();
    let converged = nemesis::converged(&cfg, Duration::from_secs(60)).await;
    lc.stop(Duration::from_secs(5));
    let verdict = partita_harness::history::judge(&records, preload, &final_entries);
    assert!(verdict.is_ok(), "{verdict:?}");
    assert!(converged.is_ok(), "{converged:?}");
    drop(lc);
    drop(disk2);
    drop(disk3);
    drop(disk5);
    Ok(())
}

/// The test needs root (tmpfs mounts); without it, it says so and checks nothing.
fn root_or_skip() -> bool {
    if !is_root() {
        eprintln!("SKIPPED: the full-disk tests mount tmpfs file systems and need root");
    }
    is_root()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disks_with_ring_paxos() {
    if root_or_skip() {
        full_disks(Protocol::RingPaxos, &[]).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disks_with_multi_paxos() {
    if root_or_skip() {
        full_disks(Protocol::MultiPaxos, &[]).await.unwrap();
    }
}

/// Control: acceptors that vote before their write is durable (a planted bug) must
/// be caught voting with a full disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_disk_check_catches_votes_that_are_not_durable() {
    if !root_or_skip() {
        return;
    }
    let found = full_disks(Protocol::MultiPaxos, &["--unsafe", "vote-before-durable"]).await;
    assert!(
        matches!(found, Err(Violation::VotedWithFullDisk { node: 3, .. })),
        "votes with a full disk went unnoticed: {found:?}"
    );
}

/// etcd's NOSPACE alarm: acceptor 3's disk fills under etcdctl puts, `etcdctl alarm
/// list` names it (and `endpoint status` carries it) while the others go on; once the
/// filler is removed the alarm clears by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_raises_etcds_nospace_alarm_until_space_returns() {
    if !root_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = Durability::Fsync;
    // No preallocation: every record extends the log, so a full disk shows at once.
    cfg.storage.wal_preallocate_bytes = 0;
    let ep = format!("127.0.0.1:{}", base + 14);
    cfg.nodes[3].etcd_addr = Some(ep.clone());
    // Declared before the cluster: unmounted after its processes stopped.
    let disk3 = Tmpfs::mount(&dir.path().join("node-3"), "4m");
    let mut lc = crate::etcd::launch(dir.path(), &cfg, std::slice::from_ref(&ep)).await;
    let alarms = || crate::etcd::ok(&ep, &["alarm", "list"]);
    assert_eq!(alarms(), "");
    let filler = disk3.fill();
    let mut n = 0;
    wait_for(
        "the NOSPACE alarm of member 3",
        Duration::from_secs(20),
        async || {
            n += 1;
            crate::etcd::ok(&ep, &["put", &format!("k{n}"), "v"]);
            // (etcdctl ends the line with a space.)
            alarms().trim_end() == "memberID:3 alarm:NOSPACE"
        },
    )
    .await;
    let st = crate::etcd::ok(&ep, &["endpoint", "status", "-w", "json"]);
    assert!(st.contains("NOSPACE"), "{st}");
    // The majority goes on.
    assert_eq!(crate::etcd::ok(&ep, &["put", "during", "v"]), "OK\n");
    std::fs::remove_file(&filler).unwrap();
    wait_for("the alarm to clear", Duration::from_secs(20), async || {
        alarms().trim().is_empty()
    })
    .await;
    assert_eq!(crate::etcd::ok(&ep, &["get", "during"]), "during\nv\n");
    for (id, c) in &mut lc.children {
        assert!(c.try_wait().unwrap().is_none(), "node {id} exited");
    }
    lc.stop(Duration::from_secs(10));
}
