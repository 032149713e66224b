//! Paper 001 §V-B, Figures 5 and 6: the cost of replication (SMR against the
//! client-server baseline), for real and in the simulator.

use super::*;

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
    /// Each node limited to this fraction of one core (`--node-cpu`).
    pub node_cpu: Option<f64>,
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
            node_cpu: None,
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
            node_cpu: None,
            progress: false,
        }
    }
}

/// The points of the sweep, in report order: per workload, Figure 5 (CS and SMR with 2
/// replicas against clients), then Figure 6 (SMR against the number of replicas, with
/// the most clients). The same points run real or simulated; only the clusters (`cs`,
/// `smr` of a replica count) and the load (`bench` of a workload and client count)
/// differ.
pub fn points(
    workloads: &[Workload],
    clients: &[usize],
    replicas: &[usize],
    protocol: Protocol,
    cs: &ClusterConfig,
    smr: impl Fn(usize) -> ClusterConfig,
    bench: impl Fn(Workload, usize) -> BenchConfig,
) -> Vec<PointSpec> {
    let smr_label = format!("SMR {protocol}");
    let max_clients = clients.iter().copied().max().unwrap_or(1);
    let point = |series: &str, x_name: &str, x: usize, cluster: ClusterConfig, b| PointSpec {
        series: series.to_string(),
        x_name: x_name.to_string(),
        x: x as f64,
        cluster,
        bench: b,
    };
    let mut v = Vec::new();
    for &w in workloads {
        for &c in clients {
            v.push(point("CS", "clients", c, cs.clone(), bench(w, c)));
            v.push(point(&smr_label, "clients", c, smr(2), bench(w, c)));
        }
        for &n in replicas {
            v.push(point(
                &smr_label,
                "servers",
                n,
                smr(n),
                bench(w, max_clients),
            ));
        }
    }
    v
}

/// Paper 001 §V-B on real processes: every point on a fresh local cluster.
pub async fn cost_of_replication(exe: &Path, o: &CostOptions) -> anyhow::Result<ExperimentReport> {
    let mut driver = RealDriver::new(exe, o.node_cpu)?;
    let specs = points(
        &o.workloads,
        &o.clients,
        &o.replicas,
        o.protocol,
        &cs_cluster(),
        |n| smr_cluster(n, o.protocol, o.durability),
        |w, clients| BenchConfig {
            give_up: None,
            workload: w,
            clients,
            duration: o.duration,
            think_ms: o.think_ms,
            preload: o.preload,
            seed: 1,
            trim: 0.1,
            progress: false,
            key_space: None,
        },
    );
    let measured = run_sweep(&specs, &mut driver, o.progress).await?;
    Ok(ExperimentReport {
        name: "cost-of-replication".into(),
        simulated: driver.simulated(),
        machine: driver.machine(),
        points: framework::points(measured),
        comparisons: Vec::new(),
    })
}

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
    /// The driver of its points.
    pub fn driver(&self) -> SimDriver {
        SimDriver {
            cost: self.cost.clone(),
            cost_source: self.cost_source.clone(),
            jobs: self.jobs,
            multicast: false,
            window: None,
        }
    }

    /// What every point of the sweep shares.
    pub fn params(&self) -> SimParams {
        SimParams {
            duration: self.duration,
            preload: self.preload,
            think_ms: self.think_ms,
            durability: self.durability,
            cost: self.cost.clone(),
            seed: self.seed,
            multicast: false,
            window: None,
        }
    }

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

/// The sweep's points for the simulator (clusters without checkpoints, as the paper
/// took none; virtual time).
pub fn sim_points(o: &SimCostOptions) -> Vec<PointSpec> {
    points(
        &o.workloads,
        &o.clients,
        &o.replicas,
        o.protocol,
        &sim_cs_cluster(),
        |n| sim_smr_cluster(n, o.protocol, o.durability),
        |w, clients| BenchConfig {
            give_up: None,
            workload: w,
            clients,
            duration: o.duration,
            think_ms: o.think_ms,
            preload: o.preload,
            seed: o.seed,
            trim: 0.1,
            progress: false,
            key_space: None,
        },
    )
}

/// Paper 001 §V-B in the simulator: the same points as the real sweep, `jobs` at a
/// time; the report is the same as the real one's, with `simulated = true`.
pub fn cost_of_replication_sim(o: &SimCostOptions) -> anyhow::Result<ExperimentReport> {
    let driver = o.driver();
    let measured = run_sim_sweep(&sim_points(o), &driver, o.progress)?;
    Ok(ExperimentReport {
        name: "cost-of-replication".into(),
        simulated: driver.simulated(),
        machine: driver.machine(),
        points: framework::points(measured),
        comparisons: Vec::new(),
    })
}

/// Figures 5 and 6 of paper 001 from a cost-of-replication report.
pub fn cost_of_replication_figures(r: &ExperimentReport) -> Vec<(String, partita_plot::Figure)> {
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
        Workload::Query | Workload::PartitionedQuery { .. } => "queries (1000 keys)",
        Workload::Update => "single updates",
        Workload::Batch | Workload::PartitionedBatch { .. } => "batches of 7 updates",
        Workload::Mixed => "mixed",
        Workload::Dependent { .. } => "reads, inserts and deletes",
        Workload::Geo { .. } => "geo B+tree reads and writes",
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
            crate::framework::figure(
                &title("Paper 001 Figure 5: SMR versus client-server"),
                &foot,
                &fig5,
                2,
            ),
        ),
        (
            "fig6".into(),
            crate::framework::figure(
                &title("Paper 001 Figure 6: SMR with more replicas versus client-server"),
                &foot,
                &fig6,
                2,
            ),
        ),
    ]
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
        sim_point(&o.params(), &spec).unwrap()
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
        assert_eq!(files.len(), 5, "the report and two figures, SVG and PNG");
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
        let r =
            partita_smr::SequentialReplica::<partita_btree::BPlusTree>::restore(&bytes).unwrap();
        assert_eq!(r.id(), 5);
        assert_eq!(r.state().len(), 1_000);
        assert_eq!(r.state().read(1_998), Some(1_998));
        assert_eq!(r.last_instance(), 0);
    }
}
