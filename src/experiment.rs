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

use crate::bench::{self, BenchConfig, BenchResult, Workload};
use crate::launch::{pick_base_port, LocalCluster};
use crate::plot::{self, Panel, Series};
use anyhow::Context;
use partita_consensus::Protocol;
use partita_runtime::{ClusterConfig, Durability, Role};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    let first = r.points.first().map(|p| &p.result);
    let foot = match first {
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
                "Paper 001 Figure 5: SMR versus client-server",
                &foot,
                &fig5,
                2,
            ),
        ),
        (
            "fig6".into(),
            plot::figure(
                "Paper 001 Figure 6: SMR with more replicas versus client-server",
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
