//! Chirper clients of a real S-SMR/DS-SMR cluster (`partita_client::objects::ObjectClient`
//! on Chirper, its users starting where the cluster file's `[chirper]` puts them), and
//! the closed-loop Chirper load that `partita bench` and `partita nemesis` run with
//! them ([`run_load`]).

use crate::services::chirper_params;
use anyhow::Context;
use partita_checker::chirper::ChirperEvent;
use partita_client::objects::ObjectClient;
use partita_client::{ClientError, ClientOptions};
use partita_config::ClusterConfig;
use partita_dssmr::chirper::{Chirper, ChirperCommand, Graph, Workload};
use partita_dssmr::client::{ProxyStats, Scheme};
use partita_dssmr::replica::data_partitions;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A client of a Chirper cluster: the generic object client on Chirper.
pub type ChirperClient = ObjectClient<Chirper>;

/// A client of the Chirper cluster `cluster`, its users starting where the cluster
/// file's `[chirper] placement` puts them.
pub async fn chirper_client(
    cluster: &ClusterConfig,
    opts: ClientOptions,
    seed: u64,
) -> Result<ChirperClient, ClientError> {
    let (_, static_map, _) =
        chirper_params(cluster).map_err(|e| ClientError::Rejected(e.to_string()))?;
    ObjectClient::connect(cluster, opts, static_map, seed).await
}

/// What a Chirper load's clients run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChirperMix {
    /// One of the paper's four workloads.
    Workload(Workload),
    /// The swarm's mix (every command kind, creates and deletes too, users past the
    /// graph, peers from anywhere half of the time): for the nemesis.
    Swarm,
}

impl ChirperMix {
    pub fn name(self) -> &'static str {
        match self {
            ChirperMix::Workload(w) => w.name(),
            ChirperMix::Swarm => "swarm",
        }
    }
}

/// A closed-loop Chirper load on a running cluster.
#[derive(Clone, Debug)]
pub struct ChirperLoad {
    pub mix: ChirperMix,
    pub clients: usize,
    pub duration: Duration,
    /// Each client thinks a uniform 0..=think_ms between commands.
    pub think_ms: u64,
    pub seed: u64,
    /// Share of the run cut at each end before throughput and latency are taken.
    pub trim: f64,
    /// Each command's client session gives up after this long (its outcome is then
    /// unknown).
    pub give_up: Duration,
}

/// What a Chirper load measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChirperLoadResult {
    pub workload: String,
    pub scheme: String,
    pub data_partitions: u32,
    pub users: u32,
    pub ordering: String,
    pub durability: String,
    pub clients: usize,
    pub think_ms: u64,
    pub duration_s: f64,
    pub measured_s: f64,
    /// Commands that ended with an outcome inside the measured window.
    pub commands: u64,
    pub throughput_cmds_per_s: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p90: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    /// Commands whose outcome stayed unknown (the session gave up).
    pub unknown: u64,
    /// The client proxies' counters, summed.
    pub consults: u64,
    pub cache_hits: u64,
    pub move_commands: u64,
    pub objects_moved: u64,
    pub retries: u64,
    pub fallbacks: u64,
    /// Move commands sent in each second of the run.
    pub moves_per_s: Vec<u64>,
}

impl std::fmt::Display for ChirperLoadResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "chirper {} on {} ({} data partition(s), {} users), {}, durability {}; \
             {} clients, think 0..={} ms, {:.0} s ({:.1} s measured)",
            self.workload,
            self.scheme,
            self.data_partitions,
            self.users,
            self.ordering,
            self.durability,
            self.clients,
            self.think_ms,
            self.duration_s,
            self.measured_s
        )?;
        writeln!(
            f,
            "  {:.0} commands/s ({} commands); latency ms p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}; {} unknown",
            self.throughput_cmds_per_s,
            self.commands,
            self.latency_ms_p50,
            self.latency_ms_p90,
            self.latency_ms_p99,
            self.latency_ms_max,
            self.unknown
        )?;
        write!(
            f,
            "  proxies: {} consults, {} cache hits, {} moves ({} objects), {} retries, {} fallbacks; moves per second {:?}",
            self.consults,
            self.cache_hits,
            self.move_commands,
            self.objects_moved,
            self.retries,
            self.fallbacks,
            self.moves_per_s
        )
    }
}

/// Run `load` on the Chirper cluster `cluster`: each client a [`ChirperClient`] with
/// its cache warm with the initial placement (the paper's prefetch), recording every
/// command (times in ns since the start, a common clock) in the checker's terms.
/// `base` is the clock's zero.
pub async fn run_load(
    cluster: &ClusterConfig,
    load: &ChirperLoad,
    base: Instant,
) -> anyhow::Result<(ChirperLoadResult, Vec<ChirperEvent>)> {
    anyhow::ensure!(load.clients > 0, "a Chirper load needs clients");
    let (scheme, _, spec) = chirper_params(cluster)?;
    let graph = Arc::new(Graph::generate(&spec));
    let end = base + load.duration;
    let mut tasks = Vec::new();
    for i in 0..load.clients {
        let cluster = cluster.clone();
        let load = load.clone();
        let graph = graph.clone();
        tasks.push(tokio::spawn(async move {
            let seed = load.seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let opts = ClientOptions {
                entry_index: Some(i as u64),
                give_up: load.give_up,
                ..ClientOptions::default()
            };
            let mut client = chirper_client(&cluster, opts, seed).await?;
            client.prefetch(graph.users());
            let mut events = Vec::new();
            let mut moves_at = Vec::new();
            let mut n = 0u64;
            while Instant::now() < end {
                if load.think_ms > 0 {
                    let ms = rng.gen_range(0..=load.think_ms);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                n += 1;
                let post_id = ((i as u64 + 1) << 32) | n;
                let cmd = match load.mix {
                    ChirperMix::Workload(w) => w.next(&graph, post_id, &mut rng),
                    ChirperMix::Swarm => partita_sim::ds::swarm_command(&graph, post_id, &mut rng),
                };
                let moves_before = client.stats().move_commands;
                let invoked = base.elapsed().as_nanos() as u64;
                let res = client.run(cmd.clone()).await;
                let returned = base.elapsed().as_nanos() as u64;
                for _ in moves_before..client.stats().move_commands {
                    moves_at.push(invoked);
                }
                let result =
                    match res {
                        Ok(o) => Some(partita_sim::ds::result_of(&cmd, &o).map_err(|why| {
                            anyhow::anyhow!("{cmd:?}: a member refused it: {why}")
                        })?),
                        Err(_) => None,
                    };
                events.push(ChirperEvent {
                    client: i as u64 + 1,
                    op: partita_sim::ds::op_of(&cmd),
                    invoked,
                    returned: result.as_ref().map(|_| returned),
                    result,
                });
            }
            anyhow::Ok((events, client.stats().clone(), moves_at))
        }));
    }
    let mut events = Vec::new();
    let mut stats = ProxyStats::default();
    let mut moves_at = Vec::new();
    for t in tasks {
        let (e, s, m) = t.await??;
        events.extend(e);
        moves_at.extend(m);
        stats += &s;
    }
    events.sort_by_key(|e| (e.invoked, e.client));
    let total = base.elapsed();
    let lo = load.duration.mul_f64(load.trim).as_nanos() as u64;
    let hi = load.duration.mul_f64(1.0 - load.trim).as_nanos() as u64;
    let mut lat: Vec<u64> = events
        .iter()
        .filter_map(|e| {
            let r = e.returned?;
            (e.invoked >= lo && r <= hi).then_some(r - e.invoked)
        })
        .collect();
    lat.sort_unstable();
    let at = |q: f64| {
        lat.get(((lat.len().max(1) - 1) as f64 * q) as usize)
            .map_or(0.0, |&ns| ns as f64 / 1e6)
    };
    let measured_s = (hi.saturating_sub(lo)) as f64 / 1e9;
    let seconds = total.as_secs() as usize + 1;
    let mut moves_per_s = vec![0u64; seconds];
    for t in moves_at {
        moves_per_s[((t / 1_000_000_000) as usize).min(seconds - 1)] += 1;
    }
    let data = data_partitions(cluster.partitioning.partitions.max(1) as usize, scheme) as u32;
    let result = ChirperLoadResult {
        workload: load.mix.name().into(),
        scheme: match scheme {
            Scheme::Ssmr => "S-SMR".into(),
            Scheme::Dssmr => "DS-SMR".into(),
        },
        data_partitions: data,
        users: spec.users,
        ordering: match cluster.ordering.multiring() {
            Some(m) => format!("multi-ring paxos ({} rings)", m.rings.len()),
            None => cluster.ordering.protocol().to_string(),
        },
        durability: cluster.cluster.durability.to_string(),
        clients: load.clients,
        think_ms: load.think_ms,
        duration_s: total.as_secs_f64(),
        measured_s,
        commands: lat.len() as u64,
        throughput_cmds_per_s: lat.len() as f64 / measured_s.max(1e-9),
        latency_ms_p50: at(0.5),
        latency_ms_p90: at(0.9),
        latency_ms_p99: at(0.99),
        latency_ms_max: at(1.0),
        unknown: events.iter().filter(|e| e.result.is_none()).count() as u64,
        consults: stats.consults,
        cache_hits: stats.cache_hits,
        move_commands: stats.move_commands,
        objects_moved: stats.objects_moved,
        retries: stats.retries,
        fallbacks: stats.fallbacks,
        moves_per_s,
    };
    Ok((result, events))
}

/// Read every timeline of `users` through the replicated path, one after another,
/// as a fresh client (`client` in the events): the final state, for the checker.
pub async fn read_timelines(
    cluster: &ClusterConfig,
    users: &[u64],
    client_id: u64,
    base: Instant,
) -> anyhow::Result<Vec<ChirperEvent>> {
    let opts = ClientOptions {
        give_up: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let mut c = chirper_client(cluster, opts, client_id).await?;
    let mut out = Vec::new();
    for &user in users {
        let cmd = ChirperCommand::GetTimeline { user };
        let invoked = base.elapsed().as_nanos() as u64;
        let o = c
            .run(cmd.clone())
            .await
            .with_context(|| format!("reading the timeline of {user:#x}"))?;
        let returned = base.elapsed().as_nanos() as u64;
        let result = partita_sim::ds::result_of(&cmd, &o).map_err(anyhow::Error::msg)?;
        out.push(ChirperEvent {
            client: client_id,
            op: partita_sim::ds::op_of(&cmd),
            invoked,
            returned: Some(returned),
            result: Some(result),
        });
    }
    Ok(out)
}

/// Write a Chirper history as JSON lines (the checker's format).
pub fn write_history(path: &std::path::Path, events: &[ChirperEvent]) -> anyhow::Result<()> {
    let mut w = partita_checker::chirper::ChirperHistoryWriter::create(path)
        .with_context(|| format!("creating {}", path.display()))?;
    for e in events {
        w.write(e)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}
