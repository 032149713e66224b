//! `partita dashboard`: a live page of a running cluster, served over HTTP by this
//! process (plain tokio, no web framework).
//!
//! Where the numbers come from:
//! - **Nodes, roles, progress, ballots**: every node's [`NodeStatus`], fetched through
//!   the same one-shot status probe as `partita status`
//!   ([`partita_client::node_status`]), once per poll interval (1 s). A node that does
//!   not answer within 800 ms is shown as down for that round. Nodes that `partita
//!   member` adds at run time are polled too, from the round after a node first
//!   reports a configuration naming them (with the address their change carried).
//! - **Who leads**: the coordinator reports its own ballot; an acceptor the ballot it
//!   promised; a replica the last ballot it saw in its decided stream
//!   (`delivered_ballots`). A ballot `round.node` names its leader, so each node's
//!   belief is the node part of that ballot. The cluster's leader is the answering node
//!   that says it coordinates (the highest ballot if several do).
//! - **Throughput**: the deltas of each replica's `commands_executed` counter between
//!   two polls, divided by the time between them. A counter that goes back, or a new
//!   process id, is a restart: that interval has no rate (a gap), never a negative or
//!   invented one. The cluster's throughput is, per partition, the fastest answering
//!   replica's rate, summed over partitions (a command that spans two partitions is
//!   executed, and counted, in each).
//! - **Latency**: nodes report no client latency, so the dashboard measures its own:
//!   a probe client (the real [`partita_client::Client`]) executes one read-only command
//!   per second (a B+tree `Read` of key 0, or a key-value `get` of
//!   `partita-dashboard-probe`) and records its round trip ("probe latency": one
//!   linearizable read through the whole ordering, from this process). Its commands are
//!   counted in the throughput too (about one per second). `--no-probe` turns it off.
//! - **Partition map**: the cluster file's `[partitioning]` (key ranges) and each
//!   replica's `partition`.
//!
//! The history is a ring buffer of the last 10 minutes of polls (600 rounds at 1 s).
//!
//! HTTP: `GET /` is one self-contained page (inline CSS and JS, no external asset) that
//! redraws itself from `GET /api/state` every second. Requests are read with a bounded
//! head (8 KiB) and a 5 s timeout; a malformed request gets `400`, an unknown path
//! `404`, another method `405`; every response closes its connection; at most 64
//! connections are handled at once.
//!
//! `GET /api/state` answers one JSON object:
//! ```text
//! {
//!   "cluster":   {"id", "service", "mode", "protocol", "durability",
//!                 "partitions", "key_space"},   (id, key_space: decimal strings)
//!   "now_ms":    Unix ms of the last poll (0 before the first),
//!   "poll_ms":   poll interval, "window_s": how far back the series go,
//!   "leader":    {"node", "ballot"} or null (no answering node coordinates),
//!   "configuration": the newest members any answering node reports (`partita
//!                member`), or null before any change: {"epoch", "changed_at",
//!                "replicas", "learners", "removed", "ordering_epoch", "acceptors",
//!                "acceptors_from"},
//!   "nodes":     [{"id", "addr", "roles" (reported, or the cluster file's while down),
//!                  "partition" (null: unpartitioned or not a replica), "alive",
//!                  "coordinator", "believed_leader", "leader_ballot", "leader_source",
//!                  "decided_up_to", "executed_up_to", "accepted_max_instance",
//!                  "commands_executed", "throughput" (last rate, commands/s, or null),
//!                  "restarts" (seen by this dashboard), "wal_stall", "last_seen_ms",
//!                  "replica_state" ("serving", "learner", "joining", "removed" or null)}],
//!   "partitions":[{"id", "lo", "hi" (keys, inclusive, decimal strings: a u64 is not
//!                  exact as a JavaScript number), "replicas": [ids],
//!                  "believed_leaders": [ids], "throughput"}],
//!   "series":    {"t_ms": [...], "throughput": [... or null],
//!                 "probe_latency_ms": [... or null],
//!                 "nodes": {"<id>": {"throughput": [...], "executed_up_to": [...],
//!                                   "decided_up_to": [...], "alive": [...]}}},
//!   "probe":     {"enabled", "command", "ok", "failed", "last_ms", "last_error"}
//! }
//! ```
//! Every array of `series` has one entry per poll, oldest first.

use anyhow::Context;
use partita_config::{ClusterConfig, Role};
use partita_types::NodeId;
use partita_wire::NodeStatus;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How often every node is polled.
pub const POLL: Duration = Duration::from_secs(1);
/// How far back the series go.
pub const WINDOW: Duration = Duration::from_secs(600);
/// The longest request head accepted.
pub const HEAD_MAX: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections handled at once (more wait to be accepted).
pub const CONNECTIONS_MAX: usize = 64;

const PAGE: &str = include_str!("dashboard.html");

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One node in one poll.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodePoint {
    pub alive: bool,
    pub executed_up_to: Option<u64>,
    pub decided_up_to: Option<u64>,
    /// Commands executed per second since the previous answer (`None`: not a replica,
    /// down, the first answer, or a restart in between).
    pub rate: Option<f64>,
}

/// One poll of every node.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    pub t_ms: u64,
    /// In the cluster file's node order, then the nodes added at run time in the
    /// order they were first seen (a round before that has no point for them).
    pub nodes: Vec<NodePoint>,
    pub throughput: Option<f64>,
    pub probe_latency_ms: Option<f64>,
}

#[derive(Clone, Debug)]
struct NodeTrack {
    id: NodeId,
    addr: String,
    config_roles: Vec<String>,
    partition: Option<u32>,
    executes: bool,
    last: Option<NodeStatus>,
    alive: bool,
    last_seen_ms: Option<u64>,
    /// The last answer's (time, commands_executed, pid).
    prev: Option<(u64, u64, u32)>,
    restarts: u64,
}

#[derive(Clone, Debug, Default)]
struct ProbeStats {
    enabled: bool,
    command: String,
    ok: u64,
    failed: u64,
    last_ms: Option<f64>,
    last_error: Option<String>,
    /// Latencies measured since the last poll (their mean goes into the round).
    pending: Vec<f64>,
}

/// What the dashboard knows: the latest status of every node and the bounded history
/// of polls. Pure (no clock, no I/O): the poller hands it each round.
pub struct State {
    cluster: ClusterConfig,
    nodes: Vec<NodeTrack>,
    rounds: VecDeque<Round>,
    capacity: usize,
    probe: ProbeStats,
}

/// The node part of a ballot written `round.node` (`None` for the zero ballot).
fn ballot_node(b: &str) -> Option<NodeId> {
    let (round, node) = b.split_once('.')?;
    let (round, node) = (round.parse::<u64>().ok()?, node.parse::<NodeId>().ok()?);
    (round, node).ne(&(0, 0)).then_some(node)
}

/// The leader a node believes in, the ballot that says so and where it comes from.
fn believed_leader(s: &NodeStatus) -> Option<(NodeId, String, &'static str)> {
    if s.coordinator {
        let b = s.ballot.clone()?;
        return Some((s.node, b, "own ballot (coordinator)"));
    }
    if let Some(p) = &s.promised {
        if let Some(n) = ballot_node(p) {
            return Some((n, p.clone(), "promised ballot (acceptor)"));
        }
    }
    let d = s.delivered_ballots.last()?;
    (d.ballot.round, d.ballot.node).ne(&(0, 0)).then(|| {
        (
            d.ballot.node,
            d.ballot.to_string(),
            "last decided ballot (replica)",
        )
    })
}

impl NodeTrack {
    fn of(n: &partita_config::NodeSection, executes: bool) -> NodeTrack {
        NodeTrack {
            id: n.id,
            addr: n.addr.clone(),
            config_roles: n
                .roles
                .iter()
                .map(|r| {
                    match r {
                        Role::Acceptor => "acceptor",
                        Role::Replica => "replica",
                        Role::Server => "server",
                        Role::Batcher => "batcher",
                    }
                    .to_string()
                })
                .collect(),
            partition: n.partition,
            executes,
            last: None,
            alive: false,
            last_seen_ms: None,
            prev: None,
            restarts: 0,
        }
    }
}

impl State {
    pub fn new(cluster: ClusterConfig, capacity: usize) -> State {
        let executors = cluster.executors();
        let nodes = cluster
            .nodes
            .iter()
            .map(|n| NodeTrack::of(n, executors.contains(&n.id)))
            .collect();
        State {
            cluster,
            nodes,
            rounds: VecDeque::with_capacity(capacity.max(1)),
            capacity: capacity.max(1),
            probe: ProbeStats::default(),
        }
    }

    pub fn cluster(&self) -> &ClusterConfig {
        &self.cluster
    }

    pub fn rounds(&self) -> &VecDeque<Round> {
        &self.rounds
    }

    /// Say that a probe client runs, and what it sends.
    pub fn set_probe(&mut self, command: &str) {
        self.probe.enabled = true;
        self.probe.command = command.to_string();
    }

    /// One probe command's outcome: its round trip, or why it failed.
    pub fn record_probe(&mut self, outcome: Result<Duration, String>) {
        match outcome {
            Ok(d) => {
                let ms = d.as_secs_f64() * 1000.0;
                self.probe.ok += 1;
                self.probe.last_ms = Some(ms);
                self.probe.last_error = None;
                self.probe.pending.push(ms);
            }
            Err(e) => {
                self.probe.failed += 1;
                self.probe.last_error = Some(e);
            }
        }
    }

    /// One poll at `t_ms`: each node's status in the cluster file's order (`None`:
    /// no answer).
    pub fn record(&mut self, t_ms: u64, statuses: Vec<Option<NodeStatus>>) {
        assert_eq!(statuses.len(), self.nodes.len(), "one answer per node");
        let mut points = Vec::with_capacity(self.nodes.len());
        for (track, status) in self.nodes.iter_mut().zip(statuses) {
            let mut point = NodePoint::default();
            match status {
                Some(s) => {
                    point.alive = true;
                    point.executed_up_to = s.executed_up_to;
                    point.decided_up_to = s.decided_up_to;
                    if let Some(c) = s.counter("commands_executed") {
                        match track.prev {
                            Some((t0, c0, pid0)) if pid0 == s.pid && c >= c0 && t_ms > t0 => {
                                point.rate = Some((c - c0) as f64 * 1000.0 / (t_ms - t0) as f64);
                            }
                            Some((_, c0, pid0)) if pid0 != s.pid || c < c0 => {
                                track.restarts += 1;
                            }
                            _ => {}
                        }
                        track.prev = Some((t_ms, c, s.pid));
                    } else if track.prev.is_some_and(|(_, _, pid0)| pid0 != s.pid) {
                        track.restarts += 1;
                        track.prev = None;
                    }
                    track.alive = true;
                    track.last_seen_ms = Some(t_ms);
                    track.last = Some(s);
                }
                None => {
                    track.alive = false;
                }
            }
            points.push(point);
        }
        let throughput = self.throughput_of(&points);
        let probe = std::mem::take(&mut self.probe.pending);
        let probe_latency_ms =
            (!probe.is_empty()).then(|| probe.iter().sum::<f64>() / probe.len() as f64);
        if self.rounds.len() == self.capacity {
            self.rounds.pop_front();
        }
        self.rounds.push_back(Round {
            t_ms,
            nodes: points,
            throughput,
            probe_latency_ms,
        });
        self.track_added();
    }

    /// Nodes that `partita member` added at run time (the newest configuration any
    /// answering node reports names them, with their addresses) are polled from the
    /// next round on, like the file's (earlier rounds have no point for them).
    fn track_added(&mut self) {
        let Some(m) = self
            .nodes
            .iter()
            .filter(|t| t.alive)
            .filter_map(|t| t.last.as_ref()?.members.as_ref())
            .max_by_key(|m| m.epoch)
            .cloned()
        else {
            return;
        };
        let partitioned = self.cluster.partitioning.partitions > 1;
        let replicas = m
            .added()
            .map(|(n, a)| (n, a.to_string(), Role::Replica))
            .chain(
                m.acceptor_addrs
                    .iter()
                    .map(|(&n, a)| (n, a.clone(), Role::Acceptor)),
            );
        for (id, addr, role) in replicas.collect::<Vec<_>>() {
            if let Some(n) = self.cluster.nodes.iter_mut().find(|n| n.id == id) {
                // Known already (a file entry marked `join = true`, or added as the
                // other role before): it has this role too now.
                if !n.roles.contains(&role) {
                    n.roles.push(role);
                }
                if let Some(t) = self.nodes.iter_mut().find(|t| t.id == id) {
                    let name = if role == Role::Replica {
                        "replica"
                    } else {
                        "acceptor"
                    };
                    if !t.config_roles.iter().any(|r| r == name) {
                        t.config_roles.push(name.to_string());
                    }
                    t.executes |= role == Role::Replica;
                    if role == Role::Replica && partitioned {
                        t.partition = m.replicas.get(&id).map(|r| r.partition);
                    }
                }
                continue;
            }
            let mut n = partita_config::NodeSection::joining_replica(id, addr);
            n.join = false;
            n.roles = vec![role];
            n.partition = m
                .replicas
                .get(&id)
                .map(|r| r.partition)
                .filter(|_| partitioned && role == Role::Replica);
            self.nodes.push(NodeTrack::of(&n, role == Role::Replica));
            self.cluster.nodes.push(n);
        }
    }

    /// Per partition the fastest replica with a rate, summed (`None`: no replica has
    /// a rate this round).
    fn throughput_of(&self, points: &[NodePoint]) -> Option<f64> {
        let mut best: Vec<Option<f64>> = vec![None; self.cluster.partition_map().count() as usize];
        for (track, p) in self.nodes.iter().zip(points) {
            let (true, Some(r)) = (track.executes, p.rate) else {
                continue;
            };
            let i = (track.partition.unwrap_or(0) as usize).min(best.len() - 1);
            best[i] = Some(best[i].map_or(r, |b: f64| b.max(r)));
        }
        best.iter().flatten().copied().reduce(|a, b| a + b)
    }

    /// The node that leads: an answering coordinator, the highest ballot if several.
    fn leader(&self) -> Option<(NodeId, String)> {
        self.nodes
            .iter()
            .filter(|t| t.alive)
            .filter_map(|t| t.last.as_ref())
            .filter(|s| s.coordinator)
            .filter_map(|s| {
                let b = s.ballot.clone()?;
                let key = b
                    .split_once('.')
                    .and_then(|(r, n)| Some((r.parse::<u64>().ok()?, n.parse::<u32>().ok()?)))
                    .unwrap_or((0, 0));
                Some((key, s.node, b))
            })
            .max_by_key(|(k, _, _)| *k)
            .map(|(_, n, b)| (n, b))
    }

    /// The `/api/state` document (see the module's documentation).
    pub fn to_json(&self) -> Value {
        let c = &self.cluster;
        let map = c.partition_map();
        let last = self.rounds.back();
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let s = t.last.as_ref().filter(|_| t.alive);
                let belief = s.and_then(believed_leader);
                json!({
                    "id": t.id,
                    "addr": t.addr,
                    "roles": s.map(|s| s.roles.clone()).unwrap_or_else(|| t.config_roles.clone()),
                    "partition": t.partition,
                    "alive": t.alive,
                    "coordinator": s.is_some_and(|s| s.coordinator),
                    "believed_leader": belief.as_ref().map(|b| b.0),
                    "leader_ballot": belief.as_ref().map(|b| b.1.clone()),
                    "leader_source": belief.as_ref().map(|b| b.2),
                    "decided_up_to": s.and_then(|s| s.decided_up_to),
                    "executed_up_to": s.and_then(|s| s.executed_up_to),
                    "accepted_max_instance": s.and_then(|s| s.accepted_max_instance),
                    "commands_executed": s.and_then(|s| s.counter("commands_executed")),
                    "throughput": last.and_then(|r| r.nodes.get(i)).and_then(|p| p.rate),
                    "restarts": t.restarts,
                    "wal_stall": s.and_then(|s| s.wal_stall.clone()),
                    "last_seen_ms": t.last_seen_ms,
                    "replica_state": s.and_then(|s| s.replica_state.clone()),
                })
            })
            .collect();
        let partitions: Vec<Value> = (0..map.count())
            .map(|p| {
                let (lo, hi) = map.range(p);
                let members: Vec<&NodeTrack> = self
                    .nodes
                    .iter()
                    .filter(|t| t.executes && t.partition.unwrap_or(0) == p)
                    .collect();
                let mut leaders: Vec<NodeId> = members
                    .iter()
                    .filter(|t| t.alive)
                    .filter_map(|t| t.last.as_ref().and_then(believed_leader))
                    .map(|b| b.0)
                    .collect();
                leaders.sort_unstable();
                leaders.dedup();
                let tput = last.and_then(|r| {
                    self.nodes
                        .iter()
                        .zip(&r.nodes)
                        .filter(|(t, _)| t.executes && t.partition.unwrap_or(0) == p)
                        .filter_map(|(_, pt)| pt.rate)
                        .reduce(f64::max)
                });
                json!({
                    "id": p,
                    "lo": lo.to_string(),
                    "hi": hi.to_string(),
                    "replicas": members.iter().map(|t| t.id).collect::<Vec<_>>(),
                    "believed_leaders": leaders,
                    "throughput": tput,
                })
            })
            .collect();
        let mut per_node = serde_json::Map::new();
        for (i, t) in self.nodes.iter().enumerate() {
            let col = |f: &dyn Fn(&NodePoint) -> Value| -> Value {
                Value::Array(
                    self.rounds
                        .iter()
                        .map(|r| r.nodes.get(i).map_or(Value::Null, f))
                        .collect(),
                )
            };
            per_node.insert(
                t.id.to_string(),
                json!({
                    "throughput": col(&|p| json!(p.rate)),
                    "executed_up_to": col(&|p| json!(p.executed_up_to)),
                    "decided_up_to": col(&|p| json!(p.decided_up_to)),
                    "alive": col(&|p| json!(p.alive)),
                }),
            );
        }
        // The newest configuration any node reports (the highest epoch).
        let configuration = self
            .nodes
            .iter()
            .filter(|t| t.alive)
            .filter_map(|t| t.last.as_ref()?.members.as_ref())
            .filter(|m| m.epoch > 0)
            .max_by_key(|m| m.epoch)
            .map(|m| {
                let initial = c.with_role(partita_config::Role::Replica);
                json!({
                    "epoch": m.epoch,
                    "changed_at": m.at,
                    "replicas": m.serving(&initial),
                    "learners": m.replicas.iter().filter(|(_, r)| r.learner).map(|(n, _)| *n).collect::<Vec<_>>(),
                    "removed": m.removed,
                    "ordering_epoch": m.ordering_epoch,
                    "acceptors": m.acceptors(&c.with_role(partita_config::Role::Acceptor)),
                    "acceptors_from": m.ordering_from(),
                })
            });
        json!({
            "cluster": {
                "id": c.cluster.id.to_string(),
                "service": c.cluster.service,
                "mode": format!("{:?}", c.cluster.mode).to_lowercase(),
                "protocol": c.ordering.protocol().to_string(),
                "durability": c.cluster.durability.to_string(),
                "partitions": map.count(),
                "key_space": map.key_space().to_string(),
            },
            "now_ms": last.map_or(0, |r| r.t_ms),
            "poll_ms": POLL.as_millis() as u64,
            "window_s": WINDOW.as_secs(),
            "leader": self.leader().map(|(n, b)| json!({"node": n, "ballot": b})),
            "configuration": configuration,
            "nodes": nodes,
            "partitions": partitions,
            "series": {
                "t_ms": self.rounds.iter().map(|r| r.t_ms).collect::<Vec<_>>(),
                "throughput": self.rounds.iter().map(|r| r.throughput).collect::<Vec<_>>(),
                "probe_latency_ms": self.rounds.iter().map(|r| r.probe_latency_ms).collect::<Vec<_>>(),
                "nodes": per_node,
            },
            "probe": {
                "enabled": self.probe.enabled,
                "command": self.probe.command,
                "ok": self.probe.ok,
                "failed": self.probe.failed,
                "last_ms": self.probe.last_ms,
                "last_error": self.probe.last_error,
            },
        })
    }
}

pub type Shared = Arc<Mutex<State>>;

/// Poll every node once per [`POLL`], forever.
pub async fn poll_loop(state: Shared) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        // Nodes added at run time join the poll (`State::track_added`).
        let cluster = state.lock().unwrap().cluster().clone();
        let mut set = tokio::task::JoinSet::new();
        for (i, n) in cluster.nodes.iter().enumerate() {
            // Over TLS when the cluster file has it (the client certificate).
            let (cluster, id) = (cluster.clone(), n.id);
            set.spawn(async move {
                (
                    i,
                    partita_client::node_status_of(&cluster, id, Duration::from_millis(800)).await,
                )
            });
        }
        let mut statuses = vec![None; cluster.nodes.len()];
        while let Some(r) = set.join_next().await {
            if let Ok((i, s)) = r {
                statuses[i] = s;
            }
        }
        state.lock().unwrap().record(unix_ms(), statuses);
    }
}

/// The probe client: one read-only command per [`POLL`], its round trip recorded.
/// Returns at once for a service it has no read-only command for.
pub async fn probe_loop(state: Shared) {
    let cluster = state.lock().unwrap().cluster().clone();
    match cluster.cluster.service.as_str() {
        "btree" => {
            state.lock().unwrap().set_probe("B+tree Read of key 0");
            probe_with::<partita_btree::BPlusTree>(
                state,
                cluster,
                partita_btree::Op::Read { key: 0 },
            )
            .await
        }
        "kv" => {
            state
                .lock()
                .unwrap()
                .set_probe("key-value get of `partita-dashboard-probe`");
            probe_with::<partita_kv::KvStore>(
                state,
                cluster,
                partita_kv::KvCommand::get(b"partita-dashboard-probe".to_vec()),
            )
            .await
        }
        _ => {}
    }
}

async fn probe_with<S: partita_service::StateMachine>(
    state: Shared,
    cluster: ClusterConfig,
    cmd: S::Command,
) {
    let opts = partita_client::ClientOptions {
        timeout: Duration::from_secs(1),
        give_up: Duration::from_secs(3),
        ..Default::default()
    };
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut client: Option<partita_client::Client<S>> = None;
    loop {
        tick.tick().await;
        if client.is_none() {
            match partita_client::Client::<S>::connect(cluster.clone(), opts.clone()).await {
                Ok(c) => client = Some(c),
                Err(e) => {
                    state.lock().unwrap().record_probe(Err(e.to_string()));
                    continue;
                }
            }
        }
        let c = client.as_mut().expect("connected above");
        let start = Instant::now();
        let outcome = match c.execute(cmd.clone()).await {
            Ok(_) => Ok(start.elapsed()),
            Err(e) => {
                client = None;
                Err(e.to_string())
            }
        };
        state.lock().unwrap().record_probe(outcome);
    }
}

/// A request head's method and path, or why it is malformed.
pub fn parse_head(head: &[u8]) -> Result<(String, String), &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let first = lines.next().ok_or("no request line")?;
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the request line is not `METHOD TARGET VERSION`");
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err("bad method");
    }
    if !target.starts_with('/') || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err("bad request target");
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err("not HTTP/1.0 or HTTP/1.1");
    }
    for line in lines {
        if line.is_empty() {
            continue;
        }
        match line.split_once(':') {
            Some((name, _))
                if !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b)) => {}
            _ => return Err("a malformed header line"),
        }
    }
    let path = target.split('?').next().unwrap_or(target).to_string();
    Ok((method.to_string(), path))
}

/// Read a request head (up to the blank line), at most [`HEAD_MAX`] bytes.
async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, &'static str> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end);
            return Ok(buf);
        }
        if buf.len() > HEAD_MAX {
            return Err("request head too large");
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| "connection error")?;
        if n == 0 {
            return Err("connection closed before the end of the request head");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn respond(stream: &mut TcpStream, status: &str, ctype: &str, body: &[u8], head_only: bool) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    if !head_only {
        let _ = stream.write_all(body).await;
    }
    let _ = stream.shutdown().await;
}

async fn handle(mut stream: TcpStream, state: Shared) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(h)) => Ok(h),
        Ok(Err(why)) => Err(why.to_string()),
        Err(_) => Err("no complete request head in time".to_string()),
    };
    let parsed = head.and_then(|h| parse_head(&h).map_err(str::to_string));
    let (method, path) = match parsed {
        Ok(r) => r,
        Err(why) => {
            let body = format!("400 Bad Request: {why}\n");
            respond(
                &mut stream,
                "400 Bad Request",
                "text/plain; charset=utf-8",
                body.as_bytes(),
                false,
            )
            .await;
            return;
        }
    };
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        let body = "405 Method Not Allowed: GET only\n";
        respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            body.as_bytes(),
            false,
        )
        .await;
        return;
    }
    match path.as_str() {
        "/" | "/index.html" => {
            respond(
                &mut stream,
                "200 OK",
                "text/html; charset=utf-8",
                PAGE.as_bytes(),
                head_only,
            )
            .await
        }
        "/api/state" => {
            let doc = state.lock().unwrap().to_json();
            let body = serde_json::to_vec(&doc).unwrap_or_default();
            respond(&mut stream, "200 OK", "application/json", &body, head_only).await
        }
        _ => {
            let body = "404 Not Found: try / or /api/state\n";
            respond(
                &mut stream,
                "404 Not Found",
                "text/plain; charset=utf-8",
                body.as_bytes(),
                head_only,
            )
            .await
        }
    }
}

/// Serve the page and the API on `listener` until the process stops. A connection's
/// failure only ends that connection.
pub async fn serve_http(listener: TcpListener, state: Shared) {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // (Too many open files, a connection reset before accept: go on.)
                tracing::debug!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            handle(stream, state).await;
            drop(permit);
        });
    }
}

/// `partita dashboard`: bind `addr`, print the URL, poll, probe and serve until
/// `shutdown` completes.
pub async fn run(
    cluster: ClusterConfig,
    addr: SocketAddr,
    probe: bool,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the dashboard's address {addr}"))?;
    let local = listener.local_addr()?;
    let nodes = cluster.nodes.len();
    let state: Shared = Arc::new(Mutex::new(State::new(
        cluster,
        (WINDOW.as_millis() / POLL.as_millis()) as usize,
    )));
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(poll_loop(state.clone()));
    if probe {
        tasks.spawn(probe_loop(state.clone()));
    }
    tasks.spawn(serve_http(listener, state));
    println!("dashboard of {nodes} nodes at http://{local}/  (JSON: http://{local}/api/state)");
    println!("Ctrl-C stops it.");
    shutdown.await;
    tasks.abort_all();
    Ok(())
}

#[cfg(test)]
mod tests;
