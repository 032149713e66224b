//! Sans-IO consensus cores for one totally ordered stream of values (paper 001 §III-A).
//!
//! Three roles, each a plain struct whose handlers take `&mut self`, one input and an
//! outbox ([`Outbox`]), and return without blocking:
//!
//! - [`Acceptor`]: promises ballots and accepts values; every promise and accepted value
//!   is written through [`Action::Persist`] and the acceptor answers only once the driver
//!   reports the write durable with [`Acceptor::on_persisted`].
//! - [`Coordinator`]: batches client commands into values (up to `batch_bytes_max`, 8 KiB
//!   by default as in paper 001), runs Phase 1 ahead of time for ranges of instances,
//!   proposes with Phase 2A inside a window of instances in flight, decides on a majority
//!   of Phase 2B votes and informs the learners.
//! - [`Learner`]: collects values and decisions, delivers decided values in instance
//!   order, and asks its preferential acceptor for whatever it missed.
//! - [`Batcher`]: packs client commands into [`Msg::ForwardBatch`]es to the leader, so
//!   that the leader receives one message per batch instead of one per command
//!   (proposer batching; see the `batcher` module).
//!
//! Two protocols share the roles, chosen by [`Protocol`]:
//!
//! - **Multi-Paxos**: Phase 2A (with the value) goes to the acceptors only; each acceptor
//!   sends its Phase 2B to the coordinator; the decision carries the value to the learners.
//! - **Ring Paxos** (paper 001 Figure 3): Phase 2A carries the value once, with a unique
//!   value id ([`Vid`]), to acceptors *and* learners; acceptors are laid out in a logical
//!   ring ending at the coordinator, and the Phase 2B for the id travels the ring, each
//!   acceptor adding its vote only if it holds the value and has it on disk; the
//!   coordinator decides and sends a small decision carrying ids only, piggybacked on
//!   the next Phase 2A when there is one.
//!
//! Log truncation (the papers are silent on it; this is the usual Paxos log
//! compaction, written down here): replicas report their durable checkpoints with
//! [`Msg::Checkpointed`]; an acceptor forgets every instance up to the one a majority
//! of replicas checkpointed, writes an [`AcceptorRecord::Truncated`] (which also
//! carries its promise) and, once that is durable, tells the driver with
//! [`Action::TruncateLog`] which prefix of its log is obsolete. Learners asking below
//! the truncation point get [`Msg::Truncated`] and fetch a checkpoint instead; a
//! coordinator skips instances an acceptor reports truncated in its Phase 1B.
//!
//! Inputs: a peer message (`on_message`), a client command (`Coordinator::on_command`),
//! a timer tick (`on_tick`, time is a tick count supplied by the driver), a completed
//! persist (`Acceptor::on_persisted`). Outputs: [`Action`]s. No core reads a clock,
//! opens a socket or spawns a thread; `tests/tidy.rs` enforces it.
//!
//! Invariants (checked by each role's `invariants()`, run after every handler by the
//! tests and the simulator):
//! - acceptor: every accepted ballot is at most the promised ballot; a vote (Phase 2B)
//!   or promise (Phase 1B) is only sent for a durable write; nothing is kept below its
//!   truncation point, and every instance below it counts as decided;
//! - coordinator: never more than `window_instances_max` instances in flight; an
//!   instance is decided only with votes from a majority; it proposes in an instance
//!   only after Phase 1 covered it;
//! - learner: delivers each instance exactly once and in order.

mod acceptor;
mod batcher;
mod coordinator;
mod elector;
pub mod epaxos;
pub mod geopaxos;
mod learner;
pub mod multiring;
mod slot_set;

pub use acceptor::Acceptor;
pub use batcher::{Batcher, BatcherConfig, BatcherStats};
pub use coordinator::{Coordinator, CoordinatorStats, Observation, OBSERVATIONS_MAX};
pub use elector::{Elector, HOME_RECLAIM_TIMEOUTS};
pub use learner::{Learner, LearnerStats};

use partita_types::{
    Ballot, Body, ClientId, Command, FieldError, Instance, NodeId, PartitionId, PartitionLayout,
    PartitionMap, Payload,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// When a role's `on_tick` may next act (send, propose, campaign, ask) if no other
/// input arrives first: at a tick count, at a clock time, or at whichever comes first.
/// A driver may skip the ticks before it and deliver them at once (a simulator does:
/// most ticks of an idle node do nothing); one that ticks every period needs none of
/// this. The promise is one way: a role may act later than its due (it is a bound from
/// below on the next action, never a deadline), and a due too early costs only a tick
/// that does nothing. Every input can move it, so a driver asks again after each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickDue {
    /// The tick count (as the driver numbers ticks) at which to tick next.
    pub tick: u64,
    /// The clock time (the `now_ms` of ticks) at which to tick next.
    pub clock_ms: u64,
}

impl TickDue {
    /// Nothing to do on any tick.
    pub const NEVER: TickDue = TickDue {
        tick: u64::MAX,
        clock_ms: u64::MAX,
    };
    /// The next tick may act (the conservative answer).
    pub const NEXT: TickDue = TickDue {
        tick: 0,
        clock_ms: 0,
    };

    /// This due, or tick `tick` if earlier.
    #[must_use]
    pub fn tick(self, tick: u64) -> TickDue {
        TickDue {
            tick: self.tick.min(tick),
            ..self
        }
    }

    /// This due, or clock time `clock_ms` if earlier.
    #[must_use]
    pub fn clock(self, clock_ms: u64) -> TickDue {
        TickDue {
            clock_ms: self.clock_ms.min(clock_ms),
            ..self
        }
    }

    /// Whichever of the two dues comes first.
    #[must_use]
    pub fn min(self, other: TickDue) -> TickDue {
        TickDue {
            tick: self.tick.min(other.tick),
            clock_ms: self.clock_ms.min(other.clock_ms),
        }
    }

    /// Ticks from tick `now_tick` (at clock `now_ms`) to the due, at least 1, given that
    /// a tick is `tick_ms` of the clock (rounded down: a clock read as whole
    /// milliseconds may lag by one, and the tick after acts then); `u64::MAX` for
    /// [`TickDue::NEVER`].
    pub fn ticks_after(self, now_tick: u64, now_ms: u64, tick_ms: u64) -> u64 {
        if self == TickDue::NEVER {
            return u64::MAX;
        }
        let by_tick = self.tick.saturating_sub(now_tick);
        let by_clock = match self.clock_ms {
            u64::MAX => u64::MAX,
            c => c.saturating_sub(now_ms) / tick_ms.max(1),
        };
        by_tick.min(by_clock).max(1)
    }
}

/// The largest batch (value) a coordinator or batcher builds, by default: the cluster
/// file's `[batching] batch_bytes_max` when it says nothing.
pub const BATCH_BYTES_MAX_DEFAULT: usize = 8 * 1024;

/// Which ordering protocol a cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    MultiPaxos,
    RingPaxos,
}

partita_types::named_choice!(Protocol, "protocol", {
    Protocol::RingPaxos => "ring-paxos",
    Protocol::MultiPaxos => "multi-paxos",
});

/// Where a Ring Paxos instance is decided (cluster file `ring_decision`; default
/// `Acceptor`; the paper-001 experiments choose `Coordinator`, the paper's layout).
///
/// - `Coordinator` (paper 001 §III-A, Figure 3): the ring ends at the coordinator,
///   which learns the outcome from the accumulated votes and tells the learners (on the
///   next Phase 2A, or in a `Decide` of its own). A vote crosses every acceptor of the
///   ring and the decision one more hop.
/// - `Acceptor`: the ring starts at the coordinator, whose own vote leaves as soon as
///   its write is durable, and the first acceptor whose vote completes a majority
///   decides: it sends `Decide` to the learners itself and the `Phase2B` to the
///   coordinator (as URingPaxos does). With three acceptors the instance is decided at
///   the second of the ring, and the decision reaches the learners two hops earlier
///   than with `Coordinator` (one vote hop and the decision's relay through the
///   coordinator); acceptors after the majority point take no part in the vote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RingDecision {
    Coordinator,
    #[default]
    Acceptor,
}

partita_types::named_choice!(RingDecision, "ring decision", {
    RingDecision::Coordinator => "coordinator",
    RingDecision::Acceptor => "acceptor",
});

/// Who plays which role. Shared by every core of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub protocol: Protocol,
    /// Ring Paxos: where an instance is decided, which also lays out the ring.
    pub ring_decision: RingDecision,
    /// Acceptors in ring order for Ring Paxos. Every acceptor can coordinate; the ring
    /// of a ballot is the acceptors in its ring mask, in this order, rotated so that the
    /// ballot's coordinator comes last ([`RingDecision::Coordinator`]) or first
    /// ([`RingDecision::Acceptor`]).
    pub acceptors: Vec<NodeId>,
    /// The initial coordinator (the leader of a fresh cluster). After a failover the
    /// leader is the node of the highest ballot ([`Ballot::node`]).
    pub coordinator: NodeId,
    /// Learners (the replicas).
    pub learners: Vec<NodeId>,
    /// State partitioning (paper 001 §III-C): which learners replicate which key range.
    /// The default (no replicas listed) is one partition holding every learner.
    pub partitions: PartitionLayout,
    /// Batchers: nodes that take client commands and forward them to the leader in
    /// batches ([`Batcher`]). A batcher may also be an acceptor or a replica, or run
    /// alone (a standalone batcher).
    pub batchers: Vec<NodeId>,
    /// The ordering epoch these acceptors order in (0: the cluster file's; see
    /// `partita_types::members`): every ballot used with them is of this epoch
    /// ([`Ballot::epoch`]), and they order every instance from `epoch_from` on.
    pub epoch: u64,
    pub epoch_from: Instance,
    /// A planted bug's quorum size (`member-mixed-quorum`: the cluster file's
    /// majority kept after the acceptors changed), `None` in every correct run: a
    /// quorum is then a majority of `acceptors`.
    pub unsafe_quorum: Option<usize>,
}

/// Replicas added or removed at run time that a [`Msg::Members`] may list, at most.
pub const MEMBERS_MAX: usize = 4096;

impl Membership {
    /// This membership (the cluster file's) with the replicas and acceptors changed at
    /// run time: removed replicas left out, added ones (learners too: decisions must
    /// reach them) in, each in its partition. Batchers and the key ranges stay as
    /// they are.
    pub fn with_members(&self, members: &partita_types::members::Members) -> Membership {
        let mut m = self.clone();
        m.learners = members.replicas(&self.learners);
        m.partitions = members.layout(&self.partitions, false);
        if members.ordering_epoch > 0 {
            m.acceptors = members.acceptors(&self.acceptors);
            if !m.acceptors.contains(&m.coordinator) {
                m.coordinator = m.acceptors[0];
            }
            m.epoch = members.ordering_epoch;
            m.epoch_from = members.ordering_from();
        }
        m
    }

    /// The lowest ballot of this configuration's epoch.
    pub fn epoch_floor(&self) -> Ballot {
        Ballot::epoch_floor(self.epoch)
    }

    /// Whether `ballot` belongs to this configuration (its epoch).
    pub fn owns_ballot(&self, ballot: Ballot) -> bool {
        ballot.epoch() == self.epoch
    }

    /// How many acceptors make a quorum: a majority of `acceptors`.
    pub fn majority(&self) -> usize {
        self.unsafe_quorum.unwrap_or(self.acceptors.len() / 2 + 1)
    }

    /// Position of an acceptor in `acceptors` (its bit in a vote mask).
    pub fn acceptor_index(&self, node: NodeId) -> Option<usize> {
        self.acceptors.iter().position(|&a| a == node)
    }

    /// Mask with every acceptor's bit set.
    pub fn all_acceptors_mask(&self) -> u64 {
        if self.acceptors.len() >= 64 {
            u64::MAX
        } else {
            (1u64 << self.acceptors.len()) - 1
        }
    }

    /// The initial ring (paper 001 §III-A): every acceptor, rotated so that the initial
    /// coordinator is at its end (or at its start: [`RingDecision::Acceptor`]).
    pub fn ring(&self) -> Vec<NodeId> {
        self.ring_for(self.coordinator, self.all_acceptors_mask())
    }

    /// The ring of a ballot led by `leader` over the acceptors in `mask`, ending at the
    /// leader (who is always in it), or starting at it with [`RingDecision::Acceptor`].
    /// A coordinator lays out a ring without the acceptors it suspects, and takes them
    /// back when they answer again.
    pub fn ring_for(&self, leader: NodeId, mask: u64) -> Vec<NodeId> {
        let Some(at) = self.acceptor_index(leader) else {
            return Vec::new();
        };
        let n = self.acceptors.len();
        let first = match self.ring_decision {
            RingDecision::Coordinator => 1,
            RingDecision::Acceptor => 0,
        };
        (first..first + n)
            .map(|i| (at + i) % n)
            .filter(|&i| i == at || mask & (1u64 << i) != 0)
            .map(|i| self.acceptors[i])
            .collect()
    }

    /// The node after `node` in the initial ring, or `None` for the node at its end.
    pub fn ring_successor(&self, node: NodeId) -> Option<NodeId> {
        self.ring_successor_for(self.coordinator, self.all_acceptors_mask(), node)
    }

    /// The node after `node` in the ring of (`leader`, `mask`); `None` at its end or
    /// when `node` is not in that ring.
    pub fn ring_successor_for(&self, leader: NodeId, mask: u64, node: NodeId) -> Option<NodeId> {
        let ring = self.ring_for(leader, mask);
        let pos = ring.iter().position(|&a| a == node)?;
        ring.get(pos + 1).copied()
    }

    /// Rank of `node` among the acceptors after `leader` (1: next in order). The
    /// election lets lower ranks campaign first, so exactly one usually does.
    pub fn rank_after(&self, leader: NodeId, node: NodeId) -> Option<usize> {
        let me = self.acceptor_index(node)?;
        let n = self.acceptors.len();
        let at = self.acceptor_index(leader).unwrap_or(n - 1);
        Some((me + n - at) % n)
    }

    /// Batchers that are neither acceptors nor learners: the leader's heartbeats must
    /// reach them on purpose (everyone else hears them anyway).
    pub fn standalone_batchers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.batchers
            .iter()
            .copied()
            .filter(|b| !self.acceptors.contains(b) && !self.learners.contains(b))
    }

    /// Where clients send commands, in the order they try them after timeouts: every
    /// batcher, then every acceptor that is not one (a cluster whose batchers all died
    /// still makes progress through its acceptors, which forward to the leader).
    pub fn entry_rotation(&self) -> Vec<NodeId> {
        self.batchers
            .iter()
            .copied()
            .chain(
                self.acceptors
                    .iter()
                    .copied()
                    .filter(|a| !self.batchers.contains(a)),
            )
            .collect()
    }

    /// The first entry node of the client numbered `client_index` (any number that
    /// spreads clients evenly, e.g. their index in a run): batcher
    /// `client_index % batchers`, or the initial coordinator without batchers.
    pub fn client_entry(&self, client_index: u64) -> NodeId {
        if self.batchers.is_empty() {
            self.coordinator
        } else {
            self.batchers[(client_index % self.batchers.len() as u64) as usize]
        }
    }

    /// The first entry node of a client whose replies come from `replica`: that
    /// replica itself when it batches too (one connection then carries the client's
    /// requests and replies both ways), else [`Membership::client_entry`].
    pub fn client_entry_for(&self, replica: NodeId, client_index: u64) -> NodeId {
        if self.batchers.contains(&replica) {
            replica
        } else {
            self.client_entry(client_index)
        }
    }

    /// The entry node after `current` in [`Membership::entry_rotation`] (the first one
    /// when `current` is not in it).
    pub fn next_entry(&self, current: NodeId) -> NodeId {
        let rotation = self.entry_rotation();
        let at = rotation.iter().position(|&n| n == current);
        rotation[at.map_or(0, |i| (i + 1) % rotation.len())]
    }

    /// The acceptor a learner asks for what it missed: spread learners over acceptors.
    pub fn preferential_acceptor(&self, learner: NodeId) -> NodeId {
        let idx = self
            .learners
            .iter()
            .position(|&l| l == learner)
            .unwrap_or(learner as usize);
        self.acceptors[idx % self.acceptors.len()]
    }

    /// The partition learner `node` replicates (0 when the state is not partitioned).
    pub fn partition_of(&self, node: NodeId) -> PartitionId {
        self.partitions.partition_of_replica(node).unwrap_or(0)
    }

    /// Whether the state is partitioned (more than one partition).
    pub fn is_partitioned(&self) -> bool {
        self.partitions.map.is_partitioned()
    }

    /// The learners of partition `p`, in id order.
    pub fn learners_of(&self, p: PartitionId) -> Vec<NodeId> {
        if !self.is_partitioned() {
            return self.learners.clone();
        }
        self.partitions
            .replicas
            .get(p as usize)
            .cloned()
            .unwrap_or_default()
    }

    /// Check the membership is usable: the error names the field at fault
    /// (`acceptors`, `coordinator`, `learners`, `partitions` or `batchers`).
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.acceptors.is_empty() {
            return Err(FieldError::new(
                "acceptors",
                "at least one acceptor is required",
            ));
        }
        if self.acceptors.len() > 64 {
            return Err(FieldError::new(
                "acceptors",
                "at most 64 acceptors (votes are a 64-bit mask)",
            ));
        }
        let mut sorted = self.acceptors.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.acceptors.len() {
            return Err(FieldError::new("acceptors", "an acceptor is listed twice"));
        }
        if self.acceptor_index(self.coordinator).is_none() {
            return Err(FieldError::new(
                "coordinator",
                format!("coordinator {} is not an acceptor", self.coordinator),
            ));
        }
        if self.learners.is_empty() {
            return Err(FieldError::new(
                "learners",
                "at least one replica (learner) is required",
            ));
        }
        if self.is_partitioned() {
            let n = self.partitions.map.count() as usize;
            if self.partitions.replicas.len() != n {
                return Err(FieldError::new(
                    "partitions",
                    format!(
                        "{n} partitions need a replica list for each, not {}",
                        self.partitions.replicas.len()
                    ),
                ));
            }
            for (p, members) in self.partitions.replicas.iter().enumerate() {
                if members.is_empty() {
                    return Err(FieldError::new(
                        "partitions",
                        format!("partition {p} has no replica"),
                    ));
                }
                if let Some(m) = members.iter().find(|m| !self.learners.contains(m)) {
                    return Err(FieldError::new(
                        "partitions",
                        format!("node {m} of partition {p} is not a replica"),
                    ));
                }
            }
            let listed: usize = self.partitions.replicas.iter().map(Vec::len).sum();
            if listed != self.learners.len() {
                return Err(FieldError::new(
                    "partitions",
                    "every replica belongs to exactly one partition",
                ));
            }
        }
        let mut batchers = self.batchers.clone();
        batchers.sort_unstable();
        batchers.dedup();
        if batchers.len() != self.batchers.len() {
            return Err(FieldError::new("batchers", "a batcher is listed twice"));
        }
        Ok(())
    }
}

/// Unique identity of a proposed value: the ballot of the coordinator that first
/// proposed it and a counter within that ballot. A ballot belongs to one coordinator
/// incarnation, so ids never collide; a value adopted in Phase 1 keeps its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Vid {
    pub ballot: Ballot,
    pub seq: u64,
}

/// A value to be ordered: a batch of client commands (possibly empty: the no-op that
/// fills a gap after Phase 1).
///
/// With state partitioning under Ring Paxos a value is *split* (paper 001 §III-C): the
/// coordinator sends each partition's part to that partition's dissemination group,
/// which the acceptors also listen to, so a value leaves the coordinator once, in parts,
/// and each acceptor assembles it. A split value holds the parts one after the other,
/// in partition order (`commands` are then sub-commands), and `parts[p]` says how many
/// commands part `p` has; projecting it onto a partition is taking a slice. A whole
/// value (`parts` empty) holds client commands as they were sent, and projecting it
/// takes each command's payload for that partition ([`partita_types::Body::project`]:
/// the client split the command, the coordinator never decodes it). A split value
/// cannot be rebuilt into
/// the whole one (a `next` addresses several partitions with the same sub-command), so
/// it is a form of its own, under the same id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Value {
    pub vid: Vid,
    pub commands: Vec<Command>,
    /// Split values: the number of commands of each partition's part, in partition
    /// order (they add up to `commands.len()`). Empty for a whole value.
    pub parts: Vec<u32>,
    /// When the coordinator proposed it, in milliseconds of its clock (the driver's
    /// wall clock; virtual time in the simulator), never below the time of the values
    /// it proposed before. Replicas take time only from here (the largest seen so
    /// far), so everything they decide by time (session leases) is the same at every
    /// replica. A no-op filling a gap after Phase 1 and a cs server's values carry
    /// time too.
    pub time_ms: u64,
    /// Multi-Ring Paxos: a skip instance that moves its ring to this logical position
    /// in the learners' merge (its coordinator's clock times λ; see [`multiring`]); it
    /// holds no commands. 0 for every other value (one logical instance).
    pub skip: u64,
}

/// Which part of a split value a partitioned Phase 2A carries: part `index` of `count`
/// (one per partition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub index: u32,
    pub count: u32,
}

impl Value {
    /// A whole value: these client commands, under `vid`.
    pub fn new(vid: Vid, commands: Vec<Command>) -> Value {
        Value {
            vid,
            commands,
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        }
    }

    /// A skip instance to logical position `to` (at least 1): no commands.
    pub fn skip(vid: Vid, to: u64) -> Value {
        Value {
            skip: to.max(1),
            ..Value::new(vid, Vec::new())
        }
    }

    /// The split value made of `parts` (each a whole value holding one partition's
    /// sub-commands, in partition order), under `vid`.
    pub fn from_parts(vid: Vid, parts: &[Value]) -> Value {
        Value {
            vid,
            commands: parts
                .iter()
                .flat_map(|p| p.commands.iter().cloned())
                .collect(),
            parts: parts.iter().map(|p| p.commands.len() as u32).collect(),
            time_ms: parts.first().map_or(0, |p| p.time_ms),
            skip: parts.first().map_or(0, |p| p.skip),
        }
    }

    /// This value, stamped with `time_ms`.
    pub fn at(mut self, time_ms: u64) -> Value {
        self.time_ms = time_ms;
        self
    }

    pub fn is_noop(&self) -> bool {
        self.commands.is_empty()
    }

    /// Whether this is a split value (see the type's doc).
    pub fn is_split(&self) -> bool {
        !self.parts.is_empty()
    }

    /// Whether `parts` describes `commands` (a split value from a peer may not).
    pub fn parts_consistent(&self) -> bool {
        self.parts.is_empty()
            || (self.parts.len() <= PARTS_MAX
                && self.parts.iter().map(|&n| n as usize).sum::<usize>() == self.commands.len())
    }

    /// Part `p` of a split value, as a whole value of its own under the same id.
    /// `None` if this value is not split into that many parts.
    pub fn part(&self, p: PartitionId) -> Option<Value> {
        if !self.parts_consistent() || p as usize >= self.parts.len() {
            return None;
        }
        let start: usize = self.parts[..p as usize].iter().map(|&n| n as usize).sum();
        let end = start + self.parts[p as usize] as usize;
        Some(Value {
            skip: self.skip,
            ..Value::new(self.vid, self.commands[start..end].to_vec()).at(self.time_ms)
        })
    }

    /// The commands of this value as clients sent them: a split value's sub-commands
    /// of one command (one per part it addresses) joined back into one command whose
    /// body carries each partition's payload (`Body::Split`; one partition's alone is
    /// `Body::Whole`), in the order each first appears. A value that is not split:
    /// its commands. What is carried to another value (a new ordering epoch) must be
    /// whole: a sub-command alone would run at its partition and nowhere else.
    pub fn whole_commands(&self) -> Vec<Command> {
        if !self.is_split() || !self.parts_consistent() {
            return self.commands.clone();
        }
        // (client, seq, session) → (the command, its payloads by partition)
        let mut order: Vec<(Command, Vec<(PartitionId, Payload)>)> = Vec::new();
        let mut at: BTreeMap<(ClientId, u64, Instance), usize> = BTreeMap::new();
        for p in 0..self.parts.len() as PartitionId {
            let Some(part) = self.part(p) else { continue };
            for c in part.commands {
                let Some(payload) = c.body.payload_for(p).cloned() else {
                    continue;
                };
                match at.get(&(c.client, c.seq, c.session)) {
                    Some(&i) => order[i].1.push((p, payload)),
                    None => {
                        at.insert((c.client, c.seq, c.session), order.len());
                        order.push((c, vec![(p, payload)]));
                    }
                }
            }
        }
        order
            .into_iter()
            .map(|(mut c, payloads)| {
                let groups = payloads.iter().fold(0u64, |m, (p, _)| m | (1u64 << p));
                c.body = match payloads.len() {
                    1 => Body::Whole {
                        groups,
                        payload: payloads.into_iter().next().expect("one").1,
                    },
                    _ => Body::Split {
                        groups,
                        payloads: payloads.into_iter().map(|(_, b)| b).collect(),
                    },
                };
                c
            })
            .collect()
    }

    /// Split this value into one part per partition of `map` (a split value of that
    /// many parts is returned as it is).
    pub fn split(&self, map: &PartitionMap) -> Value {
        if self.is_split() && self.parts.len() == map.count() as usize {
            return self.clone();
        }
        let parts: Vec<Value> = (0..map.count()).map(|p| self.project(map, p)).collect();
        Value::from_parts(self.vid, &parts).at(self.time_ms)
    }

    /// What partition `p` of `map` receives of this value (paper 001 §III-C): the
    /// payload of each command that addresses `p`, in order, under the same id; of a
    /// split value, its part `p`. Idempotent: projecting a projection onto the same
    /// partition changes nothing.
    pub fn project(&self, map: &PartitionMap, p: PartitionId) -> Value {
        if self.is_split() && self.parts.len() == map.count() as usize {
            if let Some(part) = self.part(p) {
                return part;
            }
        }
        let commands = self
            .commands
            .iter()
            .filter_map(|c| {
                c.body.project(p).map(|body| Command {
                    client: c.client,
                    seq: c.seq,
                    session: c.session,
                    reply_to: c.reply_to,
                    body,
                    route: c.route,
                })
            })
            .collect();
        Value {
            skip: self.skip,
            ..Value::new(self.vid, commands).at(self.time_ms)
        }
    }

    /// Whether every command of this value addresses only partition `p` (so that the
    /// value is its own projection onto `p`). Never for a split value of several parts.
    pub fn only_for(&self, _map: &PartitionMap, p: PartitionId) -> bool {
        (!self.is_split() || self.parts.len() == 1)
            && self.commands.iter().all(|c| c.body.groups() == 1u64 << p)
    }
}

/// The most parts a split value may have (one per partition; partition masks are 64
/// bits wide).
pub const PARTS_MAX: usize = 64;

/// Approximate encoded size of a command, used for the batch size bound.
pub fn command_bytes(c: &Command) -> usize {
    c.encoded_bytes()
}

/// Messages between consensus roles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Coordinator → acceptors: promise `ballot` and report what you accepted in
    /// instances `from..to`.
    Phase1A {
        ballot: Ballot,
        from: Instance,
        to: Instance,
    },
    /// Acceptor → coordinator: promised, and these are my accepted values in
    /// `from..to`. A promise for a Phase 1A range is *paged*: one or more Phase 1Bs
    /// whose ranges tile the Phase 1A's, each holding at most about
    /// [`PHASE1B_PAGE_BYTES_MAX`] of values, so no promise approaches the frame limit
    /// however much an acceptor holds; the coordinator counts the promise once the
    /// pages cover the whole range, in whatever order they arrived.
    /// `truncated_below`: this acceptor dropped every instance below it after a
    /// majority of replicas checkpointed them (1: nothing dropped); they are decided,
    /// and the coordinator must not propose there.
    Phase1B {
        ballot: Ballot,
        from: Instance,
        to: Instance,
        accepted: Vec<(Instance, Ballot, Arc<Value>)>,
        truncated_below: Instance,
    },
    /// Acceptor → coordinator: I promised a higher ballot.
    Nack { ballot: Ballot, promised: Ballot },
    /// Coordinator → acceptors (and, in Ring Paxos, learners). `decided` piggybacks
    /// decisions by id (Ring Paxos).
    /// `ring` (Ring Paxos) is the mask of acceptors in this ballot's ring.
    /// `part` (Ring Paxos with state partitioning): `value` is that part of a split
    /// value, sent to one partition's dissemination group (its learners and every
    /// acceptor); acceptors assemble the parts. `None`: `value` is whole.
    Phase2A {
        ballot: Ballot,
        instance: Instance,
        value: Arc<Value>,
        decided: Vec<(Instance, Vid)>,
        ring: u64,
        part: Option<Part>,
    },
    /// Ring Paxos: a vote travelling the ring; `votes` has one bit per acceptor index;
    /// `ring` is the mask of the ring it travels.
    RingVote {
        ballot: Ballot,
        instance: Instance,
        vid: Vid,
        votes: u64,
        ring: u64,
    },
    /// Acceptor → coordinator: votes for `(ballot, instance, vid)`. Multi-Paxos sends one
    /// bit; in Ring Paxos the last ring member sends the accumulated mask.
    Phase2B {
        ballot: Ballot,
        instance: Instance,
        vid: Vid,
        votes: u64,
    },
    /// Coordinator → learners and acceptors: decisions by value id (Ring Paxos, when no
    /// Phase 2A leaves soon enough to carry them).
    Decide { decided: Vec<(Instance, Vid)> },
    /// Coordinator → learners and acceptors: a decision with its value (Multi-Paxos).
    DecideValue {
        instance: Instance,
        value: Arc<Value>,
    },
    /// Coordinator → everyone, periodically: who leads and the highest decided instance,
    /// so learners notice what they missed even when traffic stops.
    Heartbeat {
        ballot: Ballot,
        decided_up_to: Instance,
    },
    /// Acceptor → the leader, in answer to its heartbeat: I am up and promised `ballot`.
    /// The leader lays out its ring over the acceptors that answer.
    Alive { ballot: Ballot },
    /// Any node → the leader it knows: a client command sent to a node that does not
    /// lead (after a failover, clients find the new leader this way).
    Forward { cmd: Command },
    /// Batcher → the leader it knows: client commands packed into one message; `seq`
    /// numbers the batcher's batches (from 1 in every incarnation). A node that does
    /// not lead drops it (no forwarding loops); the batcher resends it on a timeout.
    ForwardBatch { seq: u64, cmds: Vec<Command> },
    /// Leader → batcher: every command of batch `seq` went through the coordinator
    /// (queued, or refused and counted when its queue was full).
    ForwardAck { seq: u64 },
    /// Learner → its preferential acceptor (or the coordinator): send me decided values
    /// for `from..to`.
    LearnRequest { from: Instance, to: Instance },
    /// Answer to `LearnRequest`: the decided values the sender knows in the range.
    LearnReply {
        decided: Vec<(Instance, Arc<Value>)>,
    },
    /// Learner → every acceptor, when a gap below the leader's announced decided
    /// prefix persists (the decisions may have reached no acceptor, and a new leader
    /// keeps no values decided before it): report what you accepted in `from..to`.
    ReadAccepted { from: Instance, to: Instance },
    /// Acceptor → learner: every value it holds in `from..to` with the ballot it was
    /// accepted in (ZERO: a decided value it kept without voting). For an instance
    /// known decided, the highest-ballot value reported by a majority is the decided
    /// one (every proposal above the deciding ballot carries the decided value).
    AcceptedValues {
        from: Instance,
        to: Instance,
        accepted: Vec<(Instance, Ballot, Arc<Value>)>,
    },
    /// Replica → every acceptor, after each checkpoint and periodically: my newest
    /// durable checkpoint covers every instance up to `instance`. Acceptors truncate
    /// below what a majority of replicas have checkpointed.
    Checkpointed { instance: Instance },
    /// Replica → every other node, when a change of the replicas is applied and
    /// periodically after one: the replicas at its newest change (`partita member`).
    /// A node that executes nothing takes the highest epoch it hears.
    Members(Box<partita_types::members::Members>),
    /// Replica → replica, for an ordering that delivers a partial order (EPaxos,
    /// GeoPaxos+), after each checkpoint and periodically: my newest durable
    /// checkpoint, taken at a cut where `instance` commands had run, stands at
    /// `position` (the ordering's opaque bytes: a frontier). Each replica truncates
    /// what every one of some majority of checkpoints covers.
    PositionCheckpointed {
        instance: Instance,
        position: Vec<u8>,
    },
    /// Acceptor → learner, answering a `LearnRequest` that reaches below what the
    /// acceptor kept: every instance below `below` was truncated; fetch a replica's
    /// checkpoint (state transfer), then learn from `below` on.
    Truncated { below: Instance },
    /// Replica → replica (state transfer): send `len` bytes (or up to the end) at byte
    /// `offset` of your checkpoint of `instance`; `instance == 0`: of your newest
    /// checkpoint, which must cover at least `min_instance`.
    CheckpointRequest {
        instance: Instance,
        min_instance: Instance,
        offset: u64,
        len: u64,
    },
    /// Replica → replica: bytes `offset..offset + data.len()` of checkpoint `instance`,
    /// `total` bytes long, whose CRC32C over everything before its 4-byte trailer is
    /// `crc32c` (the trailer holds the same value). `total == 0`: no
    /// checkpoint covering the requested `min_instance` here (`instance`: the newest
    /// there is, 0 for none). A request for a checkpoint this replica replaced since is
    /// answered with offset 0 of its newest.
    CheckpointChunk {
        instance: Instance,
        offset: u64,
        total: u64,
        crc32c: u32,
        #[serde(with = "bytes")]
        data: Vec<u8>,
    },
    /// Multi-Ring Paxos (paper 002 §V-B): a message of ring `ring`'s Ring Paxos
    /// instance (its own acceptors, coordinator and learners, instances numbered from 1
    /// in every ring). Never nested.
    OnRing {
        ring: crate::multiring::RingId,
        msg: Box<Msg>,
    },
    /// Between replicas of different partitions, from their execution model (S-SMR
    /// and DS-SMR exchanges: signals and object values). Opaque to ordering; the
    /// receiving replica decodes and checks it.
    Exec {
        #[serde(with = "bytes")]
        data: Vec<u8>,
    },
    /// EPaxos (paper 004's leaderless baseline, [`epaxos`]): a message between the
    /// replicas' EPaxos cores. The core checks it ([`epaxos::Epaxos::on_message`]).
    Epaxos(Box<epaxos::EpaxosMsg>),
    /// Multi-Ring Paxos over partitioned state, replica → the replicas of the other
    /// partitions it shares a ring with, whenever its merge passes or reaches a value
    /// of such a ring, and periodically: my merge took every place of the round-robin
    /// below execution name `name`, and the value named `name` is merged or waits at
    /// its head. A partition runs a value of a ring it shares only once every other
    /// partition the ring carries reached it (paper 003 §3.2's signals: no command
    /// ordered later can then land before it at any of them, which keeps commands for
    /// several partitions linearizable). `ask`: the sender waits at `name` for the
    /// receiver's partition (sent again while it waits): answer with your own, if
    /// your merge reached `name`. See `partita_node::multiring`.
    Merged { name: Instance, ask: bool },
    /// Multi-Ring Paxos, learner → the ring's leader (on the ring): my merge waits for
    /// this ring, whose next instance is not decided, while other rings' values are
    /// queued behind it; they need this ring at logical position `to`. The leader
    /// proposes a skip there at once instead of at the end of its pacing interval
    /// (skips on demand; see `multiring`). Sent at most once a tick per ring.
    SkipRequest { to: u64 },
}

/// `Vec<u8>` as one length-prefixed byte string (serde's default for `Vec<u8>` is a
/// sequence of `u8`s, encoded and decoded one call per byte: slow for 1 MiB chunks).
mod bytes {
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                // Self-describing formats may hand bytes over as a sequence. The
                // capacity hint is not trusted beyond a bound.
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(b) = seq.next_element()? {
                    v.push(b);
                }
                Ok(v)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// Instances and ballot rounds a peer may name: far beyond anything a cluster reaches
/// (2^62 instances at a billion per second is 146 years), and far enough from
/// `u64::MAX` that the cores' `+ 1`s never overflow.
pub const INSTANCE_MAX: Instance = 1 << 62;
/// An acceptor cuts its promise into Phase 1B pages of about this many bytes of
/// values (a page holds at least one value, so a page is at most this plus one
/// value: far below the 64 MiB frame limit).
pub const PHASE1B_PAGE_BYTES_MAX: usize = 1 << 20;
pub const ROUND_MAX: u64 = 1 << 62;
/// The largest checkpoint a peer may announce in a chunk (1 TiB).
pub const CHECKPOINT_BYTES_MAX: u64 = 1 << 40;
/// The most commands a [`Msg::ForwardBatch`] may carry: as many of the smallest
/// encoded command (32 bytes: client, seq, reply_to, the operation's tag and one key)
/// as a frame holds. Batchers pack far fewer (`batch_bytes_max` is at most 16 MiB).
pub const FORWARD_BATCH_COMMANDS_MAX: usize = partita_types::frame::FRAME_BYTES_MAX / 32;

impl Msg {
    /// Whether the message is one a correct peer could send: instances and ballot
    /// rounds in range, ranges that do not end before they start, chunks inside their
    /// checkpoint. A node drops anything else (`Err` says why) before any role sees
    /// it, so that no handler has to defend its arithmetic against a peer.
    pub fn check(&self) -> Result<(), &'static str> {
        fn inst(i: Instance) -> Result<(), &'static str> {
            (i <= INSTANCE_MAX)
                .then_some(())
                .ok_or("an instance out of range")
        }
        fn ballot(b: &Ballot) -> Result<(), &'static str> {
            (b.round <= ROUND_MAX)
                .then_some(())
                .ok_or("a ballot round out of range")
        }
        fn vid(v: &Vid) -> Result<(), &'static str> {
            ballot(&v.ballot)
        }
        fn command(c: &Command) -> Result<(), &'static str> {
            c.body
                .check()
                .map_err(|_| "a command addressed to no group, or split wrongly")
        }
        fn value(v: &Value) -> Result<(), &'static str> {
            vid(&v.vid)?;
            v.commands.iter().try_for_each(command)?;
            v.parts_consistent()
                .then_some(())
                .ok_or("a split value whose parts do not add up")
        }
        fn part(p: &Option<Part>, v: &Value) -> Result<(), &'static str> {
            match p {
                None => Ok(()),
                Some(p) => (p.index < p.count && p.count as usize <= PARTS_MAX && !v.is_split())
                    .then_some(())
                    .ok_or("a part out of range, or a part that is split again"),
            }
        }
        fn range(from: Instance, to: Instance) -> Result<(), &'static str> {
            inst(from)?;
            inst(to)?;
            (from <= to)
                .then_some(())
                .ok_or("a range that ends before it starts")
        }
        fn decided(d: &[(Instance, Vid)]) -> Result<(), &'static str> {
            d.iter().try_for_each(|(i, v)| inst(*i).and(vid(v)))
        }
        fn accepted(a: &[(Instance, Ballot, Arc<Value>)]) -> Result<(), &'static str> {
            a.iter()
                .try_for_each(|(i, b, v)| inst(*i).and(ballot(b)).and(value(v)))
        }
        match self {
            Msg::Phase1A {
                ballot: b,
                from,
                to,
            } => ballot(b).and(range(*from, *to)),
            Msg::Phase1B {
                ballot: b,
                from,
                to,
                accepted: a,
                truncated_below,
            } => ballot(b)
                .and(range(*from, *to))
                .and(accepted(a))
                .and(inst(*truncated_below)),
            Msg::Nack {
                ballot: b,
                promised,
            } => ballot(b).and(ballot(promised)),
            Msg::Phase2A {
                ballot: b,
                instance,
                value: v,
                decided: d,
                part: p,
                ..
            } => ballot(b)
                .and(inst(*instance))
                .and(value(v))
                .and(part(p, v))
                .and(decided(d)),
            Msg::RingVote {
                ballot: b,
                instance,
                vid: v,
                ..
            }
            | Msg::Phase2B {
                ballot: b,
                instance,
                vid: v,
                ..
            } => ballot(b).and(inst(*instance)).and(vid(v)),
            Msg::Decide { decided: d } => decided(d),
            Msg::DecideValue { instance, value: v } => inst(*instance).and(value(v)),
            Msg::Heartbeat {
                ballot: b,
                decided_up_to,
            } => ballot(b).and(inst(*decided_up_to)),
            Msg::Alive { ballot: b } => ballot(b),
            Msg::Forward { cmd } => command(cmd),
            Msg::ForwardBatch { seq, cmds } => {
                if let Err(e) = cmds.iter().try_for_each(command) {
                    Err(e)
                } else if *seq == 0 {
                    Err("a batch numbered 0")
                } else if cmds.is_empty() {
                    Err("an empty batch")
                } else if cmds.len() > FORWARD_BATCH_COMMANDS_MAX {
                    Err("more commands than a frame holds")
                } else {
                    Ok(())
                }
            }
            Msg::ForwardAck { seq } => (*seq != 0)
                .then_some(())
                .ok_or("an acknowledgement of batch 0"),
            Msg::LearnRequest { from, to } | Msg::ReadAccepted { from, to } => range(*from, *to),
            Msg::LearnReply { decided } => {
                decided.iter().try_for_each(|(i, v)| inst(*i).and(value(v)))
            }
            Msg::AcceptedValues {
                from,
                to,
                accepted: a,
            } => range(*from, *to).and(accepted(a)),
            Msg::Checkpointed { instance } => inst(*instance),
            Msg::Members(m) => (m.replicas.len() + m.removed.len() <= MEMBERS_MAX
                && m.added().all(|(_, addr)| addr.len() <= 256))
            .then_some(())
            .ok_or("a member list too large"),
            Msg::PositionCheckpointed { instance, position } => inst(*instance).and(
                (position.len() <= POSITION_BYTES_MAX)
                    .then_some(())
                    .ok_or("a checkpoint position too large"),
            ),
            Msg::Truncated { below } => inst(*below),
            Msg::CheckpointRequest {
                instance,
                min_instance,
                offset,
                ..
            } => inst(*instance).and(inst(*min_instance)).and(
                (*offset <= CHECKPOINT_BYTES_MAX)
                    .then_some(())
                    .ok_or("an offset out of range"),
            ),
            Msg::CheckpointChunk {
                instance,
                offset,
                total,
                data,
                ..
            } => inst(*instance).and(
                (*total <= CHECKPOINT_BYTES_MAX
                    && offset.saturating_add(data.len() as u64) <= *total)
                    .then_some(())
                    .ok_or("a chunk outside its checkpoint"),
            ),
            Msg::Exec { .. } | Msg::Epaxos(_) | Msg::Merged { .. } | Msg::SkipRequest { .. } => {
                Ok(())
            }
            Msg::OnRing { msg, .. } => match **msg {
                Msg::OnRing { .. } => Err("a ring message inside a ring message"),
                // State transfer and execution are between replicas, not of a ring.
                Msg::CheckpointRequest { .. } | Msg::CheckpointChunk { .. } => {
                    Err("a state-transfer message sent on a ring")
                }
                Msg::Exec { .. } => Err("an execution message sent on a ring"),
                Msg::Epaxos(_) => Err("an EPaxos message sent on a ring"),
                Msg::Merged { .. } => Err("a partition's merge signal sent on a ring"),
                ref inner => inner.check(),
            },
        }
    }

    /// The message itself, out of its ring's envelope.
    pub fn unringed(&self) -> &Msg {
        match self {
            Msg::OnRing { msg, .. } => msg,
            m => m,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Phase1A { .. } => "phase1a",
            Msg::Phase1B { .. } => "phase1b",
            Msg::Nack { .. } => "nack",
            Msg::Phase2A { .. } => "phase2a",
            Msg::RingVote { .. } => "ringvote",
            Msg::Phase2B { .. } => "phase2b",
            Msg::Decide { .. } => "decide",
            Msg::DecideValue { .. } => "decidevalue",
            Msg::Heartbeat { .. } => "heartbeat",
            Msg::LearnRequest { .. } => "learnrequest",
            Msg::LearnReply { .. } => "learnreply",
            Msg::Alive { .. } => "alive",
            Msg::Forward { .. } => "forward",
            Msg::ForwardBatch { .. } => "forwardbatch",
            Msg::ForwardAck { .. } => "forwardack",
            Msg::ReadAccepted { .. } => "readaccepted",
            Msg::AcceptedValues { .. } => "acceptedvalues",
            Msg::Checkpointed { .. } => "checkpointed",
            Msg::Members(_) => "members",
            Msg::PositionCheckpointed { .. } => "positioncheckpointed",
            Msg::Truncated { .. } => "truncated",
            Msg::CheckpointRequest { .. } => "checkpointrequest",
            Msg::CheckpointChunk { .. } => "checkpointchunk",
            Msg::OnRing { msg, .. } => msg.kind(),
            Msg::Exec { .. } => "exec",
            Msg::Epaxos(_) => "epaxos",
            Msg::Merged { .. } => "merged",
            Msg::SkipRequest { .. } => "skiprequest",
        }
    }
}

/// The largest ordering position a peer may announce
/// ([`Msg::PositionCheckpointed`]): a frontier with its exceptions.
pub const POSITION_BYTES_MAX: usize = 1 << 20;

/// What an acceptor writes to its log. Recovery replays these in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AcceptorRecord {
    Promise {
        ballot: Ballot,
    },
    Accept {
        instance: Instance,
        ballot: Ballot,
        value: Arc<Value>,
    },
    /// Every instance below `below` is forgotten (a majority of replicas checkpointed
    /// them). Carries the promise at the time, so that the records before it, older
    /// `Promise` records included, may be deleted from the log.
    Truncated {
        below: Instance,
        promised: Ballot,
    },
    /// A record of one of several Paxos groups that share this node's log (GeoPaxos:
    /// a node is an acceptor of every serializer's group; see
    /// `partita_node::geo`). An acceptor of one group never writes it.
    Group {
        group: u32,
        record: Box<AcceptorRecord>,
    },
    /// A node that numbers its lives (GeoPaxos replicas: a restarted replica's
    /// requests must not be taken for those of its earlier life) wrote this when it
    /// started its `incarnation`-th life.
    Boot {
        incarnation: u32,
    },
    /// A record of this node's EPaxos core (`partita_node::epaxos`): EPaxos replicas
    /// keep their instances in the node's log.
    Epaxos(Box<epaxos::EpaxosRecord>),
    /// The members as this acceptor last took them (`partita member`): after a
    /// restart it votes in the ordering epoch they say, and knows the nodes they add,
    /// before any replica tells it (the replicas may all have lost what they
    /// executed). Written again after every truncation record, so it is never cut.
    Members(Box<partita_types::members::Members>),
}

/// Token identifying a persist request; the driver hands it back on completion.
pub type PersistToken = u64;

/// Output of a core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Send {
        to: NodeId,
        msg: Msg,
    },
    /// Write `record` durably, then call `on_persisted(token)`. Writes complete in order.
    Persist {
        token: PersistToken,
        record: AcceptorRecord,
    },
    /// A learner delivers a decided value, in instance order. `name` is what the
    /// replica calls its execution in replies and session opens: the same at every
    /// learner that delivers the value. For one stream it is the instance itself;
    /// Multi-Ring Paxos, whose learners of different partitions merge different rings
    /// and number their sequences differently, names a value by its place in the
    /// round-robin of every ring (`multiring::slot_name`).
    Deliver {
        instance: Instance,
        name: Instance,
        value: Arc<Value>,
    },
    /// A learner with speculation on ([`Learner::set_speculative`]) reports a value
    /// proposed (Ring Paxos Phase 2A) for an instance not yet decided, as it arrives,
    /// at most once per (instance, value id). A new leader's different value for the
    /// same instance is reported too. Not a decision: see `Deliver`.
    Propose {
        instance: Instance,
        value: Arc<Value>,
    },
    /// Records persisted with tokens below `below_token` are obsolete (superseded by
    /// later records or truncated): the driver may delete them from its log, or keep
    /// them (recovery gives the same state either way). Tokens count the acceptor's
    /// records: a recovered acceptor numbers the records it recovered 1, 2, … and
    /// continues from there, so a driver maps a token to a log position.
    TruncateLog {
        below_token: PersistToken,
    },
    /// An ordering that delivers a partial order (EPaxos, GeoPaxos+): what it
    /// delivered so far is a cut, the same set of commands at every replica that
    /// delivered this far (a barrier, ordered with every command, just ran), and
    /// `position` is where it stands (opaque bytes of the ordering's). A replica may
    /// checkpoint here, and only at such a point.
    Cut {
        position: Vec<u8>,
    },
    /// The ordering needs commands that every peer it asked has truncated: the replica
    /// must fetch a peer's checkpoint (state transfer); the ordering's
    /// `check_position` says which ones cover what it lacks.
    NeedCheckpoint,
}

/// Where a handler writes its actions.
pub type Outbox = Vec<Action>;

/// Send `msg` to each node in `to` (the driver encodes once per message it sees; the
/// clones share their value through `Arc`).
pub(crate) fn send_all(out: &mut Outbox, to: &[NodeId], msg: Msg) {
    if let Some((last, rest)) = to.split_last() {
        for &n in rest {
            out.push(Action::Send {
                to: n,
                msg: msg.clone(),
            });
        }
        out.push(Action::Send { to: *last, msg });
    }
}

/// Reasons a core ignored a message; counted per reason and logged by the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Drop {
    StaleBallot,
    NotForThisRole,
    UnknownInstance,
    AlreadyDecided,
    NoValue,
    QueueFull,
    FromNonMember,
    /// About an instance below the acceptor's truncation point.
    Truncated,
    /// A decision that contradicts one already known for the same instance: only a
    /// faulty or hostile peer sends one. The first decision stands; the simulator
    /// treats any such drop as an agreement violation.
    ConflictingDecision,
    /// A part of a split value that does not fit the parts an acceptor holds for its
    /// instance (another value id or part count in the same ballot): only a faulty
    /// peer sends one.
    ConflictingPart,
    /// Parts of an instance evicted unassembled: the acceptor was assembling too many
    /// instances at once (`ASSEMBLIES_MAX`).
    PartsEvicted,
    /// Batcher: a command refused because the buffer was full.
    BufferFull,
    /// Batcher: an acknowledgement of a batch not outstanding (a duplicate, or one
    /// acknowledged or abandoned already).
    StaleAck,
    /// Batcher: a batch given up after its resends.
    BatchAbandoned,
    /// Acceptor: a heartbeat left unanswered because its disk lags (writes waiting
    /// for several heartbeats with none completed), so that the leader lays out its
    /// Ring Paxos ring without it.
    DiskLagging,
    /// A message of another ordering epoch than the configuration this node knows
    /// (an older one's, stale; a newer one's, which it cannot read until it learns
    /// the change).
    OtherEpoch,
}

/// The [`DropCounts`] name of [`Drop::ConflictingDecision`].
pub const CONFLICTING_DECISION: &str = "conflicting_decision";

/// Per-reason counters of dropped inputs.
#[derive(Clone, Debug, Default)]
pub struct DropCounts(pub std::collections::BTreeMap<&'static str, u64>);

impl DropCounts {
    pub fn count(&mut self, why: Drop) {
        self.count_n(why, 1);
    }
    pub fn count_n(&mut self, why: Drop, n: u64) {
        if n > 0 {
            *self.0.entry(drop_name(why)).or_default() += n;
        }
    }
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

fn drop_name(d: Drop) -> &'static str {
    match d {
        Drop::StaleBallot => "stale_ballot",
        Drop::OtherEpoch => "other_epoch",
        Drop::NotForThisRole => "not_for_this_role",
        Drop::UnknownInstance => "unknown_instance",
        Drop::AlreadyDecided => "already_decided",
        Drop::NoValue => "no_value",
        Drop::QueueFull => "queue_full",
        Drop::ConflictingPart => "conflicting_part",
        Drop::PartsEvicted => "parts_evicted",
        Drop::FromNonMember => "from_non_member",
        Drop::Truncated => "truncated",
        Drop::DiskLagging => "disk_lagging",
        Drop::ConflictingDecision => CONFLICTING_DECISION,
        Drop::BufferFull => "buffer_full",
        Drop::StaleAck => "stale_ack",
        Drop::BatchAbandoned => "batch_abandoned",
    }
}

/// Tunables of the coordinator (cluster file `[batching]` and `[consensus]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// A value holds commands up to this many bytes (paper 001: 8 KiB packets).
    pub batch_bytes_max: usize,
    /// With instances in flight, a non-full batch waits at most this many ticks before
    /// it is proposed anyway (the time bound); 0 proposes as soon as the window allows.
    pub batch_delay_ticks: u64,
    /// A value that is not full is proposed no sooner than this many ticks after the
    /// previous new value (0: off). Under a load that decisions outpace, values would
    /// otherwise leave one per arrival of commands; this makes them fewer and fuller,
    /// for up to this much added latency. A full value never waits for it.
    pub value_interval_ticks: u64,
    /// Instances proposed and not yet decided, at most.
    pub window_instances_max: usize,
    /// Phase 1 is run ahead of time for ranges of this many instances.
    pub phase1_range_instances: u64,
    /// Re-send Phase 1A / 2A not answered after this many ticks.
    pub retransmit_ticks: u64,
    /// Send a heartbeat every this many ticks.
    pub heartbeat_ticks: u64,
    /// An acceptor that has not heard from the leader for this many ticks suspects it;
    /// the acceptor of rank r after the leader campaigns after r times this.
    pub election_timeout_ticks: u64,
    /// The initial coordinator ([`Membership::coordinator`]) takes the lead back from
    /// another leader it has heard steadily for [`HOME_RECLAIM_TIMEOUTS`] election
    /// timeouts ([`Elector`]): for an ordering whose leaders have homes (a GeoPaxos+
    /// serializer is led from its own region), so that a failover does not leave a
    /// stream led from afar for good. Off: the leader is whoever won last.
    pub home_leader: bool,
    /// The leader leaves out of its ring an acceptor it has not heard from in this many
    /// ticks (Ring Paxos).
    pub suspect_ticks: u64,
    /// Commands waiting for a batch, at most; beyond that new commands are refused.
    pub pending_commands_max: usize,
    /// Ordered time (`Value::time_ms`) advances by at most this much from one value to
    /// the next, whatever the coordinator's clock did in between: an outage (a failover,
    /// a paused leader, a lost quorum) or an idle spell does not count, so it cannot
    /// expire every client session at once when ordering resumes. The cluster file
    /// sets it to a quarter of `[sessions] lease_ms`; unbounded without leases.
    pub time_step_max_ms: u64,
    /// A leader that proposed nothing for this long proposes a value without commands,
    /// so that ordered time moves while the cluster is idle (`None`: never). Set for a
    /// service whose state keeps time (etcd's leases), with `time_step_max_ms` at most
    /// twice it.
    pub idle_value_ms: Option<u64>,
    /// Multi-Ring Paxos: a leader of a ring that proposed fewer than `λ·Δ` logical
    /// instances in an interval `Δ` proposes a skip instance worth the difference, so
    /// that learners merging this ring never wait on it for long ([`multiring`]).
    /// `None` (a single stream): never.
    pub skips: Option<multiring::SkipConfig>,
    /// Note every value proposed and every instance decided for the driver to drain
    /// ([`Coordinator::drain_observations`]): a driver with a wall clock turns them into
    /// commit-latency and batch-size metrics. Off in the simulator and in tests.
    pub observe: bool,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            batch_bytes_max: BATCH_BYTES_MAX_DEFAULT,
            batch_delay_ticks: 1,
            value_interval_ticks: 0,
            window_instances_max: 16,
            phase1_range_instances: 100_000,
            retransmit_ticks: 200,
            heartbeat_ticks: 50,
            election_timeout_ticks: 250,
            home_leader: false,
            suspect_ticks: 150,
            pending_commands_max: 100_000,
            time_step_max_ms: u64::MAX,
            idle_value_ms: None,
            skips: None,
            observe: false,
        }
    }
}

/// Tunables of a learner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LearnerConfig {
    /// Ask for missing instances once a gap has been open this many ticks.
    pub gap_ticks: u64,
    /// Instances asked for in one request, at most.
    pub learn_batch_instances_max: u64,
    /// Values held ahead of the delivery point, at most (bounds memory when far behind).
    pub buffered_instances_max: u64,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        LearnerConfig {
            gap_ticks: 20,
            learn_batch_instances_max: 256,
            buffered_instances_max: 100_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Membership {
        Membership {
            ring_decision: crate::RingDecision::Coordinator,
            protocol: Protocol::RingPaxos,
            acceptors: vec![1, 2, 3],
            coordinator: 2,
            learners: vec![4, 5],
            partitions: Default::default(),
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        }
    }

    /// A split value's commands, taken whole again (what a new ordering epoch carries
    /// over), are the commands it was split from: each partition gets the payload it
    /// had, a command spanning partitions stays one command, and none is lost or
    /// doubled.
    #[test]
    fn a_split_value_gives_its_commands_whole() {
        let map = PartitionMap::new(4, 400).unwrap();
        let cmd = |client: u64, body: Body| Command {
            client,
            seq: 1,
            session: 0,
            reply_to: 5,
            body,
            route: 0,
        };
        let b = |s: &'static str| Payload::from_static(s.as_bytes());
        let original = vec![
            cmd(
                1,
                Body::Whole {
                    groups: 0b0010,
                    payload: b("one"),
                },
            ),
            cmd(
                2,
                Body::Split {
                    groups: 0b1010,
                    payloads: vec![b("p1"), b("p3")],
                },
            ),
            cmd(
                3,
                Body::Whole {
                    groups: 0b0101,
                    payload: b("both"),
                },
            ),
        ];
        let vid = Vid {
            ballot: Ballot::new(1, 1),
            seq: 7,
        };
        let whole = Value::new(vid, original.clone());
        let split = whole.split(&map);
        assert!(split.is_split());
        assert!(
            split.commands.len() > original.len(),
            "sub-commands, one per part"
        );
        let back = split.whole_commands();
        assert_eq!(back.len(), original.len(), "{back:?}");
        for c in &original {
            let b = back.iter().find(|b| b.client == c.client).expect("carried");
            assert_eq!(b.body.groups(), c.body.groups());
            for p in 0..4 {
                assert_eq!(
                    b.body.payload_for(p),
                    c.body.payload_for(p),
                    "client {} p{p}",
                    c.client
                );
            }
        }
        assert_eq!(whole.whole_commands(), original, "a whole value: as it is");
    }

    #[test]
    fn check_refuses_what_no_correct_peer_sends() {
        let b = Ballot::new(3, 1);
        assert!(Msg::Phase1A {
            ballot: b,
            from: 1,
            to: 11
        }
        .check()
        .is_ok());
        assert!(Msg::Phase1A {
            ballot: b,
            from: 11,
            to: 1
        }
        .check()
        .is_err());
        assert!(Msg::LearnRequest {
            from: 5,
            to: u64::MAX
        }
        .check()
        .is_err());
        assert!(Msg::LearnRequest {
            from: 5,
            to: INSTANCE_MAX
        }
        .check()
        .is_ok());
        let big = Ballot::new(ROUND_MAX + 1, 1);
        assert!(Msg::Alive { ballot: big }.check().is_err());
        assert!(Msg::Decide {
            decided: vec![
                (2, Vid { ballot: b, seq: 1 }),
                (INSTANCE_MAX + 1, Vid { ballot: b, seq: 2 })
            ]
        }
        .check()
        .is_err());
        let chunk = |offset, total, len| Msg::CheckpointChunk {
            instance: 4,
            offset,
            total,
            crc32c: 0,
            data: vec![0; len],
        };
        assert!(chunk(0, 0, 0).check().is_ok(), "no checkpoint here");
        assert!(chunk(10, 20, 10).check().is_ok());
        assert!(chunk(15, 20, 10).check().is_err());
        assert!(chunk(u64::MAX, 20, 1).check().is_err());
        let c = partita_btree::service::command(1, 1, 4, &partita_btree::Op::Read { key: 1 });
        let batch = |seq, n| Msg::ForwardBatch {
            seq,
            cmds: vec![c.clone(); n],
        };
        assert!(batch(1, 3).check().is_ok());
        assert!(batch(0, 3).check().is_err(), "batches are numbered from 1");
        assert!(
            batch(1, 0).check().is_err(),
            "no batcher sends an empty batch"
        );
        assert!(batch(1, FORWARD_BATCH_COMMANDS_MAX + 1).check().is_err());
        assert!(Msg::ForwardAck { seq: 9 }.check().is_ok());
        assert!(Msg::ForwardAck { seq: 0 }.check().is_err());
    }

    #[test]
    fn clients_spread_over_batchers_then_rotate_to_the_acceptors() {
        let plain = m();
        assert_eq!(plain.client_entry(5), 2, "the coordinator without batchers");
        assert_eq!(plain.entry_rotation(), vec![1, 2, 3]);
        assert_eq!(plain.next_entry(3), 1);
        // Standalone batchers 6 and 7, and acceptor 3 as a batcher too.
        let mut b = m();
        b.batchers = vec![6, 7, 3];
        assert_eq!(b.validate(), Ok(()));
        assert_eq!(
            (0..4).map(|i| b.client_entry(i)).collect::<Vec<_>>(),
            vec![6, 7, 3, 6]
        );
        assert_eq!(b.entry_rotation(), vec![6, 7, 3, 1, 2]);
        assert_eq!(b.next_entry(3), 1);
        assert_eq!(b.next_entry(2), 6);
        assert_eq!(b.next_entry(99), 6, "an unknown entry starts over");
        assert_eq!(b.standalone_batchers().collect::<Vec<_>>(), vec![6, 7]);
        b.batchers = vec![6, 6];
        assert_eq!(b.validate().unwrap_err().field, "batchers");
    }

    #[test]
    fn ring_ends_at_the_coordinator() {
        assert_eq!(m().ring(), vec![3, 1, 2]);
        assert_eq!(m().ring_successor(3), Some(1));
        assert_eq!(m().ring_successor(1), Some(2));
        assert_eq!(m().ring_successor(2), None);
        assert_eq!(m().majority(), 2);
    }

    #[test]
    fn validate_names_the_problem() {
        let mut bad = m();
        bad.coordinator = 9;
        let e = bad.validate().unwrap_err();
        assert!(
            e.field == "coordinator" && e.message.contains("coordinator 9"),
            "{e}"
        );
        let mut bad = m();
        bad.acceptors = vec![1, 1];
        assert!(bad.validate().is_err());
        assert!(m().validate().is_ok());
    }
}

/// Split values (paper 001 §III-C as Partita sends it with Ring Paxos): whatever the
/// commands, a partition's part of the split value is what projecting the whole value
/// gives that partition, so learners, acceptors and the coordinator agree on every
/// partition's commands whichever form they hold.
#[cfg(test)]
mod split_tests {
    use super::*;
    use partita_btree::{BatchOp, Op};
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        let key = 0u64..130;
        prop_oneof![
            (key.clone(), any::<u64>()).prop_map(|(key, value)| Op::Insert { key, value }),
            key.clone().prop_map(|key| Op::Delete { key }),
            key.clone().prop_map(|key| Op::Read { key }),
            (key.clone(), key.clone()).prop_map(|(a, b)| Op::Query { min: a, max: b }),
            key.clone().prop_map(|key| Op::Next { key }),
            key.clone().prop_map(|key| Op::Prev { key }),
            prop::collection::vec(
                (key.clone(), any::<bool>()).prop_map(|(key, ins)| if ins {
                    BatchOp::Insert { key, value: key }
                } else {
                    BatchOp::Delete { key }
                }),
                0..8
            )
            .prop_map(Op::Batch),
        ]
    }

    proptest! {
        #[test]
        fn parts_are_projections(ops in prop::collection::vec(op(), 0..12), partitions in 1u32..5) {
            let map = PartitionMap::new(partitions, 120).unwrap();
            let vid = Vid { ballot: Ballot::new(1, 1), seq: 9 };
            let commands = ops
                .into_iter()
                .enumerate()
                .map(|(i, op)| {
                    partita_service::envelope::<partita_btree::BPlusTree>(i as u64 % 3, i as u64, 4, &op, &map)
                        .unwrap()
                })
                .collect();
            let whole = Value::new(vid, commands);
            let split = whole.split(&map);
            prop_assert!(split.parts_consistent());
            prop_assert_eq!(split.parts.len(), partitions as usize);
            prop_assert_eq!(split.split(&map), split.clone(), "splitting is idempotent");
            let parts: Vec<Value> = (0..partitions).map(|p| split.part(p).unwrap()).collect();
            prop_assert_eq!(Value::from_parts(vid, &parts), split.clone());
            for p in 0..partitions {
                prop_assert_eq!(split.project(&map, p), whole.project(&map, p));
                prop_assert_eq!(&parts[p as usize], &whole.project(&map, p));
                prop_assert!(!parts[p as usize].is_split());
            }
            prop_assert!(split.part(partitions).is_none());
        }
    }
}
