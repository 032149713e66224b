//! A client's command at the node it entered: `NodeCore::on_request`'s own checks (a
//! body addressed to no group, split wrongly, or to partitions the cluster lacks),
//! then, on the client-server baseline's server (which executes on receipt), the
//! replica's path for a decided command: the service's decoder and
//! `ServiceCodec::check`, the session and the execution; and on a Smr cluster's
//! coordinator, the multicast into the ordering. For the B+tree, the key-value store
//! and the bank. No handler may panic, every invariant must hold, every reply's
//! outcome decodes or is a refusal.
//!
//! Input: byte 0 picks the service (bits 0–1) and whether the commands are whole
//! encoded `Command`s as a `Wire::Request` carries them (bit 2) or payloads of client
//! 7's next commands (a client's own bytes); then commands, each preceded by a
//! one-byte length (0: the rest of the input).
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_consensus::Protocol;
use partita_fuzz::{cs_setup, node, setup};
use partita_node::Output;
use partita_service::StateMachine;
use partita_smr::ServiceFactory;
use partita_types::{Command, Payload};
use std::sync::Arc;

const COMMANDS_MAX: usize = 16;

fuzz_target!(|data: &[u8]| {
    let Some((&head, mut rest)) = data.split_first() else {
        return;
    };
    let whole = head & 4 != 0;
    let mut cmds = Vec::new();
    while let Some((&n, tail)) = rest.split_first() {
        let n = if n == 0 {
            tail.len()
        } else {
            usize::from(n).min(tail.len())
        };
        let (bytes, after) = tail.split_at(n);
        if whole {
            if let Ok(c) = partita_types::decode::<Command>(bytes) {
                cmds.push(c);
            }
        } else {
            let seq = cmds.len() as u64 + 1;
            cmds.push(Command::single(7, seq, 1, Payload::copy_from_slice(bytes)));
        }
        rest = after;
        if cmds.len() == COMMANDS_MAX {
            break;
        }
    }
    match head & 3 {
        0 => run::<partita_btree::BPlusTree>(&cmds),
        1 => run::<partita_kv::KvStore>(&cmds),
        _ => run::<partita_fuzz::bank::Bank>(&cmds),
    }
});

fn run<S: StateMachine>(cmds: &[Command]) {
    let service: Arc<dyn ServiceFactory> = partita_smr::service::<S>();
    let mut cs = cs_setup(service.clone());
    // Sessions that never expire open implicitly, so that commands reach execution.
    cs.session_lease_ms = None;
    let mut entry = [
        node(cs),
        node(setup(1, Protocol::RingPaxos, service.clone())),
        node(setup(4, Protocol::MultiPaxos, service)),
    ];
    let mut now_ms = 1_000;
    for c in cmds {
        for n in &mut entry {
            let mut out = Vec::new();
            n.on_request(c.clone(), &mut out);
            n.invariants();
            now_ms += 1;
            n.on_tick(now_ms, &mut out);
            n.invariants();
            for o in &out {
                if let Output::Reply(r) = o {
                    assert_eq!(
                        (r.client, r.seq),
                        (c.client, c.seq),
                        "the reply is its command's"
                    );
                    let _ = partita_service::decode_outcome::<S>(&r.result);
                }
            }
        }
    }
}
