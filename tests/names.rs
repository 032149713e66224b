//! Nodes named by DNS names instead of addresses, on real processes. Every node of a
//! cluster file given as `localhost:PORT`: the nodes bind what the name resolves to,
//! dial each other and are dialed by clients by the name, and the cluster orders and
//! executes. Then (root) names from `/etc/hosts`, as a Kubernetes StatefulSet gives its
//! pods: an acceptor and a replica stop, come back at other IP addresses under the
//! same names, and rejoin without a change to the cluster file or a restart of
//! anyone else: the acceptor votes again and the replica catches up.

use partita_btree::{BPlusTree, Op, OpResult};
use partita_client::{node_status_of, Client, ClientOptions};
use partita_config::{ClusterConfig, Durability, TlsSection};
use partita_harness::launch::{pick_base_port, LocalCluster};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// The default layout with node N's address given by `host(N)`.
fn named_cluster(host: impl Fn(u32) -> String) -> ClusterConfig {
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.durability = Durability::Memory;
    for n in &mut cfg.nodes {
        n.addr = format!("{}:{}", host(n.id), base + n.id as u16);
    }
    cfg
}

async fn start(dir: &Path, cfg: &ClusterConfig) -> LocalCluster {
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    let mut lc = LocalCluster::start_with(&exe(), &file, cfg, dir, &[], None).unwrap();
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    lc
}

/// Insert keys `keys` through a client that dials the nodes by name.
async fn insert(cfg: &ClusterConfig, keys: std::ops::Range<u64>) {
    let mut c = Client::<BPlusTree>::connect(cfg.clone(), ClientOptions::default())
        .await
        .unwrap();
    for k in keys {
        let r = c.execute(Op::Insert { key: k, value: k }).await.unwrap();
        assert_eq!(r, OpResult::Inserted(true), "key {k}");
    }
}

/// Wait until `check` holds for node `id`'s status.
async fn until(
    cfg: &ClusterConfig,
    id: u32,
    what: &str,
    check: impl Fn(&partita_wire::NodeStatus) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = node_status_of(cfg, id, Duration::from_secs(1)).await;
        if s.as_ref().is_some_and(&check) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {id}: {what}; last status {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_named_nodes_orders_and_executes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = named_cluster(|_| "localhost".into());
    ClusterConfig::parse(&cfg.to_toml(), "named").unwrap();
    let mut lc = start(dir.path(), &cfg).await;
    insert(&cfg, 0..50).await;
    for r in [4, 5] {
        until(&cfg, r, "executes the 50 inserts", |s| {
            s.entries == Some(50)
        })
        .await;
    }
    let log = std::fs::read_to_string(dir.path().join("node-1.log")).unwrap();
    assert!(
        log.contains("localhost:") && log.contains("bind_addr=127.0.0.1:"),
        "node 1 says what it resolved its name to: {log}"
    );
    lc.stop(Duration::from_secs(5));
}

/// Lines added to /etc/hosts, removed again when dropped.
struct Hosts {
    marker: String,
}

impl Hosts {
    fn set(&self, entries: &[(String, String)]) {
        let text = std::fs::read_to_string("/etc/hosts").unwrap();
        let mut kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.ends_with(&self.marker))
            .collect();
        let ours: Vec<String> = entries
            .iter()
            .map(|(ip, name)| format!("{ip} {name} {}", self.marker))
            .collect();
        kept.extend(ours.iter().map(String::as_str));
        std::fs::write("/etc/hosts", kept.join("\n") + "\n").unwrap();
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.set(&[]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_at_another_address_under_its_name_rejoins() {
    if !is_root() {
        eprintln!("SKIPPED: needs root (writes names into /etc/hosts)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tag = std::process::id();
    let name = |id: u32| format!("node-{id}.p{tag}.partita.test");
    // A name is outside loopback as far as the file can tell: plain TCP on purpose.
    let mut cfg = named_cluster(name);
    // Acceptor 3 restarts from its log.
    cfg.cluster.durability = Durability::Fsync;
    cfg.tls = Some(TlsSection {
        insecure: true,
        ..Default::default()
    });
    let hosts = Hosts {
        marker: format!("# partita test {tag}"),
    };
    let ip = |id: u32, generation: u32| format!("127.0.{generation}.{}", 10 + id);
    let entries = |moved: u32| -> Vec<(String, String)> {
        (1..=5)
            .map(|id| {
                let g = if id == 3 || id == 5 { moved } else { 1 };
                (ip(id, g), name(id))
            })
            .collect()
    };
    hosts.set(&entries(1));
    let mut lc = start(dir.path(), &cfg).await;
    insert(&cfg, 0..20).await;
    until(&cfg, 5, "executes the first inserts", |s| {
        s.entries == Some(20)
    })
    .await;

    // Acceptor 3 and replica 5 stop, and come back at other addresses.
    for id in [3, 5] {
        let (_, c) = lc.children.iter_mut().find(|(n, _)| *n == id).unwrap();
        partita_harness::launch::terminate(c);
        c.wait().unwrap();
    }
    hosts.set(&entries(2));
    let accepted = |s: &partita_wire::NodeStatus| s.accepted.unwrap_or(0);
    for id in [3, 5] {
        lc.spawn(&exe(), id, &[]).unwrap();
    }
    until(&cfg, 3, "answers at its new address", |_| true).await;
    let log = std::fs::read_to_string(dir.path().join("node-3.log")).unwrap();
    assert!(log.contains(&format!("bind_addr={}:", ip(3, 2))), "{log}");
    let before = accepted(
        &node_status_of(&cfg, 3, Duration::from_secs(1))
            .await
            .unwrap(),
    );

    insert(&cfg, 20..60).await;
    // The coordinator found acceptor 3 at its new address by the name: it votes.
    until(&cfg, 3, "accepts values again", |s| {
        accepted(s) >= before + 10
    })
    .await;
    // And replica 5 learns everything, decided before and after its move.
    until(&cfg, 5, "catches up", |s| s.entries == Some(60)).await;
    lc.stop(Duration::from_secs(5));
    drop(hosts);
    let text = std::fs::read_to_string("/etc/hosts").unwrap();
    assert!(
        !text.contains(&format!("partita test {tag}")),
        "the test's names are gone"
    );
}
