//! The node core: every role one node plays (acceptor, coordinator, learner, replica,
//! batcher, or the client-server baseline), composed behind one sans-IO event interface.
//!
//! Both drivers use exactly this code: the networked runtime (`partita node`) feeds it
//! events from sockets, the WAL and a clock, and the deterministic simulator feeds it
//! events from its virtual network, disk and clock. Routing a peer message to the right
//! role, handling messages a node sends to itself, turning decided values into
//! executions and executions into replies all live here, so the simulator tests them
//! too.
//!
//! # Client commands
//!
//! A command a client sends to a node that leads goes straight to its coordinator. At a
//! node that does not lead, it goes to the node's batcher if it has the role (the
//! batcher packs commands into [`Msg::ForwardBatch`]es to the leader; see
//! `partita_consensus::Batcher`), otherwise it is forwarded alone ([`Msg::Forward`]).
//! The leader puts every command of a batch through its coordinator and acknowledges
//! the batch ([`Msg::ForwardAck`]); a node that does not lead drops forwarded commands
//! and batches (no forwarding loops: the batcher resends to whoever leads, the client
//! resubmits). A batcher learns who leads from the node's own view (its elector or
//! learner) or, on a standalone batcher, from the leader's heartbeats.
//!
//! Inputs: [`NodeCore::on_peer`], [`NodeCore::on_request`], [`NodeCore::on_tick`],
//! [`NodeCore::on_persisted`], [`NodeCore::on_checkpoint_saved`], and
//! [`NodeCore::on_continue`], which a driver calls whenever
//! [`NodeCore::has_deferred_work`] after sending the outputs of a step, before taking
//! the next input (speculative execution runs there, so that the replies a decision
//! released leave first). Outputs
//! ([`Output`]): messages to other nodes, records to persist (the driver reports
//! completion with `on_persisted`, in order), replies and refusals to clients,
//! checkpoints to write (completion reported with `on_checkpoint_saved`), and the
//! prefix of the acceptor's log that became obsolete. Invariants
//! ([`NodeCore::invariants`]) hold after every input; each role's own invariants are
//! checked with them.
//!
//! # Checkpoints, truncation and state transfer
//!
//! A replica checkpoints every [`CheckpointConfig::interval_instances`] executed
//! instances: the core serializes its replica ([`Replica::checkpoint`]) and
//! hands the bytes to the driver ([`Output::SaveCheckpoint`]); once the driver reports
//! them durable, the replica tells every acceptor ([`Msg::Checkpointed`], repeated every
//! `announce_ticks`). Acceptors truncate below what a majority of replicas have
//! checkpointed and tell the driver which prefix of their log is obsolete
//! ([`Output::TruncateLog`]).
//!
//! A restarted node is built with [`NodeCore::recover`] from its newest durable
//! checkpoint: its learner starts at the instance after it, so only the suffix is
//! learned from acceptors. A replica that needs instances the acceptors truncated
//! (they answer [`Msg::Truncated`]) fetches a peer replica's checkpoint in chunks (see
//! the `transfer` module), restores it, skips its learner past it and learns the
//! suffix. The checkpoint includes the reply cache, so exactly-once holds across
//! restarts and state transfers.

pub mod epaxos;
pub mod geo;
pub mod members;
pub mod multiring;
pub mod ordering;
mod transfer;

pub use epaxos::EpaxosOrdering;
pub use geo::{GeoOrdering, GeoSetup};
pub use multiring::{MultiRingOrdering, MultiRingSetup, RingSpec};
pub use ordering::{AcceptorReport, AtomicMulticast, OrderingReport, PaxosOrdering, StreamReport};
pub use transfer::CHUNK_BYTES_MAX;

use partita_consensus::{
    AcceptorRecord, Action, BatcherConfig, CoordinatorConfig, LearnerConfig, Membership, Msg,
    Outbox, PersistToken, TickDue, Value, Vid,
};
use partita_smr::{CheckpointError, Replica, ReplicaOptions, ServiceFactory};
use partita_types::early::EarlyReply;
use partita_types::{Ballot, ClientId, Command, FieldError, Instance, NodeId, Reply};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use transfer::{ChunkOutcome, Transfer};

/// How commands are served (one type with the cluster file's).
pub use partita_types::Mode;

/// Everything a node core needs to know about its place in the cluster.
#[derive(Clone, Debug)]
pub struct NodeSetup {
    pub id: NodeId,
    /// The service this node's replica runs (`partita_smr::service::<S>()`).
    pub service: Arc<dyn ServiceFactory>,
    /// Written into checkpoints; a checkpoint of another cluster is refused.
    pub cluster_id: u64,
    pub mode: Mode,
    pub membership: Membership,
    pub acceptor: bool,
    pub replica: bool,
    /// The partition this node's replica holds (its cluster-file entry's; 0 when the
    /// state is not partitioned). A replica that joins at run time holds it from its
    /// first command on, before its own addition reaches it.
    pub partition: partita_types::PartitionId,
    /// The batcher role: client commands that reach this node while it does not lead
    /// are batched to the leader. Alone (neither acceptor nor replica): a standalone
    /// batcher, with nothing durable.
    pub batcher: bool,
    pub coordinator_config: CoordinatorConfig,
    pub batcher_config: BatcherConfig,
    pub learner_config: LearnerConfig,
    pub checkpoint: CheckpointConfig,
    /// Early replies (paper 001 §VII, cluster file `[execution] early_replies`; only
    /// with `speculative`): the chosen replica answers a speculated command at once
    /// with a tentative reply ([`Output::Early`]) and confirms it when the decision
    /// confirms the speculated order.
    pub early_replies: bool,
    /// Client session leases in milliseconds of ordered time (cluster file
    /// `[sessions] lease_ms`): a client idle for longer is forgotten, so the reply
    /// cache holds only recent clients. `None`: sessions never expire (and open
    /// implicitly).
    pub session_lease_ms: Option<u64>,
    /// Speculative execution (paper 001 §III-B, cluster file `[execution]`): replicas
    /// execute Ring Paxos proposals before their decision and hold the replies until it
    /// confirms them. `false` (the default) behaves exactly as before.
    pub speculative: bool,
    /// P-SMR (paper 002, cluster file `[execution] threads`): the replica's worker
    /// threads over the service's key space. `None`: sequential execution.
    pub psmr: Option<partita_smr::ThreadLayout>,
    /// Which protocol orders commands (cluster file `[ordering]`).
    pub ordering: OrderingSetup,
    /// The service's initial contents: commands every replica applies to the empty
    /// state before anything is ordered (see `ServiceFactory::seeded`); empty: none.
    pub genesis: Vec<partita_types::Payload>,
}

/// Which ordering a node runs, with what that protocol needs (cluster file
/// `[ordering]`; one choice, so no two can be asked for at once).
#[derive(Clone, Debug)]
pub enum OrderingSetup {
    /// One stream by Ring Paxos or Multi-Paxos (`membership.protocol`).
    Paxos,
    /// Multi-Ring Paxos (paper 002): the rings, `M` and the skip rule.
    MultiRing(MultiRingSetup),
    /// GeoPaxos+ (paper 004): serializers, the geo B+tree and its optimizer.
    GeoPaxosPlus(GeoSetup),
    /// EPaxos (paper 004's leaderless baseline) on the geo B+tree's operations.
    Epaxos(GeoSetup),
}

/// Replica checkpoints and state transfer (cluster file `[storage]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// A replica checkpoints every this many executed instances; 0: never (then
    /// acceptors never truncate their logs either).
    pub interval_instances: u64,
    /// A replica re-announces its newest durable checkpoint to the acceptors every
    /// this many ticks (acceptors keep the announcements in memory only).
    pub announce_ticks: u64,
    /// State transfer: bytes per chunk (at most [`CHUNK_BYTES_MAX`]).
    pub chunk_bytes: u64,
    /// State transfer: chunk requests outstanding at once.
    pub transfer_window_chunks: u64,
    /// State transfer: re-request chunks unanswered for this many ticks; after
    /// `transfer_timeouts_max` timeouts in a row, ask another replica.
    pub transfer_timeout_ticks: u64,
    pub transfer_timeouts_max: u64,
    /// State transfer: the largest checkpoint accepted from a peer.
    pub transfer_bytes_max: u64,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval_instances: 50_000,
            announce_ticks: 100,
            chunk_bytes: 1 << 20,
            transfer_window_chunks: 8,
            transfer_timeout_ticks: 500,
            transfer_timeouts_max: 3,
            transfer_bytes_max: 4 << 30,
        }
    }
}

impl CheckpointConfig {
    /// Check the values are usable: the error names the field at fault.
    pub fn validate(&self) -> Result<(), FieldError> {
        let bad = |field: &str, m: String| Err(FieldError::new(field, m));
        if self.chunk_bytes == 0 || self.chunk_bytes > CHUNK_BYTES_MAX {
            return bad("chunk_bytes", format!("must be in 1..={CHUNK_BYTES_MAX}"));
        }
        if self.transfer_window_chunks == 0 || self.transfer_window_chunks > 64 {
            return bad("transfer_window_chunks", "must be in 1..=64".into());
        }
        if self.announce_ticks == 0 {
            return bad("announce_ticks", "must be positive".into());
        }
        if self.transfer_timeout_ticks == 0 {
            return bad("transfer_timeout_ticks", "must be positive".into());
        }
        Ok(())
    }
}

/// Checkpoint bytes, shared between the core (which serves them to peers) and the
/// driver (which writes them). Debug-prints its size and checksum, not its contents.
#[derive(Clone, PartialEq, Eq)]
pub struct CheckpointBytes(pub Arc<Vec<u8>>);

impl std::ops::Deref for CheckpointBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for CheckpointBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let crc = self.0.len().checked_sub(4).map(|at| &self.0[at..]);
        write!(
            f,
            "CheckpointBytes({} bytes, crc {:02x?})",
            self.0.len(),
            crc
        )
    }
}

/// Why [`NodeCore::recover`] refused the checkpoint it was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecoverError {
    #[error("checkpoint refused: {0}")]
    Checkpoint(#[from] CheckpointError),
    #[error("a checkpoint was given to node {0}, which has no replica")]
    NoReplica(NodeId),
    #[error("checkpoint settings: {0}")]
    Config(FieldError),
}

impl NodeSetup {
    /// Whether this node coordinates a fresh cluster (after a failover any acceptor may).
    pub fn is_coordinator(&self) -> bool {
        self.mode == Mode::Smr && self.acceptor && self.membership.coordinator == self.id
    }
}

/// Planted bugs, for the controls that show the checks can fail. Never on in service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnsafeBugs {
    /// Replicas acknowledge every 5th mutation, then undo it.
    pub lose_acked_writes: bool,
    /// A resubmitted command is executed again.
    pub reexecute_duplicates: bool,
    /// An acceptor votes before its write is durable.
    pub vote_before_durable: bool,
    /// An acceptor forgets its promise on restart (keeps only accepted ballots).
    pub forget_promise: bool,
    /// A replica answers a read-only request sent to it at once, without ordering it.
    pub unordered_query: bool,
    /// A coordinator elected after a failover proposes without running Phase 1.
    pub skip_phase1: bool,
    /// A replica restoring a checkpoint (restart or state transfer) drops its reply cache.
    pub restore_without_reply_cache: bool,
    /// A speculating replica confirms its head speculation on any decision, without
    /// checking the decided value id (so a value replaced by a new leader stays).
    pub speculative_no_rollback: bool,
    /// Clients of a partitioned service send a multi-partition command's sub-commands
    /// as independent commands, each ordered on its own (paper 001, Figure 4: "sub-trees
    /// replicated independently"), and merge their replies. A client-side bug: nodes
    /// ignore it.
    pub independent_partitions: bool,
    /// Clients keep their session after giving up on a command for several
    /// partitions: with a stream per partition (Multi-Ring Paxos) the late command can
    /// then run at one partition and be dropped as old at another. A client-side bug:
    /// nodes ignore it.
    pub keep_session_after_give_up: bool,
    /// With early replies, a replica sends its speculative results as final replies
    /// (clients take them without waiting for the confirmation).
    pub unconfirmed_replies: bool,
    /// A replica runs a command whose session it does not know (expired, or an older
    /// session of the same client) as if the session were new: a late copy of a
    /// command executed before its session expired runs again.
    pub expired_sessions_reopen: bool,
    /// A node hands peer messages to its roles without checking them first (strangers,
    /// instances and ballots out of range, backwards ranges): a hostile or broken peer
    /// can make it panic. Caught by `crates/node/tests/hostile.rs`; the simulator's
    /// peers are all correct, so its swarm cannot catch it.
    pub unchecked_peer_input: bool,
    /// P-SMR: a worker thread runs a g_all command as soon as it reaches it, without
    /// waiting for the other threads (synchronous mode without its signals).
    pub psmr_no_barrier: bool,
    /// opt-PSMR: the safety check always passes (a thread changes the shared tree's
    /// shape while the others run).
    pub psmr_check_passes: bool,
    /// Multi-Ring Paxos: replicas with odd node ids merge their rings in descending
    /// order (the others ascending), so replicas of one partition disagree on the order
    /// of commands from different rings.
    pub merge_order: bool,
    /// DS-SMR: a partition runs an access over whatever objects are local at delivery,
    /// trusting the consult that placed it, instead of answering retry.
    pub ds_locality_at_consult: bool,
    /// DS-SMR: the oracle never applies moves (its map goes stale).
    pub ds_oracle_ignores_moves: bool,
    /// S-SMR/DS-SMR: a command with several destinations runs once the values it needs
    /// are in, without waiting for every destination's signal.
    pub ds_no_signals: bool,
    /// GeoPaxos+: a DOP is ordered by its origin's serializer only, not with
    /// everything.
    pub geo_dop_not_ordered: bool,
    /// GeoPaxos+: an UPDATE or INSERT is ordered by one of its node's serializers, not
    /// all of them.
    pub geo_write_one_serializer: bool,
    /// GeoPaxos+: the timestamp merge executes an operation before its timestamp is
    /// safe (drops rules R2 and R3).
    pub geo_execute_before_safe: bool,
    /// GeoPaxos+: a checkpoint announces to each serializer's acceptors the prefix of
    /// its log that this replica fed to the merge and ran, not the prefix settled
    /// below the cut: replicas' announcements are no longer ordered alike in every
    /// log, and each log's acceptors may truncate below a different majority's
    /// checkpoints (caught by the simulator's durability check).
    pub geo_announce_fed: bool,
    /// EPaxos: a command leader commits on the fast path once a fast quorum answered,
    /// even when the answers' dependencies differ from its own.
    pub epaxos_skip_slow_path: bool,
    /// A partial-order ordering (EPaxos) truncates at the newest checkpoint any replica
    /// announced (per column), not at what every one of a majority of checkpoints
    /// covers: commands that only one replica's checkpoint covers are lost with it.
    pub truncate_above_majority: bool,
    /// A partial-order ordering (EPaxos) restoring a checkpoint (restart or state
    /// transfer) takes a frontier one command past the checkpoint's in every column:
    /// the command after the cut counts as run, though the state lacks it.
    pub restore_wrong_frontier: bool,
    /// The etcd gateway answers a lease keep-alive without ordering a renewal (it
    /// reads the lease's TTL and says it was renewed): the holder believes its lease
    /// runs on while the cluster expires it (leases' pitfall: an acknowledgement
    /// before the renewal is decided). The node core ignores it; `partita node`
    /// hands it to its gateway.
    pub etcd_ack_keepalives_unordered: bool,
    /// The etcd gateway, on S-SMR/DS-SMR, revokes a lease it finds within 1.5 s of
    /// its expiry without ordering the check that it expired: a lease renewed
    /// meanwhile loses its keys inside its TTL. The node core ignores it; `partita
    /// node` hands it to its gateway.
    pub etcd_expire_leases_early: bool,
    /// Membership: replicas with odd node ids apply a change of the replicas one value
    /// late (at the next value they execute), so replicas disagree on where it took
    /// effect.
    pub member_apply_late: bool,
    /// Membership: a joining replica that finds the acceptors truncated skips to where
    /// they kept the log, with its empty state, instead of restoring a peer's
    /// checkpoint (it serves before it caught up).
    pub member_join_without_transfer: bool,
    /// Membership: learners take decisions of any ordering epoch (they neither drop
    /// what an older configuration decided above the change that ended it, nor wait
    /// for a change to be applied before delivering on), so a replica may execute
    /// what an old configuration decided after its acceptors were replaced.
    pub member_old_epoch_decisions: bool,
    /// Membership: quorums are counted with the cluster file's majority after the
    /// acceptors changed (a quorum size cached at start and never recomputed: the
    /// old configuration's count over the new configuration's acceptors). Grown from
    /// 3 acceptors to 4, two acceptors make a quorum, and two disjoint pairs can
    /// each choose a value for one instance.
    pub member_mixed_quorum: bool,
    /// [`NodeCore::tick_due`] answers 20 ticks (and milliseconds) late: a driver that skips idle
    /// ticks holds a retransmission, heartbeat or campaign back that long. Caught by
    /// the simulator's tick check (`--tick-check`), which ticks every period and fails
    /// when a tick acts before the node said one would.
    pub tick_due_late: bool,
}

impl UnsafeBugs {
    pub const NAMES: [&'static str; 33] = [
        "lose-acked-writes",
        "reexecute-duplicates",
        "vote-before-durable",
        "forget-promise",
        "unordered-query",
        "skip-phase1",
        "restore-without-reply-cache",
        "speculative-no-rollback",
        "independent-partitions",
        "keep-session-after-give-up",
        "unconfirmed-replies",
        "unchecked-peer-input",
        "expired-sessions-reopen",
        "psmr-no-barrier",
        "psmr-check-passes",
        "merge-order",
        "ds-locality-at-consult",
        "ds-oracle-ignores-moves",
        "ds-no-signals",
        "geo-dop-not-ordered",
        "geo-write-one-serializer",
        "geo-execute-before-safe",
        "geo-announce-fed",
        "epaxos-skip-slow-path",
        "truncate-above-majority",
        "restore-wrong-frontier",
        "etcd-ack-keepalives-unordered",
        "etcd-expire-leases-early",
        "member-apply-late",
        "member-join-without-transfer",
        "member-old-epoch-decisions",
        "member-mixed-quorum",
        "tick-due-late",
    ];

    /// The flag of the bug called `name`.
    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "lose-acked-writes" => &mut self.lose_acked_writes,
            "reexecute-duplicates" => &mut self.reexecute_duplicates,
            "vote-before-durable" => &mut self.vote_before_durable,
            "forget-promise" => &mut self.forget_promise,
            "unordered-query" => &mut self.unordered_query,
            "skip-phase1" => &mut self.skip_phase1,
            "restore-without-reply-cache" => &mut self.restore_without_reply_cache,
            "speculative-no-rollback" => &mut self.speculative_no_rollback,
            "independent-partitions" => &mut self.independent_partitions,
            "keep-session-after-give-up" => &mut self.keep_session_after_give_up,
            "unconfirmed-replies" => &mut self.unconfirmed_replies,
            "unchecked-peer-input" => &mut self.unchecked_peer_input,
            "expired-sessions-reopen" => &mut self.expired_sessions_reopen,
            "psmr-no-barrier" => &mut self.psmr_no_barrier,
            "psmr-check-passes" => &mut self.psmr_check_passes,
            "merge-order" => &mut self.merge_order,
            "ds-locality-at-consult" => &mut self.ds_locality_at_consult,
            "ds-oracle-ignores-moves" => &mut self.ds_oracle_ignores_moves,
            "ds-no-signals" => &mut self.ds_no_signals,
            "geo-dop-not-ordered" => &mut self.geo_dop_not_ordered,
            "geo-write-one-serializer" => &mut self.geo_write_one_serializer,
            "geo-execute-before-safe" => &mut self.geo_execute_before_safe,
            "geo-announce-fed" => &mut self.geo_announce_fed,
            "epaxos-skip-slow-path" => &mut self.epaxos_skip_slow_path,
            "truncate-above-majority" => &mut self.truncate_above_majority,
            "restore-wrong-frontier" => &mut self.restore_wrong_frontier,
            "etcd-ack-keepalives-unordered" => &mut self.etcd_ack_keepalives_unordered,
            "etcd-expire-leases-early" => &mut self.etcd_expire_leases_early,
            "member-apply-late" => &mut self.member_apply_late,
            "member-join-without-transfer" => &mut self.member_join_without_transfer,
            "member-old-epoch-decisions" => &mut self.member_old_epoch_decisions,
            "member-mixed-quorum" => &mut self.member_mixed_quorum,
            "tick-due-late" => &mut self.tick_due_late,
            _ => return None,
        })
    }

    /// Turn on the bug called `name`; an unknown name is an error listing the known ones.
    pub fn enable(&mut self, name: &str) -> Result<(), String> {
        match self.flag(name) {
            Some(f) => {
                *f = true;
                Ok(())
            }
            None => Err(format!(
                "unknown unsafe bug `{name}` (known: {})",
                Self::NAMES.join(", ")
            )),
        }
    }

    pub fn any(&self) -> bool {
        *self != UnsafeBugs::default()
    }

    /// Whether the bug called `name` is on (unknown names: false).
    pub fn is_on(&self, name: &str) -> bool {
        self.clone().flag(name).is_some_and(|f| *f)
    }
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Send to another node (never to this one: those are handled inside).
    Send { to: NodeId, msg: Msg },
    /// Write durably, then call `on_persisted(token)`; completions in token order.
    Persist {
        token: PersistToken,
        record: AcceptorRecord,
    },
    /// Send to the client.
    Reply(Reply),
    /// Send to the client: a tentative reply or a confirmation (early replies only).
    Early(EarlyReply),
    /// The answer to an operator's membership request
    /// ([`NodeCore::on_member_request`]): the replicas after the change, or why not.
    MemberDone {
        request: u64,
        result: members::MemberResult,
    },
    /// Tell the client its request was not taken.
    Refused {
        client: ClientId,
        seq: u64,
        reason: String,
    },
    /// Write this replica checkpoint durably (keeping older ones is the driver's
    /// choice; one is enough), then call `on_checkpoint_saved(instance)`. At most one
    /// is outstanding at a time. A restart passes the newest durable one to
    /// [`NodeCore::recover`].
    SaveCheckpoint {
        instance: Instance,
        bytes: CheckpointBytes,
    },
    /// The acceptor's records persisted with tokens below `below_token` are obsolete
    /// (truncated or superseded): the driver may delete them from its log. Tokens are
    /// log positions: the records handed to `recover` are 1, 2, …, and the tokens of
    /// later `Persist` outputs continue from there.
    TruncateLog { below_token: PersistToken },
}

pub struct NodeCore {
    setup: NodeSetup,
    /// The ordering layer (the atomic-multicast seam; `None` for a cs server, which
    /// orders nothing).
    ordering: Option<Box<dyn AtomicMulticast>>,
    replica: Option<Box<dyn Replica>>,
    /// cs mode: the server's instance counter.
    cs_instance: u64,
    /// The driver's clock at the last tick (milliseconds).
    clock_ms: u64,
    /// The highest ballot under which a value this node delivered was proposed: it
    /// changes when a new leader's first value is delivered (failover measurements).
    delivered_ballot: Ballot,
    local: VecDeque<(NodeId, Msg)>,
    counters: BTreeMap<&'static str, u64>,
    tick: u64,
    bugs: UnsafeBugs,
    replies: Vec<Reply>,
    /// The newest checkpoint this replica holds (its own or restored from a peer),
    /// served to peers: (instance, bytes, CRC32C trailer).
    checkpoint: Option<(Instance, CheckpointBytes, u32)>,
    /// The ordering's position stored in `checkpoint` (its ordering section).
    checkpoint_position: Vec<u8>,
    /// ... in the checkpoint the driver is writing.
    saving_position: Vec<u8>,
    /// ... in the newest durable checkpoint (what acceptors are told).
    durable_position: Vec<u8>,
    /// The checkpoint the driver is writing, if any.
    checkpoint_saving: Option<Instance>,
    /// Highest checkpoint handed to the driver.
    checkpoint_handed: Instance,
    /// Highest checkpoint the driver reported durable (what acceptors are told).
    checkpoint_durable: Instance,
    last_announce_tick: u64,
    transfer: Option<Transfer>,
    /// Rotates state-transfer requests over the other replicas.
    transfer_rotation: usize,
    /// P-SMR: run the replica's worker threads inside every input, one after another
    /// on the caller's thread (the default), or leave them to the driver
    /// ([`NodeCore::on_worker`]; the simulator gives each a CPU of its own).
    inline_workers: bool,
    /// P-SMR on OS threads ([`NodeCore::set_thread_runner`]).
    thread_runner: Option<Arc<dyn partita_smr::ThreadRunner>>,
    /// P-SMR: values delivered while a due checkpoint waits for the worker threads
    /// to finish what they hold (a checkpoint is taken at a point where every
    /// delivered command ran); handed to the replica right after it.
    held: VecDeque<(Instance, Instance, Arc<Value>)>,
    /// What the learner did on resuming after a value that held a membership change
    /// (delivered on, asked for more): run next, as if a handler had returned it.
    resumed: Outbox,
    /// Replicas added and removed at run time (see [`members`]).
    member: members::MemberState,
    /// Answers to membership requests, sent with the replies.
    member_done: Vec<Output>,
}

impl NodeCore {
    /// A node starting fresh or restarting: `recovered` holds the acceptor's durable
    /// records, oldest first (empty on a fresh start). Returns the outputs of starting
    /// (a coordinator's first Phase 1). A replica starts empty; see
    /// [`NodeCore::recover`] to start it from a checkpoint.
    pub fn new(
        setup: NodeSetup,
        recovered: Vec<AcceptorRecord>,
        bugs: UnsafeBugs,
        out: &mut Vec<Output>,
    ) -> NodeCore {
        Self::recover(setup, recovered, None, bugs, out)
            .expect("without a checkpoint there is nothing to refuse")
    }

    /// Like [`NodeCore::new`], with the replica restored from `checkpoint` (its
    /// newest durable one, as written from [`Output::SaveCheckpoint`]): the learner
    /// starts at the instance after it. A checkpoint that is damaged, or written by
    /// another node or cluster, is refused and nothing is built.
    pub fn recover(
        setup: NodeSetup,
        recovered: Vec<AcceptorRecord>,
        checkpoint: Option<Vec<u8>>,
        bugs: UnsafeBugs,
        out: &mut Vec<Output>,
    ) -> Result<NodeCore, RecoverError> {
        let id = setup.id;
        let mut setup = setup;
        setup.checkpoint.validate().map_err(RecoverError::Config)?;
        if let Some(tick) = setup.service.tick_ms() {
            // A service that keeps time (leases): ordered time moves while idle, and
            // by small steps, so that the first value after an outage leaves a holder
            // time to renew its shortest lease.
            let c = &mut setup.coordinator_config;
            c.idle_value_ms = Some(tick);
            c.time_step_max_ms = c.time_step_max_ms.min(tick.saturating_mul(2));
        }
        if let (OrderingSetup::GeoPaxosPlus(g), true) = (
            &setup.ordering,
            bugs.geo_write_one_serializer && setup.service.name() == "geo-btree",
        ) {
            // Planted bug: the geo tree's psite orders a write by one of its node's
            // serializers; it travels in the tree's genesis.
            setup.genesis = g.genesis(&bugs).map_err(RecoverError::Config)?;
        }
        let restored = match checkpoint {
            None => None,
            Some(bytes) => {
                if !setup.replica || setup.mode != Mode::Smr {
                    return Err(RecoverError::NoReplica(id));
                }
                let info = partita_smr::verify_checkpoint(&bytes)?;
                if info.cluster_id != setup.cluster_id || info.node_id != id {
                    return Err(CheckpointError::Foreign {
                        expected_cluster_id: setup.cluster_id,
                        expected_node_id: Some(id),
                        found_cluster_id: info.cluster_id,
                        found_node_id: info.node_id,
                    }
                    .into());
                }
                let replica = setup.service.restore(&bytes, setup.cluster_id, id)?;
                let section = partita_smr::checkpoint_ordering(&bytes, &info);
                let (position, members) = members::split_section(section);
                Some((replica, info, bytes, position, members))
            }
        };
        let mut core = NodeCore {
            ordering: None,
            replica: None,
            cs_instance: 0,
            clock_ms: 0,
            delivered_ballot: Ballot::ZERO,
            local: VecDeque::new(),
            counters: BTreeMap::new(),
            tick: 0,
            bugs,
            replies: Vec::new(),
            checkpoint: None,
            checkpoint_position: Vec::new(),
            saving_position: Vec::new(),
            durable_position: Vec::new(),
            checkpoint_saving: None,
            checkpoint_handed: 0,
            checkpoint_durable: 0,
            last_announce_tick: 0,
            transfer: None,
            transfer_rotation: 0,
            inline_workers: true,
            thread_runner: None,
            held: VecDeque::new(),
            resumed: Vec::new(),
            member: members::MemberState::default(),
            member_done: Vec::new(),
            setup,
        };
        let setup = core.setup.clone();
        let mut start = Vec::new();
        match setup.mode {
            Mode::Cs => core.replica = Some(core.fresh_replica()?),
            Mode::Smr => {
                let mut next_deliver = 1;
                let mut position = Vec::new();
                if setup.replica {
                    let replica = match restored {
                        Some((replica, info, bytes, pos, members)) => {
                            core.member.applied = members;
                            core.checkpoint_position = pos.clone();
                            core.durable_position = pos.clone();
                            position = pos;
                            // From the driver's disk: durable, and ours to serve.
                            core.checkpoint = Some((
                                info.instance,
                                CheckpointBytes(Arc::new(bytes)),
                                info.crc32c,
                            ));
                            core.checkpoint_handed = info.instance;
                            core.checkpoint_durable = info.instance;
                            next_deliver = info.instance + 1;
                            replica
                        }
                        None => core.fresh_replica()?,
                    };
                    core.replica = Some(replica);
                }
                core.ordering = Some(match &setup.ordering {
                    OrderingSetup::Epaxos(geo) => Box::new(
                        EpaxosOrdering::new(
                            &setup,
                            geo,
                            recovered,
                            next_deliver,
                            &position,
                            &core.bugs,
                            &mut start,
                        )
                        .map_err(RecoverError::Config)?,
                    ),
                    OrderingSetup::GeoPaxosPlus(geo) => Box::new(
                        GeoOrdering::new(
                            &setup,
                            geo,
                            recovered,
                            next_deliver,
                            &position,
                            &core.bugs,
                            &mut start,
                        )
                        .map_err(RecoverError::Config)?,
                    ),
                    OrderingSetup::Paxos => Box::new(PaxosOrdering::new(
                        &setup,
                        recovered,
                        next_deliver,
                        &core.bugs,
                        &mut start,
                    )),
                    OrderingSetup::MultiRing(rings) => Box::new(
                        MultiRingOrdering::new(
                            &setup,
                            rings,
                            recovered,
                            next_deliver,
                            &position,
                            &core.bugs,
                            &mut start,
                        )
                        .map_err(RecoverError::Config)?,
                    ),
                });
            }
        }
        if let Some(r) = core.replica.take() {
            core.replica = Some(core.prepare_replica(r));
        }
        let members = core.member.applied.clone();
        let durable = core.checkpoint_durable;
        if let Some(o) = core.ordering.as_mut() {
            o.adopt_members(&members, &mut start);
            o.replica_members(&members, true, &mut start);
            o.retire_acceptor(durable);
        }
        core.run(start, out);
        Ok(core)
    }

    /// A replica with the service's initial state (the genesis applied).
    fn fresh_replica(&self) -> Result<Box<dyn Replica>, RecoverError> {
        match self.setup.genesis.is_empty() {
            true => Ok(self.setup.service.fresh(self.setup.id)),
            false => self
                .setup
                .service
                .seeded(self.setup.id, &self.setup.genesis)
                .map_err(|e| RecoverError::Config(FieldError::new("genesis", e))),
        }
    }

    /// Cluster id and planted bugs of a replica this node is about to use.
    fn prepare_replica(&self, mut r: Box<dyn Replica>) -> Box<dyn Replica> {
        r.configure(&ReplicaOptions {
            cluster_id: self.setup.cluster_id,
            partition: Some((self.answerers(), self.setup.partition)),
            early_replies: self.setup.early_replies && self.setup.speculative,
            // Speculative work waits for `on_continue`, after the driver sent what
            // the current input released.
            deferred_speculation: self.setup.speculative,
            unsafe_lose_every: if self.bugs.lose_acked_writes { 5 } else { 0 },
            unsafe_reexecute_duplicates: self.bugs.reexecute_duplicates,
            unsafe_confirm_unchecked: self.bugs.speculative_no_rollback,
            unsafe_clear_reply_cache: self.bugs.restore_without_reply_cache,
            unsafe_reopen_expired: self.bugs.expired_sessions_reopen,
            session_lease_ms: self.setup.session_lease_ms,
            psmr: self.setup.psmr.map(|layout| partita_smr::PsmrOptions {
                layout,
                unsafe_no_barrier: self.bugs.psmr_no_barrier,
                unsafe_check_passes: self.bugs.psmr_check_passes,
            }),
            placement: match &self.setup.ordering {
                OrderingSetup::GeoPaxosPlus(g) => Some(g.replicas.clone()),
                _ => None,
            },
        });
        if let (Some(runner), Some(w)) = (&self.thread_runner, r.worker_threads_mut()) {
            w.set_thread_runner(runner.clone());
        }
        r
    }

    /// P-SMR on OS threads: the driver's `runner` runs the replica's worker threads at
    /// the same time when the node runs them inline (`partita node`). The simulator,
    /// which gives each thread a simulated CPU of its own, gives none.
    pub fn set_thread_runner(&mut self, runner: Arc<dyn partita_smr::ThreadRunner>) {
        if let Some(w) = self.replica.as_mut().and_then(|r| r.worker_threads_mut()) {
            w.set_thread_runner(runner.clone());
        }
        self.thread_runner = Some(runner);
    }

    /// The node this one believes leads (its own view; `None` in cs mode).
    pub fn leader(&self) -> Option<NodeId> {
        self.ordering.as_ref().and_then(|o| o.leader())
    }

    /// The ordering layer (the atomic-multicast seam).
    pub fn ordering(&self) -> Option<&dyn AtomicMulticast> {
        self.ordering.as_deref()
    }

    /// The ballot under which this node leads a stream now (see
    /// [`AtomicMulticast::leads`]; `None` in cs mode).
    pub fn leads(&self) -> Option<Ballot> {
        self.ordering.as_ref().and_then(|o| o.leads())
    }

    /// Whether client commands reaching this node go to a batcher here.
    pub fn batches(&self) -> bool {
        self.ordering.as_ref().is_some_and(|o| o.batches())
    }

    /// The ordering's roles and progress (see [`AtomicMulticast::report`]; the default,
    /// empty and idle, in cs mode).
    pub fn ordering_report(&self) -> OrderingReport {
        self.ordering.as_ref().map_or_else(
            || OrderingReport {
                idle: true,
                ..OrderingReport::default()
            },
            |o| o.report(),
        )
    }

    /// The Paxos roles of this node's one stream (or of the ring it accepts for), for
    /// tests that look inside them (see [`AtomicMulticast::paxos_roles`]).
    pub fn paxos_roles(&self) -> Option<&PaxosOrdering> {
        self.ordering.as_ref().and_then(|o| o.paxos_roles())
    }

    pub fn id(&self) -> NodeId {
        self.setup.id
    }
    pub fn setup(&self) -> &NodeSetup {
        &self.setup
    }
    pub fn replica(&self) -> Option<&dyn Replica> {
        self.replica.as_deref()
    }
    /// The highest ballot under which a delivered value was proposed (`Ballot::ZERO`:
    /// nothing delivered). A driver that notes when it changes learns, from the
    /// decided stream itself, when a new leader's first value was delivered here.
    pub fn delivered_ballot(&self) -> Ballot {
        self.delivered_ballot
    }

    /// What the ordering layer observed for the driver's metrics since the last call
    /// (with `CoordinatorConfig::observe`; see `partita_consensus::Observation`).
    pub fn drain_observations(&mut self, out: &mut Vec<partita_consensus::Observation>) {
        if let Some(o) = &mut self.ordering {
            o.drain_observations(out);
        }
    }

    /// The node's counters and its ordering layer's, merged.
    pub fn counters(&self) -> BTreeMap<&'static str, u64> {
        let mut c = self.counters.clone();
        if let Some(o) = &self.ordering {
            o.add_counters(&mut c);
        }
        c
    }
    pub fn bugs(&self) -> &UnsafeBugs {
        &self.bugs
    }
    /// Instance of the newest checkpoint this replica holds (0: none).
    pub fn checkpoint_instance(&self) -> Instance {
        self.checkpoint.as_ref().map_or(0, |c| c.0)
    }
    /// Instance of the newest checkpoint the driver reported durable (0: none).
    pub fn checkpoint_durable(&self) -> Instance {
        self.checkpoint_durable
    }

    /// Whether a state transfer is under way, and its progress (bytes received of
    /// the total, 0 of 0 before the first chunk).
    pub fn transfer_progress(&self) -> Option<(u64, u64)> {
        self.transfer.as_ref().map(|t| {
            let got = (t.received_chunks * self.setup.checkpoint.chunk_bytes).min(t.total);
            (got, t.total)
        })
    }

    fn count(&mut self, what: &'static str) {
        self.count_n(what, 1);
    }

    fn count_n(&mut self, what: &'static str, n: u64) {
        if n > 0 {
            *self.counters.entry(what).or_default() += n;
        }
    }

    /// A message from another node (or a peer claiming to be one). What no member of
    /// the cluster could have sent (a stranger's id, an instance or ballot out of range,
    /// a range that ends before it starts: [`Msg::check`]) is counted and dropped here,
    /// before any role sees it: a node never dies from what a peer sent.
    pub fn on_peer(&mut self, from: NodeId, msg: Msg, out: &mut Vec<Output>) {
        if self.removed().is_some() {
            return;
        }
        // A replica or acceptor added at run time that this node has not heard of yet
        // (it restarted from a log that predates the change) is known by the members
        // it says there are.
        let introduced = matches!(&msg, Msg::Members(m)
            if m.replicas.contains_key(&from) || m.acceptors.contains(&from));
        let stranger = from == self.setup.id || !(self.is_member(from) || introduced);
        if stranger && !self.bugs.unchecked_peer_input {
            self.count("dropped_peer_not_a_member");
            return;
        }
        if msg.check().is_err() && !self.bugs.unchecked_peer_input {
            self.count("dropped_peer_malformed");
            return;
        }
        let members = matches!(msg, Msg::Members(_));
        let told_removed = matches!(&msg, Msg::Members(m) if m.removed.contains(&self.setup.id));
        let actions = self.dispatch(from, msg);
        self.run(actions, out);
        if members {
            self.heard_members(told_removed);
        }
    }

    /// A client's command. One that is malformed (addressed to no group, split
    /// wrongly, or addressed to a partition this cluster does not have) is refused
    /// with the reason before anything else sees it.
    pub fn on_request(&mut self, cmd: Command, out: &mut Vec<Output>) {
        if let Err(reason) = self.check_request(&cmd) {
            self.count("requests_malformed");
            out.push(Output::Refused {
                client: cmd.client,
                seq: cmd.seq,
                reason,
            });
            return;
        }
        if self.setup.mode == Mode::Smr && self.setup.replica && !self.serves() {
            self.count("requests_refused_not_serving");
            let learner = self.members().is_learner(self.setup.id);
            let reason = match (self.member.removed, learner) {
                (Some(at), _) => format!(
                    "node {} was removed from the cluster at instance {at}",
                    self.setup.id
                ),
                (None, true) => format!(
                    "node {} is a learner catching up; it answers clients once promoted",
                    self.setup.id
                ),
                (None, false) => format!(
                    "node {} is not a replica of this cluster (yet): it joins through \
                     `partita member add`",
                    self.setup.id
                ),
            };
            out.push(Output::Refused {
                client: cmd.client,
                seq: cmd.seq,
                reason,
            });
            return;
        }
        if self.setup.mode == Mode::Cs {
            assert!(self.replica.is_some(), "a cs server has a replica");
            self.cs_instance += 1;
            let value = Value {
                vid: Vid {
                    ballot: Ballot::ZERO,
                    seq: self.cs_instance,
                },
                commands: vec![cmd],
                parts: Vec::new(),
                time_ms: self.clock_ms,
                skip: 0,
            };
            self.deliver(self.cs_instance, self.cs_instance, Arc::new(value));
            self.maybe_checkpoint();
            self.maybe_save(out);
            self.flush_replies(out);
            return;
        }
        if self.bugs.unordered_query && self.leads().is_none() {
            if let Some(reply) = self
                .replica
                .as_mut()
                .and_then(|r| r.unsafe_read_unordered(&cmd))
            {
                out.push(Output::Reply(reply));
                return;
            }
        }
        // A copy of a command this replica executed already (its reply was lost, or
        // the client timed out first): answered from the session table at once, not
        // ordered again only to be answered from the same table. Not with speculation
        // or early replies (a reply there may not be final yet), nor with partitions
        // (the other partitions' parts come from their own replicas, through the
        // ordering).
        if !self.setup.speculative
            && !self.setup.early_replies
            && self.setup.membership.partitions.replicas.len() <= 1
        {
            if let Some(reply) = self.replica.as_ref().and_then(|r| r.answered(&cmd)) {
                self.count("requests_answered_from_sessions");
                out.push(Output::Reply(reply));
                return;
            }
        }
        let (client, seq) = (cmd.client, cmd.seq);
        let Some(ordering) = self.ordering.as_mut() else {
            unreachable!("an smr node has an ordering layer");
        };
        let access = match (ordering.wants_access(), self.replica.as_ref()) {
            (true, Some(r)) => Some(r.access(&cmd)),
            _ => None,
        };
        // GeoPaxos+: the serializers psite names, from this replica's placement.
        let mut cmd = cmd;
        if let Some(route) = self.replica.as_ref().and_then(|r| r.route(&cmd)) {
            cmd.route = route;
        }
        let mut actions = Vec::new();
        match ordering.multicast(cmd, access, &mut actions) {
            Ok(()) => self.run(actions, out),
            Err(reason) => {
                self.count("requests_refused");
                out.push(Output::Refused {
                    client,
                    seq,
                    reason,
                });
            }
        }
    }

    fn check_request(&self, cmd: &Command) -> Result<(), String> {
        if cmd.is_system() {
            return Err(format!(
                "client id {} is reserved for the ordering's own commands (ids from 2^63)",
                cmd.client
            ));
        }
        cmd.body.check()?;
        let all = self.setup.membership.partitions.map.all();
        if cmd.body.groups() & !all != 0 {
            return Err(format!(
                "a command addressed to partitions {:?}; this cluster has {}",
                partita_types::mask_partitions(cmd.body.groups() & !all),
                self.setup.membership.partitions.map.count()
            ));
        }
        Ok(())
    }

    /// One clock tick (the cluster's `tick_ms`), with the driver's clock in
    /// milliseconds (the wall clock; virtual time in the simulator): the time values
    /// are stamped with, which replicas use for session leases.
    pub fn on_tick(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        self.on_ticks(1, now_ms, out);
    }

    /// `n` clock ticks at once (at least one), of which all but the last did nothing:
    /// what a driver delivers when it skipped the ticks before
    /// [`NodeCore::ticks_until`] (a simulator: most ticks of an idle node do
    /// nothing). The roles see the tick count jump by `n`.
    pub fn on_ticks(&mut self, n: u64, now_ms: u64, out: &mut Vec<Output>) {
        if self.removed().is_some() {
            return;
        }
        self.tick += n.max(1);
        self.clock_ms = self.clock_ms.max(now_ms);
        let mut actions = Vec::new();
        if let Some(o) = self.ordering.as_mut() {
            o.on_tick(self.tick, self.clock_ms, &mut actions);
        }
        if self.checkpoint_durable > 0
            && self.tick.saturating_sub(self.last_announce_tick)
                >= self.setup.checkpoint.announce_ticks
        {
            self.announce_checkpoint(&mut actions);
        }
        self.transfer_tick(&mut actions);
        self.member_tick(&mut actions);
        if let Some(x) = self.replica.as_mut().and_then(|r| r.exchange_mut()) {
            x.exec_tick();
        }
        if !actions.is_empty() {
            self.run(actions, out);
        }
        self.flush_replies(out);
    }

    /// How many ticks from the last one `on_tick` may next act (at least 1), if no other
    /// input arrives first, given `due` (this core's [`NodeCore::tick_due`], asked since
    /// the core last changed: it changes only in its handlers, so a driver that asks
    /// often may keep it), that a tick is `tick_ms` of the driver's clock, that the
    /// driver holds `pending` ticks it has not given yet and that its clock reads
    /// `now_ms`: a driver may skip the ticks before and deliver them at once
    /// ([`NodeCore::on_ticks`]). Every input may bring it closer, so a driver asks
    /// after each. Each role answers for itself (see [`TickDue`]); where one cannot
    /// tell, the next tick.
    pub fn ticks_until(&self, due: TickDue, pending: u64, now_ms: u64, tick_ms: u64) -> u64 {
        due.ticks_after(self.tick + pending, self.clock_ms.max(now_ms), tick_ms)
    }

    /// When `on_tick` may next act (see [`NodeCore::ticks_until`]): a tick count
    /// (this node's ticks so far, [`NodeCore::ticks`], are the count now) or a time of
    /// the clock its ticks carry, whichever comes first.
    pub fn tick_due(&self) -> TickDue {
        if self.removed().is_some() {
            return TickDue::NEVER;
        }
        let mut due = self
            .ordering
            .as_ref()
            .map_or(TickDue::NEVER, |o| o.tick_due());
        if self.checkpoint_durable > 0 {
            due = due.tick(
                self.last_announce_tick
                    .saturating_add(self.setup.checkpoint.announce_ticks),
            );
        }
        let exchange_due = self
            .replica
            .as_ref()
            .and_then(|r| r.exchange())
            .is_some_and(|x| x.exec_tick_due());
        if self.transfer.is_some() || exchange_due {
            due = TickDue::NEXT;
        }
        due = due.min(self.member_tick_due());
        if self.bugs.tick_due_late {
            return TickDue {
                tick: due.tick.max(self.tick).saturating_add(20),
                clock_ms: due.clock_ms.max(self.clock_ms).saturating_add(20),
            };
        }
        due
    }

    /// Ticks this node took so far (the count its roles see).
    pub fn ticks(&self) -> u64 {
        self.tick
    }

    /// The driver wrote checkpoint `instance` durably (from [`Output::SaveCheckpoint`]).
    pub fn on_checkpoint_saved(&mut self, instance: Instance, out: &mut Vec<Output>) {
        assert_eq!(
            self.checkpoint_saving.take(),
            Some(instance),
            "a checkpoint reported saved that was not being saved"
        );
        self.count("checkpoints_saved");
        let mut actions = Vec::new();
        let position = std::mem::take(&mut self.saving_position);
        if instance > self.checkpoint_durable {
            self.checkpoint_durable = instance;
            self.durable_position = position;
            self.announce_checkpoint(&mut actions);
            if let Some(o) = self.ordering.as_mut() {
                o.retire_acceptor(instance);
            }
        }
        self.run(actions, out);
    }

    /// The driver could not write checkpoint `instance` for a reason it survives (a
    /// full disk). Nothing depends on it yet: the log is truncated only below saved
    /// checkpoints. The next checkpoint, an interval later, is handed over as usual.
    pub fn on_checkpoint_failed(&mut self, instance: Instance) {
        assert_eq!(
            self.checkpoint_saving.take(),
            Some(instance),
            "a checkpoint reported failed that was not being saved"
        );
        self.count("checkpoint_write_failures");
    }

    fn announce_checkpoint(&mut self, actions: &mut Outbox) {
        self.last_announce_tick = self.tick;
        if let Some(o) = self.ordering.as_mut() {
            o.announce_checkpoint(self.checkpoint_durable, &self.durable_position, actions);
        }
    }

    /// Writes with these tokens are durable (in order).
    pub fn on_persisted(&mut self, tokens: &[PersistToken], out: &mut Vec<Output>) {
        let mut actions = Vec::new();
        self.ordering
            .as_mut()
            .expect("persist completions go to the ordering layer")
            .on_persisted(tokens, &mut actions);
        self.run(actions, out);
    }

    /// Whether the core has work to do that the driver should run with
    /// [`NodeCore::on_continue`] right after sending the outputs of the current input
    /// (and before taking the next one): proposals to execute speculatively. Only
    /// ever true with speculative execution.
    pub fn has_deferred_work(&self) -> bool {
        self.replica
            .as_ref()
            .and_then(|r| r.speculation())
            .is_some_and(|s| s.speculation_ready())
    }

    /// Run the deferred work ([`NodeCore::has_deferred_work`]): execute speculatively
    /// every proposal next in line. Deferred so that the replies a decision released
    /// leave first, instead of waiting for the speculative execution of the next
    /// instance (paper 001 §III-B: speculation hides execution, it must not add to
    /// the decided instance's response time). With early replies, the tentative
    /// replies of what it speculated are among the outputs. Doing nothing when there
    /// is nothing deferred, it is always safe to call.
    pub fn on_continue(&mut self, out: &mut Vec<Output>) {
        let Some(s) = self.replica.as_mut().and_then(|r| r.speculation_mut()) else {
            return;
        };
        if !s.speculation_ready() {
            return;
        }
        s.speculate();
        self.flush_replies(out);
    }

    /// Every role's invariants, plus the node's own. Cheap: callable after every input.
    pub fn invariants(&self) {
        if let Some(o) = &self.ordering {
            assert_eq!(self.setup.mode, Mode::Smr, "ordering in cs mode");
            o.invariants();
        }
        let delivered = self.ordering.as_ref().and_then(|o| o.delivered_up_to());
        if let (Some(d), Some(r)) = (delivered, &self.replica) {
            assert_eq!(
                r.last_instance() + self.held.len() as u64,
                d,
                "replica took exactly what the ordering delivered"
            );
        }
        if let (Some(r), Some((i, _, _))) = (&self.replica, self.held.front()) {
            assert_eq!(
                *i,
                r.last_instance() + 1,
                "held values follow the replica's"
            );
        }
        assert!(self.local.is_empty(), "local messages left unhandled");
        assert!(self.replies.is_empty(), "replies left unsent");
        if let Some(r) = &self.replica {
            r.invariants();
            assert_eq!(
                r.speculation().map_or(0, |s| s.early_pending()),
                0,
                "early replies left unsent"
            );
            assert!(
                self.checkpoint_instance() <= r.last_instance(),
                "a checkpoint ahead of the replica"
            );
        }
        assert!(self.checkpoint_durable <= self.checkpoint_handed);
        // Under a partial order a state transfer may bring a peer's checkpoint at an
        // earlier cut than the newest this node saved (see `finish_transfer`): the one
        // saved stays on disk (a true state at its cut, still what is announced), and
        // the next checkpoint beyond it is saved as usual.
        let at_cuts = self
            .ordering
            .as_ref()
            .is_some_and(|o| o.checkpoints_at_cuts());
        assert!(at_cuts || self.checkpoint_handed <= self.checkpoint_instance());
        if let Some(s) = self.checkpoint_saving {
            assert!(s <= self.checkpoint_handed && s > self.checkpoint_durable);
        }
        if let Some(t) = &self.transfer {
            t.invariants(&self.setup.checkpoint);
            assert!(self.replica.is_some(), "state transfer without a replica");
        }
    }

    fn run(&mut self, actions: Outbox, out: &mut Vec<Output>) {
        let mut actions = actions;
        loop {
            for a in actions.drain(..) {
                match a {
                    Action::Send { to, msg } if to == self.setup.id => {
                        self.local.push_back((to, msg))
                    }
                    Action::Send { to, msg } => out.push(Output::Send { to, msg }),
                    Action::Persist { token, record } => {
                        out.push(Output::Persist { token, record })
                    }
                    Action::Deliver {
                        instance,
                        name,
                        value,
                    } => {
                        self.delivered_ballot = self.delivered_ballot.max(value.vid.ballot);
                        match self.replica.is_some() {
                            true => self.deliver(instance, name, value),
                            false => self.count("dropped_deliver_without_replica"),
                        }
                    }
                    // Only a speculative learner reports proposals; the replica
                    // executes them ahead and holds the replies until the decision.
                    Action::Propose { instance, value } => {
                        match self.replica.as_mut().and_then(|r| r.speculation_mut()) {
                            Some(s) => s.propose(instance, value),
                            None => self.count("dropped_propose_without_speculation"),
                        }
                    }
                    Action::TruncateLog { below_token } => {
                        out.push(Output::TruncateLog { below_token })
                    }
                    Action::Cut { position } => self.checkpoint_at_cut(position),
                    Action::NeedCheckpoint => {
                        let mut sends = Vec::new();
                        self.need_checkpoint(&mut sends);
                        for a in sends {
                            if let Action::Send { to, msg } = a {
                                out.push(Output::Send { to, msg });
                            }
                        }
                    }
                }
            }
            // Deliveries execute whole instances: this is a consistent point.
            self.maybe_checkpoint();
            // GeoPaxos+: what this replica decided to submit again as its origin.
            let again = self
                .replica
                .as_mut()
                .map(|r| r.take_resubmits())
                .unwrap_or_default();
            if !again.is_empty() {
                let n = again.len() as u64;
                let refused = match self.ordering.as_mut() {
                    Some(o) => again
                        .into_iter()
                        .map(|cmd| o.multicast(cmd, None, &mut actions))
                        .filter(Result::is_err)
                        .count() as u64,
                    None => n,
                };
                // A refused one is not lost: its client times out and resubmits it.
                self.count_n("resubmits", n - refused);
                self.count_n("resubmits_refused", refused);
                continue;
            }
            if !self.resumed.is_empty() {
                actions = std::mem::take(&mut self.resumed);
                continue;
            }
            let Some((from, msg)) = self.local.pop_front() else {
                // Values released now may hold membership changes the learner waits
                // on: what it does on resuming runs in this loop too.
                self.release_held();
                if self.resumed.is_empty() {
                    break;
                }
                continue;
            };
            actions = self.dispatch(from, msg);
        }
        self.maybe_save(out);
        self.flush_replies(out);
    }

    /// Hand a delivered value to the replica. P-SMR: its commands go to the worker
    /// threads (run at once when they run inline); while a due checkpoint waits for
    /// the threads to finish what they hold, the value is held back.
    fn deliver(&mut self, instance: Instance, name: Instance, value: Arc<Value>) {
        // Not with an ordering that keeps a position of its own (Multi-Ring Paxos): a
        // checkpoint there covers everything delivered, so values are never held back
        // (the checkpoint waits for a moment when everything delivered ran).
        if !self.held.is_empty() || (self.checkpoint_waits() && !self.ordering_has_position()) {
            self.held.push_back((instance, name, value));
            return;
        }
        let system = value.commands.iter().any(|c| c.is_system());
        if system || !self.member.late.is_empty() {
            // What applying them asks (telling the other nodes; an acceptor here
            // recording them, a new epoch's Phase 1) runs next, like a handler's.
            let mut actions = Vec::new();
            self.apply_members(instance, name, &value, &mut actions);
            self.resumed.extend(actions);
        }
        if system
            && value
                .commands
                .iter()
                .any(partita_types::members::is_member_command)
        {
            // The learner paused after this value: it delivers on in the epoch the
            // change left (an acceptor change starts one at the next instance).
            let members = self.member.applied.clone();
            if let Some(o) = self.ordering.as_mut() {
                o.replica_members(&members, true, &mut self.resumed);
            }
        }
        let r = self.replica.as_mut().expect("the caller checked");
        r.execute_named(instance, name, &value, &mut self.replies);
        if self.inline_workers {
            self.drain_workers();
        }
    }

    /// P-SMR, inline: run the worker threads until none can run (then every delivered
    /// command ran), on OS threads of their own (see `SequentialReplica::run_threads`).
    fn drain_workers(&mut self) {
        if let Some(w) = self.replica.as_mut().and_then(|r| r.worker_threads_mut()) {
            w.run_threads(&mut self.replies);
        }
    }

    /// Whether `interval_instances` passed since the last checkpoint, or the replica
    /// executed an acceptor change that no checkpoint covers yet, and the driver is not
    /// busy writing one. (The acceptors an acceptor change removes hold the only copies
    /// of the decisions below it besides the acceptors that stay: they stop once a
    /// checkpoint covers it, see [`members::Members`] and `tell_members`.)
    fn checkpoint_due(&self) -> bool {
        let interval = self.setup.checkpoint.interval_instances;
        let change = self.member.applied.acceptor_change_at();
        interval > 0
            && self.setup.mode == Mode::Smr
            && self.checkpoint_saving.is_none()
            && self.replica.as_ref().is_some_and(|r| {
                let done = r.last_instance();
                let at = self.checkpoint_instance();
                done >= at + interval || (change > at && done >= change)
            })
    }

    /// Whether a checkpoint is due and can be taken as soon as the worker threads
    /// finish what they hold.
    fn checkpoint_waits(&self) -> bool {
        self.checkpoint_due() && self.replica.as_ref().is_some_and(|r| !r.quiescent())
    }

    /// Whether the ordering keeps a position of its own that checkpoints record
    /// (Multi-Ring Paxos's merge), rather than the instance alone.
    fn ordering_has_position(&self) -> bool {
        self.ordering
            .as_ref()
            .is_some_and(|o| !o.position().is_empty())
    }

    /// P-SMR: the values held back for a checkpoint go to the replica once it ran
    /// everything before them (the checkpoint is taken first; a value that finds
    /// another checkpoint waiting is held again, in order).
    fn release_held(&mut self) {
        if self.held.is_empty() || !self.replica.as_ref().is_some_and(|r| r.quiescent()) {
            return;
        }
        self.maybe_checkpoint();
        for (instance, name, value) in std::mem::take(&mut self.held) {
            self.deliver(instance, name, value);
        }
    }

    /// P-SMR: leave the worker threads to the driver ([`NodeCore::on_worker`])
    /// instead of running them inside every input (the simulator, which gives each
    /// its own CPU).
    pub fn set_inline_workers(&mut self, on: bool) {
        self.inline_workers = on;
    }

    /// Whether every value delivered to this node's replica ran to the end (always,
    /// without P-SMR worker threads the driver runs).
    pub fn quiescent(&self) -> bool {
        self.held.is_empty() && self.replica.as_ref().is_none_or(|r| r.quiescent())
    }

    /// P-SMR worker threads of this node's replica (0: sequential execution).
    pub fn worker_threads(&self) -> usize {
        self.replica
            .as_ref()
            .and_then(|r| r.worker_threads())
            .map_or(0, |w| w.threads())
    }

    /// Whether worker thread `t` can run its next command now.
    pub fn worker_runnable(&self, t: usize) -> bool {
        self.replica
            .as_ref()
            .and_then(|r| r.worker_threads())
            .is_some_and(|w| w.thread_runnable(t))
    }

    /// Worker thread `t` runs its next command (only when
    /// [`NodeCore::worker_runnable`]); its replies are among the outputs.
    pub fn on_worker(&mut self, t: usize, out: &mut Vec<Output>) {
        let w = self
            .replica
            .as_mut()
            .and_then(|r| r.worker_threads_mut())
            .expect("a runnable worker has a replica with threads");
        w.run_thread(t, &mut self.replies);
        self.release_held();
        if !self.resumed.is_empty() {
            let resumed = std::mem::take(&mut self.resumed);
            return self.run(resumed, out);
        }
        self.maybe_checkpoint();
        self.maybe_save(out);
        self.flush_replies(out);
    }

    /// Take a checkpoint if one is due ([`NodeCore::checkpoint_due`]) and every delivered
    /// command ran (P-SMR worker threads hold nothing). An ordering that delivers a
    /// partial order says where instead ([`Action::Cut`]).
    fn maybe_checkpoint(&mut self) {
        if self.checkpoint_due() {
            self.checkpoint_here();
        }
    }

    /// Checkpoint the replica here, between events, if it can be taken here: an
    /// ordering that checkpoints only at its cuts waits for one, and worker threads
    /// must have finished what they hold.
    fn checkpoint_here(&mut self) {
        if self
            .ordering
            .as_ref()
            .is_some_and(|o| o.checkpoints_at_cuts())
            || !self.replica.as_ref().is_some_and(|r| r.quiescent())
        {
            return;
        }
        // Values that an applied membership change let through (the learner resumed)
        // wait in `resumed`, and the ordering's position already counts them (Multi-Ring
        // Paxos: the merge delivered them): the checkpoint waits until they ran.
        if self
            .resumed
            .iter()
            .any(|a| matches!(a, Action::Deliver { .. }))
        {
            self.count("checkpoint_waits_for_resumed");
            return;
        }
        // The ordering's position goes with it: every value it delivered ran (nothing
        // is held back when the ordering has a position to keep; see `deliver`).
        let position = self
            .ordering
            .as_ref()
            .map(|o| o.position())
            .unwrap_or_default();
        assert!(
            position.is_empty() || self.held.is_empty(),
            "a checkpoint with an ordering position and values held back"
        );
        self.take_checkpoint(position);
    }

    /// An ordering that delivers a partial order reached a cut (see [`Action::Cut`]):
    /// the checkpoint, if one is due, is taken here, with the cut's position.
    fn checkpoint_at_cut(&mut self, position: Vec<u8>) {
        if self.checkpoint_due() {
            self.take_checkpoint(position);
        }
    }

    /// Checkpoint the replica with the ordering's `position`, if every delivered
    /// command ran.
    fn take_checkpoint(&mut self, position: Vec<u8>) {
        let r = self
            .replica
            .as_mut()
            .expect("a due checkpoint has a replica");
        if !r.quiescent() {
            return;
        }
        // A checkpoint holds decided state only: set the speculated suffix aside and
        // speculate it again afterwards (same values, same held replies; proposals
        // not yet speculated stay deferred).
        let speculated = r.speculation().map_or(0, |s| s.speculated());
        if let Some(s) = r.speculation_mut().filter(|_| speculated > 0) {
            s.rollback_speculation();
        }
        let bytes = r.checkpoint(&members::join_section(
            position.clone(),
            &self.member.applied,
        ));
        if let Some(s) = r.speculation_mut().filter(|_| speculated > 0) {
            s.respeculate(speculated);
        }
        let instance = r.last_instance();
        let crc = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().expect("4 bytes"));
        self.count("checkpoints_taken");
        self.checkpoint = Some((instance, CheckpointBytes(Arc::new(bytes)), crc));
        self.checkpoint_position = position;
    }

    /// A checkpoint for a backup (`partita snapshot save`): one taken now if the
    /// replica can take one here (every delivered command ran; an ordering that
    /// checkpoints only at its cuts, EPaxos or GeoPaxos+, cannot), else the newest it
    /// holds. Either is one state at one instance boundary, with its checksum; a new
    /// one is saved and announced like a periodic one. `None`: this node has no
    /// replicated replica.
    pub fn backup_checkpoint(&mut self) -> Option<(Instance, CheckpointBytes)> {
        if self.setup.mode != Mode::Smr || self.replica.is_none() {
            return None;
        }
        self.checkpoint_here();
        self.checkpoint.as_ref().map(|(i, b, _)| (*i, b.clone()))
    }

    /// Hand the newest checkpoint to the driver if it has not seen it and is idle.
    fn maybe_save(&mut self, out: &mut Vec<Output>) {
        if self.checkpoint_saving.is_some() || self.setup.checkpoint.interval_instances == 0 {
            return;
        }
        let Some((instance, bytes, _)) = &self.checkpoint else {
            return;
        };
        if *instance <= self.checkpoint_handed {
            return;
        }
        self.checkpoint_saving = Some(*instance);
        self.checkpoint_handed = *instance;
        self.saving_position = self.checkpoint_position.clone();
        out.push(Output::SaveCheckpoint {
            instance: *instance,
            bytes: bytes.clone(),
        });
    }

    /// An acceptor truncated below `below`: if this replica needs anything there, fetch
    /// a checkpoint covering it from another replica.
    fn on_truncated(&mut self, below: Instance, actions: &mut Outbox) {
        let Some(delivered) = self.ordering.as_ref().and_then(|o| o.delivered_up_to()) else {
            return;
        };
        if delivered + 1 >= below {
            self.count("truncated_not_needed");
            return;
        }
        if self.transfer.is_some() {
            // Already fetching. Should that checkpoint not reach `below`, the learner
            // asks again after restoring it and a second transfer covers the rest.
            return;
        }
        if self.bugs.member_join_without_transfer
            && !self.setup.membership.learners.contains(&self.setup.id)
            && self
                .replica
                .as_ref()
                .is_some_and(|r| r.last_instance() == 0)
        {
            // Planted bug: a joining replica skips what it lacks, with its empty state.
            let r = self.replica.as_ref().expect("checked above");
            let mut bytes = r.checkpoint(&members::join_section(Vec::new(), &self.member.applied));
            let restored = partita_smr::unsafe_move_checkpoint(&mut bytes, below - 1)
                .ok()
                .and_then(|()| {
                    let s = &self.setup;
                    s.service.restore(&bytes, s.cluster_id, s.id).ok()
                });
            if let Some(r) = restored {
                self.count("unsafe_join_skipped_transfer");
                self.replica = Some(self.prepare_replica(r));
                if let Some(o) = self.ordering.as_mut() {
                    o.skip_to(below, &[], actions);
                }
            }
            return;
        }
        let Some(peer) = self.next_transfer_peer() else {
            self.count("state_transfer_no_peer");
            return;
        };
        self.count("state_transfers_started");
        let mut t = Transfer::new(below - 1, peer, self.tick);
        let cfg = self.setup.checkpoint.clone();
        for msg in t.requests(&cfg, self.tick) {
            actions.push(Action::Send { to: peer, msg });
        }
        self.transfer = Some(t);
    }

    /// The ordering lacks what its peers truncated (see [`Action::NeedCheckpoint`]):
    /// fetch the newest checkpoint of another replica, whatever its instance (in a
    /// partial order a smaller count can still cover what is missing; the ordering's
    /// `check_position` judges it once it is here).
    fn need_checkpoint(&mut self, actions: &mut Outbox) {
        if self.transfer.is_some() || self.replica.is_none() {
            return;
        }
        let Some(peer) = self.next_transfer_peer() else {
            self.count("state_transfer_no_peer");
            return;
        };
        self.count("state_transfers_started");
        let mut t = Transfer::new(1, peer, self.tick);
        let cfg = self.setup.checkpoint.clone();
        for msg in t.requests(&cfg, self.tick) {
            actions.push(Action::Send { to: peer, msg });
        }
        self.transfer = Some(t);
    }

    /// The other replicas, in turn.
    fn next_transfer_peer(&mut self) -> Option<NodeId> {
        let me = self.setup.id;
        // Only replicas of this replica's partition hold its state (learners still
        // catching up may hold none).
        let members = self.members();
        let m = self.setup.membership.with_members(members);
        let peers: Vec<NodeId> = m
            .learners_of(self.setup.partition)
            .into_iter()
            .filter(|&p| p != me && !members.is_learner(p))
            .collect();
        if peers.is_empty() {
            return None;
        }
        self.transfer_rotation = self.transfer_rotation.wrapping_add(1);
        Some(peers[self.transfer_rotation % peers.len()])
    }

    /// Retransmit and give up on silent peers (called every tick).
    fn transfer_tick(&mut self, actions: &mut Outbox) {
        let Some(t) = self.transfer.as_mut() else {
            return;
        };
        // Caught up by other means (the acceptors' logs reached back far enough)? In a
        // partial order a count says nothing of what is missing: the ordering asks
        // again if it still lacks something.
        let partial = self
            .ordering
            .as_ref()
            .is_some_and(|o| o.checkpoints_at_cuts());
        if !partial
            && self
                .ordering
                .as_ref()
                .and_then(|o| o.delivered_up_to())
                .is_some_and(|d| d >= t.min_instance)
        {
            self.transfer = None;
            self.count("state_transfers_abandoned");
            return;
        }
        let cfg = self.setup.checkpoint.clone();
        let msgs = t.resend_stale(&cfg, self.tick);
        let (peer, timeouts) = (t.peer, t.timeouts);
        if msgs.is_empty() {
            return;
        }
        if timeouts >= cfg.transfer_timeouts_max {
            self.count("state_transfer_peer_silent");
            self.switch_transfer_peer(actions, true);
            return;
        }
        self.count("state_transfer_retransmits");
        for msg in msgs {
            actions.push(Action::Send { to: peer, msg });
        }
    }

    /// Start the transfer over with the next replica: at once, or (after a failure
    /// that could repeat at once, like a bad checksum) at the next timeout.
    fn switch_transfer_peer(&mut self, actions: &mut Outbox, now: bool) {
        let Some(peer) = self.next_transfer_peer() else {
            return;
        };
        let cfg = self.setup.checkpoint.clone();
        let tick = self.tick;
        let Some(t) = self.transfer.as_mut() else {
            return;
        };
        t.restart(peer, tick);
        if now {
            for msg in t.requests(&cfg, tick) {
                actions.push(Action::Send { to: peer, msg });
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_chunk(
        &mut self,
        from: NodeId,
        instance: Instance,
        offset: u64,
        total: u64,
        crc32c: u32,
        data: &[u8],
        actions: &mut Outbox,
    ) {
        let cfg = self.setup.checkpoint.clone();
        let tick = self.tick;
        let Some(t) = self.transfer.as_mut().filter(|t| t.peer == from) else {
            self.count("dropped_chunk_unexpected");
            return;
        };
        let outcome = t.on_chunk(&cfg, tick, instance, offset, total, crc32c, data);
        let tried = t.peers_tried;
        if outcome == ChunkOutcome::Progress {
            for msg in t.requests(&cfg, tick) {
                actions.push(Action::Send { to: from, msg });
            }
        }
        match outcome {
            ChunkOutcome::Ignored(why) => self.count(why),
            ChunkOutcome::PeerLacks => {
                self.count("state_transfer_peer_lacks");
                let n_peers = self
                    .setup
                    .membership
                    .with_members(self.members())
                    .learners_of(self.setup.partition)
                    .len()
                    .saturating_sub(1);
                if tried < n_peers {
                    self.switch_transfer_peer(actions, true);
                }
                // Otherwise every replica was asked this round: wait for the timeout.
            }
            ChunkOutcome::Progress => {}
            ChunkOutcome::BadChecksum => {
                self.count("state_transfer_bad_checksum");
                self.switch_transfer_peer(actions, false);
            }
            ChunkOutcome::Complete => self.finish_transfer(actions),
        }
    }

    /// Every chunk arrived: restore, skip the learner past the checkpoint, keep the
    /// checkpoint as our own (re-stamped with our node id) and save it.
    fn finish_transfer(&mut self, actions: &mut Outbox) {
        let mut t = self.transfer.take().expect("a transfer to finish");
        let mut bytes = std::mem::take(&mut t.buf);
        let restored = self
            .setup
            .service
            .restore(&bytes, self.setup.cluster_id, self.setup.id);
        let Ok(r) = restored else {
            // A valid checksum but refused contents: a peer of another cluster, or a
            // bug. Try another replica after a timeout.
            self.retry_transfer(&t, "state_transfer_refused", actions);
            return;
        };
        let instance = r.last_instance();
        let current = self.replica.as_ref().map_or(0, |r| r.last_instance());
        let partial = self
            .ordering
            .as_ref()
            .is_some_and(|o| o.checkpoints_at_cuts());
        if instance <= current && !partial {
            self.count("state_transfer_obsolete");
            return;
        }
        let (position, members) = partita_smr::verify_checkpoint(&bytes)
            .map(|info| members::split_section(partita_smr::checkpoint_ordering(&bytes, &info)))
            .unwrap_or_default();
        if let Some(Err(_)) = self.ordering.as_ref().map(|o| o.check_position(&position)) {
            // A checkpoint of this cluster whose ordering position this node cannot
            // take (another ring layout): try another replica.
            self.retry_transfer(&t, "state_transfer_refused_position", actions);
            return;
        }
        partita_smr::restamp_checkpoint(&mut bytes, self.setup.id)
            .expect("a checkpoint that was just restored verifies");
        let crc = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().expect("4 bytes"));
        // The replicas at the checkpoint's position: what this replica applies the
        // suffix's changes to (and who answers which partition's commands).
        self.member.applied = members;
        self.replica = Some(self.prepare_replica(r));
        self.held.retain(|(i, _, _)| *i > instance);
        if let Some(o) = self.ordering.as_mut() {
            o.adopt_members(&self.member.applied, actions);
        }
        self.count_n("state_transfer_bytes_restored", bytes.len() as u64);
        self.checkpoint = Some((instance, CheckpointBytes(Arc::new(bytes)), crc));
        self.count("state_transfers_completed");
        // The ordering may have delivered beyond the checkpoint already: P-SMR holds
        // delivered values back while a due checkpoint waits for the worker threads,
        // so the replica can stand behind the delivery stream. The held values above
        // the checkpoint (kept just above) then follow the restored replica, and the
        // stream has nothing to skip.
        //
        // An ordering that delivers a partial order always takes the checkpoint's
        // position, even at a smaller count: what it delivered beyond is another set
        // of commands, which it delivers again from the restored position.
        let delivered = self.ordering.as_ref().and_then(|o| o.delivered_up_to());
        if let Some(o) = self.ordering.as_mut() {
            if o.checkpoints_at_cuts() || delivered.is_none_or(|d| instance > d) {
                // The learner goes on in the checkpoint's ordering epoch.
                o.replica_members(&self.member.applied, false, actions);
                o.skip_to(instance + 1, &position, actions);
            } else {
                self.count("state_transfer_behind_delivery");
            }
        }
        self.checkpoint_position = position;
    }

    /// A transferred checkpoint was refused (`why`, counted): start over with another
    /// replica after a timeout.
    fn retry_transfer(&mut self, t: &Transfer, why: &'static str, actions: &mut Outbox) {
        self.count(why);
        let mut again = Transfer::new(t.min_instance, t.peer, self.tick);
        again.peers_tried = t.peers_tried;
        self.transfer = Some(again);
        self.switch_transfer_peer(actions, false);
    }

    fn flush_replies(&mut self, out: &mut Vec<Output>) {
        out.extend(self.replies.drain(..).map(Output::Reply));
        out.append(&mut self.member_done);
        self.flush_early(out);
        if let Some(x) = self.replica.as_mut().and_then(|r| r.exchange_mut()) {
            for (to, data) in x.take_exec() {
                if to == self.setup.id {
                    continue;
                }
                self.count("exec_messages_sent");
                out.push(Output::Send {
                    to,
                    msg: Msg::Exec { data },
                });
            }
        }
    }

    /// Tentative replies and confirmations of the replica (early replies).
    fn flush_early(&mut self, out: &mut Vec<Output>) {
        let Some(s) = self.replica.as_mut().and_then(|r| r.speculation_mut()) else {
            return;
        };
        if s.early_pending() == 0 {
            return;
        }
        for e in s.take_early() {
            let what = match e {
                EarlyReply::Tentative(_) => "early_tentative_replies",
                EarlyReply::Confirm(_) => "early_confirmations",
            };
            *self.counters.entry(what).or_default() += 1;
            if !self.bugs.unconfirmed_replies {
                out.push(Output::Early(e));
            } else if let EarlyReply::Tentative(reply) = e {
                // Planted bug: the speculative result goes out as final.
                out.push(Output::Reply(reply));
            }
        }
    }

    /// A peer message: state transfer is the replica's; everything else goes through
    /// the ordering layer (an acceptor's truncation notice also tells a lagging
    /// replica to fetch a checkpoint).
    fn dispatch(&mut self, from: NodeId, msg: Msg) -> Outbox {
        let mut out = Vec::new();
        let handled = match msg {
            Msg::CheckpointRequest {
                instance,
                min_instance,
                offset,
                len,
            } => {
                let serve = self.replica.is_some() && self.setup.mode == Mode::Smr;
                if serve {
                    let held = self
                        .checkpoint
                        .as_ref()
                        .map(|(i, b, crc)| (*i, &b.0[..], *crc));
                    match transfer::serve(held, instance, min_instance, offset, len) {
                        Ok(reply) => {
                            self.count("checkpoint_chunks_served");
                            out.push(Action::Send {
                                to: from,
                                msg: reply,
                            });
                        }
                        Err(why) => self.count(why),
                    }
                }
                serve
            }
            Msg::CheckpointChunk {
                instance,
                offset,
                total,
                crc32c,
                data,
            } => {
                let take = self.replica.is_some();
                if take {
                    self.on_chunk(from, instance, offset, total, crc32c, &data, &mut out);
                }
                take
            }
            Msg::Exec { data } => match self.replica.as_mut().and_then(|r| r.exchange_mut()) {
                Some(x) => {
                    x.on_exec(from, &data, &mut self.replies);
                    true
                }
                None => false,
            },
            Msg::Truncated { below } => {
                let mut handled = self
                    .ordering
                    .as_mut()
                    .is_some_and(|o| o.on_message(from, Msg::Truncated { below }, &mut out));
                if self.replica.is_some() && self.setup.mode == Mode::Smr {
                    handled = true;
                    self.on_truncated(below, &mut out);
                }
                handled
            }
            msg => self
                .ordering
                .as_mut()
                .is_some_and(|o| o.on_message(from, msg, &mut out)),
        };
        if !handled {
            self.count("dropped_not_for_this_node");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_btree::Op;
    use partita_consensus::Protocol;

    fn setup(id: NodeId, acceptor: bool, replica: bool) -> NodeSetup {
        NodeSetup {
            id,
            service: partita_smr::service::<partita_btree::BPlusTree>(),
            session_lease_ms: None,
            cluster_id: 1,
            mode: Mode::Smr,
            membership: Membership {
                ring_decision: Default::default(),
                protocol: Protocol::MultiPaxos,
                acceptors: vec![1, 2, 3],
                coordinator: 1,
                learners: vec![4],
                partitions: Default::default(),
                batchers: Vec::new(),
                epoch: 0,
                epoch_from: 1,
                unsafe_quorum: None,
            },
            acceptor,
            replica,
            partition: 0,
            batcher: false,
            coordinator_config: CoordinatorConfig::default(),
            batcher_config: BatcherConfig::default(),
            learner_config: LearnerConfig::default(),
            checkpoint: CheckpointConfig::default(),
            early_replies: false,
            speculative: false,
            psmr: None,
            ordering: OrderingSetup::Paxos,
            genesis: Vec::new(),
        }
    }

    #[test]
    fn coordinator_starts_phase1_and_answers_its_own_acceptor_locally() {
        let mut out = Vec::new();
        let core = NodeCore::new(
            setup(1, true, false),
            vec![],
            UnsafeBugs::default(),
            &mut out,
        );
        assert!(core.leads().is_some());
        // Phase 1A to the two other acceptors; its own acceptor got it locally and asks
        // to persist the promise.
        let to: Vec<NodeId> = out
            .iter()
            .filter_map(|o| match o {
                Output::Send {
                    to,
                    msg: Msg::Phase1A { .. },
                } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(to, vec![2, 3]);
        assert!(out.iter().any(|o| matches!(
            o,
            Output::Persist {
                record: AcceptorRecord::Promise { .. },
                ..
            }
        )));
        core.invariants();
    }

    #[test]
    fn a_non_coordinator_forwards_commands_to_the_leader() {
        let mut out = Vec::new();
        let mut core = NodeCore::new(
            setup(2, true, false),
            vec![],
            UnsafeBugs::default(),
            &mut out,
        );
        out.clear();
        let cmd = partita_btree::service::command(9, 1, 4, &Op::Read { key: 1 });
        core.on_request(cmd.clone(), &mut out);
        assert_eq!(
            out,
            vec![Output::Send {
                to: 1,
                msg: Msg::Forward { cmd }
            }]
        );
        assert_eq!(core.counters()["requests_forwarded"], 1);
    }

    /// A forward to a leader that then fell silent is not lost: when node 2 takes the
    /// lead itself, the command goes into its own coordinator; when a third node leads,
    /// it goes there. Forwards older than the window are forgotten.
    #[test]
    fn forwards_to_a_failed_leader_go_to_the_next_leader() {
        let timeout = CoordinatorConfig::default().election_timeout_ticks;
        // Node 2 campaigns after one election timeout and leads: it orders the command.
        let mut out = Vec::new();
        let mut core = NodeCore::new(
            setup(2, true, false),
            vec![],
            UnsafeBugs::default(),
            &mut out,
        );
        let cmd = partita_btree::service::command(9, 1, 4, &Op::Read { key: 1 });
        core.on_request(cmd.clone(), &mut out);
        for _ in 0..timeout {
            core.on_tick(0, &mut out);
        }
        let c = core
            .paxos_roles()
            .and_then(|p| p.coordinator())
            .expect("node 2 campaigns");
        assert_eq!(
            c.pending_commands(),
            1,
            "the forwarded command is queued here"
        );
        assert_eq!(core.counters()["requests_reforwarded"], 1);

        // Node 3 forwarded a command to node 1; then node 2 shows a higher ballot: the
        // command goes to node 2 too.
        let mut out = Vec::new();
        let mut core = NodeCore::new(
            setup(3, true, false),
            vec![],
            UnsafeBugs::default(),
            &mut out,
        );
        core.on_request(cmd.clone(), &mut out);
        out.clear();
        let b2 = Ballot::ZERO.next_for(1).next_for(2);
        let heartbeat = |b| Msg::Heartbeat {
            ballot: b,
            decided_up_to: 0,
        };
        core.on_peer(2, heartbeat(b2), &mut out);
        core.on_tick(0, &mut out);
        assert!(
            out.iter().any(
                |o| matches!(o, Output::Send { to: 2, msg: Msg::Forward { cmd: c } } if *c == cmd)
            ),
            "the forward goes to the new leader: {out:?}"
        );
        assert_eq!(core.counters()["requests_reforwarded"], 1);
        // Node 2 stays alive past the window; a later leader (node 1 again) gets nothing.
        for _ in 0..(crate::ordering::FORWARDED_KEEP_ELECTIONS + 1) * timeout {
            core.on_peer(2, heartbeat(b2), &mut out);
            core.on_tick(0, &mut out);
        }
        out.clear();
        core.on_peer(1, heartbeat(b2.next_for(1)), &mut out);
        core.on_tick(0, &mut out);
        assert!(
            !out.iter().any(|o| matches!(
                o,
                Output::Send {
                    msg: Msg::Forward { .. },
                    ..
                }
            )),
            "{out:?}"
        );
        assert_eq!(
            core.counters()["requests_reforwarded"],
            1,
            "forgotten after the window"
        );
        core.invariants();
    }

    #[test]
    fn a_forwarded_command_is_not_forwarded_again() {
        let mut out = Vec::new();
        let mut core = NodeCore::new(
            setup(3, true, false),
            vec![],
            UnsafeBugs::default(),
            &mut out,
        );
        out.clear();
        let cmd = partita_btree::service::command(9, 1, 4, &Op::Read { key: 1 });
        core.on_peer(2, Msg::Forward { cmd }, &mut out);
        assert!(out.is_empty());
        assert_eq!(core.counters()["dropped_forward_not_leader"], 1);
    }

    #[test]
    fn a_silent_leader_is_replaced_by_the_next_acceptor() {
        let mut out = Vec::new();
        let mut core = NodeCore::new(
            setup(2, true, false),
            vec![],
            UnsafeBugs::default(),
            &mut out,
        );
        out.clear();
        let timeout = CoordinatorConfig::default().election_timeout_ticks;
        for _ in 0..timeout - 1 {
            core.on_tick(0, &mut out);
        }
        assert!(core.leads().is_none(), "campaigned too early");
        core.on_tick(0, &mut out);
        let c = core
            .paxos_roles()
            .and_then(|p| p.coordinator())
            .expect("node 2 campaigns");
        assert_eq!(c.ballot().node, 2);
        assert!(c.ballot() > Ballot::ZERO.next_for(1));
        assert!(out.iter().any(|o| matches!(
            o,
            Output::Send {
                to: 3,
                msg: Msg::Phase1A { .. }
            }
        )));
        // The old leader's heartbeat with its lower ballot changes nothing...
        out.clear();
        core.on_peer(
            1,
            Msg::Heartbeat {
                ballot: Ballot::ZERO.next_for(1),
                decided_up_to: 0,
            },
            &mut out,
        );
        assert!(core.leads().is_some());
        // ...a higher ballot of another node deposes us.
        core.on_peer(
            3,
            Msg::Phase1A {
                ballot: Ballot::new(9, 3),
                from: 1,
                to: 10,
            },
            &mut out,
        );
        assert!(core.leads().is_none());
        assert_eq!(core.leader(), Some(3));
        core.invariants();
    }

    #[test]
    fn unknown_bug_names_are_refused_with_the_list() {
        let mut b = UnsafeBugs::default();
        let e = b.enable("bogus").unwrap_err();
        assert!(e.contains("vote-before-durable"), "{e}");
        b.enable("unordered-query").unwrap();
        assert!(b.any());
    }
}
