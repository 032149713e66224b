//! Replicas added and removed at run time (`partita member`), in the node core.
//!
//! A change is an ordered command ([`SystemOp::Member`]). The node an operator asks
//! ([`NodeCore::on_member_request`]) multicasts it like a client command; every replica
//! applies it to its [`Members`] when it executes the value that holds it, so all
//! replicas agree on the replicas (and on a refusal) at every position. Checkpoints
//! carry the [`Members`] (in their ordering section, [`join_section`]), so a restarted
//! or state-transferred replica never takes them from the cluster file. After applying
//! one, a replica tells every other node ([`Msg::Members`], and again every
//! `announce_ticks`); nodes that execute nothing (acceptors, batchers) take the
//! highest epoch they hear, pass it on in turn (a replica that restarted behind the
//! change learns the new nodes from them), and their ordering sends decisions to the
//! new replicas and counts their checkpoints for truncation. Replicas checkpoint at
//! every acceptor change, and removed acceptors hear of their removal (and stop) only
//! once a checkpoint covers it: until then they may hold the only copies of the
//! decisions below it.
//!
//! A new replica starts as a learner: decisions reach it, it restores a peer's
//! checkpoint and learns the suffix, and it refuses clients. Once it has executed its
//! own `Add` and knows of at most [`PROMOTE_LAG_MAX`] decided instances beyond what it
//! executed, it proposes its own promotion (if the `Add` asked for it, or when an
//! operator asks it to); from that position on it serves. A removed replica stops at
//! the position of its removal ([`NodeCore::removed`]).

use crate::{NodeCore, Output};
use partita_consensus::{Msg, Outbox, Value};
use partita_types::members::{MemberChange, Members};
use partita_types::{Command, Instance, NodeId, SystemOp};
use std::collections::BTreeSet;

/// The system command kind of membership changes (keeps their sequence numbers apart
/// from other system commands of the same node).
pub use partita_types::members::MEMBER_KIND;

/// A learner proposes its promotion once it knows of at most this many decided
/// instances it has not executed.
pub const PROMOTE_LAG_MAX: u64 = 64;

/// Removed replicas are told the replicas once in this many rounds of telling.
const REMOVED_TOLD_EVERY: u64 = 10;

/// A checkpoint ordering section that carries [`Members`] starts with this.
const SECTION_TAG: &[u8; 8] = b"PTMEMBR2";
/// ... and one written before acceptors could change (replicas only).
const SECTION_TAG_V1: &[u8; 8] = b"PTMEMBR1";

/// [`Members`] as version 1 of the section wrote them.
#[derive(serde::Deserialize)]
struct MembersV1 {
    epoch: u64,
    at: Instance,
    replicas: std::collections::BTreeMap<NodeId, partita_types::members::Replica>,
    removed: BTreeSet<NodeId>,
}

/// The ordering section of a checkpoint: the ordering's `position`, with the replicas
/// changed at run time when there were any (exactly `position` otherwise, so
/// checkpoints of clusters that never changed read as before).
pub fn join_section(position: Vec<u8>, members: &Members) -> Vec<u8> {
    if members.epoch == 0 {
        return position;
    }
    let mut out = SECTION_TAG.to_vec();
    out.extend(partita_types::encode(&(position, members)));
    out
}

/// The ordering's position and the replicas' [`Members`] of a checkpoint's ordering
/// section (see [`join_section`]).
pub fn split_section(section: &[u8]) -> (Vec<u8>, Members) {
    if let Some(rest) = section.strip_prefix(SECTION_TAG) {
        if let Ok((position, members)) = partita_types::decode::<(Vec<u8>, Members)>(rest) {
            return (position, members);
        }
    }
    if let Some(rest) = section.strip_prefix(SECTION_TAG_V1) {
        if let Ok((position, m)) = partita_types::decode::<(Vec<u8>, MembersV1)>(rest) {
            let members = Members {
                epoch: m.epoch,
                at: m.at,
                replicas: m.replicas,
                removed: m.removed,
                ..Members::default()
            };
            return (position, members);
        }
    }
    (section.to_vec(), Members::default())
}

/// State of run-time membership at a node.
#[derive(Debug, Default)]
pub(crate) struct MemberState {
    /// What this node's replica executed (replicas only; epoch 0 elsewhere).
    pub applied: Members,
    /// Operator requests this node proposed: (sequence number, request id).
    pub requests: Vec<(u64, u64)>,
    /// Sequence numbers of this node's membership commands.
    pub seq: u64,
    /// The position at which this node was removed.
    pub removed: Option<Instance>,
    /// This replica was added to a partition other than its file entry's (the
    /// partition its learner and state transfer follow): it stops instead of
    /// serving, with this as the reason.
    pub misplaced: Option<String>,
    /// The tick of the last promotion this learner proposed.
    pub promote_tick: Option<u64>,
    /// An operator asked this learner to promote itself.
    pub promote_asked: bool,
    /// Planted bug `member-apply-late`: changes held for the next value.
    pub late: Vec<Command>,
    /// The tick the replicas were last told to every node.
    pub told_tick: u64,
    /// How many times they were told.
    pub told_rounds: u64,
}

/// What a membership request got: the replicas after the change, or why not.
pub type MemberResult = Result<Members, String>;

impl NodeCore {
    /// The cluster file's replicas.
    fn initial_replicas(&self) -> &[NodeId] {
        &self.setup.membership.learners
    }

    /// ... with their partitions.
    fn initial_partitions(&self) -> Vec<(NodeId, partita_types::PartitionId)> {
        let m = &self.setup.membership;
        m.learners.iter().map(|&n| (n, m.partition_of(n))).collect()
    }

    /// Every node of the cluster file that is not a replica (their ids are taken).
    fn other_nodes(&self) -> Vec<NodeId> {
        let m = &self.setup.membership;
        let mut ids: BTreeSet<NodeId> = m.acceptors.iter().copied().collect();
        ids.extend(&m.batchers);
        ids.retain(|n| !m.learners.contains(n));
        ids.into_iter().collect()
    }

    /// The replicas changed at run time, newest known to this node (applied by its
    /// replica, or heard from one). Borrowed: it is read on every peer message and
    /// client request.
    pub fn members(&self) -> &Members {
        match self.ordering.as_ref().and_then(|o| o.members()) {
            Some(known) if known.epoch > self.member.applied.epoch => known,
            _ => &self.member.applied,
        }
    }

    /// The replicas as this node's replica applied them (at the position it executed
    /// up to; epoch 0 at a node without a replica).
    pub fn applied_members(&self) -> &Members {
        &self.member.applied
    }

    /// State partitioning: the replicas that answer each partition's commands, as
    /// this node's replica applied the changes (the cluster file's layout until the
    /// first change; learners answer nothing).
    pub(crate) fn answerers(&self) -> partita_types::PartitionLayout {
        self.member
            .applied
            .layout(&self.setup.membership.partitions, true)
    }

    /// Whether this node's replica answers clients: one of the replicas, and not a
    /// learner (a joining replica serves only once promoted).
    pub fn serves(&self) -> bool {
        self.setup.replica
            && self
                .members()
                .serves(self.initial_replicas(), self.setup.id)
    }

    /// The position at which this node was removed from the cluster: it has stopped
    /// taking part, and its driver should stop it. A replica is removed by its own
    /// change (it can be removed only once it is no acceptor); a node that is only an
    /// acceptor, once it is no acceptor any more.
    pub fn removed(&self) -> Option<Instance> {
        if self.member.removed.is_some() {
            // Not while an acceptor here still serves the decisions below its removal
            // (until this replica's durable checkpoint covers it), unless it cannot
            // serve its partition at all.
            let retiring = self
                .ordering
                .as_ref()
                .is_some_and(|o| o.acceptor_retiring());
            if retiring && self.member.misplaced.is_none() {
                return None;
            }
            return self.member.removed;
        }
        let members = self.members();
        let acceptor_only = self.setup.acceptor && !self.setup.replica && !self.setup.batcher;
        (acceptor_only && members.acceptors_removed.contains(&self.setup.id))
            .then(|| members.ordering_from() - 1)
    }

    /// Why this node stopped when it was not removed but cannot serve what it was
    /// added for (`None`: it runs, or was removed).
    pub fn stop_reason(&self) -> Option<&str> {
        self.member.misplaced.as_deref()
    }

    /// Whether `node` is an acceptor now (the cluster file's, or as changed since).
    pub fn is_acceptor(&self, node: NodeId) -> bool {
        self.members()
            .acceptors(&self.setup.membership.acceptors)
            .contains(&node)
    }

    /// How many membership changes this node knows of (its links follow).
    pub fn members_epoch(&self) -> u64 {
        self.members().epoch
    }

    /// Addresses of the replicas and acceptors added at run time, for the driver's
    /// links.
    pub fn added_addresses(&self) -> Vec<(NodeId, String)> {
        let members = self.members();
        let mut added: Vec<(NodeId, String)> =
            members.added().map(|(n, a)| (n, a.to_string())).collect();
        for (&n, a) in &members.acceptor_addrs {
            if !added.iter().any(|(m, _)| *m == n) {
                added.push((n, a.clone()));
            }
        }
        added
    }

    /// Whether a peer is a member: in the cluster file, or added at run time.
    pub(crate) fn is_member(&self, node: NodeId) -> bool {
        let m = &self.setup.membership;
        m.acceptors.contains(&node)
            || m.learners.contains(&node)
            || m.batchers.contains(&node)
            || self.members().replicas.contains_key(&node)
            || self.members().acceptors.contains(&node)
    }

    /// An operator's request (`partita member`), answered with
    /// [`Output::MemberDone`] carrying `request` once the change is applied here (or
    /// refused). A promotion goes to the learner itself, which proposes it once caught
    /// up; every other change is ordered from here.
    pub fn on_member_request(&mut self, request: u64, change: MemberChange, out: &mut Vec<Output>) {
        let refuse = |why: String, out: &mut Vec<Output>| {
            out.push(Output::MemberDone {
                request,
                result: Err(why),
            })
        };
        if let Some(why) = self.member_refusal(&change) {
            return refuse(why, out);
        }
        if let MemberChange::Promote { node } = change {
            if node != self.setup.id {
                return refuse(
                    format!(
                        "ask node {node} itself: a learner proposes its own promotion once caught up"
                    ),
                    out,
                );
            }
            if !self.members().is_learner(node) {
                return refuse(
                    format!("can only promote a learner member; node {node} is not one"),
                    out,
                );
            }
            if let Some(lag) = self.learner_lag() {
                if lag > PROMOTE_LAG_MAX {
                    return refuse(
                        format!(
                            "can only promote a learner member which is in sync with leader: \
                             node {node} knows of {lag} decided instances it has not executed"
                        ),
                        out,
                    );
                }
            }
            self.member.promote_asked = true;
        }
        let mut actions = Vec::new();
        match self.propose_member(change, &mut actions) {
            Ok(seq) => {
                self.member.requests.push((seq, request));
                self.run(actions, out);
            }
            Err(why) => refuse(why, out),
        }
    }

    /// Why `change` cannot be asked of this node at all (`None`: it can).
    fn member_refusal(&self, change: &MemberChange) -> Option<String> {
        if let Err(why) = self
            .ordering
            .as_ref()
            .map_or(Err("a cs server has no replicas to change".into()), |o| {
                o.member_changes()
            })
        {
            return Some(why);
        }
        if change.changes_acceptors() {
            let o = self.ordering.as_ref().expect("member_changes passed");
            if let Err(why) = o.acceptor_changes() {
                return Some(why);
            }
        }
        if !self.setup.replica {
            return Some(format!(
                "node {} is not a replica; send membership changes to a replica",
                self.setup.id
            ));
        }
        if self.member.removed.is_some() {
            return Some(format!(
                "node {} was removed from the cluster",
                self.setup.id
            ));
        }
        if let MemberChange::Add { partition, .. } = change {
            let count = self.setup.membership.partitions.map.count();
            if *partition >= count.max(1) {
                return Some(match count > 1 {
                    true => format!(
                        "partition {partition}: this cluster has partitions 0 to {}",
                        count - 1
                    ),
                    false => format!("partition {partition}: this cluster is not partitioned"),
                });
            }
        }
        let node = change.node();
        let m = &self.setup.membership;
        match change {
            MemberChange::Remove { .. } | MemberChange::Promote { .. }
                if m.batchers.contains(&node) =>
            {
                Some(format!(
                    "node {node} is a batcher: batchers are fixed by the cluster file; only \
                     replicas and acceptors change"
                ))
            }
            MemberChange::Remove { .. } if self.is_acceptor(node) => Some(format!(
                "node {node} is an acceptor too: remove its acceptor role first \
                 (partita member remove --acceptor {node}), then the replica"
            )),
            _ => None,
        }
    }

    /// Multicast `change` as this node's next membership command.
    fn propose_member(
        &mut self,
        change: MemberChange,
        actions: &mut Outbox,
    ) -> Result<u64, String> {
        self.member.seq += 1;
        let seq = self.member.seq;
        let groups = self.setup.membership.partitions.map.all();
        let initial = self.initial_partitions();
        let acceptors = self.setup.membership.acceptors.clone();
        let op = SystemOp::Member {
            change,
            initial,
            acceptors,
        };
        let mut cmd = Command::system(op, self.setup.id, MEMBER_KIND, seq);
        cmd.body = match cmd.body {
            partita_types::Body::Whole { payload, .. } => {
                partita_types::Body::Whole { groups, payload }
            }
            other => other,
        };
        let o = self.ordering.as_mut().expect("checked by member_refusal");
        o.multicast(cmd, None, actions).map(|()| seq)
    }

    /// How many decided instances this node knows of beyond what it executed (`None`:
    /// it learns nothing).
    fn learner_lag(&self) -> Option<u64> {
        self.ordering.as_ref()?.learner_lag()
    }

    /// This replica was added to partition `partition` (at `at`): if that is not its
    /// file entry's, it stops with the reason. Its learner takes its entry's
    /// partition's part of every value and its state transfer asks that partition's
    /// replicas, so it could never hold the partition it was added to (one stream: it
    /// would run the other partition's commands on its partition's state, and serve
    /// once caught up).
    fn check_own_partition(&mut self, partition: partita_types::PartitionId, at: Instance) {
        let (node, mine) = (self.setup.id, self.setup.partition);
        if !self.setup.membership.is_partitioned() || partition == mine {
            return;
        }
        if self.member.misplaced.is_none() {
            self.count("member_added_to_another_partition");
        }
        self.member.misplaced = Some(format!(
            "node {node} was added to partition {partition}, but its cluster-file entry \
             says partition {mine}, which it holds: remove it (partita member remove \
             {node}) and add it again with an entry that names the partition"
        ));
        self.member.removed = Some(at);
    }

    /// After a peer's [`Msg::Members`]: a replica that learns it was removed (it was
    /// down when the removal was ordered, so it never executed it) stops, and so does
    /// one that learns it was added to another partition than its own (before it
    /// executes its addition, which over Multi-Ring Paxos it may never reach: it
    /// merges its own partition's rings, and the other partition's learners are sent
    /// their values).
    pub(crate) fn heard_members(&mut self, told_removed: bool) {
        if self.setup.replica && self.member.removed.is_none() {
            let me = self.setup.id;
            if let Some(r) = self.members().replicas.get(&me) {
                let (partition, at) = (r.partition, r.at);
                self.check_own_partition(partition, at);
            }
        }
        let members = self.members();
        if self.setup.replica && members.removed.contains(&self.setup.id) {
            if self.member.removed.is_none() {
                let at = members.at;
                self.count("member_learned_removed");
                self.member.removed = Some(at);
            }
            // Told so by a replica whose durable checkpoint covers the newest acceptor
            // change (only those tell removed nodes: see `member_tick` and
            // `tell_members`): an acceptor here that was removed holds nothing that
            // checkpoint does not.
            if told_removed {
                if let Some(o) = self.ordering.as_mut() {
                    o.retire_acceptor(Instance::MAX);
                }
            }
        }
    }

    /// Apply the membership commands of `value` (at `instance`, about to execute; its
    /// execution name `name`): every replica does so at the same position, in the
    /// same order. The changes record the name as their position: on one stream it is
    /// the instance, and over Multi-Ring Paxos, whose partitions number their merged
    /// sequences differently, it is the same at every partition, so every replica
    /// holds the same [`Members`].
    pub(crate) fn apply_members(
        &mut self,
        instance: Instance,
        name: Instance,
        value: &Value,
        out: &mut Outbox,
    ) {
        let mut changed = false;
        let late = self.bugs.member_apply_late && self.setup.id % 2 == 1;
        let mut commands: Vec<Command> = std::mem::take(&mut self.member.late);
        for cmd in value.commands.iter().filter(|c| c.is_system()) {
            if late {
                // Planted bug: applied at the next value instead.
                self.member.late.push(cmd.clone());
            } else {
                commands.push(cmd.clone());
            }
        }
        for cmd in &commands {
            let Some(SystemOp::Member {
                change,
                initial,
                acceptors,
            }) = cmd.system_op()
            else {
                continue;
            };
            // The first change applies to the replicas its proposer's file started
            // from (the same at every replica, whatever its own file says now).
            let initial = match initial.is_empty() {
                true => self.initial_partitions(),
                false => initial,
            };
            let acceptors = match acceptors.is_empty() {
                true => self.setup.membership.acceptors.clone(),
                false => acceptors,
            };
            let others = self.other_nodes();
            let start = partita_types::members::Initial {
                replicas: &initial,
                acceptors: &acceptors,
                others: &others,
            };
            // An ordering whose acceptors cannot change refuses such a change alike at
            // every replica (the node that took it should have refused it already).
            let acceptors_fixed = match change.changes_acceptors() {
                true => self
                    .ordering
                    .as_ref()
                    .and_then(|o| o.acceptor_changes().err()),
                false => None,
            };
            let result = match acceptors_fixed {
                Some(why) => Err(why),
                None => self.member.applied.apply(start, &change, name),
            };
            match &result {
                Ok(()) => {
                    changed = true;
                    self.count("member_changes_applied");
                    if let MemberChange::Remove { node } = change {
                        if node == self.setup.id {
                            self.member.removed = Some(instance);
                        }
                    }
                    if let MemberChange::Add {
                        node, partition, ..
                    } = change
                    {
                        if node == self.setup.id {
                            self.check_own_partition(partition, instance);
                        }
                    }
                    if change.changes_acceptors() {
                        self.count("acceptor_changes_applied");
                    }
                }
                Err(_) => self.count("member_changes_refused"),
            }
            // The answer to the operator, at the node that proposed it.
            let from = (cmd.client & 0xffff_ffff) as NodeId;
            let kind = ((cmd.client >> 48) & 0xff) as u8;
            if from == self.setup.id && kind == MEMBER_KIND {
                if let Some(i) = self.member.requests.iter().position(|(s, _)| *s == cmd.seq) {
                    let (_, request) = self.member.requests.remove(i);
                    self.member_done.push(Output::MemberDone {
                        request,
                        result: result.map(|()| self.member.applied.clone()),
                    });
                }
            }
        }
        if changed {
            if self.setup.membership.is_partitioned() {
                let layout = self.answerers();
                if let Some(r) = self.replica.as_mut() {
                    r.set_answerers(layout);
                }
            }
            let members = self.member.applied.clone();
            if let Some(o) = self.ordering.as_mut() {
                o.adopt_members(&members, out);
            }
            self.tell_members(out);
        }
    }

    /// Tell every other node the configuration this node knows (after its replica
    /// applied a change, and every `announce_ticks` once there was one). Every node
    /// that knows of a change tells, acceptors and batchers too (what they recorded or
    /// heard): a replica that restarted from nothing, or from a checkpoint older than
    /// the change, knows none of the nodes added since and would drop what they send,
    /// so it learns them from any node its own configuration names.
    ///
    /// Removed acceptors hear it only from a replica whose durable checkpoint covers
    /// the newest acceptor change. An acceptor that only accepts stops once it hears
    /// of its removal, and until a checkpoint covers the change, the removed
    /// acceptors (with those that stay) hold the only copies of the decisions below
    /// it: a new acceptor has none, and a replica restarting without a checkpoint
    /// replays them from the acceptors. (Replicas checkpoint at every acceptor change
    /// for this; with checkpoints off, removed acceptors keep running.)
    pub(crate) fn tell_members(&mut self, out: &mut Outbox) {
        let members = self.members();
        if members.epoch == 0 {
            return;
        }
        let m = self.setup.membership.with_members(members);
        let mut to: BTreeSet<NodeId> = m.acceptors.iter().copied().collect();
        to.extend(&m.learners);
        to.extend(&m.batchers);
        if self.setup.replica && self.checkpoint_durable >= members.acceptor_change_at() {
            to.extend(&members.acceptors_removed);
        }
        to.remove(&self.setup.id);
        let msg = Msg::Members(Box::new(members.clone()));
        for to in to {
            out.push(partita_consensus::Action::Send {
                to,
                msg: msg.clone(),
            });
        }
    }

    /// Every `announce_ticks` once there was a change, the replicas go to every node
    /// again (one that was down or cut off when they changed learns them so); a
    /// learner that caught up proposes its promotion (every election timeout until it
    /// is applied).
    /// The tick from which [`NodeCore::member_tick`] tells the members around again
    /// (`None`: it never does, the first configuration being the cluster file's).
    fn members_told_next(&self) -> Option<u64> {
        let every = self.setup.checkpoint.announce_ticks.max(1);
        (self.members().epoch > 0).then(|| self.member.told_tick.saturating_add(every))
    }

    /// Whether this node is a learner whose promotion [`NodeCore::member_tick`] may ask
    /// for (when caught up, and again after an election timeout).
    fn promotion_wanted(&self) -> bool {
        self.member
            .applied
            .replicas
            .get(&self.setup.id)
            .is_some_and(|a| a.learner && (a.promote || self.member.promote_asked))
    }

    /// When [`NodeCore::member_tick`] may next act (see [`NodeCore::tick_due`]): the
    /// next telling, or the next tick while a promotion is wanted.
    pub(crate) fn member_tick_due(&self) -> partita_consensus::TickDue {
        if self.promotion_wanted() {
            return partita_consensus::TickDue::NEXT;
        }
        self.members_told_next()
            .map_or(partita_consensus::TickDue::NEVER, |t| {
                partita_consensus::TickDue::NEVER.tick(t)
            })
    }

    pub(crate) fn member_tick(&mut self, actions: &mut Outbox) {
        if self.members_told_next().is_some_and(|t| self.tick >= t) {
            self.member.told_tick = self.tick;
            self.tell_members(actions);
            // A removed replica that was down when it was removed hears nothing else
            // (nobody sends it decisions): told every tenth time, it stops. Only by a
            // replica whose durable checkpoint covers the newest acceptor change: a
            // removed replica whose acceptor was removed too keeps that acceptor's
            // log serving until then.
            self.member.told_rounds += 1;
            let covered = self.setup.replica
                && self.checkpoint_durable >= self.members().acceptor_change_at();
            if covered && self.member.told_rounds.is_multiple_of(REMOVED_TOLD_EVERY) {
                let members = self.members();
                let msg = Msg::Members(Box::new(members.clone()));
                for &to in &members.removed {
                    actions.push(partita_consensus::Action::Send {
                        to,
                        msg: msg.clone(),
                    });
                }
            }
        }
        let me = self.setup.id;
        if !self.promotion_wanted() {
            return;
        }
        if self.transfer.is_some() || self.learner_lag().is_none_or(|lag| lag > PROMOTE_LAG_MAX) {
            return;
        }
        let every = self.setup.coordinator_config.election_timeout_ticks.max(1);
        if self
            .member
            .promote_tick
            .is_some_and(|t| self.tick.saturating_sub(t) < every)
        {
            return;
        }
        self.member.promote_tick = Some(self.tick);
        if self
            .propose_member(MemberChange::Promote { node: me }, actions)
            .is_ok()
        {
            self.count("member_promotions_proposed");
        }
    }
}
