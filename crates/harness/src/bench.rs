//! `partita bench`: closed-loop clients against a running cluster (paper 001 §V-A).
//!
//! Each client is a session with its own connections; it draws an operation from the
//! workload, executes it (exactly once, resubmitting on timeouts), then thinks for a
//! uniform 0..=think_ms milliseconds. The first and last 10% of the run (warm-up and
//! cool-down) are left out of throughput and latency, as the paper does. With
//! [`run_with`]`(.., Some(c))` the clients share `c` connections per node instead
//! (`partita_client::ClientGroup`: the sessions of a group share one connection to
//! each node, as etcd's benchmark shares a few gRPC connections among its clients);
//! without think time only.

use crate::cpu;
use anyhow::Context;
use hdrhistogram::Histogram;
use partita_btree::{BatchOp, Op, OpResult};
use partita_client::{Client, ClientGroup, ClientOptions};
use partita_config::{ClusterConfig, Mode};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The workloads (one type with the simulator's: real and simulated runs draw the same
/// operations), the key space and the preload's stride.
pub use partita_sim::bench::{key_space, Workload, PRELOAD_STRIDE};

#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub workload: Workload,
    pub clients: usize,
    pub duration: Duration,
    pub think_ms: u64,
    pub preload: u64,
    pub seed: u64,
    /// Fraction of the run trimmed at each end.
    pub trim: f64,
    pub progress: bool,
    /// Keys are drawn from 0..key_space (default: [`key_space`]).
    pub key_space: Option<u64>,
    /// A client gives up on a command (outcome unknown) after this long (`None`: the
    /// client's default, `ClientOptions::give_up`). A run against a cluster that is
    /// down for good (a test's crash of every node) ends that much after its last
    /// command instead.
    pub give_up: Option<Duration>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub workload: Workload,
    pub mode: String,
    pub ordering: String,
    pub durability: String,
    pub replicas: usize,
    pub acceptors: usize,
    pub batch_bytes_max: usize,
    pub window_instances_max: usize,
    pub clients: usize,
    pub think_ms: u64,
    pub preload: u64,
    pub duration_s: f64,
    pub measured_s: f64,
    pub commands: u64,
    pub throughput_cmds_per_s: f64,
    pub throughput_ops_per_s: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p90: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    /// The mean, where the run measured it (`None`: results converted from elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms_mean: Option<f64>,
    pub timeouts: u64,
    pub resubmissions: u64,
    /// Early replies: time to the first tentative reply (p50, p90) of the measured
    /// commands that got one; the latency above is until the result was confirmed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tentative_ms_p50_p90: Option<(f64, f64)>,
    /// opt-PSMR clusters: the measured commands resubmitted after a failed safety
    /// check, and the mean latency of those and of the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psmr_outcomes: Option<PsmrOutcomes>,
    /// Real runs with a per-node CPU budget (`--node-cpu`): what it was, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_cpu: Option<String>,
    /// Threads of each node's runtime (`partita node --runtime-threads`), when this run
    /// started the nodes; `None`: a running cluster, whose nodes said nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_runtime_threads: Option<u32>,
    /// Each node ran its connections on a thread of their own, beside its event loop
    /// (`partita node --io-thread`), when this run started the nodes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_io_thread: bool,
    /// The clients shared this many connections to each node
    /// ([`partita_client::ClientGroup`]); `None`: each client had its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_connections: Option<usize>,
    /// CPU time (user + system) per command completed in the measured window, summed
    /// over every node process of the cluster; `None` when the nodes do not run on
    /// this machine (their status gives no pid here).
    pub cpu_us_per_cmd: Option<f64>,
    /// The same, split into user and system time.
    pub cpu_user_us_per_cmd: Option<f64>,
    pub cpu_system_us_per_cmd: Option<f64>,
    /// Node processes whose CPU was measured.
    pub cpu_processes: usize,
    /// CPU per command of the benchmark process itself (its clients).
    pub client_cpu_us_per_cmd: f64,
    /// With `partita bench --up`: every node's write-ahead log on disk, sampled while
    /// the load ran (`--wal-sample-s`), oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub wal_bytes: Vec<WalSample>,
    /// With `partita bench --up --restart-after`: each node, stopped after the run and
    /// started again from its disk, and the milliseconds until it answered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restart_ms: Vec<(u32, f64)>,
}

/// Every node's write-ahead log at one moment of a run.
#[derive(Clone, Debug, Serialize)]
pub struct WalSample {
    /// Seconds since the load began.
    pub at_s: f64,
    /// Bytes on disk, by node id.
    pub bytes: Vec<(u32, u64)>,
}

/// opt-PSMR's commands by outcome (paper 002 Figure 3): those a replica's thread
/// refused (a failed safety check), resubmitted conservatively, and the rest.
#[derive(Clone, Debug, Serialize)]
pub struct PsmrOutcomes {
    pub commands_failed: u64,
    pub latency_ms_failed: f64,
    pub latency_ms_passed: f64,
}

/// Place every client of a run in `region` of the cluster file's `[wan]` (its
/// `clients` replaced; `None`: as the file places them). The clients then delay their
/// requests to and replies from nodes of other regions (`partita_client`).
pub fn place_clients(
    mut cluster: ClusterConfig,
    region: Option<&str>,
) -> anyhow::Result<ClusterConfig> {
    let Some(name) = region else {
        return Ok(cluster);
    };
    let Some(wan) = cluster.wan() else {
        anyhow::bail!("--region {name}: the cluster file has no [wan] section (no regions)");
    };
    let Some(r) = wan.region(name) else {
        anyhow::bail!("--region {name}: not a region of [wan] ({})", wan.names());
    };
    let section = cluster.wan.as_mut().expect("a [wan] section");
    section.clients = vec![wan.name(r).to_string()];
    Ok(cluster)
}

/// What every benchmark output of a cluster with `[wan]` says:
/// `WAN emulated in the driver: <matrix>; clients in <regions>`.
pub fn wan_line(cluster: &ClusterConfig) -> Option<String> {
    let wan = cluster.wan()?;
    let clients = match &cluster.wan.as_ref()?.clients {
        c if c.is_empty() => "no region (no delay)".to_string(),
        c => c.join(", "),
    };
    Some(format!(
        "WAN emulated in the driver: {}; clients in {clients}",
        wan.describe()
    ))
}

/// One finished operation, for the history and the statistics.
#[derive(Clone, Debug)]
pub struct Record {
    pub client: u64,
    pub op: Op,
    pub call_ns: u64,
    pub ret_ns: u64,
    /// `None`: the outcome is unknown (timed out).
    pub result: Option<OpResult>,
    /// opt-PSMR: resubmitted conservatively after a replica's thread refused its
    /// optimistic mapping (a failed safety check).
    pub psmr_resubmitted: bool,
}

/// One command of workload `w`: the generator is shared with the simulator's experiment
/// mode, so real and simulated runs draw the same operations.
fn random_op(w: Workload, rng: &mut impl Rng, keys: u64, client: u64) -> Op {
    partita_sim::bench::random_op(w, rng, keys, client)
}

/// The process ids of the cluster's nodes that run on this machine (their address is
/// on loopback and their status names a process here), this process excluded (nodes
/// run in-process by tests would count the clients too).
pub async fn cluster_pids(cluster: &ClusterConfig) -> Vec<u32> {
    let own = std::process::id();
    let mut pids = Vec::new();
    for n in &cluster.nodes {
        // Only nodes of this machine (a name that does not resolve is not).
        if !cluster.resolve(n.id).is_ok_and(|a| a.ip().is_loopback()) {
            continue;
        }
        if let Some(s) = partita_client::node_status_of(cluster, n.id, Duration::from_secs(2)).await
        {
            if s.pid != own && cpu::process_cpu(s.pid).is_some() && !pids.contains(&s.pid) {
                pids.push(s.pid);
            }
        }
    }
    pids
}

/// Insert keys 0, 2, …, 2(n-1) (value = key) through the replicated path, in batches.
pub async fn preload(cluster: &ClusterConfig, n: u64, progress: bool) -> anyhow::Result<()> {
    if n == 0 {
        return Ok(());
    }
    const PER_COMMAND: u64 = 1000;
    const LOADERS: u64 = 4;
    let bar = progress_bar(progress, n, "preload");
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for l in 0..LOADERS {
        let cluster = cluster.clone();
        let bar = bar.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let opts = ClientOptions {
                timeout: Duration::from_secs(5),
                give_up: Duration::from_secs(120),
                entry_index: Some(l),
                ..Default::default()
            };
            let mut c = Client::<partita_btree::BPlusTree>::connect(cluster, opts).await?;
            let mut chunk = l;
            while chunk * PER_COMMAND < n {
                let lo = chunk * PER_COMMAND;
                let hi = (lo + PER_COMMAND).min(n);
                let ops = (lo..hi)
                    .map(|i| BatchOp::Insert {
                        key: i * PRELOAD_STRIDE,
                        value: i * PRELOAD_STRIDE,
                    })
                    .collect();
                c.execute(Op::Batch(ops)).await.context("preload batch")?;
                let d = done.fetch_add(hi - lo, Ordering::Relaxed) + hi - lo;
                if let Some(b) = &bar {
                    b.set_position(d);
                }
                chunk += LOADERS;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(())
}

fn progress_bar(on: bool, len: u64, what: &str) -> Option<indicatif::ProgressBar> {
    if !on {
        return None;
    }
    let b = indicatif::ProgressBar::new(len);
    b.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} {msg}")
            .unwrap()
            .progress_chars("=> "),
    );
    b.set_prefix(what.to_string());
    Some(b)
}

/// Run the closed-loop clients. Returns the result and every operation (for histories).
pub async fn run(
    cluster: &ClusterConfig,
    cfg: &BenchConfig,
) -> anyhow::Result<(BenchResult, Vec<Record>)> {
    run_with(cluster, cfg, None).await
}

/// The options of a run's clients: the defaults, with the run's give-up.
fn client_options(cfg: &BenchConfig) -> ClientOptions {
    let d = ClientOptions::default();
    ClientOptions {
        give_up: cfg.give_up.unwrap_or(d.give_up),
        ..d
    }
}

/// What one client task brings back: its records, timeouts, resubmissions, and the
/// (call, return, first tentative reply) times of commands with an early reply.
type TaskOutcome = (Vec<Record>, u64, u64, Vec<(u64, u64, u64)>);

/// [`run`], with the clients sharing `connections` connections to each node
/// (`None`: a session's own, as [`run`]); refused with think time.
pub async fn run_with(
    cluster: &ClusterConfig,
    cfg: &BenchConfig,
    connections: Option<usize>,
) -> anyhow::Result<(BenchResult, Vec<Record>)> {
    assert!(cfg.clients > 0);
    if let Some(c) = connections {
        anyhow::ensure!(
            c >= 1 && c <= cfg.clients,
            "--connections must be between 1 and the number of clients ({}), not {c}",
            cfg.clients
        );
        anyhow::ensure!(
            cfg.think_ms == 0,
            "--connections needs --think-ms 0 (clients sharing a connection run without \
             think time)"
        );
    }
    let keys = cfg
        .key_space
        .unwrap_or_else(|| key_space(cfg.preload))
        .max(2);
    let pids = cluster_pids(cluster).await;
    let base = Instant::now();
    let end = base + cfg.duration;
    let window = (
        cfg.duration.mul_f64(cfg.trim),
        cfg.duration.mul_f64(1.0 - cfg.trim),
    );
    let sampler = {
        let pids = pids.clone();
        tokio::spawn(async move {
            let own = std::process::id();
            tokio::time::sleep_until((base + window.0).into()).await;
            let before = (cpu::processes_cpu(&pids), cpu::processes_cpu(&[own]));
            tokio::time::sleep_until((base + window.1).into()).await;
            let after = (cpu::processes_cpu(&pids), cpu::processes_cpu(&[own]));
            (after.0.since(&before.0), after.1.since(&before.1))
        })
    };
    let completed = Arc::new(AtomicU64::new(0));
    let mut tasks: Vec<tokio::task::JoinHandle<anyhow::Result<TaskOutcome>>> = Vec::new();
    let groups = connections.unwrap_or(0);
    for j in 0..groups {
        // Sessions [lo, hi) of the run share this group's connections.
        let lo = cfg.clients * j / groups;
        let hi = cfg.clients * (j + 1) / groups;
        let cluster = cluster.clone();
        let cfg = cfg.clone();
        let completed = completed.clone();
        tasks.push(tokio::spawn(async move {
            let mut g = ClientGroup::<partita_btree::BPlusTree>::connect(
                cluster,
                client_options(&cfg),
                hi - lo,
                lo as u64,
            )
            .await?;
            let mut rngs: Vec<_> = (lo..hi)
                .map(|i| {
                    rand::rngs::StdRng::seed_from_u64(
                        cfg.seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
                    )
                })
                .collect();
            let mut current: Vec<Option<(Op, u64)>> = vec![None; hi - lo];
            for k in 0..hi - lo {
                let op = random_op(cfg.workload, &mut rngs[k], keys, (lo + k) as u64);
                current[k] = Some((op.clone(), base.elapsed().as_nanos() as u64));
                g.submit(k, op).await;
            }
            let mut records = Vec::new();
            let mut timeouts = 0u64;
            while let Some((k, res)) = g.next_done().await {
                let ret = base.elapsed().as_nanos() as u64;
                let (op, call) = current[k].take().expect("a command was outstanding");
                let result = res.ok();
                timeouts += u64::from(result.is_none());
                completed.fetch_add(1, Ordering::Relaxed);
                records.push(Record {
                    client: (lo + k) as u64 + 1,
                    op,
                    call_ns: call,
                    ret_ns: ret,
                    result,
                    psmr_resubmitted: g.psmr_resubmitted(k),
                });
                if Instant::now() < end {
                    let op = random_op(cfg.workload, &mut rngs[k], keys, (lo + k) as u64);
                    current[k] = Some((op.clone(), base.elapsed().as_nanos() as u64));
                    g.submit(k, op).await;
                }
            }
            anyhow::Ok((records, timeouts, g.resubmissions(), Vec::new()))
        }));
    }
    for i in (0..cfg.clients).filter(|_| groups == 0) {
        let cluster = cluster.clone();
        let cfg = cfg.clone();
        let completed = completed.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(
                cfg.seed.wrapping_mul(1_000_003).wrapping_add(i as u64),
            );
            let opts = ClientOptions {
                entry_index: Some(i as u64),
                ..client_options(&cfg)
            };
            let mut client = Client::<partita_btree::BPlusTree>::connect(cluster, opts).await?;
            let mut records = Vec::new();
            let mut tentative = Vec::new();
            let mut timeouts = 0u64;
            while Instant::now() < end {
                if cfg.think_ms > 0 {
                    let ms = rng.gen_range(0..=cfg.think_ms);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                let op = random_op(cfg.workload, &mut rng, keys, i as u64);
                let call = base.elapsed().as_nanos() as u64;
                let res = client.execute(op.clone()).await;
                let ret = base.elapsed().as_nanos() as u64;
                let result = res.ok();
                timeouts += u64::from(result.is_none());
                completed.fetch_add(1, Ordering::Relaxed);
                if let (Some(t), Some(_)) = (client.last_tentative_after(), &result) {
                    tentative.push((call, ret, t.as_nanos() as u64));
                }
                records.push(Record {
                    client: i as u64 + 1,
                    op,
                    call_ns: call,
                    ret_ns: ret,
                    result,
                    psmr_resubmitted: client.last_psmr_resubmitted(),
                });
            }
            anyhow::Ok((records, timeouts, client.resubmissions(), tentative))
        }));
    }
    let bar = progress_bar(cfg.progress, cfg.duration.as_secs().max(1), "bench");
    if let Some(b) = &bar {
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(200)).await;
            b.set_position(base.elapsed().as_secs());
            b.set_message(format!("{} commands", completed.load(Ordering::Relaxed)));
        }
        b.finish_and_clear();
    }
    let mut records = Vec::new();
    let (mut timeouts, mut resubmissions) = (0, 0);
    let mut tentative = Vec::new();
    for t in tasks {
        let (r, to, rs, tt) = t.await??;
        records.extend(r);
        tentative.extend(tt);
        timeouts += to;
        resubmissions += rs;
    }
    let total = base.elapsed();
    let (node_cpu, client_cpu) = sampler.await?;
    let lo = window.0.as_nanos() as u64;
    let hi = window.1.as_nanos() as u64;
    // CPU was sampled at the window's ends: divide by the commands completed inside it.
    let completed_in_window = records
        .iter()
        .filter(|r| r.ret_ns >= lo && r.ret_ns <= hi && r.result.is_some())
        .count()
        .max(1) as f64;
    let per_cmd = |us: u64| us as f64 / completed_in_window;
    let measured_s = (hi - lo) as f64 / 1e9;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).unwrap();
    let (mut commands, mut ops) = (0u64, 0u64);
    // opt-PSMR: latency sums and counts of failed (resubmitted) and passed commands.
    let mut by_outcome = [(0u64, 0u64); 2];
    for r in &records {
        if r.call_ns >= lo && r.ret_ns <= hi && r.result.is_some() {
            commands += 1;
            ops += r.op.btree_ops() as u64;
            hist.saturating_record((r.ret_ns - r.call_ns) / 1000);
            let o = &mut by_outcome[usize::from(r.psmr_resubmitted)];
            o.0 += r.ret_ns - r.call_ns;
            o.1 += 1;
        }
    }
    let mean_ms = |(ns, n): (u64, u64)| ns as f64 / n.max(1) as f64 / 1e6;
    let psmr_outcomes = cluster.execution.optimistic().then(|| PsmrOutcomes {
        commands_failed: by_outcome[1].1,
        latency_ms_failed: mean_ms(by_outcome[1]),
        latency_ms_passed: mean_ms(by_outcome[0]),
    });
    let ms = |us: u64| us as f64 / 1000.0;
    let mut tentative: Vec<u64> = tentative
        .into_iter()
        .filter(|&(call, ret, _)| call >= lo && ret <= hi)
        .map(|(_, _, t)| t)
        .collect();
    tentative.sort_unstable();
    let tentative_ms_p50_p90 = (!tentative.is_empty()).then(|| {
        let at = |q: f64| tentative[((tentative.len() - 1) as f64 * q) as usize] as f64 / 1e6;
        (at(0.5), at(0.9))
    });
    let mode = cluster.cluster.mode;
    let result = BenchResult {
        workload: cfg.workload,
        mode: match mode {
            Mode::Smr => "smr".into(),
            Mode::Cs => "cs".into(),
        },
        ordering: match mode {
            Mode::Smr if cluster.ordering.epaxos().is_some() => {
                "epaxos (leaderless, every replica leads its own column)".into()
            }
            Mode::Smr if cluster.ordering.geo().is_some() => {
                "geopaxos+ (a Multi-Paxos serializer per replica)".into()
            }
            Mode::Smr
                if cluster.ordering.protocol() == partita_config::OrderingProtocol::RingPaxos =>
            {
                match cluster.membership().ring_decision {
                    partita_consensus::RingDecision::Acceptor => {
                        "ring-paxos (decided by the acceptor completing a majority)".into()
                    }
                    partita_consensus::RingDecision::Coordinator => {
                        "ring-paxos (decided by the coordinator at the ring's end)".into()
                    }
                }
            }
            Mode::Smr => cluster.ordering.protocol().to_string(),
            Mode::Cs => "none (client-server)".into(),
        },
        durability: match mode {
            Mode::Smr if cluster.cluster.durability == partita_config::Durability::Fsync => {
                match cluster.storage.wal_preallocate_bytes {
                    0 => "fsync (WAL not preallocated)".into(),
                    b => format!("fsync (WAL preallocated {} KiB ahead)", b / 1024),
                }
            }
            Mode::Smr => cluster.cluster.durability.to_string(),
            Mode::Cs => "none (in memory, unreplicated)".into(),
        },
        replicas: cluster.executors().len(),
        acceptors: cluster.membership().acceptors.len(),
        batch_bytes_max: cluster.batching.batch_bytes_max,
        window_instances_max: cluster.batching.window_instances_max,
        clients: cfg.clients,
        think_ms: cfg.think_ms,
        preload: cfg.preload,
        duration_s: total.as_secs_f64(),
        measured_s,
        commands,
        throughput_cmds_per_s: commands as f64 / measured_s,
        throughput_ops_per_s: ops as f64 / measured_s,
        latency_ms_p50: ms(hist.value_at_quantile(0.5)),
        latency_ms_p90: ms(hist.value_at_quantile(0.9)),
        latency_ms_p99: ms(hist.value_at_quantile(0.99)),
        latency_ms_max: ms(hist.max()),
        latency_ms_mean: Some(hist.mean() / 1000.0),
        timeouts,
        resubmissions,
        tentative_ms_p50_p90,
        psmr_outcomes,
        node_cpu: None,
        node_runtime_threads: None,
        node_io_thread: false,
        client_connections: connections,
        cpu_us_per_cmd: (!pids.is_empty()).then(|| per_cmd(node_cpu.total_us())),
        cpu_user_us_per_cmd: (!pids.is_empty()).then(|| per_cmd(node_cpu.user_us)),
        cpu_system_us_per_cmd: (!pids.is_empty()).then(|| per_cmd(node_cpu.system_us)),
        cpu_processes: pids.len(),
        client_cpu_us_per_cmd: per_cmd(client_cpu.total_us()),
        wal_bytes: Vec::new(),
        restart_ms: Vec::new(),
    };
    records.sort_by_key(|r| r.call_ns);
    Ok((result, records))
}

impl std::fmt::Display for BenchResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "configuration")?;
        writeln!(f, "  workload        {:?}", self.workload)?;
        writeln!(f, "  mode            {}", self.mode)?;
        writeln!(f, "  ordering        {}", self.ordering)?;
        writeln!(f, "  durability      {}", self.durability)?;
        if let Some(c) = &self.node_cpu {
            writeln!(f, "  node CPU        {c}")?;
        }
        if self.node_io_thread {
            writeln!(
                f,
                "  node runtime    a thread per role: the event loop, the connections (and a WAL thread)"
            )?;
        } else if let Some(n) = self.node_runtime_threads {
            let s = if n == 1 { "" } else { "s" };
            writeln!(
                f,
                "  node runtime    {n} thread{s} per node (and a WAL thread)"
            )?;
        }
        writeln!(
            f,
            "  acceptors       {}   replicas {}",
            self.acceptors, self.replicas
        )?;
        writeln!(
            f,
            "  batching        {} bytes, window {} instances",
            self.batch_bytes_max, self.window_instances_max
        )?;
        writeln!(
            f,
            "  clients         {}   think time 0..={} ms",
            self.clients, self.think_ms
        )?;
        if let Some(c) = self.client_connections {
            writeln!(
                f,
                "  connections     the clients share {c} connection(s) to each node"
            )?;
        }
        writeln!(f, "  preload         {} entries", self.preload)?;
        writeln!(
            f,
            "  duration        {:.1} s ({:.1} s measured after trimming warm-up and cool-down)",
            self.duration_s, self.measured_s
        )?;
        writeln!(f, "results")?;
        writeln!(f, "  commands        {}", self.commands)?;
        writeln!(
            f,
            "  throughput      {:.0} commands/s, {:.0} B+tree ops/s",
            self.throughput_cmds_per_s, self.throughput_ops_per_s
        )?;
        writeln!(
            f,
            "  latency (ms)    p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}",
            self.latency_ms_p50, self.latency_ms_p90, self.latency_ms_p99, self.latency_ms_max
        )?;
        if let Some((p50, p90)) = self.tentative_ms_p50_p90 {
            writeln!(
                f,
                "  tentative (ms)  p50 {p50:.3}  p90 {p90:.3}  (early replies: first tentative reply; latency above is until confirmed)"
            )?;
        }
        if let Some(o) = &self.psmr_outcomes {
            writeln!(
                f,
                "  opt-PSMR        {} commands resubmitted after a failed safety check; mean latency {:.3} ms failed, {:.3} ms passed",
                o.commands_failed, o.latency_ms_failed, o.latency_ms_passed
            )?;
        }
        match (
            self.cpu_us_per_cmd,
            self.cpu_user_us_per_cmd,
            self.cpu_system_us_per_cmd,
        ) {
            (Some(t), Some(u), Some(s)) => writeln!(
                f,
                "  CPU / command   {t:.1} us over {} node processes (user {u:.1}, system {s:.1}); clients {:.1} us",
                self.cpu_processes, self.client_cpu_us_per_cmd
            )?,
            _ => writeln!(
                f,
                "  CPU / command   nodes not on this machine; clients {:.1} us",
                self.client_cpu_us_per_cmd
            )?,
        }
        write!(
            f,
            "  timeouts        {}   resubmissions {}",
            self.timeouts, self.resubmissions
        )?;
        if !self.wal_bytes.is_empty() {
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            let largest = |s: &WalSample| s.bytes.iter().map(|&(_, b)| b).max().unwrap_or(0);
            let max = self.wal_bytes.iter().map(largest).max().unwrap_or(0);
            let last = self.wal_bytes.last().map_or(0, largest);
            write!(
                f,
                "\n  WAL on disk     largest node: {:.1} MiB at most over {} samples, {:.1} MiB at \
                 the end",
                mib(max),
                self.wal_bytes.len(),
                mib(last)
            )?;
        }
        if !self.restart_ms.is_empty() {
            let each: Vec<String> = self
                .restart_ms
                .iter()
                .map(|(n, ms)| format!("node {n} {ms:.0}"))
                .collect();
            write!(f, "\n  restart (ms)    {}", each.join(", "))?;
        }
        Ok(())
    }
}
