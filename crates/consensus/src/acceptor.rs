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
//! hands the mask to the coordinator as a [`Msg::Phase2B`].

use crate::{
    AcceptorRecord, Action, Drop, DropCounts, Membership, Msg, Outbox, PersistToken, Protocol,
    Value, Vid,
};
use partita_types::{Ballot, Instance, NodeId};
use std::collections::{BTreeMap, HashMap};
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
}

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
    pending: HashMap<PersistToken, PendingWrite>,
    held_votes: HashMap<Instance, HeldVote>,
    next_token: PersistToken,
    /// Writes the driver reported complete, for the "vote only when durable" check.
    last_persisted: PersistToken,
    drops: DropCounts,
    /// Planted bug (simulator controls only): vote as soon as a value arrives, before
    /// its write is durable.
    unsafe_vote_before_durable: bool,
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
            pending: HashMap::new(),
            held_votes: HashMap::new(),
            next_token: 1,
            last_persisted: 0,
            drops: DropCounts::default(),
            unsafe_vote_before_durable: false,
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
    /// durable, so it counts as such.
    pub fn recover(
        id: NodeId,
        membership: Membership,
        records: impl IntoIterator<Item = AcceptorRecord>,
    ) -> Acceptor {
        let mut a = Acceptor::new(id, membership);
        for r in records {
            match r {
                AcceptorRecord::Promise { ballot } => a.promised = a.promised.max(ballot),
                AcceptorRecord::Accept {
                    instance,
                    ballot,
                    value,
                } => {
                    a.promised = a.promised.max(ballot);
                    let newer = a
                        .accepted
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
                            },
                        );
                    }
                }
            }
        }
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

    pub fn accepted_count(&self) -> usize {
        self.accepted.len()
    }

    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }

    pub fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) {
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
            } => {
                self.learn_decisions(&decided);
                self.on_phase2a(from, ballot, instance, value, ring, out);
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
                self.learn_decisions(&[(instance, value.vid)]);
                // Multi-Paxos: a decided value this acceptor never accepted is kept so it
                // can serve learners; it is not a vote, so it is not persisted.
                self.accepted.entry(instance).or_insert(Accepted {
                    ballot: Ballot::ZERO,
                    value,
                    durable: false,
                    ring: 0,
                });
            }
            Msg::LearnRequest { from: lo, to: hi } => self.on_learn_request(from, lo, hi, out),
            Msg::Heartbeat { ballot, .. } => {
                // Tell the leader we are up, so it keeps us in its ring.
                if ballot >= self.promised {
                    out.push(Action::Send {
                        to: from,
                        msg: Msg::Alive {
                            ballot: self.promised,
                        },
                    });
                }
            }
            Msg::Alive { .. } | Msg::Forward { .. } => self.drops.count(Drop::NotForThisRole),
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

    fn on_phase2a(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        instance: Instance,
        value: Arc<Value>,
        ring: u64,
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
        self.accepted.insert(
            instance,
            Accepted {
                ballot,
                value: value.clone(),
                durable: false,
                ring,
            },
        );
        let token = self.persist(
            AcceptorRecord::Accept {
                instance,
                ballot,
                value,
            },
            out,
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
                let accepted = self
                    .accepted
                    .range(from..to)
                    .filter(|(_, a)| a.durable && a.ballot > Ballot::ZERO)
                    .map(|(&i, a)| (i, a.ballot, a.value.clone()))
                    .collect();
                out.push(Action::Send {
                    to: reply_to,
                    msg: Msg::Phase1B {
                        ballot,
                        from,
                        to,
                        accepted,
                    },
                });
            }
            PendingWrite::Accept {
                instance,
                ballot,
                vid,
            } => {
                let Some(a) = self.accepted.get_mut(&instance) else {
                    panic!("accepted entry for instance {instance} vanished before its write completed");
                };
                if a.ballot != ballot || a.value.vid != vid {
                    // Overwritten by a higher ballot meanwhile: this write no longer
                    // stands for the current accepted value, so it must not be voted for.
                    self.drops.count(Drop::StaleBallot);
                    return;
                }
                a.durable = true;
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
            self.decided.insert(i, vid);
            self.held_votes.remove(&i);
        }
        while self.decided.contains_key(&self.decided_prefix) {
            self.decided_prefix += 1;
        }
    }

    /// The first instance this acceptor does not know to be decided, with the decided id of
    /// every one below it known: where a coordinator it hosts starts Phase 1 after a
    /// failover. Deliberately not lifted by the leader's heartbeats: a new leader decides
    /// again (with the same value ids) what its acceptor does not know, so that every
    /// acceptor learns those decisions anew and can serve them to learners.
    pub fn first_undecided(&self) -> Instance {
        self.decided_prefix
    }

    fn on_learn_request(&mut self, from: NodeId, lo: Instance, hi: Instance, out: &mut Outbox) {
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

    /// Forget accepted values and decisions below `instance` (after a checkpoint).
    pub fn truncate_below(&mut self, instance: Instance) {
        self.accepted = self.accepted.split_off(&instance);
        self.decided = self.decided.split_off(&instance);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_types::{Command, Op};

    fn membership(protocol: Protocol) -> Membership {
        Membership {
            protocol,
            acceptors: vec![1, 2, 3],
            coordinator: 3,
            learners: vec![4],
        }
    }

    fn value(seq: u64) -> Arc<Value> {
        Arc::new(Value {
            vid: Vid {
                ballot: Ballot::new(1, 3),
                seq,
            },
            commands: vec![Command {
                client: 9,
                seq,
                reply_to: 4,
                op: Op::Read { key: seq },
            }],
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
                    accepted: vec![]
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
}
