//! GeoPaxos+ behind the atomic-multicast seam (paper 004 §II-B and §III-A): one
//! serializer per replica, each a Multi-Paxos group of its own, every replica a
//! learner of every serializer's log and the timestamp merge of those logs. The
//! ordering only orders: what it delivers, in the merge's order, the node core's
//! replica executes (any service), deciding there whether the serializers that
//! ordered a command still cover it (`StateMachine::misplaced`) and counting the
//! accesses the next DOP places objects from.
//!
//! - **Serializers.** Serializer `g` is a Multi-Paxos group whose acceptors are the
//!   cluster's acceptors (the cluster file puts them in different regions) and whose
//!   first leader is the `g`-th replica (every replica is an acceptor here, so a
//!   serializer's leader sits with its replica, as in the paper). Every replica learns
//!   every serializer's log. A group's messages travel as [`Msg::OnRing`] with the
//!   serializer's id, as Multi-Ring Paxos's rings do.
//! - **Submission.** A client sends its command to its nearest replica, the command's
//!   origin, whose replica names the serializers that must order it (psite, in the
//!   command's `route`, from the placement it holds). The origin asks every one of
//!   them to order an entry of the command (as a command of that serializer's group);
//!   a serializer's leader stamps each entry with its Lamport clock (the hint).
//! - **The merge** (`partita_consensus::geopaxos::TimestampMerge`) releases commands in
//!   final-timestamp order as soon as that is safe; each is delivered to the replica
//!   as a value of its own, numbered 1, 2, … here, with its serializers in `route`.
//!   Commands that share no serializer run in different orders at different replicas
//!   (the point of the protocol): the numbering is the same everywhere only at a cut.
//! - **Cuts, barriers and DOPs.** A command ordered by every serializer is ordered
//!   with every other command, so the set that ran before it is the same at every
//!   replica: a cut ([`Action::Cut`]), where the replica may checkpoint. Session opens
//!   are such commands (the replica routes them to every serializer), so are DOPs (the
//!   first replica submits one every `dop_interval_ms`: `SystemOp::Reconfigure`, which
//!   the replica runs) and barriers (`SystemOp::Barrier`, proposed only when one is
//!   needed, by [`BarrierPolicy`]: a checkpoint interval's worth of commands ran since
//!   the last barrier or DOP, or, when sessions expire, `barrier_interval_ms` passed;
//!   the first replica in line first). A value's time is the newest barrier's or DOP's (both are stamped with
//!   their proposer's clock), the same at every replica.
//! - **Resubmission.** A command whose serializers no longer cover it where it is
//!   delivered is run nowhere; its origin's replica hands it back with new serializers
//!   and it is ordered again as a new operation.
//! - **One log for several groups.** A node is an acceptor of every serializer, but
//!   has one write-ahead log: each group's records go to it wrapped in
//!   [`AcceptorRecord::Group`], and the node maps the log's tokens to each group's own
//!   (a group sees its records numbered 1, 2, … as an acceptor alone would).
//! - **Incarnations.** A replica numbers its lives ([`AcceptorRecord::Boot`], durable
//!   before it takes a request; its checkpoints record it too): a restarted replica's
//!   operations are never taken for those of an earlier life.
//! - **Checkpoints and truncation.** A checkpoint's position holds the merge (every
//!   log's delivered prefix and what waits in it), the groups' instances fed to it,
//!   and, per log, the first entry of every command not run yet. Each serializer's
//!   acceptors are told the prefix of its log whose commands all ran at the cut,
//!   bounded by the prefix that lies wholly below the cut's timestamp (`Settled`):
//!   both are the same at every replica at one cut and grow from cut to cut, so the
//!   replicas' announcements are ordered alike in every log, and each group's
//!   acceptors truncating below what a majority of replicas announced is covered by
//!   one majority's checkpoints in every log at once (spec rules 5 and 13). Bounded
//!   only by what a replica fed, they were not: a replica that learned more of one
//!   log than another that ran further announced more of that log and less of
//!   another, and two logs could be truncated below two different majorities. A
//!   learner that needs what its group's acceptors truncated asks the node core for a
//!   checkpoint ([`Action::NeedCheckpoint`]) that covers it; restoring one restarts
//!   each group's learner at its prefix.
//! - **Liveness.** A serializer's leader proposes a clock entry when the merge says a
//!   command waits on that serializer's frontier, and orders again a command missing
//!   from its log that stayed so over two checks (its origin crashed half-way, or the
//!   forward to a crashed leader was lost).
//!
//! Planted bugs: a DOP ordered by its origin's serializer only
//! (`geo-dop-not-ordered`), the merge executing before a timestamp is safe
//! (`geo-execute-before-safe`), and checkpoints announcing every log up to what the
//! replica fed (`geo-announce-fed`, see `Settled`).

use partita_consensus::geopaxos::{
    Entry, MergeBugs, SerializerId, SerializerSet, Timestamp, TimestampMerge,
};
use partita_consensus::{
    AcceptorRecord, Action, CoordinatorConfig, Membership, Msg, Outbox, PersistToken, TickDue,
    Value, Vid,
};
use partita_geo::{GeoBTree, OptimizerOptions};
use partita_geo::{Placement, Topology, CACHE_ENTRIES_DEFAULT};
use partita_smr::Access;
use partita_types::{Ballot, Body, Command, FieldError, Instance, NodeId, SystemOp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::ordering::{AtomicMulticast, BarrierPolicy, OrderingReport, PaxosOrdering};
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
    /// Keys `0..keys` present at the start (value = key).
    pub keys: u64,
    /// Where objects start (the geo B+tree's nodes, any other service's objects).
    pub placement: Placement,
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
    /// When sessions expire, a barrier (a command ordered with every other) this often
    /// while commands run, in milliseconds, so ordered time moves; barriers for
    /// checkpoints come by the checkpoint interval ([`crate::ordering::BarrierPolicy`]).
    pub barrier_interval_ms: u64,
    /// EPaxos: a replica's own instances uncommitted, at most (`[ordering]
    /// window_instances_max` of EPaxos; see `crate::epaxos`). Unused by GeoPaxos+.
    pub epaxos_window: usize,
}

impl GeoSetup {
    /// The replicas' topology for the cost model.
    pub fn topology(&self) -> Result<Topology, FieldError> {
        let names: Vec<&str> = self.regions.iter().map(String::as_str).collect();
        let rows: Vec<&[f64]> = self.rtt_ms.iter().map(Vec::as_slice).collect();
        Topology::from_rtt_ms(&names, &rows)
            .map_err(|e| FieldError::new("geopaxos", format!("the replicas' topology: {e}")))
    }

    /// The tree every replica starts from (the same at every replica): the genesis's
    /// ([`partita_geo::GeoGenesis::tree`]).
    pub fn initial_tree(&self) -> Result<GeoBTree, FieldError> {
        self.geo_genesis(&UnsafeBugs::default())?
            .tree()
            .map_err(|e| FieldError::new("geopaxos", e.to_string()))
    }

    /// The genesis of the `geo-btree` service ([`partita_geo::GeoService`]) for this
    /// setup, as the commands the common replica's factory applies before anything is
    /// ordered; the planted bug "write ordered by one serializer" goes with it, so
    /// that every replica has it. ("DOP not ordered with everything" belongs to
    /// whoever orders the DOP, and "execute before safe" to the timestamp merge:
    /// neither is the service's.)
    pub fn genesis(&self, bugs: &UnsafeBugs) -> Result<Vec<partita_types::Payload>, FieldError> {
        partita_geo::GeoService::genesis(&self.geo_genesis(bugs)?)
            .map_err(|e| FieldError::new("geopaxos", e))
    }

    fn geo_genesis(&self, bugs: &UnsafeBugs) -> Result<partita_geo::GeoGenesis, FieldError> {
        Ok(partita_geo::GeoGenesis {
            topology: self.topology()?,
            order: self.order,
            keys: self.keys,
            value_bytes: self.value_bytes,
            seed: self.seed,
            optimizer: self.optimizer(),
            placement: self.placement,
            unsafe_write_ordered_by_one_serializer: bugs.geo_write_one_serializer,
        })
    }

    /// The reconfiguration's strategy the cluster file asks for.
    pub fn optimizer(&self) -> OptimizerOptions {
        if self.optimizer_brute_force {
            OptimizerOptions::brute_force()
        } else {
            OptimizerOptions::hot_cached(CACHE_ENTRIES_DEFAULT)
        }
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

/// An operation the serializers order: its origin (replica index), the origin's
/// incarnation and the origin's count. A resubmitted command is a new operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GeoOp {
    pub from: u16,
    pub incarnation: u32,
    pub seq: u64,
}

/// A serializer's log entry as its group orders it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct LogEntry(Entry<GeoOp, Command>);

/// Client ids of the commands that carry log entries inside a serializer's group
/// (never a client's: the high bit).
const ENTRY_CLIENT: u64 = 1 << 63;
const CLOCK_CLIENT: u64 = 3 << 62;

/// Kinds of GeoPaxos+'s system commands (`Command::system`).
const BARRIER_KIND: u8 = 0xB;
const DOP_KIND: u8 = 0xD;

/// Every serializer of `n`.
fn all_of(n: usize) -> SerializerSet {
    SerializerSet::all(n)
}

fn entry_command(me: NodeId, entry: &Entry<GeoOp, Command>, clock_seq: u64) -> Command {
    let (client, seq) = match entry {
        Entry::Op { op, .. } => (
            ENTRY_CLIENT | (u64::from(op.from) << 32) | u64::from(op.incarnation),
            op.seq,
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

fn decode_entry(cmd: &Command) -> Option<Entry<GeoOp, Command>> {
    let Body::Whole { payload, .. } = &cmd.body else {
        return None;
    };
    partita_types::decode::<LogEntry>(payload).ok().map(|e| e.0)
}

/// What a checkpoint records of GeoPaxos+ ([`AtomicMulticast::position`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Position {
    /// The merge: every log's delivered prefix (in entries) and what waits in it.
    merge: TimestampMerge<GeoOp, Command>,
    /// Per serializer: the last instance of its group fed to the merge.
    instances: Vec<Instance>,
    /// Per command not run yet: the instance of its first entry in each log.
    first: BTreeMap<GeoOp, Vec<(SerializerId, Instance)>>,
    /// Per serializer: the prefix of its log settled at the cut (see [`Settled`]).
    settled: Settled,
    time_ms: u64,
    incarnation: u32,
}

/// Per serializer: the prefix of its log that lies wholly below the newest cut's
/// timestamp, and the instances fed since with the log's frontier after each.
///
/// A cut runs only once every log's frontier reached its timestamp `T`, so every
/// replica at that cut has fed, in every log, each instance whose frontier is below
/// `T`: the prefix is the same at every replica at one cut, and grows from cut to cut.
/// The instances fed beyond it are not: a replica may have learned more of one log
/// than another replica that ran further. So what a checkpoint announces of a log
/// ([`Position::ran`]) is bounded by this prefix: the announcements of the replicas'
/// checkpoints are then ordered alike in every log (the further cut's is at least as
/// large in each), and the acceptors of each serializer, truncating below what a
/// majority announced of their log, leave every log covered by the same majority's
/// checkpoints (without it, one log's majority and another's could differ, and the
/// only checkpoints covering both could be one replica's: planted bug
/// `geo-announce-fed`, caught by the simulator's durability check).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Settled {
    below_cut: Vec<Instance>,
    fed: Vec<VecDeque<(Instance, Timestamp)>>,
}

impl Settled {
    fn new(n: usize) -> Settled {
        Settled {
            below_cut: vec![0; n],
            fed: vec![VecDeque::new(); n],
        }
    }

    /// Serializer `g`'s instance `instance` was fed to the merge, leaving its log's
    /// frontier at `frontier`.
    fn fed(&mut self, g: SerializerId, instance: Instance, frontier: Timestamp) {
        let fed = &mut self.fed[g as usize];
        if fed.back().is_none_or(|&(i, _)| i < instance) && instance > self.below_cut[g as usize] {
            fed.push_back((instance, frontier));
        }
    }

    /// A cut with timestamp `t` ran.
    fn cut(&mut self, t: Timestamp) {
        for (below, fed) in self.below_cut.iter_mut().zip(&mut self.fed) {
            while let Some(&(i, frontier)) = fed.front() {
                if frontier >= t {
                    break;
                }
                *below = (*below).max(i);
                fed.pop_front();
            }
        }
    }
}

impl Position {
    /// Per serializer: the prefix of its log (in instances) whose commands all ran.
    fn ran(&self) -> Vec<Instance> {
        let mut ran = self.instances.clone();
        for entries in self.first.values() {
            for &(g, i) in entries {
                if let Some(r) = ran.get_mut(g as usize) {
                    *r = (*r).min(i.saturating_sub(1));
                }
            }
        }
        ran
    }

    /// Per serializer: the prefix of its log a checkpoint at this cut announces to
    /// its acceptors, [`Position::ran`] bounded by the prefix settled below the cut:
    /// the same at every replica at one cut, and growing from cut to cut.
    fn announced(&self) -> Vec<Instance> {
        self.ran()
            .into_iter()
            .zip(&self.settled.below_cut)
            .map(|(ran, &settled)| ran.min(settled))
            .collect()
    }
}

fn decode_position(bytes: &[u8]) -> Result<Position, String> {
    partita_types::decode::<Position>(bytes).map_err(|e| format!("a GeoPaxos+ position: {e}"))
}

/// GeoPaxos+: this node's part in every serializer's group, the merge of their logs,
/// and the log they share (see the module documentation).
pub struct GeoOrdering {
    id: NodeId,
    /// This replica's serializer.
    me: SerializerId,
    setup: GeoSetup,
    /// Serializer `g`'s group at index `g`.
    groups: Vec<PaxosOrdering>,
    merge: TimestampMerge<GeoOp, Command>,
    incarnation: u32,
    next_seq: u64,
    /// Per serializer: the last instance of its group fed to the merge.
    instances: Vec<Instance>,
    /// Per command not run yet: its first entry's instance in each log.
    first: BTreeMap<GeoOp, Vec<(SerializerId, Instance)>>,
    /// Per serializer: the prefix of its log below the newest cut.
    settled: Settled,
    /// Commands delivered here, numbered from 1.
    delivered: Instance,
    /// Client commands submitted here and not delivered yet, by (client, seq,
    /// session): the operation and the tick it was submitted at. A copy the client
    /// sends again while its operation is under way is absorbed (see
    /// [`GeoOrdering::copy_under_way`]).
    in_flight: BTreeMap<(u64, u64, Instance), (GeoOp, u64)>,
    /// Ordered time: the newest barrier's.
    time_ms: u64,
    /// Log tokens handed out, mapped to (group, the group's own token).
    tokens: VecDeque<(PersistToken, u32, PersistToken)>,
    /// Per group: the node's tokens of the group's durable records, by the group's
    /// token (to map a group's truncation to the node's log).
    durable: Vec<BTreeMap<PersistToken, PersistToken>>,
    /// Per group: where it allowed its log to be cut (its own token).
    group_truncated: Vec<PersistToken>,
    /// The node's log was cut below this token (never past the newest boot record).
    truncated_token: PersistToken,
    next_token: PersistToken,
    /// The boot record's token while it is not durable (requests wait for it), and
    /// the newest durable one.
    boot_token: Option<PersistToken>,
    newest_boot: PersistToken,
    /// The boot record written again at the log's end, while it is not durable.
    boot_moving: Option<PersistToken>,
    /// Entries a group could not take yet (no leader known): retried every tick.
    unsent: Vec<(SerializerId, Command)>,
    /// When this node last proposed a clock entry for each serializer it leads.
    clock_sent: Vec<Option<u64>>,
    clock_seq: u64,
    /// Stalled operations seen at the last check, by serializer.
    stalled_seen: BTreeSet<(SerializerId, GeoOp)>,
    last_stall_check: u64,
    last_dop_ms: u64,
    /// Commands delivered since the last barrier, when one last ran here (this node's
    /// clock), and when this node last proposed one.
    since_barrier: u64,
    last_barrier_ms: u64,
    barrier_proposed_ms: Option<u64>,
    barriers: BarrierPolicy,
    /// The count of the newest checkpoint this node announced durable.
    announced: Instance,
    system_seq: u64,
    /// Per serializer: the instance below which its acceptors truncated what this
    /// learner still needs (a state transfer must cover it).
    needed: Vec<Instance>,
    dop_not_ordered: bool,
    announce_fed: bool,
    tick: u64,
    clock_ms: u64,
    counters: BTreeMap<&'static str, u64>,
}

impl GeoOrdering {
    /// Node `setup.id`'s part in every serializer, its acceptors recovered from
    /// `recovered` (the node's whole log), its merge from the checkpoint `position` its
    /// replica was restored from (empty: none), the replica having run
    /// `next_deliver - 1` commands.
    pub fn new(
        setup: &NodeSetup,
        geo: &GeoSetup,
        recovered: Vec<AcceptorRecord>,
        next_deliver: Instance,
        position: &[u8],
        bugs: &UnsafeBugs,
        out: &mut Outbox,
    ) -> Result<GeoOrdering, FieldError> {
        let id = setup.id;
        let me = geo.replicas.iter().position(|&r| r == id).ok_or_else(|| {
            FieldError::new("ordering", format!("node {id} is not a GeoPaxos+ replica"))
        })?;
        if !setup.acceptor {
            return Err(FieldError::new(
                "ordering",
                format!("node {id}: every GeoPaxos+ replica must be an acceptor"),
            ));
        }
        let n = geo.replicas.len();
        let logged = recovered.len() as PersistToken;
        let mut per_group: Vec<Vec<AcceptorRecord>> = vec![Vec::new(); n];
        let mut durable: Vec<BTreeMap<PersistToken, PersistToken>> = vec![BTreeMap::new(); n];
        let mut incarnation = 0u32;
        let mut newest_boot = 0;
        for (i, r) in recovered.into_iter().enumerate() {
            let token = i as PersistToken + 1;
            match r {
                AcceptorRecord::Group { group, record } if (group as usize) < n => {
                    let g = group as usize;
                    per_group[g].push(*record);
                    durable[g].insert(per_group[g].len() as PersistToken, token);
                }
                AcceptorRecord::Boot { incarnation: i } => {
                    incarnation = incarnation.max(i);
                    newest_boot = token;
                }
                other => {
                    return Err(FieldError::new(
                        "ordering.protocol",
                        format!(
                            "node {id}'s log holds a record of no serializer of this \
                             cluster ({other:?}): it was written by another configuration"
                        ),
                    ))
                }
            }
        }
        let restored = match position.is_empty() {
            true => None,
            false => Some(decode_position(position).map_err(|e| {
                FieldError::new("ordering", format!("node {id}'s checkpoint: {e}"))
            })?),
        };
        if let Some(p) = &restored {
            if p.instances.len() != n || p.merge.serializers() != n {
                return Err(FieldError::new(
                    "ordering",
                    format!("node {id}'s checkpoint is of another set of serializers"),
                ));
            }
            incarnation = incarnation.max(p.incarnation);
        }
        incarnation += 1;
        let mut merge = match &restored {
            Some(p) => p.merge.clone(),
            None => TimestampMerge::new(n)
                .map_err(|e| FieldError::new("ordering", e.to_string()))?
                .with_remember(1 << 16),
        };
        merge = merge.with_bugs(MergeBugs {
            execute_before_safe: bugs.geo_execute_before_safe,
            ..MergeBugs::default()
        });
        let mut o = GeoOrdering {
            id,
            me: me as SerializerId,
            setup: geo.clone(),
            groups: Vec::with_capacity(n),
            merge,
            incarnation,
            next_seq: 0,
            instances: restored
                .as_ref()
                .map_or_else(|| vec![0; n], |p| p.instances.clone()),
            first: restored
                .as_ref()
                .map_or_else(BTreeMap::new, |p| p.first.clone()),
            settled: restored
                .as_ref()
                .map_or_else(|| Settled::new(n), |p| p.settled.clone()),
            delivered: next_deliver.saturating_sub(1),
            in_flight: BTreeMap::new(),
            time_ms: restored.as_ref().map_or(0, |p| p.time_ms),
            tokens: VecDeque::new(),
            durable,
            group_truncated: vec![0; n],
            truncated_token: 1,
            next_token: logged,
            boot_token: None,
            newest_boot,
            boot_moving: None,
            unsent: Vec::new(),
            clock_sent: vec![None; n],
            clock_seq: u64::from(incarnation) << 32,
            stalled_seen: BTreeSet::new(),
            last_stall_check: 0,
            last_dop_ms: 0,
            since_barrier: 0,
            last_barrier_ms: 0,
            barrier_proposed_ms: None,
            barriers: BarrierPolicy::of(setup, geo.barrier_interval_ms),
            announced: next_deliver.saturating_sub(1),
            system_seq: u64::from(incarnation) << 32,
            needed: vec![0; n],
            dop_not_ordered: bugs.geo_dop_not_ordered,
            announce_fed: bugs.geo_announce_fed,
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
            let next = o.instances[g] + 1;
            let ord = PaxosOrdering::new(&gs, records, next, bugs, &mut inner);
            o.groups.push(ord);
            o.absorb(g as SerializerId, inner, out);
        }
        Ok(o)
    }

    /// Serializer `g`'s group at this node.
    pub fn group(&self, g: SerializerId) -> Option<&PaxosOrdering> {
        self.groups.get(g as usize)
    }

    /// The merge, for status and tests.
    pub fn merge(&self) -> &TimestampMerge<GeoOp, Command> {
        &self.merge
    }

    /// Whether nothing is under way here: no operation waits in the merge, no entry
    /// waits for a leader.
    pub fn quiescent(&self) -> bool {
        self.merge.pending_len() == 0 && self.unsent.is_empty()
    }

    fn count(&mut self, what: &'static str) {
        *self.counters.entry(what).or_default() += 1;
    }

    fn n(&self) -> usize {
        self.groups.len()
    }

    fn leads(&self, g: SerializerId) -> bool {
        self.groups[g as usize].coordinator().is_some()
    }

    /// The position of everything delivered so far.
    fn encode_position(&self) -> Vec<u8> {
        partita_types::encode(&Position {
            merge: self.merge.clone(),
            instances: self.instances.clone(),
            first: self.first.clone(),
            settled: self.settled.clone(),
            time_ms: self.time_ms,
            incarnation: self.incarnation,
        })
    }

    /// Group `g`'s actions as this node's: messages in the serializer's envelope,
    /// records into the shared log, decided entries into the merge.
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
                Action::Deliver {
                    instance, value, ..
                } => self.on_decided(g, instance, &value, out),
                Action::Propose { .. } => self.count("dropped_propose_geo"),
                Action::TruncateLog { below_token } => {
                    self.group_truncated[g as usize] =
                        self.group_truncated[g as usize].max(below_token);
                    self.truncate_log(out);
                }
                Action::Cut { .. } | Action::NeedCheckpoint => {
                    unreachable!("a serializer's group delivers a total order")
                }
            }
        }
    }

    /// Every group allowed its log to be cut below some record: the node's log can be
    /// cut below the oldest record any group still needs, but never past the newest
    /// boot record, which numbers this replica's lives (a restart takes the next
    /// number: reusing one would make its operations look like an earlier life's).
    /// So before the cut passes it, the boot record is written again at the log's end.
    fn truncate_log(&mut self, out: &mut Outbox) {
        let mut below = PersistToken::MAX;
        for g in 0..self.n() {
            let keep = self.group_truncated[g];
            // The node token of the group's oldest record still needed.
            let d = &mut self.durable[g];
            while d.first_key_value().is_some_and(|(&t, _)| t < keep) {
                d.pop_first();
            }
            if let Some((_, &node_token)) = d.first_key_value() {
                below = below.min(node_token);
            }
        }
        if below == PersistToken::MAX {
            return;
        }
        if below > self.newest_boot && self.boot_token.is_none() && self.boot_moving.is_none() {
            self.next_token += 1;
            self.boot_moving = Some(self.next_token);
            self.count("geo_boot_records_moved");
            out.push(Action::Persist {
                token: self.next_token,
                record: AcceptorRecord::Boot {
                    incarnation: self.incarnation,
                },
            });
        }
        let below = below.min(self.newest_boot.max(1));
        if below > self.truncated_token {
            self.truncated_token = below;
            out.push(Action::TruncateLog { below_token: below });
        }
    }

    /// A decided value of serializer `g` (its group's instance `instance`): each entry
    /// into the merge, in order; then whatever the merge can deliver.
    fn on_decided(&mut self, g: SerializerId, instance: Instance, value: &Value, out: &mut Outbox) {
        for cmd in &value.commands {
            let Some(entry) = decode_entry(cmd) else {
                // The same bytes at every replica: skipped alike everywhere.
                self.count("geo_entries_undecodable");
                continue;
            };
            // An operation's entry in a log outside its serializers is a clock tick.
            let op = match &entry {
                Entry::Op { op, dst, .. } if dst.contains(g) => Some(*op),
                Entry::Op { .. } | Entry::Clock { .. } => None,
            };
            let position = self.merge.next_position(g);
            if let Err(e) = self.merge.on_entry(g, position, entry) {
                panic!("serializer {g}'s log reached the merge out of order: {e}");
            }
            if let Some(op) = op {
                if self.merge.is_pending(&op) {
                    let entries = self.first.entry(op).or_default();
                    if !entries.iter().any(|&(h, _)| h == g) {
                        entries.push((g, instance));
                    }
                }
            }
            self.clock_sent[g as usize] = None;
        }
        self.instances[g as usize] = self.instances[g as usize].max(instance);
        self.settled.fed(g, instance, self.merge.frontier(g));
        self.pop_ready(out);
    }

    /// A barrier (or a DOP, ordered by every serializer) stamped `time_ms` ran: ordered
    /// time moves to it, and the next barrier is due an interval from now.
    fn barrier_ran(&mut self, time_ms: u64) {
        self.time_ms = self.time_ms.max(time_ms);
        self.since_barrier = 0;
        self.last_barrier_ms = self.clock_ms;
        self.barrier_proposed_ms = None;
    }

    /// Deliver what the merge releases, in its order; a command ordered by every
    /// serializer is a cut.
    fn pop_ready(&mut self, out: &mut Outbox) {
        let all = all_of(self.n());
        while let Some(r) = self.merge.pop_ready() {
            self.first.remove(&r.op);
            let key = (r.value.client, r.value.seq, r.value.session);
            if self.in_flight.get(&key).is_some_and(|&(op, _)| op == r.op) {
                self.in_flight.remove(&key);
            }
            self.delivered += 1;
            let mut cmd = r.value;
            cmd.route = u64::from(r.dst.0);
            let commands = match cmd.system_op() {
                Some(SystemOp::Barrier { time_ms }) => {
                    self.barrier_ran(time_ms);
                    self.count("geo_barriers_run");
                    Vec::new()
                }
                Some(SystemOp::Reconfigure { time_ms }) => {
                    // A DOP every serializer ordered is a barrier as well.
                    if r.dst == all {
                        self.barrier_ran(time_ms);
                    }
                    self.count("geo_dops_delivered");
                    vec![cmd]
                }
                // Membership changes are refused under GeoPaxos+ before they are
                // proposed; one that got here anyway runs nowhere (replicas skip it).
                Some(SystemOp::Member { .. }) | None => {
                    self.since_barrier += 1;
                    vec![cmd]
                }
            };
            out.push(Action::Deliver {
                instance: self.delivered,
                // Every replica runs the one timestamp merge: the instance names it.
                name: self.delivered,
                value: Arc::new(Value {
                    vid: Vid {
                        ballot: Ballot::new(u64::from(r.op.incarnation), r.op.from.into()),
                        seq: r.op.seq,
                    },
                    commands,
                    parts: Vec::new(),
                    time_ms: self.time_ms,
                    skip: 0,
                }),
            });
            if r.dst == all {
                self.count("geo_cuts");
                self.settled.cut(r.timestamp);
                // The position holds the whole merge (what it remembers delivered, up
                // to 2^16 operations): encoded only at a cut where the replica may
                // checkpoint, not at every one (session opens, DOPs, splits).
                if self.checkpoint_wanted() {
                    out.push(Action::Cut {
                        position: self.encode_position(),
                    });
                }
            }
        }
    }

    /// Whether the replica may checkpoint at a cut here: a checkpoint interval's
    /// worth of commands ran since the checkpoint this node last announced durable.
    fn checkpoint_wanted(&self) -> bool {
        let every = self.barriers.every_commands;
        every > 0 && self.delivered >= self.announced.saturating_add(every)
    }

    /// Have serializer `g` order `entry`: proposed if this node leads `g`, forwarded to
    /// the leader otherwise (which stamps it with its own clock).
    fn order(&mut self, g: SerializerId, entry: &Entry<GeoOp, Command>, out: &mut Outbox) {
        let cmd = entry_command(self.id, entry, self.clock_seq);
        self.multicast_to(g, cmd, false, out);
    }

    /// Hand `cmd` to serializer `g`'s group; with `restamp`, an entry built earlier
    /// (one that waited for a leader) gets this node's clock first if it leads `g`.
    fn multicast_to(&mut self, g: SerializerId, cmd: Command, restamp: bool, out: &mut Outbox) {
        let cmd = if restamp && self.leads(g) {
            self.stamp(cmd)
        } else {
            cmd
        };
        let mut inner = Vec::new();
        if self.groups[g as usize]
            .multicast(cmd.clone(), None, &mut inner)
            .is_err()
        {
            self.count("geo_entries_waiting_for_leader");
            if self.unsent.len() < 100_000 {
                self.unsent.push((g, cmd));
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
        let entry = entry.stamped(self.merge.clock() + 1);
        Command {
            body: Body::single(partita_types::encode(&LogEntry(entry)).into()),
            ..cmd
        }
    }

    /// Submit `cmd` to the serializers `dst`, as a new operation of this origin.
    fn submit(&mut self, cmd: Command, dst: SerializerSet, out: &mut Outbox) {
        let op = GeoOp {
            from: self.me,
            incarnation: self.incarnation,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        if !cmd.is_system() {
            self.in_flight
                .insert((cmd.client, cmd.seq, cmd.session), (op, self.tick));
        }
        let entry = Entry::Op {
            op,
            dst,
            hint: self.merge.clock() + 1,
            value: Command {
                route: u64::from(dst.0),
                ..cmd
            },
        };
        for g in dst.iter() {
            self.order(g, &entry, out);
        }
    }

    /// Whether `cmd` is a copy of a client command submitted here less than two stall
    /// checks ago and not delivered yet. Ordering it again would cost every serializer
    /// it names an instance (a wide-area round trip each) only for the replica to find
    /// it a duplicate, and under load clients time out and send copies faster than the
    /// serializers order them: the queue would grow without end. The first operation
    /// is under way (a serializer's leader orders again what stalls half-ordered), and
    /// its reply reaches the client; a copy that comes later than two stall checks is
    /// submitted (the first may have reached no serializer at all).
    fn copy_under_way(&self, cmd: &Command) -> bool {
        self.in_flight
            .get(&(cmd.client, cmd.seq, cmd.session))
            .is_some_and(|&(_, at)| self.tick.saturating_sub(at) < self.copy_window())
    }

    fn copy_window(&self) -> u64 {
        self.setup.stall_check_ticks.saturating_mul(2)
    }

    /// A system command (barrier, DOP) to `dst`.
    fn submit_system(&mut self, op: SystemOp, kind: u8, dst: SerializerSet, out: &mut Outbox) {
        self.system_seq += 1;
        let cmd = Command::system(op, self.id, kind, self.system_seq);
        self.submit(cmd, dst, out);
    }

    /// Clock entries, stalled operations, DOPs and barriers (see the module doc).
    fn housekeeping(&mut self, out: &mut Outbox) {
        let n = self.n();
        for g in 0..n as SerializerId {
            if !self.leads(g) {
                continue;
            }
            let Some(wanted) = self.merge.wanted_clock(g) else {
                continue;
            };
            let due = self.clock_sent[g as usize]
                .is_none_or(|t| self.tick.saturating_sub(t) >= self.setup.clock_retry_ticks);
            if due {
                self.clock_sent[g as usize] = Some(self.tick);
                self.clock_seq += 1;
                self.count("geo_clock_entries_proposed");
                let entry = Entry::Clock {
                    hint: wanted.max(self.merge.clock() + 1),
                };
                self.order(g, &entry, out);
            }
        }
        if self.tick.saturating_sub(self.last_stall_check) >= self.setup.stall_check_ticks {
            self.last_stall_check = self.tick;
            let (tick, window) = (self.tick, self.copy_window());
            self.in_flight
                .retain(|_, &mut (_, at)| tick.saturating_sub(at) < window);
            let mut now = BTreeSet::new();
            let mut again = Vec::new();
            for g in 0..n as SerializerId {
                if !self.leads(g) {
                    continue;
                }
                for s in self.merge.stalled().filter(|s| s.missing.contains(g)) {
                    // Still queued or in flight at this serializer (a busy one, not a
                    // lost entry): ordering it again would only lengthen the queue
                    // (under load, every op again and again: a collapse).
                    let queued = self.groups[g as usize].coordinator().is_some_and(|c| {
                        c.holds(|cmd| {
                            matches!(decode_entry(cmd), Some(Entry::Op { op, .. }) if op == *s.op)
                        })
                    });
                    if queued {
                        continue;
                    }
                    if self.stalled_seen.contains(&(g, *s.op)) {
                        again.push((g, *s.op, s.dst, s.value.clone()));
                    } else {
                        now.insert((g, *s.op));
                    }
                }
            }
            for (g, op, dst, value) in again {
                self.count("geo_stalled_reordered");
                let entry = Entry::Op {
                    op,
                    dst,
                    hint: self.merge.clock() + 1,
                    value,
                };
                self.order(g, &entry, out);
            }
            self.stalled_seen = now;
        }
        if self.boot_token.is_some() || self.clock_ms == 0 {
            return;
        }
        let all = all_of(n);
        if self.setup.dop_interval_ms > 0
            && self.me == 0
            && self.clock_ms.saturating_sub(self.last_dop_ms) >= self.setup.dop_interval_ms
        {
            if self.last_dop_ms > 0 {
                self.count("geo_dops_submitted");
                let dst = match self.dop_not_ordered {
                    // Planted bug: a DOP ordered by this serializer only.
                    true => SerializerSet::single(self.me),
                    false => all,
                };
                let time_ms = self.clock_ms;
                self.submit_system(SystemOp::Reconfigure { time_ms }, DOP_KIND, dst, out);
            }
            self.last_dop_ms = self.clock_ms.max(1);
        }
        let interval = self.barriers.interval_ms;
        let due = self.barriers.due(
            self.me as usize,
            self.time_ms,
            self.since_barrier,
            self.last_barrier_ms,
            self.clock_ms,
        );
        let waiting = self
            .barrier_proposed_ms
            .is_some_and(|t| self.clock_ms.saturating_sub(t) < interval);
        if due && !waiting {
            self.barrier_proposed_ms = Some(self.clock_ms);
            self.count("geo_barriers_proposed");
            let time_ms = self.clock_ms;
            self.submit_system(SystemOp::Barrier { time_ms }, BARRIER_KIND, all, out);
        }
    }
}

/// Node `setup.id`'s setup within serializer `g`'s group: the cluster's acceptors,
/// replica `g` its first leader, every replica a learner; Multi-Paxos, nothing
/// speculative, no batchers, a checkpoint announcement is the group's own.
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
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        },
        acceptor: m.acceptors.contains(&setup.id),
        replica: geo.replicas.contains(&setup.id),
        partition: setup.partition,
        batcher: false,
        speculative: false,
        early_replies: false,
        psmr: None,
        ordering: crate::OrderingSetup::Paxos,
        // A serializer is led from its own region: after a failover its replica
        // takes the lead back.
        coordinator_config: CoordinatorConfig {
            home_leader: true,
            ..setup.coordinator_config.clone()
        },
        ..setup.clone()
    }
}

impl GeoOrdering {
    /// When [`GeoOrdering::housekeeping`] may next act with no other input: a clock
    /// entry's retry for a serializer led here that the merge waits on, the stall
    /// check while anything is pending or remembered, the next DOP, the next barrier.
    fn housekeeping_due(&self) -> TickDue {
        let mut due = TickDue::NEVER;
        let pending = self.merge.pending_len() > 0;
        for g in 0..self.n() as SerializerId {
            if pending && self.leads(g) && self.merge.wanted_clock(g).is_some() {
                due = due.tick(
                    self.clock_sent[g as usize]
                        .map_or(0, |t| t.saturating_add(self.setup.clock_retry_ticks)),
                );
            }
        }
        if pending || !self.in_flight.is_empty() || !self.stalled_seen.is_empty() {
            due = due.tick(
                self.last_stall_check
                    .saturating_add(self.setup.stall_check_ticks),
            );
        }
        if self.boot_token.is_some() {
            // Its write completing is an input.
            return due;
        }
        if self.setup.dop_interval_ms > 0 && self.me == 0 {
            due = due.clock(self.last_dop_ms.saturating_add(self.setup.dop_interval_ms));
        }
        due.min(self.barriers.next_at(
            self.me as usize,
            self.time_ms,
            self.since_barrier,
            self.last_barrier_ms,
            self.barrier_proposed_ms,
        ))
    }
}

impl AtomicMulticast for GeoOrdering {
    fn tick_due(&self) -> TickDue {
        if !self.unsent.is_empty() || self.clock_ms == 0 {
            return TickDue::NEXT;
        }
        let due = self
            .groups
            .iter()
            .fold(TickDue::NEVER, |due, g| due.min(g.tick_due()));
        if due.tick <= self.tick.saturating_add(1) {
            // The next tick is due anyway (a loaded leader's is, nearly always).
            return due;
        }
        due.min(self.housekeeping_due())
    }

    fn multicast(
        &mut self,
        cmd: Command,
        _access: Option<Access>,
        out: &mut Outbox,
    ) -> Result<(), String> {
        if self.boot_token.is_some() || self.time_ms == 0 {
            return Err(format!(
                "node {} is starting (no barrier has run yet); retry",
                self.id
            ));
        }
        if self.copy_under_way(&cmd) {
            self.count("geo_resends_absorbed");
            return Ok(());
        }
        let all = all_of(self.n());
        let dst = SerializerSet(u32::try_from(cmd.route).unwrap_or(0) & all.0);
        let dst = if dst.is_empty() { all } else { dst };
        if dst.len() > 1 {
            self.count("geo_submitted_multi");
        }
        self.count("geo_submitted");
        self.submit(cmd, dst, out);
        Ok(())
    }

    fn checkpoints_at_cuts(&self) -> bool {
        true
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
            Msg::Truncated { below } => {
                // This replica's learner of `g` needs what `g`'s acceptors cut: a
                // checkpoint that covers it (the node core fetches one).
                let behind = self.groups[g as usize]
                    .delivered_up_to()
                    .is_some_and(|d| d + 1 < below);
                if behind && below > self.needed[g as usize] {
                    self.needed[g as usize] = below - 1;
                    self.count("geo_state_transfers_asked");
                    out.push(Action::NeedCheckpoint);
                }
                Msg::Truncated { below }
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
            if self.boot_token == Some(t) || self.boot_moving == Some(t) {
                self.boot_token = self.boot_token.filter(|&b| b != t);
                self.boot_moving = self.boot_moving.filter(|&b| b != t);
                self.newest_boot = t;
                continue;
            }
            // Completions come in token order, so the map's front is the next one.
            while let Some(&(global, g, inner)) = self.tokens.front() {
                if global > t {
                    break;
                }
                self.tokens.pop_front();
                if global == t {
                    self.durable[g as usize].insert(inner, global);
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
        Some(self.delivered)
    }

    fn position(&self) -> Vec<u8> {
        self.encode_position()
    }

    /// A peer's checkpoint is taken if it is of these serializers and covers, in every
    /// log, what its acceptors truncated below this replica's learners.
    fn check_position(&self, position: &[u8]) -> Result<(), String> {
        let p = decode_position(position)?;
        if p.instances.len() != self.n() || p.merge.serializers() != self.n() {
            return Err("a position of another set of serializers".into());
        }
        for (g, &need) in self.needed.iter().enumerate() {
            if p.instances[g] < need {
                return Err(format!(
                    "serializer {g}: the checkpoint stands at instance {}, below the \
                     truncation at {need}",
                    p.instances[g]
                ));
            }
        }
        Ok(())
    }

    fn skip_to(&mut self, next: Instance, position: &[u8], out: &mut Outbox) {
        let p = decode_position(position)
            .unwrap_or_else(|e| panic!("skip_to with a position check_position refuses: {e}"));
        self.merge = p.merge.with_bugs(MergeBugs::default());
        self.first = p.first;
        self.settled = p.settled;
        self.time_ms = self.time_ms.max(p.time_ms);
        self.delivered = next - 1;
        self.needed = vec![0; self.n()];
        self.stalled_seen.clear();
        self.count("geo_restored");
        for g in 0..self.n() {
            self.instances[g] = p.instances[g];
            let mut inner = Vec::new();
            self.groups[g].restart_learner(p.instances[g] + 1, &mut inner);
            self.absorb(g as SerializerId, inner, out);
        }
        self.pop_ready(out);
    }

    /// Each serializer's acceptors learn the prefix of its log whose commands all ran
    /// at the checkpoint's cut.
    fn announce_checkpoint(&mut self, instance: Instance, position: &[u8], out: &mut Outbox) {
        self.announced = instance;
        let Ok(p) = decode_position(position) else {
            return;
        };
        let announced = match self.announce_fed {
            true => p.ran(),
            false => p.announced(),
        };
        for (g, ran) in announced.into_iter().enumerate() {
            if ran == 0 {
                continue;
            }
            let mut inner = Vec::new();
            self.groups[g].announce_checkpoint(ran, &[], &mut inner);
            self.absorb(g as SerializerId, inner, out);
        }
    }

    fn leader(&self) -> Option<NodeId> {
        // Clients stay with their nearest replica: no leader to move to.
        None
    }

    fn leads(&self) -> Option<Ballot> {
        self.groups.iter().filter_map(|g| g.leads()).max()
    }

    fn conflicting_decisions(&self) -> u64 {
        self.groups.iter().map(|g| g.conflicting_decisions()).sum()
    }

    fn truncation(&self) -> Option<Vec<u8>> {
        let below: Vec<Instance> = self
            .groups
            .iter()
            .map(|g| g.report().acceptor.map_or(1, |a| a.truncated_below))
            .collect();
        below
            .iter()
            .any(|&b| b > 1)
            .then(|| partita_types::encode(&below))
    }

    fn covers(&self, position: &[u8], truncation: &[u8]) -> bool {
        match (
            decode_position(position),
            partita_types::decode::<Vec<Instance>>(truncation),
        ) {
            (Ok(p), Ok(t)) => p
                .ran()
                .iter()
                .zip(&t)
                .all(|(&ran, &below)| ran + 1 >= below),
            _ => false,
        }
    }

    /// Every serializer's log as a stream (every replica learns every one), and idle
    /// when no operation waits in the merge and no entry for a leader.
    fn report(&self) -> OrderingReport {
        let mut r = OrderingReport {
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
        let mut s = format!(
            "GeoPaxos+: delivered {}, {} waiting in the merge, time {} ms, quiescent {}",
            self.delivered,
            self.merge.pending_len(),
            self.time_ms,
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
        let m = self.merge.stats();
        for (k, v) in [
            ("geo_merge_executed", m.executed),
            ("geo_merge_executed_multi", m.executed_multi),
            ("geo_duplicate_entries", m.duplicate_entries),
            ("geo_pending", self.merge.pending_len() as u64),
        ] {
            *into.entry(k).or_default() += v;
        }
    }

    fn invariants(&self) {
        for g in &self.groups {
            g.invariants();
        }
        self.merge.invariants();
        assert!(
            self.tokens.iter().all(|&(t, _, _)| t <= self.next_token),
            "log tokens handed out in order"
        );
        assert!(
            self.first.keys().all(|op| self.merge.is_pending(op)),
            "first entries are kept only for commands waiting in the merge"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_geo::GeoService;
    use partita_service::{ServiceCodec, StateMachine};

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
            placement: Placement::Home,
            dop_interval_ms: 0,
            optimizer_brute_force: brute_force,
            seed: 7,
            stall_check_ticks: 40,
            clock_retry_ticks: 10,
            barrier_interval_ms: 100,
            epaxos_window: 1024,
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
