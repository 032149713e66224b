//! `partita nemesis`: faults injected into a live cluster of real processes while
//! closed-loop clients record a history, then the verdict.
//!
//! The nemesis owns its cluster (a [`LocalCluster`] of `partita node` processes on
//! 127.0.0.1). On a schedule it SIGKILLs and restarts the coordinator, an acceptor or
//! a replica, or pauses the coordinator (SIGSTOP, then SIGCONT), one fault at a time so
//! that a majority of acceptors is always up. Meanwhile the clients of `partita bench`
//! run the mixed workload with a recorded history. Afterwards:
//!
//! 1. the history is linearizable, judged with the final contents read through the
//!    replicated path (so no acknowledged insert may be missing);
//! 2. the replicas converge (same digest at the same instance);
//! 3. the whole cluster is stopped and started again on the same data directories, and
//!    the contents read then must equal the contents before: every acknowledged write
//!    survived a full restart.
//!
//! For each coordinator kill it measures the time from the kill to the next decided
//! instance (any node reporting itself coordinator with a higher decided instance).
//!
//! On a GeoPaxos+ cluster (paper 004, `[ordering] protocol = "geopaxos+"`: every node an acceptor of every
//! serializer's group, a replica, and the first leader of its own serializer) every
//! node fault may hit any node, since each one leads a serializer; the clients run the
//! geo B+tree's operations (reads, updates, inserts, next and previous) from every
//! region, the final contents are read key by key (the geo B+tree answers no ranges),
//! and the history starts from the tree the cluster file loads. No failover time is
//! measured there: no single leader takes over.

use crate::bench::{self, BenchConfig, BenchResult, Workload};
use crate::launch::LocalCluster;
use anyhow::{bail, Context};
use partita_btree::{Op, OpResult};
use partita_client::{Client, ClientOptions};
use partita_config::{ClusterConfig, Role};
use partita_types::NodeId;
use partita_wire::NodeStatus;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL the node that coordinates, restart it later on its data directory.
    KillCoordinator,
    /// SIGKILL an acceptor that does not coordinate, restart it later.
    KillAcceptor,
    /// SIGKILL a replica, restart it later.
    KillReplica,
    /// SIGSTOP the coordinator, SIGCONT it later.
    PauseCoordinator,
    /// Network (`--netns`): the coordinator neither hears nor reaches any other node;
    /// clients still reach it.
    IsolateCoordinator,
    /// Network (`--netns`): the cluster split in two, the coordinator and one other
    /// node on the minority side, the rest on the other.
    SplitCluster,
    /// Network (`--netns`): one direction only: what the coordinator sends to other
    /// nodes is lost, what they send to it arrives.
    CutCoordinatorOut,
    /// Network (`--netns`): every node loses a fifth of the packets it receives.
    LossyNetwork,
    /// Membership (Jepsen's etcd `member` nemesis, as a replacement), replicas and
    /// acceptors in turn. A new node (a fresh id, its own copy of the cluster file
    /// with it marked `join = true`) starts and is added (`partita member add`, or
    /// `member add --acceptor`, which starts an ordering epoch); a replica serves once
    /// caught up. Then one of the current nodes of that kind is removed (`partita
    /// member remove [--acceptor]`) and stops by itself. Other faults' victims follow
    /// the configuration as it is now (an acceptor kill keeps a majority of the
    /// current acceptors). Ring Paxos and Multi-Paxos, partitioned or not (a replica
    /// is replaced within its partition), and Multi-Ring Paxos (replicas only: its
    /// rings' acceptors stay); not in the default set.
    Member,
}

impl Fault {
    pub const ALL: [Fault; 4] = [
        Fault::KillCoordinator,
        Fault::KillAcceptor,
        Fault::KillReplica,
        Fault::PauseCoordinator,
    ];

    /// The faults of the network, which need a run on network namespaces.
    pub const NETWORK: [Fault; 4] = [
        Fault::IsolateCoordinator,
        Fault::SplitCluster,
        Fault::CutCoordinatorOut,
        Fault::LossyNetwork,
    ];

    pub fn is_network(self) -> bool {
        Fault::NETWORK.contains(&self)
    }

    /// Whether the fault takes the coordinator away (its failover time is measured).
    pub fn hits_coordinator(self) -> bool {
        matches!(
            self,
            Fault::KillCoordinator
                | Fault::PauseCoordinator
                | Fault::IsolateCoordinator
                | Fault::SplitCluster
                | Fault::CutCoordinatorOut
        )
    }
}

/// The share of packets [`Fault::LossyNetwork`] drops, in percent.
pub const LOSS_PERCENT: u8 = 20;

#[derive(Clone, Debug)]
pub struct NemesisConfig {
    pub faults: Vec<Fault>,
    /// Time between the end of one fault and the start of the next.
    pub interval: Duration,
    /// How long a killed node stays down, or a paused one stopped.
    pub down_for: Duration,
    pub bench: BenchConfig,
    /// Write the history here (JSON lines).
    pub history: Option<PathBuf>,
    /// Faults injected together, on distinct nodes (1: one at a time). Several may take
    /// a majority of acceptors down for a while: safety must hold regardless, and the
    /// cluster must recover once they are healed.
    pub together: usize,
    /// Seeds the nodes hit and the times between faults (`interval` × 0.5..1.5).
    pub seed: u64,
}

/// One injected fault and what it cost.
#[derive(Clone, Debug, Serialize)]
pub struct Injected {
    pub at_s: f64,
    pub fault: Fault,
    pub node: NodeId,
    /// Kill or pause of the coordinator: the failover time, from the kill (or stop)
    /// to the first value proposed under a newer ballot that a replica delivered, as
    /// the replicas' decided streams stamp it (`NodeStatus::delivered_ballots`); a node
    /// that only campaigns does not count. `None`: none within the limit.
    pub next_decision_ms: Option<f64>,
    /// [`Fault::Member`]: the node that replaced `node`, and whether as an acceptor
    /// (else as a replica).
    pub replaced_by: Option<Replacement>,
}

/// What a [`Fault::Member`] did: `node` joined in place of the fault's node.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Replacement {
    pub node: NodeId,
    pub acceptor: bool,
}

/// A check that did not pass, and whether it found something wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "message")]
pub enum Failed {
    /// The check found what a correct cluster never does: a history no linearization
    /// explains, replicas whose digests differ at the same instance, an acknowledged
    /// write gone after a restart. This is what a control must see.
    Violation(String),
    /// The check could not judge (replicas that did not catch up in time, no answer
    /// after the restart, a search that gave up): it says nothing about correctness.
    Undecided(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Violation(m) => write!(f, "violation: {m}"),
            Failed::Undecided(m) => write!(f, "undecided: {m}"),
        }
    }
}

/// The three checks' names, as reports and [`NemesisReport::violations`] give them.
pub const LINEARIZABLE: &str = "linearizable";
pub const CONVERGED: &str = "replicas converge";
pub const SURVIVED_RESTART: &str = "acknowledged writes survive a full restart";

#[derive(Clone, Debug, Serialize)]
pub struct NemesisReport {
    pub injected: Vec<Injected>,
    pub load: LoadResult,
    pub operations: usize,
    pub unknown_outcomes: usize,
    pub linearizable: Result<String, Failed>,
    pub converged: Result<String, Failed>,
    pub survived_restart: Result<String, Failed>,
    /// Failover times of the coordinator faults (`None`: none measured).
    pub failover: Option<FailoverSummary>,
}

/// What the clients ran during the faults.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadResult {
    Btree(Box<BenchResult>),
    Chirper(Box<crate::chirper::ChirperLoadResult>),
    Kv(Box<crate::kvload::KvLoadResult>),
    /// The key-value store on S-SMR or DS-SMR.
    Objects(Box<crate::objects::LoadSummary>),
}

impl std::fmt::Display for LoadResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadResult::Btree(b) => write!(f, "{b}"),
            LoadResult::Chirper(c) => write!(f, "{c}"),
            LoadResult::Kv(k) => write!(f, "{k}"),
            LoadResult::Objects(o) => write!(
                f,
                "the key-value store on {} ({} data partition(s)), {}, {} clients\n{}",
                o.scheme,
                o.data_partitions,
                o.ordering,
                o.clients,
                o.lines()
            ),
        }
    }
}

/// Failover times over a run's coordinator faults (nearest-rank percentiles).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailoverSummary {
    pub count: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl FailoverSummary {
    /// Over the coordinator faults of `injected` that were measured.
    pub fn of_injected(injected: &[Injected]) -> Option<FailoverSummary> {
        FailoverSummary::of(
            &injected
                .iter()
                .filter_map(|i| i.next_decision_ms)
                .collect::<Vec<_>>(),
        )
    }

    pub fn of(times_ms: &[f64]) -> Option<FailoverSummary> {
        let mut v = times_ms.to_vec();
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        (!v.is_empty()).then(|| FailoverSummary {
            count: v.len(),
            p50_ms: rank(0.5),
            p99_ms: rank(0.99),
            max_ms: v[v.len() - 1],
        })
    }
}

impl NemesisReport {
    pub fn passed(&self) -> bool {
        self.linearizable.is_ok() && self.converged.is_ok() && self.survived_restart.is_ok()
    }

    fn checks(&self) -> [(&'static str, &Result<String, Failed>); 3] {
        [
            (LINEARIZABLE, &self.linearizable),
            (CONVERGED, &self.converged),
            (SURVIVED_RESTART, &self.survived_restart),
        ]
    }

    /// The checks that found a violation (not those that could not judge), with what
    /// they found.
    pub fn violations(&self) -> Vec<(&'static str, &str)> {
        self.checks()
            .into_iter()
            .filter_map(|(name, r)| match r {
                Err(Failed::Violation(m)) => Some((name, m.as_str())),
                _ => None,
            })
            .collect()
    }

    /// Failover times (ms) of the coordinator faults.
    pub fn failover_ms(&self) -> Vec<f64> {
        self.injected
            .iter()
            .filter_map(|i| i.next_decision_ms)
            .collect()
    }
}

impl std::fmt::Display for NemesisReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "faults")?;
        for i in &self.injected {
            match i.fault {
                Fault::LossyNetwork => write!(
                    f,
                    "  {:7.2} s  {:?} ({LOSS_PERCENT}% of packets received, every node)",
                    i.at_s, i.fault
                )?,
                _ => write!(f, "  {:7.2} s  {:?} node {}", i.at_s, i.fault, i.node)?,
            }
            if let Some(r) = i.replaced_by {
                let kind = if r.acceptor { "acceptor" } else { "replica" };
                write!(f, " replaced by {kind} {}", r.node)?;
            }
            match i.next_decision_ms {
                Some(ms) => writeln!(f, "  next decision after {ms:.0} ms")?,
                None => writeln!(f)?,
            }
        }
        let mut fo = self.failover_ms();
        fo.sort_by(f64::total_cmp);
        if let Some(s) = &self.failover {
            writeln!(
                f,
                "coordinator faults: {} measured of {}; failover (fault to the first value of a \
                 newer ballot delivered, from the replicas' decided streams) p50 {:.0} ms, \
                 p99 {:.0} ms, max {:.0} ms",
                s.count,
                self.injected
                    .iter()
                    .filter(|i| i.fault.hits_coordinator())
                    .count(),
                s.p50_ms,
                s.p99_ms,
                s.max_ms
            )?;
        }
        writeln!(f, "load\n{}", self.load)?;
        writeln!(
            f,
            "verdict ({} operations, {} with unknown outcome)",
            self.operations, self.unknown_outcomes
        )?;
        for (what, r) in self.checks() {
            match r {
                Ok(s) => writeln!(f, "  ok    {what}: {s}")?,
                Err(e) => writeln!(f, "  FAIL  {what}: {e}")?,
            }
        }
        Ok(())
    }
}

async fn statuses(c: &ClusterConfig, timeout: Duration) -> Vec<(NodeId, Option<NodeStatus>)> {
    let mut v = Vec::new();
    for n in &c.nodes {
        v.push((n.id, partita_client::node_status_of(c, n.id, timeout).await));
    }
    v
}

/// The node that coordinates now (the highest decided instance among those that say
/// they coordinate), and that instance.
async fn coordinator(c: &ClusterConfig) -> Option<(NodeId, u64)> {
    statuses(c, Duration::from_millis(300))
        .await
        .into_iter()
        .filter_map(|(id, s)| {
            let s = s?;
            s.coordinator.then_some((id, s.decided_up_to.unwrap_or(0)))
        })
        .max_by_key(|&(_, d)| d)
}

/// The newest ballot any replica's decided stream shows (`Ballot::ZERO`: none yet).
async fn delivered_ballot(c: &ClusterConfig) -> partita_types::Ballot {
    let mut newest = partita_types::Ballot::ZERO;
    for id in c.executors() {
        if let Some(s) = partita_client::node_status_of(c, id, Duration::from_millis(300)).await {
            if let Some(d) = s.delivered_ballots.last() {
                newest = newest.max(d.ballot);
            }
        }
    }
    newest
}

/// Milliseconds since the Unix epoch (the clock the nodes stamp their decided streams
/// with: the same machine's).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The failover time after the leader of ballot `old` was killed or stopped at
/// `fault_unix_ms`: the earliest delivery, at any replica, of a value proposed under a
/// newer ballot, taken from the replicas' own stamps. Polls the replicas until one
/// shows it (the poll's period does not enter the measure).
async fn failover(
    c: &ClusterConfig,
    old: partita_types::Ballot,
    fault_unix_ms: u64,
    limit: Duration,
) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let mut first: Option<u64> = None;
        for id in c.executors() {
            if let Some(s) = partita_client::node_status_of(c, id, Duration::from_millis(100)).await
            {
                if let Some(d) = s.delivered_ballots.iter().find(|d| d.ballot > old) {
                    first = Some(first.map_or(d.unix_ms, |f| f.min(d.unix_ms)));
                }
            }
        }
        if let Some(at) = first {
            return Some(Duration::from_millis(at.saturating_sub(fault_unix_ms)));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

fn signal(pid: u32, sig: i32) {
    // The pid is our own child (a node this process started).
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

struct Nemesis<'a> {
    lc: &'a mut LocalCluster,
    exe: PathBuf,
    node_args: Vec<String>,
    /// Nodes a [`Fault::Member`] added, with their own cluster files.
    joined: Vec<(NodeId, PathBuf)>,
    /// How many [`Fault::Member`] replacements were made: even ones replace a
    /// replica, odd ones an acceptor (either, when there is none of the other kind).
    replaced: usize,
}

/// How long a membership change of [`Fault::Member`] may take.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(60);

impl<'a> Nemesis<'a> {
    fn new(lc: &'a mut LocalCluster, exe: &Path, node_args: &[String]) -> Nemesis<'a> {
        Nemesis {
            lc,
            exe: exe.to_path_buf(),
            node_args: node_args.to_vec(),
            joined: Vec::new(),
            replaced: 0,
        }
    }

    fn pid(&self, id: NodeId) -> Option<u32> {
        self.lc
            .children
            .iter()
            .find(|(n, _)| *n == id)
            .map(|(_, c)| c.id())
    }

    fn kill(&mut self, id: NodeId) {
        if let Some((_, c)) = self.lc.children.iter_mut().find(|(n, _)| *n == id) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn restart(&mut self, id: NodeId) -> anyhow::Result<()> {
        let Some((_, file)) = self.joined.iter().find(|(n, _)| *n == id) else {
            return self.lc.spawn(&self.exe, id, &self.node_args);
        };
        let child =
            crate::launch::spawn_node(&self.exe, file, id, &self.lc.data_dir, &self.node_args)?;
        match self.lc.children.iter_mut().find(|(n, _)| *n == id) {
            Some(slot) => slot.1 = child,
            None => self.lc.children.push((id, child)),
        }
        Ok(())
    }

    /// [`Fault::Member`]: a new node of `victim`'s kind joins (started on a copy of
    /// the cluster file naming it `join = true`, added; a replica serves once caught
    /// up), then `victim` is removed and its process stops by itself; the new node's id. An acceptor is
    /// replaced when `acceptor` (the victim is then only an acceptor: a node that
    /// stays a replica would not stop), a replica otherwise. `lc.cluster` follows: the
    /// new node in, the victim out (the cluster file itself stays as it is).
    async fn replace(&mut self, victim: NodeId, acceptor: bool) -> anyhow::Result<NodeId> {
        let live = self.lc.cluster.clone();
        let file_cfg = ClusterConfig::load(&self.lc.cluster_file)?;
        let used = live
            .nodes
            .iter()
            .chain(&file_cfg.nodes)
            .map(|n| n.id)
            .chain(self.joined.iter().map(|(n, _)| *n))
            .max()
            .unwrap_or(0);
        let id = used + 1;
        // `partita up`'s layout: node N on the first node's port block, at BASE + N.
        let first = file_cfg.dial_addr(1).to_string();
        let (host, port) = first
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u32>().ok()?)))
            .context("the first node's address")?;
        let port = port - 1 + id;
        anyhow::ensure!(port <= u32::from(u16::MAX), "no port left for node {id}");
        let mut node = partita_config::NodeSection::joining_replica(id, format!("{host}:{port}"));
        if acceptor {
            node.roles = vec![Role::Acceptor];
        }
        // Partitioned: a replica is replaced within its partition.
        let partition = live
            .node(victim)
            .and_then(|n| n.partition)
            .filter(|_| !acceptor);
        node.partition = partition;
        let mut own = file_cfg.clone();
        own.nodes.push(node.clone());
        let file = self.lc.data_dir.join(format!("cluster-join-{id}.toml"));
        std::fs::write(&file, own.to_toml())?;
        self.joined.push((id, file));
        self.restart(id)?;
        let addr = node.addr.clone();
        let serving: Vec<NodeId> = live
            .executors()
            .into_iter()
            .filter(|&n| n != victim)
            .collect();
        let ask = |change: partita_types::members::MemberChange| {
            let live = live.clone();
            let serving = serving.clone();
            async move {
                let t0 = Instant::now();
                loop {
                    for &via in &serving {
                        let a = live.dial_addr(via).to_string();
                        match partita_client::member_request(
                            &live,
                            via,
                            &a,
                            change.clone(),
                            Duration::from_secs(10),
                        )
                        .await
                        {
                            Ok(_) => return Ok(()),
                            Err(e)
                                if e.contains("already exists")
                                    || e.contains("member not found") =>
                            {
                                return Ok(())
                            }
                            Err(_) => {}
                        }
                    }
                    if t0.elapsed() > MEMBER_TIMEOUT {
                        bail!("{change}: no replica ordered it within {MEMBER_TIMEOUT:?}");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        use partita_types::members::MemberChange;
        ask(match acceptor {
            true => MemberChange::AddAcceptor { node: id, addr },
            false => MemberChange::Add {
                node: id,
                addr,
                partition: partition.unwrap_or(0),
                promote: true,
            },
        })
        .await?;
        let mut with = live.clone();
        let mut joined = node;
        joined.join = false;
        with.nodes.push(joined);
        let t0 = Instant::now();
        // An acceptor takes part once it knows the epoch its addition starts (it has
        // an acceptor role, and a promise); a replica once caught up.
        loop {
            let s = partita_client::node_status_of(&with, id, Duration::from_secs(1)).await;
            let ready = match acceptor {
                true => s.is_some_and(|s| s.promised.is_some()),
                false => s.and_then(|s| s.replica_state).as_deref() == Some("serving"),
            };
            if ready {
                break;
            }
            let what = if acceptor { "vote" } else { "serve" };
            anyhow::ensure!(
                t0.elapsed() < MEMBER_TIMEOUT,
                "node {id} did not {what} within {MEMBER_TIMEOUT:?} of its addition"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ask(match acceptor {
            true => MemberChange::RemoveAcceptor { node: victim },
            false => MemberChange::Remove { node: victim },
        })
        .await?;
        let t0 = Instant::now();
        loop {
            let gone = match self.lc.children.iter_mut().find(|(n, _)| *n == victim) {
                Some((_, c)) => c.try_wait()?.is_some(),
                None => true,
            };
            if gone {
                break;
            }
            anyhow::ensure!(
                t0.elapsed() < MEMBER_TIMEOUT,
                "node {victim} did not stop after its removal"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.lc.children.retain(|(n, _)| *n != victim);
        with.nodes.retain(|n| n.id != victim);
        self.lc.cluster = with;
        Ok(id)
    }

    /// The faults of a run of `duration`: `cfg.together` at a time, with random pauses
    /// between them, none starting too late to heal before the end. Round `i` takes
    /// `cfg.together` consecutive kinds of the list from kind `i` on (the window slides
    /// by one kind per round), so that each kind meets several others over a run: with
    /// a fixed partition into groups, two kinds that need the same node (two
    /// coordinator faults) would always meet, and the second would never run.
    async fn schedule(
        &mut self,
        cfg: &NemesisConfig,
        duration: Duration,
    ) -> anyhow::Result<Vec<Injected>> {
        if cfg.faults.contains(&Fault::Member) {
            if let Err(why) = self.lc.cluster.member_changes() {
                bail!("the member fault: {why}");
            }
        }
        let t0 = Instant::now();
        let mut injected = Vec::new();
        let stop_at = duration.saturating_sub(cfg.down_for);
        tokio::time::sleep(cfg.interval.min(duration / 4)).await;
        let mut i = 0;
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        while t0.elapsed() + cfg.down_for < stop_at {
            let faults: Vec<Fault> = (0..cfg.together.max(1))
                .map(|k| cfg.faults[(i + k) % cfg.faults.len()])
                .collect();
            i += 1;
            injected.extend(self.inject(&faults, cfg.down_for, t0, &mut rng).await?);
            tokio::time::sleep(cfg.interval.mul_f64(0.5 + rng.gen::<f64>())).await;
        }
        Ok(injected)
    }

    /// Stop every node, start them all again on their data directories, wait until
    /// they serve.
    async fn restart_all(&mut self) -> anyhow::Result<()> {
        let cluster = self.lc.cluster.clone();
        self.lc.stop(Duration::from_secs(5));
        for id in cluster.nodes.iter().map(|n| n.id) {
            self.restart(id)?;
        }
        self.lc.wait_ready(Duration::from_secs(30)).await
    }

    /// Inject `faults` together, each on a node of its own (a fault whose kind of
    /// node is used up is left out), keep them for `down_for`, then heal them all. A
    /// coordinator fault's failover time is measured (see [`Injected`]).
    async fn inject(
        &mut self,
        faults: &[Fault],
        down_for: Duration,
        t0: Instant,
        rng: &mut StdRng,
    ) -> anyhow::Result<Vec<Injected>> {
        let cluster = self.lc.cluster.clone();
        let (leader, _) = coordinator(&cluster)
            .await
            .unwrap_or((cluster.cluster.coordinator.unwrap_or(1), 0));
        let old_ballot = delivered_ballot(&cluster).await;
        let acceptors: Vec<NodeId> = cluster
            .nodes
            .iter()
            .filter(|n| n.roles.contains(&Role::Acceptor))
            .map(|n| n.id)
            .collect();
        let replicas = cluster.executors();
        let net = if faults.iter().any(|f| f.is_network()) {
            Some(crate::netns::current().context(
                "network faults need a cluster on network namespaces (partita nemesis --netns)",
            )?)
        } else {
            None
        };
        let all: Vec<NodeId> = cluster.nodes.iter().map(|n| n.id).collect();
        // GeoPaxos+: every node leads a serializer, votes in every group and executes.
        let geo = cluster.ordering.is_geo();
        let mut taken: Vec<NodeId> = Vec::new();
        let mut chosen: Vec<(Fault, NodeId)> = Vec::new();
        for &fault in faults {
            let candidates: Vec<NodeId> = match fault {
                Fault::KillCoordinator
                | Fault::PauseCoordinator
                | Fault::IsolateCoordinator
                | Fault::SplitCluster
                | Fault::CutCoordinatorOut
                | Fault::KillAcceptor
                | Fault::KillReplica
                    if geo =>
                {
                    all.clone()
                }
                Fault::KillCoordinator
                | Fault::PauseCoordinator
                | Fault::IsolateCoordinator
                | Fault::SplitCluster
                | Fault::CutCoordinatorOut => vec![leader],
                Fault::KillAcceptor => acceptors.iter().copied().filter(|&a| a != leader).collect(),
                Fault::KillReplica => replicas.clone(),
                // The node to replace (not another fault's node): a replica or a
                // node that is only an acceptor, in turn, any of them (the file's
                // too: clients follow the configuration, and the final checks read
                // through the nodes of the moment).
                Fault::Member => {
                    let only_acceptors: Vec<NodeId> = cluster
                        .nodes
                        .iter()
                        .filter(|n| n.roles == [Role::Acceptor])
                        .map(|n| n.id)
                        .collect();
                    let (r, mut a) = (replicas.clone(), only_acceptors);
                    // Multi-Ring Paxos: the rings' acceptors stay (replicas only).
                    if cluster.acceptor_changes().is_err() {
                        a.clear();
                    }
                    match self.replaced % 2 {
                        0 if !r.is_empty() => r,
                        _ if !a.is_empty() => a,
                        _ => r,
                    }
                }
                // Every node; recorded as node 0.
                Fault::LossyNetwork => {
                    if chosen.iter().all(|(f, _)| *f != Fault::LossyNetwork) {
                        chosen.push((fault, 0));
                    }
                    continue;
                }
            };
            let free: Vec<NodeId> = candidates
                .into_iter()
                .filter(|n| !taken.contains(n))
                .collect();
            if free.is_empty() {
                continue;
            }
            let node = free[rng.gen_range(0..free.len())];
            taken.push(node);
            chosen.push((fault, node));
        }
        let started = Instant::now();
        let at = unix_ms();
        let at_s = t0.elapsed().as_secs_f64();
        let mut paused = Vec::new();
        // Per node: packets dropped from these nodes, to these nodes, and a share of all.
        let mut blocked: std::collections::BTreeMap<
            NodeId,
            (
                std::collections::BTreeSet<NodeId>,
                std::collections::BTreeSet<NodeId>,
                u8,
            ),
        > = Default::default();
        let others =
            |n: NodeId| -> Vec<NodeId> { all.iter().copied().filter(|&o| o != n).collect() };
        for &(fault, node) in &chosen {
            match fault {
                Fault::PauseCoordinator => {
                    let pid = self.pid(node).context("no such node")?;
                    signal(pid, libc::SIGSTOP);
                    paused.push(pid);
                }
                Fault::IsolateCoordinator => {
                    let b = blocked.entry(node).or_default();
                    b.0.extend(others(node));
                    b.1.extend(others(node));
                }
                Fault::CutCoordinatorOut => {
                    blocked.entry(node).or_default().1.extend(others(node));
                }
                Fault::SplitCluster => {
                    // The coordinator and one other node, against the rest (both
                    // sides drop what comes from the other).
                    let rest = others(node);
                    let mate = rest[rng.gen_range(0..rest.len())];
                    let minority = [node, mate];
                    let majority: Vec<NodeId> =
                        rest.iter().copied().filter(|&o| o != mate).collect();
                    for &m in &minority {
                        let b = blocked.entry(m).or_default();
                        b.0.extend(&majority);
                        b.1.extend(&majority);
                    }
                    for &m in &majority {
                        let b = blocked.entry(m).or_default();
                        b.0.extend(minority);
                        b.1.extend(minority);
                    }
                }
                Fault::LossyNetwork => {
                    for &n in &all {
                        blocked.entry(n).or_default().2 = LOSS_PERCENT;
                    }
                }
                Fault::KillCoordinator | Fault::KillAcceptor | Fault::KillReplica => {
                    self.kill(node)
                }
                // After the others heal, below.
                Fault::Member => {}
            }
        }
        if let Some(net) = net {
            for (&n, (from, to, loss)) in &blocked {
                let from: Vec<NodeId> = from.iter().copied().collect();
                let to: Vec<NodeId> = to.iter().copied().collect();
                net.block(n, &from, &to, *loss)?;
            }
        }
        let leader_hit = !geo && chosen.iter().any(|(f, _)| f.hits_coordinator());
        let failover_ms = if leader_hit {
            let limit = down_for.max(Duration::from_secs(3));
            failover(&cluster, old_ballot, at, limit)
                .await
                .map(|d| d.as_secs_f64() * 1e3)
        } else {
            None
        };
        tokio::time::sleep(down_for.saturating_sub(started.elapsed())).await;
        for pid in paused {
            signal(pid, libc::SIGCONT);
        }
        if let Some(net) = net {
            for &n in blocked.keys() {
                net.heal(n)?;
            }
        }
        for &(fault, node) in &chosen {
            if matches!(
                fault,
                Fault::KillCoordinator | Fault::KillAcceptor | Fault::KillReplica
            ) {
                self.restart(node)?;
            }
        }
        let mut replacements = Vec::new();
        for &(fault, node) in &chosen {
            if fault == Fault::Member {
                let acceptor = cluster
                    .node(node)
                    .is_some_and(|n| n.roles == [Role::Acceptor]);
                let by = self.replace(node, acceptor).await?;
                self.replaced += 1;
                replacements.push((node, Replacement { node: by, acceptor }));
            }
        }
        Ok(chosen
            .into_iter()
            .map(|(fault, node)| Injected {
                at_s,
                fault,
                node,
                next_decision_ms: fault.hits_coordinator().then_some(failover_ms).flatten(),
                replaced_by: replacements
                    .iter()
                    .find(|(n, _)| fault == Fault::Member && *n == node)
                    .map(|(_, r)| *r),
            })
            .collect())
    }
}

/// Read every entry through the replicated path.
pub async fn read_all(cluster: &ClusterConfig) -> anyhow::Result<Vec<(u64, u64)>> {
    let opts = ClientOptions {
        give_up: Duration::from_secs(30),
        ..ClientOptions::default()
    };
    let mut client = Client::<partita_btree::BPlusTree>::connect(cluster.clone(), opts).await?;
    match client
        .execute(Op::Query {
            min: 0,
            max: u64::MAX,
        })
        .await?
    {
        OpResult::Entries(e) => Ok(e),
        other => bail!("a whole-range query returned {other:?}"),
    }
}

/// The final contents through the replicated path: one whole-range query, or on a
/// GeoPaxos+ cluster (whose tree answers no ranges) a read of every key of the bench's
/// key space, by 8 clients at once spread over the replicas.
pub async fn final_contents(
    cluster: &ClusterConfig,
    bench: &BenchConfig,
) -> anyhow::Result<Vec<(u64, u64)>> {
    if !cluster.ordering.is_geo() {
        return read_all(cluster).await;
    }
    let keys = bench
        .key_space
        .context("a GeoPaxos+ run needs the bench's key space")?;
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let cluster = cluster.clone();
        tasks.push(tokio::spawn(async move {
            let opts = ClientOptions {
                give_up: Duration::from_secs(30),
                entry_index: Some(t),
                ..ClientOptions::default()
            };
            let mut c = Client::<partita_btree::BPlusTree>::connect(cluster, opts).await?;
            let mut got = Vec::new();
            for key in (t..keys).step_by(8) {
                match c.execute(Op::Read { key }).await? {
                    OpResult::Value(Some(v)) => got.push((key, v)),
                    OpResult::Value(None) => {}
                    other => bail!("a read of key {key} answered {other:?}"),
                }
            }
            anyhow::Ok(got)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.context("a reading task")??);
    }
    all.sort_unstable();
    Ok(all)
}

/// How long replicas must hold different digests at one position, with nothing
/// changing, before [`converged`] calls it a divergence instead of waiting out its
/// limit (see there).
pub const DIVERGED_AFTER: Duration = Duration::from_secs(10);

/// Wait until every replica executed the same instance (under Multi-Ring Paxos, every
/// replica of a partition its partition's furthest, steady) and the replicas of each
/// partition hold one digest; return what was compared.
///
/// Replicas at the same position may still differ for a moment: an execution model
/// that holds a delivered command until other partitions' signals arrive (DS-SMR's
/// execution atomicity) has not applied it yet, and the status does not say so. So a
/// difference is a violation only once the same statuses (positions and digests) have
/// held for [`DIVERGED_AFTER`], or if it is still there when `limit` runs out.
pub async fn converged(cluster: &ClusterConfig, limit: Duration) -> Result<String, Failed> {
    if cluster.ordering.is_geo() {
        return geo_converged(cluster, limit).await;
    }
    let t0 = Instant::now();
    let mut last = String::new();
    let mut previous = None;
    let mut differing: Option<String> = None;
    let mut differing_since = None;
    let partition_of = |node: NodeId| cluster.node(node).and_then(|n| n.partition);
    while t0.elapsed() < limit {
        let st = statuses(cluster, Duration::from_secs(1)).await;
        let reps: Vec<&NodeStatus> = st
            .iter()
            .filter_map(|(_, s)| s.as_ref())
            .filter(|s| s.executed_up_to.is_some())
            .collect();
        // Where each partition's replicas must stand (`None`: one position for all).
        let targets: Option<std::collections::BTreeMap<Option<u32>, u64>> =
            if cluster.ordering.multiring().is_some() {
                // Multi-Ring Paxos: no one stream's decided prefix to catch up with
                // (idle rings keep skipping), and each partition numbers its own merge
                // of the rings it subscribes to: the replicas agree once each stands
                // at its partition's furthest merged position, the same twice in a
                // row.
                let mut furthest = std::collections::BTreeMap::new();
                for r in &reps {
                    let e = furthest.entry(partition_of(r.node)).or_insert(0);
                    *e = (*e).max(r.executed_up_to.unwrap_or(0));
                }
                let steady = !furthest.is_empty() && previous.as_ref() == Some(&furthest);
                previous = Some(furthest.clone());
                Some(if steady { furthest } else { Default::default() })
            } else {
                None
            };
        let decided = st
            .iter()
            .filter_map(|(_, s)| s.as_ref()?.decided_up_to)
            .max()
            .unwrap_or(0);
        let target = |r: &NodeStatus| match &targets {
            Some(t) => t.get(&partition_of(r.node)).copied(),
            None => Some(decided),
        };
        if reps.len() == cluster.executors().len()
            && reps
                .iter()
                .all(|r| target(r).is_some() && r.executed_up_to == target(r))
        {
            // Replicas of one partition hold the same state; partitions differ.
            let mut by_partition: std::collections::BTreeMap<Option<u32>, Vec<(String, u64)>> =
                Default::default();
            for r in &reps {
                by_partition
                    .entry(partition_of(r.node))
                    .or_default()
                    .push((format!("node {}", r.node), r.digest.unwrap_or(0)));
            }
            if let Some(e) = by_partition
                .values()
                .find_map(|d| partita_checker::check_convergence(d).err())
            {
                // At one position with different digests: diverged, once it holds
                // for [`DIVERGED_AFTER`] (a status is a moment; nothing changes a
                // replica's state at a position it stays at).
                let seen: Vec<_> = reps
                    .iter()
                    .map(|r| (r.node, r.executed_up_to, r.digest))
                    .collect();
                let since = match &differing_since {
                    Some((t, before)) if *before == seen => *t,
                    _ => Instant::now(),
                };
                if since.elapsed() >= DIVERGED_AFTER {
                    return Err(Failed::Violation(e.to_string()));
                }
                differing_since = Some((since, seen));
                differing = Some(e.to_string());
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            // P-SMR: what the first replica's worker threads did (the run exercised
            // them, or says it did not).
            let psmr = reps.first().and_then(|r| {
                let c = |name: &str| r.counter(name);
                Some(format!(
                    "; P-SMR at node {}: {} commands run by one thread, {} synchronous, \
                     {} safety checks passed, {} failed, {} run alone",
                    r.node,
                    c("psmr_parallel")?,
                    c("psmr_synchronous")?,
                    c("psmr_checks_passed")?,
                    c("psmr_checks_failed")?,
                    c("psmr_alone")?
                ))
            });
            let at = match &targets {
                Some(t) if t.len() > 1 => format!(
                    "at instances {} (each partition numbers its own merge)",
                    t.values()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(t) => format!("at instance {}", t.values().next().copied().unwrap_or(0)),
                None => format!("at instance {decided}"),
            };
            return Ok(format!(
                "{} replicas in {} partition(s) {at}{}",
                reps.len(),
                by_partition.len(),
                psmr.unwrap_or_default()
            ));
        }
        differing = None;
        differing_since = None;
        last = format!("{st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(e) = differing {
        // At one position, with different digests, to the end.
        return Err(Failed::Violation(e));
    }
    Err(Failed::Undecided(format!(
        "replicas did not catch up within {limit:?}: {last}"
    )))
}

/// [`converged`] on a GeoPaxos+ or EPaxos cluster: every replica took the same number
/// of commands from its ordering (a partial order's replicas agree on the count, not
/// on one instance's contents, except at cuts) and holds the same digest, unchanged
/// over two polls (with DOPs under way, a moment between two of them).
async fn geo_converged(cluster: &ClusterConfig, limit: Duration) -> Result<String, Failed> {
    let t0 = Instant::now();
    let mut differing_since: Option<Instant> = None;
    let mut previous: Option<Vec<(NodeId, u64, u64)>> = None;
    let mut last = String::new();
    let mut differing = None;
    while t0.elapsed() < limit {
        let st = statuses(cluster, Duration::from_secs(1)).await;
        let seen: Vec<(NodeId, u64, u64)> = st
            .iter()
            .filter_map(|(id, s)| {
                let s = s.as_ref()?;
                let executed = s.executed_up_to?;
                Some((*id, executed, s.digest?))
            })
            .collect();
        let steady = previous.as_ref() == Some(&seen);
        previous = Some(seen.clone());
        if seen.len() == cluster.executors().len()
            && steady
            && seen.windows(2).all(|w| w[0].1 == w[1].1)
        {
            let digests: Vec<(String, u64)> = seen
                .iter()
                .map(|(id, _, d)| (format!("node {id}"), *d))
                .collect();
            match partita_checker::check_convergence(&digests) {
                Ok(()) => {
                    return Ok(format!(
                        "{} replicas executed {} operations each, one digest",
                        seen.len(),
                        seen[0].1
                    ))
                }
                Err(e) => {
                    // Every replica took the same count, with different digests, at
                    // every steady moment for DIVERGED_AFTER (DOPs and barriers keep
                    // counts moving after the load; between them replicas that ran the
                    // same commands agree, and a replica that waited for an operation
                    // has had several stall checks to get it).
                    let since = *differing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= DIVERGED_AFTER {
                        return Err(Failed::Violation(e.to_string()));
                    }
                    differing = Some(e.to_string());
                }
            }
        } else {
            differing = None;
        }
        last = format!("(node, executed, digest): {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if let Some(e) = differing {
        return Err(Failed::Violation(e));
    }
    Err(Failed::Undecided(format!(
        "replicas did not catch up within {limit:?}: {last}"
    )))
}

/// Run the nemesis against `lc` (started, ready). `exe` is the partita binary used to
/// restart nodes, with `node_args` (e.g. `--unsafe ...` for controls).
pub async fn run(
    lc: &mut LocalCluster,
    exe: &Path,
    node_args: &[String],
    cfg: &NemesisConfig,
) -> anyhow::Result<NemesisReport> {
    if cfg.faults.is_empty() {
        bail!("no faults to inject");
    }
    let cluster = lc.cluster.clone();
    let geo_keys = cluster.ordering.geo_keys();
    if geo_keys.is_some() && cfg.bench.preload > 0 {
        bail!("a GeoPaxos+ cluster starts with the tree its cluster file loads: no preload");
    }
    bench::preload(&cluster, cfg.bench.preload, false).await?;
    let load = {
        let cluster = cluster.clone();
        let bcfg = cfg.bench.clone();
        tokio::spawn(async move { bench::run(&cluster, &bcfg).await })
    };
    let mut nem = Nemesis::new(lc, exe, node_args);
    let injected = nem.schedule(cfg, cfg.bench.duration).await?;
    let (bench_result, records) = load.await.context("load task")??;
    if let Some(p) = &cfg.history {
        crate::history::write_history(p, &records)?;
    }

    // The verdict: final contents, convergence, linearizability, then a full restart,
    // each through the nodes of the moment (a `member` fault replaced some, perhaps
    // every one of the file's).
    let live = nem.lc.cluster.clone();
    let final_entries = final_contents(&live, &cfg.bench)
        .await
        .context("reading the final contents")?;
    let converged = converged(&live, Duration::from_secs(60)).await;
    let unknown = records.iter().filter(|r| r.result.is_none()).count();
    let initial = match geo_keys {
        // The geo B+tree starts with keys 0..keys, each its own value.
        Some(keys) if keys > 0 => partita_checker::Initial::Preload {
            count: keys,
            stride: 1,
        },
        Some(_) => partita_checker::Initial::Empty,
        None => crate::history::preload_initial(cfg.bench.preload),
    };
    let linearizable = match crate::history::judge_from(&records, initial, &final_entries) {
        Ok(s) => Ok(format!("{} operations ({s:?})", records.len())),
        Err(e @ partita_checker::CheckError::NotLinearizable(_)) => {
            Err(Failed::Violation(e.to_string()))
        }
        Err(e) => Err(Failed::Undecided(e.to_string())),
    };

    nem.restart_all().await?;
    let survived_restart = match final_contents(&live, &cfg.bench).await {
        Ok(after) if after == final_entries => Ok(format!(
            "{} entries identical after restarting every node",
            after.len()
        )),
        Ok(after) => {
            let missing = final_entries.iter().filter(|e| !after.contains(e)).count();
            Err(Failed::Violation(format!(
                "{} entries before the restart, {} after; {missing} missing",
                final_entries.len(),
                after.len()
            )))
        }
        Err(e) => Err(Failed::Undecided(format!(
            "no answer after the restart: {e}"
        ))),
    };
    let failover = FailoverSummary::of_injected(&injected);
    Ok(NemesisReport {
        injected,
        load: LoadResult::Btree(Box::new(bench_result)),
        operations: records.len(),
        unknown_outcomes: unknown,
        failover,
        linearizable,
        converged,
        survived_restart,
    })
}

/// [`run`] for a key-value cluster (`service = "kv"`, any ordering): the clients of
/// [`crate::kvload`] run the key-value mix with a recorded history while the faults are
/// injected. The verdict:
///
/// 1. the history is linearizable under the key-value model with revisions;
/// 2. the replicas converge;
/// 3. after every node was stopped and started again on its data directory, every key
///    reads as before (no acknowledged write lost).
pub async fn run_kv(
    lc: &mut LocalCluster,
    exe: &Path,
    node_args: &[String],
    cfg: &NemesisConfig,
    load: &crate::kvload::KvLoad,
) -> anyhow::Result<NemesisReport> {
    if cfg.faults.is_empty() {
        bail!("no faults to inject");
    }
    let cluster = lc.cluster.clone();
    let task = {
        let cluster = cluster.clone();
        let load = load.clone();
        tokio::spawn(async move { crate::kvload::run(&cluster, &load).await })
    };
    let history = match &cfg.history {
        Some(p) => p.clone(),
        None => lc.data_dir.join("kv-history.jsonl"),
    };
    let mut nem = Nemesis::new(lc, exe, node_args);
    let injected = nem.schedule(cfg, load.duration).await?;
    let result = task.await.context("load task")??;
    crate::kvload::write_history(&history, &result)?;
    let linearizable = match partita_checker::check_history_file(&history, &Default::default()) {
        Ok(partita_checker::ServiceReport::Kv(r)) => match &r.verdict {
            partita_checker::KvVerdict::Linearizable(_) => Ok(r.to_string()),
            partita_checker::KvVerdict::NotLinearizable(_) => Err(Failed::Violation(r.to_string())),
            partita_checker::KvVerdict::Unknown(_) => Err(Failed::Undecided(r.to_string())),
        },
        Ok(other) => Err(Failed::Undecided(format!(
            "not a key-value history: {other}"
        ))),
        Err(e) => Err(Failed::Undecided(e.to_string())),
    };
    let before = crate::kvload::contents(&cluster)
        .await
        .context("reading every key at the end")?;
    // The replicas now (a `member` fault replaced some).
    let live = nem.lc.cluster.clone();
    let converged = converged(&live, Duration::from_secs(60)).await;
    nem.restart_all().await?;
    let survived_restart =
        same_keys_after_restart(&before, crate::kvload::contents(&cluster).await);
    let failover = FailoverSummary::of_injected(&injected);
    Ok(NemesisReport {
        injected,
        operations: result.operations,
        unknown_outcomes: result.unknown,
        load: LoadResult::Kv(Box::new(result)),
        failover,
        linearizable,
        converged,
        survived_restart,
    })
}

/// Inject `cfg.faults` into `lc`'s nodes for `duration` (as [`run`] does) while a
/// load of the caller's own runs elsewhere (etcd's clients in a process of their own,
/// say); the faults injected. `cfg.bench` and `cfg.history` are not used.
pub async fn inject_for(
    lc: &mut LocalCluster,
    exe: &Path,
    node_args: &[String],
    cfg: &NemesisConfig,
    duration: Duration,
) -> anyhow::Result<Vec<Injected>> {
    if cfg.faults.is_empty() {
        bail!("no faults to inject");
    }
    let mut nem = Nemesis::new(lc, exe, node_args);
    nem.schedule(cfg, duration).await
}

/// [`run`] for a Chirper cluster (S-SMR or DS-SMR, `partita up --service chirper`):
/// `load` runs (the swarm's mix by default: moves, creates and deletes under way)
/// while the faults are injected. The verdict:
///
/// 1. the history, with a read of every timeline through the replicated path at the
///    end, is linearizable under the checker's Chirper model;
/// 2. the replicas of every partition (and of the oracle) converge;
/// 3. after every node was stopped and started again on its data directory, every
///    timeline reads as before.
pub async fn run_chirper(
    lc: &mut LocalCluster,
    exe: &Path,
    node_args: &[String],
    cfg: &NemesisConfig,
    load: &crate::chirper::ChirperLoad,
) -> anyhow::Result<NemesisReport> {
    use crate::chirper::{read_timelines, run_load};
    use partita_checker::chirper::{check_chirper, ChirperCheckError, ChirperCheckOptions};
    if cfg.faults.is_empty() {
        bail!("no faults to inject");
    }
    let cluster = lc.cluster.clone();
    let (_, _, spec) = crate::services::chirper_params(&cluster)?;
    let graph = partita_dssmr::chirper::Graph::generate(&spec);
    let base = Instant::now();
    let task = {
        let cluster = cluster.clone();
        let load = load.clone();
        tokio::spawn(async move { run_load(&cluster, &load, base).await })
    };
    let mut nem = Nemesis::new(lc, exe, node_args);
    let injected = nem.schedule(cfg, load.shape.duration).await?;
    let (result, mut events) = task.await.context("load task")??;
    let operations = events.len();
    let unknown = events.iter().filter(|e| e.result.is_none()).count();

    let users = partita_sim::ds::universe(&graph);
    let reader = u64::MAX / 2;
    let finals = read_timelines(&cluster, &users, reader, base)
        .await
        .context("reading the final timelines")?;
    events.extend(finals.iter().cloned());
    if let Some(p) = &cfg.history {
        crate::chirper::write_history(p, &events)?;
    }
    // The replicas now (a `member` fault replaced some).
    let live = nem.lc.cluster.clone();
    let converged = converged(&live, Duration::from_secs(60)).await;
    let opts = ChirperCheckOptions::default();
    let linearizable = match check_chirper(&events, &partita_sim::ds::initial_of(&graph), &opts) {
        Ok(s) => Ok(format!(
            "{operations} operations and {} final reads ({s:?})",
            finals.len()
        )),
        Err(e @ ChirperCheckError::Violation(_)) => Err(Failed::Violation(e.to_string())),
        Err(e) => Err(Failed::Undecided(e.to_string())),
    };

    nem.restart_all().await?;
    let again = read_timelines(&cluster, &users, reader, base).await;
    let survived_restart = match again {
        Ok(after) => {
            let changed: Vec<String> = finals
                .iter()
                .zip(&after)
                .filter(|(a, b)| a.result != b.result)
                .map(|(a, b)| format!("{:?}: {:?} then {:?}", a.op, a.result, b.result))
                .take(3)
                .collect();
            if changed.is_empty() {
                Ok(format!(
                    "{} timelines identical after restarting every node",
                    after.len()
                ))
            } else {
                Err(Failed::Violation(format!(
                    "timelines changed by a restart: {}",
                    changed.join("; ")
                )))
            }
        }
        Err(e) => Err(Failed::Undecided(format!(
            "no answer after the restart: {e:#}"
        ))),
    };
    let failover = FailoverSummary::of_injected(&injected);
    Ok(NemesisReport {
        injected,
        load: LoadResult::Chirper(Box::new(result)),
        operations,
        unknown_outcomes: unknown,
        failover,
        linearizable,
        converged,
        survived_restart,
    })
}

/// The key-value verdict on a full restart: every key read `before` it reads the same
/// after it.
fn same_keys_after_restart<T: PartialEq>(
    before: &[T],
    after: anyhow::Result<Vec<T>>,
) -> Result<String, Failed> {
    match after {
        Ok(after) if after == before => Ok(format!(
            "{} keys identical after restarting every node",
            after.len()
        )),
        Ok(after) => Err(Failed::Violation(format!(
            "{} keys before the restart, {} after; {} differ or are missing",
            before.len(),
            after.len(),
            before.iter().filter(|e| !after.contains(e)).count()
        ))),
        Err(e) => Err(Failed::Undecided(format!(
            "no answer after the restart: {e:#}"
        ))),
    }
}

/// [`run`] for the key-value store on S-SMR or DS-SMR (`partita up --service kv
/// --execution ssmr|dssmr`): the key-value mix with two-key transactions (moves under
/// way on DS-SMR) while the faults are injected. The verdict:
///
/// 1. the history, with a read of every key at the end (a range that runs at every
///    partition), is linearizable under the key-value checker, the store's position
///    revisions renumbered (`partita_sim::ds::kv_lines`; exact when every outcome is
///    known, which `shape.give_up` longer than any fault makes likely);
/// 2. the replicas of every partition (and of the oracle) converge;
/// 3. after every node was stopped and started again on its data directory, every key
///    reads as before.
pub async fn run_kv_objects(
    lc: &mut LocalCluster,
    exe: &Path,
    node_args: &[String],
    cfg: &NemesisConfig,
    shape: &crate::objects::LoadShape,
) -> anyhow::Result<NemesisReport> {
    use partita_dssmr::client::Outcome;
    if cfg.faults.is_empty() {
        bail!("no faults to inject");
    }
    let cluster = lc.cluster.clone();
    let base = Instant::now();
    let task = {
        let (cluster, shape) = (cluster.clone(), shape.clone());
        tokio::spawn(async move { crate::objects::run_kv_mix(&cluster, &shape, base).await })
    };
    let mut nem = Nemesis::new(lc, exe, node_args);
    let injected = nem.schedule(cfg, shape.duration).await?;
    let (summary, ran) = task.await.context("load task")??;
    let operations = ran.len();
    let unknown = ran.iter().filter(|r| r.outcome.is_none()).count();
    let refused: Vec<String> = ran
        .iter()
        .filter(|r| !matches!(r.outcome, None | Some(Outcome::Done(_))))
        .map(|r| format!("{:?} ended {:?}", r.cmd, r.outcome))
        .take(3)
        .collect();
    let events: Vec<partita_sim::ds::KvEvent> = ran
        .into_iter()
        .map(|r| {
            let reply = match r.outcome {
                Some(Outcome::Done(reply)) => Some(reply),
                _ => None,
            };
            partita_sim::ds::KvEvent {
                client: r.client,
                cmd: r.cmd,
                invoked: r.invoked,
                returned: reply.as_ref().map(|_| r.returned),
                reply,
            }
        })
        .collect();
    let finals = crate::objects::read_all_kv(&cluster)
        .await
        .context("reading every key")?;
    let at = base.elapsed().as_nanos() as u64;
    let linearizable = match partita_sim::ds::kv_lines(&events, finals.clone(), at) {
        _ if !refused.is_empty() => Err(Failed::Violation(format!(
            "commands refused: {}",
            refused.join("; ")
        ))),
        Err(m) => Err(Failed::Violation(m)),
        Ok(lines) => {
            if let Some(p) = &cfg.history {
                std::fs::write(p, lines.join("\n") + "\n")
                    .with_context(|| format!("writing {}", p.display()))?;
            }
            match partita_sim::check::kv_history(&lines, 2_000_000) {
                Ok(s) => Ok(format!(
                    "{operations} operations and a final read of {} keys ({} writes checked)",
                    finals.len(),
                    s.writes
                )),
                Err((partita_sim::check::Check::Linearizability, m)) => Err(Failed::Violation(m)),
                Err((_, m)) => Err(Failed::Undecided(m)),
            }
        }
    };
    let live = nem.lc.cluster.clone();
    let converged = converged(&live, Duration::from_secs(60)).await;
    nem.restart_all().await?;
    let survived_restart =
        same_keys_after_restart(&finals, crate::objects::read_all_kv(&cluster).await);
    let failover = FailoverSummary::of_injected(&injected);
    Ok(NemesisReport {
        injected,
        load: LoadResult::Objects(Box::new(summary)),
        operations,
        unknown_outcomes: unknown,
        failover,
        linearizable,
        converged,
        survived_restart,
    })
}

/// The nemesis's default load: the mixed workload on a small key space, so that the
/// checker judges real contention.
pub fn default_bench(duration: Duration, clients: usize, seed: u64) -> BenchConfig {
    let preload = 200;
    BenchConfig {
        give_up: None,
        workload: Workload::Mixed,
        clients,
        duration,
        think_ms: 2,
        preload,
        seed,
        trim: 0.1,
        progress: false,
        key_space: Some(2 * preload),
    }
}

/// The nemesis's load on a GeoPaxos+ cluster whose tree starts with `keys` keys: the geo
/// B+tree's operations, half of them reads, over twice as many keys (so inserts add
/// keys and split leaves), from every region.
pub fn geo_bench(duration: Duration, clients: usize, seed: u64, keys: u64) -> BenchConfig {
    BenchConfig {
        give_up: None,
        workload: Workload::Geo {
            read_percent: 50,
            keys: partita_sim::bench::GeoKeys::UNIFORM,
        },
        preload: 0,
        key_space: Some(2 * keys.max(1)),
        ..default_bench(duration, clients, seed)
    }
}

#[cfg(test)]
mod failover_tests {
    use super::FailoverSummary;

    #[test]
    fn failover_percentiles_are_nearest_rank() {
        assert_eq!(FailoverSummary::of(&[]), None);
        let times: Vec<f64> = (1..=20).map(|i| i as f64 * 10.0).collect();
        let s = FailoverSummary::of(&times).unwrap();
        assert_eq!(
            (s.count, s.p50_ms, s.p99_ms, s.max_ms),
            (20, 100.0, 200.0, 200.0)
        );
        let s = FailoverSummary::of(&[30.0, 10.0, 20.0]).unwrap();
        assert_eq!((s.p50_ms, s.p99_ms, s.max_ms), (20.0, 30.0, 30.0));
    }
}
