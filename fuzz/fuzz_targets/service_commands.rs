//! A client's command as a replica decodes it, for every service: the B+tree, the
//! key-value store, the bank example and Chirper. Decode, then the replica's check,
//! the objects it touches, its split over two partitions, and execution with undo on
//! a small state. Never a panic; undo restores the digest; a decoded command
//! re-encodes to a command that decodes equal; replies decode back.
//!
//! Input: byte 0 picks the service, the rest is the command's payload.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_dssmr::chirper::{Chirper, ChirperCommand};
use partita_dssmr::wire::DsWire;
use partita_dssmr::{Dests, DsCommand, ObjectService, Reference};
use partita_fuzz::bank::Bank;
use partita_service::{ServiceCodec, StateMachine};
use partita_types::PartitionMap;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => exercise::<partita_btree::BPlusTree>(bytes),
        1 => exercise::<partita_kv::KvStore>(bytes),
        2 => exercise::<Bank>(bytes),
        _ => chirper(bytes),
    }
});

fn exercise<S: StateMachine>(bytes: &[u8]) {
    if let Ok(r) = S::decode_reply(bytes) {
        let again = S::encode_reply(&r);
        assert_eq!(
            S::encode_reply(&S::decode_reply(&again).expect("decodes")),
            again
        );
    }
    let Ok(cmd) = S::decode_command(bytes) else {
        return;
    };
    // Compared by encoding: not every service's command is `PartialEq` (the bank's).
    let again = S::encode_command(&cmd);
    let cmd2 = S::decode_command(&again).expect("re-encoded decodes");
    assert_eq!(S::encode_command(&cmd2), again, "decode(encode(c)) == c");
    if S::check(&cmd).is_err() {
        return;
    }
    let _ = S::is_read_only(&cmd);
    let _ = S::op_count(&cmd);
    for partitions in [1, 2, 5] {
        let map = PartitionMap::new(partitions, 1 << 20).expect("a valid map");
        let _ = S::objects(&cmd).partitions(&map);
        if let Ok(parts) = S::split(&cmd, &map) {
            assert!(!parts.is_empty(), "a split command goes somewhere");
            for (p, sub) in &parts {
                assert!(*p < partitions, "split into partition {p} of {partitions}");
                let _ = S::check(sub);
            }
        }
    }
    let mut state = S::new();
    for round in 0..3 {
        // A little state first, from the command itself, so that updates find keys.
        let _ = state.execute(&cmd);
        let before = state.digest();
        let len = state.len();
        let (reply, undo) = state.execute_undoable(&cmd);
        let encoded = S::encode_reply(&reply);
        S::decode_reply(&encoded).expect("a reply decodes");
        state.undo(undo);
        assert_eq!(
            state.digest(),
            before,
            "undo restores the state (round {round})"
        );
        assert_eq!(state.len(), len, "undo restores the size (round {round})");
    }
    let restored = S::restore(&state.snapshot()).expect("a snapshot restores");
    assert_eq!(
        restored.digest(),
        state.digest(),
        "a snapshot keeps the state"
    );
}

/// Chirper's commands as a member's replica decodes them (`DsReplica`: destinations
/// and the S-SMR/DS-SMR command), checked as the client wire checks them, placed, and
/// executed on a small graph.
fn chirper(bytes: &[u8]) {
    type Cmd = (Dests, DsCommand<ChirperCommand>);
    let Ok((dests, dcmd)) = partita_types::decode::<Cmd>(bytes) else {
        return;
    };
    let again = partita_types::encode(&(dests, &dcmd));
    assert_eq!(
        partita_types::decode::<Cmd>(&again),
        Ok((dests, dcmd.clone()))
    );
    let wire = DsWire::<Chirper>::decode_command(bytes).expect("the same bytes");
    for data in 1..4 {
        let _ = dests.valid(data);
        let w = partita_dssmr::wire::WireCommand {
            data: data as u32,
            ..wire.clone()
        };
        if DsWire::<Chirper>::check(&w).is_ok() {
            let _ = w.groups();
        }
    }
    let cmd = match &dcmd {
        DsCommand::Consult { cmd, .. }
        | DsCommand::Access { cmd, .. }
        | DsCommand::Global { cmd }
        | DsCommand::Create { cmd, .. }
        | DsCommand::Delete { cmd } => cmd,
        DsCommand::Move { .. } => return,
    };
    let _ = Chirper::kind(cmd);
    for partitions in 1..4 {
        for map in [
            partita_dssmr::StaticMap::Service,
            partita_dssmr::StaticMap::Hashed,
        ] {
            if let Some(d) = Chirper::static_partitions(cmd, partitions, map) {
                assert!(d.valid(partitions), "placed in {d:?} of {partitions}");
            }
        }
    }
    let mut world = Reference::<Chirper>::default();
    world.load((partita_fuzz::chirper_users())());
    let reply = world.execute(cmd);
    let encoded = partita_types::encode(&reply);
    assert_eq!(partita_types::decode(&encoded).as_ref(), Ok(&reply));
    if let partita_dssmr::Kind::Create(id) = Chirper::kind(cmd) {
        world.create(id, cmd);
    }
}
