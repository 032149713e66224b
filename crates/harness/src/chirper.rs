//! Chirper clients of a real S-SMR/DS-SMR cluster (`partita_client::objects::ObjectClient`
//! on Chirper, its users starting where the cluster file's `[chirper]` puts them), and
//! the closed-loop Chirper load that `partita bench` and `partita nemesis` run with
//! them ([`run_load`]).

use crate::objects::{LoadShape, LoadSummary};
use crate::services::chirper_params;
use anyhow::Context;
use partita_checker::chirper::ChirperEvent;
use partita_client::objects::ObjectClient;
use partita_client::{ClientError, ClientOptions};
use partita_config::ClusterConfig;
use partita_dssmr::chirper::{Chirper, ChirperCommand, Graph, Workload};
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
    /// Clients, duration, think time, seed, trim and give-up.
    pub shape: LoadShape,
}

/// What a Chirper load measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChirperLoadResult {
    pub workload: String,
    pub users: u32,
    #[serde(flatten)]
    pub summary: LoadSummary,
}

impl std::fmt::Display for ChirperLoadResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.summary;
        writeln!(
            f,
            "chirper {} on {} ({} data partition(s), {} users), {}, durability {}; \
             {} clients, think 0..={} ms, {:.0} s ({:.1} s measured)",
            self.workload,
            s.scheme,
            s.data_partitions,
            self.users,
            s.ordering,
            s.durability,
            s.clients,
            s.think_ms,
            s.duration_s,
            s.measured_s
        )?;
        write!(f, "{}", s.lines())
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
    let (_, static_map, spec) = chirper_params(cluster)?;
    let graph = Arc::new(Graph::generate(&spec));
    let (mix, g) = (load.mix, graph.clone());
    let next = move |i: usize, n: u64, rng: &mut rand::rngs::StdRng| {
        let post_id = ((i as u64 + 1) << 32) | n;
        match mix {
            ChirperMix::Workload(w) => w.next(&g, post_id, rng),
            ChirperMix::Swarm => partita_sim::ds::swarm_command(&g, post_id, rng),
        }
    };
    let users: Vec<_> = graph.users().collect();
    let (summary, ran) =
        crate::objects::run_load::<Chirper, _>(cluster, &load.shape, static_map, users, next, base)
            .await?;
    let mut events = Vec::with_capacity(ran.len());
    for r in ran {
        let result = match &r.outcome {
            Some(o) => Some(
                partita_sim::ds::result_of(&r.cmd, o)
                    .map_err(|why| anyhow::anyhow!("{:?}: a member refused it: {why}", r.cmd))?,
            ),
            None => None,
        };
        events.push(ChirperEvent {
            client: r.client,
            op: partita_sim::ds::op_of(&r.cmd),
            invoked: r.invoked,
            returned: result.as_ref().map(|_| r.returned),
            result,
        });
    }
    let result = ChirperLoadResult {
        workload: load.mix.name().into(),
        users: spec.users,
        summary,
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
