//! `partita experiment geo` on real processes (paper 004 on this machine): the three
//! orderings of the paper's comparison on the same nodes, service and clients, in the
//! paper's three regions over the WAN emulated in the driver (no netem here), rounds
//! interleaved.
//!
//! - **GeoPaxos+**: `[ordering] protocol = "geopaxos+"` (a Multi-Paxos serializer per replica, the geo
//!   B+tree with keys `0..keys` placed by range, Europe's last);
//! - **EPaxos**: the same cluster with `ordering = "epaxos"` (`partita_node::epaxos`);
//! - **Multi-Paxos**: one stream led from Virginia over the same three nodes, paper
//!   001's B+tree preloaded with `keys` entries by the bench.
//!
//! Each point is a fresh cluster of `partita node` processes (fsync on) and
//! `clients` closed-loop clients in one region (Europe by default, think time 0..=10
//! ms), running the geo workload's local share (`geo-R@P/3`: reads are READ, GET-NEXT
//! and GET-PREV; writes UPDATE and INSERT), for `duration` with the first and last 10%
//! trimmed. The target is paper 004's: a Europe client's operation on a local object
//! within 10% of one round trip to the nearest majority (Europe–Virginia, 90 ms).

use partita_config::{ClusterConfig, Durability, EpaxosSection, OrderingSection};
use partita_consensus::Protocol;
use partita_harness::bench::{self, BenchConfig, BenchResult};
use partita_harness::launch::LocalCluster;
use partita_sim::bench::Workload;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

use crate::experiment_partition::Target;

/// The orderings compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum GeoSystem {
    #[serde(rename = "GeoPaxos+")]
    GeoPaxosPlus,
    #[serde(rename = "EPaxos")]
    Epaxos,
    #[serde(rename = "Multi-Paxos (leader Virginia)")]
    MultiPaxos,
}

impl GeoSystem {
    pub const ALL: [GeoSystem; 3] = [
        GeoSystem::GeoPaxosPlus,
        GeoSystem::Epaxos,
        GeoSystem::MultiPaxos,
    ];

    pub fn name(self) -> &'static str {
        match self {
            GeoSystem::GeoPaxosPlus => "GeoPaxos+",
            GeoSystem::Epaxos => "EPaxos",
            GeoSystem::MultiPaxos => "Multi-Paxos (leader Virginia)",
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct GeoRealOptions {
    pub rounds: u32,
    pub clients: usize,
    pub duration: Duration,
    pub keys: u64,
    pub read_percent: u32,
    pub region: String,
    pub systems: Vec<GeoSystem>,
    pub seed: u64,
    pub progress: bool,
}

impl GeoRealOptions {
    /// The paper's low-contention point at this machine's scale: 54 Europe clients,
    /// 95% reads, 3 rounds of 20 s.
    pub fn full() -> GeoRealOptions {
        GeoRealOptions {
            rounds: 3,
            clients: 54,
            duration: Duration::from_secs(20),
            keys: 3000,
            read_percent: 95,
            region: "Europe".into(),
            systems: GeoSystem::ALL.to_vec(),
            seed: 1,
            progress: false,
        }
    }

    /// A short run (one round of 6 s) to see that everything works.
    pub fn quick() -> GeoRealOptions {
        GeoRealOptions {
            rounds: 1,
            duration: Duration::from_secs(6),
            ..GeoRealOptions::full()
        }
    }
}

/// One system in one round.
#[derive(Clone, Debug, Serialize)]
pub struct GeoRealPoint {
    pub round: u32,
    pub system: GeoSystem,
    pub result: BenchResult,
}

/// The whole run, as written to JSON.
#[derive(Clone, Debug, Serialize)]
pub struct GeoRealReport {
    pub name: String,
    pub simulated: bool,
    pub emulated: String,
    pub configuration: String,
    pub commands: Vec<String>,
    pub rounds: u32,
    pub points: Vec<GeoRealPoint>,
    pub targets: Vec<Target>,
}

/// The region's part of the key space (`geo-R@P/3`: Europe is the third).
fn part_of(region: &str) -> anyhow::Result<u32> {
    partita_config::wan::PAPER_REGIONS
        .iter()
        .position(|r| r.eq_ignore_ascii_case(region))
        .map(|p| p as u32)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "region {region}: not one of the paper's ({})",
                partita_config::wan::PAPER_REGIONS.join(", ")
            )
        })
}

/// The cluster of `system`, clients in `region`.
pub fn cluster_of(system: GeoSystem, o: &GeoRealOptions) -> anyhow::Result<ClusterConfig> {
    let base = partita_harness::launch::pick_base_port();
    let id = rand::random::<u64>() >> 1;
    let mut c = match system {
        GeoSystem::GeoPaxosPlus | GeoSystem::Epaxos => {
            let mut c = ClusterConfig::paper_geo_local(base, id, o.keys);
            if system == GeoSystem::Epaxos {
                c.ordering = OrderingSection::Epaxos(EpaxosSection::with_keys(o.keys));
            }
            c
        }
        GeoSystem::MultiPaxos => {
            let mut c = ClusterConfig::paper_wan_local(base, id);
            c.ordering = OrderingSection::paxos(Protocol::MultiPaxos);
            c
        }
    };
    c.cluster.durability = Durability::Fsync;
    let c = bench::place_clients(c, Some(&o.region))?;
    ClusterConfig::parse(&c.to_toml(), "the geo experiment's cluster")
        .map_err(|e| anyhow::anyhow!("{e}"))
}

fn bench_of(system: GeoSystem, o: &GeoRealOptions, round: u32) -> anyhow::Result<BenchConfig> {
    let geo = system != GeoSystem::MultiPaxos;
    Ok(BenchConfig {
        give_up: None,
        workload: Workload::Geo {
            read_percent: o.read_percent,
            keys: partita_sim::bench::GeoKeys::Range {
                part: part_of(&o.region)?,
                parts: 3,
            },
        },
        clients: o.clients,
        duration: o.duration,
        think_ms: 10,
        preload: if geo { 0 } else { o.keys },
        seed: o.seed + u64::from(round),
        trim: 0.1,
        progress: false,
        key_space: geo.then_some(o.keys),
    })
}

/// The same run from the command line.
fn command_of(system: GeoSystem, o: &GeoRealOptions) -> String {
    let common = format!(
        "--workload geo-{}@{}/3 --clients {} --region {} --duration {}",
        o.read_percent,
        part_of(&o.region).unwrap_or(2),
        o.clients,
        o.region,
        o.duration.as_secs()
    );
    match system {
        GeoSystem::GeoPaxosPlus => {
            format!("partita bench --up --geo --key-space {} {common}", o.keys)
        }
        GeoSystem::Epaxos => format!(
            "partita bench --up --geo --epaxos --key-space {} {common}",
            o.keys
        ),
        GeoSystem::MultiPaxos => format!(
            "partita bench --up --wan --protocol multi-paxos --preload {} {common}",
            o.keys
        ),
    }
}

/// Wait until the cluster serves a client (a session opened and a read answered), so
/// that a point measures the ordering at work, not its start: leaders elected, and
/// under GeoPaxos+ every serializer's group past its first instances.
async fn wait_serving(c: &ClusterConfig, timeout: Duration) -> anyhow::Result<()> {
    use anyhow::Context;
    let opts = partita_client::ClientOptions {
        timeout: Duration::from_millis(500),
        give_up: timeout,
        ..partita_client::ClientOptions::default()
    };
    let mut client =
        partita_client::Client::<partita_btree::BPlusTree>::connect(c.clone(), opts).await?;
    client
        .execute(partita_btree::Op::Read { key: 0 })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("the cluster serves no client within {timeout:?}"))?;
    Ok(())
}

/// Run every round: in each, every system once, in order.
pub async fn geo_real(exe: &Path, o: &GeoRealOptions) -> anyhow::Result<GeoRealReport> {
    anyhow::ensure!(o.rounds > 0, "at least one round");
    anyhow::ensure!(!o.systems.is_empty(), "at least one system");
    let total = o.rounds as usize * o.systems.len();
    let mut points = Vec::new();
    let mut emulated = String::new();
    for round in 0..o.rounds {
        for &system in &o.systems {
            let dir = tempfile::tempdir()?;
            let c = partita_harness::netns::place_for_run(&cluster_of(system, o)?, dir.path())?;
            if let Some(line) = bench::wan_line(&c) {
                emulated = line;
            }
            let file = dir.path().join("cluster.toml");
            std::fs::write(&file, c.to_toml())?;
            let mut lc = LocalCluster::start_with(exe, &file, &c, dir.path(), &[], None)?;
            let res = async {
                lc.wait_ready(Duration::from_secs(30)).await?;
                wait_serving(&c, Duration::from_secs(30)).await?;
                let cfg = bench_of(system, o, round)?;
                bench::preload(&c, cfg.preload, false).await?;
                bench::run(&c, &cfg).await
            }
            .await;
            lc.stop(Duration::from_secs(10));
            let (result, _) = res?;
            if o.progress {
                eprintln!(
                    "[{}/{total}] round {} {}: {:.0} ops/s, mean {:.1} ms, p50 {:.1} ms, p99 {:.1} ms",
                    points.len() + 1,
                    round + 1,
                    system.name(),
                    result.throughput_ops_per_s,
                    result.latency_ms_mean.unwrap_or(f64::NAN),
                    result.latency_ms_p50,
                    result.latency_ms_p99
                );
            }
            points.push(GeoRealPoint {
                round,
                system,
                result,
            });
        }
    }
    let targets = targets(o, &points);
    Ok(GeoRealReport {
        name: "geo-real".into(),
        simulated: false,
        emulated,
        configuration: format!(
            "real processes on this machine (2 cores){}: 3 partita nodes, one per region \
             (California, Virginia, Europe), each an acceptor and a replica, fsync on; \
             {} closed-loop clients in {} (think time 0..=10 ms), {}% reads (READ, \
             GET-NEXT, GET-PREV) and {}% writes (UPDATE, INSERT) on {}'s third of {} keys; \
             {} s per point (first and last 10% trimmed), {} round(s), systems interleaved",
            if partita_harness::netns::current().is_some() {
                ", every node in a network namespace of its own, mutual TLS"
            } else {
                ""
            },
            o.clients,
            o.region,
            o.read_percent,
            100 - o.read_percent,
            o.region,
            o.keys,
            o.duration.as_secs(),
            o.rounds
        ),
        commands: o.systems.iter().map(|&s| command_of(s, o)).collect(),
        rounds: o.rounds,
        points,
        targets,
    })
}

/// The mean latency of `system` in each round.
fn means(points: &[GeoRealPoint], system: GeoSystem) -> Vec<f64> {
    points
        .iter()
        .filter(|p| p.system == system)
        .filter_map(|p| p.result.latency_ms_mean)
        .collect()
}

/// Paper 004's real-process target, and the comparisons beside it.
fn targets(o: &GeoRealOptions, points: &[GeoRealPoint]) -> Vec<Target> {
    targets_of_means(o, |s| means(points, s))
}

/// Per-round means as text.
fn listed(means: &[f64]) -> String {
    means
        .iter()
        .map(|m| format!("{m:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// [`targets`] from each system's mean latency per round. Each is met only if every
/// round meets it, not just the median.
fn targets_of_means(o: &GeoRealOptions, means: impl Fn(GeoSystem) -> Vec<f64>) -> Vec<Target> {
    let every_round = |t: Option<Target>| {
        t.map(|mut t| {
            t.met = t.rounds_met == t.round_ratios.len();
            t
        })
    };
    let mut out = Vec::new();
    let geo = means(GeoSystem::GeoPaxosPlus);
    // One round trip to the nearest majority, from Europe: Europe–Virginia.
    let rtt = 90.0;
    if o.region.eq_ignore_ascii_case("europe") {
        // Within 10%: mean ≤ 1.1 × 90 ms, as a ratio 99 ms / mean ≥ 1.
        out.extend(every_round(Target::of_rounds(
            format!(
                "GeoPaxos+: a {} client's local operation within 10% of one round trip \
                 to the nearest majority (ratio = 99 ms / mean latency)",
                o.region
            ),
            geo.iter().map(|m| 1.1 * rtt / m).collect(),
            1.0,
            format!("mean latency per round (ms): {}", listed(&geo)),
        )));
    }
    for other in [GeoSystem::MultiPaxos, GeoSystem::Epaxos] {
        let theirs = means(other);
        if geo.len() != theirs.len() {
            continue;
        }
        out.extend(every_round(Target::of_rounds(
            format!(
                "GeoPaxos+ faster than {} (a comparison, not a target of the issue): \
                 its mean latency / GeoPaxos+'s",
                other.name()
            ),
            theirs.iter().zip(&geo).map(|(t, g)| t / g).collect(),
            1.0,
            format!("{} mean per round (ms): {}", other.name(), listed(&theirs)),
        )));
    }
    out
}

/// The real run's figure: each system's mean and p99 latency of the Europe clients
/// (left) and throughput (right), round by round.
pub fn figures(r: &GeoRealReport) -> Vec<(String, partita_plot::Figure)> {
    use partita_plot::{Figure, Panel, Series};
    let series = |f: &dyn Fn(&BenchResult) -> f64, what: &str| -> Vec<Series> {
        GeoSystem::ALL
            .iter()
            .filter(|s| r.points.iter().any(|p| p.system == **s))
            .map(|s| Series {
                label: format!("{}{what}", s.name()),
                points: r
                    .points
                    .iter()
                    .filter(|p| p.system == *s)
                    .map(|p| (p.round as f64 + 1.0, f(&p.result)))
                    .collect(),
            })
            .collect()
    };
    let mut latency = series(&|b| b.latency_ms_mean.unwrap_or(f64::NAN), " mean");
    latency.extend(series(&|b| b.latency_ms_p99, " p99"));
    let panels = vec![
        Panel {
            title: "latency of the Europe clients' operations".into(),
            x_label: "round".into(),
            y_label: "ms".into(),
            log_x: false,
            log_y: false,
            series: latency,
        },
        Panel {
            title: "throughput".into(),
            x_label: "round".into(),
            y_label: "ops/s".into(),
            log_x: false,
            log_y: false,
            series: series(&|b| b.throughput_ops_per_s, ""),
        },
    ];
    vec![(
        "latency".into(),
        Figure {
            title: "Paper 004 on real processes: a Europe client's local operations".into(),
            footnote: format!("{}\n{}", r.configuration, r.emulated),
            panels,
            cols: 2,
        },
    )]
}

/// Writes the report as JSON and its figure beside it
/// (`FILE-latency.svg` and `.png`). Returns every file written.
pub fn write(r: &GeoRealReport, json: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    crate::framework::write_report(r, figures(r), json)
}

/// The report as text: a line per point, then the targets.
pub fn geo_real_table(r: &GeoRealReport) -> String {
    let mut s = format!("# {}\n# {}\n", r.configuration, r.emulated);
    s.push_str(
        "round  system                          ops/s   mean ms   p50 ms   p90 ms   p99 ms\n",
    );
    for p in &r.points {
        s.push_str(&format!(
            "{:>5}  {:<30} {:>7.0} {:>9.1} {:>8.1} {:>8.1} {:>8.1}\n",
            p.round + 1,
            p.system.name(),
            p.result.throughput_ops_per_s,
            p.result.latency_ms_mean.unwrap_or(f64::NAN),
            p.result.latency_ms_p50,
            p.result.latency_ms_p90,
            p.result.latency_ms_p99
        ));
    }
    for t in &r.targets {
        s.push_str(&t.summary(2));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_system_builds_a_valid_cluster_with_its_clients_in_the_region() {
        let o = GeoRealOptions::quick();
        for s in GeoSystem::ALL {
            let c = cluster_of(s, &o).unwrap();
            assert_eq!(c.wan.as_ref().unwrap().clients, vec!["Europe".to_string()]);
            assert_eq!(
                c.ordering.protocol().to_string(),
                match s {
                    GeoSystem::GeoPaxosPlus => "geopaxos+",
                    GeoSystem::Epaxos => "epaxos",
                    GeoSystem::MultiPaxos => "multi-paxos",
                }
            );
            assert!(command_of(s, &o).starts_with("partita bench --up"));
        }
        let mut bad = o.clone();
        bad.region = "Mars".into();
        assert!(cluster_of(GeoSystem::Epaxos, &bad).is_err());
    }

    #[test]
    fn the_latency_target_is_met_only_when_every_round_is_within_ten_percent() {
        let o = GeoRealOptions::full();
        let t = targets_of_means(&o, |s| match s {
            GeoSystem::GeoPaxosPlus => vec![97.0, 101.0],
            GeoSystem::MultiPaxos => vec![180.0, 185.0],
            GeoSystem::Epaxos => Vec::new(),
        });
        assert_eq!(t.len(), 2, "the target and one comparison: {t:?}");
        assert!(!t[0].met, "one round above 99 ms");
        assert_eq!(t[0].rounds_met, 1);
        assert!(t[1].met && (t[1].round_ratios[0] - 180.0 / 97.0).abs() < 1e-9);
        let t = targets_of_means(&o, |s| match s {
            GeoSystem::GeoPaxosPlus => vec![98.0, 98.9],
            _ => Vec::new(),
        });
        assert!(t[0].met && t[0].rounds_met == 2);
    }
}
