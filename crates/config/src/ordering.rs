//! Which protocol orders a cluster's commands (cluster file `[ordering]`): one typed
//! choice, with the settings of that protocol and no other.
//!
//! ```toml
//! [ordering]
//! protocol = "ring-paxos"       # "ring-paxos", "multi-paxos", "multi-ring",
//!                               # "geopaxos", "geopaxos+" or "epaxos"
//! ring_decision = "acceptor"    # ring-paxos: where an instance is decided, or
//!                               # "coordinator" (paper 001's ring)
//! ```
//!
//! Each protocol has its own settings, written beside `protocol` in the same section:
//!
//! - `"ring-paxos"` (paper 001, the default): `ring_decision`.
//! - `"multi-paxos"`: none.
//! - `"multi-ring"` (Multi-Ring Paxos, paper 002): `ring_protocol` (`"ring-paxos"`, the
//!   default, or `"multi-paxos"`: what each ring runs), `ring_decision` (with Ring
//!   Paxos rings), `m`, `lambda`, `delta_ms` and the rings, `[[ordering.ring]]`.
//! - `"geopaxos+"` (paper 004): the serializers' optimizer and DOPs, and the geo B+tree
//!   the cluster runs (see [`crate::geo`]).
//! - `"epaxos"` (paper 004's leaderless baseline): `keys` (the geo B+tree's keys
//!   present at the start).
//! - `"geopaxos"` (paper 004 §II-B, its starting point): the same serializers with one
//!   serializer per object and no optimizer (GeoPaxos+'s settings but `dop_interval_ms`,
//!   `optimizer` and `placement`; see [`crate::geo`]).
//!
//! A setting of another protocol is refused naming the field (`unknown field `m``), and
//! so is an unknown protocol. Cluster files written before `[ordering]` existed name
//! the protocol in `[cluster]` or have `[multiring]` or `[geopaxos]` sections: they are
//! refused with what to write instead (see `ClusterConfig::validate`).

use partita_consensus::{Protocol, RingDecision};
use partita_types::NodeId;
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::geo::GeoSection;

/// The protocol names `[ordering] protocol` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrderingProtocol {
    RingPaxos,
    MultiPaxos,
    MultiRing,
    GeoPaxos,
    GeoPaxosPlus,
    Epaxos,
}

partita_types::named_choice!(OrderingProtocol, "ordering protocol", {
    OrderingProtocol::RingPaxos => "ring-paxos",
    OrderingProtocol::MultiPaxos => "multi-paxos",
    OrderingProtocol::MultiRing => "multi-ring",
    OrderingProtocol::GeoPaxos => "geopaxos",
    OrderingProtocol::GeoPaxosPlus => "geopaxos+",
    OrderingProtocol::Epaxos => "epaxos",
});

/// `[ordering]` with `protocol = "ring-paxos"`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingPaxosSettings {
    /// Where an instance is decided (unset: `"acceptor"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_decision: Option<RingDecision>,
}

/// `[ordering]` with `protocol = "multi-paxos"`: no settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiPaxosSettings {}

/// Multi-Ring Paxos (paper 002 §V-B, `protocol = "multi-ring"`): several rings, each
/// with its own acceptors and coordinator, merged deterministically at every replica
/// (see `partita_node::multiring`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiringSection {
    /// What each ring runs: Ring Paxos (the default) or Multi-Paxos.
    #[serde(default = "default_ring_protocol")]
    pub ring_protocol: Protocol,
    /// Ring Paxos rings: where an instance is decided (unset: `"acceptor"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_decision: Option<RingDecision>,
    /// `M`: logical instances of each ring per round of the merge.
    #[serde(default = "default_ring_m")]
    pub m: u64,
    /// λ: logical instances per second each ring advances at least (an idle ring's
    /// coordinator makes up the difference with skip instances).
    #[serde(default = "default_ring_lambda")]
    pub lambda: u64,
    /// Δ: how often a ring's coordinator checks its rate, in milliseconds.
    #[serde(default = "default_ring_delta_ms")]
    pub delta_ms: u64,
    #[serde(rename = "ring")]
    pub rings: Vec<RingSection>,
}

/// One ring (`[[ordering.ring]]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RingSection {
    pub id: u32,
    /// Its acceptors, in ring order: nodes with role "acceptor", of no other ring.
    pub acceptors: Vec<NodeId>,
    /// Its initial coordinator (default: its first acceptor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<NodeId>,
    /// The partitions it carries (default: every partition). Replicas of a partition
    /// merge every ring that carries it; a command goes to the ring that carries all
    /// of its partitions with the fewest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<u32>>,
}

fn default_ring_protocol() -> Protocol {
    Protocol::RingPaxos
}
pub(crate) fn default_ring_m() -> u64 {
    1
}
fn default_ring_lambda() -> u64 {
    partita_consensus::multiring::SkipConfig::default().lambda_per_s
}
fn default_ring_delta_ms() -> u64 {
    partita_consensus::multiring::SkipConfig::default().delta_ms
}

impl MultiringSection {
    /// `rings` rings with the default settings.
    pub fn new(rings: Vec<RingSection>) -> MultiringSection {
        MultiringSection {
            ring_protocol: default_ring_protocol(),
            ring_decision: None,
            m: default_ring_m(),
            lambda: default_ring_lambda(),
            delta_ms: default_ring_delta_ms(),
            rings,
        }
    }
}

/// EPaxos (`protocol = "epaxos"`, paper 004's leaderless baseline, see
/// `partita_node::epaxos`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpaxosSection {
    /// Keys `0..keys` present at the start (each its own value), as on GeoPaxos+.
    #[serde(default)]
    pub keys: u64,
    /// A barrier (a command ordered with every other) this often while commands run,
    /// so the ordered time sessions expire by moves. Barriers for checkpoints come
    /// every `[storage] checkpoint_instances` commands.
    #[serde(default = "default_barrier_interval_ms")]
    pub barrier_interval_ms: u64,
    /// A replica's own instances proposed and not committed, at most; commands that
    /// arrive while that many are in flight wait and leave packed into one instance
    /// (up to `[batching] batch_bytes_max`) when a commit frees a place. EPaxos has no
    /// leader whose pipeline `[batching] window_instances_max` would bound, so its
    /// window is its own: the authors' code proposes every batch at once.
    #[serde(default = "default_epaxos_window")]
    pub window_instances_max: usize,
}

fn default_barrier_interval_ms() -> u64 {
    1000
}

fn default_epaxos_window() -> usize {
    1024
}

impl EpaxosSection {
    /// `keys` keys present at the start, the other settings the defaults.
    pub fn with_keys(keys: u64) -> EpaxosSection {
        EpaxosSection {
            keys,
            barrier_interval_ms: default_barrier_interval_ms(),
            window_instances_max: default_epaxos_window(),
        }
    }
}

/// The `[ordering]` section: the protocol and its settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrderingSection {
    RingPaxos(RingPaxosSettings),
    MultiPaxos(MultiPaxosSettings),
    MultiRing(MultiringSection),
    GeoPaxos(GeoSection),
    GeoPaxosPlus(GeoSection),
    Epaxos(EpaxosSection),
}

impl Default for OrderingSection {
    fn default() -> Self {
        OrderingSection::RingPaxos(RingPaxosSettings::default())
    }
}

impl OrderingSection {
    /// The protocol's name.
    pub fn protocol(&self) -> OrderingProtocol {
        match self {
            OrderingSection::RingPaxos(_) => OrderingProtocol::RingPaxos,
            OrderingSection::MultiPaxos(_) => OrderingProtocol::MultiPaxos,
            OrderingSection::MultiRing(_) => OrderingProtocol::MultiRing,
            OrderingSection::GeoPaxos(_) => OrderingProtocol::GeoPaxos,
            OrderingSection::GeoPaxosPlus(_) => OrderingProtocol::GeoPaxosPlus,
            OrderingSection::Epaxos(_) => OrderingProtocol::Epaxos,
        }
    }

    /// One Paxos stream run by `protocol`, with its default settings.
    pub fn paxos(protocol: Protocol) -> OrderingSection {
        match protocol {
            Protocol::RingPaxos => OrderingSection::RingPaxos(RingPaxosSettings::default()),
            Protocol::MultiPaxos => OrderingSection::MultiPaxos(MultiPaxosSettings {}),
        }
    }

    /// The Paxos protocol the cluster's Paxos groups run: the one stream's, the rings'
    /// (Multi-Ring Paxos), or Multi-Paxos (each GeoPaxos serializer is a Multi-Paxos
    /// group; EPaxos runs none).
    pub fn paxos_protocol(&self) -> Protocol {
        match self {
            OrderingSection::RingPaxos(_) => Protocol::RingPaxos,
            OrderingSection::MultiRing(m) => m.ring_protocol,
            OrderingSection::MultiPaxos(_)
            | OrderingSection::GeoPaxos(_)
            | OrderingSection::GeoPaxosPlus(_)
            | OrderingSection::Epaxos(_) => Protocol::MultiPaxos,
        }
    }

    /// Where a Ring Paxos instance is decided, where the cluster file says.
    pub fn ring_decision(&self) -> Option<RingDecision> {
        match self {
            OrderingSection::RingPaxos(s) => s.ring_decision,
            OrderingSection::MultiRing(m) => m.ring_decision,
            _ => None,
        }
    }

    /// Multi-Ring Paxos's settings.
    pub fn multiring(&self) -> Option<&MultiringSection> {
        match self {
            OrderingSection::MultiRing(m) => Some(m),
            _ => None,
        }
    }

    pub fn multiring_mut(&mut self) -> Option<&mut MultiringSection> {
        match self {
            OrderingSection::MultiRing(m) => Some(m),
            _ => None,
        }
    }

    /// GeoPaxos's (or GeoPaxos+'s) settings.
    pub fn geo(&self) -> Option<&GeoSection> {
        match self {
            OrderingSection::GeoPaxos(g) | OrderingSection::GeoPaxosPlus(g) => Some(g),
            _ => None,
        }
    }

    pub fn geo_mut(&mut self) -> Option<&mut GeoSection> {
        match self {
            OrderingSection::GeoPaxos(g) | OrderingSection::GeoPaxosPlus(g) => Some(g),
            _ => None,
        }
    }

    /// EPaxos's settings.
    pub fn epaxos(&self) -> Option<&EpaxosSection> {
        match self {
            OrderingSection::Epaxos(e) => Some(e),
            _ => None,
        }
    }

    /// The keys the geo B+tree holds at the start (GeoPaxos+ and EPaxos; `None` for
    /// every other protocol).
    pub fn geo_keys(&self) -> Option<u64> {
        match self {
            OrderingSection::GeoPaxos(g) | OrderingSection::GeoPaxosPlus(g) => Some(g.keys),
            OrderingSection::Epaxos(e) => Some(e.keys),
            _ => None,
        }
    }

    /// Whether the protocol orders with serializers or EPaxos (paper 004's family:
    /// replicas in regions, clients at their nearest replica).
    pub fn is_geo(&self) -> bool {
        self.geo_keys().is_some()
    }
}

impl Serialize for OrderingSection {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let settings = match self {
            OrderingSection::RingPaxos(x) => toml::Table::try_from(x),
            OrderingSection::MultiPaxos(x) => toml::Table::try_from(x),
            OrderingSection::MultiRing(x) => toml::Table::try_from(x),
            OrderingSection::GeoPaxos(x) => {
                toml::Table::try_from(crate::geo::GeoPaxosSettings::of(x))
            }
            OrderingSection::GeoPaxosPlus(x) => toml::Table::try_from(x),
            OrderingSection::Epaxos(x) => toml::Table::try_from(x),
        }
        .map_err(S::Error::custom)?;
        let mut t = toml::Table::new();
        t.insert(
            "protocol".into(),
            toml::Value::String(self.protocol().to_string()),
        );
        t.extend(settings);
        t.serialize(s)
    }
}

impl<'de> Deserialize<'de> for OrderingSection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        let protocol: OrderingProtocol = match table.remove("protocol") {
            None => {
                return Err(D::Error::custom(format!(
                    "[ordering] needs `protocol` (one of: {})",
                    <OrderingProtocol as partita_types::choice::Choice>::NAMES.join(", ")
                )))
            }
            Some(toml::Value::String(name)) => name
                .parse()
                .map_err(|e: String| D::Error::custom(format!("ordering.protocol: {e}")))?,
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "ordering.protocol: `{other}` is not a protocol name"
                )))
            }
        };
        let rest = toml::Value::Table(table);
        Ok(match protocol {
            OrderingProtocol::RingPaxos => OrderingSection::RingPaxos(settings(protocol, rest)?),
            OrderingProtocol::MultiPaxos => OrderingSection::MultiPaxos(settings(protocol, rest)?),
            OrderingProtocol::MultiRing => OrderingSection::MultiRing(settings(protocol, rest)?),
            OrderingProtocol::GeoPaxos => OrderingSection::GeoPaxos(
                settings::<crate::geo::GeoPaxosSettings, _>(protocol, rest)?.section(),
            ),
            OrderingProtocol::GeoPaxosPlus => {
                OrderingSection::GeoPaxosPlus(settings(protocol, rest)?)
            }
            OrderingProtocol::Epaxos => OrderingSection::Epaxos(settings(protocol, rest)?),
        })
    }
}

/// `protocol`'s settings from what `[ordering]` holds besides `protocol`; an error names
/// the field at fault (`ordering.m: unknown field ...`).
fn settings<T: serde::de::DeserializeOwned, E: serde::de::Error>(
    protocol: OrderingProtocol,
    rest: toml::Value,
) -> Result<T, E> {
    serde_path_to_error::deserialize(rest).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            "ordering".to_string()
        } else {
            format!("ordering.{path}")
        };
        let inner = e.into_inner();
        let hint = if inner.to_string().contains("unknown field") {
            " (a setting of another protocol belongs with that protocol)"
        } else {
            ""
        };
        E::custom(format!(
            "field `{field}`: with protocol = \"{protocol}\": {}{hint}",
            inner.to_string().trim_end()
        ))
    })
}
