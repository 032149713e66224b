//! Partita's wire layer: identifiers, ballots, the envelope of a client command (its
//! session, sequence number, destination groups and opaque payload), replies, and the
//! frame format every TCP connection uses.
//!
//! Everything here is plain data. The consensus cores, the execution models and the
//! drivers all speak these types, so that the same core runs over real TCP
//! (`partita-runtime`) and inside the simulator.
//!
//! Commands cross ordering as opaque bytes ([`Payload`]): acceptors, coordinators,
//! batchers and learners never decode a command; only the replicas do, through the
//! service they run (`partita-service`). A command names the groups it is multicast to
//! ([`Body::groups`]: with state partitioning, the partitions it addresses), with one
//! payload for all of them or one per group (each partition's sub-command).
//!
//! The frame format (see [`frame`]) is `len:u32 | version:u8 | crc32c:u32 | payload`,
//! little endian, where `len` counts the version, checksum and payload bytes. A frame
//! that is oversized, of another version or whose checksum does not match is an error
//! for the connection that sent it and nothing else.

pub mod choice;
pub mod early;
pub mod frame;
pub mod members;
pub mod partition;

/// The size of a WAL segment when the cluster file says nothing (`[storage]
/// wal_segment_bytes_max`): the log truncates whole segments. Here because both the WAL
/// and the cluster file need it and neither depends on the other.
pub const WAL_SEGMENT_BYTES_MAX_DEFAULT: u64 = 64 << 20;

/// How far ahead of its records a WAL segment is extended with written zeros, by
/// default (`partita_wal::WalOptions::preallocate_bytes`, the cluster file's
/// `storage.wal_preallocate_bytes`).
pub const WAL_PREALLOCATE_BYTES_DEFAULT: u64 = 1 << 20;

pub use choice::{Choice, Durability, FieldError, Mode};
pub use partition::{mask_partitions, PartitionId, PartitionLayout, PartitionMap};

/// How many client timeouts to wait before the next resubmission of a command that
/// was sent `resubmissions` times already: 1, 2, then 4 at most. Clients of the real
/// runtime and of the simulator share it. Without it, clients whose timeout is below
/// an overloaded cluster's queueing delay resubmit every command again and again, and
/// the copies deepen the queue they time out in (simulator seed 73070).
pub fn timeout_backoff(resubmissions: u64) -> u32 {
    1 << resubmissions.min(2)
}

use serde::{Deserialize, Serialize};

/// A hash map whose iteration order is a function of its contents and history only
/// (SipHash with fixed keys), never of a random seed: what cores use, so that the same
/// inputs give the same outputs in every run (the simulator replays seeds bit for bit).
/// The workspace's tidy test refuses `HashMap::new()` and friends in core crates.
pub type DetHashMap<K, V> = std::collections::HashMap<
    K,
    V,
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>,
>;
/// The set counterpart of [`DetHashMap`].
pub type DetHashSet<K> = std::collections::HashSet<
    K,
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>,
>;

/// A node of the cluster (acceptor, coordinator, replica or any mix), as numbered in
/// the cluster file.
pub type NodeId = u32;
/// A client session. Clients draw a random 64-bit id at start.
pub type ClientId = u64;
/// Position of a value in the totally ordered stream, starting at 1. 0 means "none".
pub type Instance = u64;

/// A Paxos ballot: totally ordered by (round, node). Ballot zero (round 0) is below
/// every ballot a coordinator can own, and stands for "no promise yet".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Ballot {
    pub round: u64,
    pub node: NodeId,
}

impl Ballot {
    pub const ZERO: Ballot = Ballot { round: 0, node: 0 };

    pub fn new(round: u64, node: NodeId) -> Ballot {
        Ballot { round, node }
    }

    /// Bits of `round` below the ordering epoch ([`Ballot::epoch`]).
    pub const EPOCH_SHIFT: u32 = 40;

    /// The ordering epoch the ballot belongs to: how many changes of the acceptors
    /// were applied before the instances it proposes in (`members`). Every ballot of
    /// epoch `e + 1` is above every ballot of epoch `e`, so a message of an older
    /// configuration is stale by its ballot alone.
    pub fn epoch(self) -> u64 {
        self.round >> Self::EPOCH_SHIFT
    }

    /// The lowest ballot of epoch `epoch` (owned by nobody).
    pub fn epoch_floor(epoch: u64) -> Ballot {
        Ballot {
            round: epoch << Self::EPOCH_SHIFT,
            node: 0,
        }
    }

    /// The smallest ballot owned by `node` that is above `self`.
    pub fn next_for(self, node: NodeId) -> Ballot {
        let candidate = Ballot {
            round: self.round,
            node,
        };
        if candidate > self {
            candidate
        } else {
            Ballot {
                round: self.round + 1,
                node,
            }
        }
    }
}

impl std::fmt::Display for Ballot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.epoch() {
            0 => write!(f, "{}.{}", self.round, self.node),
            e => write!(
                f,
                "e{e}:{}.{}",
                self.round & ((1 << Self::EPOCH_SHIFT) - 1),
                self.node
            ),
        }
    }
}

/// A command's encoding, as its service defines it. Ordering never decodes it.
pub type Payload = bytes::Bytes;

/// A set of destination groups, one bit per group (with state partitioning the groups
/// are the partitions: bit p is partition p).
pub type GroupMask = u64;

/// What a command carries to its destination groups (the atomic-multicast contract:
/// `multicast(groups, command)`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Body {
    /// The same payload for every group of `groups`.
    Whole { groups: GroupMask, payload: Payload },
    /// One payload per group of `groups`, in group order: each partition's
    /// sub-command (paper 001 §III-C).
    Split {
        groups: GroupMask,
        payloads: Vec<Payload>,
    },
}

impl Body {
    /// A payload for group 0 alone (an unpartitioned service).
    pub fn single(payload: Payload) -> Body {
        Body::Whole { groups: 1, payload }
    }

    /// The destination groups.
    pub fn groups(&self) -> GroupMask {
        match self {
            Body::Whole { groups, .. } | Body::Split { groups, .. } => *groups,
        }
    }

    /// The payload group `g` executes, if the command is addressed to it.
    pub fn payload_for(&self, g: PartitionId) -> Option<&Payload> {
        let groups = self.groups();
        if g >= 64 || groups & (1u64 << g) == 0 {
            return None;
        }
        match self {
            Body::Whole { payload, .. } => Some(payload),
            Body::Split { payloads, .. } => {
                let below = (groups & ((1u64 << g) - 1)).count_ones() as usize;
                payloads.get(below)
            }
        }
    }

    /// What group `g` receives of this body: its payload alone, addressed to `g`.
    pub fn project(&self, g: PartitionId) -> Option<Body> {
        let payload = self.payload_for(g)?.clone();
        Some(Body::Whole {
            groups: 1u64 << g,
            payload,
        })
    }

    /// Payload bytes in all (the batch bound counts them).
    pub fn payload_bytes(&self) -> usize {
        match self {
            Body::Whole { payload, .. } => payload.len(),
            Body::Split { payloads, .. } => payloads.iter().map(|p| p.len()).sum(),
        }
    }

    /// Whether the body is well formed: at least one group, and a split body has
    /// exactly one payload per group. What a peer or a client sent is checked with
    /// this before anything relies on it.
    pub fn check(&self) -> Result<(), String> {
        let groups = self.groups();
        if groups == 0 {
            return Err("a command addressed to no group".into());
        }
        if let Body::Split { payloads, .. } = self {
            if payloads.len() != groups.count_ones() as usize {
                return Err(format!(
                    "a split command with {} payloads for {} groups",
                    payloads.len(),
                    groups.count_ones()
                ));
            }
        }
        Ok(())
    }
}

/// A client command as ordered by consensus: the session that issued it, its
/// sequence number within the session (for exactly-once execution), the replica that
/// must reply, and what it carries to which groups.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Command {
    pub client: ClientId,
    /// The command's number within the session, from 1; 0 opens the session.
    pub seq: u64,
    /// The instance at which the client's session was opened (the open's reply says
    /// it; 0 for the open itself, and for clients of clusters whose sessions never
    /// expire, which open implicitly). A replica executes a command only for the very
    /// session it names: once a session expired, a late copy of one of its commands
    /// can never run again, not even if a late copy of its open started a new session
    /// under the same client id.
    pub session: Instance,
    /// The replica the client chose; only it replies (paper 001 §IV).
    pub reply_to: NodeId,
    pub body: Body,
    /// The groups within the ordering that a proxy chose for the command, beyond its
    /// partitions (`body`'s groups):
    /// - P-SMR (paper 002 §III-F): the worker threads' groups the client proxy chose,
    ///   bit `i` for g_i. 0 leaves the choice to the replica, which maps the command
    ///   conservatively (CC-G); one bit asks that thread alone to run it (a replica
    ///   checks that it may, and answers [`Refusal::Resubmit`] where it may not); more
    ///   bits make it a g_all command (synchronous mode).
    /// - GeoPaxos+ (paper 004 §III-A): the serializers that order it (`dst`, bit `i`
    ///   for replica `i`'s), set by the replica the client chose from the placement it
    ///   knows (psite), and checked again where it is delivered.
    ///
    /// Ignored elsewhere.
    pub route: GroupMask,
}

impl Command {
    /// A command with one payload for group 0 (an unpartitioned service).
    pub fn single(client: ClientId, seq: u64, reply_to: NodeId, payload: Payload) -> Command {
        Command {
            client,
            seq,
            session: 0,
            reply_to,
            body: Body::single(payload),
            route: 0,
        }
    }

    /// The atomic-multicast groups this command goes to (which rings of Multi-Ring
    /// Paxos carry it): its partitions, or, on replicas with `psmr_threads` P-SMR
    /// worker threads (paper 002 §V-B: a group per thread and g_all, which every
    /// thread joins), the one thread the client proxy chose, else g_all (every
    /// thread's bit: a g_all command, or one the replicas map themselves).
    pub fn multicast_groups(&self, psmr_threads: usize) -> GroupMask {
        if psmr_threads == 0 {
            return self.body.groups();
        }
        let all = if psmr_threads >= 64 {
            u64::MAX
        } else {
            (1u64 << psmr_threads) - 1
        };
        if self.route.count_ones() == 1 && self.route & all != 0 {
            self.route
        } else {
            all
        }
    }

    /// Approximate encoded size, for the batch size bound.
    pub fn encoded_bytes(&self) -> usize {
        match &self.body {
            Body::Whole { payload, .. } => 56 + payload.len(),
            Body::Split { payloads, .. } => {
                56 + payloads.iter().map(|p| 8 + p.len()).sum::<usize>()
            }
        }
    }

    /// The command that opens session `client` at every group of `groups`: sequence
    /// number 0, no payload. Its reply carries the instance the session was opened at
    /// ([`session_of_reply`]), which the session's commands then name.
    pub fn open(client: ClientId, reply_to: NodeId, groups: GroupMask) -> Command {
        Command {
            client,
            seq: 0,
            session: 0,
            reply_to,
            body: Body::Whole {
                groups,
                payload: Payload::new(),
            },
            route: 0,
        }
    }

    /// The command that renews session `client` opened at `session`, at every group
    /// of `groups`: sequence number 0, no payload. Its reply carries the same
    /// instance; a session that expired refuses it.
    pub fn renew(
        client: ClientId,
        session: Instance,
        reply_to: NodeId,
        groups: GroupMask,
    ) -> Command {
        Command {
            session,
            ..Command::open(client, reply_to, groups)
        }
    }

    /// An open that replaces session `replaces` (the client's last, 0: none): a copy of
    /// an earlier open (a duplicate, a resend) is answered with the session that open
    /// made instead of replacing it ([`open_replaces`] reads it back).
    pub fn reopen(
        client: ClientId,
        replaces: Instance,
        reply_to: NodeId,
        groups: GroupMask,
    ) -> Command {
        let mut c = Command::open(client, reply_to, groups);
        if replaces != 0 {
            c.body = Body::Whole {
                groups,
                payload: Payload::copy_from_slice(&replaces.to_le_bytes()),
            };
        }
        c
    }

    /// Whether this command opens or renews a session (sequence number 0; a renewal
    /// names its session, an open does not).
    pub fn is_open(&self) -> bool {
        self.seq == 0
    }
}

/// Client ids at or above this are the ordering's own commands, never a client's: a
/// node refuses a client command that claims one, and replicas execute them as
/// [`SystemOp`]s.
pub const SYSTEM_CLIENT_MIN: ClientId = 1 << 63;

/// What an ordering asks every replica to do at one point of the order, beside the
/// clients' commands (a command from a client id at or above [`SYSTEM_CLIENT_MIN`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SystemOp {
    /// Nothing but a point every replica reaches alike (a barrier), stamped with its
    /// proposer's clock: ordered time moves to it there.
    Barrier { time_ms: u64 },
    /// GeoPaxos+'s DOP (paper 004 Algorithm 1): recompute where the service's objects
    /// are ordered from the accesses counted. Ordered by every serializer, it is a
    /// barrier too (stamped with its proposer's clock), so that no extra barrier goes
    /// round while DOPs do.
    Reconfigure { time_ms: u64 },
    /// A change of the replicas (`partita member`; see [`members`]): every replica
    /// applies it where it is delivered, and nothing else executes it. `initial`: the
    /// replicas (with their partitions) the proposer's cluster file starts from, which
    /// the first change of a cluster applies to (so that a replica whose file was
    /// edited since replays the changes alike); `acceptors`: its file's acceptors in
    /// ring order, for the first acceptor change alike.
    Member {
        change: members::MemberChange,
        initial: Vec<(NodeId, PartitionId)>,
        acceptors: Vec<NodeId>,
    },
}

impl Command {
    /// The ordering's command `op`, the `seq`-th of node `from` (`kind` keeps the
    /// system commands of different orderings' uses apart).
    pub fn system(op: SystemOp, from: NodeId, kind: u8, seq: u64) -> Command {
        Command {
            client: SYSTEM_CLIENT_MIN | (u64::from(kind) << 48) | u64::from(from),
            seq,
            session: 0,
            reply_to: from,
            body: Body::single(Payload::from(encode(&op))),
            route: 0,
        }
    }

    /// Whether the command is the ordering's own (see [`SYSTEM_CLIENT_MIN`]).
    pub fn is_system(&self) -> bool {
        self.client >= SYSTEM_CLIENT_MIN
    }

    /// The ordering's command this is (`None`: a client's, or bytes that are not one).
    pub fn system_op(&self) -> Option<SystemOp> {
        if !self.is_system() {
            return None;
        }
        match &self.body {
            Body::Whole { payload, .. } => decode(payload).ok(),
            Body::Split { .. } => None,
        }
    }
}

/// The session an open replaces, from its payload (0: none, or not an open's payload).
pub fn open_replaces(payload: &[u8]) -> Instance {
    payload.try_into().map_or(0, Instance::from_le_bytes)
}

/// The reply to a session's open: the instance the session was opened at.
pub fn session_reply(opened_at: Instance) -> Payload {
    Payload::copy_from_slice(&opened_at.to_le_bytes())
}

/// The instance a session was opened at, from its open's reply payload.
pub fn session_of_reply(payload: &[u8]) -> Option<Instance> {
    Some(Instance::from_le_bytes(payload.try_into().ok()?))
}

/// Why a replica refused a command without executing it. Every replica of a partition
/// decides this the same way at the command's position in the order, so a refusal is
/// as much a fact about the order as a result.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Refusal {
    /// The command did not decode, or the service found it impossible: it was not
    /// executed (here, nor at any other position it was ordered at).
    Rejected(String),
    /// The command's session is unknown at this position: it expired (its lease ran
    /// out without traffic) or was never opened. This copy was not executed; an
    /// earlier copy of the same command may have been, before the session expired.
    SessionExpired,
    /// P-SMR: the worker thread the client chose may not run this command alone (the
    /// opt-PSMR safety check failed, or the command is not that thread's). It was not
    /// executed and had no effect; the client resubmits it conservatively (the same
    /// sequence number, [`Command::threads`] 0). The reason names what failed.
    Resubmit(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Rejected(why) => f.write_str(why),
            Refusal::Resubmit(why) => write!(f, "resubmit conservatively: {why}"),
            Refusal::SessionExpired => f.write_str(
                "the client's session expired (no traffic for longer than the cluster's \
                 session lease) or was never opened",
            ),
        }
    }
}

/// What executing a command gave: the service's encoded reply, or why it was refused.
pub type Outcome = Result<Payload, Refusal>;

/// A reply to a client command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub client: ClientId,
    pub seq: u64,
    /// The instance that ordered the command.
    pub instance: Instance,
    pub result: Outcome,
}

/// Serialize with the project's one binary codec.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serialize(value).expect("in-memory serialization of plain data cannot fail")
}

/// Deserialize with the project's one binary codec, refusing trailing bytes and
/// absurd length prefixes instead of allocating them.
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, DecodeError> {
    use bincode::Options;
    bincode::options()
        .with_fixint_encoding()
        .reject_trailing_bytes()
        .with_limit(frame::FRAME_BYTES_MAX as u64)
        .deserialize(bytes)
        .map_err(|e| DecodeError(e.to_string()))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed payload: {0}")]
pub struct DecodeError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ballots_order_by_round_then_node() {
        assert!(Ballot::new(1, 0) > Ballot::new(0, 9));
        assert!(Ballot::new(1, 2) > Ballot::new(1, 1));
        assert_eq!(Ballot::ZERO.next_for(3), Ballot::new(0, 3));
        assert_eq!(Ballot::new(0, 3).next_for(3), Ballot::new(1, 3));
        assert_eq!(Ballot::new(4, 5).next_for(2), Ballot::new(5, 2));
    }

    #[test]
    fn command_round_trips_and_rejects_garbage() {
        let c = Command {
            client: 7,
            seq: 3,
            session: 11,
            reply_to: 1,
            body: Body::Split {
                groups: 0b101,
                payloads: vec![Payload::from_static(b"ab"), Payload::from_static(b"c")],
            },
            route: 0b10,
        };
        let bytes = encode(&c);
        assert_eq!(decode::<Command>(&bytes).unwrap(), c);
        assert!(decode::<Command>(&bytes[..bytes.len() - 1]).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode::<Command>(&extra).is_err());
        // A length prefix claiming 2^60 elements must be refused, not allocated.
        let mut huge = encode(&Body::single(Payload::new()));
        huge[12..20].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(decode::<Body>(&huge).is_err());
    }

    #[test]
    fn bodies_project_onto_their_groups() {
        let split = Body::Split {
            groups: 0b1010,
            payloads: vec![Payload::from_static(b"one"), Payload::from_static(b"three")],
        };
        assert!(split.check().is_ok());
        assert_eq!(split.payload_for(1).unwrap().as_ref(), b"one");
        assert_eq!(split.payload_for(3).unwrap().as_ref(), b"three");
        assert_eq!(split.payload_for(0), None);
        assert_eq!(split.payload_for(64), None);
        assert_eq!(
            split.project(3),
            Some(Body::Whole {
                groups: 0b1000,
                payload: Payload::from_static(b"three")
            })
        );
        let whole = Body::Whole {
            groups: 0b11,
            payload: Payload::from_static(b"x"),
        };
        assert_eq!(whole.payload_for(0), whole.payload_for(1));
        assert_eq!(split.payload_bytes(), 8);
        // Malformed bodies, as a peer or client might send them.
        assert!(Body::Whole {
            groups: 0,
            payload: Payload::new()
        }
        .check()
        .is_err());
        assert!(Body::Split {
            groups: 0b111,
            payloads: vec![Payload::new()]
        }
        .check()
        .is_err());
    }
}
