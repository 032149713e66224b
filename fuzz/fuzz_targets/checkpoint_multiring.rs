//! A checkpoint of a Multi-Ring Paxos replica, from disk (a restart) or from a peer
//! (state transfer): past the header and checksum (the input, and the input resealed
//! with a correct CRC32C trailer) to the ordering section, where a Multi-Ring Paxos
//! replica keeps its merge position (`partita_node::multiring`'s `Position`: the
//! `MergePosition` and the merged stream's time). Two ways in, both at replica 4 (or
//! the replica the checkpoint names) of the cluster file `partita_fuzz::multiring_cluster`
//! (two rings, `M` = 2, the B+tree):
//!
//! - `NodeCore::recover` (a restart): the merge resumes from the position, each ring's
//!   learner from the merge's next instance of that ring;
//! - a state transfer into a fresh replica: an acceptor says what the replica needs was
//!   truncated (`Msg::Truncated`), the replica asks a peer for a checkpoint, and the
//!   peer answers with the input in one chunk: the node checks the position
//!   (`check_position`), restores, and moves its merge there (`skip_to`).
//!
//! What must hold: no panic (a peer's or a disk's bytes never kill a node: damage is an
//! error or a refused transfer); the node's invariants after every step, and after a
//! few ticks of running from there; the position decodes (as the node's own type
//! declares it) to what re-encodes equal; the node resumes exactly at the checkpoint's
//! instance and position (its ordering's position is the checkpoint's, re-encoded,
//! after the skips a merge consumes at once: `RingMerge::resume` then `pop`); the
//! replica and position written back into a checkpoint restore to the same state and
//! position, and rewritten once more give the same bytes; restarted or transferred,
//! the same state and position.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_consensus::multiring::{MergePosition, RingMerge};
use partita_consensus::Msg;
use partita_node::{NodeCore, NodeSetup, Output, UnsafeBugs};
use partita_types::NodeId;
use serde::{Deserialize, Serialize};

/// The ordering section of a Multi-Ring Paxos replica's checkpoint, as
/// `partita_node::multiring::Position` declares it (private there: the same fields in
/// the same order, so the same encoding).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Position {
    merge: MergePosition,
    time_ms: u64,
}

/// The cluster's replicas.
const REPLICAS: [NodeId; 2] = [4, 5];

fuzz_target!(|data: &[u8]| {
    restore(data);
    if let Some(sealed) = partita_fuzz::resealed(data) {
        restore(&sealed);
    }
});

fn setups() -> &'static [NodeSetup; 2] {
    static SETUPS: std::sync::OnceLock<[NodeSetup; 2]> = std::sync::OnceLock::new();
    SETUPS.get_or_init(|| REPLICAS.map(partita_fuzz::multiring_setup))
}

/// What a node core resumed with: its replica's instance and digest, and its
/// ordering's position.
fn resumed(n: &NodeCore) -> (u64, u64, Vec<u8>) {
    let r = n.replica().expect("a replica");
    let position = n.ordering().expect("an ordering").position();
    (r.last_instance(), r.digest(), position)
}

/// A few ticks of the node running from where it resumed, invariants after each.
fn run(n: &mut NodeCore, now_ms: &mut u64) {
    for _ in 0..3 {
        let mut out = Vec::new();
        *now_ms += 1;
        n.on_tick(*now_ms, &mut out);
        n.invariants();
    }
}

/// Whether `merge` is of the rings a replica of this cluster merges (else the node
/// refuses it before its merge takes a step).
fn ours(merge: &MergePosition) -> bool {
    let partita_node::OrderingSetup::MultiRing(mr) = &setups()[0].ordering else {
        panic!("a Multi-Ring Paxos cluster")
    };
    let rings = &mr.rings;
    merge
        .rings
        .iter()
        .map(|r| r.0)
        .eq(rings.iter().map(|r| r.id))
}

fn restore(data: &[u8]) {
    let Ok(info) = partita_smr::verify_checkpoint(data) else {
        // Refused at the first check, also by a recovering node.
        let mut out = Vec::new();
        let s = setups()[0].clone();
        assert!(NodeCore::recover(
            s,
            Vec::new(),
            Some(data.to_vec()),
            UnsafeBugs::default(),
            &mut out
        )
        .is_err());
        return;
    };
    let section = partita_smr::checkpoint_ordering(data, &info);
    let position = partita_types::decode::<Position>(section).ok();
    if let Some(p) = &position {
        let again = partita_types::encode(p);
        assert_eq!(partita_types::decode::<Position>(&again).as_ref(), Ok(p));
    }
    // Where a merge resumed from it stands: the position, after the skips it carries
    // for the ring whose turn it is (a merge consumes those without waiting for
    // anything; a position a replica wrote has none, one from elsewhere may).
    let partita_node::OrderingSetup::MultiRing(mr) = &setups()[0].ordering else {
        panic!("a Multi-Ring Paxos cluster")
    };
    let m = mr.m;
    let expected = position.as_ref().filter(|p| ours(&p.merge)).and_then(|p| {
        let mut mg = RingMerge::<()>::resume(p.merge.clone(), m).ok()?;
        assert!(mg.pop().is_none(), "a resumed merge holds no value");
        Some(partita_types::encode(&Position {
            merge: mg.position(),
            time_ms: p.time_ms,
        }))
    });
    // The replica the checkpoint names, if it is one of the cluster's; else replica 4.
    let setup = match REPLICAS
        .iter()
        .position(|&r| u64::from(r) == u64::from(info.node_id))
    {
        Some(i) => setups()[i].clone(),
        None => setups()[0].clone(),
    };
    let mut now_ms = 1_000;

    // A restart from it.
    let mut out = Vec::new();
    let recovered = NodeCore::recover(
        setup.clone(),
        Vec::new(),
        Some(data.to_vec()),
        UnsafeBugs::default(),
        &mut out,
    );
    let restarted = match recovered {
        Ok(mut n) => {
            n.invariants();
            let (instance, _, pos) = resumed(&n);
            assert_eq!(
                instance, info.instance,
                "resumed at the checkpoint's instance"
            );
            let p = expected
                .as_ref()
                .expect("a replica resumed from a position its merge takes");
            assert_eq!(&pos, p, "resumed at the checkpoint's position");
            // Written back, it restores to the same state and position; rewritten once
            // more, the same bytes.
            let again = n.replica().expect("a replica").checkpoint(&pos);
            let mut out = Vec::new();
            let n2 = NodeCore::recover(
                setup.clone(),
                Vec::new(),
                Some(again.clone()),
                UnsafeBugs::default(),
                &mut out,
            )
            .expect("a checkpoint the replica wrote restores");
            n2.invariants();
            assert_eq!(resumed(&n2), resumed(&n), "written back, the same replica");
            let (_, _, pos2) = resumed(&n2);
            assert_eq!(
                n2.replica().expect("a replica").checkpoint(&pos2),
                again,
                "rewritten, the same bytes"
            );
            let at = resumed(&n);
            run(&mut n, &mut now_ms);
            Some(at)
        }
        Err(_) => None,
    };

    // A state transfer of it into a fresh replica (which restamps it as its own).
    let mut out = Vec::new();
    let mut n = NodeCore::new(setup.clone(), Vec::new(), UnsafeBugs::default(), &mut out);
    out.clear();
    // Acceptor 1 (of ring 1) truncated below instance 2: the replica, which has
    // delivered nothing, needs instance 1 and asks another replica.
    n.on_peer(1, Msg::Truncated { below: 2 }, &mut out);
    n.invariants();
    let Some(peer) = out.iter().find_map(|o| match o {
        Output::Send {
            to,
            msg: Msg::CheckpointRequest { .. },
        } => Some(*to),
        _ => None,
    }) else {
        panic!("a replica that needs a truncated instance asks a peer: {out:?}");
    };
    let before = resumed(&n);
    let mut out = Vec::new();
    n.on_peer(
        peer,
        Msg::CheckpointChunk {
            instance: info.instance,
            offset: 0,
            total: data.len() as u64,
            crc32c: info.crc32c,
            data: data.to_vec(),
        },
        &mut out,
    );
    n.invariants();
    let after = resumed(&n);
    if after != before {
        // Taken: at the checkpoint's instance and position, like a restart from it.
        assert_eq!(
            after.0, info.instance,
            "transferred to the checkpoint's instance"
        );
        let p = expected
            .as_ref()
            .expect("a transfer taken with a position its merge takes");
        assert_eq!(&after.2, p, "at the checkpoint's position");
        if let Some(at) = restarted {
            assert_eq!(after, at, "transferred or restarted, the same replica");
        }
    }
    run(&mut n, &mut now_ms);
}
