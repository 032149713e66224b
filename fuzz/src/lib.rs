//! What the fuzz targets share: the small clusters their node cores belong to (built
//! as `crates/node/tests/common` builds them), the bank example's service (compiled
//! from `examples/bank/service.rs` itself), and the Chirper members of an S-SMR
//! cluster. Each target is in `fuzz_targets/`; `fuzz/run` runs them; `docs/fuzzing.md`
//! says what they cover and what they found.

use partita_consensus::{BatcherConfig, CoordinatorConfig, LearnerConfig, Membership, Protocol};
use partita_node::{CheckpointConfig, Mode, NodeCore, NodeSetup, UnsafeBugs};
use partita_smr::ServiceFactory;
use partita_types::{NodeId, PartitionLayout, PartitionMap};
use std::sync::Arc;

/// The bank of `examples/bank`, exactly as the example compiles it.
#[path = "../../examples/bank/service.rs"]
pub mod bank;

/// Acceptors of every cluster here; node 1 coordinates first.
pub const ACCEPTORS: [NodeId; 3] = [1, 2, 3];
/// Replicas of every cluster here.
pub const REPLICAS: [NodeId; 2] = [4, 5];

/// Node `id`'s setup in a cluster of acceptors 1–3 and replicas 4–5 of `service`
/// (short timeouts, as the node tests use): nodes up to 3 are acceptors, the others
/// replicas; replica 5 speculates.
pub fn setup(id: NodeId, protocol: Protocol, service: Arc<dyn ServiceFactory>) -> NodeSetup {
    NodeSetup {
        id,
        service,
        session_lease_ms: Some(1000),
        cluster_id: 1,
        mode: Mode::Smr,
        membership: Membership {
            protocol,
            ring_decision: Default::default(),
            acceptors: ACCEPTORS.to_vec(),
            coordinator: 1,
            learners: REPLICAS.to_vec(),
            partitions: Default::default(),
            batchers: Vec::new(),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        },
        acceptor: ACCEPTORS.contains(&id),
        replica: REPLICAS.contains(&id),
        partition: 0,
        batcher: false,
        coordinator_config: CoordinatorConfig {
            election_timeout_ticks: 20,
            suspect_ticks: 12,
            heartbeat_ticks: 5,
            retransmit_ticks: 30,
            ..CoordinatorConfig::default()
        },
        learner_config: LearnerConfig {
            gap_ticks: 5,
            ..LearnerConfig::default()
        },
        batcher_config: BatcherConfig {
            ack_timeout_ticks: 10,
            ..BatcherConfig::default()
        },
        checkpoint: CheckpointConfig {
            // Small, so that a checkpoint is taken within a fuzz input's few instances.
            interval_instances: 4,
            ..CheckpointConfig::default()
        },
        early_replies: id == 5,
        speculative: id == 5,
        psmr: None,
        ordering: partita_node::OrderingSetup::Paxos,
        genesis: Vec::new(),
    }
}

/// The client-server baseline's one server of `service` (node 1, no peers): it
/// executes a command on receipt, so a client's bytes reach the service's decoder and
/// check at once.
pub fn cs_setup(service: Arc<dyn ServiceFactory>) -> NodeSetup {
    NodeSetup {
        mode: Mode::Cs,
        acceptor: false,
        replica: true,
        early_replies: false,
        speculative: false,
        membership: Membership {
            acceptors: vec![1],
            learners: vec![1],
            ..setup(1, Protocol::MultiPaxos, service.clone()).membership
        },
        ..setup(1, Protocol::MultiPaxos, service)
    }
}

/// A node core built fresh (no log, no checkpoint), its start-up outputs dropped, with
/// the planted bugs [`planted`] names.
pub fn node(setup: NodeSetup) -> NodeCore {
    let mut out = Vec::new();
    NodeCore::new(setup, Vec::new(), planted().clone(), &mut out)
}

/// Planted bugs for the controls, from `PARTITA_FUZZ_PLANTED` (the names
/// `UnsafeBugs::enable` takes, comma-separated; read once): a fuzzer that never finds
/// anything proves little until it is seen to find a planted bug (`fuzz/run -c`).
pub fn planted() -> &'static UnsafeBugs {
    static BUGS: std::sync::OnceLock<UnsafeBugs> = std::sync::OnceLock::new();
    BUGS.get_or_init(|| {
        let mut bugs = UnsafeBugs::default();
        let names = std::env::var("PARTITA_FUZZ_PLANTED").unwrap_or_default();
        for name in names.split(',').filter(|n| !n.is_empty()) {
            bugs.enable(name).expect("a planted bug's name");
        }
        bugs
    })
}

/// Partitions of the Chirper cluster: two data partitions and, with DS-SMR, the oracle.
pub fn chirper_layout(partitions: u32) -> PartitionLayout {
    PartitionLayout {
        map: PartitionMap::new(partitions, 1 << 20).expect("a valid map"),
        replicas: (0..partitions)
            .map(|p| vec![4 + 2 * p, 5 + 2 * p])
            .collect(),
    }
}

/// Node `id`'s setup in a DS-SMR Chirper cluster: acceptors 1–3, two data partitions
/// (replicas 4, 5 and 6, 7) and the oracle (8, 9).
pub fn chirper_setup(id: NodeId, protocol: Protocol) -> NodeSetup {
    use partita_dssmr::client::Scheme;
    let layout = chirper_layout(3);
    let mut s = setup(
        id,
        protocol,
        partita_dssmr::replica::factory::<partita_dssmr::chirper::Chirper>(
            Scheme::Dssmr,
            partita_dssmr::StaticMap::Service,
            chirper_users(),
        ),
    );
    s.membership.learners = layout.replicas.concat();
    s.membership.partitions = layout;
    s.replica = id >= 4;
    s.speculative = false;
    s.early_replies = false;
    s
}

/// A small Chirper social graph every member loads (the same at every replica).
pub fn chirper_users() -> partita_dssmr::replica::Initial<partita_dssmr::chirper::User> {
    use partita_dssmr::chirper::{user_id, User};
    Arc::new(|| {
        (0..2)
            .flat_map(|c| (0..3).map(move |i| (user_id(c, i), User::default())))
            .collect()
    })
}

/// The GeoPaxos+ cluster of `geo_replica` and its seeds, as a cluster file says it:
/// paper 004's three nodes (California, Virginia, Europe; each an acceptor, a replica
/// and the first leader of its serializer) with the paper's WAN, and a small geo
/// B+tree (order 4, keys 0..24 placed by range, 16-byte values) so that a few requests
/// split nodes, and a DOP every 100 ms of node 1's clock. Parsed back from its text, so
/// that it is a file `partita` takes.
pub fn geo_cluster() -> partita_config::ClusterConfig {
    let mut c = partita_config::ClusterConfig::paper_geo_local(7100, 1, 24);
    let g = c.ordering.geo_mut().expect("a GeoPaxos+ cluster");
    g.order = 4;
    g.value_bytes = 16;
    g.dop_interval_ms = 100;
    g.seed = 7;
    partita_config::ClusterConfig::parse(&c.to_toml(), "geo.toml").expect("a valid geo cluster")
}

/// Node `id`'s setup in [`geo_cluster`] (nodes 1–3: replica `id - 1` and the leader of
/// serializer `id - 1`).
pub fn geo_setup(id: NodeId) -> NodeSetup {
    let c = geo_cluster();
    let service = partita_config::services::factory(&c).expect("a built-in service");
    c.node_setup(id, service)
}

/// The Multi-Ring Paxos cluster of `checkpoint_multiring` and its seeds, as a cluster
/// file says it: `default_local`'s acceptors 1–3 (ring 1, node 1 coordinating) and
/// replicas 4–5, a second ring of acceptors 6–8, `M` = 2, the B+tree, a checkpoint
/// every 4 instances, sessions without leases. Parsed back from its text.
pub fn multiring_cluster() -> partita_config::ClusterConfig {
    let mut c = partita_config::ClusterConfig::default_local(7100, 1)
        .with_multiring(2, 2)
        .expect("two rings");
    c.cluster.service = "btree".into();
    c.storage.checkpoint_instances = 4;
    // Sessions that never expire open implicitly (the seeds' clients send at once).
    c.sessions.lease_ms = 0;
    partita_config::ClusterConfig::parse(&c.to_toml(), "multiring.toml")
        .expect("a valid Multi-Ring Paxos cluster")
}

/// Node `id`'s setup in [`multiring_cluster`].
pub fn multiring_setup(id: NodeId) -> NodeSetup {
    multiring_cluster().node_setup(id, partita_smr::service::<partita_btree::BPlusTree>())
}

/// `data` with a correct checksum trailer (its last 4 bytes: the CRC32C of the rest, as
/// checkpoints end), when that differs from `data`: so that a target reaches the
/// decoders behind the checksum, as a peer or a bug could hand over a checkpoint whose
/// checksum holds and whose body is wrong.
pub fn resealed(data: &[u8]) -> Option<Vec<u8>> {
    let body = data.len().checked_sub(4)?;
    let mut sealed = data.to_vec();
    let crc = crc32c::crc32c(&sealed[..body]);
    sealed[body..].copy_from_slice(&crc.to_le_bytes());
    (sealed != data).then_some(sealed)
}
