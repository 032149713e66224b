//! One GeoPaxos+ replica (paper 004 §II-B, §III-A, Algorithm 1 lines 3–16) as a sans-IO
//! core: the geo B+tree, the timestamp merge of the serializers' logs, submission with
//! psite, execution in timestamp order, the delivery decision and resubmission.
//!
//! Replica `r` hosts serializer `r` (one serializer per replica, as in the paper). A
//! client request reaches its nearest replica, which becomes the request's origin
//! (`from`): it computes `dst = psite(op, from)` on its own copy of the tree and asks
//! every serializer in `dst` to order the request ([`GeoAction::Serialize`]; the driver
//! carries it to that serializer's Paxos group, whose leader stamps it with a Lamport
//! hint, [`GeoReplica::hint`]). Every replica learns every serializer's decided log
//! ([`GeoReplica::on_decided`]) and feeds it to its [`TimestampMerge`]; each request the
//! merge releases goes through Algorithm 1's delivery decision on the tree as it is at
//! that point of the order:
//!
//! - **execute**: every replica applies it; only its origin answers the client
//!   ([`GeoAction::Reply`]);
//! - **resubmit**: the serializers that ordered it no longer cover it (a DOP moved a
//!   node's serializers, or an insertion splits a node that psite did not predict):
//!   nobody executes it, and its origin alone submits it again as a new attempt with
//!   the new `dst`. The decision depends only on the tree, the request, `from` and
//!   `dst`, and conflicting requests reach it in the same order everywhere, so every
//!   replica decides alike.
//!
//! A DOP (`Op::Dop`) is ordered by every serializer, so it is a barrier: every replica
//! recomputes the same serializers from the same counters at the same point.
//!
//! Planted bugs ([`GeoBugs`]) for the controls: a DOP ordered by its origin's
//! serializer only, a write ordered by only one of its node's serializers, and the
//! merge's execution before a timestamp is safe.

use crate::gbtree::{Delivery, GbTreeError, GeoBTree, Op, Reply};
use crate::set::{Config, Replica};
use partita_consensus::geopaxos::{
    Entry, MergeBugs, MergeError, SerializerId, SerializerSet, TimestampMerge,
};
use serde::{Deserialize, Serialize};

/// A request's identity across attempts: its origin, the origin's incarnation (how
/// many times it restarted: a restarted origin numbers its requests from 0 again), the
/// origin's sequence number and the attempt (a resubmission is a new operation to the
/// merge).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId {
    pub from: u16,
    pub incarnation: u32,
    pub seq: u64,
    pub attempt: u32,
}

/// What a serializer orders: the request and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeoValue {
    pub op: Op,
    /// The client's request id at the origin (echoed in the reply).
    pub request: u64,
}

/// What a replica asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GeoAction {
    /// Have serializer `serializer` order `op` (destined to `dst`).
    Serialize {
        serializer: SerializerId,
        op: OpId,
        dst: SerializerSet,
        value: GeoValue,
    },
    /// Answer the client's request `request` (only at the origin).
    Reply { request: u64, reply: Reply },
    /// The request was refused (a value longer than the tree takes).
    Refused { request: u64, reason: String },
}

/// Planted bugs (tests and the simulator only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GeoBugs {
    /// A DOP ordered by its origin's serializer only, not with everything.
    pub dop_not_ordered_with_everything: bool,
    /// UPDATE and INSERT ordered by one serializer of the node, not all of them.
    pub write_ordered_by_one_serializer: bool,
    /// The merge executes before a timestamp is safe.
    pub execute_before_safe: bool,
}

/// Counters of a replica.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeoStats {
    pub submitted: u64,
    pub executed: u64,
    pub executed_multi: u64,
    /// Requests this replica re-serialized (it was their origin).
    pub resubmitted: u64,
    /// Resubmission decisions seen for any origin (equal at every replica).
    pub resubmit_decisions: u64,
    pub dops: u64,
    /// Requests the tree refused at execution (a value too large), answered as such.
    pub refused: u64,
    /// Writes not executed because a copy with the same request id ran before
    /// ([`GeoReplica::with_dedup`]): answered from the first copy's reply.
    pub deduplicated: u64,
    /// Decided operations that name an origin outside the topology (no correct
    /// replica sends one): skipped, identically at every replica.
    pub malformed: u64,
}

/// How many executed writes a replica remembers for deduplication
/// ([`GeoReplica::with_dedup`]), oldest forgotten first.
pub const DEDUP_WRITES_MAX: usize = 100_000;

fn to_set(c: Config) -> SerializerSet {
    SerializerSet(c.mask())
}

fn to_config(s: SerializerSet) -> Config {
    Config::from_mask(s.0).expect("a non-empty set of known serializers")
}

/// One replica of GeoPaxos+ (see the module documentation).
#[derive(Debug)]
pub struct GeoReplica {
    me: Replica,
    incarnation: u32,
    tree: GeoBTree,
    merge: TimestampMerge<OpId, GeoValue>,
    next_seq: u64,
    bugs: GeoBugs,
    stats: GeoStats,
    /// With [`GeoReplica::with_dedup`]: the replies of the last
    /// [`DEDUP_WRITES_MAX`] writes executed, by request id, and their order.
    dedup: Option<(
        std::collections::BTreeMap<u64, Reply>,
        std::collections::VecDeque<u64>,
    )>,
}

impl GeoReplica {
    /// Replica `me` over `tree` (every replica must start from the same tree).
    pub fn new(me: Replica, tree: GeoBTree) -> Result<GeoReplica, MergeError> {
        assert!(me < tree.n(), "replica {me} of {}", tree.n());
        let merge = TimestampMerge::new(tree.n())?;
        Ok(GeoReplica {
            me,
            incarnation: 0,
            tree,
            merge,
            next_seq: 0,
            bugs: GeoBugs::default(),
            stats: GeoStats::default(),
            dedup: None,
        })
    }

    /// This replica's incarnation: a replica that restarts (and rebuilds its tree by
    /// learning every serializer's log again) takes one more than before, so that its
    /// new requests are not taken for its old ones. While it relearns, it answers no
    /// request and resubmits none of an earlier incarnation: their clients gave up
    /// when it crashed.
    pub fn with_incarnation(mut self, incarnation: u32) -> GeoReplica {
        self.incarnation = incarnation;
        self
    }

    /// Exactly-once writes for clients that resubmit a request, possibly through
    /// another replica: `request` ids are then global (the same id for every copy of
    /// one client request, distinct between requests), and a write (UPDATE, INSERT)
    /// whose id already ran is not executed again; its origin answers with the first
    /// copy's reply. Every copy of a write is ordered by the serializers of the node
    /// it writes (or it is resubmitted), so copies reach this decision in the same
    /// order at every replica and every replica decides alike. Reads are not
    /// remembered: running one twice changes nothing. The last
    /// [`DEDUP_WRITES_MAX`] writes are remembered; a copy delayed past that many
    /// later writes would run again. The window is counted in execution order, which
    /// differs between replicas for writes that share no serializer: a copy arriving
    /// just at its edge could run at one replica and not at another (not seen; the
    /// merge's own window of duplicate entries is a stretch of each log for that
    /// reason, but copies of a write may share no log once a DOP moved its node).
    pub fn with_dedup(mut self) -> GeoReplica {
        self.dedup = Some(Default::default());
        self
    }

    /// Plants bugs (tests and the simulator only).
    pub fn with_bugs(mut self, bugs: GeoBugs) -> GeoReplica {
        self.bugs = bugs;
        self.merge = self.merge.with_bugs(MergeBugs {
            execute_before_safe: bugs.execute_before_safe,
            ..MergeBugs::default()
        });
        self
    }

    pub fn me(&self) -> Replica {
        self.me
    }

    pub fn tree(&self) -> &GeoBTree {
        &self.tree
    }

    pub fn merge(&self) -> &TimestampMerge<OpId, GeoValue> {
        &self.merge
    }

    pub fn stats(&self) -> &GeoStats {
        &self.stats
    }

    /// The hint this replica's serializer leader gives the next entry it proposes: its
    /// Lamport clock after everything it has learned.
    pub fn hint(&self) -> u64 {
        self.merge.clock() + 1
    }

    /// psite, with the planted bugs.
    fn psite(&self, op: &Op, from: Replica) -> Config {
        let dst = self.tree.psite(op, from);
        if matches!(op, Op::Dop) && self.bugs.dop_not_ordered_with_everything {
            return Config::single(from);
        }
        if op.is_write() && self.bugs.write_ordered_by_one_serializer {
            let mine = Config::single(from);
            if mine.is_subset_of(dst) {
                return mine;
            }
            return dst.iter().next().map(Config::single).unwrap_or(dst);
        }
        dst
    }

    /// A client's request at this replica (its origin): ask the serializers psite
    /// names to order it. A value longer than the tree takes is refused here, before
    /// anything is ordered.
    pub fn submit(
        &mut self,
        request: u64,
        op: Op,
        out: &mut Vec<GeoAction>,
    ) -> Result<(), GbTreeError> {
        if let Op::Update { value, .. } | Op::Insert { value, .. } = &op {
            if value.len() > self.tree.value_bytes_max() {
                return Err(GbTreeError::ValueTooLarge {
                    len: value.len(),
                    max: self.tree.value_bytes_max(),
                });
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.submitted += 1;
        let id = OpId {
            from: self.me as u16,
            incarnation: self.incarnation,
            seq,
            attempt: 0,
        };
        let dst = self.psite(&op, self.me);
        Self::serialize(id, dst, GeoValue { op, request }, out);
        Ok(())
    }

    fn serialize(id: OpId, dst: Config, value: GeoValue, out: &mut Vec<GeoAction>) {
        let set = to_set(dst);
        for g in set.iter() {
            out.push(GeoAction::Serialize {
                serializer: g,
                op: id,
                dst: set,
                value: value.clone(),
            });
        }
    }

    /// Serializer `g`'s decided entry at `position` (in log order per serializer):
    /// execute whatever the merge releases.
    pub fn on_decided(
        &mut self,
        g: SerializerId,
        position: u64,
        entry: Entry<OpId, GeoValue>,
        out: &mut Vec<GeoAction>,
    ) -> Result<(), MergeError> {
        self.merge.on_entry(g, position, entry)?;
        while let Some(ready) = self.merge.pop_ready() {
            let from = ready.op.from as Replica;
            if from >= self.tree.n() {
                // Nothing to execute it for: the tree's placement and the answer both
                // need its origin (fuzzing finding 1: this panicked every replica).
                self.stats.malformed += 1;
                continue;
            }
            // Only the incarnation that took the request answers or resubmits it.
            let mine = from == self.me && ready.op.incarnation == self.incarnation;
            let dst = to_config(ready.dst);
            let op = &ready.value.op;
            if op.is_write() {
                if let Some(reply) = self
                    .dedup
                    .as_ref()
                    .and_then(|(done, _)| done.get(&ready.value.request))
                {
                    self.stats.deduplicated += 1;
                    if mine {
                        out.push(GeoAction::Reply {
                            request: ready.value.request,
                            reply: reply.clone(),
                        });
                    }
                    continue;
                }
            }
            // A DOP ordered by fewer than all (the planted bug) still executes.
            let delivery = if matches!(op, Op::Dop) {
                self.stats.dops += 1;
                self.tree.execute(op, from).map(Delivery::Executed)
            } else if op.is_write() && self.bugs.write_ordered_by_one_serializer {
                self.tree.execute(op, from).map(Delivery::Executed)
            } else {
                self.tree.deliver(op, from, dst)
            };
            match delivery {
                Ok(Delivery::Executed(reply)) => {
                    self.stats.executed += 1;
                    if op.is_write() {
                        if let Some((done, order)) = self.dedup.as_mut() {
                            done.insert(ready.value.request, reply.clone());
                            order.push_back(ready.value.request);
                            if order.len() > DEDUP_WRITES_MAX {
                                let old = order.pop_front().expect("not empty");
                                done.remove(&old);
                            }
                        }
                    }
                    if ready.dst.len() > 1 {
                        self.stats.executed_multi += 1;
                    }
                    if mine {
                        out.push(GeoAction::Reply {
                            request: ready.value.request,
                            reply,
                        });
                    }
                }
                Ok(Delivery::Resubmit(again)) => {
                    self.stats.resubmit_decisions += 1;
                    if mine {
                        self.stats.resubmitted += 1;
                        let id = OpId {
                            attempt: ready.op.attempt + 1,
                            ..ready.op
                        };
                        Self::serialize(id, again, ready.value.clone(), out);
                    }
                }
                Err(e) => {
                    // Refused identically everywhere (it depends on the request only;
                    // `submit` refuses what it can see before ordering).
                    self.stats.refused += 1;
                    if mine {
                        out.push(GeoAction::Refused {
                            request: ready.value.request,
                            reason: e.to_string(),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The counter serializer `g`'s log must pass for a waiting request: its leader
    /// proposes a clock entry when nothing else is on the way.
    pub fn wanted_clock(&self, g: SerializerId) -> Option<u64> {
        self.merge.wanted_clock(g)
    }

    /// Requests missing from some of their serializers (their origin stopped half-way):
    /// what serializer `g`'s leader should order again, with their `dst`.
    pub fn stalled_for(&self, g: SerializerId) -> Vec<(OpId, SerializerSet, GeoValue)> {
        self.merge
            .stalled()
            .filter(|s| s.missing.contains(g))
            .map(|s| (*s.op, s.dst, s.value.clone()))
            .collect()
    }

    pub fn digest(&self) -> u64 {
        self.tree.digest()
    }

    pub fn invariants(&self) {
        self.tree.invariants();
        self.merge.invariants();
    }
}
