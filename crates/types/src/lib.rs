//! Partita's wire layer: identifiers, ballots, the B+tree commands and replies that
//! clients submit, and the frame format every TCP connection uses.
//!
//! Everything here is plain data. The consensus cores, the execution models and the
//! drivers all speak these types, so that the same core runs over real TCP
//! (`partita-runtime`) and inside the simulator.
//!
//! The frame format (see [`frame`]) is `len:u32 | version:u8 | crc32c:u32 | payload`,
//! little endian, where `len` counts the version, checksum and payload bytes. A frame
//! that is oversized, of another version or whose checksum does not match is an error
//! for the connection that sent it and nothing else.

pub mod early;
pub mod frame;
pub mod ops;
pub mod partition;

pub use ops::{BatchOp, Op, OpResult};
pub use partition::{PartitionId, PartitionLayout, PartitionMap};

/// How many client timeouts to wait before the next resubmission of a command that
/// was sent `resubmissions` times already: 1, 2, then 4 at most. Clients of the real
/// runtime and of the simulator share it. Without it, clients whose timeout is below
/// an overloaded cluster's queueing delay resubmit every command again and again, and
/// the copies deepen the queue they time out in (simulator seed 73070).
pub fn timeout_backoff(resubmissions: u64) -> u32 {
    1 << resubmissions.min(2)
}

use serde::{Deserialize, Serialize};

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
        write!(f, "{}.{}", self.round, self.node)
    }
}

/// A client command as ordered by consensus: the session that issued it, its
/// sequence number within the session (for exactly-once execution), the replica that
/// must reply, and the operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub client: ClientId,
    pub seq: u64,
    /// The replica the client chose; only it replies (paper 001 §IV).
    pub reply_to: NodeId,
    pub op: Op,
}

/// A reply to a client command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub client: ClientId,
    pub seq: u64,
    /// The instance that ordered the command.
    pub instance: Instance,
    pub result: OpResult,
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
            reply_to: 1,
            op: Op::Batch(vec![
                BatchOp::Insert { key: 1, value: 2 },
                BatchOp::Delete { key: 3 },
            ]),
        };
        let bytes = encode(&c);
        assert_eq!(decode::<Command>(&bytes).unwrap(), c);
        assert!(decode::<Command>(&bytes[..bytes.len() - 1]).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode::<Command>(&extra).is_err());
        // A length prefix claiming 2^60 elements must be refused, not allocated.
        let mut huge = encode(&Op::Batch(vec![]));
        huge[4..12].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(decode::<Op>(&huge).is_err());
    }
}
