//! [`ObjectMap`]: GeoPaxos+'s placement of any service's objects on serializers (paper
//! 004 §III), the [`ObjectPlacement`] a replica keeps for a service that does not place
//! its own objects ([`partita_service::StateMachine::psite`] answers `None`). The
//! objects are the ids [`partita_service::StateMachine::access`] names, each read or
//! written, or `everything`. Serializer sets are `u64` bitmasks, bit `i` for replica
//! `i`'s serializer, replicas numbered `0..n` in the cluster's replica order (the
//! [`Topology`]'s order).
//!
//! Per object the map keeps its [`Config`] (the serializers that order commands on it,
//! with read-one/write-all semantics) and its [`AccessStats`] (reads and writes by
//! origin replica since the last reconfiguration). All of it is replicated state: a
//! replica calls [`ObjectMap::record`] for every command it executes and
//! [`ObjectMap::reconfigure`] at every reconfiguration (the DOP, ordered with every
//! command), checkpoints the map with the service ([`ObjectMap::snapshot`]) and
//! compares digests.
//!
//! # Why every replica reaches the same placement
//!
//! Commands that share no serializer execute in different orders at different
//! replicas, and the placement decides whether a command runs or is resubmitted, so
//! nothing a command sees may depend on that order:
//!
//! - **Configurations change only at a reconfiguration**, and a reconfiguration is
//!   ordered by every serializer, so every command is on the same side of it at every
//!   replica. Between two reconfigurations, [`ObjectMap::psite`] and
//!   [`ObjectMap::misplaced`] read configurations only, which are then the same
//!   everywhere, whatever order the commands in between ran in.
//! - **An object never placed has a home that is a function of its id alone**
//!   ([`Home`]), never of which object was seen first. The map stores an object only
//!   while its configuration differs from its home or while it has counts, so that
//!   memory stays bounded by what was accessed since the last reconfiguration plus what
//!   moved; after a reconfiguration, an object whose best configuration is its home
//!   again is dropped.
//! - **Counting commutes.** [`ObjectMap::record`] adds to counters (saturating), and
//!   which objects get counted when the sample is full (below) depends on the set of
//!   objects accessed in the window, not on the order they came in.
//! - **The reconfiguration is deterministic**: it visits counted objects in ascending
//!   id order (a `BTreeMap`), asks the [`Optimizer`] (exact integer costs, no floating
//!   point in any decision), whose LRU cache makes answers depend on the order it sees
//!   workloads in and is therefore replicated state, in the snapshot and the digest.
//!
//! # The delivery decision, and why every replica reaches the same verdict
//!
//! [`ObjectMap::misplaced`] lets a command ordered by `dst` run when `dst` holds, for
//! every object it only reads, at least one of the object's serializers, and for every
//! object it writes, all of them (read-one/write-all, §III-A); otherwise it answers
//! `Some(psite)` on the current placement, and the command's origin submits it again
//! there. Commands touching an object share one of its serializers with every
//! reconfiguration (ordered by all of them), so every replica delivers a command on the
//! same side of every reconfiguration of every object it touches, and then reads the
//! same configurations: the verdict is the same everywhere. A resubmission always names
//! a serializer `dst` lacks (asserted): a read object none of whose serializers ordered
//! it adds one, a written object with a serializer missing adds it.
//!
//! # Stability
//!
//! A move is not free: every command in flight on a moved object was ordered by the
//! old serializers and is submitted again (a wide-area round trip or more, and under
//! load a queue that grows). An object accessed evenly from several regions (the KV
//! store's store-wide revision, a hot key) has configurations whose costs differ by
//! the noise of one window's counts, and re-placing it at every reconfiguration would
//! send every command on it round again. So a counted object moves only when the
//! optimizer's configuration costs less than its current one by more than an eighth
//! under this window's counts ([`worth_moving`]; the paper is silent on this), or when
//! it only drops serializers at no extra cost. The verdict is a function of the counts
//! and the current configuration, which every replica holds alike.
//!
//! # psite
//!
//! [`ObjectMap::psite`] for a command submitted at replica `from`: every serializer
//! when it touches `everything`; otherwise the union over its objects of, for an object
//! only read, the one serializer of its configuration nearest to `from` (`from` itself
//! when it is a member, else by the topology's round trips, ties to the lowest index,
//! [`Topology::nearest`]), and for an object written, all its serializers. A command
//! that touches no object is ordered by `from`'s serializer alone (it conflicts with
//! nothing, and an empty `dst` orders nothing).
//!
//! # Homes
//!
//! [`Home::Every`] is the default: every serializer. Reads, the common case, are then
//! ordered locally from the first command on, at every replica, and no replica is
//! favoured before anything is known; writes pay write-all across every serializer
//! until a reconfiguration moves the objects written, and the first one moves every
//! object whose accesses say so. It is also what the geo B+tree gives the nodes every
//! client traverses (its inner nodes), and an object that is only read from everywhere
//! stays at home and costs no memory. [`Home::Hashed`] (one serializer by a mix of the
//! id) makes first writes single-serializer but most reads remote; [`Home::Random`] is
//! the paper's DBT_b (uniform over the 2^n − 1 configurations, from a seed and the
//! id); [`Home::Range`] puts ids `0..objects` on the replicas by range, as the geo
//! tree's leaves start (the B+tree's object ids are its keys).
//!
//! # Bounds
//!
//! - **Counted objects** ([`ObjectMapOptions::counted_objects_max`]): an object at home
//!   is counted only while it is among the `counted_objects_max` accessed objects of the
//!   window with the smallest rank (a fixed bijective mix of the id): bottom-k sampling.
//!   When a new object arrives at a full sample, it enters if its rank is below the
//!   largest there, which leaves (its counts forgotten); otherwise it is not counted.
//!   The sample at a reconfiguration is then the `counted_objects_max` smallest ranks
//!   of the set of objects accessed, each with all its accesses (an object in the final
//!   sample was in the sample of every prefix it was accessed in), whatever the order:
//!   a hard bound that does not break agreement. A first-come bound would (two replicas
//!   running two commands on different objects in opposite orders would keep different
//!   ones). Objects placed away from home are always counted (they hold an entry
//!   anyway, and must be able to come back).
//! - **Placed objects** ([`ObjectMapOptions::placed_objects_max`]): enforced at each
//!   reconfiguration, where every replica holds the same map: beyond the bound, the
//!   placed objects least recently counted go home first (ties: the largest rank first).
//! - Hence the map holds at most `counted_objects_max + placed_objects_max` objects, each
//!   an id, a configuration, an epoch and 2n counters (about 100 bytes with n = 3, so the
//!   defaults come to about 110 MB at worst; the optimizer's cache is bounded by its
//!   `cache_entries_max`).
//!
//! # Invariants ([`ObjectMap::invariants`])
//!
//! Every stored object is placed away from home or counted; a placed configuration is
//! not the object's home and names only replicas of the topology; counters are for n
//! replicas and count something; the sample is exactly the counted objects at home, at
//! most `counted_objects_max` of them; at most `placed_objects_max` objects are placed;
//! no object was touched after the current epoch; the optimizer's own invariants.

use crate::cache::LruCache;
use crate::cost::cost_op_us;
use crate::error::GeoError;
use crate::gbtree::{random_config, splitmix64, Fnv};
use crate::optimizer::{Optimizer, OptimizerOptions, CACHE_ENTRIES_DEFAULT};
use crate::set::{Config, Replica};
use crate::stats::AccessStats;
use crate::topology::Topology;
use partita_service::{Access, ObjectPlacement};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

/// Objects counted per window at most by default (see the module's Bounds).
pub const COUNTED_OBJECTS_MAX_DEFAULT: usize = 100_000;
/// Objects placed away from their home at most by default.
pub const PLACED_OBJECTS_MAX_DEFAULT: usize = 1_000_000;

/// Where a cluster's objects start (cluster file `[ordering] placement`): the choice
/// between GeoPaxos+'s default, paper 004's random assignment (DBT_b) and GeoPaxos's
/// one serializer per object. For the geo B+tree it places the tree's nodes
/// ([`crate::GeoGenesis::tree`]); for any other service it is the [`Home`] of its
/// objects ([`Placement::home`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// GeoPaxos+'s start: the geo B+tree's leaves by key range, its inner nodes on
    /// every serializer; any other service's objects on every serializer
    /// ([`Home::Every`]), until a DOP moves them.
    #[default]
    Home,
    /// Every object on a configuration drawn uniformly among the 2^n − 1 from the
    /// seed and its id (paper 004 §VI-A's DBT_b, "a random assignment of
    /// serializers").
    Random,
    /// GeoPaxos (paper 004 §II-B): one serializer per object, for good. The geo
    /// B+tree's nodes by the key range of their first key; any other service's ids
    /// `0..keys` by range, other ids by a hash of the id ([`Home::Range`]; with no
    /// keys loaded, [`Home::Hashed`]).
    Single,
}

partita_types::named_choice!(Placement, "placement", {
    Placement::Home => "home",
    Placement::Random => "random",
    Placement::Single => "single",
});

impl Placement {
    /// The home of a service's objects (other than the geo B+tree's) under this
    /// placement, with `keys` ids loaded at the start and `seed` for random draws.
    pub fn home(self, keys: u64, seed: u64) -> Home {
        match self {
            Placement::Home => Home::Every,
            Placement::Random => Home::Random { seed },
            Placement::Single if keys > 0 => Home::Range { objects: keys },
            Placement::Single => Home::Hashed,
        }
    }
}

/// Where an object that was never placed lives: a function of its id alone (see the
/// module documentation for why, and why [`Home::Every`] is the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Home {
    /// Every serializer.
    #[default]
    Every,
    /// One serializer, `mix(id) mod n`.
    Hashed,
    /// A configuration drawn from `seed` and the id, uniform over the 2^n − 1 (the
    /// paper's DBT_b, "a random assignment of serializers").
    Random { seed: u64 },
    /// Ids `0..objects` by range, `⌊id · n / objects⌋`, as the geo tree's leaves start;
    /// other ids as [`Home::Hashed`].
    Range { objects: u64 },
}

impl Home {
    /// The home of object `id` among `n` replicas.
    ///
    /// # Panics
    /// When `n` is 0 or above [`crate::REPLICAS_MAX`].
    pub fn config(self, id: u64, n: usize) -> Config {
        match self {
            Home::Every => Config::all(n),
            Home::Hashed => hashed(id, n),
            Home::Random { seed } => random_config(seed, id, n),
            Home::Range { objects } if id < objects => {
                let r = u128::from(id) * n as u128 / u128::from(objects);
                Config::single(r as usize)
            }
            Home::Range { .. } => hashed(id, n),
        }
    }
}

fn hashed(id: u64, n: usize) -> Config {
    Config::single((splitmix64(id) % n as u64) as usize)
}

/// An object's rank in the counting sample: a bijective mix of its id (distinct ids,
/// distinct ranks), so that the sample is spread over the id space.
fn rank(id: u64) -> u64 {
    splitmix64(id)
}

/// How an [`ObjectMap`] places and counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMapOptions {
    /// Where objects never placed live.
    pub home: Home,
    /// The reconfiguration's strategy (§VI-D: brute force, hot replicas, LRU cache).
    pub optimizer: OptimizerOptions,
    /// Most objects at home counted in one window (at least 1).
    pub counted_objects_max: usize,
    /// Most objects placed away from home (at least 1).
    pub placed_objects_max: usize,
}

impl Default for ObjectMapOptions {
    /// Every serializer as home, hot replicas with the LRU cache (the paper's best
    /// strategy, as GeoPaxos+'s tree uses by default), the default bounds.
    fn default() -> ObjectMapOptions {
        ObjectMapOptions {
            home: Home::Every,
            optimizer: OptimizerOptions::hot_cached(CACHE_ENTRIES_DEFAULT),
            counted_objects_max: COUNTED_OBJECTS_MAX_DEFAULT,
            placed_objects_max: PLACED_OBJECTS_MAX_DEFAULT,
        }
    }
}

impl ObjectMapOptions {
    /// Refuses a bound of 0, a range home of no objects and bad optimizer options,
    /// naming the field.
    pub fn validate(&self) -> Result<(), GeoError> {
        let zero = |field: &'static str| GeoError::ObjectMapOption {
            field,
            value: 0,
            why: "it must be at least 1",
        };
        if self.counted_objects_max == 0 {
            return Err(zero("counted_objects_max"));
        }
        if self.placed_objects_max == 0 {
            return Err(zero("placed_objects_max"));
        }
        if self.home == (Home::Range { objects: 0 }) {
            return Err(zero("home.objects"));
        }
        self.optimizer.validate()
    }
}

/// What an [`ObjectMap`] did, for status. Not replicated state: `uncounted` and
/// `dropped` depend on the order commands ran in (the sample's final contents do not),
/// so they are neither in the snapshot nor in the digest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMapCounters {
    /// Reconfigurations run.
    pub reconfigurations: u64,
    /// Objects whose configuration changed at a reconfiguration.
    pub moved: u64,
    /// Objects the optimizer would have moved for a gain too small to be worth it
    /// ([`worth_moving`]), kept where they were.
    #[serde(default)]
    pub kept: u64,
    /// Of those, objects that went back home (and left the map).
    pub returned_home: u64,
    /// Placed objects sent home because more than `placed_objects_max` were placed.
    pub evicted: u64,
    /// Accesses not counted because the sample was full of smaller ranks.
    pub uncounted: u64,
    /// Counted objects that left the sample for an object of smaller rank.
    pub dropped: u64,
    /// Commands that touch everything (not counted on any object).
    pub everything: u64,
}

/// Whether an object whose current configuration costs `current` (Equation 1, this
/// window's counts) moves to the optimizer's configuration costing `planned`: only for
/// a gain of more than an eighth (see "Stability" above). A configuration that only
/// drops serializers at no extra cost is taken as well (writes get cheaper later).
pub fn worth_moving(current: u128, planned: u128) -> bool {
    planned.saturating_mul(8) < current.saturating_mul(7)
}

/// One stored object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Object {
    /// Its configuration when it is not its home.
    placed: Option<Config>,
    /// Its accesses since the last reconfiguration, if any were counted.
    stats: Option<AccessStats>,
    /// The last epoch (reconfigurations run before) in which it was counted.
    touched_epoch: u64,
}

/// The placement of a service's objects (see the module documentation).
#[derive(Clone, Debug)]
pub struct ObjectMap {
    optimizer: Optimizer,
    options: ObjectMapOptions,
    /// Reconfigurations run.
    epoch: u64,
    objects: BTreeMap<u64, Object>,
    /// The counted objects at home, by (rank, id): the sample.
    sampled: BTreeSet<(u64, u64)>,
    /// Objects with `placed` set.
    placed_len: usize,
    counters: ObjectMapCounters,
}

/// The snapshot's form, borrowed (field for field as [`MapRepr`]).
#[derive(Serialize)]
struct MapRef<'a> {
    topology: &'a Topology,
    options: &'a ObjectMapOptions,
    epoch: u64,
    objects: Vec<(u64, &'a Object)>,
    cache: Option<&'a LruCache>,
}

#[derive(Deserialize)]
struct MapRepr {
    topology: Topology,
    options: ObjectMapOptions,
    epoch: u64,
    objects: Vec<(u64, Object)>,
    cache: Option<LruCache>,
}

impl ObjectMap {
    /// An empty map (every object at home) over `topology`.
    pub fn new(topology: Topology, options: ObjectMapOptions) -> Result<ObjectMap, GeoError> {
        options.validate()?;
        let m = ObjectMap {
            optimizer: Optimizer::new(topology, options.optimizer)?,
            options,
            epoch: 0,
            objects: BTreeMap::new(),
            sampled: BTreeSet::new(),
            placed_len: 0,
            counters: ObjectMapCounters::default(),
        };
        m.invariants();
        Ok(m)
    }

    /// The number of replicas (serializers) n.
    pub fn n(&self) -> usize {
        self.optimizer.topology().n()
    }

    pub fn topology(&self) -> &Topology {
        self.optimizer.topology()
    }

    pub fn options(&self) -> ObjectMapOptions {
        self.options
    }

    /// The reconfiguration's optimizer (its counters and cache).
    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    /// Reconfigurations run so far.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn counters(&self) -> ObjectMapCounters {
        self.counters
    }

    /// Where object `id` lives when it was never placed.
    pub fn home_of(&self, id: u64) -> Config {
        self.options.home.config(id, self.n())
    }

    /// Object `id`'s serializers now.
    pub fn config_of(&self, id: u64) -> Config {
        match self.objects.get(&id).and_then(|o| o.placed) {
            Some(c) => c,
            None => self.home_of(id),
        }
    }

    /// Object `id`'s accesses counted since the last reconfiguration, if any.
    pub fn stats_of(&self, id: u64) -> Option<&AccessStats> {
        self.objects.get(&id).and_then(|o| o.stats.as_ref())
    }

    /// Objects placed away from home.
    pub fn placed_len(&self) -> usize {
        self.placed_len
    }

    /// Objects counted in this window.
    pub fn counted_len(&self) -> usize {
        self.sampled.len()
            + self
                .objects
                .values()
                .filter(|o| o.placed.is_some() && o.stats.is_some())
                .count()
    }

    /// Objects stored: placed away from home, or counted.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    fn all_mask(&self) -> u64 {
        u64::from(Config::all(self.n()).mask())
    }

    fn check_from(&self, from: Replica) {
        assert!(
            from < self.n(),
            "replica {from} outside the {}-replica topology",
            self.n()
        );
    }

    /// The member of `config` a read from `from` is ordered by: `from` when it is one,
    /// else the nearest (ties to the lowest index).
    fn read_serializer(&self, from: Replica, config: Config) -> Replica {
        if config.contains(from) {
            return from;
        }
        self.topology().nearest(from, config).0
    }

    /// The serializers that must order a command touching `access` submitted at
    /// replica `from` (see the module documentation).
    ///
    /// # Panics
    /// When `from` is not a replica of the topology.
    pub fn psite(&self, access: &Access, from: Replica) -> u64 {
        self.check_from(from);
        if access.everything {
            return self.all_mask();
        }
        let mut dst = 0u64;
        for &(id, write) in &access.objects {
            let c = self.config_of(id);
            dst |= if write {
                u64::from(c.mask())
            } else {
                1u64 << self.read_serializer(from, c)
            };
        }
        if dst == 0 {
            dst = 1u64 << from;
        }
        assert!(dst & !self.all_mask() == 0, "psite within the topology");
        dst
    }

    /// The delivery decision (read-one/write-all): `Some(psite)` when `dst` lacks, for
    /// an object read, every one of its serializers, or, for an object written, any of
    /// them (every serializer for a command that touches everything); `None` when the
    /// command may run.
    ///
    /// # Panics
    /// When `from` is not a replica of the topology.
    pub fn misplaced(&self, access: &Access, from: Replica, dst: u64) -> Option<u64> {
        self.check_from(from);
        let covered = if access.everything {
            dst & self.all_mask() == self.all_mask()
        } else {
            access.objects.iter().all(|&(id, write)| {
                let m = u64::from(self.config_of(id).mask());
                if write {
                    m & !dst == 0
                } else {
                    m & dst != 0
                }
            })
        };
        if covered {
            return None;
        }
        let again = self.psite(access, from);
        assert!(
            again & !dst != 0,
            "a resubmission to {again:#b} adds no serializer to {dst:#b}"
        );
        Some(again)
    }

    /// Counts a command that ran, submitted at `from`: one read or write of each object
    /// it touches (nothing for a command that touches everything: it is ordered by every
    /// serializer wherever its objects live).
    ///
    /// # Panics
    /// When `from` is not a replica of the topology.
    pub fn record(&mut self, access: &Access, from: Replica) {
        self.check_from(from);
        if access.everything {
            self.counters.everything += 1;
            return;
        }
        for &(id, write) in &access.objects {
            self.count(id, write, from);
        }
    }

    fn count(&mut self, id: u64, write: bool, from: Replica) {
        let n = self.n();
        let epoch = self.epoch;
        let add = |s: &mut AccessStats| {
            if write {
                s.record_write(from);
            } else {
                s.record_read(from);
            }
        };
        if let Some(o) = self.objects.get_mut(&id) {
            // Placed, or already in the sample: always counted.
            add(o.stats.get_or_insert_with(|| AccessStats::new(n)));
            o.touched_epoch = epoch;
            return;
        }
        let r = rank(id);
        if self.sampled.len() >= self.options.counted_objects_max {
            let &(top, top_id) = self.sampled.last().expect("a full sample is not empty");
            assert_ne!(
                top, r,
                "ranks are a bijection of ids, and {id} is not sampled"
            );
            if r > top {
                self.counters.uncounted += 1;
                return;
            }
            self.sampled.pop_last();
            let gone = self
                .objects
                .remove(&top_id)
                .expect("sampled objects are stored");
            assert!(gone.placed.is_none(), "only objects at home are sampled");
            self.counters.dropped += 1;
        }
        let mut stats = AccessStats::new(n);
        add(&mut stats);
        self.sampled.insert((r, id));
        self.objects.insert(
            id,
            Object {
                placed: None,
                stats: Some(stats),
                touched_epoch: epoch,
            },
        );
        assert!(self.sampled.len() <= self.options.counted_objects_max);
    }

    /// A reconfiguration (the DOP): every counted object, in ascending id order, gets
    /// the configuration the optimizer picks from its counts (with the cache, as the
    /// geo tree's DOP), its counts are reset, objects whose configuration is their home
    /// leave the map, and beyond `placed_objects_max` the least recently counted placed
    /// objects go home.
    pub fn reconfigure(&mut self) {
        let n = self.n();
        let home = self.options.home;
        let epoch = self.epoch;
        let optimizer = &mut self.optimizer;
        let counters = &mut self.counters;
        for (&id, o) in self.objects.iter_mut() {
            let Some(stats) = o.stats.take() else {
                continue;
            };
            let plan = optimizer
                .optimize(&stats)
                .expect("a counted object counts at least one access");
            assert!(plan.config.span() <= n, "a plan within the topology");
            let current = o.placed.unwrap_or_else(|| home.config(id, n));
            let topology = optimizer.topology();
            let (now, then) = (
                cost_op_us(&stats, current, topology),
                cost_op_us(&stats, plan.config, topology),
            );
            let shrinks = plan.config.is_subset_of(current) && then <= now;
            let config = match shrinks || worth_moving(now, then) {
                true => plan.config,
                false => {
                    counters.kept += u64::from(plan.config != current);
                    current
                }
            };
            let placed = (config != home.config(id, n)).then_some(config);
            if placed != o.placed {
                counters.moved += 1;
                if placed.is_none() {
                    counters.returned_home += 1;
                }
            }
            o.placed = placed;
            assert_eq!(o.touched_epoch, epoch, "counted in this window");
        }
        self.objects.retain(|_, o| o.placed.is_some());
        self.sampled.clear();
        self.placed_len = self.objects.len();
        if self.placed_len > self.options.placed_objects_max {
            let mut by_age: Vec<(u64, Reverse<u64>, u64)> = self
                .objects
                .iter()
                .map(|(&id, o)| (o.touched_epoch, Reverse(rank(id)), id))
                .collect();
            by_age.sort_unstable();
            let excess = self.placed_len - self.options.placed_objects_max;
            for &(_, _, id) in &by_age[..excess] {
                self.objects.remove(&id);
            }
            self.counters.evicted += excess as u64;
            self.placed_len = self.objects.len();
        }
        self.epoch += 1;
        self.counters.reconfigurations += 1;
        assert!(self.placed_len <= self.options.placed_objects_max);
        assert!(self.objects.values().all(|o| o.stats.is_none()));
    }

    /// The whole map as bytes (the project's codec): topology, options, epoch, every
    /// stored object in id order, and the optimizer's cache in recency order. A
    /// function of the map alone.
    pub fn snapshot(&self) -> Vec<u8> {
        partita_types::encode(&MapRef {
            topology: self.topology(),
            options: &self.options,
            epoch: self.epoch,
            objects: self.objects.iter().map(|(&id, o)| (id, o)).collect(),
            cache: self.optimizer.cache(),
        })
    }

    /// Replaces the map with the one a snapshot describes, which must have been taken
    /// with this map's topology and options (a checkpoint of another configuration is
    /// refused); damaged bytes are an error, and the map is unchanged after one.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<(), String> {
        let r: MapRepr = partita_types::decode(bytes).map_err(|e| e.to_string())?;
        if &r.topology != self.topology() {
            return Err("the snapshot's topology is not this map's".into());
        }
        if r.options != self.options {
            return Err(format!(
                "the snapshot's options {:?} are not this map's {:?}",
                r.options, self.options
            ));
        }
        let n = self.n();
        let optimizer = match r.cache {
            Some(c) => Optimizer::with_cache(r.topology, r.options.optimizer, c),
            None if r.options.optimizer.cache_entries_max.is_some() => {
                return Err("the optimizer has a cache but the snapshot holds none".into())
            }
            None => Optimizer::new(r.topology, r.options.optimizer),
        }
        .map_err(|e| e.to_string())?;
        if let Some(cache) = optimizer.cache() {
            if cache.entries().any(|(key, _)| key.n() != n) {
                return Err("a cache key for another number of replicas".into());
            }
        }
        let mut objects = BTreeMap::new();
        let mut sampled = BTreeSet::new();
        let mut placed_len = 0usize;
        let mut last: Option<u64> = None;
        for (id, o) in r.objects {
            let what = |why: &str| format!("object {id}: {why}");
            if last.is_some_and(|l| l >= id) {
                return Err(what("ids not strictly ascending"));
            }
            last = Some(id);
            if o.touched_epoch > r.epoch {
                return Err(what("touched after the current epoch"));
            }
            match (o.placed, &o.stats) {
                (None, None) => return Err(what("neither placed nor counted")),
                (Some(c), _) if c.span() > n || c == self.options.home.config(id, n) => {
                    return Err(what("placed at home or outside the topology"))
                }
                (Some(_), _) => placed_len += 1,
                (None, Some(_)) => {
                    sampled.insert((rank(id), id));
                }
            }
            if let Some(s) = &o.stats {
                if s.n() != n || s.is_empty() {
                    return Err(what("counters for another topology, or counting nothing"));
                }
                if o.touched_epoch != r.epoch {
                    return Err(what("counted in an earlier window"));
                }
            }
            objects.insert(id, o);
        }
        if sampled.len() > self.options.counted_objects_max {
            return Err(format!("{} objects counted at home", sampled.len()));
        }
        if placed_len > self.options.placed_objects_max {
            return Err(format!("{placed_len} objects placed"));
        }
        *self = ObjectMap {
            optimizer,
            options: self.options,
            epoch: r.epoch,
            objects,
            sampled,
            placed_len,
            counters: ObjectMapCounters::default(),
        };
        self.invariants();
        Ok(())
    }

    /// A digest (FNV-1a) of the options, the epoch, every stored object in id order
    /// (configuration, last epoch counted, counters) and the optimizer's cache in
    /// recency order: equal placements, equal digests.
    pub fn digest(&self) -> u64 {
        let mut h = Fnv::new();
        h.bytes(&partita_types::encode(&self.options));
        h.word(self.n() as u64);
        h.word(self.epoch);
        h.word(self.objects.len() as u64);
        for (&id, o) in &self.objects {
            h.word(id);
            h.word(o.placed.map_or(0, |c| u64::from(c.mask())));
            h.word(o.touched_epoch);
            match &o.stats {
                Some(s) => {
                    h.word(1);
                    s.read_counts().iter().for_each(|&c| h.word(c));
                    s.write_counts().iter().for_each(|&c| h.word(c));
                }
                None => h.word(0),
            }
        }
        if let Some(cache) = self.optimizer.cache() {
            for (key, config) in cache.entries() {
                for g in 0..key.n() {
                    h.word(
                        u64::from(key.load_hundredths(g)) << 8
                            | u64::from(key.update_hundredths(g)),
                    );
                }
                h.word(u64::from(config.mask()));
            }
        }
        h.finish()
    }

    /// The module documentation's invariants; panics on the first violation.
    pub fn invariants(&self) {
        let n = self.n();
        let mut placed = 0usize;
        let mut sampled = 0usize;
        for (&id, o) in &self.objects {
            assert!(
                o.placed.is_some() || o.stats.is_some(),
                "object {id} stored neither placed nor counted"
            );
            if let Some(c) = o.placed {
                placed += 1;
                assert!(c.span() <= n, "object {id} placed outside the topology");
                assert_ne!(c, self.home_of(id), "object {id} placed at home");
            } else {
                sampled += 1;
                assert!(
                    self.sampled.contains(&(rank(id), id)),
                    "object {id} counted at home but not in the sample"
                );
            }
            if let Some(s) = &o.stats {
                assert_eq!(s.n(), n, "object {id} counted for another topology");
                assert!(!s.is_empty(), "object {id} counted nothing");
                assert_eq!(o.touched_epoch, self.epoch, "object {id} counted earlier");
            }
            assert!(o.touched_epoch <= self.epoch);
        }
        assert_eq!(
            sampled,
            self.sampled.len(),
            "the sample is the objects at home"
        );
        assert!(self.sampled.len() <= self.options.counted_objects_max);
        assert_eq!(placed, self.placed_len);
        assert!(self.placed_len <= self.options.placed_objects_max);
        self.optimizer.invariants();
    }
}

impl ObjectPlacement for ObjectMap {
    fn psite(&self, access: &Access, from: usize) -> u64 {
        ObjectMap::psite(self, access, from)
    }
    fn misplaced(&self, access: &Access, from: usize, dst: u64) -> Option<u64> {
        ObjectMap::misplaced(self, access, from, dst)
    }
    fn record(&mut self, access: &Access, from: usize) {
        ObjectMap::record(self, access, from)
    }
    fn reconfigure(&mut self) {
        ObjectMap::reconfigure(self)
    }
    fn snapshot(&self) -> Vec<u8> {
        ObjectMap::snapshot(self)
    }
    fn restore(&mut self, bytes: &[u8]) -> Result<(), String> {
        ObjectMap::restore(self, bytes)
    }
    fn digest(&self) -> u64 {
        ObjectMap::digest(self)
    }
    fn len(&self) -> usize {
        ObjectMap::len(self)
    }
}
