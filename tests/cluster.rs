//! Real-process integration tests: a cluster of `partita node` processes on 127.0.0.1
//! (3 acceptors, 2 replicas), concurrent clients doing every operation with a recorded
//! history, then: the replicas' digests are equal, the history is linearizable, and
//! every acknowledged insert is present afterwards (the final contents are checked as a
//! last whole-range query of the history). One test per ordering protocol, one with
//! two standalone batchers carrying the clients' commands, plus an acceptor restart on
//! its data directory.
//!
//! [`the_cluster_tests_pass_on_five_namespaces_with_mutual_tls`] runs them all again
//! with every node in a network namespace of its own and mutual TLS (root).

use partita_btree::{Op, OpResult};
use partita_client::{node_status_of, Client, ClientOptions};
use partita_config::{ClusterConfig, Durability};
use partita_consensus::Protocol;
use partita_harness::bench::{self, BenchConfig, Workload};
use partita_harness::launch::{pick_base_port, spawn_node, LocalCluster};
use partita_harness::netns;
use partita_wire::NodeStatus;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_partita"))
}

fn start(dir: &Path, protocol: Protocol, durability: Durability) -> LocalCluster {
    start_with_args(dir, protocol, durability, &[])
}

fn start_with_args(
    dir: &Path,
    protocol: Protocol,
    durability: Durability,
    args: &[String],
) -> LocalCluster {
    start_tweaked(dir, protocol, durability, args, |_| {})
}

fn start_tweaked(
    dir: &Path,
    protocol: Protocol,
    durability: Durability,
    args: &[String],
    tweak: fn(&mut ClusterConfig),
) -> LocalCluster {
    let mut cfg = ClusterConfig::default_local(pick_base_port(), rand::random::<u64>() >> 1);
    cfg.set_protocol(protocol);
    cfg.cluster.durability = durability;
    tweak(&mut cfg);
    // Run by the namespaces test below: every node in a namespace of its own, mutual TLS.
    if netns::adopt_from_env().unwrap().is_some() {
        netns::place(&mut cfg, &dir.join("certs")).unwrap();
    }
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cfg.to_toml()).unwrap();
    LocalCluster::start_with(&exe(), &file, &cfg, dir, args, None).unwrap()
}

async fn statuses(c: &ClusterConfig) -> Vec<(u32, Option<NodeStatus>)> {
    let mut v = Vec::new();
    for n in &c.nodes {
        v.push((n.id, node_status_of(c, n.id, Duration::from_secs(1)).await));
    }
    v
}

/// Every node's state and counters in a few lines: printed when a run stalls, so that a
/// failure (in CI too) says which node stopped where.
async fn diagnosis(c: &ClusterConfig) -> String {
    let mut s = String::new();
    for (id, st) in statuses(c).await {
        match st {
            None => s += &format!("node {id}: no status answer within 1 s\n"),
            Some(st) => {
                s += &format!(
                    "node {id} {:?}: coordinator {} ballot {:?} promised {:?} decided {:?} executed {:?} accepted max {:?}\n  counters: {}\n",
                    st.roles,
                    st.coordinator,
                    st.ballot,
                    st.promised,
                    st.decided_up_to,
                    st.executed_up_to,
                    st.accepted_max_instance,
                    st.counters
                        .iter()
                        .filter(|(_, v)| *v > 0)
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            }
        }
    }
    s
}

/// Wait until both replicas executed everything the coordinator decided; return their digests.
async fn converged_digests(c: &ClusterConfig) -> Vec<(String, u64)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = statuses(c).await;
        let decided = st
            .iter()
            .filter_map(|(_, s)| s.as_ref()?.decided_up_to)
            .max()
            .unwrap_or(0);
        let replicas: Vec<&NodeStatus> = st
            .iter()
            .filter_map(|(_, s)| s.as_ref())
            .filter(|s| s.executed_up_to.is_some())
            .collect();
        if replicas.len() == 2 && replicas.iter().all(|r| r.executed_up_to == Some(decided)) {
            return replicas
                .iter()
                .map(|r| (format!("node {}", r.node), r.digest.unwrap()))
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not catch up with decided instance {decided}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The sum over every node of each counter in `names`.
async fn counter_sums<const N: usize>(c: &ClusterConfig, names: [&str; N]) -> [u64; N] {
    let mut n = [0; N];
    for (_, s) in statuses(c).await {
        for (k, v) in s.map(|s| s.counters).unwrap_or_default() {
            if let Some(i) = names.iter().position(|&name| name == k) {
                n[i] += v;
            }
        }
    }
    n
}

/// Run concurrent clients on a fresh cluster and judge the outcome: `Err` carries the
/// first failed check (divergence, non-linearizable history).
/// Why a run did not pass: what the checks found, or that they could not judge.
#[derive(Debug)]
enum Judged {
    /// Replicas' digests differ at the same instance.
    Diverged(String),
    /// The checker found a history no linearization explains.
    NotLinearizable(String),
    /// The checker could not judge (an inconclusive search, an invalid history).
    Undecided(String),
}

impl std::fmt::Display for Judged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Judged::Diverged(m) => write!(f, "replicas diverged: {m}"),
            Judged::NotLinearizable(m) => write!(f, "history not linearizable: {m}"),
            Judged::Undecided(m) => write!(f, "the checker could not judge: {m}"),
        }
    }
}

async fn run_and_judge(protocol: Protocol, node_args: &[String]) -> Result<(), Judged> {
    run_and_judge_tweaked(protocol, node_args, |_| {}).await
}

/// As [`run_and_judge_once`], with one more attempt on a fresh cluster when the first
/// stalled (too little work to judge). This machine's virtual disk sometimes takes 10 s
/// and more for one `fsync` (measured: 13 s), and acceptors rightly do not vote
/// meanwhile; the stall is printed with every node's state, and a second stall fails.
async fn run_and_judge_tweaked(
    protocol: Protocol,
    node_args: &[String],
    tweak: fn(&mut ClusterConfig),
) -> Result<(), Judged> {
    run_and_judge_sharing(protocol, node_args, tweak, None).await
}

/// As [`run_and_judge_tweaked`], the clients sharing `connections` connections per node
/// (`partita_client::ClientGroup`; `None`: a client's own).
async fn run_and_judge_sharing(
    protocol: Protocol,
    node_args: &[String],
    tweak: fn(&mut ClusterConfig),
    connections: Option<usize>,
) -> Result<(), Judged> {
    match run_and_judge_once(protocol, node_args, tweak, connections).await {
        Ok(verdict) => verdict,
        Err(stall) => {
            eprintln!("{protocol}: first attempt stalled, trying a fresh cluster once:\n{stall}");
            match run_and_judge_once(protocol, node_args, tweak, connections).await {
                Ok(verdict) => verdict,
                Err(again) => panic!("{protocol}: stalled twice:\n{stall}\n{again}"),
            }
        }
    }
}

/// One run: `Err` when it stalled (with every node's state), else the verdict.
async fn run_and_judge_once(
    protocol: Protocol,
    node_args: &[String],
    tweak: fn(&mut ClusterConfig),
    connections: Option<usize>,
) -> Result<Result<(), Judged>, String> {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start_tweaked(dir.path(), protocol, Durability::Fsync, node_args, tweak);
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let cluster = lc.cluster.clone();
    let preload = 100;
    bench::preload(&cluster, preload, false).await.unwrap();
    let cfg = BenchConfig {
        give_up: None,
        workload: Workload::Mixed,
        clients: if connections.is_some() { 8 } else { 6 },
        duration: Duration::from_secs(3),
        // Clients sharing connections run without think time.
        think_ms: if connections.is_some() { 0 } else { 1 },
        preload,
        seed: 7,
        trim: 0.1,
        progress: false,
        key_space: Some(2 * preload),
    };
    let (result, records) = bench::run_with(&cluster, &cfg, connections).await.unwrap();
    if connections.is_some() {
        let clients: std::collections::BTreeSet<u64> = records.iter().map(|r| r.client).collect();
        assert_eq!(clients.len(), cfg.clients, "every session ran commands");
    }
    if result.commands <= 100 {
        let d = diagnosis(&cluster).await;
        lc.stop(Duration::from_secs(5));
        return Err(format!("too little work to judge: {result}\n{d}"));
    }
    let kinds: std::collections::BTreeSet<&str> = records.iter().map(|r| r.op.name()).collect();
    for k in [
        "insert", "delete", "read", "update", "query", "next", "prev",
    ] {
        assert!(kinds.contains(k), "the run did no {k}");
    }
    // The final contents, read through the replicated path after every client stopped
    // (waiting out a disk stall if one comes now).
    let patient = ClientOptions {
        give_up: Duration::from_secs(60),
        ..ClientOptions::default()
    };
    let mut client = Client::<partita_btree::BPlusTree>::connect(cluster.clone(), patient)
        .await
        .unwrap();
    let last = match client
        .execute(Op::Query {
            min: 0,
            max: u64::MAX,
        })
        .await
    {
        Ok(r) => r,
        Err(e) => panic!(
            "the final query failed: {e:?}\n{}",
            diagnosis(&cluster).await
        ),
    };
    let OpResult::Entries(final_entries) = last else {
        panic!("query returned {last:?}")
    };

    let digests = converged_digests(&cluster).await;
    let early = counter_sums(&cluster, ["early_tentative_replies", "early_confirmations"]).await;
    let batched = counter_sums(
        &cluster,
        [
            "batcher_batches_sent",
            "batcher_commands_forwarded",
            "forward_batch_commands",
        ],
    )
    .await;
    lc.stop(Duration::from_secs(5));
    if cluster.execution.early_replies() {
        eprintln!("early replies (tentative, confirmations): {early:?}");
        assert!(
            early[0] > 100 && early[1] > 100,
            "early replies unused: {early:?}"
        );
    }
    if !cluster.membership().batchers.is_empty() {
        // The clients' commands went through the batchers, in batches, to the leader.
        eprintln!("batchers (batches, commands forwarded, commands at the leader): {batched:?}");
        let [batches, forwarded, at_leader] = batched;
        assert!(
            forwarded as usize >= records.len() && at_leader >= forwarded,
            "commands bypassed the batchers: {batched:?} for {} operations",
            records.len()
        );
        assert!(batches > 0 && batches <= forwarded, "{batched:?}");
    }
    if let Err(e) = partita_checker::check_convergence(&digests) {
        return Ok(Err(Judged::Diverged(e.to_string())));
    }

    let events: Vec<_> = records
        .iter()
        .map(partita_harness::history::to_event)
        .collect();
    let opts = partita_checker::CheckOptions {
        initial: partita_harness::history::preload_initial(preload),
        ..Default::default()
    };
    match partita_checker::check_with_final_state(&events, &opts, &final_entries) {
        Ok(summary) => {
            eprintln!(
                "{protocol}: {} operations linearizable ({summary:?})",
                events.len()
            );
            Ok(Ok(()))
        }
        Err(v @ partita_checker::CheckError::NotLinearizable(_)) => {
            Ok(Err(Judged::NotLinearizable(format!("{protocol}: {v}"))))
        }
        Err(v) => Ok(Err(Judged::Undecided(format!("{protocol}: {v}")))),
    }
}

async fn replicated_history_is_linearizable(protocol: Protocol) {
    if let Err(e) = run_and_judge(protocol, &[]).await {
        panic!("{e}");
    }
}

/// Control: the same checks must catch replicas that acknowledge writes and lose them,
/// and catch it as a linearizability violation (the replicas lose the same writes, so
/// they still converge); a stall, a diverged run or an undecided check is not a catch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_lost_writes_are_caught() {
    let args = vec!["--unsafe".to_string(), "lose-acked-writes".to_string()];
    match run_and_judge(Protocol::RingPaxos, &args).await {
        Err(Judged::NotLinearizable(v)) => eprintln!("caught as expected: {v}"),
        Err(other) => panic!("the lost writes were not caught as a violation: {other}"),
        Ok(()) => panic!("a cluster that loses every 5th acknowledged write passed the checks"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_paxos_cluster_is_linearizable_and_converges() {
    replicated_history_is_linearizable(Protocol::RingPaxos).await;
}

/// Speculative execution with early replies: clients take only confirmed results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_paxos_with_early_replies_is_linearizable_and_converges() {
    let early = |c: &mut ClusterConfig| {
        c.execution = partita_config::ExecutionSection::speculative(true);
    };
    if let Err(e) = run_and_judge_tweaked(Protocol::RingPaxos, &[], early).await {
        panic!("{e}");
    }
}

/// Two standalone batchers (no WAL, no replica): every client enters through one of
/// them, and they batch to the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_paxos_with_batchers_is_linearizable_and_converges() {
    let batchers = |c: &mut ClusterConfig| {
        *c = c.clone().with_batchers(2).expect("an smr cluster");
    };
    if let Err(e) = run_and_judge_tweaked(Protocol::RingPaxos, &[], batchers).await {
        panic!("{e}");
    }
}

/// Eight sessions over two connections per node (`partita_client::ClientGroup`): every
/// session registered on a shared connection gets its own replies, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_sharing_connections_are_linearizable_and_converge() {
    if let Err(e) = run_and_judge_sharing(Protocol::RingPaxos, &[], |_| {}, Some(2)).await {
        panic!("{e}");
    }
}

/// The replicas batch too: every client enters at the replica that answers it (one
/// connection both ways), which batches to the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ring_paxos_with_replicas_batching_is_linearizable_and_converges() {
    let replicas_batch = |c: &mut ClusterConfig| {
        *c = c.clone().with_replicas_batching().expect("an smr cluster");
    };
    if let Err(e) = run_and_judge_tweaked(Protocol::RingPaxos, &[], replicas_batch).await {
        panic!("{e}");
    }
}

/// A thread per role in every node (`partita node --io-thread`): connections on a
/// thread of their own, the event loop on the main one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_with_a_thread_per_role_are_linearizable_and_converge() {
    if let Err(e) = run_and_judge(Protocol::RingPaxos, &["--io-thread".to_string()]).await {
        panic!("{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_paxos_cluster_is_linearizable_and_converges() {
    replicated_history_is_linearizable(Protocol::MultiPaxos).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptor_restart_recovers_promise_and_accepted_values() {
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start(dir.path(), Protocol::RingPaxos, Durability::Fsync);
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let cluster = lc.cluster.clone();
    let mut client =
        Client::<partita_btree::BPlusTree>::connect(cluster.clone(), ClientOptions::default())
            .await
            .unwrap();
    for k in 0..50u64 {
        assert_eq!(
            client
                .execute(Op::Insert {
                    key: k,
                    value: k + 1
                })
                .await
                .unwrap(),
            OpResult::Inserted(true)
        );
    }
    converged_digests(&cluster).await;
    let before = node_status_of(&cluster, 2, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(before.accepted.unwrap() >= 50, "{before:?}");

    // SIGKILL acceptor 2: no chance to flush anything that was not already durable.
    let (_, child) = lc.children.iter_mut().find(|(id, _)| *id == 2).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let restarted = spawn_node(&exe(), &lc.cluster_file, 2, dir.path(), &[]).unwrap();
    lc.children.retain(|(id, _)| *id != 2);
    lc.children.push((2, restarted));
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let after = node_status_of(&cluster, 2, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        after.promised, before.promised,
        "promise lost across restart"
    );
    assert!(
        after.accepted.unwrap() >= before.accepted.unwrap(),
        "accepted values lost: {before:?} vs {after:?}"
    );
    assert_eq!(after.accepted_max_instance, before.accepted_max_instance);

    // The cluster keeps working, and the restarted acceptor votes again.
    for k in 50..60u64 {
        assert_eq!(
            client
                .execute(Op::Insert {
                    key: k,
                    value: k + 1
                })
                .await
                .unwrap(),
            OpResult::Inserted(true)
        );
    }
    converged_digests(&cluster).await;
    lc.stop(Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_one_connection_only() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start(dir.path(), Protocol::MultiPaxos, Durability::Memory);
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let cluster = lc.cluster.clone();
    // Garbage, an oversized length, a wrong version, and a bad checksum.
    let mut bad_version = partita_wire::to_frame(&partita_wire::Wire::StatusRequest);
    bad_version[4] = 99;
    let mut bad_crc = partita_wire::to_frame(&partita_wire::Wire::StatusRequest);
    let n = bad_crc.len();
    bad_crc[n - 1] ^= 0xff;
    let inputs: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        u32::MAX.to_le_bytes().to_vec(),
        bad_version,
        bad_crc,
        vec![0; 9],
    ];
    for bytes in inputs {
        // Inside TLS when the cluster speaks it: the frames reach the node's decoder.
        let (_rd, mut wr) = partita_client::connect_raw(&cluster, 1).await.unwrap();
        wr.write_all(&bytes).await.unwrap();
        let _ = wr.shutdown().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut client =
        Client::<partita_btree::BPlusTree>::connect(cluster.clone(), ClientOptions::default())
            .await
            .unwrap();
    assert_eq!(
        client
            .execute(Op::Insert { key: 1, value: 2 })
            .await
            .unwrap(),
        OpResult::Inserted(true)
    );
    assert_eq!(
        client.execute(Op::Read { key: 1 }).await.unwrap(),
        OpResult::Value(Some(2))
    );
    for (id, s) in statuses(&cluster).await {
        assert!(s.is_some(), "node {id} died");
    }
    lc.stop(Duration::from_secs(5));
}

/// Sessions sharing a connection: a node takes requests only from clients registered
/// on it with a hello; one from any other client id closes that connection alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_client_connection_takes_requests_only_from_its_sessions() {
    use partita_wire::Wire;
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let mut lc = start(dir.path(), Protocol::MultiPaxos, Durability::Memory);
    lc.wait_ready(Duration::from_secs(20)).await.unwrap();
    let cluster = lc.cluster.clone();
    let (rd, mut wr) = partita_client::connect_raw(&cluster, 1).await.unwrap();
    let mut reader = partita_net::FrameReader::new(rd);
    for client in [11, 12] {
        wr.write_all(&partita_wire::to_frame(&Wire::ClientHello { client }))
            .await
            .unwrap();
    }
    for _ in 0..2 {
        match reader.next().await.unwrap() {
            Wire::ClientWelcome { node: 1 } => {}
            other => panic!("{other:?}"),
        }
    }
    // A request of client 13, who never said hello here.
    let cmd = partita_btree::service::command(13, 1, 4, &Op::Read { key: 1 });
    wr.write_all(&partita_wire::to_frame(&Wire::Request(cmd)))
        .await
        .unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(5), reader.next()).await;
    assert!(
        matches!(closed, Ok(Err(partita_net::ReadError::Closed))),
        "{closed:?}"
    );
    // The node goes on serving.
    let mut client =
        Client::<partita_btree::BPlusTree>::connect(cluster.clone(), ClientOptions::default())
            .await
            .unwrap();
    assert_eq!(
        client.execute(Op::Read { key: 1 }).await.unwrap(),
        OpResult::Value(None)
    );
    lc.stop(Duration::from_secs(5));
}

/// The performance options refuse what cannot be before anything starts: a runtime of
/// no threads or too many, node threads without a cluster to start, replicas that
/// batch, partitions or batchers on a client-server cluster (no replicas), replicas
/// that batch on Multi-Ring Paxos (no batchers).
#[test]
fn bad_performance_options_are_refused_before_anything_starts() {
    for (args, says) in [
        (
            &["bench", "--up", "--node-threads", "0"][..],
            "not in 1..=64",
        ),
        (
            &["bench", "--up", "--node-threads", "65"][..],
            "not in 1..=64",
        ),
        (&["bench", "--node-threads", "2"][..], "--up"),
        (
            &["bench", "--up", "--mode", "cs", "--replicas-batch"][..],
            "--replicas-batch: replicas that batch need mode = \"smr\"",
        ),
        (
            &["bench", "--up", "--mode", "cs", "--partitions", "2"][..],
            "partitions need mode = \"smr\"",
        ),
        (
            &["bench", "--up", "--mode", "cs", "--batchers", "1"][..],
            "batchers need mode = \"smr\"",
        ),
        (
            &["bench", "--up", "--replicas-batch", "--rings", "2"][..],
            "does not combine with batchers",
        ),
        (
            &["bench", "--up", "--clients", "8", "--connections", "9"][..],
            "--connections must be between 1 and --clients (8), not 9",
        ),
        (
            &["bench", "--up", "--clients", "8", "--connections", "2"][..],
            "--connections needs --think-ms 0",
        ),
        (
            &[
                "bench",
                "--up",
                "--ring-decision",
                "acceptor",
                "--protocol",
                "multi-paxos",
            ][..],
            "ring_decision",
        ),
        (
            &["bench", "--up", "--wal-preallocate", "99999999999"][..],
            "wal_preallocate_bytes",
        ),
        (
            &["bench", "--up", "--node-threads", "2", "--node-io-thread"][..],
            "cannot be used with",
        ),
        (&["bench", "--node-io-thread"][..], "--up"),
        (&["up", "--node-threads", "0"][..], "not in 1..=64"),
        (
            &["up", "--threads", "2", "--rings", "3"][..],
            "2 P-SMR worker threads take one ring each",
        ),
        (
            &[
                "up",
                "--threads",
                "2",
                "--partitions",
                "2",
                "--execution",
                "opt-psmr",
            ][..],
            "opt-PSMR inside partitions is not built",
        ),
        (
            &["up", "--execution", "speculative", "--threads", "2"][..],
            "--threads sets P-SMR's worker threads",
        ),
        (&["up", "--early-replies"][..], "--execution speculative"),
        (&["up", "--execution", "fast"][..], "fast"),
        (&["up", "--execution", "dssmr"][..], "objects that move"),
        (
            &[
                "up",
                "--partitions",
                "2",
                "--key-space",
                "18446744073709551615",
            ][..],
            "partitioning.key_space",
        ),
        (
            &[
                "node",
                "--cluster",
                "x.toml",
                "--id",
                "1",
                "--runtime-threads",
                "0",
            ][..],
            "not in 1..=64",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new(exe())
            .args(args)
            .current_dir(dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // `bench --up` makes its cluster's directory under this name.
        let bench_dir = std::env::temp_dir().join(format!("partita-bench-{}", child.id()));
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !dir.path().join("partita-data").exists(),
            "{args:?}: a data directory was made"
        );
        assert!(
            !bench_dir.exists(),
            "{args:?}: left {}",
            bench_dir.display()
        );
    }
}

/// Every test above, again, with the default cluster as on five machines: each node in
/// a network namespace of its own, wired into one bridge, speaking mutual TLS
/// (certificates issued for the nodes' addresses, the clients presenting theirs). This
/// binary runs again inside the run's client namespace, one test at a time; its nodes
/// go into their namespaces (`netns::RUN_ENV`). Afterwards nothing runs in the
/// namespaces and none is left. Needs root (installs iproute2 and nftables if missing).
#[test]
fn the_cluster_tests_pass_on_five_namespaces_with_mutual_tls() {
    use std::process::{Command, Stdio};
    const ME: &str = "the_cluster_tests_pass_on_five_namespaces_with_mutual_tls";
    // This module's tests only (the binary holds every integration test of the
    // package): their names start with this module's path past the crate's name.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let prefix = format!("{module}::");
    if std::env::var_os(netns::RUN_ENV).is_some() {
        return; // the run on the namespaces itself
    }
    netns::ensure_tools(std::path::Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap();
    let _namespaces = crate::NAMESPACES.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::env::current_exe().unwrap();
    let list = Command::new(&me)
        .args(["--list", "--format", "terse"])
        .output()
        .unwrap();
    let tests: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|t| t.starts_with(&prefix) && !t.ends_with(ME))
        .map(str::to_string)
        .collect();
    assert!(tests.len() >= 10, "{tests:?}");

    let topology = netns::create().expect("creating network namespaces (needs root)");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("output");
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(&me);
    cmd.args(["--test-threads", "1", "--nocapture", "--exact"])
        .args(&tests)
        .env(netns::RUN_ENV, topology.name())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    let mut child =
        netns::spawn_in(&mut cmd, &netns::Topology::ns_path(&topology.client_ns())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20 * 60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // Every node was stopped by its test: nothing may still run in the namespaces.
    let left = topology.pids();
    for pid in &left {
        // SAFETY: a process in this run's namespaces, started by this run.
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    netns::teardown();
    let text = std::fs::read_to_string(&log).unwrap();
    let Some(status) = status else {
        panic!("the run on the namespaces took more than 20 minutes:\n{text}");
    };
    assert!(
        status.success(),
        "the run on the namespaces failed ({status}):\n{text}"
    );
    // Output is not captured (each run's verdict is printed), so a test's "ok" may
    // follow its output; the summary counts them.
    for t in &tests {
        assert!(
            text.contains(&format!("test {t} ... ")),
            "{t} did not run on the namespaces:\n{text}"
        );
    }
    assert!(
        text.contains(&format!(
            "test result: ok. {} passed; 0 failed; 0 ignored",
            tests.len()
        )),
        "not every test passed on the namespaces:\n{text}"
    );
    assert!(
        left.is_empty(),
        "processes left in the namespaces: {left:?}"
    );
    let prefix = format!("{}-", topology.name());
    let namespaces: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    assert!(namespaces.is_empty(), "namespaces left: {namespaces:?}");
    eprintln!(
        "{text}\n{} cluster tests passed on five namespaces with mutual TLS",
        tests.len()
    );
}
