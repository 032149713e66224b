//! `partita experiment NAME`: the papers' experiments, as sweeps of `partita bench`
//! runs, each point on a fresh local cluster of real processes. Every point keeps the
//! full bench result (the configuration beside the numbers); the report is written as
//! JSON and drawn as SVG figures laid out like the paper's.
//!
//! Experiments:
//! - `cost-of-replication` (paper 001 §V-B, Figures 5 and 6): SMR against the
//!   client-server baseline under the three workloads (queries of 1000 keys, single
//!   updates, batches of seven updates): throughput and response time against the
//!   number of clients, then maximum throughput and response time against the number
//!   of servers (1 to 8 replicas).
//!
//! With `--sim` the same sweep runs in the deterministic simulator instead
//! ([`cost_of_replication_sim`], `partita_sim::bench`): every node a real `NodeCore`
//! on its own simulated CPU charged from a cost table (`partita calibrate`), a
//! simulated gigabit LAN and WAL disk, at the paper's sizes (12 million entries, up to
//! hundreds of clients, 1 to 8 replicas) that this machine cannot host for real. Its
//! report says `simulated: true` and names the cost table in `machine`.

use crate::bench::{self, BenchConfig, BenchResult, Workload};
use crate::launch::{pick_base_port, LocalCluster};
use crate::plot::{self, Panel, Series};
use anyhow::Context;
use partita_consensus::Protocol;
use partita_runtime::{ClusterConfig, Durability, Role};
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
}

#[derive(Clone, Debug, Serialize)]
pub struct ExperimentReport {
    pub name: String,
    /// Whether the numbers come from the simulator (else: real processes here).
    pub simulated: bool,
    pub machine: String,
    pub points: Vec<Point>,
}

#[derive(Clone, Debug)]
pub struct CostOptions {
    pub workloads: Vec<Workload>,
    pub clients: Vec<usize>,
    pub replicas: Vec<usize>,
    pub duration: Duration,
    pub preload: u64,
    pub think_ms: u64,
    pub protocol: Protocol,
    pub durability: Durability,
    pub progress: bool,
}

impl CostOptions {
    /// The full sweep (several minutes on a 2-core machine).
    pub fn full() -> CostOptions {
        CostOptions {
            workloads: vec![Workload::Query, Workload::Update, Workload::Batch],
            clients: vec![1, 8, 32, 96],
            replicas: vec![1, 2, 4, 8],
            duration: Duration::from_secs(6),
            preload: 1_000_000,
            think_ms: 0,
            protocol: Protocol::RingPaxos,
            durability: Durability::Fsync,
            progress: true,
        }
    }

    /// A small sweep for tests and a first look (well under a minute).
    pub fn quick() -> CostOptions {
        CostOptions {
            workloads: vec![Workload::Query, Workload::Update, Workload::Batch],
            clients: vec![1, 8],
            replicas: vec![1, 2],
            duration: Duration::from_secs(1),
            preload: 2_000,
            think_ms: 0,
            protocol: Protocol::RingPaxos,
            durability: Durability::Fsync,
            progress: false,
        }
    }
}

pub fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, every process on this one machine (real processes, loopback TCP)")
}

/// A replicated cluster like `partita up`'s, with `replicas` replicas.
pub fn smr_cluster(replicas: usize, protocol: Protocol, durability: Durability) -> ClusterConfig {
    let base = pick_base_port();
    let mut c = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    c.cluster.protocol = protocol;
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

/// Run one bench point on a fresh cluster of real processes.
pub async fn run_point(
    exe: &Path,
    cluster: &ClusterConfig,
    cfg: &BenchConfig,
) -> anyhow::Result<BenchResult> {
    let dir = std::env::temp_dir().join(format!(
        "partita-exp-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("cluster.toml");
    std::fs::write(&file, cluster.to_toml())?;
    let result = async {
        let mut lc = LocalCluster::start_with(exe, &file, cluster, &dir, &[])?;
        lc.wait_ready(Duration::from_secs(30)).await?;
        bench::preload(cluster, cfg.preload, false).await?;
        let (r, _) = bench::run(cluster, cfg).await?;
        lc.stop(Duration::from_secs(10));
        anyhow::Ok(r)
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Paper 001 §V-B: the cost of replication.
pub async fn cost_of_replication(exe: &Path, o: &CostOptions) -> anyhow::Result<ExperimentReport> {
    let mut points = Vec::new();
    let smr_label = format!("SMR {}", o.protocol);
    let max_clients = o.clients.iter().copied().max().unwrap_or(1);
    for &w in &o.workloads {
        let bench_cfg = |clients: usize| BenchConfig {
            workload: w,
            clients,
            duration: o.duration,
            think_ms: o.think_ms,
            preload: o.preload,
            seed: 1,
            trim: 0.1,
            progress: false,
            key_space: None,
        };
        let run = |series: String, x_name: &str, x: f64, cluster: ClusterConfig, clients: usize| {
            let cfg = bench_cfg(clients);
            let x_name = x_name.to_string();
            let exe = exe.to_path_buf();
            let progress = o.progress;
            async move {
                let r = run_point(&exe, &cluster, &cfg)
                    .await
                    .with_context(|| format!("{series}, {w:?}, {x_name} = {x}"))?;
                if progress {
                    eprintln!(
                        "  {w:?} {series:<18} {x_name} {x:>4}: {:>9.0} cmd/s  p50 {:.2} ms",
                        r.throughput_cmds_per_s, r.latency_ms_p50
                    );
                }
                anyhow::Ok(Point {
                    series,
                    workload: w,
                    x_name,
                    x,
                    result: r,
                    sim: None,
                })
            }
        };
        // Figure 5: throughput and response time against clients (2 replicas).
        for &c in &o.clients {
            points.push(run("CS".into(), "clients", c as f64, cs_cluster(), c).await?);
            points.push(
                run(
                    smr_label.clone(),
                    "clients",
                    c as f64,
                    smr_cluster(2, o.protocol, o.durability),
                    c,
                )
                .await?,
            );
        }
        // Figure 6: the most clients, against the number of servers.
        for &n in &o.replicas {
            points.push(
                run(
                    smr_label.clone(),
                    "servers",
                    n as f64,
                    smr_cluster(n, o.protocol, o.durability),
                    max_clients,
                )
                .await?,
            );
        }
    }
    Ok(ExperimentReport {
        name: "cost-of-replication".into(),
        simulated: false,
        machine: machine(),
        points,
    })
}

// ------------------------------------------------------------------ in the simulator

/// The cost-of-replication sweep in the simulator.
#[derive(Clone, Debug)]
pub struct SimCostOptions {
    pub workloads: Vec<Workload>,
    pub clients: Vec<usize>,
    pub replicas: Vec<usize>,
    /// Virtual seconds per point (10% trimmed at each end, as `partita bench`).
    pub duration: Duration,
    pub preload: u64,
    pub think_ms: u64,
    pub protocol: Protocol,
    pub durability: Durability,
    pub cost: CostTable,
    /// Where the cost table came from (a file, or the built-in defaults).
    pub cost_source: String,
    pub seed: u64,
    /// Points simulated at once (each on its own thread).
    pub jobs: usize,
    pub progress: bool,
}

impl SimCostOptions {
    /// The paper's sizes (§V-A): 12 million entries, think time 0–10 ms, 1 to 8
    /// replicas; 4 virtual seconds per point (3.2 s measured). Clients go up to 3200:
    /// with Partita's costs and the paper's think time it takes thousands of clients
    /// to saturate a server (Figure 6 plots the maximum throughput).
    pub fn full() -> SimCostOptions {
        SimCostOptions {
            workloads: vec![Workload::Query, Workload::Update, Workload::Batch],
            clients: vec![1, 50, 100, 200, 400, 800, 1600, 3200],
            replicas: vec![1, 2, 4, 8],
            duration: Duration::from_secs(4),
            preload: 12_000_000,
            think_ms: 10,
            protocol: Protocol::RingPaxos,
            durability: Durability::Fsync,
            cost: CostTable::default(),
            cost_source: "built-in defaults".into(),
            seed: 1,
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            progress: true,
        }
    }

    /// The same small sweep as the real `--quick` (clients 1 and 8, 1 or 2 replicas,
    /// no think time, 2,000 entries, 1 s).
    pub fn quick() -> SimCostOptions {
        let q = CostOptions::quick();
        SimCostOptions {
            clients: q.clients,
            replicas: q.replicas,
            duration: q.duration,
            preload: q.preload,
            think_ms: q.think_ms,
            progress: false,
            ..SimCostOptions::full()
        }
    }
}

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
    c.cluster.protocol = protocol;
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

/// The preloaded replica state (keys 0, 2, …, value = key) as a checkpoint of
/// instance 0 of `cluster_id`: bulk-loaded once per process and size, then stamped
/// with each replica's id as it boots.
pub fn replica_image(entries: u64, cluster_id: u64) -> anyhow::Result<ReplicaImage> {
    let mut cache = IMAGE.lock().expect("image cache lock");
    let bytes = match cache.as_ref() {
        Some((n, id, b)) if *n == entries && *id == cluster_id => b.clone(),
        _ => {
            *cache = None;
            let tree = partita_btree::BPlusTree::bulk_load(
                (0..entries).map(|i| (i * bench::PRELOAD_STRIDE, i * bench::PRELOAD_STRIDE)),
            )
            .map_err(|e| anyhow::anyhow!("bulk load: {e}"))?;
            let mut r = partita_smr::SequentialReplica::new(0, tree);
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

fn sim_workload(w: Workload) -> simbench::Workload {
    w.to_sim()
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
        timeouts: 0,
        resubmissions: r.resubmissions,
        tentative_ms_p50_p90: None,
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

/// Simulate one point.
pub fn sim_point(o: &SimCostOptions, p: &SimPointSpec) -> anyhow::Result<Point> {
    let started = Instant::now();
    let cs = p.cluster.cluster.mode == partita_runtime::Mode::Cs;
    let mut spec = BenchSpec::new(
        p.cluster.clone(),
        sim_workload(p.workload),
        p.clients as u32,
    );
    spec.think_ms = o.think_ms;
    spec.preload = o.preload;
    spec.duration_ns = o.duration.as_nanos() as u64;
    spec.seed = o.seed;
    spec.cost = o.cost.clone();
    spec.fsync = o.durability == Durability::Fsync;
    if !cs && o.preload > 0 {
        spec.replica_image = Some(replica_image(o.preload, p.cluster.cluster.id)?);
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
    Ok(Point {
        series: p.series.clone(),
        workload: p.workload,
        x_name: p.x_name.clone(),
        x: p.x,
        result: sim_bench_result(&r, p.workload, &o.cost),
        sim: Some(SimDetail {
            nodes: r.nodes.clone(),
            instances: r.instances,
            commands_per_instance: r.commands_per_instance,
            events: r.events,
            wall_s: started.elapsed().as_secs_f64(),
            trace_hash: r.trace_hash,
        }),
    })
}

/// The points of the sweep, in report order: per workload, Figure 5 (CS and SMR with
/// 2 replicas against clients), then Figure 6 (SMR against replicas, most clients).
pub fn sim_points(o: &SimCostOptions) -> Vec<SimPointSpec> {
    let smr_label = format!("SMR {}", o.protocol);
    let max_clients = o.clients.iter().copied().max().unwrap_or(1);
    let mut v = Vec::new();
    for &w in &o.workloads {
        for &c in &o.clients {
            v.push(SimPointSpec {
                series: "CS".into(),
                workload: w,
                x_name: "clients".into(),
                x: c as f64,
                cluster: sim_cs_cluster(),
                clients: c,
            });
            v.push(SimPointSpec {
                series: smr_label.clone(),
                workload: w,
                x_name: "clients".into(),
                x: c as f64,
                cluster: sim_smr_cluster(2, o.protocol, o.durability),
                clients: c,
            });
        }
        for &n in &o.replicas {
            v.push(SimPointSpec {
                series: smr_label.clone(),
                workload: w,
                x_name: "servers".into(),
                x: n as f64,
                cluster: sim_smr_cluster(n, o.protocol, o.durability),
                clients: max_clients,
            });
        }
    }
    v
}

/// Paper 001 §V-B in the simulator: the points run `jobs` at a time; the report is
/// the same as the real one's, with `simulated = true`.
pub fn cost_of_replication_sim(o: &SimCostOptions) -> anyhow::Result<ExperimentReport> {
    let specs = sim_points(o);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<Point>>>> =
        Mutex::new((0..specs.len()).map(|_| None).collect());
    let jobs = o.jobs.clamp(1, specs.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= specs.len() {
                    break;
                }
                let p = &specs[i];
                let r = sim_point(o, p);
                if o.progress {
                    match &r {
                        Ok(pt) => {
                            let d = pt.sim.as_ref().expect("simulated");
                            let bottleneck = d
                                .nodes
                                .iter()
                                .max_by(|a, b| a.cpu.max(a.nic_out).total_cmp(&b.cpu.max(b.nic_out)))
                                .map(|n| {
                                    format!(
                                        "busiest: n{} {} cpu {:.0}% nic {:.0}%",
                                        n.node,
                                        n.role,
                                        n.cpu * 100.0,
                                        n.nic_out * 100.0
                                    )
                                })
                                .unwrap_or_default();
                            eprintln!(
                                "  {:?} {:<18} {} {:>4}: {:>9.0} cmd/s  p50 {:.2} ms  ({bottleneck}; {:.1} s wall)",
                                p.workload, p.series, p.x_name, p.x, pt.result.throughput_cmds_per_s,
                                pt.result.latency_ms_p50, d.wall_s
                            );
                        }
                        Err(e) => eprintln!("  {:?} {} {} {}: {e:#}", p.workload, p.series, p.x_name, p.x),
                    }
                }
                results.lock().expect("results lock")[i] = Some(r);
            });
        }
    });
    let mut points = Vec::new();
    for r in results.into_inner().expect("results lock") {
        points.push(r.expect("every point ran")?);
    }
    Ok(ExperimentReport {
        name: "cost-of-replication".into(),
        simulated: true,
        machine: sim_machine(&o.cost_source),
        points,
    })
}

fn series(
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

/// Figures 5 and 6 of paper 001 from a cost-of-replication report.
pub fn cost_of_replication_figures(r: &ExperimentReport) -> Vec<(String, String)> {
    let workloads: Vec<Workload> = {
        let mut v = Vec::new();
        for p in &r.points {
            if !v.contains(&p.workload) {
                v.push(p.workload);
            }
        }
        v
    };
    let kind = if r.simulated { "simulated" } else { "measured" };
    // The replicated configuration describes the figure (CS points have no acceptors).
    let first = r
        .points
        .iter()
        .find(|p| p.result.mode == "smr")
        .or(r.points.first())
        .map(|p| &p.result);
    let foot = match first {
        Some(b) if r.simulated => format!(
            "SIMULATED ({}); durability {}, {} acceptors, batching {} B, think time 0..={} ms, preload {} entries, {:.1} s virtual runs",
            r.machine, b.durability, b.acceptors, b.batch_bytes_max, b.think_ms, b.preload, b.duration_s
        ),
        Some(b) => format!(
            "{kind} on {}; durability {}, {} acceptors, batching {} B, think time 0..={} ms, preload {} entries, {:.0} s runs",
            r.machine, b.durability, b.acceptors, b.batch_bytes_max, b.think_ms, b.preload, b.duration_s
        ),
        None => kind.to_string(),
    };
    let name = |w: Workload| match w {
        Workload::Query => "queries (1000 keys)",
        Workload::Update => "single updates",
        Workload::Batch => "batches of 7 updates",
        Workload::Mixed => "mixed",
    };
    let mut fig5 = Vec::new();
    let mut fig6 = Vec::new();
    let title = |t: &str| {
        if r.simulated {
            format!("{t} (simulated)")
        } else {
            t.to_string()
        }
    };
    for &w in &workloads {
        let y_tp = |b: &BenchResult| b.throughput_cmds_per_s;
        let y_rt = |b: &BenchResult| b.latency_ms_p50;
        fig5.push(Panel {
            title: format!("{}: throughput", name(w)),
            x_label: "clients".into(),
            y_label: "commands/s".into(),
            log_x: false,
            log_y: true,
            series: series(&r.points, w, "clients", y_tp),
        });
        fig5.push(Panel {
            title: format!("{}: response time", name(w)),
            x_label: "clients".into(),
            y_label: "p50 latency (ms)".into(),
            log_x: false,
            log_y: false,
            series: series(&r.points, w, "clients", y_rt),
        });
        // Figure 6: SMR against servers, with CS (one server) as a reference line.
        let mut tp = series(&r.points, w, "servers", y_tp);
        let mut rt = series(&r.points, w, "servers", y_rt);
        if let Some(cs) = r
            .points
            .iter()
            .filter(|p| p.workload == w && p.series == "CS")
            .max_by(|a, b| a.x.total_cmp(&b.x))
        {
            let xs: Vec<f64> = tp
                .first()
                .map(|s| s.points.iter().map(|p| p.0).collect())
                .unwrap_or_default();
            tp.push(Series {
                label: "CS (1 server)".into(),
                points: xs
                    .iter()
                    .map(|&x| (x, cs.result.throughput_cmds_per_s))
                    .collect(),
            });
            rt.push(Series {
                label: "CS (1 server)".into(),
                points: xs.iter().map(|&x| (x, cs.result.latency_ms_p50)).collect(),
            });
        }
        fig6.push(Panel {
            title: format!("{}: max throughput", name(w)),
            x_label: "replicas".into(),
            y_label: "commands/s".into(),
            log_x: false,
            log_y: true,
            series: tp,
        });
        fig6.push(Panel {
            title: format!("{}: response time", name(w)),
            x_label: "replicas".into(),
            y_label: "p50 latency (ms)".into(),
            log_x: false,
            log_y: false,
            series: rt,
        });
    }
    vec![
        (
            "fig5".into(),
            plot::figure(
                &title("Paper 001 Figure 5: SMR versus client-server"),
                &foot,
                &fig5,
                2,
            ),
        ),
        (
            "fig6".into(),
            plot::figure(
                &title("Paper 001 Figure 6: SMR with more replicas versus client-server"),
                &foot,
                &fig6,
                2,
            ),
        ),
    ]
}

/// Write the report as JSON and its figures as SVG next to it (`FILE.json` →
/// `FILE-fig5.svg`, ...). Returns the files written.
pub fn write(report: &ExperimentReport, json: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::write(json, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let mut files = vec![json.to_path_buf()];
    let stem = json.with_extension("");
    for (suffix, svg) in cost_of_replication_figures(report) {
        let p = PathBuf::from(format!("{}-{suffix}.svg", stem.display()));
        std::fs::write(&p, svg).with_context(|| format!("writing {}", p.display()))?;
        files.push(p);
    }
    Ok(files)
}

/// A readable table of the report.
pub fn table(r: &ExperimentReport) -> String {
    let mut s = format!(
        "{} ({}; {})\n{:<8} {:<20} {:>8} {:>5} {:>12} {:>12} {:>9} {:>9}\n",
        r.name,
        if r.simulated { "simulated" } else { "measured" },
        r.machine,
        "workload",
        "series",
        "x",
        "",
        "cmd/s",
        "ops/s",
        "p50 ms",
        "p99 ms"
    );
    for p in &r.points {
        s += &format!(
            "{:<8} {:<20} {:>8} {:>5} {:>12.0} {:>12.0} {:>9.3} {:>9.3}\n",
            format!("{:?}", p.workload).to_lowercase(),
            p.series,
            p.x_name,
            p.x,
            p.result.throughput_cmds_per_s,
            p.result.throughput_ops_per_s,
            p.result.latency_ms_p50,
            p.result.latency_ms_p99
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small simulated sweep: batches, 64 clients without think time (enough to
    /// keep a replica's pipeline full), 2 replicas, 0.5 virtual seconds.
    fn opts(cost: CostTable) -> SimCostOptions {
        SimCostOptions {
            workloads: vec![Workload::Batch],
            clients: vec![64],
            replicas: vec![2],
            duration: Duration::from_millis(500),
            preload: 2_000,
            think_ms: 0,
            cost,
            progress: false,
            jobs: 1,
            ..SimCostOptions::full()
        }
    }

    fn point(o: &SimCostOptions, cs: bool) -> Point {
        let spec = SimPointSpec {
            series: if cs { "CS" } else { "SMR ring-paxos" }.into(),
            workload: Workload::Batch,
            x_name: "clients".into(),
            x: 64.0,
            cluster: if cs {
                sim_cs_cluster()
            } else {
                sim_smr_cluster(2, o.protocol, o.durability)
            },
            clients: 64,
        };
        sim_point(o, &spec).unwrap()
    }

    #[test]
    fn a_simulated_point_is_deterministic() {
        let o = opts(CostTable::default());
        for cs in [true, false] {
            let a = point(&o, cs);
            let b = point(&o, cs);
            let (sa, sb) = (a.sim.as_ref().unwrap(), b.sim.as_ref().unwrap());
            assert_eq!(sa.trace_hash, sb.trace_hash);
            assert_eq!(sa.events, sb.events);
            assert_eq!(a.result.commands, b.result.commands);
            assert_eq!(a.result.latency_ms_p99, b.result.latency_ms_p99);
            assert!(a.result.commands > 100, "{:?}", a.result);
            assert_eq!(
                a.result.throughput_ops_per_s,
                7.0 * a.result.throughput_cmds_per_s
            );
        }
        let smr = point(&o, false);
        assert_eq!(smr.result.mode, "smr");
        assert!(smr.result.durability.contains("simulated"));
        assert_eq!(point(&o, true).result.ordering, "none (client-server)");
    }

    /// With B+tree operations dominating, the client-server server is CPU-bound:
    /// doubling their cost about halves its throughput; replicated, every replica
    /// executes every batch, so SMR halves too.
    #[test]
    fn cpu_bound_throughput_follows_the_cost_table() {
        let table = |op_ns: u64| {
            let mut t = CostTable::default();
            for k in ["insert", "delete"] {
                t.btree_kind_ns.insert(k.into(), op_ns);
            }
            t
        };
        let base = opts(table(40_000));
        let double = opts(table(80_000));
        for cs in [true, false] {
            let a = point(&base, cs).result.throughput_cmds_per_s;
            let b = point(&double, cs).result.throughput_cmds_per_s;
            let ratio = b / a;
            assert!(
                (0.42..0.6).contains(&ratio),
                "cs {cs}: {a:.0} -> {b:.0} cmd/s (ratio {ratio:.2})"
            );
        }
        // The busiest node is the one executing: the server, or a replica.
        let cs = point(&base, true);
        let busiest = cs.sim.unwrap().nodes[0].cpu;
        assert!(busiest > 0.95, "the cs server saturates: {busiest}");
        let smr = point(&base, false).sim.unwrap();
        let replica = smr.nodes.iter().find(|n| n.role == "replica").unwrap();
        assert!(replica.cpu > 0.9, "replicas saturate: {:?}", smr.nodes);
    }

    #[test]
    fn a_quick_simulated_sweep_writes_a_labelled_report() {
        let mut o = SimCostOptions::quick();
        o.duration = Duration::from_millis(300);
        o.workloads = vec![Workload::Update];
        let r = cost_of_replication_sim(&o).unwrap();
        assert!(r.simulated);
        assert!(r.machine.starts_with("simulated"), "{}", r.machine);
        assert_eq!(r.points.len(), 2 * 2 + 2);
        let dir = tempfile::tempdir().unwrap();
        let files = write(&r, &dir.path().join("sim.json")).unwrap();
        assert_eq!(files.len(), 3);
        let fig = std::fs::read_to_string(&files[1]).unwrap();
        assert!(
            fig.contains("simulated") && fig.contains("SIMULATED"),
            "{fig}"
        );
        let json = std::fs::read_to_string(&files[0]).unwrap();
        assert!(json.contains("\"simulated\": true"));
        assert!(table(&r).contains("simulated"));
    }

    #[test]
    fn the_replica_image_preloads_every_replica() {
        let img = replica_image(1_000, 42).unwrap();
        let bytes = (img.0)(5);
        let r = partita_smr::SequentialReplica::restore(&bytes).unwrap();
        assert_eq!(r.id(), 5);
        assert_eq!(r.tree().len(), 1_000);
        assert_eq!(r.tree().read(1_998), Some(1_998));
        assert_eq!(r.last_instance(), 0);
    }
}
