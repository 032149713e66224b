//! The UDP datagram that carries a Ring Paxos Phase 2A by IP multicast
//! (`partita_runtime`'s multicast module, cluster file `[multicast]`): `"PMC1"`, the
//! cluster id (u64, little-endian), the sending node's id (u32, little-endian), then
//! the message as the same frame TCP carries (length, version, checksum, payload).
//!
//! A receiver takes only a `Phase2A` of its own cluster from another node of the file,
//! whole and with a good checksum ([`parse_datagram`]); anything else is refused with
//! the reason, never fatal. The fuzz target `multicast_datagram` feeds it any bytes.

use crate::Wire;
use partita_consensus::Msg;
use partita_types::NodeId;

/// The first four bytes of every datagram.
pub const MAGIC: &[u8; 4] = b"PMC1";
/// Magic, cluster id and sender before the frame.
pub const HEADER_BYTES: usize = 4 + 8 + 4;

/// The datagram that carries `frame` (a `Wire::Peer` frame) from node `from` of
/// cluster `cluster_id`.
pub fn encode_datagram(cluster_id: u64, from: NodeId, frame: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(HEADER_BYTES + frame.len());
    d.extend_from_slice(MAGIC);
    d.extend_from_slice(&cluster_id.to_le_bytes());
    d.extend_from_slice(&from.to_le_bytes());
    d.extend_from_slice(frame);
    d
}

/// A datagram's sender and message, or why it is refused: it must be of cluster
/// `cluster_id`, from one of `nodes` other than `me`, one whole frame with a good
/// checksum, and a `Phase2A`.
pub fn parse_datagram(
    d: &[u8],
    cluster_id: u64,
    me: NodeId,
    nodes: &[NodeId],
) -> Result<(NodeId, Msg), String> {
    if d.len() < HEADER_BYTES || &d[..4] != MAGIC {
        return Err(format!("not a Partita datagram ({} bytes)", d.len()));
    }
    let cid = u64::from_le_bytes(d[4..12].try_into().expect("8 bytes"));
    if cid != cluster_id {
        return Err(format!("cluster {cid}, not this one ({cluster_id})"));
    }
    let from = u32::from_le_bytes(d[12..16].try_into().expect("4 bytes"));
    if from == me || !nodes.contains(&from) {
        return Err(format!("from node {from}, not another node of the cluster"));
    }
    let frame = &d[HEADER_BYTES..];
    let (range, used) = match partita_types::frame::parse_frame(frame) {
        Ok(Some(r)) => r,
        Ok(None) => return Err("a truncated frame".into()),
        Err(e) => return Err(format!("a bad frame: {e}")),
    };
    if used != frame.len() {
        return Err("bytes after the frame".into());
    }
    match partita_types::decode::<Wire>(&frame[range]) {
        Ok(Wire::Peer(msg @ Msg::Phase2A { .. })) => Ok((from, msg)),
        Ok(_) => Err("not a Phase 2A".into()),
        Err(e) => Err(format!("undecodable: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let nodes = [1, 2, 3];
        let msg = Msg::Alive {
            ballot: partita_types::Ballot::ZERO,
        };
        let frame = crate::to_frame(&Wire::Peer(msg));
        let why = |d: &[u8]| parse_datagram(d, 9, 1, &nodes).unwrap_err();
        assert!(why(b"hello").contains("not a Partita datagram"));
        assert!(why(&encode_datagram(8, 2, &frame)).contains("cluster 8"));
        assert!(why(&encode_datagram(9, 1, &frame)).contains("node 1"));
        assert!(why(&encode_datagram(9, 7, &frame)).contains("node 7"));
        assert!(why(&encode_datagram(9, 2, &frame)).contains("not a Phase 2A"));
        assert!(why(&encode_datagram(9, 2, &frame[..frame.len() - 1])).contains("truncated"));
        let mut long = frame.clone();
        long.push(0);
        assert!(why(&encode_datagram(9, 2, &long)).contains("bytes after"));
        let mut flipped = frame.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        let e = why(&encode_datagram(9, 2, &flipped));
        assert!(e.contains("bad frame") || e.contains("undecodable"), "{e}");
    }
}
