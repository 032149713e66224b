//! Execution models. For now the sequential replica of paper 001 §IV ("Fully replicated
//! B-tree"): every replica executes every mutating command in the decided order; a
//! read-only command (read, query, next, prev) is ordered like everything else but only
//! the replica the client chose executes it; only the chosen replica replies.
//!
//! Exactly-once: a command carries (client id, sequence number). The replica keeps, per
//! client, the sequence number and reply of its last *mutating* command. A resubmitted
//! mutation is answered from that cache instead of being executed twice; anything older
//! than the cached sequence number is stale (the client has moved on) and ignored. Reads
//! need no cache: re-executing a resubmitted read at its new position in the order is
//! still within the operation's interval, so it stays linearizable. Because only
//! mutations touch the cache, it is the same on every replica (it is part of the
//! replicated state).
//!
//! Input: [`SequentialReplica::execute`] with a decided value, in instance order.
//! Output: the replies this replica must send. Invariants
//! ([`SequentialReplica::invariants`]): instances are executed once and in order; the
//! reply cache never goes backwards for a client and holds no reply from an instance
//! not yet executed.
//!
//! Speculative execution (paper 001 §III-B): with Ring Paxos a replica sees each
//! proposed value (Phase 2A) before it is decided. [`SequentialReplica::propose`] hands
//! it such a value; once it is the next instance after everything executed or already
//! speculated, the replica executes it at once, keeping per-instance undo records (the
//! B+tree's [`partita_btree::Undo`]s, the reply-cache entries it replaced, the cache's
//! high-water mark) and *holding* its replies. [`SequentialReplica::execute`] with the
//! decision then either confirms the head speculation (same value id: its held replies
//! are released) or rolls every speculated instance back, newest first, executes the
//! decided value and re-speculates the later proposals still pending. A newer
//! proposal for an already speculated instance (a new leader) rolls back from that
//! instance at once. With deferred speculation
//! ([`SequentialReplica::set_deferred_speculation`], what the node core uses),
//! `propose` and `execute` only record proposals and roll back what they contradict;
//! the caller runs [`SequentialReplica::speculate`] later, after sending the replies
//! the decision released. Invariants: the tree is the decided prefix plus the speculated
//! suffix; [`SequentialReplica::last_instance`] is the last *decided* instance
//! executed; [`SequentialReplica::digest`] is the digest of the decided state;
//! [`SequentialReplica::checkpoint`] refuses (panics) while anything is speculated, so
//! its caller rolls the speculation back first
//! ([`SequentialReplica::rollback_speculation`]) and re-speculates after
//! ([`SequentialReplica::respeculate`]); the re-speculation computes the same held
//! replies again. [`ReplicaStats::work`] counts the execution work done, rolled-back
//! speculation included, for CPU models.
//!
//! Early replies (paper 001 §VII; [`SequentialReplica::set_early_replies`]): the held
//! replies of a speculation also leave at once as tentative replies
//! ([`partita_types::early::EarlyReply::Tentative`]), and when the decision confirms
//! the speculation, a short confirmation per held reply leaves instead of the reply
//! ([`SequentialReplica::take_early`]). A rollback sends nothing: the re-execution
//! sends new tentative replies (speculated again) or final ones (the decided value).
//!
//! Checkpoints ([`checkpoint`]): [`SequentialReplica::checkpoint`] serializes the tree,
//! the reply cache and the instance covered into one checksummed byte string that
//! [`SequentialReplica::restore`] turns back into a replica answering exactly as the
//! original would (paper 001 §IV: replicas checkpoint so that acceptors can truncate
//! their logs; a replica that fell behind the truncation point restores a peer's
//! checkpoint, then learns the suffix).

pub mod checkpoint;

pub use checkpoint::{
    checkpoint_header, checkpoint_identity, restamp_checkpoint, verify_checkpoint, CheckpointError,
    CheckpointInfo, CHECKPOINT_IDENTITY_BYTES, CHECKPOINT_MAGIC, CHECKPOINT_VERSION,
};

use partita_btree::{BPlusTree, Undo};
use partita_consensus::{Value, Vid};
use partita_types::early::EarlyReply;
use partita_types::{
    BatchOp, ClientId, Instance, NodeId, Op, OpResult, PartitionId, PartitionLayout, Reply,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub struct ReplicaStats {
    pub commands_executed: u64,
    pub reads_skipped: u64,
    pub duplicates_answered: u64,
    pub stale_ignored: u64,
    pub btree_ops: u64,
    /// Instances executed speculatively (a re-speculation after a rollback counts again).
    pub speculated: u64,
    /// Speculated instances the decision confirmed (their held replies were released).
    pub speculation_confirmed: u64,
    /// Speculated instances rolled back (a decision or a newer proposal disagreed).
    pub speculation_rolled_back: u64,
    /// Work this replica did, rolled-back speculation included (never rewound): what
    /// a CPU model charges, where it ran.
    pub work: ExecutionWork,
}

/// The kinds of B+tree operation [`ExecutionWork::by_kind`] counts, in its order.
pub const OP_KINDS: [&str; 7] = [
    "insert", "delete", "update", "read", "next", "prev", "query",
];

/// Execution work done, counted as it happens and never rewound by a rollback (a
/// rolled-back speculation did run). Differences across a handler tell what that
/// handler executed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecutionWork {
    /// Commands executed on the B+tree (speculated or decided).
    pub commands: u64,
    /// B+tree operations (a batch of seven counts 7).
    pub btree_ops: u64,
    /// The same operations by kind ([`OP_KINDS`] order).
    pub by_kind: [u64; 7],
    /// Entries returned by range queries.
    pub query_entries: u64,
}

impl ExecutionWork {
    fn count(&mut self, op: &Op, result: &OpResult) {
        self.commands += 1;
        self.btree_ops += op.btree_ops() as u64;
        let k = match op {
            Op::Insert { .. } => 0,
            Op::Delete { .. } => 1,
            Op::Update { .. } => 2,
            Op::Read { .. } => 3,
            Op::Next { .. } => 4,
            Op::Prev { .. } => 5,
            Op::Query { .. } => 6,
            Op::Batch(ops) => {
                for b in ops {
                    match b {
                        BatchOp::Insert { .. } => self.by_kind[0] += 1,
                        BatchOp::Delete { .. } => self.by_kind[1] += 1,
                    }
                }
                return;
            }
        };
        self.by_kind[k] += 1;
        if let OpResult::Entries(v) = result {
            self.query_entries += v.len() as u64;
        }
    }

    /// The work done since `before` (zero where a counter went back, as when the
    /// replica was replaced by a restored checkpoint).
    pub fn since(&self, before: &ExecutionWork) -> ExecutionWork {
        let mut by_kind = [0; 7];
        for (i, k) in by_kind.iter_mut().enumerate() {
            *k = self.by_kind[i].saturating_sub(before.by_kind[i]);
        }
        ExecutionWork {
            commands: self.commands.saturating_sub(before.commands),
            btree_ops: self.btree_ops.saturating_sub(before.btree_ops),
            by_kind,
            query_entries: self.query_entries.saturating_sub(before.query_entries),
        }
    }
}

impl ReplicaStats {
    /// Restore the execution counters of `before` (a rolled-back speculation's work
    /// never happened), keeping the speculation counters and the work done.
    fn rewind_to(&mut self, before: &ReplicaStats) {
        let (s, c, r, w) = (
            self.speculated,
            self.speculation_confirmed,
            self.speculation_rolled_back,
            self.work,
        );
        *self = before.clone();
        self.speculated = s;
        self.speculation_confirmed = c;
        self.speculation_rolled_back = r;
        self.work = w;
    }
}

/// One speculatively executed instance: how to undo it, and the replies it holds.
struct Speculation {
    instance: Instance,
    vid: Vid,
    /// B+tree undo records, in execution order (applied in reverse).
    undo: Vec<Undo>,
    /// Reply-cache entries it overwrote, in order: (client, previous entry).
    cache_undo: Vec<(ClientId, Option<Reply>)>,
    max_cached_before: Instance,
    mutations_before: u64,
    stats_before: ReplicaStats,
    /// Digest of the tree before it: for the head speculation, the decided state's.
    digest_before: u64,
    /// Replies held until the decision confirms the value.
    held: Vec<Reply>,
}

pub struct SequentialReplica {
    id: NodeId,
    /// Written into checkpoints, so that one found in another cluster's data
    /// directory is refused (0 until [`SequentialReplica::set_cluster_id`]).
    cluster_id: u64,
    tree: BPlusTree,
    last_instance: Instance,
    /// Per client: sequence number and reply of its last mutating command.
    replies: HashMap<ClientId, Reply>,
    /// Highest instance of any cached reply (0: empty cache), for `invariants`.
    max_cached_instance: Instance,
    stats: ReplicaStats,
    /// Planted bug for checker controls: execute resubmitted commands again.
    unsafe_reexecute_duplicates: bool,
    /// Planted bug for checker controls: acknowledge every n-th mutation but undo it.
    unsafe_lose_every: u64,
    /// Planted bug: confirm the head speculation without checking the decided value id.
    unsafe_confirm_unchecked: bool,
    mutations: u64,
    /// Latest proposal (highest ballot) per instance above `last_instance`.
    pending: BTreeMap<Instance, Arc<Value>>,
    /// Speculated instances `last_instance + 1 ..= last_instance + spec.len()`.
    spec: VecDeque<Speculation>,
    /// State partitioning: the layout and this replica's partition (who answers what).
    answers: Option<(PartitionLayout, PartitionId)>,
    /// Early replies (see the crate doc), and what they produced for the driver.
    early: EarlyState,
    /// Proposals are only recorded by `propose` and `execute`; the caller runs
    /// [`SequentialReplica::speculate`] when it chooses (see
    /// [`SequentialReplica::set_deferred_speculation`]).
    deferred: bool,
}

/// Early replies: whether on, the tentative replies and confirmations not yet taken,
/// and whether the next speculation only redoes what was set aside (its tentative
/// replies already left).
#[derive(Default)]
struct EarlyState {
    on: bool,
    out: Vec<EarlyReply>,
    quiet: bool,
}

impl SequentialReplica {
    pub fn new(id: NodeId, tree: BPlusTree) -> SequentialReplica {
        SequentialReplica {
            id,
            cluster_id: 0,
            tree,
            last_instance: 0,
            replies: HashMap::new(),
            max_cached_instance: 0,
            stats: ReplicaStats::default(),
            unsafe_reexecute_duplicates: false,
            unsafe_lose_every: 0,
            unsafe_confirm_unchecked: false,
            mutations: 0,
            pending: BTreeMap::new(),
            spec: VecDeque::new(),
            answers: None,
            early: EarlyState::default(),
            deferred: false,
        }
    }

    /// State partitioning: this replica holds partition `p` of `layout` and answers
    /// the commands whose client named a replica of its rank (see
    /// [`PartitionLayout::answerer`]).
    pub fn set_partition(&mut self, layout: PartitionLayout, p: PartitionId) {
        self.answers = layout.map.is_partitioned().then_some((layout, p));
    }

    /// Early replies (paper 001 §VII): send each speculated reply at once as tentative
    /// and confirm it when the decision confirms its order (see the crate doc).
    pub fn set_early_replies(&mut self, on: bool) {
        self.early.on = on;
    }

    /// Deferred speculation: [`SequentialReplica::propose`] and
    /// [`SequentialReplica::execute`] only record proposals (and roll back what a
    /// newer proposal or a decision contradicts) and never execute one speculatively;
    /// the caller runs [`SequentialReplica::speculate`] when
    /// [`SequentialReplica::speculation_ready`] says so. The node core uses this to
    /// let the replies a decision released leave before further speculative work.
    pub fn set_deferred_speculation(&mut self, on: bool) {
        self.deferred = on;
    }

    /// Whether a pending proposal is next in line for speculation (only ever true
    /// with deferred speculation, or after [`SequentialReplica::rollback_speculation`]).
    pub fn speculation_ready(&self) -> bool {
        let next = self.last_instance + self.spec.len() as u64 + 1;
        self.pending.contains_key(&next)
    }

    /// Tentative replies and confirmations produced since the last call, in order.
    pub fn take_early(&mut self) -> Vec<EarlyReply> {
        std::mem::take(&mut self.early.out)
    }

    /// Early replies produced and not yet taken.
    pub fn early_pending(&self) -> usize {
        self.early.out.len()
    }

    /// Plant the "speculation confirmed without checking the decided value" bug: the
    /// head speculation's replies are released and it is kept whatever was decided
    /// (tests and `--unsafe` only).
    pub fn set_unsafe_confirm_unchecked(&mut self, on: bool) {
        self.unsafe_confirm_unchecked = on;
    }

    /// Planted bug (simulator controls only): forget every cached reply, as a replica
    /// that restored a snapshot without its reply cache would.
    pub fn unsafe_clear_reply_cache(&mut self) {
        self.replies.clear();
    }

    /// Plant the "resubmitted command executed twice" bug (tests and `--unsafe` only).
    pub fn set_unsafe_reexecute_duplicates(&mut self, on: bool) {
        self.unsafe_reexecute_duplicates = on;
    }

    /// Plant the "acknowledged write lost" bug: every `n`-th mutation is executed and
    /// acknowledged, then silently undone (tests and `--unsafe` only; 0 turns it off).
    pub fn set_unsafe_lose_every(&mut self, n: u64) {
        self.unsafe_lose_every = n;
    }

    /// The cluster id written into checkpoints.
    pub fn set_cluster_id(&mut self, cluster_id: u64) {
        self.cluster_id = cluster_id;
    }
    pub fn cluster_id(&self) -> u64 {
        self.cluster_id
    }
    pub fn id(&self) -> NodeId {
        self.id
    }
    /// The cached reply of `client`'s last mutating command, if any.
    pub fn cached_reply(&self, client: ClientId) -> Option<&Reply> {
        self.replies.get(&client)
    }
    /// Clients in the reply cache.
    pub fn cached_clients(&self) -> usize {
        self.replies.len()
    }

    /// O(1) checks, callable after every input. (The per-client monotonicity of the
    /// cache is asserted where it changes, in `execute`.)
    pub fn invariants(&self) {
        let speculated_to = self.last_instance + self.spec.len() as u64;
        assert!(
            self.max_cached_instance <= speculated_to,
            "reply cache holds a reply of instance {} beyond the last executed {}",
            self.max_cached_instance,
            speculated_to
        );
        if let (Some(f), Some(b)) = (self.spec.front(), self.spec.back()) {
            assert_eq!(
                f.instance,
                self.last_instance + 1,
                "speculation not at the head"
            );
            assert_eq!(b.instance, speculated_to, "speculation not contiguous");
        }
        if let Some((&i, _)) = self.pending.first_key_value() {
            assert!(i > self.last_instance, "a pending proposal already decided");
        }
        assert_eq!(
            self.replies.is_empty(),
            self.max_cached_instance == 0,
            "reply cache and its high-water mark disagree"
        );
        assert!(
            self.early.on || self.early.out.is_empty(),
            "early replies without early replies on"
        );
    }

    pub fn tree(&self) -> &BPlusTree {
        &self.tree
    }
    pub fn last_instance(&self) -> Instance {
        self.last_instance
    }
    pub fn stats(&self) -> &ReplicaStats {
        &self.stats
    }
    /// Digest of the decided service state (the B+tree contents without the
    /// speculated suffix).
    pub fn digest(&self) -> u64 {
        match self.spec.front() {
            Some(s) => s.digest_before,
            None => self.tree.digest(),
        }
    }

    /// Instances currently executed speculatively (beyond `last_instance`).
    pub fn speculated(&self) -> u64 {
        self.spec.len() as u64
    }

    /// Proposals held for instances not yet decided.
    pub fn pending_proposals(&self) -> usize {
        self.pending.len()
    }

    /// A value proposed (not yet decided) for `instance`. Kept if it is the newest
    /// proposal for its instance (highest ballot); if the instance was speculated with
    /// another value, that speculation and every later one are rolled back. Then every
    /// proposal that is next in line is executed speculatively, its replies held.
    pub fn propose(&mut self, instance: Instance, value: Arc<Value>) {
        self.early.quiet = false;
        if instance <= self.last_instance {
            return;
        }
        match self.pending.get(&instance) {
            Some(old) if old.vid == value.vid || old.vid.ballot > value.vid.ballot => return,
            _ => {}
        }
        self.pending.insert(instance, value);
        if instance <= self.last_instance + self.spec.len() as u64 {
            self.rollback_from(instance, true);
        }
        if !self.deferred {
            self.speculate();
        }
    }

    /// Execute speculatively every pending proposal next in line.
    pub fn speculate(&mut self) {
        self.speculate_up_to(Instance::MAX);
    }

    /// Speculate again exactly the `n` instances [`SequentialReplica::rollback_speculation`]
    /// set aside (same values on the same state: same held replies, and their
    /// tentative replies already left). Proposals that were not speculated before stay
    /// pending (with deferred speculation, the caller speculates them later).
    pub fn respeculate(&mut self, n: u64) {
        self.speculate_up_to(self.last_instance + n);
    }

    fn speculate_up_to(&mut self, last: Instance) {
        loop {
            let next = self.last_instance + self.spec.len() as u64 + 1;
            if next > last {
                break;
            }
            let Some(value) = self.pending.get(&next).cloned() else {
                break;
            };
            let mut s = Speculation {
                instance: next,
                vid: value.vid,
                undo: Vec::new(),
                cache_undo: Vec::new(),
                max_cached_before: self.max_cached_instance,
                mutations_before: self.mutations,
                stats_before: self.stats.clone(),
                digest_before: self.tree.digest(),
                held: Vec::new(),
            };
            let mut held = Vec::new();
            self.run_value(next, &value, &mut held, Some(&mut s));
            if self.early.on && !self.early.quiet {
                self.early
                    .out
                    .extend(held.iter().cloned().map(EarlyReply::Tentative));
            }
            s.held = held;
            self.stats.speculated += 1;
            self.spec.push_back(s);
        }
        self.early.quiet = false;
    }

    /// Undo every speculated instance, newest first (their held replies are dropped;
    /// the proposals stay pending, so [`SequentialReplica::speculate`] redoes them).
    /// Afterwards the tree and the reply cache are exactly the decided state. Not
    /// counted as a rollback in the statistics (it is the checkpoint's set-aside).
    pub fn rollback_speculation(&mut self) {
        self.rollback_from(self.last_instance + 1, false);
        // Speculating the same proposals on the same state again computes the same
        // replies: their tentative replies already left.
        self.early.quiet = true;
    }

    fn rollback_from(&mut self, instance: Instance, count: bool) {
        while self.spec.back().is_some_and(|s| s.instance >= instance) {
            let s = self.spec.pop_back().expect("checked");
            for u in s.undo.iter().rev() {
                self.tree.apply_undo(u);
            }
            for (client, prev) in s.cache_undo.into_iter().rev() {
                match prev {
                    Some(r) => self.replies.insert(client, r),
                    None => self.replies.remove(&client),
                };
            }
            self.max_cached_instance = s.max_cached_before;
            self.mutations = s.mutations_before;
            self.stats.rewind_to(&s.stats_before);
            if count {
                self.stats.speculation_rolled_back += 1;
            }
            assert_eq!(
                self.tree.digest(),
                s.digest_before,
                "rolling back instance {} did not restore the tree",
                s.instance
            );
        }
    }

    /// Planted bug (simulator controls only): answer a read-only command from the
    /// local state at once, without ordering it. A replica that lags behind the order
    /// then returns stale results.
    pub fn unsafe_read_unordered(&mut self, cmd: &partita_types::Command) -> Option<Reply> {
        if cmd.op.is_mutation() {
            return None;
        }
        let (result, _undo) = self.tree.execute(&cmd.op);
        Some(Reply {
            client: cmd.client,
            seq: cmd.seq,
            instance: self.last_instance,
            result,
        })
    }

    /// Execute a decided value. Returns the replies this replica must send. If the
    /// instance was speculated with the same value, the speculation becomes final and
    /// its held replies are returned; with another value, all speculation is rolled
    /// back first and the pending later proposals are speculated again after it.
    pub fn execute(&mut self, instance: Instance, value: &Value, replies_out: &mut Vec<Reply>) {
        assert_eq!(
            instance,
            self.last_instance + 1,
            "instances are executed in order, once"
        );
        self.early.quiet = false;
        while self
            .pending
            .first_key_value()
            .is_some_and(|(&i, _)| i <= instance)
        {
            self.pending.pop_first();
        }
        if let Some(head) = self.spec.front() {
            if head.vid == value.vid || self.unsafe_confirm_unchecked {
                let s = self.spec.pop_front().expect("checked");
                self.last_instance = instance;
                self.stats.speculation_confirmed += 1;
                if self.early.on {
                    // The tentative replies left when it was speculated.
                    self.early
                        .out
                        .extend(s.held.iter().map(EarlyReply::confirm));
                } else {
                    replies_out.extend(s.held);
                }
                return;
            }
            self.rollback_from(instance, true);
        }
        self.last_instance = instance;
        self.run_value(instance, value, replies_out, None);
        if !self.pending.is_empty() && !self.deferred {
            self.speculate();
        }
    }

    /// Execute `value` as instance `instance` (decided, or speculated with `log`
    /// recording how to undo it).
    fn run_value(
        &mut self,
        instance: Instance,
        value: &Value,
        replies_out: &mut Vec<Reply>,
        mut log: Option<&mut Speculation>,
    ) {
        for cmd in &value.commands {
            let mine = match &self.answers {
                None => cmd.reply_to == self.id,
                Some((layout, p)) => layout.answerer(cmd.reply_to, *p) == Some(self.id),
            };
            if let Some(last) = self.replies.get(&cmd.client) {
                if cmd.seq < last.seq || (cmd.seq == last.seq && !cmd.op.is_mutation()) {
                    self.stats.stale_ignored += 1;
                    continue;
                }
                if cmd.seq == last.seq && !self.unsafe_reexecute_duplicates {
                    self.stats.duplicates_answered += 1;
                    if mine {
                        replies_out.push(last.clone());
                    }
                    continue;
                }
            }
            if !cmd.op.is_mutation() && !mine {
                self.stats.reads_skipped += 1;
                continue;
            }
            let (result, mut undo) = self.tree.execute(&cmd.op);
            if cmd.op.is_mutation() {
                self.mutations += 1;
                if self.unsafe_lose_every > 0
                    && self.mutations.is_multiple_of(self.unsafe_lose_every)
                {
                    self.tree.apply_undo(&undo);
                    undo = Undo::new();
                }
            }
            if let Some(l) = log.as_deref_mut() {
                if !undo.is_empty() {
                    l.undo.push(undo);
                }
            }
            self.stats.commands_executed += 1;
            self.stats.btree_ops += cmd.op.btree_ops() as u64;
            self.stats.work.count(&cmd.op, &result);
            let reply = Reply {
                client: cmd.client,
                seq: cmd.seq,
                instance,
                result,
            };
            if cmd.op.is_mutation() {
                self.max_cached_instance = instance;
                let prev = self.replies.insert(cmd.client, reply.clone());
                assert!(
                    prev.as_ref().is_none_or(|p| p.seq <= cmd.seq),
                    "reply cache went backwards"
                );
                if let Some(l) = log.as_deref_mut() {
                    l.cache_undo.push((cmd.client, prev));
                }
            }
            if mine {
                replies_out.push(reply);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_consensus::Vid;
    use partita_types::{Ballot, Command, Op, OpResult};

    fn value(cmds: Vec<Command>) -> Value {
        Value {
            vid: Vid {
                ballot: Ballot::ZERO,
                seq: 0,
            },
            commands: cmds,
            parts: Vec::new(),
        }
    }

    fn cmd(client: u64, seq: u64, reply_to: NodeId, op: Op) -> Command {
        Command {
            client,
            seq,
            reply_to,
            op,
        }
    }

    #[test]
    fn only_the_chosen_replica_replies_and_reads() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        let mut b = SequentialReplica::new(2, BPlusTree::new());
        let v = value(vec![
            cmd(7, 1, 1, Op::Insert { key: 5, value: 50 }),
            cmd(8, 1, 2, Op::Read { key: 5 }),
        ]);
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        a.execute(1, &v, &mut ra);
        b.execute(1, &v, &mut rb);
        assert_eq!(
            ra,
            vec![Reply {
                client: 7,
                seq: 1,
                instance: 1,
                result: OpResult::Inserted(true)
            }]
        );
        assert_eq!(
            rb,
            vec![Reply {
                client: 8,
                seq: 1,
                instance: 1,
                result: OpResult::Value(Some(50))
            }]
        );
        assert_eq!(a.stats().reads_skipped, 1);
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn resubmitted_mutation_is_answered_from_cache() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        let mut r = Vec::new();
        a.execute(
            1,
            &value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]),
            &mut r,
        );
        a.execute(
            2,
            &value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]),
            &mut r,
        );
        assert_eq!(r[0].result, OpResult::Inserted(true));
        assert_eq!(
            r[1].result,
            OpResult::Inserted(true),
            "the cached reply, not a second execution"
        );
        assert_eq!(r[1].instance, 1);
        // A stale (older) resubmission is ignored.
        a.execute(
            3,
            &value(vec![
                cmd(7, 2, 1, Op::Delete { key: 5 }),
                cmd(7, 1, 1, Op::Insert { key: 5, value: 9 }),
            ]),
            &mut r,
        );
        assert_eq!(r.len(), 3);
        assert_eq!(a.tree().read(5), None);
    }

    #[test]
    fn planted_bug_executes_twice() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        a.set_unsafe_reexecute_duplicates(true);
        let mut r = Vec::new();
        a.execute(
            1,
            &value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]),
            &mut r,
        );
        a.execute(
            2,
            &value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]),
            &mut r,
        );
        assert_eq!(r[1].result, OpResult::Inserted(false));
    }

    #[test]
    fn deferred_speculation_waits_for_speculate_and_work_is_never_rewound() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        a.set_deferred_speculation(true);
        let v1 = Arc::new(value(vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]));
        a.propose(1, v1.clone());
        assert_eq!(a.speculated(), 0, "deferred: recorded only");
        assert!(a.speculation_ready());
        assert_eq!(a.stats().work, ExecutionWork::default());
        a.speculate();
        assert_eq!((a.speculated(), a.speculation_ready()), (1, false));
        let w = a.stats().work;
        assert_eq!((w.commands, w.btree_ops, w.by_kind[0]), (1, 1, 1));
        // Decided with another value: rolled back, the decided value executed, and
        // nothing speculated again by `execute` itself.
        let mut other = value(vec![
            cmd(8, 1, 1, Op::Query { min: 0, max: 10 }),
            cmd(8, 2, 1, Op::Batch(vec![BatchOp::Delete { key: 5 }])),
        ]);
        other.vid.seq = 1;
        let v2 = Arc::new(value(vec![cmd(9, 1, 1, Op::Prev { key: 9 })]));
        a.propose(2, v2);
        a.speculate();
        assert_eq!(a.speculated(), 2);
        let mut r = Vec::new();
        a.execute(1, &other, &mut r);
        assert_eq!((a.speculated(), a.speculation_ready()), (0, true));
        assert_eq!(r.len(), 2);
        // Work counts everything that ran, the rolled-back speculations included.
        let w = a.stats().work.since(&w);
        assert_eq!(w.commands, 3, "prev (speculated), query, batch");
        assert_eq!(w.by_kind, [0, 1, 0, 0, 0, 1, 1]);
        assert_eq!(
            a.stats().commands_executed,
            2,
            "execution counters are rewound"
        );
        a.speculate();
        assert_eq!(a.speculated(), 1);
        a.invariants();
    }

    #[test]
    #[should_panic(expected = "in order")]
    fn out_of_order_instance_is_a_bug() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        a.execute(2, &value(vec![]), &mut Vec::new());
    }
}
