//! `partita bench join`: what adding a replica costs on real processes. For each state
//! size, in interleaved rounds, a fresh local cluster (3 acceptors, replicas 4 and 5,
//! Ring Paxos, fsync, checkpoints every 2,000 instances) with node 6 marked `join =
//! true` is preloaded with that many B+tree entries and put under load (`partita
//! bench`'s clients); a third of the way in, node 6 is added (`partita member add`).
//! Measured: the time from the add to node 6 serving (it restores a peer's checkpoint,
//! learns the suffix and promotes itself), the checkpoint it transferred, and the
//! clients' throughput before the add, while node 6 catches up, and after it serves.
//!
//! With `--acceptor`, node 6 joins as a fourth acceptor instead (`partita member add
//! --acceptor`): a new ordering epoch. Measured: the time from the request to the
//! change applied at replica 4 (the old epoch decides it, the old leader runs Phase 1
//! of the new one and carries its commands over), and the throughput before, during
//! the change and the half second after it, and after.

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
    /// Add node 6 as an acceptor instead of a replica.
    #[arg(long)]
    pub acceptor: bool,
}

/// With `--acceptor`: the window after the change applied that counts as "during" (the
/// new epoch's Phase 1 and the commands carried over).
const ACCEPTOR_SETTLE: Duration = Duration::from_millis(500);

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct JoinRun {
    pub round: usize,
    pub entries: u64,
    /// Node 6 joined as an acceptor (else as a replica).
    pub acceptor: bool,
    /// From `member add` to node 6 serving (an acceptor: to the change applied).
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
            "round {} entries {:>9}: node 6 {} {:>7.3} s after `member add` ({} transfer(s), {:.1} MiB); \
             throughput before {:.0}, during {:.0} ({:.2}x), after {:.0} ({:.2}x) cmd/s; digests {}",
            self.round,
            self.entries,
            if self.acceptor { "voted" } else { "served" },
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
    let mut joiner = NodeSection::joining_replica(6, format!("127.0.0.1:{}", base + 6));
    if o.acceptor {
        joiner.roles = vec![partita_config::Role::Acceptor];
    }
    cfg.nodes.push(joiner);
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
        let addr = cfg.dial_addr(6).to_string();
        let add = match o.acceptor {
            true => MemberChange::AddAcceptor { node: 6, addr },
            false => MemberChange::Add {
                node: 6,
                addr,
                partition: 0,
                promote: true,
            },
        };
        let addr4 = cfg.dial_addr(4).to_string();
        partita_client::member_request(&cfg, 4, &addr4, add, Duration::from_secs(30))
            .await
            .map_err(|e| anyhow::anyhow!("member add: {e}"))?;
        let applied_at = start.elapsed();
        let served_at = loop {
            if o.acceptor {
                break applied_at;
            }
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
        // An acceptor's change settles for a moment after it applied.
        let settled = match o.acceptor {
            true => served_at + ACCEPTOR_SETTLE,
            false => served_at,
        };
        let end = duration.max(settled);
        let s6 = partita_client::node_status_of(&cfg, 6, Duration::from_secs(2))
            .await
            .context("node 6's status")?;
        // Both replicas at one instance, then compare (node 6's with replica 4's; an
        // acceptor's: replica 5's).
        let other = if o.acceptor { 5 } else { 6 };
        let mut digest_equal = false;
        for _ in 0..100 {
            let a = partita_client::node_status_of(&cfg, 4, Duration::from_secs(2)).await;
            let b = partita_client::node_status_of(&cfg, other, Duration::from_secs(2)).await;
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
            acceptor: o.acceptor,
            join_s: (served_at - added_at).as_secs_f64(),
            transferred_bytes: s6.counter("state_transfer_bytes_restored").unwrap_or(0),
            transfers: s6.counter("state_transfers_completed").unwrap_or(0),
            before_cmds_per_s: rate(Duration::ZERO, added_at),
            during_cmds_per_s: rate(added_at, settled.min(duration)),
            after_cmds_per_s: if settled < duration {
                rate(settled, end)
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
