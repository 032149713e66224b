//! `partita bench join`: what adding a replica costs on real processes. For each state
//! size, in interleaved rounds, a fresh local cluster (3 acceptors, replicas 4 and 5,
//! Ring Paxos, fsync, checkpoints every 2,000 instances) with node 6 marked `join =
//! true` is preloaded with that many B+tree entries and put under load (`partita
//! bench`'s clients); a third of the way in, node 6 is added (`partita member add`).
//! Measured: the time from the add to node 6 serving (it restores a peer's checkpoint,
//! learns the suffix and promotes itself), the checkpoint it transferred, and the
//! clients' throughput before the add, while node 6 catches up, and after it serves.

use crate::bench::{self, BenchConfig, Workload};
use crate::launch::{pick_base_port, LocalCluster};
use anyhow::Context;
use partita_config::{ClusterConfig, Durability, NodeSection};
use partita_types::members::MemberChange;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, clap::Args)]
pub struct JoinBenchOptions {
    /// State sizes (B+tree entries preloaded), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    pub entries: Vec<u64>,
    /// Rounds; each round runs every size once, in turn.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Seconds of load per run (the add comes a third of the way in).
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// Write every run as JSON here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct JoinRun {
    pub round: usize,
    pub entries: u64,
    /// From `member add` to node 6 serving.
    pub join_s: f64,
    /// The checkpoint node 6 restored (bytes), and how many state transfers it made.
    pub transferred_bytes: u64,
    pub transfers: u64,
    /// Completed commands per second of the load's clients.
    pub before_cmds_per_s: f64,
    pub during_cmds_per_s: f64,
    pub after_cmds_per_s: f64,
    /// Node 6's digest equals replica 4's once the load stopped.
    pub digest_equal: bool,
}

impl JoinRun {
    pub fn line(&self) -> String {
        format!(
            "round {} entries {:>9}: node 6 served {:>6.2} s after `member add` ({} transfer(s), {:.1} MiB); \
             throughput before {:.0}, during {:.0} ({:.2}x), after {:.0} ({:.2}x) cmd/s; digests {}",
            self.round,
            self.entries,
            self.join_s,
            self.transfers,
            self.transferred_bytes as f64 / (1 << 20) as f64,
            self.before_cmds_per_s,
            self.during_cmds_per_s,
            self.during_cmds_per_s / self.before_cmds_per_s.max(1e-9),
            self.after_cmds_per_s,
            self.after_cmds_per_s / self.before_cmds_per_s.max(1e-9),
            if self.digest_equal { "equal" } else { "DIFFER" }
        )
    }
}

/// Run every round; `each` sees every run as it ends.
pub async fn run(
    exe: &Path,
    o: &JoinBenchOptions,
    mut each: impl FnMut(&JoinRun),
) -> anyhow::Result<Vec<JoinRun>> {
    let mut runs = Vec::new();
    for round in 1..=o.rounds {
        for &entries in &o.entries {
            let r = one(exe, o, round, entries).await?;
            each(&r);
            runs.push(r);
        }
    }
    if let Some(path) = &o.json {
        std::fs::write(path, serde_json::to_string_pretty(&runs)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(runs)
}

async fn one(
    exe: &Path,
    o: &JoinBenchOptions,
    round: usize,
    entries: u64,
) -> anyhow::Result<JoinRun> {
    let dir = tempfile::tempdir()?;
    let base = pick_base_port();
    let mut cfg = ClusterConfig::default_local(base, rand::random::<u64>() >> 1);
    cfg.cluster.durability = Durability::Fsync;
    cfg.storage.checkpoint_instances = 2_000;
    cfg.nodes.push(NodeSection::joining_replica(
        6,
        format!("127.0.0.1:{}", base + 6),
    ));
    let file = dir.path().join("cluster.toml");
    std::fs::write(&file, cfg.to_toml())?;
    let mut lc = LocalCluster::start_with(exe, &file, &cfg, dir.path(), &[], None)?;
    let result = async {
        lc.wait_ready(Duration::from_secs(30)).await?;
        bench::preload(&cfg, entries, false).await?;
        let duration = Duration::from_secs_f64(o.duration);
        let bc = BenchConfig {
            workload: Workload::Update,
            clients: o.clients,
            duration,
            think_ms: 0,
            preload: entries,
            seed: round as u64,
            trim: 0.0,
            progress: false,
            key_space: None,
            give_up: None,
        };
        let start = Instant::now();
        let load = {
            let cfg = cfg.clone();
            tokio::spawn(async move { bench::run(&cfg, &bc).await })
        };
        tokio::time::sleep(duration / 3).await;
        let added_at = start.elapsed();
        let add = MemberChange::Add {
            node: 6,
            addr: cfg.dial_addr(6).to_string(),
            partition: 0,
            promote: true,
        };
        let addr4 = cfg.dial_addr(4).to_string();
        partita_client::member_request(&cfg, 4, &addr4, add, Duration::from_secs(30))
            .await
            .map_err(|e| anyhow::anyhow!("member add: {e}"))?;
        let served_at = loop {
            let s = partita_client::node_status_of(&cfg, 6, Duration::from_secs(1)).await;
            if s.and_then(|s| s.replica_state).as_deref() == Some("serving") {
                break start.elapsed();
            }
            anyhow::ensure!(
                start.elapsed() < duration + Duration::from_secs(300),
                "node 6 never served"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let (_, records) = load.await??;
        let rate = |lo: Duration, hi: Duration| {
            let (lo, hi) = (lo.as_nanos() as u64, hi.as_nanos() as u64);
            let n = records
                .iter()
                .filter(|r| r.result.is_some() && r.ret_ns >= lo && r.ret_ns < hi)
                .count();
            n as f64 / ((hi.saturating_sub(lo)) as f64 / 1e9).max(1e-9)
        };
        let end = duration.max(served_at);
        let s6 = partita_client::node_status_of(&cfg, 6, Duration::from_secs(2))
            .await
            .context("node 6's status")?;
        // Both replicas at one instance, then compare.
        let mut digest_equal = false;
        for _ in 0..100 {
            let a = partita_client::node_status_of(&cfg, 4, Duration::from_secs(2)).await;
            let b = partita_client::node_status_of(&cfg, 6, Duration::from_secs(2)).await;
            if let (Some(a), Some(b)) = (a, b) {
                if a.executed_up_to == b.executed_up_to {
                    digest_equal = a.digest == b.digest;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::Ok(JoinRun {
            round,
            entries,
            join_s: (served_at - added_at).as_secs_f64(),
            transferred_bytes: s6.counter("state_transfer_bytes_restored").unwrap_or(0),
            transfers: s6.counter("state_transfers_completed").unwrap_or(0),
            before_cmds_per_s: rate(Duration::ZERO, added_at),
            during_cmds_per_s: rate(added_at, served_at.min(duration)),
            after_cmds_per_s: if served_at < duration {
                rate(served_at, end)
            } else {
                0.0
            },
            digest_equal,
        })
    }
    .await;
    lc.stop(Duration::from_secs(10));
    result
}
