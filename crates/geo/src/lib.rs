//! partita-geo: the cost model and optimizer of GeoPaxos+ (paper 004, Coelho and
//! Pedone, §III-B to §III-D): which replicas should serialize an object, given where
//! its reads and writes come from and the latencies between the replicas.
//!
//! A pure computation crate: no I/O, no clock, no randomness, no floating point in
//! any decision. Everything is a function of its inputs, so every replica that runs
//! the optimizer on the same replicated counters (the DOP of Algorithm 1, ordered with
//! every other operation) reaches the same configuration.
//!
//! # The model
//!
//! **Replicas and topology.** N replicas (regions), numbered `0..N` ([`Replica`]), at
//! most [`REPLICAS_MAX`] = 16. A [`Topology`] holds their names and δ_{a,b}, the
//! latency between every pair, symmetric with a zero diagonal. **δ is a round-trip
//! time**, stored in whole microseconds: the paper calls it "the latency between
//! replicas", draws it as Fig. 2(a)'s edge weights 150, 70 and 90 ms, reproduces
//! Table I only with δ equal to those weights, and gives the same numbers in §VI-B for
//! its EC2 regions (round trips). Equation 1 is linear in δ, so one-way latencies
//! would halve every cost and move no argmin. [`Topology::paper_three_regions`] is the
//! paper's deployment, indexed as Fig. 2's replicas:
//!
//! | index | Fig. 2 | region | California | Europe | Virginia |
//! |---|---|---|---|---|---|
//! | 0 | A | California | 0 | 150 ms | 70 ms |
//! | 1 | B | Europe | 150 ms | 0 | 90 ms |
//! | 2 | C | Virginia | 70 ms | 90 ms | 0 |
//!
//! **Configurations.** A [`Config`] P_{X,i} is a non-empty set of replicas (a bitmask)
//! that serializes object X with read-one/write-all semantics (§III-A): an operation
//! that only reads X is ordered by any one member, one that writes X by all members.
//! There are Σ_{i=1..N} C(N,i) = 2^N − 1 configurations.
//!
//! **Workload.** [`AccessStats`] counts, per object, r_{X,g} and w_{X,g}: the reads
//! and writes issued by clients of replica g in the current window. The paper resets
//! the counters after computing serializers (§VI-D), so a window is an optimization
//! epoch ([`AccessStats::reset`]); it describes no decay, and none is offered.
//!
//! # Equation 1: the cost of a configuration
//!
//! ```text
//! C_{X,i} = Σ_{g=1..N} [ w_{X,g}·(W_i + δ_g) + r_{X,g}·(R_i + δ_g) ]
//!
//! R_i = 0                                  a read is ordered by one serializer
//! W_i = max{ δ_{k,h} | k, h ∈ P_i }        a write involves them all (0 if |P_i| = 1)
//! δ_g = min{ δ_{g,h} | h ∈ P_i }           reaching the closest serializer (0 if g ∈ P_i)
//! ```
//!
//! The paper's text says "w and r are the number of reads and writes"; Table I settles
//! that w counts writes (e.g. 2400 = 150 · 16 writes for {A,B,C}). [`cost_op_us`]
//! computes it exactly in operation·microseconds (`u128`: counts are `u64`, δ is `u32`
//! µs); [`cost`] gives operation·milliseconds, Table I's unit. Since R_i = 0 it equals
//! W_i · Σ_g w_g + Σ_g (w_g + r_g)·δ_g, which is linear in the counts: multiplying all
//! counts by k multiplies every cost by k, so the best configuration depends only on
//! the proportions L and U of Equations 3 and 4 (which is what justifies the cache).
//!
//! # Equation 2: the best configuration
//!
//! C_{X,best} = min{ C_{X,i} | P_{X,i} ∈ 𝒩 }. [`best`] is brute force over all 2^N − 1
//! configurations, [`best_among`] over the non-empty subsets of a candidate set, both
//! in ascending bitmask order. **Ties** (the paper is silent; Algorithm 1's own
//! comparison is inverted): the configuration with fewer serializers wins, because it
//! involves fewer Paxos groups per write, a cost Equation 1 does not charge; then the
//! smaller bitmask. Statistics with no operation cost 0 everywhere and give `{0}`.
//!
//! # Table I (Fig. 2: reads 10/100/50, writes 10/1/5 at A/B/C)
//!
//! | P_{X,i} | W_i | R_i | δ_A | δ_B | δ_C | C_{X,i} |
//! |---|---|---|---|---|---|---|
//! | {A} | 0 | 0 | 0 | 150 | 70 | 19000 |
//! | {B} | 0 | 0 | 150 | 0 | 90 | 7950 |
//! | {C} | 0 | 0 | 70 | 90 | 0 | 10490 |
//! | {A,B} | 150 | 0 | 0 | 0 | 70 | 6250 |
//! | {A,C} | 70 | 0 | 0 | 90 | 0 | 10210 |
//! | {B,C} | 90 | 0 | 70 | 0 | 0 | 2840 |
//! | {A,B,C} | 150 | 0 | 0 | 0 | 0 | **2400** |
//!
//! Every cell is checked by `tests/paper.rs`. For instance:
//!
//! ```
//! use partita_geo::{best, cost, AccessStats, Config, Topology};
//! let t = Topology::paper_three_regions(); // A, B, C = 0, 1, 2
//! let x = AccessStats::from_counts(vec![10, 100, 50], vec![10, 1, 5]).unwrap();
//! assert_eq!(cost(&x, Config::from_mask(0b001).unwrap(), &t), 19000.0); // {A}
//! assert_eq!(cost(&x, Config::from_mask(0b110).unwrap(), &t), 2840.0);  // {B,C}
//! assert_eq!(best(&x, &t), (Config::all(3), 2400.0));                  // {A,B,C}
//! ```
//!
//! # Heuristics (§III-D)
//!
//! **Hot replicas** ([`hot_replicas`]). Only the subsets of the *hot* replicas are
//! enumerated, 2^|hot| − 1 instead of 2^N − 1; cold replicas still count in Equation 1
//! as clients (through δ_g), they just cannot be serializers. The rule is §VI-D's,
//! the only precise one: replica g is hot iff its operations reach θ times those of
//! the most accessed replica, ops_g ≥ θ · max_h ops_h, with θ = 10%
//! ([`THETA_PAPER_PERMILLE`]). θ is an integer in per mille and the comparison is
//! exact (ops_g · 1000 ≥ θ‰ · max). §III-D's sentence ("whenever the number of
//! operations … is *within* a configurable threshold of the other replica's operations
//! count, configurations where g is serializer are not considered") reads inverted,
//! and its example, which drops A from Fig. 2 (20 operations against B's 101) to go
//! from 7 configurations to 3, needs θ > 20/101 ≈ 19.8%: at θ = 10% A is hot and the
//! heuristic finds {A,B,C} = 2400; at θ ≥ 19.9% it finds {B,C} = 2840, the accuracy
//! the paper says the threshold trades. Both are tests.
//!
//! **LRU cache** ([`LruCache`], [`CacheKey`]). Best configurations are cached under a
//! key made, for every replica g, of
//!
//! ```text
//! L_{X,g} = (w_{X,g} + r_{X,g}) / Σ_h (w_{X,h} + r_{X,h})     normalised load (Eq. 3)
//! U_{X,g} = w_{X,g} / (r_{X,g} + w_{X,g})                    update ratio    (Eq. 4)
//! ```
//!
//! each truncated to two decimals ("we cap the results at two decimal digits") and
//! computed on integers as floor(100·a/b). The key prints as the paper's string, L
//! then U per replica, three digits each without the point: Fig. 2's replica A has
//! L = 20/176 → 0.11 and U = 10/20 → 0.50, "011050", and the whole key is
//! `011050057000031009`. The cache holds at most `entries_max` entries and evicts the
//! least recently used; lookups and insertions are O(1); it counts hits, misses and
//! evictions. Because the key truncates, two workloads with the same key may have
//! different best configurations, and the second then gets the first's (a test shows
//! one: {B,C} at 9040 served where {A,B,C} at 9000 was best). Workloads that are exact
//! multiples of each other always get the right answer.
//!
//! # The optimizer
//!
//! [`Optimizer`] combines them as §VI-D's four strategies ([`OptimizerOptions`]:
//! brute force, hot, LRU, hot + LRU). Per object: no plan when nothing was counted
//! (the object keeps its serializers); else the cache is looked up; on a miss the
//! candidates (all replicas, or the hot ones) are enumerated with Equation 1 and the
//! result cached. A [`Plan`] says which configuration, whether it was computed or
//! cached, the candidates, how many configurations were evaluated (2^|candidates| − 1,
//! 0 on a hit) and the cost when computed; [`OptimizerCounters`] sums them up for an
//! experiment.
//!
//! **A cache makes the optimizer stateful**, and its answers depend on what it has
//! seen: replicas must feed it the same objects in the same order (the DOP walks the
//! changed nodes in a deterministic order), and a replica restored from a checkpoint
//! must restore the cache too ([`LruCache`] serializes with its recency order;
//! [`Optimizer::with_cache`]). The paper does not discuss this.
//!
//! # Choices where the paper is silent
//!
//! - δ is a round-trip time in µs (above); costs are exact integers, f64 only for
//!   display in Table I's unit.
//! - Ties: fewer serializers, then the smaller bitmask.
//! - Hot rule: §VI-D's ops_g ≥ θ · max_h ops_h with "≥" ("reaches a threshold"); with
//!   no operation at all there are no hot replicas and no plan.
//! - Cache key: truncation (not rounding) to hundredths; U = 0 for a replica with no
//!   operations; per-replica L then U in index order (the paper shows one replica's
//!   part only); the topology and the strategy are fixed per optimizer, hence not in
//!   the key; the value is the configuration only, as in the paper (a hit's cost is
//!   not known without one evaluation, which the optimizer does not spend).
//! - Cache size: not given; [`CACHE_ENTRIES_DEFAULT`] = 10^4.
//! - Counters saturate at `u64::MAX`; the window ends when the caller resets them.
//! - Statistics with no operation are skipped (the reading aid's suggestion).
//!
//! # The geo B+tree (§IV, Algorithm 1)
//!
//! [`GeoBTree`] (module `gbtree`) is the paper's replicated B+tree: every node an
//! object with Table II's fields (its serializers `reps`, a `changed` flag, per-replica
//! read and write counters); [`GeoBTree::psite`] names the serializers a request needs
//! (read-one from the closest, write-all, split prediction for INSERT, every replica
//! for the DOP); [`GeoBTree::deliver_decision`] says, identically at every replica,
//! whether a delivered request executes or is re-serialized because a DOP moved its
//! serializers or an unpredicted split needs more; [`GeoBTree::execute`] counts the
//! access on the path from the leaf to the root (included) and applies the request;
//! the DOP ([`GeoBTree::dop`]) gives every changed node the configuration the
//! [`Optimizer`] picks and resets the counters. Algorithm 1's four defects (the root
//! never counted, `changed` never set, the inverted comparison of line 53, "closest to
//! r" evaluated by the delivering replica) are fixed and documented there.
//! `tests/gbtree.rs`: the tree against `BTreeMap` (proptest), psite examples (read
//! from the closest, GET-NEXT's union, split prediction up to the root), the counter
//! walk reaching the root, a DOP on Fig. 2's counters giving {A,B,C}, two trees fed
//! the same requests reaching the same digest, resubmission after a DOP and after an
//! unpredicted split.
//!
//! # Placement as part of the service (the common replica executes)
//!
//! GeoPaxos+ orders; the common replica (`partita_smr`) executes any
//! `partita_service::StateMachine`. What a replica then keeps of the placement is one of
//! two things, both here:
//!
//! - [`ObjectMap`] (module `objects`): the `partita_service::ObjectPlacement` the
//!   replica keeps for a service that does not place its own objects: per object id
//!   (from `StateMachine::access`) its configuration and counts, a home that is a
//!   function of the id alone ([`Home`]), read-one/write-all psite and delivery
//!   decision, the DOP with the optimizer and its cache, bounded sampling of what is
//!   counted, snapshots and digests. Its module documentation states the rules and why
//!   every replica reaches the same placement and verdicts.
//! - [`GeoService`] (module `service`): the geo B+tree as a service that places its own
//!   objects (`"geo-btree"`): clients send the B+tree's commands and get its replies; a
//!   genesis command ([`GeoGenesis`], [`GeoService::genesis`]) configures a replica's
//!   tree before anything is ordered; `psite`, `misplaced`, `execute_at` and
//!   `reconfigure` are the tree's psite, delivery decision, counted execution and DOP.
//!
//! Tests: `tests/objects.rs` (the placement's rules, bounds, snapshots, and a property
//! test: two maps fed the same commands in any interleaving that keeps the order of
//! commands sharing a serializer, with reconfigurations at the same points, end with
//! equal digests), `tests/service.rs` (the service against `GeoReplica` on the same
//! operations, with DOPs and resubmissions: same replies and digest; the genesis;
//! client commands' bytes; refusals; snapshots; reconfiguration).
//!
//! # What is not here
//!
//! Equation 1 ignores the cost of replicating a serializer's decisions in its Paxos
//! group and the learners' synchronization for multi-serializer operations; so does
//! this crate. The serializers themselves (timestamps, Paxos groups, re-serialization)
//! belong to the GeoPaxos+ execution model; this crate gives it the tree's decisions.
//! [`Topology::nearest`] gives the serializer a READ at a replica uses.
//!
//! # Inputs, outputs, invariants
//!
//! Inputs: a [`Topology`] (validated), [`AccessStats`] per object, [`OptimizerOptions`]
//! (validated). Outputs: [`Plan`]s and counters. Invariants, asserted: every plan's
//! configuration is a subset of its candidates and the candidates are the hot
//! replicas when the heuristic is on; evaluations = 2^|candidates| − 1;
//! `calls = skipped + computed + hits`; the LRU's recency list and map agree and
//! never exceed capacity ([`Optimizer::invariants`], [`LruCache::invariants`],
//! [`Topology::invariants`]). Bugs (statistics or configurations for another number of
//! replicas) panic; bad inputs are [`GeoError`]s naming the field.
//!
//! # Tests
//!
//! - `tests/paper.rs`: every cell of Table I; the best is {A,B,C} at 2400 after 7
//!   evaluations; the regions of §VI-B; hot replicas at θ = 10% keep A, and §III-D's
//!   example (7 → 3 configurations, {B,C} at 2840) with θ ≥ 19.9%; the key `011050…`;
//!   a cache hit for a multiple of Fig. 2's workload; a cache hit that is not the
//!   best; empty statistics; option validation.
//! - `tests/properties.rs` (proptest, random topologies of 1 to 6 replicas): brute
//!   force is the minimum over all subsets, with the documented tie-break, and
//!   Equation 1 matches an independent reference; costs are linear in the counts; the
//!   heuristic returns only hot configurations, the cheapest of them, never below
//!   brute force, and equals brute force when every replica is hot; a cache hit for
//!   proportional statistics equals a fresh computation; the same inputs give the same
//!   plans, counters and cache for every strategy, also across a serialized-cache
//!   checkpoint; the LRU matches a list model.
//! - Unit tests in each module: subsets enumeration, matrix validation, counters,
//!   ties, the hot rule's boundary, LRU eviction and serialization.

mod cache;
mod cost;
mod error;
mod gbtree;
mod objects;
mod optimizer;
mod placed;
pub mod replica;
mod service;
mod set;
mod stats;
mod topology;

pub use cache::{CacheCounters, CacheKey, LruCache};
pub use cost::{best, best_among, cost, cost_op_us, hot_replicas, Search, THETA_PAPER_PERMILLE};
pub use error::GeoError;
pub use gbtree::{
    Decision, Delivery, DopReport, GbTreeError, GbTreeOptions, GeoBTree, Node, NodeId, Op, Reply,
    ORDER_DEFAULT, ORDER_MAX, ORDER_MIN, VALUE_BYTES_LIMIT, VALUE_BYTES_MAX_DEFAULT,
};
pub use objects::{
    Home, ObjectMap, ObjectMapCounters, ObjectMapOptions, Placement, COUNTED_OBJECTS_MAX_DEFAULT,
    PLACED_OBJECTS_MAX_DEFAULT,
};
pub use optimizer::{
    Optimizer, OptimizerCounters, OptimizerOptions, Plan, PlanSource, CACHE_ENTRIES_DEFAULT,
};
pub use placed::{
    decode_placed_genesis, Placed, PlacedCommand, PlacedGenesis, PLACED_GENESIS_MAGIC,
};
pub use service::{
    geo_value, map_value, GeoCommand, GeoGenesis, GeoService, GeoUndo, GENESIS_KEYS_MAX,
    GENESIS_MAGIC, SHAPE_OBJECT, VALUE_BYTES_DEFAULT, VALUE_BYTES_MIN,
};
pub use set::{Config, Replica};
pub use stats::AccessStats;
pub use topology::Topology;

/// The most replicas a topology may have. Configurations are `u32` bitmasks, and brute
/// force evaluates 2^N − 1 of them, 65,535 at this bound (the paper measures up to 8).
pub const REPLICAS_MAX: usize = 16;
