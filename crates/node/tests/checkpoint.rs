//! Checkpoints, log truncation and state transfer, scripted on node cores wired by an
//! in-memory network and disk (the harness of `failover.rs`, plus checkpoint files and
//! log truncation): replicas checkpoint, acceptors truncate below what a majority of
//! replicas checkpointed (memory and log), a restarted acceptor keeps its promise and
//! the values above the truncation point, a restarted replica restores its checkpoint
//! and learns only the suffix, and a replica that was down while the acceptors
//! truncated catches up by fetching a peer's checkpoint in chunks. Exactly-once holds
//! across all of it: a resubmission after a restore is answered from the cache.

use partita_consensus::{
    AcceptorRecord, CoordinatorConfig, LearnerConfig, Membership, Msg, Protocol,
};
use partita_node::{CheckpointConfig, Mode, NodeCore, NodeSetup, Output, RecoverError, UnsafeBugs};
use partita_types::{Command, NodeId, Op, OpResult, Reply};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

const ACCEPTORS: [NodeId; 3] = [1, 2, 3];
const REPLICAS: [NodeId; 3] = [4, 5, 6];
const CLUSTER: u64 = 0xC0FFEE;
const INTERVAL: u64 = 10;

/// One node's durable log: the records, and how many of this boot's positions were
/// deleted from its front (positions restart at 1 on every boot).
#[derive(Default, Clone)]
struct Log {
    records: Vec<AcceptorRecord>,
    deleted_this_boot: u64,
    /// Records ever written (the log shrinks below this when truncated).
    written: u64,
}

struct Cluster {
    protocol: Protocol,
    /// Replicas execute Ring Paxos proposals speculatively.
    speculative: bool,
    bugs: UnsafeBugs,
    nodes: BTreeMap<NodeId, NodeCore>,
    down: BTreeSet<NodeId>,
    msgs: VecDeque<(NodeId, NodeId, Msg)>,
    persists: VecDeque<(NodeId, u64, AcceptorRecord)>,
    saves: VecDeque<(NodeId, u64, Vec<u8>)>,
    logs: BTreeMap<NodeId, Log>,
    /// Newest durable checkpoint per node.
    checkpoints: BTreeMap<NodeId, Vec<u8>>,
    replies: Vec<Reply>,
    /// Chunk messages seen on the network, and their largest payload.
    chunks: u64,
    chunk_bytes_max: usize,
    /// Lose every n-th state-transfer message (0: none).
    lose_transfer_every: u64,
    transfer_msgs: u64,
}

impl Cluster {
    fn setup(&self, id: NodeId) -> NodeSetup {
        NodeSetup {
            id,
            cluster_id: CLUSTER,
            mode: Mode::Smr,
            membership: Membership {
                protocol: self.protocol,
                acceptors: ACCEPTORS.to_vec(),
                coordinator: 1,
                learners: REPLICAS.to_vec(),
                partitions: Default::default(),
            },
            acceptor: ACCEPTORS.contains(&id),
            replica: REPLICAS.contains(&id),
            coordinator_config: CoordinatorConfig {
                election_timeout_ticks: 20,
                suspect_ticks: 12,
                heartbeat_ticks: 5,
                retransmit_ticks: 30,
                phase1_range_instances: 40,
                ..CoordinatorConfig::default()
            },
            learner_config: LearnerConfig {
                gap_ticks: 5,
                learn_batch_instances_max: 8,
                ..LearnerConfig::default()
            },
            checkpoint: CheckpointConfig {
                interval_instances: INTERVAL,
                announce_ticks: 5,
                // Small chunks, so that even these small checkpoints take several.
                chunk_bytes: 256,
                transfer_window_chunks: 3,
                transfer_timeout_ticks: 10,
                ..CheckpointConfig::default()
            },
            early_replies: false,
            speculative: self.speculative,
        }
    }

    fn new(protocol: Protocol, bugs: UnsafeBugs) -> Cluster {
        Self::with_speculation(protocol, bugs, false)
    }

    fn with_speculation(protocol: Protocol, bugs: UnsafeBugs, speculative: bool) -> Cluster {
        let mut c = Cluster {
            protocol,
            speculative,
            bugs,
            nodes: BTreeMap::new(),
            down: BTreeSet::new(),
            msgs: VecDeque::new(),
            persists: VecDeque::new(),
            saves: VecDeque::new(),
            logs: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            replies: Vec::new(),
            chunks: 0,
            chunk_bytes_max: 0,
            lose_transfer_every: 0,
            transfer_msgs: 0,
        };
        for id in ACCEPTORS.iter().chain(&REPLICAS) {
            c.start(*id);
        }
        c.tick(3);
        c
    }

    fn start(&mut self, id: NodeId) {
        let mut out = Vec::new();
        let log = self.logs.entry(id).or_default();
        log.deleted_this_boot = 0;
        let records = log.records.clone();
        let core = NodeCore::recover(
            self.setup(id),
            records,
            self.checkpoints.get(&id).cloned(),
            self.bugs.clone(),
            &mut out,
        )
        .unwrap_or_else(|e| panic!("node {id} refused its own checkpoint: {e}"));
        self.nodes.insert(id, core);
        self.down.remove(&id);
        self.take(id, out);
    }

    fn crash(&mut self, id: NodeId) {
        self.nodes.remove(&id);
        self.down.insert(id);
        self.persists.retain(|(n, _, _)| *n != id);
        self.saves.retain(|(n, _, _)| *n != id);
    }

    fn take(&mut self, from: NodeId, out: Vec<Output>) {
        for o in out {
            match o {
                Output::Send { to, msg } => {
                    if let Msg::CheckpointChunk { data, .. } = &msg {
                        self.chunks += 1;
                        self.chunk_bytes_max = self.chunk_bytes_max.max(data.len());
                    }
                    self.msgs.push_back((from, to, msg))
                }
                Output::Persist { token, record } => self.persists.push_back((from, token, record)),
                Output::Reply(r) => self.replies.push(r),
                Output::Refused { .. } | Output::Early(_) => {}
                Output::SaveCheckpoint { instance, bytes } => {
                    self.saves.push_back((from, instance, bytes.to_vec()))
                }
                Output::TruncateLog { below_token } => {
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

    /// Deliver everything until quiet (messages to or from crashed nodes are lost).
    fn settle(&mut self) {
        for _ in 0..1_000_000 {
            if let Some((from, to, msg)) = self.msgs.pop_front() {
                if self.down.contains(&from) || self.down.contains(&to) {
                    continue;
                }
                if matches!(
                    msg,
                    Msg::CheckpointRequest { .. } | Msg::CheckpointChunk { .. }
                ) {
                    self.transfer_msgs += 1;
                    if self.lose_transfer_every > 0
                        && self.transfer_msgs.is_multiple_of(self.lose_transfer_every)
                    {
                        continue;
                    }
                }
                let mut out = Vec::new();
                self.nodes
                    .get_mut(&to)
                    .unwrap()
                    .on_peer(from, msg, &mut out);
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

    fn tick(&mut self, n: usize) {
        for _ in 0..n {
            let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
            for id in ids {
                let mut out = Vec::new();
                self.nodes.get_mut(&id).unwrap().on_tick(&mut out);
                self.take(id, out);
            }
            self.settle();
        }
    }

    fn submit(&mut self, via: NodeId, seq: u64, reply_to: NodeId) {
        let cmd = Command {
            client: 77,
            seq,
            reply_to,
            op: Op::Insert {
                key: seq,
                value: seq * 10,
            },
        };
        let mut out = Vec::new();
        self.nodes.get_mut(&via).unwrap().on_request(cmd, &mut out);
        self.take(via, out);
        self.settle();
    }

    fn replies_to(&self, seq: u64) -> Vec<&Reply> {
        self.replies.iter().filter(|r| r.seq == seq).collect()
    }

    fn replica(&self, id: NodeId) -> &partita_smr::SequentialReplica {
        self.nodes[&id].replica().unwrap()
    }

    fn counter(&self, id: NodeId, what: &str) -> u64 {
        self.nodes[&id].counters().get(what).copied().unwrap_or(0)
    }

    /// Tick until every live replica executed what replica 4 did.
    fn converge(&mut self, ticks_max: usize) {
        for _ in 0..ticks_max {
            let target = self.replica(4).last_instance();
            if REPLICAS
                .iter()
                .filter(|r| !self.down.contains(r))
                .all(|&r| self.replica(r).last_instance() == target)
            {
                return;
            }
            self.tick(1);
        }
        let at: Vec<_> = REPLICAS
            .iter()
            .filter(|r| !self.down.contains(r))
            .map(|&r| (r, self.replica(r).last_instance()))
            .collect();
        panic!("replicas did not converge: {at:?}");
    }

    fn digests_agree(&self) {
        let d: Vec<(NodeId, u64)> = REPLICAS
            .iter()
            .filter(|r| !self.down.contains(r))
            .map(|&r| (r, self.replica(r).digest()))
            .collect();
        assert!(
            d.windows(2).all(|w| w[0].1 == w[1].1),
            "replicas diverge: {d:?}"
        );
    }
}

/// Commands 1..=n through the leader, answered by replica 4, one instance each.
fn load(c: &mut Cluster, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        c.submit(1, seq, 4);
        c.tick(1);
        assert_eq!(
            c.replies_to(seq).len(),
            1,
            "command {seq} not answered exactly once"
        );
    }
}

fn state_transfer(protocol: Protocol, bugs: UnsafeBugs, lose_every: u64) -> Cluster {
    state_transfer_with(Cluster::new(protocol, bugs), lose_every)
}

fn state_transfer_with(mut c: Cluster, lose_every: u64) -> Cluster {
    let protocol = c.protocol;
    c.lose_transfer_every = lose_every;
    load(&mut c, 1..=5);
    c.tick(10);
    assert_eq!(c.replica(6).last_instance(), c.replica(4).last_instance());

    // Replica 6 goes down; the others go on, checkpoint, and the acceptors truncate
    // below what both of them (a majority of three) have checkpointed.
    c.crash(6);
    load(&mut c, 6..=80);
    c.tick(20);
    let executed = c.replica(4).last_instance();
    for a in ACCEPTORS {
        let acc = c.nodes[&a].acceptor().unwrap();
        assert!(
            acc.truncated_below() > executed - 2 * INTERVAL,
            "{protocol}: acceptor {a} truncated below {} only, {executed} executed",
            acc.truncated_below()
        );
        let log = &c.logs[&a];
        assert!(
            (log.records.len() as u64) < log.written / 2,
            "{protocol}: acceptor {a}'s log kept {} of {} records",
            log.records.len(),
            log.written
        );
    }

    // Replica 6 comes back with nothing: the instances it needs are gone from every
    // acceptor, so it fetches a checkpoint from another replica, then the suffix.
    c.checkpoints.remove(&6);
    c.start(6);
    c.converge(400);
    c.digests_agree();
    assert_eq!(c.counter(6, "state_transfers_completed"), 1, "{protocol}");
    if lose_every > 0 {
        assert!(c.counter(6, "state_transfer_retransmits") > 0);
    }
    assert!(c.chunks >= 3, "{protocol}: only {} chunks", c.chunks);
    assert!(c.chunk_bytes_max <= 256);
    let tree = c.replica(6).tree();
    for seq in 1..=80 {
        assert_eq!(tree.read(seq), Some(seq * 10), "{protocol}: key {seq}");
    }
    // It saved the transferred checkpoint as its own: a restart needs no transfer.
    assert!(c.nodes[&6].checkpoint_durable() > 0);
    c
}

#[test]
fn multipaxos_lagging_replica_catches_up_by_state_transfer() {
    let mut c = state_transfer(Protocol::MultiPaxos, UnsafeBugs::default(), 0);
    exactly_once_after_transfer(&mut c, true);
}

#[test]
fn ringpaxos_lagging_replica_catches_up_by_state_transfer() {
    let mut c = state_transfer(Protocol::RingPaxos, UnsafeBugs::default(), 0);
    exactly_once_after_transfer(&mut c, true);
}

/// Checkpoints, truncation and state transfer with speculating replicas: checkpoints
/// are taken with the speculation set aside, so everything above holds unchanged.
#[test]
fn ringpaxos_speculating_replicas_checkpoint_and_transfer_state() {
    let c = Cluster::with_speculation(Protocol::RingPaxos, UnsafeBugs::default(), true);
    let mut c = state_transfer_with(c, 0);
    assert!(c.replica(4).stats().speculated > 0);
    assert!(c.replica(4).stats().speculation_confirmed > 0);
    exactly_once_after_transfer(&mut c, true);
}

#[test]
fn state_transfer_survives_lost_chunks_and_requests() {
    let mut c = state_transfer(Protocol::RingPaxos, UnsafeBugs::default(), 3);
    exactly_once_after_transfer(&mut c, true);
}

#[test]
fn planted_reexecution_is_caught_after_state_transfer() {
    let bugs = UnsafeBugs {
        reexecute_duplicates: true,
        ..UnsafeBugs::default()
    };
    let mut c = state_transfer(Protocol::RingPaxos, bugs, 0);
    exactly_once_after_transfer(&mut c, false);
}

/// Command 80 was executed (and answered by replica 4) while replica 6 was down. Its
/// client never saw the answer and resubmits, now to replica 6, which holds that
/// command's effect only through the transferred checkpoint.
fn exactly_once_after_transfer(c: &mut Cluster, correct: bool) {
    let first = c.replies_to(80)[0].clone();
    c.submit(2, 80, 6);
    c.tick(5);
    let again: Vec<Reply> = c
        .replies_to(80)
        .into_iter()
        .filter(|r| **r != first)
        .cloned()
        .collect();
    if correct {
        assert_eq!(
            c.replies_to(80).len(),
            2,
            "the resubmission was not answered"
        );
        assert!(again.is_empty(), "answered differently: {again:?}");
        c.digests_agree();
    } else {
        // Control: the planted bug executes the resubmission again, visibly.
        assert_eq!(again.len(), 1, "the planted bug went unnoticed");
        assert_eq!(again[0].result, OpResult::Inserted(false));
    }
}

#[test]
fn restarted_replica_restores_its_checkpoint_and_learns_only_the_suffix() {
    let mut c = Cluster::new(Protocol::RingPaxos, UnsafeBugs::default());
    load(&mut c, 1..=34);
    c.tick(10);
    let ckpt = c.nodes[&5].checkpoint_durable();
    assert!(ckpt >= 30, "replica 5 checkpointed up to {ckpt} only");
    let executed = c.replica(5).last_instance();
    assert!(executed > ckpt);

    c.crash(5);
    load(&mut c, 35..=36);
    c.start(5);
    assert_eq!(c.replica(5).last_instance(), ckpt, "restored, not replayed");
    assert_eq!(c.nodes[&5].learner().unwrap().delivered_up_to(), ckpt);
    c.converge(100);
    c.digests_agree();
    let learner = c.nodes[&5].learner().unwrap();
    assert_eq!(
        learner.stats().delivered,
        c.replica(4).last_instance() - ckpt,
        "only the suffix is learned"
    );
    assert_eq!(c.counter(5, "state_transfers_started"), 0);

    // The client of command 36 resubmits to replica 5: answered from the cache
    // restored from the checkpoint plus the suffix, not executed again.
    let first = c.replies_to(36)[0].clone();
    c.submit(3, 36, 5);
    c.tick(5);
    let all = c.replies_to(36);
    assert_eq!(all.len(), 2);
    assert_eq!(*all[1], first);

    // Command 30 lies inside the checkpoint: a client resubmitting it now (it is
    // older than the client's latest, 36) is stale and ignored, as without restarts.
    c.submit(3, 30, 5);
    c.tick(5);
    assert_eq!(c.replies_to(30).len(), 1);
    c.digests_agree();
}

#[test]
fn restarted_acceptor_keeps_its_promise_and_the_values_above_the_truncation() {
    let mut c = Cluster::new(Protocol::MultiPaxos, UnsafeBugs::default());
    load(&mut c, 1..=47);
    c.tick(20);
    let before = c.nodes[&2].acceptor().unwrap();
    let (promised, truncated) = (before.promised(), before.truncated_below());
    assert!(truncated > 30, "truncated below {truncated} only");
    let kept: Vec<(u64, _)> = (truncated..=before.max_accepted_instance())
        .filter_map(|i| before.accepted(i).map(|(b, v)| (i, (b, v.vid))))
        .collect();
    assert!(!kept.is_empty());
    let first_record = &c.logs[&2].records[0];
    assert!(
        !matches!(first_record, AcceptorRecord::Promise { .. }),
        "the log still starts with its first promise"
    );

    c.crash(2);
    c.start(2);
    let after = c.nodes[&2].acceptor().unwrap();
    assert_eq!(after.promised(), promised);
    assert_eq!(after.truncated_below(), truncated);
    for (i, (b, vid)) in &kept {
        let (b2, v2) = after
            .accepted(*i)
            .expect("value above the truncation point");
        assert_eq!((b2, v2.vid), (*b, *vid), "instance {i}");
    }
    assert!(after.accepted(truncated - 1).is_none());

    // The cluster goes on, with acceptor 2 voting again.
    c.crash(3);
    load(&mut c, 48..=50);
    c.start(3);
    c.converge(100);
    c.digests_agree();
}

#[test]
fn a_foreign_checkpoint_is_refused() {
    let mut c = Cluster::new(Protocol::RingPaxos, UnsafeBugs::default());
    load(&mut c, 1..=12);
    c.tick(5);
    let ckpt = c.checkpoints[&4].clone();
    let setup = c.setup(5);
    let mut out = Vec::new();
    match NodeCore::recover(
        setup.clone(),
        vec![],
        Some(ckpt.clone()),
        UnsafeBugs::default(),
        &mut out,
    ) {
        Err(RecoverError::Checkpoint(e)) => {
            assert!(e.to_string().contains("node 4"), "{e}")
        }
        Err(e) => panic!("unexpected {e}"),
        Ok(_) => panic!("replica 5 adopted replica 4's checkpoint"),
    }
    let mut damaged = ckpt;
    let at = damaged.len() / 2;
    damaged[at] ^= 0x10;
    let setup4 = c.setup(4);
    assert!(NodeCore::recover(
        setup4,
        vec![],
        Some(damaged),
        UnsafeBugs::default(),
        &mut out
    )
    .is_err());
    assert!(out.is_empty(), "a refused recovery emitted {out:?}");
}
