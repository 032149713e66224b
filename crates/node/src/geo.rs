//! GeoPaxos+ behind the atomic-multicast seam (paper 004 §II-B and §III-A): one
//! serializer per replica, each a Multi-Paxos group of its own, every replica a
//! learner of every serializer's log and a [`GeoReplica`] (the geo B+tree, psite, the
//! timestamp merge, the delivery decision and resubmission) above them.
//!
//! - **Serializers.** Serializer `g` is a Multi-Paxos group whose acceptors are the
//!   cluster's acceptors (the cluster file puts them in different regions) and whose
//!   first leader is the `g`-th replica (every replica is an acceptor here, so a
//!   serializer's leader sits with its replica, as in the paper). Every replica learns
//!   every serializer's log. A group's messages travel as [`Msg::OnRing`] with the
//!   serializer's id, as Multi-Ring Paxos's rings do.
//! - **One log for several groups.** A node is an acceptor of every serializer, but has
//!   one write-ahead log: each group's records go to it wrapped in
//!   [`AcceptorRecord::Group`], and the node maps the log's tokens to each group's own
//!   (a group sees its records numbered 1, 2, … as an acceptor alone would). Nothing is
//!   truncated: GeoPaxos+ has no checkpoints here (a group's `TruncateLog` is dropped),
//!   and a restarted replica rebuilds its tree by learning every log from the start.
//! - **Incarnations.** A replica numbers its lives ([`AcceptorRecord::Boot`], durable
//!   before it takes a request): a restarted replica's requests are never taken for
//!   those of its earlier life, which it neither answers nor resubmits.
//! - **Requests.** A client sends paper 001's B+tree commands (`partita_btree::Op`:
//!   read, insert, update, next, prev; values are `u64`s stored as the first 8 bytes of
//!   `value_bytes`-byte values, 100 as in the paper's §VI) to its nearest replica, the
//!   request's origin, which computes psite and asks every serializer in `dst` to
//!   order it (a log entry as a command of that serializer's group). Delete, range
//!   queries and batches are not operations of the geo B+tree: they are answered as
//!   rejected. The leader of a serializer stamps each entry with its Lamport clock
//!   (the hint) before proposing it.
//! - **Sessions.** None: a client's session open is answered at once, and a
//!   client's commands are never refused as expired.
//! - **Exactly once.** Clients resubmit an unanswered request with the same sequence
//!   number, possibly through another replica: the request id every serializer orders
//!   is a hash of (client, sequence number), and replicas deduplicate writes by it
//!   ([`GeoReplica::with_dedup`]).
//! - **Liveness.** A serializer's leader proposes a clock entry when its own merge
//!   says an operation waits on that serializer's frontier
//!   ([`GeoReplica::wanted_clock`]), and orders again an operation missing from its
//!   log that stayed so over two checks ([`GeoReplica::stalled_for`]): its origin
//!   crashed half-way, or the forward to a crashed leader was lost.
//! - **DOPs.** With `dop_interval_ms`, the first replica submits a DOP that often.
//!
//! The node core sees an ordering that delivers nothing (`delivered_up_to` is `None`):
//! execution and replies happen here, and leave through
//! [`AtomicMulticast::take_replies`].

use partita_btree::{BPlusTree, Op as MapOp, OpResult};
use partita_consensus::geopaxos::{Entry, SerializerId};
use partita_consensus::{AcceptorRecord, Action, Membership, Msg, Outbox, PersistToken, Value};
use partita_geo::replica::{GeoAction, GeoBugs, GeoReplica, GeoValue, OpId};
use partita_geo::{Config, GbTreeOptions, GeoBTree, Op, OptimizerOptions, Reply as GeoReply};
use partita_geo::{Topology, CACHE_ENTRIES_DEFAULT};
use partita_service::StateMachine;
use partita_types::{Body, ClientId, Command, FieldError, Instance, NodeId, Refusal, Reply};
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::ordering::{AtomicMulticast, PaxosOrdering};
use crate::{NodeSetup, UnsafeBugs};

/// GeoPaxos+ for a node (cluster file `[ordering] protocol = "geopaxos+"`).
#[derive(Clone, Debug, PartialEq)]
pub struct GeoSetup {
    /// The replicas, ascending: replica `g` hosts serializer `g` and leads it first.
    pub replicas: Vec<NodeId>,
    /// Region name of each replica (in `replicas`' order) and the round-trip times
    /// between them in milliseconds (the cost model's topology).
    pub regions: Vec<String>,
    pub rtt_ms: Vec<Vec<f64>>,
    /// The tree's order (most keys per node).
    pub order: usize,
    /// Keys `0..keys` present at the start (value = key), leaves assigned by key range
    /// to the replicas in order, inner nodes to every replica.
    pub keys: u64,
    /// Bytes of every value (at least 8: the client's `u64` is the first 8).
    pub value_bytes: usize,
    /// A DOP that often (milliseconds of the first replica's clock; 0: never).
    pub dop_interval_ms: u64,
    /// The DOP's optimizer: hot replicas with the LRU cache (the paper's best), or
    /// brute force.
    pub optimizer_brute_force: bool,
    /// Seeds the initial configurations of nodes created by splits.
    pub seed: u64,
    /// How often a serializer's leader looks for stalled operations (ticks).
    pub stall_check_ticks: u64,
    /// How long a leader waits for its clock entry before proposing another (ticks).
    pub clock_retry_ticks: u64,
    /// EPaxos: a barrier (a command ordered with every other) this often while
    /// commands run, in milliseconds: the cuts replicas checkpoint at and the ordered
    /// time sessions expire by.
    pub barrier_interval_ms: u64,
}

impl GeoSetup {
    /// The replicas' topology for the cost model.
    pub fn topology(&self) -> Result<Topology, FieldError> {
        let names: Vec<&str> = self.regions.iter().map(String::as_str).collect();
        let rows: Vec<&[f64]> = self.rtt_ms.iter().map(Vec::as_slice).collect();
        Topology::from_rtt_ms(&names, &rows)
            .map_err(|e| FieldError::new("geopaxos", format!("the replicas' topology: {e}")))
    }

    /// The tree every replica starts from (the same at every replica).
    pub fn initial_tree(&self) -> Result<GeoBTree, FieldError> {
        let bad = |e: partita_geo::GbTreeError| FieldError::new("geopaxos", e.to_string());
        let mut options = GbTreeOptions::new(self.order, self.seed);
        options.value_bytes_max = self.value_bytes;
        options.optimizer = if self.optimizer_brute_force {
            OptimizerOptions::brute_force()
        } else {
            OptimizerOptions::hot_cached(CACHE_ENTRIES_DEFAULT)
        };
        let mut tree = GeoBTree::new(self.topology()?, options).map_err(bad)?;
        for key in 0..self.keys {
            let value = geo_value(key, self.value_bytes);
            tree.execute(&Op::Insert { key, value }, 0).map_err(bad)?;
        }
        if self.keys > 0 {
            // Forget the loading's accesses, then place the data by key range.
            tree.dop();
            let n = self.replicas.len();
            let keys = self.keys;
            tree.initialize_reps(|_, node| {
                if !node.is_leaf() || node.keys().is_empty() {
                    return Config::all(n);
                }
                let first = node.keys()[0];
                let r = ((first as u128 * n as u128) / keys as u128) as usize;
                Config::single(r.min(n - 1))
            });
        }
        Ok(tree)
    }

    /// The genesis of the `geo-btree` service ([`partita_geo::GeoService`]) for this
    /// setup: the same tree [`GeoSetup::initial_tree`] builds, as the commands the
    /// common replica's factory applies before anything is ordered; the planted bug
    /// "write ordered by one serializer" goes with it, so that every replica has it.
    /// ("DOP not ordered with everything" belongs to whoever orders the DOP, and
    /// "execute before safe" to the timestamp merge: neither is the service's.)
    pub fn genesis(&self, bugs: &UnsafeBugs) -> Result<Vec<partita_types::Payload>, FieldError> {
        let g = partita_geo::GeoGenesis {
            topology: self.topology()?,
            order: self.order,
            keys: self.keys,
            value_bytes: self.value_bytes,
            seed: self.seed,
            optimizer: if self.optimizer_brute_force {
                OptimizerOptions::brute_force()
            } else {
                OptimizerOptions::hot_cached(CACHE_ENTRIES_DEFAULT)
            },
            unsafe_write_ordered_by_one_serializer: bugs.geo_write_one_serializer,
        };
        partita_geo::GeoService::genesis(&g).map_err(|e| FieldError::new("geopaxos", e))
    }

    /// The replica (and serializer) that owns key `key` in the initial placement.
    pub fn home_of(&self, key: u64) -> usize {
        let n = self.replicas.len() as u128;
        ((key.min(self.keys.saturating_sub(1)) as u128 * n) / (self.keys.max(1) as u128)) as usize
    }
}

/// A `u64` as a value of the geo tree: its little-endian bytes, then zeros.
pub fn geo_value(v: u64, bytes: usize) -> Vec<u8> {
    let mut b = vec![0u8; bytes.max(8)];
    b[..8].copy_from_slice(&v.to_le_bytes());
    b
}

/// The `u64` a value of the geo tree holds (see [`geo_value`]).
pub fn map_value(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = b.len().min(8);
    w[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(w)
}

/// The request id of a client's command: the same for every copy of it, distinct
/// between commands (a 64-bit mix of the client id and the sequence number).
pub fn request_id(client: ClientId, seq: u64) -> u64 {
    let mut z = client ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A serializer's log entry as its group orders it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LogEntry(Entry<OpId, GeoValue>);

/// Client ids of the commands that carry log entries (never a client's: the high bit).
const ENTRY_CLIENT: u64 = 1 << 63;
const CLOCK_CLIENT: u64 = 3 << 62;

/// DOPs' request ids (no client waits for them).
const DOP_REQUEST: u64 = u64::MAX;

fn entry_command(me: NodeId, entry: &Entry<OpId, GeoValue>, clock_seq: u64) -> Command {
    let (client, seq) = match entry {
        Entry::Op { op, .. } => (
            ENTRY_CLIENT | (u64::from(op.from) << 32) | u64::from(op.incarnation),
            (op.seq << 16) | u64::from(op.attempt & 0xffff),
        ),
        Entry::Clock { .. } => (CLOCK_CLIENT | u64::from(me), clock_seq),
    };
    Command {
        client,
        seq,
        session: 0,
        reply_to: me,
        body: Body::single(partita_types::encode(&LogEntry(entry.clone())).into()),
        route: 0,
    }
}

fn decode_entry(cmd: &Command) -> Option<Entry<OpId, GeoValue>> {
    let Body::Whole { payload, .. } = &cmd.body else {
        return None;
    };
    partita_types::decode::<LogEntry>(payload).ok().map(|e| e.0)
}

/// Planted bugs of GeoPaxos+ by their names in [`UnsafeBugs`].
fn geo_bugs(bugs: &UnsafeBugs) -> GeoBugs {
    GeoBugs {
        dop_not_ordered_with_everything: bugs.geo_dop_not_ordered,
        write_ordered_by_one_serializer: bugs.geo_write_one_serializer,
        execute_before_safe: bugs.geo_execute_before_safe,
    }
}

/// GeoPaxos+: this node's part in every serializer's group, its replica, and the log
/// they share (see the module documentation).
pub struct GeoOrdering {
    id: NodeId,
    /// This replica's serializer.
    me: SerializerId,
    setup: GeoSetup,
    /// Serializer `g`'s group at index `g`.
    groups: Vec<PaxosOrdering>,
    replica: GeoReplica,
    /// Next position of each serializer's log.
    positions: Vec<u64>,
    /// Log tokens handed out, mapped to (group, the group's own token).
    tokens: VecDeque<(PersistToken, u32, PersistToken)>,
    next_token: PersistToken,
    /// The boot record's token while it is not durable (requests wait for it).
    boot_token: Option<PersistToken>,
    /// Requests this node is the origin of: request id → (client, sequence number).
    pending: BTreeMap<u64, (ClientId, u64)>,
    replies: Vec<Reply>,
    /// Entries the group could not take yet (no leader known): retried every tick.
    unsent: Vec<(SerializerId, Command)>,
    /// When this node last proposed a clock entry for each serializer it leads.
    clock_sent: Vec<Option<u64>>,
    clock_seq: u64,
    /// Stalled operations seen at the last check, by serializer.
    stalled_seen: BTreeSet<(SerializerId, OpId)>,
    last_stall_check: u64,
    last_dop_ms: u64,
    dops_submitted: u64,
    tick: u64,
    clock_ms: u64,
    counters: BTreeMap<&'static str, u64>,
}

impl GeoOrdering {
    /// Node `setup.id`'s part in every serializer, its acceptors recovered from
    /// `recovered` (the node's whole log).
    pub fn new(
        setup: &NodeSetup,
        geo: &GeoSetup,
        recovered: Vec<AcceptorRecord>,
        bugs: &UnsafeBugs,
        out: &mut Outbox,
    ) -> Result<GeoOrdering, FieldError> {
        let id = setup.id;
        let me =
            geo.replicas.iter().position(|&r| r == id).ok_or_else(|| {
                FieldError::new("geopaxos", format!("node {id} is not a replica"))
            })?;
        if !setup.acceptor {
            return Err(FieldError::new(
                "geopaxos",
                format!("node {id}: every GeoPaxos replica must be an acceptor"),
            ));
        }
        let n = geo.replicas.len();
        let logged = recovered.len() as PersistToken;
        let mut per_group: Vec<Vec<AcceptorRecord>> = vec![Vec::new(); n];
        let mut incarnation = 0u32;
        for r in recovered {
            match r {
                AcceptorRecord::Group { group, record } if (group as usize) < n => {
                    per_group[group as usize].push(*record)
                }
                AcceptorRecord::Boot { incarnation: i } => incarnation = incarnation.max(i),
                other => {
                    return Err(FieldError::new(
                        "geopaxos",
                        format!(
                            "node {id}'s log holds a record of no serializer of this \
                             cluster ({other:?}): it was written by another configuration"
                        ),
                    ))
                }
            }
        }
        incarnation += 1;
        let tree = geo.initial_tree()?;
        let replica = GeoReplica::new(me, tree)
            .map_err(|e| FieldError::new("geopaxos", e.to_string()))?
            .with_incarnation(incarnation)
            .with_dedup()
            .with_bugs(geo_bugs(bugs));
        let mut o = GeoOrdering {
            id,
            me: me as SerializerId,
            setup: geo.clone(),
            groups: Vec::with_capacity(n),
            replica,
            positions: vec![0; n],
            tokens: VecDeque::new(),
            next_token: logged,
            boot_token: None,
            pending: BTreeMap::new(),
            replies: Vec::new(),
            unsent: Vec::new(),
            clock_sent: vec![None; n],
            clock_seq: u64::from(incarnation) << 32,
            stalled_seen: BTreeSet::new(),
            last_stall_check: 0,
            last_dop_ms: 0,
            dops_submitted: 0,
            tick: 0,
            clock_ms: 0,
            counters: BTreeMap::new(),
        };
        o.next_token += 1;
        o.boot_token = Some(o.next_token);
        out.push(Action::Persist {
            token: o.next_token,
            record: AcceptorRecord::Boot { incarnation },
        });
        for (g, records) in per_group.into_iter().enumerate() {
            let gs = group_setup(setup, geo, g);
            let mut inner = Vec::new();
            let ord = PaxosOrdering::new(&gs, records, 1, bugs, &mut inner);
            o.groups.push(ord);
            o.absorb(g as SerializerId, inner, out);
        }
        Ok(o)
    }

    /// The replica (its tree, merge and counters), for status and tests.
    pub fn replica(&self) -> &GeoReplica {
        &self.replica
    }

    /// Operations executed here.
    pub fn executed(&self) -> u64 {
        let s = self.replica.stats();
        s.executed + s.deduplicated
    }

    /// Serializer `g`'s group at this node.
    pub fn group(&self, g: SerializerId) -> Option<&PaxosOrdering> {
        self.groups.get(g as usize)
    }

    /// Whether nothing is under way here: no operation waits in the merge, no entry
    /// waits for a leader, no request for its answer.
    pub fn quiescent(&self) -> bool {
        self.replica.merge().pending_len() == 0 && self.unsent.is_empty()
    }

    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    fn leads(&self, g: SerializerId) -> bool {
        self.groups[g as usize].coordinator().is_some()
    }

    /// Group `g`'s actions as this node's: messages in the serializer's envelope,
    /// records into the shared log, decided entries into the replica.
    fn absorb(&mut self, g: SerializerId, inner: Outbox, out: &mut Outbox) {
        for a in inner {
            match a {
                Action::Send { to, msg } => out.push(Action::Send {
                    to,
                    msg: Msg::OnRing {
                        ring: u32::from(g),
                        msg: Box::new(msg),
                    },
                }),
                Action::Persist { token, record } => {
                    self.next_token += 1;
                    self.tokens
                        .push_back((self.next_token, u32::from(g), token));
                    out.push(Action::Persist {
                        token: self.next_token,
                        record: AcceptorRecord::Group {
                            group: u32::from(g),
                            record: Box::new(record),
                        },
                    });
                }
                Action::Deliver { value, .. } => self.on_decided(g, &value, out),
                Action::Propose { .. } => self.count("dropped_propose_geo"),
                // One log for every group, and no checkpoints: nothing is dropped.
                Action::TruncateLog { .. } => self.count("geo_truncation_ignored"),
                Action::Cut { .. } | Action::NeedCheckpoint => {
                    unreachable!("a serializer's group delivers a total order")
                }
            }
        }
    }

    /// A decided value of serializer `g`: each entry into the merge, in order.
    fn on_decided(&mut self, g: SerializerId, value: &Value, out: &mut Outbox) {
        for cmd in &value.commands {
            let Some(entry) = decode_entry(cmd) else {
                // The same bytes at every replica: skipped alike everywhere.
                self.count("geo_entries_undecodable");
                continue;
            };
            let position = self.positions[g as usize];
            self.positions[g as usize] += 1;
            let mut acts = Vec::new();
            if let Err(e) = self.replica.on_decided(g, position, entry, &mut acts) {
                panic!("serializer {g}'s log reached the merge out of order: {e}");
            }
            self.clock_sent[g as usize] = None;
            self.geo_actions(acts, out);
        }
    }

    /// What the replica asked for.
    fn geo_actions(&mut self, acts: Vec<GeoAction>, out: &mut Outbox) {
        for a in acts {
            match a {
                GeoAction::Serialize {
                    serializer,
                    op,
                    dst,
                    value,
                } => {
                    let entry = Entry::Op {
                        op,
                        dst,
                        hint: self.replica.hint(),
                        value,
                    };
                    self.order(serializer, &entry, out);
                }
                GeoAction::Reply { request, reply } => {
                    let Some((client, seq)) = self.pending.remove(&request) else {
                        continue;
                    };
                    let result = match to_map_result(reply) {
                        Some(r) => Ok(<BPlusTree as StateMachine>::encode_reply(&r)),
                        None => continue,
                    };
                    self.replies.push(Reply {
                        client,
                        seq,
                        instance: self.executed(),
                        result,
                    });
                }
                GeoAction::Refused { request, reason } => {
                    if let Some((client, seq)) = self.pending.remove(&request) {
                        self.replies.push(Reply {
                            client,
                            seq,
                            instance: self.executed(),
                            result: Err(Refusal::Rejected(reason)),
                        });
                    }
                }
            }
        }
    }

    /// Have serializer `g` order `entry` (built with this node's clock as its hint):
    /// proposed if this node leads `g`, forwarded to the leader otherwise (which
    /// stamps it with its own clock).
    fn order(&mut self, g: SerializerId, entry: &Entry<OpId, GeoValue>, out: &mut Outbox) {
        let cmd = entry_command(self.id, entry, self.clock_seq);
        self.multicast_to(g, cmd, false, out);
    }

    /// Hand `cmd` to serializer `g`'s group; with `restamp`, an entry built earlier
    /// (one that waited for a leader) gets this node's clock first if it leads `g`.
    /// Entries built just now carry that clock already.
    fn multicast_to(&mut self, g: SerializerId, cmd: Command, restamp: bool, out: &mut Outbox) {
        let cmd = if restamp && self.leads(g) {
            self.stamp(cmd)
        } else {
            cmd
        };
        let mut inner = Vec::new();
        match self.groups[g as usize].multicast(cmd.clone(), None, &mut inner) {
            Ok(()) => {}
            Err(_) => {
                self.count("geo_entries_waiting_for_leader");
                if self.unsent.len() < 100_000 {
                    self.unsent.push((g, cmd));
                }
            }
        }
        self.absorb(g, inner, out);
    }

    /// An entry this node is about to propose as its serializer's leader gets the
    /// leader's Lamport clock as its hint (never a smaller one than it carries).
    fn stamp(&self, cmd: Command) -> Command {
        let Some(entry) = decode_entry(&cmd) else {
            return cmd;
        };
        let entry = entry.stamped(self.replica.hint());
        Command {
            body: Body::single(partita_types::encode(&LogEntry(entry)).into()),
            ..cmd
        }
    }

    /// Clock entries, stalled operations and DOPs (see the module doc).
    fn housekeeping(&mut self, out: &mut Outbox) {
        let n = self.groups.len();
        for g in 0..n as SerializerId {
            if !self.leads(g) {
                continue;
            }
            let Some(wanted) = self.replica.wanted_clock(g) else {
                continue;
            };
            let due = self.clock_sent[g as usize]
                .is_none_or(|t| self.tick.saturating_sub(t) >= self.setup.clock_retry_ticks);
            if due {
                self.clock_sent[g as usize] = Some(self.tick);
                self.clock_seq += 1;
                self.count("geo_clock_entries_proposed");
                let entry = Entry::Clock {
                    hint: wanted.max(self.replica.hint()),
                };
                self.order(g, &entry, out);
            }
        }
        if self.tick.saturating_sub(self.last_stall_check) >= self.setup.stall_check_ticks {
            self.last_stall_check = self.tick;
            let mut now = BTreeSet::new();
            for g in 0..n as SerializerId {
                if !self.leads(g) {
                    continue;
                }
                for (op, dst, value) in self.replica.stalled_for(g) {
                    if self.stalled_seen.contains(&(g, op)) {
                        self.count("geo_stalled_reordered");
                        let entry = Entry::Op {
                            op,
                            dst,
                            hint: self.replica.hint(),
                            value,
                        };
                        self.order(g, &entry, out);
                    } else {
                        now.insert((g, op));
                    }
                }
            }
            self.stalled_seen = now;
        }
        if self.setup.dop_interval_ms > 0
            && self.me == 0
            && self.boot_token.is_none()
            && self.clock_ms.saturating_sub(self.last_dop_ms) >= self.setup.dop_interval_ms
        {
            if self.last_dop_ms > 0 {
                self.dops_submitted += 1;
                let mut acts = Vec::new();
                if self.replica.submit(DOP_REQUEST, Op::Dop, &mut acts).is_ok() {
                    self.count("geo_dops_submitted");
                    self.geo_actions(acts, out);
                }
            }
            self.last_dop_ms = self.clock_ms.max(1);
        }
    }
}

/// The client's command as one of the geo B+tree's operations (read, next, prev,
/// update, insert: paper 001's B+tree commands that paper 004's tree has), or why it
/// is not one. GeoPaxos+ and EPaxos take the same commands.
pub(crate) fn decode_geo_command(cmd: &Command) -> Result<MapOp, String> {
    let Body::Whole { payload, .. } = &cmd.body else {
        return Err("this cluster takes whole (unsplit) commands".into());
    };
    let op = <BPlusTree as StateMachine>::decode_command(payload)
        .map_err(|e| format!("not a B+tree command: {e}"))?;
    match op {
        MapOp::Delete { .. } | MapOp::Query { .. } | MapOp::Batch(_) => Err(format!(
            "the geo B+tree (paper 004) has no {}: it takes read, insert, update, next \
             and prev",
            op.name()
        )),
        op => Ok(op),
    }
}

/// The client's command as an operation of the geo tree, or why it is not one.
fn to_geo_op(cmd: &Command, value_bytes: usize) -> Result<Op, String> {
    Ok(match decode_geo_command(cmd)? {
        MapOp::Read { key } => Op::Read { key },
        MapOp::Next { key } => Op::GetNext { key },
        MapOp::Prev { key } => Op::GetPrev { key },
        MapOp::Update { key, value } => Op::Update {
            key,
            value: geo_value(value, value_bytes),
        },
        MapOp::Insert { key, value } => Op::Insert {
            key,
            value: geo_value(value, value_bytes),
        },
        MapOp::Delete { .. } | MapOp::Query { .. } | MapOp::Batch(_) => {
            unreachable!("decode_geo_command refuses them")
        }
    })
}

fn to_map_result(r: GeoReply) -> Option<OpResult> {
    Some(match r {
        GeoReply::Value(v) => OpResult::Value(v.as_deref().map(map_value)),
        GeoReply::Entry(e) => OpResult::Entry(e.map(|(k, v)| (k, map_value(&v)))),
        GeoReply::Old(v) => OpResult::Old(v.as_deref().map(map_value)),
        GeoReply::Inserted(b) => OpResult::Inserted(b),
        GeoReply::Dop(_) => return None,
    })
}

/// Node `setup.id`'s setup within serializer `g`'s group: the cluster's acceptors,
/// replica `g` its first leader, every replica a learner; Multi-Paxos, nothing
/// speculative, no batchers.
fn group_setup(setup: &NodeSetup, geo: &GeoSetup, g: usize) -> NodeSetup {
    let m = &setup.membership;
    NodeSetup {
        membership: Membership {
            ring_decision: Default::default(),
            protocol: partita_consensus::Protocol::MultiPaxos,
            acceptors: m.acceptors.clone(),
            coordinator: geo.replicas[g],
            learners: geo.replicas.clone(),
            partitions: m.partitions.clone(),
            batchers: Vec::new(),
        },
        acceptor: m.acceptors.contains(&setup.id),
        replica: geo.replicas.contains(&setup.id),
        batcher: false,
        speculative: false,
        early_replies: false,
        psmr: None,
        ordering: crate::OrderingSetup::Paxos,
        ..setup.clone()
    }
}

impl AtomicMulticast for GeoOrdering {
    fn multicast(
        &mut self,
        cmd: Command,
        _access: Option<partita_smr::Access>,
        out: &mut Outbox,
    ) -> Result<(), String> {
        if self.boot_token.is_some() {
            return Err(format!("node {} is starting; retry", self.id));
        }
        if cmd.is_open() {
            // No sessions here (nothing expires; writes are deduplicated by request
            // id): an open is answered at once, as of the start.
            self.replies.push(Reply {
                client: cmd.client,
                seq: cmd.seq,
                instance: 1,
                result: Ok(partita_types::session_reply(1)),
            });
            return Ok(());
        }
        let op = match to_geo_op(&cmd, self.setup.value_bytes) {
            Ok(op) => op,
            Err(why) => {
                // Not an operation this service has: answered, never ordered.
                self.count("geo_requests_rejected");
                self.replies.push(Reply {
                    client: cmd.client,
                    seq: cmd.seq,
                    instance: self.executed(),
                    result: Err(Refusal::Rejected(why)),
                });
                return Ok(());
            }
        };
        let request = request_id(cmd.client, cmd.seq);
        let mut acts = Vec::new();
        if let Err(e) = self.replica.submit(request, op, &mut acts) {
            self.replies.push(Reply {
                client: cmd.client,
                seq: cmd.seq,
                instance: self.executed(),
                result: Err(Refusal::Rejected(e.to_string())),
            });
            return Ok(());
        }
        self.pending.insert(request, (cmd.client, cmd.seq));
        self.geo_actions(acts, out);
        Ok(())
    }

    fn on_message(&mut self, from: NodeId, msg: Msg, out: &mut Outbox) -> bool {
        let Msg::OnRing { ring, msg } = msg else {
            self.count("dropped_not_on_a_serializer");
            return false;
        };
        let Some(g) = SerializerId::try_from(ring)
            .ok()
            .filter(|&g| (g as usize) < self.groups.len())
        else {
            self.count("dropped_unknown_serializer");
            return false;
        };
        // The leader stamps what other replicas ask it to order with its clock.
        let msg = match *msg {
            Msg::Forward { cmd } if self.leads(g) => {
                if decode_entry(&cmd).is_none() {
                    self.count("dropped_forward_not_an_entry");
                    return true;
                }
                Msg::Forward {
                    cmd: self.stamp(cmd),
                }
            }
            Msg::ForwardBatch { .. } => {
                self.count("dropped_batch_geo");
                return true;
            }
            m => m,
        };
        let mut inner = Vec::new();
        let handled = self.groups[g as usize].on_message(from, msg, &mut inner);
        self.absorb(g, inner, out);
        handled
    }

    fn on_tick(&mut self, tick: u64, now_ms: u64, out: &mut Outbox) {
        self.tick = tick;
        self.clock_ms = self.clock_ms.max(now_ms);
        for g in 0..self.groups.len() {
            let mut inner = Vec::new();
            self.groups[g].on_tick(tick, now_ms, &mut inner);
            self.absorb(g as SerializerId, inner, out);
        }
        for (g, cmd) in std::mem::take(&mut self.unsent) {
            self.multicast_to(g, cmd, true, out);
        }
        self.housekeeping(out);
    }

    fn on_persisted(&mut self, tokens: &[PersistToken], out: &mut Outbox) {
        let mut per_group: BTreeMap<u32, Vec<PersistToken>> = BTreeMap::new();
        for &t in tokens {
            if self.boot_token == Some(t) {
                self.boot_token = None;
                continue;
            }
            // Completions come in token order, so the map's front is the next one.
            while let Some(&(global, g, inner)) = self.tokens.front() {
                if global > t {
                    break;
                }
                self.tokens.pop_front();
                if global == t {
                    per_group.entry(g).or_default().push(inner);
                }
            }
        }
        for (g, inner_tokens) in per_group {
            let mut inner = Vec::new();
            self.groups[g as usize].on_persisted(&inner_tokens, &mut inner);
            self.absorb(g as SerializerId, inner, out);
        }
    }

    fn delivered_up_to(&self) -> Option<Instance> {
        None
    }

    fn skip_to(&mut self, _next: Instance, _position: &[u8], _out: &mut Outbox) {}

    fn announce_checkpoint(&mut self, _instance: Instance, _position: &[u8], _out: &mut Outbox) {}

    fn leader(&self) -> Option<NodeId> {
        // Clients stay with their nearest replica: no leader to move to.
        None
    }

    fn leads(&self) -> Option<partita_types::Ballot> {
        self.groups.iter().filter_map(|g| g.leads()).max()
    }

    fn conflicting_decisions(&self) -> u64 {
        self.groups.iter().map(|g| g.conflicting_decisions()).sum()
    }

    /// Every serializer's log as a stream (every replica learns every one), and idle
    /// when no operation waits in the merge and no entry for a leader. (Whether the
    /// replicas then executed alike is the convergence check's question.)
    fn report(&self) -> crate::OrderingReport {
        let mut r = crate::OrderingReport {
            idle: self.quiescent(),
            ..Default::default()
        };
        for (g, group) in self.groups.iter().enumerate() {
            let inner = group.report();
            r.acceptor = r.acceptor.or(inner.acceptor);
            r.idle &= inner.idle;
            for mut s in inner.streams {
                s.stream = g as u32;
                r.streams.push(s);
            }
        }
        r
    }

    fn describe(&self) -> String {
        let st = self.replica.stats();
        let mut s = format!(
            "GeoPaxos+: executed {} ({} deduplicated, {} resubmit decisions, {} DOPs), {} waiting in the merge, quiescent {}",
            self.executed(),
            st.deduplicated,
            st.resubmit_decisions,
            st.dops,
            self.replica.merge().pending_len(),
            self.quiescent()
        );
        for (g, group) in self.groups.iter().enumerate() {
            s += &format!("; serializer {g}: {}", group.describe());
        }
        s
    }

    fn add_counters(&self, into: &mut BTreeMap<&'static str, u64>) {
        for (k, v) in &self.counters {
            *into.entry(k).or_default() += v;
        }
        for g in &self.groups {
            g.add_counters(into);
        }
        let s = self.replica.stats();
        for (k, v) in [
            ("geo_submitted", s.submitted),
            ("geo_executed", s.executed),
            ("geo_executed_multi", s.executed_multi),
            ("geo_resubmitted", s.resubmitted),
            ("geo_resubmit_decisions", s.resubmit_decisions),
            ("geo_dops_executed", s.dops),
            ("geo_refused", s.refused),
            ("geo_deduplicated", s.deduplicated),
            ("geo_pending", self.replica.merge().pending_len() as u64),
        ] {
            *into.entry(k).or_default() += v;
        }
    }

    fn take_replies(&mut self, out: &mut Vec<Reply>) {
        out.append(&mut self.replies);
    }

    fn executes(&self) -> Option<crate::ordering::Executed> {
        Some(crate::ordering::Executed {
            executed: self.executed(),
            digest: self.replica.digest(),
            entries: self.replica.tree().len(),
        })
    }

    fn invariants(&self) {
        for g in &self.groups {
            g.invariants();
        }
        assert!(
            self.tokens.iter().all(|&(t, _, _)| t <= self.next_token),
            "log tokens handed out in order"
        );
        assert!(self.replies.is_empty(), "replies left here");
    }

    fn executing_ordering(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_geo::GeoService;

    fn setup(keys: u64, brute_force: bool) -> GeoSetup {
        GeoSetup {
            replicas: vec![1, 2, 3],
            regions: vec!["California".into(), "Europe".into(), "Virginia".into()],
            rtt_ms: vec![
                vec![0.0, 150.0, 70.0],
                vec![150.0, 0.0, 90.0],
                vec![70.0, 90.0, 0.0],
            ],
            order: 4,
            keys,
            value_bytes: 100,
            dop_interval_ms: 0,
            optimizer_brute_force: brute_force,
            seed: 7,
            stall_check_ticks: 40,
            clock_retry_ticks: 10,
            barrier_interval_ms: 100,
        }
    }

    /// The common replica's geo-btree starts from the tree GeoPaxos+ starts from.
    #[test]
    fn the_geo_btree_genesis_is_the_initial_tree() {
        for (keys, brute_force) in [(0, true), (1, false), (100, true), (1000, false)] {
            let s = setup(keys, brute_force);
            let genesis = s.genesis(&UnsafeBugs::default()).unwrap();
            let mut service = GeoService::new();
            for bytes in &genesis {
                let cmd = GeoService::decode_command(bytes).unwrap();
                assert!(GeoService::check(&cmd).is_err(), "no client may send it");
                service.execute(&cmd);
            }
            assert!(service.is_configured());
            assert_eq!(
                service.digest(),
                s.initial_tree().unwrap().digest(),
                "{keys} keys"
            );
            assert!(!service.unsafe_write_ordered_by_one_serializer());
        }
        let bugs = UnsafeBugs {
            geo_write_one_serializer: true,
            ..UnsafeBugs::default()
        };
        let g = setup(10, true).genesis(&bugs).unwrap();
        let cmd = GeoService::decode_command(&g[0]).unwrap();
        let mut service = GeoService::new();
        service.execute(&cmd);
        assert!(service.unsafe_write_ordered_by_one_serializer());
        let mut bad = setup(10, true);
        bad.value_bytes = 2;
        assert!(bad.genesis(&UnsafeBugs::default()).is_err());
    }
}
