//! The acceptor role (paper 001 §III-A).
//!
//! State: the promised ballot, the accepted (ballot, value) per instance, and the
//! decisions it has heard of (to answer learners' retransmission requests). Every
//! promise and every accepted value is persisted before the acceptor answers: a Phase 1B
//! or a vote leaves only from [`Acceptor::on_persisted`], and only if the state that
//! motivated it still holds (a higher ballot may have arrived meanwhile).
//!
//! Ring Paxos: an acceptor votes for a value id only if it holds the value and the value
//! is durable. The first acceptor of the ring starts a [`Msg::RingVote`]; every other one
//! adds its bit when it can and forwards; the last one (the coordinator's own acceptor)
//! hands the mask to the coordinator as a [`Msg::Phase2B`]. With
//! [`RingDecision::Acceptor`] the ring starts at the coordinator's own acceptor, and the
//! acceptor whose bit completes a majority decides: [`Msg::Decide`] to the learners, the
//! mask to the coordinator, nothing further round the ring.
//!
//! Truncation: replicas report their durable checkpoints ([`Msg::Checkpointed`]). When
//! a majority of the replicas (both of two) have checkpointed instance `c`, every
//! instance up to `c` is decided and executed there, so the acceptor forgets them,
//! writes [`AcceptorRecord::Truncated`] (with its promise) and, once that record is
//! durable, reports with [`Action::TruncateLog`] the oldest record still needed: the
//! truncation record itself or the oldest record of a value it still keeps. Below the
//! truncation point it accepts nothing and answers learners with [`Msg::Truncated`].
//!
//! Persist tokens are log positions: a fresh acceptor issues 1, 2, …; a recovered one
//! numbers the records it recovered 1..=n and issues n + 1, … from there.

use crate::{
    command_bytes, AcceptorRecord, Action, Drop, DropCounts, Membership, Msg, Outbox, Part,
    PersistToken, Protocol, RingDecision, Value, Vid, PHASE1B_PAGE_BYTES_MAX,
};
use partita_types::DetHashMap;
use partita_types::{Ballot, Instance, NodeId};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug)]
struct Accepted {
    ballot: Ballot,
    value: Arc<Value>,
    /// The write of this (ballot, value) has completed.
    durable: bool,
    /// Ring Paxos: the ring mask the value was proposed with (not persisted: a
    /// retransmission brings it again).
    ring: u64,
    /// Token (log position) of the record holding this value; 0 when it is not in
    /// the log (a Multi-Paxos decision kept only to serve learners).
    token: PersistToken,
    /// The oldest record recovery needs for this instance: `token` once that write is
    /// durable; until then, the record of the value it replaces (a crash before the
    /// new write completes must find the old value, which we may have voted for).
    keep_token: PersistToken,
}

#[derive(Clone, Debug)]
enum PendingWrite {
    /// Answer Phase 1A `from..to` for `ballot` once the promise is durable.
    Promise {
        ballot: Ballot,
        from: Instance,
        to: Instance,
        reply_to: NodeId,
    },
    Accept {
        instance: Instance,
        ballot: Ballot,
        vid: Vid,
    },
    /// The truncation record: once durable, older records may go.
    Truncate,
    /// A members record.
    Members,
}

/// The parts of a split value received so far for one instance (Ring Paxos with state
/// partitioning: each partition's part reaches the acceptors in a Phase 2A of its own).
#[derive(Clone, Debug)]
struct Assembly {
    ballot: Ballot,
    vid: Vid,
    parts: Vec<Option<Arc<Value>>>,
    ring: u64,
}

/// The most instances an acceptor assembles at once. A coordinator keeps at most its
/// window of instances in flight, far below this; parts of instances whose other
/// parts were lost wait for the retransmission, or are evicted oldest first.
pub const ASSEMBLIES_MAX: usize = 1024;

/// Heartbeats an acceptor's writes may wait with none completing before it stops
/// answering them (see [`Drop::DiskLagging`]): at the default 50 ms heartbeat, a disk
/// that makes no progress for 150 ms. A leader suspects a silent acceptor after
/// `suspect_ticks` (150 ms by default).
pub const DISK_LAGGING_HEARTBEATS: u64 = 3;

/// A ring vote waiting for this acceptor's own write to become durable.
#[derive(Clone, Copy, Debug)]
struct HeldVote {
    ballot: Ballot,
    vid: Vid,
    votes: u64,
    ring: u64,
}

pub struct Acceptor {
    id: NodeId,
    index: usize,
    membership: Membership,
    promised: Ballot,
    accepted: BTreeMap<Instance, Accepted>,
    /// Highest ballot of any value ever accepted. Promises only grow, so checking it
    /// against the promise keeps `invariants()` O(1) on a long log.
    max_accepted_ballot: Ballot,
    decided: BTreeMap<Instance, Vid>,
    /// Every instance below this is known decided.
    decided_prefix: Instance,
    /// Highest decided instance a leader announced in a heartbeat (all below it are
    /// decided, whether or not this acceptor saw each decision).
    announced_decided: Instance,
    pending: DetHashMap<PersistToken, PendingWrite>,
    held_votes: DetHashMap<Instance, HeldVote>,
    /// Split values being assembled from their parts, by instance (at most
    /// [`ASSEMBLIES_MAX`]).
    assembling: BTreeMap<Instance, Assembly>,
    next_token: PersistToken,
    /// Votes cast (Phase 2B sent or ring vote started or forwarded): each only once
    /// its value is durable.
    votes_cast: u64,
    /// Heartbeats received, and the last persisted token with the heartbeat count at
    /// which writes were first seen waiting behind it: a disk that makes no progress
    /// for [`DISK_LAGGING_HEARTBEATS`] heartbeats is lagging (full, stalled).
    heartbeats: u64,
    waiting_since: Option<(PersistToken, u64)>,
    /// Writes the driver reported complete, for the "vote only when durable" check.
    last_persisted: PersistToken,
    drops: DropCounts,
    /// Planted bug (simulator controls only): vote as soon as a value arrives, before
    /// its write is durable.
    unsafe_vote_before_durable: bool,
    /// Every instance below this was truncated (1: none).
    truncated_below: Instance,
    /// Per replica: the newest durable checkpoint it reported (memory only: replicas
    /// report again periodically).
    replica_checkpoints: BTreeMap<NodeId, Instance>,
    /// The newest members recorded in the log ([`AcceptorRecord::Members`]).
    members: Option<Box<partita_types::members::Members>>,
}

impl Acceptor {
    pub fn new(id: NodeId, membership: Membership) -> Acceptor {
        let index = membership
            .acceptor_index(id)
            .expect("acceptor is listed as an acceptor");
        Acceptor {
            id,
            index,
            membership,
            promised: Ballot::ZERO,
            accepted: BTreeMap::new(),
            max_accepted_ballot: Ballot::ZERO,
            decided: BTreeMap::new(),
            decided_prefix: 1,
            announced_decided: 0,
            pending: DetHashMap::default(),
            held_votes: DetHashMap::default(),
            assembling: BTreeMap::new(),
            next_token: 1,
            votes_cast: 0,
            heartbeats: 0,
            waiting_since: None,
            last_persisted: 0,
            drops: DropCounts::default(),
            unsafe_vote_before_durable: false,
            truncated_below: 1,
            replica_checkpoints: BTreeMap::new(),
            members: None,
        }
    }

    /// Plant the "vote before the write is durable" bug (simulator controls only).
    pub fn set_unsafe_vote_before_durable(&mut self, on: bool) {
        self.unsafe_vote_before_durable = on;
    }

    /// Plant the "forget the promise on restart" bug (simulator controls only): keep
    /// the accepted values, but let the promise fall back to the highest ballot
    /// accepted, forgetting any higher promise made in a Phase 1 since.
    pub fn unsafe_forget_promise(&mut self) {
        self.promised = self.max_accepted_ballot;
    }

    /// Rebuild the acceptor from its log, oldest record first. Everything replayed was
    /// durable, so it counts as such. The records get tokens 1, 2, … in this order
    /// (their positions), and new writes continue the count.
    pub fn recover(
        id: NodeId,
        membership: Membership,
        records: impl IntoIterator<Item = AcceptorRecord>,
    ) -> Acceptor {
        let mut a = Acceptor::new(id, membership);
        let mut position: PersistToken = 0;
        for r in records {
            position += 1;
            match r {
                AcceptorRecord::Promise { ballot } => a.promised = a.promised.max(ballot),
                // Records of a log shared by several groups: their owner unwraps them
                // before they reach a group's acceptor (`partita_node::geo`).
                // An EPaxos node's records are its EPaxos core's (`partita_node::epaxos`).
                AcceptorRecord::Group { .. }
                | AcceptorRecord::Boot { .. }
                | AcceptorRecord::Epaxos(_) => {}
                AcceptorRecord::Members(m) => a.members = Some(m),
                AcceptorRecord::Truncated { below, promised } => {
                    a.promised = a.promised.max(promised);
                    a.truncate_below(below);
                }
                AcceptorRecord::Accept {
                    instance,
                    ballot,
                    value,
                } => {
                    a.promised = a.promised.max(ballot);
                    // A record below a later truncation record is dropped by it; one
                    // below an earlier one cannot exist (nothing is accepted there).
                    let newer = instance >= a.truncated_below
                        && a.accepted
                            .get(&instance)
                            .is_none_or(|old| old.ballot <= ballot);
                    if newer {
                        a.max_accepted_ballot = a.max_accepted_ballot.max(ballot);
                        a.accepted.insert(
                            instance,
                            Accepted {
                                ballot,
                                value,
                                durable: true,
                                ring: 0,
                                token: position,
                                keep_token: position,
                            },
                        );
                    }
                }
            }
        }
        a.next_token = position + 1;
        a.last_persisted = position;
        a.invariants();
        a
    }

    pub fn promised(&self) -> Ballot {
        self.promised
    }

    /// The accepted (ballot, value) of an instance, if any.
    pub fn accepted(&self, instance: Instance) -> Option<(Ballot, &Arc<Value>)> {
        self.accepted.get(&instance).map(|a| (a.ballot, &a.value))
    }

    /// Highest instance with an accepted value (0: none).
    pub fn max_accepted_instance(&self) -> Instance {
        self.accepted.last_key_value().map(|(&i, _)| i).unwrap_or(0)
    }

    /// Count a heartbeat and tell whether writes have waited, with no completion at
    /// all, for the last [`DISK_LAGGING_HEARTBEATS`] heartbeats.
    fn disk_lagging(&mut self) -> bool {
        self.heartbeats += 1;
        if self.next_token == self.last_persisted + 1 {
            self.waiting_since = None;
            return false;
        }
        match self.waiting_since {
            Some((t, since)) if t == self.last_persisted => {
                self.heartbeats - since >= DISK_LAGGING_HEARTBEATS
            }
            _ => {
                self.waiting_since = Some((self.last_persisted, self.heartbeats));
                false
            }
        }
    }

    /// Votes cast since start (each for a durable value).
    pub fn votes_cast(&self) -> u64 {
        self.votes_cast
    }

    pub fn accepted_count(&self) -> usize {
        self.accepted.len()
    }

    /// Every instance below this was truncated (1: none).
    pub fn truncated_below(&self) -> Instance {
        self.truncated_below
    }

    /// The newest checkpoint each replica reported.
    pub fn replica_checkpoints(&self) -> &BTreeMap<NodeId, Instance> {
        &self.replica_checkpoints
    }

    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }

    /// Whether a message of `ballot` is for another ordering epoch than this
    /// acceptor's configuration (counted): one of a newer epoch it cannot read yet
    /// (its vote bits index other acceptors), or of an older one after the change
    /// (answered with a `Nack`, so its coordinator steps down).
    fn other_epoch(&mut self, from: NodeId, ballot: Ballot, out: &mut Outbox) -> bool {
        if self.membership.owns_ballot(ballot) {
            return false;
        }
        self.drops.count(Drop::OtherEpoch);
        if ballot.epoch() < self.membership.epoch {
            out.push(Action::Send {
                to: from,
                msg: Msg::Nack {
                    ballot,
                    promised: self.promised,
                },
            });
        }
        true
    }

    /// Whether a decision is of an epoch that no longer orders `instance` (a value an
    /// older configuration decided above the change that ended it: never executed).
    fn dead_decision(&self, instance: Instance, vid: Vid) -> bool {
        instance >= self.membership.epoch_from && vid.ballot.epoch() < self.membership.epoch
    }

    /// The acceptors changed (a new ordering epoch, see `partita_types::members`),
    /// learned once the change that ended the old epoch is decided along with every
    /// instance before it. From `membership.epoch_from` on this acceptor votes only in
    /// ballots of the new epoch, forgets what older epochs accepted or decided there
    /// (never executed), and refuses every older ballot. Below it, it keeps what it
    /// holds (decided values for learners). The same epoch again only updates the
    /// learners.
    pub fn reconfigure(&mut self, membership: Membership) {
        assert!(
            membership.epoch >= self.membership.epoch,
            "epochs only grow"
        );
        let index = membership
            .acceptor_index(self.id)
            .expect("an acceptor of the new configuration");
        if membership.epoch == self.membership.epoch {
            self.membership.learners = membership.learners;
            return;
        }
        self.index = index;
        self.membership = membership;
        self.forget_older_epochs();
    }

    /// Forget what epochs before this acceptor's configuration accepted or decided
    /// from its first instance on (never executed), and refuse their ballots from now
    /// on. Also for an acceptor recovered from its log straight into a later epoch.
    pub fn forget_older_epochs(&mut self) {
        let from = self.membership.epoch_from;
        let epoch = self.membership.epoch;
        let dead = |i: Instance, vid: Vid| i >= from && vid.ballot.epoch() < epoch;
        self.accepted.retain(|&i, a| {
            // A vote of an older epoch is not one of this epoch's (a decided value
            // kept without a vote, ballot zero, goes by its id).
            let old_vote = a.ballot != Ballot::ZERO && a.ballot.epoch() < epoch;
            !(dead(i, a.value.vid) || i >= from && old_vote)
        });
        self.decided.retain(|&i, &mut vid| !dead(i, vid));
        self.held_votes.retain(|&i, h| !dead(i, h.vid));
        self.assembling.retain(|&i, a| !dead(i, a.vid));
        self.decided_prefix = self.decided_prefix.min(from).max(self.truncated_below);
        while self.decided.contains_key(&self.decided_prefix) {
            self.decided_prefix += 1;
        }
        self.announced_decided = self.announced_decided.min(from - 1);
        self.promised = self.promised.max(Ballot::epoch_floor(epoch));
    }

    /// Record `members` in the log (when they differ from the ones recorded): a
    /// restart takes the ordering epoch and the nodes added from there.
    pub fn record_members(&mut self, members: &partita_types::members::Members, out: &mut Outbox) {
        if self.members.as_deref() == Some(members) {
            return;
        }
        self.members = Some(Box::new(members.clone()));
        self.write_members(out);
    }

    fn write_members(&mut self, out: &mut Outbox) {
        if let Some(m) = self.members.clone() {
            let token = self.persist(AcceptorRecord::Members(m), out);
            self.pending.insert(token, PendingWrite::Members);
        }
    }

    pub fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) {
        let ballot = match &msg {
            Msg::Phase1A { ballot, .. }
            | Msg::Phase2A { ballot, .. }
            | Msg::RingVote { ballot, .. }
            | Msg::Heartbeat { ballot, .. } => Some(*ballot),
            _ => None,
        };
        if ballot.is_some_and(|b| self.other_epoch(from, b, out)) {
            return;
        }
        match msg {
            Msg::Phase1A {
                ballot,
                from: lo,
                to: hi,
            } => self.on_phase1a(from, ballot, lo, hi, out),
            Msg::Phase2A {
                ballot,
                instance,
                value,
                decided,
                ring,
                part,
            } => {
                self.learn_decisions(&decided);
                match part {
                    None => self.on_phase2a(from, ballot, instance, value, ring, out),
                    Some(part) => {
                        self.on_phase2a_part(from, ballot, instance, value, ring, part, out)
                    }
                }
            }
            Msg::RingVote {
                ballot,
                instance,
                vid,
                votes,
                ring,
            } => self.on_ring_vote(ballot, instance, vid, votes, ring, out),
            Msg::Decide { decided } => self.learn_decisions(&decided),
            Msg::DecideValue { instance, value } => {
                if instance < self.truncated_below {
                    self.drops.count(Drop::Truncated);
                    return;
                }
                if self.dead_decision(instance, value.vid) {
                    self.drops.count(Drop::OtherEpoch);
                    return;
                }
                self.learn_decisions(&[(instance, value.vid)]);
                // Multi-Paxos: a decided value this acceptor never accepted is kept so it
                // can serve learners; it is not a vote, so it is not persisted.
                self.accepted.entry(instance).or_insert(Accepted {
                    ballot: Ballot::ZERO,
                    value,
                    durable: false,
                    ring: 0,
                    token: 0,
                    keep_token: 0,
                });
            }
            Msg::Checkpointed { instance } => self.on_checkpointed(from, instance, out),
            Msg::ReadAccepted { from: lo, to: hi } => {
                let msg = if lo < self.truncated_below {
                    Msg::Truncated {
                        below: self.truncated_below,
                    }
                } else {
                    Msg::AcceptedValues {
                        from: lo,
                        to: hi,
                        accepted: self
                            .accepted
                            .range(lo..hi)
                            .map(|(&i, a)| (i, a.ballot, a.value.clone()))
                            .collect(),
                    }
                };
                out.push(Action::Send { to: from, msg });
            }
            Msg::LearnRequest { from: lo, to: hi } => self.on_learn_request(from, lo, hi, out),
            Msg::Heartbeat {
                ballot,
                decided_up_to,
            } => {
                // Tell the leader we are up, so it keeps us in its ring; but not while
                // our disk lags: a Ring Paxos ring through an acceptor that cannot
                // make its votes durable stops at it, so the leader must lay out its
                // ring without us (it does once we fall silent). We answer again as
                // soon as our writes complete.
                if self.disk_lagging() {
                    self.drops.count(Drop::DiskLagging);
                } else if ballot >= self.promised {
                    self.announced_decided = self.announced_decided.max(decided_up_to);
                    out.push(Action::Send {
                        to: from,
                        msg: Msg::Alive {
                            ballot: self.promised,
                        },
                    });
                }
            }
            Msg::Alive { .. }
            | Msg::Forward { .. }
            | Msg::ForwardBatch { .. }
            | Msg::ForwardAck { .. }
            | Msg::Truncated { .. }
            | Msg::AcceptedValues { .. }
            | Msg::CheckpointRequest { .. }
            | Msg::CheckpointChunk { .. }
            | Msg::Exec { .. }
            | Msg::Epaxos(_)
            | Msg::PositionCheckpointed { .. }
            | Msg::Merged { .. }
            | Msg::SkipRequest { .. }
            | Msg::Members(_)
            | Msg::OnRing { .. } => self.drops.count(Drop::NotForThisRole),
            Msg::Phase1B { .. }
            | Msg::Nack { .. }
            | Msg::Phase2B { .. }
            | Msg::LearnReply { .. } => self.drops.count(Drop::NotForThisRole),
        }
    }

    fn on_phase1a(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        lo: Instance,
        hi: Instance,
        out: &mut Outbox,
    ) {
        if ballot < self.promised {
            self.drops.count(Drop::StaleBallot);
            out.push(Action::Send {
                to: from,
                msg: Msg::Nack {
                    ballot,
                    promised: self.promised,
                },
            });
            return;
        }
        self.promised = ballot;
        let token = self.persist(AcceptorRecord::Promise { ballot }, out);
        self.pending.insert(
            token,
            PendingWrite::Promise {
                ballot,
                from: lo,
                to: hi,
                reply_to: from,
            },
        );
    }

    /// Refuse a Phase 2A of a ballot below our promise (a `Nack`) or for a truncated
    /// instance (`Truncated`, so the coordinator moves on). True if it was refused.
    fn refuse_phase2a(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        instance: Instance,
        out: &mut Outbox,
    ) -> bool {
        if ballot < self.promised {
            self.drops.count(Drop::StaleBallot);
            out.push(Action::Send {
                to: from,
                msg: Msg::Nack {
                    ballot,
                    promised: self.promised,
                },
            });
            return true;
        }
        if instance < self.truncated_below {
            // Decided and checkpointed by a majority of replicas: nothing may be
            // accepted here. A coordinator still proposing here (it re-proposes what
            // Phase 1 found while we truncated) must learn that it can move on.
            self.drops.count(Drop::Truncated);
            out.push(Action::Send {
                to: from,
                msg: Msg::Truncated {
                    below: self.truncated_below,
                },
            });
            return true;
        }
        false
    }

    /// One part of a split value (paper 001 §III-C: acceptors listen to every
    /// partition's dissemination group). The acceptor holds the value once it holds
    /// every part; it then accepts the assembled value exactly as a whole Phase 2A
    /// (persist, then vote). Until then it holds nothing, and a ring vote for the value
    /// waits.
    #[allow(clippy::too_many_arguments)]
    fn on_phase2a_part(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        instance: Instance,
        value: Arc<Value>,
        ring: u64,
        part: Part,
        out: &mut Outbox,
    ) {
        if self.refuse_phase2a(from, ballot, instance, out) {
            return;
        }
        let vid = value.vid;
        if let Some(a) = self.accepted.get(&instance) {
            if a.ballot == ballot && a.value.vid == vid {
                // Assembled already: a retransmission, handled like a whole one.
                let whole = a.value.clone();
                self.on_phase2a(from, ballot, instance, whole, ring, out);
                return;
            }
        }
        let count = part.count as usize;
        match self.assembling.get(&instance) {
            Some(asm) if asm.ballot > ballot => {
                // Parts of a newer proposal are arriving; this one is stale.
                self.drops.count(Drop::StaleBallot);
                return;
            }
            Some(asm) if asm.ballot == ballot && (asm.vid != vid || asm.parts.len() != count) => {
                self.drops.count(Drop::ConflictingPart);
                return;
            }
            Some(asm) if asm.ballot == ballot => {}
            _ => {
                if !self.assembling.contains_key(&instance)
                    && self.assembling.len() >= ASSEMBLIES_MAX
                {
                    self.assembling.pop_first();
                    self.drops.count(Drop::PartsEvicted);
                }
                self.assembling.insert(
                    instance,
                    Assembly {
                        ballot,
                        vid,
                        parts: vec![None; count],
                        ring,
                    },
                );
            }
        }
        let asm = self.assembling.get_mut(&instance).expect("inserted above");
        asm.ring = ring;
        asm.parts[part.index as usize].get_or_insert(value);
        if asm.parts.iter().any(Option::is_none) {
            return;
        }
        let asm = self.assembling.remove(&instance).expect("present");
        let parts: Vec<Value> = asm
            .parts
            .into_iter()
            .map(|p| Value::clone(&p.expect("every part is here")))
            .collect();
        let whole = Arc::new(Value::from_parts(vid, &parts));
        self.on_phase2a(from, ballot, instance, whole, asm.ring, out);
    }

    fn on_phase2a(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        instance: Instance,
        value: Arc<Value>,
        ring: u64,
        out: &mut Outbox,
    ) {
        if self.refuse_phase2a(from, ballot, instance, out) {
            return;
        }
        if self
            .assembling
            .get(&instance)
            .is_some_and(|asm| asm.ballot <= ballot)
        {
            self.assembling.remove(&instance);
        }
        self.promised = ballot;
        let vid = value.vid;
        if let Some(a) = self.accepted.get_mut(&instance) {
            if a.ballot == ballot && a.value.vid == vid {
                // A retransmission (perhaps over a new ring): vote again if the write is
                // done, else the pending completion will vote.
                a.ring = ring;
                if a.durable {
                    self.vote(instance, ballot, vid, out);
                }
                return;
            }
        }
        self.max_accepted_ballot = self.max_accepted_ballot.max(ballot);
        let token = self.persist(
            AcceptorRecord::Accept {
                instance,
                ballot,
                value: value.clone(),
            },
            out,
        );
        let keep_token = match self.accepted.get(&instance) {
            Some(old) if old.keep_token > 0 => old.keep_token,
            _ => token,
        };
        self.accepted.insert(
            instance,
            Accepted {
                ballot,
                value,
                durable: false,
                ring,
                token,
                keep_token,
            },
        );
        if self.unsafe_vote_before_durable {
            // `vote` asserts durability; the bug lies to it for this one vote.
            self.set_durable(instance, true);
            self.vote(instance, ballot, vid, out);
            self.set_durable(instance, false);
        }
        self.pending.insert(
            token,
            PendingWrite::Accept {
                instance,
                ballot,
                vid,
            },
        );
    }

    /// Persist done: now the promise or the vote it was waiting for may leave.
    pub fn on_persisted(&mut self, token: PersistToken, out: &mut Outbox) {
        assert!(
            token > self.last_persisted,
            "persist completions arrive in order"
        );
        self.last_persisted = token;
        let Some(w) = self.pending.remove(&token) else {
            panic!("completion for unknown persist token {token}");
        };
        match w {
            PendingWrite::Promise {
                ballot,
                from,
                to,
                reply_to,
            } => {
                if ballot != self.promised {
                    // A higher ballot arrived while the write was in flight; its own
                    // completion answers. Answering this one would be harmless but useless.
                    self.drops.count(Drop::StaleBallot);
                    return;
                }
                self.send_promise(ballot, from, to, reply_to, out);
            }
            PendingWrite::Members => {}
            PendingWrite::Truncate => {
                // Everything the log must still hold starts at the truncation record
                // (the promise) or at the oldest record of a value still kept,
                // whichever is older. Older records are superseded or truncated.
                let oldest_kept = self
                    .accepted
                    .values()
                    .filter(|a| a.keep_token > 0)
                    .map(|a| a.keep_token)
                    .min()
                    .unwrap_or(token);
                out.push(Action::TruncateLog {
                    below_token: oldest_kept.min(token),
                });
            }
            PendingWrite::Accept {
                instance,
                ballot,
                vid,
            } => {
                let Some(a) = self.accepted.get_mut(&instance) else {
                    assert!(
                        instance < self.truncated_below || ballot.epoch() < self.membership.epoch,
                        "accepted entry for instance {instance} vanished before its write completed"
                    );
                    // Truncated while the write was in flight: decided and checkpointed
                    // elsewhere, no vote needed.
                    self.drops.count(Drop::Truncated);
                    return;
                };
                if a.ballot != ballot || a.value.vid != vid {
                    // Overwritten by a higher ballot meanwhile: this write no longer
                    // stands for the current accepted value, so it must not be voted for.
                    self.drops.count(Drop::StaleBallot);
                    return;
                }
                assert_eq!(a.token, token, "the completed write holds this value");
                a.durable = true;
                a.keep_token = token;
                if ballot == self.promised {
                    self.vote(instance, ballot, vid, out);
                }
            }
        }
        self.invariants();
    }

    fn set_durable(&mut self, instance: Instance, durable: bool) {
        if let Some(a) = self.accepted.get_mut(&instance) {
            a.durable = durable;
        }
    }

    /// Cast this acceptor's vote for a durable accepted value.
    fn vote(&mut self, instance: Instance, ballot: Ballot, vid: Vid, out: &mut Outbox) {
        let a = &self.accepted[&instance];
        assert!(
            a.durable && a.ballot == ballot && a.value.vid == vid,
            "vote only for durable values"
        );
        self.votes_cast += 1;
        let mask = a.ring;
        let bit = 1u64 << self.index;
        match self.membership.protocol {
            Protocol::MultiPaxos => out.push(Action::Send {
                to: ballot.node,
                msg: Msg::Phase2B {
                    ballot,
                    instance,
                    vid,
                    votes: bit,
                },
            }),
            Protocol::RingPaxos => {
                let ring = self.membership.ring_for(ballot.node, mask);
                if !ring.contains(&self.id) {
                    // Left out of this ring: the others decide without us.
                    self.drops.count(Drop::NotForThisRole);
                } else if ring[0] == self.id {
                    // First in the ring: start the vote.
                    self.forward_ring_vote(ballot, instance, vid, bit, mask, out);
                } else if let Some(h) = self.held_votes.remove(&instance) {
                    if h.ballot == ballot && h.vid == vid {
                        // The vote goes on around the ring it travels.
                        self.forward_ring_vote(ballot, instance, vid, h.votes | bit, h.ring, out);
                    } else {
                        self.held_votes.insert(instance, h);
                    }
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn forward_ring_vote(
        &mut self,
        ballot: Ballot,
        instance: Instance,
        vid: Vid,
        votes: u64,
        ring: u64,
        out: &mut Outbox,
    ) {
        if self.membership.ring_decision == RingDecision::Acceptor
            && votes.count_ones() as usize >= self.membership.majority()
        {
            // Our vote completes a majority: the value is chosen. The learners hear it
            // from us, the coordinator gets the mask, and the rest of the ring is not
            // needed for this instance.
            self.learn_decisions(&[(instance, vid)]);
            let decide = Msg::Decide {
                decided: vec![(instance, vid)],
            };
            crate::send_all(out, &self.membership.learners, decide);
            out.push(Action::Send {
                to: ballot.node,
                msg: Msg::Phase2B {
                    ballot,
                    instance,
                    vid,
                    votes,
                },
            });
            return;
        }
        match self
            .membership
            .ring_successor_for(ballot.node, ring, self.id)
        {
            Some(next) => out.push(Action::Send {
                to: next,
                msg: Msg::RingVote {
                    ballot,
                    instance,
                    vid,
                    votes,
                    ring,
                },
            }),
            None => out.push(Action::Send {
                to: ballot.node,
                msg: Msg::Phase2B {
                    ballot,
                    instance,
                    vid,
                    votes,
                },
            }),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_ring_vote(
        &mut self,
        ballot: Ballot,
        instance: Instance,
        vid: Vid,
        votes: u64,
        ring: u64,
        out: &mut Outbox,
    ) {
        if self.membership.protocol != Protocol::RingPaxos {
            self.drops.count(Drop::NotForThisRole);
            return;
        }
        if instance < self.truncated_below {
            self.drops.count(Drop::Truncated);
            return;
        }
        if ballot < self.promised {
            self.drops.count(Drop::StaleBallot);
            return;
        }
        let bit = 1u64 << self.index;
        match self.accepted.get(&instance) {
            Some(a) if a.ballot == ballot && a.value.vid == vid => {
                if a.durable {
                    self.forward_ring_vote(ballot, instance, vid, votes | bit, ring, out);
                } else {
                    // Our own write is in flight: its completion adds our bit and forwards.
                    self.held_votes.insert(
                        instance,
                        HeldVote {
                            ballot,
                            vid,
                            votes,
                            ring,
                        },
                    );
                }
            }
            Some(a) if a.ballot > ballot => {
                // We accepted something newer here: we can never vote for this one.
                self.drops.count(Drop::StaleBallot);
                self.forward_ring_vote(ballot, instance, vid, votes, ring, out);
            }
            _ => {
                // We do not hold the value (its Phase 2A was lost or is late). Hold the
                // vote; the Phase 2A (or its retransmission) will complete it. Should it
                // never arrive, the coordinator retransmits and the ring restarts.
                self.drops.count(Drop::NoValue);
                self.held_votes.insert(
                    instance,
                    HeldVote {
                        ballot,
                        vid,
                        votes,
                        ring,
                    },
                );
            }
        }
    }

    fn learn_decisions(&mut self, decided: &[(Instance, Vid)]) {
        for &(i, vid) in decided {
            if i < self.truncated_below || self.dead_decision(i, vid) {
                continue;
            }
            self.decided.insert(i, vid);
            self.held_votes.remove(&i);
        }
        while self.decided.contains_key(&self.decided_prefix) {
            self.decided_prefix += 1;
        }
    }

    /// Where a coordinator this node hosts starts Phase 1 after a failover: the first
    /// instance not known decided, either because this acceptor saw every decision
    /// below it, or because a leader announced them decided in a heartbeat. Instances
    /// below are never proposed again; a learner that missed one reads it from a
    /// majority of acceptors (the highest-ballot value, see the learner). Without the
    /// heartbeat bound, a leader elected on a node that restarted recently would
    /// re-propose the whole log since the last truncation before deciding anything new.
    pub fn first_undecided(&self) -> Instance {
        self.decided_prefix
            .max(self.announced_decided + 1)
            .max(self.membership.epoch_from)
    }

    /// The ordered time of the newest value it accepted (0: none).
    pub fn newest_time_ms(&self) -> u64 {
        self.accepted
            .values()
            .next_back()
            .map_or(0, |a| a.value.time_ms)
    }

    /// The promise for `from..to`, as Phase 1B pages of at most about
    /// [`PHASE1B_PAGE_BYTES_MAX`] bytes of values each, tiling the range in order.
    fn send_promise(
        &self,
        ballot: Ballot,
        from: Instance,
        to: Instance,
        reply_to: NodeId,
        out: &mut Outbox,
    ) {
        let mut page_from = from;
        let mut page = Vec::new();
        let mut bytes = 0usize;
        let mut pages = 0u64;
        let held = self
            .accepted
            .range(from..to)
            .filter(|(_, a)| a.durable && a.ballot > Ballot::ZERO)
            // A vote of an older epoch there was never a vote of this one (see
            // `reconfigure`; a restarted acceptor may hold some until it learns).
            .filter(|(_, a)| a.ballot.epoch() == ballot.epoch());
        for (&i, a) in held {
            if bytes >= PHASE1B_PAGE_BYTES_MAX {
                // Close the page just below this instance.
                out.push(Action::Send {
                    to: reply_to,
                    msg: Msg::Phase1B {
                        ballot,
                        from: page_from,
                        to: i,
                        accepted: std::mem::take(&mut page),
                        truncated_below: self.truncated_below,
                    },
                });
                pages += 1;
                page_from = i;
                bytes = 0;
            }
            bytes += a.value.commands.iter().map(command_bytes).sum::<usize>() + 64;
            page.push((i, a.ballot, a.value.clone()));
        }
        out.push(Action::Send {
            to: reply_to,
            msg: Msg::Phase1B {
                ballot,
                from: page_from,
                to,
                accepted: page,
                truncated_below: self.truncated_below,
            },
        });
        assert!(
            page_from >= from && pages < to - from + 1,
            "pages tile the promised range"
        );
    }

    fn on_learn_request(&mut self, from: NodeId, lo: Instance, hi: Instance, out: &mut Outbox) {
        if lo < self.truncated_below {
            out.push(Action::Send {
                to: from,
                msg: Msg::Truncated {
                    below: self.truncated_below,
                },
            });
            return;
        }
        let mut decided = Vec::new();
        for (&i, &vid) in self.decided.range(lo..hi) {
            if let Some(a) = self.accepted.get(&i) {
                if a.value.vid == vid {
                    decided.push((i, a.value.clone()));
                }
            }
        }
        out.push(Action::Send {
            to: from,
            msg: Msg::LearnReply { decided },
        });
    }

    fn persist(&mut self, record: AcceptorRecord, out: &mut Outbox) -> PersistToken {
        let token = self.next_token;
        self.next_token += 1;
        out.push(Action::Persist { token, record });
        token
    }

    /// A replica's newest durable checkpoint covers `instance`: truncate below what a
    /// majority of replicas have checkpointed, if that moved.
    fn on_checkpointed(&mut self, from: NodeId, instance: Instance, out: &mut Outbox) {
        if !self.membership.learners.contains(&from) {
            self.drops.count(Drop::FromNonMember);
            return;
        }
        let c = self.replica_checkpoints.entry(from).or_default();
        *c = (*c).max(instance);
        // The majority-th highest checkpoint (replicas not heard from count as 0):
        // a majority of replicas executed and checkpointed everything up to it. With
        // state partitioning, a majority of every partition's replicas (each holds only
        // its partition's state, so only its peers can serve it a checkpoint). A
        // partition with no learner of this stream (a Multi-Ring Paxos ring that does
        // not carry it) neither needs its log nor holds it back.
        let parts = self.membership.partitions.map.count();
        let covered = (0..parts)
            .map(|p| self.membership.learners_of(p))
            .filter(|members| !members.is_empty())
            .map(|members| {
                let mut all: Vec<Instance> = members
                    .iter()
                    .map(|l| self.replica_checkpoints.get(l).copied().unwrap_or(0))
                    .collect();
                all.sort_unstable_by(|a, b| b.cmp(a));
                all.get(members.len() / 2).copied().unwrap_or(0)
            })
            .min()
            .unwrap_or(0);
        if covered < self.truncated_below {
            return;
        }
        let below = covered + 1;
        self.truncate_below(below);
        let token = self.persist(
            AcceptorRecord::Truncated {
                below,
                promised: self.promised,
            },
            out,
        );
        self.pending.insert(token, PendingWrite::Truncate);
        // After the truncation record, so the log cut below it keeps the members.
        self.write_members(out);
    }

    /// The replicas changed at run time (`partita member`; see
    /// `Membership::with_members`): the learners whose checkpoints count for truncation from now on.
    pub fn set_learners(&mut self, m: &Membership) {
        self.membership.learners = m.learners.clone();
        self.membership.partitions = m.partitions.clone();
    }

    /// Forget accepted values and decisions below `instance`: they are decided (a
    /// majority of replicas checkpointed them). In memory only; see `on_checkpointed`
    /// for the record that makes it last.
    pub fn truncate_below(&mut self, instance: Instance) {
        if instance <= self.truncated_below {
            return;
        }
        self.accepted = self.accepted.split_off(&instance);
        self.decided = self.decided.split_off(&instance);
        self.held_votes.retain(|&i, _| i >= instance);
        self.assembling = self.assembling.split_off(&instance);
        self.truncated_below = instance;
        self.decided_prefix = self.decided_prefix.max(instance);
        while self.decided.contains_key(&self.decided_prefix) {
            self.decided_prefix += 1;
        }
    }

    /// Cheap enough to run after every handler: O(1) in the size of the log.
    pub fn invariants(&self) {
        assert!(
            self.max_accepted_ballot <= self.promised,
            "accepted ballot {} above promise {}",
            self.max_accepted_ballot,
            self.promised
        );
        debug_assert!(
            self.accepted.len() > 4096
                || self
                    .accepted
                    .values()
                    .all(|a| a.ballot <= self.max_accepted_ballot),
            "max accepted ballot out of date"
        );
        assert!(
            self.pending.len() as u64 <= self.next_token,
            "pending writes bounded by tokens issued"
        );
        if let Some((&i, _)) = self.accepted.first_key_value() {
            assert!(
                i >= self.truncated_below,
                "accepted instance {i} below the truncation point {}",
                self.truncated_below
            );
        }
        assert!(
            self.decided_prefix >= self.truncated_below,
            "a truncated instance is not counted as decided"
        );
        assert!(self.last_persisted < self.next_token);
        assert!(
            self.assembling.len() <= ASSEMBLIES_MAX,
            "assembling more than ASSEMBLIES_MAX instances"
        );
        if let Some((&i, _)) = self.assembling.first_key_value() {
            assert!(i >= self.truncated_below, "assembling a truncated instance");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_btree::Op;

    fn membership(protocol: Protocol) -> Membership {
        Membership {
            ring_decision: crate::RingDecision::Coordinator,
            protocol,
            acceptors: vec![1, 2, 3],
            coordinator: 3,
            learners: vec![4],
            partitions: Default::default(),
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        }
    }

    fn value(seq: u64) -> Arc<Value> {
        Arc::new(Value {
            vid: Vid {
                ballot: Ballot::new(1, 3),
                seq,
            },
            commands: vec![partita_btree::service::command(
                9,
                seq,
                4,
                &Op::Read { key: seq },
            )],
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        })
    }

    #[test]
    fn promise_waits_for_durability_then_reports_accepted() {
        let mut a = Acceptor::new(1, membership(Protocol::MultiPaxos));
        let mut out = Vec::new();
        let b = Ballot::new(1, 3);
        a.on_message(
            3,
            Msg::Phase1A {
                ballot: b,
                from: 1,
                to: 100,
            },
            &mut out,
        );
        assert_eq!(
            out,
            vec![Action::Persist {
                token: 1,
                record: AcceptorRecord::Promise { ballot: b }
            }]
        );
        out.clear();
        a.on_persisted(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 3,
                msg: Msg::Phase1B {
                    ballot: b,
                    from: 1,
                    to: 100,
                    accepted: vec![],
                    truncated_below: 1,
                }
            }]
        );
    }

    #[test]
    fn lower_ballot_gets_a_nack_and_changes_nothing() {
        let mut a = Acceptor::new(1, membership(Protocol::MultiPaxos));
        let mut out = Vec::new();
        a.on_message(
            3,
            Msg::Phase1A {
                ballot: Ballot::new(2, 3),
                from: 1,
                to: 10,
            },
            &mut out,
        );
        out.clear();
        a.on_message(
            2,
            Msg::Phase1A {
                ballot: Ballot::new(1, 2),
                from: 1,
                to: 10,
            },
            &mut out,
        );
        assert_eq!(
            out,
            vec![Action::Send {
                to: 2,
                msg: Msg::Nack {
                    ballot: Ballot::new(1, 2),
                    promised: Ballot::new(2, 3)
                }
            }]
        );
        assert_eq!(a.promised(), Ballot::new(2, 3));
    }

    #[test]
    fn multipaxos_votes_only_after_the_accept_is_durable() {
        let mut a = Acceptor::new(2, membership(Protocol::MultiPaxos));
        let mut out = Vec::new();
        let b = Ballot::new(1, 3);
        let v = value(1);
        a.on_message(
            3,
            Msg::Phase2A {
                ballot: b,
                instance: 1,
                value: v.clone(),
                decided: vec![],
                ring: 0b111,
                part: None,
            },
            &mut out,
        );
        assert_eq!(
            out,
            vec![Action::Persist {
                token: 1,
                record: AcceptorRecord::Accept {
                    instance: 1,
                    ballot: b,
                    value: v.clone()
                }
            }]
        );
        out.clear();
        a.on_persisted(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 3,
                msg: Msg::Phase2B {
                    ballot: b,
                    instance: 1,
                    vid: v.vid,
                    votes: 0b10
                }
            }]
        );
    }

    #[test]
    fn ring_vote_travels_and_waits_for_own_write() {
        // Ring for acceptors [1,2,3] with coordinator 3 is [1, 2, 3].
        let m = membership(Protocol::RingPaxos);
        assert_eq!(m.ring(), vec![1, 2, 3]);
        let b = Ballot::new(1, 3);
        let v = value(1);
        let mut first = Acceptor::new(1, m.clone());
        let mut out = Vec::new();
        first.on_message(
            3,
            Msg::Phase2A {
                ballot: b,
                instance: 1,
                value: v.clone(),
                decided: vec![],
                ring: 0b111,
                part: None,
            },
            &mut out,
        );
        out.clear();
        first.on_persisted(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 2,
                msg: Msg::RingVote {
                    ballot: b,
                    instance: 1,
                    vid: v.vid,
                    votes: 0b001,
                    ring: 0b111,
                }
            }]
        );
        // The second acceptor gets the vote before its own write completes.
        let mut second = Acceptor::new(2, m);
        out.clear();
        second.on_message(
            3,
            Msg::Phase2A {
                ballot: b,
                instance: 1,
                value: v.clone(),
                decided: vec![],
                ring: 0b111,
                part: None,
            },
            &mut out,
        );
        out.clear();
        second.on_message(
            1,
            Msg::RingVote {
                ballot: b,
                instance: 1,
                vid: v.vid,
                votes: 0b001,
                ring: 0b111,
            },
            &mut out,
        );
        assert!(
            out.is_empty(),
            "no vote before the write is durable: {out:?}"
        );
        second.on_persisted(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 3,
                msg: Msg::RingVote {
                    ballot: b,
                    instance: 1,
                    vid: v.vid,
                    votes: 0b011,
                    ring: 0b111,
                }
            }]
        );
    }

    #[test]
    fn ring_decided_by_the_acceptor_that_completes_a_majority() {
        // RingDecision::Acceptor: the ring of coordinator 3 is 3, 1, 2. Acceptor 1
        // holds the value durably; the coordinator's vote arrives; 0b101 is a majority.
        let mut m = membership(Protocol::RingPaxos);
        m.ring_decision = RingDecision::Acceptor;
        m.learners = vec![4, 5];
        assert_eq!(m.ring_for(3, 0b111), vec![3, 1, 2]);
        let b = Ballot::new(1, 3);
        let v = value(1);
        let p2a = Msg::Phase2A {
            ballot: b,
            instance: 1,
            value: v.clone(),
            decided: vec![],
            ring: 0b111,
            part: None,
        };
        // The coordinator's own acceptor starts the vote once its write is durable.
        let mut own = Acceptor::new(3, m.clone());
        let mut out = Vec::new();
        own.on_message(3, p2a.clone(), &mut out);
        out.clear();
        own.on_persisted(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 1,
                msg: Msg::RingVote {
                    ballot: b,
                    instance: 1,
                    vid: v.vid,
                    votes: 0b100,
                    ring: 0b111,
                }
            }]
        );
        // The next one decides as soon as its own write is durable, whichever comes
        // first: the learners hear from it, the coordinator gets the mask, acceptor 2
        // gets nothing.
        for vote_first in [true, false] {
            let mut a = Acceptor::new(1, m.clone());
            let mut out = Vec::new();
            let vote = Msg::RingVote {
                ballot: b,
                instance: 1,
                vid: v.vid,
                votes: 0b100,
                ring: 0b111,
            };
            if vote_first {
                a.on_message(3, vote.clone(), &mut out);
            }
            a.on_message(3, p2a.clone(), &mut out);
            out.clear();
            a.on_persisted(1, &mut out);
            if !vote_first {
                assert!(out.is_empty(), "no vote to complete yet: {out:?}");
                a.on_message(3, vote, &mut out);
            }
            let decide = Msg::Decide {
                decided: vec![(1, v.vid)],
            };
            assert_eq!(
                out,
                vec![
                    Action::Send {
                        to: 4,
                        msg: decide.clone()
                    },
                    Action::Send { to: 5, msg: decide },
                    Action::Send {
                        to: 3,
                        msg: Msg::Phase2B {
                            ballot: b,
                            instance: 1,
                            vid: v.vid,
                            votes: 0b101,
                        }
                    },
                ]
            );
            assert_eq!(a.decided.get(&1), Some(&v.vid), "it knows the decision");
        }
        // With the coordinator at the end of the ring (paper 001), the same vote goes on.
        let mut a = Acceptor::new(1, membership(Protocol::RingPaxos));
        let mut out = Vec::new();
        a.on_message(3, p2a, &mut out);
        out.clear();
        a.on_persisted(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 2,
                msg: Msg::RingVote {
                    ballot: b,
                    instance: 1,
                    vid: v.vid,
                    votes: 0b001,
                    ring: 0b111,
                }
            }]
        );
    }

    #[test]
    fn ring_vote_without_value_is_held_not_signed() {
        let m = membership(Protocol::RingPaxos);
        let b = Ballot::new(1, 3);
        let v = value(1);
        let mut second = Acceptor::new(2, m);
        let mut out = Vec::new();
        second.on_message(
            1,
            Msg::RingVote {
                ballot: b,
                instance: 1,
                vid: v.vid,
                votes: 0b001,
                ring: 0b111,
            },
            &mut out,
        );
        assert!(out.is_empty());
        second.on_message(
            3,
            Msg::Phase2A {
                ballot: b,
                instance: 1,
                value: v.clone(),
                decided: vec![],
                ring: 0b111,
                part: None,
            },
            &mut out,
        );
        out.clear();
        second.on_persisted(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 3,
                msg: Msg::RingVote {
                    ballot: b,
                    instance: 1,
                    vid: v.vid,
                    votes: 0b011,
                    ring: 0b111,
                }
            }]
        );
    }

    #[test]
    fn write_overtaken_by_higher_ballot_is_not_voted() {
        let mut a = Acceptor::new(1, membership(Protocol::MultiPaxos));
        let mut out = Vec::new();
        let v = value(1);
        a.on_message(
            3,
            Msg::Phase2A {
                ballot: Ballot::new(1, 3),
                instance: 1,
                value: v,
                decided: vec![],
                ring: 0b111,
                part: None,
            },
            &mut out,
        );
        a.on_message(
            2,
            Msg::Phase1A {
                ballot: Ballot::new(2, 2),
                from: 1,
                to: 10,
            },
            &mut out,
        );
        out.clear();
        a.on_persisted(1, &mut out);
        assert!(
            out.is_empty(),
            "vote for a ballot below the promise: {out:?}"
        );
        a.on_persisted(2, &mut out);
        // The Phase 1B reports the accepted value (now durable) to the new coordinator.
        match &out[..] {
            [Action::Send {
                to: 2,
                msg: Msg::Phase1B { accepted, .. },
            }] => assert_eq!(accepted.len(), 1),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn recovery_restores_promise_and_values() {
        let v = value(5);
        let recs = vec![
            AcceptorRecord::Promise {
                ballot: Ballot::new(1, 3),
            },
            AcceptorRecord::Accept {
                instance: 7,
                ballot: Ballot::new(1, 3),
                value: v.clone(),
            },
            AcceptorRecord::Promise {
                ballot: Ballot::new(4, 2),
            },
        ];
        let a = Acceptor::recover(1, membership(Protocol::RingPaxos), recs);
        assert_eq!(a.promised(), Ballot::new(4, 2));
        assert_eq!(a.accepted(7).unwrap().0, Ballot::new(1, 3));
        assert_eq!(a.accepted(7).unwrap().1.vid, v.vid);
    }

    #[test]
    fn learn_request_serves_decided_values_only() {
        let mut a = Acceptor::new(1, membership(Protocol::RingPaxos));
        let mut out = Vec::new();
        let b = Ballot::new(1, 3);
        a.on_message(
            3,
            Msg::Phase2A {
                ballot: b,
                instance: 1,
                value: value(1),
                decided: vec![],
                ring: 0b111,
                part: None,
            },
            &mut out,
        );
        a.on_message(
            3,
            Msg::Phase2A {
                ballot: b,
                instance: 2,
                value: value(2),
                decided: vec![(1, value(1).vid)],
                ring: 0b111,
                part: None,
            },
            &mut out,
        );
        out.clear();
        a.on_message(4, Msg::LearnRequest { from: 1, to: 3 }, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 4,
                msg: Msg::LearnReply {
                    decided: vec![(1, value(1))]
                }
            }]
        );
    }

    fn accept(a: &mut Acceptor, instance: Instance, ballot: Ballot, seq: u64, out: &mut Outbox) {
        a.on_message(
            ballot.node,
            Msg::Phase2A {
                ballot,
                instance,
                value: value(seq),
                decided: vec![],
                ring: 0b111,
                part: None,
            },
            out,
        );
    }

    /// An acceptor whose writes make no progress for several heartbeats stops
    /// answering them (so a Ring Paxos leader re-forms its ring without it), and
    /// answers again once a write completes. Writes that do complete keep it in.
    #[test]
    fn a_lagging_disk_falls_silent_and_recovers() {
        let b = Ballot::new(1, 3);
        let mut a = Acceptor::new(1, membership(Protocol::RingPaxos));
        let hb = Msg::Heartbeat {
            ballot: b,
            decided_up_to: 0,
        };
        let alive = |a: &mut Acceptor| {
            let mut out = Vec::new();
            a.on_message(3, hb.clone(), &mut out);
            out.iter().any(|x| {
                matches!(
                    x,
                    Action::Send {
                        msg: Msg::Alive { .. },
                        ..
                    }
                )
            })
        };
        let mut out = Vec::new();
        accept(&mut a, 1, b, 1, &mut out);
        // Within the grace, still alive though the write waits.
        for _ in 0..DISK_LAGGING_HEARTBEATS {
            assert!(alive(&mut a));
        }
        assert!(
            !alive(&mut a),
            "answered with a write stuck for 3 heartbeats"
        );
        assert!(!alive(&mut a));
        a.on_persisted(1, &mut out);
        assert!(alive(&mut a), "silent after its disk came back");
        // Writes that keep completing, one per heartbeat, never look lagging.
        for i in 2..20 {
            accept(&mut a, i, b, i, &mut out);
            assert!(alive(&mut a));
            a.on_persisted(i, &mut out);
        }
    }

    /// A promise over more values than a page holds leaves as several Phase 1Bs that
    /// tile the range in order, each within the page bound (plus one value).
    #[test]
    fn a_large_promise_is_paged() {
        let mut a = Acceptor::new(1, membership(Protocol::MultiPaxos));
        let mut out = Vec::new();
        let b1 = Ballot::new(1, 3);
        // 400 values of about 8 KiB: over 3 MiB in all.
        let big = |seq: u64| {
            let payload = partita_types::Payload::from(vec![seq as u8; 8 << 10]);
            Arc::new(Value::new(
                Vid { ballot: b1, seq },
                vec![partita_types::Command::single(9, seq, 4, payload)],
            ))
        };
        for i in 1..=400u64 {
            a.on_message(
                3,
                Msg::Phase2A {
                    ballot: b1,
                    instance: i,
                    value: big(i),
                    decided: vec![],
                    ring: 0b111,
                    part: None,
                },
                &mut out,
            );
        }
        let tokens: Vec<PersistToken> = out
            .iter()
            .filter_map(|x| match x {
                Action::Persist { token, .. } => Some(*token),
                _ => None,
            })
            .collect();
        for t in tokens {
            a.on_persisted(t, &mut out);
        }
        out.clear();
        let b2 = Ballot::new(2, 2);
        a.on_message(
            2,
            Msg::Phase1A {
                ballot: b2,
                from: 1,
                to: 1000,
            },
            &mut out,
        );
        let Some(Action::Persist { token, .. }) = out.pop() else {
            panic!("the promise is persisted first: {out:?}");
        };
        a.on_persisted(token, &mut out);
        let pages: Vec<(Instance, Instance, Vec<Instance>, usize)> = out
            .iter()
            .filter_map(|x| match x {
                Action::Send {
                    to: 2,
                    msg:
                        Msg::Phase1B {
                            ballot,
                            from,
                            to,
                            accepted,
                            ..
                        },
                } if *ballot == b2 => Some((
                    *from,
                    *to,
                    accepted.iter().map(|(i, _, _)| *i).collect(),
                    accepted
                        .iter()
                        .map(|(_, _, v)| v.commands.iter().map(command_bytes).sum::<usize>())
                        .sum(),
                )),
                _ => None,
            })
            .collect();
        assert!(pages.len() >= 3, "{} pages", pages.len());
        assert_eq!(pages[0].0, 1);
        assert_eq!(pages.last().unwrap().1, 1000);
        for w in pages.windows(2) {
            assert_eq!(w[0].1, w[1].0, "pages tile the range");
        }
        let mut all = Vec::new();
        for (from, to, instances, bytes) in &pages {
            assert!(instances.iter().all(|i| from <= i && i < to));
            assert!(
                *bytes <= PHASE1B_PAGE_BYTES_MAX + (9 << 10),
                "{bytes} bytes"
            );
            all.extend(instances.iter().copied());
        }
        assert_eq!(all, (1..=400).collect::<Vec<_>>(), "every value, once");
        for (_, _, _, bytes) in &pages {
            let frame = *bytes;
            assert!(frame < partita_types::frame::FRAME_BYTES_MAX / 16);
        }
    }

    fn three_replicas() -> Membership {
        Membership {
            ring_decision: crate::RingDecision::Coordinator,
            learners: vec![4, 5, 6],
            partitions: Default::default(),
            batchers: Vec::new(),
            ..membership(Protocol::MultiPaxos)
        }
    }

    /// A Multi-Ring Paxos ring that carries partition 0 of two: its learners are
    /// partition 0's replicas only (4 and 5; partition 1's, 6, learn nothing of it), so
    /// a majority of them truncates, and partition 1, with no learner here, holds
    /// nothing back.
    #[test]
    fn a_stream_truncates_below_a_majority_of_its_own_learners() {
        let m = Membership {
            learners: vec![4, 5],
            partitions: partita_types::PartitionLayout {
                map: partita_types::PartitionMap::new(2, 100).unwrap(),
                replicas: vec![vec![4, 5], vec![]],
            },
            ..three_replicas()
        };
        let mut a = Acceptor::new(1, m);
        let mut out = Vec::new();
        let b = Ballot::new(1, 3);
        for i in 1..=4 {
            accept(&mut a, i, b, i, &mut out);
        }
        for t in 1..=4 {
            a.on_persisted(t, &mut out);
        }
        out.clear();
        // Partition 1's replica is no learner of this stream: its word counts for
        // nothing.
        a.on_message(6, Msg::Checkpointed { instance: 4 }, &mut out);
        assert!(out.is_empty(), "{out:?}");
        a.on_message(4, Msg::Checkpointed { instance: 3 }, &mut out);
        assert!(out.is_empty(), "one of two is no majority: {out:?}");
        a.on_message(5, Msg::Checkpointed { instance: 2 }, &mut out);
        assert_eq!(
            a.truncated_below(),
            3,
            "both of partition 0's learners hold 2"
        );
        a.invariants();
    }

    #[test]
    fn truncates_below_what_a_majority_of_replicas_checkpointed() {
        let mut a = Acceptor::new(1, three_replicas());
        let mut out = Vec::new();
        let b = Ballot::new(1, 3);
        for i in 1..=6 {
            accept(&mut a, i, b, i, &mut out);
        }
        for t in 1..=6 {
            a.on_persisted(t, &mut out);
        }
        out.clear();
        // One replica is not a majority of three.
        a.on_message(4, Msg::Checkpointed { instance: 5 }, &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(a.truncated_below(), 1);
        // A non-replica's claim counts for nothing.
        a.on_message(2, Msg::Checkpointed { instance: 9 }, &mut out);
        assert!(out.is_empty());
        // Two of three: truncate below the lower of the two (3), durably with the promise.
        a.on_message(5, Msg::Checkpointed { instance: 3 }, &mut out);
        assert_eq!(
            out,
            vec![Action::Persist {
                token: 7,
                record: AcceptorRecord::Truncated {
                    below: 4,
                    promised: b
                }
            }]
        );
        assert_eq!(a.truncated_below(), 4);
        assert!(a.accepted(3).is_none() && a.accepted(4).is_some());
        assert_eq!(a.first_undecided(), 4);
        out.clear();
        // Once the record is durable, the log before the oldest kept value may go.
        a.on_persisted(7, &mut out);
        assert_eq!(out, vec![Action::TruncateLog { below_token: 4 }]);
        out.clear();
        // Learners asking below the truncation point are told to fetch a checkpoint.
        a.on_message(4, Msg::LearnRequest { from: 2, to: 6 }, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 4,
                msg: Msg::Truncated { below: 4 }
            }]
        );
        out.clear();
        // Nothing is accepted below it (the proposer is told), and Phase 1 reports it.
        accept(&mut a, 2, Ballot::new(2, 2), 99, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 2,
                msg: Msg::Truncated { below: 4 }
            }]
        );
        assert!(a.accepted(2).is_none());
        out.clear();
        a.on_message(
            2,
            Msg::Phase1A {
                ballot: Ballot::new(3, 2),
                from: 1,
                to: 100,
            },
            &mut out,
        );
        out.clear();
        a.on_persisted(8, &mut out);
        match &out[..] {
            [Action::Send {
                msg:
                    Msg::Phase1B {
                        accepted,
                        truncated_below: 4,
                        ..
                    },
                ..
            }] => assert_eq!(accepted.len(), 3),
            other => panic!("unexpected {other:?}"),
        }
        // A stale, lower report changes nothing.
        out.clear();
        a.on_message(6, Msg::Checkpointed { instance: 2 }, &mut out);
        assert!(out.is_empty());
        a.invariants();
    }

    #[test]
    fn read_accepted_reports_every_value_with_its_ballot() {
        let mut a = Acceptor::new(1, three_replicas());
        let mut out = Vec::new();
        accept(&mut a, 2, Ballot::new(1, 3), 2, &mut out);
        accept(&mut a, 5, Ballot::new(1, 3), 5, &mut out);
        out.clear();
        a.on_message(4, Msg::ReadAccepted { from: 1, to: 5 }, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 4,
                msg: Msg::AcceptedValues {
                    from: 1,
                    to: 5,
                    accepted: vec![(2, Ballot::new(1, 3), value(2))]
                }
            }]
        );
    }

    #[test]
    fn truncate_log_keeps_the_oldest_record_of_a_kept_value() {
        let mut a = Acceptor::new(
            1,
            Membership {
                ring_decision: crate::RingDecision::Coordinator,
                learners: vec![4],
                partitions: Default::default(),
                batchers: Vec::new(),
                epoch: 0,
                epoch_from: 1,
                unsafe_quorum: None,
                ..membership(Protocol::MultiPaxos)
            },
        );
        let mut out = Vec::new();
        accept(&mut a, 1, Ballot::new(1, 3), 1, &mut out); // token 1
        accept(&mut a, 3, Ballot::new(1, 3), 3, &mut out); // token 2
        accept(&mut a, 2, Ballot::new(1, 3), 2, &mut out); // token 3
        accept(&mut a, 2, Ballot::new(2, 3), 4, &mut out); // token 4 supersedes 3
        for t in 1..=4 {
            a.on_persisted(t, &mut out);
        }
        out.clear();
        a.on_message(4, Msg::Checkpointed { instance: 1 }, &mut out);
        a.on_persisted(5, &mut out);
        // Instance 3's record (token 2) is the oldest still needed.
        assert_eq!(out.last(), Some(&Action::TruncateLog { below_token: 2 }));
    }

    #[test]
    fn truncate_log_keeps_a_durable_value_whose_replacement_is_in_flight() {
        let mut a = Acceptor::new(
            1,
            Membership {
                ring_decision: crate::RingDecision::Coordinator,
                learners: vec![4],
                partitions: Default::default(),
                batchers: Vec::new(),
                epoch: 0,
                epoch_from: 1,
                unsafe_quorum: None,
                ..membership(Protocol::MultiPaxos)
            },
        );
        let mut out = Vec::new();
        accept(&mut a, 1, Ballot::new(1, 3), 1, &mut out); // token 1
        accept(&mut a, 5, Ballot::new(1, 3), 5, &mut out); // token 2
        a.on_persisted(1, &mut out);
        a.on_persisted(2, &mut out);
        a.on_message(4, Msg::Checkpointed { instance: 1 }, &mut out); // token 3
        accept(&mut a, 5, Ballot::new(2, 3), 6, &mut out); // token 4, in flight
        out.clear();
        a.on_persisted(3, &mut out);
        // Should token 4 never reach the disk, recovery needs token 2's value.
        assert_eq!(out, vec![Action::TruncateLog { below_token: 2 }]);
        out.clear();
        a.on_persisted(4, &mut out);
        a.on_message(4, Msg::Checkpointed { instance: 2 }, &mut out); // token 5
        out.clear();
        a.on_persisted(5, &mut out);
        assert_eq!(out, vec![Action::TruncateLog { below_token: 4 }]);
    }

    #[test]
    fn recovery_honours_a_truncation_record() {
        let recs = vec![
            AcceptorRecord::Promise {
                ballot: Ballot::new(1, 3),
            },
            AcceptorRecord::Accept {
                instance: 1,
                ballot: Ballot::new(1, 3),
                value: value(1),
            },
            AcceptorRecord::Accept {
                instance: 5,
                ballot: Ballot::new(1, 3),
                value: value(5),
            },
            AcceptorRecord::Truncated {
                below: 3,
                promised: Ballot::new(7, 2),
            },
            AcceptorRecord::Accept {
                instance: 6,
                ballot: Ballot::new(7, 2),
                value: value(6),
            },
        ];
        let mut a = Acceptor::recover(1, membership(Protocol::RingPaxos), recs.clone());
        assert_eq!(a.promised(), Ballot::new(7, 2));
        assert!(a.accepted(1).is_none());
        assert!(a.accepted(5).is_some() && a.accepted(6).is_some());
        assert_eq!(a.truncated_below(), 3);
        assert!(a.first_undecided() >= 3);
        // The same state from the suffix alone: what remains after the log prefix
        // before the oldest needed record (position 3, instance 5) is deleted.
        let b = Acceptor::recover(1, membership(Protocol::RingPaxos), recs[2..].to_vec());
        assert_eq!(b.promised(), a.promised());
        assert_eq!(b.truncated_below(), 3);
        assert_eq!(b.accepted_count(), a.accepted_count());
        // New writes continue the positions: 5 records recovered, the next token is 6.
        let mut out = Vec::new();
        accept(&mut a, 7, Ballot::new(7, 2), 7, &mut out);
        assert!(matches!(out[..], [Action::Persist { token: 6, .. }]));
    }

    #[test]
    fn a_write_overtaken_by_truncation_is_not_voted() {
        let mut a = Acceptor::new(
            1,
            Membership {
                ring_decision: crate::RingDecision::Coordinator,
                learners: vec![4],
                partitions: Default::default(),
                batchers: Vec::new(),
                epoch: 0,
                epoch_from: 1,
                unsafe_quorum: None,
                ..membership(Protocol::MultiPaxos)
            },
        );
        let mut out = Vec::new();
        accept(&mut a, 1, Ballot::new(1, 3), 1, &mut out);
        a.on_message(4, Msg::Checkpointed { instance: 1 }, &mut out);
        out.clear();
        a.on_persisted(1, &mut out);
        assert!(out.is_empty(), "{out:?}");
        a.on_persisted(2, &mut out);
        assert_eq!(out, vec![Action::TruncateLog { below_token: 2 }]);
        a.invariants();
    }
}

/// Paper 001 §III-C with Ring Paxos: the acceptors take a partitioned value as its
/// partitions' parts and assemble it.
#[cfg(test)]
mod parts_tests {
    use super::*;
    use partita_btree::Op;
    use partita_types::{PartitionLayout, PartitionMap};

    /// Ring [1, 2, 3] (coordinator 3), learners 4 and 5 in two partitions of 0..100.
    fn partitioned() -> Membership {
        Membership {
            ring_decision: crate::RingDecision::Coordinator,
            protocol: Protocol::RingPaxos,
            acceptors: vec![1, 2, 3],
            coordinator: 3,
            learners: vec![4, 5],
            partitions: PartitionLayout {
                map: PartitionMap::new(2, 100).unwrap(),
                replicas: vec![vec![4], vec![5]],
            },
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        }
    }

    fn vid(seq: u64, round: u64) -> Vid {
        Vid {
            ballot: Ballot::new(round, 3),
            seq,
        }
    }

    /// Part `p` of a two-part value of id `vid`: one insert of key `p * 50 + seq`.
    fn part(vid: Vid, p: u32) -> Arc<Value> {
        let key = p as u64 * 50 + vid.seq;
        Arc::new(Value::new(
            vid,
            vec![partita_service::envelope::<partita_btree::BPlusTree>(
                1,
                vid.seq,
                4,
                &Op::Insert { key, value: key },
                &partitioned().partitions.map,
            )
            .unwrap()],
        ))
    }

    fn phase2a(vid: Vid, p: u32) -> Msg {
        Msg::Phase2A {
            ballot: vid.ballot,
            instance: 1,
            value: part(vid, p),
            decided: vec![],
            ring: 0b111,
            part: Some(Part { index: p, count: 2 }),
        }
    }

    fn whole(vid: Vid) -> Value {
        Value::from_parts(vid, &[(*part(vid, 0)).clone(), (*part(vid, 1)).clone()])
    }

    /// The write of the assembled value `v` at instance 1.
    fn persist_whole(v: Vid) -> Action {
        Action::Persist {
            token: 1,
            record: AcceptorRecord::Accept {
                instance: 1,
                ballot: v.ballot,
                value: Arc::new(whole(v)),
            },
        }
    }

    /// The ring vote for `v` at instance 1 carrying `votes`.
    fn ring_vote(v: Vid, votes: u64) -> Msg {
        Msg::RingVote {
            ballot: v.ballot,
            instance: 1,
            vid: v,
            votes,
            ring: 0b111,
        }
    }

    #[test]
    fn parts_in_any_order_are_persisted_once_assembled_then_voted() {
        let v = vid(7, 1);
        for order in [[0, 1], [1, 0]] {
            let mut a = Acceptor::new(1, partitioned());
            let mut out = Vec::new();
            a.on_message(3, phase2a(v, order[0]), &mut out);
            assert_eq!(out, vec![], "half a value: nothing to persist or vote");
            assert!(a.accepted(1).is_none());
            // The same part again changes nothing.
            a.on_message(3, phase2a(v, order[0]), &mut out);
            assert_eq!(out, vec![]);
            a.on_message(3, phase2a(v, order[1]), &mut out);
            assert_eq!(out, vec![persist_whole(v)]);
            out.clear();
            a.on_persisted(1, &mut out);
            // First in the ring: the vote starts once the assembled value is durable.
            assert_eq!(
                out,
                vec![Action::Send {
                    to: 2,
                    msg: ring_vote(v, 0b001)
                }]
            );
            assert_eq!(a.accepted(1).unwrap().1.as_ref(), &whole(v));
            // A retransmitted part is a retransmission: vote again, write nothing.
            out.clear();
            a.on_message(3, phase2a(v, 1), &mut out);
            assert!(matches!(
                &out[..],
                [Action::Send {
                    to: 2,
                    msg: Msg::RingVote { .. }
                }]
            ));
            a.invariants();
        }
    }

    #[test]
    fn a_ring_vote_waits_until_every_part_is_here_and_durable() {
        let v = vid(3, 1);
        let mut second = Acceptor::new(2, partitioned());
        let mut out = Vec::new();
        second.on_message(3, phase2a(v, 0), &mut out);
        let vote = ring_vote(v, 0b001);
        second.on_message(1, vote, &mut out);
        assert_eq!(out, vec![], "no value held: the vote waits");
        second.on_message(3, phase2a(v, 1), &mut out);
        assert!(matches!(&out[..], [Action::Persist { token: 1, .. }]));
        out.clear();
        second.on_persisted(1, &mut out);
        assert_eq!(
            out,
            vec![Action::Send {
                to: 3,
                msg: ring_vote(v, 0b011)
            }]
        );
    }

    #[test]
    fn parts_of_a_higher_ballot_replace_a_partial_assembly_and_conflicts_are_dropped() {
        let (old, new) = (vid(1, 1), vid(2, 2));
        let mut a = Acceptor::new(1, partitioned());
        let mut out = Vec::new();
        a.on_message(3, phase2a(old, 0), &mut out);
        // Another value id under the same ballot: only a faulty coordinator sends it.
        let forged = vid(9, 1);
        a.on_message(3, phase2a(forged, 1), &mut out);
        assert_eq!(out, vec![]);
        assert_eq!(a.drops().0.get("conflicting_part"), Some(&1));
        // A new leader's proposal replaces the half-assembled old one; the rest of
        // the old one is stale (nothing was promised or accepted: no Nack needed).
        a.on_message(3, phase2a(new, 1), &mut out);
        a.on_message(3, phase2a(old, 1), &mut out);
        assert_eq!(out, vec![]);
        assert_eq!(a.drops().0.get("stale_ballot"), Some(&1));
        a.on_message(3, phase2a(new, 0), &mut out);
        assert_eq!(out, vec![persist_whole(new)]);
        a.invariants();
    }

    #[test]
    fn half_assembled_instances_are_bounded_and_truncation_drops_them() {
        let mut a = Acceptor::new(1, partitioned());
        let mut out = Vec::new();
        for i in 1..=(ASSEMBLIES_MAX as u64 + 10) {
            let v = vid(i, 1);
            a.on_message(
                3,
                Msg::Phase2A {
                    ballot: v.ballot,
                    instance: i,
                    value: part(v, 0),
                    decided: vec![],
                    ring: 0b111,
                    part: Some(Part { index: 0, count: 2 }),
                },
                &mut out,
            );
            a.invariants();
        }
        assert_eq!(a.assembling.len(), ASSEMBLIES_MAX);
        assert_eq!(a.drops().0.get("parts_evicted"), Some(&10));
        assert_eq!(
            *a.assembling.keys().next().unwrap(),
            11,
            "the oldest go first"
        );
        a.truncate_below(500);
        assert_eq!(*a.assembling.keys().next().unwrap(), 500);
        a.invariants();
    }

    #[test]
    fn malformed_parts_and_split_values_fail_the_message_check() {
        let v = vid(1, 1);
        let with_part = |part| Msg::Phase2A {
            ballot: v.ballot,
            instance: 1,
            value: part_value(v),
            decided: vec![],
            ring: 0b111,
            part,
        };
        fn part_value(v: Vid) -> Arc<Value> {
            part(v, 0)
        }
        assert!(with_part(Some(Part { index: 0, count: 2 })).check().is_ok());
        assert!(with_part(Some(Part { index: 2, count: 2 }))
            .check()
            .is_err());
        assert!(with_part(Some(Part {
            index: 0,
            count: 65
        }))
        .check()
        .is_err());
        let mut bad = whole(v);
        bad.parts = vec![2, 1];
        let msg = Msg::DecideValue {
            instance: 1,
            value: Arc::new(bad.clone()),
        };
        assert!(msg.check().is_err(), "parts that do not add up");
        let split_part = Msg::Phase2A {
            ballot: v.ballot,
            instance: 1,
            value: Arc::new(whole(v)),
            decided: vec![],
            ring: 0b111,
            part: Some(Part { index: 0, count: 2 }),
        };
        assert!(split_part.check().is_err(), "a part that is itself split");
    }
}
