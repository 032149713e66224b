//! The learner role (paper 001 §III-A).
//!
//! A learner collects proposed values (Ring Paxos sends them to learners with Phase 2A)
//! and decisions (by id in Ring Paxos, with the value in Multi-Paxos) and delivers each
//! decided value once, in instance order. When it knows of a decided instance it cannot
//! deliver (a decision without its value, a gap below a later decision, or a heartbeat
//! announcing decisions it never saw) for `gap_ticks`, it asks its preferential acceptor
//! for the decided values, and on repeated silence alternates with the coordinator.
//!
//! Should neither help (the decisions of a range reached no acceptor, and the leader
//! that made them was replaced, so nobody holds them as decided), the learner reads
//! the range from a majority of acceptors ([`Msg::ReadAccepted`]): for an instance
//! below the decided prefix a leader announced, the highest-ballot value among a
//! majority's reports is the decided value (the quorum that decided it intersects
//! every majority, and every proposal above the deciding ballot carries that value).
//!
//! Speculation (paper 001 §III-B): a learner made speculative with
//! [`Learner::set_speculative`] also reports each new proposed value of an undecided
//! instance ([`Action::Propose`]) so that its replica can execute it before the
//! decision. A Phase 2A's piggybacked decisions are delivered before its proposal is
//! reported, so the replies of a decided instance never wait for the speculative
//! execution of the next one. Off by default; nothing changes then.
//!
//! A learner that falls behind the acceptors' truncation point cannot learn the
//! missing prefix at all: its node restores a replica checkpoint instead (state
//! transfer, see `partita-node`) and moves the learner past it with
//! [`Learner::skip_to`], the one way an instance is passed without being delivered.

use crate::{
    Action, Drop, DropCounts, LearnerConfig, Membership, Msg, Outbox, TickDue, Value, Vid,
};
use partita_types::{Ballot, Instance, NodeId, PartitionId, PartitionMap};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug, Default)]
pub struct LearnerStats {
    pub delivered: u64,
    pub learn_requests: u64,
    pub values_recovered: u64,
    /// Values learned by reading a majority of acceptors.
    pub values_read: u64,
    /// Instances passed over by [`Learner::skip_to`] (covered by a restored checkpoint).
    pub skipped: u64,
}

struct MajorityRead {
    from: Instance,
    to: Instance,
    replies: BTreeMap<NodeId, Vec<(Instance, Ballot, Arc<Value>)>>,
    sent_tick: u64,
}

pub struct Learner {
    id: NodeId,
    membership: Membership,
    cfg: LearnerConfig,
    next_deliver: Instance,
    /// Proposed values seen per instance (Ring Paxos Phase 2A), newest last.
    proposals: BTreeMap<Instance, Vec<Arc<Value>>>,
    /// Decided ids whose value is not here yet, or not yet delivered.
    decided_ids: BTreeMap<Instance, Vid>,
    /// Decided values ready to deliver once their turn comes.
    ready: BTreeMap<Instance, Arc<Value>>,
    /// Highest decided instance anyone told us about.
    known_decided: Instance,
    gap_since_tick: Option<u64>,
    now_tick: u64,
    attempts: u64,
    /// Highest ballot seen in a Phase 2A or heartbeat: its node leads.
    leader_ballot: Ballot,
    /// Every instance up to here is decided (a leader's heartbeat said so). Unlike
    /// `known_decided`, which may lie above undecided instances, this is a prefix.
    decided_prefix: Instance,
    /// A majority read under way: its range, the acceptors' answers, when it began.
    read: Option<MajorityRead>,
    stats: LearnerStats,
    drops: DropCounts,
    /// Report proposals ([`Action::Propose`]) for speculative execution.
    speculative: bool,
    /// State partitioning: the key ranges and the one this learner's replica holds.
    /// Every value it takes in is reduced to that partition's sub-commands
    /// ([`Value::project`]): the coordinator sends only those, but values recovered from
    /// acceptors or the coordinator (learning, majority reads) are whole.
    partition: Option<(PartitionMap, PartitionId)>,
    /// The partition this learner's replica holds, as its node was told
    /// ([`Learner::set_partition`]); else the membership's layout says.
    own_partition: Option<PartitionId>,
    /// The ordering epoch of the instances from `next_deliver` on, as the delivered
    /// prefix fixes it (`partita_types::members`): a decision of an older epoch there
    /// was made above the change that ended that epoch, and is never delivered.
    epoch: u64,
    /// Stop after delivering a value holding a membership change, until the node
    /// applied it ([`Learner::resume`]): an acceptor change moves the epoch of every
    /// instance after it, which only the applied change tells.
    pause_at_members: bool,
    paused: bool,
    /// Planted bug (simulator controls only): take decisions of any epoch and never
    /// pause.
    unsafe_ignore_epochs: bool,
}

/// The partition learner `id` holds (`own`, else as `m` lays it out), when the state
/// is partitioned.
fn membership_partition(
    m: &Membership,
    id: NodeId,
    own: Option<PartitionId>,
) -> Option<(PartitionMap, PartitionId)> {
    m.is_partitioned()
        .then(|| (m.partitions.map, own.unwrap_or_else(|| m.partition_of(id))))
}

impl Learner {
    /// The replicas changed at run time (`partita member`; see
    /// `Membership::with_members`): the learners (this learner's view of the membership) from now on.
    pub fn set_learners(&mut self, m: &Membership) {
        self.membership.learners = m.learners.clone();
        self.membership.partitions = m.partitions.clone();
    }

    /// A learner that will deliver from instance `next_deliver` on (1 for a fresh
    /// replica, the instance after its checkpoint for a recovering one).
    pub fn new(
        id: NodeId,
        membership: Membership,
        cfg: LearnerConfig,
        next_deliver: Instance,
    ) -> Learner {
        assert!(next_deliver >= 1);
        Learner {
            id,
            cfg,
            next_deliver,
            proposals: BTreeMap::new(),
            decided_ids: BTreeMap::new(),
            ready: BTreeMap::new(),
            known_decided: next_deliver - 1,
            gap_since_tick: None,
            now_tick: 0,
            attempts: 0,
            leader_ballot: Ballot::ZERO,
            decided_prefix: next_deliver - 1,
            read: None,
            stats: LearnerStats::default(),
            drops: DropCounts::default(),
            speculative: false,
            partition: membership_partition(&membership, id, None),
            own_partition: None,
            epoch: membership.epoch,
            pause_at_members: false,
            paused: false,
            unsafe_ignore_epochs: false,
            membership,
        }
    }

    /// State partitioning: this learner's replica holds partition `p`, whatever the
    /// membership lays out (a replica that joins at run time is in no partition of
    /// the cluster file's, and learns before its addition reaches it).
    pub fn set_partition(&mut self, p: PartitionId) {
        self.own_partition = Some(p);
        self.partition = membership_partition(&self.membership, self.id, Some(p));
    }

    /// Pause after each value that holds a membership change, until [`Learner::resume`]
    /// (Ring Paxos and Multi-Paxos, whose acceptors can change).
    pub fn set_pause_at_members(&mut self, on: bool) {
        self.pause_at_members = on;
    }

    /// Plant the "decisions of any epoch" bug (simulator controls only): an older
    /// epoch's decision is delivered like any, and delivery never pauses.
    pub fn set_unsafe_ignore_epochs(&mut self, on: bool) {
        self.unsafe_ignore_epochs = on;
    }

    /// The ordering epoch of the next instance to deliver.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The membership change the learner paused after was applied (and the learner
    /// [`Learner::reconfigure`]d when it moved the epoch): deliver on.
    pub fn resume(&mut self, out: &mut Outbox) {
        self.paused = false;
        self.deliver(out);
    }

    /// Learn with `membership` from now on (its epoch orders the instances this
    /// learner has yet to deliver: after an acceptor change it applied, or a restored
    /// checkpoint's), delivering nothing now. Decisions of older epochs held for the
    /// instances ahead are dropped.
    pub fn reconfigure(&mut self, membership: Membership) {
        assert!(membership.epoch >= self.epoch, "epochs only grow");
        if membership.epoch > self.epoch {
            let epoch = membership.epoch;
            let stale = |v: &Arc<Value>| v.vid.ballot.epoch() < epoch;
            let before = self.ready.len() + self.decided_ids.len();
            self.ready.retain(|_, v| !stale(v));
            self.decided_ids
                .retain(|_, vid| vid.ballot.epoch() >= epoch);
            for props in self.proposals.values_mut() {
                props.retain(|v| !stale(v));
            }
            self.proposals.retain(|_, p| !p.is_empty());
            let after = self.ready.len() + self.decided_ids.len();
            self.drops
                .count_n(Drop::OtherEpoch, (before - after) as u64);
            self.read = None;
            self.epoch = epoch;
        }
        self.partition = membership_partition(&membership, self.id, self.own_partition);
        self.membership = membership;
    }

    /// Whether `vid` was decided in an epoch older than the one ordering the
    /// instances this learner has yet to deliver (never delivered: counted).
    fn stale_epoch(&mut self, vid: Vid) -> bool {
        let stale = vid.ballot.epoch() < self.epoch && !self.unsafe_ignore_epochs;
        if stale {
            self.drops.count(Drop::OtherEpoch);
        }
        stale
    }

    /// This learner's part of `value` (all of it when the state is not partitioned).
    fn local(&self, value: Arc<Value>) -> Arc<Value> {
        match &self.partition {
            Some((map, p)) if !value.only_for(map, *p) => Arc::new(value.project(map, *p)),
            _ => value,
        }
    }

    /// Report each new proposed value of an undecided instance with
    /// [`Action::Propose`] (for speculative execution).
    /// Whether it reports proposals (see [`Learner::set_speculative`]).
    pub fn is_speculative(&self) -> bool {
        self.speculative
    }

    pub fn set_speculative(&mut self, on: bool) {
        self.speculative = on;
    }
    pub fn speculative(&self) -> bool {
        self.speculative
    }

    /// The last instance delivered (0: none).
    pub fn delivered_up_to(&self) -> Instance {
        self.next_deliver - 1
    }
    pub fn known_decided(&self) -> Instance {
        self.known_decided
    }
    pub fn stats(&self) -> &LearnerStats {
        &self.stats
    }
    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }

    pub fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) {
        match msg {
            Msg::Phase2A {
                ballot,
                instance,
                value,
                decided,
                part,
                ..
            } => {
                let theirs = match (&self.partition, part) {
                    (Some((map, p)), Some(part)) => part.index != *p || part.count != map.count(),
                    (None, Some(_)) => true,
                    (_, None) => false,
                };
                if theirs {
                    // Another partition's part (this node is also an acceptor, which
                    // listens to every partition's group): its decisions still count.
                    self.leader_ballot = self.leader_ballot.max(ballot);
                    for (i, vid) in decided {
                        self.on_decided_id(i, vid);
                    }
                    self.deliver(out);
                    return;
                }
                let value = self.local(value);
                self.leader_ballot = self.leader_ballot.max(ballot);
                for (i, vid) in decided {
                    self.on_decided_id(i, vid);
                }
                // Deliver what the piggybacked decisions completed before reporting the
                // new proposal: the replica releases the replies of a decided
                // instance before it speculates on the next one.
                self.deliver(out);
                if self.stale_epoch(value.vid) {
                    // Proposed above the change that ended its epoch: counted, dropped.
                } else if instance < self.next_deliver || self.ready.contains_key(&instance) {
                    self.drops.count(Drop::AlreadyDecided);
                } else if instance >= self.next_deliver + self.cfg.buffered_instances_max {
                    self.drops.count(Drop::QueueFull);
                } else {
                    let props = self.proposals.entry(instance).or_default();
                    if !props.iter().any(|p| p.vid == value.vid) {
                        // No speculation past a membership change not yet applied.
                        if self.speculative && !self.paused {
                            out.push(Action::Propose {
                                instance,
                                value: value.clone(),
                            });
                        }
                        props.push(value);
                    }
                    self.resolve(instance);
                }
            }
            Msg::Decide { decided } => {
                for (i, vid) in decided {
                    self.on_decided_id(i, vid);
                }
            }
            Msg::DecideValue { instance, value } => {
                let value = self.local(value);
                self.on_decided_value(instance, value)
            }
            Msg::LearnReply { decided } => {
                self.stats.values_recovered += decided.len() as u64;
                for (i, v) in decided {
                    let v = self.local(v);
                    self.on_decided_value(i, v);
                }
            }
            Msg::Heartbeat {
                ballot,
                decided_up_to,
            } => {
                self.leader_ballot = self.leader_ballot.max(ballot);
                self.known_decided = self.known_decided.max(decided_up_to);
                self.decided_prefix = self.decided_prefix.max(decided_up_to);
            }
            Msg::AcceptedValues {
                from: lo,
                to: hi,
                accepted,
            } => self.on_accepted_values(from, lo, hi, accepted),
            _ => self.drops.count(Drop::NotForThisRole),
        }
        self.deliver(out);
    }

    fn on_decided_id(&mut self, instance: Instance, vid: Vid) {
        self.known_decided = self.known_decided.max(instance);
        if instance < self.next_deliver
            || self.stale_epoch(vid)
            || self.drop_older_epoch(instance, vid)
        {
            return;
        }
        if let Some(v) = self.ready.get(&instance) {
            if v.vid != vid {
                self.drops.count(Drop::ConflictingDecision);
            }
            return;
        }
        if let Some(&old) = self.decided_ids.get(&instance) {
            if old != vid {
                // Two decisions for one instance: a faulty peer. The first stands.
                self.drops.count(Drop::ConflictingDecision);
                return;
            }
        }
        self.decided_ids.insert(instance, vid);
        self.resolve(instance);
    }

    /// A decision of a newer epoch than the one held for `instance` replaces it: the
    /// older one was made above the change that ended its epoch (a learner that has
    /// not delivered the change yet cannot tell, but the newer epoch can only order
    /// instances after a change). Decisions of one epoch never differ.
    /// Returns whether the decision is itself older than one held there (then it is
    /// the one dropped).
    fn drop_older_epoch(&mut self, instance: Instance, vid: Vid) -> bool {
        if self.unsafe_ignore_epochs {
            return false;
        }
        // An instance's decision is in `ready` or in `decided_ids`, never both.
        let held = self
            .ready
            .get(&instance)
            .map(|v| v.vid)
            .or_else(|| self.decided_ids.get(&instance).copied());
        let Some(held) = held else {
            return false;
        };
        let (epoch, theirs) = (vid.ballot.epoch(), held.ballot.epoch());
        if theirs != epoch {
            self.drops.count(Drop::OtherEpoch);
        }
        if theirs < epoch {
            self.ready.remove(&instance);
            self.decided_ids.remove(&instance);
        }
        theirs > epoch
    }

    fn on_decided_value(&mut self, instance: Instance, value: Arc<Value>) {
        self.known_decided = self.known_decided.max(instance);
        if instance < self.next_deliver
            || self.stale_epoch(value.vid)
            || self.drop_older_epoch(instance, value.vid)
        {
            return;
        }
        let known = self
            .decided_ids
            .get(&instance)
            .copied()
            .or_else(|| self.ready.get(&instance).map(|v| v.vid));
        if known.is_some_and(|vid| vid != value.vid) {
            // Two decisions for one instance: a faulty peer. The first stands.
            self.drops.count(Drop::ConflictingDecision);
            return;
        }
        self.decided_ids.remove(&instance);
        if self.ready.contains_key(&instance) {
            return;
        }
        self.proposals.remove(&instance);
        self.ready.insert(instance, value);
    }

    /// Match a decided id with a value we hold.
    fn resolve(&mut self, instance: Instance) {
        let Some(&vid) = self.decided_ids.get(&instance) else {
            return;
        };
        let Some(props) = self.proposals.get(&instance) else {
            return;
        };
        if let Some(v) = props.iter().find(|p| p.vid == vid).cloned() {
            self.decided_ids.remove(&instance);
            self.proposals.remove(&instance);
            self.ready.insert(instance, v);
        }
    }

    fn deliver(&mut self, out: &mut Outbox) {
        while !self.paused {
            let Some(v) = self.ready.remove(&self.next_deliver) else {
                break;
            };
            let pause = self.pause_at_members
                && !self.unsafe_ignore_epochs
                && v.commands
                    .iter()
                    .any(partita_types::members::is_member_command);
            // One stream: the instance names the execution at every learner.
            out.push(Action::Deliver {
                instance: self.next_deliver,
                name: self.next_deliver,
                value: v,
            });
            self.next_deliver += 1;
            self.stats.delivered += 1;
            self.attempts = 0;
            self.paused = pause;
        }
        // Forget proposals for instances already delivered.
        while let Some((&i, _)) = self.proposals.first_key_value() {
            if i >= self.next_deliver {
                break;
            }
            self.proposals.pop_first();
        }
        self.known_decided = self.known_decided.max(self.next_deliver - 1);
        if self.known_decided >= self.next_deliver {
            if self.gap_since_tick.is_none() {
                self.gap_since_tick = Some(self.now_tick);
            }
        } else {
            self.gap_since_tick = None;
        }
    }

    /// One acceptor's answer to the majority read. With a majority, every instance of
    /// the range within the decided prefix gets its highest-ballot value.
    fn on_accepted_values(
        &mut self,
        acceptor: NodeId,
        from: Instance,
        to: Instance,
        accepted: Vec<(Instance, Ballot, Arc<Value>)>,
    ) {
        let Some(read) = self.read.as_mut().filter(|r| r.from == from && r.to == to) else {
            self.drops.count(Drop::UnknownInstance);
            return;
        };
        if self.membership.acceptor_index(acceptor).is_none() {
            self.drops.count(Drop::FromNonMember);
            return;
        }
        // Votes of an older epoch than the instances' own were never votes there.
        let epoch = self.epoch;
        let accepted = accepted
            .into_iter()
            .filter(|(_, _, v)| v.vid.ballot.epoch() >= epoch)
            .collect();
        read.replies.insert(acceptor, accepted);
        if read.replies.len() < self.membership.majority() {
            return;
        }
        let read = self.read.take().expect("checked above");
        let mut best: BTreeMap<Instance, (Ballot, Arc<Value>)> = BTreeMap::new();
        for (i, b, v) in read.replies.into_values().flatten() {
            if i < from || i >= to || i > self.decided_prefix {
                continue;
            }
            match best.get(&i) {
                Some((old, _)) if *old >= b => {}
                _ => {
                    best.insert(i, (b, v));
                }
            }
        }
        for (i, (_, v)) in best {
            if i >= self.next_deliver && !self.ready.contains_key(&i) {
                self.stats.values_read += 1;
                let v = self.local(v);
                self.on_decided_value(i, v);
            }
        }
    }

    /// Continue delivering at `next_deliver`: everything below is covered by a
    /// checkpoint the replica restored (state transfer) and will never be delivered.
    /// Values already held for later instances are kept, and delivered if their turn
    /// has come.
    pub fn skip_to(&mut self, next_deliver: Instance, out: &mut Outbox) {
        assert!(
            next_deliver > self.next_deliver,
            "skip_to moves forward only ({} to {next_deliver})",
            self.next_deliver
        );
        self.stats.skipped += next_deliver - self.next_deliver;
        self.next_deliver = next_deliver;
        self.proposals = self.proposals.split_off(&next_deliver);
        self.decided_ids = self.decided_ids.split_off(&next_deliver);
        self.ready = self.ready.split_off(&next_deliver);
        self.attempts = 0;
        self.gap_since_tick = None;
        self.read = None;
        // A membership change it paused after is in the checkpoint now.
        self.paused = false;
        self.decided_prefix = self.decided_prefix.max(next_deliver - 1);
        self.deliver(out);
    }

    /// When [`Learner::on_tick`] may next act: a gap's request, `gap_ticks` after the
    /// gap was seen or last asked about.
    pub fn tick_due(&self) -> TickDue {
        match self.gap_since_tick.filter(|_| !self.paused) {
            Some(since) => TickDue::NEVER.tick(since.saturating_add(self.cfg.gap_ticks)),
            None => TickDue::NEVER,
        }
    }

    pub fn on_tick(&mut self, now_tick: u64, out: &mut Outbox) {
        self.now_tick = now_tick;
        let Some(since) = self.gap_since_tick.filter(|_| !self.paused) else {
            return;
        };
        if now_tick.saturating_sub(since) < self.cfg.gap_ticks {
            return;
        }
        self.gap_since_tick = Some(now_tick);
        let from = self.next_deliver;
        let to = (self.known_decided + 1).min(from + self.cfg.learn_batch_instances_max);
        // Ask the preferential acceptor first; if that does not help, the leader (which
        // keeps recently decided values), then every other acceptor in turn, so one
        // crashed acceptor cannot starve the learner.
        let target = self.learn_targets()
            [(self.attempts % (self.membership.acceptors.len() as u64 + 1)) as usize];
        self.attempts += 1;
        self.stats.learn_requests += 1;
        out.push(Action::Send {
            to: target,
            msg: Msg::LearnRequest { from, to },
        });
        // The preferential acceptor and the leader could not help: read the part of
        // the gap inside the decided prefix from a majority (again if the last read
        // got no majority within a few gap periods).
        let read_to = to.min(self.decided_prefix + 1);
        let stale = self.read.as_ref().is_none_or(|r| {
            r.from != from || now_tick.saturating_sub(r.sent_tick) >= 4 * self.cfg.gap_ticks
        });
        if self.attempts >= 2 && read_to > from && stale {
            self.read = Some(MajorityRead {
                from,
                to: read_to,
                replies: BTreeMap::new(),
                sent_tick: now_tick,
            });
            crate::send_all(
                out,
                &self.membership.acceptors,
                Msg::ReadAccepted { from, to: read_to },
            );
        }
    }

    /// The node this learner believes leads.
    pub fn leader(&self) -> NodeId {
        if self.leader_ballot == Ballot::ZERO {
            self.membership.coordinator
        } else {
            self.leader_ballot.node
        }
    }

    /// Preferential acceptor, leader, then the other acceptors (length: acceptors + 1).
    fn learn_targets(&self) -> Vec<NodeId> {
        let pref = self.membership.preferential_acceptor(self.id);
        let mut t = vec![pref, self.leader()];
        t.extend(self.membership.acceptors.iter().filter(|&&a| a != pref));
        t.truncate(self.membership.acceptors.len() + 1);
        t
    }

    pub fn invariants(&self) {
        if let Some((&i, _)) = self.ready.first_key_value() {
            assert!(
                i >= self.next_deliver,
                "ready value below the delivery point"
            );
        }
        if let Some((&i, _)) = self.decided_ids.first_key_value() {
            assert!(
                i >= self.next_deliver,
                "pending decision below the delivery point"
            );
        }
        assert!(self.known_decided + 1 >= self.next_deliver);
        assert!(
            self.decided_prefix <= self.known_decided,
            "decided prefix beyond what is known decided"
        );
        if let Some(r) = &self.read {
            assert!(r.from < r.to && r.to <= self.decided_prefix + 1);
            assert!(r.replies.len() < self.membership.majority());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Protocol;
    use partita_types::Ballot;

    fn m() -> Membership {
        Membership {
            ring_decision: crate::RingDecision::Coordinator,
            protocol: Protocol::RingPaxos,
            acceptors: vec![1, 2, 3],
            coordinator: 3,
            learners: vec![4, 5],
            partitions: Default::default(),
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        }
    }

    fn v(seq: u64) -> Arc<Value> {
        Arc::new(Value {
            vid: Vid {
                ballot: Ballot::new(0, 3),
                seq,
            },
            commands: vec![],
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        })
    }

    fn p2a(instance: Instance, value: Arc<Value>, decided: Vec<(Instance, Vid)>) -> Msg {
        Msg::Phase2A {
            ballot: Ballot::new(0, 3),
            instance,
            value,
            decided,
            ring: 0b111,
            part: None,
        }
    }

    #[test]
    fn delivers_in_order_when_value_and_decision_meet() {
        let mut l = Learner::new(4, m(), LearnerConfig::default(), 1);
        let mut out = Vec::new();
        l.on_message(3, p2a(2, v(2), vec![]), &mut out);
        l.on_message(
            3,
            Msg::Decide {
                decided: vec![(2, v(2).vid)],
            },
            &mut out,
        );
        assert!(
            out.is_empty(),
            "instance 1 is missing: nothing may be delivered"
        );
        l.on_message(3, p2a(1, v(1), vec![]), &mut out);
        assert!(out.is_empty());
        l.on_message(3, p2a(3, v(3), vec![(1, v(1).vid)]), &mut out);
        assert_eq!(
            out,
            vec![
                Action::Deliver {
                    instance: 1,
                    name: 1,
                    value: v(1)
                },
                Action::Deliver {
                    instance: 2,
                    name: 2,
                    value: v(2)
                }
            ]
        );
    }

    /// A second, different decision for an instance (only a faulty peer sends one) is
    /// counted and dropped: the first stands, and the learner does not die.
    #[test]
    fn a_conflicting_decision_is_dropped_and_counted() {
        let mut l = Learner::new(4, m(), LearnerConfig::default(), 1);
        let mut out = Vec::new();
        let other = |i| {
            Arc::new(Value {
                vid: Vid {
                    ballot: Ballot::new(9, 2),
                    seq: i,
                },
                commands: vec![],
                parts: Vec::new(),
                time_ms: 0,
                skip: 0,
            })
        };
        l.on_message(3, p2a(2, v(2), vec![]), &mut out);
        let decide = |i, vid| Msg::Decide {
            decided: vec![(i, vid)],
        };
        l.on_message(3, decide(2, v(2).vid), &mut out);
        l.on_message(3, decide(2, other(2).vid), &mut out); // ready already
        l.on_message(3, decide(3, v(3).vid), &mut out);
        l.on_message(3, decide(3, other(3).vid), &mut out); // decided id already
        l.on_message(
            3,
            Msg::DecideValue {
                instance: 3,
                value: other(3),
            },
            &mut out,
        );
        assert_eq!(l.drops().0.get(crate::CONFLICTING_DECISION), Some(&3));
        l.on_message(3, p2a(1, v(1), vec![]), &mut out);
        l.on_message(3, p2a(3, v(3), vec![(1, v(1).vid)]), &mut out);
        let delivered: Vec<_> = out
            .iter()
            .filter_map(|a| match a {
                Action::Deliver {
                    instance, value, ..
                } => Some((*instance, value.vid)),
                _ => None,
            })
            .collect();
        assert_eq!(
            delivered,
            vec![(1, v(1).vid), (2, v(2).vid), (3, v(3).vid)],
            "the first decisions stand"
        );
    }

    #[test]
    fn speculative_learner_reports_new_proposals_once() {
        let mut quiet = Learner::new(4, m(), LearnerConfig::default(), 1);
        let mut out = Vec::new();
        quiet.on_message(3, p2a(1, v(1), vec![]), &mut out);
        assert!(out.is_empty(), "speculation off: nothing reported");

        let mut l = Learner::new(4, m(), LearnerConfig::default(), 1);
        l.set_speculative(true);
        l.on_message(3, p2a(2, v(2), vec![]), &mut out);
        l.on_message(3, p2a(2, v(2), vec![]), &mut out); // retransmission
        l.on_message(3, p2a(1, v(1), vec![]), &mut out);
        // A new leader proposes another value for instance 2.
        let other = Arc::new(Value {
            vid: Vid {
                ballot: Ballot::new(1, 2),
                seq: 7,
            },
            commands: vec![],
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        });
        l.on_message(3, p2a(2, other.clone(), vec![]), &mut out);
        assert_eq!(
            out,
            vec![
                Action::Propose {
                    instance: 2,
                    value: v(2)
                },
                Action::Propose {
                    instance: 1,
                    value: v(1)
                },
                Action::Propose {
                    instance: 2,
                    value: other
                },
            ]
        );
        out.clear();
        // Decided instances are delivered as before; a late proposal for one is not
        // reported.
        // The piggybacked decision is delivered before the new proposal is reported.
        l.on_message(3, p2a(3, v(3), vec![(1, v(1).vid)]), &mut out);
        assert_eq!(
            out,
            vec![
                Action::Deliver {
                    instance: 1,
                    name: 1,
                    value: v(1)
                },
                Action::Propose {
                    instance: 3,
                    value: v(3)
                },
            ]
        );
        out.clear();
        l.on_message(3, p2a(1, v(1), vec![]), &mut out);
        assert!(out.is_empty());
        l.invariants();
    }

    #[test]
    fn asks_preferential_acceptor_then_coordinator_for_gaps() {
        let cfg = LearnerConfig {
            gap_ticks: 5,
            ..Default::default()
        };
        let mut l = Learner::new(5, m(), cfg, 1);
        let mut out = Vec::new();
        l.on_message(
            3,
            Msg::Decide {
                decided: vec![(3, v(3).vid)],
            },
            &mut out,
        );
        l.on_tick(4, &mut out);
        assert!(out.is_empty());
        l.on_tick(5, &mut out);
        // Learner 5 is the second learner: preferential acceptor is acceptors[1] = 2.
        assert_eq!(
            out,
            vec![Action::Send {
                to: 2,
                msg: Msg::LearnRequest { from: 1, to: 4 }
            }]
        );
        out.clear();
        l.on_tick(10, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 3,
                msg: Msg::LearnRequest { from: 1, to: 4 }
            }]
        );
        out.clear();
        l.on_message(
            3,
            Msg::LearnReply {
                decided: vec![(1, v(1)), (2, v(2)), (3, v(3))],
            },
            &mut out,
        );
        assert_eq!(out.len(), 3);
        assert_eq!(l.delivered_up_to(), 3);
    }

    #[test]
    fn heartbeat_reveals_missed_tail() {
        let cfg = LearnerConfig {
            gap_ticks: 1,
            ..Default::default()
        };
        let mut l = Learner::new(4, m(), cfg, 1);
        let mut out = Vec::new();
        l.on_message(
            3,
            Msg::Heartbeat {
                ballot: Ballot::new(0, 3),
                decided_up_to: 2,
            },
            &mut out,
        );
        l.on_tick(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 1,
                msg: Msg::LearnRequest { from: 1, to: 3 }
            }]
        );
    }

    #[test]
    fn duplicates_are_delivered_once() {
        let mut l = Learner::new(4, m(), LearnerConfig::default(), 1);
        let mut out = Vec::new();
        l.on_message(
            3,
            Msg::DecideValue {
                instance: 1,
                value: v(1),
            },
            &mut out,
        );
        l.on_message(
            3,
            Msg::DecideValue {
                instance: 1,
                value: v(1),
            },
            &mut out,
        );
        l.on_message(
            3,
            Msg::LearnReply {
                decided: vec![(1, v(1))],
            },
            &mut out,
        );
        assert_eq!(
            out,
            vec![Action::Deliver {
                instance: 1,
                name: 1,
                value: v(1)
            }]
        );
    }

    #[test]
    fn skip_to_passes_a_restored_prefix_and_delivers_what_waits() {
        let mut l = Learner::new(4, m(), LearnerConfig::default(), 1);
        let mut out = Vec::new();
        for i in [2, 11, 12] {
            l.on_message(
                3,
                Msg::DecideValue {
                    instance: i,
                    value: v(i),
                },
                &mut out,
            );
        }
        assert!(out.is_empty());
        l.skip_to(11, &mut out);
        assert_eq!(
            out,
            vec![
                Action::Deliver {
                    instance: 11,
                    name: 11,
                    value: v(11)
                },
                Action::Deliver {
                    instance: 12,
                    name: 12,
                    value: v(12)
                }
            ]
        );
        assert_eq!(l.delivered_up_to(), 12);
        assert_eq!(l.stats().skipped, 10);
        l.invariants();
    }

    #[test]
    #[should_panic(expected = "forward only")]
    fn skip_to_never_goes_back() {
        let mut l = Learner::new(4, m(), LearnerConfig::default(), 5);
        l.skip_to(5, &mut Vec::new());
    }

    #[test]
    fn a_gap_nobody_holds_as_decided_is_read_from_a_majority() {
        let cfg = LearnerConfig {
            gap_ticks: 1,
            ..Default::default()
        };
        let mut l = Learner::new(4, m(), cfg, 1);
        let mut out = Vec::new();
        // The leader says 1..=2 are decided; 3 is decided too, but only 1..=2 form a
        // prefix a majority read may resolve.
        l.on_message(
            3,
            Msg::Heartbeat {
                ballot: Ballot::new(0, 3),
                decided_up_to: 2,
            },
            &mut out,
        );
        l.on_message(
            3,
            Msg::Decide {
                decided: vec![(3, v(3).vid)],
            },
            &mut out,
        );
        l.on_tick(1, &mut out);
        assert_eq!(out.len(), 1, "first the preferential acceptor: {out:?}");
        out.clear();
        l.on_tick(2, &mut out);
        let reads: Vec<_> = out
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    to,
                    msg: Msg::ReadAccepted { from, to: hi },
                } => Some((*to, *from, *hi)),
                _ => None,
            })
            .collect();
        assert_eq!(reads, vec![(1, 1, 3), (2, 1, 3), (3, 1, 3)]);
        out.clear();
        let old = Arc::new(Value {
            vid: Vid {
                ballot: Ballot::new(0, 1),
                seq: 9,
            },
            commands: vec![],
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        });
        // Acceptor 1 still holds an older proposal for instance 1, acceptor 2 the
        // value of the higher ballot (the decided one); one answer is not a majority.
        l.on_message(
            1,
            Msg::AcceptedValues {
                from: 1,
                to: 3,
                accepted: vec![(1, Ballot::new(0, 1), old), (2, Ballot::new(0, 3), v(2))],
            },
            &mut out,
        );
        assert!(out.is_empty());
        l.on_message(
            2,
            Msg::AcceptedValues {
                from: 1,
                to: 3,
                accepted: vec![(1, Ballot::new(1, 3), v(1)), (3, Ballot::new(1, 3), v(3))],
            },
            &mut out,
        );
        // 1 and 2 delivered; 3 lies beyond the prefix: not taken from the read, and
        // it waits for its value.
        assert_eq!(
            out,
            vec![
                Action::Deliver {
                    instance: 1,
                    name: 1,
                    value: v(1)
                },
                Action::Deliver {
                    instance: 2,
                    name: 2,
                    value: v(2)
                }
            ]
        );
        assert_eq!(l.stats().values_read, 2);
        l.invariants();
    }
}
