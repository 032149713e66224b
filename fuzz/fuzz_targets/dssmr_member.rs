//! A Chirper member of an S-SMR or DS-SMR cluster (`partita_dssmr::replica::DsReplica`,
//! the execution model a node core drives): the commands clients multicast to it
//! (destinations and an S-SMR/DS-SMR command, decoded from what the ordering
//! delivered) and the exchanges other members' replicas send it (`Msg::Exec`
//! payloads: signals with object values, asks, "not taken"), in any order, between
//! ticks. Never a panic, the replica's invariants hold after every step, and what it
//! sends other replicas decodes.
//!
//! Input: byte 0 picks the scheme (bit 0), this replica's partition (bits 1–2) and
//! whether commands name their own destinations or go to every partition (bit 3);
//! then events, each a tag byte (bits 0–1: a command, an exchange, a tick; bits 2–4:
//! which replica sent it), a one-byte length (0: the rest) and that many bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_consensus::{Value, Vid};
use partita_dssmr::chirper::Chirper;
use partita_dssmr::client::Scheme;
use partita_dssmr::replica::{factory, ExecMsg};
use partita_smr::ReplicaOptions;
use partita_types::{Ballot, Body, Command, NodeId, Payload};

const EVENTS_MAX: usize = 24;

fuzz_target!(|data: &[u8]| {
    let Some((&head, mut rest)) = data.split_first() else {
        return;
    };
    let scheme = if head & 1 == 0 {
        Scheme::Ssmr
    } else {
        Scheme::Dssmr
    };
    let partitions: u32 = if scheme == Scheme::Dssmr { 3 } else { 2 };
    let map = if head & 8 == 0 {
        partita_dssmr::StaticMap::Service
    } else {
        partita_dssmr::StaticMap::Hashed
    };
    let layout = partita_fuzz::chirper_layout(partitions);
    let partition = u32::from((head >> 1) & 3) % partitions;
    let id: NodeId = layout.replicas[partition as usize][0];
    let mut r = factory::<Chirper>(scheme, map, partita_fuzz::chirper_users()).fresh(id);
    r.configure(&ReplicaOptions {
        cluster_id: 1,
        partition: Some((layout.clone(), partition)),
        ..ReplicaOptions::default()
    });
    r.invariants();
    let all_groups = (1u64 << partitions) - 1;
    let mut instance = 0;
    let mut replies = Vec::new();
    let mut events = 0;
    while let Some((&tag, tail)) = rest.split_first() {
        let Some((&n, tail)) = tail.split_first() else {
            break;
        };
        let n = if n == 0 {
            tail.len()
        } else {
            usize::from(n).min(tail.len())
        };
        let (bytes, after) = tail.split_at(n);
        rest = after;
        let from: NodeId = [4, 5, 6, 7, 8, 9, 1, 99][usize::from((tag >> 2) & 7)];
        match tag & 3 {
            0 | 3 => {
                instance += 1;
                // The ordering delivers to this partition only commands addressed to
                // it; the payload names destinations of its own.
                let groups = if head & 8 == 0 {
                    all_groups
                } else {
                    1 << partition | u64::from(tag >> 5) & all_groups
                };
                let cmd = Command {
                    body: Body::Whole {
                        groups,
                        payload: Payload::copy_from_slice(bytes),
                    },
                    ..Command::single(u64::from(tag), instance, from, Payload::new())
                };
                let vid = Vid {
                    ballot: Ballot::new(1, 1),
                    seq: instance,
                };
                let value = Value::new(vid, vec![cmd]).at(1_000 + instance);
                r.execute(instance, &value, &mut replies);
            }
            1 => exchange(&mut r).on_exec(from, bytes, &mut replies),
            _ => exchange(&mut r).exec_tick(),
        }
        r.invariants();
        for (to, bytes) in exchange(&mut r).take_exec() {
            assert!(
                layout.partition_of_replica(to).is_some(),
                "sent to {to}, no replica"
            );
            partita_types::decode::<ExecMsg>(&bytes).expect("what a member sends decodes");
        }
        replies.clear();
        events += 1;
        if events == EVENTS_MAX {
            break;
        }
    }
});

/// A DS-SMR member's exchanges with the other partitions.
fn exchange(r: &mut Box<dyn partita_smr::Replica>) -> &mut dyn partita_smr::PartitionExchange {
    r.exchange_mut()
        .expect("a DS-SMR member exchanges with other partitions")
}
