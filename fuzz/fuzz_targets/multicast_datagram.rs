//! A UDP datagram on a node's multicast socket (`partita_wire::datagram`, what the
//! runtime's multicast receiver runs on every datagram it reads): any bytes from
//! anyone on the network. Never a panic; what is taken is a `Phase2A` from another
//! node of the file, of this cluster, and it re-encodes to a datagram that parses to
//! the same sender and message; everything else is refused with a reason.
//!
//! The cluster id and the node list are taken from the input's own header where it has
//! one (so that the fuzzer gets past those checks to the frame and the message), and
//! also checked against a fixed cluster that the input rarely names.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_consensus::Msg;
use partita_wire::datagram::{encode_datagram, parse_datagram, HEADER_BYTES};
use partita_wire::{to_frame, Wire};

fuzz_target!(|data: &[u8]| {
    let me = 1;
    let (cid, claimed) = if data.len() >= HEADER_BYTES {
        (
            u64::from_le_bytes(data[4..12].try_into().unwrap()),
            u32::from_le_bytes(data[12..16].try_into().unwrap()),
        )
    } else {
        (9, 2)
    };
    for (cluster_id, nodes) in [(cid, vec![1, 2, 3, claimed]), (9, vec![1, 2, 3])] {
        match parse_datagram(data, cluster_id, me, &nodes) {
            Ok((from, msg)) => {
                assert!(
                    from != me && nodes.contains(&from),
                    "taken from node {from}"
                );
                assert!(
                    matches!(msg, Msg::Phase2A { .. }),
                    "only a Phase 2A is taken"
                );
                let again = encode_datagram(cluster_id, from, &to_frame(&Wire::Peer(msg.clone())));
                let (from2, msg2) = parse_datagram(&again, cluster_id, me, &nodes)
                    .expect("a re-encoded datagram parses");
                assert_eq!((from2, &msg2), (from, &msg), "datagrams round-trip");
            }
            Err(why) => assert!(!why.is_empty()),
        }
    }
});
