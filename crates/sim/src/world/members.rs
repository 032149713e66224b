//! The membership script of a seed that changes its replicas
//! ([`crate::swarm::SeedParams::member_changes`]), played as an operator would with
//! `partita member`: add the node marked `join = true` through a replica, wait until
//! it serves, add it as an acceptor too (a new ordering epoch), let the grown set of
//! acceptors order for up to two seconds, remove one of the initial acceptors (another epoch;
//! the victim replica's own acceptor role when it has one), then remove one of the
//! initial replicas (partitioned: the joiner joins partition `seed % partitions`, and
//! the replica removed is of that partition). A request whose
//! answer does not come (its replica crashed, the command was dropped by a deposed
//! leader) is asked again, and an answer that says it was done already (`already
//! exists`, `member not found`) counts as done, as for a real operator. Faults go on
//! meanwhile; every check of the run judges it, and at the end the replicas must agree
//! on the replicas too ([`World::members_agree`]).

use super::{Emit, Ev, Input, World};
use crate::swarm;
use partita_config::ClusterConfig;
use partita_types::members::{MemberChange, Members};
use partita_types::NodeId;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::queue::{Time, MILLIS};

/// Where the script stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Add,
    WaitServing,
    AddAcceptor,
    RemoveAcceptor,
    Remove,
    Done,
}

/// How far a client followed the membership changes (as `partita_client::Client`
/// does: its own copy of the cluster file, edited by each configuration it follows).
#[derive(Default)]
struct Following {
    file: Option<ClusterConfig>,
    epoch: u64,
    resubmissions: u64,
}

pub(super) struct MemberScript {
    /// When its first step comes.
    pub first: Time,
    joiner: NodeId,
    /// The cluster file, and each client's following of the changes.
    file: ClusterConfig,
    following: Vec<Following>,
    stage: Stage,
    /// The request in flight (0: none) and when it left.
    request: u64,
    sent_at: Time,
    next_request: u64,
    victim: Option<NodeId>,
    acceptor_victim: Option<NodeId>,
    rng: ChaCha8Rng,
    /// The joiner was added (it counts as a replica from then on).
    pub joined: bool,
    /// Not before this time: the next request (the acceptors grown by the joiner
    /// order for a while under faults before one of the initial ones is removed).
    hold_until: Time,
    /// The joiner was added as an acceptor, and the acceptor removed (if yet).
    pub acceptor_joined: bool,
    pub acceptor_removed: Option<NodeId>,
    /// The acceptors cannot change (Multi-Ring Paxos): the script adds and removes
    /// replicas only.
    acceptors_fixed: bool,
}

impl MemberScript {
    /// The script of seed `seed`, for the joining node `joiner` of cluster file `file`
    /// and its `clients`; its first step comes at [`MemberScript::first`].
    pub fn new(seed: u64, joiner: NodeId, file: ClusterConfig, clients: usize) -> MemberScript {
        let mut rng = swarm::stream(seed, swarm::STREAM_MEMBERS);
        let first = rng.gen_range(100..=500) * MILLIS;
        let acceptors_fixed = file.acceptor_changes().is_err();
        MemberScript {
            acceptors_fixed,
            first,
            joiner,
            file,
            following: (0..clients).map(|_| Following::default()).collect(),
            stage: Stage::Add,
            request: 0,
            sent_at: 0,
            next_request: 1,
            victim: None,
            acceptor_victim: None,
            rng,
            hold_until: 0,
            joined: false,
            acceptor_joined: false,
            acceptor_removed: None,
        }
    }
}

/// How long an unanswered request waits before it is asked again.
const ASK_AGAIN: Time = 1_000 * MILLIS;

/// The longest the acceptors grown by the joiner stay before one of the initial ones
/// is removed, in milliseconds (drawn uniformly from 0).
const ACCEPTORS_HELD_MS: u64 = 2_000;

impl World {
    /// Whether node `ni` counts as a replica now: not removed, and a joining node only
    /// once it was added.
    pub(super) fn counts_as_replica(&self, ni: usize) -> bool {
        let n = &self.nodes[ni];
        n.replica && !n.gone && (!n.joining || self.script.as_ref().is_some_and(|s| s.joined))
    }

    /// Whether node `ni` is an acceptor of the current configuration as the script
    /// changed it (its crashes must leave a majority of those up).
    pub(super) fn acceptor_now(&self, ni: usize) -> bool {
        let n = &self.nodes[ni];
        let Some(s) = self.script.as_ref() else {
            return n.acceptor;
        };
        n.acceptor
            && !n.gone
            && (!n.joining || s.acceptor_joined)
            && s.acceptor_removed != Some(n.id)
    }

    /// One step of the script.
    pub(super) fn member_step(&mut self) {
        let now = self.now();
        let Some(s) = self.script.as_mut() else {
            return;
        };
        let again = now + 100 * MILLIS;
        match s.stage {
            Stage::Done => return,
            Stage::WaitServing => {
                let ji = s.joiner as usize - 1;
                if self.nodes[ji].core.as_ref().is_some_and(|c| c.serves()) {
                    s.stage = match s.acceptors_fixed {
                        true => Stage::Remove,
                        false => Stage::AddAcceptor,
                    };
                }
            }
            Stage::Add | Stage::AddAcceptor | Stage::RemoveAcceptor | Stage::Remove => {
                let waits = s.request != 0 && now.saturating_sub(s.sent_at) < ASK_AGAIN;
                if waits || now < s.hold_until {
                    self.q.push(again, Ev::MemberStep);
                    return;
                }
                // One of the initial replicas (of the joiner's partition, which the
                // joiner keeps served), chosen once; and the acceptor to remove: its
                // own acceptor role, or else one of the initial acceptors.
                let partition = self.layout.partition_of_replica(s.joiner).unwrap_or(0);
                let initial: Vec<NodeId> = self
                    .nodes
                    .iter()
                    .filter(|n| n.replica && !n.joining)
                    .filter(|n| self.layout.partition_of_replica(n.id).unwrap_or(0) == partition)
                    .map(|n| n.id)
                    .collect();
                let acceptors: Vec<NodeId> = self
                    .nodes
                    .iter()
                    .filter(|n| n.acceptor && !n.joining)
                    .map(|n| n.id)
                    .collect();
                let s = self.script.as_mut().expect("a script");
                let victim = *s
                    .victim
                    .get_or_insert_with(|| initial[s.rng.gen_range(0..initial.len())]);
                let acceptor_victim =
                    *s.acceptor_victim
                        .get_or_insert_with(|| match acceptors.contains(&victim) {
                            true => victim,
                            false => acceptors[s.rng.gen_range(0..acceptors.len())],
                        });
                let addr = format!("127.0.0.1:{}", 7100 + s.joiner);
                let change = match s.stage {
                    Stage::Add => MemberChange::Add {
                        node: s.joiner,
                        addr,
                        partition,
                        promote: true,
                    },
                    Stage::AddAcceptor => MemberChange::AddAcceptor {
                        node: s.joiner,
                        addr,
                    },
                    Stage::RemoveAcceptor => MemberChange::RemoveAcceptor {
                        node: acceptor_victim,
                    },
                    _ => MemberChange::Remove { node: victim },
                };
                // Through a replica that is up and serves (never the one it is about).
                let via: Vec<usize> = (0..self.nodes.len())
                    .filter(|&i| {
                        let n = &self.nodes[i];
                        n.id != change.node()
                            && n.paused.is_none()
                            && n.core.as_ref().is_some_and(|c| c.serves())
                    })
                    .collect();
                let s = self.script.as_mut().expect("a script");
                if via.is_empty() {
                    self.q.push(again, Ev::MemberStep);
                    return;
                }
                let ni = via[s.rng.gen_range(0..via.len())];
                s.request = s.next_request;
                s.next_request += 1;
                s.sent_at = now;
                let request = s.request;
                let id = self.nodes[ni].id;
                self.count("member_requests");
                self.trace.record(
                    now,
                    crate::net::Endpoint::Node(id),
                    "member-request",
                    crate::trace::Detail::Text(change.to_string()),
                );
                self.nodes[ni]
                    .inbox
                    .push_back(Input::Member { request, change });
                self.start_next(ni);
            }
        }
        self.q.push(again, Ev::MemberStep);
    }

    /// Client `c` timed out: like `partita_client::Client`, two resubmissions after
    /// it last looked, it asks the nodes for their configuration and follows the
    /// newest (here at once, from every node up): entries, and who answers each
    /// partition, from its next send on.
    pub(super) fn client_follows(&mut self, c: usize) {
        let Some(s) = self.script.as_ref() else {
            return;
        };
        let resubmissions = self.clients[c].stats().resubmissions;
        if resubmissions < s.following[c].resubmissions + 2 {
            return;
        }
        let newest = self
            .nodes
            .iter()
            .filter(|n| n.paused.is_none())
            .filter_map(|n| n.core.as_ref())
            .map(|core| core.members())
            .max_by_key(|m| m.epoch)
            .cloned();
        let s = self.script.as_mut().expect("checked");
        let f = &mut s.following[c];
        f.resubmissions = resubmissions;
        let Some(m) = newest.filter(|m| m.epoch > f.epoch) else {
            return;
        };
        f.epoch = m.epoch;
        let file = f.file.get_or_insert_with(|| s.file.clone());
        if !file.follow_members(&m) {
            return;
        }
        let topology = file.client_topology();
        if topology.entries.is_empty() || topology.replicas.is_empty() {
            return;
        }
        self.count("clients_followed");
        self.clients[c].follow(topology);
    }

    /// Node `ni` answered membership request `request`.
    pub(super) fn member_answer(&mut self, request: u64, result: Result<Members, String>) {
        let now = self.now();
        let Some(s) = self.script.as_mut() else {
            return;
        };
        if request != s.request {
            return;
        }
        s.request = 0;
        let done = match (&result, s.stage) {
            (Ok(_), _) => true,
            (Err(e), Stage::Add | Stage::AddAcceptor) => e.contains("already exists"),
            (Err(e), Stage::Remove | Stage::RemoveAcceptor) => {
                e.contains("member not found") || e.contains("removed before")
            }
            _ => false,
        };
        if !done {
            self.count("member_requests_refused");
            return;
        }
        match s.stage {
            Stage::Add => {
                s.joined = true;
                s.stage = Stage::WaitServing;
                self.count("member_added");
            }
            Stage::AddAcceptor => {
                s.acceptor_joined = true;
                s.stage = Stage::RemoveAcceptor;
                s.hold_until = now + s.rng.gen_range(0..=ACCEPTORS_HELD_MS) * MILLIS;
                self.count("acceptor_added");
            }
            Stage::RemoveAcceptor => {
                s.acceptor_removed = s.acceptor_victim;
                s.stage = Stage::Remove;
                self.count("acceptor_removed");
            }
            Stage::Remove => {
                s.stage = Stage::Done;
                self.count("member_removed");
            }
            _ => {}
        }
    }

    /// At the end: every replica that executed as far as the others holds the same
    /// replicas (epoch, the position of every change, who is what). Over Multi-Ring
    /// Paxos, whose partitions number their merged sequences apart, within each
    /// partition.
    pub(super) fn members_agree(&self) -> Result<(), String> {
        if self.p.rings == 0 {
            return self.members_agree_among(|_| true);
        }
        for p in 0..self.layout.map.count().max(1) {
            let layout = &self.layout;
            self.members_agree_among(|id| layout.partition_of_replica(id).unwrap_or(0) == p)?;
        }
        Ok(())
    }

    fn members_agree_among(&self, among: impl Fn(NodeId) -> bool) -> Result<(), String> {
        let ends: Vec<(NodeId, u64, &Members)> = (0..self.nodes.len())
            .filter(|&i| among(self.nodes[i].id))
            .filter(|&i| self.counts_as_replica(i))
            .filter_map(|i| {
                let c = self.nodes[i].core.as_ref()?;
                Some((
                    self.nodes[i].id,
                    c.replica()?.last_instance(),
                    c.applied_members(),
                ))
            })
            .collect();
        let Some(last) = ends.iter().map(|e| e.1).max() else {
            return Ok(());
        };
        let at_end: Vec<&(NodeId, u64, &Members)> = ends.iter().filter(|e| e.1 == last).collect();
        for w in at_end.windows(2) {
            if w[0].2 != w[1].2 {
                return Err(format!(
                    "replicas {} and {} executed up to {last} but disagree on the replicas: \
                     {:?} against {:?}",
                    w[0].0, w[1].0, w[0].2, w[1].2
                ));
            }
        }
        Ok(())
    }
}

/// A membership answer that survived the wire.
pub(super) fn emit_of(request: u64, result: Result<Members, String>) -> Emit {
    Emit::Member { request, result }
}
