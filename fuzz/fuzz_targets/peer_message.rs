//! A peer's message at a node's entry: whatever decodes as a consensus message goes to
//! `NodeCore::on_peer` of real node cores (the coordinating acceptor, another acceptor,
//! a replica, a speculating replica with early replies, and a DS-SMR Chirper member
//! whose `Msg::Exec` payloads reach the S-SMR exchange decoder), from a member, from
//! itself or from a stranger, between clock ticks. No handler may panic and every
//! invariant must hold after every step: a node never dies from what a peer sent.
//!
//! Input: byte 0 picks the protocol (bit 0) and the sender (bits 1–3); then messages,
//! each preceded by a one-byte length (0: the rest of the input).
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_consensus::{Msg, Protocol};
use partita_fuzz::{chirper_setup, node, setup};
use partita_types::NodeId;

/// Bytes a peer's message may have here; a frame holds up to 64 MiB, but what matters
/// to the handlers is the shape, not the size.
const MESSAGES_MAX: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Some((&head, mut rest)) = data.split_first() else {
        return;
    };
    let protocol = if head & 1 == 0 {
        Protocol::RingPaxos
    } else {
        Protocol::MultiPaxos
    };
    let from: NodeId = [1, 2, 3, 4, 5, 6, 99, u32::MAX][usize::from((head >> 1) & 7)];
    let mut msgs = Vec::new();
    while let Some((&n, tail)) = rest.split_first() {
        let n = if n == 0 {
            tail.len()
        } else {
            usize::from(n).min(tail.len())
        };
        let (bytes, after) = tail.split_at(n);
        if let Ok(m) = partita_types::decode::<Msg>(bytes) {
            // What decodes re-encodes to what decodes the same.
            let again = partita_types::encode(&m);
            assert_eq!(partita_types::decode::<Msg>(&again).as_ref(), Ok(&m));
            let _ = m.check();
            msgs.push(m);
        }
        rest = after;
        if msgs.len() == MESSAGES_MAX {
            break;
        }
    }
    if msgs.is_empty() {
        return;
    }
    let service = partita_smr::service::<partita_btree::BPlusTree>();
    let nodes = [1, 2, 4, 5]
        .map(|id| node(setup(id, protocol, service.clone())))
        .into_iter()
        .chain([node(chirper_setup(4, protocol))]);
    for mut n in nodes {
        let mut out = Vec::new();
        let mut now_ms = 1_000;
        for m in &msgs {
            n.on_peer(from, m.clone(), &mut out);
            n.invariants();
            n.on_continue(&mut out);
            n.invariants();
            now_ms += 3;
            n.on_tick(now_ms, &mut out);
            n.invariants();
            out.clear();
        }
    }
});
