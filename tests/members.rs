//! Membership change on real processes (`partita member`): the default local cluster
//! (3 acceptors, replicas 4 and 5, Ring Paxos, fsync) with a sixth node in its file
//! marked `join = true`, running from the start but part of nothing. Under load:
//! `member add 6` (the acceptors truncated, so it catches up by state transfer), and
//! it promotes itself and serves; `member remove 5`, and node 5's process stops by
//! itself. Every acknowledged insert is then present, read through node 6; replicas 4
//! and 6 hold the same state; `member list` says who is what; impossible changes are
//! refused with the reason. The acceptors grow from three to five and back to three
//! under load, one of the removed ones dead (replaced), the other stopping by itself.

use partita_btree::{BPlusTree, Op, OpResult};
use partita_client::{node_status_of, Client, ClientOptions};
use partita_config::{ClusterConfig, NodeSection, Role};
use partita_harness::launch::{pick_base_port, LocalCluster};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

fn partita(args: &[&str]) -> (bool, String) {
    let o = Command::new(exe()).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

/// Write `cfg` to `dir/cluster.toml` and start every node of it (those marked `join =
/// true` too: they run, part of nothing); the file's path, for `--cluster`.
async fn start(dir: &std::path::Path, cfg: &ClusterConfig) -> (LocalCluster, String) {
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, cfg, dir, &[], None).unwrap();
    lc.wait_ready(Duration::from_secs(30)).await.unwrap();
    (lc, file.to_str().unwrap().to_string())
}

/// Node `id`'s process exits by itself (it was removed) within 20 s.
async fn stops_by_itself(lc: &mut LocalCluster, id: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, child) = lc.children.iter_mut().find(|(n, _)| *n == id).unwrap();
        if child.try_wait().unwrap().is_some() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {id} did not stop after its removal"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `partita member add ID` succeeds, and node `id` serves within 60 s after catching
/// up by state transfer (the acceptors truncated what it lacks).
async fn added_and_transferred(cfg: &ClusterConfig, file_arg: &str, id: u32) {
    let (ok, text) = partita(&["member", "add", &id.to_string(), "--cluster", file_arg]);
    assert!(ok, "{text}");
    wait_for(cfg, id, "serving", Duration::from_secs(60)).await;
    let s = node_status_of(cfg, id, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(
        s.counter("state_transfers_completed").unwrap_or(0) >= 1,
        "node {id} caught up by state transfer: {:?}",
        s.counters
    );
}

/// Until `n` inserts were acknowledged, at most 3 s: enough for checkpoints and
/// truncation, so that a replica added then needs a state transfer.
async fn until_acked(acked: &Mutex<Vec<u64>>, n: usize) {
    let t0 = Instant::now();
    while acked.lock().unwrap().len() < n && t0.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn replica_state(cfg: &ClusterConfig, id: u32) -> Option<String> {
    node_status_of(cfg, id, Duration::from_secs(1))
        .await
        .and_then(|s| s.replica_state)
}

async fn wait_for(cfg: &ClusterConfig, id: u32, state: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = replica_state(cfg, id).await;
        if now.as_deref() == Some(state) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {id} is {now:?}, not {state}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_joins_under_load_serves_and_another_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.storage.checkpoint_instances = 50;
    cfg.nodes.push(NodeSection::joining_replica(
        6,
        format!("127.0.0.1:{}", base + 6),
    ));
    let (mut lc, file_arg) = start(dir.path(), &cfg).await;
    assert_eq!(replica_state(&cfg, 6).await.as_deref(), Some("joining"));

    // Load: two clients inserting distinct keys, answered by replica 4; every
    // acknowledged key is remembered.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let load = start_load(&cfg, Some(4), 0, &stop, &acked);
    until_acked(&acked, 400).await;

    // Changes that cannot be: refused, with the reason.
    let (ok, text) = partita(&["member", "add", "4", "--cluster", &file_arg]);
    assert!(!ok && text.contains("initial nodes"), "{text}");
    let (ok, text) = partita(&["member", "remove", "2", "--cluster", &file_arg]);
    assert!(!ok && text.contains("is an acceptor too"), "{text}");

    let t0 = Instant::now();
    added_and_transferred(&cfg, &file_arg, 6).await;
    let joined = t0.elapsed();

    let (ok, text) = partita(&["member", "remove", "5", "--cluster", &file_arg]);
    assert!(ok, "{text}");
    stops_by_itself(&mut lc, 5).await;
    let (ok, text) = partita(&[
        "member",
        "add",
        "5",
        "--addr",
        "127.0.0.1:1",
        "--cluster",
        &file_arg,
    ]);
    assert!(
        !ok && (text.contains("initial nodes") || text.contains("removed before")),
        "{text}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_load(&stop, load, &acked).await;

    // Everything acknowledged is there, read through node 6.
    let mut via6 = cfg.clone();
    via6.nodes.iter_mut().find(|n| n.id == 6).unwrap().join = false;
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 50, "the load ran: {} inserts", acked.len());
    all_present(&via6, 6, &acked).await;

    // Replicas 4 and 6 agree; `member list` tells who is what.
    replicas_agree(&cfg, 4, 6).await;
    // `partita status` says which configuration runs, and a removed node not
    // answering is no failure.
    let (ok, text) = partita(&["status", "--cluster", &file_arg]);
    assert!(ok, "{text}");
    assert!(
        text.contains("configuration epoch 3") && text.contains("replicas 4, 6; removed 5"),
        "{text}"
    );
    let (ok, text) = partita(&["member", "list", "--json", "--cluster", &file_arg]);
    assert!(ok, "{text}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(j["epoch"], 3, "add, promote, remove: {j}");
    let roles = |id: u64| -> Vec<String> {
        j["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .unwrap()["roles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(roles(6), vec!["replica"]);
    assert_eq!(roles(5), vec!["removed"]);
    assert_eq!(roles(1), vec!["acceptor"]);
    eprintln!("node 6 served {joined:?} after `member add`");
    lc.stop(Duration::from_secs(10));
}

/// A partitioned cluster (replica 4 holds partition 0, replica 5 partition 1) gains
/// replica 6 in partition 1 under load (its file entry says so; it catches up on
/// partition 1's state by state transfer), and replica 5 leaves. The clients, whose
/// file names 5 as partition 1's replica, follow the change and go on being answered
/// for both partitions; every acknowledged insert is present at the end, read across
/// both partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_joins_a_partition_under_load_and_another_of_it_leaves() {
    replica_joins_a_partition(false).await;
}

/// The same over Multi-Ring Paxos (a ring per partition and one across them): the
/// changes are ordered on the ring across, and node 6 learns partition 1's rings
/// only. Acceptor changes are refused, naming Multi-Ring Paxos.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_multi_ring_paxos_a_replica_joins_a_partition_and_another_of_it_leaves() {
    replica_joins_a_partition(true).await;
}

async fn replica_joins_a_partition(multiring: bool) {
    let dir = tempfile::tempdir().unwrap();
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1)
        .with_partitions(2, 1, 1 << 32)
        .unwrap();
    cfg.storage.checkpoint_instances = 50;
    cfg.nodes.push(NodeSection {
        partition: Some(1),
        ..NodeSection::joining_replica(6, format!("127.0.0.1:{}", base + 6))
    });
    if multiring {
        cfg = cfg.with_multiring(2, 1).unwrap();
    }
    let (mut lc, file_arg) = start(dir.path(), &cfg).await;
    if multiring {
        let addr = format!("127.0.0.1:{}", base + 30);
        let (ok, text) = partita(&[
            "member",
            "add",
            "30",
            "--acceptor",
            "--addr",
            &addr,
            "--cluster",
            &file_arg,
        ]);
        assert!(!ok && text.contains("Multi-Ring Paxos"), "{text}");
    }

    // Worker 0 inserts keys of partition 0 (below 2^31), worker 1 keys of partition 1
    // (from 2^32 on: the last partition takes every key above the key space).
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let load = start_load(&cfg, Some(4), 0, &stop, &acked);
    until_acked(&acked, 400).await;

    let (ok, text) = partita(&[
        "member",
        "add",
        "6",
        "--partition",
        "2",
        "--cluster",
        &file_arg,
    ]);
    assert!(!ok && text.contains("partition 1"), "{text}");
    added_and_transferred(&cfg, &file_arg, 6).await;
    let (ok, text) = partita(&["member", "remove", "4", "--cluster", &file_arg]);
    assert!(!ok && text.contains("last replica"), "{text}");
    let (ok, text) = partita(&["member", "remove", "5", "--cluster", &file_arg]);
    assert!(ok, "{text}");
    stops_by_itself(&mut lc, 5).await;
    // Partition 1's inserts go on, answered by replica 6 (the clients followed).
    let high = |acked: &[u64]| acked.iter().filter(|&&k| k >= 1 << 32).count();
    let before = high(&acked.lock().unwrap());
    let t0 = Instant::now();
    while high(&acked.lock().unwrap()) < before + 20 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "partition 1's inserts stopped with replica 5"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_load(&stop, load, &acked).await;

    let acked = acked.lock().unwrap().clone();
    let high = high(&acked);
    assert!(
        high > 20 && acked.len() - high > 20,
        "both partitions took inserts: {} and {high}",
        acked.len() - high
    );
    all_present(&client_file(&cfg, &[5]), 4, &acked).await;
    let (ok, text) = partita(&["member", "list", "--json", "--cluster", &file_arg]);
    assert!(ok, "{text}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let member = |id: u64| {
        j["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(member(6)["roles"], serde_json::json!(["replica"]), "{j}");
    assert_eq!(member(6)["partition"], 1, "{j}");
    assert_eq!(member(4)["partition"], 0, "{j}");
    assert_eq!(member(5)["roles"], serde_json::json!(["removed"]), "{j}");
    // Over Multi-Ring Paxos the list shows each ring's acceptors and partitions.
    let rings = j["rings"].as_array().map_or(0, |r| r.len());
    assert_eq!(rings, if multiring { 3 } else { 0 }, "{j}");
    if multiring {
        let (ok, text) = partita(&["member", "list", "--cluster", &file_arg]);
        assert!(ok && text.contains("ring 3: acceptors"), "{text}");
    }
    lc.stop(Duration::from_secs(10));
}

/// etcd's Cluster API on a key-value cluster, with etcdctl: `member add` of node 6
/// (its `join = true` entry's peer address) as a learner, `member list` flags it,
/// `member promote` succeeds once it caught up (retried until then), its own endpoint
/// serves what was written before it joined, `member remove` of replica 5, and the
/// refusals: an acceptor, an unknown id, `member update`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_adds_promotes_and_removes_members() {
    use crate::etcd::{ctl, json, launch, ok, refused};
    let dir = tempfile::tempdir().unwrap();
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.service = "kv".into();
    cfg.cluster.durability = partita_config::Durability::Memory;
    let eps = [
        format!("127.0.0.1:{}", base + 14),
        format!("127.0.0.1:{}", base + 15),
    ];
    cfg.nodes[3].etcd_addr = Some(eps[0].clone());
    cfg.nodes[4].etcd_addr = Some(eps[1].clone());
    let peer6 = format!("127.0.0.1:{}", base + 6);
    let ep6 = format!("127.0.0.1:{}", base + 16);
    cfg.nodes.push(NodeSection {
        etcd_addr: Some(ep6.clone()),
        ..NodeSection::joining_replica(6, peer6.clone())
    });
    let mut lc = launch(dir.path(), &cfg, &eps).await;
    let ep = eps[0].as_str();
    ok(ep, &["put", "before", "joining"]);
    let members = || -> Vec<serde_json::Value> {
        json(&ok(ep, &["member", "list", "-w", "json"]))["members"]
            .as_array()
            .unwrap()
            .clone()
    };
    let find = |ms: &[serde_json::Value], id: u64| ms.iter().find(|m| m["ID"] == id).cloned();
    assert_eq!(members().len(), 2, "the two replicas that serve the API");

    let url = format!("--peer-urls=http://{peer6}");
    ok(ep, &["member", "add", "node-6", &url, "--learner"]);
    let m6 = find(&members(), 6).expect("node 6 listed");
    assert_eq!(m6["isLearner"], true, "{m6}");
    let url7 = format!("--peer-urls=http://127.0.0.1:{}", base + 7);
    let e = refused(ep, &["member", "add", "node-7", &url7]);
    assert!(e.contains("too many learner members"), "{e}");

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = ctl(ep, &["member", "promote", "6"], None);
        if o.status.success() {
            break;
        }
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("in sync with leader") && Instant::now() < deadline,
            "promote: {e}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m6 = find(&members(), 6).expect("node 6 listed");
    assert_ne!(m6["isLearner"], true, "promoted: {m6}");
    // Node 6's own endpoint serves what was written before it joined.
    let got = json(&ok(&ep6, &["get", "before", "-w", "json"]));
    assert_eq!(got["count"], 1, "{got}");

    ok(ep, &["member", "remove", "5"]);
    assert!(find(&members(), 5).is_none(), "node 5 removed");
    stops_by_itself(&mut lc, 5).await;
    let e = refused(ep, &["member", "remove", "2"]);
    assert!(e.contains("is an acceptor"), "{e}");
    let e = refused(ep, &["member", "remove", "9"]);
    assert!(e.contains("member not found"), "{e}");
    let e = refused(ep, &["member", "update", "4", &url]);
    assert!(e.contains("MemberUpdate"), "{e}");
    ok(ep, &["put", "after", "removal"]);
    lc.stop(Duration::from_secs(10));
}

/// Two clients insert distinct keys through `replica` until `stop` (keys of load
/// `phase`); every acknowledged key is remembered.
fn start_load(
    cfg: &ClusterConfig,
    replica: Option<u32>,
    phase: u64,
    stop: &Arc<AtomicBool>,
    acked: &Arc<Mutex<Vec<u64>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..2u64)
        .map(|w| {
            let (cfg, stop, acked) = (cfg.clone(), stop.clone(), acked.clone());
            tokio::spawn(async move {
                let opts = ClientOptions {
                    replica,
                    give_up: Duration::from_secs(30),
                    ..ClientOptions::default()
                };
                let mut c = Client::<BPlusTree>::connect(cfg, opts).await.unwrap();
                let mut key = phase << 40 | w << 32;
                while !stop.load(Ordering::Relaxed) {
                    key += 1;
                    match c.execute(Op::Insert { key, value: key }).await {
                        Ok(OpResult::Inserted(true)) => {}
                        other => panic!("insert {key}: {other:?}"),
                    }
                    acked.lock().unwrap().push(key);
                }
            })
        })
        .collect()
}

/// A client's copy of the cluster file once `gone` left: every other node an ordinary
/// member.
fn client_file(cfg: &ClusterConfig, gone: &[u32]) -> ClusterConfig {
    let mut c = cfg.clone();
    c.nodes.retain(|n| !gone.contains(&n.id));
    for n in &mut c.nodes {
        n.join = false;
    }
    c.cluster.coordinator = c
        .nodes
        .iter()
        .find(|n| n.roles.contains(&Role::Acceptor))
        .map(|n| n.id);
    c
}

/// Stop the load, wait for its clients; the count of keys acknowledged so far.
async fn stop_load(
    stop: &Arc<AtomicBool>,
    load: Vec<tokio::task::JoinHandle<()>>,
    acked: &Arc<Mutex<Vec<u64>>>,
) -> usize {
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    stop.store(false, Ordering::Relaxed);
    acked.lock().unwrap().len()
}

/// Every key in `acked` is present, read through `replica` with client file `cfg`.
async fn all_present(cfg: &ClusterConfig, replica: u32, acked: &[u64]) {
    let opts = ClientOptions {
        replica: Some(replica),
        give_up: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let mut c = Client::<BPlusTree>::connect(cfg.clone(), opts)
        .await
        .unwrap();
    let all = c
        .execute(Op::Query {
            min: 0,
            max: u64::MAX,
        })
        .await
        .unwrap();
    let OpResult::Entries(entries) = all else {
        panic!("a query answers entries: {all:?}")
    };
    let present: std::collections::BTreeSet<u64> = entries.iter().map(|(k, _)| *k).collect();
    let missing: Vec<_> = acked.iter().filter(|k| !present.contains(k)).collect();
    assert!(
        missing.is_empty(),
        "acknowledged inserts missing: {missing:?}"
    );
}

/// The default cluster's acceptors (1, 2, 3) grow to five (nodes 6 and 7, running
/// from the start with `join = true` entries) and back to three under load: acceptor 1
/// (the leader) is killed and replaced by removing it, acceptor 2 is removed and stops
/// by itself. Each change starts an ordering epoch; every acknowledged insert is
/// present at the end, and both replicas hold the same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptors_grow_to_five_and_a_dead_one_is_replaced_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    for id in [6, 7] {
        cfg.nodes.push(NodeSection {
            roles: vec![Role::Acceptor],
            ..NodeSection::joining_replica(id, format!("127.0.0.1:{}", base + id as u16))
        });
    }
    let (mut lc, file_arg) = start(dir.path(), &cfg).await;
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let load = start_load(&cfg, Some(4), 0, &stop, &acked);
    tokio::time::sleep(Duration::from_secs(2)).await;

    for id in ["6", "7"] {
        let (ok, text) = partita(&["member", "add", id, "--acceptor", "--cluster", &file_arg]);
        assert!(ok, "{text}");
    }
    let (ok, text) = partita(&["member", "list", "--json", "--cluster", &file_arg]);
    assert!(ok, "{text}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(j["ordering_epoch"], 2, "{j}");
    assert_eq!(j["acceptors"], serde_json::json!([1, 2, 3, 6, 7]), "{j}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let acked_five = acked.lock().unwrap().len();

    // The leader dies; three of five go on, then it is replaced.
    let (_, child) = lc.children.iter_mut().find(|(n, _)| *n == 1).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let (ok, text) = partita(&[
        "member",
        "remove",
        "1",
        "--acceptor",
        "--cluster",
        &file_arg,
    ]);
    assert!(ok, "{text}");
    let (ok, text) = partita(&[
        "member",
        "remove",
        "2",
        "--acceptor",
        "--cluster",
        &file_arg,
    ]);
    assert!(ok, "{text}");
    stops_by_itself(&mut lc, 2).await;
    let (ok, text) = partita(&[
        "member",
        "add",
        "1",
        "--acceptor",
        "--addr",
        "127.0.0.1:1",
        "--cluster",
        &file_arg,
    ]);
    assert!(!ok && text.contains("removed before"), "{text}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_load(&stop, load, &acked).await;
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > acked_five + 20,
        "the load went on after the changes: {} inserts, {acked_five} before",
        acked.len()
    );

    let (ok, text) = partita(&["member", "list", "--json", "--cluster", &file_arg]);
    assert!(ok, "{text}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(j["ordering_epoch"], 4, "{j}");
    assert_eq!(j["acceptors"], serde_json::json!([3, 6, 7]), "{j}");

    // Every acknowledged insert is there (a client does not learn new acceptors: its
    // file lists the acceptors now), and the replicas agree.
    all_present(&client_file(&cfg, &[1, 2]), 5, &acked).await;
    replicas_agree(&cfg, 4, 5).await;
    eprintln!(
        "{} inserts acknowledged across four ordering epochs",
        acked.len()
    );
    lc.stop(Duration::from_secs(10));
}

/// Every node of the default cluster (acceptors 1, 2, 3; replicas 4, 5) is replaced,
/// one at a time, under load: acceptors 6, 7, 8 are added and 1, 2, 3 removed in turn
/// (each stops by itself), then replicas 9 and 10 added (each serves after a state
/// transfer or the suffix) and 4 and 5 removed. The clients run from start to end with
/// the file they were given at the start (nodes 1 to 5): they learn each change from
/// the nodes they still know when their commands need resubmitting
/// (`Client::follow_members`), and inserts go on once none of their file's nodes runs.
/// Every acknowledged insert is present at the end, read through node 10, and replicas
/// 9 and 10 agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_of_the_default_cluster_is_replaced_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.storage.checkpoint_instances = 50;
    for id in [6u32, 7, 8, 9, 10] {
        let mut n = NodeSection::joining_replica(id, format!("127.0.0.1:{}", base + id as u16));
        if id <= 8 {
            n.roles = vec![Role::Acceptor];
        }
        cfg.nodes.push(n);
    }
    let (mut lc, f) = start(dir.path(), &cfg).await;
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));

    // The clients' file: the cluster as it started.
    let load = start_load(
        &client_file(&cfg, &[6, 7, 8, 9, 10]),
        None,
        0,
        &stop,
        &acked,
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The acceptors, one at a time.
    for (new, old) in [(6, 1), (7, 2), (8, 3)] {
        let (ok, text) = partita(&[
            "member",
            "add",
            &new.to_string(),
            "--acceptor",
            "--cluster",
            &f,
        ]);
        assert!(ok, "{text}");
        let (ok, text) = partita(&[
            "member",
            "remove",
            &old.to_string(),
            "--acceptor",
            "--cluster",
            &f,
        ]);
        assert!(ok, "{text}");
        stops_by_itself(&mut lc, old).await;
    }
    assert!(
        goes_on(&acked).await,
        "inserts went on with acceptors 6, 7, 8 alone"
    );
    // The replicas, one at a time.
    for (new, old) in [(9, 4), (10, 5)] {
        let (ok, text) = partita(&["member", "add", &new.to_string(), "--cluster", &f]);
        assert!(ok, "{text}");
        wait_for(&cfg, new, "serving", Duration::from_secs(60)).await;
        let (ok, text) = partita(&["member", "remove", &old.to_string(), "--cluster", &f]);
        assert!(ok, "{text}");
        stops_by_itself(&mut lc, old).await;
    }
    assert!(
        goes_on(&acked).await,
        "inserts went on once no node of the clients' file ran"
    );
    stop_load(&stop, load, &acked).await;

    // Nothing of the first cluster runs, and nothing acknowledged was lost.
    let (ok, text) = partita(&["member", "list", "--json", "--cluster", &f]);
    assert!(ok, "{text}");
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(j["acceptors"], serde_json::json!([6, 7, 8]), "{j}");
    let last = client_file(&cfg, &[1, 2, 3, 4, 5]);
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 100, "the load ran: {} inserts", acked.len());
    all_present(&last, 10, &acked).await;
    replicas_agree(&cfg, 9, 10).await;
    eprintln!(
        "{} inserts acknowledged while every node was replaced",
        acked.len()
    );
    lc.stop(Duration::from_secs(10));
}

/// Whether more than 20 inserts are acknowledged within 20 s from now.
async fn goes_on(acked: &Arc<Mutex<Vec<u64>>>) -> bool {
    let before = acked.lock().unwrap().len();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        if acked.lock().unwrap().len() > before + 20 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Replicas `a` and `b` reach the same instance with the same digest within 20 s.
async fn replicas_agree(cfg: &ClusterConfig, a: u32, b: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sa = node_status_of(cfg, a, Duration::from_secs(1))
            .await
            .unwrap();
        let sb = node_status_of(cfg, b, Duration::from_secs(1))
            .await
            .unwrap();
        if sa.executed_up_to == sb.executed_up_to && sa.digest == sb.digest {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{a} and {b} differ: {sa:?} {sb:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
