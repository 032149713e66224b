//! Typed errors for everything a caller can get wrong when building the model's inputs.
//! Bugs (a configuration naming a replica the topology does not have, statistics for
//! another number of replicas) are not errors: they panic.

use thiserror::Error;

/// Why a topology, a set of statistics, a configuration or optimizer options were
/// refused. Each variant names the offending field or cell.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum GeoError {
    /// The model needs at least one replica.
    #[error("a topology needs at least one replica")]
    NoReplicas,
    /// More replicas than [`crate::REPLICAS_MAX`].
    #[error("{n} replicas; at most {max} are supported")]
    TooManyReplicas { n: usize, max: usize },
    /// `names` and the matrix disagree on the number of replicas, or a row is short.
    #[error("row {row} of the latency matrix has {len} cells; expected {n}")]
    NotSquare { row: usize, len: usize, n: usize },
    /// The matrix is not symmetric: `δ(a, b) != δ(b, a)`.
    #[error("latency matrix is not symmetric: rtt({a},{b}) = {ab} but rtt({b},{a}) = {ba}")]
    Asymmetric {
        a: usize,
        b: usize,
        ab: f64,
        ba: f64,
    },
    /// A replica's latency to itself is not zero.
    #[error("rtt({r},{r}) = {value}; a replica's latency to itself must be 0")]
    NonZeroDiagonal { r: usize, value: f64 },
    /// A latency is negative, not finite, or above what fits in `u32` microseconds.
    #[error("rtt({a},{b}) = {value} ms is not a latency in [0, 4294967] ms")]
    BadLatency { a: usize, b: usize, value: f64 },
    /// Read and write counters of different lengths.
    #[error("{reads} read counters but {writes} write counters")]
    CounterLengths { reads: usize, writes: usize },
    /// θ above 100% (1000 per mille): no replica would ever be hot.
    #[error("hot_theta_permille = {permille}; it must be in 0..=1000")]
    Theta { permille: u32 },
    /// An LRU cache of no entries (or more than the slab can index).
    #[error("cache_entries_max = {entries}; it must be in 1..=4294967294")]
    CacheEntries { entries: usize },
    /// A restored cache's capacity differs from the options' `cache_entries_max`.
    #[error("restored cache holds up to {cache} entries but cache_entries_max is {options:?}")]
    CacheCapacityMismatch {
        cache: usize,
        options: Option<usize>,
    },
    /// A configuration's bitmask is empty or names a replica above `REPLICAS_MAX`.
    #[error("configuration bitmask {mask:#x} is empty or names a replica >= {max}")]
    BadMask { mask: u32, max: usize },
    /// A cache snapshot is inconsistent (more entries than its capacity, a key twice).
    #[error("cache snapshot refused: {0}")]
    CacheSnapshot(&'static str),
    /// An [`crate::ObjectMap`] option out of range (a bound of 0, a range of no
    /// objects), named by its field.
    #[error("{field} = {value}: {why}")]
    ObjectMapOption {
        field: &'static str,
        value: u64,
        why: &'static str,
    },
}
