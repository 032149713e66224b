//! Leader election without an external service (fault-tolerance issue, item 1).
//!
//! The leader is the node of the highest ballot anyone has seen. Every acceptor runs an
//! `Elector`: the leader's heartbeats and proposals ([`Elector::on_leader_activity`])
//! keep it quiet; once it has heard nothing from the leader for `timeout_ticks × r`
//! ticks, where `r ≥ 1` is its rank after the leader in the acceptor order, it
//! campaigns: it starts a coordinator with a ballot above every ballot it has seen,
//! which runs Phase 1 over the undecided instances. Ranks stagger the candidates, so
//! normally exactly one campaigns; if two do, the higher ballot wins and the other
//! steps down on the Nack or on the winner's heartbeat. Deterministic: the same inputs
//! give the same campaign at the same tick.
//!
//! A leader with a home ([`Elector::with_home`]: a GeoPaxos+ serializer's is its own
//! region's replica, the configuration's coordinator) is taken back there: the home
//! node, hearing another leader steadily for [`HOME_RECLAIM_TIMEOUTS`] election
//! timeouts since that leader's ballot appeared (or since its own last try), campaigns
//! although the leader lives. Only after hearing it: a home node cut off from the
//! leader campaigns by its rank as before, and one that cannot win a quorum tries again
//! only after as long, so the leader it disturbs keeps most of its time.
//!
//! Inputs: `on_leader_activity(ballot, now)`, `on_tick(now)`. Output: `on_tick`
//! returns the ballot floor to campaign above. Invariant: `highest` never decreases.

use crate::{Membership, TickDue};
use partita_types::{Ballot, NodeId};

/// Election timeouts a home node hears another leader before it takes the lead back
/// ([`Elector::with_home`]).
pub const HOME_RECLAIM_TIMEOUTS: u64 = 3;

#[derive(Clone, Debug)]
pub struct Elector {
    id: NodeId,
    membership: Membership,
    timeout_ticks: u64,
    /// Highest ballot seen: its node is the leader.
    highest: Ballot,
    last_heard_tick: u64,
    now: u64,
    campaigns: u64,
    /// This node is its leader's home ([`Elector::with_home`]).
    home: bool,
    /// When the current leader's ballot appeared, or this node last tried to take the
    /// lead back home.
    settled_since: u64,
    reclaims: u64,
}

impl Elector {
    /// `highest_seen`: the acceptor's recovered promise (`Ballot::ZERO` when fresh; the
    /// initial coordinator then counts as leader).
    pub fn new(
        id: NodeId,
        membership: Membership,
        timeout_ticks: u64,
        highest_seen: Ballot,
    ) -> Elector {
        Elector {
            id,
            membership,
            timeout_ticks: timeout_ticks.max(1),
            highest: highest_seen,
            last_heard_tick: 0,
            now: 0,
            campaigns: 0,
            home: false,
            settled_since: 0,
            reclaims: 0,
        }
    }

    /// With `home`, the lead belongs at the configuration's coordinator: there, this
    /// elector takes it back from a live leader elsewhere (see the module
    /// documentation). Without, and at every other node, nothing changes.
    pub fn with_home(mut self, home: bool) -> Elector {
        self.home = home && self.membership.coordinator == self.id;
        self
    }

    /// Campaigns this node started to take the lead back home.
    pub fn reclaims(&self) -> u64 {
        self.reclaims
    }

    /// Whether this home node would take the lead back at tick `now` (not leading).
    fn reclaim_due(&self) -> Option<u64> {
        if !self.home || self.leader() == self.id {
            return None;
        }
        Some(
            self.settled_since
                .saturating_add(self.timeout_ticks.saturating_mul(HOME_RECLAIM_TIMEOUTS)),
        )
    }

    /// Start the election timeout afresh at tick `now` (an elector built while the
    /// node runs, for a new configuration: it gives the leader a full timeout, as if
    /// it had just heard from it).
    pub fn start_at(&mut self, now: u64) {
        self.now = now;
        self.last_heard_tick = now;
        self.settled_since = now;
    }

    /// The node this elector believes leads.
    pub fn leader(&self) -> NodeId {
        // Nobody owns ballot zero, nor an epoch's lowest ballot (an acceptor's promise
        // right after a change of the acceptors): the configuration's coordinator
        // then counts as leader.
        if self.highest.node == 0 {
            self.membership.coordinator
        } else {
            self.highest.node
        }
    }

    pub fn highest(&self) -> Ballot {
        self.highest
    }

    pub fn campaigns(&self) -> u64 {
        self.campaigns
    }

    /// Something from the leader of `ballot` arrived (heartbeat, Phase 1A or 2A). Returns
    /// true when `ballot` is newer than anything seen: the leader changed.
    pub fn on_leader_activity(&mut self, ballot: Ballot) -> bool {
        if ballot < self.highest {
            return false;
        }
        let newer = ballot > self.highest;
        self.highest = ballot;
        self.last_heard_tick = self.now;
        if newer {
            self.settled_since = self.now;
        }
        newer
    }

    /// A ballot this node itself now leads with (it campaigned and started Phase 1).
    pub fn on_own_ballot(&mut self, ballot: Ballot) {
        self.on_leader_activity(ballot);
    }

    /// When [`Elector::on_tick`] may next start a campaign (`leading`: as there).
    pub fn tick_due(&self, leading: bool) -> TickDue {
        if leading {
            return TickDue::NEVER;
        }
        let Some(rank) = self.membership.rank_after(self.leader(), self.id) else {
            return TickDue::NEVER;
        };
        let rank = match rank as u64 {
            0 => self.membership.acceptors.len() as u64,
            r => r,
        };
        let due = TickDue::NEVER.tick(
            self.last_heard_tick
                .saturating_add(self.timeout_ticks.saturating_mul(rank)),
        );
        match self.reclaim_due() {
            Some(at) => due.min(TickDue::NEVER.tick(at)),
            None => due,
        }
    }

    /// Advance the clock; `leading` says whether this node runs a coordinator now.
    /// Returns `Some(floor)` when this node should campaign with a ballot above `floor`.
    pub fn on_tick(&mut self, now: u64, leading: bool) -> Option<Ballot> {
        self.now = now;
        if leading {
            // The coordinator core keeps its own heartbeats going.
            self.last_heard_tick = now;
            return None;
        }
        let leader = self.leader();
        // Rank after the leader; a node that restarts believing it led waits a full
        // round (every other acceptor's turn) before it campaigns again.
        let rank = match self.membership.rank_after(leader, self.id)? as u64 {
            0 => self.membership.acceptors.len() as u64,
            r => r,
        };
        let silent = now.saturating_sub(self.last_heard_tick);
        if silent < self.timeout_ticks * rank {
            // The leader lives: a home node takes the lead back once it heard it
            // steadily long enough (and lately: within an election timeout).
            if self.reclaim_due().is_some_and(|at| now >= at) {
                self.settled_since = now;
                if silent < self.timeout_ticks {
                    self.last_heard_tick = now;
                    self.campaigns += 1;
                    self.reclaims += 1;
                    return Some(self.highest);
                }
            }
            return None;
        }
        self.last_heard_tick = now;
        self.settled_since = now;
        self.campaigns += 1;
        Some(self.highest)
    }

    pub fn invariants(&self) {
        assert!(self.last_heard_tick <= self.now.max(self.last_heard_tick));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Protocol;

    fn m() -> Membership {
        Membership {
            ring_decision: crate::RingDecision::Coordinator,
            protocol: Protocol::MultiPaxos,
            acceptors: vec![1, 2, 3],
            coordinator: 1,
            learners: vec![4],
            partitions: Default::default(),
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        }
    }

    #[test]
    fn next_in_order_campaigns_first_and_heartbeats_keep_it_quiet() {
        let mut e2 = Elector::new(2, m(), 10, Ballot::ZERO);
        let mut e3 = Elector::new(3, m(), 10, Ballot::ZERO);
        assert_eq!(e2.leader(), 1);
        for t in 1..10 {
            assert_eq!(e2.on_tick(t, false), None);
            assert_eq!(e3.on_tick(t, false), None);
        }
        // Heartbeat at tick 9 resets both.
        let b1 = Ballot::ZERO.next_for(1);
        e2.on_leader_activity(b1);
        e3.on_leader_activity(b1);
        assert_eq!(e2.on_tick(18, false), None);
        // Silence: node 2 (rank 1) campaigns after 10 ticks, node 3 (rank 2) after 20.
        assert_eq!(e2.on_tick(19, false), Some(b1));
        assert_eq!(e3.on_tick(19, false), None);
        assert_eq!(e3.on_tick(29, false), Some(b1));
    }

    #[test]
    fn older_ballots_do_not_count_as_the_leader() {
        let mut e = Elector::new(3, m(), 10, Ballot::ZERO);
        let b2 = Ballot::ZERO.next_for(1).next_for(2);
        assert!(e.on_leader_activity(b2));
        assert_eq!(e.leader(), 2);
        assert!(!e.on_leader_activity(Ballot::ZERO.next_for(1)));
        assert_eq!(e.leader(), 2);
        // Rank of 3 after 2 is 1.
        assert_eq!(e.on_tick(5, false), None);
        assert_eq!(e.on_tick(10, false), Some(b2));
    }

    #[test]
    fn a_restarted_former_leader_waits_its_turn() {
        let b1 = Ballot::ZERO.next_for(1);
        let mut e = Elector::new(1, m(), 10, b1);
        assert_eq!(e.leader(), 1);
        assert_eq!(e.on_tick(29, false), None);
        assert_eq!(e.on_tick(30, false), Some(b1));
        // While it leads it never campaigns.
        assert_eq!(e.on_tick(100, true), None);
    }

    #[test]
    fn a_home_node_takes_the_lead_back_from_a_leader_it_hears() {
        // Node 1 is the configuration's coordinator; node 2 won an election.
        let b2 = Ballot::ZERO.next_for(1).next_for(2);
        let mut home = Elector::new(1, m(), 10, Ballot::ZERO).with_home(true);
        let mut other = Elector::new(3, m(), 10, Ballot::ZERO).with_home(true);
        let mut plain = Elector::new(1, m(), 10, Ballot::ZERO);
        for e in [&mut home, &mut other, &mut plain] {
            e.on_tick(5, false);
            assert!(e.on_leader_activity(b2));
        }
        // Silent, it would campaign by rank (two after node 2) at 25.
        assert_eq!(home.tick_due(false), TickDue::NEVER.tick(5 + 2 * 10));
        // Heartbeats every 5 ticks: the leader lives.
        for t in (6..=34).filter(|t| t % 5 == 0) {
            for e in [&mut home, &mut other, &mut plain] {
                assert_eq!(e.on_tick(t, false), None, "tick {t}");
                e.on_leader_activity(b2);
            }
        }
        assert_eq!(home.tick_due(false), TickDue::NEVER.tick(35));
        // Three election timeouts after b2 appeared, the home node campaigns; the
        // others keep following.
        assert_eq!(home.on_tick(35, false), Some(b2));
        assert_eq!(home.reclaims(), 1);
        assert_eq!(other.on_tick(35, false), None);
        assert_eq!(plain.on_tick(35, false), None);
        assert_eq!(other.tick_due(false), TickDue::NEVER.tick(30 + 10));
        // Its try lost (b2's leader stays): it tries again three timeouts later, no
        // sooner.
        for t in 36..65 {
            assert_eq!(home.on_tick(t, false), None, "tick {t}");
            home.on_leader_activity(b2);
        }
        assert_eq!(home.on_tick(65, false), Some(b2));
        // A leader it stopped hearing is not reclaimed from: it campaigns by its
        // rank (two after node 2) once silence lasts two timeouts.
        assert_eq!(home.reclaims(), 2);
        assert_eq!(home.on_tick(84, false), None);
        assert_eq!(home.on_tick(85, false), Some(b2));
        assert_eq!(home.reclaims(), 2);
    }
}
