//! Multi-Ring Paxos behind the atomic-multicast seam (paper 002 §V-B and its reference
//! [18]): several Ring Paxos rings, each with its own acceptors, coordinator, election
//! and log, and at every replica one deterministic merge of the rings it subscribes to.
//!
//! - **Rings and groups.** The cluster file lists the rings (`[[ordering.ring]]`): each
//!   names its acceptors (no node is an acceptor of two rings: a ring's acceptors, and
//!   their logs, are its own) and the groups it carries. Groups are the partitions of
//!   state partitioning (one group, 0, when the state is not partitioned), or, on
//!   replicas with P-SMR worker threads, the threads' groups (paper 002 §V-B: g_i for
//!   thread i, a ring each, and a ring that carries them all for g_all). A command's
//!   groups are [`Command::multicast_groups`]: its partitions, or the one thread its
//!   client proxy chose (CC-G or OC-G), else g_all.
//! - **Subscriptions.** Every replica learns and merges every ring, and executes only
//!   its partition's part of each command (a command of another partition is skipped).
//!   So every replica delivers one sequence with one numbering: a command for several
//!   partitions runs at the same merged position at each, which is what clients match
//!   sub-replies and session opens by, and what session leases are timed by. The papers'
//!   learners subscribe to their own groups' rings only; here a ring sends each
//!   partition only its part of a value (paper 001's partitioned dissemination), so a
//!   replica receives the other partitions' instances as empty parts, which cost little
//!   but are not nothing.
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
//!   stalls the merge. The merged stream is numbered 1, 2, … (skips deliver nothing);
//!   that number is the instance the replica executes and checkpoints.
//! - **Time.** Replicas expire client sessions by the ordered time of the values they
//!   run. The rings' clocks differ, so a value older than one merged before it runs at
//!   that newer time: the merged stream's time never goes back.
//! - **Checkpoints.** The merge position (and the time) is the ordering's position
//!   ([`AtomicMulticast::position`]), stored in every checkpoint; a replica restored from
//!   one (restart or state transfer) resumes the same merged sequence, and each ring's
//!   acceptors are told the ring instance up to which the checkpoint covers that ring
//!   (they truncate their own logs below what a majority of the ring's learners hold).
//!   A ring learner that finds its ring's log truncated below what it needs asks the
//!   node for a state transfer.
//!
//! - **P-SMR.** Thread i of the paper's replica learns g_i's ring and g_all's and
//!   merges the two round-robin. Here every replica merges every ring and hands the
//!   merged sequence to its threads, each taking its group's commands and g_all's:
//!   the projection of a round-robin merge onto two of its rings is the round-robin
//!   merge of those two, so every thread sees the order the paper's would. What
//!   differs is waiting: a thread's commands wait in the merge for every ring's
//!   position, not only g_all's (skips bound that wait, as for partitions).
//!
//! Not yet (refused by the cluster file's checks): speculative execution and
//! batchers over Multi-Ring Paxos; learners that subscribe to their own groups only.

use partita_consensus::multiring::{MergePosition, RingId, RingItem, RingMerge, SkipConfig};
use partita_consensus::{AcceptorRecord, Action, Membership, Msg, Outbox, PersistToken, Value};
use partita_types::choice::FieldError;
use partita_types::{Command, Instance, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ordering::{AtomicMulticast, OrderingReport, PaxosOrdering, StreamReport};
use crate::{NodeSetup, UnsafeBugs};

/// The stream id of the merged sequence in [`AtomicMulticast::report`] (rings are
/// numbered below it).
pub const MERGED_STREAM: u32 = u32::MAX;

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

    /// The rings a replica merges: every ring (see the module doc: replicas of every
    /// partition merge the same sequence, and execute only their partition's part).
    pub fn subscribed(&self) -> Vec<RingId> {
        self.rings.iter().map(|r| r.id).collect()
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
}

/// Multi-Ring Paxos: this node's part in every ring, and the merge of the rings its
/// replica subscribes to (see the module documentation).
pub struct MultiRingOrdering {
    id: NodeId,
    setup: MultiRingSetup,
    /// Ascending by id, every ring of the cluster.
    rings: Vec<Ring>,
    /// The merge (only at a replica).
    merge: Option<RingMerge<Arc<Value>>>,
    /// Last position of the merged stream delivered.
    delivered: Instance,
    /// The merged stream's time (see the module doc).
    time_ms: u64,
    counters: BTreeMap<&'static str, u64>,
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
        let mut merge = None;
        let mut time_ms = 0;
        if setup.replica {
            let subscribed = rings.subscribed();
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
            delivered: next_deliver - 1,
            time_ms,
            counters: BTreeMap::new(),
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
            let ord = PaxosOrdering::new(&ring_setup, records, next, bugs, &mut inner);
            o.rings.push(Ring {
                spec: spec.clone(),
                ord,
            });
            o.absorb(spec.id, inner, out);
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
                Action::Deliver { instance, value } => {
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

    /// Deliver everything the merge can, numbered on from `delivered`.
    fn pop_merged(&mut self, out: &mut Outbox) {
        let Some(mg) = self.merge.as_mut() else {
            return;
        };
        while let Some((_, _, value)) = mg.pop() {
            // Every replica merges the same values: the merged stream's time is the
            // newest of its values' (rings' clocks differ), the same everywhere.
            let value = if value.time_ms >= self.time_ms {
                self.time_ms = value.time_ms;
                value
            } else {
                let mut v = (*value).clone();
                v.time_ms = self.time_ms;
                Arc::new(v)
            };
            self.delivered += 1;
            out.push(Action::Deliver {
                instance: self.delivered,
                value,
            });
        }
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

/// Node `setup.id`'s setup within one ring: the ring's acceptors and coordinator, every
/// replica a learner, each partition's part of a value to its replicas (a part with no
/// command of theirs still counts as the instance it is in the merge), and acceptors
/// that truncate below what a majority of every partition's replicas checkpointed.
fn ring_setup(setup: &NodeSetup, rings: &MultiRingSetup, spec: &RingSpec) -> NodeSetup {
    let m = &setup.membership;
    let learners: Vec<NodeId> = m.learners.clone();
    let mut coordinator_config = setup.coordinator_config.clone();
    coordinator_config.skips = Some(rings.skips.clone());
    NodeSetup {
        membership: Membership {
            ring_decision: m.ring_decision,
            protocol: m.protocol,
            acceptors: spec.acceptors.clone(),
            coordinator: spec.coordinator,
            learners: learners.clone(),
            partitions: m.partitions.clone(),
            batchers: Vec::new(),
        },
        acceptor: spec.acceptors.contains(&setup.id),
        replica: learners.contains(&setup.id),
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
            || r.ord.setup_learners().contains(&from)
            || matches!(*msg, Msg::Forward { .. } | Msg::ForwardBatch { .. });
        if !member {
            self.count("dropped_ring_not_a_member");
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

    fn on_tick(&mut self, tick: u64, now_ms: u64, out: &mut Outbox) {
        for i in 0..self.rings.len() {
            let mut inner = Vec::new();
            self.rings[i].ord.on_tick(tick, now_ms, &mut inner);
            let ring = self.rings[i].spec.id;
            self.absorb(ring, inner, out);
        }
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

    /// Each ring this node leads (with what it decided: idle rings keep proposing
    /// skips, so learners are rarely at it and are not compared), and the merged
    /// sequence, which every replica must have reached alike. Idle: no ring led here
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
                stream: MERGED_STREAM,
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
                "merge at {:?}, delivered {}",
                m.position(),
                self.delivered
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
