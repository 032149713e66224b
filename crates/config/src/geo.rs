//! The serializers' settings (paper 004): GeoPaxos+ (`[ordering] protocol =
//! "geopaxos+"`) and GeoPaxos (`"geopaxos"`, one serializer per object and no
//! optimizer), ordering any service with one serializer per replica instead of one
//! stream (see `partita_node::geo`).
//!
//! ```toml
//! [cluster]
//! service = "geo-btree"       # paper 004's tree (or "kv", "btree", a service of yours)
//!
//! [ordering]
//! protocol = "geopaxos+"      # each serializer is a Multi-Paxos group
//! order = 32                  # geo-btree: most keys per tree node
//! keys = 3000                 # keys 0..keys present at the start
//! value_bytes = 100           # geo-btree: the paper's §VI values
//! dop_interval_ms = 0         # a DOP that often (0: never)
//! optimizer = "hot-lru"       # or "brute-force"
//! placement = "home"          # where objects start: "home", "random" (DBT_b) or
//!                             # "single" (one serializer per object)
//! ```
//!
//! `protocol = "geopaxos"` takes `order`, `keys`, `value_bytes`, `seed` and
//! `barrier_interval_ms` only: its objects stay on one serializer each
//! (`placement = "single"`) and no DOP ever moves them, so `dop_interval_ms`,
//! `optimizer` and `placement` are refused naming the field.
//!
//! Every node is an acceptor and a replica (a serializer's leader sits with its
//! replica), the replicas in the order of their ids hosting serializers 0, 1, …; with
//! `[wan]` the nodes name their regions and the cost model takes the round trips from
//! there. Not with state partitioning, P-SMR, speculation or batchers.
//! `protocol = "epaxos"` runs the same services with EPaxos (its settings: `keys`,
//! `barrier_interval_ms`).

use partita_geo::Placement;
use partita_types::FieldError;
use serde::{Deserialize, Serialize};

/// GeoPaxos+'s settings (beside `protocol` in `[ordering]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoSection {
    #[serde(default = "default_order")]
    pub order: usize,
    #[serde(default)]
    pub keys: u64,
    #[serde(default = "default_value_bytes")]
    pub value_bytes: usize,
    #[serde(default)]
    pub dop_interval_ms: u64,
    #[serde(default = "default_optimizer")]
    pub optimizer: String,
    #[serde(default)]
    pub seed: u64,
    /// When sessions expire, a barrier (a command every serializer orders) this often
    /// while commands run, so the ordered time sessions expire by moves. Barriers for
    /// checkpoints come every `[storage] checkpoint_instances` commands instead.
    #[serde(default = "default_barrier_interval_ms")]
    pub barrier_interval_ms: u64,
    /// Where objects start (`"home"`, `"random"` or `"single"`).
    #[serde(default, with = "placement_name")]
    pub placement: Placement,
}

/// `placement` by its name, as `Placement`'s `FromStr` spells it.
mod placement_name {
    use partita_geo::Placement;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Placement, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&p.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Placement, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// GeoPaxos's settings (`protocol = "geopaxos"`): GeoPaxos+'s without the optimizer's
/// and the placement's, which GeoPaxos fixes ([`GeoPaxosSettings::section`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoPaxosSettings {
    #[serde(default = "default_order")]
    pub order: usize,
    #[serde(default)]
    pub keys: u64,
    #[serde(default = "default_value_bytes")]
    pub value_bytes: usize,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_barrier_interval_ms")]
    pub barrier_interval_ms: u64,
}

impl GeoPaxosSettings {
    /// GeoPaxos as the serializers run it: one serializer per object, never a DOP.
    pub fn section(&self) -> GeoSection {
        GeoSection {
            order: self.order,
            keys: self.keys,
            value_bytes: self.value_bytes,
            dop_interval_ms: 0,
            optimizer: default_optimizer(),
            seed: self.seed,
            barrier_interval_ms: self.barrier_interval_ms,
            placement: Placement::Single,
        }
    }

    /// The settings of `g` that GeoPaxos takes.
    pub fn of(g: &GeoSection) -> GeoPaxosSettings {
        GeoPaxosSettings {
            order: g.order,
            keys: g.keys,
            value_bytes: g.value_bytes,
            seed: g.seed,
            barrier_interval_ms: g.barrier_interval_ms,
        }
    }
}

impl Default for GeoSection {
    fn default() -> Self {
        GeoSection {
            order: default_order(),
            keys: 0,
            value_bytes: default_value_bytes(),
            dop_interval_ms: 0,
            optimizer: default_optimizer(),
            seed: 0,
            barrier_interval_ms: default_barrier_interval_ms(),
            placement: Placement::Home,
        }
    }
}

impl GeoSection {
    /// GeoPaxos's section (one serializer per object, no DOP) with `keys` keys.
    pub fn geopaxos(keys: u64) -> GeoSection {
        GeoPaxosSettings::of(&GeoSection {
            keys,
            ..GeoSection::default()
        })
        .section()
    }
}

fn default_order() -> usize {
    32
}
fn default_value_bytes() -> usize {
    100
}
fn default_barrier_interval_ms() -> u64 {
    1000
}
fn default_optimizer() -> String {
    "hot-lru".into()
}

/// Most keys loaded at the start.
pub const GEO_KEYS_MAX: u64 = 10_000_000;

impl GeoSection {
    /// Checks the section's own fields (the cluster-wide rules are in the loader).
    pub fn validate(&self) -> Result<(), FieldError> {
        let f = |field: &str, m: String| Err(FieldError::new(field, m));
        if !(partita_geo::ORDER_MIN..=partita_geo::ORDER_MAX).contains(&self.order) {
            return f(
                "ordering.order",
                format!(
                    "{} is not between {} and {}",
                    self.order,
                    partita_geo::ORDER_MIN,
                    partita_geo::ORDER_MAX
                ),
            );
        }
        if self.keys > GEO_KEYS_MAX {
            return f(
                "ordering.keys",
                format!("at most {GEO_KEYS_MAX} keys are loaded at the start"),
            );
        }
        if !(8..=partita_geo::VALUE_BYTES_LIMIT).contains(&self.value_bytes) {
            return f(
                "ordering.value_bytes",
                format!(
                    "{} is not between 8 (a client's value is a u64) and {}",
                    self.value_bytes,
                    partita_geo::VALUE_BYTES_LIMIT
                ),
            );
        }
        if !(10..=60_000).contains(&self.barrier_interval_ms) {
            return f(
                "ordering.barrier_interval_ms",
                "must be between 10 and 60000".into(),
            );
        }
        if self.dop_interval_ms > 0 && self.dop_interval_ms < 100 {
            return f(
                "ordering.dop_interval_ms",
                "0 (never) or at least 100 ms".into(),
            );
        }
        if !matches!(self.optimizer.as_str(), "hot-lru" | "brute-force") {
            return f(
                "ordering.optimizer",
                format!(
                    "unknown optimizer `{}` (known: \"hot-lru\", \"brute-force\")",
                    self.optimizer
                ),
            );
        }
        Ok(())
    }
}
