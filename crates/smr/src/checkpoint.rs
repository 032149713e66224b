//! Replica checkpoints: the replicated state of a [`SequentialReplica`] at an instance
//! boundary, in one self-describing, checksummed byte string.
//!
//! A checkpoint holds everything that determines how the replica answers from then on:
//! the service's state (its own snapshot), the exactly-once reply cache (so that a command resubmitted
//! after a restore, a restart or a state transfer is answered from the cache instead of
//! being executed twice), and the instance it covers (every instance up to and
//! including it has been executed). It also names the cluster and the node that wrote
//! it, so that a checkpoint found in the wrong data directory is refused instead of
//! silently adopted. Replica statistics are not part of it.
//!
//! Layout, little endian (`HEADER_BYTES` = 104 bytes of header; versions 5 and 4,
//! without the execution name, 96 bytes, and version 3, which had no ordering section
//! either, 88 bytes, are still read, their name being the instance; before version 5
//! a session has no home):
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0 | 8 | magic `b"PCHKPT\0\x01"` |
//! | 8 | 4 | format version ([`CHECKPOINT_VERSION`]) |
//! | 12 | 4 | node id of the replica that wrote it |
//! | 16 | 8 | cluster id |
//! | 24 | 8 | instance covered |
//! | 32 | 8 | digest of the service state ([`StateMachine::digest`]) |
//! | 40 | 8 | objects the service holds ([`StateMachine::len`]) |
//! | 48 | 8 | client sessions |
//! | 56 | 8 | bytes of the sessions section |
//! | 64 | 8 | bytes of the service section |
//! | 72 | 8 | the service: [`service_id`] of its name (a checkpoint of one service is never restored into another) |
//! | 80 | 8 | ordered time (ms) of the last value executed (session leases continue from it) |
//! | 88 | 8 | bytes of the ordering section |
//! | 96 | 8 | the highest execution name covered (what replies and session opens call an execution: the instance itself for one stream; Multi-Ring Paxos names a value by its place among every ring's, the same at every partition, so a partition's names run ahead of its instances) |
//! | 104 | … | sessions: per client, in client order, `len:u32 \| codec(Session)` (with the reply to its last mutation) |
//! | … | … | ordering: where the ordering layer's delivery stream stands at the instance, opaque here (Multi-Ring Paxos: the merge position; empty for one stream) |
//! | … | … | service state: its [`StateMachine::snapshot`] |
//! | end − 4 | 4 | CRC32C of every byte before it |
//!
//! The bytes are a function of the replicated state only (the cache is written in
//! client order), so two replicas with the same state at the same instance write
//! the same checkpoint except for the node id and the checksum.
//!
//! Any damage is reported as a [`CheckpointError`], never a panic: the outer checksum
//! is checked before anything is decoded, and every section is then validated again
//! (the service restores its own snapshot; the header's digest and object count must
//! match the restored state).

use crate::sessions::{Session, Sessions};
use crate::SequentialReplica;
use partita_service::StateMachine;
use partita_types::{ClientId, Instance, NodeId};

/// First 8 bytes of every checkpoint.
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"PCHKPT\0\x01";
/// The format version this build writes (2: any service, named in the header; 3:
/// client sessions with their lease times instead of a bare reply cache; 4: an
/// ordering section; 5: each session with its home serializers, GeoPaxos+; 6: the
/// execution name covered, Multi-Ring Paxos). Versions 3, 4 and 5 are still read.
pub const CHECKPOINT_VERSION: u32 = 6;
const HEADER_BYTES: usize = 104;
/// The previous format (no execution name), still restored.
const CHECKPOINT_VERSION_5: u32 = 5;
/// The format before it (sessions without their home), still restored.
const CHECKPOINT_VERSION_4: u32 = 4;
/// Versions 4 and 5 have no execution name field.
const HEADER_BYTES_4: usize = 96;
/// The oldest format still restored (no ordering section).
const CHECKPOINT_VERSION_3: u32 = 3;
const HEADER_BYTES_3: usize = 88;

/// The header size of a format version this build reads.
fn header_bytes(version: u32) -> Result<usize, CheckpointError> {
    match version {
        CHECKPOINT_VERSION => Ok(HEADER_BYTES),
        CHECKPOINT_VERSION_5 | CHECKPOINT_VERSION_4 => Ok(HEADER_BYTES_4),
        CHECKPOINT_VERSION_3 => Ok(HEADER_BYTES_3),
        v => Err(CheckpointError::Version(v)),
    }
}

/// The id a checkpoint stores for a service: 64-bit FNV-1a of its name.
pub fn service_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
const TRAILER_BYTES: usize = 4;

/// What a checkpoint's header says (after its checksum was verified).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    pub cluster_id: u64,
    /// The replica that wrote it.
    pub node_id: NodeId,
    /// Every instance up to and including this one is reflected.
    pub instance: Instance,
    /// The highest execution name it reflects (the instance, before version 6): no
    /// session or cached reply names a later one.
    pub name: Instance,
    pub digest: u64,
    pub entries: u64,
    pub clients: u64,
    /// [`service_id`] of the service whose state it holds.
    pub service: u64,
    /// Ordered time of the last value it reflects.
    pub time_ms: u64,
    /// Size of the whole checkpoint.
    pub bytes: u64,
    /// Where the ordering section lies (`start..end` of the bytes; empty in version
    /// 3): see [`checkpoint_ordering`].
    pub ordering: std::ops::Range<usize>,
    /// The CRC32C trailer (also the checksum state transfer announces).
    pub crc32c: u32,
}

/// The largest instance a checkpoint may name (2^62): a log that decides a million
/// instances a second takes 146,000 years to get there. Past it, the instance arithmetic
/// of recovery and state transfer (the next instance to deliver) could overflow, so a
/// checkpoint naming more is refused like a damaged one (fuzzing, `checkpoint_multiring`).
pub const INSTANCE_MAX: u64 = 1 << 62;

/// Why a checkpoint was refused. Nothing is restored when any of these is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint of {0} bytes is shorter than its header and checksum")]
    Truncated(usize),
    #[error("not a Partita checkpoint (bad magic)")]
    Magic,
    #[error("checkpoint format version {0} is not one this build reads ({CHECKPOINT_VERSION_3} to {CHECKPOINT_VERSION})")]
    Version(u32),
    #[error("checkpoint of {actual} bytes, its header implies {expected}")]
    Length { expected: u64, actual: u64 },
    #[error("checkpoint at instance {0}, beyond any log ({INSTANCE_MAX} at most)")]
    Instance(u64),
    #[error("checkpoint checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error(
        "checkpoint belongs to cluster {found_cluster_id} node {found_node_id}, expected cluster \
         {expected_cluster_id}{}",
        expected_node_id.map(|n| format!(" node {n}")).unwrap_or_default()
    )]
    Foreign {
        expected_cluster_id: u64,
        expected_node_id: Option<NodeId>,
        found_cluster_id: u64,
        found_node_id: NodeId,
    },
    #[error("checkpoint reply cache entry {index}: {reason}")]
    ReplyCache { index: u64, reason: String },
    #[error("checkpoint of another service (id {found:#018x}), this replica runs `{expected}`")]
    Service { expected: &'static str, found: u64 },
    #[error("checkpoint service section: {0}")]
    State(String),
    #[error("checkpoint header says {header_entries} objects with digest {header_digest:#018x}, the state holds {entries} with {digest:#018x}")]
    Contents {
        header_entries: u64,
        header_digest: u64,
        entries: u64,
        digest: u64,
    },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Check magic, version, lengths and the checksum; return the header. Reads every
/// byte once (CRC32C), decodes nothing else.
pub fn verify_checkpoint(bytes: &[u8]) -> Result<CheckpointInfo, CheckpointError> {
    let info = checkpoint_header(bytes)?;
    let body = bytes.len() - TRAILER_BYTES;
    let stored = u32_at(bytes, body);
    let computed = crc32c::crc32c(&bytes[..body]);
    if stored != computed {
        return Err(CheckpointError::Checksum { stored, computed });
    }
    Ok(info)
}

/// [`verify_checkpoint`] of a checkpoint that must belong to cluster `cluster_id`
/// (written by any of its replicas); another cluster's is refused with
/// [`CheckpointError::Foreign`].
pub fn verify_checkpoint_of(
    bytes: &[u8],
    cluster_id: u64,
) -> Result<CheckpointInfo, CheckpointError> {
    let info = verify_checkpoint(bytes)?;
    if info.cluster_id != cluster_id {
        return Err(CheckpointError::Foreign {
            expected_cluster_id: cluster_id,
            expected_node_id: None,
            found_cluster_id: info.cluster_id,
            found_node_id: info.node_id,
        });
    }
    Ok(info)
}

/// Parse the header and check that the section lengths add up to `bytes.len()`,
/// without verifying the checksum (cheap: for a first look at a file's identity).
pub fn checkpoint_header(bytes: &[u8]) -> Result<CheckpointInfo, CheckpointError> {
    if bytes.len() < HEADER_BYTES_3 + TRAILER_BYTES {
        return Err(CheckpointError::Truncated(bytes.len()));
    }
    if bytes[..8] != CHECKPOINT_MAGIC {
        return Err(CheckpointError::Magic);
    }
    let header = header_bytes(u32_at(bytes, 8))?;
    if bytes.len() < header + TRAILER_BYTES {
        return Err(CheckpointError::Truncated(bytes.len()));
    }
    let replies_bytes = u64_at(bytes, 56);
    let tree_bytes = u64_at(bytes, 64);
    let ordering_bytes = if header >= HEADER_BYTES_4 {
        u64_at(bytes, 88)
    } else {
        0
    };
    let expected = replies_bytes
        .checked_add(tree_bytes)
        .and_then(|b| b.checked_add(ordering_bytes))
        .and_then(|b| b.checked_add((header + TRAILER_BYTES) as u64));
    if expected != Some(bytes.len() as u64) {
        return Err(CheckpointError::Length {
            expected: expected.unwrap_or(u64::MAX),
            actual: bytes.len() as u64,
        });
    }
    let instance = u64_at(bytes, 24);
    if instance > INSTANCE_MAX {
        return Err(CheckpointError::Instance(instance));
    }
    Ok(CheckpointInfo {
        node_id: u32_at(bytes, 12),
        cluster_id: u64_at(bytes, 16),
        instance,
        name: if header >= HEADER_BYTES {
            u64_at(bytes, 96)
        } else {
            instance
        },
        digest: u64_at(bytes, 32),
        entries: u64_at(bytes, 40),
        clients: u64_at(bytes, 48),
        service: u64_at(bytes, 72),
        time_ms: u64_at(bytes, 80),
        bytes: bytes.len() as u64,
        crc32c: u32_at(bytes, bytes.len() - TRAILER_BYTES),
        // In bounds: the section lengths add up to the size (checked above).
        ordering: {
            let start = header + replies_bytes as usize;
            start..start + ordering_bytes as usize
        },
    })
}

/// Cluster id, node id and instance from the first [`CHECKPOINT_IDENTITY_BYTES`] of
/// a checkpoint (magic and version checked, nothing else): enough to tell whose it is
/// without reading all of it.
pub fn checkpoint_identity(prefix: &[u8]) -> Result<(u64, NodeId, Instance), CheckpointError> {
    if prefix.len() < CHECKPOINT_IDENTITY_BYTES {
        return Err(CheckpointError::Truncated(prefix.len()));
    }
    if prefix[..8] != CHECKPOINT_MAGIC {
        return Err(CheckpointError::Magic);
    }
    header_bytes(u32_at(prefix, 8))?;
    Ok((u64_at(prefix, 16), u32_at(prefix, 12), u64_at(prefix, 24)))
}

/// The ordering section of a checkpoint that [`verify_checkpoint`] accepted (what
/// [`SequentialReplica::checkpoint_with`] was given; empty in version 3).
pub fn checkpoint_ordering<'a>(bytes: &'a [u8], info: &CheckpointInfo) -> &'a [u8] {
    &bytes[info.ordering.clone()]
}

/// Bytes [`checkpoint_identity`] needs.
pub const CHECKPOINT_IDENTITY_BYTES: usize = 32;

/// Rewrite the node id of a verified checkpoint (and its checksum): a replica that
/// restored a peer's checkpoint keeps it as its own. O(n) for the checksum.
pub fn restamp_checkpoint(bytes: &mut [u8], node_id: NodeId) -> Result<(), CheckpointError> {
    verify_checkpoint(bytes)?;
    bytes[12..16].copy_from_slice(&node_id.to_le_bytes());
    let body = bytes.len() - TRAILER_BYTES;
    let crc = crc32c::crc32c(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Planted bugs only (`member-join-without-transfer`): the same checkpoint, claiming
/// to cover every instance up to `instance`.
pub fn unsafe_move_checkpoint(bytes: &mut [u8], instance: Instance) -> Result<(), CheckpointError> {
    verify_checkpoint(bytes)?;
    bytes[24..32].copy_from_slice(&instance.to_le_bytes());
    let body = bytes.len() - TRAILER_BYTES;
    let crc = crc32c::crc32c(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// What a checkpoint holds besides the service's state section: written by any
/// execution model that keeps its sessions in [`Sessions`] (the sequential replica, the
/// S-SMR/DS-SMR member replicas).
pub struct CheckpointParts<'a> {
    pub node_id: NodeId,
    pub cluster_id: u64,
    pub instance: Instance,
    /// The highest execution name covered ([`CheckpointInfo::name`]).
    pub name: Instance,
    pub digest: u64,
    pub entries: u64,
    /// The service's name ([`service_id`] goes into the header).
    pub service: &'a str,
    pub sessions: &'a Sessions,
    /// The ordering layer's position (opaque; [`checkpoint_ordering`]).
    pub ordering: &'a [u8],
}

/// A checkpoint of `parts` and the state section `state` (its bytes are reused for
/// the result: the state section dominates, so rather than copy it into a second
/// buffer the snapshot's own buffer grows, and the snapshot slides up to make room for
/// the header and the reply cache in front).
pub fn write_checkpoint(parts: CheckpointParts<'_>, state: Vec<u8>) -> Vec<u8> {
    let clients = parts.sessions.sorted();
    let mut replies = Vec::with_capacity(clients.len() * 64);
    for session in &clients {
        let enc = partita_types::encode(*session);
        replies.extend_from_slice(&(enc.len() as u32).to_le_bytes());
        replies.extend_from_slice(&enc);
    }
    let ordering = parts.ordering;
    let mut out = state;
    let tree_bytes = out.len();
    let front = HEADER_BYTES + replies.len() + ordering.len();
    let total = front + tree_bytes + TRAILER_BYTES;
    out.resize(total, 0);
    out.copy_within(0..tree_bytes, front);
    let header = header(&[
        parts.node_id.into(),
        parts.cluster_id,
        parts.instance,
        parts.digest,
        parts.entries,
        clients.len() as u64,
        replies.len() as u64,
        tree_bytes as u64,
        service_id(parts.service),
        parts.sessions.now_ms(),
        ordering.len() as u64,
        parts.name,
    ]);
    out[..HEADER_BYTES].copy_from_slice(&header);
    let replies_end = HEADER_BYTES + replies.len();
    out[HEADER_BYTES..replies_end].copy_from_slice(&replies);
    out[replies_end..front].copy_from_slice(ordering);
    let body = total - TRAILER_BYTES;
    let crc = crc32c::crc32c(&out[..body]);
    out[body..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The header of the current format: magic, version, then the node id (4 bytes) and
/// the other fields (8 bytes each) in the layout's order, from `fields[0]` (the node
/// id) to `fields[11]` (the execution name).
fn header(fields: &[u64; 12]) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_BYTES);
    h.extend_from_slice(&CHECKPOINT_MAGIC);
    h.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    let node = NodeId::try_from(fields[0]).expect("a node id");
    h.extend_from_slice(&node.to_le_bytes());
    for f in &fields[1..] {
        h.extend_from_slice(&f.to_le_bytes());
    }
    assert_eq!(h.len(), HEADER_BYTES);
    h
}

/// A checkpoint that seeds replica `node_id` of a new cluster `cluster_id` with the
/// service state of the verified checkpoint `bytes` (`partita snapshot restore`): the
/// same state, digest and ordered time, at instance 0 (the new cluster's first
/// instance is the next), without the old cluster's client sessions or ordering
/// position. Any format still read gives a current-format result.
pub fn seed_checkpoint(
    bytes: &[u8],
    cluster_id: u64,
    node_id: NodeId,
) -> Result<Vec<u8>, CheckpointError> {
    let info = verify_checkpoint(bytes)?;
    let state = &bytes[info.ordering.end..bytes.len() - TRAILER_BYTES];
    let mut out = header(&[
        node_id.into(),
        cluster_id,
        0,
        info.digest,
        info.entries,
        0,
        0,
        state.len() as u64,
        info.service,
        info.time_ms,
        0,
        0,
    ]);
    out.reserve(state.len() + TRAILER_BYTES);
    out.extend_from_slice(state);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// The reply-cache section of a verified checkpoint of service `service` (each entry
/// checked against the header), and its state section.
pub fn read_checkpoint<'a>(
    bytes: &'a [u8],
    info: &CheckpointInfo,
    service: &'static str,
) -> Result<(Vec<Session>, &'a [u8]), CheckpointError> {
    if info.service != service_id(service) {
        return Err(CheckpointError::Service {
            expected: service,
            found: info.service,
        });
    }
    let replies_bytes = u64_at(bytes, 56) as usize;
    let header = header_bytes(u32_at(bytes, 8))?;
    let replies_end = header + replies_bytes;
    // Each entry takes at least its 4-byte length and a few bytes of reply: the
    // section's size bounds the allocation, whatever the (damaged) count says.
    let capacity = (info.clients as usize).min(replies_bytes / 8);
    let mut sessions: Vec<Session> = Vec::with_capacity(capacity);
    let mut at = header;
    let mut prev: Option<ClientId> = None;
    for index in 0..info.clients {
        let bad = |reason: String| CheckpointError::ReplyCache { index, reason };
        if at + 4 > replies_end {
            return Err(bad("runs past the end of its section".into()));
        }
        let len = u32_at(bytes, at) as usize;
        at += 4;
        if len > replies_end - at {
            return Err(bad(format!(
                "length {len} runs past the end of its section"
            )));
        }
        let entry = &bytes[at..at + len];
        // Sessions carry their home from version 5 on.
        let session: Session = if u32_at(bytes, 8) >= CHECKPOINT_VERSION_5 {
            partita_types::decode(entry).map_err(|e| bad(e.to_string()))?
        } else {
            partita_types::decode::<crate::sessions::SessionV4>(entry)
                .map_err(|e| bad(e.to_string()))?
                .into()
        };
        at += len;
        if prev.is_some_and(|p| p >= session.client) {
            return Err(bad("clients not in strictly increasing order".into()));
        }
        // Sessions and replies name executions (see `CheckpointInfo::name`).
        let last = info.instance.max(info.name);
        if session.opened_at > last {
            return Err(bad(format!(
                "session opened at instance {}, after the checkpoint's {last}",
                session.opened_at
            )));
        }
        if let Some(reply) = &session.last {
            if reply.client != session.client {
                return Err(bad("a reply filed under another client".into()));
            }
            if reply.instance == 0 || reply.instance > last {
                return Err(bad(format!(
                    "reply of instance {} outside 1..={last} (the checkpoint's instance)",
                    reply.instance
                )));
            }
        }
        if session.renewed_ms > info.time_ms {
            return Err(bad(format!(
                "session renewed at {} ms, after the checkpoint's time {} ms",
                session.renewed_ms, info.time_ms
            )));
        }
        prev = Some(session.client);
        sessions.push(session);
    }
    if at != replies_end {
        return Err(CheckpointError::ReplyCache {
            index: info.clients,
            reason: format!("{} bytes left over in the section", replies_end - at),
        });
    }
    debug_assert_eq!(info.ordering.start, replies_end);
    Ok((
        sessions,
        &bytes[info.ordering.end..bytes.len() - TRAILER_BYTES],
    ))
}

impl<S: StateMachine> SequentialReplica<S> {
    /// Serialize the replicated state (see the module documentation). Costs one pass
    /// over the state plus one checksum pass over the result.
    ///
    /// Panics while instances are speculated: a checkpoint holds decided state only
    /// (roll the speculation back first, see [`SequentialReplica::rollback_speculation`]).
    pub fn checkpoint(&self) -> Vec<u8> {
        self.checkpoint_with(&[])
    }

    /// [`SequentialReplica::checkpoint`] with the ordering layer's position at this
    /// instance (opaque here; [`checkpoint_ordering`] reads it back).
    pub fn checkpoint_with(&self, ordering: &[u8]) -> Vec<u8> {
        assert_eq!(
            self.speculated(),
            0,
            "a checkpoint taken with speculated instances"
        );
        assert!(
            self.quiescent(),
            "a checkpoint taken with commands queued at worker threads"
        );
        write_checkpoint(
            CheckpointParts {
                node_id: self.id,
                cluster_id: self.cluster_id,
                instance: self.last_instance,
                name: self.name_max,
                digest: self.state().digest(),
                entries: self.state().len(),
                service: S::NAME,
                sessions: self.sessions(),
                ordering,
            },
            self.state().snapshot(),
        )
    }

    /// Rebuild a replica from [`SequentialReplica::checkpoint`] bytes, with the node
    /// and cluster id the checkpoint names. Planted bugs are off in the result.
    pub fn restore(bytes: &[u8]) -> Result<SequentialReplica<S>, CheckpointError> {
        let info = verify_checkpoint(bytes)?;
        Self::restore_verified(bytes, &info, info.node_id)
    }

    /// Rebuild a replica from a checkpoint of cluster `cluster_id` (written by any of
    /// its replicas, for state transfer) as replica `node_id`. A checkpoint of another
    /// cluster is refused with [`CheckpointError::Foreign`].
    pub fn restore_as(
        bytes: &[u8],
        cluster_id: u64,
        node_id: NodeId,
    ) -> Result<SequentialReplica<S>, CheckpointError> {
        let info = verify_checkpoint_of(bytes, cluster_id)?;
        Self::restore_verified(bytes, &info, node_id)
    }

    fn restore_verified(
        bytes: &[u8],
        info: &CheckpointInfo,
        node_id: NodeId,
    ) -> Result<SequentialReplica<S>, CheckpointError> {
        let (sessions, state) = read_checkpoint(bytes, info, S::NAME)?;
        let mut state = S::restore(state).map_err(CheckpointError::State)?;
        if state.digest() != info.digest || state.len() != info.entries {
            return Err(CheckpointError::Contents {
                header_entries: info.entries,
                header_digest: info.digest,
                entries: state.len(),
                digest: state.digest(),
            });
        }
        if info.instance == 0 {
            // A seeded checkpoint (no checkpoint of a running cluster is at instance
            // 0): the state starts a new cluster.
            state.on_seeded();
        }
        let mut r = SequentialReplica::new(node_id, state);
        r.cluster_id = info.cluster_id;
        r.last_instance = info.instance;
        r.sessions = Sessions::restore(sessions, info.time_ms, None);
        r.max_cached_instance = r.sessions.max_cached_instance();
        r.name_max = info.name;
        r.invariants();
        Ok(r)
    }
}
