//! Multi-Ring Paxos behind the atomic-multicast seam (paper 002 §V-B and its reference
//! [18]; paper 003 §2.2): several Ring Paxos rings, each with its own acceptors,
//! coordinator, election and log, and at every replica one deterministic merge of the
//! rings it subscribes to.
//!
//! - **Rings and groups.** The cluster file lists the rings (`[[ordering.ring]]`): each
//!   names its acceptors (no node is an acceptor of two rings: a ring's acceptors, and
//!   their logs, are its own) and the groups it carries. Groups are the partitions of
//!   state partitioning (one group, 0, when the state is not partitioned), or, on
//!   replicas with P-SMR worker threads, the threads' groups (paper 002 §V-B: g_i for
//!   thread i, a ring each, and a ring that carries them all for g_all). A command's
//!   groups are [`Command::multicast_groups`]: its partitions, or the one thread its
//!   client proxy chose (CC-G or OC-G), else g_all. One ring carries every group (the
//!   cluster file insists: session opens and renewals go to every partition).
//! - **Subscriptions.** A replica subscribes to the rings that carry its partition
//!   (its own ring and the ring that spans every partition, in the usual layout) and
//!   merges those only ([`MultiRingSetup::subscribed`]). A ring's learners are its
//!   subscribers ([`MultiRingSetup::subscribers`]): the ring's membership lists only
//!   them, so its coordinator and acceptors send nothing (proposals, decisions,
//!   heartbeats) to any other replica, and a replica has no learner for a ring it does
//!   not subscribe to: a partition's replica receives nothing of another partition's
//!   ring. Unpartitioned, every ring carries the one group and every replica merges
//!   every ring. With P-SMR worker threads a replica hosts every thread, so it learns
//!   and merges every ring (see **P-SMR** for why the threads do not merge their two
//!   rings each).
//! - **Multicast.** A command goes to the ring that carries all of its groups with the
//!   fewest groups (a single-partition command to its partition's ring, one for several
//!   partitions to a ring that spans them); among equals, by client, so that one
//!   client's commands keep to one ring while clients spread over all (an unpartitioned
//!   cluster with several rings: more coordinators, more throughput). A node that
//!   leads the ring orders it; one that learns the ring forwards it to the leader it
//!   knows; one outside the ring forwards it to every acceptor of the ring (only the
//!   leader takes a forwarded command).
//! - **Messages.** Everything a ring's roles send travels as [`Msg::OnRing`] with the
//!   ring's id; a node routes it to its part in that ring.
//! - **The merge** ([`RingMerge`]): round-robin in ascending ring order, `M` logical
//!   instances per ring per round; a coordinator whose ring falls short of `λ` logical
//!   instances per second proposes skip instances (`SkipPacer`), so an idle ring never
//!   stalls the merge; a replica whose merge waits for an idle ring while other rings'
//!   values queue asks that ring's leader for its skip at once (skips on demand,
//!   [`RingMerge::wanted`], `Msg::SkipRequest`). A replica numbers what its merge delivers 1, 2, … (skips deliver
//!   nothing): that is the instance its replica executes and checkpoints, and it
//!   differs between partitions, whose merges hold different rings.
//! - **Execution names.** What clients and sessions need of an execution is a name that
//!   is the same at every partition that runs it: a client matches the replies of a
//!   command for several partitions, and the answers to a session open, by
//!   `Reply::instance`, and a session is named by where its open ran. A value's name
//!   is its place in the round-robin of *every* ring of the cluster
//!   ([`partita_consensus::multiring::slot_name`]: round k, the ring's rank r among the
//!   R rings, place j of its turn: `(k·R + r)·M + j + 1`). Every merge of any subset of
//!   the rings visits a ring's logical instances in the same rounds and places, so the
//!   name of a value is the same at every replica that delivers it, and names grow
//!   along every replica's delivery, as one stream's instances do: every comparison a
//!   replica makes between names (a session open against the session it replaces,
//!   S-SMR's command references) means what it meant with one numbering. The ordering
//!   delivers each value with its name ([`Action::Deliver`]); the replica answers and
//!   opens sessions under it, and checkpoints record the highest one.
//! - **Signals.** A partition that runs a command for several partitions before the
//!   others have merged it could let a command ordered later, on another partition's
//!   own ring, land before it there: a client that saw the first partition's effect
//!   could then issue a command that misses it at another partition (the swarm found
//!   such a history). As S-SMR does (paper 003 §3.2), partitions exchange signals: a
//!   replica tells the replicas of the partitions it shares rings with how far its
//!   merge reached ([`Msg::Merged`], whenever that passes or reaches a value of a
//!   shared ring), and a value of a shared ring with commands for this partition
//!   waits at the head of the merge until every other partition its ring carries said
//!   its merge reached the value's name. Then every ring of every partition the value
//!   goes to has decided everything before it, so nothing ordered later lands before
//!   it anywhere. A replica that waits [`SIGNAL_ASK_TICKS`] asks again (`ask`), and
//!   is answered by those that reached it (a signal lost, or sent before a restart).
//!   The wait is at the merge's head, so the merge's position (a checkpoint's) is
//!   always that of what was delivered. The ring's partitions are all waited for, not
//!   only those the value's commands address (a replica sees only its partition's
//!   part of a value). Unpartitioned and under P-SMR there are no signals.
//! - **Time.** Replicas expire client sessions by the ordered time of the values they
//!   run, so every partition a command reaches must have expired the same sessions
//!   before it. Only values of the rings that carry every group move the merged
//!   stream's time (to the newest such value's, never back): every replica merges
//!   those rings, and a ring's values have the same of them before them at every
//!   replica that merges it (the merges are projections of one sequence). A value of
//!   another ring runs at that time too. Unpartitioned (every ring carries every
//!   group) that is the newest time of all, as before.
//! - **Checkpoints.** The merge position (and the time) is the ordering's position
//!   ([`AtomicMulticast::position`]), stored in every checkpoint; a replica restored from
//!   one (restart or state transfer, always from a replica of its own partition) resumes
//!   the same merge of the same rings. Each subscribed ring's acceptors are told the
//!   ring instance up to which the checkpoint covers that ring; a ring's acceptors
//!   count only the ring's learners and truncate below what a majority of each carried
//!   partition's learners hold (partitions the ring does not carry have no learner
//!   there and hold nothing back). A ring learner that finds its ring's log truncated
//!   below what it needs asks the node for a state transfer.
//! - **Reports.** The merged sequence is one stream per partition in
//!   [`AtomicMulticast::report`] (id `MERGED_STREAM - partition`): replicas of one
//!   partition deliver the same sequence, replicas of different partitions are not
//!   compared.
//!
//! - **P-SMR.** Thread i of the paper's replica learns g_i's ring and g_all's and
//!   merges the two round-robin. Here every replica merges every ring and hands the
//!   merged sequence to its threads, each taking its group's commands and g_all's:
//!   the projection of a round-robin merge onto two of its rings is the round-robin
//!   merge of those two, so every thread sees the order the paper's would. What
//!   differs is waiting: a thread's commands wait in the merge for every ring's
//!   position, not only g_all's (skips bound that wait, as for partitions). Merging
//!   per thread would let replicas deliver a client's commands on two threads' rings
//!   in different orders (a command sent after another was answered can land in an
//!   earlier round of its own ring), and the replica keeps one exactly-once record
//!   per client for all its threads: the replica that ran the first command first
//!   would run both, one that ran the second first would drop the first as old. The
//!   threads could merge their own rings only with exactly-once records per thread
//!   group, a change to the P-SMR replica not made here.
//!
//! - **Membership.** Replicas are added and removed at run time as on one stream (see
//!   `crate::members`): a change goes to the ring that spans every partition, which
//!   every replica merges, and records its execution name, the same at every
//!   partition. Each ring's learners follow the replicas of the partitions it carries
//!   (`PaxosOrdering::carrying`), and the signal peers are rebuilt from the same
//!   members. The rings' acceptors do not change ([`AtomicMulticast::acceptor_changes`]).
//!
//! Not yet (refused by the cluster file's checks): speculative execution and
//! batchers over Multi-Ring Paxos.

use partita_consensus::multiring::{
    slot_name, Head, MergePosition, Merged, RingId, RingItem, RingMerge, SkipConfig,
};
use partita_consensus::{
    AcceptorRecord, Action, Membership, Msg, Outbox, PersistToken, TickDue, Value,
};
use partita_types::choice::FieldError;
use partita_types::members::Members;
use partita_types::{Command, Instance, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ordering::{AtomicMulticast, OrderingReport, PaxosOrdering, StreamReport};
use crate::{NodeSetup, UnsafeBugs};

/// The stream id of partition 0's merged sequence in [`AtomicMulticast::report`]
/// (partition p's is `MERGED_STREAM - p`; rings are numbered below
/// [`RING_ID_MAX`]).
pub const MERGED_STREAM: u32 = u32::MAX;
/// The largest ring id a node takes (ids above are the merged streams' in reports).
pub const RING_ID_MAX: RingId = MERGED_STREAM - 64;

/// One ring of the cluster file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingSpec {
    pub id: RingId,
    /// Its acceptors, in ring order (acceptors of no other ring).
    pub acceptors: Vec<NodeId>,
    /// Its initial coordinator (one of its acceptors).
    pub coordinator: NodeId,
    /// The groups (partitions) it carries, one bit each.
    pub groups: u64,
}

/// Multi-Ring Paxos for a node (cluster file `[ordering] protocol = "multi-ring"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiRingSetup {
    /// Ascending by id.
    pub rings: Vec<RingSpec>,
    /// `M`: logical instances of each ring per round of the merge.
    pub m: u64,
    /// λ and Δ of every ring's coordinator.
    pub skips: SkipConfig,
    /// P-SMR worker threads of the replicas (0: none): with them the rings' groups
    /// are the threads' (a ring per g_i and one for g_all), not partitions.
    pub psmr_threads: usize,
}

impl MultiRingSetup {
    /// Rings that carry every group of `groups`.
    pub fn carriers(&self, groups: u64) -> impl Iterator<Item = &RingSpec> {
        self.rings
            .iter()
            .filter(move |r| r.groups & groups == groups)
    }

    /// The ring a command for `groups` from `client` goes to (see the module doc).
    pub fn ring_for(&self, groups: u64, client: u64) -> Option<RingId> {
        let fewest = self.carriers(groups).map(|r| r.groups.count_ones()).min()?;
        let best = || {
            self.carriers(groups)
                .filter(move |r| r.groups.count_ones() == fewest)
        };
        let n = best().count() as u64;
        best().nth((client % n) as usize).map(|r| r.id)
    }

    /// Every group a ring carries.
    pub fn all_groups(&self) -> u64 {
        self.rings.iter().fold(0, |g, r| g | r.groups)
    }

    /// The groups replica `node` learns for: its partition's, or with P-SMR worker
    /// threads every thread's (it hosts them all).
    pub fn groups_of(&self, membership: &Membership, node: NodeId) -> u64 {
        self.groups_of_partition(membership.partition_of(node))
    }

    /// The groups a replica of partition `p` learns for (see
    /// [`MultiRingSetup::groups_of`]).
    pub fn groups_of_partition(&self, p: partita_types::PartitionId) -> u64 {
        if self.psmr_threads > 0 {
            return self.all_groups();
        }
        assert!(p < 64, "partition {p}: a group mask has 64 bits");
        1u64 << p
    }

    /// The rings replica `node` merges, ascending: those that carry one of its groups
    /// (see the module doc).
    pub fn subscribed(&self, membership: &Membership, node: NodeId) -> Vec<RingId> {
        self.subscribed_by(membership.partition_of(node))
    }

    /// The rings a replica of partition `p` merges, ascending.
    pub fn subscribed_by(&self, p: partita_types::PartitionId) -> Vec<RingId> {
        let groups = self.groups_of_partition(p);
        self.rings
            .iter()
            .filter(|r| r.groups & groups != 0)
            .map(|r| r.id)
            .collect()
    }

    /// The partitions whose replicas learn ring `spec` (one bit each; `None`: every
    /// replica, under P-SMR worker threads).
    fn carried(&self, spec: &RingSpec) -> Option<u64> {
        (self.psmr_threads == 0).then_some(spec.groups)
    }

    /// The learners of ring `spec`: the replicas that subscribe to it, in the order of
    /// `membership.learners`.
    pub fn subscribers(&self, spec: &RingSpec, membership: &Membership) -> Vec<NodeId> {
        membership
            .learners
            .iter()
            .copied()
            .filter(|&l| spec.groups & self.groups_of(membership, l) != 0)
            .collect()
    }

    /// Whether ring `ring` carries every group: every replica merges it, and its
    /// values move the merged stream's time (see the module doc).
    pub fn spans_all(&self, ring: RingId) -> bool {
        let all = self.all_groups();
        self.rings
            .iter()
            .any(|r| r.id == ring && r.groups & all == all)
    }

    /// The name of a value a merge delivered (see the module doc and
    /// [`slot_name`]): the same at every replica whose merge has its ring.
    pub fn name<V>(&self, merged: &Merged<V>) -> Instance {
        let rank = self
            .rings
            .binary_search_by_key(&merged.ring, |r| r.id)
            .expect("a merged ring is one of the cluster's");
        slot_name(merged.round, merged.offset, rank, self.rings.len(), self.m)
    }

    /// The stream id of the merged sequence of the replicas of `partition` in
    /// [`AtomicMulticast::report`].
    pub fn merged_stream(partition: partita_types::PartitionId) -> u32 {
        MERGED_STREAM - partition.min(MERGED_STREAM - RING_ID_MAX - 1)
    }
}

/// What a checkpoint stores of the merge: where it stands and the merged stream's time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    merge: MergePosition,
    time_ms: u64,
}

struct Ring {
    spec: RingSpec,
    /// This node's roles in the ring (possibly none).
    ord: PaxosOrdering,
    /// The ring's learners now: its subscribers, as the membership changes left them.
    learners: Vec<NodeId>,
}

/// Multi-Ring Paxos: this node's part in every ring, and the merge of the rings its
/// replica subscribes to (see the module documentation).
pub struct MultiRingOrdering {
    id: NodeId,
    setup: MultiRingSetup,
    /// Ascending by id, every ring of the cluster.
    rings: Vec<Ring>,
    /// The merge of the rings this replica subscribes to (only at a replica).
    merge: Option<RingMerge<Arc<Value>>>,
    /// The merged stream's id in reports (one per partition).
    stream: u32,
    /// Last position of the merged stream delivered.
    delivered: Instance,
    /// The highest execution name delivered (names grow along the merge; see the
    /// module doc).
    named: Instance,
    /// The merged stream's time (see the module doc).
    time_ms: u64,
    /// Signals (see the module doc): what this replica waits for and tells.
    signals: Signals,
    /// Skips on demand: per ring, the last position asked for and the tick.
    skip_asks: BTreeMap<RingId, (u64, u64)>,
    tick: u64,
    counters: BTreeMap<&'static str, u64>,
    /// The cluster file's membership (every ring's acceptors, every replica).
    file: Membership,
    /// The replicas changed at run time, newest known (epoch 0: the cluster file's).
    /// Changes are ordered on a ring that every replica merges; each ring's learners
    /// follow the replicas of the partitions it carries, and signals go to the
    /// replicas of the partitions a replica shares rings with as they are now.
    members: Members,
}

/// Ticks a replica waits at a value for other partitions' signals before it asks
/// them again (and again, as long as it waits).
pub const SIGNAL_ASK_TICKS: u64 = 20;

/// Ticks a replica waits before it asks a ring's leader again for the same skip (the
/// request or the skip may have been lost, or the leader changed).
pub const SKIP_ASK_AGAIN_TICKS: u64 = 10;

/// A replica's signals (see the module doc): per ring (ascending, as the cluster's),
/// the other partitions it carries; the replicas of those partitions with their
/// partition; the highest name each partition said its merge reached; what this
/// replica last said its merge reached.
#[derive(Default)]
struct Signals {
    others: Vec<u64>,
    peers: BTreeMap<NodeId, partita_types::PartitionId>,
    reached: BTreeMap<partita_types::PartitionId, Instance>,
    told: Instance,
    /// The value waiting at the merge's head for signals: its name, the partitions it
    /// waits for, and since when (tick).
    waiting: Option<(Instance, u64, u64)>,
    asked_tick: u64,
}

impl Signals {
    /// What replica `node` of partition-ring layout `rings` exchanges signals about:
    /// nothing unpartitioned or under P-SMR (one replica hosts every group).
    fn new(
        rings: &MultiRingSetup,
        membership: &Membership,
        partition: partita_types::PartitionId,
    ) -> Signals {
        let mut s = Signals::default();
        if rings.psmr_threads > 0 || !membership.is_partitioned() {
            s.others = vec![0; rings.rings.len()];
            return s;
        }
        let mine = rings.groups_of_partition(partition);
        s.others = rings
            .rings
            .iter()
            .map(|r| {
                if r.groups & mine != 0 {
                    r.groups & !mine
                } else {
                    0
                }
            })
            .collect();
        s.set_peers(membership);
        s
    }

    /// The replicas of the partitions this one exchanges signals with, as `membership`
    /// places them (learners included: what they say of their merge is as true).
    fn set_peers(&mut self, membership: &Membership) {
        let all = self.others.iter().fold(0, |a, o| a | o);
        self.peers.clear();
        for q in partita_types::mask_partitions(all) {
            for l in membership.learners_of(q) {
                self.peers.insert(l, q);
            }
        }
    }

    /// Whether every partition of `others` said its merge reached `name`.
    fn reached_all(&self, others: u64, name: Instance) -> bool {
        partita_types::mask_partitions(others)
            .into_iter()
            .all(|q| self.reached.get(&q).is_some_and(|&n| n >= name))
    }
}

impl MultiRingOrdering {
    /// The roles of node `setup.id` in every ring, its acceptor recovered from
    /// `recovered` (the records of the one ring it accepts for), its merge resumed from
    /// `position` (a checkpoint's, empty for a fresh start) at merged instance
    /// `next_deliver`.
    pub fn new(
        setup: &NodeSetup,
        rings: &MultiRingSetup,
        recovered: Vec<AcceptorRecord>,
        next_deliver: Instance,
        position: &[u8],
        bugs: &UnsafeBugs,
        out: &mut Outbox,
    ) -> Result<MultiRingOrdering, FieldError> {
        let id = setup.id;
        if let Some(r) = rings.rings.iter().find(|r| r.id > RING_ID_MAX) {
            return Err(FieldError::new(
                "ordering.ring.id",
                format!("ring {}: ring ids go up to {RING_ID_MAX}", r.id),
            ));
        }
        let mut merge = None;
        let mut time_ms = 0;
        if setup.replica {
            let subscribed = rings.subscribed_by(setup.partition);
            let mut mg = if position.is_empty() {
                RingMerge::new(&subscribed, rings.m)?
            } else {
                let p = decode_position(position)?;
                time_ms = p.time_ms;
                RingMerge::resume(p.merge, rings.m)?
            };
            if !mg.rings().eq(subscribed.iter().copied()) {
                return Err(FieldError::new(
                    "multiring",
                    "the checkpoint's merge is of other rings than this replica subscribes to",
                ));
            }
            mg.unsafe_reverse_order = bugs.merge_order && id % 2 == 1;
            merge = Some(mg);
        }
        let mut recovered = Some(recovered);
        let mut o = MultiRingOrdering {
            id,
            setup: rings.clone(),
            rings: Vec::new(),
            merge,
            stream: MultiRingSetup::merged_stream(setup.partition),
            delivered: next_deliver - 1,
            named: 0,
            time_ms,
            signals: Signals::new(rings, &setup.membership, setup.partition),
            skip_asks: BTreeMap::new(),
            tick: 0,
            counters: BTreeMap::new(),
            file: setup.membership.clone(),
            members: Members::default(),
        };
        for spec in &rings.rings {
            let ring_setup = ring_setup(setup, rings, spec);
            let records = if ring_setup.acceptor {
                recovered.take().unwrap_or_default()
            } else {
                Vec::new()
            };
            let next = o
                .merge
                .as_ref()
                .and_then(|mg| mg.next_instance(spec.id))
                .unwrap_or(1);
            let mut inner = Vec::new();
            let carried = rings.carried(spec);
            let ord =
                PaxosOrdering::carrying(&ring_setup, carried, records, next, bugs, &mut inner);
            // The members this node's acceptor recorded (before any replica tells it).
            if ord.members().is_some_and(|m| m.epoch > o.members.epoch) {
                o.members = ord.members().cloned().unwrap_or_default();
            }
            o.rings.push(Ring {
                spec: spec.clone(),
                learners: ord.membership().learners,
                ord,
            });
            o.absorb(spec.id, inner, out);
        }
        if o.members.epoch > 0 {
            let members = std::mem::take(&mut o.members);
            o.adopt_members(&members, out);
        }
        Ok(o)
    }

    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    fn ring_index(&self, ring: RingId) -> Option<usize> {
        self.rings.binary_search_by_key(&ring, |r| r.spec.id).ok()
    }

    /// The merge (at a replica), for status and tests.
    pub fn merge(&self) -> Option<&RingMerge<Arc<Value>>> {
        self.merge.as_ref()
    }

    /// This node's roles in ring `ring`.
    pub fn ring(&self, ring: RingId) -> Option<&PaxosOrdering> {
        self.ring_index(ring).map(|i| &self.rings[i].ord)
    }

    /// The ring this node is an acceptor of (and may coordinate), with its roles there.
    pub fn accepting_ring(&self) -> Option<(RingId, &PaxosOrdering)> {
        self.rings
            .iter()
            .find(|r| r.ord.acceptor().is_some())
            .map(|r| (r.spec.id, &r.ord))
    }

    /// Every ring's id with this node's roles in it.
    pub fn rings(&self) -> impl Iterator<Item = (RingId, &PaxosOrdering)> {
        self.rings.iter().map(|r| (r.spec.id, &r.ord))
    }

    /// Turn ring `ring`'s actions into this node's: messages go out in the ring's
    /// envelope, decided values into the merge, whatever the merge can deliver out.
    fn absorb(&mut self, ring: RingId, inner: Outbox, out: &mut Outbox) {
        for a in inner {
            match a {
                Action::Send { to, msg } => out.push(Action::Send {
                    to,
                    msg: Msg::OnRing {
                        ring,
                        msg: Box::new(msg),
                    },
                }),
                Action::Deliver {
                    instance, value, ..
                } => {
                    let Some(mg) = self.merge.as_mut() else {
                        self.count("dropped_deliver_without_merge");
                        continue;
                    };
                    if let Err(e) = mg.push(ring, instance, RingItem::of(value)) {
                        // A ring learner hands its instances in order, once: a bug.
                        panic!("ring {ring} delivered out of order to the merge: {e}");
                    }
                }
                Action::Propose { .. } => self.count("dropped_propose_multiring"),
                a @ (Action::Persist { .. } | Action::TruncateLog { .. }) => out.push(a),
                Action::Cut { .. } | Action::NeedCheckpoint => {
                    unreachable!("a ring delivers a total order")
                }
            }
        }
        self.pop_merged(out);
    }

    /// Deliver everything the merge can, numbered on from `delivered`, each value
    /// with its name (see the module doc). A value of a ring this partition shares
    /// with others, with commands for it, waits at the merge's head until every other
    /// partition the ring carries said its merge reached it (signals).
    fn pop_merged(&mut self, out: &mut Outbox) {
        let Some(mg) = self.merge.as_mut() else {
            return;
        };
        let reversed = mg.unsafe_reverse_order;
        let (setup, signals) = (&self.setup, &self.signals);
        let others_of = |ring: RingId| {
            let rank = setup
                .rings
                .binary_search_by_key(&ring, |r| r.id)
                .expect("a merged ring is one of the cluster's");
            signals.others[rank]
        };
        let mut shared = false;
        let mut waiting = None;
        let mut wanted = None;
        loop {
            let head = mg.pop_merged_if(|m| {
                let others = others_of(m.ring);
                others == 0
                    || m.value.commands.is_empty()
                    || signals.reached_all(others, setup.name(m))
            });
            let merged = match head {
                Head::Taken(merged) => merged,
                Head::Refused(at) => {
                    shared = true;
                    waiting = Some((setup.name(&at), others_of(at.ring)));
                    break;
                }
                Head::Waiting => {
                    wanted = mg.wanted();
                    break;
                }
            };
            let name = setup.name(&merged);
            // Names grow along the merge (the planted `merge-order` bug takes the
            // rings' turns backwards, and saturated names, past what skips of more
            // rounds than a u64 counts reach, stop growing).
            assert!(
                reversed || name > self.named || name == u64::MAX,
                "ring {} instance {}: name {name} after {}",
                merged.ring,
                merged.instance,
                self.named
            );
            self.named = self.named.max(name);
            shared |= others_of(merged.ring) != 0;
            // Time moves with the values of the rings that carry every group only,
            // so that every partition runs a command at the same time (see the
            // module doc); never back.
            let value = merged.value;
            if setup.spans_all(merged.ring) {
                self.time_ms = self.time_ms.max(value.time_ms);
            }
            let value = if value.time_ms == self.time_ms {
                value
            } else {
                let mut v = (*value).clone();
                v.time_ms = self.time_ms;
                Arc::new(v)
            };
            self.delivered += 1;
            out.push(Action::Deliver {
                instance: self.delivered,
                name,
                value,
            });
        }
        self.signals.waiting = match (waiting, self.signals.waiting) {
            (None, _) => None,
            (Some((name, _)), Some(w)) if w.0 == name => Some(w),
            (Some((name, others)), _) => {
                self.count("merge_waits_for_signals");
                Some((name, others, self.tick))
            }
        };
        if shared {
            self.tell(out);
        }
        if let Some((ring, to)) = wanted {
            self.ask_skip(ring, to, out);
        }
    }

    /// Skips on demand (see the module doc): the merge waits for `ring`, which has
    /// nothing decided to give, while other rings' values wait behind it; ask the
    /// ring's leader to skip to `to` now rather than at the end of its pacing interval.
    /// At most once a tick per ring, and the same position again only after
    /// [`SKIP_ASK_AGAIN_TICKS`].
    fn ask_skip(&mut self, ring: RingId, to: u64, out: &mut Outbox) {
        if let Some(&(last, at)) = self.skip_asks.get(&ring) {
            let again = self.tick >= at + SKIP_ASK_AGAIN_TICKS;
            let further = to > last && self.tick > at;
            if !again && !further {
                return;
            }
        }
        let Some(i) = self.ring_index(ring) else {
            return;
        };
        let Some(leader) = self.rings[i].ord.leader() else {
            self.count("skip_asks_without_a_leader");
            return;
        };
        self.skip_asks.insert(ring, (to, self.tick));
        self.count("skip_asks_sent");
        out.push(Action::Send {
            to: leader,
            msg: Msg::OnRing {
                ring,
                msg: Box::new(Msg::SkipRequest { to }),
            },
        });
    }

    /// How far this replica's merge reached (what signals say): every place of the
    /// round-robin below the name returned was taken, and the value of that name, if
    /// any, is merged or waits at the head (0: nothing yet, or no merge here).
    fn reach(&self) -> Instance {
        let Some(mg) = &self.merge else {
            return 0;
        };
        if let Some((name, _, _)) = self.signals.waiting {
            return name;
        }
        let (ring, round, offset) = mg.cursor();
        let next = self.setup.name(&Merged {
            ring,
            instance: 0,
            round,
            offset,
            value: (),
        });
        next - 1
    }

    /// Tell the replicas of the partitions this one shares rings with how far its
    /// merge reached, if that moved since it last did (see the module doc).
    fn tell(&mut self, out: &mut Outbox) {
        let reach = self.reach();
        let s = &mut self.signals;
        if reach <= s.told {
            return;
        }
        s.told = reach;
        for &peer in s.peers.keys() {
            out.push(Action::Send {
                to: peer,
                msg: Msg::Merged {
                    name: reach,
                    ask: false,
                },
            });
        }
        *self.counters.entry("merge_signals_sent").or_default() += s.peers.len() as u64;
    }

    /// A value waited at the merge's head for [`SIGNAL_ASK_TICKS`]: ask the
    /// partitions that have not said they reached it (a signal may have been lost,
    /// or sent before a restart here).
    fn ask(&mut self, out: &mut Outbox) {
        let reach = self.reach();
        let s = &mut self.signals;
        let Some((name, others, since)) = s.waiting else {
            return;
        };
        let last = since.max(s.asked_tick);
        if self.tick.saturating_sub(last) < SIGNAL_ASK_TICKS {
            return;
        }
        s.asked_tick = self.tick;
        let mut asked = 0;
        for (&peer, q) in &s.peers {
            let behind = others & (1u64 << q) != 0 && s.reached.get(q).is_none_or(|&n| n < name);
            if behind {
                out.push(Action::Send {
                    to: peer,
                    msg: Msg::Merged {
                        name: reach,
                        ask: true,
                    },
                });
                asked += 1;
            }
        }
        *self.counters.entry("merge_signal_asks_sent").or_default() += asked;
    }

    /// A signal from replica `from` (see the module doc).
    fn on_signal(&mut self, from: NodeId, name: Instance, ask: bool, out: &mut Outbox) -> bool {
        let Some(&q) = self.signals.peers.get(&from) else {
            self.count("dropped_signal_not_a_peer");
            return false;
        };
        self.count("merge_signals_received");
        let r = self.signals.reached.entry(q).or_default();
        *r = (*r).max(name);
        self.pop_merged(out);
        // Answered after merging what the signal let through: the answer says as much
        // as it can.
        let reach = self.reach();
        if ask && reach >= name && reach > 0 {
            out.push(Action::Send {
                to: from,
                msg: Msg::Merged {
                    name: reach,
                    ask: false,
                },
            });
            self.count("merge_signal_answers_sent");
        }
        true
    }

    /// The position in a checkpoint's ordering section.
    fn encode_position(&self) -> Vec<u8> {
        match &self.merge {
            None => Vec::new(),
            Some(mg) => partita_types::encode(&Position {
                merge: mg.position(),
                time_ms: self.time_ms,
            }),
        }
    }
}

fn decode_position(bytes: &[u8]) -> Result<Position, FieldError> {
    partita_types::decode::<Position>(bytes).map_err(|e| {
        FieldError::new(
            "checkpoint",
            format!("its Multi-Ring Paxos merge position does not decode: {e}"),
        )
    })
}

/// Node `setup.id`'s setup within one ring: the ring's acceptors and coordinator, its
/// subscribers its learners (the replicas of the partitions it carries, or every
/// replica under P-SMR), each carried partition's part of a value to its replicas (a
/// part with no command of theirs still counts as the instance it is in the merge),
/// and acceptors that truncate below what a majority of each carried partition's
/// replicas checkpointed. The partitions it does not carry keep their key ranges in
/// the layout (values split alike at every ring) but list no replica: nothing goes to
/// them, and they hold no truncation back.
fn ring_setup(setup: &NodeSetup, rings: &MultiRingSetup, spec: &RingSpec) -> NodeSetup {
    let m = &setup.membership;
    let learners = rings.subscribers(spec, m);
    let mut partitions = m.partitions.clone();
    if rings.psmr_threads == 0 {
        for (p, replicas) in partitions.replicas.iter_mut().enumerate() {
            if p >= 64 || spec.groups & (1u64 << p) == 0 {
                replicas.clear();
            }
        }
    }
    let mut coordinator_config = setup.coordinator_config.clone();
    coordinator_config.skips = Some(rings.skips.clone());
    NodeSetup {
        membership: Membership {
            ring_decision: m.ring_decision,
            protocol: m.protocol,
            acceptors: spec.acceptors.clone(),
            coordinator: spec.coordinator,
            learners: learners.clone(),
            partitions,
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        },
        acceptor: spec.acceptors.contains(&setup.id),
        // Its subscribers, and a replica that joins at run time (in no list of the
        // file) to a partition it carries.
        replica: learners.contains(&setup.id)
            || (setup.replica && spec.groups & rings.groups_of_partition(setup.partition) != 0),
        partition: setup.partition,
        batcher: false,
        coordinator_config,
        speculative: false,
        early_replies: false,
        psmr: None,
        ordering: crate::OrderingSetup::Paxos,
        ..setup.clone()
    }
}

impl AtomicMulticast for MultiRingOrdering {
    fn multicast(
        &mut self,
        cmd: Command,
        _access: Option<partita_smr::Access>,
        out: &mut Outbox,
    ) -> Result<(), String> {
        let groups = cmd.multicast_groups(self.setup.psmr_threads);
        let Some(ring) = self.setup.ring_for(groups, cmd.client) else {
            return Err(format!(
                "no ring carries every {} of {:?}: this cluster cannot order the command \
                 (add a ring that spans them)",
                if self.setup.psmr_threads > 0 {
                    "thread group"
                } else {
                    "partition"
                },
                partita_types::mask_partitions(groups)
            ));
        };
        let i = self.ring_index(ring).expect("ring_for names a ring");
        let r = &mut self.rings[i];
        let mut inner = Vec::new();
        let knows_leader = r.ord.coordinator().is_some() || r.ord.leader().is_some();
        if knows_leader {
            r.ord.multicast(cmd, None, &mut inner)?;
        } else {
            // No part in the ring: only its leader takes a forwarded command.
            for &a in &r.spec.acceptors {
                inner.push(Action::Send {
                    to: a,
                    msg: Msg::Forward { cmd: cmd.clone() },
                });
            }
            self.count("requests_forwarded_to_ring");
        }
        self.absorb(ring, inner, out);
        Ok(())
    }

    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) -> bool {
        if let Msg::Merged { name, ask } = msg {
            return self.on_signal(from, name, ask, out);
        }
        if let Msg::Members(m) = msg {
            if self.adopt_members(&m, out) {
                self.count("members_adopted_from_peers");
            }
            return true;
        }
        let Msg::OnRing { ring, msg } = msg else {
            self.count("dropped_not_on_a_ring");
            return false;
        };
        let Some(i) = self.ring_index(ring) else {
            self.count("dropped_unknown_ring");
            return false;
        };
        // A ring's roles hear from its acceptors and learners; a command from anyone.
        let r = &self.rings[i];
        let member = r.spec.acceptors.contains(&from)
            || r.learners.contains(&from)
            || matches!(*msg, Msg::Forward { .. } | Msg::ForwardBatch { .. });
        if !member {
            self.count("dropped_ring_not_a_member");
            return false;
        }
        // A node with no role in the ring (a replica of a partition it does not
        // carry) is sent nothing of it but forwarded commands, which only a leader
        // takes: whatever else comes is a peer's mistake.
        let no_role = r.ord.acceptor().is_none() && r.ord.learner().is_none();
        if no_role && !matches!(*msg, Msg::Forward { .. } | Msg::ForwardBatch { .. }) {
            self.count("dropped_ring_not_subscribed");
            return false;
        }
        // A ring learner that needs what its ring truncated: the replica fetches a
        // checkpoint that covers it (see the module doc).
        if let Msg::Truncated { below } = *msg {
            if r.ord.delivered_up_to().is_some_and(|d| d + 1 < below) {
                self.count("ring_truncated_transfer");
                out.push(Action::Send {
                    to: self.id,
                    msg: Msg::Truncated {
                        below: self.delivered + 2,
                    },
                });
            }
        }
        let r = &mut self.rings[i];
        let mut inner = Vec::new();
        let handled = r.ord.on_message(from, *msg, &mut inner);
        self.absorb(ring, inner, out);
        handled
    }

    fn tick_due(&self) -> TickDue {
        let mut due = self
            .rings
            .iter()
            .fold(TickDue::NEVER, |d, r| d.min(r.ord.tick_due()));
        if let Some((_, _, since)) = self.signals.waiting {
            let last = since.max(self.signals.asked_tick);
            due = due.tick(last.saturating_add(SIGNAL_ASK_TICKS));
        }
        // A merge waiting for an idle ring asks its leader for a skip again (`ask_skip`).
        if let Some((ring, to)) = self.merge.as_ref().and_then(|m| m.wanted()) {
            due = match self.skip_asks.get(&ring) {
                None => TickDue::NEXT,
                Some(&(last, at)) if to > last => due.tick(at.saturating_add(1)),
                Some(&(_, at)) => due.tick(at.saturating_add(SKIP_ASK_AGAIN_TICKS)),
            };
        }
        due
    }

    fn on_tick(&mut self, tick: u64, now_ms: u64, out: &mut Outbox) {
        self.tick = tick;
        for i in 0..self.rings.len() {
            let mut inner = Vec::new();
            self.rings[i].ord.on_tick(tick, now_ms, &mut inner);
            let ring = self.rings[i].spec.id;
            self.absorb(ring, inner, out);
        }
        self.ask(out);
    }

    fn on_persisted(&mut self, tokens: &[PersistToken], out: &mut Outbox) {
        let i = self
            .rings
            .iter()
            .position(|r| r.ord.acceptor().is_some())
            .expect("persist completions go to the ring this node accepts for");
        let mut inner = Vec::new();
        self.rings[i].ord.on_persisted(tokens, &mut inner);
        let ring = self.rings[i].spec.id;
        self.absorb(ring, inner, out);
    }

    fn delivered_up_to(&self) -> Option<Instance> {
        self.merge.as_ref().map(|_| self.delivered)
    }

    fn position(&self) -> Vec<u8> {
        self.encode_position()
    }

    fn check_position(&self, position: &[u8]) -> Result<(), String> {
        let Some(mg) = &self.merge else {
            return Ok(());
        };
        let p = decode_position(position).map_err(|e| e.message)?;
        if !mg.rings().eq(p.merge.rings.iter().map(|r| r.0)) {
            return Err("a merge of other rings".into());
        }
        RingMerge::<()>::resume(p.merge.clone(), self.setup.m).map_err(|e| e.message)?;
        // What `skip_to` will ask of the merge (fuzzing finding 7: a position with a
        // ring's head behind this replica's merge passed here and panicked there).
        mg.check_advance(&p.merge)
    }

    fn skip_to(&mut self, next: Instance, position: &[u8], out: &mut Outbox) {
        let Some(mg) = self.merge.as_mut() else {
            return;
        };
        let p = match decode_position(position) {
            Ok(p) => p,
            Err(_) => {
                // The node core checked it (`check_position`) before restoring.
                panic!("skip_to with a position the merge cannot take");
            }
        };
        let nexts = mg
            .advance_to(&p.merge)
            .unwrap_or_else(|e| panic!("skip_to with a position the merge refuses: {e}"));
        self.time_ms = self.time_ms.max(p.time_ms);
        self.delivered = next - 1;
        for (ring, n) in nexts {
            let i = self.ring_index(ring).expect("subscribed rings exist");
            let behind = self.rings[i]
                .ord
                .delivered_up_to()
                .is_some_and(|d| d + 1 < n);
            if behind {
                let mut inner = Vec::new();
                self.rings[i].ord.skip_to(n, &[], &mut inner);
                self.absorb(ring, inner, out);
            }
        }
        self.pop_merged(out);
    }

    fn announce_checkpoint(&mut self, _instance: Instance, position: &[u8], out: &mut Outbox) {
        let Ok(p) = decode_position(position) else {
            return;
        };
        for &(ring, head, _, _) in &p.merge.rings {
            let Some(i) = self.ring_index(ring) else {
                continue;
            };
            for &a in &self.rings[i].spec.acceptors {
                out.push(Action::Send {
                    to: a,
                    msg: Msg::OnRing {
                        ring,
                        msg: Box::new(Msg::Checkpointed { instance: head - 1 }),
                    },
                });
            }
        }
    }

    fn leader(&self) -> Option<NodeId> {
        self.rings.iter().find_map(|r| r.ord.leader())
    }

    fn leads(&self) -> Option<partita_types::Ballot> {
        self.rings.iter().filter_map(|r| r.ord.leads()).max()
    }

    fn conflicting_decisions(&self) -> u64 {
        self.rings
            .iter()
            .map(|r| r.ord.conflicting_decisions())
            .sum()
    }

    fn paxos_roles(&self) -> Option<&PaxosOrdering> {
        self.accepting_ring().map(|(_, o)| o)
    }

    fn member_changes(&self) -> Result<(), String> {
        Ok(())
    }

    fn acceptor_changes(&self) -> Result<(), String> {
        Err(partita_types::members::RING_ACCEPTORS_FIXED.to_string())
    }

    fn learner_lag(&self) -> Option<u64> {
        self.merge.as_ref()?;
        let lags = self.rings.iter().filter_map(|r| r.ord.learner_lag());
        Some(lags.sum())
    }

    /// Every ring's roles take the replicas of the partitions it carries (its
    /// learners: decisions, heartbeats and truncation follow them), and signals go to
    /// the replicas of the partitions this one shares rings with.
    fn adopt_members(&mut self, members: &Members, out: &mut Outbox) -> bool {
        if members.epoch <= self.members.epoch {
            return false;
        }
        self.members = members.clone();
        for i in 0..self.rings.len() {
            let mut inner = Vec::new();
            self.rings[i].ord.adopt_members(members, &mut inner);
            self.rings[i].learners = self.rings[i].ord.membership().learners;
            let ring = self.rings[i].spec.id;
            self.absorb(ring, inner, out);
        }
        let now = self.file.with_members(members);
        self.signals.set_peers(&now);
        true
    }

    /// Each ring's learner goes on in the replicas as this node's replica applied them
    /// (with `resume`: the ring whose value held the change paused after it).
    fn replica_members(&mut self, members: &Members, resume: bool, out: &mut Outbox) {
        for i in 0..self.rings.len() {
            if self.rings[i].ord.learner().is_none() {
                continue;
            }
            let mut inner = Vec::new();
            self.rings[i]
                .ord
                .replica_members(members, resume, &mut inner);
            let ring = self.rings[i].spec.id;
            self.absorb(ring, inner, out);
        }
    }

    fn members(&self) -> Option<&Members> {
        Some(&self.members)
    }

    /// Each ring this node leads (with what it decided: idle rings keep proposing
    /// skips, so learners are rarely at it and are not compared), and the merged
    /// sequence, which every replica of a partition must have reached alike (a stream
    /// per partition: see the module doc). Idle: no ring led here
    /// has a client command queued or in flight, and the merge holds nothing back.
    fn report(&self) -> OrderingReport {
        let mut streams = Vec::new();
        let mut idle = self.merge.as_ref().is_none_or(|m| !m.holds_values());
        let mut acceptor = None;
        let mut role_counters = Vec::new();
        let mut decided = None;
        for r in &self.rings {
            let inner = r.ord.report();
            acceptor = acceptor.or(inner.acceptor);
            role_counters.extend(inner.role_counters);
            if let Some(c) = r.ord.coordinator() {
                idle &= c.in_flight_commands() == 0 && c.pending_commands() == 0;
                streams.push(StreamReport {
                    stream: r.spec.id,
                    led: true,
                    leads: Some((c.ballot(), c.decided_up_to())),
                    delivered: None,
                });
                decided = decided.max(Some((c.ballot(), c.decided_up_to())));
            }
        }
        if self.merge.is_some() {
            streams.push(StreamReport {
                stream: self.stream,
                led: false,
                leads: None,
                delivered: Some(self.delivered),
            });
        }
        OrderingReport {
            decided_up_to: decided.map(|(_, d)| d),
            acceptor,
            streams,
            idle,
            role_counters,
        }
    }

    fn describe(&self) -> String {
        let mut s: Vec<String> = self
            .rings
            .iter()
            .map(|r| format!("ring {}: {}", r.spec.id, r.ord.describe()))
            .collect();
        if let Some(m) = &self.merge {
            s.push(format!(
                "merge of rings {:?} at {:?}, delivered {} (named up to {})",
                m.rings().collect::<Vec<_>>(),
                m.position(),
                self.delivered,
                self.named
            ));
        }
        let sig = &self.signals;
        if !sig.peers.is_empty() {
            s.push(format!(
                "signals: reached {} (told {}), partitions reached {:?}, waiting {:?}",
                self.reach(),
                sig.told,
                sig.reached,
                sig.waiting
            ));
        }
        s.join("; ")
    }

    fn add_counters(&self, into: &mut BTreeMap<&'static str, u64>) {
        for (k, v) in &self.counters {
            *into.entry(k).or_default() += v;
        }
        for r in &self.rings {
            r.ord.add_counters(into);
        }
        if let Some(mg) = &self.merge {
            let s = mg.stats();
            *into.entry("merge_values_delivered").or_default() += s.values_delivered;
            *into.entry("merge_skips_consumed").or_default() += s.skips_consumed;
            *into.entry("merge_logical_skipped").or_default() += s.logical_skipped;
        }
    }

    fn drain_observations(&mut self, out: &mut Vec<partita_consensus::Observation>) {
        for r in &mut self.rings {
            r.ord.drain_observations(out);
        }
    }

    fn invariants(&self) {
        for r in &self.rings {
            r.ord.invariants();
        }
        assert!(
            self.rings.windows(2).all(|w| w[0].spec.id < w[1].spec.id),
            "rings ascending"
        );
        assert!(
            self.rings
                .iter()
                .filter(|r| r.ord.acceptor().is_some())
                .count()
                <= 1,
            "an acceptor of two rings"
        );
        for r in &self.rings {
            // A learner exactly for the rings the merge has (none at a node without
            // a replica): nothing of another partition's ring reaches a replica.
            let merged = self
                .merge
                .as_ref()
                .is_some_and(|mg| mg.next_instance(r.spec.id).is_some());
            assert_eq!(
                r.ord.learner().is_some(),
                merged,
                "ring {}: a learner here without merging the ring, or the reverse",
                r.spec.id
            );
        }
        let s = &self.signals;
        assert!(s.told <= self.reach(), "told more than the merge reached");
        assert_eq!(s.others.len(), self.rings.len(), "the signals' rings");
        if let Some((name, others, _)) = s.waiting {
            assert!(
                others != 0 && !s.reached_all(others, name),
                "waiting at {name} for partitions {others:#b} needlessly"
            );
            assert!(
                self.merge.as_ref().is_some_and(|m| m.holds_values()),
                "waiting at a value the merge does not hold"
            );
        }
        if let Some(mg) = &self.merge {
            mg.invariants();
            for id in mg.rings() {
                let i = self.ring_index(id).expect("subscribed rings exist");
                let learner_next = self.rings[i]
                    .ord
                    .delivered_up_to()
                    .expect("a subscribed ring has a learner here")
                    + 1;
                assert_eq!(
                    mg.next_instance(id).expect("subscribed"),
                    learner_next,
                    "ring {id}: the merge and the ring's learner disagree on what is next"
                );
            }
        }
    }
}
