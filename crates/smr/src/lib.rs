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

use partita_btree::BPlusTree;
use partita_consensus::Value;
use partita_types::{ClientId, Instance, NodeId, Reply};
use std::collections::HashMap;

#[derive(Clone, Debug, Default)]
pub struct ReplicaStats {
    pub commands_executed: u64,
    pub reads_skipped: u64,
    pub duplicates_answered: u64,
    pub stale_ignored: u64,
    pub btree_ops: u64,
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
    mutations: u64,
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
            mutations: 0,
        }
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
        assert!(
            self.max_cached_instance <= self.last_instance,
            "reply cache holds a reply of instance {} beyond the last executed {}",
            self.max_cached_instance,
            self.last_instance
        );
        assert_eq!(
            self.replies.is_empty(),
            self.max_cached_instance == 0,
            "reply cache and its high-water mark disagree"
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
    /// Digest of the service state (the B+tree contents).
    pub fn digest(&self) -> u64 {
        self.tree.digest()
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

    /// Execute a decided value. Returns the replies this replica must send.
    pub fn execute(&mut self, instance: Instance, value: &Value, replies_out: &mut Vec<Reply>) {
        assert_eq!(
            instance,
            self.last_instance + 1,
            "instances are executed in order, once"
        );
        self.last_instance = instance;
        for cmd in &value.commands {
            let mine = cmd.reply_to == self.id;
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
            let (result, undo) = self.tree.execute(&cmd.op);
            if cmd.op.is_mutation() {
                self.mutations += 1;
                if self.unsafe_lose_every > 0
                    && self.mutations.is_multiple_of(self.unsafe_lose_every)
                {
                    self.tree.apply_undo(&undo);
                }
            }
            self.stats.commands_executed += 1;
            self.stats.btree_ops += cmd.op.btree_ops() as u64;
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
                    prev.is_none_or(|p| p.seq <= cmd.seq),
                    "reply cache went backwards"
                );
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
    #[should_panic(expected = "in order")]
    fn out_of_order_instance_is_a_bug() {
        let mut a = SequentialReplica::new(1, BPlusTree::new());
        a.execute(2, &value(vec![]), &mut Vec::new());
    }
}
