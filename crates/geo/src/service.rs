//! [`GeoService`]: the geo B+tree of paper 004 §IV as a
//! [`partita_service::StateMachine`] that places its own objects (the tree's nodes,
//! with split prediction), named `"geo-btree"`, so that GeoPaxos+ only orders and the
//! common replica executes.
//!
//! # Clients speak the B+tree's commands
//!
//! A client sends paper 001's B+tree commands ([`partita_btree::Op`]) in the btree
//! service's encoding, and gets [`partita_btree::OpResult`]s back: the same clients,
//! histories and checker work for `btree` and `geo-btree`. A `u64` value is stored as
//! the first 8 bytes, little endian, of a `value_bytes`-byte value ([`geo_value`]; 100
//! bytes in the paper's §VI) and read back from them ([`map_value`]). The geo tree has
//! read, next, prev, update and insert; delete, range queries and batches are refused
//! by [`ServiceCodec::check`] with the reason (as GeoPaxos+ answered them before).
//!
//! # The genesis: how a replica's tree is configured
//!
//! `StateMachine::new()` takes no arguments, but the tree needs its topology (regions
//! and round trips), order, value size, seed, optimizer and initial keys. A replica
//! factory applies *genesis* commands to `S::new()` before anything is ordered
//! (`partita_smr::ServiceFactory::seeded`), so [`GeoCommand`] has a second kind,
//! [`GeoCommand::Genesis`] carrying a [`GeoGenesis`], which configures the empty
//! service: the tree is built as GeoPaxos+ built it so far (`GeoSetup::initial_tree` in
//! `partita-node`): keys `0..keys` inserted with their own value, a DOP to forget the
//! loading's accesses, then leaves placed by key range (`⌊first key · n / keys⌋`) and
//! inner nodes on every serializer. [`GeoService::genesis`] builds the payloads.
//!
//! - **Encoding.** A client command is exactly the btree service's bytes. A genesis is
//!   [`GENESIS_MAGIC`] followed by the [`GeoGenesis`] in the project's codec; the
//!   magic's first four bytes, read as the btree command's variant index, name no
//!   variant, so a genesis never decodes as a client command. Decoding tries the btree
//!   encoding first and the genesis only when that fails; a genesis that does not
//!   validate ([`GeoGenesis::validate`]) does not decode, so the factory reports it.
//! - **Clients cannot send one.** [`ServiceCodec::check`] refuses every genesis
//!   (clients check before sending; replicas check again what was ordered), and
//!   executing a genesis on a configured service changes nothing (its reply is
//!   `Inserted(false)`; `Inserted(true)` when it configured the service).
//! - **Unconfigured** (no genesis), the service is a plain geo tree of one region that
//!   places nothing: `psite` answers `None` (the replica then places the objects
//!   `access` names itself), `misplaced`, `execute_at` and `reconfigure` count and move
//!   nothing. Configured, it answers `Some` for every command, and `from` must be a
//!   replica of its topology (replicas `0..n` in the cluster's replica order).
//!
//! # The placement hooks
//!
//! - `psite` = the tree's psite ([`GeoBTree::psite`]: read-one from the nearest,
//!   write-all, split prediction for inserts) as a bitmask.
//! - `misplaced` = the tree's delivery decision ([`GeoBTree::deliver_decision`]):
//!   `Resubmit(dst)` becomes `Some(dst)`.
//! - `execute_at` = [`GeoBTree::execute`]: counts the access by origin on the path to
//!   the root, then applies it. **Reads count too**, and the counters are replicated
//!   state: under GeoPaxos+ every replica must call `execute_at` for every delivered
//!   command, reads included (the paper's replicas all execute every operation); a
//!   replica that ran reads only for its own clients would reach different DOPs.
//! - `reconfigure` = the DOP ([`GeoBTree::dop`]).
//! - `execute` (no origin: EPaxos, one stream) = [`GeoBTree::apply`], which counts
//!   nothing.
//! - `access` (EPaxos) = the keys, as the B+tree's: next and prev read every key up to
//!   the neighbour this tree holds (a prev with none, every key down to 0), at most
//!   `NEIGHBOUR_SPAN_MAX` keys, else everything; a genesis touches everything.
//!
//! # Planted bugs
//!
//! [`GeoGenesis::unsafe_write_ordered_by_one_serializer`] plants GeoPaxos+'s "write
//! ordered by one serializer" in the service: psite names one serializer of a write's
//! nodes (the origin's, if it is one), and `misplaced` lets every write run, as
//! `GeoReplica` did with the bug; the node puts it in the genesis it builds from its
//! planted bugs, so every replica has it. The other two bugs of `GeoBugs` are not the
//! service's: "execute before safe" belongs to the timestamp merge, and "DOP not ordered
//! with everything" to whoever orders the reconfiguration (the service has no DOP
//! command any more: the replica calls `reconfigure` where the ordering delivered one,
//! so the ordering chooses its serializers and must plant that bug).
//!
//! # Snapshots and digests
//!
//! The snapshot holds whether the service is configured, the planted bug and the whole
//! tree with its placement, counters, optimizer cache and configuration (see the
//! tree's serde: nodes in tree order, no uids). It is encoded with the project's codec
//! (fixed-width bincode) but decoded with no frame bound, since a tree of a million
//! 100-byte values is larger than a frame. The digest is the tree's
//! ([`GeoBTree::digest`], as `GeoReplica` reports it), and differs for an unconfigured
//! service.
//!
//! # Undo (speculative execution)
//!
//! Reads and inserts of a present key change nothing; an update is undone by writing
//! the old value back; an insert of a new key (which may split nodes up to the root),
//! and a genesis, are undone by restoring a copy of the whole service taken before.
//! That copy costs the whole tree per insert: speculation over the geo tree is correct
//! but slow, and GeoPaxos+ does not speculate.

use crate::gbtree::{GbTreeError, GbTreeOptions, GeoBTree, Op as GeoOp, Reply as GeoReply};
use crate::gbtree::{ORDER_DEFAULT, VALUE_BYTES_LIMIT};
use crate::objects::Placement;
use crate::optimizer::OptimizerOptions;
use crate::set::Config;
use crate::topology::Topology;
use partita_btree::service::{next_access, prev_access};
use partita_btree::{BPlusTree, Op, OpResult};
use partita_service::{
    Access, ExecutionWork, MergeError, Objects, ServiceCodec, SplitError, StateMachine, WORK_KINDS,
};
use partita_types::{DecodeError, PartitionId, PartitionMap, Payload};
use serde::{Deserialize, Serialize};
use std::ops::Bound;

/// The first bytes of a genesis command. Its first four, `GEO\0`, read as a
/// little-endian `u32`, are 5,195,079: no variant of [`partita_btree::Op`], whose
/// encoding starts with its variant index, so no client command starts like this.
pub const GENESIS_MAGIC: [u8; 8] = *b"GEO\0gen1";

/// The most keys a genesis loads (16 Mi: 1.6 GB of 100-byte values).
pub const GENESIS_KEYS_MAX: u64 = 1 << 24;

/// The smallest value size: the client's `u64` is the first 8 bytes.
pub const VALUE_BYTES_MIN: usize = 8;

/// The value size of an unconfigured service (the paper's §VI inserts 100-byte values).
pub const VALUE_BYTES_DEFAULT: usize = 100;

/// The object id of the tree's shape in [`StateMachine::access`], which every insert
/// writes. Where a split lands depends on the order of inserts into a full leaf, also
/// of different keys, and the shape is replicated state (the digest covers it, and
/// under GeoPaxos+ the tree's nodes are the placed objects): an ordering that orders
/// only what conflicts (EPaxos) must order inserts among themselves, or replicas with
/// the same entries hold different trees. Reads, updates, next and prev do not change
/// the shape and do not touch it. (A key whose id collides with it only conflicts
/// more.)
pub const SHAPE_OBJECT: u64 = 0x7368_6170_6520_6f66;

/// A `u64` as a value of the geo tree: its little-endian bytes, then zeros up to
/// `bytes` (at least 8).
pub fn geo_value(v: u64, bytes: usize) -> Vec<u8> {
    let mut b = vec![0u8; bytes.max(8)];
    b[..8].copy_from_slice(&v.to_le_bytes());
    b
}

/// The `u64` a value of the geo tree holds (its first 8 bytes, little endian; a
/// shorter value is padded with zeros).
pub fn map_value(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = b.len().min(8);
    w[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(w)
}

/// What configures a replica's geo tree before anything is ordered (see the module
/// documentation): the fields of GeoPaxos+'s setup that shape the tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeoGenesis {
    /// The replicas (regions) in the cluster's replica order, and the round trips
    /// between them: replica `i` hosts serializer `i`.
    pub topology: Topology,
    /// The most keys a node holds.
    pub order: usize,
    /// Keys `0..keys` present at the start, each its own value.
    pub keys: u64,
    /// Bytes of every value (at least [`VALUE_BYTES_MIN`]).
    pub value_bytes: usize,
    /// Seeds the configuration of the root of an empty tree.
    pub seed: u64,
    /// The DOP's strategy.
    pub optimizer: OptimizerOptions,
    /// Where the tree's nodes start ([`GeoGenesis::tree`]).
    pub placement: Placement,
    /// Planted bug (tests and the simulator only): writes ordered by one serializer.
    pub unsafe_write_ordered_by_one_serializer: bool,
}

impl GeoGenesis {
    /// `keys` keys over `topology`, with GeoPaxos+'s defaults for the rest: order
    /// [`ORDER_DEFAULT`], [`VALUE_BYTES_DEFAULT`]-byte values, seed 0, hot replicas
    /// with the LRU cache, no planted bug.
    pub fn new(topology: Topology, keys: u64) -> GeoGenesis {
        GeoGenesis {
            topology,
            order: ORDER_DEFAULT,
            keys,
            value_bytes: VALUE_BYTES_DEFAULT,
            seed: 0,
            optimizer: OptimizerOptions::hot_cached(crate::CACHE_ENTRIES_DEFAULT),
            placement: Placement::Home,
            unsafe_write_ordered_by_one_serializer: false,
        }
    }

    /// The tree's options.
    pub fn tree_options(&self) -> GbTreeOptions {
        GbTreeOptions {
            order: self.order,
            seed: self.seed,
            value_bytes_max: self.value_bytes,
            optimizer: self.optimizer,
        }
    }

    /// Refuses an order, value size or optimizer out of range, and more than
    /// [`GENESIS_KEYS_MAX`] keys, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(VALUE_BYTES_MIN..=VALUE_BYTES_LIMIT).contains(&self.value_bytes) {
            return Err(format!(
                "value_bytes = {}: it must be in {VALUE_BYTES_MIN}..={VALUE_BYTES_LIMIT} (the \
                 client's u64 is the first 8 bytes)",
                self.value_bytes
            ));
        }
        if self.keys > GENESIS_KEYS_MAX {
            return Err(format!(
                "keys = {}: a genesis loads at most {GENESIS_KEYS_MAX}",
                self.keys
            ));
        }
        self.tree_options().validate().map_err(|e| e.to_string())
    }

    /// The tree every replica starts from: keys `0..keys` inserted (from replica 0)
    /// with their own value, a DOP that forgets the loading's accesses, then every node
    /// placed as [`GeoGenesis::placement`] says:
    /// - [`Placement::Home`] (GeoPaxos+): leaves by key range, inner nodes (and an
    ///   empty leaf) on every serializer; a tree without keys keeps its root's seeded
    ///   configuration;
    /// - [`Placement::Random`] (DBT_b): every node a configuration drawn from the seed
    ///   and its uid ([`GeoBTree::randomize_reps`]);
    /// - [`Placement::Single`] (GeoPaxos): every node one serializer, by the key range
    ///   of its first key (serializer 0 for an empty node).
    pub fn tree(&self) -> Result<GeoBTree, GbTreeError> {
        let mut tree = GeoBTree::new(self.topology.clone(), self.tree_options())?;
        for key in 0..self.keys {
            let value = geo_value(key, self.value_bytes);
            tree.execute(&GeoOp::Insert { key, value }, 0)?;
        }
        if self.keys > 0 {
            tree.dop();
        }
        let n = self.topology.n();
        let keys = self.keys;
        let by_range = |node: &crate::Node| {
            let first = node.keys().first().copied().unwrap_or(0);
            let r = ((first as u128 * n as u128) / keys.max(1) as u128) as usize;
            Config::single(r.min(n - 1))
        };
        match self.placement {
            Placement::Home if keys > 0 => tree.initialize_reps(|_, node| {
                if !node.is_leaf() || node.keys().is_empty() {
                    return Config::all(n);
                }
                by_range(node)
            }),
            Placement::Home => {}
            Placement::Random => tree.randomize_reps(self.seed),
            Placement::Single => tree.initialize_reps(|_, node| by_range(node)),
        }
        assert_eq!(tree.len(), self.keys, "every key loaded");
        Ok(tree)
    }
}

/// A command of the geo-btree service: a client's B+tree command, or the genesis that
/// configures a replica (never a client's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum GeoCommand {
    /// Paper 001's B+tree command, as clients send it.
    Op(Op),
    /// Configures an empty service (see the module documentation).
    Genesis(Box<GeoGenesis>),
}

/// What undoes one command (see the module documentation).
#[derive(Debug)]
pub enum GeoUndo {
    /// The command changed nothing.
    Nothing,
    /// An update: the value `key` held before.
    Value { key: u64, old: Vec<u8> },
    /// The whole service as it was before (an insert of a new key, a genesis).
    Whole(Box<GeoService>),
}

/// The geo B+tree as a service that places its own objects (see the module
/// documentation).
#[derive(Clone, Debug)]
pub struct GeoService {
    tree: GeoBTree,
    configured: bool,
    unsafe_write_ordered_by_one_serializer: bool,
}

/// The snapshot's form, borrowed (field for field as [`ServiceRepr`]).
#[derive(Serialize)]
struct ServiceRef<'a> {
    configured: bool,
    unsafe_write_ordered_by_one_serializer: bool,
    tree: &'a GeoBTree,
}

#[derive(Deserialize)]
struct ServiceRepr {
    configured: bool,
    unsafe_write_ordered_by_one_serializer: bool,
    tree: GeoBTree,
}

impl GeoService {
    /// The genesis commands that configure every replica alike: one command, in the
    /// service's encoding.
    pub fn genesis(g: &GeoGenesis) -> Result<Vec<Payload>, String> {
        g.validate()?;
        Ok(vec![Self::encode_command(&GeoCommand::Genesis(Box::new(
            g.clone(),
        )))])
    }

    /// The service a genesis configures (what a replica factory builds from
    /// [`GeoService::genesis`]).
    pub fn from_genesis(g: &GeoGenesis) -> Result<GeoService, String> {
        g.validate()?;
        let mut s = GeoService::new();
        let reply = s.execute(&GeoCommand::Genesis(Box::new(g.clone())));
        assert_eq!(
            reply,
            OpResult::Inserted(true),
            "an empty service takes a genesis"
        );
        Ok(s)
    }

    /// The tree (for status, tests and experiments).
    pub fn tree(&self) -> &GeoBTree {
        &self.tree
    }

    /// Whether a genesis configured the service (else it places nothing).
    pub fn is_configured(&self) -> bool {
        self.configured
    }

    /// The number of replicas (serializers) of the topology.
    pub fn n(&self) -> usize {
        self.tree.n()
    }

    /// Bytes of every value stored.
    pub fn value_bytes(&self) -> usize {
        self.tree.value_bytes_max()
    }

    /// Whether the planted bug "write ordered by one serializer" is on.
    pub fn unsafe_write_ordered_by_one_serializer(&self) -> bool {
        self.unsafe_write_ordered_by_one_serializer
    }

    /// The tree's invariants, and values large enough for a `u64`.
    pub fn invariants(&self) {
        assert!(self.value_bytes() >= VALUE_BYTES_MIN, "values hold a u64");
        assert!(
            self.configured || !self.unsafe_write_ordered_by_one_serializer,
            "bugs are planted by a genesis"
        );
        self.tree.invariants();
    }

    /// The geo tree's operation for a client command, or `None` for what the geo tree
    /// does not have (refused by `check`).
    fn geo_op(&self, op: &Op) -> Option<GeoOp> {
        let bytes = self.value_bytes();
        Some(match *op {
            Op::Read { key } => GeoOp::Read { key },
            Op::Next { key } => GeoOp::GetNext { key },
            Op::Prev { key } => GeoOp::GetPrev { key },
            Op::Update { key, value } => GeoOp::Update {
                key,
                value: geo_value(value, bytes),
            },
            Op::Insert { key, value } => GeoOp::Insert {
                key,
                value: geo_value(value, bytes),
            },
            Op::Delete { .. } | Op::Query { .. } | Op::Batch(_) => return None,
        })
    }

    /// The geo tree's operation for a command `check` accepts; anything else reaching
    /// execution is a bug of the caller (replicas check what was ordered).
    fn checked_op(&self, op: &Op) -> GeoOp {
        self.geo_op(op)
            .unwrap_or_else(|| panic!("{} reached execution although check refuses it", op.name()))
    }

    /// Every serializer of the topology, as a bitmask.
    fn all_mask(&self) -> u64 {
        u64::from(self.tree.topology().all().mask())
    }

    /// The tree's psite, with the planted bug.
    fn site(&self, op: &GeoOp, from: usize) -> Config {
        let dst = self.tree.psite(op, from);
        if op.is_write() && self.unsafe_write_ordered_by_one_serializer {
            let mine = Config::single(from);
            if mine.is_subset_of(dst) {
                return mine;
            }
            return dst.iter().next().map(Config::single).unwrap_or(dst);
        }
        dst
    }

    /// Configures the service from a genesis (which `decode_command` and
    /// [`GeoService::genesis`] validate: an invalid one here is a bug of the caller).
    fn configure(&mut self, g: &GeoGenesis) -> OpResult {
        if self.configured {
            return OpResult::Inserted(false);
        }
        if let Err(e) = g.validate() {
            panic!("an invalid genesis reached execution: {e}");
        }
        let tree = g.tree().unwrap_or_else(|e| {
            panic!("a genesis that validated builds its tree: {e}");
        });
        *self = GeoService {
            tree,
            configured: true,
            unsafe_write_ordered_by_one_serializer: g.unsafe_write_ordered_by_one_serializer,
        };
        OpResult::Inserted(true)
    }

    /// Runs `op` counted from `from`, or uncounted.
    fn run(&mut self, op: &Op, from: Option<usize>) -> OpResult {
        let g = self.checked_op(op);
        let reply = match from {
            Some(from) => self.tree.execute(&g, from),
            None => self.tree.apply(&g),
        };
        // Values are made value_bytes long, the tree's bound: nothing else refuses.
        to_op_result(reply.expect("values fit the tree's bound"))
    }
}

/// The B+tree's reply for the geo tree's, values mapped back to `u64`s.
fn to_op_result(r: GeoReply) -> OpResult {
    match r {
        GeoReply::Value(v) => OpResult::Value(v.as_deref().map(map_value)),
        GeoReply::Entry(e) => OpResult::Entry(e.map(|(k, v)| (k, map_value(&v)))),
        GeoReply::Old(v) => OpResult::Old(v.as_deref().map(map_value)),
        GeoReply::Inserted(b) => OpResult::Inserted(b),
        GeoReply::Dop(_) => unreachable!("no client command is a DOP"),
    }
}

/// Decodes a snapshot of any size (the project's codec, fixed-width integers, no
/// trailing bytes; never reading past the input).
fn decode_unbounded<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, String> {
    use bincode::Options;
    bincode::options()
        .with_fixint_encoding()
        .reject_trailing_bytes()
        .with_limit(bytes.len() as u64)
        .deserialize(bytes)
        .map_err(|e| e.to_string())
}

impl ServiceCodec for GeoService {
    const NAME: &'static str = "geo-btree";
    type Command = GeoCommand;
    type Reply = OpResult;
    type Key = u64;
    fn encode_command(cmd: &GeoCommand) -> Payload {
        match cmd {
            GeoCommand::Op(op) => BPlusTree::encode_command(op),
            GeoCommand::Genesis(g) => {
                let mut b = GENESIS_MAGIC.to_vec();
                b.extend_from_slice(&partita_types::encode(g));
                Payload::from(b)
            }
        }
    }
    /// The btree service's encoding first; a genesis only when that fails.
    fn decode_command(bytes: &[u8]) -> Result<GeoCommand, DecodeError> {
        let client = match BPlusTree::decode_command(bytes) {
            Ok(op) => return Ok(GeoCommand::Op(op)),
            Err(e) => e,
        };
        let Some(rest) = bytes.strip_prefix(&GENESIS_MAGIC[..]) else {
            return Err(client);
        };
        let g: GeoGenesis = partita_types::decode(rest)
            .map_err(|e| DecodeError(format!("a geo-btree genesis that does not decode: {e}")))?;
        g.validate()
            .map_err(|e| DecodeError(format!("a geo-btree genesis refused: {e}")))?;
        Ok(GeoCommand::Genesis(Box::new(g)))
    }
    fn check(cmd: &GeoCommand) -> Result<(), String> {
        match cmd {
            GeoCommand::Genesis(_) => Err(
                "a geo-btree genesis configures a replica before anything is ordered; no \
                 client may send one"
                    .into(),
            ),
            GeoCommand::Op(op @ (Op::Delete { .. } | Op::Query { .. } | Op::Batch(_))) => {
                Err(format!(
                    "the geo B+tree (paper 004) has no {}: it takes read, insert, update, \
                     next and prev",
                    op.name()
                ))
            }
            GeoCommand::Op(_) => Ok(()),
        }
    }
    fn is_read_only(cmd: &GeoCommand) -> bool {
        match cmd {
            GeoCommand::Op(op) => !op.is_mutation(),
            GeoCommand::Genesis(_) => false,
        }
    }
    fn objects(cmd: &GeoCommand) -> Objects<u64> {
        match cmd {
            GeoCommand::Op(op) => BPlusTree::objects(op),
            GeoCommand::Genesis(_) => Objects {
                keys: Vec::new(),
                ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
            },
        }
    }
    fn split(
        cmd: &GeoCommand,
        map: &PartitionMap,
    ) -> Result<Vec<(PartitionId, GeoCommand)>, SplitError> {
        match cmd {
            GeoCommand::Op(op) => Ok(BPlusTree::split(op, map)?
                .into_iter()
                .map(|(p, o)| (p, GeoCommand::Op(o)))
                .collect()),
            GeoCommand::Genesis(_) => Ok(vec![(0, cmd.clone())]),
        }
    }
    fn merge(
        cmd: &GeoCommand,
        mut parts: Vec<(PartitionId, OpResult)>,
        map: &PartitionMap,
    ) -> Result<OpResult, MergeError> {
        match cmd {
            GeoCommand::Op(op) => BPlusTree::merge(op, parts, map),
            GeoCommand::Genesis(_) if parts.len() == 1 => Ok(parts.pop().expect("one").1),
            GeoCommand::Genesis(_) => Err(MergeError(format!(
                "{} sub-replies for a genesis",
                parts.len()
            ))),
        }
    }
}

impl StateMachine for GeoService {
    type Undo = GeoUndo;

    /// An unconfigured service: an empty geo tree of one region that places nothing.
    fn new() -> Self {
        let topology = Topology::from_rtt_us(vec!["local".into()], vec![vec![0]])
            .expect("one region is a topology");
        let options = GbTreeOptions {
            order: ORDER_DEFAULT,
            seed: 0,
            value_bytes_max: VALUE_BYTES_DEFAULT,
            optimizer: OptimizerOptions::brute_force(),
        };
        GeoService {
            tree: GeoBTree::new(topology, options).expect("the defaults are valid"),
            configured: false,
            unsafe_write_ordered_by_one_serializer: false,
        }
    }

    /// The keys, as the B+tree's `access` (and an insert writes the tree's shape,
    /// [`SHAPE_OBJECT`]) (`partita_btree::service::{next_access,
    /// prev_access}`): next and prev read every key up to the neighbour this tree holds
    /// (at most `NEIGHBOUR_SPAN_MAX` keys, else everything), a prev with no neighbour
    /// every key down to 0.
    fn access(&self, cmd: &GeoCommand) -> Access {
        match cmd {
            GeoCommand::Genesis(_) => Access::everything(),
            GeoCommand::Op(Op::Next { key }) => {
                next_access(*key, self.tree.next_entry(*key).map(|(n, _)| n))
            }
            GeoCommand::Op(Op::Prev { key }) => {
                prev_access(*key, self.tree.prev_entry(*key).map(|(p, _)| p))
            }
            GeoCommand::Op(op @ Op::Insert { .. }) => {
                let mut a = Access::of(&BPlusTree::objects(op), true);
                a.add(SHAPE_OBJECT, true);
                a
            }
            GeoCommand::Op(op) => Access::of(&BPlusTree::objects(op), op.is_mutation()),
        }
    }

    fn psite(&self, cmd: &GeoCommand, from: usize) -> Option<u64> {
        if !self.configured {
            return None;
        }
        let op = match cmd {
            GeoCommand::Op(op) => self.geo_op(op),
            GeoCommand::Genesis(_) => None,
        };
        // What the tree does not know (refused by check, never ordered) would be
        // ordered with everything.
        let Some(op) = op else {
            return Some(self.all_mask());
        };
        Some(u64::from(self.site(&op, from).mask()))
    }

    fn misplaced(&self, cmd: &GeoCommand, from: usize, dst: u64) -> Option<u64> {
        if !self.configured {
            return None;
        }
        let op = match cmd {
            GeoCommand::Op(op) => self.geo_op(op)?,
            GeoCommand::Genesis(_) => return None,
        };
        if op.is_write() && self.unsafe_write_ordered_by_one_serializer {
            // The planted bug runs writes wherever they were ordered.
            return None;
        }
        // Serializers outside the topology order nothing here.
        let Ok(dst) = Config::from_mask((dst & self.all_mask()) as u32) else {
            return Some(u64::from(self.site(&op, from).mask()));
        };
        match self.tree.deliver_decision(&op, from, dst) {
            crate::Decision::Execute => None,
            crate::Decision::Resubmit(again) => Some(u64::from(again.mask())),
        }
    }

    fn execute_at(&mut self, cmd: &GeoCommand, from: usize) -> OpResult {
        match cmd {
            GeoCommand::Op(op) if self.configured => self.run(op, Some(from)),
            _ => self.execute(cmd),
        }
    }

    fn reconfigure(&mut self) {
        if self.configured {
            self.tree.dop();
        }
    }

    fn execute(&mut self, cmd: &GeoCommand) -> OpResult {
        match cmd {
            GeoCommand::Op(op) => self.run(op, None),
            GeoCommand::Genesis(g) => self.configure(g),
        }
    }

    fn execute_undoable(&mut self, cmd: &GeoCommand) -> (OpResult, GeoUndo) {
        let undo = match cmd {
            GeoCommand::Op(Op::Update { key, .. }) => match self.tree.get(*key) {
                Some(old) => GeoUndo::Value {
                    key: *key,
                    old: old.to_vec(),
                },
                None => GeoUndo::Nothing,
            },
            GeoCommand::Op(Op::Insert { key, .. }) if self.tree.get(*key).is_none() => {
                GeoUndo::Whole(Box::new(self.clone()))
            }
            GeoCommand::Genesis(_) if !self.configured => GeoUndo::Whole(Box::new(self.clone())),
            _ => GeoUndo::Nothing,
        };
        (self.execute(cmd), undo)
    }

    fn undo(&mut self, undo: GeoUndo) {
        match undo {
            GeoUndo::Nothing => {}
            GeoUndo::Value { key, old } => {
                let r = self.tree.apply(&GeoOp::Update { key, value: old });
                assert!(
                    matches!(r, Ok(GeoReply::Old(Some(_)))),
                    "an update's undo finds its key"
                );
            }
            GeoUndo::Whole(before) => *self = *before,
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        partita_types::encode(&ServiceRef {
            configured: self.configured,
            unsafe_write_ordered_by_one_serializer: self.unsafe_write_ordered_by_one_serializer,
            tree: &self.tree,
        })
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let r: ServiceRepr = decode_unbounded(bytes)?;
        if r.tree.value_bytes_max() < VALUE_BYTES_MIN {
            return Err(format!(
                "values of {} bytes cannot hold a u64",
                r.tree.value_bytes_max()
            ));
        }
        if !r.configured && r.unsafe_write_ordered_by_one_serializer {
            return Err("a planted bug in an unconfigured service".into());
        }
        let s = GeoService {
            tree: r.tree,
            configured: r.configured,
            unsafe_write_ordered_by_one_serializer: r.unsafe_write_ordered_by_one_serializer,
        };
        s.invariants();
        Ok(s)
    }

    fn digest(&self) -> u64 {
        let d = self.tree.digest();
        if self.configured {
            d
        } else {
            // Not the digest of a configured tree that happens to look the same.
            d.rotate_left(17) ^ 0x756e_636f_6e66_6967
        }
    }

    fn len(&self) -> u64 {
        self.tree.len()
    }

    fn op_count(cmd: &GeoCommand) -> u64 {
        match cmd {
            GeoCommand::Op(op) => op.btree_ops() as u64,
            GeoCommand::Genesis(_) => 1,
        }
    }

    fn account(cmd: &GeoCommand, _reply: &OpResult, work: &mut ExecutionWork) {
        work.commands += 1;
        work.ops += Self::op_count(cmd);
        let kind = match cmd {
            GeoCommand::Op(op) => WORK_KINDS.iter().position(|k| *k == op.name()),
            GeoCommand::Genesis(_) => None,
        };
        if let Some(k) = kind {
            work.by_kind[k] += 1;
        }
    }
}
