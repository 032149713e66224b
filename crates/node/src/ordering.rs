//! The atomic-multicast seam: what a node's ordering layer does for its execution
//! model, whatever protocol implements it.
//!
//! The papers' common abstraction (paper 002 §II, paper 003 §2.2): `multicast(groups,
//! command)`, and every learner subscribed to a set of groups delivers, in one order
//! that is acyclic across all learners, the commands addressed to its groups. Here a
//! command names its groups itself (`partita_types::Body::groups`; with state
//! partitioning the groups are the partitions) and an [`AtomicMulticast`] takes it with
//! [`AtomicMulticast::multicast`]. Deliveries come out as actions in the outbox:
//! [`Action::Deliver`] (a decided value at a position of the delivery stream, the
//! commands of this node's groups only, each with the time the ordering gave it) and,
//! for protocols that can tell early, [`Action::Propose`] (a value proposed but not
//! decided yet, for speculative execution). The node core turns those into executions
//! of its replica and never looks at which protocol fed them.
//!
//! [`PaxosOrdering`] implements the seam with paper 001's protocols: one totally
//! ordered stream, by Ring Paxos or Multi-Paxos (the cluster file's `[ordering] protocol`), and
//! with state partitioning one dissemination group per partition (split values, paper
//! 001 §III-C). It composes the roles one node plays (acceptor, coordinator and its
//! elector, learner, batcher), runs the election, and routes client commands to the
//! leader (directly, batched, or forwarded). Multi-Ring Paxos (deterministic merge of
//! several rings), GeoPaxos's serializers and EPaxos are to implement the same trait;
//! their messages will join the peer message type.

use partita_consensus::{
    Acceptor, AcceptorRecord, Action, Batcher, Coordinator, Elector, Learner, Msg, Outbox,
    PersistToken, TickDue,
};
use partita_smr::Access;
use partita_types::members::Members;
use partita_types::{Ballot, Command, Instance, NodeId};
use std::collections::{BTreeMap, VecDeque};

use crate::{Mode, NodeSetup, UnsafeBugs};

/// What the node core needs of its ordering layer. Handlers take one input and write
/// actions (sends, persists, deliveries) to the outbox, like every core.
///
/// Everything a driver needs to know about an ordering goes through this trait too:
/// what the node does here ([`AtomicMulticast::leads`], [`AtomicMulticast::batches`]),
/// how far it got ([`AtomicMulticast::report`], for status output and the simulator's
/// quiescence check), whether a peer contradicted a decision
/// ([`AtomicMulticast::conflicting_decisions`]), and a line for a liveness failure
/// ([`AtomicMulticast::describe`]). No driver looks at which protocol runs.
pub trait AtomicMulticast: Send {
    /// Multicast a client command to its groups. `access` is what the command touches
    /// (the node's replica computes it when [`AtomicMulticast::wants_access`] says
    /// so; `None` otherwise, or at a node without a replica). `Err` (with the reason
    /// for the client) if it cannot be taken now (a full queue, no leader known).
    fn multicast(
        &mut self,
        cmd: Command,
        access: Option<Access>,
        out: &mut Outbox,
    ) -> Result<(), String>;
    /// Whether [`AtomicMulticast::multicast`] needs what a command touches (orderings
    /// that order only conflicting commands, or place objects).
    fn wants_access(&self) -> bool {
        false
    }
    /// What this node's ordering truncated, in its own bytes (`None`: nothing), for
    /// the simulator's durability check: at least a majority of replicas' durable
    /// checkpoints must cover it ([`AtomicMulticast::covers`]), or losing a minority
    /// of replicas loses decided commands.
    fn truncation(&self) -> Option<Vec<u8>> {
        None
    }
    /// Whether a checkpoint at `position` holds everything below `truncation` (both
    /// this ordering's bytes). Orderings that report no truncation never get asked.
    fn covers(&self, _position: &[u8], _truncation: &[u8]) -> bool {
        true
    }
    /// Whether the replica may checkpoint only where the ordering says
    /// ([`Action::Cut`]: an ordering that delivers a partial order). `false`: after any
    /// step, everything delivered being a prefix of one total order.
    fn checkpoints_at_cuts(&self) -> bool {
        false
    }
    /// Whether replicas can be added and removed at run time (`partita member`); `Err`
    /// says why not, for the operator.
    fn member_changes(&self) -> Result<(), String> {
        Err(partita_types::members::NO_MEMBER_CHANGES.to_string())
    }
    /// Whether acceptors can be added and removed at run time too (given
    /// [`AtomicMulticast::member_changes`]); `Err` says why not, for the operator.
    fn acceptor_changes(&self) -> Result<(), String> {
        self.member_changes()
    }
    /// How many decided positions this node knows of beyond what it delivered
    /// (`None`: it learns nothing): a joining replica proposes its promotion once this
    /// is small.
    fn learner_lag(&self) -> Option<u64> {
        None
    }
    /// The members at `members` (the newest this node knows, from its replica or a
    /// peer's [`Msg::Members`]): decisions, heartbeats and truncation follow them from
    /// now on, and an acceptor change moves the acceptors, coordinator and elector
    /// here to the new ordering epoch. Whether they were newer than what the ordering
    /// had.
    fn adopt_members(&mut self, _members: &Members, _out: &mut Outbox) -> bool {
        false
    }
    /// The members as this node's replica applied them, at the position it executed
    /// up to (after a checkpoint was restored, or a value holding a membership change
    /// was applied): the learner delivers on in their ordering epoch (with `resume`:
    /// it paused after the value holding the change; without, it only takes the
    /// epoch, before it skips to a restored checkpoint).
    fn replica_members(&mut self, _members: &Members, _resume: bool, _out: &mut Outbox) {}
    /// The replicas this ordering follows (`None`: it does not support changes).
    fn members(&self) -> Option<&Members> {
        None
    }
    /// This node's replica holds a durable checkpoint up to `covered`: an acceptor
    /// here that a change removed at or below it stops (see
    /// [`AtomicMulticast::acceptor_retiring`]).
    fn retire_acceptor(&mut self, _covered: Instance) {}
    /// Whether an acceptor here was removed but still serves what it holds, until
    /// this node's replica checkpoints past its removal.
    fn acceptor_retiring(&self) -> bool {
        false
    }
    /// A peer message of the ordering protocol. Returns whether a role here took it.
    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) -> bool;
    /// A clock tick (`tick` counts them; `now_ms` is the driver's clock). A driver may
    /// skip ticks before [`AtomicMulticast::tick_due`]: `tick` then jumps.
    fn on_tick(&mut self, tick: u64, now_ms: u64, out: &mut Outbox);
    /// When `on_tick` may next act, if no input arrives first (see [`TickDue`]; the
    /// default, the next tick, is always right).
    fn tick_due(&self) -> TickDue {
        TickDue::NEXT
    }
    /// Writes with these tokens are durable (in order).
    fn on_persisted(&mut self, tokens: &[PersistToken], out: &mut Outbox);
    /// The last position delivered (`None`: this node delivers nothing).
    fn delivered_up_to(&self) -> Option<Instance>;
    /// Where the delivery stream stands beyond its position number (stored in every
    /// checkpoint, opaque to the node core; empty for one stream).
    fn position(&self) -> Vec<u8> {
        Vec::new()
    }
    /// Whether `position` (from a peer's checkpoint) is one [`AtomicMulticast::skip_to`]
    /// can take.
    fn check_position(&self, _position: &[u8]) -> Result<(), String> {
        Ok(())
    }
    /// Deliver from position `next` on: a checkpoint restored by state transfer covers
    /// everything below; `position` is its ordering section.
    fn skip_to(&mut self, next: Instance, position: &[u8], out: &mut Outbox);
    /// The replica's newest durable checkpoint covers everything up to `instance`
    /// (`position`: its ordering section): tell the acceptors, which truncate their
    /// logs below what a majority of replicas hold.
    fn announce_checkpoint(&mut self, instance: Instance, position: &[u8], out: &mut Outbox);
    /// The node this one believes leads (`None`: no leader in this protocol's sense).
    fn leader(&self) -> Option<NodeId>;
    /// The ballot under which this node leads a stream now (the highest, if it leads
    /// several), or `None`. Cheap: the simulator asks at every step (who takes a client
    /// command decides what it costs).
    fn leads(&self) -> Option<Ballot>;
    /// Whether client commands reaching this node go to a batcher here (it batches for
    /// a leader elsewhere). Cheap, as `leads`.
    fn batches(&self) -> bool {
        false
    }
    /// Decisions (or commits) peers sent that contradict one this node knows. Correct
    /// peers never cause one: the simulator fails a run in which it happens. Cheap.
    fn conflicting_decisions(&self) -> u64;
    /// Roles and progress, for status output and the simulator's quiescence check.
    fn report(&self) -> OrderingReport;
    /// One line on where this node's ordering stands, for a liveness failure.
    fn describe(&self) -> String;
    /// Add its counters of dropped and handled messages, by reason, and of its roles'
    /// work, to `into`.
    fn add_counters(&self, into: &mut BTreeMap<&'static str, u64>);
    /// Proposals and decisions noted for the driver's metrics since the last call
    /// (only where the configuration asks for them; none by default).
    fn drain_observations(&mut self, _out: &mut Vec<partita_consensus::Observation>) {}
    fn invariants(&self);
    /// The Paxos roles this node plays for its one stream (or, with Multi-Ring Paxos,
    /// for the ring it accepts for), for tests that look inside them. Drivers never
    /// need it: [`AtomicMulticast::report`] says what they use.
    fn paxos_roles(&self) -> Option<&PaxosOrdering> {
        None
    }
}

/// What one node's ordering reports about itself ([`AtomicMulticast::report`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OrderingReport {
    /// A leader's decided prefix of its stream (the highest ballot's, if it leads
    /// several).
    pub decided_up_to: Option<Instance>,
    /// An acceptor's state (the first stream it accepts for).
    pub acceptor: Option<AcceptorReport>,
    /// Each stream this node leads or learns (a ring, a serializer's log, or the one
    /// stream), for the simulator's quiescence check.
    pub streams: Vec<StreamReport>,
    /// Nothing queued or in flight at the roles here, nothing held back in a merge,
    /// nothing known decided (or committed) and not yet delivered here.
    pub idle: bool,
    /// What the roles here did, by name (a coordinator's proposals, a batcher's
    /// batches), for status output.
    pub role_counters: Vec<(String, u64)>,
}

/// An acceptor's promise and what it accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AcceptorReport {
    pub promised: Ballot,
    pub accepted: u64,
    pub accepted_max_instance: Instance,
    /// Everything below this instance is truncated (1: nothing).
    pub truncated_below: Instance,
}

/// One stream of an ordering at one node ([`OrderingReport::streams`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamReport {
    /// The stream's id (a ring's or a serializer's; 0 for one stream).
    pub stream: u32,
    /// The stream has a leader, and a settled cluster has one: every learner delivers
    /// what the highest-ballot leader decided. `false`: a leaderless stream (EPaxos's
    /// commits, a merged sequence), whose learners settle when they agree.
    pub led: bool,
    /// This node leads it: its ballot and decided prefix.
    pub leads: Option<(Ballot, Instance)>,
    /// This node learns it: where its delivery stands.
    pub delivered: Option<Instance>,
}

/// Paper 001's ordering: Ring Paxos or Multi-Paxos, one stream, a dissemination group
/// per partition. See the module doc.
pub struct PaxosOrdering {
    setup: NodeSetup,
    bugs: UnsafeBugs,
    acceptor: Option<Acceptor>,
    coordinator: Option<Coordinator>,
    /// Every acceptor watches the leader and campaigns when it falls silent.
    elector: Option<Elector>,
    learner: Option<Learner>,
    batcher: Option<Batcher>,
    /// The highest ballot a leader showed this node (heartbeats, Phase 1A/2A): who
    /// leads, for a node with no elector or learner to ask (a standalone batcher).
    leader_ballot: Ballot,
    /// Commands this node forwarded to the leader it knew, with the tick they left
    /// (the newest [`FORWARDED_MAX`], for [`FORWARDED_KEEP_ELECTIONS`] election
    /// timeouts). A forward to a leader that just crashed is lost, and its client
    /// would wait out its whole timeout; when another node takes the lead they go to
    /// it too. Sending one twice is safe: a coordinator drops a command it still holds
    /// by (client, seq), and replicas answer one they executed from the reply cache.
    forwarded: VecDeque<(u64, NodeId, Command)>,
    /// The leader `forwarded` was last brought up to date with.
    forwarded_leader: Option<NodeId>,
    tick: u64,
    clock_ms: u64,
    counters: BTreeMap<&'static str, u64>,
    /// The replicas changed at run time, newest known (epoch 0: the cluster file's).
    members: Members,
    /// The acceptor's durable records, kept until this node becomes an acceptor (one
    /// that joins: the cluster file names it `join = true`).
    recovered: Option<Vec<AcceptorRecord>>,
    /// A ring of Multi-Ring Paxos that carries only these partitions (one bit each):
    /// its learners are the replicas of those, as the changes left them (`None`:
    /// every replica learns the stream).
    carried: Option<u64>,
    /// This node's acceptor was removed by the change at this position, and its
    /// replica has no durable checkpoint covering it yet: the acceptor stays, in the
    /// epoch before, serving learners what it holds (the decisions below the change,
    /// which the new acceptors do not have), until one does
    /// ([`AtomicMulticast::retire_acceptor`]).
    retiring: Option<Instance>,
}

/// Recently forwarded commands kept for a new leader, at most.
pub const FORWARDED_MAX: usize = 4096;
/// ... and for at most this many election timeouts (long enough for the next acceptors
/// in line to campaign).
pub const FORWARDED_KEEP_ELECTIONS: u64 = 4;

impl PaxosOrdering {
    /// The roles of node `setup.id`, recovered from its acceptor's durable records
    /// (empty on a fresh start); its learner delivers from `next_deliver`. Returns the
    /// actions of starting (a fresh cluster's first coordinator runs Phase 1).
    pub fn new(
        setup: &NodeSetup,
        recovered: Vec<AcceptorRecord>,
        next_deliver: Instance,
        bugs: &UnsafeBugs,
        out: &mut Outbox,
    ) -> PaxosOrdering {
        Self::carrying(setup, None, recovered, next_deliver, bugs, out)
    }

    /// [`PaxosOrdering::new`] for a ring of Multi-Ring Paxos that carries only the
    /// partitions of `carried` (one bit each; `None`: all): replicas added at run time
    /// to other partitions are none of its learners.
    pub fn carrying(
        setup: &NodeSetup,
        carried: Option<u64>,
        recovered: Vec<AcceptorRecord>,
        next_deliver: Instance,
        bugs: &UnsafeBugs,
        out: &mut Outbox,
    ) -> PaxosOrdering {
        let id = setup.id;
        let mut o = PaxosOrdering {
            setup: setup.clone(),
            bugs: bugs.clone(),
            acceptor: None,
            coordinator: None,
            elector: None,
            learner: None,
            batcher: None,
            leader_ballot: Ballot::ZERO,
            forwarded: VecDeque::new(),
            forwarded_leader: None,
            tick: 0,
            clock_ms: 0,
            counters: BTreeMap::new(),
            members: Members::default(),
            recovered: None,
            carried,
            retiring: None,
        };
        assert_eq!(setup.mode, Mode::Smr, "a cs server orders nothing");
        // The members an acceptor's log recorded: its configuration, before any
        // replica tells it (all of them may have lost what they executed).
        let recorded = recovered.iter().rev().find_map(|r| match r {
            AcceptorRecord::Members(m) => Some((**m).clone()),
            _ => None,
        });
        if let Some(m) = recorded.filter(|_| setup.acceptor) {
            o.members = m;
        }
        let membership = o.membership();
        if setup.acceptor && membership.acceptor_index(id).is_none() {
            // An acceptor that joins: it votes once a change adds it (or one that
            // was removed: it stops).
            o.recovered = Some(recovered);
        } else if setup.acceptor {
            let mut a = Acceptor::recover(id, membership.clone(), recovered);
            a.forget_older_epochs();
            if bugs.forget_promise {
                a.unsafe_forget_promise();
            }
            a.set_unsafe_vote_before_durable(bugs.vote_before_durable);
            let elector = Elector::new(
                id,
                membership.clone(),
                setup.coordinator_config.election_timeout_ticks,
                a.promised(),
            )
            .with_home(setup.coordinator_config.home_leader);
            // A fresh cluster's initial coordinator leads at once. A restarted node
            // follows whoever leads now, and campaigns like any other acceptor if
            // nobody does.
            if a.promised() == Ballot::ZERO && setup.is_coordinator() {
                o.coordinator = Some(Coordinator::new(
                    id,
                    setup.membership.clone(),
                    setup.coordinator_config.clone(),
                    a.promised(),
                    a.first_undecided(),
                ));
            }
            o.elector = Some(elector);
            o.acceptor = Some(a);
        }
        if setup.replica {
            let mut learner = Learner::new(
                id,
                setup.membership.clone(),
                setup.learner_config.clone(),
                next_deliver,
            );
            learner.set_speculative(setup.speculative);
            learner.set_partition(setup.partition);
            learner.set_pause_at_members(true);
            learner.set_unsafe_ignore_epochs(bugs.member_old_epoch_decisions);
            o.learner = Some(learner);
        }
        if setup.batcher {
            o.batcher = Some(Batcher::new(setup.batcher_config.clone(), None));
        }
        if let Some(c) = o.coordinator.as_mut() {
            c.start(out);
        }
        o.sync_batcher_leader(out);
        o
    }

    pub fn acceptor(&self) -> Option<&Acceptor> {
        self.acceptor.as_ref()
    }

    /// Learn afresh from instance `next` on, whether that is ahead of what the learner
    /// delivered or behind it: a replica restored a checkpoint (state transfer) whose
    /// position in this stream is `next - 1`, and what the learner held beyond it was
    /// already handed on (GeoPaxos+: into a merge the checkpoint replaced), so it is
    /// learned again from the acceptors.
    pub fn restart_learner(&mut self, next: Instance, out: &mut Outbox) {
        let Some(old) = self.learner.take() else {
            return;
        };
        let mut l = Learner::new(
            self.setup.id,
            self.membership(),
            self.setup.learner_config.clone(),
            next,
        );
        l.set_speculative(old.is_speculative());
        l.set_partition(self.setup.partition);
        l.set_pause_at_members(true);
        l.set_unsafe_ignore_epochs(self.bugs.member_old_epoch_decisions);
        let mut ignored = Vec::new();
        // What the old learner knew of decisions beyond, the new one asks for again.
        l.on_tick(self.tick, &mut ignored);
        out.extend(ignored);
        self.learner = Some(l);
        self.count("learner_restarted");
    }
    pub fn coordinator(&self) -> Option<&Coordinator> {
        self.coordinator.as_ref()
    }
    pub fn elector(&self) -> Option<&Elector> {
        self.elector.as_ref()
    }
    pub fn learner(&self) -> Option<&Learner> {
        self.learner.as_ref()
    }
    pub fn batcher(&self) -> Option<&Batcher> {
        self.batcher.as_ref()
    }
    fn count(&mut self, what: &'static str) {
        self.count_n(what, 1);
    }

    /// The cluster file's membership with the replicas changed since.
    pub fn membership(&self) -> partita_consensus::Membership {
        self.membership_of(&self.members)
    }

    /// The cluster file's membership with `members`' changes (and, planted, the
    /// file's quorum size kept: `member-mixed-quorum`).
    fn membership_of(&self, members: &Members) -> partita_consensus::Membership {
        let mut m = match self.carried {
            Some(groups) if members.epoch > 0 => {
                let mut mine = members.clone();
                mine.replicas
                    .retain(|_, r| r.partition < 64 && groups & (1u64 << r.partition) != 0);
                self.setup.membership.with_members(&mine)
            }
            _ => self.setup.membership.with_members(members),
        };
        if self.bugs.member_mixed_quorum && m.epoch > 0 {
            m.unsafe_quorum = Some(self.setup.membership.majority());
        }
        m
    }

    fn count_n(&mut self, what: &'static str, n: u64) {
        if n > 0 {
            *self.counters.entry(what).or_default() += n;
        }
    }

    /// Tell the batcher who leads: this node while it coordinates, else the leader it
    /// knows, but nobody while it believes itself the leader without coordinating (a
    /// restarted former leader: batches sent to itself would be dropped).
    /// Where this node's batcher sends: to its own coordinator while it leads, else
    /// to the leader it knows (none while that is itself without a coordinator).
    fn batcher_leader(&self) -> Option<NodeId> {
        if self.coordinator.is_some() {
            Some(self.setup.id)
        } else {
            self.leader().filter(|&l| l != self.setup.id)
        }
    }

    fn sync_batcher_leader(&mut self, actions: &mut Outbox) {
        let leader = self.batcher_leader();
        if let Some(b) = self.batcher.as_mut() {
            b.set_leader(leader, actions);
        }
    }

    /// Become the leader: a coordinator with a ballot above everything seen, starting
    /// Phase 1 at the first instance not known decided.
    fn campaign(&mut self, floor: Ballot, actions: &mut Outbox) {
        let Some(a) = self.acceptor.as_ref() else {
            return;
        };
        let floor = floor.max(a.promised());
        let membership = self.membership();
        if floor.epoch() > membership.epoch {
            // A ballot of a later ordering epoch was seen: the acceptors changed and
            // this node does not know them yet (a replica tells it soon). It cannot
            // lead with acceptors it does not know.
            self.count("campaigns_refused_later_epoch");
            return;
        }
        let mut c = Coordinator::new(
            self.setup.id,
            membership,
            self.setup.coordinator_config.clone(),
            floor,
            a.first_undecided(),
        );
        c.set_clock(self.clock_ms);
        c.observe_time(a.newest_time_ms());
        c.on_tick(self.tick, actions);
        if self.bugs.skip_phase1 {
            c.unsafe_skip_phase1(actions);
        } else {
            c.start(actions);
        }
        if let Some(e) = self.elector.as_mut() {
            e.on_own_ballot(c.ballot());
        }
        self.count("campaigns");
        self.coordinator = Some(c);
    }

    /// A ballot from a leader arrived: remember it, and step down if it beats ours.
    fn leader_activity(&mut self, ballot: Ballot) {
        self.leader_ballot = self.leader_ballot.max(ballot);
        if let Some(e) = self.elector.as_mut() {
            e.on_leader_activity(ballot);
        }
        if let Some(c) = &self.coordinator {
            if ballot > c.ballot() && ballot.node != self.setup.id {
                self.step_down();
            }
        }
    }

    fn step_down(&mut self) {
        if let Some(c) = self.coordinator.take() {
            self.count("stepped_down");
            if let (Some(e), Some(b)) = (self.elector.as_mut(), c.deposed_by()) {
                e.on_leader_activity(b);
            }
        }
    }
}

impl PaxosOrdering {
    /// The acceptors changed: a new ordering epoch (`partita_types::members`) orders
    /// from `m.epoch_from` on, with `m.acceptors`. Every instance before is decided
    /// (a replica executed the change). This node's acceptor moves to it (or starts:
    /// a joining acceptor; or stops: a removed one), its coordinator of the old epoch
    /// stops, and the leader of the old epoch leads the new one if it is still an
    /// acceptor (else the new configuration's coordinator), taking along the commands
    /// the old epoch had not decided before the change.
    fn new_epoch(&mut self, m: partita_consensus::Membership, out: &mut Outbox) {
        let id = self.setup.id;
        self.count("ordering_epochs");
        let old_leader = self.leader();
        let commands = self
            .coordinator
            .take()
            .map(|c| c.into_commands(m.epoch_from))
            .unwrap_or_default();
        if m.acceptor_index(id).is_none() {
            if self.learner.is_some() && self.acceptor.is_some() {
                // A replica's acceptor: its log may hold the only copies of the
                // decisions below the change until a checkpoint covers it (as a node
                // that only accepts hears of its removal only then).
                if self.retiring.is_none() {
                    self.retiring = Some(m.epoch_from.saturating_sub(1));
                    self.count("acceptor_retiring");
                }
            } else if self.acceptor.take().is_some() {
                self.count("acceptor_removed");
            }
            self.elector = None;
            self.count_n("dropped_commands_epoch_change", commands.len() as u64);
            return;
        }
        match self.acceptor.as_mut() {
            Some(a) => a.reconfigure(m.clone()),
            None => {
                let records = self.recovered.take().unwrap_or_default();
                let mut a = Acceptor::recover(id, m.clone(), records);
                a.forget_older_epochs();
                a.set_unsafe_vote_before_durable(self.bugs.vote_before_durable);
                self.acceptor = Some(a);
                self.count("acceptor_joined");
            }
        }
        let promised = self.acceptor.as_ref().expect("just set").promised();
        let mut elector = Elector::new(
            id,
            m.clone(),
            self.setup.coordinator_config.election_timeout_ticks,
            promised,
        )
        .with_home(self.setup.coordinator_config.home_leader);
        elector.start_at(self.tick);
        self.elector = Some(elector);
        let leads = match old_leader {
            Some(l) if m.acceptor_index(l).is_some() => l == id,
            _ => m.coordinator == id,
        };
        if leads {
            // The new acceptors hear the change from here first (links keep their
            // order), so none drops this Phase 1 as of an epoch it does not know yet.
            let members = Msg::Members(Box::new(self.members.clone()));
            for &a in m.acceptors.iter().filter(|&&a| a != id) {
                out.push(Action::Send {
                    to: a,
                    msg: members.clone(),
                });
            }
            self.campaign(Ballot::ZERO, out);
            if let Some(c) = self.coordinator.as_mut() {
                let n = commands.len() as u64;
                let refused = commands
                    .into_iter()
                    .filter(|cmd| !c.on_command(cmd.clone(), out))
                    .count() as u64;
                self.count_n("commands_carried_to_new_epoch", n - refused);
                self.count_n("dropped_commands_epoch_change", refused);
            }
        } else {
            self.count_n("dropped_commands_epoch_change", commands.len() as u64);
        }
    }

    /// A message both the learner and the acceptor take: each role this node has gets
    /// it (cloned only when it has both). Whether any did.
    fn give_learner_and_acceptor(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) -> bool {
        match (self.learner.as_mut(), self.acceptor.as_mut()) {
            (Some(l), Some(a)) => {
                l.on_message(from, msg.clone(), out);
                a.on_message(from, msg, out);
            }
            (Some(l), None) => l.on_message(from, msg, out),
            (None, Some(a)) => a.on_message(from, msg, out),
            (None, None) => return false,
        }
        true
    }
}

impl PaxosOrdering {
    /// Forget forwards older than the window; if another node leads now, send it the
    /// ones that went to the old leader (or take them, if this node leads).
    fn reforward(&mut self, out: &mut Outbox) {
        let keep_ticks =
            FORWARDED_KEEP_ELECTIONS * self.setup.coordinator_config.election_timeout_ticks;
        while self
            .forwarded
            .front()
            .is_some_and(|(t, _, _)| self.tick.saturating_sub(*t) > keep_ticks)
        {
            self.forwarded.pop_front();
        }
        let leader = self.leader();
        if leader == self.forwarded_leader {
            return;
        }
        self.forwarded_leader = leader;
        let Some(leader) = leader else { return };
        let me = self.setup.id;
        for (_, to, cmd) in self.forwarded.iter_mut() {
            if *to == leader {
                continue;
            }
            *to = leader;
            *self.counters.entry("requests_reforwarded").or_default() += 1;
            match self.coordinator.as_mut() {
                Some(c) if leader == me => {
                    if !c.on_command(cmd.clone(), out) {
                        *self
                            .counters
                            .entry("dropped_forward_queue_full")
                            .or_default() += 1;
                    }
                }
                _ => out.push(Action::Send {
                    to: leader,
                    msg: Msg::Forward { cmd: cmd.clone() },
                }),
            }
        }
        if leader == me {
            // Leading: whatever was forwarded is now this node's own to order.
            self.forwarded.clear();
        }
    }
}

impl AtomicMulticast for PaxosOrdering {
    /// A command at a node that leads goes to its coordinator; at a node that does not
    /// lead, to its batcher if it has the role, otherwise it is forwarded alone to the
    /// leader it knows (once: no forwarding loops).
    fn multicast(
        &mut self,
        cmd: Command,
        _access: Option<Access>,
        out: &mut Outbox,
    ) -> Result<(), String> {
        match (self.coordinator.as_mut(), self.batcher.as_mut()) {
            (Some(c), _) => {
                if c.on_command(cmd, out) {
                    Ok(())
                } else {
                    Err("coordinator queue full".to_string())
                }
            }
            // Not the leader: a batcher packs it with others for the leader.
            (None, Some(b)) => {
                if b.on_command(cmd, out) {
                    self.count("requests_batched");
                    Ok(())
                } else {
                    Err(format!(
                        "node {}: batcher buffer full; retry",
                        self.setup.id
                    ))
                }
            }
            (None, None) => match self.leader() {
                // Not the leader: pass the command on to the one we know.
                Some(leader) if leader != self.setup.id => {
                    self.count("requests_forwarded");
                    if self.forwarded.len() == FORWARDED_MAX {
                        self.forwarded.pop_front();
                    }
                    self.forwarded.push_back((self.tick, leader, cmd.clone()));
                    out.push(Action::Send {
                        to: leader,
                        msg: Msg::Forward { cmd },
                    });
                    Ok(())
                }
                _ => Err(format!(
                    "node {} does not coordinate and knows no leader yet; retry",
                    self.setup.id
                )),
            },
        }
    }

    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) -> bool {
        let mut handled = false;
        match &msg {
            Msg::Heartbeat { ballot, .. }
            | Msg::Phase1A { ballot, .. }
            | Msg::Phase2A { ballot, .. } => self.leader_activity(*ballot),
            _ => {}
        }
        match &msg {
            Msg::Forward { .. } => {
                handled = true;
                let Msg::Forward { cmd } = msg else {
                    unreachable!()
                };
                match self.coordinator.as_mut() {
                    Some(c) => {
                        if !c.on_command(cmd, out) {
                            self.count("dropped_forward_queue_full");
                        }
                    }
                    // Forwarded once only: no loops between nodes that disagree.
                    None => self.count("dropped_forward_not_leader"),
                }
            }
            Msg::ForwardBatch { .. } => {
                handled = true;
                let Msg::ForwardBatch { seq, cmds } = msg else {
                    unreachable!()
                };
                match self.coordinator.as_mut() {
                    Some(c) => {
                        let n = cmds.len() as u64;
                        let refused = cmds
                            .into_iter()
                            .map(|cmd| c.on_command(cmd, out))
                            .filter(|queued| !queued)
                            .count() as u64;
                        out.push(Action::Send {
                            to: from,
                            msg: Msg::ForwardAck { seq },
                        });
                        self.count("forward_batches_received");
                        self.count_n("forward_batch_commands", n);
                        self.count_n("dropped_forward_batch_queue_full", refused);
                    }
                    // The batcher resends to whoever leads: no forwarding loops.
                    None => self.count("dropped_forward_batch_not_leader"),
                }
            }
            Msg::ForwardAck { seq } => {
                if let Some(b) = self.batcher.as_mut() {
                    handled = true;
                    b.on_ack(*seq, out);
                }
            }
            Msg::Phase1B { .. } | Msg::Nack { .. } | Msg::Phase2B { .. } | Msg::Alive { .. } => {
                if let Some(c) = self.coordinator.as_mut() {
                    c.on_message(from, msg, out);
                    handled = true;
                }
            }
            Msg::Phase1A { .. } | Msg::RingVote { .. } => {
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, out);
                    handled = true;
                }
            }
            Msg::DecideValue { instance, value }
                if self.setup.membership.is_partitioned()
                    && self.learner.is_some()
                    && self.acceptor.is_some() =>
            {
                // A partition's learner may be sent its partition's projection of a
                // decided value (by a leader that does not know yet that this node is
                // an acceptor too): the acceptor takes the decision, never the value,
                // which it would keep and serve as the chosen one.
                let (instance, value) = (*instance, value.clone());
                let decided = vec![(instance, value.vid)];
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, Msg::Decide { decided }, out);
                }
                if let Some(l) = self.learner.as_mut() {
                    l.on_message(from, Msg::DecideValue { instance, value }, out);
                }
                handled = true;
            }
            Msg::Phase2A { .. } | Msg::Decide { .. } | Msg::DecideValue { .. } => {
                handled |= self.give_learner_and_acceptor(from, msg, out);
            }
            Msg::Heartbeat { .. } => {
                // A batcher learns who leads from it (`leader_activity` above).
                handled |= self.batcher.is_some();
                handled |= self.give_learner_and_acceptor(from, msg, out);
            }
            Msg::LearnReply { .. } | Msg::AcceptedValues { .. } => {
                if let Some(l) = self.learner.as_mut() {
                    l.on_message(from, msg, out);
                    handled = true;
                }
            }
            Msg::Checkpointed { .. } | Msg::ReadAccepted { .. } => {
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, out);
                    handled = true;
                }
            }
            Msg::Members(m) => {
                handled = true;
                let m = (**m).clone();
                if self.adopt_members(&m, out) {
                    self.count("members_adopted_from_peers");
                }
            }
            Msg::Truncated { .. } | Msg::SkipRequest { .. } => {
                if let Some(c) = self.coordinator.as_mut() {
                    c.on_message(from, msg, out);
                    handled = true;
                }
            }
            Msg::LearnRequest { .. } => {
                if let Some(c) = self.coordinator.as_mut() {
                    c.on_message(from, msg.clone(), out);
                    handled = true;
                }
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, out);
                    handled = true;
                }
            }
            // State transfer is the replica's business, not the ordering's; ring
            // envelopes and merge signals are Multi-Ring Paxos's, EPaxos's messages
            // its own ordering's.
            Msg::CheckpointRequest { .. }
            | Msg::CheckpointChunk { .. }
            | Msg::OnRing { .. }
            | Msg::Exec { .. }
            | Msg::Epaxos(_)
            | Msg::PositionCheckpointed { .. }
            | Msg::Merged { .. } => {}
        }
        if self
            .coordinator
            .as_ref()
            .is_some_and(|c| c.deposed_by().is_some())
        {
            self.step_down();
        }
        self.sync_batcher_leader(out);
        handled
    }

    fn tick_due(&self) -> TickDue {
        let leading = self.coordinator.is_some();
        // A leader changed by a campaign or a message since the last tick: the batcher
        // and the commands forwarded to the old leader follow it at the next.
        let leader = self.leader();
        if leader != self.forwarded_leader {
            return TickDue::NEXT;
        }
        let mut due = TickDue::NEVER;
        if let Some(b) = &self.batcher {
            if b.leader() != self.batcher_leader() {
                return TickDue::NEXT;
            }
            due = due.min(b.tick_due());
        }
        if let Some(c) = &self.coordinator {
            due = due.min(c.tick_due());
        }
        if let Some(e) = &self.elector {
            due = due.min(e.tick_due(leading));
        }
        if let Some(l) = &self.learner {
            due = due.min(l.tick_due());
        }
        due
    }

    fn on_tick(&mut self, tick: u64, now_ms: u64, out: &mut Outbox) {
        self.tick = tick;
        self.clock_ms = self.clock_ms.max(now_ms);
        if let Some(c) = self.coordinator.as_mut() {
            c.set_clock(self.clock_ms);
            c.on_tick(tick, out);
        }
        let leading = self.coordinator.is_some();
        let campaign = self.elector.as_mut().and_then(|e| e.on_tick(tick, leading));
        if let Some(floor) = campaign {
            if self.coordinator.is_none() {
                self.campaign(floor, out);
            }
        }
        if let Some(l) = self.learner.as_mut() {
            l.on_tick(tick, out);
        }
        self.sync_batcher_leader(out);
        self.reforward(out);
        if let Some(b) = self.batcher.as_mut() {
            b.on_tick(tick, out);
        }
    }

    fn on_persisted(&mut self, tokens: &[PersistToken], out: &mut Outbox) {
        let Some(a) = self.acceptor.as_mut() else {
            // Writes of an acceptor that a change removed since.
            self.count_n("persisted_after_acceptor_removed", tokens.len() as u64);
            return;
        };
        for &t in tokens {
            a.on_persisted(t, out);
        }
    }

    fn delivered_up_to(&self) -> Option<Instance> {
        self.learner.as_ref().map(|l| l.delivered_up_to())
    }

    fn skip_to(&mut self, next: Instance, _position: &[u8], out: &mut Outbox) {
        if let Some(l) = self.learner.as_mut() {
            l.skip_to(next, out);
        }
    }

    fn announce_checkpoint(&mut self, instance: Instance, _position: &[u8], out: &mut Outbox) {
        for &a in &self.membership().acceptors {
            out.push(Action::Send {
                to: a,
                msg: Msg::Checkpointed { instance },
            });
        }
    }

    fn leads(&self) -> Option<Ballot> {
        self.coordinator.as_ref().map(|c| c.ballot())
    }

    fn member_changes(&self) -> Result<(), String> {
        Ok(())
    }

    fn learner_lag(&self) -> Option<u64> {
        let l = self.learner.as_ref()?;
        Some(l.known_decided().saturating_sub(l.delivered_up_to()))
    }

    fn adopt_members(&mut self, members: &Members, out: &mut Outbox) -> bool {
        if members.epoch <= self.members.epoch {
            return false;
        }
        let epoch = self.members.ordering_epoch;
        self.members = members.clone();
        let m = self.membership();
        if m.epoch > epoch {
            self.new_epoch(m.clone(), out);
        }
        if let Some(a) = self.acceptor.as_mut() {
            a.set_learners(&m);
        }
        if let Some(c) = self.coordinator.as_mut() {
            c.set_learners(&m);
        }
        if let Some(l) = self.learner.as_mut() {
            l.set_learners(&m);
        }
        // A retiring acceptor keeps the epoch before in its log: restarted before a
        // checkpoint covers its removal, it serves the decisions below it again.
        if let Some(a) = self.acceptor.as_mut().filter(|_| self.retiring.is_none()) {
            a.record_members(&self.members, out);
        }
        true
    }

    fn retire_acceptor(&mut self, covered: Instance) {
        if self.retiring.is_some_and(|at| covered >= at) {
            self.retiring = None;
            if self.acceptor.take().is_some() {
                self.count("acceptor_retired");
            }
        }
    }

    fn acceptor_retiring(&self) -> bool {
        self.retiring.is_some()
    }

    fn replica_members(&mut self, members: &Members, resume: bool, out: &mut Outbox) {
        let m = self.membership_of(members);
        if let Some(l) = self.learner.as_mut() {
            if m.epoch >= l.epoch() {
                l.reconfigure(m);
            }
            if resume {
                l.resume(out);
            }
        }
    }

    fn members(&self) -> Option<&Members> {
        Some(&self.members)
    }

    fn paxos_roles(&self) -> Option<&PaxosOrdering> {
        Some(self)
    }

    fn batches(&self) -> bool {
        self.coordinator.is_none() && self.batcher.is_some()
    }

    fn conflicting_decisions(&self) -> u64 {
        self.learner.as_ref().map_or(0, |l| {
            l.drops()
                .0
                .get(partita_consensus::CONFLICTING_DECISION)
                .copied()
                .unwrap_or(0)
        })
    }

    fn report(&self) -> OrderingReport {
        let c = self.coordinator.as_ref();
        let mut role_counters = Vec::new();
        if let Some(c) = c {
            let s = c.stats();
            for (k, v) in [
                ("commands_received", s.commands_received),
                ("values_proposed", s.values_proposed),
                ("instances_decided", s.instances_decided),
                ("commands_refused", s.commands_refused),
                ("duplicates_dropped", s.duplicates_dropped),
                ("phase1_runs", s.phase1_runs),
                ("retransmits", s.retransmits),
            ] {
                role_counters.push((k.to_string(), v));
            }
        }
        if let Some(a) = &self.acceptor {
            role_counters.push(("acceptor_votes".into(), a.votes_cast()));
        }
        if let Some(b) = &self.batcher {
            let s = b.stats();
            role_counters.extend(s.named().iter().map(|(k, v)| (format!("batcher_{k}"), *v)));
            // Mean commands per batch, in hundredths (counters are integers).
            role_counters.push((
                "batcher_mean_batch_commands_x100".into(),
                (s.mean_batch_commands() * 100.0).round() as u64,
            ));
            role_counters.push(("batcher_buffered".into(), b.buffered() as u64));
            role_counters.extend(
                b.drops()
                    .0
                    .iter()
                    .map(|(k, v)| (format!("batcher_dropped_{k}"), *v)),
            );
        }
        let leads = c.map(|c| (c.ballot(), c.decided_up_to()));
        let delivered = self.learner.as_ref().map(|l| l.delivered_up_to());
        let learner_behind = self
            .learner
            .as_ref()
            .is_some_and(|l| l.known_decided() > l.delivered_up_to());
        let streams = if leads.is_some() || delivered.is_some() {
            vec![StreamReport {
                stream: 0,
                led: true,
                leads,
                delivered,
            }]
        } else {
            Vec::new()
        };
        OrderingReport {
            decided_up_to: leads.map(|(_, d)| d),
            acceptor: self.acceptor.as_ref().map(|a| AcceptorReport {
                promised: a.promised(),
                accepted: a.accepted_count() as u64,
                accepted_max_instance: a.max_accepted_instance(),
                truncated_below: a.truncated_below(),
            }),
            streams,
            idle: c.is_none_or(|c| c.in_flight() == 0 && c.pending_commands() == 0)
                && !learner_behind
                && self.batcher.as_ref().is_none_or(|b| b.buffered() == 0),
            role_counters,
        }
    }

    fn describe(&self) -> String {
        let mut s = Vec::new();
        if let Some(c) = &self.coordinator {
            s.push(format!(
                "leads {}, decided {}, {} in flight, {} pending commands, {} skipped as truncated, {} skips ({} asked for)",
                c.ballot(),
                c.decided_up_to(),
                c.in_flight(),
                c.pending_commands(),
                c.stats().instances_skipped,
                c.stats().skips_proposed,
                c.stats().skips_on_demand
            ));
        }
        if let Some(l) = &self.learner {
            s.push(format!(
                "delivered up to {} (knows {} decided)",
                l.delivered_up_to(),
                l.known_decided()
            ));
        }
        if let Some(a) = &self.acceptor {
            s.push(format!(
                "promised {}, {} accepted (max instance {})",
                a.promised(),
                a.accepted_count(),
                a.max_accepted_instance()
            ));
        }
        if let Some(b) = &self.batcher {
            s.push(format!(
                "batcher: leader {:?}, {} buffered, {} outstanding",
                b.leader(),
                b.buffered(),
                b.outstanding()
            ));
        }
        s.join("; ")
    }

    fn leader(&self) -> Option<NodeId> {
        if let Some(c) = &self.coordinator {
            return Some(c.ballot().node);
        }
        if let Some(e) = &self.elector {
            return Some(e.leader());
        }
        if let Some(l) = &self.learner {
            return Some(l.leader());
        }
        // A standalone batcher: the initial coordinator until a leader shows itself.
        self.batcher.as_ref().map(|_| {
            if self.leader_ballot == Ballot::ZERO {
                self.setup.membership.coordinator
            } else {
                self.leader_ballot.node
            }
        })
    }

    fn add_counters(&self, into: &mut BTreeMap<&'static str, u64>) {
        for (k, v) in &self.counters {
            *into.entry(k).or_default() += v;
        }
        if let Some(n) = self
            .elector
            .as_ref()
            .map(|e| e.reclaims())
            .filter(|&n| n > 0)
        {
            *into.entry("leader_reclaims").or_default() += n;
        }
    }

    fn drain_observations(&mut self, out: &mut Vec<partita_consensus::Observation>) {
        if let Some(c) = &mut self.coordinator {
            c.drain_observations(out);
        }
    }

    fn invariants(&self) {
        if let Some(a) = &self.acceptor {
            a.invariants();
        }
        if let Some(c) = &self.coordinator {
            c.invariants();
            assert!(c.deposed_by().is_none(), "a deposed coordinator still runs");
        }
        if let Some(l) = &self.learner {
            l.invariants();
        }
        if let Some(e) = &self.elector {
            e.invariants();
        }
        if let Some(b) = &self.batcher {
            b.invariants();
            if self.coordinator.is_some() {
                assert_eq!(
                    b.leader(),
                    Some(self.setup.id),
                    "a leader batches elsewhere"
                );
            }
        }
    }
}

/// When an ordering that delivers a partial order (GeoPaxos+, EPaxos) proposes a
/// barrier, a command ordered with every other one. A barrier is not free: every
/// stream holds what it ordered after the barrier until the barrier is ordered
/// everywhere (a wide-area round trip under GeoPaxos+), so one is proposed only when
/// something needs it:
///
/// - before anything ran here (ordered time is not known yet, so no command is taken);
/// - once `every_commands` commands ran since the last one: a cut, where replicas
///   checkpoint (the checkpoint interval; 0: replicas never checkpoint);
/// - once `interval_ms` passed since the last one and commands ran, when ordered time
///   must move (sessions expire by it): `timed`.
///
/// The first replica in line proposes first; replica `rank` waits `rank + 1` times as
/// long (commands or time), so another takes over when the first is down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarrierPolicy {
    pub interval_ms: u64,
    pub every_commands: u64,
    pub timed: bool,
    /// Timed barriers even when no command ran since the last one: the service keeps
    /// time (a lease must expire in an idle cluster too).
    pub idle: bool,
}

impl BarrierPolicy {
    /// The policy for a node: barriers for its checkpoint interval, and timed ones
    /// every `interval_ms` when sessions expire.
    /// A service that keeps time gets timed barriers at least every tick of its, idle
    /// or not.
    pub fn of(setup: &crate::NodeSetup, interval_ms: u64) -> BarrierPolicy {
        let tick = setup.service.tick_ms();
        BarrierPolicy {
            interval_ms: tick.map_or(interval_ms, |t| interval_ms.min(t)).max(1),
            every_commands: setup.checkpoint.interval_instances,
            timed: setup.session_lease_ms.is_some() || tick.is_some(),
            idle: tick.is_some(),
        }
    }

    /// When replica `rank` may next propose a barrier, with no other input (a command
    /// run or a barrier is one): ordered time is `time_ms` (0: none ran yet), `since`
    /// commands ran since the last barrier, which ran at `last_ms` of this node's
    /// clock. At once, at the clock time of its timed turn, or never. (A barrier this
    /// node proposed less than `interval_ms` ago is still under way: the caller waits
    /// for it.)
    pub fn due_at(&self, rank: usize, time_ms: u64, since: u64, last_ms: u64) -> TickDue {
        if time_ms == 0 {
            return TickDue::NEXT;
        }
        if since == 0 && !self.idle {
            return TickDue::NEVER;
        }
        let turn = 1 + rank as u64;
        if self.every_commands > 0 && since >= self.every_commands.saturating_mul(turn) {
            return TickDue::NEXT;
        }
        match self.timed {
            true => {
                TickDue::NEVER.clock(last_ms.saturating_add(self.interval_ms.saturating_mul(turn)))
            }
            false => TickDue::NEVER,
        }
    }

    /// [`BarrierPolicy::due_at`] for a node that waits an interval after proposing one
    /// (`proposed_ms`: its clock then, while that barrier is under way) before it
    /// proposes another: when its tick may next propose one.
    pub fn next_at(
        &self,
        rank: usize,
        time_ms: u64,
        since: u64,
        last_ms: u64,
        proposed_ms: Option<u64>,
    ) -> TickDue {
        let due = self.due_at(rank, time_ms, since, last_ms);
        match proposed_ms {
            // At once is clock 0.
            Some(t) if due != TickDue::NEVER => {
                TickDue::NEVER.clock(due.clock_ms.max(t.saturating_add(self.interval_ms)))
            }
            _ => due,
        }
    }

    /// Whether replica `rank` proposes a barrier now, at `clock_ms` of this node's
    /// clock ([`BarrierPolicy::due_at`]).
    pub fn due(&self, rank: usize, time_ms: u64, since: u64, last_ms: u64, clock_ms: u64) -> bool {
        self.due_at(rank, time_ms, since, last_ms).clock_ms <= clock_ms
    }
}

#[cfg(test)]
mod barrier_tests {
    use super::BarrierPolicy;

    #[test]
    fn barriers_come_only_when_time_or_a_checkpoint_needs_one() {
        let p = BarrierPolicy {
            interval_ms: 1000,
            every_commands: 100,
            timed: false,
            idle: false,
        };
        assert!(p.due(0, 0, 0, 0, 5), "no time yet: the first barrier");
        assert!(!p.due(0, 7, 0, 0, 60_000), "nothing ran since the last one");
        assert!(
            !p.due(0, 7, 99, 0, 60_000),
            "untimed: time alone is no reason"
        );
        assert!(p.due(0, 7, 100, 0, 1), "a checkpoint's worth ran");
        assert!(
            !p.due(1, 7, 100, 0, 1),
            "the second replica waits twice as long"
        );
        assert!(p.due(1, 7, 200, 0, 1));
        let timed = BarrierPolicy {
            timed: true,
            every_commands: 0,
            ..p
        };
        assert!(
            !timed.due(0, 7, 1_000_000, 0, 999),
            "no checkpoints: count is no reason"
        );
        assert!(timed.due(0, 7, 1, 0, 1000));
        assert!(!timed.due(2, 7, 1, 0, 2999) && timed.due(2, 7, 1, 0, 3000));
        assert!(!timed.due(0, 7, 0, 0, 5000), "idle: nothing to time");
        // A service that keeps time (leases): time moves while idle too.
        let leases = BarrierPolicy {
            idle: true,
            ..timed
        };
        assert!(leases.due(0, 7, 0, 0, 1000) && !leases.due(0, 7, 0, 0, 999));
    }

    /// `due_at` names the time a driver that skips idle ticks must tick at.
    #[test]
    fn due_at_says_at_once_at_the_timed_turn_or_never() {
        use partita_consensus::TickDue;
        let p = BarrierPolicy {
            interval_ms: 1000,
            every_commands: 100,
            timed: false,
            idle: false,
        };
        assert_eq!(p.due_at(2, 0, 0, 0), TickDue::NEXT, "no time yet");
        assert_eq!(p.due_at(0, 7, 0, 0), TickDue::NEVER, "nothing ran");
        assert_eq!(p.due_at(0, 7, 99, 0), TickDue::NEVER, "untimed");
        assert_eq!(p.due_at(0, 7, 100, 0), TickDue::NEXT);
        assert_eq!(p.due_at(1, 7, 199, 0), TickDue::NEVER, "its turn is 200");
        let timed = BarrierPolicy { timed: true, ..p };
        assert_eq!(timed.due_at(1, 7, 5, 500), TickDue::NEVER.clock(2500));
        assert_eq!(
            timed.due_at(1, 7, 200, 500),
            TickDue::NEXT,
            "by count first"
        );
        assert_eq!(
            timed.due_at(0, 7, 0, 500),
            TickDue::NEVER,
            "idle: nothing to time"
        );
        let leases = BarrierPolicy {
            idle: true,
            ..timed
        };
        assert_eq!(leases.due_at(0, 7, 0, 500), TickDue::NEVER.clock(1500));
        // A barrier proposed at clock 900 holds the next back for an interval.
        assert_eq!(
            timed.next_at(1, 7, 200, 500, Some(900)),
            TickDue::NEVER.clock(1900),
            "due at once, but one is under way"
        );
        assert_eq!(
            timed.next_at(1, 7, 5, 500, Some(900)),
            TickDue::NEVER.clock(2500),
            "its turn comes after the wait"
        );
        assert_eq!(
            timed.next_at(1, 7, 5, 500, None),
            timed.due_at(1, 7, 5, 500)
        );
        assert_eq!(p.next_at(0, 7, 0, 0, Some(900)), TickDue::NEVER);
    }
}
