//! A client's command as a replica decodes it, for each service: decode, check, the
//! objects it touches, its split over two partitions, then execution with undo on a
//! small state. Never a panic; undo restores the digest; a decoded command re-encodes
//! to a command that decodes equal.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_service::StateMachine;
use partita_types::PartitionMap;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 2 {
        0 => exercise::<partita_btree::BPlusTree>(bytes),
        _ => exercise::<partita_kv::KvStore>(bytes),
    }
});

fn exercise<S: StateMachine>(bytes: &[u8])
where
    S::Command: PartialEq + std::fmt::Debug,
{
    let _ = S::decode_reply(bytes);
    let Ok(cmd) = S::decode_command(bytes) else {
        return;
    };
    let again = S::decode_command(&S::encode_command(&cmd)).expect("re-encoded decodes");
    assert_eq!(again, cmd);
    if S::check(&cmd).is_err() {
        return;
    }
    let _ = S::is_read_only(&cmd);
    let map = PartitionMap::new(2, 1 << 20).expect("a valid map");
    let _ = S::objects(&cmd).partitions(&map);
    let _ = S::split(&cmd, &map);
    let mut state = S::new();
    for seed in 0..4u8 {
        // A little state first, from the command itself, so that updates find keys.
        let _ = state.execute(&cmd);
        let before = state.digest();
        let (_reply, undo) = state.execute_undoable(&cmd);
        state.undo(undo);
        assert_eq!(
            state.digest(),
            before,
            "undo restores the state (round {seed})"
        );
    }
}
