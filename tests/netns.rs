//! A cluster as on separate machines: every node in a network namespace of its own,
//! joined by a bridge, with mutual TLS (`partita_harness::netns`), and network faults
//! made with nftables inside those namespaces.
//!
//! - a partition is real: the isolated coordinator stops deciding while the others
//!   elect a leader and go on, and it catches up once healed;
//! - `partita nemesis --netns` with every network fault (isolate the coordinator, split
//!   the cluster, cut one direction, lose a fifth of the packets) passes its verdict;
//! - the same run with a planted bug is caught by the checker (a violation, not merely
//!   a failed run);
//! - IP multicast carries Phase 2A (one datagram per value, every node receives it),
//!   and writes complete with a third of the packets lost; the nemesis passes with it;
//! - no namespace is left behind.
//!
//! Needs root (these machines run tests as root) and `ip` and `nft`
//! (`scripts/install-test-deps` installs iproute2 and nftables when missing).

use partita_btree::{Op, OpResult};
use partita_client::{Client, ClientOptions};
use partita_config::ClusterConfig;
use partita_harness::launch::LocalCluster;
use partita_harness::netns;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

/// One run on namespaces at a time (this binary's, shared with the cluster tests'
/// run on namespaces): these runs are heavy for a 2-core machine, and the process has
/// one topology, which a run's teardown removes.
use crate::NAMESPACES as SERIAL;

fn tools() {
    netns::ensure_tools(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
}

fn namespaces_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&format!("ptns{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// How far node `id` has come: the highest instance it knows decided or, an acceptor
/// that does not coordinate, has accepted.
async fn progress(c: &ClusterConfig, id: u32) -> Option<u64> {
    partita_client::node_status_of(c, id, Duration::from_millis(500))
        .await
        .map(|s| progress_of(&s))
}

fn progress_of(s: &partita_wire::NodeStatus) -> u64 {
    s.decided_up_to
        .unwrap_or(0)
        .max(s.accepted_max_instance.unwrap_or(0))
}

/// The node that says it coordinates, other than `not` (20 s at most).
async fn coordinator(c: &ClusterConfig, not: Option<u32>) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for n in c.nodes.iter().filter(|n| Some(n.id) != not) {
            if let Some(s) =
                partita_client::node_status_of(c, n.id, Duration::from_millis(500)).await
            {
                if s.coordinator {
                    return n.id;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no coordinator other than {not:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a test on a live cluster in namespaces gets: the run's topology, the cluster
/// as loaded from its file, its data directory and a connected client.
struct Live {
    topology: &'static netns::Topology,
    cfg: ClusterConfig,
    data: PathBuf,
    client: Client<partita_btree::BPlusTree>,
}

/// Start the default cluster on the run's network with `wire`, run `body` against it
/// from a thread in the clients' namespace (a runtime of its own), stop it, remove the
/// namespaces and check that none is left; then re-raise `body`'s panic, if any.
fn on_namespaces<F, Fut>(wire: netns::Wire, give_up: Duration, body: F)
where
    F: FnOnce(Live) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    tools();
    let topology = netns::create().expect("creating network namespaces (needs root)");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ClusterConfig::default_local(7100, rand::random::<u64>() >> 1);
    netns::place_with(&mut cfg, &dir.path().join("certs"), wire).unwrap();
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let cfg = ClusterConfig::load(&file).unwrap();
    let data = dir.path().to_path_buf();
    let outcome = std::thread::spawn(move || {
        topology.enter_client().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut lc = LocalCluster::start_with(&exe(), &file, &cfg, &data, &[], None).unwrap();
        // A panic in here drops `lc`, which stops the nodes.
        rt.block_on(async {
            lc.wait_ready(Duration::from_secs(30)).await.unwrap();
            let opts = ClientOptions {
                give_up,
                ..ClientOptions::default()
            };
            let client = Client::<partita_btree::BPlusTree>::connect(cfg.clone(), opts)
                .await
                .unwrap();
            body(Live {
                topology,
                cfg,
                data,
                client,
            })
            .await
        });
        lc.stop(Duration::from_secs(5));
    })
    .join();
    netns::teardown();
    assert!(
        namespaces_of(std::process::id()).is_empty(),
        "{:?}",
        namespaces_of(std::process::id())
    );
    if let Err(e) = outcome {
        std::panic::resume_unwind(e);
    }
}

async fn statuses(cfg: &ClusterConfig) -> Vec<partita_wire::NodeStatus> {
    let mut v = Vec::new();
    for n in &cfg.nodes {
        v.push(
            partita_client::node_status_of(cfg, n.id, Duration::from_secs(1))
                .await
                .expect("a status"),
        );
    }
    v
}

async fn insert(client: &mut Client<partita_btree::BPlusTree>, key: u64) {
    let r = client
        .execute(Op::Insert {
            key,
            value: key * 10,
        })
        .await
        .unwrap_or_else(|e| panic!("insert {key}: {e:#}"));
    assert_eq!(r, OpResult::Inserted(true), "insert {key}");
}

/// The coordinator cut off from every other node (both directions) stops deciding
/// and accepting,
/// still answers its clients' status probes (only peers are blocked), while the
/// others elect a new coordinator and decide writes; healed, it catches up.
#[test]
fn an_isolated_coordinator_stops_deciding_and_catches_up_once_healed() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let give_up = Duration::from_secs(30);
    on_namespaces(netns::Wire::Tls, give_up, |live| async move {
        let Live {
            topology,
            cfg,
            data,
            mut client,
        } = live;
        assert!(netns::is_placed(&cfg));
        assert_eq!(cfg.addr(2).to_string(), "10.99.0.2:7102");
        for k in 0..20 {
            insert(&mut client, k).await;
        }
        let leader = coordinator(&cfg, None).await;
        let others: Vec<u32> = cfg
            .nodes
            .iter()
            .map(|n| n.id)
            .filter(|&n| n != leader)
            .collect();
        topology.block(leader, &others, &others, 0).unwrap();
        assert!(topology.rules(leader).unwrap().contains(netns::FAULT_TABLE));
        let frozen = progress(&cfg, leader)
            .await
            .expect("the isolated node answers probes");
        // The others elect a coordinator and decide these.
        for k in 20..60 {
            insert(&mut client, k).await;
        }
        let new_leader = coordinator(&cfg, Some(leader)).await;
        let ahead = progress(&cfg, new_leader).await.unwrap();
        let stuck = progress(&cfg, leader)
            .await
            .expect("still answers its clients");
        // The 40 writes were decided elsewhere; the isolated node got at most its
        // own window of proposals (16 instances), accepted by itself alone.
        assert!(
            stuck <= frozen + 16 && ahead >= frozen + 40,
            "isolated node {leader} at {stuck} (was {frozen}), node {new_leader} at {ahead}"
        );
        topology.heal(leader).unwrap();
        assert!(!topology.rules(leader).unwrap().contains(netns::FAULT_TABLE));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status =
                partita_client::node_status_of(&cfg, leader, Duration::from_millis(500)).await;
            let now = status.as_ref().map(progress_of);
            if now >= Some(ahead) {
                break;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(data.join(format!("node-{leader}.log")))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                panic!(
                    "node {leader} did not catch up after the heal: at {now:?}, others at \
                     {ahead}; status {status:?}\nlog (last lines first):\n{}",
                    tail.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Every write is there.
        match client
            .execute(Op::Query { min: 0, max: 1000 })
            .await
            .unwrap()
        {
            OpResult::Entries(e) => assert_eq!(e.len(), 60, "{e:?}"),
            other => panic!("{other:?}"),
        }
    });
}

fn counter(s: &partita_wire::NodeStatus, name: &str) -> u64 {
    s.counters
        .iter()
        .find(|(k, _)| k == name)
        .map_or(0, |(_, v)| *v)
}

/// IP multicast on the bridge (`[multicast]`): the coordinator sends each value as one
/// datagram that every acceptor and replica receives, nothing goes over TCP instead,
/// and with a third of the datagrams lost at every node every write still completes,
/// through the coordinator's retransmissions and gap requests.
#[test]
fn phase_2a_goes_out_as_ip_multicast_and_survives_loss() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let give_up = Duration::from_secs(60);
    on_namespaces(netns::Wire::Multicast, give_up, |live| async move {
        let Live {
            topology,
            cfg,
            mut client,
            ..
        } = live;
        assert!(cfg.multicast.is_some());
        for k in 0..50 {
            insert(&mut client, k).await;
        }
        let st = statuses(&cfg).await;
        let sent: u64 = st.iter().map(|s| counter(s, "multicast_sent")).sum();
        let fallback: u64 = st
            .iter()
            .map(|s| counter(s, "multicast_fallback_tcp"))
            .sum();
        assert!(sent >= 50, "{sent} datagrams for 50 writes: {st:?}");
        assert_eq!(fallback, 0);
        // Every other node (2 acceptors, 2 replicas) received every datagram.
        for s in st.iter().filter(|s| !s.coordinator) {
            assert!(
                counter(s, "multicast_received") >= sent.saturating_sub(2),
                "node {} received {} of {sent}",
                s.node,
                counter(s, "multicast_received")
            );
            assert_eq!(counter(s, "multicast_refused"), 0);
        }
        // A third of the datagrams lost at every node (TCP untouched): lost values
        // come back through the coordinator's retransmissions and gap requests.
        let ids: Vec<u32> = cfg.nodes.iter().map(|n| n.id).collect();
        for &n in &ids {
            topology.lose_datagrams(n, 33).unwrap();
        }
        for k in 50..110 {
            insert(&mut client, k).await;
        }
        for &n in &ids {
            topology.heal(n).unwrap();
        }
        match client
            .execute(Op::Query { min: 0, max: 1000 })
            .await
            .unwrap()
        {
            OpResult::Entries(e) => {
                assert_eq!(e.len(), 110);
                assert!(e.iter().all(|&(k, v)| v == k * 10));
            }
            other => panic!("{other:?}"),
        }
        let after: u64 = statuses(&cfg)
            .await
            .iter()
            .map(|s| counter(s, "multicast_sent"))
            .sum();
        assert!(after > sent, "multicast went on under loss");
        // The replicas converge on the same state.
        let verdict = partita_harness::nemesis::converged(&cfg, Duration::from_secs(20)).await;
        assert!(verdict.is_ok(), "{verdict:?}");
    });
}

/// Run `partita nemesis --netns` with `extra` arguments; its exit code and JSON report.
/// Run `partita ARGS`, wait for it, print its output, and check that it left no
/// namespace behind. Returns its exit code and its output.
fn run_partita(args: &[&str]) -> (i32, String) {
    let child = Command::new(exe())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(
        namespaces_of(pid).is_empty(),
        "namespaces left behind: {:?}",
        namespaces_of(pid)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn nemesis(extra: &[&str]) -> (i32, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let json_arg = json.to_str().unwrap();
    let mut args = vec![
        "nemesis",
        "--netns",
        "--faults",
        "isolate-coordinator,split-cluster,cut-coordinator-out,lossy-network",
        "--duration",
        "22",
        "--interval-ms",
        "700",
        "--down-ms",
        "1500",
        "--clients",
        "4",
        "--json",
        json_arg,
    ];
    args.extend_from_slice(extra);
    let (code, text) = run_partita(&args);
    let report = std::fs::read_to_string(&json)
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or_else(|e| panic!("no report ({e}):\n{text}"));
    (code, report, text)
}

fn faults_injected(report: &serde_json::Value) -> Vec<String> {
    let mut kinds: Vec<String> = report["injected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["fault"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

#[test]
fn nemesis_with_network_faults_on_namespaces_passes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tools();
    let (code, report, text) = nemesis(&["--seed", "3"]);
    for check in ["linearizable", "converged", "survived_restart"] {
        assert!(
            report[check].get("Ok").is_some(),
            "{check}: {}\n{text}",
            report[check]
        );
    }
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        faults_injected(&report),
        [
            "cut-coordinator-out",
            "isolate-coordinator",
            "lossy-network",
            "split-cluster"
        ],
        "{text}"
    );
    // A partition of the coordinator is followed by a decision under a newer ballot.
    assert!(
        report["failover"]["count"].as_u64().unwrap_or(0) >= 2,
        "{text}"
    );
    assert!(report["operations"].as_u64().unwrap() > 1000, "{text}");
}

/// The nemesis with IP multicast carrying Phase 2A: the same network faults (a lossy
/// network drops datagrams too), the same verdict.
#[test]
fn nemesis_with_ip_multicast_and_network_faults_passes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tools();
    let (code, report, text) = nemesis(&["--seed", "5", "--multicast"]);
    for check in ["linearizable", "converged", "survived_restart"] {
        assert!(
            report[check].get("Ok").is_some(),
            "{check}: {}\n{text}",
            report[check]
        );
    }
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("Phase 2A as IP multicast"), "{text}");
}

/// The control: replicas that lose acknowledged writes, on the same namespaces and
/// faults; the checker must report a violation (not a timeout or an undecided check).
#[test]
fn nemesis_on_namespaces_catches_a_planted_bug() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tools();
    let (code, report, text) = nemesis(&["--seed", "4", "--unsafe", "lose-acked-writes"]);
    assert_eq!(code, 1, "{text}");
    let violations: Vec<&str> = ["linearizable", "survived_restart"]
        .into_iter()
        .filter(|c| report[*c]["Err"]["kind"] == "violation")
        .collect();
    assert!(!violations.is_empty(), "no violation found:\n{text}");
}

#[test]
fn network_faults_without_namespaces_are_refused() {
    let out = Command::new(exe())
        .args(["nemesis", "--faults", "split-cluster", "--duration", "5"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("SplitCluster needs --netns"), "{err}");
}

/// `partita experiment --netns`: every point's nodes in namespaces of their own with
/// mutual TLS, the clients in the run's client namespace. The real geo experiment (its
/// three orderings in the paper's emulated regions), one short round: every point
/// measured something, the report says where the nodes ran, and no namespace is left.
#[test]
fn an_experiment_runs_on_namespaces_with_mutual_tls() {
    tools();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("geo.json");
    let (code, text) = run_partita(&[
        "experiment",
        "geo",
        "--quick",
        "--netns",
        "--duration",
        "4",
        "--clients",
        "6",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{text}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        report["configuration"]
            .as_str()
            .unwrap()
            .contains("network namespace of its own, mutual TLS"),
        "{report}"
    );
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 3, "GeoPaxos+, EPaxos and Multi-Paxos");
    for p in points {
        let r = &p["result"];
        assert!(r["commands"].as_u64().unwrap() > 0, "{p}");
        assert_eq!(r["timeouts"].as_u64().unwrap(), 0, "{p}");
    }
}
