//! The node core: every role one node plays (acceptor, coordinator, learner, replica, or
//! the client-server baseline), composed behind one sans-IO event interface.
//!
//! Both drivers use exactly this code: the networked runtime (`partita node`) feeds it
//! events from sockets, the WAL and a clock, and the deterministic simulator feeds it
//! events from its virtual network, disk and clock. Routing a peer message to the right
//! role, handling messages a node sends to itself, turning decided values into
//! executions and executions into replies all live here, so the simulator tests them
//! too.
//!
//! Inputs: [`NodeCore::on_peer`], [`NodeCore::on_request`], [`NodeCore::on_tick`],
//! [`NodeCore::on_persisted`]. Outputs ([`Output`]): messages to other nodes, records
//! to persist (the driver reports completion with `on_persisted`, in order), replies
//! and refusals to clients. Invariants ([`NodeCore::invariants`]) hold after every
//! input; each role's own invariants are checked with them.

use partita_btree::BPlusTree;
use partita_consensus::{
    Acceptor, AcceptorRecord, Action, Coordinator, CoordinatorConfig, Elector, Learner,
    LearnerConfig, Membership, Msg, Outbox, PersistToken, Value, Vid,
};
use partita_smr::SequentialReplica;
use partita_types::{Ballot, ClientId, Command, NodeId, Reply};
use std::collections::{BTreeMap, VecDeque};

/// How commands are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Replicated: ordered by consensus, executed by every replica.
    Smr,
    /// Paper 001's client-server baseline: one server executes on receipt.
    Cs,
}

/// Everything a node core needs to know about its place in the cluster.
#[derive(Clone, Debug)]
pub struct NodeSetup {
    pub id: NodeId,
    pub mode: Mode,
    pub membership: Membership,
    pub acceptor: bool,
    pub replica: bool,
    pub coordinator_config: CoordinatorConfig,
    pub learner_config: LearnerConfig,
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
}

impl UnsafeBugs {
    pub const NAMES: [&'static str; 5] = [
        "lose-acked-writes",
        "reexecute-duplicates",
        "vote-before-durable",
        "forget-promise",
        "unordered-query",
    ];

    /// Turn on the bug called `name`; an unknown name is an error listing the known ones.
    pub fn enable(&mut self, name: &str) -> Result<(), String> {
        match name {
            "lose-acked-writes" => self.lose_acked_writes = true,
            "reexecute-duplicates" => self.reexecute_duplicates = true,
            "vote-before-durable" => self.vote_before_durable = true,
            "forget-promise" => self.forget_promise = true,
            "unordered-query" => self.unordered_query = true,
            _ => {
                return Err(format!(
                    "unknown unsafe bug `{name}` (known: {})",
                    Self::NAMES.join(", ")
                ))
            }
        }
        Ok(())
    }

    pub fn any(&self) -> bool {
        *self != UnsafeBugs::default()
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
    /// Tell the client its request was not taken.
    Refused {
        client: ClientId,
        seq: u64,
        reason: String,
    },
}

pub struct NodeCore {
    setup: NodeSetup,
    acceptor: Option<Acceptor>,
    coordinator: Option<Coordinator>,
    /// Every acceptor watches the leader and campaigns when it falls silent.
    elector: Option<Elector>,
    learner: Option<Learner>,
    replica: Option<SequentialReplica>,
    /// cs mode: the server's instance counter.
    cs_instance: u64,
    local: VecDeque<(NodeId, Msg)>,
    counters: BTreeMap<&'static str, u64>,
    tick: u64,
    bugs: UnsafeBugs,
    replies: Vec<Reply>,
}

impl NodeCore {
    /// A node starting fresh or restarting: `recovered` holds the acceptor's durable
    /// records, oldest first (empty on a fresh start). Returns the outputs of starting
    /// (a coordinator's first Phase 1).
    pub fn new(
        setup: NodeSetup,
        recovered: Vec<AcceptorRecord>,
        bugs: UnsafeBugs,
        out: &mut Vec<Output>,
    ) -> NodeCore {
        let id = setup.id;
        let mut core = NodeCore {
            acceptor: None,
            coordinator: None,
            elector: None,
            learner: None,
            replica: None,
            cs_instance: 0,
            local: VecDeque::new(),
            counters: BTreeMap::new(),
            tick: 0,
            bugs,
            replies: Vec::new(),
            setup,
        };
        let setup = core.setup.clone();
        match setup.mode {
            Mode::Cs => core.replica = Some(SequentialReplica::new(id, BPlusTree::new())),
            Mode::Smr => {
                if setup.acceptor {
                    let mut a = Acceptor::recover(id, setup.membership.clone(), recovered);
                    if core.bugs.forget_promise {
                        a.unsafe_forget_promise();
                    }
                    a.set_unsafe_vote_before_durable(core.bugs.vote_before_durable);
                    let elector = Elector::new(
                        id,
                        setup.membership.clone(),
                        setup.coordinator_config.election_timeout_ticks,
                        a.promised(),
                    );
                    // A fresh cluster's initial coordinator leads at once. A restarted
                    // node follows whoever leads now, and campaigns like any other
                    // acceptor if nobody does.
                    if a.promised() == Ballot::ZERO && setup.is_coordinator() {
                        core.coordinator = Some(Coordinator::new(
                            id,
                            setup.membership.clone(),
                            setup.coordinator_config.clone(),
                            a.promised(),
                            a.first_undecided(),
                        ));
                    }
                    core.elector = Some(elector);
                    core.acceptor = Some(a);
                }
                if setup.replica {
                    core.learner = Some(Learner::new(
                        id,
                        setup.membership.clone(),
                        setup.learner_config.clone(),
                        1,
                    ));
                    core.replica = Some(SequentialReplica::new(id, BPlusTree::new()));
                }
            }
        }
        if let Some(r) = core.replica.as_mut() {
            if core.bugs.lose_acked_writes {
                r.set_unsafe_lose_every(5);
            }
            r.set_unsafe_reexecute_duplicates(core.bugs.reexecute_duplicates);
        }
        let mut start = Vec::new();
        if let Some(c) = core.coordinator.as_mut() {
            c.start(&mut start);
        }
        core.run(start, out);
        core
    }

    /// The node this one believes leads (its own view; `None` in cs mode).
    pub fn leader(&self) -> Option<NodeId> {
        if let Some(c) = &self.coordinator {
            return Some(c.ballot().node);
        }
        if let Some(e) = &self.elector {
            return Some(e.leader());
        }
        self.learner.as_ref().map(|l| l.leader())
    }

    pub fn elector(&self) -> Option<&Elector> {
        self.elector.as_ref()
    }

    /// Become the leader: a coordinator with a ballot above everything seen, starting
    /// Phase 1 at the first instance not known decided.
    fn campaign(&mut self, floor: Ballot, actions: &mut Outbox) {
        let Some(a) = self.acceptor.as_ref() else {
            return;
        };
        let floor = floor.max(a.promised());
        let mut c = Coordinator::new(
            self.setup.id,
            self.setup.membership.clone(),
            self.setup.coordinator_config.clone(),
            floor,
            a.first_undecided(),
        );
        c.on_tick(self.tick, actions);
        c.start(actions);
        if let Some(e) = self.elector.as_mut() {
            e.on_own_ballot(c.ballot());
        }
        self.count("campaigns");
        self.coordinator = Some(c);
    }

    /// A ballot from a leader arrived: remember it, and step down if it beats ours.
    fn leader_activity(&mut self, ballot: Ballot) {
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

    pub fn id(&self) -> NodeId {
        self.setup.id
    }
    pub fn setup(&self) -> &NodeSetup {
        &self.setup
    }
    pub fn acceptor(&self) -> Option<&Acceptor> {
        self.acceptor.as_ref()
    }
    pub fn coordinator(&self) -> Option<&Coordinator> {
        self.coordinator.as_ref()
    }
    pub fn learner(&self) -> Option<&Learner> {
        self.learner.as_ref()
    }
    pub fn replica(&self) -> Option<&SequentialReplica> {
        self.replica.as_ref()
    }
    pub fn counters(&self) -> &BTreeMap<&'static str, u64> {
        &self.counters
    }
    pub fn bugs(&self) -> &UnsafeBugs {
        &self.bugs
    }

    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    /// A message from another node (or a peer claiming to be one).
    pub fn on_peer(&mut self, from: NodeId, msg: Msg, out: &mut Vec<Output>) {
        let actions = self.dispatch(from, msg);
        self.run(actions, out);
    }

    /// A client's command.
    pub fn on_request(&mut self, cmd: Command, out: &mut Vec<Output>) {
        if self.setup.mode == Mode::Cs {
            let r = self.replica.as_mut().expect("a cs server has a replica");
            self.cs_instance += 1;
            let value = Value {
                vid: Vid {
                    ballot: Ballot::ZERO,
                    seq: self.cs_instance,
                },
                commands: vec![cmd],
            };
            r.execute(self.cs_instance, &value, &mut self.replies);
            self.flush_replies(out);
            return;
        }
        if self.bugs.unordered_query && self.coordinator.is_none() {
            if let Some(reply) = self
                .replica
                .as_mut()
                .and_then(|r| r.unsafe_read_unordered(&cmd))
            {
                out.push(Output::Reply(reply));
                return;
            }
        }
        let (client, seq) = (cmd.client, cmd.seq);
        let refused = match self.coordinator.as_mut() {
            Some(c) => {
                let mut actions = Vec::new();
                if c.on_command(cmd, &mut actions) {
                    self.run(actions, out);
                    None
                } else {
                    Some("coordinator queue full".to_string())
                }
            }
            None => match self.leader() {
                // Not the leader: pass the command on to the one we know.
                Some(leader) if leader != self.setup.id => {
                    self.count("requests_forwarded");
                    out.push(Output::Send {
                        to: leader,
                        msg: Msg::Forward { cmd },
                    });
                    None
                }
                _ => Some(format!(
                    "node {} does not coordinate and knows no leader yet; retry",
                    self.setup.id
                )),
            },
        };
        if let Some(reason) = refused {
            self.count("requests_refused");
            out.push(Output::Refused {
                client,
                seq,
                reason,
            });
        }
    }

    /// One clock tick (the cluster's `tick_ms`).
    pub fn on_tick(&mut self, out: &mut Vec<Output>) {
        self.tick += 1;
        let mut actions = Vec::new();
        if let Some(c) = self.coordinator.as_mut() {
            c.on_tick(self.tick, &mut actions);
        }
        let leading = self.coordinator.is_some();
        let campaign = self
            .elector
            .as_mut()
            .and_then(|e| e.on_tick(self.tick, leading));
        if let Some(floor) = campaign {
            if self.coordinator.is_none() {
                self.campaign(floor, &mut actions);
            }
        }
        if let Some(l) = self.learner.as_mut() {
            l.on_tick(self.tick, &mut actions);
        }
        if !actions.is_empty() {
            self.run(actions, out);
        }
    }

    /// Writes with these tokens are durable (in order).
    pub fn on_persisted(&mut self, tokens: &[PersistToken], out: &mut Vec<Output>) {
        let mut actions = Vec::new();
        let a = self
            .acceptor
            .as_mut()
            .expect("persist completions go to the acceptor");
        for &t in tokens {
            a.on_persisted(t, &mut actions);
        }
        self.run(actions, out);
    }

    /// Every role's invariants, plus the node's own. Cheap: callable after every input.
    pub fn invariants(&self) {
        if let Some(a) = &self.acceptor {
            a.invariants();
        }
        if let Some(c) = &self.coordinator {
            c.invariants();
        }
        if let Some(l) = &self.learner {
            l.invariants();
        }
        if let Some(e) = &self.elector {
            e.invariants();
        }
        if let Some(c) = &self.coordinator {
            assert!(c.deposed_by().is_none(), "a deposed coordinator still runs");
        }
        if let (Some(l), Some(r)) = (&self.learner, &self.replica) {
            assert_eq!(
                r.last_instance(),
                l.delivered_up_to(),
                "replica executed exactly what the learner delivered"
            );
        }
        assert!(self.local.is_empty(), "local messages left unhandled");
        assert!(self.replies.is_empty(), "replies left unsent");
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
                    Action::Deliver { instance, value } => match self.replica.as_mut() {
                        Some(r) => r.execute(instance, &value, &mut self.replies),
                        None => self.count("dropped_deliver_without_replica"),
                    },
                }
            }
            let Some((from, msg)) = self.local.pop_front() else {
                break;
            };
            actions = self.dispatch(from, msg);
        }
        self.flush_replies(out);
    }

    fn flush_replies(&mut self, out: &mut Vec<Output>) {
        out.extend(self.replies.drain(..).map(Output::Reply));
    }

    fn dispatch(&mut self, from: NodeId, msg: Msg) -> Outbox {
        let mut out = Vec::new();
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
                        if !c.on_command(cmd, &mut out) {
                            self.count("dropped_forward_queue_full");
                        }
                    }
                    // Forwarded once only: no loops between nodes that disagree.
                    None => self.count("dropped_forward_not_leader"),
                }
            }
            Msg::Phase1B { .. } | Msg::Nack { .. } | Msg::Phase2B { .. } | Msg::Alive { .. } => {
                if let Some(c) = self.coordinator.as_mut() {
                    c.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
            Msg::Phase1A { .. } | Msg::RingVote { .. } => {
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
            Msg::Phase2A { .. } | Msg::Decide { .. } | Msg::DecideValue { .. } => {
                if let Some(l) = self.learner.as_mut() {
                    l.on_message(from, msg.clone(), &mut out);
                    handled = true;
                }
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
            Msg::Heartbeat { .. } => {
                if let Some(l) = self.learner.as_mut() {
                    l.on_message(from, msg.clone(), &mut out);
                    handled = true;
                }
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
            Msg::LearnReply { .. } => {
                if let Some(l) = self.learner.as_mut() {
                    l.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
            Msg::LearnRequest { .. } => {
                if let Some(c) = self.coordinator.as_mut() {
                    c.on_message(from, msg.clone(), &mut out);
                    handled = true;
                }
                if let Some(a) = self.acceptor.as_mut() {
                    a.on_message(from, msg, &mut out);
                    handled = true;
                }
            }
        }
        if !handled {
            self.count("dropped_not_for_this_node");
        }
        if self
            .coordinator
            .as_ref()
            .is_some_and(|c| c.deposed_by().is_some())
        {
            self.step_down();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_consensus::Protocol;
    use partita_types::Op;

    fn setup(id: NodeId, acceptor: bool, replica: bool) -> NodeSetup {
        NodeSetup {
            id,
            mode: Mode::Smr,
            membership: Membership {
                protocol: Protocol::MultiPaxos,
                acceptors: vec![1, 2, 3],
                coordinator: 1,
                learners: vec![4],
            },
            acceptor,
            replica,
            coordinator_config: CoordinatorConfig::default(),
            learner_config: LearnerConfig::default(),
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
        assert!(core.coordinator().is_some());
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
        let cmd = Command {
            client: 9,
            seq: 1,
            reply_to: 4,
            op: Op::Read { key: 1 },
        };
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
        let cmd = Command {
            client: 9,
            seq: 1,
            reply_to: 4,
            op: Op::Read { key: 1 },
        };
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
            core.on_tick(&mut out);
        }
        assert!(core.coordinator().is_none(), "campaigned too early");
        core.on_tick(&mut out);
        let c = core.coordinator().expect("node 2 campaigns");
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
        assert!(core.coordinator().is_some());
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
        assert!(core.coordinator().is_none());
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
