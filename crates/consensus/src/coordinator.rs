//! The coordinator role (paper 001 §III-A; Multi-Paxos and Ring Paxos).
//!
//! Phase 1 runs ahead of time, for ranges of `phase1_range_instances` instances: the
//! coordinator may propose in instance `i` only once a majority promised its ballot for
//! the range holding `i`, and it must first re-propose, in that range, the value with the
//! highest ballot that any promising acceptor reported (gaps below the highest reported
//! instance are filled with no-ops, as a recovering Multi-Paxos leader does).
//!
//! Client commands are queued and packed into values of at most `batch_bytes_max`
//! bytes; a value is proposed when the window of instances in flight has room. With
//! instances in flight, a value that is not full waits up to `batch_delay_ticks` for
//! more commands, so that batches grow under load while an idle system proposes at once.
//! Optionally (`value_interval_ticks`) a value that is not full also waits until that
//! many ticks have passed since the previous new value.

use crate::{
    command_bytes, send_all, CoordinatorConfig, Drop, DropCounts, Membership, Msg, Outbox, Part,
    Protocol, RingDecision, TickDue, Value, Vid,
};
use partita_types::{Ballot, ClientId, Command, Instance, NodeId};
use partita_types::{DetHashMap, DetHashSet};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// When the coordinator first sweeps stale entries out of its table of undecided
/// commands: everything pending, plus a generous allowance for values in flight.
fn queued_gc_min(cfg: &CoordinatorConfig) -> usize {
    cfg.pending_commands_max + 64 * 1024
}

#[derive(Clone, Debug)]
struct InFlight {
    value: Arc<Value>,
    votes: u64,
    sent_at_tick: u64,
}

#[derive(Clone, Debug)]
struct Phase1 {
    from: Instance,
    to: Instance,
    promises: u64,
    /// Per acceptor (by index), the sub-ranges of `from..to` its Phase 1B pages
    /// covered so far, merged and sorted: its promise counts once they are the whole
    /// range.
    covered: Vec<Vec<(Instance, Instance)>>,
    /// Highest-ballot value reported per instance.
    reported: BTreeMap<Instance, (Ballot, Arc<Value>)>,
    /// Highest truncation point a promising acceptor reported: every instance below
    /// it is decided and checkpointed, and must not be proposed in again.
    truncated_below: Instance,
    sent_at_tick: u64,
}

#[derive(Clone, Debug, Default)]
pub struct CoordinatorStats {
    pub commands_received: u64,
    pub commands_refused: u64,
    pub values_proposed: u64,
    pub instances_decided: u64,
    pub retransmits: u64,
    pub phase1_runs: u64,
    /// Instances skipped because Phase 1 found them truncated (decided earlier).
    pub instances_skipped: u64,
    /// Resubmissions dropped because the same command was already queued here or in a
    /// value in flight (its original will be decided and answered).
    pub duplicates_dropped: u64,
    /// Multi-Ring Paxos: skip instances proposed, and the logical instances they stand
    /// for.
    pub skips_proposed: u64,
    /// Values without commands proposed while idle, so that ordered time moves
    /// ([`crate::CoordinatorConfig::idle_value_ms`]).
    pub idle_values: u64,
    pub logical_skipped: u64,
    /// Multi-Ring Paxos: skips proposed because a learner asked (skips on demand), and
    /// requests for a position past λ times (the clock + Δ) (capped there).
    pub skips_on_demand: u64,
    pub skip_requests_capped: u64,
}

/// Something a driver measures with its own clock (the core has none): a value
/// proposed, with its size, and an instance decided. Noted only with
/// [`CoordinatorConfig::observe`], drained by [`Coordinator::drain_observations`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    Proposed {
        instance: Instance,
        commands: usize,
        bytes: usize,
    },
    Decided {
        instance: Instance,
    },
}

/// Observations kept undrained, at most: past this the coordinator stops noting them
/// (a driver that drains after every step never comes near it).
pub const OBSERVATIONS_MAX: usize = 65_536;

/// Where an undecided command of this coordinator is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queued {
    /// In `pending`; the replica its client waits on now (a resubmission may name
    /// another one).
    Pending(NodeId),
    In(Vid),
}

pub struct Coordinator {
    id: NodeId,
    membership: Membership,
    cfg: CoordinatorConfig,
    ballot: Ballot,
    /// Phase 1 done for every instance below this.
    prepared_up_to: Instance,
    phase1: Option<Phase1>,
    /// Values Phase 1 obliges us to re-propose, by instance.
    forced: BTreeMap<Instance, Arc<Value>>,
    next_instance: Instance,
    next_vid_seq: u64,
    in_flight: BTreeMap<Instance, InFlight>,
    /// Every instance below this is decided.
    decided_up_to: Instance,
    /// Decided above `decided_up_to` (out of order).
    decided_ahead: BTreeMap<Instance, Vid>,
    /// Decisions not yet announced.
    unannounced: Vec<(Instance, Vid)>,
    /// Of those, the ones the learners have not heard of either: with
    /// [`RingDecision::Acceptor`] the acceptor that completed a majority told them, and
    /// only a decision the coordinator assembled from several partial masks is theirs
    /// to hear from us (with `Coordinator`, every decision is).
    learners_untold: Vec<(Instance, Vid)>,
    /// The tick at which `unannounced` last became non-empty.
    unannounced_since_tick: u64,
    pending: VecDeque<Command>,
    /// Every command queued in `pending` or packed into a value this coordinator
    /// proposed and has not seen decided, by (client, seq): a resubmission of one of
    /// them is dropped rather than ordered again. Without this, clients whose timeout
    /// is shorter than the queueing delay double the load with every round of
    /// resubmissions, and an overloaded cluster never recovers (simulator seed 73070).
    /// Entries of values lost to a new ballot go stale; `is_live` tells them apart.
    queued: DetHashMap<(ClientId, u64), Queued>,
    /// Sweep stale entries out of `queued` when it reaches this size.
    queued_gc_at: usize,
    pending_bytes: usize,
    pending_since_tick: u64,
    /// When the last new value (not a forced re-proposal) was taken from `pending`.
    last_value_tick: Option<u64>,
    now_tick: u64,
    /// The driver's clock (milliseconds), set before each tick ([`Coordinator::set_clock`]).
    clock_ms: u64,
    /// The time of the newest value this coordinator proposed or adopted: new values
    /// are stamped no earlier.
    last_stamp_ms: u64,
    /// The clock when this coordinator last stamped a value (`None`: not yet).
    stamped_clock_ms: Option<u64>,
    /// The clock (ms) when the newest value was proposed.
    proposed_clock_ms: u64,
    last_heartbeat_tick: u64,
    /// Recently decided values, for learners that ask the coordinator.
    recent: BTreeMap<Instance, Arc<Value>>,
    recent_max: usize,
    /// Per acceptor index: the last tick we heard from it (Ring Paxos lays out its ring
    /// over the acceptors heard from within `suspect_ticks`).
    heard_tick: Vec<u64>,
    /// The ring mask the values in flight were last sent with.
    ring_mask: u64,
    /// Set once a higher ballot of another node is seen: this coordinator must stop.
    deposed_by: Option<Ballot>,
    /// Multi-Ring Paxos: the skip rule, and the logical instances it asked for that are
    /// not proposed yet (they go out when the window has room and no batch is ready).
    pacer: Option<crate::multiring::SkipPacer>,
    skip_due: u64,
    /// Skips on demand: the logical position learners asked this ring to reach, not
    /// proposed yet; the instance of the last skip proposed for one (one at a time);
    /// and the ring's logical position after this coordinator's proposals (exact for
    /// the instances it proposed, a lower bound after a failover).
    skip_asked: u64,
    demand_skip_at: Option<Instance>,
    logical_proposed: u64,
    stats: CoordinatorStats,
    drops: DropCounts,
    /// With `cfg.observe`: proposals and decisions not yet drained (bounded).
    observations: Vec<Observation>,
}

impl Coordinator {
    /// The replicas changed at run time (`partita member`; see
    /// `Membership::with_members`): the learners decisions and heartbeats go to from now on.
    pub fn set_learners(&mut self, m: &Membership) {
        self.membership.learners = m.learners.clone();
        self.membership.partitions = m.partitions.clone();
    }

    /// A coordinator that will lead with a ballot above `highest_seen` (for a fresh
    /// cluster `Ballot::ZERO`; after a restart or a failover the highest ballot the
    /// node has seen), proposing from `first_undecided` on (1 for a fresh cluster;
    /// after a failover the first instance its acceptor does not know decided: Phase 1
    /// covers everything from there).
    pub fn new(
        id: NodeId,
        membership: Membership,
        cfg: CoordinatorConfig,
        highest_seen: Ballot,
        first_undecided: Instance,
    ) -> Coordinator {
        assert!(
            membership.acceptor_index(id).is_some(),
            "only an acceptor coordinates"
        );
        assert!(first_undecided >= 1);
        assert!(
            cfg.window_instances_max > 0
                && cfg.batch_bytes_max > 0
                && cfg.phase1_range_instances > 0
        );
        let pacer = cfg
            .skips
            .clone()
            .map(|s| crate::multiring::SkipPacer::new(s).expect("the skip rule was validated"));
        let n_acceptors = membership.acceptors.len();
        let all = membership.all_acceptors_mask();
        let queued_gc_at = queued_gc_min(&cfg);
        // A ballot of the configuration's epoch: above every ballot of the epochs
        // before, and the caller never passes one seen from a later epoch.
        let ballot = highest_seen.max(membership.epoch_floor()).next_for(id);
        assert!(
            membership.owns_ballot(ballot),
            "a coordinator of epoch {} cannot lead above ballot {highest_seen}",
            membership.epoch
        );
        let first_undecided = first_undecided.max(membership.epoch_from);
        Coordinator {
            id,
            membership,
            cfg,
            ballot,
            prepared_up_to: first_undecided,
            phase1: None,
            forced: BTreeMap::new(),
            next_instance: first_undecided,
            next_vid_seq: 0,
            in_flight: BTreeMap::new(),
            decided_up_to: first_undecided,
            decided_ahead: BTreeMap::new(),
            unannounced: Vec::new(),
            learners_untold: Vec::new(),
            unannounced_since_tick: 0,
            pending: VecDeque::new(),
            queued: DetHashMap::default(),
            queued_gc_at,
            pending_bytes: 0,
            pending_since_tick: 0,
            last_value_tick: None,
            now_tick: 0,
            clock_ms: 0,
            last_stamp_ms: 0,
            stamped_clock_ms: None,
            proposed_clock_ms: 0,
            last_heartbeat_tick: 0,
            recent: BTreeMap::new(),
            recent_max: 4096,
            heard_tick: vec![0; n_acceptors],
            ring_mask: all,
            deposed_by: None,
            pacer,
            skip_due: 0,
            skip_asked: 0,
            demand_skip_at: None,
            logical_proposed: 0,
            stats: CoordinatorStats::default(),
            drops: DropCounts::default(),
            observations: Vec::new(),
        }
    }

    /// Hand over what was observed since the last call (empty unless
    /// [`CoordinatorConfig::observe`]).
    pub fn drain_observations(&mut self, out: &mut Vec<Observation>) {
        out.append(&mut self.observations);
    }

    fn observe(&mut self, o: Observation) {
        if self.cfg.observe && self.observations.len() < OBSERVATIONS_MAX {
            self.observations.push(o);
        }
    }

    pub fn ballot(&self) -> Ballot {
        self.ballot
    }
    /// Highest decided instance with every instance below it decided too (0: none).
    pub fn decided_up_to(&self) -> Instance {
        self.decided_up_to - 1
    }
    pub fn stats(&self) -> &CoordinatorStats {
        &self.stats
    }
    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }
    pub fn pending_commands(&self) -> usize {
        self.pending.len()
    }
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
    /// Whether a command for which `f` holds is queued here or in a value in flight
    /// (proposed, not yet decided).
    pub fn holds(&self, mut f: impl FnMut(&Command) -> bool) -> bool {
        self.pending.iter().any(&mut f)
            || self
                .in_flight
                .values()
                .any(|i| i.value.commands.iter().any(&mut f))
    }
    /// Instances in flight whose value carries client commands (not skips or no-ops).
    pub fn in_flight_commands(&self) -> usize {
        self.in_flight
            .values()
            .filter(|f| !f.value.commands.is_empty())
            .count()
    }
    /// `Some(b)`: a node with the higher ballot `b` leads now; drop this coordinator
    /// (its queued commands are lost; their clients resubmit).
    pub fn deposed_by(&self) -> Option<Ballot> {
        self.deposed_by
    }
    /// The client commands this coordinator still holds, for the coordinator of the
    /// next ordering epoch: the queued ones, and those of values it decided or has in
    /// flight at or above `from` (the first instance of the new epoch: what the old
    /// one decides there is never executed). A command also decided below `from` runs
    /// once all the same (replicas answer a repeat from their reply cache). Split
    /// values give their commands whole ([`Value::whole_commands`]).
    pub fn into_commands(self, from: Instance) -> Vec<Command> {
        let mut cmds: Vec<Command> = self
            .recent
            .range(from..)
            .flat_map(|(_, v)| v.whole_commands())
            .collect();
        cmds.extend(
            self.in_flight
                .range(from..)
                .flat_map(|(_, f)| f.value.whole_commands()),
        );
        cmds.extend(self.pending);
        cmds
    }

    /// The ring mask proposals go out with (Ring Paxos).
    pub fn ring_mask(&self) -> u64 {
        self.ring_mask
    }

    fn heard_from(&mut self, node: NodeId) {
        if let Some(i) = self.membership.acceptor_index(node) {
            self.heard_tick[i] = self.now_tick;
        }
    }

    fn heard_from_mask(&mut self, votes: u64) {
        for (i, t) in self.heard_tick.iter_mut().enumerate() {
            if votes & (1u64 << i) != 0 {
                *t = self.now_tick;
            }
        }
    }

    /// The acceptors heard from lately, plus ourselves; every acceptor when fewer than a
    /// majority answer (no ring can decide then anyway, and waiting costs nothing).
    fn live_mask(&self) -> u64 {
        let me = self.membership.acceptor_index(self.id).expect("acceptor");
        let mut mask = 1u64 << me;
        for (i, &t) in self.heard_tick.iter().enumerate() {
            if self.now_tick.saturating_sub(t) <= self.cfg.suspect_ticks {
                mask |= 1u64 << i;
            }
        }
        if (mask.count_ones() as usize) < self.membership.majority() {
            self.membership.all_acceptors_mask()
        } else {
            mask
        }
    }

    /// Begin leading: Phase 1 for the first range.
    pub fn start(&mut self, out: &mut Outbox) {
        self.start_phase1(self.prepared_up_to, out);
    }

    /// Planted bug (simulator controls only): begin leading as if Phase 1 had completed
    /// for the first range with nothing to adopt, and propose at once.
    pub fn unsafe_skip_phase1(&mut self, out: &mut Outbox) {
        self.prepared_up_to = self.next_instance + self.cfg.phase1_range_instances;
        self.flush(out);
    }

    fn start_phase1(&mut self, from: Instance, out: &mut Outbox) {
        let to = from + self.cfg.phase1_range_instances;
        self.phase1 = Some(Phase1 {
            from,
            to,
            promises: 0,
            covered: vec![Vec::new(); self.membership.acceptors.len()],
            reported: BTreeMap::new(),
            truncated_below: 1,
            sent_at_tick: self.now_tick,
        });
        self.stats.phase1_runs += 1;
        let acceptors = self.membership.acceptors.clone();
        send_all(
            out,
            &acceptors,
            Msg::Phase1A {
                ballot: self.ballot,
                from,
                to,
            },
        );
    }

    /// A client command. Returns false (and counts it) when the queue is full: the
    /// client will time out and resubmit.
    pub fn on_command(&mut self, cmd: Command, out: &mut Outbox) -> bool {
        self.stats.commands_received += 1;
        if self.is_duplicate(&cmd) {
            self.stats.duplicates_dropped += 1;
            return true;
        }
        if self.pending.len() >= self.cfg.pending_commands_max {
            self.stats.commands_refused += 1;
            self.drops.count(Drop::QueueFull);
            return false;
        }
        if self.queued.len() >= self.queued_gc_at {
            self.forget_stale_queued();
        }
        self.queued
            .insert((cmd.client, cmd.seq), Queued::Pending(cmd.reply_to));
        if self.pending.is_empty() {
            self.pending_since_tick = self.now_tick;
        }
        self.pending_bytes += command_bytes(&cmd);
        self.pending.push_back(cmd);
        self.flush(out);
        true
    }

    /// Whether `cmd` resubmits a command that is still queued here or in a value in
    /// flight: its original will be decided and answered, so ordering it again would
    /// only add load. A queued original takes the resubmission's `reply_to` (the
    /// client now waits on that replica); an original in flight must have the same
    /// one, or the resubmission is ordered again (the replicas answer it from their
    /// client table without executing it twice). It must also go to the same worker
    /// threads: opt-PSMR's conservative resubmission (`threads` cleared) follows a
    /// refusal of the optimistic original, which ran nowhere, and may arrive while the
    /// original is still in flight here (with the ring decided at an acceptor, the
    /// replicas learn a decision before the coordinator); dropped, it waited for the
    /// client's timeout (swarm seed 18130).
    fn is_duplicate(&mut self, cmd: &Command) -> bool {
        let key = (cmd.client, cmd.seq);
        match self.queued.get_mut(&key) {
            None => false,
            Some(Queued::Pending(reply_to)) => {
                *reply_to = cmd.reply_to;
                true
            }
            Some(&mut Queued::In(vid)) => self.live_value(vid).is_some_and(|v| {
                v.commands.iter().any(|c| {
                    (c.client, c.seq) == key && c.reply_to == cmd.reply_to && c.route == cmd.route
                })
            }),
        }
    }

    /// The value `vid` if it is still in flight or due to be proposed again.
    fn live_value(&self, vid: Vid) -> Option<&Arc<Value>> {
        self.in_flight
            .values()
            .map(|f| &f.value)
            .chain(self.forced.values())
            .find(|v| v.vid == vid)
    }

    /// Drop the entries of values that will never be decided by this coordinator.
    fn forget_stale_queued(&mut self) {
        let live: DetHashSet<Vid> = self
            .in_flight
            .values()
            .map(|f| f.value.vid)
            .chain(self.forced.values().map(|v| v.vid))
            .collect();
        self.queued.retain(|_, q| match q {
            Queued::Pending(_) => true,
            Queued::In(vid) => live.contains(vid),
        });
        // Amortized: the next sweep only once as many entries again were added (a
        // wide window of large values may keep many entries live).
        self.queued_gc_at = queued_gc_min(&self.cfg).max(2 * self.queued.len());
    }

    pub fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) {
        match msg {
            Msg::Phase1B {
                ballot,
                from: lo,
                to: hi,
                accepted,
                truncated_below,
            } => self.on_phase1b(from, ballot, lo, hi, accepted, truncated_below, out),
            Msg::Nack { ballot, promised } => self.on_nack(ballot, promised, out),
            Msg::Phase2B {
                ballot,
                instance,
                vid,
                votes,
            } => self.on_phase2b(ballot, instance, vid, votes, out),
            Msg::Truncated { below } => self.on_truncated(below, out),
            Msg::SkipRequest { to } => self.on_skip_request(to, out),
            Msg::Alive { ballot } => {
                self.heard_from(from);
                if ballot > self.ballot && ballot.node != self.id {
                    self.deposed_by = Some(ballot);
                }
            }
            Msg::LearnRequest { from: lo, to: hi } => {
                let decided: Vec<_> = self
                    .recent
                    .range(lo..hi)
                    .map(|(&i, v)| (i, v.clone()))
                    .collect();
                out.push(crate::Action::Send {
                    to: from,
                    msg: Msg::LearnReply { decided },
                });
            }
            _ => self.drops.count(Drop::NotForThisRole),
        }
    }

    /// A learner's merge waits for this ring to reach logical position `to` (see
    /// [`Msg::SkipRequest`]; learners ask only a ring that looks idle to them, whose
    /// last two decided instances were skips): pull the pacer's next skip forward.
    /// If the ring is short of `to`, skip now to where the pacer would have it at the
    /// end of this interval, λ times (clock + Δ), so that the busy rings' values of
    /// the next interval find it there; never further (a request past it is capped):
    /// a ring skipped far ahead lands its next values ahead of every other ring's,
    /// which then wait for it in turn. (Skipping busy rings to where learners asked
    /// made them leapfrog each other: SMR on 9 rings lost 7-12% of its throughput.)
    /// One such skip in flight at a time; requests that arrive meanwhile ride on the
    /// next.
    fn on_skip_request(&mut self, to: u64, out: &mut Outbox) {
        let Some(p) = &self.pacer else {
            self.drops.count(Drop::NotForThisRole);
            return;
        };
        let c = p.config();
        let ahead = c
            .lambda_per_s
            .saturating_mul(self.clock_ms.saturating_add(c.delta_ms))
            / 1000;
        if to > ahead {
            self.stats.skip_requests_capped += 1;
        }
        if to.min(ahead) > self.logical_proposed {
            self.skip_asked = self.skip_asked.max(ahead);
            self.flush(out);
        }
    }

    /// A skip learners asked for is due, and none asked for earlier is in flight.
    /// Whether ordered time must move by a value without commands: the service keeps
    /// time ([`crate::CoordinatorConfig::idle_value_ms`]), nothing is in flight or
    /// waiting, and nothing was proposed for that long. (A ring of Multi-Ring Paxos
    /// moves time with its skips instead.)
    fn idle_value_due(&self) -> bool {
        self.idle_value_at().is_some_and(|at| self.clock_ms >= at)
    }

    /// The clock time from which an idle value is due, if one can be (see
    /// [`Coordinator::idle_value_due`]).
    fn idle_value_at(&self) -> Option<u64> {
        let t = self.cfg.idle_value_ms?;
        (self.cfg.skips.is_none() && self.in_flight.is_empty() && self.pending.is_empty())
            .then(|| self.proposed_clock_ms.saturating_add(t))
    }

    /// Whether Phase 1 for the next range is due, ahead of time, before proposals
    /// stall on it.
    fn phase1_ahead_due(&self) -> bool {
        self.phase1.is_none()
            && self.prepared_up_to.saturating_sub(self.next_instance)
                <= self.cfg.phase1_range_instances / 2
    }

    fn demand_skip_due(&self) -> bool {
        self.skip_asked > self.logical_proposed
            && self
                .demand_skip_at
                .is_none_or(|i| !self.in_flight.contains_key(&i))
    }

    #[allow(clippy::too_many_arguments)]
    fn on_phase1b(
        &mut self,
        from: NodeId,
        ballot: Ballot,
        lo: Instance,
        hi: Instance,
        accepted: Vec<(Instance, Ballot, Arc<Value>)>,
        truncated_below: Instance,
        out: &mut Outbox,
    ) {
        let Some(bit) = self.membership.acceptor_index(from).map(|i| 1u64 << i) else {
            self.drops.count(Drop::FromNonMember);
            return;
        };
        let Some(p) = self.phase1.as_mut() else {
            self.drops.count(Drop::StaleBallot);
            return;
        };
        // A page of the promise for this Phase 1's range (the whole range, or a part).
        if ballot != self.ballot || lo < p.from || hi > p.to || lo > hi {
            self.drops.count(Drop::StaleBallot);
            return;
        }
        if p.promises & bit != 0 {
            return; // duplicate
        }
        let index = bit.trailing_zeros() as usize;
        self.heard_tick[index] = self.now_tick;
        if !cover(&mut p.covered[index], lo, hi) {
            return; // a page seen before
        }
        if p.covered[index] == [(p.from, p.to)] {
            p.promises |= bit;
        }
        p.truncated_below = p.truncated_below.max(truncated_below);
        for (i, b, v) in accepted {
            assert!(
                b <= ballot,
                "acceptor reported a value accepted above the ballot it promised"
            );
            if i < lo || i >= hi {
                continue;
            }
            match p.reported.get(&i) {
                Some((old, _)) if *old >= b => {}
                _ => {
                    p.reported.insert(i, (b, v));
                }
            }
        }
        // Our own acceptor's promise must be among them: it is the durable record that
        // this ballot was used, so a restart of this node can never lead with it again
        // (reusing a ballot would let two incarnations propose different values, and
        // value ids, under one ballot).
        let own = self
            .membership
            .acceptor_index(self.id)
            .map_or(0, |i| 1u64 << i);
        if (p.promises.count_ones() as usize) < self.membership.majority() || p.promises & own == 0
        {
            return;
        }
        // Phase 1 complete for [lo, hi).
        let p = self.phase1.take().unwrap();
        if p.truncated_below > self.next_instance {
            // Acceptors of the quorum truncated past where we stand: those instances are
            // decided and executed by a majority of replicas (learners that lag fetch a
            // checkpoint). Skip them; above the highest truncation point every quorum
            // member still holds what it accepted, so Paxos proceeds as usual.
            self.skip_to(p.truncated_below);
        }
        if p.to <= self.next_instance {
            // Everything this Phase 1 covered is decided: prepare from where we stand.
            self.prepared_up_to = self.next_instance;
            self.start_phase1(self.next_instance, out);
            self.flush(out);
            return;
        }
        self.prepared_up_to = p.to;
        if let Some((&max, _)) = p.reported.iter().next_back() {
            for i in self.next_instance.max(p.from)..=max {
                let v = match p.reported.get(&i) {
                    Some((_, v)) => {
                        // Adopted values keep their time; later ones are stamped later.
                        self.last_stamp_ms = self.last_stamp_ms.max(v.time_ms);
                        v.clone()
                    }
                    None => {
                        let vid = self.fresh_vid();
                        let noop = Value::new(vid, Vec::new()).at(self.stamp());
                        Arc::new(self.canonical(noop))
                    }
                };
                self.forced.insert(i, v);
            }
        }
        self.flush(out);
    }

    /// An acceptor refused a proposal below its truncation point `below`: every
    /// instance there is decided (a majority of replicas checkpointed it), whoever
    /// decided it. Stop proposing there.
    fn on_truncated(&mut self, below: Instance, out: &mut Outbox) {
        if below <= self.decided_up_to {
            self.drops.count(Drop::AlreadyDecided);
            return;
        }
        self.skip_to(below);
        if self.phase1.is_none() && self.prepared_up_to < self.next_instance {
            self.prepared_up_to = self.next_instance;
            self.start_phase1(self.next_instance, out);
        }
        self.flush(out);
    }

    /// Every instance below `instance` is decided (truncated after checkpoints): stop
    /// proposing there and count them decided.
    fn skip_to(&mut self, instance: Instance) {
        self.stats.instances_skipped += instance.saturating_sub(self.next_instance);
        self.next_instance = self.next_instance.max(instance);
        self.decided_up_to = self.decided_up_to.max(instance);
        self.in_flight = self.in_flight.split_off(&instance);
        self.forced = self.forced.split_off(&instance);
        self.decided_ahead = self.decided_ahead.split_off(&instance);
        while self.decided_ahead.remove(&self.decided_up_to).is_some() {
            self.decided_up_to += 1;
        }
        self.unannounced.retain(|&(i, _)| i >= instance);
        self.learners_untold.retain(|&(i, _)| i >= instance);
    }

    fn on_nack(&mut self, ballot: Ballot, promised: Ballot, out: &mut Outbox) {
        if ballot != self.ballot || promised <= self.ballot {
            self.drops.count(Drop::StaleBallot);
            return;
        }
        if promised.node != self.id {
            // Another node leads with a higher ballot: step down rather than duel.
            self.deposed_by = Some(promised);
            return;
        }
        // An earlier incarnation of ours promised higher (we restarted and forgot): take
        // a higher ballot and redo Phase 1 from the first undecided instance. Values in flight are re-proposed under the new ballot
        // if Phase 1 reports them (or as the values we choose again otherwise).
        self.ballot = promised.next_for(self.id);
        let from = self.decided_up_to;
        for (i, f) in std::mem::take(&mut self.in_flight) {
            self.forced.entry(i).or_insert(f.value);
        }
        self.prepared_up_to = from;
        self.start_phase1(from, out);
    }

    fn on_phase2b(
        &mut self,
        ballot: Ballot,
        instance: Instance,
        vid: Vid,
        votes: u64,
        out: &mut Outbox,
    ) {
        if ballot != self.ballot {
            self.drops.count(Drop::StaleBallot);
            return;
        }
        self.heard_from_mask(votes);
        let majority = self.membership.majority();
        let Some(f) = self.in_flight.get_mut(&instance) else {
            self.drops.count(Drop::AlreadyDecided);
            return;
        };
        if f.value.vid != vid {
            self.drops.count(Drop::UnknownInstance);
            return;
        }
        f.votes |= votes;
        if (f.votes.count_ones() as usize) < majority {
            return;
        }
        let f = self.in_flight.remove(&instance).unwrap();
        let vid = f.value.vid;
        self.decide(instance, f.value, out);
        if self.membership.protocol == Protocol::RingPaxos
            && (self.membership.ring_decision == RingDecision::Coordinator
                || (votes.count_ones() as usize) < majority)
        {
            self.learners_untold.push((instance, vid));
        }
        self.flush(out);
    }

    fn decide(&mut self, instance: Instance, value: Arc<Value>, out: &mut Outbox) {
        self.stats.instances_decided += 1;
        self.observe(Observation::Decided { instance });
        let vid = value.vid;
        for c in &value.commands {
            if self.queued.get(&(c.client, c.seq)) == Some(&Queued::In(vid)) {
                self.queued.remove(&(c.client, c.seq));
            }
        }
        if self.membership.protocol == Protocol::MultiPaxos {
            let both = self.learner_acceptors();
            if !both.is_empty() {
                let msg = Msg::DecideValue {
                    instance,
                    value: value.clone(),
                };
                send_all(out, &both, msg);
            }
            for (learners, value) in self.for_learners(&value) {
                send_all(out, &learners, Msg::DecideValue { instance, value });
            }
        }
        if self.unannounced.is_empty() {
            self.unannounced_since_tick = self.now_tick;
        }
        self.unannounced.push((instance, vid));
        self.recent.insert(instance, value);
        while self.recent.len() > self.recent_max {
            self.recent.pop_first();
        }
        self.decided_ahead.insert(instance, vid);
        while self.decided_ahead.remove(&self.decided_up_to).is_some() {
            self.decided_up_to += 1;
        }
    }

    /// The driver's clock in milliseconds: new values are stamped with it (never
    /// below the values proposed before).
    pub fn set_clock(&mut self, now_ms: u64) {
        self.clock_ms = self.clock_ms.max(now_ms);
    }

    /// The cluster's ordered time as this node last saw it (the newest value its
    /// acceptor holds): a new coordinator continues from it.
    pub fn observe_time(&mut self, time_ms: u64) {
        self.last_stamp_ms = self.last_stamp_ms.max(time_ms);
    }

    /// The time for a new value. A coordinator of a fresh cluster starts from its
    /// clock; one that knows the cluster's time (adopted in Phase 1, or observed)
    /// continues from it without a jump. From then on it advances as the clock does,
    /// at most `time_step_max_ms` from one value to the next, and never goes back.
    fn stamp(&mut self) -> u64 {
        let clock = self.clock_ms;
        self.last_stamp_ms = match self.stamped_clock_ms {
            None if self.last_stamp_ms == 0 => clock,
            None => self.last_stamp_ms,
            Some(prev) => self
                .last_stamp_ms
                .saturating_add(clock.saturating_sub(prev).min(self.cfg.time_step_max_ms)),
        };
        self.stamped_clock_ms = Some(clock);
        self.last_stamp_ms
    }

    /// When [`Coordinator::on_tick`] may next act (see [`TickDue`]): a retransmission,
    /// a suspected acceptor, the pacer's interval, a heartbeat, or anything `flush`
    /// holds for a tick (a batch, a skip, an idle value, an announcement, Phase 1 for
    /// the next range).
    pub fn tick_due(&self) -> TickDue {
        let rt = self.cfg.retransmit_ticks;
        let mut due = TickDue::NEVER.tick(
            self.last_heartbeat_tick
                .saturating_add(self.cfg.heartbeat_ticks),
        );
        if let Some(p) = &self.phase1 {
            due = due.tick(p.sent_at_tick.saturating_add(rt));
        }
        if self.membership.protocol == Protocol::RingPaxos {
            if self.live_mask() != self.ring_mask {
                return TickDue::NEXT;
            }
            // An acceptor heard at tick t is suspected from tick t + suspect_ticks + 1.
            for &t in &self.heard_tick {
                let suspected_at = t.saturating_add(self.cfg.suspect_ticks).saturating_add(1);
                if suspected_at > self.now_tick {
                    due = due.tick(suspected_at);
                }
            }
        }
        for f in self.in_flight.values() {
            due = due.tick(f.sent_at_tick.saturating_add(rt));
        }
        if let Some(p) = &self.pacer {
            if self.next_instance < self.prepared_up_to {
                due = due.min(p.due());
            }
        }
        if !self.unannounced.is_empty() {
            return TickDue::NEXT;
        }
        let room = self.in_flight.len() < self.cfg.window_instances_max
            && self.next_instance < self.prepared_up_to;
        if room
            && (!self.forced.is_empty()
                || !self.pending.is_empty()
                || self.skip_due > 0
                || self.demand_skip_due())
        {
            return TickDue::NEXT;
        }
        if self.phase1_ahead_due() {
            return TickDue::NEXT;
        }
        if let Some(at) = self.idle_value_at() {
            due = due.clock(at);
        }
        due
    }

    pub fn on_tick(&mut self, now_tick: u64, out: &mut Outbox) {
        self.now_tick = now_tick;
        // Retransmit whatever has waited too long: a lost Phase 1A/1B or 2A/2B.
        if let Some(p) = &mut self.phase1 {
            if now_tick.saturating_sub(p.sent_at_tick) >= self.cfg.retransmit_ticks {
                p.sent_at_tick = now_tick;
                self.stats.retransmits += 1;
                let msg = Msg::Phase1A {
                    ballot: self.ballot,
                    from: p.from,
                    to: p.to,
                };
                let acceptors = self.membership.acceptors.clone();
                send_all(out, &acceptors, msg);
            }
        }
        let mut resend_all = false;
        if self.membership.protocol == Protocol::RingPaxos {
            let mask = self.live_mask();
            if mask != self.ring_mask {
                // Lay out a new ring (without the acceptors we suspect, or with those
                // that came back) and send what is in flight around it at once.
                self.ring_mask = mask;
                resend_all = true;
            }
        }
        let stale: Vec<Instance> = self
            .in_flight
            .iter()
            .filter(|(_, f)| {
                resend_all || now_tick.saturating_sub(f.sent_at_tick) >= self.cfg.retransmit_ticks
            })
            .map(|(&i, _)| i)
            .collect();
        for i in stale {
            self.stats.retransmits += 1;
            let f = self.in_flight.get_mut(&i).unwrap();
            f.sent_at_tick = now_tick;
            f.votes = 0;
            let value = f.value.clone();
            self.send_phase2a(i, value, out);
        }
        // Multi-Ring Paxos: an interval that fell short of λ·Δ is made up with a skip.
        // Only a leader whose Phase 1 covers the next instance paces its ring; one still
        // preparing restarts its interval instead of catching up on the time it missed.
        if let Some(p) = &mut self.pacer {
            if self.next_instance < self.prepared_up_to {
                if let Some(n) = p.on_tick(self.clock_ms) {
                    self.skip_due += n;
                }
            } else {
                p.reset();
            }
        }
        if now_tick.saturating_sub(self.last_heartbeat_tick) >= self.cfg.heartbeat_ticks {
            self.last_heartbeat_tick = now_tick;
            let mut to = self.membership.learners.clone();
            to.extend(self.membership.acceptors.iter().filter(|&&a| a != self.id));
            // Standalone batchers learn who leads from these alone.
            to.extend(self.membership.standalone_batchers());
            send_all(
                out,
                &to,
                Msg::Heartbeat {
                    ballot: self.ballot,
                    decided_up_to: self.decided_up_to(),
                },
            );
        }
        self.flush(out);
    }

    fn fresh_vid(&mut self) -> Vid {
        self.next_vid_seq += 1;
        Vid {
            ballot: self.ballot,
            seq: self.next_vid_seq,
        }
    }

    /// Propose whatever the window, Phase 1 and the batching policy allow; announce
    /// decisions that found no Phase 2A to ride on.
    fn flush(&mut self, out: &mut Outbox) {
        loop {
            if self.in_flight.len() >= self.cfg.window_instances_max {
                break;
            }
            if self.next_instance >= self.prepared_up_to {
                break;
            }
            let value = if let Some(v) = self.forced.remove(&self.next_instance) {
                v
            } else if self.batch_ready() {
                let v = self.take_batch();
                Arc::new(v)
            } else if self.idle_value_due() {
                // Nothing to order for a while: a value without commands moves ordered
                // time (a lease must expire in an idle cluster too).
                let vid = self.fresh_vid();
                let time_ms = self.stamp();
                self.stats.idle_values += 1;
                Arc::new(self.canonical(Value::new(vid, Vec::new()).at(time_ms)))
            } else if self.skip_due > 0 || self.demand_skip_due() {
                // The ring's logical position is to be where λ says at this clock: a
                // skip names that position, so a ring that fell behind (an outage, a
                // slow clock) catches up at once instead of lagging for good. A skip
                // learners asked for goes at least where they asked.
                let n = std::mem::take(&mut self.skip_due);
                let lambda = self.pacer.as_ref().map_or(0, |p| p.config().lambda_per_s);
                let paced = lambda.saturating_mul(self.clock_ms) / 1000;
                let asked = if self.demand_skip_due() {
                    std::mem::take(&mut self.skip_asked)
                } else {
                    0
                };
                let to = paced.max(asked);
                if to <= self.logical_proposed {
                    // The ring is there already (a skip asked for went further).
                    continue;
                }
                if asked > 0 {
                    self.demand_skip_at = Some(self.next_instance);
                    self.stats.skips_on_demand += 1;
                }
                let vid = self.fresh_vid();
                let time_ms = self.stamp();
                self.stats.skips_proposed += 1;
                self.stats.logical_skipped =
                    self.stats.logical_skipped.saturating_add(if asked > 0 {
                        to - self.logical_proposed
                    } else {
                        n
                    });
                Arc::new(Value::skip(vid, to).at(time_ms))
            } else {
                break;
            };
            // A skip makes up for the interval before; it does not count in this one.
            if let (Some(p), 0) = (&mut self.pacer, value.skip) {
                p.on_proposed(1);
            }
            self.logical_proposed = match value.skip {
                0 => self.logical_proposed.saturating_add(1),
                t => self.logical_proposed.max(t),
            };
            let instance = self.next_instance;
            self.next_instance += 1;
            self.stats.values_proposed += 1;
            self.proposed_clock_ms = self.clock_ms;
            if self.cfg.observe {
                let bytes = value.commands.iter().map(command_bytes).sum();
                self.observe(Observation::Proposed {
                    instance,
                    commands: value.commands.len(),
                    bytes,
                });
            }
            self.in_flight.insert(
                instance,
                InFlight {
                    value: value.clone(),
                    votes: 0,
                    sent_at_tick: self.now_tick,
                },
            );
            self.send_phase2a(instance, value, out);
        }
        if self.phase1_ahead_due() {
            self.start_phase1(self.prepared_up_to, out);
        }
        // With the ring decided at an acceptor, decisions the learners already heard of
        // wait up to a tick for a Phase 2A to ride on: the acceptors need them only to
        // serve learners' gaps and to know where a failover starts, and under a steady
        // load (one client included) the next value leaves before the tick, which
        // spares each acceptor a message and a wake-up per instance.
        let hold = self.membership.protocol == Protocol::RingPaxos
            && self.membership.ring_decision == RingDecision::Acceptor
            && self.learners_untold.is_empty()
            && self.now_tick == self.unannounced_since_tick;
        if !self.unannounced.is_empty() && !hold {
            let decided = std::mem::take(&mut self.unannounced);
            // Every acceptor, our own included: acceptors serve decided values to
            // learners, and ours may serve them after we step down.
            let mut to = self.membership.acceptors.clone();
            let untold = std::mem::take(&mut self.learners_untold);
            if untold.len() == decided.len() {
                to.extend(&self.membership.learners);
            } else if !untold.is_empty() {
                let learners = self.membership.learners.clone();
                send_all(out, &learners, Msg::Decide { decided: untold });
            }
            send_all(out, &to, Msg::Decide { decided });
        }
        self.invariants();
    }

    fn batch_ready(&self) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        if self.pending_bytes >= self.cfg.batch_bytes_max {
            return true;
        }
        if let Some(t) = self.last_value_tick {
            if self.now_tick.saturating_sub(t) < self.cfg.value_interval_ticks {
                return false;
            }
        }
        self.in_flight.is_empty()
            || self.now_tick.saturating_sub(self.pending_since_tick) >= self.cfg.batch_delay_ticks
    }

    fn take_batch(&mut self) -> Value {
        let mut commands: Vec<Command> = Vec::new();
        let mut seen = DetHashSet::default();
        let mut bytes = 0;
        while let Some(c) = self.pending.front() {
            let b = command_bytes(c);
            if !commands.is_empty() && bytes + b > self.cfg.batch_bytes_max {
                break;
            }
            bytes += b;
            let mut c = self.pending.pop_front().unwrap();
            if let Some(Queued::Pending(reply_to)) = self.queued.get(&(c.client, c.seq)) {
                c.reply_to = *reply_to;
            }
            // A resubmission of a command already in this value (the client timed out
            // while both copies queued here) is dropped: with state partitioning each
            // partition would execute both copies of a read at one instance, and a
            // client could merge sub-results of two different positions of the order.
            if !seen.insert((c.client, c.seq)) {
                self.stats.duplicates_dropped += 1;
                continue;
            }
            commands.push(c);
        }
        self.pending_bytes -= bytes;
        self.pending_since_tick = self.now_tick;
        self.last_value_tick = Some(self.now_tick);
        let vid = self.fresh_vid();
        for c in &commands {
            self.queued.insert((c.client, c.seq), Queued::In(vid));
        }
        let time_ms = self.stamp();
        self.canonical(Value::new(vid, commands).at(time_ms))
    }

    /// The form in which this coordinator proposes a new value: split into the
    /// partitions' parts under Ring Paxos with state partitioning (each part goes to
    /// its partition's group, which the acceptors also listen to: see
    /// [`Coordinator::send_phase2a`]), whole otherwise. Values that Phase 1 obliges us
    /// to re-propose keep the form they were accepted in.
    fn canonical(&self, value: Value) -> Value {
        if self.membership.protocol == Protocol::RingPaxos && self.membership.is_partitioned() {
            value.split(&self.membership.partitions.map)
        } else {
            value
        }
    }

    /// What each group of learners receives of `value`: all of it for everyone, or,
    /// with state partitioning, each partition's group its sub-commands (paper 001
    /// §III-C: one dissemination group per partition; a command for several partitions
    /// goes once to each). A partition no command addresses still gets the (empty)
    /// value, so that its learners deliver every instance in order without asking.
    ///
    /// Partitioned, learners that are acceptors too are left out: an acceptor keeps
    /// exactly the value chosen (it serves it to learners and reports it in Phase 1),
    /// so such a node takes the whole value, as an acceptor
    /// ([`Coordinator::learner_acceptors`]), and its learner keeps its own part.
    fn for_learners(&self, value: &Arc<Value>) -> Vec<(Vec<NodeId>, Arc<Value>)> {
        if !self.membership.is_partitioned() {
            return vec![(self.membership.learners.clone(), value.clone())];
        }
        let map = self.membership.partitions.map;
        let acceptors = &self.membership.acceptors;
        (0..map.count())
            .map(|p| {
                let part = if value.only_for(&map, p) {
                    value.clone()
                } else {
                    Arc::new(value.project(&map, p))
                };
                let mut learners = self.membership.learners_of(p);
                learners.retain(|l| !acceptors.contains(l));
                (learners, part)
            })
            .filter(|(l, _)| !l.is_empty())
            .collect()
    }

    /// Partitioned: the learners that are acceptors too (they take whole values).
    fn learner_acceptors(&self) -> Vec<NodeId> {
        if !self.membership.is_partitioned() {
            return Vec::new();
        }
        let acceptors = &self.membership.acceptors;
        self.membership
            .learners
            .iter()
            .copied()
            .filter(|l| acceptors.contains(l))
            .collect()
    }

    fn send_phase2a(&mut self, instance: Instance, value: Arc<Value>, out: &mut Outbox) {
        let acceptors: Vec<NodeId> = self.membership.acceptors.clone();
        let msg =
            |value: Arc<Value>, decided: Vec<(Instance, Vid)>, part: Option<Part>| Msg::Phase2A {
                ballot: self.ballot,
                instance,
                value,
                decided,
                ring: self.ring_mask,
                part,
            };
        match self.membership.protocol {
            Protocol::RingPaxos => {
                // The value goes once to acceptors and learners; decisions ride along.
                let decided = std::mem::take(&mut self.unannounced);
                self.learners_untold.clear();
                if !self.membership.is_partitioned() {
                    let mut to = acceptors;
                    to.extend(&self.membership.learners);
                    send_all(out, &to, msg(value, decided, None));
                    return;
                }
                let map = self.membership.partitions.map;
                let count = map.count();
                if value.is_split() && value.parts.len() == count as usize {
                    // Paper 001 §III-C: one dissemination group per partition, which
                    // the acceptors listen to as well. Each part goes once to its
                    // group (one datagram with IP multicast), so the value leaves the
                    // coordinator once; acceptors assemble the parts, learners keep
                    // their own.
                    for p in 0..count {
                        let part = Arc::new(value.part(p).expect("a consistent split value"));
                        let mut to = acceptors.clone();
                        to.extend(self.membership.learners_of(p));
                        let tag = Part { index: p, count };
                        send_all(out, &to, msg(part, decided.clone(), Some(tag)));
                    }
                    return;
                }
                // A value accepted whole (Phase 1 found it so): whole to the acceptors,
                // which must store exactly what was accepted, and its projections to
                // the partitions' learners.
                send_all(out, &acceptors, msg(value.clone(), decided.clone(), None));
                for (learners, part) in self.for_learners(&value) {
                    send_all(out, &learners, msg(part, decided.clone(), None));
                }
            }
            Protocol::MultiPaxos => send_all(out, &acceptors, msg(value, Vec::new(), None)),
        }
    }

    pub fn invariants(&self) {
        assert!(
            self.in_flight.len() <= self.cfg.window_instances_max,
            "window overflow"
        );
        if let Some((&i, _)) = self.in_flight.iter().next_back() {
            assert!(
                i < self.prepared_up_to,
                "proposed in instance {i} before Phase 1 covered it"
            );
            assert!(i < self.next_instance);
        }
        for (i, f) in &self.in_flight {
            assert!(
                (f.votes.count_ones() as usize) < self.membership.majority(),
                "instance {i} has a majority but is not decided"
            );
            assert!(*i >= self.decided_up_to);
        }
        assert!(self.decided_up_to <= self.next_instance);
        assert!(self.pending.len() <= self.cfg.pending_commands_max);
    }
}

/// Add `lo..hi` to a sorted list of disjoint, merged ranges; false if it was covered
/// already (a duplicate page).
fn cover(ranges: &mut Vec<(Instance, Instance)>, lo: Instance, hi: Instance) -> bool {
    if ranges.iter().any(|&(a, b)| a <= lo && hi <= b) {
        return false;
    }
    ranges.push((lo, hi));
    ranges.sort_unstable();
    let mut merged: Vec<(Instance, Instance)> = Vec::with_capacity(ranges.len());
    for &(a, b) in ranges.iter() {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    *ranges = merged;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Action;
    use partita_btree::Op;

    fn membership(protocol: Protocol) -> Membership {
        Membership {
            ring_decision: crate::RingDecision::Coordinator,
            protocol,
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

    fn cfg() -> CoordinatorConfig {
        CoordinatorConfig {
            window_instances_max: 2,
            phase1_range_instances: 10,
            ..Default::default()
        }
    }

    fn cmd(seq: u64) -> Command {
        partita_btree::service::command(
            1,
            seq,
            4,
            &Op::Insert {
                key: seq,
                value: seq,
            },
        )
    }

    fn sends(out: &[Action]) -> Vec<(NodeId, &'static str)> {
        out.iter()
            .filter_map(|a| match a {
                Action::Send { to, msg } => Some((*to, msg.kind())),
                _ => None,
            })
            .collect()
    }

    /// Ordered time follows the clock from the first value on, never jumps more than
    /// `time_step_max_ms` between two values (an outage does not count), never goes
    /// back, and a coordinator that observed the cluster's time continues from it.
    #[test]
    fn ordered_time_steps_at_most_the_cap_and_continues_from_what_it_saw() {
        let capped = CoordinatorConfig {
            time_step_max_ms: 25,
            ..cfg()
        };
        let mut c = Coordinator::new(
            3,
            membership(Protocol::RingPaxos),
            capped.clone(),
            Ballot::ZERO,
            1,
        );
        c.set_clock(1_000);
        assert_eq!(c.stamp(), 1_000, "a fresh cluster starts at the clock");
        c.set_clock(1_010);
        assert_eq!(c.stamp(), 1_010);
        c.set_clock(61_010);
        assert_eq!(c.stamp(), 1_035, "a minute of silence counts as 25 ms");
        c.set_clock(61_020);
        assert_eq!(c.stamp(), 1_045, "then the clock again");
        c.set_clock(50_000);
        assert_eq!(c.stamp(), 1_045, "a clock that goes back changes nothing");

        // A new leader whose clock is far ahead continues from the time it saw.
        let mut d = Coordinator::new(3, membership(Protocol::RingPaxos), capped, Ballot::ZERO, 1);
        d.observe_time(1_045);
        d.set_clock(900_000);
        assert_eq!(d.stamp(), 1_045, "no jump to the new leader's clock");
        d.set_clock(900_005);
        assert_eq!(d.stamp(), 1_050);
        // Without a cap (no leases), ordered time is the clock.
        let mut e = Coordinator::new(3, membership(Protocol::RingPaxos), cfg(), Ballot::ZERO, 1);
        e.set_clock(5);
        e.stamp();
        e.set_clock(90_000);
        assert_eq!(e.stamp(), 90_000);
    }

    /// The coordinator's own acceptor (3) promises `from..to`: Phase 1 needs it.
    fn own_promise(c: &mut Coordinator, from: Instance, to: Instance, out: &mut Outbox) {
        let ballot = c.ballot();
        c.on_message(
            3,
            Msg::Phase1B {
                ballot,
                from,
                to,
                accepted: vec![],
                truncated_below: 1,
            },
            out,
        );
    }

    /// A paged promise counts once its pages cover the whole range, in any order;
    /// duplicates and pages outside the range change nothing; values of every page
    /// are adopted.
    #[test]
    fn a_paged_promise_counts_once_its_pages_cover_the_range() {
        let wide = CoordinatorConfig {
            window_instances_max: 16,
            ..cfg()
        };
        let mut c = Coordinator::new(3, membership(Protocol::MultiPaxos), wide, Ballot::ZERO, 1);
        let mut out = Vec::new();
        c.start(&mut out);
        let b = c.ballot();
        let old = |seq| {
            Arc::new(Value::new(
                Vid {
                    ballot: Ballot::new(0, 1),
                    seq,
                },
                vec![cmd(seq)],
            ))
        };
        let page = |from, to, accepted| Msg::Phase1B {
            ballot: b,
            from,
            to,
            accepted,
            truncated_below: 1,
        };
        own_promise(&mut c, 1, 11, &mut out);
        out.clear();
        // Acceptor 1: the second half first, then a page outside the range, then a
        // duplicate: still no majority.
        c.on_message(
            1,
            page(6, 11, vec![(7, Ballot::new(0, 1), old(7))]),
            &mut out,
        );
        c.on_message(1, page(11, 20, vec![]), &mut out);
        c.on_message(1, page(6, 11, vec![]), &mut out);
        assert!(sends(&out).iter().all(|(_, k)| *k != "phase2a"), "{out:?}");
        assert!(c.phase1.is_some());
        // The first half completes the promise: instance 7's value is re-proposed and
        // the gap below it filled.
        c.on_message(1, page(1, 6, vec![]), &mut out);
        assert!(c.prepared_up_to >= 11, "Phase 1 of 1..11 complete");
        let proposed: Vec<(Instance, usize)> = out
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    to: 1,
                    msg:
                        Msg::Phase2A {
                            instance, value, ..
                        },
                } => Some((*instance, value.commands.len())),
                _ => None,
            })
            .collect();
        assert!(proposed.contains(&(7, 1)), "{proposed:?}");
        assert!(
            proposed.iter().any(|&(i, n)| i < 7 && n == 0),
            "no-ops fill the gap"
        );
        assert!(c.drops.0["stale_ballot"] >= 1, "the page outside the range");
    }

    #[test]
    fn cover_merges_ranges_and_spots_duplicates() {
        let mut r = Vec::new();
        assert!(cover(&mut r, 5, 8));
        assert!(cover(&mut r, 1, 3));
        assert!(cover(&mut r, 3, 5));
        assert_eq!(r, vec![(1, 8)]);
        assert!(!cover(&mut r, 2, 6));
        assert!(cover(&mut r, 9, 10));
        assert_eq!(r, vec![(1, 8), (9, 10)]);
    }

    fn prepared(protocol: Protocol) -> Coordinator {
        prepared_with(membership(protocol))
    }

    /// A coordinator of `m` whose Phase 1 for instances 1..11 completed.
    fn prepared_with(m: Membership) -> Coordinator {
        prepared_cfg(m, cfg())
    }

    fn prepared_cfg(m: Membership, cfg: CoordinatorConfig) -> Coordinator {
        let mut c = Coordinator::new(3, m, cfg, Ballot::ZERO, 1);
        let mut out = Vec::new();
        c.start(&mut out);
        let b = c.ballot();
        for a in [1, 3] {
            c.on_message(
                a,
                Msg::Phase1B {
                    ballot: b,
                    from: 1,
                    to: 11,
                    accepted: vec![],
                    truncated_below: 1,
                },
                &mut out,
            );
        }
        c
    }

    #[test]
    fn with_a_value_interval_a_value_that_is_not_full_waits_for_it() {
        for protocol in [Protocol::RingPaxos, Protocol::MultiPaxos] {
            let mut c = prepared_cfg(
                membership(protocol),
                CoordinatorConfig {
                    value_interval_ticks: 5,
                    window_instances_max: 8,
                    ..cfg()
                },
            );
            let mut out = Vec::new();
            c.on_tick(100, &mut out);
            assert!(c.on_command(cmd(1), &mut out));
            assert_eq!(
                c.stats().values_proposed,
                1,
                "the first value leaves at once"
            );
            assert!(c.on_command(cmd(2), &mut out));
            for t in 101..105 {
                c.on_tick(t, &mut out);
                assert_eq!(
                    c.stats().values_proposed,
                    1,
                    "tick {t}: inside the interval"
                );
            }
            c.on_tick(105, &mut out);
            assert_eq!(
                c.stats().values_proposed,
                2,
                "leaves once the interval passed"
            );
            // A full value does not wait for the interval.
            let per_value = cfg().batch_bytes_max / command_bytes(&cmd(3));
            for s in 3..3 + per_value as u64 {
                assert!(c.on_command(cmd(s), &mut out));
            }
            assert_eq!(c.stats().values_proposed, 2, "not full yet");
            assert!(c.on_command(cmd(1000), &mut out));
            assert_eq!(c.stats().values_proposed, 3, "full: proposed at once");
            c.invariants();
        }
    }

    /// Multi-Ring Paxos: an idle leader makes up each interval's shortfall of λ·Δ
    /// logical instances with one skip instance; a busy one proposes no skips; the
    /// skip does not count against the next interval; without the rule, no skips.
    #[test]
    fn an_idle_ring_leader_proposes_skips_at_rate_lambda() {
        let skips = crate::multiring::SkipConfig {
            lambda_per_s: 2_000,
            delta_ms: 5,
        };
        let proposed_skips = |out: &Outbox| -> Vec<u64> {
            out.iter()
                .filter_map(|a| match a {
                    Action::Send {
                        to: 1,
                        msg: Msg::Phase2A { value, .. },
                    } if value.skip > 0 => Some(value.skip),
                    _ => None,
                })
                .collect()
        };
        for protocol in [Protocol::RingPaxos, Protocol::MultiPaxos] {
            let mut c = prepared_cfg(
                membership(protocol),
                CoordinatorConfig {
                    skips: Some(skips.clone()),
                    window_instances_max: 8,
                    ..cfg()
                },
            );
            let mut out = Vec::new();
            let tick = |c: &mut Coordinator, ms: u64, out: &mut Outbox| {
                out.clear();
                c.set_clock(ms);
                c.on_tick(ms, out);
            };
            tick(&mut c, 1_000, &mut out);
            assert!(
                proposed_skips(&out).is_empty(),
                "the first tick starts the interval"
            );
            assert!(c.on_command(cmd(1), &mut out), "proposed at once");
            tick(&mut c, 1_005, &mut out);
            assert_eq!(
                proposed_skips(&out),
                vec![2010],
                "10 expected, 1 value proposed: a skip to λ times the clock"
            );
            let v = out
                .iter()
                .find_map(|a| match a {
                    Action::Send {
                        msg: Msg::Phase2A { value, .. },
                        ..
                    } if value.skip > 0 => Some(value.clone()),
                    _ => None,
                })
                .unwrap();
            assert!(v.is_noop(), "a skip holds no commands");
            tick(&mut c, 1_007, &mut out);
            assert!(proposed_skips(&out).is_empty(), "inside the interval");
            tick(&mut c, 1_010, &mut out);
            assert_eq!(
                proposed_skips(&out),
                vec![2020],
                "an idle interval: a skip again (the last skip does not count)"
            );
            assert_eq!(c.stats().skips_proposed, 2);
            assert_eq!(c.stats().logical_skipped, 19);
            c.invariants();
        }
        // A busy leader (a value per command, 10 in the interval): no skip.
        let mut c = prepared_cfg(
            membership(Protocol::RingPaxos),
            CoordinatorConfig {
                skips: Some(skips.clone()),
                window_instances_max: 64,
                batch_bytes_max: 1,
                batch_delay_ticks: 0,
                ..cfg()
            },
        );
        let mut out = Vec::new();
        c.set_clock(1_000);
        c.on_tick(1_000, &mut out);
        for s in 1..=10 {
            assert!(c.on_command(cmd(s), &mut out));
        }
        assert_eq!(c.stats().values_proposed, 10);
        out.clear();
        c.set_clock(1_005);
        c.on_tick(1_005, &mut out);
        assert!(proposed_skips(&out).is_empty());
        assert_eq!(c.stats().skips_proposed, 0);
        // Without the rule: an idle leader proposes nothing.
        let mut c = prepared_cfg(membership(Protocol::RingPaxos), cfg());
        let mut out = Vec::new();
        for ms in [1_000, 1_005, 1_010, 2_000] {
            c.set_clock(ms);
            c.on_tick(ms, &mut out);
        }
        assert!(proposed_skips(&out).is_empty());
        assert_eq!(c.stats().skips_proposed, 0);
    }

    /// Paper 001 §III-C: each partition's learners get the sub-commands addressed to
    /// their partition (a command for both partitions reaches both, each with its
    /// part), under the same value id. Ring Paxos: the acceptors listen to every
    /// partition's group, so each part goes once to its group (acceptors and that
    /// partition's learners, one identical message) and nothing else leaves; the
    /// coordinator keeps the split value. Multi-Paxos: acceptors get the whole value,
    /// learners their part with the decision.
    #[test]
    fn partitioned_phase2a_sends_each_partition_its_part() {
        for protocol in [Protocol::RingPaxos, Protocol::MultiPaxos] {
            let mut m = membership(protocol);
            m.partitions = partita_types::PartitionLayout {
                map: partita_types::PartitionMap::new(2, 100).unwrap(),
                replicas: vec![vec![4], vec![5]],
            };
            let map = m.partitions.map;
            let mut c = prepared_with(m);
            let b = c.ballot();
            let mut out = Vec::new();
            let q = |min, max| {
                partita_service::envelope::<partita_btree::BPlusTree>(
                    9,
                    1,
                    4,
                    &Op::Query { min, max },
                    &map,
                )
                .unwrap()
            };
            // What partition p receives: its sub-command alone, addressed to it.
            let sub = |p: u32, min, max| {
                let whole = q(min, max);
                Command {
                    body: whole.body.project(p).unwrap(),
                    ..whole
                }
            };
            c.on_command(q(10, 80), &mut out);
            let phase2a: Vec<(NodeId, Arc<Value>, Option<Part>)> = out
                .iter()
                .filter_map(|a| match a {
                    Action::Send {
                        to,
                        msg: Msg::Phase2A { value, part, .. },
                    } => Some((*to, value.clone(), *part)),
                    _ => None,
                })
                .collect();
            let vid = phase2a[0].1.vid;
            let parts = [sub(0, 10, 49), sub(1, 50, 80)];
            match protocol {
                Protocol::RingPaxos => {
                    // Part 0 to acceptors 1, 2, 3 and learner 4; part 1 to the
                    // acceptors and learner 5; in that order, nothing else.
                    let want: Vec<(NodeId, Vec<Command>, Option<Part>)> =
                        [(0, [1, 2, 3, 4]), (1, [1, 2, 3, 5])]
                            .into_iter()
                            .flat_map(|(p, to)| {
                                let parts = &parts;
                                to.into_iter().map(move |n| {
                                    (
                                        n,
                                        vec![parts[p as usize].clone()],
                                        Some(Part { index: p, count: 2 }),
                                    )
                                })
                            })
                            .collect();
                    let got: Vec<(NodeId, Vec<Command>, Option<Part>)> = phase2a
                        .iter()
                        .map(|(to, v, part)| (*to, v.commands.clone(), *part))
                        .collect();
                    assert_eq!(got, want);
                    assert!(phase2a
                        .iter()
                        .all(|(_, v, _)| v.vid == vid && !v.is_split()));
                    // What the acceptors assemble is what the coordinator keeps.
                    let assembled =
                        Value::from_parts(vid, &[(*phase2a[0].1).clone(), (*phase2a[4].1).clone()]);
                    assert_eq!(assembled.parts, vec![1, 1]);
                    assert_eq!(c.in_flight[&1].value.as_ref(), &assembled);
                }
                Protocol::MultiPaxos => {
                    assert_eq!(phase2a.len(), 3, "whole value to each acceptor");
                    assert!(phase2a.iter().all(|(to, v, part)| *to <= 3
                        && v.commands == vec![q(10, 80)]
                        && part.is_none()));
                }
            }
            // Decide it (Multi-Paxos sends learners the value with the decision).
            for a in [1, 2] {
                c.on_message(
                    a,
                    Msg::Phase2B {
                        ballot: b,
                        instance: 1,
                        vid,
                        votes: 1 << (a - 1),
                    },
                    &mut out,
                );
            }
            for (learner, part) in [(4, &parts[0]), (5, &parts[1])] {
                let got: Vec<_> = out
                    .iter()
                    .filter_map(|a| match a {
                        Action::Send {
                            to,
                            msg: Msg::Phase2A { value, .. } | Msg::DecideValue { value, .. },
                        } if *to == learner => Some(value.clone()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(got.len(), 1, "{protocol:?}: learner {learner}: {out:?}");
                assert_eq!(got[0].vid, vid);
                assert_eq!(&got[0].commands, &vec![part.clone()], "{protocol:?}");
            }
        }
    }

    #[test]
    fn phase1_goes_to_every_acceptor_for_a_range() {
        let mut c = Coordinator::new(3, membership(Protocol::RingPaxos), cfg(), Ballot::ZERO, 1);
        let mut out = Vec::new();
        c.start(&mut out);
        let b = Ballot::new(0, 3);
        assert_eq!(c.ballot(), b);
        let expect: Vec<Action> = [1, 2, 3]
            .iter()
            .map(|&to| Action::Send {
                to,
                msg: Msg::Phase1A {
                    ballot: b,
                    from: 1,
                    to: 11,
                },
            })
            .collect();
        assert_eq!(out, expect);
    }

    #[test]
    fn no_proposal_before_phase1_completes() {
        let mut c = Coordinator::new(3, membership(Protocol::RingPaxos), cfg(), Ballot::ZERO, 1);
        let mut out = Vec::new();
        c.start(&mut out);
        out.clear();
        c.on_command(cmd(1), &mut out);
        assert!(out.is_empty(), "{out:?}");
        let b = c.ballot();
        c.on_message(
            1,
            Msg::Phase1B {
                ballot: b,
                from: 1,
                to: 11,
                accepted: vec![],
                truncated_below: 1,
            },
            &mut out,
        );
        assert!(out.is_empty(), "one promise is not a majority: {out:?}");
        c.on_message(
            2,
            Msg::Phase1B {
                ballot: b,
                from: 1,
                to: 11,
                accepted: vec![],
                truncated_below: 1,
            },
            &mut out,
        );
        assert!(
            out.is_empty(),
            "a majority without our own acceptor's promise is not enough: {out:?}"
        );
        own_promise(&mut c, 1, 11, &mut out);
        assert_eq!(
            sends(&out),
            vec![
                (1, "phase2a"),
                (2, "phase2a"),
                (3, "phase2a"),
                (4, "phase2a"),
                (5, "phase2a")
            ]
        );
    }

    #[test]
    fn phase1_adopts_highest_ballot_value_and_fills_gaps() {
        let mut c = Coordinator::new(
            3,
            membership(Protocol::MultiPaxos),
            cfg(),
            Ballot::new(5, 1),
            1,
        );
        let mut out = Vec::new();
        c.start(&mut out);
        let b = c.ballot();
        assert_eq!(b, Ballot::new(5, 3));
        let old = |r: u64, seq: u64| {
            Arc::new(Value {
                vid: Vid {
                    ballot: Ballot::new(r, 1),
                    seq,
                },
                commands: vec![cmd(seq)],
                parts: Vec::new(),
                time_ms: 0,
                skip: 0,
            })
        };
        c.on_message(
            1,
            Msg::Phase1B {
                ballot: b,
                from: 1,
                to: 11,
                accepted: vec![(3, Ballot::new(1, 1), old(1, 1))],
                truncated_below: 1,
            },
            &mut out,
        );
        c.on_message(
            2,
            Msg::Phase1B {
                ballot: b,
                from: 1,
                to: 11,
                accepted: vec![(3, Ballot::new(2, 1), old(2, 2))],
                truncated_below: 1,
            },
            &mut out,
        );
        own_promise(&mut c, 1, 11, &mut out);
        let proposed = proposed(&out);
        // Window of 2: instance 1 (no-op) and 2 (no-op) go first; 3 must carry the value
        // with ballot 2.
        assert_eq!(proposed.len(), 2);
        assert!(
            proposed.iter().all(|p| p.2.is_empty()),
            "gaps are no-ops: {proposed:?}"
        );
        assert_eq!(
            c.forced[&3].vid,
            Vid {
                ballot: Ballot::new(2, 1),
                seq: 2
            }
        );
    }

    /// With `observe`, every value proposed (its size) and every instance decided is
    /// noted for the driver, once; without it, nothing is kept.
    #[test]
    fn observations_note_proposals_and_decisions_only_when_asked() {
        for observe in [true, false] {
            let mut c = prepared_cfg(
                membership(Protocol::RingPaxos),
                CoordinatorConfig { observe, ..cfg() },
            );
            let mut out = Vec::new();
            c.on_command(cmd(1), &mut out);
            let vid = match &out[0] {
                Action::Send {
                    msg: Msg::Phase2A { value, .. },
                    ..
                } => value.vid,
                other => panic!("{other:?}"),
            };
            let b = c.ballot();
            c.on_message(
                3,
                Msg::Phase2B {
                    ballot: b,
                    instance: 1,
                    vid,
                    votes: 0b101,
                },
                &mut out,
            );
            assert_eq!(c.decided_up_to(), 1);
            let mut seen = Vec::new();
            c.drain_observations(&mut seen);
            if observe {
                assert_eq!(
                    seen,
                    vec![
                        Observation::Proposed {
                            instance: 1,
                            commands: 1,
                            bytes: command_bytes(&cmd(1)),
                        },
                        Observation::Decided { instance: 1 },
                    ]
                );
                seen.clear();
                c.drain_observations(&mut seen);
                assert!(seen.is_empty(), "drained once");
            } else {
                assert!(seen.is_empty());
            }
        }
    }

    #[test]
    fn a_ring_decided_at_an_acceptor_is_not_announced_to_the_learners_again() {
        let mut m = membership(Protocol::RingPaxos);
        m.ring_decision = RingDecision::Acceptor;
        let mut c = prepared_with(m);
        let b = c.ballot();
        let mut out = Vec::new();
        let propose = |c: &mut Coordinator, seq: u64, out: &mut Vec<Action>| {
            c.on_command(cmd(seq), out);
            let vid = match &out[0] {
                Action::Send {
                    msg: Msg::Phase2A { value, .. },
                    ..
                } => value.vid,
                other => panic!("{other:?}"),
            };
            out.clear();
            vid
        };
        // The acceptor whose vote completed the majority sends the whole mask (and
        // told the learners): the stand-alone Decide goes to the acceptors only.
        let vid = propose(&mut c, 1, &mut out);
        c.on_message(
            1,
            Msg::Phase2B {
                ballot: b,
                instance: 1,
                vid,
                votes: 0b101,
            },
            &mut out,
        );
        assert_eq!(c.decided_up_to(), 1);
        assert_eq!(sends(&out), vec![], "held for a Phase 2A to ride on");
        // The next value carries it to everyone.
        let vid2 = propose(&mut c, 2, &mut out);
        c.on_message(
            1,
            Msg::Phase2B {
                ballot: b,
                instance: 2,
                vid: vid2,
                votes: 0b101,
            },
            &mut out,
        );
        assert!(out.is_empty());
        // No next value within the tick: a stand-alone Decide to the acceptors only.
        c.on_tick(1, &mut out);
        let decides: Vec<_> = out
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    to,
                    msg: Msg::Decide { decided },
                } => Some((*to, decided.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            decides,
            vec![
                (1, vec![(2, vid2)]),
                (2, vec![(2, vid2)]),
                (3, vec![(2, vid2)])
            ]
        );
        out.clear();
        // A majority assembled here from partial masks (rings laid out anew while
        // the instance was in flight): nobody told the learners, so we do.
        let vid = propose(&mut c, 3, &mut out);
        for votes in [0b100, 0b010] {
            c.on_message(
                1,
                Msg::Phase2B {
                    ballot: b,
                    instance: 3,
                    vid,
                    votes,
                },
                &mut out,
            );
        }
        assert_eq!(c.decided_up_to(), 3);
        assert_eq!(
            sends(&out),
            vec![
                (1, "decide"),
                (2, "decide"),
                (3, "decide"),
                (4, "decide"),
                (5, "decide")
            ]
        );
    }

    #[test]
    fn ring_decides_on_majority_mask_and_piggybacks_decision() {
        let mut c = prepared(Protocol::RingPaxos);
        let mut out = Vec::new();
        c.on_command(cmd(1), &mut out);
        let vid = match &out[0] {
            Action::Send {
                msg: Msg::Phase2A { value, .. },
                ..
            } => value.vid,
            other => panic!("{other:?}"),
        };
        out.clear();
        let b = c.ballot();
        c.on_message(
            3,
            Msg::Phase2B {
                ballot: b,
                instance: 1,
                vid,
                votes: 0b100,
            },
            &mut out,
        );
        assert!(out.is_empty(), "one vote is not a majority");
        c.on_message(
            3,
            Msg::Phase2B {
                ballot: b,
                instance: 1,
                vid,
                votes: 0b101,
            },
            &mut out,
        );
        assert_eq!(c.decided_up_to(), 1);
        // Nothing to carry the decision: a small Decide goes to the acceptors (its own
        // too) and the learners.
        assert_eq!(
            sends(&out),
            vec![
                (1, "decide"),
                (2, "decide"),
                (3, "decide"),
                (4, "decide"),
                (5, "decide")
            ]
        );
        out.clear();
        // Now a command waits (batch delay) while instance 2 is in flight; when 2 is
        // decided, the waiting batch leaves at once and carries the decision.
        c.on_command(cmd(2), &mut out);
        let vid2 = match &out[0] {
            Action::Send {
                msg: Msg::Phase2A {
                    value, instance: 2, ..
                },
                ..
            } => value.vid,
            other => panic!("{other:?}"),
        };
        c.on_command(cmd(3), &mut out);
        out.clear();
        c.on_message(
            3,
            Msg::Phase2B {
                ballot: b,
                instance: 2,
                vid: vid2,
                votes: 0b011,
            },
            &mut out,
        );
        assert_eq!(
            sends(&out),
            vec![
                (1, "phase2a"),
                (2, "phase2a"),
                (3, "phase2a"),
                (4, "phase2a"),
                (5, "phase2a")
            ]
        );
        match &out[0] {
            Action::Send {
                msg:
                    Msg::Phase2A {
                        decided,
                        instance: 3,
                        ..
                    },
                ..
            } => assert_eq!(decided, &vec![(2, vid2)]),
            other => panic!("{other:?}"),
        }
    }

    /// Skips on demand: a learner's request pulls the pacer's next skip forward
    /// (proposed at once, to λ times (the clock + Δ)); one such skip at a time (a
    /// request meanwhile rides on the next, once the first is decided); a request for
    /// where the ring already stands proposes nothing; one past λ times (the clock +
    /// Δ) is capped there; without the skip rule (not a ring of Multi-Ring
    /// Paxos) a request is dropped.
    #[test]
    fn a_skip_request_pulls_the_pacing_skip_forward_one_at_a_time() {
        let skips = crate::multiring::SkipConfig {
            lambda_per_s: 2_000,
            delta_ms: 5,
        };
        let skips_in = |out: &Outbox| -> Vec<(Instance, u64, Vid)> {
            phase2a_to_1(out)
                .into_iter()
                .filter(|(_, v)| v.skip > 0)
                .map(|(i, v)| (i, v.skip, v.vid))
                .collect()
        };
        let mut c = prepared_cfg(
            membership(Protocol::MultiPaxos),
            CoordinatorConfig {
                skips: Some(skips),
                window_instances_max: 8,
                ..cfg()
            },
        );
        let mut out = Vec::new();
        let decide = |c: &mut Coordinator, s: (Instance, u64, Vid), out: &mut Outbox| {
            let b = c.ballot();
            for (from, votes) in [(1, 0b001), (2, 0b010)] {
                c.on_message(
                    from,
                    Msg::Phase2B {
                        ballot: b,
                        instance: s.0,
                        vid: s.2,
                        votes,
                    },
                    out,
                );
            }
        };
        c.set_clock(1_000);
        c.on_tick(1_000, &mut out);
        out.clear();
        c.on_message(4, Msg::SkipRequest { to: 1_500 }, &mut out);
        let first = skips_in(&out);
        assert_eq!(
            first.iter().map(|s| s.1).collect::<Vec<_>>(),
            vec![2_010],
            "at once, to λ times (the clock + Δ)"
        );
        out.clear();
        c.set_clock(1_100);
        c.on_message(5, Msg::SkipRequest { to: 2_100 }, &mut out);
        assert!(skips_in(&out).is_empty(), "one skip on demand in flight");
        // The first is decided: the waiting request goes out.
        decide(&mut c, first[0], &mut out);
        let second = skips_in(&out);
        assert_eq!(second.iter().map(|s| s.1).collect::<Vec<_>>(), vec![2_210]);
        decide(&mut c, second[0], &mut out);
        out.clear();
        c.on_message(4, Msg::SkipRequest { to: 2_210 }, &mut out);
        c.on_message(4, Msg::SkipRequest { to: 10 }, &mut out);
        assert!(skips_in(&out).is_empty(), "the ring is there already");
        c.on_message(4, Msg::SkipRequest { to: u64::MAX }, &mut out);
        assert!(
            skips_in(&out).is_empty(),
            "capped at λ times (the clock + Δ), where the ring is"
        );
        c.set_clock(1_200);
        c.on_message(4, Msg::SkipRequest { to: u64::MAX }, &mut out);
        assert_eq!(
            skips_in(&out).iter().map(|s| s.1).collect::<Vec<_>>(),
            vec![2_410],
            "no further than λ times (the clock + Δ)"
        );
        assert_eq!(c.stats().skips_on_demand, 3);
        assert_eq!(c.stats().skip_requests_capped, 2);
        c.invariants();
        let mut plain = prepared(Protocol::MultiPaxos);
        out.clear();
        plain.on_message(4, Msg::SkipRequest { to: 5 }, &mut out);
        assert!(skips_in(&out).is_empty(), "no skip rule, no skip");
    }

    #[test]
    fn multipaxos_decision_carries_the_value_to_learners() {
        let mut c = prepared(Protocol::MultiPaxos);
        let mut out = Vec::new();
        c.on_command(cmd(1), &mut out);
        assert_eq!(
            sends(&out),
            vec![(1, "phase2a"), (2, "phase2a"), (3, "phase2a")]
        );
        let vid = match &out[0] {
            Action::Send {
                msg: Msg::Phase2A { value, .. },
                ..
            } => value.vid,
            other => panic!("{other:?}"),
        };
        out.clear();
        let b = c.ballot();
        c.on_message(
            1,
            Msg::Phase2B {
                ballot: b,
                instance: 1,
                vid,
                votes: 0b001,
            },
            &mut out,
        );
        c.on_message(
            2,
            Msg::Phase2B {
                ballot: b,
                instance: 1,
                vid,
                votes: 0b010,
            },
            &mut out,
        );
        assert_eq!(
            sends(&out),
            vec![
                (4, "decidevalue"),
                (5, "decidevalue"),
                (1, "decide"),
                (2, "decide"),
                (3, "decide")
            ]
        );
    }

    #[test]
    fn window_bounds_instances_in_flight() {
        let mut c = prepared(Protocol::MultiPaxos);
        c.cfg.batch_bytes_max = 1; // one command per value
        let mut out = Vec::new();
        for s in 1..=5 {
            c.on_command(cmd(s), &mut out);
        }
        assert_eq!(c.in_flight(), 2);
        assert_eq!(c.pending_commands(), 3);
        c.on_tick(1, &mut out);
        assert_eq!(
            c.in_flight(),
            2,
            "ticks do not open the window, decisions do"
        );
    }

    /// A resubmission queued next to its original is not proposed twice in one value
    /// (with state partitioning, two copies of a read at one instance could give a
    /// client sub-results of two positions of the order).
    #[test]
    fn a_resubmission_queued_with_its_original_is_dropped_from_the_value() {
        let mut c = prepared(Protocol::MultiPaxos);
        let mut out = Vec::new();
        c.on_command(cmd(1), &mut out); // leaves at once: nothing in flight
        out.clear();
        for s in [2, 3, 2, 3, 4] {
            c.on_command(cmd(s), &mut out);
        }
        c.on_tick(10, &mut out); // the batch delay has passed
        let values: Vec<Vec<u64>> = out
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    to: 1,
                    msg: Msg::Phase2A { value, .. },
                } => Some(value.commands.iter().map(|c| c.seq).collect()),
                _ => None,
            })
            .collect();
        assert_eq!(values, vec![vec![2, 3, 4]]);
        assert_eq!(c.stats().duplicates_dropped, 2);
    }

    /// A Phase 2A as acceptor 1 sees it: instance, value id, (seq, reply_to) per command.
    type Proposal = (Instance, Vid, Vec<(u64, NodeId)>);

    /// Every Phase 2A acceptor 1 is sent: instance and value.
    fn phase2a_to_1(out: &[Action]) -> Vec<(Instance, Arc<Value>)> {
        out.iter()
            .filter_map(|a| match a {
                Action::Send {
                    to: 1,
                    msg:
                        Msg::Phase2A {
                            instance, value, ..
                        },
                } => Some((*instance, value.clone())),
                _ => None,
            })
            .collect()
    }

    fn proposed(out: &[Action]) -> Vec<Proposal> {
        phase2a_to_1(out)
            .into_iter()
            .map(|(instance, value)| {
                (
                    instance,
                    value.vid,
                    value.commands.iter().map(|c| (c.seq, c.reply_to)).collect(),
                )
            })
            .collect()
    }

    /// A resubmission whose original is still queued or in flight is not ordered
    /// again (seed 73070: clients whose timeout was below the queueing delay doubled
    /// the load with every round of resubmissions). A queued original takes the
    /// resubmission's reply_to; one in flight for another replica, or one already
    /// decided, is ordered again, so that the client still gets its answer.
    #[test]
    fn resubmissions_of_queued_or_in_flight_commands_are_dropped() {
        let mut c = prepared(Protocol::MultiPaxos);
        c.cfg.window_instances_max = 1;
        let mut out = Vec::new();
        c.on_command(cmd(1), &mut out); // in flight at once
        let p = proposed(&out);
        assert_eq!(p.len(), 1);
        let (i1, vid1, _) = p[0].clone();
        out.clear();
        assert!(
            c.on_command(cmd(1), &mut out),
            "in flight: dropped, not refused"
        );
        c.on_command(cmd(2), &mut out); // queued behind the window
        let mut again = cmd(2);
        again.reply_to = 5; // the client now waits on another replica
        c.on_command(again, &mut out);
        assert!(proposed(&out).is_empty());
        assert_eq!(c.pending_commands(), 1);
        assert_eq!(c.stats().duplicates_dropped, 2);
        let mut other = cmd(1);
        other.reply_to = 5; // in flight, but answered by replica 4 only
        c.on_command(other, &mut out);
        assert_eq!(c.pending_commands(), 2);
        let b = c.ballot();
        c.on_message(
            3,
            Msg::Phase2B {
                ballot: b,
                instance: i1,
                vid: vid1,
                votes: 0b101,
            },
            &mut out,
        );
        assert_eq!(c.decided_up_to(), i1);
        let p = proposed(&out);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].2, vec![(2, 5), (1, 5)]);
        out.clear();
        // Decided: a resubmission of command 1 for replica 4 is ordered again (the
        // replicas answer it from their client table).
        c.on_command(cmd(1), &mut out);
        assert_eq!(c.pending_commands(), 1);
        assert_eq!(c.stats().duplicates_dropped, 2);
    }

    /// opt-PSMR: a replica refused the optimistic copy (its thread may not run it; it
    /// ran nowhere) before this coordinator learned the decision (with the ring
    /// decided at an acceptor, replicas learn first). The conservative resubmission,
    /// same client, sequence number and replica but no thread chosen, is another
    /// command: ordered, not dropped as a copy of the value in flight. A copy of the
    /// optimistic original still is.
    #[test]
    fn a_conservative_resubmission_is_ordered_while_its_original_is_in_flight() {
        let mut c = prepared(Protocol::MultiPaxos);
        let mut out = Vec::new();
        let optimistic = Command {
            route: 0b10,
            ..cmd(1)
        };
        c.on_command(optimistic.clone(), &mut out);
        assert_eq!(proposed(&out).len(), 1);
        assert_eq!(c.in_flight(), 1);
        out.clear();
        c.on_command(optimistic, &mut out);
        assert_eq!(c.stats().duplicates_dropped, 1, "a copy of the original");
        c.on_command(cmd(1), &mut out);
        assert_eq!(c.stats().duplicates_dropped, 1);
        assert_eq!(
            c.pending_commands() + c.in_flight(),
            2,
            "the conservative copy is ordered"
        );
    }

    /// Values lost to a new ballot leave stale entries behind: a resubmission of one
    /// of their commands is ordered again.
    #[test]
    fn a_resubmission_of_a_command_of_a_lost_value_is_ordered() {
        let mut c = prepared(Protocol::MultiPaxos);
        let mut out = Vec::new();
        c.on_command(cmd(1), &mut out);
        assert_eq!(proposed(&out).len(), 1);
        out.clear();
        // Phase 1 ran elsewhere: every instance up to 11 turned out decided.
        c.skip_to(11);
        assert_eq!(c.in_flight(), 0);
        assert_eq!(c.queued.len(), 1, "a stale entry, until swept");
        c.forget_stale_queued();
        assert!(c.queued.is_empty());
        c.on_command(cmd(1), &mut out);
        assert_eq!(c.stats().duplicates_dropped, 0);
        assert_eq!(c.pending_commands() + c.in_flight(), 1);
    }

    #[test]
    fn nack_from_another_leader_deposes() {
        let mut c = prepared(Protocol::MultiPaxos);
        let mut out = Vec::new();
        let b = c.ballot();
        c.on_message(
            1,
            Msg::Nack {
                ballot: b,
                promised: Ballot::new(7, 2),
            },
            &mut out,
        );
        assert_eq!(c.deposed_by(), Some(Ballot::new(7, 2)));
        assert!(out.is_empty(), "a deposed coordinator does not duel");
    }

    #[test]
    fn nack_with_our_own_older_incarnation_restarts_phase1() {
        let mut c = prepared(Protocol::MultiPaxos);
        let mut out = Vec::new();
        let b = c.ballot();
        c.on_message(
            1,
            Msg::Nack {
                ballot: b,
                promised: Ballot::new(7, 3),
            },
            &mut out,
        );
        // 8.3 is the smallest ballot of node 3 above 7.3.
        assert_eq!(c.ballot(), Ballot::new(8, 3));
        assert_eq!(c.deposed_by(), None);
        assert_eq!(
            sends(&out),
            vec![(1, "phase1a"), (2, "phase1a"), (3, "phase1a")]
        );
    }

    #[test]
    fn unanswered_phase2a_is_retransmitted() {
        let mut c = prepared(Protocol::MultiPaxos);
        let mut out = Vec::new();
        c.on_command(cmd(1), &mut out);
        out.clear();
        c.on_tick(cfg().retransmit_ticks, &mut out);
        assert!(sends(&out).contains(&(1, "phase2a")));
        assert_eq!(c.stats().retransmits, 1);
    }

    #[test]
    fn phase1_skips_instances_an_acceptor_truncated() {
        // Truncated inside the range: proposals start at the truncation point.
        let wide = CoordinatorConfig {
            window_instances_max: 16,
            ..cfg()
        };
        let mut c = Coordinator::new(3, membership(Protocol::MultiPaxos), wide, Ballot::ZERO, 1);
        let mut out = Vec::new();
        c.start(&mut out);
        let b = c.ballot();
        for (a, t) in [(1, 1), (2, 6), (3, 1)] {
            c.on_message(
                a,
                Msg::Phase1B {
                    ballot: b,
                    from: 1,
                    to: 11,
                    accepted: vec![],
                    truncated_below: t,
                },
                &mut out,
            );
        }
        assert_eq!(c.decided_up_to(), 5);
        out.clear();
        c.on_command(cmd(1), &mut out);
        let proposed: Vec<Instance> = out
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    to: 1,
                    msg: Msg::Phase2A { instance, .. },
                } => Some(*instance),
                _ => None,
            })
            .collect();
        assert_eq!(proposed, vec![6]);

        // Truncated past the range: Phase 1 again, from the truncation point.
        let wide = CoordinatorConfig {
            window_instances_max: 16,
            ..cfg()
        };
        let mut c = Coordinator::new(3, membership(Protocol::MultiPaxos), wide, Ballot::ZERO, 1);
        let mut out = Vec::new();
        c.start(&mut out);
        out.clear();
        for a in [1, 3] {
            c.on_message(
                a,
                Msg::Phase1B {
                    ballot: b,
                    from: 1,
                    to: 11,
                    accepted: vec![],
                    truncated_below: 40,
                },
                &mut out,
            );
        }
        assert_eq!(
            out[0],
            Action::Send {
                to: 1,
                msg: Msg::Phase1A {
                    ballot: b,
                    from: 40,
                    to: 50
                }
            }
        );
        assert_eq!(c.decided_up_to(), 39);
        assert_eq!(c.stats().instances_skipped, 39);
        c.invariants();
    }

    #[test]
    fn a_truncated_answer_to_phase2a_moves_the_coordinator_on() {
        // Phase 1 found nothing truncated, but the acceptors truncated while the
        // coordinator (re-)proposed: without moving on it would retransmit forever.
        let mut c = prepared(Protocol::MultiPaxos);
        let mut out = Vec::new();
        c.on_command(cmd(1), &mut out);
        c.on_command(cmd(2), &mut out);
        assert_eq!((c.in_flight(), c.pending_commands()), (1, 1));
        out.clear();
        // Instance 1 is in flight; the waiting command goes next, at 5, inside the
        // prepared range (1..11).
        c.on_message(1, Msg::Truncated { below: 5 }, &mut out);
        assert_eq!(c.decided_up_to(), 4);
        assert_eq!(c.in_flight(), 1);
        let proposed: Vec<Instance> = out
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    to: 1,
                    msg: Msg::Phase2A { instance, .. },
                } => Some(*instance),
                _ => None,
            })
            .collect();
        assert_eq!(proposed, vec![5]);
        // Beyond the prepared range: Phase 1 from there, once the Phase 1 already
        // running ahead (11..21) completes.
        out.clear();
        c.on_message(2, Msg::Truncated { below: 30 }, &mut out);
        let b = c.ballot();
        for a in [1, 3] {
            c.on_message(
                a,
                Msg::Phase1B {
                    ballot: b,
                    from: 11,
                    to: 21,
                    accepted: vec![],
                    truncated_below: 1,
                },
                &mut out,
            );
        }
        assert!(out.contains(&Action::Send {
            to: 1,
            msg: Msg::Phase1A {
                ballot: c.ballot(),
                from: 30,
                to: 40
            }
        }));
        // An old answer changes nothing.
        out.clear();
        c.on_message(3, Msg::Truncated { below: 5 }, &mut out);
        assert!(out.is_empty());
        c.invariants();
    }
}
