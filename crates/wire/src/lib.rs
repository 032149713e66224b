//! What travels on a connection: one [`Wire`] message per frame
//! (`partita_types::frame`). The first frame of a connection says who is talking: a
//! peer node (`PeerHello`), a client (`ClientHello`) or a one-shot status probe.

pub mod datagram;

use partita_consensus::Msg;
use partita_types::early::EarlyReply;
use partita_types::{frame, ClientId, Command, NodeId, Reply};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Wire {
    PeerHello {
        from: NodeId,
        cluster_id: u64,
    },
    Peer(Msg),
    ClientHello {
        client: ClientId,
    },
    /// Node to client, first on a client connection: the node has registered the
    /// connection, so replies for this client will come on it. A client sends its
    /// first command only after the welcome of the replica it waits on; otherwise a
    /// fast decision could find the replica not yet knowing where to send the reply
    /// (dropped: the client would wait out its whole timeout).
    ClientWelcome {
        node: NodeId,
    },
    Request(Command),
    /// A reply, with the node the answering replica believes leads (`None`: it knows
    /// none), so that a client entering at a follower can go to the leader directly.
    Reply {
        reply: Reply,
        leader: Option<NodeId>,
    },
    /// The node cannot take the command (a malformed command, a full queue, no leader
    /// known); the client should retry later or elsewhere, at `leader` if named.
    Refused {
        client: ClientId,
        seq: u64,
        reason: String,
        leader: Option<NodeId>,
    },
    StatusRequest,
    Status(Box<NodeStatus>),
    /// First and only frame of a one-shot connection (`partita snapshot save`): send me
    /// a replica checkpoint, one consistent service state at one position.
    SnapshotRequest,
    /// Node to the requester, in order: `bytes` of the checkpoint covering `instance`
    /// from `offset`, of `total` bytes in all (the last chunk ends at `total`).
    SnapshotChunk {
        instance: u64,
        total: u64,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// The node has no checkpoint to give, and why.
    SnapshotRefused(String),
    /// Early replies: a tentative reply or its confirmation (replica to client).
    Early(EarlyReply),
    /// First and only frame of a one-shot connection (`partita member`): order this
    /// change of the replicas (to a replica; a promotion to the learner itself).
    MemberRequest(partita_types::members::MemberChange),
    /// Node to the requester: the replicas after the change, or why it was refused.
    MemberReply(Result<partita_types::members::Members, String>),
}

/// What `partita status` shows for a node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub node: NodeId,
    pub cluster_id: u64,
    /// The replicated service (the cluster file's `service`).
    pub service: String,
    pub roles: Vec<String>,
    pub mode: String,
    pub protocol: String,
    pub durability: String,
    pub coordinator: bool,
    pub ballot: Option<String>,
    /// Coordinator: highest instance decided with all below it decided.
    pub decided_up_to: Option<u64>,
    /// Replica: last instance executed.
    pub executed_up_to: Option<u64>,
    /// Replica: digest of the service state and the objects it holds.
    pub digest: Option<u64>,
    pub entries: Option<u64>,
    /// Acceptor: promised ballot, accepted instances and the highest of them.
    pub promised: Option<String>,
    pub accepted: Option<u64>,
    pub accepted_max_instance: Option<u64>,
    pub counters: Vec<(String, u64)>,
    /// The node's operating-system process id, so that tools on the same machine can
    /// read its CPU time (`partita bench`: CPU per command over every process).
    pub pid: u32,
    /// Replica: when (Unix milliseconds, this machine's clock) it first delivered a
    /// value proposed under each new ballot, oldest first (the last
    /// [`DELIVERED_BALLOTS_KEPT`]). From the decided stream itself: the first value a
    /// new leader got decided, as this replica saw it (failover measurements).
    pub delivered_ballots: Vec<DeliveredBallot>,
    /// Acceptor: why its WAL writes nothing (a full disk), so it does not vote;
    /// `None` while it writes normally.
    pub wal_stall: Option<String>,
    /// The replicas changed at run time, newest this node knows (`partita member`);
    /// `None` under an ordering that cannot change them.
    pub members: Option<partita_types::members::Members>,
    /// Replica: "serving", "learner" (catching up, answering no client), "joining"
    /// (not added yet) or "removed".
    pub replica_state: Option<String>,
}

impl NodeStatus {
    /// The counter called `name`, if the node reports it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }
}

/// A new ballot seen in a replica's decided stream (see
/// [`NodeStatus::delivered_ballots`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveredBallot {
    pub ballot: partita_types::Ballot,
    /// Unix milliseconds when the first value of that ballot was delivered.
    pub unix_ms: u64,
    /// The instance it was delivered at.
    pub instance: u64,
}

/// How many ballot changes a node's status keeps.
pub const DELIVERED_BALLOTS_KEPT: usize = 64;

/// Encode one message as a complete frame.
pub fn to_frame(w: &Wire) -> Vec<u8> {
    let payload = partita_types::encode(w);
    let mut out = Vec::with_capacity(payload.len() + frame::FRAME_HEADER_BYTES);
    frame::write_frame(&mut out, &payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let w = Wire::ClientHello { client: 99 };
        let f = to_frame(&w);
        let (range, used) = frame::parse_frame(&f).unwrap().unwrap();
        assert_eq!(used, f.len());
        assert_eq!(partita_types::decode::<Wire>(&f[range]).unwrap(), w);
    }

    #[test]
    fn early_reply_frames_round_trip_and_garbage_is_refused() {
        use partita_types::early::Confirm;
        let tentative = Wire::Early(EarlyReply::Tentative(Reply {
            client: 7,
            seq: 3,
            instance: 11,
            result: Ok(partita_types::Payload::from_static(b"entries")),
        }));
        let confirm = Wire::Early(EarlyReply::Confirm(Confirm {
            client: 7,
            seq: 3,
            instance: 11,
            result_digest: 0xdead_beef,
        }));
        for w in [tentative, confirm] {
            let f = to_frame(&w);
            let (range, _) = frame::parse_frame(&f).unwrap().unwrap();
            let payload = &f[range];
            assert_eq!(partita_types::decode::<Wire>(payload).unwrap(), w);
            // Every truncation, and a bad variant tag, is an error, never a panic.
            for n in 0..payload.len() {
                assert!(partita_types::decode::<Wire>(&payload[..n]).is_err());
            }
            let mut bad = payload.to_vec();
            bad[..4].copy_from_slice(&u32::MAX.to_le_bytes());
            assert!(partita_types::decode::<Wire>(&bad).is_err());
            let mut bad = payload.to_vec();
            bad[4] = 0xff;
            assert!(partita_types::decode::<Wire>(&bad).is_err());
        }
    }
}
