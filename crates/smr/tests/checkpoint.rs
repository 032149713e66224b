//! Replica checkpoints: restore(checkpoint()) answers exactly like the original (same
//! digest, same reply cache: a resubmission after the restore is answered from the
//! cache, not executed again), identical state gives identical bytes, and damaged or
//! foreign checkpoints are refused with a typed error, never a panic.

use partita_btree::BPlusTree;
use partita_btree::{BatchOp, Op, OpResult};
use partita_consensus::{Value, Vid};
use partita_smr::{
    checkpoint_header, checkpoint_ordering, restamp_checkpoint, seed_checkpoint, verify_checkpoint,
    CheckpointError, SequentialReplica,
};
use partita_types::{Ballot, Command, NodeId, Reply};
use proptest::prelude::*;

fn value(cmds: Vec<Command>) -> Value {
    Value {
        vid: Vid {
            ballot: Ballot::ZERO,
            seq: 0,
        },
        commands: cmds,
        parts: Vec::new(),
        time_ms: 0,
        skip: 0,
    }
}

fn cmd(client: u64, seq: u64, reply_to: NodeId, op: Op) -> Command {
    partita_btree::service::command(client, seq, reply_to, &op)
}

/// The B+tree result a reply carries.
fn res(r: &Reply) -> OpResult {
    partita_smr::reply_of::<BPlusTree>(&r.result)
}

fn replica(id: NodeId) -> SequentialReplica<BPlusTree> {
    let mut r = SequentialReplica::<BPlusTree>::new(id, BPlusTree::new());
    r.set_cluster_id(0xC1);
    r
}

fn run(r: &mut SequentialReplica<BPlusTree>, cmds: Vec<Command>) -> Vec<Reply> {
    let mut out = Vec::new();
    let next = r.last_instance() + 1;
    r.execute(next, &value(cmds), &mut out);
    r.invariants();
    out
}

/// A backup restored into a new cluster: the same state and digest at instance 0 of
/// the new cluster, as the new node, without the old cluster's sessions; a command of
/// the old client is executed afresh, not answered from a cache it no longer has.
#[test]
fn a_seeded_checkpoint_keeps_the_state_and_starts_a_new_cluster() {
    let mut a = replica(1);
    run(&mut a, vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]);
    run(&mut a, vec![cmd(8, 1, 1, Op::Insert { key: 6, value: 60 })]);
    let bytes = a.checkpoint();
    let seeded = seed_checkpoint(&bytes, 0xD2, 4).unwrap();
    let info = verify_checkpoint(&seeded).unwrap();
    assert_eq!(
        (info.cluster_id, info.node_id, info.instance, info.name),
        (0xD2, 4, 0, 0)
    );
    assert_eq!(info.clients, 0);
    assert!(checkpoint_ordering(&seeded, &info).is_empty());
    let old = verify_checkpoint(&bytes).unwrap();
    assert_eq!(
        (info.digest, info.entries, info.service),
        (old.digest, old.entries, old.service)
    );
    let mut b = SequentialReplica::<BPlusTree>::restore(&seeded).unwrap();
    assert_eq!(b.digest(), a.digest());
    assert_eq!((b.id(), b.cluster_id(), b.last_instance()), (4, 0xD2, 0));
    assert_eq!(b.cached_reply(7), None);
    let again = run(&mut b, vec![cmd(7, 1, 4, Op::Insert { key: 5, value: 99 })]);
    assert_eq!(res(&again[0]), OpResult::Inserted(false));
    assert_eq!(b.stats().commands_executed, 1);
    // Damage is refused, never seeded.
    let mut bad = bytes.clone();
    bad[HEADER_PROBE] ^= 1;
    assert!(seed_checkpoint(&bad, 0xD2, 4).is_err());
}

/// A byte inside the header (the instance field).
const HEADER_PROBE: usize = 24;

#[test]
fn resubmission_after_restore_is_answered_from_the_cache() {
    let mut a = replica(1);
    let first = run(&mut a, vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]);
    assert_eq!(res(&first[0]), OpResult::Inserted(true));
    run(&mut a, vec![cmd(8, 1, 1, Op::Insert { key: 6, value: 60 })]);

    let bytes = a.checkpoint();
    let mut b = SequentialReplica::<BPlusTree>::restore(&bytes).unwrap();
    assert_eq!(b.digest(), a.digest());
    assert_eq!(b.last_instance(), 2);
    assert_eq!(b.id(), 1);
    assert_eq!(b.cluster_id(), 0xC1);
    assert_eq!(b.cached_reply(7), a.cached_reply(7));

    // The client of (7, 1) never saw its reply and resubmits: the restored replica
    // answers from the cache (instance 1, inserted), and does not insert again.
    let again = run(&mut b, vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 99 })]);
    assert_eq!(again, first, "the cached reply, not a second execution");
    assert_eq!(b.state().read(5), Some(50));
    assert_eq!(b.stats().commands_executed, 0);
    assert_eq!(b.stats().duplicates_answered, 1);
    // An older one is stale and ignored, as before the checkpoint.
    run(&mut b, vec![cmd(7, 2, 1, Op::Delete { key: 5 })]);
    assert!(run(&mut b, vec![cmd(7, 1, 1, Op::Delete { key: 6 })]).is_empty());
    assert_eq!(b.state().read(6), Some(60));
}

#[test]
fn planted_reexecution_after_restore_is_observable() {
    // Control: with the planted bug the same resubmission executes again, so the
    // test above would catch a cache that was lost in the checkpoint.
    let mut a = replica(1);
    run(&mut a, vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 50 })]);
    let mut b = SequentialReplica::<BPlusTree>::restore(&a.checkpoint()).unwrap();
    b.set_unsafe_reexecute_duplicates(true);
    let again = run(&mut b, vec![cmd(7, 1, 1, Op::Insert { key: 5, value: 99 })]);
    assert_eq!(res(&again[0]), OpResult::Inserted(false));
}

#[test]
fn same_state_gives_the_same_bytes_up_to_the_node_id() {
    let cmds = |reply_to| {
        (0..200u64)
            .map(|i| {
                cmd(
                    i % 17,
                    i / 17 + 1,
                    reply_to,
                    Op::Insert {
                        key: i * 3,
                        value: i,
                    },
                )
            })
            .collect::<Vec<_>>()
    };
    let (mut a, mut b) = (replica(1), replica(2));
    run(&mut a, cmds(1));
    run(&mut b, cmds(2));
    let ca = a.checkpoint();
    let mut cb = b.checkpoint();
    assert_ne!(ca, cb, "node ids differ");
    restamp_checkpoint(&mut cb, 1).unwrap();
    assert_eq!(ca, cb);
    let info = verify_checkpoint(&ca).unwrap();
    assert_eq!(
        (
            info.node_id,
            info.cluster_id,
            info.instance,
            info.entries,
            info.clients
        ),
        (1, 0xC1, 1, 200, 17)
    );
    assert_eq!(info.digest, a.digest());
}

#[test]
fn foreign_cluster_is_refused_and_the_node_id_is_taken() {
    let mut a = replica(4);
    run(&mut a, vec![cmd(1, 1, 4, Op::Insert { key: 1, value: 1 })]);
    let bytes = a.checkpoint();
    match SequentialReplica::<BPlusTree>::restore_as(&bytes, 0xC2, 5) {
        Err(CheckpointError::Foreign {
            expected_cluster_id: 0xC2,
            found_cluster_id: 0xC1,
            found_node_id: 4,
            ..
        }) => {}
        other => panic!("unexpected {:?}", other.map(|r| r.id())),
    }
    let b = SequentialReplica::<BPlusTree>::restore_as(&bytes, 0xC1, 5).unwrap();
    assert_eq!(b.id(), 5);
    assert_eq!(b.digest(), a.digest());
}

fn sample_checkpoint() -> Vec<u8> {
    let mut a = replica(3);
    run(
        &mut a,
        vec![
            cmd(1, 1, 3, Op::Insert { key: 1, value: 10 }),
            cmd(
                2,
                1,
                3,
                Op::Batch(vec![BatchOp::Insert { key: 2, value: 20 }]),
            ),
        ],
    );
    run(&mut a, vec![cmd(3, 1, 3, Op::Delete { key: 1 })]);
    a.checkpoint()
}

#[test]
fn every_truncation_and_every_bit_flip_is_refused() {
    let bytes = sample_checkpoint();
    for len in 0..bytes.len() {
        assert!(
            SequentialReplica::<BPlusTree>::restore(&bytes[..len]).is_err(),
            "truncated to {len}"
        );
    }
    for at in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = bytes.clone();
            bad[at] ^= bit;
            assert!(
                SequentialReplica::<BPlusTree>::restore(&bad).is_err(),
                "flip {bit:#x} at byte {at} accepted"
            );
        }
    }
    let mut v = bytes.clone();
    v[8] = 1; // the format before services were named in checkpoints
    assert_eq!(
        SequentialReplica::<BPlusTree>::restore(&v).err(),
        Some(CheckpointError::Version(1))
    );
    let mut other = b"PBTREE\0\x01".to_vec(); // a B+tree snapshot is not a checkpoint
    other.resize(200, 0);
    assert_eq!(
        SequentialReplica::<BPlusTree>::restore(&other).err(),
        Some(CheckpointError::Magic)
    );
}

#[test]
fn consistent_checksum_over_inconsistent_contents_is_still_refused() {
    // Damage that a checksum cannot see (the writer itself was wrong): the header's
    // digest disagrees with the tree. Re-checksummed so only the contents check fails.
    let mut bytes = sample_checkpoint();
    bytes[32] ^= 1;
    let body = bytes.len() - 4;
    let crc = crc32c_of(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    assert!(checkpoint_header(&bytes).is_ok());
    assert!(matches!(
        SequentialReplica::<BPlusTree>::restore(&bytes),
        Err(CheckpointError::Contents { .. })
    ));
}

/// The ordering section (Multi-Ring Paxos's merge position) comes back as written and
/// changes nothing else; a version-5 checkpoint (no execution name, 8 header bytes
/// fewer) still restores, its name the instance, and so does a version-4 one (sessions
/// without their home either) and a version-3 one (no ordering section either, 16
/// header bytes fewer), with an empty section.
#[test]
fn the_ordering_section_round_trips_and_versions_3_to_5_still_read() {
    let mut a = replica(3);
    run(&mut a, vec![cmd(1, 1, 3, Op::Insert { key: 1, value: 10 })]);
    let plain = a.checkpoint();
    let with = a.checkpoint_with(b"merge position");
    let info = verify_checkpoint(&with).unwrap();
    assert_eq!(checkpoint_ordering(&with, &info), b"merge position");
    assert_eq!(with.len(), plain.len() + b"merge position".len());
    let back = SequentialReplica::<BPlusTree>::restore(&with).unwrap();
    assert_eq!(back.state().digest(), a.state().digest());
    assert_eq!(
        info.name,
        a.last_instance(),
        "one stream: the name is the instance"
    );
    for version in [5, 4] {
        let old_bytes = as_version(&with, version);
        let info = verify_checkpoint(&old_bytes).unwrap();
        assert_eq!(checkpoint_ordering(&old_bytes, &info), b"merge position");
        assert_eq!(info.name, info.instance, "version {version}");
        let old = SequentialReplica::<BPlusTree>::restore(&old_bytes).unwrap();
        assert_eq!(old.state().digest(), a.state().digest());
        assert_eq!(old.last_instance(), a.last_instance());
    }
    let v3 = as_version(&plain, 3);
    let info = verify_checkpoint(&v3).unwrap();
    assert!(checkpoint_ordering(&v3, &info).is_empty());
    let old = SequentialReplica::<BPlusTree>::restore(&v3).unwrap();
    assert_eq!(old.state().digest(), a.state().digest());
    assert_eq!(old.last_instance(), a.last_instance());
}

/// `bytes` (this build's format) as `version` wrote it: 5 without the execution name
/// at 96; 4 also with each session without its home; 3 also without the ordering
/// length field at 88 (so `bytes` must have an empty ordering section).
fn as_version(bytes: &[u8], version: u32) -> Vec<u8> {
    use partita_smr::sessions::{Session, SessionV4};
    assert!((3..=5).contains(&version));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let (clients, sessions_len) = (u64_at(48), u64_at(56) as usize);
    if version == 3 {
        assert_eq!(u64_at(88), 0, "version 3 has no ordering section");
    }
    let mut sessions = Vec::new();
    let mut at = 104;
    for _ in 0..clients {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let entry = &bytes[at + 4..at + 4 + len];
        let entry = if version >= 5 {
            entry.to_vec()
        } else {
            let s: Session = partita_types::decode(entry).unwrap();
            partita_types::encode(&SessionV4 {
                client: s.client,
                opened_at: s.opened_at,
                renewed_ms: s.renewed_ms,
                last: s.last,
            })
        };
        sessions.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        sessions.extend_from_slice(&entry);
        at += 4 + len;
    }
    assert_eq!(at, 104 + sessions_len);
    let mut old = bytes[..if version == 3 { 88 } else { 96 }].to_vec();
    old[8..12].copy_from_slice(&version.to_le_bytes());
    old[56..64].copy_from_slice(&(sessions.len() as u64).to_le_bytes());
    old.extend_from_slice(&sessions);
    old.extend_from_slice(&bytes[at..bytes.len() - 4]);
    let crc = crc32c_of(&old);
    old.extend_from_slice(&crc.to_le_bytes());
    old
}

fn crc32c_of(b: &[u8]) -> u32 {
    // The same CRC32C (Castagnoli) the format uses, bit by bit, so the test does not
    // trust the implementation it checks.
    let mut crc = !0u32;
    for &byte in b {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn arb_op() -> impl Strategy<Value = Op> {
    let key = 0u64..64;
    prop_oneof![
        (key.clone(), any::<u64>()).prop_map(|(key, value)| Op::Insert { key, value }),
        key.clone().prop_map(|key| Op::Delete { key }),
        (key.clone(), any::<u64>()).prop_map(|(key, value)| Op::Update { key, value }),
        key.clone().prop_map(|key| Op::Read { key }),
        (key.clone(), key.clone()).prop_map(|(min, max)| Op::Query { min, max }),
        proptest::collection::vec(
            (key, any::<u64>(), any::<bool>()).prop_map(|(key, value, ins)| if ins {
                BatchOp::Insert { key, value }
            } else {
                BatchOp::Delete { key }
            }),
            0..5
        )
        .prop_map(Op::Batch),
    ]
}

/// A command stream where clients move on, and sometimes resubmit their current or
/// an older command (as a client does after a timeout, possibly reordered).
fn arb_stream() -> impl Strategy<Value = Vec<Vec<Command>>> {
    proptest::collection::vec(
        proptest::collection::vec((0u64..4, 0u64..3, arb_op(), 1u32..3), 1..6),
        1..40,
    )
    .prop_map(|values| {
        let mut seq = [0u64; 4];
        values
            .into_iter()
            .map(|cmds| {
                cmds.into_iter()
                    .map(|(client, back, op, reply_to)| {
                        let c = client as usize;
                        if back == 0 || seq[c] == 0 {
                            seq[c] += 1;
                        }
                        let s = seq[c].saturating_sub(back.saturating_sub(1)).max(1);
                        cmd(client, s, reply_to, op)
                    })
                    .collect()
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// restore(checkpoint()) at any point, then the same suffix on both: the same
    /// replies (cached ones included) and the same digest at every step.
    #[test]
    fn restore_of_checkpoint_behaves_like_the_original(
        stream in arb_stream(),
        cut in any::<prop::sample::Index>(),
    ) {
        let cut = cut.index(stream.len() + 1);
        let mut a = replica(1);
        for v in &stream[..cut] {
            run(&mut a, v.clone());
        }
        let bytes = a.checkpoint();
        let mut b = SequentialReplica::<BPlusTree>::restore(&bytes).unwrap();
        prop_assert_eq!(b.digest(), a.digest());
        prop_assert_eq!(b.last_instance(), a.last_instance());
        prop_assert_eq!(b.checkpoint(), bytes);
        for v in &stream[cut..] {
            let ra = run(&mut a, v.clone());
            let rb = run(&mut b, v.clone());
            prop_assert_eq!(ra, rb);
            prop_assert_eq!(a.digest(), b.digest());
        }
        prop_assert_eq!(a.stats().duplicates_answered >= b.stats().duplicates_answered, true);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = SequentialReplica::<BPlusTree>::restore(&bytes);
        let _ = verify_checkpoint(&bytes);
    }

    #[test]
    fn arbitrary_damage_with_a_fixed_checksum_never_panics(
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut bytes = sample_checkpoint();
        let i = at.index(bytes.len() - 4);
        bytes[i] = byte;
        let body = bytes.len() - 4;
        let crc = crc32c_of(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        let _ = SequentialReplica::<BPlusTree>::restore(&bytes);
    }
}

/// A counter: the smallest other service, to show that a checkpoint of one service is
/// never restored into another.
struct Counter(u64);

impl partita_smr::ServiceCodec for Counter {
    const NAME: &'static str = "counter";
    type Command = u64;
    type Reply = u64;
    type Key = u64;
    fn is_read_only(add: &u64) -> bool {
        *add == 0
    }
    fn objects(_: &u64) -> partita_service::Objects<u64> {
        partita_service::Objects::key(0)
    }
}

impl partita_smr::StateMachine for Counter {
    type Undo = u64;
    fn new() -> Self {
        Counter(0)
    }
    fn execute(&mut self, add: &u64) -> u64 {
        self.0 = self.0.wrapping_add(*add);
        self.0
    }
    fn execute_undoable(&mut self, add: &u64) -> (u64, u64) {
        (self.execute(add), *add)
    }
    fn undo(&mut self, add: u64) {
        self.0 = self.0.wrapping_sub(add);
    }
    fn snapshot(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(bytes: &[u8]) -> Result<Self, String> {
        Ok(Counter(u64::from_le_bytes(
            bytes.try_into().map_err(|_| "not 8 bytes".to_string())?,
        )))
    }
    fn digest(&self) -> u64 {
        self.0
    }
}

#[test]
fn a_checkpoint_of_another_service_is_refused() {
    let bytes = sample_checkpoint();
    assert!(matches!(
        SequentialReplica::<Counter>::restore(&bytes),
        Err(CheckpointError::Service {
            expected: "counter",
            ..
        })
    ));
    let mut c = SequentialReplica::new(1, Counter(0));
    c.set_cluster_id(0xC1);
    let mut out = Vec::new();
    c.execute(
        1,
        &value(vec![Command::single(
            1,
            1,
            1,
            <Counter as partita_smr::ServiceCodec>::encode_command(&5),
        )]),
        &mut out,
    );
    let theirs = c.checkpoint();
    assert!(matches!(
        SequentialReplica::<BPlusTree>::restore(&theirs),
        Err(CheckpointError::Service {
            expected: "btree",
            ..
        })
    ));
    assert_eq!(
        SequentialReplica::<Counter>::restore(&theirs)
            .unwrap()
            .state()
            .0,
        5
    );
}

/// Fuzzing (`checkpoint_multiring`): a checkpoint naming an instance no log reaches,
/// with a correct checksum, made recovery overflow computing the next instance to
/// deliver (`instance + 1`). It is refused at the header, naming the instance.
#[test]
fn a_checkpoint_beyond_any_log_is_refused() {
    let mut bytes = sample_checkpoint();
    let body = bytes.len() - 4;
    for instance in [u64::MAX, partita_smr::INSTANCE_MAX + 1] {
        bytes[24..32].copy_from_slice(&instance.to_le_bytes());
        let crc = crc32c_of(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            partita_smr::verify_checkpoint(&bytes).err(),
            Some(CheckpointError::Instance(instance))
        );
        assert_eq!(
            SequentialReplica::<BPlusTree>::restore(&bytes).err(),
            Some(CheckpointError::Instance(instance))
        );
    }
    // At the bound it is a checkpoint like any other.
    bytes[24..32].copy_from_slice(&partita_smr::INSTANCE_MAX.to_le_bytes());
    let crc = crc32c_of(&bytes[..body]);
    bytes[body..].copy_from_slice(&crc.to_le_bytes());
    let r = SequentialReplica::<BPlusTree>::restore(&bytes).unwrap();
    assert_eq!(r.last_instance(), partita_smr::INSTANCE_MAX);
}
