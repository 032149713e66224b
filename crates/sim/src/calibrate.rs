//! Handler costs of the real node cores, for `partita calibrate` (which measures the
//! rest of the cost table: codec, B+tree, sockets, disk).
//!
//! [`measure_handlers`] runs a cluster of real `NodeCore`s (3 acceptors, node 1
//! coordinating, 2 replicas) in one thread with instant delivery and no encoding:
//! commands are fed to the coordinator in rounds, every message is handed to its
//! destination at once, persists complete when the queue is empty (one batch per node,
//! as group commit reports them), and every node ticks between rounds. Each handler
//! call is timed with the monotonic clock and filed under its input kind (`request`,
//! `tick`, `persisted`, or the message kind). The commands are reads addressed to no
//! replica, which replicas skip without executing: the numbers are the protocol's
//! own costs, execution being measured separately (B+tree and per-command costs).
//!
//! [`measure_batched_handlers`] runs the same cluster plus a standalone batcher (node
//! 6) and feeds the commands to it instead: its requests are filed under
//! `batcher-request`, and the leader's `forwardbatch` and the batcher's `forwardack`
//! are timed like every other message (a `forwardbatch` includes the coordinator's work
//! for each command it carries; [`HandlerCosts::commands_per_batch`] says how many).
//!
//! Calls slower than the 95th percentile of their kind are dropped before averaging:
//! on a shared machine they are preemptions, not handler costs.

use partita_btree::{BPlusTree, Op};
use partita_config::ClusterConfig;
use partita_consensus::{Msg, PersistToken, Protocol};
use partita_node::{NodeCore, Output, UnsafeBugs};
use partita_types::{Command, NodeId};
use std::collections::{BTreeMap, VecDeque};
use std::hint::black_box;
use std::time::Instant;

/// Mean cost of one handler call, after dropping the slowest 5%.
#[derive(Clone, Debug, PartialEq)]
pub struct HandlerCost {
    pub calls: u64,
    pub mean_ns: f64,
}

#[derive(Clone, Debug, Default)]
pub struct HandlerCosts {
    /// By input kind: `request` (the coordinator taking a command), `tick`,
    /// `persisted`, and message kinds (`phase2a`, `ringvote`, ...).
    pub by_kind: BTreeMap<String, HandlerCost>,
    /// Persist completions: a line over the batch size (fixed + per token).
    pub persisted_ns: f64,
    pub persisted_token_ns: f64,
    /// Commands per value the coordinator proposed, on average.
    pub commands_per_value: f64,
    /// Commands per batch the batchers sent, on average (0 without batchers).
    pub commands_per_batch: f64,
}

/// Wall nanoseconds one `Instant::now()` pair costs (subtracted from every sample): the
/// fastest of 10 rounds of 2,000 pairs, since a round the thread was preempted in
/// overstates it, and an overstated overhead cancels short handlers out entirely.
pub fn timer_overhead_ns() -> f64 {
    let n = 2_000;
    let mut acc = 0u128;
    let fastest = (0..10)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                let a = Instant::now();
                acc += a.elapsed().as_nanos();
            }
            t.elapsed().as_nanos() as f64 / n as f64 / 2.0
        })
        .fold(f64::INFINITY, f64::min);
    black_box(acc);
    fastest
}

fn trimmed_mean(v: &mut [u64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let keep = ((v.len() as f64 * 0.95).ceil() as usize).clamp(1, v.len());
    v[..keep].iter().sum::<u64>() as f64 / keep as f64
}

enum In {
    Peer(NodeId, Msg),
    Request(Command),
}

struct Harness {
    nodes: Vec<NodeCore>,
    queue: VecDeque<(NodeId, In)>,
    pending: Vec<Vec<PersistToken>>,
    samples: BTreeMap<String, Vec<u64>>,
    /// (tokens, ns) of every persist-completion batch.
    persisted: Vec<(usize, u64)>,
    overhead: u64,
    out: Vec<Output>,
    proposals: u64,
    proposed_commands: u64,
    batches: u64,
    batched_commands: u64,
}

impl Harness {
    fn route(&mut self, from: NodeId) {
        for o in self.out.drain(..) {
            match o {
                Output::Send { to, msg } => {
                    if let Msg::ForwardBatch { cmds, .. } = &msg {
                        self.batches += 1;
                        self.batched_commands += cmds.len() as u64;
                    }
                    if from == 1 {
                        if let Msg::Phase2A { value, .. } = &msg {
                            if to == 2 {
                                self.proposals += 1;
                                self.proposed_commands += value.commands.len() as u64;
                            }
                        }
                    }
                    self.queue.push_back((to, In::Peer(from, msg)))
                }
                Output::Persist { token, .. } => self.pending[from as usize - 1].push(token),
                _ => {}
            }
        }
    }

    fn timed(&mut self, kind: &str, node: NodeId, f: impl FnOnce(&mut NodeCore, &mut Vec<Output>)) {
        let core = &mut self.nodes[node as usize - 1];
        let t = Instant::now();
        f(core, &mut self.out);
        let ns = (t.elapsed().as_nanos() as u64).saturating_sub(self.overhead);
        self.samples.entry(kind.to_string()).or_default().push(ns);
        self.route(node);
    }

    /// Deliver everything queued, then the persist completions, until quiet.
    fn drain(&mut self) {
        loop {
            while let Some((to, input)) = self.queue.pop_front() {
                match input {
                    In::Peer(from, msg) => {
                        let kind = msg.kind();
                        self.timed(kind, to, |c, out| c.on_peer(from, msg, out));
                    }
                    In::Request(cmd) => {
                        let core = &self.nodes[to as usize - 1];
                        let kind = if core.leads().is_none() && core.batches() {
                            "batcher-request"
                        } else {
                            "request"
                        };
                        self.timed(kind, to, |c, out| c.on_request(cmd, out))
                    }
                }
            }
            let mut any = false;
            for i in 0..self.nodes.len() {
                let tokens = std::mem::take(&mut self.pending[i]);
                if tokens.is_empty() {
                    continue;
                }
                any = true;
                let n = tokens.len();
                let core = &mut self.nodes[i];
                let t = Instant::now();
                core.on_persisted(&tokens, &mut self.out);
                let ns = (t.elapsed().as_nanos() as u64).saturating_sub(self.overhead);
                self.samples.entry("persisted".into()).or_default().push(ns);
                self.persisted.push((n, ns));
                self.route(i as NodeId + 1);
            }
            if !any && self.queue.is_empty() {
                return;
            }
        }
    }

    fn tick_all(&mut self) {
        for id in 1..=self.nodes.len() as NodeId {
            self.timed("tick", id, |c, out| c.on_tick(0, out));
        }
        self.drain();
    }
}

/// The harness's commands come from many clients without opening sessions: the
/// replicas open them implicitly (no lease), so what is measured is the commands.
fn implicit_sessions(mut cluster: ClusterConfig) -> ClusterConfig {
    cluster.sessions.lease_ms = 0;
    cluster
}

/// Run the in-process cluster for `rounds` rounds of `per_round` commands each (see
/// the module documentation) and return the handler costs by input kind.
pub fn measure_handlers(protocol: Protocol, rounds: usize, per_round: usize) -> HandlerCosts {
    let cluster = implicit_sessions(ClusterConfig::default_local(7100, 0xCA11));
    let entry = cluster.entry_node();
    run_cluster(cluster, entry, protocol, rounds, per_round)
}

/// [`measure_handlers`] with a standalone batcher (node 6) taking every command.
pub fn measure_batched_handlers(
    protocol: Protocol,
    rounds: usize,
    per_round: usize,
) -> HandlerCosts {
    let cluster = implicit_sessions(
        ClusterConfig::default_local(7100, 0xCA13)
            .with_batchers(1)
            .expect("an smr cluster takes batchers"),
    );
    let entry = cluster.membership().batchers[0];
    run_cluster(cluster, entry, protocol, rounds, per_round)
}

fn run_cluster(
    mut cluster: ClusterConfig,
    entry: NodeId,
    protocol: Protocol,
    rounds: usize,
    per_round: usize,
) -> HandlerCosts {
    cluster.set_protocol(protocol);
    cluster.storage.checkpoint_instances = 0;
    let ids: Vec<NodeId> = cluster.nodes.iter().map(|n| n.id).collect();
    let mut h = Harness {
        nodes: Vec::new(),
        queue: VecDeque::new(),
        pending: vec![Vec::new(); ids.len()],
        samples: BTreeMap::new(),
        persisted: Vec::new(),
        overhead: timer_overhead_ns() as u64,
        out: Vec::new(),
        proposals: 0,
        proposed_commands: 0,
        batches: 0,
        batched_commands: 0,
    };
    for &id in &ids {
        let core = NodeCore::new(
            cluster.node_setup(id, partita_smr::service::<BPlusTree>()),
            Vec::new(),
            UnsafeBugs::default(),
            &mut h.out,
        );
        h.nodes.push(core);
        h.route(id);
    }
    h.drain();
    // Phase 1 done: start from clean samples.
    for _ in 0..3 {
        h.tick_all();
    }
    h.samples.clear();
    h.persisted.clear();
    h.proposals = 0;
    h.proposed_commands = 0;
    h.batches = 0;
    h.batched_commands = 0;
    let clients = 64u64;
    let mut seq = vec![0u64; clients as usize];
    let mut k = 0u64;
    for _ in 0..rounds {
        for _ in 0..per_round {
            let c = (k % clients) as usize;
            k += 1;
            seq[c] += 1;
            // Nobody's (reply_to 999): replicas skip the read (execution is measured
            // apart).
            let cmd = partita_btree::service::command(
                c as u64 + 1,
                seq[c],
                999,
                &Op::Read { key: k * 2 },
            );
            h.queue.push_back((entry, In::Request(cmd)));
        }
        h.drain();
        h.tick_all();
        h.tick_all();
    }
    let ratio = |n: u64, d: u64| if d > 0 { n as f64 / d as f64 } else { 0.0 };
    let mut costs = HandlerCosts {
        commands_per_value: ratio(h.proposed_commands, h.proposals),
        commands_per_batch: ratio(h.batched_commands, h.batches),
        ..HandlerCosts::default()
    };
    for (kind, mut v) in std::mem::take(&mut h.samples) {
        let calls = v.len() as u64;
        let mean_ns = trimmed_mean(&mut v);
        costs.by_kind.insert(kind, HandlerCost { calls, mean_ns });
    }
    let (a, b) = fit_line(
        &h.persisted
            .iter()
            .map(|&(n, ns)| (n as f64, ns as f64))
            .collect::<Vec<_>>(),
    );
    costs.persisted_ns = a;
    costs.persisted_token_ns = b;
    costs
}

/// The client-server server taking a request (`NodeCore::on_request` in `Mode::Cs`
/// executing a read of an absent key on a small tree and replying), and that read
/// alone: the caller subtracts the execution to get the server's own overhead.
#[derive(Clone, Debug, PartialEq)]
pub struct CsRequestCost {
    pub on_request_ns: f64,
    pub read_ns: f64,
}

pub fn measure_cs_request(iters: usize) -> CsRequestCost {
    let cluster = implicit_sessions(ClusterConfig::client_server(7200, 0xCA12));
    let mut out = Vec::new();
    let mut core = NodeCore::new(
        cluster.node_setup(1, partita_smr::service::<BPlusTree>()),
        Vec::new(),
        UnsafeBugs::default(),
        &mut out,
    );
    let preload = Op::Batch(
        (0..1000u64)
            .map(|i| partita_btree::BatchOp::Insert {
                key: 2 * i,
                value: i,
            })
            .collect(),
    );
    core.on_request(
        partita_btree::service::command(u64::MAX, 1, 1, &preload),
        &mut out,
    );
    let overhead = timer_overhead_ns() as u64;
    let iters = iters.max(10);
    let mut calls = Vec::with_capacity(iters);
    let mut reads = Vec::with_capacity(iters);
    for i in 0..iters as u64 {
        let key = (i * 2 + 1) % 2000;
        out.clear();
        let cmd = partita_btree::service::command(i % 64 + 1, i + 1, 1, &Op::Read { key });
        let t = Instant::now();
        core.on_request(cmd, &mut out);
        calls.push((t.elapsed().as_nanos() as u64).saturating_sub(overhead));
        let tree =
            partita_smr::downcast::<BPlusTree>(core.replica().expect("a cs server has a replica"))
                .expect("a B+tree server")
                .state();
        let t = Instant::now();
        black_box(tree.read(black_box(key)));
        reads.push((t.elapsed().as_nanos() as u64).saturating_sub(overhead));
    }
    CsRequestCost {
        on_request_ns: trimmed_mean(&mut calls),
        read_ns: trimmed_mean(&mut reads),
    }
}

/// A robust line `y = a + b x` through the points, with `a, b >= 0`: the points are
/// grouped by `x` and each group replaced by its median `y` (a preempted sample does
/// not move it), then the slope is the median of the slopes between groups
/// (Theil–Sen) and the intercept the median of `y - b x`. A negative slope gives a
/// constant (the median), a negative intercept a line through the origin.
pub fn fit_line(points: &[(f64, f64)]) -> (f64, f64) {
    fn median(v: &mut [f64]) -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        }
    }
    let mut groups: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for &(x, y) in points {
        groups.entry(x.to_bits()).or_default().push(y);
    }
    let mut g: Vec<(f64, f64)> = groups
        .into_iter()
        .map(|(x, mut ys)| (f64::from_bits(x), median(&mut ys)))
        .collect();
    g.sort_by(|a, b| a.0.total_cmp(&b.0));
    if g.len() < 2 {
        return (g.first().map_or(0.0, |p| p.1.max(0.0)), 0.0);
    }
    let mut slopes = Vec::new();
    for i in 0..g.len() {
        for j in i + 1..g.len() {
            if g[j].0 > g[i].0 {
                slopes.push((g[j].1 - g[i].1) / (g[j].0 - g[i].0));
            }
        }
    }
    let b = median(&mut slopes);
    if b < 0.0 {
        let mut ys: Vec<f64> = g.iter().map(|p| p.1).collect();
        return (median(&mut ys).max(0.0), 0.0);
    }
    let mut rest: Vec<f64> = g.iter().map(|p| p.1 - b * p.0).collect();
    let a = median(&mut rest);
    if a >= 0.0 {
        return (a, b);
    }
    let mut through_origin: Vec<f64> = g.iter().filter(|p| p.0 > 0.0).map(|p| p.1 / p.0).collect();
    (0.0, median(&mut through_origin).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_fit_and_stay_non_negative() {
        let (a, b) = fit_line(&[(0.0, 10.0), (10.0, 30.0), (20.0, 50.0)]);
        assert!((a - 10.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9);
        let (a, b) = fit_line(&[(1.0, 5.0), (2.0, 4.0)]);
        assert_eq!(b, 0.0);
        assert!(a > 0.0);
        // An outlier (a preemption) does not move the line.
        let (a, b) = fit_line(&[
            (0.0, 10.0),
            (10.0, 30.0),
            (10.0, 31.0),
            (10.0, 9_999.0),
            (20.0, 50.0),
            (30.0, 70.0),
            (30.0, 10_000.0),
            (30.0, 70.0),
        ]);
        assert!((a - 10.0).abs() < 1.0 && (b - 2.0).abs() < 0.1, "{a} {b}");
        assert_eq!(fit_line(&[(5.0, 7.0)]), (7.0, 0.0));
        assert_eq!(fit_line(&[]), (0.0, 0.0));
    }

    #[test]
    fn the_harness_times_every_role() {
        for p in [Protocol::RingPaxos, Protocol::MultiPaxos] {
            let c = measure_handlers(p, 20, 300);
            let vote = match p {
                Protocol::RingPaxos => "ringvote",
                Protocol::MultiPaxos => "phase2b",
            };
            for kind in ["request", "phase2a", vote, "tick", "persisted"] {
                let k = c.by_kind.get(kind).unwrap_or_else(|| panic!("{p}: {kind}"));
                assert!(k.calls > 0 && k.mean_ns >= 0.0, "{p} {kind}: {k:?}");
            }
            assert!(c.commands_per_value > 1.0, "{p}: batching: {c:?}");
            let b = measure_batched_handlers(p, 20, 300);
            for kind in ["batcher-request", "forwardbatch", "forwardack", "phase2a"] {
                let k = b.by_kind.get(kind).unwrap_or_else(|| panic!("{p}: {kind}"));
                assert!(k.calls > 0 && k.mean_ns >= 0.0, "{p} {kind}: {k:?}");
            }
            assert!(
                !b.by_kind.contains_key("request"),
                "{p}: every command batched"
            );
            assert!(b.commands_per_batch > 1.0, "{p}: batchers batch: {b:?}");
        }
        let cs = measure_cs_request(200);
        assert!(cs.on_request_ns > 0.0 && cs.read_ns >= 0.0, "{cs:?}");
    }
}
