//! The cluster file: who plays which role, where it listens, which ordering protocol,
//! durability and batching. TOML, strictly parsed: an unknown or malformed field fails
//! at start with its name.
//!
//! ```toml
//! [cluster]
//! id = 7311                 # written into every WAL header; a foreign data dir is refused
//! service = "btree"         # the replicated service: "btree", "kv", or your own
//! mode = "smr"              # "smr" (replicated) or "cs" (one unreplicated server)
//! durability = "fsync"      # or "memory" (experiments; printed beside every result)
//! coordinator = 1
//!
//! [ordering]               # optional; the default is this (see `ordering`)
//! protocol = "ring-paxos"    # "multi-paxos", "multi-ring", "geopaxos+", "epaxos", ...
//! ring_decision = "acceptor" # Ring Paxos: decided where a majority of votes meets, or
//!                            # "coordinator" (paper 001's ring; see partita_consensus)
//!
//! [batching]
//! batch_bytes_max = 8192
//! batch_delay_ms = 1
//! window_instances_max = 16
//! value_interval_ms = 0      # coordinator: a value that is not full waits this long
//!                            # after the previous one (0: off)
//! batcher_interval_ms = 0    # batchers: a batch that is not full waits this long
//!                            # after the previous one (0: Nagle's rule alone)
//!
//! [storage]                  # optional, these are the defaults
//! checkpoint_instances = 50000   # replicas checkpoint every this many instances; 0 = never
//! wal_segment_bytes_max = 67108864   # acceptors' WAL segments; truncation frees whole ones
//! wal_preallocate_bytes = 1048576    # zeros written ahead of the records (fsync; 0: off)
//!
//! [sessions]               # optional
//! lease_ms = 60000           # a client idle this long is forgotten (0: never)
//!
//! [execution]              # optional; the default is sequential (see `execution`)
//! model = "psmr"             # "sequential", "speculative" (Ring Paxos proposals run
//!                            # before the decision), "psmr", "opt-psmr", "ssmr", "dssmr"
//! threads = 2                # P-SMR (paper 002): worker threads per replica
//! key_max = 4294967295       # P-SMR: the key space 0..=key_max the threads split
//! spin_us = 25               # P-SMR: how long idle worker threads spin before sleeping
//! # early_replies = true     # speculative: reply at once, confirm once decided
//!
//! [partitioning]           # optional (paper 001 §III-C): the B+tree cut into key ranges
//! partitions = 1             # equal ranges over 0..key_space; each has its own replicas
//! key_space = 4294967296     # the last partition also takes every key above
//!
//! [[node]]
//! id = 1
//! addr = "127.0.0.1:7101"   # ip:port it binds and peers dial; off 127.0.0.0/8 only with [tls]
//! roles = ["acceptor"]       # "acceptor", "replica", "batcher", "server" (cs mode)
//! # partition = 0            # replicas of a partitioned cluster: which partition
//! # etcd_addr = "127.0.0.1:2379"  # replicas of a kv cluster: serve etcd's v3 API here
//! # region = "Virginia"      # with a [wan] section: where the node is (every node)
//!
//! [wan]                    # optional: regions and an emulated WAN (see `wan`)
//! preset = "paper"           # California, Virginia, Europe (RTT 70/90/150 ms), or
//!                            # regions = [...] and a symmetric rtt_ms = [[...], ...]
//! clients = ["Europe"]       # optional: client i is in clients[i % len]
//!
//! [multicast]              # optional: Ring Paxos's Phase 2A as IP multicast (see
//! group = "239.77.0.1"       # `multicast`); needs [tls] insecure = true and node
//! port = 7700                # addresses off loopback
//! ```
//!
//! A node with role `"batcher"` (smr mode only) batches the client commands it receives
//! while it does not lead into messages to the leader (`partita_consensus::Batcher`,
//! with the cluster's `batch_bytes_max`). Alone, it is a standalone batcher: no WAL, no
//! checkpoints; with `"acceptor"` or `"replica"` it is co-located. Clients spread over
//! the batchers (see `Membership::client_entry`).

use partita_consensus::{
    BatcherConfig, CoordinatorConfig, LearnerConfig, Membership, Protocol, RingDecision,
};
use partita_smr::ThreadLayout;
pub use partita_types::{Durability, Mode};
use partita_types::{FieldError, NodeId, PartitionId, PartitionLayout, PartitionMap};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;

pub mod execution;
pub mod geo;
pub mod matrix;
pub mod multicast;
pub mod ordering;
pub mod services;
pub mod tls;
pub mod wan;
pub use execution::{
    DssmrSettings, ExecutionModel, ExecutionSection, PsmrSettings, SpeculativeSettings,
    PSMR_SPIN_US_DEFAULT, PSMR_SPIN_US_MAX,
};
pub use geo::GeoSection;
pub use ordering::{
    EpaxosSection, MultiPaxosSettings, MultiringSection, OrderingProtocol, OrderingSection,
    RingPaxosSettings, RingSection,
};
pub use tls::{TlsSection, Transport};
pub use wan::{Region, Wan, WanSection};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Acceptor,
    Replica,
    Server,
    /// Batches client commands to the leader (smr mode).
    Batcher,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    pub id: u64,
    /// The replicated service (`"btree"`, `"kv"`, or a user's own): every node must
    /// run it (a node started with another refuses to start).
    #[serde(default = "default_service")]
    pub service: String,
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// Written before `[ordering]` existed: refused, with what to write instead.
    #[serde(default, rename = "protocol", skip_serializing)]
    pub legacy_protocol: Option<toml::Value>,
    /// Likewise (now `[ordering] ring_decision`).
    #[serde(default, rename = "ring_decision", skip_serializing)]
    pub legacy_ring_decision: Option<toml::Value>,
    #[serde(default = "default_durability")]
    pub durability: Durability,
    #[serde(default)]
    pub coordinator: Option<NodeId>,
    /// Milliseconds per core tick.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
}

/// etcd's API (cluster file `[etcd]`, optional): settings of the gateways that serve it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSection {
    /// etcd's `--auto-compaction-mode`: `periodic` (keep `retention` of time) or
    /// `revision` (keep the last `retention` revisions).
    #[serde(default = "default_compaction_mode")]
    pub auto_compaction_mode: String,
    /// etcd's `--auto-compaction-retention`: `0` (the default) never compacts; in
    /// periodic mode a duration (`90s`, `30m`, `1h`; a plain number is hours, as
    /// etcd's), in revision mode a number of revisions.
    #[serde(default = "default_compaction_retention")]
    pub auto_compaction_retention: String,
}

impl Default for EtcdSection {
    fn default() -> Self {
        EtcdSection {
            auto_compaction_mode: default_compaction_mode(),
            auto_compaction_retention: default_compaction_retention(),
        }
    }
}

fn default_compaction_mode() -> String {
    "periodic".into()
}

fn default_compaction_retention() -> String {
    "0".into()
}

/// What the gateways compact on their own (`[etcd] auto_compaction_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoCompaction {
    Off,
    /// Keep this much time of history.
    Periodic(std::time::Duration),
    /// Keep this many revisions.
    Revisions(u64),
}

impl EtcdSection {
    pub fn is_default(&self) -> bool {
        self.auto_compaction_mode == default_compaction_mode()
            && self.auto_compaction_retention == default_compaction_retention()
    }

    /// The auto-compaction these settings ask for; a bad value is an error naming the
    /// field.
    pub fn auto_compaction(&self) -> Result<AutoCompaction, FieldError> {
        let r = self.auto_compaction_retention.trim();
        let bad = |m: String| FieldError::new("etcd.auto_compaction_retention", m);
        match self.auto_compaction_mode.as_str() {
            "periodic" => {
                let (digits, unit) =
                    r.split_at(r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len()));
                let n: u64 = digits.parse().map_err(|_| {
                    bad(format!(
                        "`{r}` is not a duration (a number and s, m or h; a plain number is hours)"
                    ))
                })?;
                let secs = match unit {
                    "" | "h" => n.checked_mul(3600),
                    "m" => n.checked_mul(60),
                    "s" => Some(n),
                    other => {
                        return Err(bad(format!(
                            "`{r}`: unknown unit `{other}` (s, m or h; a plain number is hours)"
                        )))
                    }
                }
                .ok_or_else(|| bad(format!("`{r}` is too long")))?;
                Ok(match secs {
                    0 => AutoCompaction::Off,
                    s => AutoCompaction::Periodic(std::time::Duration::from_secs(s)),
                })
            }
            "revision" => {
                let n: u64 = r
                    .parse()
                    .map_err(|_| bad(format!("`{r}` is not a number of revisions")))?;
                Ok(match n {
                    0 => AutoCompaction::Off,
                    n => AutoCompaction::Revisions(n),
                })
            }
            other => Err(FieldError::new(
                "etcd.auto_compaction_mode",
                format!("`{other}` is not a compaction mode (periodic or revision)"),
            )),
        }
    }
}

/// Client sessions (cluster file `[sessions]`, optional).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsSection {
    /// A client without a command for this long (of the leader's clock, as ordered
    /// with the commands) is forgotten with its cached reply: the reply cache holds
    /// only the clients of the last lease. Its later commands are refused with
    /// "session expired" (their outcome unknown to the client, never wrong). 0: never
    /// (the cache then grows with every client ever seen; for tests).
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
}

impl Default for SessionsSection {
    fn default() -> Self {
        SessionsSection {
            lease_ms: default_lease_ms(),
        }
    }
}

impl SessionsSection {
    pub fn is_default(&self) -> bool {
        *self == SessionsSection::default()
    }

    /// The lease as the replicas take it (`None`: never expire).
    pub fn lease(&self) -> Option<u64> {
        (self.lease_ms > 0).then_some(self.lease_ms)
    }
}

fn default_lease_ms() -> u64 {
    60_000
}

/// The node process's own bounds (cluster file `[runtime]`, optional).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeSection {
    /// Events from connections (peer messages, client requests) a node queues before
    /// its connections wait (back-pressure through TCP).
    #[serde(default = "default_inbox_events")]
    pub inbox_events_max: usize,
}

impl RuntimeSection {
    pub fn is_default(&self) -> bool {
        *self == RuntimeSection::default()
    }
}

impl Default for RuntimeSection {
    fn default() -> Self {
        RuntimeSection {
            inbox_events_max: default_inbox_events(),
        }
    }
}

fn default_inbox_events() -> usize {
    16_384
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchingSection {
    #[serde(default = "default_batch_bytes")]
    pub batch_bytes_max: usize,
    #[serde(default = "default_batch_delay")]
    pub batch_delay_ms: u64,
    #[serde(default = "default_window")]
    pub window_instances_max: usize,
    /// The coordinator: a value that is not full is proposed no sooner than this long
    /// after the previous new value (`CoordinatorConfig::value_interval_ticks`).
    #[serde(default)]
    pub value_interval_ms: u64,
    /// Batchers: a batch that is not full leaves no sooner than this long after the
    /// batcher's previous one (`BatcherConfig::min_interval_ticks`).
    #[serde(default)]
    pub batcher_interval_ms: u64,
}

impl Default for BatchingSection {
    fn default() -> Self {
        BatchingSection {
            batch_bytes_max: default_batch_bytes(),
            batch_delay_ms: default_batch_delay(),
            window_instances_max: default_window(),
            value_interval_ms: 0,
            batcher_interval_ms: 0,
        }
    }
}

/// Checkpoints and logs on disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSection {
    /// A replica checkpoints (to `DIR/node-N/checkpoint/`) every this many executed
    /// instances, and acceptors truncate their logs below what a majority of replicas
    /// checkpointed. 0: never (logs then grow without bound).
    #[serde(default = "default_checkpoint_instances")]
    pub checkpoint_instances: u64,
    /// Size of an acceptor's WAL segment; truncation deletes whole segments.
    #[serde(default = "default_wal_segment_bytes")]
    pub wal_segment_bytes_max: u64,
    /// With fsync: the active WAL segment is extended with written zeros this many
    /// bytes at a time, so that syncs inside the extension change no file size (no
    /// file-system journal commit per sync). 0: off.
    #[serde(default = "default_wal_preallocate_bytes")]
    pub wal_preallocate_bytes: u64,
}

impl Default for StorageSection {
    fn default() -> Self {
        StorageSection {
            checkpoint_instances: default_checkpoint_instances(),
            wal_segment_bytes_max: default_wal_segment_bytes(),
            wal_preallocate_bytes: default_wal_preallocate_bytes(),
        }
    }
}

fn default_checkpoint_instances() -> u64 {
    partita_node::CheckpointConfig::default().interval_instances
}
fn default_wal_segment_bytes() -> u64 {
    partita_types::WAL_SEGMENT_BYTES_MAX_DEFAULT
}
fn default_wal_preallocate_bytes() -> u64 {
    partita_types::WAL_PREALLOCATE_BYTES_DEFAULT
}

/// The largest integer a cluster file holds (TOML's integers are 64-bit signed).
pub const INT_MAX: u64 = i64::MAX as u64;

/// `n` as the value of `field`, refused if a cluster file cannot hold it.
fn fits_in_file(field: &str, n: u64) -> Result<(), FieldError> {
    if n > INT_MAX {
        return Err(FieldError::new(
            field,
            format!("must be at most {INT_MAX} (the largest integer a cluster file holds)"),
        ));
    }
    Ok(())
}

/// State partitioning (paper 001 §III-C): the key space `0..key_space` cut into
/// `partitions` equal ranges, each replicated by the replicas that name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitioningSection {
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    #[serde(default = "default_key_space")]
    pub key_space: u64,
}

impl Default for PartitioningSection {
    fn default() -> Self {
        PartitioningSection {
            partitions: default_partitions(),
            key_space: default_key_space(),
        }
    }
}

impl PartitioningSection {
    fn is_default(&self) -> bool {
        *self == PartitioningSection::default()
    }
}

fn default_partitions() -> u32 {
    1
}
fn default_key_space() -> u64 {
    1 << 32
}

/// Chirper's social graph (paper 003 §6, cluster file `[chirper]`, with
/// `service = "chirper"`): the users, their communities and who follows whom, which
/// every replica loads, and where users start. Chirper runs on S-SMR or DS-SMR
/// (`[execution] model = "ssmr"` or `"dssmr"`; under DS-SMR the last partition is the
/// oracle's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChirperSection {
    #[serde(default = "default_chirper_users")]
    pub users: u32,
    #[serde(default = "default_chirper_communities")]
    pub communities: u32,
    #[serde(default = "default_chirper_mean_followers")]
    pub mean_followers: u32,
    /// Percent of followers from the user's own community.
    #[serde(default = "default_chirper_p_local")]
    pub p_local_percent: u32,
    #[serde(default = "default_chirper_seed")]
    pub seed: u64,
    /// Where users start (DS-SMR) and stay (S-SMR's static map), and where a new one
    /// is created: `"service"` (Chirper's own placement, by community: an optimised
    /// static map, the default) or `"hashed"` (users hashed to partitions, knowing
    /// nothing of who follows whom, as the paper's runs start). Every node and client
    /// of a cluster reads the same file, so they all agree.
    #[serde(default = "default_chirper_placement")]
    pub placement: String,
}

fn default_chirper_placement() -> String {
    "service".into()
}
fn default_chirper_users() -> u32 {
    1000
}
fn default_chirper_communities() -> u32 {
    16
}
fn default_chirper_mean_followers() -> u32 {
    8
}
fn default_chirper_p_local() -> u32 {
    99
}
fn default_chirper_seed() -> u64 {
    1
}

impl Default for ChirperSection {
    fn default() -> Self {
        ChirperSection {
            users: default_chirper_users(),
            communities: default_chirper_communities(),
            mean_followers: default_chirper_mean_followers(),
            p_local_percent: default_chirper_p_local(),
            seed: default_chirper_seed(),
            placement: default_chirper_placement(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    pub id: NodeId,
    pub addr: String,
    pub roles: Vec<Role>,
    /// The partition a replica replicates (partitioned clusters only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<u32>,
    /// Where this replica serves etcd's v3 gRPC API (`partita-etcd`): an ip:port on
    /// loopback. Only replicas of a `service = "kv"` cluster that is unpartitioned
    /// or runs S-SMR/DS-SMR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_addr: Option<String>,
    /// The node's region: one of `[wan]`'s, required on every node when the cluster
    /// file has a `[wan]` section, refused without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// A node that joins a running cluster (`partita member add`): it is not one of
    /// the initial replicas or acceptors, and nobody sends it anything until the change
    /// that adds it is ordered. A `replica`, an `acceptor` or both, of an unpartitioned
    /// cluster.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join: bool,
}

impl NodeSection {
    /// Replica `id` at `addr` that joins a running cluster (`join = true`; added with
    /// `partita member add`).
    pub fn joining_replica(id: NodeId, addr: String) -> NodeSection {
        NodeSection {
            id,
            addr,
            roles: vec![Role::Replica],
            partition: None,
            etcd_addr: None,
            region: None,
            join: true,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub cluster: ClusterSection,
    #[serde(default)]
    pub batching: BatchingSection,
    #[serde(default)]
    pub storage: StorageSection,
    /// Optional; left out of the written file while it holds the defaults.
    #[serde(default, skip_serializing_if = "ExecutionSection::is_default")]
    pub execution: ExecutionSection,
    /// Optional; left out of the written file while it holds the defaults.
    #[serde(default, skip_serializing_if = "PartitioningSection::is_default")]
    pub partitioning: PartitioningSection,
    /// Optional; left out of the written file while it holds the defaults.
    #[serde(default, skip_serializing_if = "RuntimeSection::is_default")]
    pub runtime: RuntimeSection,
    /// Optional; left out of the written file while it holds the defaults.
    #[serde(default, skip_serializing_if = "SessionsSection::is_default")]
    pub sessions: SessionsSection,
    /// Optional; left out of the written file while it holds the defaults.
    #[serde(default, skip_serializing_if = "EtcdSection::is_default")]
    pub etcd: EtcdSection,
    /// Which protocol orders commands, with its settings (see [`ordering`]); absent:
    /// Ring Paxos.
    #[serde(default)]
    pub ordering: OrderingSection,
    /// Written before `[ordering]` existed: refused, with what to write instead.
    #[serde(default, rename = "multiring", skip_serializing)]
    pub legacy_multiring: Option<toml::Value>,
    /// Chirper's social graph (paper 003) for `service = "chirper"`; absent for other
    /// services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chirper: Option<ChirperSection>,
    /// Written before `[execution] model` existed: refused, with what to write instead.
    #[serde(default, rename = "dssmr", skip_serializing)]
    pub legacy_dssmr: Option<toml::Value>,
    /// Written before `[ordering]` existed: refused, with what to write instead.
    #[serde(default, rename = "geopaxos", skip_serializing)]
    pub legacy_geopaxos: Option<toml::Value>,
    /// Regions and the emulated WAN (see [`wan`]); absent: no delay anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wan: Option<WanSection>,
    /// IP multicast for Ring Paxos's Phase 2A (see [`multicast`]); absent: TCP only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multicast: Option<multicast::MulticastSection>,
    /// Transport security (see [`tls`]); absent: plain TCP, on loopback only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSection>,
    #[serde(rename = "node")]
    pub nodes: Vec<NodeSection>,
}

/// The service a cluster file that names none replicates.
pub const DEFAULT_SERVICE: &str = "btree";

fn default_service() -> String {
    DEFAULT_SERVICE.to_string()
}
fn default_mode() -> Mode {
    Mode::Smr
}
fn default_durability() -> Durability {
    Durability::Fsync
}
fn default_tick_ms() -> u64 {
    1
}
// The batching defaults are the cores' own (one place each); a tick is a millisecond at
// the default `tick_ms`.
fn default_batch_bytes() -> usize {
    CoordinatorConfig::default().batch_bytes_max
}
fn default_batch_delay() -> u64 {
    CoordinatorConfig::default().batch_delay_ticks
}
fn default_window() -> usize {
    CoordinatorConfig::default().window_instances_max
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read cluster file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cluster file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("cluster file {path}: field `{field}`: {message}")]
    Field {
        path: String,
        field: String,
        message: String,
    },
}

impl ClusterConfig {
    pub fn load(path: &Path) -> Result<ClusterConfig, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: p.clone(),
            source,
        })?;
        let mut cfg = Self::parse(&text, &p)?;
        // `[tls]` paths are relative to the file; absolute from here on, so that a copy
        // of the file written elsewhere (`partita up`'s data directory) names the same.
        if let Some(t) = &mut cfg.tls {
            let dir = path.parent().unwrap_or(Path::new("."));
            let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
            t.resolve_paths(&dir);
        }
        Ok(cfg)
    }

    pub fn parse(text: &str, path: &str) -> Result<ClusterConfig, ConfigError> {
        let cfg: ClusterConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string(),
        })?;
        cfg.validate()
            .map_err(|FieldError { field, message }| ConfigError::Field {
                path: path.into(),
                field,
                message,
            })?;
        Ok(cfg)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("cluster config serializes")
    }

    fn validate(&self) -> Result<(), FieldError> {
        let f = |field: &str, m: String| Err(FieldError::new(field, m));
        if self.nodes.is_empty() {
            return f("node", "at least one [[node]] is required".into());
        }
        let mut ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.nodes.len() {
            return f("node.id", "node ids must be unique".into());
        }
        if ids.first() == Some(&0) {
            return f(
                "node.id",
                "node ids start at 1 (0 stands for no node: nobody owns ballot zero)".into(),
            );
        }
        for n in &self.nodes {
            match n.addr.parse::<SocketAddr>() {
                // Off loopback only with a [tls] section (TLS, or plain TCP said on
                // purpose with `insecure = true`). 0.0.0.0 passes here: the node's
                // own check refuses it with plain TCP before it binds.
                Ok(a) if a.ip().is_loopback() || a.ip().is_unspecified() || self.tls.is_some() => {}
                Ok(a) => {
                    return f(
                        "node.addr",
                        format!(
                            "node {}: {a} is outside 127.0.0.0/8, and plain TCP may only be used \
                             on loopback: add a [tls] section (`partita certs --out DIR \
                             --cluster FILE` writes one), or `insecure = true` under [tls] for \
                             plain TCP on purpose",
                            n.id
                        ),
                    )
                }
                // A name: resolved by whoever connects, each time.
                Err(_) => match name_and_port(&n.addr) {
                    Ok((host, _)) if host == "localhost" || self.tls.is_some() => {}
                    Ok((host, _)) => {
                        return f(
                            "node.addr",
                            format!(
                                "node {}: the name `{host}` may resolve outside 127.0.0.0/8, \
                                 and plain TCP may only be used on loopback: add a [tls] \
                                 section (`partita certs --out DIR --cluster FILE` writes \
                                 one), or `insecure = true` under [tls] for plain TCP on \
                                 purpose",
                                n.id
                            ),
                        )
                    }
                    Err(e) => {
                        return f(
                            "node.addr",
                            format!(
                                "node {}: `{}` is neither ip:port nor name:port ({e})",
                                n.id, n.addr
                            ),
                        )
                    }
                },
            }
            if n.roles.is_empty() {
                return f("node.roles", format!("node {} has no roles", n.id));
            }
            if n.join {
                if n.roles
                    .iter()
                    .any(|r| !matches!(r, Role::Replica | Role::Acceptor))
                {
                    return f(
                        "node.join",
                        format!(
                            "node {}: only replicas and acceptors join a running cluster \
                             (roles = [\"replica\"], [\"acceptor\"] or both); batchers \
                             are fixed by the file",
                            n.id
                        ),
                    );
                }
                if let Err(why) = self.member_changes() {
                    return f("node.join", format!("node {}: {why}", n.id));
                }
                if n.roles.contains(&Role::Acceptor) {
                    if let Err(why) = self.acceptor_changes() {
                        return f("node.join", format!("node {}: {why}", n.id));
                    }
                }
            }
        }
        if !self
            .nodes
            .iter()
            .any(|n| !n.join && n.roles.contains(&Role::Replica))
            && self.cluster.mode == Mode::Smr
            && self.nodes.iter().any(|n| n.join)
        {
            return f(
                "node.join",
                "a cluster needs at least one initial replica (one without `join`)".into(),
            );
        }
        self.validate_etcd_addrs()?;
        self.etcd.auto_compaction()?;
        self.validate_wan()?;
        if let Some(t) = &self.tls {
            let ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
            t.validate(&ids)?;
        }
        self.validate_multicast()?;
        let svc = &self.cluster.service;
        if svc.is_empty()
            || svc.len() > 64
            || !svc
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return f(
                "cluster.service",
                format!("`{svc}` is not a service name (1 to 64 of a-z, 0-9, - and _)"),
            );
        }
        if self.sessions.lease_ms != 0
            && !(100..=7 * 24 * 3_600_000).contains(&self.sessions.lease_ms)
        {
            return f(
                "sessions.lease_ms",
                "must be 0 (never expire) or between 100 and 604800000 (a week)".into(),
            );
        }
        if !(16..=1 << 20).contains(&self.runtime.inbox_events_max) {
            return f(
                "runtime.inbox_events_max",
                "must be between 16 and 1048576".into(),
            );
        }
        if self.cluster.tick_ms == 0 || self.cluster.tick_ms > 1000 {
            return f("cluster.tick_ms", "must be between 1 and 1000".into());
        }
        if self.batching.batch_bytes_max < 64 || self.batching.batch_bytes_max > 16 << 20 {
            return f(
                "batching.batch_bytes_max",
                "must be between 64 and 16777216".into(),
            );
        }
        if self.batching.value_interval_ms > 1000 {
            return f(
                "batching.value_interval_ms",
                "must be between 0 and 1000".into(),
            );
        }
        if self.batching.batcher_interval_ms > 1000 {
            return f(
                "batching.batcher_interval_ms",
                "must be between 0 and 1000".into(),
            );
        }
        if !(4096..=1 << 30).contains(&self.storage.wal_segment_bytes_max) {
            return f(
                "storage.wal_segment_bytes_max",
                "must be between 4096 and 1073741824".into(),
            );
        }
        if self.storage.wal_preallocate_bytes > 1 << 30 {
            return f(
                "storage.wal_preallocate_bytes",
                "must be at most 1073741824 (0: off)".into(),
            );
        }
        if self.batching.window_instances_max == 0 || self.batching.window_instances_max > 4096 {
            return f(
                "batching.window_instances_max",
                "must be between 1 and 4096".into(),
            );
        }
        self.validate_ordering()?;
        if let Some(d) = &self.legacy_dssmr {
            let scheme = d.get("scheme").and_then(|s| s.as_str()).unwrap_or("dssmr");
            return f(
                "dssmr",
                format!(
                    "[dssmr] is gone: the execution model is [execution] model = \"{scheme}\" \
                     (with DS-SMR's await_moves and gather_where_most beside it), and Chirper's \
                     graph (users, communities, mean_followers, p_local_percent, seed, \
                     placement) is [chirper]"
                ),
            );
        }
        if self.execution.is_speculative() {
            if self.cluster.mode != Mode::Smr {
                return f(
                    "execution.model",
                    "speculative execution needs mode = \"smr\"".into(),
                );
            }
            if self.ordering.protocol() != OrderingProtocol::RingPaxos {
                return f(
                    "execution.model",
                    format!(
                        "speculative execution needs [ordering] protocol = \"ring-paxos\" \
                         (only Ring Paxos sends proposed values to learners), not \"{}\"",
                        self.ordering.protocol()
                    ),
                );
            }
        }
        for (field, n) in [
            ("partitioning.key_space", Some(self.partitioning.key_space)),
            (
                "execution.key_max",
                self.execution.psmr_settings().and_then(|s| s.key_max),
            ),
        ] {
            if let Some(n) = n {
                fits_in_file(field, n)?;
            }
        }
        let map = PartitionMap::new(self.partitioning.partitions, self.partitioning.key_space)
            .map_err(|m| FieldError::new("partitioning", m))?;
        for n in &self.nodes {
            if let Some(p) = n.partition {
                if !n.roles.contains(&Role::Replica) {
                    return f(
                        "node.partition",
                        format!(
                            "node {} is not a replica; only replicas have a partition",
                            n.id
                        ),
                    );
                }
                if p >= map.count() {
                    return f(
                        "node.partition",
                        format!(
                            "node {}: partition {p} does not exist (partitions = {})",
                            n.id,
                            map.count()
                        ),
                    );
                }
            } else if map.is_partitioned() && n.roles.contains(&Role::Replica) {
                return f(
                    "node.partition",
                    format!(
                        "node {} is a replica of a cluster with {} partitions and must say \
                         which one (partition = 0..{})",
                        n.id,
                        map.count(),
                        map.count() - 1
                    ),
                );
            }
        }
        if map.is_partitioned() && self.cluster.mode != Mode::Smr {
            return f(
                "partitioning.partitions",
                "state partitioning needs mode = \"smr\"".into(),
            );
        }
        if let Some(psmr) = self.execution.psmr_settings() {
            if let Err(m) = ThreadLayout::new(psmr.threads, self.psmr_key_max()) {
                return f("execution.threads", m);
            }
            if let Some(us) = psmr.spin_us.filter(|&us| us > PSMR_SPIN_US_MAX) {
                return f(
                    "execution.spin_us",
                    format!("{us} µs: at most {PSMR_SPIN_US_MAX}"),
                );
            }
            if map.is_partitioned() {
                // Each partition's replicas split their partition's keys.
                for p in 0..map.count() {
                    if let Err(m) = self.psmr_layout_within(p) {
                        return f("execution.threads", format!("partition {p}: {m}"));
                    }
                }
                if self.execution.optimistic() {
                    return f(
                        "execution.model",
                        "opt-PSMR inside partitions is not built (its clients would map a \
                         command spanning partitions by each partition's threads): use \
                         model = \"psmr\" with partitions"
                            .into(),
                    );
                }
                if self.ordering.multiring().is_some() {
                    return f(
                        "execution.threads",
                        "P-SMR worker threads inside partitions over Multi-Ring Paxos is not \
                         built (rings serve either the partitions or the threads' groups)"
                            .into(),
                    );
                }
            }
        }
        if self.ordering.multiring().is_some() {
            self.validate_multiring(&map)?;
        }
        self.validate_geo(&map)?;
        self.validate_chirper()?;
        match self.cluster.mode {
            Mode::Cs => {
                if let Some(n) = self.nodes.iter().find(|n| n.roles.contains(&Role::Batcher)) {
                    return f(
                        "node.roles",
                        format!(
                            "node {}: role \"batcher\" needs mode = \"smr\" (a cs server \
                             takes every command itself)",
                            n.id
                        ),
                    );
                }
                let servers = self
                    .nodes
                    .iter()
                    .filter(|n| n.roles.contains(&Role::Server))
                    .count();
                if servers != 1 {
                    return f(
                        "node.roles",
                        format!(
                            "cs mode needs exactly one node with role \"server\", found {servers}"
                        ),
                    );
                }
            }
            Mode::Smr => {
                if self.nodes.iter().any(|n| n.roles.contains(&Role::Server)) {
                    return f(
                        "node.roles",
                        "role \"server\" is only for mode = \"cs\"".into(),
                    );
                }
                let Some(c) = self.cluster.coordinator else {
                    return f("cluster.coordinator", "smr mode needs a coordinator".into());
                };
                if !self.nodes.iter().any(|n| n.id == c) {
                    return f(
                        "cluster.coordinator",
                        format!("{c} is not a node of the cluster"),
                    );
                }
                self.batcher_config()
                    .validate()
                    .map_err(|e| match e.field.as_str() {
                        "batch_bytes_max" => e.within("batching"),
                        "min_interval_ticks" => e.as_field("batching.batcher_interval_ms"),
                        _ => e.as_field("batching"),
                    })?;
                self.membership()
                    .validate()
                    .map_err(|e| match e.field.as_str() {
                        "coordinator" => e.as_field("cluster.coordinator"),
                        "partitions" => e.as_field("node.partition"),
                        _ => e.as_field("node.roles"),
                    })?;
            }
        }
        Ok(())
    }

    /// `[ordering]`, and what cluster files written before it existed say instead.
    fn validate_ordering(&self) -> Result<(), FieldError> {
        let f = |field: &str, m: String| Err(FieldError::new(field, m));
        let moved = |what: &str, write: String| {
            f(
                what,
                format!(
                    "this setting moved to the [ordering] section (one typed choice of \
                     protocol, with that protocol's settings): write {write} instead"
                ),
            )
        };
        if let Some(v) = &self.cluster.legacy_protocol {
            let name = match v.as_str() {
                Some("multipaxos") | Some("multi-paxos") => "multi-paxos",
                _ => "ring-paxos",
            };
            let name = if self.legacy_multiring.is_some() {
                "multi-ring"
            } else if self.legacy_geopaxos.is_some() {
                "geopaxos+"
            } else {
                name
            };
            return moved(
                "cluster.protocol",
                format!("[ordering] protocol = \"{name}\" (and remove `protocol` from [cluster])"),
            );
        }
        if self.cluster.legacy_ring_decision.is_some() {
            return moved(
                "cluster.ring_decision",
                "`ring_decision` under [ordering], beside protocol = \"ring-paxos\"".into(),
            );
        }
        if self.legacy_multiring.is_some() {
            return moved(
                "multiring",
                "[ordering] protocol = \"multi-ring\" with the [multiring] settings beside \
                 it, and [[ordering.ring]] for each [[ordering.ring]]"
                    .into(),
            );
        }
        if let Some(g) = &self.legacy_geopaxos {
            let epaxos = g.get("ordering").and_then(|o| o.as_str()) == Some("epaxos");
            return moved(
                "geopaxos",
                if epaxos {
                    "[ordering] protocol = \"epaxos\" with `keys` beside it".into()
                } else {
                    "[ordering] protocol = \"geopaxos+\" with the [geopaxos] settings beside \
                     it (without `ordering`)"
                        .into()
                },
            );
        }
        if self.cluster.mode != Mode::Smr && self.ordering != OrderingSection::default() {
            let field = match self.ordering.ring_decision() {
                Some(_) => "ordering.ring_decision",
                None => "ordering",
            };
            return f(
                field,
                format!(
                    "mode = \"{}\" orders nothing: leave [ordering] out",
                    self.cluster.mode
                ),
            );
        }
        match &self.ordering {
            OrderingSection::MultiRing(m)
                if m.ring_decision.is_some() && m.ring_protocol != Protocol::RingPaxos =>
            {
                f(
                    "ordering.ring_decision",
                    format!(
                        "where a ring decides means something only with Ring Paxos rings, not \
                         ring_protocol = \"{}\"",
                        m.ring_protocol
                    ),
                )
            }
            OrderingSection::GeoPaxos(g) if *g != crate::geo::GeoPaxosSettings::of(g).section() => {
                f(
                    "ordering.protocol",
                    "\"geopaxos\" keeps one serializer per object and never moves it: its \
                     dop_interval_ms is 0, its optimizer the default and its placement \
                     \"single\" (use \"geopaxos+\" for DOPs, an optimizer or another \
                     placement)"
                        .into(),
                )
            }
            _ => Ok(()),
        }
    }

    fn validate_chirper(&self) -> Result<(), FieldError> {
        let f = |field: &'static str, msg: String| Err(FieldError::new(field, msg));
        let chirper = self.cluster.service == "chirper";
        if chirper && !self.execution.is_ssmr() {
            return f(
                "execution.model",
                "service = \"chirper\" runs on S-SMR or DS-SMR: [execution] model = \"ssmr\" \
                 or \"dssmr\""
                    .into(),
            );
        }
        let builtin = crate::services::BUILTIN.contains(&self.cluster.service.as_str());
        let kv = self.cluster.service == "kv";
        if kv
            && self.execution.is_ssmr()
            && self.ordering.protocol() == crate::ordering::OrderingProtocol::MultiRing
        {
            return f(
                "ordering.protocol",
                "the key-value store on S-SMR or DS-SMR takes its revisions from positions in \
                 one ordered stream (ring-paxos or multi-paxos); Multi-Ring Paxos orders the \
                 rings of different partitions only where a learner merges them, so a write \
                 could take a smaller revision than one that finished before it started"
                    .into(),
            );
        }
        let objects = chirper || kv;
        if !objects && builtin && self.execution.is_ssmr() {
            return f(
                "execution.model",
                format!(
                    "S-SMR and DS-SMR serve services whose state is objects that move (Chirper, \
                     the key-value store, or one's own implementing \
                     partita_dssmr::ObjectService: see examples/accounts); the built-in `{}` \
                     is not one (yet)",
                    self.cluster.service
                ),
            );
        }
        let Some(d) = &self.chirper else {
            if chirper {
                return f(
                    "chirper",
                    "service = \"chirper\" needs its [chirper] section (the social graph; \
                     `[chirper]` alone takes the defaults)"
                        .into(),
                );
            }
            return Ok(());
        };
        if !chirper {
            return f(
                "chirper",
                format!(
                    "[chirper] is for service = \"chirper\", this cluster runs `{}`",
                    self.cluster.service
                ),
            );
        }
        if d.placement != "service" && d.placement != "hashed" {
            return f(
                "chirper.placement",
                format!(
                    "`{}`: \"service\" (the service's own placement) or \"hashed\" (users \
                     hashed to partitions)",
                    d.placement
                ),
            );
        }
        if d.communities == 0 || d.users < d.communities || d.users > 10_000_000 {
            return f(
                "chirper.users",
                format!(
                    "{} users in {} communities: at least one user per community, at most 10^7",
                    d.users, d.communities
                ),
            );
        }
        if d.mean_followers > 1000 {
            return f(
                "chirper.mean_followers",
                format!("{}: at most 1000", d.mean_followers),
            );
        }
        if d.p_local_percent > 100 {
            return f(
                "chirper.p_local_percent",
                format!("{}: a percentage", d.p_local_percent),
            );
        }
        if self.execution.dssmr().is_some() && self.partitioning.partitions < 2 {
            return f(
                "partitioning.partitions",
                "DS-SMR needs at least 2 partitions: the data partitions and the oracle's (the last)"
                    .into(),
            );
        }
        Ok(())
    }

    fn validate_multiring(&self, map: &PartitionMap) -> Result<(), FieldError> {
        let f = |field: &str, m: String| Err(FieldError::new(field, m));
        let Some(mr) = self.ordering.multiring() else {
            return Ok(());
        };
        let unsupported = if self.cluster.mode != Mode::Smr {
            Some("mode = \"cs\"")
        } else if self.execution.is_speculative() {
            Some("speculative execution")
        } else if !self.with_role(Role::Batcher).is_empty() {
            Some("batchers")
        } else {
            None
        };
        if let Some(what) = unsupported {
            return f(
                "ordering.protocol",
                format!("Multi-Ring Paxos does not combine with {what} (yet)"),
            );
        }
        if !(1..=1_000_000).contains(&mr.m) {
            return f("ordering.m", "must be between 1 and 1000000".into());
        }
        self.skip_config().validate().map_err(|e| {
            let field = format!("ordering.{}", e.field);
            e.as_field(&field)
        })?;
        if mr.rings.is_empty() || mr.rings.len() > 64 {
            return f("ordering.ring", "between 1 and 64 rings".into());
        }
        let acceptors = self.with_role(Role::Acceptor);
        let mut seen_ids = Vec::new();
        let mut owner: std::collections::BTreeMap<NodeId, u32> = Default::default();
        let mut carried = 0u64;
        let all = self.ring_groups_all();
        // With P-SMR worker threads the groups are the threads' (g_0 … g_{K−1}), else
        // the partitions.
        let (kind, count) = match self.psmr_layout() {
            Some(l) => ("thread group", l.threads as u32),
            None => ("partition", map.count()),
        };
        for r in &mr.rings {
            if seen_ids.contains(&r.id) {
                return f("ordering.ring.id", format!("ring {} is listed twice", r.id));
            }
            seen_ids.push(r.id);
            if r.acceptors.is_empty() || r.acceptors.len() > 64 {
                return f(
                    "ordering.ring.acceptors",
                    format!("ring {}: between 1 and 64 acceptors", r.id),
                );
            }
            for &a in &r.acceptors {
                if !acceptors.contains(&a) {
                    return f(
                        "ordering.ring.acceptors",
                        format!(
                            "ring {}: node {a} is not a node with role \"acceptor\"",
                            r.id
                        ),
                    );
                }
                if let Some(other) = owner.insert(a, r.id) {
                    return f(
                        "ordering.ring.acceptors",
                        format!(
                            "node {a} is an acceptor of rings {other} and {}: each ring has \
                             acceptors of its own",
                            r.id
                        ),
                    );
                }
            }
            if let Some(c) = r.coordinator {
                if !r.acceptors.contains(&c) {
                    return f(
                        "ordering.ring.coordinator",
                        format!("ring {}: {c} is not one of its acceptors", r.id),
                    );
                }
            }
            if let Some(groups) = &r.groups {
                if groups.is_empty() {
                    return f(
                        "ordering.ring.groups",
                        format!("ring {} carries no {kind}", r.id),
                    );
                }
                for &g in groups {
                    if g >= count {
                        let counted = if kind == "partition" {
                            "partitions"
                        } else {
                            "threads"
                        };
                        return f(
                            "ordering.ring.groups",
                            format!(
                                "ring {}: {kind} {g} does not exist ({counted} = {count})",
                                r.id
                            ),
                        );
                    }
                }
            }
            carried |= self.ring_groups(r);
        }
        if let Some(a) = acceptors.iter().find(|a| !owner.contains_key(a)) {
            return f(
                "ordering.ring.acceptors",
                format!("node {a} has role \"acceptor\" but is in no ring"),
            );
        }
        if carried != all {
            let missing = partita_types::mask_partitions(all & !carried);
            return f(
                "ordering.ring.groups",
                format!("no ring carries {kind}s {missing:?}: nothing could reach them"),
            );
        }
        if !mr.rings.iter().any(|r| self.ring_groups(r) == all) {
            return f(
                "ordering.ring.groups",
                format!(
                    "one ring must carry every {kind} (commands for all of them: session \
                     renewals, scans{})",
                    if kind == "partition" {
                        ""
                    } else {
                        ", P-SMR's g_all"
                    }
                ),
            );
        }
        Ok(())
    }

    /// The groups a ring carries, one bit each: the partitions, or with P-SMR worker
    /// threads the threads' groups.
    fn ring_groups(&self, r: &RingSection) -> u64 {
        match &r.groups {
            None => self.ring_groups_all(),
            Some(g) => g.iter().fold(0, |m, &p| m | (1u64 << p)),
        }
    }

    /// Every group rings may carry: the threads' with P-SMR worker threads (paper
    /// 002: g_0 … g_{K−1}, the g_all ring carries them all), else the partitions.
    fn ring_groups_all(&self) -> u64 {
        match self.psmr_layout() {
            Some(l) => l.all(),
            None => self.partition_map().all(),
        }
    }

    /// λ and Δ of the rings' coordinators.
    pub fn skip_config(&self) -> partita_consensus::multiring::SkipConfig {
        match self.ordering.multiring() {
            Some(mr) => partita_consensus::multiring::SkipConfig {
                lambda_per_s: mr.lambda,
                delta_ms: mr.delta_ms,
            },
            None => Default::default(),
        }
    }

    /// Multi-Ring Paxos as a node takes it (`None`: one stream).
    pub fn multiring_setup(&self) -> Option<partita_node::MultiRingSetup> {
        let mr = self.ordering.multiring()?;
        let mut rings: Vec<partita_node::RingSpec> = mr
            .rings
            .iter()
            .map(|r| partita_node::RingSpec {
                id: r.id,
                acceptors: r.acceptors.clone(),
                coordinator: r.coordinator.unwrap_or(r.acceptors[0]),
                groups: self.ring_groups(r),
            })
            .collect();
        rings.sort_by_key(|r| r.id);
        Some(partita_node::MultiRingSetup {
            rings,
            m: mr.m,
            skips: self.skip_config(),
            psmr_threads: self.psmr_layout().map_or(0, |l| l.threads),
        })
    }

    /// This cluster ordered by Multi-Ring Paxos: `rings` rings of `per_ring` acceptors
    /// each over an unpartitioned state (every ring carries it; clients spread over
    /// them), or, with state partitioning, one ring per partition (`rings` must be the
    /// number of partitions) plus one that carries every partition, or, with P-SMR
    /// worker threads, one ring per thread's group g_i (`rings` must be the number of
    /// threads) plus one for g_all (paper 002 §V-B). The cluster's acceptors become
    /// the first ring (their number is the ring size); the others are new nodes (ids
    /// after every other node).
    pub fn with_multiring(mut self, rings: u32, m: u64) -> Result<ClusterConfig, FieldError> {
        let partitions = self.partition_map().count();
        let threads = self.psmr_layout().map_or(0, |l| l.threads as u32);
        let partitioned = partitions > 1 || threads > 0;
        if partitions > 1 && rings != partitions {
            return Err(FieldError::new(
                "ordering.rings",
                format!(
                    "{partitions} partitions take one ring each (rings = {partitions}), plus one \
                 ring for commands that span them"
                ),
            ));
        }
        if threads > 0 && rings != threads {
            return Err(FieldError::new(
                "ordering.rings",
                format!(
                    "{threads} P-SMR worker threads take one ring each for their groups (rings = \
                 {threads}), plus one ring for g_all"
                ),
            ));
        }
        if rings == 0 {
            return Err(FieldError::new("ordering.rings", "at least one ring"));
        }
        let first = self.with_role(Role::Acceptor);
        if first.is_empty() {
            return Err(FieldError::new(
                "ordering.protocol",
                "Multi-Ring Paxos needs acceptors",
            ));
        }
        let total = if partitioned { rings + 1 } else { rings };
        let mut sections = Vec::new();
        for id in 1..=total {
            let acceptors = if id == 1 {
                first.clone()
            } else {
                (0..first.len())
                    .map(|_| self.add_node(vec![Role::Acceptor], None))
                    .collect()
            };
            let groups = (partitioned && id <= rings).then(|| vec![id - 1]);
            sections.push(RingSection {
                id,
                coordinator: None,
                acceptors,
                groups,
            });
        }
        self.cluster.coordinator = Some(first[0]);
        let mut mr = MultiringSection::new(sections);
        mr.m = m;
        mr.ring_protocol = self.ordering.paxos_protocol();
        mr.ring_decision = self.ordering.ring_decision();
        self.ordering = OrderingSection::MultiRing(mr);
        self.validate()?;
        Ok(self)
    }

    /// P-SMR (paper 002): `threads` worker threads per replica over keys 0..=`key_max`
    /// (0: sequential execution), clients optimistic (opt-PSMR) when `optimistic`;
    /// refused where P-SMR does not combine (speculation, partitions, ...).
    pub fn with_psmr(
        mut self,
        threads: usize,
        optimistic: bool,
        key_max: u64,
    ) -> Result<ClusterConfig, String> {
        self.execution = ExecutionSection::psmr(threads, optimistic, Some(key_max));
        self.validate().map_err(|e| e.to_string())?;
        Ok(self)
    }

    /// WAL segments extended `bytes` of zeros at a time (`storage.wal_preallocate_bytes`).
    pub fn with_wal_preallocate(mut self, bytes: u64) -> Result<ClusterConfig, String> {
        self.storage.wal_preallocate_bytes = bytes;
        self.validate().map_err(|e| e.to_string())?;
        Ok(self)
    }

    /// Ring Paxos decided where `d` says (`[ordering] ring_decision`); refused for a
    /// cluster that is not Ring Paxos in SMR mode.
    pub fn with_ring_decision(mut self, d: RingDecision) -> Result<ClusterConfig, String> {
        match &mut self.ordering {
            OrderingSection::RingPaxos(r) => r.ring_decision = Some(d),
            OrderingSection::MultiRing(m) if m.ring_protocol == Protocol::RingPaxos => {
                m.ring_decision = Some(d)
            }
            o => {
                return Err(format!(
                    "ordering.ring_decision: where a ring decides means something only with \
                     Ring Paxos, not protocol = \"{}\"",
                    o.protocol()
                ))
            }
        }
        self.validate().map_err(|e| e.to_string())?;
        Ok(self)
    }

    /// This cluster ordered by `protocol`, for a new cluster (`partita up --ordering`,
    /// `partita bench --up --ordering`): one stream by Ring Paxos or Multi-Paxos;
    /// Multi-Ring Paxos with a ring per partition and one spanning them (or two rings
    /// over an unpartitioned state); GeoPaxos+ or EPaxos on `replicas` nodes, each an
    /// acceptor and a replica (the leaderless and serializer orderings have every
    /// replica take part), keeping the cluster's first port and wide-area regions.
    /// Refused where the protocol does not combine with the cluster.
    pub fn with_ordering(
        mut self,
        protocol: OrderingProtocol,
        replicas: u32,
    ) -> Result<ClusterConfig, FieldError> {
        use partita_consensus::Protocol as P;
        match protocol {
            OrderingProtocol::RingPaxos => self.set_protocol(P::RingPaxos),
            OrderingProtocol::MultiPaxos => self.set_protocol(P::MultiPaxos),
            OrderingProtocol::MultiRing => {
                let rings = match self.psmr_layout() {
                    Some(l) => l.threads as u32,
                    None if self.partition_map().is_partitioned() => self.partition_map().count(),
                    None => 2,
                };
                return self.with_multiring(rings, 1);
            }
            OrderingProtocol::GeoPaxos
            | OrderingProtocol::GeoPaxosPlus
            | OrderingProtocol::Epaxos => {
                if self.partition_map().is_partitioned() || self.cluster.mode != Mode::Smr {
                    return Err(FieldError::new(
                        "ordering.protocol",
                        format!(
                            "protocol \"{protocol}\" orders one unpartitioned state in smr mode"
                        ),
                    ));
                }
                let replicas = match protocol {
                    OrderingProtocol::Epaxos if replicas.is_multiple_of(2) => replicas + 1,
                    _ => replicas,
                }
                .clamp(1, 32);
                let base = self
                    .nodes
                    .iter()
                    .filter_map(|n| n.addr.parse::<SocketAddr>().ok())
                    .map(|a| a.port() - self.nodes[0].id as u16)
                    .next()
                    .unwrap_or(7100);
                let regions: Vec<Option<String>> =
                    self.nodes.iter().map(|n| n.region.clone()).collect();
                self.nodes = (1..=replicas)
                    .map(|id| NodeSection {
                        id,
                        addr: format!("127.0.0.1:{}", base + id as u16),
                        roles: vec![Role::Acceptor, Role::Replica],
                        partition: None,
                        etcd_addr: None,
                        region: regions.get(id as usize - 1).cloned().flatten(),
                        join: false,
                    })
                    .collect();
                self.cluster.coordinator = Some(1);
                self.ordering = match protocol {
                    OrderingProtocol::Epaxos => {
                        OrderingSection::Epaxos(EpaxosSection::with_keys(0))
                    }
                    OrderingProtocol::GeoPaxos => {
                        OrderingSection::GeoPaxos(GeoSection::geopaxos(0))
                    }
                    // A DOP every second: the objects move to where they are used.
                    _ => OrderingSection::GeoPaxosPlus(GeoSection {
                        dop_interval_ms: 1000,
                        ..GeoSection::default()
                    }),
                };
            }
        }
        self.validate()?;
        Ok(self)
    }

    /// The Paxos protocol of one stream (or of the rings, with Multi-Ring Paxos) set to
    /// `p`; other orderings keep theirs. Tests and the command line's `--protocol`.
    pub fn set_protocol(&mut self, p: Protocol) {
        match &mut self.ordering {
            OrderingSection::RingPaxos(_) | OrderingSection::MultiPaxos(_) => {
                self.ordering = OrderingSection::paxos(p)
            }
            OrderingSection::MultiRing(m) => {
                m.ring_protocol = p;
                if p != Protocol::RingPaxos {
                    m.ring_decision = None;
                }
            }
            _ => {}
        }
    }

    /// `[multicast]`: Ring Paxos in SMR mode over one stream, with plain TCP said on
    /// purpose (datagrams are not authenticated) and IPv4 addresses off loopback.
    fn validate_multicast(&self) -> Result<(), FieldError> {
        let Some(m) = &self.multicast else {
            return Ok(());
        };
        let f = |field: &str, m: String| Err(FieldError::new(field, m));
        m.validate(self.partitioning.partitions)?;
        if self.ordering.protocol() != OrderingProtocol::RingPaxos || self.cluster.mode != Mode::Smr
        {
            return f(
                "multicast",
                "IP multicast carries one Ring Paxos stream's Phase 2A: it needs [ordering] \
                 protocol = \"ring-paxos\" and mode = \"smr\""
                    .into(),
            );
        }
        if self.wan.is_some() {
            return f(
                "multicast",
                "IP multicast is not combined with [wan]".into(),
            );
        }
        if !self.tls.as_ref().is_some_and(|t| t.insecure) {
            return f(
                "multicast",
                "multicast datagrams carry no authentication: a cluster with them must say \
                 plain TCP on purpose ([tls] insecure = true); with mutual TLS anyone on the \
                 network could send values"
                    .into(),
            );
        }
        for n in &self.nodes {
            match n.addr.parse::<SocketAddr>() {
                Ok(SocketAddr::V4(a)) if !a.ip().is_loopback() && !a.ip().is_unspecified() => {}
                _ => {
                    return f(
                        "node.addr",
                        format!(
                            "node {}: {} cannot carry IP multicast; give each node its IPv4 \
                             address on the network (not loopback, not 0.0.0.0)",
                            n.id, n.addr
                        ),
                    )
                }
            }
        }
        Ok(())
    }

    /// `etcd_addr`: a loopback ip:port, on a replica of a kv cluster that is
    /// unpartitioned or runs S-SMR/DS-SMR (without auto-compaction there), distinct
    /// from every other address of the file.
    fn validate_etcd_addrs(&self) -> Result<(), FieldError> {
        let f = |m: String| Err(FieldError::new("node.etcd_addr", m));
        let mut taken: Vec<SocketAddr> = self
            .nodes
            .iter()
            .filter_map(|n| n.addr.parse().ok())
            .collect();
        for n in &self.nodes {
            let Some(a) = &n.etcd_addr else { continue };
            let addr = match a.parse::<SocketAddr>() {
                Ok(addr) => addr,
                Err(e) => {
                    return f(format!(
                        "node {}: `{a}` is not an ip:port address ({e})",
                        n.id
                    ))
                }
            };
            if !(addr.ip().is_loopback()
                || addr.ip().is_unspecified()
                || std::env::var_os("PARTITA_ALLOW_NON_LOOPBACK").is_some())
            {
                return f(format!(
                    "node {}: {addr} is not a loopback address (127.0.0.0/8)",
                    n.id
                ));
            }
            if self.cluster.service != "kv" {
                return f(format!(
                    "node {}: etcd's API is served only by the key-value service (service = \"kv\"), \
                     and this cluster runs `{}`",
                    n.id, self.cluster.service
                ));
            }
            if !n.roles.contains(&Role::Replica) {
                return f(format!(
                    "node {}: only replicas serve etcd's API (its roles: {:?})",
                    n.id, n.roles
                ));
            }
            if self.execution.is_ssmr() {
                if matches!(
                    self.etcd.auto_compaction(),
                    Ok(AutoCompaction::Revisions(_))
                ) {
                    return Err(FieldError::new(
                        "etcd.auto_compaction_mode",
                        format!(
                            "the key-value store on {} takes its revisions from positions \
                             in the order, which are not a count of changes, so keeping \
                             the last N revisions means nothing there: use mode \
                             \"periodic\" (a retention in time)",
                            self.execution.model()
                        ),
                    ));
                }
            } else if self.partitioning.partitions > 1 {
                return f(format!(
                    "node {}: etcd's API needs one store-wide revision, and a partitioned \
                     cluster counts revisions per partition",
                    n.id
                ));
            }
            if taken.contains(&addr) {
                return f(format!(
                    "node {}: {addr} is already used in this file",
                    n.id
                ));
            }
            taken.push(addr);
        }
        Ok(())
    }

    /// The replicas' etcd endpoints, in node order.
    pub fn etcd_endpoints(&self) -> Vec<(NodeId, String)> {
        self.nodes
            .iter()
            .filter_map(|n| n.etcd_addr.clone().map(|a| (n.id, a)))
            .collect()
    }

    /// `[wan]`: the section checked, every node in a known region when it is there,
    /// no node naming a region when it is not.
    fn validate_wan(&self) -> Result<(), FieldError> {
        let f = |m: String| Err(FieldError::new("node.region", m));
        let Some(section) = &self.wan else {
            if let Some(n) = self.nodes.iter().find(|n| n.region.is_some()) {
                return f(format!(
                    "node {} names a region, but the cluster file has no [wan] section \
                     (add one, e.g. preset = \"paper\")",
                    n.id
                ));
            }
            return Ok(());
        };
        let wan = section.resolve()?;
        for n in &self.nodes {
            match &n.region {
                None => {
                    return f(format!(
                        "node {} has no region; with a [wan] section every node names one \
                         ({})",
                        n.id,
                        wan.names()
                    ))
                }
                Some(r) if wan.region(r).is_none() => {
                    return f(format!(
                        "node {}: `{r}` is not a region of [wan] ({})",
                        n.id,
                        wan.names()
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// GeoPaxos+ and EPaxos: their fields, and a cluster they can run on (see [`geo`]).
    fn validate_geo(&self, map: &PartitionMap) -> Result<(), FieldError> {
        let epaxos = self.ordering.epaxos().is_some();
        if !self.ordering.is_geo() {
            if self.cluster.service == "geo-btree" {
                return Err(FieldError::new(
                    "cluster.service",
                    format!(
                        "the geo B+tree places its nodes on GeoPaxos's serializers: it runs \
                         with [ordering] protocol = \"geopaxos+\" or \"geopaxos\" (or \
                         \"epaxos\", on equal terms), not \"{}\"",
                        self.ordering.protocol()
                    ),
                ));
            }
            return Ok(());
        }
        let f = |field: &str, m: &str| Err(FieldError::new(field, m.to_string()));
        if let Some(g) = self.ordering.geo() {
            g.validate()?;
        }
        if let Some(e) = self.ordering.epaxos() {
            if !(10..=60_000).contains(&e.barrier_interval_ms) {
                return Err(FieldError::new(
                    "ordering.barrier_interval_ms",
                    "must be between 10 and 60000".to_string(),
                ));
            }
            if e.keys > geo::GEO_KEYS_MAX {
                return Err(FieldError::new(
                    "ordering.keys",
                    format!("at most {} keys are loaded at the start", geo::GEO_KEYS_MAX),
                ));
            }
            if !(1..=1 << 20).contains(&e.window_instances_max) {
                return Err(FieldError::new(
                    "ordering.window_instances_max",
                    "must be between 1 and 1048576".to_string(),
                ));
            }
        }
        if let Some(e) = self.ordering.epaxos() {
            if e.keys > 0 && !matches!(self.cluster.service.as_str(), "btree" | "geo-btree") {
                return f(
                    "ordering.keys",
                    "keys preloads the B+tree (service = \"btree\" or \"geo-btree\"); other \
                     services start empty",
                );
            }
        }
        if self.cluster.mode != Mode::Smr {
            return f("cluster.mode", "GeoPaxos+ and EPaxos need mode = \"smr\"");
        }
        if map.is_partitioned() || self.execution.is_ssmr() {
            return f(
                "ordering.protocol",
                "GeoPaxos+ and EPaxos do not combine with state partitioning or DS-SMR",
            );
        }
        if self.execution != ExecutionSection::default() {
            return f(
                "execution.model",
                "GeoPaxos, GeoPaxos+ and EPaxos replicas execute in their ordering's order: \
                 model = \"sequential\" (no speculation, early replies or P-SMR threads)",
            );
        }
        let replicas = self.with_role(Role::Replica);
        let acceptors = self.with_role(Role::Acceptor);
        if replicas.is_empty() || replicas.len() > 32 {
            return f("node.roles", "GeoPaxos+ needs 1 to 32 replicas");
        }
        if epaxos && replicas.len().is_multiple_of(2) {
            return f(
                "node.roles",
                "EPaxos needs an odd number of replicas (N = 2F + 1)",
            );
        }
        if replicas != acceptors || !self.with_role(Role::Batcher).is_empty() {
            return f(
                "node.roles",
                "with GeoPaxos+ and EPaxos every node is an acceptor and a replica (a \
                 serializer's leader sits with its replica), and there are no batchers",
            );
        }
        Ok(())
    }

    /// The client session lease of the cluster's replicas and clients: `[sessions]`'s,
    /// but none with GeoPaxos+ (its replicas keep no sessions; they deduplicate
    /// writes by request id, see `partita_node::geo`).
    pub fn session_lease(&self) -> Option<u64> {
        match self.ordering.geo().is_some() {
            true => None,
            false => self.sessions.lease(),
        }
    }

    /// GeoPaxos+ for the node cores (`None` without `[geopaxos]`).
    pub fn geo_setup(&self) -> Option<partita_node::GeoSetup> {
        let epaxos = self.ordering.epaxos().map(|e| GeoSection {
            keys: e.keys,
            ..GeoSection::default()
        });
        let g = self.ordering.geo().or(epaxos.as_ref())?;
        let replicas = self.with_role(Role::Replica);
        let wan = self.wan();
        let region = |id: NodeId| self.node_region(id);
        let regions = replicas
            .iter()
            .map(|&id| match (&wan, region(id)) {
                (Some(w), Some(r)) => format!("{}-{id}", w.name(r)),
                _ => format!("node-{id}"),
            })
            .collect();
        // Within a region (or without [wan]) the cost model takes a LAN round trip.
        let rtt_ms = replicas
            .iter()
            .map(|&a| {
                replicas
                    .iter()
                    .map(|&b| match (&wan, region(a), region(b)) {
                        _ if a == b => 0.0,
                        (Some(w), Some(ra), Some(rb)) if ra != rb => f64::from(w.rtt_ms(ra, rb)),
                        _ => 0.5,
                    })
                    .collect()
            })
            .collect();
        let tick = self.cluster.tick_ms.max(1);
        let max_rtt = self.wan_rtt_max_ms();
        Some(partita_node::GeoSetup {
            replicas,
            regions,
            rtt_ms,
            order: g.order,
            keys: g.keys,
            placement: g.placement,
            value_bytes: g.value_bytes,
            dop_interval_ms: g.dop_interval_ms,
            optimizer_brute_force: g.optimizer == "brute-force",
            seed: g.seed,
            stall_check_ticks: (1000.max(4 * max_rtt) / tick).max(1),
            clock_retry_ticks: (200.max(2 * max_rtt) / tick).max(1),
            barrier_interval_ms: match (self.ordering.epaxos(), self.ordering.geo()) {
                (Some(e), _) => e.barrier_interval_ms,
                (_, Some(g)) => g.barrier_interval_ms,
                _ => 1000,
            },
            epaxos_window: self
                .ordering
                .epaxos()
                .map_or(1024, |e| e.window_instances_max),
        })
    }

    /// The largest round trip between two nodes' regions (0 without `[wan]`).
    pub fn wan_rtt_max_ms(&self) -> u64 {
        let Some(w) = self.wan() else { return 0 };
        let regions: Vec<_> = self
            .nodes
            .iter()
            .filter_map(|n| self.node_region(n.id))
            .collect();
        regions
            .iter()
            .flat_map(|&a| regions.iter().map(move |&b| (a, b)))
            .map(|(a, b)| u64::from(w.rtt_ms(a, b)))
            .max()
            .unwrap_or(0)
    }

    /// The emulated WAN's matrix (`None`: no `[wan]` section, no delay).
    pub fn wan(&self) -> Option<Wan> {
        let w = self.wan.as_ref()?;
        Some(w.resolve().expect("validated [wan] section"))
    }

    /// The region of node `id` (`None` without a `[wan]` section).
    pub fn node_region(&self, id: NodeId) -> Option<Region> {
        let wan = self.wan()?;
        let name = self.node(id)?.region.as_deref()?;
        wan.region(name)
    }

    /// What a frame from node `a` to node `b` waits in the sender's driver: the
    /// one-way delay between their regions (zero within a region or without `[wan]`).
    pub fn node_delay(&self, a: NodeId, b: NodeId) -> std::time::Duration {
        match (self.wan(), self.node_region(a), self.node_region(b)) {
            (Some(w), Some(ra), Some(rb)) => w.one_way(ra, rb),
            _ => std::time::Duration::ZERO,
        }
    }

    /// The region of client `index` as the file places clients (`[wan] clients`,
    /// round robin); `None` when it places none.
    pub fn client_region(&self, index: u64) -> Option<Region> {
        let w = self.wan.as_ref()?;
        if w.clients.is_empty() {
            return None;
        }
        let name = &w.clients[(index % w.clients.len() as u64) as usize];
        self.wan()?.region(name)
    }

    pub fn node(&self, id: NodeId) -> Option<&NodeSection> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Node `id`'s socket address: its IP address, or its name resolved now
    /// (blocking; see [`ClusterConfig::resolve`]). Panics on a name that does not
    /// resolve: for tests and tools on clusters that give IP addresses. Nodes and
    /// clients dial [`ClusterConfig::dial_addr`], and a node binds what `resolve` gives.
    pub fn addr(&self, id: NodeId) -> SocketAddr {
        self.resolve(id)
            .unwrap_or_else(|e| panic!("node {id}'s address does not resolve: {e}"))
    }

    /// Node `id`'s address as the cluster file gives it (`ip:port` or `name:port`),
    /// for connecting: a connection made to a name resolves it then, so a node that
    /// comes back at another IP (a Kubernetes pod) is found at its next connection.
    pub fn dial_addr(&self, id: NodeId) -> &str {
        &self.node(id).expect("known node").addr
    }

    /// Node `id`'s socket address now: its IP address, or its name resolved (the
    /// first IPv4 address, else the first).
    pub fn resolve(&self, id: NodeId) -> std::io::Result<SocketAddr> {
        let addr = &self.node(id).expect("known node").addr;
        if let Ok(a) = addr.parse::<SocketAddr>() {
            return Ok(a);
        }
        use std::net::ToSocketAddrs;
        let all: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
        all.iter()
            .find(|a| a.is_ipv4())
            .or(all.first())
            .copied()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("`{addr}` resolves to no address"),
                )
            })
    }

    /// Whether this cluster's replicas can change at run time (`partita member`), as
    /// its ordering's `member_changes` will answer: on Ring Paxos, Multi-Paxos or
    /// Multi-Ring Paxos.
    pub fn member_changes(&self) -> Result<(), String> {
        let paxos = matches!(
            self.ordering,
            OrderingSection::RingPaxos(_)
                | OrderingSection::MultiPaxos(_)
                | OrderingSection::MultiRing(_)
        );
        match paxos {
            true => Ok(()),
            false => Err(partita_types::members::NO_MEMBER_CHANGES.to_string()),
        }
    }

    /// Whether this cluster's acceptors can change at run time too, as its ordering's
    /// `acceptor_changes` will answer: not under Multi-Ring Paxos, whose rings would
    /// each need an ordering epoch of their own.
    pub fn acceptor_changes(&self) -> Result<(), String> {
        self.member_changes()?;
        match self.ordering {
            OrderingSection::MultiRing(_) => {
                Err(partita_types::members::RING_ACCEPTORS_FIXED.to_string())
            }
            _ => Ok(()),
        }
    }

    /// The nodes with `role` at the start (nodes that `join` later left out).
    /// A client's view of the cluster after membership changes (`members`, as a node
    /// reports them): the acceptors and the serving replicas are the ones `members`
    /// names, at the addresses the file or the changes give; a node left with no role
    /// is dropped; batchers stay as the file says. Learners are left out (they answer
    /// no client). Returns whether anything changed. A configuration of epoch 0 is the
    /// file's own: nothing to follow.
    pub fn follow_members(&mut self, members: &partita_types::members::Members) -> bool {
        if members.epoch == 0 {
            return false;
        }
        let acceptors = members.acceptors(&self.with_role(Role::Acceptor));
        let serving: Vec<NodeId> = members
            .replicas
            .iter()
            .filter(|(_, r)| !r.learner)
            .map(|(&n, _)| n)
            .collect();
        let mut ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        ids.extend(acceptors.iter().chain(&serving));
        ids.sort_unstable();
        ids.dedup();
        let mut nodes = Vec::new();
        for id in ids {
            let file = self.node(id);
            let mut roles: Vec<Role> = file
                .map(|n| {
                    n.roles
                        .iter()
                        .copied()
                        .filter(|r| !matches!(r, Role::Acceptor | Role::Replica))
                        .collect()
                })
                .unwrap_or_default();
            if acceptors.contains(&id) {
                roles.push(Role::Acceptor);
            }
            let replica = members.replicas.get(&id).filter(|r| !r.learner);
            if replica.is_some() {
                roles.push(Role::Replica);
            }
            if roles.is_empty() {
                continue;
            }
            let addr = file.map(|n| n.addr.clone()).or_else(|| {
                members
                    .acceptor_addrs
                    .get(&id)
                    .cloned()
                    .or_else(|| replica.and_then(|r| r.addr.clone()))
            });
            let Some(addr) = addr else { continue };
            nodes.push(NodeSection {
                id,
                addr,
                roles,
                partition: replica
                    .map(|r| r.partition)
                    .filter(|_| self.partitioning.partitions > 1)
                    .or_else(|| file.and_then(|n| n.partition)),
                etcd_addr: file.and_then(|n| n.etcd_addr.clone()),
                region: file.and_then(|n| n.region.clone()),
                join: false,
            });
        }
        if nodes == self.nodes {
            return false;
        }
        self.nodes = nodes;
        if self
            .cluster
            .coordinator
            .is_some_and(|c| !acceptors.contains(&c))
        {
            self.cluster.coordinator = acceptors.first().copied();
        }
        true
    }

    pub fn with_role(&self, role: Role) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|n| n.roles.contains(&role) && !n.join)
            .map(|n| n.id)
            .collect()
    }

    pub fn membership(&self) -> Membership {
        Membership {
            ring_decision: self.ordering.ring_decision().unwrap_or_default(),
            protocol: self.ordering.paxos_protocol(),
            acceptors: self.with_role(Role::Acceptor),
            coordinator: self.cluster.coordinator.unwrap_or(0),
            learners: self.with_role(Role::Replica),
            partitions: self.partition_layout(),
            batchers: self.with_role(Role::Batcher),
            epoch: 0,
            epoch_from: 1,
            unsafe_quorum: None,
        }
    }

    /// The key ranges and which replicas hold each (one partition of every replica
    /// when the cluster is not partitioned).
    pub fn partition_map(&self) -> PartitionMap {
        PartitionMap::new(self.partitioning.partitions, self.partitioning.key_space)
            .unwrap_or_default()
    }

    pub fn partition_layout(&self) -> PartitionLayout {
        let map = self.partition_map();
        if !map.is_partitioned() {
            return PartitionLayout::default();
        }
        let mut replicas = vec![Vec::new(); map.count() as usize];
        for n in &self.nodes {
            if let (Some(p), true) = (n.partition, n.roles.contains(&Role::Replica) && !n.join) {
                if let Some(r) = replicas.get_mut(p as usize) {
                    r.push(n.id);
                }
            }
        }
        for r in &mut replicas {
            r.sort_unstable();
        }
        PartitionLayout { map, replicas }
    }

    /// Where clients send commands: the coordinator, or the server in cs mode (with
    /// batchers, clients spread over them instead: `Membership::client_entry`).
    pub fn entry_node(&self) -> NodeId {
        match self.cluster.mode {
            Mode::Smr => self.cluster.coordinator.expect("validated"),
            Mode::Cs => self.with_role(Role::Server)[0],
        }
    }

    /// The node a client whose replies come from `replica` sends its first command to:
    /// the server in cs mode; else [`Membership::client_entry_for`] (that replica
    /// itself when it batches too, else batcher `entry_index mod batchers`, or the
    /// coordinator). Real clients and the simulator's both start here.
    ///
    /// [`Membership::client_entry_for`]: partita_consensus::Membership::client_entry_for
    pub fn first_entry(&self, replica: NodeId, entry_index: u64) -> NodeId {
        match self.cluster.mode {
            Mode::Cs => self.entry_node(),
            Mode::Smr => self.membership().client_entry_for(replica, entry_index),
        }
    }

    /// The key space P-SMR's worker threads split: `0..=key_max`.
    pub fn psmr_key_max(&self) -> u64 {
        self.execution
            .psmr_settings()
            .and_then(|s| s.key_max)
            .unwrap_or(self.partitioning.key_space.saturating_sub(1))
    }

    /// P-SMR's worker threads (`None`: sequential execution), over the whole key space
    /// `0..=key_max`.
    pub fn psmr_layout(&self) -> Option<ThreadLayout> {
        let threads = self.execution.threads();
        (threads > 0)
            .then(|| ThreadLayout::new(threads, self.psmr_key_max()).ok())
            .flatten()
    }

    /// The worker threads of a replica of partition `p`: with state partitioning they
    /// split the partition's part of `0..=key_max` (paper 001's partitions, each
    /// replica running paper 002's threads), else the whole of it.
    pub fn psmr_layout_of(&self, p: PartitionId) -> Option<ThreadLayout> {
        let whole = self.psmr_layout()?;
        match self.partition_map().is_partitioned() {
            false => Some(whole),
            true => self.psmr_layout_within(p).ok(),
        }
    }

    fn psmr_layout_within(&self, p: PartitionId) -> Result<ThreadLayout, String> {
        let (lo, hi) = self.partition_map().range(p);
        let key_max = self.psmr_key_max();
        if lo > key_max {
            return Err(format!(
                "its keys start at {lo}, past the threads' key_max {key_max}"
            ));
        }
        ThreadLayout::within(self.execution.threads(), lo, hi.min(key_max))
    }

    /// What a client needs of this cluster: where commands enter (in the order a
    /// client moves through them after timeouts), whether there are batchers, who
    /// replies, the partitions.
    pub fn client_topology(&self) -> partita_client_core::Topology {
        let m = self.membership();
        partita_client_core::Topology {
            entries: match self.cluster.mode {
                Mode::Cs => vec![self.entry_node()],
                // GeoPaxos+: a client's request enters at a replica, its origin.
                Mode::Smr if self.ordering.is_geo() => self.with_role(Role::Replica),
                Mode::Smr => m.entry_rotation(),
            },
            batchers: !m.batchers.is_empty(),
            replicas: self.executors(),
            layout: self.partition_layout(),
            session_lease_ms: self.session_lease(),
            psmr: self
                .psmr_layout()
                .map(|layout| partita_client_core::PsmrClient {
                    layout,
                    optimistic: self.execution.optimistic(),
                }),
            rings: self
                .multiring_setup()
                .map(|mr| {
                    mr.rings
                        .iter()
                        .map(|r| {
                            let mut a = r.acceptors.clone();
                            if let Some(i) = a.iter().position(|&n| n == r.coordinator) {
                                a.rotate_left(i);
                            }
                            (r.groups, a)
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Nodes that execute commands and reply.
    pub fn executors(&self) -> Vec<NodeId> {
        match self.cluster.mode {
            Mode::Smr => self.with_role(Role::Replica),
            Mode::Cs => self.with_role(Role::Server),
        }
    }

    pub fn coordinator_config(&self) -> CoordinatorConfig {
        let tick = self.cluster.tick_ms;
        CoordinatorConfig {
            batch_bytes_max: self.batching.batch_bytes_max,
            batch_delay_ticks: self.batching.batch_delay_ms.div_ceil(tick),
            value_interval_ticks: self.batching.value_interval_ms.div_ceil(tick),
            window_instances_max: self.batching.window_instances_max,
            // Over an emulated WAN a round trip may take longer than the LAN's
            // timeouts: retransmissions and elections wait for a few of the longest.
            retransmit_ticks: (200.max(2 * self.wan_rtt_max_ms()) / tick).max(1),
            heartbeat_ticks: (50 / tick).max(1),
            election_timeout_ticks: (250.max(4 * self.wan_rtt_max_ms()) / tick).max(1),
            time_step_max_ms: self.sessions.lease().map_or(u64::MAX, |l| (l / 4).max(1)),
            ..CoordinatorConfig::default()
        }
    }

    /// What the node core of node `id` needs to know (`id` must be in the file), its
    /// replica running `service` (the caller checks it is the file's
    /// [`ClusterSection::service`]).
    pub fn node_setup(
        &self,
        id: NodeId,
        service: std::sync::Arc<dyn partita_smr::ServiceFactory>,
    ) -> partita_node::NodeSetup {
        let roles = &self.node(id).expect("node is in the cluster file").roles;
        partita_node::NodeSetup {
            id,
            service,
            session_lease_ms: self.session_lease(),
            cluster_id: self.cluster.id,
            mode: self.cluster.mode,
            membership: self.membership(),
            acceptor: roles.contains(&Role::Acceptor),
            replica: roles.contains(&Role::Replica) || roles.contains(&Role::Server),
            partition: self.node(id).and_then(|n| n.partition).unwrap_or(0),
            batcher: roles.contains(&Role::Batcher),
            coordinator_config: self.coordinator_config(),
            batcher_config: self.batcher_config(),
            learner_config: self.learner_config(),
            checkpoint: self.checkpoint_config(),
            early_replies: self.execution.early_replies(),
            speculative: self.execution.is_speculative(),
            psmr: self.psmr_layout_of(self.node(id).and_then(|n| n.partition).unwrap_or(0)),
            ordering: self.ordering_setup(),
            genesis: self.genesis(),
        }
    }

    /// The service's initial contents and configuration every replica starts from (see
    /// `partita_node::NodeSetup::genesis`):
    /// - the geo B+tree (`geo-btree`): its topology, order, values, optimizer and keys
    ///   `0..keys` placed by range (`partita_geo::GeoService::genesis`);
    /// - under GeoPaxos+, any other service: the object map that places it
    ///   (`partita_geo::Placed`), with the replicas' topology and the optimizer;
    /// - the B+tree under GeoPaxos+ or EPaxos: keys `0..keys`, each its own value.
    pub fn genesis(&self) -> Vec<partita_types::Payload> {
        use partita_service::ServiceCodec;
        let Some(geo) = self.geo_setup() else {
            return Vec::new();
        };
        if self.cluster.service == partita_geo::GeoService::NAME {
            return geo
                .genesis(&partita_node::UnsafeBugs::default())
                .expect("a validated cluster file's geo tree");
        }
        let mut genesis = Vec::new();
        if self.ordering.geo().is_some() {
            let topology = geo.topology().expect("a validated cluster file's topology");
            let options = partita_geo::ObjectMapOptions {
                optimizer: geo.optimizer(),
                home: geo.placement.home(geo.keys, geo.seed),
                ..partita_geo::ObjectMapOptions::default()
            };
            genesis.push(partita_geo::Placed::<partita_btree::BPlusTree>::genesis(
                &partita_geo::PlacedGenesis { topology, options },
            ));
        }
        if self.cluster.service == partita_btree::BPlusTree::NAME {
            genesis.extend((0..geo.keys).map(|key| {
                partita_btree::BPlusTree::encode_command(&partita_btree::Op::Insert {
                    key,
                    value: key,
                })
            }));
        }
        genesis
    }

    /// The ordering as a node takes it.
    pub fn ordering_setup(&self) -> partita_node::OrderingSetup {
        use partita_node::OrderingSetup as O;
        match &self.ordering {
            OrderingSection::RingPaxos(_) | OrderingSection::MultiPaxos(_) => O::Paxos,
            OrderingSection::MultiRing(_) => {
                O::MultiRing(self.multiring_setup().expect("a multi-ring cluster"))
            }
            OrderingSection::GeoPaxos(_) | OrderingSection::GeoPaxosPlus(_) => {
                O::GeoPaxosPlus(self.geo_setup().expect("a geo cluster"))
            }
            OrderingSection::Epaxos(_) => O::Epaxos(self.geo_setup().expect("a geo cluster")),
        }
    }

    /// Batchers: the cluster's batch size, the rest the defaults in ticks of this
    /// cluster (batches unacknowledged for 100 ms are resent).
    pub fn batcher_config(&self) -> BatcherConfig {
        BatcherConfig {
            batch_bytes_max: self.batching.batch_bytes_max,
            ack_timeout_ticks: (100 / self.cluster.tick_ms).max(1),
            min_interval_ticks: self
                .batching
                .batcher_interval_ms
                .div_ceil(self.cluster.tick_ms),
            ..BatcherConfig::default()
        }
    }

    /// Replica checkpoints and state transfer, in ticks of this cluster.
    pub fn checkpoint_config(&self) -> partita_node::CheckpointConfig {
        let tick = self.cluster.tick_ms;
        partita_node::CheckpointConfig {
            interval_instances: self.storage.checkpoint_instances,
            announce_ticks: (100 / tick).max(1),
            transfer_timeout_ticks: (500 / tick).max(1),
            ..partita_node::CheckpointConfig::default()
        }
    }

    pub fn learner_config(&self) -> LearnerConfig {
        LearnerConfig {
            gap_ticks: (20.max(self.wan_rtt_max_ms()) / self.cluster.tick_ms).max(1),
            ..LearnerConfig::default()
        }
    }

    /// The default local cluster of `partita up`: 3 acceptors (node 1 coordinates),
    /// 2 replicas, Ring Paxos, fsync on.
    pub fn default_local(base_port: u16, cluster_id: u64) -> ClusterConfig {
        let node = |id: NodeId, roles: Vec<Role>| NodeSection {
            id,
            addr: format!("127.0.0.1:{}", base_port + id as u16),
            roles,
            partition: None,
            etcd_addr: None,
            region: None,
            join: false,
        };
        ClusterConfig {
            cluster: ClusterSection {
                id: cluster_id,
                service: default_service(),
                mode: Mode::Smr,
                legacy_protocol: None,
                legacy_ring_decision: None,
                durability: Durability::Fsync,
                coordinator: Some(1),
                tick_ms: 1,
            },
            batching: BatchingSection::default(),
            storage: StorageSection::default(),
            execution: ExecutionSection::default(),
            partitioning: PartitioningSection::default(),
            runtime: RuntimeSection::default(),
            sessions: SessionsSection::default(),
            etcd: EtcdSection::default(),
            ordering: OrderingSection::default(),
            legacy_multiring: None,
            chirper: None,
            legacy_dssmr: None,
            wan: None,
            legacy_geopaxos: None,
            multicast: None,
            tls: None,
            nodes: vec![
                node(1, vec![Role::Acceptor]),
                node(2, vec![Role::Acceptor]),
                node(3, vec![Role::Acceptor]),
                node(4, vec![Role::Replica]),
                node(5, vec![Role::Replica]),
            ],
        }
    }

    /// etcd's layout on this machine: three members, each an acceptor and a replica
    /// (node 1 coordinates), Ring Paxos, fsync on. A client of a member's replica
    /// that is also the coordinator skips the hop from replica to leader, as a client
    /// of etcd's leader does.
    pub fn members_local(base_port: u16, cluster_id: u64) -> ClusterConfig {
        let mut c = ClusterConfig::default_local(base_port, cluster_id);
        c.nodes.truncate(3);
        for n in &mut c.nodes {
            n.roles = vec![Role::Acceptor, Role::Replica];
        }
        c
    }

    /// The paper's wide-area deployment on one machine (paper 004 §VI-B): one node
    /// per region of the `[wan] preset = "paper"` matrix, node 1 in California, 2 in
    /// Virginia, 3 in Europe, each an acceptor and a replica; node 2 (Virginia)
    /// coordinates. Ring Paxos, fsync on, clients in no region (place them with
    /// `[wan] clients` or per client).
    pub fn paper_wan_local(base_port: u16, cluster_id: u64) -> ClusterConfig {
        let mut c = ClusterConfig::default_local(base_port, cluster_id);
        c.nodes.truncate(3);
        for (n, region) in c.nodes.iter_mut().zip(wan::PAPER_REGIONS) {
            n.roles = vec![Role::Acceptor, Role::Replica];
            n.region = Some(region.to_string());
        }
        c.cluster.coordinator = Some(2);
        c.wan = Some(WanSection::paper());
        c
    }

    /// Paper 004's deployment for GeoPaxos+ on this machine: [`paper_wan_local`]'s
    /// three nodes (California, Virginia, Europe; each an acceptor and a replica),
    /// Multi-Paxos serializers, the geo B+tree with keys `0..keys` placed by range
    /// (California's first, Europe's last).
    ///
    /// [`paper_wan_local`]: ClusterConfig::paper_wan_local
    pub fn paper_geo_local(base_port: u16, cluster_id: u64, keys: u64) -> ClusterConfig {
        let mut c = ClusterConfig::paper_wan_local(base_port, cluster_id);
        c.cluster.service = "geo-btree".into();
        c.cluster.coordinator = Some(1);
        c.ordering = OrderingSection::GeoPaxosPlus(GeoSection {
            keys,
            ..GeoSection::default()
        });
        c
    }

    /// This cluster with its replicas replaced by `partitions` × `per_partition`
    /// replicas (ids after every other node, partition by partition) over equal key
    /// ranges of `0..key_space` (paper 001 §III-C). One partition: classic SMR with
    /// `per_partition` replicas.
    pub fn with_partitions(
        mut self,
        partitions: u32,
        per_partition: u32,
        key_space: u64,
    ) -> Result<ClusterConfig, String> {
        if self.cluster.mode != Mode::Smr {
            return Err("partitions need mode = \"smr\" (a cs server has no replicas)".into());
        }
        if per_partition == 0 {
            return Err("every partition needs at least one replica".into());
        }
        PartitionMap::new(partitions, key_space)?;
        fits_in_file("partitioning.key_space", key_space).map_err(|e| e.to_string())?;
        self.nodes.retain(|n| !n.roles.contains(&Role::Replica));
        for p in 0..partitions {
            for _ in 0..per_partition {
                let _ = self.add_node(vec![Role::Replica], (partitions > 1).then_some(p));
            }
        }
        self.partitioning = if partitions > 1 {
            PartitioningSection {
                partitions,
                key_space,
            }
        } else {
            PartitioningSection::default()
        };
        Ok(self)
    }

    /// This cluster with `n` standalone batchers added (ids after every other node):
    /// clients then send their commands to the batchers, which batch them to the
    /// leader. Only for smr clusters.
    pub fn with_batchers(mut self, n: u32) -> Result<ClusterConfig, String> {
        if n > 0 && self.cluster.mode != Mode::Smr {
            return Err("batchers need mode = \"smr\"".into());
        }
        for _ in 0..n {
            let _ = self.add_node(vec![Role::Batcher], None);
        }
        Ok(self)
    }

    /// This cluster with every replica batching too: each client then enters at the
    /// replica that answers it, which batches the commands of its clients to the leader.
    /// One connection carries a client's requests and replies both ways, so a
    /// request's TCP acknowledgement rides on its reply (with the leader as the entry,
    /// each request and each reply costs a bare acknowledgement packet besides), and
    /// the leader reads one batch per replica instead of one frame per client.
    /// Only for smr clusters.
    pub fn with_replicas_batching(mut self) -> Result<ClusterConfig, String> {
        if self.cluster.mode != Mode::Smr {
            return Err("replicas that batch need mode = \"smr\"".into());
        }
        for n in &mut self.nodes {
            if n.roles.contains(&Role::Replica) && !n.roles.contains(&Role::Batcher) {
                n.roles.push(Role::Batcher);
            }
        }
        Ok(self)
    }

    /// Append a node with the next id, listening on the cluster's base port plus its id
    /// (the layout `default_local` uses).
    fn add_node(&mut self, roles: Vec<Role>, partition: Option<u32>) -> NodeId {
        let base_port = self
            .nodes
            .iter()
            .filter_map(|n| {
                let a: SocketAddr = n.addr.parse().ok()?;
                Some(a.port().saturating_sub(n.id as u16))
            })
            .next()
            .unwrap_or(7100);
        let id = self.nodes.iter().map(|n| n.id).max().unwrap_or(0) + 1;
        self.nodes.push(NodeSection {
            id,
            addr: format!("127.0.0.1:{}", base_port + id as u16),
            roles,
            partition,
            etcd_addr: None,
            region: None,
            join: false,
        });
        id
    }

    /// The client-server baseline: one server process.
    pub fn client_server(port: u16, cluster_id: u64) -> ClusterConfig {
        ClusterConfig {
            cluster: ClusterSection {
                id: cluster_id,
                service: default_service(),
                mode: Mode::Cs,
                legacy_protocol: None,
                legacy_ring_decision: None,
                durability: Durability::Memory,
                coordinator: None,
                tick_ms: 1,
            },
            batching: BatchingSection::default(),
            storage: StorageSection::default(),
            execution: ExecutionSection::default(),
            partitioning: PartitioningSection::default(),
            runtime: RuntimeSection::default(),
            sessions: SessionsSection::default(),
            etcd: EtcdSection::default(),
            ordering: OrderingSection::default(),
            legacy_multiring: None,
            chirper: None,
            legacy_dssmr: None,
            wan: None,
            legacy_geopaxos: None,
            multicast: None,
            tls: None,
            nodes: vec![NodeSection {
                id: 1,
                addr: format!("127.0.0.1:{port}"),
                roles: vec![Role::Server],
                partition: None,
                etcd_addr: None,
                region: None,
                join: false,
            }],
        }
    }
}

/// A `name:port` address: the DNS name (lowercase letters, digits, hyphens and dots;
/// labels of 1 to 63 characters that neither start nor end with a hyphen; 253
/// characters at most, not all digits) and a port other than 0.
pub fn name_and_port(addr: &str) -> Result<(&str, u16), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| "no `:port`".to_string())?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` is not a port number"))?;
    if port == 0 {
        return Err("port 0".into());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(label_ok)
        && !host.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if !host_ok {
        return Err(format!(
            "`{host}` is not a DNS name (lowercase letters, digits, hyphens, dots)"
        ));
    }
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> std::sync::Arc<dyn partita_smr::ServiceFactory> {
        partita_smr::service::<partita_btree::BPlusTree>()
    }

    /// A replica or acceptor that joins later (`join = true`) is in no initial role and
    /// survives a round trip; a joining batcher, or a joining replica of a partitioned
    /// cluster, is refused naming `node.join`.
    #[test]
    fn a_client_follows_the_members_a_node_reports() {
        use partita_types::members::{Initial, MemberChange, Members};
        let mut file = ClusterConfig::default_local(7100, 42);
        let replicas: Vec<(NodeId, u32)> = vec![(4, 0), (5, 0)];
        let start = Initial {
            replicas: &replicas,
            acceptors: &[1, 2, 3],
            others: &[],
        };
        let mut m = Members::default();
        assert!(
            !file.clone().follow_members(&m),
            "epoch 0 is the file's own"
        );
        let changes = [
            MemberChange::AddAcceptor {
                node: 6,
                addr: "127.0.0.1:7106".into(),
            },
            MemberChange::RemoveAcceptor { node: 1 },
            MemberChange::Add {
                node: 7,
                addr: "127.0.0.1:7107".into(),
                partition: 0,
                promote: true,
            },
            MemberChange::Remove { node: 4 },
        ];
        for (i, c) in changes.iter().enumerate() {
            m.apply(start, c, 10 * (i as u64 + 1)).unwrap();
        }
        assert!(file.follow_members(&m));
        let ids = |c: &ClusterConfig, r: Role| c.with_role(r);
        assert_eq!(ids(&file, Role::Acceptor), vec![2, 3, 6]);
        // Replica 7 is still a learner: clients are not sent to it yet.
        assert_eq!(ids(&file, Role::Replica), vec![5]);
        assert_eq!(file.node(6).unwrap().addr, "127.0.0.1:7106");
        assert!(file.node(1).is_none() && file.node(4).is_none());
        assert_eq!(file.cluster.coordinator, Some(2));
        assert!(!file.clone().follow_members(&m), "nothing new");
        m.apply(start, &MemberChange::Promote { node: 7 }, 60)
            .unwrap();
        assert!(file.follow_members(&m));
        assert_eq!(ids(&file, Role::Replica), vec![5, 7]);
        assert_eq!(file.node(7).unwrap().addr, "127.0.0.1:7107");
        let topo = file.client_topology();
        assert_eq!(topo.replicas, vec![5, 7]);
        assert!(topo.entries.contains(&6) && !topo.entries.contains(&1));
    }

    #[test]
    fn joining_replicas_are_outside_the_initial_membership_and_only_replicas_join() {
        let with_join = |roles: Vec<Role>| {
            let mut c = ClusterConfig::default_local(7100, 42);
            c.nodes.push(NodeSection {
                roles,
                ..NodeSection::joining_replica(9, "127.0.0.1:7109".into())
            });
            c
        };
        let c = with_join(vec![Role::Replica]);
        let back = ClusterConfig::parse(&c.to_toml(), "test").unwrap();
        assert!(back.node(9).unwrap().join);
        assert!(!back.membership().learners.contains(&9));
        assert!(!back.with_role(Role::Replica).contains(&9));
        let a = ClusterConfig::parse(&with_join(vec![Role::Acceptor]).to_toml(), "t").unwrap();
        assert!(!a.membership().acceptors.contains(&9));
        let e = ClusterConfig::parse(&with_join(vec![Role::Batcher]).to_toml(), "t").unwrap_err();
        assert!(e.to_string().contains("node.join"), "{e}");
        // A partitioned cluster's joining replica names its partition, as every
        // replica there does.
        let mut p = with_join(vec![Role::Replica]);
        p.partitioning.partitions = 2;
        for n in p.nodes.iter_mut().filter(|n| n.roles == [Role::Replica]) {
            n.partition = Some(n.id % 2);
        }
        let back = ClusterConfig::parse(&p.to_toml(), "t").unwrap();
        assert_eq!(back.node_setup(9, svc()).partition, 1);
        assert_eq!(
            back.membership().partitions.replicas,
            vec![vec![4], vec![5]]
        );
        for n in p.nodes.iter_mut().filter(|n| n.id == 9) {
            n.partition = None;
        }
        let e = ClusterConfig::parse(&p.to_toml(), "t").unwrap_err();
        assert!(e.to_string().contains("node.partition"), "{e}");
        // Orderings whose membership does not change say so.
        let mut r = with_join(vec![Role::Replica]);
        r.ordering = OrderingSection::Epaxos(EpaxosSection::with_keys(0));
        assert!(r.member_changes().unwrap_err().contains("EPaxos"));
        // Multi-Ring Paxos changes its replicas, not its rings' acceptors.
        let m = with_join(vec![Role::Replica]).with_multiring(2, 1).unwrap();
        let m = ClusterConfig::parse(&m.to_toml(), "t").unwrap();
        assert!(m.member_changes().is_ok());
        assert!(m
            .acceptor_changes()
            .unwrap_err()
            .contains("Multi-Ring Paxos"));
        let e = with_join(vec![Role::Replica, Role::Acceptor])
            .with_multiring(2, 1)
            .unwrap_err();
        assert!(
            e.field == "node.join" && e.message.contains("Multi-Ring"),
            "{e:?}"
        );
    }

    /// `[etcd]` auto-compaction: etcd's modes and retentions, round trips, and bad
    /// values refused naming the field.
    #[test]
    fn etcd_auto_compaction_is_parsed_as_etcd_reads_its_flags() {
        use std::time::Duration;
        let with = |mode: &str, retention: &str| {
            let mut c = ClusterConfig::default_local(7100, 42);
            c.cluster.service = "kv".into();
            c.etcd.auto_compaction_mode = mode.into();
            c.etcd.auto_compaction_retention = retention.into();
            c
        };
        let parsed = |mode: &str, retention: &str| {
            ClusterConfig::parse(&with(mode, retention).to_toml(), "x")
                .map(|c| c.etcd.auto_compaction().unwrap())
        };
        assert_eq!(
            ClusterConfig::default_local(7100, 42)
                .etcd
                .auto_compaction(),
            Ok(AutoCompaction::Off)
        );
        assert!(!ClusterConfig::default_local(7100, 42)
            .to_toml()
            .contains("[etcd]"));
        for (mode, retention, want) in [
            (
                "periodic",
                "1",
                AutoCompaction::Periodic(Duration::from_secs(3600)),
            ),
            (
                "periodic",
                "30m",
                AutoCompaction::Periodic(Duration::from_secs(1800)),
            ),
            (
                "periodic",
                "90s",
                AutoCompaction::Periodic(Duration::from_secs(90)),
            ),
            ("periodic", "0", AutoCompaction::Off),
            ("revision", "1000", AutoCompaction::Revisions(1000)),
        ] {
            assert_eq!(parsed(mode, retention).unwrap(), want, "{mode} {retention}");
        }
        for (mode, retention, field) in [
            ("periodic", "1d", "etcd.auto_compaction_retention"),
            ("periodic", "soon", "etcd.auto_compaction_retention"),
            ("revision", "10m", "etcd.auto_compaction_retention"),
            ("hourly", "1", "etcd.auto_compaction_mode"),
        ] {
            match ClusterConfig::parse(&with(mode, retention).to_toml(), "x") {
                Err(ConfigError::Field {
                    field: f, message, ..
                }) => {
                    assert_eq!(f, field, "{mode} {retention}: {message}");
                    assert!(message.contains(if field.ends_with("mode") {
                        mode
                    } else {
                        retention
                    }));
                }
                other => panic!("{mode} {retention}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_key_value_store_on_ssmr_needs_one_stream_and_compaction_by_time() {
        let mut c = ClusterConfig::default_local(7100, 42)
            .with_partitions(3, 2, 1 << 32)
            .unwrap();
        c.cluster.service = "kv".into();
        c.execution = ExecutionSection::Dssmr(Default::default());
        let c = ClusterConfig::parse(&c.to_toml(), "t").expect("kv on DS-SMR");
        let refused = |c: &ClusterConfig| match ClusterConfig::parse(&c.to_toml(), "t") {
            Err(ConfigError::Field { field, message, .. }) => (field, message),
            other => panic!("{other:?}"),
        };
        let rings = c.clone().with_multiring(3, 1).unwrap_err().to_string();
        assert!(rings.contains("Multi-Ring Paxos"), "{rings}");
        let mut etcd = c.clone();
        etcd.nodes
            .iter_mut()
            .find(|n| n.roles.contains(&Role::Replica))
            .unwrap()
            .etcd_addr = Some("127.0.0.1:2399".into());
        ClusterConfig::parse(&etcd.to_toml(), "t").expect("etcd's API on DS-SMR");
        etcd.etcd.auto_compaction_retention = "1h".into();
        ClusterConfig::parse(&etcd.to_toml(), "t").expect("periodic compaction on DS-SMR");
        etcd.etcd.auto_compaction_mode = "revision".into();
        etcd.etcd.auto_compaction_retention = "1000".into();
        let (field, message) = refused(&etcd);
        assert_eq!(field, "etcd.auto_compaction_mode");
        assert!(message.contains("not a count of changes"), "{message}");
    }

    #[test]
    fn the_service_defaults_to_the_btree_and_is_named_strictly() {
        let c = ClusterConfig::default_local(7100, 42);
        assert_eq!(c.cluster.service, "btree");
        let text = c.to_toml();
        let kv = text.replace("service = \"btree\"", "service = \"kv\"");
        assert_eq!(
            ClusterConfig::parse(&kv, "t").unwrap().cluster.service,
            "kv"
        );
        let bad = text.replace("service = \"btree\"", "service = \"B Tree!\"");
        match ClusterConfig::parse(&bad, "t") {
            Err(ConfigError::Field { field, .. }) => assert_eq!(field, "cluster.service"),
            other => panic!("{other:?}"),
        }
        let none = text.replace("service = \"btree\"\n", "");
        assert_eq!(
            ClusterConfig::parse(&none, "t").unwrap().cluster.service,
            "btree"
        );
    }

    #[test]
    fn storage_is_optional_and_strict() {
        let good = ClusterConfig::default_local(7100, 42).to_toml();
        assert!(good.contains("[storage]"), "{good}");
        let start = good.find("[storage]").unwrap();
        let end = good[start..]
            .find("\n\n")
            .map_or(good.len(), |e| start + e + 2);
        let without = format!("{}{}", &good[..start], &good[end..]);
        let c = ClusterConfig::parse(&without, "x").unwrap();
        assert_eq!(c.storage, StorageSection::default());
        let never = good.replace("checkpoint_instances = 50000", "checkpoint_instances = 0");
        let c = ClusterConfig::parse(&never, "x").unwrap();
        assert_eq!(c.node_setup(4, svc()).checkpoint.interval_instances, 0);
        assert_eq!(c.node_setup(4, svc()).cluster_id, 42);
    }

    #[test]
    fn etcd_addrs_are_checked() {
        let mut kv = ClusterConfig::default_local(7100, 42);
        kv.cluster.service = "kv".into();
        kv.nodes[3].etcd_addr = Some("127.0.0.1:2379".into());
        let good = kv.to_toml();
        assert!(good.contains("etcd_addr = \"127.0.0.1:2379\""), "{good}");
        let c = ClusterConfig::parse(&good, "x").unwrap();
        assert_eq!(c.etcd_endpoints(), vec![(4, "127.0.0.1:2379".to_string())]);
        let field = |text: &str| match ClusterConfig::parse(text, "x") {
            Err(ConfigError::Field { field, message, .. }) => (field, message),
            other => panic!("{other:?}"),
        };
        for (bad, why) in [
            ("localhost:2379", "not an ip:port"),
            ("127.0.0.1", "not an ip:port"),
            ("10.1.1.1:2379", "loopback"),
            ("127.0.0.1:7101", "already used"),
        ] {
            let (f, m) = field(&good.replace("127.0.0.1:2379", bad));
            assert_eq!(f, "node.etcd_addr");
            assert!(m.contains(why), "{bad}: {m}");
        }
        // Only replicas, only the kv service.
        let mut acceptor = kv.clone();
        acceptor.nodes[3].etcd_addr = None;
        acceptor.nodes[0].etcd_addr = Some("127.0.0.1:2379".into());
        assert!(field(&acceptor.to_toml()).1.contains("only replicas"));
        let btree = good.replace("service = \"kv\"", "service = \"btree\"");
        assert!(field(&btree).1.contains("key-value service"));
        let mut dup = kv.clone();
        dup.nodes[4].etcd_addr = Some("127.0.0.1:2379".into());
        assert!(field(&dup.to_toml()).1.contains("already used"));
    }

    #[test]
    fn chirper_runs_on_ssmr_or_dssmr_and_every_field_is_checked() {
        let field = |c: &ClusterConfig| match ClusterConfig::parse(&c.to_toml(), "x") {
            Err(ConfigError::Field { field, message, .. }) => (field, message),
            other => panic!("{other:?}"),
        };
        let mut good = ClusterConfig::default_local(7100, 42)
            .with_partitions(3, 2, 1 << 32)
            .unwrap();
        good.cluster.service = "chirper".into();
        good.chirper = Some(ChirperSection::default());
        good.execution = ExecutionSection::Dssmr(DssmrSettings {
            await_moves: true,
            gather_where_most: false,
        });
        let back = ClusterConfig::parse(&good.to_toml(), "x").unwrap();
        assert_eq!(back, good, "round trip");
        let mut missing = good.clone();
        missing.chirper = None;
        assert_eq!(field(&missing).0, "chirper");
        let mut btree = good.clone();
        btree.cluster.service = "btree".into();
        let (f, m) = field(&btree);
        assert_eq!(f, "execution.model");
        assert!(
            m.contains("objects that move") && m.contains("btree"),
            "{m}"
        );
        // A service of one's own may be an object service.
        let mut own = btree.clone();
        own.cluster.service = "accounts".into();
        own.chirper = None;
        assert!(ClusterConfig::parse(&own.to_toml(), "x").is_ok());
        btree.execution = ExecutionSection::Sequential;
        assert_eq!(field(&btree).0, "chirper");
        let mut sequential = good.clone();
        sequential.execution = ExecutionSection::Sequential;
        let (f, m) = field(&sequential);
        assert_eq!(f, "execution.model");
        assert!(m.contains("\"ssmr\" or \"dssmr\""), "{m}");
        let with = |f: &dyn Fn(&mut ChirperSection)| {
            let mut c = good.clone();
            f(c.chirper.as_mut().unwrap());
            c
        };
        let hashed = with(&|d| d.placement = "hashed".into());
        assert_eq!(
            ClusterConfig::parse(&hashed.to_toml(), "x")
                .unwrap()
                .chirper,
            hashed.chirper
        );
        let (f, m) = field(&with(&|d| d.placement = "by-community".into()));
        assert_eq!(f, "chirper.placement");
        assert!(m.contains("by-community") && m.contains("hashed"), "{m}");
        assert_eq!(field(&with(&|d| d.communities = 0)).0, "chirper.users");
        assert_eq!(field(&with(&|d| d.users = 3)).0, "chirper.users");
        assert_eq!(
            field(&with(&|d| d.mean_followers = 5000)).0,
            "chirper.mean_followers"
        );
        assert_eq!(
            field(&with(&|d| d.p_local_percent = 101)).0,
            "chirper.p_local_percent"
        );
        let mut one = ClusterConfig::default_local(7100, 42);
        one.cluster.service = "chirper".into();
        one.chirper = Some(ChirperSection::default());
        one.execution = ExecutionSection::Dssmr(DssmrSettings::default());
        assert_eq!(
            field(&one).0,
            "partitioning.partitions",
            "DS-SMR needs the oracle's partition"
        );
        one.execution = ExecutionSection::Ssmr;
        assert!(
            ClusterConfig::parse(&one.to_toml(), "x").is_ok(),
            "S-SMR on one partition"
        );
        let mut spec = good.clone();
        spec.execution = ExecutionSection::speculative(false);
        assert_eq!(field(&spec).0, "execution.model");
    }

    #[test]
    fn files_with_a_dssmr_section_are_told_what_to_write() {
        let mut c = ClusterConfig::default_local(7100, 42)
            .with_partitions(3, 2, 1 << 32)
            .unwrap();
        c.cluster.service = "chirper".into();
        c.chirper = Some(ChirperSection::default());
        c.execution = ExecutionSection::Ssmr;
        let old = c
            .to_toml()
            .replace("[execution]\nmodel = \"ssmr\"\n", "")
            .replace("[chirper]", "[dssmr]\nscheme = \"ssmr\"");
        assert!(old.contains("[dssmr]") && !old.contains("model"), "{old}");
        match ClusterConfig::parse(&old, "old.toml") {
            Err(ConfigError::Field { field, message, .. }) => {
                assert_eq!(field, "dssmr");
                assert!(
                    message.contains("model = \"ssmr\"") && message.contains("[chirper]"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn execution_is_optional_strict_and_speculation_needs_ring_paxos() {
        let good = ClusterConfig::default_local(7100, 42).to_toml();
        assert!(
            !good.contains("[execution]"),
            "defaults are not written: {good}"
        );
        assert!(
            !ClusterConfig::parse(&good, "x")
                .unwrap()
                .node_setup(4, svc())
                .speculative
        );
        let on = good.replace(
            "[batching]",
            "[execution]\nmodel = \"speculative\"\n\n[batching]",
        );
        let c = ClusterConfig::parse(&on, "x").unwrap();
        assert!(c.execution.is_speculative());
        assert!(c.node_setup(4, svc()).speculative);
        assert!(c.node_setup(1, svc()).speculative);
        assert_eq!(ClusterConfig::parse(&c.to_toml(), "x").unwrap(), c);
        let off = good.replace(
            "[batching]",
            "[execution]\nmodel = \"sequential\"\n\n[batching]",
        );
        assert_eq!(
            ClusterConfig::parse(&off, "x").unwrap().execution,
            ExecutionSection::Sequential
        );
        let cases = [
            (
                good.replace(
                    "[batching]",
                    "[execution]\nmodel = \"speculate\"\n\n[batching]",
                ),
                "execution.model",
            ),
            (
                good.replace(
                    "[batching]",
                    "[execution]\nspeculative = true\n\n[batching]",
                ),
                "model = \"speculative\"",
            ),
        ];
        for (text, field) in cases {
            let e = ClusterConfig::parse(&text, "f.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "error `{e}` does not name `{field}`");
        }
        let multi = on.replace("protocol = \"ring-paxos\"", "protocol = \"multi-paxos\"");
        let e = ClusterConfig::parse(&multi, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("execution.model") && e.contains("ring-paxos"),
            "{e}"
        );
        let mut cs = ClusterConfig::client_server(7200, 42);
        cs.execution = ExecutionSection::speculative(false);
        let e = ClusterConfig::parse(&cs.to_toml(), "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("execution.model"), "{e}");
    }

    #[test]
    fn early_replies_and_psmr_settings_are_strict() {
        let good = ClusterConfig::default_local(7100, 42).to_toml();
        assert!(
            !ClusterConfig::parse(&good, "x")
                .unwrap()
                .node_setup(4, svc())
                .early_replies
        );
        let on = good.replace(
            "[batching]",
            "[execution]\nmodel = \"speculative\"\nearly_replies = true\n\n[batching]",
        );
        let c = ClusterConfig::parse(&on, "x").unwrap();
        assert!(c.execution.early_replies() && c.node_setup(4, svc()).early_replies);
        assert_eq!(ClusterConfig::parse(&c.to_toml(), "x").unwrap(), c);
        // Speculation alone writes no early_replies line.
        let spec = ClusterConfig {
            execution: ExecutionSection::speculative(false),
            ..c.clone()
        };
        assert!(!spec.to_toml().contains("early_replies"));
        let psmr = |rest: &str| {
            good.replace(
                "[batching]",
                &format!("[execution]\nmodel = \"psmr\"\n{rest}\n\n[batching]"),
            )
        };
        let cases = [
            (
                good.replace(
                    "[batching]",
                    "[execution]\nmodel = \"sequential\"\nearly_replies = true\n\n[batching]",
                ),
                "execution.early_replies",
            ),
            (
                on.replace("early_replies = true", "early_replies = \"yes\""),
                "early_replies",
            ),
            (
                on.replace("early_replies = true", "early_reply = true"),
                "early_reply",
            ),
            (
                good.replace(
                    "[batching]",
                    "[execution]\nmodel = \"speculative\"\nspin_us = 50\n\n[batching]",
                ),
                "execution.spin_us",
            ),
            (psmr("threads = 2\nspin_us = 100001"), "execution.spin_us"),
            (psmr("threads = 2\nspin_us = -1"), "spin_us"),
            (psmr("threads = 0"), "execution.threads"),
            (psmr("threads = 65"), "execution.threads"),
            (psmr(""), "threads"),
        ];
        for (text, what) in cases {
            let e = ClusterConfig::parse(&text, "f.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(what), "error `{e}` does not name `{what}`");
        }
        let c = ClusterConfig::parse(&psmr("threads = 2\nkey_max = 99"), "x").unwrap();
        assert_eq!(
            c.psmr_layout().map(|l| (l.threads, l.key_max)),
            Some((2, 99))
        );
    }

    #[test]
    fn default_round_trips() {
        let c = ClusterConfig::default_local(7100, 42);
        let text = c.to_toml();
        assert_eq!(ClusterConfig::parse(&text, "x").unwrap(), c);
        let cs = ClusterConfig::client_server(7200, 42);
        assert_eq!(ClusterConfig::parse(&cs.to_toml(), "x").unwrap(), cs);
    }

    #[test]
    fn ring_decision_only_for_ring_paxos_in_smr_mode() {
        let c = ClusterConfig::default_local(7100, 42);
        assert_eq!(c.membership().ring_decision, RingDecision::Acceptor);
        let a = c
            .clone()
            .with_ring_decision(RingDecision::Coordinator)
            .unwrap();
        assert_eq!(a.membership().ring_decision, RingDecision::Coordinator);
        let text = a.to_toml();
        assert!(text.contains("ring_decision = \"coordinator\""), "{text}");
        assert_eq!(ClusterConfig::parse(&text, "x").unwrap(), a);
        let bad = text.replace(
            "ring_decision = \"coordinator\"",
            "ring_decision = \"anywhere\"",
        );
        let e = ClusterConfig::parse(&bad, "x").unwrap_err().to_string();
        assert!(e.contains("ring_decision") && e.contains("anywhere"), "{e}");
        let mut multi = c.clone();
        multi.set_protocol(Protocol::MultiPaxos);
        let e = multi
            .with_ring_decision(RingDecision::Coordinator)
            .unwrap_err();
        assert!(
            e.contains("ring_decision") && e.contains("multi-paxos"),
            "{e}"
        );
        let e = ClusterConfig::client_server(7200, 42)
            .with_ring_decision(RingDecision::Acceptor)
            .unwrap_err();
        assert!(e.contains("ring_decision") && e.contains("cs"), "{e}");
    }

    #[test]
    fn addresses_off_loopback_need_a_tls_section() {
        let plain = ClusterConfig::default_local(7100, 42)
            .to_toml()
            .replace("127.0.0.1:", "10.0.0.1:");
        let e = ClusterConfig::parse(&plain, "x").unwrap_err().to_string();
        assert!(e.contains("node.addr") && e.contains("[tls]"), "{e}");
        let insecure = format!("{plain}\n[tls]\ninsecure = true\n");
        let c = ClusterConfig::parse(&insecure, "x").unwrap();
        assert_eq!(c.addr(1).to_string(), "10.0.0.1:7101");
    }

    /// A node's address may be a DNS name: `localhost` always, another name only with
    /// a [tls] section (it may resolve off loopback); malformed names and ports are
    /// refused, each with the field and the reason. Connections dial the name as
    /// written; `resolve` gives the address now.
    #[test]
    fn node_addresses_may_be_names() {
        let named = |host: &str| {
            ClusterConfig::default_local(7100, 42)
                .to_toml()
                .replace("\"127.0.0.1:7103\"", &format!("\"{host}\""))
        };
        let c = ClusterConfig::parse(&named("localhost:7103"), "x").unwrap();
        assert_eq!(c.dial_addr(3), "localhost:7103");
        assert!(c.resolve(3).unwrap().ip().is_loopback());
        assert_eq!(c.resolve(3).unwrap().port(), 7103);
        assert_eq!(c.dial_addr(1), "127.0.0.1:7101");

        let e = ClusterConfig::parse(&named("db3.partita.svc:7103"), "x")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node.addr") && e.contains("`db3.partita.svc`") && e.contains("[tls]"),
            "{e}"
        );
        let insecure = format!(
            "{}\n[tls]\ninsecure = true\n",
            named("db3.partita.svc:7103")
        );
        let c = ClusterConfig::parse(&insecure, "x").unwrap();
        assert_eq!(c.dial_addr(3), "db3.partita.svc:7103");

        for (bad, why) in [
            ("db_3.svc:7103", "not a DNS name"),
            ("-db3:7103", "not a DNS name"),
            ("db3.:7103", "not a DNS name"),
            ("Db3:7103", "not a DNS name"),
            ("10.0.0.300:7103", "not a DNS name"),
            ("db3:0", "port 0"),
            ("db3:70000", "not a port number"),
            ("db3", "no `:port`"),
        ] {
            let text = format!("{}\n[tls]\ninsecure = true\n", named(bad));
            let e = ClusterConfig::parse(&text, "x").unwrap_err().to_string();
            assert!(e.contains("node.addr") && e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn psmr_spin_is_set_and_round_trips() {
        let good = ClusterConfig::default_local(7100, 42).to_toml();
        let c = ClusterConfig::parse(&good, "x").unwrap();
        assert_eq!(c.execution.spin(), std::time::Duration::from_micros(25));
        assert!(!good.contains("spin_us"));
        let text = good.replace(
            "[batching]",
            "[execution]\nmodel = \"psmr\"\nthreads = 2\nspin_us = 400\n\n[batching]",
        );
        let c = ClusterConfig::parse(&text, "x").unwrap();
        assert_eq!(c.execution.spin(), std::time::Duration::from_micros(400));
        assert_eq!(ClusterConfig::parse(&c.to_toml(), "x").unwrap(), c);
    }

    #[test]
    fn bad_fields_are_named() {
        let good = ClusterConfig::default_local(7100, 42).to_toml();
        let cases = [
            (
                good.replace("protocol = \"ring-paxos\"", "protocol = \"raft\""),
                "protocol",
            ),
            (
                good.replace("durability = \"fsync\"", "durability = \"sometimes\""),
                "durability",
            ),
            (good.replace("127.0.0.1:7101", "10.0.0.1:7101"), "node.addr"),
            (good.replace("127.0.0.1:7101", "localhost"), "node.addr"),
            (
                good.replace("coordinator = 1", "coordinator = 4"),
                "coordinator",
            ),
            (
                good.replace("batch_bytes_max = 8192", "batch_bytes_max = 1"),
                "batch_bytes_max",
            ),
            (
                good.replace("batcher_interval_ms = 0", "batcher_interval_ms = 5000"),
                "batcher_interval_ms",
            ),
            (
                good.replace("value_interval_ms = 0", "value_interval_ms = 1001"),
                "value_interval_ms",
            ),
            (good.replace("[batching]", "[batching]\nbogus = 3"), "bogus"),
            (good.replace("[storage]", "[storage]\nbogus = 3"), "bogus"),
            (
                good.replace("checkpoint_instances = 50000", "checkpoint_instances = -1"),
                "checkpoint_instances",
            ),
            (
                good.replace(
                    "wal_segment_bytes_max = 67108864",
                    "wal_segment_bytes_max = 10",
                ),
                "wal_segment_bytes_max",
            ),
            (
                good.replace(
                    "wal_preallocate_bytes = 1048576",
                    "wal_preallocate_bytes = 99999999999",
                ),
                "wal_preallocate_bytes",
            ),
            (good.replace("id = 42", "id = \"x\""), "id"),
        ];
        for (text, field) in cases {
            let e = ClusterConfig::parse(&text, "f.toml")
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "error `{e}` does not name `{field}`");
        }
    }

    #[test]
    fn field_errors_are_typed_with_the_file_field() {
        let good = ClusterConfig::default_local(7100, 42).to_toml();
        let cases = [
            (
                good.replace("coordinator = 1", "coordinator = 4"),
                "cluster.coordinator",
            ),
            (
                good.replace("roles = [\"acceptor\"]", "roles = [\"replica\"]"),
                "node.roles",
            ),
            (
                good.replace("[storage]", "[partitioning]\npartitions = 0\n\n[storage]"),
                "partitioning",
            ),
        ];
        for (text, want) in cases {
            assert_ne!(text, good, "case for {want} changed nothing");
            match ClusterConfig::parse(&text, "f.toml") {
                Err(ConfigError::Field { field, .. }) => assert_eq!(field, want),
                other => panic!("{want}: {other:?}"),
            }
        }
    }

    #[test]
    fn batchers_are_standalone_or_co_located_and_smr_only() {
        let c = ClusterConfig::default_local(7100, 42)
            .with_batchers(2)
            .unwrap();
        let text = c.to_toml();
        let back = ClusterConfig::parse(&text, "x").unwrap();
        assert_eq!(back, c);
        assert_eq!(back.membership().batchers, vec![6, 7]);
        assert_eq!(back.batcher_config().min_interval_ticks, 0);
        let mut slow = c.clone();
        slow.batching.batcher_interval_ms = 3;
        assert_eq!(slow.batcher_config().min_interval_ticks, 3);
        slow.batching.value_interval_ms = 4;
        assert_eq!(slow.coordinator_config().value_interval_ticks, 4);
        assert_eq!(c.coordinator_config().value_interval_ticks, 0);
        assert_eq!(back.addr(7).port(), 7107);
        let standalone = back.node_setup(6, svc());
        assert!(standalone.batcher && !standalone.acceptor && !standalone.replica);
        assert_eq!(standalone.batcher_config.batch_bytes_max, 8192);
        assert!(!back.node_setup(1, svc()).batcher);
        // Co-located with an acceptor.
        let mut co = ClusterConfig::default_local(7100, 42);
        co.nodes[1].roles.push(Role::Batcher);
        let co = ClusterConfig::parse(&co.to_toml(), "x").unwrap();
        assert_eq!(co.membership().batchers, vec![2]);
        assert!(co.node_setup(2, svc()).batcher && co.node_setup(2, svc()).acceptor);
        // Refused in cs mode, naming the field.
        let mut cs = ClusterConfig::client_server(7200, 42);
        assert!(cs.clone().with_batchers(1).is_err());
        cs.nodes[0].roles.push(Role::Batcher);
        let e = ClusterConfig::parse(&cs.to_toml(), "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("node.roles") && e.contains("batcher"), "{e}");
        // An unknown role is named.
        let e = ClusterConfig::parse(&text.replace("\"batcher\"", "\"batch\""), "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("batch"), "{e}");
        // Partitions and batchers compose: batchers keep their ids.
        let both = ClusterConfig::default_local(7100, 42)
            .with_partitions(2, 2, 1000)
            .unwrap()
            .with_batchers(1)
            .unwrap();
        let both = ClusterConfig::parse(&both.to_toml(), "x").unwrap();
        assert_eq!(both.membership().batchers, vec![8]);
        assert_eq!(both.executors(), vec![4, 5, 6, 7]);
    }

    /// A client enters at its reply replica when that replica batches, else at a
    /// batcher by index, or at the coordinator; a cs client at the server.
    #[test]
    fn first_entry_is_the_reply_replica_when_it_batches() {
        let plain = ClusterConfig::default_local(7100, 1);
        let coordinator = plain.entry_node();
        assert_eq!(plain.first_entry(4, 0), coordinator);
        assert_eq!(plain.first_entry(5, 1), coordinator);
        let rb = plain.clone().with_replicas_batching().unwrap();
        // The cluster file of such a cluster is a valid one.
        ClusterConfig::parse(&rb.to_toml(), "rb.toml").unwrap();
        for index in 0..4 {
            assert_eq!(rb.first_entry(4, index), 4);
            assert_eq!(rb.first_entry(5, index), 5);
        }
        let standalone = plain.clone().with_batchers(2).unwrap();
        let batchers = standalone.membership().batchers;
        assert_eq!(batchers.len(), 2);
        assert_eq!(standalone.first_entry(4, 0), batchers[0]);
        assert_eq!(standalone.first_entry(4, 1), batchers[1]);
        let cs = ClusterConfig::client_server(7100, 1);
        assert_eq!(cs.first_entry(cs.executors()[0], 3), cs.entry_node());
        assert!(ClusterConfig::client_server(7100, 1)
            .with_replicas_batching()
            .is_err());
        // A cs server has no replicas to partition either.
        let e = ClusterConfig::client_server(7100, 1)
            .with_partitions(2, 2, 1000)
            .unwrap_err();
        assert!(e.contains("smr"), "{e}");
    }

    #[test]
    fn partitioning_is_optional_and_strict() {
        let mut c = ClusterConfig::default_local(7100, 42);
        assert!(!c.to_toml().contains("[partitioning]"));
        assert!(!c.membership().is_partitioned());
        c.partitioning.partitions = 2;
        c.partitioning.key_space = 1000;
        let err = |c: &ClusterConfig| {
            ClusterConfig::parse(&c.to_toml(), "t")
                .expect_err("must be refused")
                .to_string()
        };
        // Replicas must name their partition.
        assert!(err(&c).contains("node.partition"), "{}", err(&c));
        c.nodes[3].partition = Some(0);
        c.nodes[4].partition = Some(2);
        assert!(
            err(&c).contains("partition 2 does not exist"),
            "{}",
            err(&c)
        );
        c.nodes[4].partition = Some(1);
        let ok = ClusterConfig::parse(&c.to_toml(), "t").unwrap();
        let m = ok.membership();
        assert!(m.is_partitioned());
        assert_eq!(m.learners_of(0), vec![4]);
        assert_eq!(m.learners_of(1), vec![5]);
        assert_eq!(m.partitions.map.of_key(600), 1);
        // Only replicas have a partition.
        c.nodes[0].partition = Some(0);
        assert!(err(&c).contains("not a replica"), "{}", err(&c));
        c.nodes[0].partition = None;
        // A partition without replicas.
        c.partitioning.partitions = 3;
        assert!(
            err(&c).contains("partition 2 has no replica"),
            "{}",
            err(&c)
        );
        c.partitioning.partitions = 0;
        assert!(err(&c).contains("partitioning"), "{}", err(&c));
        let text = ClusterConfig::default_local(7100, 42).to_toml()
            + "\n[partitioning]\npartitions = 1\nkeyspace = 5\n";
        assert!(ClusterConfig::parse(&text, "t")
            .unwrap_err()
            .to_string()
            .contains("keyspace"));
    }

    #[test]
    fn wan_is_optional_and_places_every_node() {
        let c = ClusterConfig::paper_wan_local(7100, 42);
        let text = c.to_toml();
        assert!(text.contains("[wan]\npreset = \"paper\""), "{text}");
        assert!(text.contains("region = \"Virginia\""), "{text}");
        let parsed = ClusterConfig::parse(&text, "t").unwrap();
        assert_eq!(parsed, c);
        let ms = |a, b| parsed.node_delay(a, b).as_micros();
        assert_eq!(ms(2, 3), 45_000, "Virginia to Europe: half of 90 ms");
        assert_eq!(ms(3, 1), 75_000, "Europe to California: half of 150 ms");
        assert_eq!(ms(1, 2), 35_000, "California to Virginia: half of 70 ms");
        assert_eq!(ms(2, 2), 0);
        assert_eq!(parsed.client_region(0), None, "clients placed nowhere");
        // Without the section nothing is delayed (every existing file).
        let plain = ClusterConfig::default_local(7100, 42);
        assert!(!plain.to_toml().contains("wan"));
        assert_eq!(plain.node_delay(1, 4), std::time::Duration::ZERO);
        assert_eq!(plain.wan(), None);
        // A matrix of one's own, and clients placed round robin.
        let own = text.replace(
            "preset = \"paper\"",
            "regions = [\"California\", \"Virginia\", \"Europe\"]\n\
             rtt_ms = [[0, 20, 30], [20, 0, 40], [30, 40, 0]]\n\
             clients = [\"europe\", \"California\"]",
        );
        let own = ClusterConfig::parse(&own, "t").unwrap();
        assert_eq!(own.node_delay(2, 3).as_micros(), 20_000);
        let w = own.wan().unwrap();
        assert_eq!(own.client_region(0), w.region("Europe"));
        assert_eq!(own.client_region(3), w.region("California"));
    }

    #[test]
    fn wan_errors_name_their_field() {
        let good = ClusterConfig::paper_wan_local(7100, 42).to_toml();
        let cases = [
            // A node without a region when the section exists.
            (
                good.replacen("region = \"California\"\n", "", 1),
                "node.region",
                "node 1 has no region",
            ),
            (
                good.replace("region = \"Europe\"", "region = \"Mars\""),
                "node.region",
                "`Mars` is not a region",
            ),
            (
                good.replace("preset = \"paper\"", "preset = \"earth\""),
                "wan.preset",
                "unknown preset",
            ),
            (
                good.replace(
                    "preset = \"paper\"",
                    "regions = [\"California\", \"Virginia\", \"Europe\"]\n\
                     rtt_ms = [[0, 70, 150], [71, 0, 90], [150, 90, 0]]",
                ),
                "wan.rtt_ms",
                "symmetric",
            ),
            (
                good.replace(
                    "preset = \"paper\"",
                    "regions = [\"California\", \"Virginia\", \"Europe\"]\n\
                     rtt_ms = [[0, -70, 150], [-70, 0, 90], [150, 90, 0]]",
                ),
                "wan.rtt_ms",
                "0 to 10000",
            ),
            (
                good.replace(
                    "preset = \"paper\"",
                    "regions = [\"California\", \"Virginia\", \"Europe\"]\n\
                     rtt_ms = [[0, 70, 150], [70, 0, 90]]",
                ),
                "wan.rtt_ms",
                "2 rows for 3 regions",
            ),
            (
                good.replace(
                    "preset = \"paper\"",
                    "regions = [\"California\", \"Virginia\", \"Europe\"]\n\
                     rtt_ms = [[0, 70, 150], [70, 0], [150, 90, 0]]",
                ),
                "wan.rtt_ms",
                "row 1",
            ),
            (
                good.replace("preset = \"paper\"", "clients = [\"Europe\"]"),
                "wan.regions",
                "preset",
            ),
            (
                good.replace(
                    "preset = \"paper\"",
                    "preset = \"paper\"\nclients = [\"Asia\"]",
                ),
                "wan.clients",
                "`Asia` is not a region",
            ),
            // A region without the section.
            (
                ClusterConfig::default_local(7100, 42).to_toml().replacen(
                    "roles = [\"acceptor\"]",
                    "roles = [\"acceptor\"]\nregion = \"Europe\"",
                    1,
                ),
                "node.region",
                "no [wan] section",
            ),
        ];
        for (text, want_field, want_text) in cases {
            assert_ne!(text, good, "case for {want_text} changed nothing");
            match ClusterConfig::parse(&text, "f.toml") {
                Err(ConfigError::Field { field, message, .. }) => {
                    assert_eq!(field, want_field, "{message}");
                    assert!(message.contains(want_text), "{field}: {message}");
                }
                other => panic!("{want_text}: {other:?}"),
            }
        }
        // A field the section does not know.
        let e = ClusterConfig::parse(&good.replace("[wan]", "[wan]\nrtt = 3"), "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rtt"), "{e}");
    }

    /// P-SMR over Multi-Ring Paxos (paper 002 §V-B): a ring per thread's group and
    /// one for g_all; the groups a ring names are threads, checked as such.
    #[test]
    fn psmr_threads_take_a_ring_per_group_and_one_for_g_all() {
        let mut base = ClusterConfig::default_local(7100, 42);
        base.execution = ExecutionSection::psmr(2, false, None);
        base.validate().unwrap();
        assert!(base
            .clone()
            .with_multiring(3, 1)
            .unwrap_err()
            .message
            .contains("rings = 2"));
        let c = base.with_multiring(2, 2).unwrap();
        let setup = c.multiring_setup().unwrap();
        assert_eq!(setup.psmr_threads, 2);
        let groups: Vec<u64> = setup.rings.iter().map(|r| r.groups).collect();
        assert_eq!(groups, vec![0b01, 0b10, 0b11]);
        let t = c.client_topology();
        assert_eq!(t.rings.len(), 3);
        assert!(t.psmr.is_some());
        let good = c.to_toml();
        ClusterConfig::parse(&good, "f.toml").unwrap();
        // Ring 2 carries thread 1's group: name a thread that does not exist, or leave
        // no ring for g_all.
        let ring2 = good.find("id = 2").unwrap();
        let at = ring2 + good[ring2..].find("groups = [1]").unwrap();
        let cases = [
            (
                format!("{}groups = [2]{}", &good[..at], &good[at + 12..]),
                "thread group 2 does not exist (threads = 2)",
            ),
            (
                good.replace(
                    "\n\n[[ordering.ring]]\nid = 3",
                    "\n\n[[ordering.ring]]\nid = 3\ngroups = [0]",
                ),
                "one ring must carry every thread group",
            ),
        ];
        for (text, want) in cases {
            assert_ne!(text, good, "case for {want} changed nothing");
            match ClusterConfig::parse(&text, "f.toml") {
                Err(ConfigError::Field { field, message, .. }) => {
                    assert_eq!(field, "ordering.ring.groups", "{message}");
                    assert!(message.contains(want), "{message}");
                }
                other => panic!("{want}: {other:?}"),
            }
        }
    }

    /// EPaxos's window is its own setting: read, round-tripped, and refused out of range
    /// naming the field; a GeoPaxos+ section does not take it.
    #[test]
    fn epaxos_takes_its_own_window() {
        let mut c = ClusterConfig::paper_geo_local(7100, 42, 100);
        c.ordering = OrderingSection::Epaxos(EpaxosSection {
            window_instances_max: 4,
            ..EpaxosSection::with_keys(100)
        });
        let text = c.to_toml();
        assert!(text.contains("window_instances_max = 4"), "{text}");
        let back = ClusterConfig::parse(&text, "x").unwrap();
        assert_eq!(back.geo_setup().unwrap().epaxos_window, 4);
        let zero = text.replace("window_instances_max = 4", "window_instances_max = 0");
        match ClusterConfig::parse(&zero, "x") {
            Err(ConfigError::Field { field, .. }) => {
                assert_eq!(field, "ordering.window_instances_max")
            }
            other => panic!("{other:?}"),
        }
        let geo = ClusterConfig::paper_geo_local(7100, 42, 100).to_toml();
        let e = ClusterConfig::parse(
            &geo.replace(
                "protocol = \"geopaxos+\"",
                "protocol = \"geopaxos+\"\nwindow_instances_max = 4",
            ),
            "x",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("window_instances_max"), "{e}");
    }

    /// `[ordering]` is one typed choice: each protocol round-trips, an unknown one and a
    /// setting of another protocol are refused naming the field, and cluster files
    /// written before `[ordering]` are refused with what to write instead.
    #[test]
    fn ordering_is_one_typed_choice_with_its_own_settings() {
        let base = ClusterConfig::default_local(7100, 42);
        assert_eq!(base.ordering.protocol(), OrderingProtocol::RingPaxos);
        let mut multi = base.clone();
        multi.set_protocol(Protocol::MultiPaxos);
        let rings = base.clone().with_multiring(2, 1).unwrap();
        let geo = ClusterConfig::paper_geo_local(7100, 42, 100);
        let mut epaxos = geo.clone();
        epaxos.ordering = OrderingSection::Epaxos(EpaxosSection::with_keys(100));
        let mut geopaxos = geo.clone();
        geopaxos.ordering = OrderingSection::GeoPaxos(GeoSection::geopaxos(100));
        let mut random = geo.clone();
        random.ordering.geo_mut().unwrap().placement = partita_geo::Placement::Random;
        for (c, name) in [
            (&base, "ring-paxos"),
            (&multi, "multi-paxos"),
            (&rings, "multi-ring"),
            (&geo, "geopaxos+"),
            (&random, "geopaxos+"),
            (&geopaxos, "geopaxos"),
            (&epaxos, "epaxos"),
        ] {
            let text = c.to_toml();
            assert!(
                text.contains(&format!("[ordering]\nprotocol = \"{name}\"")),
                "{text}"
            );
            assert_eq!(ClusterConfig::parse(&text, "x").unwrap(), *c, "{name}");
        }
        let parse_err = |text: &str| ClusterConfig::parse(text, "x").unwrap_err().to_string();
        let text = base.to_toml();
        let e = parse_err(&text.replace("protocol = \"ring-paxos\"", "protocol = \"raft\""));
        assert!(e.contains("ordering.protocol") && e.contains("raft"), "{e}");
        assert!(e.contains("multi-ring") && e.contains("epaxos"), "{e}");
        let e = parse_err(&text.replace(
            "protocol = \"ring-paxos\"",
            "protocol = \"ring-paxos\"\nm = 2",
        ));
        assert!(
            e.contains("field `ordering.m`") && e.contains("ring-paxos"),
            "{e}"
        );
        let e = parse_err(
            &geo.to_toml()
                .replace("protocol = \"geopaxos+\"", "protocol = \"epaxos\""),
        );
        assert!(e.contains("field `ordering.order`"), "{e}");
        let e = parse_err(&text.replace(
            "protocol = \"ring-paxos\"",
            "protocol = \"ring-paxos\"\nring_decision = \"nowhere\"",
        ));
        assert!(
            e.contains("field `ordering.ring_decision`") && e.contains("nowhere"),
            "{e}"
        );
        // GeoPaxos fixes what GeoPaxos+ chooses: DOPs, the optimizer, the placement.
        let geopaxos_text = geopaxos.to_toml();
        assert!(!geopaxos_text.contains("placement"), "{geopaxos_text}");
        for setting in [
            "dop_interval_ms = 1000",
            "optimizer = \"brute-force\"",
            "placement = \"single\"",
        ] {
            let e = parse_err(&geopaxos_text.replace(
                "protocol = \"geopaxos\"",
                &format!("protocol = \"geopaxos\"\n{setting}"),
            ));
            let field = setting.split(' ').next().unwrap();
            assert!(
                e.contains(&format!("field `ordering.{field}`")) && e.contains("geopaxos"),
                "{e}"
            );
        }
        let e = parse_err(
            &geo.to_toml()
                .replace("placement = \"home\"", "placement = \"everywhere\""),
        );
        assert!(
            e.contains("ordering.placement") && e.contains("random"),
            "{e}"
        );
        // Set by hand past the parser, a GeoPaxos that moves objects is refused too.
        let mut moving = geopaxos.clone();
        moving.ordering.geo_mut().unwrap().dop_interval_ms = 1000;
        let e = moving.validate().unwrap_err();
        assert_eq!(e.field, "ordering.protocol", "{e:?}");

        // Written before [ordering]: each refused naming the old field and the new one.
        let old = text.replace("\n[ordering]\nprotocol = \"ring-paxos\"\n", "\n");
        let cases = [
            (
                old.replace(
                    "mode = \"smr\"",
                    "mode = \"smr\"\nprotocol = \"multipaxos\"",
                ),
                "cluster.protocol",
                "[ordering] protocol = \"multi-paxos\"",
            ),
            (
                old.replace(
                    "mode = \"smr\"",
                    "mode = \"smr\"\nring_decision = \"coordinator\"",
                ),
                "cluster.ring_decision",
                "`ring_decision` under [ordering]",
            ),
            (
                format!("{old}\n[multiring]\nm = 1\n"),
                "multiring",
                "protocol = \"multi-ring\"",
            ),
            (
                format!("{old}\n[geopaxos]\nkeys = 10\nordering = \"epaxos\"\n"),
                "geopaxos",
                "protocol = \"epaxos\"",
            ),
        ];
        for (text, field, want) in cases {
            match ClusterConfig::parse(&text, "old.toml") {
                Err(ConfigError::Field {
                    field: f, message, ..
                }) => {
                    assert_eq!(f, field, "{message}");
                    assert!(message.contains(want), "{field}: {message}");
                }
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
