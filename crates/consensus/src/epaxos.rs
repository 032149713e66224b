//! EPaxos, Egalitarian Paxos (Moraru, Andersen and Kaminsky, "There is more consensus in
//! egalitarian parliaments", SOSP 2013): the leaderless baseline of paper 004 §VI.
//!
//! Every replica leads the instances of its own column (`InstanceId { replica, slot }`)
//! and proposes there the commands its clients give it. A command carries a conflict
//! description ([`EpaxosCommand`]: keys read or written, or "conflicts with everything");
//! two commands interfere when they share a key that at least one of them writes.
//!
//! # Protocol (SOSP 2013 §4: the commit protocol, execution, explicit prepare)
//!
//! - **Phase 1 (PreAccept).** The command leader computes attributes for its command:
//!   `deps`, the interfering instances it knows, and `seq`, one above their largest
//!   `seq`. It persists the instance, then sends [`EpaxosMsg::PreAccept`] to every other
//!   replica. Each replica merges its own view (union of `deps`, maximum of `seq`),
//!   persists, and answers [`EpaxosMsg::PreAcceptOk`] with the merged attributes.
//! - **Fast path.** With the optimized fast quorum, `F + ⌊(F+1)/2⌋` replicas counting
//!   the leader (2 of 3, 3 of 5), all answering exactly the leader's attributes, the
//!   leader commits at once.
//! - **Slow path.** Otherwise, once a majority answered, the leader takes the union of
//!   the answers and runs a Paxos Accept round ([`EpaxosMsg::Accept`] /
//!   [`EpaxosMsg::AcceptOk`]) with a majority, then commits.
//! - **Commit.** The decider persists the commit and broadcasts [`EpaxosMsg::Commit`].
//! - **Execution.** Committed instances and their dependencies form a graph.
//!   A replica executes a command once every instance it reaches is committed: it finds
//!   the strongly connected components with Tarjan's algorithm (iteratively, so a long
//!   chain cannot overflow the stack), executes them in reverse topological order
//!   (dependencies first) and, inside a component, by `(seq, instance id)`. Every
//!   replica therefore executes interfering commands in the same order.
//! - **Recovery** (explicit prepare). A replica that waited too long for an
//!   instance to commit (one it holds uncommitted, or one a committed command depends
//!   on that it never saw) first asks its peers for the commit
//!   ([`EpaxosMsg::CommitRequest`]); if that does not help, it takes a higher ballot and
//!   runs [`EpaxosMsg::Prepare`]; see "Recovery" below.
//!
//! # Dependencies as one slot per replica
//!
//! As in the authors' implementation, `deps` is a vector with one slot per replica:
//! `deps[q] = s` means "every instance `q.1 ..= q.s`". This names a superset of the
//! interfering instances (extra edges never break the execution order argument: it
//! needs an edge between every pair of interfering committed commands, and tolerates
//! more) and keeps every message and record bounded by the cluster size. Each replica
//! keeps, per key, the largest slot of each replica that wrote it and that accessed it,
//! and computes `deps` from that index ([`ConflictIndex`]).
//!
//! # Recovery, and where the paper was silent
//!
//! The recoverer takes ballot `(round + 1, itself)` above every ballot it has seen for
//! the instance, sends `Prepare` to every replica (itself included) and, with the
//! answers of a majority, decides as follows (answers that promise a ballot are sent
//! only once the promise is durable):
//!
//! 1. an answer is committed: commit those attributes;
//! 2. among the answers with the highest `vballot` (the ballot at which the attributes
//!    were (pre-)accepted), one is accepted: run Accept with it;
//! 3. nobody holds the command: run Accept with a no-op (a no-op interferes with
//!    nothing, so it needs no dependencies and no PreAccept round);
//! 4. the highest `vballot` is a recovery ballot (above the default ballot): an earlier
//!    recoverer already established that no fast commit happened, so run Phase 1 again
//!    for the command (PreAccept at the new ballot to a majority, then Accept with the
//!    union; never the fast path at a recovery ballot);
//! 5. only pre-accepts at the default ballot: could the leader have committed on the
//!    fast path? Only the leader decides at the default ballot, and it decides only
//!    while it has promised nothing higher, after its commit record is durable.
//!    - If the leader itself answered, its answer settles it (committed: case 1; not
//!      committed: it never will, so run Phase 1 for the command).
//!    - Otherwise count `a`, the answers that pre-accepted exactly the leader's own
//!      attributes (each replica records whether its merge changed nothing, the
//!      `agreed` flag). With `a ≥ F`, Accept those attributes: that is required if the
//!      fast path was taken, and safe if it was not (an interfering command committed
//!      without this one in its deps and outside its deps would need a quorum avoiding
//!      the leader and those `a` replicas, which saw this command first; only `F`
//!      replicas remain). With `a` below what a fast commit would leave among `m`
//!      non-leader answers (`a < (fast quorum - 1) + m - 2F`), no fast commit happened:
//!      run Phase 1 for the command.
//!    - Between the two bounds (possible from five replicas on: `N = 5` with three
//!      non-leader answers of which one agreed) the paper's optimized recovery sends
//!      TryPreAccept. **We do not implement TryPreAccept**: the recoverer waits for
//!      more answers, and with every non-leader answer (or the leader's) the case is
//!      never ambiguous. The price is liveness, never safety: with `N = 5`, the leader
//!      and one more replica down and exactly one agreeing answer, the instance waits
//!      until one of them returns (counted in [`EpaxosStats::ambiguous_waits`]).
//!
//! Other choices the paper leaves open:
//! - Persisted writes complete in order (as for the acceptor); every message leaves
//!   only once every write issued before it is durable, so no message reports a state
//!   that a crash could undo. Replies need it (a promise, a pre-accept), and so do a
//!   recoverer's phase messages: their dependencies come from the conflict index,
//!   which holds this replica's newest proposal as soon as it is made; had that slot
//!   left before its record was durable, a crash would let the restarted replica reuse
//!   a slot that peers already depend on (swarm seed 316 found it).
//! - The leader persists its instance before any `PreAccept` leaves, so a restarted
//!   replica never reuses a slot that a peer may hold.
//! - A commit is persisted by every replica, and acted on (executed, broadcast by its
//!   decider) once durable. A restarted replica ([`Epaxos::recover`]) rebuilds its
//!   instances and conflict index from its records and executes every committed
//!   instance again from the start (its state machine restarts empty; there are no
//!   checkpoints yet), and never resumes a default-ballot phase: its own uncommitted
//!   instances go through recovery like anyone else's.
//! - Replicas broadcast [`EpaxosMsg::Heartbeat`] with the highest committed slot they
//!   know per replica, so that a replica that missed commits nobody depends on yet
//!   still learns them (the paper assumes reliable delivery of commits).
//! - Recoverers of one instance are staggered by their distance after its owner in the
//!   replica list, and a recoverer refused with a higher ballot ([`EpaxosMsg::Nack`])
//!   waits a whole timeout before trying again.
//! - No epochs (no reconfiguration) and no log truncation yet.
//!
//! # Inputs, actions, invariants
//!
//! Inputs: [`Epaxos::propose`], [`Epaxos::on_message`], [`Epaxos::on_tick`] (time only
//! as a tick count), [`Epaxos::on_persisted`] (tokens in order). Actions
//! ([`EpaxosAction`]): `Send`, `Persist { token, record }` and `Execute` (commands in
//! execution order, no-ops included). [`Epaxos::invariants`] (run after every handler)
//! checks the bookkeeping (writes, replies held for durability, bounded queues, the
//! execution prefix); [`Epaxos::invariants_full`] walks every instance.
//!
//! A message that no correct replica could send (an instance of an unknown replica,
//! slot 0 or above [`SLOT_MAX`], a ballot round above [`crate::ROUND_MAX`], a
//! default-ballot message from another than the instance's owner, a recovery ballot
//! that is not its sender's, dependencies of the wrong length or an unsorted key list)
//! is dropped and counted, never trusted.
//!
//! Planted bug ([`EpaxosBugs::skip_slow_path_when_deps_differ`]): the leader commits its
//! own attributes on the fast path as soon as a fast quorum answered, whether or not the
//! answers agree. Two interfering commands can then both commit without depending on
//! each other, and replicas execute them in different orders.

use crate::{DropCounts, PersistToken, ROUND_MAX};
use partita_types::{Ballot, Command, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A position in one replica's column of instances, from 1.
pub type Slot = u64;

/// No correct replica names a slot above this (it would take centuries to reach).
pub const SLOT_MAX: Slot = 1 << 62;
/// No correct replica computes a `seq` above this.
pub const SEQ_MAX: u64 = 1 << 62;
/// The most replicas a cluster may have.
pub const REPLICAS_MAX: usize = 63;
/// Instances asked for in one [`EpaxosMsg::CommitRequest`], and missing slots noted
/// from one heartbeat, at most.
pub const COMMIT_REQUEST_INSTANCES_MAX: usize = 256;
/// Slots past the execution prefix one heartbeat makes a replica look at, per replica.
pub const HEARTBEAT_SCAN_SLOTS_MAX: u64 = 4096;

/// An instance: the `slot`-th command led by `replica`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceId {
    pub replica: NodeId,
    pub slot: Slot,
}

impl std::fmt::Display for InstanceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.replica, self.slot)
    }
}

/// One key a command reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KeyAccess {
    pub key: u64,
    pub write: bool,
}

/// A command as EPaxos orders it: an opaque client command and what it conflicts with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpaxosCommand {
    pub command: Command,
    /// Sorted by key, each key once (a key read and written counts as written).
    pub keys: Vec<KeyAccess>,
    /// Interferes with every command (e.g. a reconfiguration).
    pub conflicts_all: bool,
}

impl EpaxosCommand {
    /// A command with its accesses normalized: sorted by key, a key read and written
    /// becomes one write.
    pub fn new(
        command: Command,
        keys: impl IntoIterator<Item = KeyAccess>,
        conflicts_all: bool,
    ) -> EpaxosCommand {
        let mut merged: BTreeMap<u64, bool> = BTreeMap::new();
        for k in keys {
            *merged.entry(k.key).or_default() |= k.write;
        }
        let keys = merged
            .into_iter()
            .map(|(key, write)| KeyAccess { key, write })
            .collect();
        let c = EpaxosCommand {
            command,
            keys,
            conflicts_all,
        };
        debug_assert!(c.is_normalized());
        c
    }

    /// Keys strictly increasing: what [`EpaxosCommand::new`] builds.
    pub fn is_normalized(&self) -> bool {
        self.keys.windows(2).all(|w| w[0].key < w[1].key)
    }

    /// Whether the two commands must execute in the same order everywhere.
    pub fn interferes(&self, other: &EpaxosCommand) -> bool {
        if self.conflicts_all || other.conflicts_all {
            return true;
        }
        let (mut i, mut j) = (0, 0);
        while i < self.keys.len() && j < other.keys.len() {
            let (a, b) = (self.keys[i], other.keys[j]);
            match a.key.cmp(&b.key) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    if a.write || b.write {
                        return true;
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        false
    }
}

/// The attributes EPaxos agrees on with a command: `seq`, and `deps[i]` = the highest
/// slot of replica `replicas[i]` the command depends on (with every slot below it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attrs {
    pub seq: u64,
    pub deps: Vec<Slot>,
}

impl Attrs {
    fn none(n: usize) -> Attrs {
        Attrs {
            seq: 0,
            deps: vec![0; n],
        }
    }

    /// The union: the larger `seq`, and each replica's larger slot.
    fn merge(&mut self, other: &Attrs) {
        debug_assert_eq!(self.deps.len(), other.deps.len());
        self.seq = self.seq.max(other.seq);
        for (d, o) in self.deps.iter_mut().zip(&other.deps) {
            *d = (*d).max(*o);
        }
    }
}

/// How far an instance got at a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Status {
    PreAccepted,
    Accepted,
    Committed,
}

/// What a replica holds for an instance: the command (`None`: a no-op), its attributes,
/// how far it got and at which ballot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub status: Status,
    /// The ballot at which these attributes were pre-accepted or accepted.
    pub vballot: Ballot,
    pub command: Option<EpaxosCommand>,
    pub attrs: Attrs,
    /// Pre-accepted at the default ballot with exactly the leader's attributes (the
    /// merge with this replica's view changed nothing). The leader's own record says
    /// true. Recovery counts these.
    pub agreed: bool,
}

/// Messages between EPaxos replicas. `ballot` is [`Ballot::ZERO`] for the default
/// ballot of an instance (its owner's), or `(round ≥ 1, recoverer)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EpaxosMsg {
    PreAccept {
        instance: InstanceId,
        ballot: Ballot,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
    },
    PreAcceptOk {
        instance: InstanceId,
        ballot: Ballot,
        attrs: Attrs,
    },
    Accept {
        instance: InstanceId,
        ballot: Ballot,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
    },
    AcceptOk {
        instance: InstanceId,
        ballot: Ballot,
    },
    Commit {
        instance: InstanceId,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
    },
    /// Explicit prepare (recovery, phase 1 of Paxos for the instance).
    Prepare {
        instance: InstanceId,
        ballot: Ballot,
    },
    /// A promise for `ballot`, with what the replica holds for the instance.
    PrepareOk {
        instance: InstanceId,
        ballot: Ballot,
        held: Option<Held>,
    },
    /// Refusal: the replica promised `ballot`, above the one it was asked for.
    Nack {
        instance: InstanceId,
        ballot: Ballot,
    },
    /// Send me the commits of these instances, if you know them.
    CommitRequest { instances: Vec<InstanceId> },
    /// The highest committed slot the sender knows, per replica.
    Heartbeat { committed: Vec<Slot> },
}

/// What a replica writes to its log. The newest `Instance` record of an instance
/// replaces older ones; a `Promise` only raises the promised ballot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EpaxosRecord {
    Instance {
        instance: InstanceId,
        promised: Ballot,
        held: Held,
    },
    Promise {
        instance: InstanceId,
        ballot: Ballot,
    },
}

/// Output of the EPaxos core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpaxosAction {
    Send {
        to: NodeId,
        msg: EpaxosMsg,
    },
    /// Write `record` durably, then call [`Epaxos::on_persisted`]`(token)`. Writes
    /// complete in order.
    Persist {
        token: PersistToken,
        record: EpaxosRecord,
    },
    /// Execute a committed command (`None`: a no-op), in execution order.
    Execute {
        instance: InstanceId,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
    },
}

/// Where EPaxos handlers write their actions.
pub type EpaxosOutbox = Vec<EpaxosAction>;

/// Planted bugs (controls of the checkers only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpaxosBugs {
    /// Commit on the fast path once a fast quorum answered, even when the answers'
    /// attributes differ from the leader's.
    pub skip_slow_path_when_deps_differ: bool,
}

/// Why a configuration is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EpaxosConfigError {
    #[error("replicas: {0} replicas; EPaxos needs an odd number from 1 to 63")]
    ReplicaCount(usize),
    #[error("replicas: replica {0} is listed twice")]
    Duplicate(NodeId),
    #[error("{0} must be above 0")]
    Zero(&'static str),
    #[error("replicas: {0} is not a replica")]
    NotAReplica(NodeId),
}

/// Why a proposal is refused (the core is unchanged).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("{0} proposals in flight, the most allowed")]
    Busy(usize),
    #[error("a command with {0} keys, above the bound")]
    TooManyKeys(usize),
    #[error("a command whose keys are not sorted and unique")]
    NotNormalized,
}

/// Tunables of an EPaxos replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpaxosConfig {
    /// Every replica, in one order shared by all (`deps[i]` is `replicas[i]`'s).
    pub replicas: Vec<NodeId>,
    /// Re-send an unanswered phase message after this many ticks; a leader that has a
    /// majority but no fast quorum after this long takes the slow path.
    pub retransmit_ticks: u64,
    /// Ask peers for the commit of an instance awaited this long.
    pub commit_request_ticks: u64,
    /// Start recovering an instance awaited this long, plus the stagger below per
    /// position after the instance's owner.
    pub recovery_timeout_ticks: u64,
    pub recovery_stagger_ticks: u64,
    /// Broadcast the committed slots known every this many ticks.
    pub heartbeat_ticks: u64,
    /// Own proposals not yet committed, at most.
    pub proposals_in_flight_max: usize,
    /// Recoveries driven at once, at most.
    pub recoveries_max: usize,
    /// Instances awaited (for a commit request or recovery), at most.
    pub waiting_max: usize,
    /// Keys of one command, at most.
    pub keys_per_command_max: usize,
}

impl EpaxosConfig {
    pub fn new(replicas: Vec<NodeId>) -> EpaxosConfig {
        EpaxosConfig {
            replicas,
            retransmit_ticks: 20,
            commit_request_ticks: 40,
            recovery_timeout_ticks: 150,
            recovery_stagger_ticks: 60,
            heartbeat_ticks: 50,
            proposals_in_flight_max: 1024,
            recoveries_max: 64,
            waiting_max: 8192,
            keys_per_command_max: 1024,
        }
    }

    pub fn validate(&self) -> Result<(), EpaxosConfigError> {
        let n = self.replicas.len();
        if n == 0 || n > REPLICAS_MAX || n.is_multiple_of(2) {
            return Err(EpaxosConfigError::ReplicaCount(n));
        }
        let mut seen = BTreeSet::new();
        for &r in &self.replicas {
            if !seen.insert(r) {
                return Err(EpaxosConfigError::Duplicate(r));
            }
        }
        for (name, v) in [
            ("retransmit_ticks", self.retransmit_ticks),
            ("commit_request_ticks", self.commit_request_ticks),
            ("recovery_timeout_ticks", self.recovery_timeout_ticks),
            ("heartbeat_ticks", self.heartbeat_ticks),
            (
                "proposals_in_flight_max",
                self.proposals_in_flight_max as u64,
            ),
            ("recoveries_max", self.recoveries_max as u64),
            ("waiting_max", self.waiting_max as u64),
            ("keys_per_command_max", self.keys_per_command_max as u64),
        ] {
            if v == 0 {
                return Err(EpaxosConfigError::Zero(name));
            }
        }
        Ok(())
    }

    /// `F`, the failures tolerated: `N = 2F + 1`.
    pub fn f(&self) -> usize {
        (self.replicas.len() - 1) / 2
    }

    /// A classic quorum: `F + 1`.
    pub fn majority(&self) -> usize {
        self.f() + 1
    }

    /// The optimized fast quorum, leader included: `F + ⌊(F+1)/2⌋` (at least 1).
    pub fn fast_quorum(&self) -> usize {
        let f = self.f();
        (f + f.div_ceil(2)).max(1)
    }
}

/// Counters of an EPaxos replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpaxosStats {
    pub proposed: u64,
    /// Own default-ballot instances committed on the fast path.
    pub fast_commits: u64,
    /// Own default-ballot instances committed after an Accept round.
    pub slow_commits: u64,
    pub recoveries_started: u64,
    /// Recoveries that committed a command (found at some replica).
    pub recovered_commands: u64,
    /// Recoveries that committed a no-op (nobody in the quorum held a command).
    pub recovered_noops: u64,
    /// Recoveries this replica completed for instances of other replicas.
    pub recovered_foreign: u64,
    /// Recoveries that found the instance committed and only spread the commit.
    pub recovered_committed: u64,
    /// Times a recovery had to wait for more answers (the TryPreAccept case).
    pub ambiguous_waits: u64,
    /// Phases given up because a higher ballot took the instance over.
    pub abandoned: u64,
    pub commit_requests_sent: u64,
    pub executed: u64,
}

#[derive(Clone, Debug)]
struct Inst {
    promised: Ballot,
    /// The highest ballot heard of for this instance (promised, or in a Nack).
    seen: Ballot,
    held: Option<Held>,
    /// Committed, and the commit durable here.
    effective: bool,
    executed: bool,
}

impl Inst {
    fn new() -> Inst {
        Inst {
            promised: Ballot::ZERO,
            seen: Ballot::ZERO,
            held: None,
            effective: false,
            executed: false,
        }
    }

    fn committed(&self) -> bool {
        self.held
            .as_ref()
            .is_some_and(|h| h.status == Status::Committed)
    }
}

#[derive(Clone, Debug)]
enum Phase {
    /// Default ballot: waiting for the leader's own record to be durable.
    Starting,
    PreAccept {
        command: Option<EpaxosCommand>,
        /// The attributes sent (the leader's own at the default ballot).
        proposed: Attrs,
        replies: BTreeMap<NodeId, Attrs>,
    },
    Accept {
        command: Option<EpaxosCommand>,
        attrs: Attrs,
        oks: BTreeSet<NodeId>,
    },
    Prepare {
        replies: BTreeMap<NodeId, Option<Held>>,
        ambiguous_noted: bool,
    },
}

/// An instance this replica is driving: its own at the default ballot, or one it
/// recovers at a ballot of its own.
#[derive(Clone, Debug)]
struct Drive {
    ballot: Ballot,
    phase: Phase,
    sent_tick: u64,
}

#[derive(Clone, Debug)]
struct Wait {
    since: u64,
    asked: Option<u64>,
}

#[derive(Clone, Debug)]
enum Deferred {
    Send(NodeId, EpaxosMsg),
    /// The leader's own default-ballot record is durable: send the PreAccepts.
    Proposed(InstanceId),
    /// The commit is durable: execute; `broadcast` for its decider.
    Effective {
        instance: InstanceId,
        broadcast: bool,
    },
}

/// Per key: each replica's largest slot that wrote it, that accessed it, and the
/// largest `seq` among writers and among all accessors.
#[derive(Clone, Debug)]
struct KeyState {
    write: Vec<Slot>,
    any: Vec<Slot>,
    write_seq: u64,
    any_seq: u64,
}

/// The conflict index a replica computes dependencies from.
#[derive(Clone, Debug)]
pub struct ConflictIndex {
    keys: BTreeMap<u64, KeyState>,
    /// Largest slot of any command, per replica, and the largest `seq`.
    all: Vec<Slot>,
    all_seq: u64,
    /// Largest slot of a conflicts-with-everything command, per replica, and its `seq`.
    barrier: Vec<Slot>,
    barrier_seq: u64,
}

impl ConflictIndex {
    fn new(n: usize) -> ConflictIndex {
        ConflictIndex {
            keys: BTreeMap::new(),
            all: vec![0; n],
            all_seq: 0,
            barrier: vec![0; n],
            barrier_seq: 0,
        }
    }

    /// The attributes of `cmd` from what this index holds.
    fn attrs_for(&self, cmd: &EpaxosCommand) -> Attrs {
        let n = self.all.len();
        if cmd.conflicts_all {
            return Attrs {
                seq: self.all_seq.saturating_add(1).min(SEQ_MAX),
                deps: self.all.clone(),
            };
        }
        let mut deps = self.barrier.clone();
        let mut base = self.barrier_seq;
        for k in &cmd.keys {
            let Some(s) = self.keys.get(&k.key) else {
                continue;
            };
            let (slots, seq) = if k.write {
                (&s.any, s.any_seq)
            } else {
                (&s.write, s.write_seq)
            };
            for (d, o) in deps.iter_mut().zip(slots) {
                *d = (*d).max(*o);
            }
            base = base.max(seq);
        }
        debug_assert_eq!(deps.len(), n);
        Attrs {
            seq: base.saturating_add(1).min(SEQ_MAX),
            deps,
        }
    }

    fn add(&mut self, q: usize, slot: Slot, cmd: &EpaxosCommand, seq: u64) {
        let n = self.all.len();
        self.all[q] = self.all[q].max(slot);
        self.all_seq = self.all_seq.max(seq);
        if cmd.conflicts_all {
            self.barrier[q] = self.barrier[q].max(slot);
            self.barrier_seq = self.barrier_seq.max(seq);
        }
        for k in &cmd.keys {
            let s = self.keys.entry(k.key).or_insert_with(|| KeyState {
                write: vec![0; n],
                any: vec![0; n],
                write_seq: 0,
                any_seq: 0,
            });
            s.any[q] = s.any[q].max(slot);
            s.any_seq = s.any_seq.max(seq);
            if k.write {
                s.write[q] = s.write[q].max(slot);
                s.write_seq = s.write_seq.max(seq);
            }
        }
    }
}

/// Reasons an EPaxos replica ignored a message (its [`DropCounts`] names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EpaxosDrop {
    /// From a node that is not a replica, or from itself over the network.
    FromNonMember,
    /// An instance of an unknown replica, or slot 0 or above [`SLOT_MAX`].
    BadInstance,
    /// A ballot no correct replica sends in this message.
    BadBallot,
    /// Dependencies of the wrong length, or slots or `seq` out of range.
    BadAttrs,
    /// A command with unsorted or too many keys.
    BadCommand,
    /// A phase message for a ballot below the promise (answered with a Nack).
    StaleBallot,
    /// A reply for a phase this replica no longer runs.
    StaleReply,
    /// A commit that contradicts the one already known: only a faulty peer sends one.
    ConflictingCommit,
    /// A message about an instance already committed (answered with the commit).
    AlreadyCommitted,
    /// An awaited instance not noted because `waiting_max` was reached.
    WaitingFull,
}

/// The [`DropCounts`] name of [`EpaxosDrop::ConflictingCommit`]; correct peers never
/// cause it, so tests fail a run in which it is counted.
pub const CONFLICTING_COMMIT: &str = "epaxos_conflicting_commit";

fn epaxos_drop_name(d: EpaxosDrop) -> &'static str {
    match d {
        EpaxosDrop::FromNonMember => "epaxos_from_non_member",
        EpaxosDrop::BadInstance => "epaxos_bad_instance",
        EpaxosDrop::BadBallot => "epaxos_bad_ballot",
        EpaxosDrop::BadAttrs => "epaxos_bad_attrs",
        EpaxosDrop::BadCommand => "epaxos_bad_command",
        EpaxosDrop::StaleBallot => "epaxos_stale_ballot",
        EpaxosDrop::StaleReply => "epaxos_stale_reply",
        EpaxosDrop::ConflictingCommit => CONFLICTING_COMMIT,
        EpaxosDrop::AlreadyCommitted => "epaxos_already_committed",
        EpaxosDrop::WaitingFull => "epaxos_waiting_full",
    }
}

/// One EPaxos replica: acceptor for every instance, leader of its own column, and
/// recoverer of anyone's.
pub struct Epaxos {
    id: NodeId,
    /// Position of `id` in `config.replicas`.
    me: usize,
    config: EpaxosConfig,
    bugs: EpaxosBugs,
    instances: BTreeMap<InstanceId, Inst>,
    index: ConflictIndex,
    /// Next slot of this replica's own column.
    next_slot: Slot,
    drives: BTreeMap<InstanceId, Drive>,
    waiting: BTreeMap<InstanceId, Wait>,
    /// Committed, effective, not executed yet.
    ready: BTreeSet<InstanceId>,
    /// Per replica: every slot up to this one is executed here.
    exec_prefix: Vec<Slot>,
    /// Per replica: the highest slot known committed (here or by a peer's heartbeat).
    committed_max: Vec<Slot>,
    exec_dirty: bool,
    deferred: BTreeMap<PersistToken, Vec<Deferred>>,
    last_issued: PersistToken,
    last_durable: PersistToken,
    loopback: VecDeque<EpaxosMsg>,
    now: u64,
    ticked: bool,
    last_heartbeat: u64,
    stats: EpaxosStats,
    drops: DropCounts,
    committed_count: u64,
}

impl Epaxos {
    /// A fresh replica. Panics on an invalid configuration or an `id` that is not a
    /// replica (both are the caller's bugs: validate the configuration first).
    pub fn new(id: NodeId, config: EpaxosConfig) -> Epaxos {
        config.validate().expect("a valid EPaxos configuration");
        let me = config
            .replicas
            .iter()
            .position(|&r| r == id)
            .unwrap_or_else(|| panic!("{}", EpaxosConfigError::NotAReplica(id)));
        let n = config.replicas.len();
        Epaxos {
            id,
            me,
            bugs: EpaxosBugs::default(),
            instances: BTreeMap::new(),
            index: ConflictIndex::new(n),
            next_slot: 1,
            drives: BTreeMap::new(),
            waiting: BTreeMap::new(),
            ready: BTreeSet::new(),
            exec_prefix: vec![0; n],
            committed_max: vec![0; n],
            exec_dirty: false,
            deferred: BTreeMap::new(),
            last_issued: 0,
            last_durable: 0,
            loopback: VecDeque::new(),
            now: 0,
            ticked: false,
            last_heartbeat: 0,
            stats: EpaxosStats::default(),
            drops: DropCounts::default(),
            committed_count: 0,
            config,
        }
    }

    /// Rebuild a replica from its log, oldest record first. Everything replayed was
    /// durable. The records get tokens 1, 2, … and new writes continue the count.
    /// Committed instances execute again from the start (at the first handler call);
    /// uncommitted ones are awaited, and recovered if nobody commits them.
    pub fn recover(
        id: NodeId,
        config: EpaxosConfig,
        records: impl IntoIterator<Item = EpaxosRecord>,
    ) -> Epaxos {
        let mut e = Epaxos::new(id, config);
        let mut position: PersistToken = 0;
        for r in records {
            position += 1;
            match r {
                EpaxosRecord::Instance {
                    instance,
                    promised,
                    held,
                } => {
                    let Some(q) = e.pos(instance.replica) else {
                        continue;
                    };
                    if instance.replica == id {
                        e.next_slot = e.next_slot.max(instance.slot + 1);
                    }
                    let inst = e.instances.entry(instance).or_insert_with(Inst::new);
                    inst.promised = inst.promised.max(promised);
                    inst.seen = inst.seen.max(inst.promised);
                    // A commit is final: a later record of a lower state cannot exist
                    // (nothing is written for a committed instance but the commit).
                    if !inst.committed() {
                        inst.held = Some(held);
                    }
                    debug_assert!(q < e.n());
                }
                EpaxosRecord::Promise { instance, ballot } => {
                    if e.pos(instance.replica).is_none() {
                        continue;
                    }
                    if instance.replica == id {
                        e.next_slot = e.next_slot.max(instance.slot + 1);
                    }
                    let inst = e.instances.entry(instance).or_insert_with(Inst::new);
                    inst.promised = inst.promised.max(ballot);
                    inst.seen = inst.seen.max(ballot);
                }
            }
        }
        e.last_issued = position;
        e.last_durable = position;
        let ids: Vec<InstanceId> = e.instances.keys().copied().collect();
        for i in ids {
            let q = e
                .pos(i.replica)
                .expect("recovered instances are of replicas");
            let inst = e.instances.get_mut(&i).expect("listed");
            if let Some(h) = &inst.held {
                if let Some(c) = &h.command {
                    e.index.add(q, i.slot, c, h.attrs.seq);
                }
                if h.status == Status::Committed {
                    inst.effective = true;
                    e.ready.insert(i);
                    e.committed_count += 1;
                    e.committed_max[q] = e.committed_max[q].max(i.slot);
                    e.exec_dirty = true;
                    continue;
                }
            }
            if e.waiting.len() < e.config.waiting_max {
                e.waiting.insert(
                    i,
                    Wait {
                        since: 0,
                        asked: None,
                    },
                );
            }
        }
        e.invariants();
        e
    }

    /// Plant bugs (checker controls only).
    pub fn set_bugs(&mut self, bugs: EpaxosBugs) {
        self.bugs = bugs;
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    pub fn config(&self) -> &EpaxosConfig {
        &self.config
    }

    pub fn stats(&self) -> &EpaxosStats {
        &self.stats
    }

    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }

    /// What this replica holds for an instance, if anything.
    pub fn held(&self, instance: InstanceId) -> Option<&Held> {
        self.instances.get(&instance)?.held.as_ref()
    }

    /// Every instance committed here (the commit durable), in instance order.
    pub fn committed(&self) -> impl Iterator<Item = (InstanceId, &Held)> + '_ {
        self.instances.iter().filter_map(|(&i, inst)| {
            let h = inst.held.as_ref()?;
            (inst.effective && h.status == Status::Committed).then_some((i, h))
        })
    }

    /// Nothing in flight: no phase driven, no instance awaited, nothing committed left
    /// to execute, no reply waiting for a write.
    pub fn is_quiescent(&self) -> bool {
        self.drives.is_empty()
            && self.waiting.is_empty()
            && self.ready.is_empty()
            && self.deferred.is_empty()
    }

    fn pos(&self, r: NodeId) -> Option<usize> {
        self.config.replicas.iter().position(|&x| x == r)
    }

    fn n(&self) -> usize {
        self.config.replicas.len()
    }

    fn count(&mut self, why: EpaxosDrop) {
        *self.drops.0.entry(epaxos_drop_name(why)).or_default() += 1;
    }

    // ---- Inputs --------------------------------------------------------------------

    /// Propose a command in this replica's next slot. Sends nothing until the instance
    /// is durable here.
    pub fn propose(
        &mut self,
        command: EpaxosCommand,
        out: &mut EpaxosOutbox,
    ) -> Result<InstanceId, ProposeError> {
        if command.keys.len() > self.config.keys_per_command_max {
            return Err(ProposeError::TooManyKeys(command.keys.len()));
        }
        if !command.is_normalized() {
            return Err(ProposeError::NotNormalized);
        }
        let in_flight = self
            .drives
            .iter()
            .filter(|(i, d)| i.replica == self.id && d.ballot == Ballot::ZERO)
            .count();
        if in_flight >= self.config.proposals_in_flight_max {
            return Err(ProposeError::Busy(in_flight));
        }
        assert!(self.next_slot < SLOT_MAX, "slot space exhausted");
        let instance = InstanceId {
            replica: self.id,
            slot: self.next_slot,
        };
        self.next_slot += 1;
        // Computed before the instance enters the index, so that it never depends on
        // itself and acceptors that know nothing more answer exactly these.
        let attrs = self.index.attrs_for(&command);
        debug_assert!(attrs.deps[self.me] < instance.slot);
        self.index.add(self.me, instance.slot, &command, attrs.seq);
        let held = Held {
            status: Status::PreAccepted,
            vballot: Ballot::ZERO,
            command: Some(command),
            attrs,
            agreed: true,
        };
        let prev = self.instances.insert(
            instance,
            Inst {
                held: Some(held.clone()),
                ..Inst::new()
            },
        );
        assert!(prev.is_none(), "slot {instance} used twice");
        self.drives.insert(
            instance,
            Drive {
                ballot: Ballot::ZERO,
                phase: Phase::Starting,
                sent_tick: self.now,
            },
        );
        let token = self.persist(
            EpaxosRecord::Instance {
                instance,
                promised: Ballot::ZERO,
                held,
            },
            out,
        );
        self.defer(token, Deferred::Proposed(instance));
        self.stats.proposed += 1;
        self.finish(out);
        Ok(instance)
    }

    /// A message from replica `from`.
    pub fn on_message(&mut self, from: NodeId, msg: EpaxosMsg, out: &mut EpaxosOutbox) {
        if from == self.id || self.pos(from).is_none() {
            self.count(EpaxosDrop::FromNonMember);
            return;
        }
        if let Err(why) = self.validate(from, &msg) {
            self.count(why);
            return;
        }
        self.handle(from, msg, out);
        self.finish(out);
    }

    /// Time passes: retransmissions, slow paths after a timeout, commit requests,
    /// recoveries, heartbeats.
    pub fn on_tick(&mut self, now_tick: u64, out: &mut EpaxosOutbox) {
        if !self.ticked {
            // The first tick after a start or a restart: whatever was awaited is
            // awaited from now, not from tick 0.
            self.ticked = true;
            for w in self.waiting.values_mut() {
                w.since = now_tick;
            }
            self.last_heartbeat = now_tick;
        }
        self.now = self.now.max(now_tick);
        self.tick_drives(out);
        self.tick_waiting(out);
        if self.now >= self.last_heartbeat + self.config.heartbeat_ticks {
            self.last_heartbeat = self.now;
            let msg = EpaxosMsg::Heartbeat {
                committed: self.committed_max.clone(),
            };
            self.send_peers(msg, out);
        }
        self.finish(out);
    }

    /// Every write up to `token` is durable (writes complete in order).
    pub fn on_persisted(&mut self, token: PersistToken, out: &mut EpaxosOutbox) {
        assert!(
            token > self.last_durable && token <= self.last_issued,
            "persist completion {token} out of order (durable {}, issued {})",
            self.last_durable,
            self.last_issued
        );
        self.last_durable = token;
        while let Some(entry) = self.deferred.first_entry() {
            if *entry.key() > token {
                break;
            }
            for d in entry.remove() {
                self.run_deferred(d, out);
            }
        }
        self.finish(out);
    }

    // ---- Validation ----------------------------------------------------------------

    /// A known replica's slot in range; for our own column, a slot we used (every
    /// own instance a peer can know of was durable here before it left).
    fn check_instance(&self, i: InstanceId) -> Result<(), EpaxosDrop> {
        if self.pos(i.replica).is_none()
            || i.slot == 0
            || i.slot > SLOT_MAX
            || (i.replica == self.id && i.slot >= self.next_slot)
        {
            return Err(EpaxosDrop::BadInstance);
        }
        Ok(())
    }

    fn check_attrs(&self, a: &Attrs) -> Result<(), EpaxosDrop> {
        if a.deps.len() != self.n() || a.seq > SEQ_MAX || a.deps.iter().any(|&d| d > SLOT_MAX) {
            return Err(EpaxosDrop::BadAttrs);
        }
        Ok(())
    }

    fn check_command(&self, c: &Option<EpaxosCommand>) -> Result<(), EpaxosDrop> {
        match c {
            Some(c) if c.keys.len() > self.config.keys_per_command_max || !c.is_normalized() => {
                Err(EpaxosDrop::BadCommand)
            }
            _ => Ok(()),
        }
    }

    fn check_ballot(&self, b: Ballot) -> Result<(), EpaxosDrop> {
        if b.round > ROUND_MAX || (b.round > 0 && self.pos(b.node).is_none()) {
            return Err(EpaxosDrop::BadBallot);
        }
        if b.round == 0 && b != Ballot::ZERO {
            return Err(EpaxosDrop::BadBallot);
        }
        Ok(())
    }

    /// A phase message's ballot: the default one only from the instance's owner, a
    /// recovery ballot only from its own node.
    fn check_phase_ballot(&self, from: NodeId, i: InstanceId, b: Ballot) -> Result<(), EpaxosDrop> {
        self.check_ballot(b)?;
        let ok = if b == Ballot::ZERO {
            from == i.replica
        } else {
            b.node == from
        };
        if ok {
            Ok(())
        } else {
            Err(EpaxosDrop::BadBallot)
        }
    }

    fn validate(&self, from: NodeId, msg: &EpaxosMsg) -> Result<(), EpaxosDrop> {
        match msg {
            EpaxosMsg::PreAccept {
                instance,
                ballot,
                command,
                attrs,
            }
            | EpaxosMsg::Accept {
                instance,
                ballot,
                command,
                attrs,
            } => {
                self.check_instance(*instance)?;
                self.check_phase_ballot(from, *instance, *ballot)?;
                self.check_attrs(attrs)?;
                self.check_command(command)
            }
            EpaxosMsg::PreAcceptOk {
                instance,
                ballot,
                attrs,
            } => {
                self.check_instance(*instance)?;
                self.check_ballot(*ballot)?;
                self.check_attrs(attrs)
            }
            EpaxosMsg::AcceptOk { instance, ballot } | EpaxosMsg::Nack { instance, ballot } => {
                self.check_instance(*instance)?;
                self.check_ballot(*ballot)
            }
            EpaxosMsg::Commit {
                instance,
                command,
                attrs,
            } => {
                self.check_instance(*instance)?;
                self.check_attrs(attrs)?;
                self.check_command(command)
            }
            EpaxosMsg::Prepare { instance, ballot } => {
                self.check_instance(*instance)?;
                self.check_ballot(*ballot)?;
                if ballot.round == 0 || ballot.node != from {
                    return Err(EpaxosDrop::BadBallot);
                }
                Ok(())
            }
            EpaxosMsg::PrepareOk {
                instance,
                ballot,
                held,
            } => {
                self.check_instance(*instance)?;
                self.check_ballot(*ballot)?;
                if let Some(h) = held {
                    self.check_ballot(h.vballot)?;
                    self.check_attrs(&h.attrs)?;
                    self.check_command(&h.command)?;
                }
                Ok(())
            }
            EpaxosMsg::CommitRequest { instances } => {
                if instances.len() > COMMIT_REQUEST_INSTANCES_MAX {
                    return Err(EpaxosDrop::BadInstance);
                }
                instances.iter().try_for_each(|&i| self.check_instance(i))
            }
            EpaxosMsg::Heartbeat { committed } => {
                if committed.len() != self.n() || committed.iter().any(|&s| s > SLOT_MAX) {
                    return Err(EpaxosDrop::BadAttrs);
                }
                Ok(())
            }
        }
    }

    // ---- Plumbing ------------------------------------------------------------------

    fn persist(&mut self, record: EpaxosRecord, out: &mut EpaxosOutbox) -> PersistToken {
        self.last_issued += 1;
        out.push(EpaxosAction::Persist {
            token: self.last_issued,
            record,
        });
        self.last_issued
    }

    fn defer(&mut self, token: PersistToken, d: Deferred) {
        debug_assert!(token > self.last_durable);
        self.deferred.entry(token).or_default().push(d);
    }

    fn send_now(&mut self, to: NodeId, msg: EpaxosMsg, out: &mut EpaxosOutbox) {
        if to == self.id {
            self.loopback.push_back(msg);
        } else {
            out.push(EpaxosAction::Send { to, msg });
        }
    }

    /// Send once every write issued so far is durable. Every message goes this way: its
    /// content comes from state that may not be durable yet (a promise, a pre-accept,
    /// or dependencies on our own newest slot, whose loss in a crash would let a
    /// restarted replica reuse a slot that peers already depend on).
    fn send(&mut self, to: NodeId, msg: EpaxosMsg, out: &mut EpaxosOutbox) {
        if self.last_issued > self.last_durable {
            self.defer(self.last_issued, Deferred::Send(to, msg));
        } else {
            self.send_now(to, msg, out);
        }
    }

    fn send_peers(&mut self, msg: EpaxosMsg, out: &mut EpaxosOutbox) {
        for i in 0..self.n() {
            let r = self.config.replicas[i];
            if r != self.id {
                self.send(r, msg.clone(), out);
            }
        }
    }

    fn send_all(&mut self, msg: EpaxosMsg, out: &mut EpaxosOutbox) {
        self.send_peers(msg.clone(), out);
        self.send(self.id, msg, out);
    }

    /// End of every input: handle the messages sent to ourselves, execute what can be.
    fn finish(&mut self, out: &mut EpaxosOutbox) {
        // Each loopback message is a reply or a phase message of a bounded phase, so
        // this ends; the bound only guards against a bug looping forever.
        let mut rounds = 0usize;
        while let Some(msg) = self.loopback.pop_front() {
            rounds += 1;
            assert!(rounds < 1_000_000, "loopback does not drain");
            self.handle(self.id, msg, out);
        }
        self.try_execute(out);
    }

    fn run_deferred(&mut self, d: Deferred, out: &mut EpaxosOutbox) {
        match d {
            Deferred::Send(to, msg) => self.send_now(to, msg, out),
            Deferred::Proposed(instance) => {
                let Some(drive) = self.drives.get_mut(&instance) else {
                    return;
                };
                if drive.ballot != Ballot::ZERO || !matches!(drive.phase, Phase::Starting) {
                    return;
                }
                let held = self.instances[&instance]
                    .held
                    .clone()
                    .expect("a proposed instance holds its command");
                drive.phase = Phase::PreAccept {
                    command: held.command.clone(),
                    proposed: held.attrs.clone(),
                    replies: BTreeMap::new(),
                };
                drive.sent_tick = self.now;
                self.send_peers(
                    EpaxosMsg::PreAccept {
                        instance,
                        ballot: Ballot::ZERO,
                        command: held.command,
                        attrs: held.attrs,
                    },
                    out,
                );
                // A single replica is its own fast quorum.
                self.evaluate_preaccept(instance, out);
            }
            Deferred::Effective {
                instance,
                broadcast,
            } => {
                let inst = self
                    .instances
                    .get_mut(&instance)
                    .expect("committed instance");
                let held = inst.held.clone().expect("committed instance holds");
                assert_eq!(held.status, Status::Committed);
                if !inst.effective {
                    inst.effective = true;
                    if !inst.executed {
                        self.ready.insert(instance);
                    }
                    self.exec_dirty = true;
                }
                self.waiting.remove(&instance);
                if broadcast {
                    self.send_peers(
                        EpaxosMsg::Commit {
                            instance,
                            command: held.command,
                            attrs: held.attrs,
                        },
                        out,
                    );
                }
            }
        }
    }

    fn note_waiting(&mut self, instance: InstanceId) {
        if self.waiting.contains_key(&instance) {
            return;
        }
        if self.instances.get(&instance).is_some_and(|i| i.committed()) {
            return;
        }
        if self.waiting.len() >= self.config.waiting_max {
            self.count(EpaxosDrop::WaitingFull);
            return;
        }
        self.waiting.insert(
            instance,
            Wait {
                since: self.now,
                asked: None,
            },
        );
    }

    /// Raise the promise for an instance; give up driving it at a lower ballot.
    fn promise(&mut self, instance: InstanceId, ballot: Ballot) {
        let inst = self.instances.entry(instance).or_insert_with(Inst::new);
        assert!(ballot >= inst.promised, "promises only grow");
        inst.promised = ballot;
        inst.seen = inst.seen.max(ballot);
        if self
            .drives
            .get(&instance)
            .is_some_and(|d| d.ballot < ballot)
        {
            self.drives.remove(&instance);
            self.stats.abandoned += 1;
            self.note_waiting(instance);
        }
    }

    fn index_held(&mut self, instance: InstanceId, held: &Held) {
        if let Some(c) = &held.command {
            let q = self.pos(instance.replica).expect("validated instance");
            self.index.add(q, instance.slot, c, held.attrs.seq);
        }
    }

    fn record(&mut self, instance: InstanceId, out: &mut EpaxosOutbox) -> PersistToken {
        let inst = &self.instances[&instance];
        let record = EpaxosRecord::Instance {
            instance,
            promised: inst.promised,
            held: inst
                .held
                .clone()
                .expect("recorded instances hold a command"),
        };
        self.persist(record, out)
    }

    fn commit_msg(&self, instance: InstanceId) -> Option<EpaxosMsg> {
        let inst = self.instances.get(&instance)?;
        let h = inst.held.as_ref()?;
        (h.status == Status::Committed).then(|| EpaxosMsg::Commit {
            instance,
            command: h.command.clone(),
            attrs: h.attrs.clone(),
        })
    }

    // ---- Handlers ------------------------------------------------------------------

    fn handle(&mut self, from: NodeId, msg: EpaxosMsg, out: &mut EpaxosOutbox) {
        match msg {
            EpaxosMsg::PreAccept {
                instance,
                ballot,
                command,
                attrs,
            } => self.on_preaccept(from, instance, ballot, command, attrs, out),
            EpaxosMsg::PreAcceptOk {
                instance,
                ballot,
                attrs,
            } => self.on_preaccept_ok(from, instance, ballot, attrs, out),
            EpaxosMsg::Accept {
                instance,
                ballot,
                command,
                attrs,
            } => self.on_accept(from, instance, ballot, command, attrs, out),
            EpaxosMsg::AcceptOk { instance, ballot } => {
                self.on_accept_ok(from, instance, ballot, out)
            }
            EpaxosMsg::Commit {
                instance,
                command,
                attrs,
            } => self.on_commit(instance, command, attrs, false, out),
            EpaxosMsg::Prepare { instance, ballot } => self.on_prepare(from, instance, ballot, out),
            EpaxosMsg::PrepareOk {
                instance,
                ballot,
                held,
            } => self.on_prepare_ok(from, instance, ballot, held, out),
            EpaxosMsg::Nack { instance, ballot } => self.on_nack(instance, ballot),
            EpaxosMsg::CommitRequest { instances } => {
                for i in instances {
                    if self.instances.get(&i).is_some_and(|x| x.effective) {
                        let msg = self.commit_msg(i).expect("effective means committed");
                        self.send(from, msg, out);
                    }
                }
            }
            EpaxosMsg::Heartbeat { committed } => self.on_heartbeat(&committed),
        }
    }

    /// Answer a phase message about a committed instance with the commit (the sender
    /// missed it), or refuse a ballot below the promise. True when handled so.
    fn refuse(
        &mut self,
        from: NodeId,
        instance: InstanceId,
        ballot: Ballot,
        out: &mut EpaxosOutbox,
    ) -> bool {
        if let Some(msg) = self.commit_msg(instance) {
            self.count(EpaxosDrop::AlreadyCommitted);
            self.send(from, msg, out);
            return true;
        }
        let promised = self
            .instances
            .get(&instance)
            .map_or(Ballot::ZERO, |i| i.promised);
        if ballot < promised {
            self.count(EpaxosDrop::StaleBallot);
            self.send(
                from,
                EpaxosMsg::Nack {
                    instance,
                    ballot: promised,
                },
                out,
            );
            return true;
        }
        false
    }

    fn on_preaccept(
        &mut self,
        from: NodeId,
        instance: InstanceId,
        ballot: Ballot,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
        out: &mut EpaxosOutbox,
    ) {
        if self.refuse(from, instance, ballot, out) {
            return;
        }
        if let Some(h) = self.instances.get(&instance).and_then(|i| i.held.as_ref()) {
            if h.vballot == ballot {
                // A retransmission: answer again from what we hold, or ignore a stale
                // PreAccept after this ballot's Accept.
                if h.status == Status::PreAccepted {
                    let msg = EpaxosMsg::PreAcceptOk {
                        instance,
                        ballot,
                        attrs: h.attrs.clone(),
                    };
                    self.send(from, msg, out);
                } else {
                    self.count(EpaxosDrop::StaleReply);
                }
                return;
            }
            assert!(h.vballot < ballot, "vballot above the promise");
        }
        let merged = match &command {
            Some(c) => {
                let mut m = self.index.attrs_for(c);
                m.merge(&attrs);
                m
            }
            None => attrs.clone(),
        };
        let agreed = ballot == Ballot::ZERO && merged == attrs;
        self.promise(instance, ballot);
        let held = Held {
            status: Status::PreAccepted,
            vballot: ballot,
            command,
            attrs: merged.clone(),
            agreed,
        };
        self.index_held(instance, &held);
        self.instances.get_mut(&instance).expect("promised").held = Some(held);
        self.record(instance, out);
        self.note_waiting(instance);
        self.send(
            from,
            EpaxosMsg::PreAcceptOk {
                instance,
                ballot,
                attrs: merged,
            },
            out,
        );
    }

    fn on_preaccept_ok(
        &mut self,
        from: NodeId,
        instance: InstanceId,
        ballot: Ballot,
        attrs: Attrs,
        out: &mut EpaxosOutbox,
    ) {
        let promised = self.instances.get(&instance).map(|i| i.promised);
        match self.drives.get_mut(&instance) {
            Some(Drive {
                ballot: b,
                phase: Phase::PreAccept { replies, .. },
                ..
            }) if *b == ballot && promised == Some(ballot) => {
                replies.insert(from, attrs);
            }
            _ => {
                self.count(EpaxosDrop::StaleReply);
                return;
            }
        }
        self.evaluate_preaccept(instance, out);
    }

    /// Decide what a PreAccept phase's answers allow: the fast path (default ballot
    /// only), the slow path, or waiting for more.
    fn evaluate_preaccept(&mut self, instance: InstanceId, out: &mut EpaxosOutbox) {
        let f = self.config.f();
        let fast = self.config.fast_quorum();
        let n = self.n();
        let Some(drive) = self.drives.get(&instance) else {
            return;
        };
        let Phase::PreAccept {
            command,
            proposed,
            replies,
        } = &drive.phase
        else {
            return;
        };
        let ballot = drive.ballot;
        if ballot == Ballot::ZERO {
            // The leader's own pre-accept counts; `replies` are the others'.
            debug_assert!(!replies.contains_key(&self.id));
            let agreeing = replies.values().filter(|a| *a == proposed).count();
            let fast_ok = if self.bugs.skip_slow_path_when_deps_differ {
                replies.len() + 1 >= fast
            } else {
                agreeing + 1 >= fast
            };
            if fast_ok {
                let (command, attrs) = (command.clone(), proposed.clone());
                self.stats.fast_commits += 1;
                self.decide(instance, command, attrs, out);
                return;
            }
            let outstanding = (n - 1) - replies.len();
            if replies.len() >= f && agreeing + outstanding + 1 < fast {
                self.slow_path(instance, out);
            }
        } else if replies.len() >= self.config.majority() {
            // A recovery ballot never takes the fast path (its own answer included).
            self.slow_path(instance, out);
        }
    }

    /// Accept with the union of the PreAccept answers.
    fn slow_path(&mut self, instance: InstanceId, out: &mut EpaxosOutbox) {
        let drive = self.drives.get(&instance).expect("driven");
        let Phase::PreAccept {
            command,
            proposed,
            replies,
        } = &drive.phase
        else {
            unreachable!("slow path from PreAccept only")
        };
        let mut attrs = proposed.clone();
        for a in replies.values() {
            attrs.merge(a);
        }
        let (ballot, command) = (drive.ballot, command.clone());
        self.start_accept(instance, ballot, command, attrs, out);
    }

    fn start_accept(
        &mut self,
        instance: InstanceId,
        ballot: Ballot,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
        out: &mut EpaxosOutbox,
    ) {
        let drive = self.drives.get_mut(&instance).expect("driven");
        assert_eq!(drive.ballot, ballot);
        drive.phase = Phase::Accept {
            command: command.clone(),
            attrs: attrs.clone(),
            oks: BTreeSet::new(),
        };
        drive.sent_tick = self.now;
        self.send_all(
            EpaxosMsg::Accept {
                instance,
                ballot,
                command,
                attrs,
            },
            out,
        );
    }

    fn on_accept(
        &mut self,
        from: NodeId,
        instance: InstanceId,
        ballot: Ballot,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
        out: &mut EpaxosOutbox,
    ) {
        if self.refuse(from, instance, ballot, out) {
            return;
        }
        if let Some(h) = self.instances.get(&instance).and_then(|i| i.held.as_ref()) {
            if h.vballot == ballot && h.status == Status::Accepted {
                self.send(from, EpaxosMsg::AcceptOk { instance, ballot }, out);
                return;
            }
        }
        self.promise(instance, ballot);
        let held = Held {
            status: Status::Accepted,
            vballot: ballot,
            command,
            attrs,
            agreed: false,
        };
        self.index_held(instance, &held);
        self.instances.get_mut(&instance).expect("promised").held = Some(held);
        self.record(instance, out);
        self.note_waiting(instance);
        self.send(from, EpaxosMsg::AcceptOk { instance, ballot }, out);
    }

    fn on_accept_ok(
        &mut self,
        from: NodeId,
        instance: InstanceId,
        ballot: Ballot,
        out: &mut EpaxosOutbox,
    ) {
        let majority = self.config.majority();
        let chosen = match self.drives.get_mut(&instance) {
            Some(Drive {
                ballot: b,
                phase:
                    Phase::Accept {
                        command,
                        attrs,
                        oks,
                    },
                ..
            }) if *b == ballot => {
                oks.insert(from);
                (oks.len() >= majority).then(|| (command.clone(), attrs.clone()))
            }
            _ => {
                self.count(EpaxosDrop::StaleReply);
                return;
            }
        };
        if let Some((command, attrs)) = chosen {
            // Chosen: a majority accepted at this ballot.
            if ballot == Ballot::ZERO {
                self.stats.slow_commits += 1;
            } else {
                if command.is_some() {
                    self.stats.recovered_commands += 1;
                } else {
                    self.stats.recovered_noops += 1;
                }
                if instance.replica != self.id {
                    self.stats.recovered_foreign += 1;
                }
            }
            self.decide(instance, command, attrs, out);
        }
    }

    /// Commit as the decider: persist, then (once durable) execute and broadcast.
    fn decide(
        &mut self,
        instance: InstanceId,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
        out: &mut EpaxosOutbox,
    ) {
        self.drives.remove(&instance);
        self.on_commit(instance, command, attrs, true, out);
    }

    fn on_commit(
        &mut self,
        instance: InstanceId,
        command: Option<EpaxosCommand>,
        attrs: Attrs,
        broadcast: bool,
        out: &mut EpaxosOutbox,
    ) {
        let inst = self.instances.entry(instance).or_insert_with(Inst::new);
        if let Some(h) = inst.held.as_ref().filter(|h| h.status == Status::Committed) {
            if h.command != command || h.attrs != attrs {
                self.count(EpaxosDrop::ConflictingCommit);
            }
            return;
        }
        let vballot = inst.held.as_ref().map_or(Ballot::ZERO, |h| h.vballot);
        let held = Held {
            status: Status::Committed,
            vballot,
            command,
            attrs,
            agreed: false,
        };
        self.index_held(instance, &held);
        let q = self.pos(instance.replica).expect("validated instance");
        self.committed_max[q] = self.committed_max[q].max(instance.slot);
        self.committed_count += 1;
        self.instances.get_mut(&instance).expect("entry").held = Some(held);
        if self.drives.remove(&instance).is_some() {
            self.stats.abandoned += 1;
        }
        let token = self.record(instance, out);
        self.defer(
            token,
            Deferred::Effective {
                instance,
                broadcast,
            },
        );
    }

    fn on_prepare(
        &mut self,
        from: NodeId,
        instance: InstanceId,
        ballot: Ballot,
        out: &mut EpaxosOutbox,
    ) {
        if self.refuse(from, instance, ballot, out) {
            return;
        }
        let promised = self
            .instances
            .get(&instance)
            .map_or(Ballot::ZERO, |i| i.promised);
        if ballot > promised {
            self.promise(instance, ballot);
            self.persist(EpaxosRecord::Promise { instance, ballot }, out);
            self.note_waiting(instance);
        }
        // A retransmitted Prepare (ballot == promised, the same recoverer) is answered
        // again. The answer leaves once the promise is durable.
        let held = self.instances[&instance].held.clone();
        self.send(
            from,
            EpaxosMsg::PrepareOk {
                instance,
                ballot,
                held,
            },
            out,
        );
    }

    fn on_prepare_ok(
        &mut self,
        from: NodeId,
        instance: InstanceId,
        ballot: Ballot,
        held: Option<Held>,
        out: &mut EpaxosOutbox,
    ) {
        match self.drives.get_mut(&instance) {
            Some(Drive {
                ballot: b,
                phase: Phase::Prepare { replies, .. },
                ..
            }) if *b == ballot => {
                replies.insert(from, held);
            }
            _ => {
                self.count(EpaxosDrop::StaleReply);
                return;
            }
        }
        self.evaluate_prepare(instance, out);
    }

    /// The recovery decision (see the module doc, "Recovery").
    fn evaluate_prepare(&mut self, instance: InstanceId, out: &mut EpaxosOutbox) {
        let f = self.config.f();
        let fast = self.config.fast_quorum();
        let drive = self.drives.get(&instance).expect("driven");
        let ballot = drive.ballot;
        let Phase::Prepare { replies, .. } = &drive.phase else {
            unreachable!("evaluated in Prepare only")
        };
        if replies.len() < self.config.majority() {
            return;
        }
        let helds: Vec<&Held> = replies.values().flatten().collect();
        // 1. Committed somewhere: spread the commit.
        if let Some(h) = helds.iter().find(|h| h.status == Status::Committed) {
            let (command, attrs) = (h.command.clone(), h.attrs.clone());
            self.stats.recovered_committed += 1;
            self.decide(instance, command, attrs, out);
            return;
        }
        // 3. Nobody in the quorum holds the command: a no-op.
        let Some(max_vballot) = helds.iter().map(|h| h.vballot).max() else {
            self.start_accept(instance, ballot, None, Attrs::none(self.n()), out);
            return;
        };
        let top: Vec<&Held> = helds
            .iter()
            .copied()
            .filter(|h| h.vballot == max_vballot)
            .collect();
        // 2. Accepted at the highest ballot: that value may be chosen.
        if let Some(h) = top.iter().find(|h| h.status == Status::Accepted) {
            let (command, attrs) = (h.command.clone(), h.attrs.clone());
            self.start_accept(instance, ballot, command, attrs, out);
            return;
        }
        let command = top[0].command.clone();
        debug_assert!(top.iter().all(|h| h.command == command));
        let mut union = top[0].attrs.clone();
        for h in &top {
            union.merge(&h.attrs);
        }
        if command.is_none() {
            // A no-op pre-accepted by an earlier recoverer (not produced here, but
            // harmless): no dependencies to gather.
            self.start_accept(instance, ballot, None, Attrs::none(self.n()), out);
            return;
        }
        // 4. Pre-accepted at a recovery ballot: no fast commit happened.
        // 5. Only default-ballot pre-accepts.
        let owner_answered = replies.contains_key(&instance.replica);
        if max_vballot != Ballot::ZERO || owner_answered {
            self.start_phase1(instance, ballot, command, union, out);
            return;
        }
        let m = replies.len();
        let agreeing: Vec<&Held> = top.iter().copied().filter(|h| h.agreed).collect();
        let a = agreeing.len();
        if f > 0 && a >= f {
            let attrs = agreeing[0].attrs.clone();
            debug_assert!(agreeing.iter().all(|h| h.attrs == attrs));
            self.start_accept(instance, ballot, command, attrs, out);
            return;
        }
        // A fast commit leaves at least (fast - 1) + m - 2F agreeing answers among m.
        if a + 2 * f < (fast - 1) + m {
            self.start_phase1(instance, ballot, command, union, out);
            return;
        }
        // Ambiguous without TryPreAccept: wait for more answers (retransmitted on
        // ticks to those that have not answered).
        if let Some(Drive {
            phase: Phase::Prepare {
                ambiguous_noted, ..
            },
            ..
        }) = self.drives.get_mut(&instance)
        {
            if !*ambiguous_noted {
                *ambiguous_noted = true;
                self.stats.ambiguous_waits += 1;
            }
        }
    }

    /// Recovery's Phase 1: PreAccept the command at the recovery ballot to everyone,
    /// then Accept the union of a majority's answers.
    fn start_phase1(
        &mut self,
        instance: InstanceId,
        ballot: Ballot,
        command: Option<EpaxosCommand>,
        mut attrs: Attrs,
        out: &mut EpaxosOutbox,
    ) {
        if let Some(c) = &command {
            attrs.merge(&self.index.attrs_for(c));
        }
        let drive = self.drives.get_mut(&instance).expect("driven");
        drive.phase = Phase::PreAccept {
            command: command.clone(),
            proposed: attrs.clone(),
            replies: BTreeMap::new(),
        };
        drive.sent_tick = self.now;
        self.send_all(
            EpaxosMsg::PreAccept {
                instance,
                ballot,
                command,
                attrs,
            },
            out,
        );
    }

    fn on_nack(&mut self, instance: InstanceId, ballot: Ballot) {
        let inst = self.instances.entry(instance).or_insert_with(Inst::new);
        inst.seen = inst.seen.max(ballot);
        if self
            .drives
            .get(&instance)
            .is_some_and(|d| d.ballot < ballot)
        {
            self.drives.remove(&instance);
            self.stats.abandoned += 1;
            // Wait a whole timeout again before trying a higher ballot.
            self.waiting.remove(&instance);
            self.note_waiting(instance);
        }
    }

    fn on_heartbeat(&mut self, committed: &[Slot]) {
        let mut noted = 0;
        for (q, &top) in committed.iter().enumerate() {
            let r = self.config.replicas[q];
            // Our own column: only slots we used (see `check_instance`).
            let top = if r == self.id {
                top.min(self.next_slot - 1)
            } else {
                top
            };
            let mut s = self.exec_prefix[q] + 1;
            // Bounded work per heartbeat whatever a peer claims: a replica far behind
            // catches up over several heartbeats as its execution advances.
            let last = top.min(s.saturating_add(HEARTBEAT_SCAN_SLOTS_MAX));
            while s <= last && noted < COMMIT_REQUEST_INSTANCES_MAX {
                let i = InstanceId {
                    replica: r,
                    slot: s,
                };
                if !self.instances.get(&i).is_some_and(|x| x.committed()) {
                    self.note_waiting(i);
                    noted += 1;
                }
                s += 1;
            }
            self.committed_max[q] = self.committed_max[q].max(top);
        }
    }

    // ---- Timers --------------------------------------------------------------------

    fn tick_drives(&mut self, out: &mut EpaxosOutbox) {
        let due: Vec<InstanceId> = self
            .drives
            .iter()
            .filter(|(_, d)| self.now >= d.sent_tick + self.config.retransmit_ticks)
            .map(|(&i, _)| i)
            .collect();
        let f = self.config.f();
        for instance in due {
            let drive = self.drives.get_mut(&instance).expect("listed");
            drive.sent_tick = self.now;
            let ballot = drive.ballot;
            if let Phase::PreAccept { replies, .. } = &drive.phase {
                if ballot == Ballot::ZERO && replies.len() >= f {
                    // No fast quorum in time: take the slow path with what we have.
                    self.slow_path(instance, out);
                    continue;
                }
            }
            let (msg, answered): (EpaxosMsg, BTreeSet<NodeId>) = match &drive.phase {
                Phase::Starting => continue,
                Phase::PreAccept {
                    command,
                    proposed,
                    replies,
                } => (
                    EpaxosMsg::PreAccept {
                        instance,
                        ballot,
                        command: command.clone(),
                        attrs: proposed.clone(),
                    },
                    replies.keys().copied().collect(),
                ),
                Phase::Accept {
                    command,
                    attrs,
                    oks,
                } => (
                    EpaxosMsg::Accept {
                        instance,
                        ballot,
                        command: command.clone(),
                        attrs: attrs.clone(),
                    },
                    oks.clone(),
                ),
                Phase::Prepare { replies, .. } => (
                    EpaxosMsg::Prepare { instance, ballot },
                    replies.keys().copied().collect(),
                ),
            };
            for i in 0..self.n() {
                let r = self.config.replicas[i];
                // The leader's own default-ballot pre-accept is its record, not a reply.
                let own = r == self.id && ballot == Ballot::ZERO;
                if !answered.contains(&r) && !own {
                    self.send(r, msg.clone(), out);
                }
            }
        }
    }

    fn tick_waiting(&mut self, out: &mut EpaxosOutbox) {
        let now = self.now;
        let n = self.n();
        let mut ask = Vec::new();
        let mut recover = Vec::new();
        let mut done = Vec::new();
        for (&i, w) in self.waiting.iter_mut() {
            let inst = self.instances.get(&i);
            if inst.is_some_and(|x| x.committed()) {
                done.push(i);
                continue;
            }
            if self.drives.contains_key(&i) {
                continue;
            }
            let waited = now.saturating_sub(w.since);
            if waited >= self.config.commit_request_ticks
                && w.asked
                    .is_none_or(|t| now >= t + self.config.commit_request_ticks)
                && ask.len() < COMMIT_REQUEST_INSTANCES_MAX
            {
                w.asked = Some(now);
                ask.push(i);
            }
            let owner = self
                .config
                .replicas
                .iter()
                .position(|&r| r == i.replica)
                .expect("validated instance");
            let rank = (self.me + n - owner) % n;
            let timeout = self.config.recovery_timeout_ticks
                + rank as u64 * self.config.recovery_stagger_ticks;
            if waited >= timeout {
                recover.push(i);
            }
        }
        for i in done {
            self.waiting.remove(&i);
        }
        if !ask.is_empty() {
            self.stats.commit_requests_sent += 1;
            self.send_peers(EpaxosMsg::CommitRequest { instances: ask }, out);
        }
        for i in recover {
            let recovering = self
                .drives
                .values()
                .filter(|d| d.ballot != Ballot::ZERO)
                .count();
            if recovering >= self.config.recoveries_max {
                break;
            }
            self.start_recovery(i, out);
        }
    }

    fn start_recovery(&mut self, instance: InstanceId, out: &mut EpaxosOutbox) {
        let inst = self.instances.entry(instance).or_insert_with(Inst::new);
        let round = inst.seen.max(inst.promised).round + 1;
        assert!(round <= ROUND_MAX, "ballot rounds exhausted");
        let ballot = Ballot::new(round, self.id);
        inst.seen = inst.seen.max(ballot);
        self.drives.insert(
            instance,
            Drive {
                ballot,
                phase: Phase::Prepare {
                    replies: BTreeMap::new(),
                    ambiguous_noted: false,
                },
                sent_tick: self.now,
            },
        );
        if let Some(w) = self.waiting.get_mut(&instance) {
            w.since = self.now;
        }
        self.stats.recoveries_started += 1;
        self.send_all(EpaxosMsg::Prepare { instance, ballot }, out);
    }

    // ---- Execution -----------------------------------------------------------------

    fn is_executed(&self, i: InstanceId) -> bool {
        let q = self.pos(i.replica).expect("instances are of replicas");
        i.slot <= self.exec_prefix[q] || self.instances.get(&i).is_some_and(|x| x.executed)
    }

    fn try_execute(&mut self, out: &mut EpaxosOutbox) {
        if !self.exec_dirty {
            return;
        }
        self.exec_dirty = false;
        let roots: Vec<InstanceId> = self.ready.iter().copied().collect();
        let mut blocked = BTreeSet::new();
        for root in roots {
            if !self.ready.contains(&root) || blocked.contains(&root) {
                continue;
            }
            self.tarjan(root, &mut blocked, out);
        }
    }

    /// The next dependency of `node` to visit, from position (`q`, `next`) on.
    fn next_edge(&self, node: InstanceId, q: &mut usize, next: &mut Slot) -> Option<InstanceId> {
        let deps = &self.instances[&node]
            .held
            .as_ref()
            .expect("visited instances are committed")
            .attrs
            .deps;
        while *q < deps.len() {
            let r = self.config.replicas[*q];
            *next = (*next).max(self.exec_prefix[*q] + 1);
            if *next > deps[*q] {
                *q += 1;
                *next = 0;
                continue;
            }
            let w = InstanceId {
                replica: r,
                slot: *next,
            };
            *next += 1;
            if w != node && !self.is_executed(w) {
                return Some(w);
            }
        }
        None
    }

    /// Tarjan's strongly connected components from `root`, iteratively. Components
    /// complete in reverse topological order and execute as they complete. Reaching an
    /// instance not committed (or blocked) aborts: everything on the stack is blocked.
    fn tarjan(
        &mut self,
        root: InstanceId,
        blocked: &mut BTreeSet<InstanceId>,
        out: &mut EpaxosOutbox,
    ) {
        struct Frame {
            node: InstanceId,
            q: usize,
            next: Slot,
        }
        let mut number: BTreeMap<InstanceId, (u64, u64)> = BTreeMap::new();
        let mut counter = 0u64;
        let mut stack: Vec<InstanceId> = Vec::new();
        let mut on_stack: BTreeSet<InstanceId> = BTreeSet::new();
        let mut calls: Vec<Frame> = Vec::new();
        number.insert(root, (counter, counter));
        counter += 1;
        stack.push(root);
        on_stack.insert(root);
        calls.push(Frame {
            node: root,
            q: 0,
            next: 0,
        });
        while let Some(top) = calls.last_mut() {
            let v = top.node;
            let (mut q, mut next) = (top.q, top.next);
            let edge = self.next_edge(v, &mut q, &mut next);
            top.q = q;
            top.next = next;
            match edge {
                Some(w) => {
                    let ready = self.instances.get(&w).is_some_and(|x| x.effective);
                    if !ready || blocked.contains(&w) {
                        blocked.extend(stack.iter().copied());
                        if !ready {
                            self.note_waiting(w);
                        }
                        return;
                    }
                    if let Some(&(wi, _)) = number.get(&w) {
                        if on_stack.contains(&w) {
                            let e = number.get_mut(&v).expect("numbered");
                            e.1 = e.1.min(wi);
                        }
                    } else {
                        number.insert(w, (counter, counter));
                        counter += 1;
                        stack.push(w);
                        on_stack.insert(w);
                        calls.push(Frame {
                            node: w,
                            q: 0,
                            next: 0,
                        });
                    }
                }
                None => {
                    calls.pop();
                    let (vi, vl) = number[&v];
                    if vi == vl {
                        let mut scc = Vec::new();
                        loop {
                            let w = stack.pop().expect("v is on the stack");
                            on_stack.remove(&w);
                            scc.push(w);
                            if w == v {
                                break;
                            }
                        }
                        self.execute_scc(scc, out);
                    }
                    if let Some(parent) = calls.last() {
                        let e = number.get_mut(&parent.node).expect("numbered");
                        e.1 = e.1.min(vl);
                    }
                }
            }
        }
        assert!(stack.is_empty(), "every visited instance executed");
    }

    fn execute_scc(&mut self, mut scc: Vec<InstanceId>, out: &mut EpaxosOutbox) {
        scc.sort_by_key(|i| {
            let h = self.instances[i].held.as_ref().expect("committed");
            (h.attrs.seq, *i)
        });
        for i in scc {
            let q = self.pos(i.replica).expect("instances are of replicas");
            let inst = self.instances.get_mut(&i).expect("committed");
            assert!(inst.effective && !inst.executed, "execute {i} once");
            inst.executed = true;
            self.ready.remove(&i);
            let h = inst.held.as_ref().expect("committed");
            out.push(EpaxosAction::Execute {
                instance: i,
                command: h.command.clone(),
                attrs: h.attrs.clone(),
            });
            self.stats.executed += 1;
            let r = self.config.replicas[q];
            while self
                .instances
                .get(&InstanceId {
                    replica: r,
                    slot: self.exec_prefix[q] + 1,
                })
                .is_some_and(|x| x.executed)
            {
                self.exec_prefix[q] += 1;
            }
        }
    }

    // ---- Invariants ----------------------------------------------------------------

    /// Cheap checks (O(drives + waiting)), run after every handler.
    pub fn invariants(&self) {
        assert!(self.last_durable <= self.last_issued);
        assert!(self.loopback.is_empty(), "loopback drained after a handler");
        if let Some((&t, _)) = self.deferred.first_key_value() {
            assert!(
                t > self.last_durable && t <= self.last_issued,
                "a deferred action waits for a write not yet durable"
            );
        }
        assert!(self.waiting.len() <= self.config.waiting_max);
        let own = self
            .drives
            .iter()
            .filter(|(i, d)| i.replica == self.id && d.ballot == Ballot::ZERO)
            .count();
        assert!(own <= self.config.proposals_in_flight_max);
        for (i, d) in &self.drives {
            let inst = self.instances.get(i).expect("a driven instance is known");
            assert!(!inst.committed(), "instance {i} committed but still driven");
            if d.ballot == Ballot::ZERO {
                assert_eq!(
                    i.replica, self.id,
                    "only the owner drives the default ballot"
                );
                assert!(i.slot < self.next_slot);
            } else {
                assert_eq!(d.ballot.node, self.id, "a recovery ballot is our own");
            }
            assert!(d.ballot <= inst.seen, "the drive's ballot is known");
        }
        assert!(self.stats.executed <= self.committed_count);
        assert!(self.ready.len() as u64 <= self.committed_count);
        for (q, &p) in self.exec_prefix.iter().enumerate() {
            let next = InstanceId {
                replica: self.config.replicas[q],
                slot: p + 1,
            };
            assert!(
                !self.instances.get(&next).is_some_and(|x| x.executed),
                "execution prefix of {} out of date",
                self.config.replicas[q]
            );
        }
    }

    /// Every instance: promises cover what is held, execution implies a durable
    /// commit, the execution prefix is executed, own slots are below the next one.
    pub fn invariants_full(&self) {
        self.invariants();
        let mut committed = 0u64;
        for (i, inst) in &self.instances {
            assert!(inst.promised <= inst.seen);
            if let Some(h) = &inst.held {
                assert_eq!(h.attrs.deps.len(), self.n());
                if h.status != Status::Committed {
                    assert!(h.vballot <= inst.promised, "{i}: vballot above the promise");
                } else {
                    committed += 1;
                }
            }
            if inst.executed {
                assert!(inst.effective, "{i} executed before its commit was durable");
            }
            if inst.effective {
                assert!(inst.committed());
                assert_eq!(!inst.executed, self.ready.contains(i));
            }
            if i.replica == self.id {
                assert!(i.slot < self.next_slot);
            }
        }
        assert_eq!(committed, self.committed_count);
        for (q, &p) in self.exec_prefix.iter().enumerate() {
            for s in 1..=p {
                let i = InstanceId {
                    replica: self.config.replicas[q],
                    slot: s,
                };
                assert!(
                    self.instances.get(&i).is_some_and(|x| x.executed),
                    "{i} below the execution prefix but not executed"
                );
            }
        }
    }
}
