//! The services this workspace builds in, by the name a cluster file gives
//! (`[cluster] service`), as the ordering needs them: under GeoPaxos+ a service that
//! does not place its own objects on serializers runs placed by an object map
//! (`partita_geo::Placed`), which the genesis configures (see
//! `ClusterConfig::genesis`); the geo B+tree (`geo-btree`, paper 004's tree) places
//! its own nodes.

use partita_smr::ServiceFactory;
use std::sync::Arc;

use crate::ClusterConfig;

/// Every built-in service's name (Chirper's replicas come from its `[chirper]`
/// section, elsewhere).
pub const BUILTIN: [&str; 4] = ["btree", "kv", "geo-btree", "chirper"];

/// The commands a service's clients send, by the service's name: the geo B+tree
/// takes the B+tree's commands (its clients are the B+tree's); every other service its
/// own.
pub fn speaks(service: &str) -> &str {
    match service {
        "geo-btree" => "btree",
        other => other,
    }
}

/// The factory of the built-in service `cluster` runs (`None`: not built in here:
/// Chirper's, or a user's own).
pub fn factory(cluster: &ClusterConfig) -> Option<Arc<dyn ServiceFactory>> {
    let placed = cluster.ordering.geo().is_some();
    Some(match (cluster.cluster.service.as_str(), placed) {
        ("btree", false) => partita_smr::service::<partita_btree::BPlusTree>(),
        ("btree", true) => partita_smr::service::<partita_geo::Placed<partita_btree::BPlusTree>>(),
        ("kv", false) => partita_smr::service::<partita_kv::KvStore>(),
        ("kv", true) => partita_smr::service::<partita_geo::Placed<partita_kv::KvStore>>(),
        ("geo-btree", _) => partita_smr::service::<partita_geo::GeoService>(),
        _ => return None,
    })
}
