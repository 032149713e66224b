//! `partita experiment NAME`: the papers' experiments, as sweeps of `partita bench`
//! runs, each point on a fresh local cluster of real processes. Every point keeps the
//! full bench result (the configuration beside the numbers); the report is written as
//! JSON and drawn as SVG figures laid out like the paper's.
//!
//! Experiments (one module each):
//! - `cost-of-replication` ([`cost`]; paper 001 §V-B, Figures 5 and 6): SMR against the
//!   client-server baseline under the three workloads (queries of 1000 keys, single
//!   updates, batches of seven updates): throughput and response time against the
//!   number of clients, then maximum throughput and response time against the number
//!   of servers (1 to 8 replicas).
//! - `speculation` ([`speculation`]; paper 001 §V-C, Figures 7 and 8): Ring Paxos SMR
//!   with speculative execution against the same cluster without it (classic SMR),
//!   under queries and batched updates, against the number of clients, per replica
//!   count: each pair of points measured back to back in one run, and the throughput
//!   and response-time improvement of the speculative point over the classic one.
//!
//! With `--sim` the same sweeps run in the deterministic simulator instead
//! ([`cost_of_replication_sim`], [`speculation_sim`], `partita_sim::bench`): every
//! node a real `NodeCore` on its own simulated CPU charged from a cost table
//! (`partita calibrate`), a simulated gigabit LAN and WAL disk, at the paper's sizes
//! (12 million entries, up to thousands of clients, 1 to 8 replicas) that this machine
//! cannot host for real. Their reports say `simulated: true` and name the cost table
//! in `machine`.

pub mod cost;
pub mod dssmr;
pub mod geo;
pub mod geo_real;
pub mod optimizer;
pub mod psmr;
pub mod speculation;

pub use cost::*;
pub use speculation::*;

use crate::framework::{
    self, run_sim_sweep, run_sweep, Driver, Measured, PointSpec, RealDriver, SimDriver,
};
use partita_config::{ClusterConfig, Durability, OrderingSection, RingPaxosSettings, Role};
use partita_consensus::{Protocol, RingDecision};
use partita_harness::bench::{self, BenchConfig, BenchResult, Workload};
use partita_harness::launch::{pick_base_port, LocalCluster};
use partita_plot::{Panel, Series};
use partita_sim::bench::{self as simbench, BenchReport, BenchSpec, NodeLoad, ReplicaImage};
use partita_sim::CostTable;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One measured point of a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// The curve it belongs to ("CS", "SMR ring-paxos", ...).
    pub series: String,
    pub workload: Workload,
    /// What the sweep varies (clients or servers).
    pub x_name: String,
    pub x: f64,
    pub result: BenchResult,
    /// Simulated points: where the time went.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimDetail>,
    /// How replicas executed (`speculation`): "classic" (after the decision) or
    /// "speculative" (on the Ring Paxos proposal, `[execution] model = "speculative"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<String>,
    /// Mean response time in ms (`speculation`), and how it was obtained: "exact"
    /// (real points: every measured command) or "little" (simulated points, whose
    /// report has percentiles only: Little's law for a closed loop,
    /// clients / throughput - mean think time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms_mean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_mean_from: Option<String>,
    /// Real speculative points: the replicas' counters after the run (summed), so the
    /// report shows that speculation really happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculation_counters: Option<SpeculationCounters>,
    /// Real P-SMR points: what the first replica's worker threads did (from its
    /// counters; latencies by outcome and CPU are not measured on real runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psmr: Option<partita_sim::bench::PsmrLoad>,
}

impl Point {
    /// A point with only the bench numbers.
    pub fn new(
        series: String,
        workload: Workload,
        x_name: &str,
        x: f64,
        result: BenchResult,
    ) -> Point {
        Point {
            series,
            workload,
            x_name: x_name.to_string(),
            x,
            result,
            sim: None,
            execution: None,
            latency_ms_mean: None,
            latency_mean_from: None,
            speculation_counters: None,
            psmr: None,
        }
    }
}

/// What the simulator saw of a point besides the bench numbers.
#[derive(Clone, Debug, Serialize)]
pub struct SimDetail {
    /// Each node's CPU and network-card utilization over the measured window.
    pub nodes: Vec<NodeLoad>,
    /// Instances decided in the window (smr) and commands per instance.
    pub instances: u64,
    pub commands_per_instance: f64,
    /// Simulated events, and the wall time the point took (preload included).
    pub events: u64,
    pub wall_s: f64,
    /// Hash of the event trace: the same inputs replay the same run.
    pub trace_hash: u64,
    /// P-SMR points: the worker threads' work in the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psmr: Option<partita_sim::bench::PsmrLoad>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ExperimentReport {
    pub name: String,
    /// Whether the numbers come from the simulator (else: real processes here).
    pub simulated: bool,
    pub machine: String,
    pub points: Vec<Point>,
    /// `speculation`: each speculative point against its classic twin.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub comparisons: Vec<Comparison>,
}

pub fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, every process on this one machine (real processes, loopback TCP)")
}

/// [`machine`], and the per-node CPU budget's label when there is one.
pub fn machine_with(node_cpu: Option<&str>) -> String {
    match node_cpu {
        Some(c) => format!("{}; {c}", machine()),
        None => machine(),
    }
}

/// The label of a real sweep's per-node CPU budget, checked before the first point
/// (cgroups missing fail now, not after minutes).
pub fn node_cpu_label(node_cpu: Option<f64>) -> anyhow::Result<Option<String>> {
    node_cpu
        .map(partita_harness::node_cpu::preflight)
        .transpose()
}

/// A replicated cluster like `partita up`'s, with `replicas` replicas.
pub fn smr_cluster(replicas: usize, protocol: Protocol, durability: Durability) -> ClusterConfig {
    let base = pick_base_port();
    let mut c = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    c.ordering = match protocol {
        // Paper 001's ring: the coordinator at its end decides.
        Protocol::RingPaxos => OrderingSection::RingPaxos(RingPaxosSettings {
            ring_decision: Some(RingDecision::Coordinator),
        }),
        p => OrderingSection::paxos(p),
    };
    c.cluster.durability = durability;
    let template = c
        .nodes
        .iter()
        .find(|n| n.roles.contains(&Role::Replica))
        .cloned()
        .expect("the default cluster has replicas");
    c.nodes.retain(|n| n.roles.contains(&Role::Acceptor));
    for i in 0..replicas as u32 {
        let mut n = template.clone();
        n.id = 4 + i;
        n.addr = format!("127.0.0.1:{}", base + n.id as u16);
        c.nodes.push(n);
    }
    c
}

pub fn cs_cluster() -> ClusterConfig {
    ClusterConfig::client_server(pick_base_port() + 1, rand::random::<u64>() >> 1)
}

/// Run one bench point on a fresh cluster of real processes (each node limited to
/// `node_cpu` of a core, if given).
pub async fn run_point(
    exe: &Path,
    cluster: &ClusterConfig,
    cfg: &BenchConfig,
    node_cpu: Option<f64>,
) -> anyhow::Result<BenchResult> {
    Ok(run_point_detailed(exe, cluster, cfg, node_cpu, None)
        .await?
        .result)
}

/// What a real point measured besides `partita bench`'s result.
pub struct RealPoint {
    pub result: BenchResult,
    /// Every command of the run (for statistics the bench result does not keep).
    pub records: Vec<bench::Record>,
    /// Each replica's status right after the load (counters), when it answered.
    pub replica_status: Vec<partita_wire::NodeStatus>,
    /// The same right before the load (after the preload), to take counters' deltas.
    pub replica_status_before: Vec<partita_wire::NodeStatus>,
}

/// Each replica's status (counters), of those that answer.
async fn replica_statuses(cluster: &ClusterConfig) -> Vec<partita_wire::NodeStatus> {
    let mut out = Vec::new();
    for n in cluster
        .nodes
        .iter()
        .filter(|n| n.roles.contains(&Role::Replica))
    {
        if let Ok(addr) = n.addr.parse() {
            if let Some(s) = partita_client::node_status(addr, Duration::from_secs(2)).await {
                out.push(s);
            }
        }
    }
    out
}

/// Run one bench point on a fresh cluster of real processes, keeping the records and
/// the replicas' status after the load; the clients share `connections` connections to
/// each node (`partita bench --connections`), or each has its own (`None`).
pub async fn run_point_detailed(
    exe: &Path,
    cluster: &ClusterConfig,
    cfg: &BenchConfig,
    node_cpu: Option<f64>,
    connections: Option<usize>,
) -> anyhow::Result<RealPoint> {
    let dir = std::env::temp_dir().join(format!(
        "partita-exp-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir)?;
    let placed = partita_harness::netns::place_for_run(cluster, &dir)?;
    let cluster = &placed;
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cluster.to_toml())?;
    let result = async {
        let mut lc = LocalCluster::start_with(exe, &file, cluster, &dir, &[], node_cpu)?;
        lc.wait_ready(Duration::from_secs(30)).await?;
        bench::preload(cluster, cfg.preload, false).await?;
        let replica_status_before = replica_statuses(cluster).await;
        let (mut result, records) = bench::run_with(cluster, cfg, connections).await?;
        result.node_cpu = lc.cpu_label();
        let replica_status = replica_statuses(cluster).await;
        lc.stop(Duration::from_secs(10));
        anyhow::Ok(RealPoint {
            result,
            records,
            replica_status,
            replica_status_before,
        })
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

// ------------------------------------------------------------------ in the simulator

/// The `machine` string of a simulated report.
pub fn sim_machine(cost_source: &str) -> String {
    format!(
        "simulated: one CPU per node, cost table {cost_source}, 1 Gbit/s network card per node, 0.05 ms one-way latency"
    )
}

/// Cluster id of every simulated cluster (the preloaded image is built for it once).
const SIM_CLUSTER_ID: u64 = 0x5149_0001;

/// The replicated cluster of the real sweep (3 acceptors, node 1 coordinating,
/// `replicas` replicas), without checkpoints (the paper took none), for the simulator.
pub fn sim_smr_cluster(
    replicas: usize,
    protocol: Protocol,
    durability: Durability,
) -> ClusterConfig {
    let mut c = ClusterConfig::default_local(7100, SIM_CLUSTER_ID);
    c.ordering = match protocol {
        // Paper 001's ring: the coordinator at its end decides.
        Protocol::RingPaxos => OrderingSection::RingPaxos(RingPaxosSettings {
            ring_decision: Some(RingDecision::Coordinator),
        }),
        p => OrderingSection::paxos(p),
    };
    c.cluster.durability = durability;
    c.storage.checkpoint_instances = 0;
    let template = c
        .nodes
        .iter()
        .find(|n| n.roles.contains(&Role::Replica))
        .cloned()
        .expect("the default cluster has replicas");
    c.nodes.retain(|n| n.roles.contains(&Role::Acceptor));
    for i in 0..replicas as u32 {
        let mut n = template.clone();
        n.id = 4 + i;
        n.addr = format!("127.0.0.1:{}", 7100 + n.id);
        c.nodes.push(n);
    }
    c
}

/// The client-server baseline, for the simulator.
pub fn sim_cs_cluster() -> ClusterConfig {
    ClusterConfig::client_server(7200, SIM_CLUSTER_ID)
}

type Image = (u64, u64, Arc<Vec<u8>>);
static IMAGE: Mutex<Option<Image>> = Mutex::new(None);
static SHUFFLED: Mutex<Option<Image>> = Mutex::new(None);

/// A replica checkpoint of instance 0 of `cluster_id` holding the tree `build` makes,
/// built once per process, size and cluster (kept in `cache`), then stamped with each
/// replica's id as it boots.
fn cached_image(
    cache: &Mutex<Option<Image>>,
    entries: u64,
    cluster_id: u64,
    build: impl FnOnce() -> anyhow::Result<partita_btree::BPlusTree>,
) -> anyhow::Result<ReplicaImage> {
    let mut cache = cache.lock().expect("image cache lock");
    let bytes = match cache.as_ref() {
        Some((n, id, b)) if *n == entries && *id == cluster_id => b.clone(),
        _ => {
            *cache = None;
            let mut r = partita_smr::SequentialReplica::new(0, build()?);
            r.set_cluster_id(cluster_id);
            let b = Arc::new(r.checkpoint());
            *cache = Some((entries, cluster_id, b.clone()));
            b
        }
    };
    Ok(ReplicaImage(Arc::new(move |id| {
        let mut b = bytes.as_ref().clone();
        partita_smr::restamp_checkpoint(&mut b, id).expect("a checkpoint this process wrote");
        b
    })))
}

/// The preloaded replica state (keys 0, 2, …, value = key) as a checkpoint of
/// instance 0 of `cluster_id`: bulk-loaded once per process and size, then stamped
/// with each replica's id as it boots.
pub fn replica_image(entries: u64, cluster_id: u64) -> anyhow::Result<ReplicaImage> {
    cached_image(&IMAGE, entries, cluster_id, || {
        partita_btree::BPlusTree::bulk_load(
            (0..entries).map(|i| (i * bench::PRELOAD_STRIDE, i * bench::PRELOAD_STRIDE)),
        )
        .map_err(|e| anyhow::anyhow!("bulk load: {e}"))
    })
}

/// As [`replica_image`], but the tree filled by inserting the keys in a pseudo-random
/// order (a fixed permutation), as a tree that grew by inserts is: leaves about 70%
/// full instead of a bulk load's 90%. Paper 002's opt-PSMR safety check passes or fails
/// on the room left in leaves, so its fail rate depends on this (the reading aid's
/// recommendation: "load in random order to reach a realistic fill").
pub fn replica_image_shuffled(entries: u64, cluster_id: u64) -> anyhow::Result<ReplicaImage> {
    cached_image(&SHUFFLED, entries, cluster_id, || {
        let mut tree = partita_btree::BPlusTree::new();
        // i -> i + (P mod n), mod n, visits every i of 0..n: P is a prime that does not
        // divide n, so P mod n and n are coprime.
        const P: u64 = 1_000_000_007;
        let n = entries.max(1);
        let step = if n.is_multiple_of(P) { 1 } else { P % n };
        let mut i = 0u64;
        for _ in 0..entries {
            let k = i * bench::PRELOAD_STRIDE;
            tree.insert(k, k);
            i = (i + step.max(1)) % n;
        }
        anyhow::ensure!(
            tree.len() as u64 == entries,
            "the shuffled preload inserted {} of {entries} keys",
            tree.len()
        );
        Ok(tree)
    })
}

/// `partita bench`'s result for a simulated point (virtual time throughout).
pub fn sim_bench_result(r: &BenchReport, w: Workload, cost: &CostTable) -> BenchResult {
    let cs = r.mode == "cs";
    BenchResult {
        workload: w,
        mode: r.mode.clone(),
        ordering: if cs {
            "none (client-server)".into()
        } else {
            r.protocol.clone()
        },
        durability: if cs {
            "none (in memory, unreplicated)".into()
        } else if r.fsync {
            format!(
                "fsync (simulated disk: {:.3} ms per fsync)",
                cost.disk.fsync_ns as f64 / 1e6
            )
        } else {
            "memory (simulated disk: writes, no fsync)".into()
        },
        replicas: r.replicas,
        acceptors: r.acceptors,
        batch_bytes_max: r.batch_bytes_max,
        window_instances_max: r.window_instances_max,
        clients: r.clients as usize,
        think_ms: r.think_ms,
        preload: r.preload,
        duration_s: r.duration_s,
        measured_s: r.measured_s,
        commands: r.commands,
        throughput_cmds_per_s: r.throughput_cmds_per_s,
        throughput_ops_per_s: r.throughput_ops_per_s,
        latency_ms_p50: r.latency_ms_p50,
        latency_ms_p90: r.latency_ms_p90,
        latency_ms_p99: r.latency_ms_p99,
        latency_ms_max: r.latency_ms_max,
        latency_ms_mean: None,
        timeouts: 0,
        resubmissions: r.resubmissions,
        tentative_ms_p50_p90: None,
        psmr_outcomes: None,
        node_cpu: None,
        node_runtime_threads: None,
        node_io_thread: false,
        client_connections: None,
        cpu_us_per_cmd: None,
        cpu_user_us_per_cmd: None,
        cpu_system_us_per_cmd: None,
        cpu_processes: 0,
        client_cpu_us_per_cmd: 0.0,
        wal_bytes: Vec::new(),
        restart_ms: Vec::new(),
    }
}

/// What one simulated point needs.
#[derive(Clone, Debug)]
pub struct SimPointSpec {
    pub series: String,
    pub workload: Workload,
    pub x_name: String,
    pub x: f64,
    pub cluster: ClusterConfig,
    pub clients: usize,
}

/// The settings every point of a simulated sweep shares.
#[derive(Clone, Debug)]
pub struct SimParams {
    /// Virtual time per point (10% trimmed at each end, as `partita bench`).
    pub duration: Duration,
    pub preload: u64,
    pub think_ms: u64,
    pub durability: Durability,
    pub cost: CostTable,
    pub seed: u64,
    /// A what-if: IP multicast on the simulated LAN.
    pub multicast: bool,
    /// Sessions per client machine (its window of outstanding commands), which share
    /// the machine's card; `None`: a machine per session.
    pub window: Option<usize>,
}

/// Simulate one point.
pub fn sim_point(o: &SimParams, p: &SimPointSpec) -> anyhow::Result<Point> {
    let started = Instant::now();
    let cs = p.cluster.cluster.mode == partita_config::Mode::Cs;
    let mut spec = BenchSpec::new(p.cluster.clone(), p.workload, p.clients as u32);
    spec.think_ms = o.think_ms;
    spec.preload = o.preload;
    spec.duration_ns = o.duration.as_nanos() as u64;
    spec.seed = o.seed;
    spec.cost = o.cost.clone();
    spec.fsync = o.durability == Durability::Fsync;
    if let Some(nic) = spec.net.nic.as_mut() {
        nic.multicast = o.multicast;
        nic.client_cards = crate::framework::client_machines(p.clients, o.window).map(|m| m as u32);
    }
    if !cs && o.preload > 0 {
        spec.replica_image = Some(match p.workload {
            // Each partition's replicas hold only its keys.
            _ if p.cluster.partitioning.partitions > 1 => {
                crate::experiment_partition::partition_images(&p.cluster, o.preload)?
            }
            // Paper 002's tree: filled in random order (see `replica_image_shuffled`).
            Workload::Dependent { .. } => replica_image_shuffled(o.preload, p.cluster.cluster.id)?,
            _ => replica_image(o.preload, p.cluster.cluster.id)?,
        });
    }
    let r = simbench::run(spec);
    if let Some(f) = &r.failure {
        anyhow::bail!(
            "simulated {}, {:?}, {} = {}: {f}",
            p.series,
            p.workload,
            p.x_name,
            p.x
        );
    }
    let mut point = Point::new(
        p.series.clone(),
        p.workload,
        &p.x_name,
        p.x,
        sim_bench_result(&r, p.workload, &o.cost),
    );
    point.sim = Some(SimDetail {
        nodes: r.nodes.clone(),
        instances: r.instances,
        commands_per_instance: r.commands_per_instance,
        events: r.events,
        wall_s: started.elapsed().as_secs_f64(),
        trace_hash: r.trace_hash,
        psmr: r.psmr.clone(),
    });
    point.latency_ms_mean = Some(r.latency_ms_mean);
    point.latency_mean_from = Some("exact".into());
    Ok(point)
}

pub(crate) fn series(
    points: &[Point],
    w: Workload,
    x_name: &str,
    y: impl Fn(&BenchResult) -> f64,
) -> Vec<Series> {
    let mut names: Vec<String> = Vec::new();
    for p in points {
        if p.workload == w && p.x_name == x_name && !names.contains(&p.series) {
            names.push(p.series.clone());
        }
    }
    names
        .into_iter()
        .map(|name| Series {
            points: points
                .iter()
                .filter(|p| p.workload == w && p.x_name == x_name && p.series == name)
                .map(|p| (p.x, y(&p.result)))
                .collect(),
            label: name,
        })
        .collect()
}

/// The figures of a report, by experiment: (file suffix, figure).
pub fn figures(report: &ExperimentReport) -> Vec<(String, partita_plot::Figure)> {
    match report.name.as_str() {
        "speculation" => speculation_figures(report),
        _ => cost_of_replication_figures(report),
    }
}

/// Write the report as JSON and its figures as SVG next to it (`FILE.json` →
/// `FILE-fig5.svg`, ...). Returns the files written.
pub fn write(report: &ExperimentReport, json: &Path) -> anyhow::Result<Vec<PathBuf>> {
    crate::framework::write_report(report, figures(report), json)
}

/// A readable table of the report (and, for `speculation`, of its comparisons).
pub fn table(r: &ExperimentReport) -> String {
    let mut s = format!(
        "{} ({}; {})\n{:<8} {:<24} {:>4} {:>8} {:>5} {:>12} {:>12} {:>9} {:>9}\n",
        r.name,
        if r.simulated { "simulated" } else { "measured" },
        r.machine,
        "workload",
        "series",
        "repl",
        "x",
        "",
        "cmd/s",
        "ops/s",
        "p50 ms",
        "p99 ms"
    );
    for p in &r.points {
        s += &format!(
            "{:<8} {:<24} {:>4} {:>8} {:>5} {:>12.0} {:>12.0} {:>9.3} {:>9.3}\n",
            format!("{:?}", p.workload).to_lowercase(),
            p.series,
            p.result.replicas,
            p.x_name,
            p.x,
            p.result.throughput_cmds_per_s,
            p.result.throughput_ops_per_s,
            p.result.latency_ms_p50,
            p.result.latency_ms_p99
        );
    }
    if !r.comparisons.is_empty() {
        s += &comparison_table(r);
    }
    s
}

/// A figure's curve.
pub(crate) fn line(label: &str, points: Vec<(f64, f64)>) -> Series {
    Series {
        label: label.into(),
        points,
    }
}

/// A figure's panel with linear axes.
pub(crate) fn panel(title: &str, x: &str, y: &str, series: Vec<Series>) -> Panel {
    Panel {
        title: title.into(),
        x_label: x.into(),
        y_label: y.into(),
        log_x: false,
        log_y: false,
        series,
    }
}
