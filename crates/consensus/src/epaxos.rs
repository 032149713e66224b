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
//!   decider) once durable. A restarted replica ([`Epaxos::recover_at`]) rebuilds its
//!   instances and conflict index from its records, takes everything in its
//!   checkpoint's position as executed, executes every other committed instance
//!   (from the start when it has no checkpoint: [`Epaxos::recover`]), and never
//!   resumes a default-ballot phase: its own uncommitted instances go through recovery
//!   like anyone else's.
//! - Replicas broadcast [`EpaxosMsg::Heartbeat`] with the highest committed slot they
//!   know per replica, so that a replica that missed commits nobody depends on yet
//!   still learns them (the paper assumes reliable delivery of commits), and with
//!   their truncation frontier, so that a replica behind it learns it needs state.
//! - Recoverers of one instance are staggered by their distance after its owner in the
//!   replica list, and a recoverer refused with a higher ballot ([`EpaxosMsg::Nack`])
//!   waits a whole timeout before trying again.
//! - No epochs (no reconfiguration).
//!
//! # Checkpoints, restore and truncation (spec `partial-order-checkpoints.md`)
//!
//! The paper never forgets an instance (nor does its authors' code). Partita's replicas
//! checkpoint, forget what every checkpoint that matters covers, and catch up from a
//! peer's checkpoint. The rules and where they live:
//!
//! - **Positions** (rules 1, 2). A replica's executed set is [`ExecPosition`]: per
//!   column the execution prefix (`exec_prefix`), and the instances executed above it
//!   (`exec_above`). Positions compare per column only. The set is downward closed in
//!   the dependency graph, which every replica shares (committed attributes are
//!   agreed), so the service state is a function of it.
//! - **Cuts** (rule 3). A non-no-op command with `conflicts_all` (a barrier) interferes
//!   with every command, so for every other committed non-no-op command one of the two
//!   depends on the other. When the barrier's strongly connected component has
//!   executed, the non-no-op instances executed are therefore exactly those the
//!   barrier reaches in the graph: the same at every replica. Right after that
//!   component's `Execute` actions the core emits [`EpaxosAction::Cut`] with its
//!   position, the place to checkpoint; checkpoints at the k-th cut hold the same
//!   service state everywhere. The positions themselves may differ by no-ops: a no-op
//!   that recovery decided for a slot nobody held depends on nothing and interferes
//!   with nothing, so it executes whenever its commit arrives, before the cut here and
//!   after it there (and so `above` is rarely empty for long, and prefixes may differ).
//!   No-ops change no state, so a checkpoint's state matches its position at any
//!   replica.
//! - **Restore** (rules 8, 17, 7). [`Epaxos::recover_at`] (a restart from the own
//!   checkpoint and log) and [`Epaxos::restore`] (at run time, after state transfer of
//!   a peer's checkpoint) make the executed set exactly the checkpoint's position, with
//!   its exceptions: what it holds never executes again, what it lacks executes (even
//!   if this replica had executed it before: the state was replaced). Restoring any
//!   replica's position is correct, no-op differences included: the position is
//!   downward closed in the shared graph, so executing the rest in dependency order
//!   orders every interfering pair as everywhere else. The conflict index is not in
//!   the checkpoint: its barrier rises to the restored prefix, so every new command
//!   depends on all of it (extra dependencies never break the order; missing ones
//!   would let a new command overtake an interfering one a lagging replica has not
//!   executed yet).
//! - **Truncation** (rules 4, 5, 6, 16, 22). The driver calls [`Epaxos::truncate_below`]
//!   with the componentwise minimum of the durable checkpoint positions of one set of
//!   `f + 1` replicas ([`truncation_frontier`]), never a per-column quantile. The core
//!   clamps it to its own execution prefix (counted), forgets every instance at or
//!   below it, raises the conflict index's barrier to it and drops the keys that
//!   become redundant (so the index is bounded by the keys of live instances; with
//!   checkpoints at cuts the last barrier already orders later commands after the
//!   frontier, and the raised barrier makes it hold for any frontier), writes an
//!   [`EpaxosRecord::Truncated`] and, once it is durable, emits
//!   [`EpaxosAction::TruncateLog`]: the smallest token among the newest durable record
//!   of every instance still in memory (its `Instance` record, or its `Promise` if it
//!   has none) and the truncation record. Records below it are superseded or forgotten.
//!   Rule 6 (recovery metadata only once every replica executed) is met by its other
//!   branch: the forgotten instances are replaced by the truncation frontier, a marker
//!   that is durable before the log loses them and survives restarts.
//! - **Answers about forgotten instances** (rules 9, 12, pitfall 19). Phase messages
//!   and commits about an instance at or below the frontier are dropped and counted; a
//!   `Prepare` or `CommitRequest` naming one is answered [`EpaxosMsg::Truncated`],
//!   never "I hold nothing": that would let a recoverer decide a no-op for a committed
//!   command. A `Truncated` answer (or a heartbeat's frontier) aborts every recovery
//!   and commit request at or below it, and recovery's case 3 (a no-op) is never taken
//!   for an instance a peer reported truncated.
//! - **State transfer** (rules 10, 11). A dependency at or below the local prefix is
//!   satisfied. One above it but at or below a peer's truncation frontier can never be
//!   fetched: the replica emits [`EpaxosAction::NeedState`] (at most once per recovery
//!   timeout while the need lasts, counted) and neither waits for it nor recovers it.
//!   The driver fetches a peer's checkpoint whose position covers the frontier and
//!   calls `restore`.
//!
//! # Inputs, actions, invariants
//!
//! Inputs: [`Epaxos::propose`], [`Epaxos::on_message`], [`Epaxos::on_tick`] (time only
//! as a tick count), [`Epaxos::on_persisted`] (tokens in order),
//! [`Epaxos::truncate_below`] (a truncation frontier) and [`Epaxos::restore`] (a
//! position whose checkpoint the driver installed); a restart is
//! [`Epaxos::recover_at`]. Actions ([`EpaxosAction`]): `Send`, `Persist { token,
//! record }`, `Execute` (commands in execution order, no-ops included), `Cut`
//! (checkpoint here), `TruncateLog` (a log prefix is obsolete) and `NeedState` (fetch
//! a checkpoint). [`Epaxos::invariants`] (run after every handler) checks the
//! bookkeeping (writes, replies held for durability, bounded queues, the execution
//! prefix and its exceptions, the truncation frontier at or below the execution prefix
//! unless a checkpoint is awaited, nothing in memory, awaited or recovered at or below
//! a truncation frontier, the log truncated only below durable records);
//! [`Epaxos::invariants_full`] walks every instance (promises, commits, what is ready,
//! and that no record a restart needs lies below the log prefix announced obsolete).
//!
//! A message that no correct replica could send (an instance of an unknown replica,
//! slot 0 or above [`SLOT_MAX`], a ballot round above [`crate::ROUND_MAX`], a
//! default-ballot message from another than the instance's owner, a recovery ballot
//! that is not its sender's, dependencies of the wrong length or an unsorted key list)
//! is dropped and counted, never trusted.
//!
//! Planted bugs: [`EpaxosBugs::skip_slow_path_when_deps_differ`]: the leader commits
//! its own attributes on the fast path as soon as a fast quorum answered, whether or not
//! the answers agree. Two interfering commands can then both commit without depending
//! on each other, and replicas execute them in different orders.
//! [`Epaxos::plant_truncated_as_empty`]: a replica answers for a truncated instance as
//! if it had never seen it, and a lagging replica's recovery replaces committed
//! commands by no-ops.

use crate::slot_set::SlotSet;
use crate::{DropCounts, PersistToken, TickDue, ROUND_MAX};
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

/// What one instance orders: a batch of opaque client commands (one, or as many as
/// the leader packed while its window was full), run in this order, and what they
/// conflict with together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpaxosCommand {
    pub commands: Vec<Command>,
    /// Sorted by key, each key once (a key read and written counts as written): the
    /// union of every command's accesses.
    pub keys: Vec<KeyAccess>,
    /// Interferes with every command (e.g. a reconfiguration, or a batch holding one).
    pub conflicts_all: bool,
}

impl EpaxosCommand {
    /// One command with its accesses normalized: sorted by key, a key read and written
    /// becomes one write.
    pub fn new(
        command: Command,
        keys: impl IntoIterator<Item = KeyAccess>,
        conflicts_all: bool,
    ) -> EpaxosCommand {
        EpaxosCommand::batch(vec![command], keys, conflicts_all)
    }

    /// A batch: `commands` run in this order, `keys` (every command's accesses, in
    /// any order and with repeats) normalized as [`EpaxosCommand::new`] does.
    pub fn batch(
        commands: Vec<Command>,
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
            commands,
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

/// The set of instances a replica has executed (spec "partial-order checkpoints" rule
/// 1): every slot `1 ..= prefix[i]` of replica `replicas[i]`, and the instances listed
/// in `above`, each above its column's prefix. Columns follow
/// [`EpaxosConfig::replicas`], which is why [`ExecPosition::contains`] and
/// [`ExecPosition::meet`] take that list.
///
/// Positions are only partially ordered (rule 2): compare them per column. The state of
/// a replica's service is a function of its position, because EPaxos executes a command
/// only after everything it depends on, so the executed set is downward closed in the
/// dependency graph, which is the same graph at every replica (committed attributes
/// are agreed).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExecPosition {
    /// Per column, every slot up to this one is executed.
    pub prefix: Vec<Slot>,
    /// Executed instances above their column's prefix, sorted, each once. No-ops that
    /// recovery decided for slots nobody held execute as soon as they commit (they
    /// depend on nothing), so they often sit here, above a gap.
    pub above: Vec<InstanceId>,
}

impl ExecPosition {
    /// Nothing executed, for `n` replicas.
    pub fn zero(n: usize) -> ExecPosition {
        ExecPosition {
            prefix: vec![0; n],
            above: Vec::new(),
        }
    }

    /// Whether `instance` is in the set. `replicas` maps columns to replicas.
    pub fn contains(&self, replicas: &[NodeId], instance: InstanceId) -> bool {
        let Some(q) = replicas.iter().position(|&r| r == instance.replica) else {
            return false;
        };
        instance.slot <= self.prefix[q] || self.above.binary_search(&instance).is_ok()
    }

    /// The instances in both sets: per column the smaller prefix, and the instances
    /// above it that both contain. Truncation needs only the prefix part; the rest makes
    /// the result an exact intersection.
    pub fn meet(&self, other: &ExecPosition, replicas: &[NodeId]) -> ExecPosition {
        assert_eq!(
            self.prefix.len(),
            other.prefix.len(),
            "positions of one cluster"
        );
        assert_eq!(
            self.prefix.len(),
            replicas.len(),
            "positions of this cluster"
        );
        let prefix: Vec<Slot> = self
            .prefix
            .iter()
            .zip(&other.prefix)
            .map(|(&a, &b)| a.min(b))
            .collect();
        let mut above: BTreeSet<InstanceId> = BTreeSet::new();
        for (mine, theirs) in [(self, other), (other, self)] {
            for &i in &mine.above {
                if theirs.contains(replicas, i) {
                    above.insert(i);
                }
            }
            // Slots below one prefix and above the other are in the meet when the
            // other lists them among its exceptions: the loop above found those.
        }
        let above = above
            .into_iter()
            .filter(|i| {
                let q = replicas.iter().position(|&r| r == i.replica);
                q.is_some_and(|q| i.slot > prefix[q])
            })
            .collect();
        let meet = ExecPosition { prefix, above };
        debug_assert!(meet.is_well_formed(replicas));
        meet
    }

    /// Whether the prefix is at or above `frontier` in every column: a replica at this
    /// position never needs an instance at or below that frontier.
    pub fn covers(&self, frontier: &[Slot]) -> bool {
        covers(&self.prefix, frontier)
    }

    /// What a correct replica of this cluster produces: one prefix per replica, slots
    /// at most [`SLOT_MAX`], exceptions sorted, unique, of known replicas and above their
    /// column's prefix.
    pub fn is_well_formed(&self, replicas: &[NodeId]) -> bool {
        self.prefix.len() == replicas.len()
            && self.prefix.iter().all(|&s| s <= SLOT_MAX)
            && self.above.windows(2).all(|w| w[0] < w[1])
            && self.above.iter().all(|i| {
                replicas
                    .iter()
                    .position(|&r| r == i.replica)
                    .is_some_and(|q| i.slot > self.prefix[q] && i.slot <= SLOT_MAX)
            })
    }
}

/// `prefix[q] >= frontier[q]` in every column (lengths must match).
fn covers(prefix: &[Slot], frontier: &[Slot]) -> bool {
    prefix.len() == frontier.len() && prefix.iter().zip(frontier).all(|(&p, &f)| p >= f)
}

/// The frontier a replica may truncate at, from the durable checkpoint positions its
/// peers reported (one per replica, its own included; spec rules 4 and 5): the
/// componentwise minimum over ONE chosen set of `f + 1` positions, so that at least one
/// of those replicas survives any `f` crashes with a checkpoint that covers the whole
/// frontier. Never a per-column quantile: with `n = 5` and checkpoints (9,1), (8,2),
/// (1,9), (2,8), (5,5), the third-highest value per column is (5,5), which only one
/// replica covers. The set chosen is the `f + 1` positions with the largest prefix sums
/// (ties broken by the prefixes themselves, so the choice is deterministic); any set of
/// `f + 1` would be safe, and large sums tend to give a higher minimum. A replica
/// behind the frontier can then catch up only by state transfer (`NeedState`); a driver
/// that would rather let a slow replica catch up from the log may truncate lower, e.g.
/// at the meet of all `n` positions while every replica reports (spec rule 22).
///
/// `None` with fewer than `f + 1` positions or positions of different lengths.
pub fn truncation_frontier(positions: &[ExecPosition], f: usize) -> Option<Vec<Slot>> {
    let n = positions.first()?.prefix.len();
    if positions.len() < f + 1 || positions.iter().any(|p| p.prefix.len() != n) {
        return None;
    }
    let mut chosen: Vec<&ExecPosition> = positions.iter().collect();
    chosen.sort_by(|a, b| {
        let sum = |p: &ExecPosition| p.prefix.iter().map(|&s| s as u128).sum::<u128>();
        sum(b).cmp(&sum(a)).then_with(|| b.prefix.cmp(&a.prefix))
    });
    chosen.truncate(f + 1);
    let mut frontier = chosen[0].prefix.clone();
    for p in &chosen[1..] {
        for (m, &s) in frontier.iter_mut().zip(&p.prefix) {
            *m = (*m).min(s);
        }
    }
    debug_assert!(chosen.iter().all(|p| p.covers(&frontier)));
    Some(frontier)
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
    /// The highest committed slot the sender knows, per replica, and its truncation
    /// frontier (so that a replica behind it learns it needs a checkpoint even when
    /// nothing it holds depends on what it missed).
    Heartbeat {
        committed: Vec<Slot>,
        truncated: Vec<Slot>,
    },
    /// The answer to a `Prepare` or a `CommitRequest` naming an instance at or below the
    /// sender's truncation frontier: the sender executed and forgot every instance at or
    /// below `frontier`, and never answers "I hold nothing" for them (spec rule 12).
    Truncated { frontier: Vec<Slot> },
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
    /// Every instance at or below `frontier` (per column) was executed here and is
    /// forgotten: a restarted replica answers [`EpaxosMsg::Truncated`] for them instead
    /// of "I hold nothing", although the driver may have deleted their records. The
    /// newest one supersedes older ones.
    Truncated { frontier: Vec<Slot> },
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
    /// The `Execute` actions just before this one ended the strongly connected component
    /// of a command that conflicts with everything (a barrier): `position` is exactly
    /// what this replica has executed now. Its non-no-op instances are the same at every
    /// replica at the same barrier, so a checkpoint taken here has the same service
    /// state everywhere (see "Cuts" in the module doc).
    Cut {
        position: ExecPosition,
    },
    /// Records persisted with tokens below `below_token` are obsolete (superseded by
    /// later records or truncated): the driver may delete them from its log, or keep
    /// them (recovery gives the same state either way). Tokens count this incarnation's
    /// records as [`Epaxos::recover_at`] numbers them.
    TruncateLog {
        below_token: PersistToken,
    },
    /// This replica needs instances that peers (or its own log) truncated at or below
    /// `frontier`: fetch a checkpoint from a peer whose position covers `frontier`
    /// ([`ExecPosition::covers`]), install its service state and call
    /// [`Epaxos::restore`]. Repeated at most once per `recovery_timeout_ticks` while the
    /// need lasts.
    NeedState {
        frontier: Vec<Slot>,
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
    /// The executor's walk takes no lowlink from the instances it already visited that
    /// are still on its stack: a cycle through them splits into components that
    /// execute one by one, in whatever order the walk met them.
    pub executor_forgets_the_stack: bool,
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
    /// `Cut` actions emitted (components of a barrier executed).
    pub cuts: u64,
    /// Calls of [`Epaxos::truncate_below`] that raised the truncation frontier.
    pub truncations: u64,
    /// Calls of [`Epaxos::truncate_below`] asked to truncate above this replica's own
    /// execution prefix in some column (clamped to it: the caller computed the frontier
    /// from positions this replica has not reached).
    pub truncations_clamped: u64,
    /// Instances forgotten by truncation.
    pub instances_dropped: u64,
    /// `Truncated` answers sent, and received.
    pub truncated_sent: u64,
    pub truncated_received: u64,
    /// `NeedState` actions emitted.
    pub need_states: u64,
    /// Calls of [`Epaxos::restore`].
    pub restores: u64,
    /// Instances this replica had executed that a restored position did not contain,
    /// so that they run again.
    pub restore_unexecuted: u64,
}

/// The records of one kind written for one instance (or for the truncation frontier):
/// the newest, and the newest of those already durable. Until a new record is durable,
/// the one it replaces is still what a restart would find, so the log must keep it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tokens {
    newest: PersistToken,
    /// The newest durable record before `newest` (0: none).
    durable_before: PersistToken,
}

impl Tokens {
    fn issue(&mut self, token: PersistToken, last_durable: PersistToken) {
        debug_assert!(token > self.newest, "tokens grow");
        if self.newest != 0 && self.newest <= last_durable {
            self.durable_before = self.newest;
        }
        self.newest = token;
    }

    /// The newest durable record (0: none yet).
    fn durable(&self, last_durable: PersistToken) -> PersistToken {
        if self.newest <= last_durable {
            self.newest
        } else {
            self.durable_before
        }
    }
}

#[derive(Clone, Debug)]
struct Inst {
    promised: Ballot,
    /// The highest ballot heard of for this instance (promised, or in a Nack).
    seen: Ballot,
    held: Option<Held>,
    /// Committed, and the commit durable here.
    effective: bool,
    /// Its `Instance` records and its `Promise` records.
    records: Tokens,
    promises: Tokens,
}

impl Inst {
    fn new() -> Inst {
        Inst {
            promised: Ballot::ZERO,
            seen: Ballot::ZERO,
            held: None,
            effective: false,
            records: Tokens::default(),
            promises: Tokens::default(),
        }
    }

    /// The oldest record a restart needs to rebuild this instance (0: none durable): the
    /// newest durable `Instance` record (later promises are later in the log), or else
    /// the newest durable `Promise` (promises only grow).
    fn keep_token(&self, last_durable: PersistToken) -> PersistToken {
        match self.records.durable(last_durable) {
            0 => self.promises.durable(last_durable),
            t => t,
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

impl Wait {
    /// When a commit request for the awaited instance goes out: `commit_request_ticks`
    /// after the wait began and after the last request.
    fn ask_at(&self, c: &EpaxosConfig) -> u64 {
        let first = self.since.saturating_add(c.commit_request_ticks);
        self.asked.map_or(first, |t| {
            first.max(t.saturating_add(c.commit_request_ticks))
        })
    }
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
    /// A `Truncated` record is durable: tell the driver which log prefix is obsolete.
    Truncated,
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

    /// Every new command depends on every slot up to `floor` (per replica), as if a
    /// barrier command stood there. Used when the instances below are forgotten
    /// (rule 7: extra dependencies never break the execution order, missing ones do).
    /// `seq` needs no such floor: it orders commands inside one strongly connected
    /// component only, and a command proposed after an instance executed here cannot
    /// share its component (that component was complete, all committed, without it).
    fn raise_barrier(&mut self, floor: &[Slot]) {
        debug_assert_eq!(floor.len(), self.barrier.len());
        for (b, &f) in self.barrier.iter_mut().zip(floor) {
            *b = (*b).max(f);
        }
        for (a, &b) in self.all.iter_mut().zip(&self.barrier) {
            *a = (*a).max(b);
        }
    }

    /// Raise the barrier to `frontier`, then forget the keys it makes redundant (every
    /// slot at or below it): the dependencies they would add the barrier now adds.
    fn prune(&mut self, frontier: &[Slot]) {
        self.raise_barrier(frontier);
        let below = |slots: &[Slot]| slots.iter().zip(frontier).all(|(&s, &f)| s <= f);
        self.keys.retain(|_, k| !(below(&k.write) && below(&k.any)));
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

/// The instance a message is about (`CommitRequest`, `Heartbeat` and `Truncated` name
/// none or several).
fn msg_instance(msg: &EpaxosMsg) -> Option<InstanceId> {
    match msg {
        EpaxosMsg::PreAccept { instance, .. }
        | EpaxosMsg::PreAcceptOk { instance, .. }
        | EpaxosMsg::Accept { instance, .. }
        | EpaxosMsg::AcceptOk { instance, .. }
        | EpaxosMsg::Commit { instance, .. }
        | EpaxosMsg::Prepare { instance, .. }
        | EpaxosMsg::PrepareOk { instance, .. }
        | EpaxosMsg::Nack { instance, .. } => Some(*instance),
        EpaxosMsg::CommitRequest { .. }
        | EpaxosMsg::Heartbeat { .. }
        | EpaxosMsg::Truncated { .. } => None,
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
    /// A message about an instance at or below this replica's truncation frontier
    /// (a `Prepare` or `CommitRequest` for one is answered with `Truncated`).
    Truncated,
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
        EpaxosDrop::Truncated => "epaxos_truncated",
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
    /// The ready instances not blocked (`exec_blocked`): where the next walks start.
    runnable: BTreeSet<InstanceId>,
    /// Per replica: every slot up to this one is executed here.
    exec_prefix: Vec<Slot>,
    /// Per column, the slots executed above its prefix. With `exec_prefix`, exactly
    /// this replica's executed set ([`ExecPosition`]); instances a restored position
    /// lists here need not be in memory.
    exec_above: Vec<SlotSet>,
    /// Per replica: every slot up to this one was executed and forgotten here; messages
    /// about them are dropped, and a `Prepare` or `CommitRequest` is answered
    /// `Truncated`. Only grows, and is durable (`EpaxosRecord::Truncated`) before the
    /// driver may delete the records it replaces.
    truncated: Vec<Slot>,
    /// Per replica: the highest truncation frontier a peer reported. An instance at or
    /// below it that is not executed here can no longer be fetched (spec rule 11).
    peers_truncated: Vec<Slot>,
    /// A checkpoint covering this frontier is needed (until the execution prefix
    /// covers it), and the tick `NeedState` was last emitted.
    state_needed: Option<Vec<Slot>>,
    need_state_tick: Option<u64>,
    /// The `Truncated` records, and the `below_token` of the last `TruncateLog`.
    truncation_records: Tokens,
    log_truncated_below: PersistToken,
    /// Per replica: the highest slot known committed (here or by a peer's heartbeat).
    committed_max: Vec<Slot>,
    /// Ready instances whose last walk reached an instance that is not effective yet
    /// (directly or through another such instance), and that instance: walking them
    /// again before it commits would stop at it again. Without this, every input under
    /// contention walked every blocked instance's dependencies again (each a range of
    /// slots per column): quadratic in the commands in flight.
    exec_blocked: BTreeMap<InstanceId, InstanceId>,
    /// The reverse: per instance not yet effective, the instances blocked on it (some
    /// entries may be stale: released only if still blocked on it).
    exec_waiters: BTreeMap<InstanceId, Vec<InstanceId>>,
    deferred: BTreeMap<PersistToken, Vec<Deferred>>,
    last_issued: PersistToken,
    last_durable: PersistToken,
    loopback: VecDeque<EpaxosMsg>,
    now: u64,
    ticked: bool,
    last_heartbeat: u64,
    stats: EpaxosStats,
    drops: DropCounts,
    /// Committed instances in memory.
    committed_count: u64,
    /// Instances that became committed here in this incarnation (dropped ones too).
    committed_ever: u64,
    /// Planted bug: answer a `Prepare` for a truncated instance as if holding nothing.
    bug_truncated_as_empty: bool,
}

/// An instance being walked by [`Epaxos::tarjan`]: its Tarjan index and lowlink, and
/// where its scan of the dependency columns stands.
#[derive(Clone, Copy)]
struct Frame {
    node: InstanceId,
    index: u64,
    low: u64,
    /// The column being scanned, and the slot to scan from.
    q: usize,
    next: Slot,
}

/// One walk's bookkeeping. Every instance it visited is on `stack` or executed.
struct Walk {
    counter: u64,
    stack: Vec<(usize, InstanceId)>,
    /// Per column, the slots visited, and runs of executed slots the walk stepped over.
    covered: Vec<SlotSet>,
    /// Per column, the instances on the stack whose index is the smallest of every
    /// one on the stack at or below their slot (the prefix minima): slots descending,
    /// indices ascending. The stack pops the highest index first, so a pop removes the
    /// last entry or none, and an instance pushed (the highest index yet) is a prefix
    /// minimum exactly when its slot is below every one on the stack.
    records: Vec<Vec<(Slot, u64)>>,
}

impl Walk {
    fn push(&mut self, q: usize, w: InstanceId) -> Frame {
        let index = self.counter;
        self.counter += 1;
        self.stack.push((q, w));
        self.covered[q].insert(w.slot);
        let r = &mut self.records[q];
        if r.last().is_none_or(|&(s, _)| w.slot < s) {
            r.push((w.slot, index));
        }
        Frame {
            node: w,
            index,
            low: index,
            q: 0,
            next: 0,
        }
    }

    fn pop(&mut self) -> InstanceId {
        let (q, w) = self.stack.pop().expect("a component is on the stack");
        let r = &mut self.records[q];
        if r.last().is_some_and(|&(s, _)| s == w.slot) {
            r.pop();
        }
        w
    }

    /// The smallest index on the stack among column `q`'s slots up to `d` (every
    /// visited slot there is an edge of an instance whose `deps[q]` is `d`).
    fn low_in(&self, q: usize, d: Slot) -> u64 {
        let r = &self.records[q];
        let k = r.partition_point(|&(s, _)| s > d);
        r.get(k).map_or(u64::MAX, |&(_, i)| i)
    }
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
            runnable: BTreeSet::new(),
            exec_prefix: vec![0; n],
            exec_above: vec![SlotSet::new(); n],
            truncated: vec![0; n],
            peers_truncated: vec![0; n],
            state_needed: None,
            need_state_tick: None,
            truncation_records: Tokens::default(),
            log_truncated_below: 0,
            committed_max: vec![0; n],
            exec_blocked: BTreeMap::new(),
            exec_waiters: BTreeMap::new(),
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
            committed_ever: 0,
            bug_truncated_as_empty: false,
            config,
        }
    }

    /// Rebuild a replica from its log, oldest record first, with no checkpoint: as
    /// [`Epaxos::recover_at`] with no position (committed instances execute again from
    /// the start, so the log must not have been truncated).
    pub fn recover(
        id: NodeId,
        config: EpaxosConfig,
        records: impl IntoIterator<Item = EpaxosRecord>,
    ) -> Epaxos {
        Epaxos::recover_at(id, config, None, records)
    }

    /// Rebuild a replica from a checkpoint taken at `position` (its service state is the
    /// driver's to restore) and from its log, oldest record first. Everything replayed
    /// was durable. The records get tokens 1, 2, … and new writes continue the count.
    ///
    /// Every instance in `position` counts as executed and is never executed again;
    /// dependencies on them are satisfied. Committed instances outside it execute at the
    /// first handler call; uncommitted ones are awaited, and recovered if nobody commits
    /// them. The conflict index is not in the checkpoint (spec rule 7): its barrier rises
    /// to the restored prefix (and the truncation frontier), so every new command
    /// depends on everything this replica may have forgotten; extra dependencies never
    /// break the execution order. A log truncated above `position` (the checkpoint is
    /// older than the truncation) leaves a gap only a peer's checkpoint can fill: the
    /// replica emits `NeedState` at its first handler call.
    ///
    /// Panics on a position or record of another cluster (the caller's bug, or a log or
    /// checkpoint of another configuration).
    pub fn recover_at(
        id: NodeId,
        config: EpaxosConfig,
        position: Option<ExecPosition>,
        records: impl IntoIterator<Item = EpaxosRecord>,
    ) -> Epaxos {
        let mut e = Epaxos::new(id, config);
        let mut token: PersistToken = 0;
        for r in records {
            token += 1;
            e.replay(token, r);
        }
        e.last_issued = token;
        e.last_durable = token;
        if let Some(p) = position {
            assert!(
                p.is_well_formed(&e.config.replicas),
                "a position of another cluster: {p:?}"
            );
            e.exec_prefix = p.prefix.clone();
            e.set_exec_above(&p);
        }
        // Records written before a truncation record may name instances it forgot.
        for q in 0..e.n() {
            for i in e.instances_upto(q, e.truncated[q]) {
                e.instances.remove(&i);
            }
        }
        let me = e.me;
        e.next_slot = e
            .next_slot
            .max(e.exec_prefix[me] + 1)
            .max(e.truncated[me] + 1)
            .max(e.own_above_max() + 1);
        e.resume_recovered();
        // Rule 7: the index forgot everything the checkpoint or the truncation covers.
        let floor: Vec<Slot> = (0..e.n())
            .map(|q| e.exec_prefix[q].max(e.truncated[q]))
            .collect();
        e.index.raise_barrier(&floor);
        if !covers(&e.exec_prefix, &e.truncated) {
            let t = e.truncated.clone();
            e.need_state(&t);
        }
        e.invariants();
        e
    }

    /// One durable record of the log, the `token`-th, at a restart.
    fn replay(&mut self, token: PersistToken, record: EpaxosRecord) {
        match record {
            EpaxosRecord::Instance {
                instance,
                promised,
                held,
            } => {
                if self.pos(instance.replica).is_none() {
                    return;
                }
                if instance.replica == self.id {
                    self.next_slot = self.next_slot.max(instance.slot + 1);
                }
                let inst = self.instances.entry(instance).or_insert_with(Inst::new);
                inst.promised = inst.promised.max(promised);
                inst.seen = inst.seen.max(inst.promised);
                inst.records.issue(token, token);
                // A commit is final: a later record of a lower state cannot exist
                // (nothing is written for a committed instance but the commit).
                if !inst.committed() {
                    inst.held = Some(held);
                }
            }
            EpaxosRecord::Promise { instance, ballot } => {
                if self.pos(instance.replica).is_none() {
                    return;
                }
                if instance.replica == self.id {
                    self.next_slot = self.next_slot.max(instance.slot + 1);
                }
                let inst = self.instances.entry(instance).or_insert_with(Inst::new);
                inst.promised = inst.promised.max(ballot);
                inst.seen = inst.seen.max(ballot);
                inst.promises.issue(token, token);
            }
            EpaxosRecord::Truncated { frontier } => {
                assert!(
                    frontier.len() == self.n() && frontier.iter().all(|&s| s <= SLOT_MAX),
                    "a truncation record of another cluster: {frontier:?}"
                );
                for (t, &f) in self.truncated.iter_mut().zip(&frontier) {
                    *t = (*t).max(f);
                }
                self.truncation_records.issue(token, token);
            }
        }
    }

    /// After the replay: index what is held, make committed instances effective (and
    /// ready unless executed), await the others.
    fn resume_recovered(&mut self) {
        let ids: Vec<InstanceId> = self.instances.keys().copied().collect();
        for i in ids {
            let q = self
                .pos(i.replica)
                .expect("recovered instances are of replicas");
            let executed = self.is_executed(i);
            let inst = self.instances.get_mut(&i).expect("listed");
            if let Some(h) = &inst.held {
                if let Some(c) = &h.command {
                    self.index.add(q, i.slot, c, h.attrs.seq);
                }
                if h.status == Status::Committed {
                    inst.effective = true;
                    if !executed {
                        self.make_ready(i);
                    }
                    self.committed_count += 1;
                    self.committed_ever += 1;
                    self.committed_max[q] = self.committed_max[q].max(i.slot);
                    continue;
                }
            }
            if !executed && self.waiting.len() < self.config.waiting_max {
                self.waiting.insert(
                    i,
                    Wait {
                        since: 0,
                        asked: None,
                    },
                );
            }
        }
        assert!(self.ready.len() as u64 <= self.committed_count);
    }

    /// Plant the bug `truncated_as_empty` (checker controls only): for an instance at
    /// or below the truncation frontier, answer as an acceptor that never saw it would
    /// (a `Prepare` with "I hold nothing" instead of `Truncated`, an `Accept` with
    /// `AcceptOk`, a `CommitRequest` with silence), as if forgetting an instance meant
    /// never having seen it (spec pitfall 19). A recoverer may then decide a no-op for
    /// a committed command. Kept apart from [`EpaxosBugs`] so that the drivers' literals
    /// of that struct stay valid.
    pub fn plant_truncated_as_empty(&mut self, on: bool) {
        self.bug_truncated_as_empty = on;
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
    /// to execute, no reply waiting for a write, no checkpoint needed.
    pub fn is_quiescent(&self) -> bool {
        self.drives.is_empty()
            && self.waiting.is_empty()
            && self.ready.is_empty()
            && self.deferred.is_empty()
            && self.state_needed.is_none()
    }

    /// Exactly what this replica has executed (what a `Cut` reports, at any time).
    pub fn position(&self) -> ExecPosition {
        ExecPosition {
            prefix: self.exec_prefix.clone(),
            above: self.above_list(),
        }
    }

    /// Per replica, every slot up to this one is executed here.
    pub fn exec_prefix(&self) -> &[Slot] {
        &self.exec_prefix
    }

    /// This replica's truncation frontier: every slot up to this one, per replica, is
    /// executed and forgotten.
    pub fn truncated(&self) -> &[Slot] {
        &self.truncated
    }

    /// The frontier a checkpoint must cover for this replica to go on, while one is
    /// needed (see [`EpaxosAction::NeedState`]).
    pub fn state_needed(&self) -> Option<&[Slot]> {
        self.state_needed.as_deref()
    }

    /// Instances held in memory (bounded by truncation).
    pub fn instances_in_memory(&self) -> usize {
        self.instances.len()
    }

    /// Keys in the conflict index (bounded by truncation to keys with live instances).
    pub fn conflict_keys(&self) -> usize {
        self.index.keys.len()
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
        let in_flight = self.own_in_flight();
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

    /// This replica's own proposals not committed yet (driven at ballot zero): what
    /// [`EpaxosConfig::proposals_in_flight_max`] bounds.
    pub fn own_in_flight(&self) -> usize {
        let column = InstanceId {
            replica: self.id,
            slot: 0,
        }..=InstanceId {
            replica: self.id,
            slot: Slot::MAX,
        };
        self.drives
            .range(column)
            .filter(|(_, d)| d.ballot == Ballot::ZERO)
            .count()
    }

    /// Whether [`Epaxos::propose`] would take a command now (the window has room).
    pub fn can_propose(&self) -> bool {
        self.own_in_flight() < self.config.proposals_in_flight_max
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
                truncated: self.truncated.clone(),
            };
            self.send_peers(msg, out);
        }
        self.finish(out);
    }

    /// When [`Epaxos::on_tick`] may next act if no other input arrives first (see
    /// [`TickDue`]), in the driver's tick count: the first tick after a start; a driven
    /// phase's retransmission (or its turn to take the slow path); an awaited
    /// instance's commit request or recovery; the state transfer asked again; the
    /// heartbeat. A tick also forgets awaited instances that committed or ran meanwhile
    /// (no action, but [`Epaxos::is_quiescent`] waits for it), so one is due at once
    /// while there are any. A due may come early (a recovery held back by
    /// `recoveries_max`, a commit request by its bound): that tick does nothing.
    pub fn tick_due(&self) -> TickDue {
        if !self.ticked {
            return TickDue::NEXT;
        }
        let c = &self.config;
        let mut due = self.last_heartbeat.saturating_add(c.heartbeat_ticks);
        for d in self.drives.values() {
            // A drive still starting waits for its record's write, an input.
            if !matches!(d.phase, Phase::Starting) {
                due = due.min(d.sent_tick.saturating_add(c.retransmit_ticks));
            }
        }
        for (&i, w) in &self.waiting {
            if self.wait_over(i) {
                return TickDue::NEXT;
            }
            if !self.drives.contains_key(&i) {
                due = due.min(w.ask_at(c)).min(self.recovery_due(i, w));
            }
        }
        if let Some(needed) = &self.state_needed {
            if !covers(&self.exec_prefix, needed) {
                due = due.min(
                    self.need_state_tick
                        .map_or(0, |t| t.saturating_add(c.recovery_timeout_ticks)),
                );
            }
        }
        TickDue::NEVER.tick(due)
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

    /// State transfer finished: the driver replaced the service state with a peer's
    /// checkpoint taken at `position` (a `Cut` position of that peer). This replica's
    /// executed set becomes exactly `position`: an instance it executed that the
    /// position lacks runs again (the state it changed was replaced), and one the
    /// position holds never runs here. Committed instances outside the position become
    /// ready, and execution resumes. Any replica's position is a correct place to
    /// restore at, although positions at one barrier may differ by no-ops: the set is
    /// downward closed in the dependency graph every replica shares, so executing the
    /// rest in dependency order gives every interfering pair the same order as
    /// everywhere, and no-ops change no state.
    ///
    /// The conflict index rises to the restored prefix (rule 7). A position that does
    /// not cover this replica's own truncation frontier leaves a gap: `NeedState` again.
    /// Panics on a position of another cluster.
    pub fn restore(&mut self, position: &ExecPosition, out: &mut EpaxosOutbox) {
        assert!(
            position.is_well_formed(&self.config.replicas),
            "a position of another cluster: {position:?}"
        );
        let replicas = &self.config.replicas;
        let unexecuted: Vec<InstanceId> = self
            .instances
            .keys()
            .copied()
            .filter(|&i| self.is_executed(i) && !position.contains(replicas, i))
            .collect();
        self.exec_prefix = position.prefix.clone();
        self.set_exec_above(position);
        for i in unexecuted {
            debug_assert!(!self.is_executed(i));
            self.stats.restore_unexecuted += 1;
            if self.instances[&i].effective {
                self.make_ready(i);
            }
        }
        let now_executed: Vec<InstanceId> = self
            .ready
            .iter()
            .chain(self.waiting.keys())
            .copied()
            .filter(|&i| self.is_executed(i))
            .collect();
        for i in now_executed {
            self.unready(i);
            self.waiting.remove(&i);
        }
        let me = self.me;
        let own_above = self.own_above_max();
        self.next_slot = self
            .next_slot
            .max(self.exec_prefix[me] + 1)
            .max(own_above + 1);
        let prefix = self.exec_prefix.clone();
        self.index.raise_barrier(&prefix);
        if !covers(&self.exec_prefix, &self.truncated) {
            let t = self.truncated.clone();
            self.need_state(&t);
        }
        self.unblock_all();
        self.stats.restores += 1;
        self.finish(out);
    }

    /// Forget every instance at or below `frontier[q]` in each column `q` (spec §2).
    /// The caller computes `frontier` as the componentwise minimum over the durable
    /// checkpoint positions of one set of `f + 1` replicas (rule 5,
    /// [`truncation_frontier`]), so that a checkpoint covering it survives any `f`
    /// crashes; it should also cap it by this replica's own durable checkpoint, or a
    /// restart from that checkpoint will need a peer's (`NeedState`). The frontier is
    /// clamped to this replica's execution prefix (counted in
    /// [`EpaxosStats::truncations_clamped`]): what it has not executed it must not
    /// forget. The truncation frontier only grows.
    ///
    /// Effects: the instances are dropped from memory; the conflict index's barrier
    /// rises to the frontier and the keys it then makes redundant (every slot at or
    /// below it) go, so the index is bounded by the keys of live instances; a
    /// `Truncated` record is written and, once durable, `TruncateLog` names the oldest
    /// record still needed. From then on messages about those instances are dropped,
    /// and a `Prepare` or `CommitRequest` for one is answered `Truncated`, never "I hold
    /// nothing" (rule 12).
    pub fn truncate_below(&mut self, frontier: &[Slot], out: &mut EpaxosOutbox) {
        let n = self.n();
        assert_eq!(frontier.len(), n, "a frontier of this cluster");
        let mut clamped = false;
        let target: Vec<Slot> = (0..n)
            .map(|q| {
                clamped |= frontier[q] > self.exec_prefix[q];
                frontier[q].min(self.exec_prefix[q]).max(self.truncated[q])
            })
            .collect();
        if clamped {
            self.stats.truncations_clamped += 1;
        }
        if target == self.truncated {
            self.finish(out);
            return;
        }
        for (q, &upto) in target.iter().enumerate() {
            for i in self.instances_upto(q, upto) {
                assert!(self.is_executed(i), "{i} truncated before it executed");
                let inst = self.instances.remove(&i).expect("listed");
                if inst.committed() {
                    self.committed_count -= 1;
                }
                if self.drives.remove(&i).is_some() {
                    // A peer's position said it executed: its commit exists somewhere.
                    self.stats.abandoned += 1;
                }
                assert!(!self.ready.contains(&i), "{i} executed yet ready");
                self.stats.instances_dropped += 1;
            }
            let r = self.config.replicas[q];
            let stale: Vec<InstanceId> = self
                .waiting
                .range(
                    InstanceId {
                        replica: r,
                        slot: 0,
                    }..=InstanceId {
                        replica: r,
                        slot: upto,
                    },
                )
                .map(|(&i, _)| i)
                .collect();
            for i in stale {
                self.waiting.remove(&i);
            }
        }
        self.index.prune(&target);
        self.truncated = target.clone();
        let token = self.persist(EpaxosRecord::Truncated { frontier: target }, out);
        self.defer(token, Deferred::Truncated);
        self.stats.truncations += 1;
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
            EpaxosMsg::Heartbeat {
                committed,
                truncated,
            } => {
                self.check_frontier(committed)?;
                self.check_frontier(truncated)
            }
            EpaxosMsg::Truncated { frontier } => self.check_frontier(frontier),
        }
    }

    /// One slot per replica, each at most [`SLOT_MAX`].
    fn check_frontier(&self, f: &[Slot]) -> Result<(), EpaxosDrop> {
        if f.len() != self.n() || f.iter().any(|&s| s > SLOT_MAX) {
            return Err(EpaxosDrop::BadAttrs);
        }
        Ok(())
    }

    // ---- Plumbing ------------------------------------------------------------------

    fn persist(&mut self, record: EpaxosRecord, out: &mut EpaxosOutbox) -> PersistToken {
        self.last_issued += 1;
        let (token, durable) = (self.last_issued, self.last_durable);
        // Which record a restart would need: see `Inst::keep_token`.
        match &record {
            EpaxosRecord::Instance { instance, .. } => {
                let inst = self
                    .instances
                    .get_mut(instance)
                    .expect("recorded instances are held");
                inst.records.issue(token, durable);
            }
            EpaxosRecord::Promise { instance, .. } => {
                let inst = self
                    .instances
                    .get_mut(instance)
                    .expect("promised instances are held");
                inst.promises.issue(token, durable);
            }
            EpaxosRecord::Truncated { .. } => self.truncation_records.issue(token, durable),
        }
        out.push(EpaxosAction::Persist { token, record });
        token
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
        self.emit_need_state(out);
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
                let executed = self.is_executed(instance);
                let Some(inst) = self.instances.get_mut(&instance) else {
                    // A restored position held it and a truncation forgot it since.
                    assert!(self.is_truncated(instance), "{instance} vanished");
                    return;
                };
                let held = inst.held.clone().expect("committed instance holds");
                assert_eq!(held.status, Status::Committed);
                if !inst.effective {
                    inst.effective = true;
                    if !executed {
                        self.make_ready(instance);
                    }
                    self.unblock(instance);
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
            Deferred::Truncated => {
                // Writes complete in order, so every live instance's newest durable
                // record is known; records below the oldest of them (and below the
                // newest durable truncation record) are superseded or truncated.
                let durable = self.last_durable;
                let mut below = self.truncation_records.durable(durable);
                assert!(below > 0, "a truncation record is durable");
                for inst in self.instances.values() {
                    match inst.keep_token(durable) {
                        0 => {}
                        t => below = below.min(t),
                    }
                }
                if below > self.log_truncated_below {
                    self.log_truncated_below = below;
                    out.push(EpaxosAction::TruncateLog { below_token: below });
                }
            }
        }
    }

    fn note_waiting(&mut self, instance: InstanceId) {
        if self.waiting.contains_key(&instance) || self.is_executed(instance) {
            return;
        }
        if self.instances.get(&instance).is_some_and(|i| i.committed()) {
            return;
        }
        let q = self.pos(instance.replica).expect("validated instance");
        if instance.slot <= self.truncated[q] || instance.slot <= self.peers_truncated[q] {
            // Rule 11: forgotten here (a restart from an older checkpoint) or by a
            // peer, so never fetchable, and never to be re-decided: a checkpoint is.
            let frontier: Vec<Slot> = (0..self.n())
                .map(|c| self.truncated[c].max(self.peers_truncated[c]))
                .collect();
            self.need_state(&frontier);
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
        if let Some(instance) = msg_instance(&msg).filter(|&i| self.is_truncated(i)) {
            self.count(EpaxosDrop::Truncated);
            match msg {
                EpaxosMsg::Prepare { ballot, .. } if self.bug_truncated_as_empty => {
                    // The planted bug: answer as an acceptor that never saw the
                    // instance ("I hold nothing"), keeping no state.
                    let msg = EpaxosMsg::PrepareOk {
                        instance,
                        ballot,
                        held: None,
                    };
                    self.send(from, msg, out);
                }
                EpaxosMsg::Accept { ballot, .. } if self.bug_truncated_as_empty => {
                    self.send(from, EpaxosMsg::AcceptOk { instance, ballot }, out);
                }
                EpaxosMsg::Prepare { .. } => self.answer_truncated(from, out),
                _ => {}
            }
            return;
        }
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
                let mut truncated = false;
                for i in instances {
                    if self.is_truncated(i) {
                        truncated = true;
                    } else if self.instances.get(&i).is_some_and(|x| x.effective) {
                        let msg = self.commit_msg(i).expect("effective means committed");
                        self.send(from, msg, out);
                    }
                }
                if truncated {
                    self.count(EpaxosDrop::Truncated);
                    if !self.bug_truncated_as_empty {
                        self.answer_truncated(from, out);
                    }
                }
            }
            EpaxosMsg::Heartbeat {
                committed,
                truncated,
            } => self.on_heartbeat(&committed, &truncated),
            EpaxosMsg::Truncated { frontier } => self.on_truncated(&frontier),
        }
    }

    fn answer_truncated(&mut self, to: NodeId, out: &mut EpaxosOutbox) {
        self.stats.truncated_sent += 1;
        let msg = EpaxosMsg::Truncated {
            frontier: self.truncated.clone(),
        };
        self.send(to, msg, out);
    }

    /// A peer forgot every instance at or below `frontier`: recoveries and commit
    /// requests there are pointless (and a recovery must not go on to decide a no-op
    /// for what may be a committed command, rule 12). If this replica has not executed
    /// all of it, only a checkpoint helps (rule 11).
    fn on_truncated(&mut self, frontier: &[Slot]) {
        self.stats.truncated_received += 1;
        self.peer_truncated(frontier);
    }

    fn peer_truncated(&mut self, frontier: &[Slot]) {
        self.note_peers_truncated(frontier);
        let replicas = self.config.replicas.clone();
        let below = |i: &InstanceId| {
            let q = replicas.iter().position(|&r| r == i.replica);
            q.is_some_and(|q| i.slot <= frontier[q])
        };
        let aborted: Vec<InstanceId> = self.drives.keys().copied().filter(below).collect();
        for i in aborted {
            self.drives.remove(&i);
            self.stats.abandoned += 1;
        }
        let given_up: Vec<InstanceId> = self.waiting.keys().copied().filter(below).collect();
        for i in given_up {
            self.waiting.remove(&i);
        }
        if !covers(&self.exec_prefix, frontier) {
            self.need_state(frontier);
        }
    }

    fn note_peers_truncated(&mut self, frontier: &[Slot]) {
        for (p, &f) in self.peers_truncated.iter_mut().zip(frontier) {
            *p = (*p).max(f);
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
        self.committed_ever += 1;
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
        // 3. Nobody in the quorum holds the command: a no-op. Not if a peer forgot
        // the instance: a missing record then no longer means that the command was
        // never proposed (rule 12); the recovery is over, a checkpoint is needed.
        let Some(max_vballot) = helds.iter().map(|h| h.vballot).max() else {
            let q = self.pos(instance.replica).expect("validated instance");
            if instance.slot <= self.peers_truncated[q] {
                self.drives.remove(&instance);
                self.stats.abandoned += 1;
                let frontier = self.peers_truncated.clone();
                self.need_state(&frontier);
                return;
            }
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

    fn on_heartbeat(&mut self, committed: &[Slot], truncated: &[Slot]) {
        // Behind a peer's truncation, what is missing can come only from a checkpoint,
        // even if nothing held here depends on it yet.
        self.peer_truncated(truncated);
        let mut noted = 0;
        for (q, &top) in committed.iter().enumerate() {
            let r = self.config.replicas[q];
            // Our own column: only slots we used (see `check_instance`).
            let top = if r == self.id {
                top.min(self.next_slot - 1)
            } else {
                top
            };
            // Slots a peer forgot cannot be fetched (`need_state` above covers them).
            let mut s = self.exec_prefix[q].max(self.peers_truncated[q]) + 1;
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

    /// An awaited instance that committed or ran here: the next tick forgets it.
    fn wait_over(&self, i: InstanceId) -> bool {
        self.instances.get(&i).is_some_and(|x| x.committed()) || self.is_executed(i)
    }

    /// When this replica recovers awaited instance `i` if no commit comes first: the
    /// recovery timeout after the wait began, staggered by this replica's distance
    /// after the instance's owner.
    fn recovery_due(&self, i: InstanceId, w: &Wait) -> u64 {
        let c = &self.config;
        let n = self.n();
        let owner = self.pos(i.replica).expect("validated instance");
        let rank = ((self.me + n - owner) % n) as u64;
        w.since
            .saturating_add(c.recovery_timeout_ticks + rank * c.recovery_stagger_ticks)
    }

    fn tick_waiting(&mut self, out: &mut EpaxosOutbox) {
        let now = self.now;
        let mut ask = Vec::new();
        let mut recover = Vec::new();
        let mut done = Vec::new();
        for (&i, w) in &self.waiting {
            if self.wait_over(i) {
                done.push(i);
                continue;
            }
            if self.drives.contains_key(&i) {
                continue;
            }
            if now >= w.ask_at(&self.config) && ask.len() < COMMIT_REQUEST_INSTANCES_MAX {
                ask.push(i);
            }
            if now >= self.recovery_due(i, w) {
                recover.push(i);
            }
        }
        for i in &ask {
            if let Some(w) = self.waiting.get_mut(i) {
                w.asked = Some(now);
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
        let q = self.pos(instance.replica).expect("validated instance");
        assert!(
            instance.slot > self.peers_truncated[q] && instance.slot > self.truncated[q],
            "{instance} recovered although truncated"
        );
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
        i.slot <= self.exec_prefix[q] || self.exec_above[q].contains(i.slot)
    }

    /// At or below this replica's truncation frontier: forgotten.
    fn is_truncated(&self, i: InstanceId) -> bool {
        let q = self.pos(i.replica).expect("validated instance");
        i.slot <= self.truncated[q]
    }

    /// Move the exceptions just above each column's prefix into the prefix.
    fn normalize_exec(&mut self) {
        for q in 0..self.n() {
            self.advance_prefix(q);
        }
    }

    /// Column `q`'s prefix absorbs the run of exceptions right above it.
    fn advance_prefix(&mut self, q: usize) {
        if let Some(e) = self.exec_above[q].take_run_at(self.exec_prefix[q] + 1) {
            self.exec_prefix[q] = e;
        }
    }

    /// The exceptions of a position (its prefix already in `exec_prefix`).
    fn set_exec_above(&mut self, position: &ExecPosition) {
        for set in &mut self.exec_above {
            set.clear();
        }
        for i in &position.above {
            let q = self.pos(i.replica).expect("a well-formed position");
            self.exec_above[q].insert(i.slot);
        }
        self.normalize_exec();
    }

    /// The exceptions as a position lists them: sorted instances.
    fn above_list(&self) -> Vec<InstanceId> {
        let mut above: Vec<InstanceId> = self
            .exec_above
            .iter()
            .enumerate()
            .flat_map(|(q, set)| {
                let replica = self.config.replicas[q];
                set.iter().map(move |slot| InstanceId { replica, slot })
            })
            .collect();
        above.sort_unstable();
        above
    }

    /// The highest own slot among the executed exceptions (0: none).
    fn own_above_max(&self) -> Slot {
        self.exec_above[self.me].max().unwrap_or(0)
    }

    /// The instances in memory of column `q` at or below `slot`.
    fn instances_upto(&self, q: usize, slot: Slot) -> Vec<InstanceId> {
        let r = self.config.replicas[q];
        self.instances
            .range(
                InstanceId {
                    replica: r,
                    slot: 0,
                }..=InstanceId { replica: r, slot },
            )
            .map(|(&i, _)| i)
            .collect()
    }

    /// A checkpoint covering `frontier` is needed; `NeedState` leaves from `finish`.
    fn need_state(&mut self, frontier: &[Slot]) {
        let needed = self
            .state_needed
            .get_or_insert_with(|| vec![0; frontier.len()]);
        for (m, &f) in needed.iter_mut().zip(frontier) {
            *m = (*m).max(f);
        }
    }

    /// Emit `NeedState` while the need lasts, at most once per recovery timeout (state
    /// transfer takes a while, and the driver may retry with another peer).
    fn emit_need_state(&mut self, out: &mut EpaxosOutbox) {
        let Some(needed) = &self.state_needed else {
            return;
        };
        if covers(&self.exec_prefix, needed) {
            self.state_needed = None;
            return;
        }
        if self
            .need_state_tick
            .is_some_and(|t| self.now < t + self.config.recovery_timeout_ticks)
        {
            return;
        }
        let frontier = needed.clone();
        self.need_state_tick = Some(self.now);
        self.stats.need_states += 1;
        out.push(EpaxosAction::NeedState { frontier });
    }

    /// Walk from every runnable instance: each walk executes its root or blocks it.
    fn try_execute(&mut self, out: &mut EpaxosOutbox) {
        while let Some(&root) = self.runnable.first() {
            self.tarjan(root, out);
            debug_assert!(!self.runnable.contains(&root), "a walk settles its root");
        }
    }

    /// `i` is committed, effective and not executed.
    fn make_ready(&mut self, i: InstanceId) {
        self.ready.insert(i);
        if !self.exec_blocked.contains_key(&i) {
            self.runnable.insert(i);
        }
    }

    /// `i` is executed.
    fn unready(&mut self, i: InstanceId) {
        self.ready.remove(&i);
        self.runnable.remove(&i);
        self.exec_blocked.remove(&i);
    }

    /// `instance` became effective: what waited for it may run.
    fn unblock(&mut self, instance: InstanceId) {
        for w in self.exec_waiters.remove(&instance).unwrap_or_default() {
            if self.exec_blocked.get(&w) == Some(&instance) {
                self.exec_blocked.remove(&w);
                self.runnable.insert(w);
            }
        }
    }

    /// Executed sets changed wholesale (a restored position): walk everything again.
    fn unblock_all(&mut self) {
        for (b, _) in std::mem::take(&mut self.exec_blocked) {
            self.runnable.insert(b);
        }
        self.exec_waiters.clear();
    }

    /// The first slot of column `q` at or after `x` neither executed nor visited by
    /// `walk`: every slot in between is an edge the walk may skip (an executed one
    /// leads nowhere; a visited one is on the stack, which [`Walk::low_in`] answers
    /// for, or executed).
    fn next_unvisited(&self, walk: &mut Walk, q: usize, x: Slot) -> Slot {
        loop {
            let a = walk.covered[q].next_absent(x);
            let b = self.exec_above[q].next_absent(a);
            if b == a {
                return a;
            }
            // Executed slots [a, b): remembered in `covered`, so that the walk steps
            // over them and its visited slots on either side at once from now on.
            walk.covered[q].insert_run(a, b - 1);
        }
    }

    /// The next dependency of `frame`'s instance that the walk has not visited.
    fn next_edge(&self, walk: &mut Walk, frame: &mut Frame) -> Option<InstanceId> {
        let deps = &self.instances[&frame.node]
            .held
            .as_ref()
            .expect("visited instances are committed")
            .attrs
            .deps;
        while frame.q < deps.len() {
            let q = frame.q;
            let from = frame.next.max(self.exec_prefix[q] + 1);
            let x = self.next_unvisited(walk, q, from);
            if x > deps[q] {
                frame.q += 1;
                frame.next = 0;
                continue;
            }
            frame.next = x + 1;
            return Some(InstanceId {
                replica: self.config.replicas[q],
                slot: x,
            });
        }
        None
    }

    /// Tarjan's strongly connected components from `root`, iteratively. Components
    /// complete in reverse topological order and execute as they complete. Reaching an
    /// instance not committed (or blocked) aborts: everything on the stack is blocked.
    ///
    /// An instance's edges are whole ranges of slots (`deps[q]` names every slot of
    /// column `q` up to it), and most of each range is executed or already visited.
    /// The walk therefore steps only to unvisited slots ([`Epaxos::next_unvisited`]),
    /// and takes the lowlink over the visited ones on the stack from a per-column
    /// summary ([`Walk::low_in`]) when the instance finishes: each instance costs
    /// O(replicas · log) plus its tree edges, not the length of its ranges.
    fn tarjan(&mut self, root: InstanceId, out: &mut EpaxosOutbox) {
        let n = self.n();
        let mut walk = Walk {
            counter: 0,
            stack: Vec::new(),
            covered: vec![SlotSet::new(); n],
            records: vec![Vec::new(); n],
        };
        let mut calls: Vec<Frame> = Vec::new();
        let q = self.pos(root.replica).expect("instances are of replicas");
        calls.push(walk.push(q, root));
        while let Some(&top) = calls.last() {
            let mut frame = top;
            let edge = self.next_edge(&mut walk, &mut frame);
            *calls.last_mut().expect("top") = frame;
            match edge {
                Some(w) => {
                    let ready = self.instances.get(&w).is_some_and(|x| x.effective);
                    let on = if ready {
                        self.exec_blocked.get(&w).copied()
                    } else {
                        Some(w)
                    };
                    if let Some(m) = on {
                        let waiters = self.exec_waiters.entry(m).or_default();
                        for &(_, s) in &walk.stack {
                            self.exec_blocked.insert(s, m);
                            self.runnable.remove(&s);
                            waiters.push(s);
                        }
                        if !ready {
                            self.note_waiting(w);
                        }
                        return;
                    }
                    let q = self.pos(w.replica).expect("instances are of replicas");
                    calls.push(walk.push(q, w));
                }
                None => {
                    let mut done = calls.pop().expect("top");
                    let deps = &self.instances[&done.node]
                        .held
                        .as_ref()
                        .expect("visited instances are committed")
                        .attrs
                        .deps;
                    if !self.bugs.executor_forgets_the_stack {
                        for (q, &d) in deps.iter().enumerate() {
                            done.low = done.low.min(walk.low_in(q, d));
                        }
                    }
                    if done.low == done.index {
                        let mut scc = Vec::new();
                        loop {
                            let w = walk.pop();
                            scc.push(w);
                            if w == done.node {
                                break;
                            }
                        }
                        self.execute_scc(scc, out);
                    }
                    if let Some(parent) = calls.last_mut() {
                        parent.low = parent.low.min(done.low);
                    }
                }
            }
        }
        assert!(walk.stack.is_empty(), "every visited instance executed");
    }

    fn execute_scc(&mut self, mut scc: Vec<InstanceId>, out: &mut EpaxosOutbox) {
        scc.sort_by_key(|i| {
            let h = self.instances[i].held.as_ref().expect("committed");
            (h.attrs.seq, *i)
        });
        let mut barrier = false;
        for i in scc {
            let q = self.pos(i.replica).expect("instances are of replicas");
            assert!(!self.is_executed(i), "execute {i} once");
            let inst = &self.instances[&i];
            assert!(inst.effective, "{i} executed before its commit is durable");
            let h = inst.held.as_ref().expect("committed");
            barrier |= h.command.as_ref().is_some_and(|c| c.conflicts_all);
            out.push(EpaxosAction::Execute {
                instance: i,
                command: h.command.clone(),
                attrs: h.attrs.clone(),
            });
            self.unready(i);
            self.stats.executed += 1;
            self.exec_above[q].insert(i.slot);
            self.advance_prefix(q);
        }
        if barrier {
            // Every command interferes with the barrier, so every non-no-op instance
            // executed so far is one the barrier reaches in the shared dependency
            // graph, and every one it reaches is executed: the same set everywhere.
            self.stats.cuts += 1;
            out.push(EpaxosAction::Cut {
                position: self.position(),
            });
        }
    }

    // ---- Invariants ----------------------------------------------------------------

    /// Cheap checks (O(drives + waiting + replicas · log)), run after every handler.
    pub fn invariants(&self) {
        let n = self.n();
        assert!(self.last_durable <= self.last_issued);
        // Runnable and blocked split the ready instances (checked in full below).
        assert_eq!(
            self.runnable.len() + self.exec_blocked.len(),
            self.ready.len()
        );
        assert!(self.loopback.is_empty(), "loopback drained after a handler");
        if let Some((&t, _)) = self.deferred.first_key_value() {
            assert!(
                t > self.last_durable && t <= self.last_issued,
                "a deferred action waits for a write not yet durable"
            );
        }
        assert!(self.waiting.len() <= self.config.waiting_max);
        assert!(self.own_in_flight() <= self.config.proposals_in_flight_max);
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
        assert!(
            self.stats.executed <= self.committed_ever + self.stats.restore_unexecuted,
            "executed more than committed"
        );
        assert!(self.ready.len() as u64 <= self.committed_count);
        assert_eq!(self.exec_prefix.len(), n);
        assert_eq!(self.truncated.len(), n);
        assert_eq!(self.peers_truncated.len(), n);
        // The log may lose only durable records (writes complete in order).
        assert!(self.log_truncated_below <= self.last_durable);
        for q in 0..n {
            let r = self.config.replicas[q];
            let (p, t) = (self.exec_prefix[q], self.truncated[q]);
            assert!(
                !self.exec_above[q].contains(p + 1),
                "execution prefix of {r} out of date"
            );
            assert!(
                self.exec_above[q].min().is_none_or(|m| m > p),
                "an exception of {r} at or below the prefix"
            );
            // What this replica forgot it executed, unless it restarted from a
            // checkpoint older than its truncation and waits for a peer's.
            assert!(
                t <= p || self.state_needed.as_ref().is_some_and(|s| s[q] >= t),
                "{r}: truncated at {t} above the execution prefix {p}"
            );
            assert!(
                self.instances
                    .range(
                        InstanceId {
                            replica: r,
                            slot: 0
                        }..=InstanceId {
                            replica: r,
                            slot: t
                        }
                    )
                    .next()
                    .is_none(),
                "an instance of {r} at or below the truncation frontier {t} in memory"
            );
            // Nothing forgotten (here or by a peer) is awaited or recovered.
            let gone = t.max(self.peers_truncated[q]);
            let upto = InstanceId {
                replica: r,
                slot: 0,
            }..=InstanceId {
                replica: r,
                slot: gone,
            };
            assert!(self.waiting.range(upto.clone()).next().is_none());
            assert!(self.drives.range(upto).next().is_none());
            if r == self.id {
                assert!(t < self.next_slot && p < self.next_slot);
            }
        }
        assert!(self
            .index
            .barrier
            .iter()
            .zip(&self.truncated)
            .all(|(b, t)| b >= t));
    }

    /// Every instance: promises cover what is held, execution implies a commit, what is
    /// ready is committed and not executed, own slots are below the next one, nothing is
    /// kept at or below the truncation frontier, and no record a restart needs lies
    /// below the log prefix announced obsolete (the live tokens).
    pub fn invariants_full(&self) {
        self.invariants();
        let mut committed = 0u64;
        let durable = self.last_durable;
        for (i, inst) in &self.instances {
            let q = self.pos(i.replica).expect("instances are of replicas");
            assert!(i.slot > self.truncated[q], "{i} kept although truncated");
            assert!(inst.promised <= inst.seen);
            if let Some(h) = &inst.held {
                assert_eq!(h.attrs.deps.len(), self.n());
                if h.status != Status::Committed {
                    assert!(h.vballot <= inst.promised, "{i}: vballot above the promise");
                } else {
                    committed += 1;
                }
            }
            if inst.effective {
                assert!(inst.committed());
                assert_eq!(!self.is_executed(*i), self.ready.contains(i));
            } else {
                assert!(
                    !self.ready.contains(i),
                    "{i} ready before its commit is durable"
                );
            }
            if i.replica == self.id {
                assert!(i.slot < self.next_slot);
            }
            for t in [inst.records, inst.promises] {
                assert!(t.newest <= self.last_issued && t.durable_before <= durable);
                assert!(t.durable_before < t.newest || t.newest == 0);
            }
            let keep = inst.keep_token(durable);
            assert!(
                keep == 0 || keep >= self.log_truncated_below,
                "{i}: its record {keep} lies below the obsolete prefix {}",
                self.log_truncated_below
            );
        }
        assert_eq!(committed, self.committed_count);
        if self.log_truncated_below > 0 {
            assert!(self.truncation_records.durable(durable) >= self.log_truncated_below);
        }
        for (q, set) in self.exec_above.iter().enumerate() {
            assert!(set.min().is_none_or(|m| m > self.exec_prefix[q] + 1));
        }
        for i in &self.ready {
            assert!(self.instances.get(i).is_some_and(|x| x.effective));
        }
        for i in &self.runnable {
            assert!(self.ready.contains(i), "{i} runnable but not ready");
            assert!(
                !self.exec_blocked.contains_key(i),
                "{i} runnable and blocked"
            );
        }
        for (b, m) in &self.exec_blocked {
            assert!(self.ready.contains(b), "{b} blocked but not ready");
            assert!(
                !self.instances.get(m).is_some_and(|x| x.effective),
                "{b} blocked on {m}, which is effective"
            );
        }
    }
}
