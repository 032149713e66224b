//! [`Optimizer`]: brute force, hot replicas, the LRU cache, or both heuristics, as
//! compared in §VI-D (Fig. 8).

use crate::cache::{CacheKey, LruCache};
use crate::cost::{best_among, hot_replicas, THETA_PAPER_PERMILLE};
use crate::error::GeoError;
use crate::set::Config;
use crate::stats::AccessStats;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// A cache size when nothing else is known: the paper gives none; 10^4 entries of
/// about 60 bytes each is under a megabyte.
pub const CACHE_ENTRIES_DEFAULT: usize = 10_000;

/// Which of §VI-D's four strategies an [`Optimizer`] runs: brute force is both `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptimizerOptions {
    /// The hot-replica heuristic's θ in per mille (0..=1000), or `None` to enumerate
    /// every replica's subsets.
    pub hot_theta_permille: Option<u32>,
    /// The LRU cache's capacity (at least 1), or `None` for no cache.
    pub cache_entries_max: Option<usize>,
}

impl OptimizerOptions {
    /// (i) Brute force: every non-empty subset of the replicas for every object.
    pub fn brute_force() -> Self {
        OptimizerOptions {
            hot_theta_permille: None,
            cache_entries_max: None,
        }
    }

    /// (ii) Hot replicas with the paper's θ = 10%.
    pub fn hot() -> Self {
        OptimizerOptions {
            hot_theta_permille: Some(THETA_PAPER_PERMILLE),
            cache_entries_max: None,
        }
    }

    /// (iii) The LRU cache in front of brute force.
    pub fn cached(entries_max: usize) -> Self {
        OptimizerOptions {
            hot_theta_permille: None,
            cache_entries_max: Some(entries_max),
        }
    }

    /// (iv) The LRU cache in front of hot replicas with θ = 10%.
    pub fn hot_cached(entries_max: usize) -> Self {
        OptimizerOptions {
            hot_theta_permille: Some(THETA_PAPER_PERMILLE),
            cache_entries_max: Some(entries_max),
        }
    }

    /// A short name for reports: `brute-force`, `hot`, `lru` or `hot+lru`.
    pub fn label(&self) -> &'static str {
        match (self.hot_theta_permille, self.cache_entries_max) {
            (None, None) => "brute-force",
            (Some(_), None) => "hot",
            (None, Some(_)) => "lru",
            (Some(_), Some(_)) => "hot+lru",
        }
    }

    /// Refuses θ above 1000‰ and a cache of no entries, naming the field.
    pub fn validate(&self) -> Result<(), GeoError> {
        if let Some(permille) = self.hot_theta_permille {
            if permille > 1000 {
                return Err(GeoError::Theta { permille });
            }
        }
        if let Some(entries) = self.cache_entries_max {
            LruCache::new(entries)?;
        }
        Ok(())
    }
}

/// Where a [`Plan`]'s configuration came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlanSource {
    /// Computed now by enumerating the subsets of the candidate replicas.
    Computed,
    /// Found in the LRU cache under the workload's [`CacheKey`].
    Cache,
}

/// The optimizer's answer for one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The configuration the object should be serialized by.
    pub config: Config,
    /// Where it came from.
    pub source: PlanSource,
    /// The replicas whose subsets were enumerated: all of them without the hot-replica
    /// heuristic, the hot ones with it; `None` on a cache hit (nothing enumerated).
    pub candidates: Option<Config>,
    /// Configurations evaluated with Equation 1: 2^|candidates| − 1, or 0 on a hit.
    pub evaluations: u64,
    /// The configuration's cost by Equation 1 for these statistics, in
    /// operation·microseconds, when computed; `None` on a cache hit (the cache holds
    /// configurations only, as in the paper; [`crate::cost_op_us`] gives it).
    pub cost_op_us: Option<u128>,
}

/// What an [`Optimizer`] has done since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptimizerCounters {
    /// Calls of [`Optimizer::optimize`].
    pub calls: u64,
    /// Calls for statistics with no operation, which return no plan.
    pub skipped_empty: u64,
    /// Plans computed by enumeration.
    pub computed: u64,
    /// Plans found in the cache.
    pub cache_hits: u64,
    /// Configurations evaluated with Equation 1, over all calls.
    pub evaluations: u64,
}

/// The configuration optimizer of §III-B to §III-D for one topology: given an object's
/// access statistics, the configuration that should serialize it.
///
/// Each call with non-empty statistics, in this order:
/// 1. with a cache, look the workload's [`CacheKey`] up and return the cached
///    configuration on a hit (no evaluation);
/// 2. otherwise take the candidates: every replica, or with the heuristic only the hot
///    ones ([`hot_replicas`]);
/// 3. evaluate Equation 1 on every non-empty subset of the candidates and keep the
///    cheapest ([`best_among`], with its tie-breaking);
/// 4. with a cache, store the result under the key.
///
/// The output is a deterministic function of the options, the topology and the
/// sequence of statistics given since construction (or since the state a
/// [`Optimizer::cache`] snapshot was taken in). Replicas that reconfigure objects
/// from its output must therefore feed it the same objects in the same order, and a
/// replica restored from a checkpoint must restore the cache too
/// ([`Optimizer::with_cache`]); otherwise a hit at one replica and a miss at another
/// can give them different configurations for the same object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Optimizer {
    topology: Topology,
    options: OptimizerOptions,
    cache: Option<LruCache>,
    counters: OptimizerCounters,
}

impl Optimizer {
    /// An optimizer with an empty cache (if any).
    pub fn new(topology: Topology, options: OptimizerOptions) -> Result<Optimizer, GeoError> {
        options.validate()?;
        let cache = options.cache_entries_max.map(LruCache::new).transpose()?;
        Ok(Optimizer {
            topology,
            options,
            cache,
            counters: OptimizerCounters::default(),
        })
    }

    /// An optimizer that continues from a cache saved earlier (a checkpoint). The
    /// cache's capacity must be the options' `cache_entries_max`.
    pub fn with_cache(
        topology: Topology,
        options: OptimizerOptions,
        cache: LruCache,
    ) -> Result<Optimizer, GeoError> {
        let mut o = Optimizer::new(topology, options)?;
        if options.cache_entries_max != Some(cache.entries_max()) {
            return Err(GeoError::CacheCapacityMismatch {
                cache: cache.entries_max(),
                options: options.cache_entries_max,
            });
        }
        cache.invariants();
        o.cache = Some(cache);
        Ok(o)
    }

    /// The best configuration for an object with these statistics, or `None` when they
    /// count no operation (every configuration would cost 0, so the object should keep
    /// the serializers it has).
    ///
    /// # Panics
    /// When `stats` counts a different number of replicas than the topology has.
    pub fn optimize(&mut self, stats: &AccessStats) -> Option<Plan> {
        assert_eq!(
            stats.n(),
            self.topology.n(),
            "statistics for another topology"
        );
        let key = CacheKey::of(stats);
        assert_eq!(key.is_none(), stats.is_empty());
        self.optimize_keyed(key, || stats)
    }

    /// [`Optimizer::optimize`] for statistics whose [`CacheKey`] the caller computed
    /// (`CacheKey::of` them), the statistics themselves asked for only when the plan
    /// is computed (no cache, or a miss): a caller that holds many objects' counters
    /// can compute the keys where the counters are at hand and give the optimizer
    /// the objects in another order, reading an object's counters again only for a
    /// miss. The answer and the counters are those of `optimize`.
    ///
    /// # Panics
    /// When the statistics count a different number of replicas than the topology
    /// has, or (in debug builds) when `key` is not theirs.
    pub fn optimize_keyed<'s>(
        &mut self,
        key: Option<CacheKey>,
        stats: impl FnOnce() -> &'s AccessStats,
    ) -> Option<Plan> {
        self.counters.calls += 1;
        let Some(key) = key else {
            self.counters.skipped_empty += 1;
            return None;
        };
        if let Some(cache) = self.cache.as_mut() {
            if let Some(config) = cache.get(&key) {
                self.counters.cache_hits += 1;
                return Some(Plan {
                    config,
                    source: PlanSource::Cache,
                    candidates: None,
                    evaluations: 0,
                    cost_op_us: None,
                });
            }
        }
        let stats = stats();
        assert_eq!(
            stats.n(),
            self.topology.n(),
            "statistics for another topology"
        );
        debug_assert_eq!(
            CacheKey::of(stats),
            Some(key),
            "the key of these statistics"
        );
        let candidates = match self.options.hot_theta_permille {
            Some(theta) => hot_replicas(stats, theta).expect("statistics are not empty"),
            None => self.topology.all(),
        };
        let search = best_among(stats, &self.topology, candidates);
        assert!(search.config.is_subset_of(candidates));
        if let Some(cache) = self.cache.as_mut() {
            cache.insert(key, search.config);
        }
        self.counters.computed += 1;
        self.counters.evaluations += search.evaluations;
        Some(Plan {
            config: search.config,
            source: PlanSource::Computed,
            candidates: Some(candidates),
            evaluations: search.evaluations,
            cost_op_us: Some(search.cost_op_us),
        })
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The options.
    pub fn options(&self) -> OptimizerOptions {
        self.options
    }

    /// The cache, if the options have one (for its counters, or to checkpoint it).
    pub fn cache(&self) -> Option<&LruCache> {
        self.cache.as_ref()
    }

    /// Calls, hits and evaluations so far.
    pub fn counters(&self) -> OptimizerCounters {
        self.counters
    }

    /// Counters add up; the cache is consistent and present iff the options ask for it.
    pub fn invariants(&self) {
        let c = self.counters;
        assert_eq!(c.calls, c.skipped_empty + c.computed + c.cache_hits);
        assert_eq!(
            self.cache.is_some(),
            self.options.cache_entries_max.is_some()
        );
        if let Some(cache) = &self.cache {
            cache.invariants();
            assert_eq!(Some(cache.entries_max()), self.options.cache_entries_max);
        } else {
            assert_eq!(c.cache_hits, 0);
        }
        self.topology.invariants();
    }
}
