//! The harness the integration tests script node cores on: acceptors 1, 2 and 3 (node 1
//! coordinating first) and a few replicas, wired by an in-memory network (one FIFO
//! queue, with optional filters that lose chosen messages when sent or when delivered)
//! and an in-memory disk (each node's acceptor log, which the core may truncate, and its
//! newest durable checkpoint). Crashed nodes lose what was in flight to or from them and
//! restart from what their disk holds. Everything sent to clients is recorded, with the
//! node that sent it. As the drivers do, invariants are checked after every step and
//! deferred (speculative) work runs right after a step's outputs left.

#![allow(dead_code)]

use partita_consensus::{
    AcceptorRecord, BatcherConfig, CoordinatorConfig, LearnerConfig, Membership, Msg, Protocol,
};
use partita_node::{CheckpointConfig, Mode, NodeCore, NodeSetup, Output, UnsafeBugs};
use partita_smr::SequentialReplica;

/// The B+tree result a reply carries.
pub fn res(r: &Reply) -> OpResult {
    partita_smr::reply_of::<BPlusTree>(&r.result)
}
use partita_btree::{BPlusTree, Op, OpResult};
use partita_types::early::EarlyReply;
use partita_types::{Command, NodeId, PartitionId, Reply};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub const ACCEPTORS: [NodeId; 3] = [1, 2, 3];

/// The settings every scenario starts from: acceptors [`ACCEPTORS`] (node 1
/// coordinating), `replicas` as learners, short timeouts, default checkpoints (too
/// rare to be reached), no speculation. Scenarios adjust it before building a
/// [`Cluster`]; `id`, `acceptor` and `replica` are filled in per node.
pub fn setup(protocol: Protocol, replicas: &[NodeId]) -> NodeSetup {
    NodeSetup {
        id: 0,
        service: partita_smr::service::<BPlusTree>(),
        session_lease_ms: None,
        cluster_id: 1,
        mode: Mode::Smr,
        membership: Membership {
            ring_decision: Default::default(),
            protocol,
            acceptors: ACCEPTORS.to_vec(),
            coordinator: 1,
            learners: replicas.to_vec(),
            partitions: Default::default(),
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        },
        acceptor: false,
        replica: false,
        partition: 0,
        batcher: false,
        coordinator_config: CoordinatorConfig {
            election_timeout_ticks: 20,
            suspect_ticks: 12,
            heartbeat_ticks: 5,
            retransmit_ticks: 30,
            ..CoordinatorConfig::default()
        },
        learner_config: LearnerConfig {
            gap_ticks: 5,
            ..LearnerConfig::default()
        },
        batcher_config: BatcherConfig {
            ack_timeout_ticks: 10,
            ..BatcherConfig::default()
        },
        checkpoint: CheckpointConfig::default(),
        early_replies: false,
        speculative: false,
        psmr: None,
        ordering: partita_node::OrderingSetup::Paxos,
        genesis: Vec::new(),
    }
}

/// Client 77's `seq`-th command: insert key `seq` with value `seq * 10`.
pub fn insert(seq: u64, reply_to: NodeId) -> Command {
    partita_btree::service::command(
        77,
        seq,
        reply_to,
        &Op::Insert {
            key: seq,
            value: seq * 10,
        },
    )
}

/// `client`'s first command.
pub fn cmd(client: u64, reply_to: NodeId, op: Op) -> Command {
    partita_btree::service::command(client, 1, reply_to, &op)
}

/// Which messages the network loses: (from, to, message) → lost.
pub type Filter = Box<dyn FnMut(NodeId, NodeId, &Msg) -> bool>;

/// What a client received: a final reply or an early one.
#[derive(Clone, Debug, PartialEq)]
pub enum Got {
    Final(Reply),
    Early(EarlyReply),
}

/// One node's durable log: the records, and how many of this boot's positions were
/// deleted from its front (positions restart at 1 on every boot).
#[derive(Default, Clone)]
pub struct Log {
    pub records: Vec<AcceptorRecord>,
    pub deleted_this_boot: u64,
    /// Records ever written (the log shrinks below this when truncated).
    pub written: u64,
}

/// Per peer message a replica handled: (decisions piggybacked on a Phase 2A, replies
/// released, instances speculated during the handler, deferred work left).
pub type Step = (bool, usize, u64, bool);

pub struct Cluster {
    /// Every node's setup but its `id`, `acceptor` and `replica`.
    pub setup: NodeSetup,
    pub bugs: UnsafeBugs,
    /// Whether the scenario expects checkpoints (and log truncation); otherwise one is
    /// a failure: those scenarios run too few instances to reach a checkpoint.
    pub checkpointing: bool,
    pub nodes: BTreeMap<NodeId, NodeCore>,
    pub down: BTreeSet<NodeId>,
    pub msgs: VecDeque<(NodeId, NodeId, Msg)>,
    pub persists: VecDeque<(NodeId, u64, AcceptorRecord)>,
    pub saves: VecDeque<(NodeId, u64, Vec<u8>)>,
    /// Durable log per node: what a restart recovers from.
    pub logs: BTreeMap<NodeId, Log>,
    /// Newest durable checkpoint per node.
    pub checkpoints: BTreeMap<NodeId, Vec<u8>>,
    /// (sending node, what) for every client-bound output, in order.
    pub got: Vec<(NodeId, Got)>,
    /// Chunk messages sent, and their largest payload.
    pub chunks: u64,
    pub chunk_bytes_max: usize,
    pub steps: Vec<Step>,
    /// Nodes whose checkpoint writes never complete (a disk that stalls them): their
    /// newest durable checkpoint stays where it was.
    pub stalled_checkpoints: BTreeSet<NodeId>,
    /// Ticks so far (each one a millisecond of the nodes' clock).
    pub ticks: u64,
    /// Replicas started before any change adds them (`partita member add`).
    pub joining: BTreeSet<NodeId>,
    /// ... and acceptors (`partita member add --acceptor`).
    pub joining_acceptors: BTreeSet<NodeId>,
    /// The partition of each joining replica of a partitioned cluster (0 if absent).
    pub joining_partitions: BTreeMap<NodeId, PartitionId>,
    /// Answers to membership requests: (node, request, outcome).
    pub member_done: Vec<(NodeId, u64, partita_node::members::MemberResult)>,
    /// Client commands refused: (node, client, seq, reason).
    pub refused: Vec<(NodeId, u64, u64, String)>,
    lose_sent: Option<Filter>,
    lose_delivered: Option<Filter>,
}

impl Cluster {
    /// Ask `via` for a membership `change`; tick until it answers. Returns the
    /// configuration epoch it left, or the refusal.
    pub fn member(
        &mut self,
        via: NodeId,
        change: partita_types::members::MemberChange,
    ) -> Result<u64, String> {
        let request = self.member_done.len() as u64 + 1000;
        let mut out = Vec::new();
        self.nodes
            .get_mut(&via)
            .unwrap()
            .on_member_request(request, change, &mut out);
        self.take(via, out);
        for _ in 0..200 {
            self.settle();
            if let Some((_, _, r)) = self.member_done.iter().find(|(_, q, _)| *q == request) {
                return r.clone().map(|m| m.epoch);
            }
            self.tick(1);
        }
        panic!("node {via} never answered membership request {request}");
    }

    /// Build and start every node (acceptors, replicas, then standalone batchers), with
    /// empty disks.
    pub fn new(setup: NodeSetup, bugs: UnsafeBugs) -> Cluster {
        let ids: Vec<NodeId> = setup
            .membership
            .acceptors
            .iter()
            .chain(&setup.membership.learners)
            .copied()
            .chain(setup.membership.standalone_batchers())
            .collect();
        // A node with several roles starts once.
        let mut seen = BTreeSet::new();
        let ids: Vec<NodeId> = ids.into_iter().filter(|id| seen.insert(*id)).collect();
        let mut c = Cluster {
            setup,
            bugs,
            checkpointing: false,
            nodes: BTreeMap::new(),
            down: BTreeSet::new(),
            ticks: 0,
            joining: BTreeSet::new(),
            joining_acceptors: BTreeSet::new(),
            joining_partitions: BTreeMap::new(),
            member_done: Vec::new(),
            refused: Vec::new(),
            msgs: VecDeque::new(),
            persists: VecDeque::new(),
            saves: VecDeque::new(),
            logs: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            got: Vec::new(),
            chunks: 0,
            chunk_bytes_max: 0,
            steps: Vec::new(),
            stalled_checkpoints: BTreeSet::new(),
            lose_sent: None,
            lose_delivered: None,
        };
        for id in ids {
            c.start(id);
        }
        c
    }

    pub fn node_setup(&self, id: NodeId) -> NodeSetup {
        NodeSetup {
            id,
            acceptor: self.setup.membership.acceptors.contains(&id)
                || self.joining_acceptors.contains(&id),
            replica: self.setup.membership.learners.contains(&id) || self.joining.contains(&id),
            batcher: self.setup.membership.batchers.contains(&id),
            partition: self
                .joining_partitions
                .get(&id)
                .copied()
                .unwrap_or_else(|| self.setup.membership.partition_of(id)),
            ..self.setup.clone()
        }
    }

    pub fn protocol(&self) -> Protocol {
        self.setup.membership.protocol
    }

    pub fn replicas(&self) -> &[NodeId] {
        &self.setup.membership.learners
    }

    /// From now on, lose the messages `f` picks when they are sent.
    pub fn lose(&mut self, f: impl FnMut(NodeId, NodeId, &Msg) -> bool + 'static) {
        self.lose_sent = Some(Box::new(f));
    }

    /// From now on, lose no message when it is sent.
    pub fn lose_nothing(&mut self) {
        self.lose_sent = None;
    }

    /// From now on, lose the messages `f` picks when they are delivered (to and from
    /// live nodes).
    pub fn lose_on_delivery(&mut self, f: impl FnMut(NodeId, NodeId, &Msg) -> bool + 'static) {
        self.lose_delivered = Some(Box::new(f));
    }

    /// (Re)start `id` from its durable log and newest checkpoint.
    pub fn start(&mut self, id: NodeId) {
        let mut out = Vec::new();
        let log = self.logs.entry(id).or_default();
        log.deleted_this_boot = 0;
        let records = log.records.clone();
        let setup = self.node_setup(id);
        let psmr = setup.psmr;
        let mut core = NodeCore::recover(
            setup,
            records,
            self.checkpoints.get(&id).cloned(),
            self.bugs.clone(),
            &mut out,
        )
        .unwrap_or_else(|e| panic!("node {id} refused its own checkpoint: {e}"));
        if let Some(layout) = psmr {
            // P-SMR replicas run their worker threads on OS threads, as `partita node`.
            core.set_thread_runner(std::sync::Arc::new(partita_gang::Gang::new(
                layout.threads,
                "psmr",
                std::time::Duration::from_micros(25),
            )));
        }
        self.nodes.insert(id, core);
        self.down.remove(&id);
        self.take(id, out);
    }

    /// `id` stops; its unfinished writes are lost.
    pub fn crash(&mut self, id: NodeId) {
        self.nodes.remove(&id);
        self.down.insert(id);
        self.persists.retain(|(n, _, _)| *n != id);
        self.saves.retain(|(n, _, _)| *n != id);
    }

    /// Carry out the outputs of one of `from`'s steps.
    pub fn take(&mut self, from: NodeId, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { to, msg } => {
                    if let Msg::CheckpointChunk { data, .. } = &msg {
                        self.chunks += 1;
                        self.chunk_bytes_max = self.chunk_bytes_max.max(data.len());
                    }
                    if !self.lose_sent.as_mut().is_some_and(|f| f(from, to, &msg)) {
                        self.msgs.push_back((from, to, msg));
                    }
                }
                Output::Persist { token, record } => self.persists.push_back((from, token, record)),
                Output::Reply(r) => self.got.push((from, Got::Final(r))),
                Output::Early(e) => self.got.push((from, Got::Early(e))),
                Output::Refused {
                    client,
                    seq,
                    reason,
                } => self.refused.push((from, client, seq, reason)),
                Output::MemberDone { request, result } => {
                    self.member_done.push((from, request, result))
                }
                Output::SaveCheckpoint { instance, bytes } => {
                    assert!(self.checkpointing, "no checkpoints in these scenarios");
                    if !self.stalled_checkpoints.contains(&from) {
                        self.saves.push_back((from, instance, bytes.to_vec()))
                    }
                }
                Output::TruncateLog { below_token } => {
                    assert!(self.checkpointing, "no checkpoints in these scenarios");
                    // Positions of this boot: 1..=n for the records it recovered, then
                    // the tokens of its writes. Delete everything before `below_token`.
                    let log = self.logs.get_mut(&from).unwrap();
                    let drop = (below_token - 1).saturating_sub(log.deleted_this_boot);
                    log.records.drain(..drop as usize);
                    log.deleted_this_boot += drop;
                }
            }
        }
        if let Some(n) = self.nodes.get(&from) {
            n.invariants();
        }
        // As the drivers do: deferred (speculative) work runs right after the outputs
        // of the step left.
        if let Some(n) = self.nodes.get_mut(&from) {
            if n.has_deferred_work() {
                let mut more = Vec::new();
                n.on_continue(&mut more);
                self.take(from, more);
            }
        }
    }

    /// Deliver one message, persist completion or checkpoint completion, in that order
    /// of preference; false if there was none. Messages to or from crashed nodes are
    /// lost.
    pub fn step(&mut self) -> bool {
        if let Some((from, to, msg)) = self.msgs.pop_front() {
            // Lost: to or from a crashed node, or to one that is not in the cluster
            // (an answer to a stranger's message).
            if self.down.contains(&from) || self.down.contains(&to) || !self.nodes.contains_key(&to)
            {
                return true;
            }
            if self
                .lose_delivered
                .as_mut()
                .is_some_and(|f| f(from, to, &msg))
            {
                return true;
            }
            let piggyback = matches!(&msg, Msg::Phase2A { decided, .. } if !decided.is_empty());
            let node = self.nodes.get_mut(&to).unwrap();
            let before = node.replica().map(|r| r.stats().speculated);
            let mut out = Vec::new();
            node.on_peer(from, msg, &mut out);
            if let Some(before) = before {
                let after = node.replica().unwrap().stats().speculated;
                let replies = out.iter().filter(|o| matches!(o, Output::Reply(_))).count();
                self.steps
                    .push((piggyback, replies, after - before, node.has_deferred_work()));
            }
            self.take(to, out);
        } else if let Some((node, token, record)) = self.persists.pop_front() {
            let log = self.logs.entry(node).or_default();
            log.records.push(record);
            log.written += 1;
            let mut out = Vec::new();
            self.nodes
                .get_mut(&node)
                .unwrap()
                .on_persisted(&[token], &mut out);
            self.take(node, out);
        } else if let Some((node, instance, bytes)) = self.saves.pop_front() {
            self.checkpoints.insert(node, bytes);
            let mut out = Vec::new();
            self.nodes
                .get_mut(&node)
                .unwrap()
                .on_checkpoint_saved(instance, &mut out);
            self.take(node, out);
        } else {
            return false;
        }
        true
    }

    /// Step until quiet.
    pub fn settle(&mut self) {
        for _ in 0..1_000_000 {
            if !self.step() {
                return;
            }
        }
        let pending: Vec<_> = self
            .msgs
            .iter()
            .take(12)
            .map(|(f, t, m)| (*f, *t, m.clone()))
            .collect();
        let counters: Vec<_> = self
            .nodes
            .iter()
            .map(|(i, n)| (*i, n.counters().clone()))
            .collect();
        panic!("the cluster never went quiet: {counters:?} {pending:?}");
    }

    /// `n` times: every live node ticks, then the cluster settles.
    pub fn tick(&mut self, n: usize) {
        for _ in 0..n {
            self.ticks += 1;
            let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
            for id in ids {
                let mut out = Vec::new();
                let now_ms = self.ticks;
                self.nodes.get_mut(&id).unwrap().on_tick(now_ms, &mut out);
                self.take(id, out);
            }
            self.settle();
        }
    }

    /// Hand a client's command to `via`, without settling.
    pub fn request(&mut self, via: NodeId, cmd: Command) {
        let mut out = Vec::new();
        self.nodes.get_mut(&via).unwrap().on_request(cmd, &mut out);
        self.take(via, out);
    }

    /// Hand a client's command to `via`, then settle.
    pub fn submit(&mut self, via: NodeId, cmd: Command) {
        self.request(via, cmd);
        self.settle();
    }

    /// Tick until `id` coordinates; fails after `ticks_max` ticks. Returns the ticks.
    pub fn tick_until_leader(&mut self, id: NodeId, ticks_max: usize) -> usize {
        let protocol = self.protocol();
        let mut ticks = 0;
        while self.nodes[&id].leads().is_none() {
            self.tick(1);
            ticks += 1;
            assert!(ticks <= ticks_max, "{protocol}: node {id} never campaigned");
        }
        ticks
    }

    /// The final replies, in order.
    pub fn replies(&self) -> impl Iterator<Item = &Reply> {
        self.got.iter().filter_map(|(_, g)| match g {
            Got::Final(r) => Some(r),
            Got::Early(_) => None,
        })
    }

    /// The final replies to commands numbered `seq`.
    pub fn replies_to(&self, seq: u64) -> Vec<&Reply> {
        self.replies().filter(|r| r.seq == seq).collect()
    }

    /// The final replies to `client`.
    pub fn replies_of(&self, client: u64) -> Vec<&Reply> {
        self.replies().filter(|r| r.client == client).collect()
    }

    /// Whether an [`insert`] numbered `seq` was answered as a new key.
    pub fn answered(&self, seq: u64) -> bool {
        self.replies()
            .any(|r| r.seq == seq && res(r) == OpResult::Inserted(true))
    }

    /// What `client` received, final and early, in order.
    pub fn got_by(&self, client: u64) -> Vec<Got> {
        self.got
            .iter()
            .filter(|(_, g)| match g {
                Got::Final(r) => r.client == client,
                Got::Early(e) => e.client() == client,
            })
            .map(|(_, g)| g.clone())
            .collect()
    }

    pub fn node(&self, id: NodeId) -> &NodeCore {
        &self.nodes[&id]
    }

    pub fn replica(&self, id: NodeId) -> &SequentialReplica<BPlusTree> {
        partita_smr::downcast(self.nodes[&id].replica().unwrap()).expect("a B+tree replica")
    }

    pub fn counter(&self, id: NodeId, what: &str) -> u64 {
        self.nodes[&id].counters().get(what).copied().unwrap_or(0)
    }

    pub fn leader_count(&self) -> usize {
        self.nodes.values().filter(|n| n.leads().is_some()).count()
    }

    fn live_replicas(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.replicas()
            .iter()
            .copied()
            .filter(|r| !self.down.contains(r))
    }

    /// Tick until every live replica executed what replica 4 did.
    pub fn converge(&mut self, ticks_max: usize) {
        for _ in 0..ticks_max {
            let target = self.replica(4).last_instance();
            if self
                .live_replicas()
                .all(|r| self.replica(r).last_instance() == target)
            {
                return;
            }
            self.tick(1);
        }
        let at: Vec<_> = self
            .live_replicas()
            .map(|r| (r, self.replica(r).last_instance()))
            .collect();
        panic!("replicas did not converge: {at:?}");
    }

    /// Every live replica holds the same state.
    pub fn digests_agree(&self) {
        let d: Vec<(NodeId, u64)> = self
            .live_replicas()
            .map(|r| (r, self.replica(r).digest()))
            .collect();
        assert!(
            d.windows(2).all(|w| w[0].1 == w[1].1),
            "replicas diverge: {d:?}"
        );
    }
}

/// The nodes of [`three_regions`].
pub const GEO_NODES: [NodeId; 3] = [1, 2, 3];

/// Three nodes 1, 2 and 3 in regions A, B and C (round trips 70, 150 and 90 ms), each
/// a replica of the geo B+tree of `keys` keys ordered by GeoPaxos+ or, with `epaxos`,
/// by EPaxos; clients at every node; no DOPs.
pub fn three_region_setup(keys: u64, epaxos: bool) -> NodeSetup {
    let mut s = setup(Protocol::MultiPaxos, &GEO_NODES);
    let geo = partita_node::GeoSetup {
        replicas: GEO_NODES.to_vec(),
        regions: vec!["A".into(), "B".into(), "C".into()],
        rtt_ms: vec![
            vec![0.0, 70.0, 150.0],
            vec![70.0, 0.0, 90.0],
            vec![150.0, 90.0, 0.0],
        ],
        order: 4,
        keys,
        placement: partita_geo::Placement::Home,
        value_bytes: 100,
        dop_interval_ms: 0,
        optimizer_brute_force: true,
        seed: 7,
        stall_check_ticks: 40,
        clock_retry_ticks: 10,
        barrier_interval_ms: 100,
        epaxos_window: 1024,
    };
    // The common replica starts with keys 0..keys, each its own value.
    s.genesis = (0..keys)
        .map(|key| {
            <BPlusTree as partita_service::ServiceCodec>::encode_command(&Op::Insert {
                key,
                value: key,
            })
        })
        .collect();
    s.ordering = if epaxos {
        partita_node::OrderingSetup::Epaxos(geo)
    } else {
        partita_node::OrderingSetup::GeoPaxosPlus(geo)
    };
    s
}

/// The cluster of [`three_region_setup`], after `boot_ticks` ticks (GeoPaxos+'s
/// serializer leaders finish Phase 1 in them).
pub fn three_regions(keys: u64, epaxos: bool, bugs: UnsafeBugs, boot_ticks: usize) -> Cluster {
    let mut c = Cluster::new(three_region_setup(keys, epaxos), bugs);
    c.tick(boot_ticks);
    c
}

/// A geo B+tree command of `client` (sequence `seq`, no reply address).
pub fn geo_cmd(client: u64, seq: u64, op: Op) -> Command {
    partita_btree::service::command(client, seq, 0, &op)
}
