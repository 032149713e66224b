//! A closed-loop load of any service that S-SMR or DS-SMR partitions
//! (`partita_dssmr::ObjectService`) on a real cluster: clients of
//! `partita_client::objects::ObjectClient<S>`, each issuing what a generator gives,
//! every command timed on a common clock. Chirper's load ([`crate::chirper::run_load`])
//! and the key-value store's pairs ([`run_kv_pairs`]) run on it.

use partita_client::objects::ObjectClient;
use partita_client::ClientOptions;
use partita_config::ClusterConfig;
use partita_dssmr::client::{Outcome, ProxyStats, Scheme};
use partita_dssmr::replica::data_partitions;
use partita_dssmr::{ObjectId, ObjectService, StaticMap};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How a load's clients run (the commands come from the caller).
#[derive(Clone, Debug)]
pub struct LoadShape {
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

/// One command a load's client ran: `outcome` `None` when unknown (given up).
pub struct Ran<S: ObjectService> {
    pub client: u64,
    pub cmd: S::Command,
    pub invoked: u64,
    pub returned: u64,
    pub outcome: Option<Outcome<S::Reply>>,
}

/// What a load measured, whatever the service.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadSummary {
    pub scheme: String,
    pub data_partitions: u32,
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

impl LoadSummary {
    /// The lines every load prints after its own first line.
    pub fn lines(&self) -> String {
        format!(
            "  {:.0} commands/s ({} commands); latency ms p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}; {} unknown\n  \
             proxies: {} consults, {} cache hits, {} moves ({} objects), {} retries, {} fallbacks; moves per second {:?}",
            self.throughput_cmds_per_s,
            self.commands,
            self.latency_ms_p50,
            self.latency_ms_p90,
            self.latency_ms_p99,
            self.latency_ms_max,
            self.unknown,
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

/// Run a load of `S` on `cluster`: `shape.clients` clients, objects starting where
/// `static_map` puts them (`prefetch`: the objects a client's cache starts knowing),
/// each client `i`'s `n`-th command from `next(i, n, rng)`. Times are ns since `base`.
pub async fn run_load<S, F>(
    cluster: &ClusterConfig,
    shape: &LoadShape,
    static_map: StaticMap,
    prefetch: Vec<ObjectId>,
    next: F,
    base: Instant,
) -> anyhow::Result<(LoadSummary, Vec<Ran<S>>)>
where
    S: ObjectService,
    F: Fn(usize, u64, &mut StdRng) -> S::Command + Clone + Send + Sync + 'static,
{
    anyhow::ensure!(shape.clients > 0, "a load needs clients");
    let scheme = match cluster.execution.model() {
        partita_config::ExecutionModel::Ssmr => Scheme::Ssmr,
        partita_config::ExecutionModel::Dssmr => Scheme::Dssmr,
        other => anyhow::bail!("an object load needs S-SMR or DS-SMR, not {other}"),
    };
    let end = base + shape.duration;
    let mut tasks = Vec::new();
    for i in 0..shape.clients {
        let (cluster, shape, next) = (cluster.clone(), shape.clone(), next.clone());
        let prefetch = prefetch.clone();
        tasks.push(tokio::spawn(async move {
            let seed = shape.seed.wrapping_mul(1_000_003).wrapping_add(i as u64);
            let mut rng = StdRng::seed_from_u64(seed);
            let opts = ClientOptions {
                entry_index: Some(i as u64),
                give_up: shape.give_up,
                ..ClientOptions::default()
            };
            let mut client = ObjectClient::<S>::connect(&cluster, opts, static_map, seed).await?;
            client.prefetch(prefetch);
            let mut ran = Vec::new();
            let mut moves_at = Vec::new();
            let mut n = 0u64;
            while Instant::now() < end {
                if shape.think_ms > 0 {
                    let ms = rng.gen_range(0..=shape.think_ms);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                n += 1;
                let cmd = next(i, n, &mut rng);
                let moves_before = client.stats().move_commands;
                let invoked = base.elapsed().as_nanos() as u64;
                let outcome = client.run(cmd.clone()).await.ok();
                let returned = base.elapsed().as_nanos() as u64;
                for _ in moves_before..client.stats().move_commands {
                    moves_at.push(invoked);
                }
                ran.push(Ran::<S> {
                    client: i as u64 + 1,
                    cmd,
                    invoked,
                    returned,
                    outcome,
                });
            }
            anyhow::Ok((ran, client.stats().clone(), moves_at))
        }));
    }
    let mut ran = Vec::new();
    let mut stats = ProxyStats::default();
    let mut moves_at = Vec::new();
    for t in tasks {
        let (r, s, m) = t.await??;
        ran.extend(r);
        moves_at.extend(m);
        stats += &s;
    }
    ran.sort_by_key(|r: &Ran<S>| (r.invoked, r.client));
    let total = base.elapsed();
    let lo = shape.duration.mul_f64(shape.trim).as_nanos() as u64;
    let hi = shape.duration.mul_f64(1.0 - shape.trim).as_nanos() as u64;
    let mut lat: Vec<u64> = ran
        .iter()
        .filter(|r| r.outcome.is_some() && r.invoked >= lo && r.returned <= hi)
        .map(|r| r.returned - r.invoked)
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
    let summary = LoadSummary {
        scheme: match scheme {
            Scheme::Ssmr => "S-SMR".into(),
            Scheme::Dssmr => "DS-SMR".into(),
        },
        data_partitions: data_partitions(cluster.partitioning.partitions.max(1) as usize, scheme)
            as u32,
        ordering: match cluster.ordering.multiring() {
            Some(m) => format!("multi-ring paxos ({} rings)", m.rings.len()),
            None => cluster.ordering.protocol().to_string(),
        },
        durability: cluster.cluster.durability.to_string(),
        clients: shape.clients,
        think_ms: shape.think_ms,
        duration_s: total.as_secs_f64(),
        measured_s,
        commands: lat.len() as u64,
        throughput_cmds_per_s: lat.len() as f64 / measured_s.max(1e-9),
        latency_ms_p50: at(0.5),
        latency_ms_p90: at(0.9),
        latency_ms_p99: at(0.99),
        latency_ms_max: at(1.0),
        unknown: ran.iter().filter(|r| r.outcome.is_none()).count() as u64,
        consults: stats.consults,
        cache_hits: stats.cache_hits,
        move_commands: stats.move_commands,
        objects_moved: stats.objects_moved,
        retries: stats.retries,
        fallbacks: stats.fallbacks,
        moves_per_s,
    };
    Ok((summary, ran))
}

/// The key-value store's pairs workload on S-SMR/DS-SMR (`partita bench --kv-pairs
/// N`): `pairs` pairs of keys `pair/{i}/a` and `pair/{i}/b`, each command a
/// transaction that puts both keys of a pair drawn uniformly. The keys are hashed to
/// partitions, so a pair starts split across partitions in proportion (half of them
/// with 2): S-SMR runs those at both partitions, DS-SMR moves each pair together once.
pub async fn run_kv_pairs(
    cluster: &ClusterConfig,
    shape: &LoadShape,
    pairs: u64,
) -> anyhow::Result<(LoadSummary, Vec<Ran<partita_dssmr::kv::KvObjects>>)> {
    use partita_kv::mix::{pair_keys, pair_puts};
    anyhow::ensure!(pairs > 0, "--kv-pairs needs at least one pair");
    let next = move |i: usize, n: u64, rng: &mut StdRng| {
        pair_puts(rng.gen_range(0..pairs), format!("c{i}-{n}"))
    };
    let prefetch = (0..pairs)
        .flat_map(pair_keys)
        .map(|k| partita_dssmr::kv::key_object(&k))
        .collect();
    run_load(
        cluster,
        shape,
        StaticMap::Hashed,
        prefetch,
        next,
        Instant::now(),
    )
    .await
}

/// The key-value mix with two-key transactions (`partita_kv::mix::random_command_pairs`
/// on keys `k0`..`k7`) on an S-SMR/DS-SMR cluster: what the nemesis runs there.
pub async fn run_kv_mix(
    cluster: &ClusterConfig,
    shape: &LoadShape,
    base: Instant,
) -> anyhow::Result<(LoadSummary, Vec<Ran<partita_dssmr::kv::KvObjects>>)> {
    let next = |i: usize, n: u64, rng: &mut StdRng| {
        partita_kv::mix::random_command_pairs(rng, 8, i as u64 + 1, n)
    };
    run_load(cluster, shape, StaticMap::Hashed, Vec::new(), next, base).await
}

/// Every key of a key-value S-SMR/DS-SMR cluster, read by one range that runs at every
/// data partition (through the replicated path), in key order.
pub async fn read_all_kv(cluster: &ClusterConfig) -> anyhow::Result<Vec<partita_kv::KeyValue>> {
    use partita_kv::{KvCommand, KvReply, RangeRequest};
    let opts = ClientOptions {
        give_up: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let mut c = ObjectClient::<partita_dssmr::kv::KvObjects>::connect(
        cluster,
        opts,
        StaticMap::Hashed,
        rand::random(),
    )
    .await?;
    match c
        .run(KvCommand::Range(RangeRequest::new(vec![0], vec![0])))
        .await?
    {
        Outcome::Done(KvReply::Range(r)) => Ok(r.kvs),
        other => anyhow::bail!("reading every key: {other:?}"),
    }
}
