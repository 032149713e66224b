//! Writes the seed corpora (`fuzz/corpus/<target>/seed-*`): real frames, peer
//! messages, WAL records, checkpoints and commands of each service, so that the
//! fuzzers start from what the system really reads. `cargo run --bin seeds` in `fuzz/`.
use partita_btree::{BPlusTree, Op};
use partita_consensus::{Msg, Value, Vid};
use partita_kv::{KvCommand, KvStore, PutRequest, RangeRequest};
use partita_service::StateMachine;
use partita_smr::SequentialReplica;
use partita_types::{Ballot, Reply};
use partita_wire::Wire;
use std::sync::Arc;

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = format!("corpus/{target}");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(format!("{dir}/seed-{name}"), bytes).unwrap();
}

fn frame(w: &Wire) -> Vec<u8> {
    partita_wire::to_frame(w)
}

fn main() {
    let b = Ballot::new(3, 1);
    let vid = Vid { ballot: b, seq: 9 };
    let cmds: Vec<_> = (1..4)
        .map(|k| {
            partita_btree::service::command(
                7,
                k,
                4,
                &Op::Insert {
                    key: k,
                    value: k * 10,
                },
            )
        })
        .collect();
    let value = Arc::new(Value::new(vid, cmds.clone()).at(1_000));
    let msgs = [
        Msg::Phase1A {
            ballot: b,
            from: 1,
            to: 11,
        },
        Msg::Phase1B {
            ballot: b,
            from: 1,
            to: 11,
            accepted: vec![(2, b, value.clone())],
            truncated_below: 1,
        },
        Msg::Phase2A {
            ballot: b,
            instance: 2,
            value: value.clone(),
            decided: vec![(1, vid)],
            ring: 0b111,
            part: None,
        },
        Msg::Phase2B {
            ballot: b,
            instance: 2,
            vid,
            votes: 0b11,
        },
        Msg::Decide {
            decided: vec![(2, vid)],
        },
        Msg::Heartbeat {
            ballot: b,
            decided_up_to: 2,
        },
        Msg::Nack {
            ballot: b,
            promised: Ballot::new(4, 2),
        },
    ];
    for (i, m) in msgs.iter().enumerate() {
        write(
            "wire_frame",
            &format!("peer-{i}"),
            &frame(&Wire::Peer(m.clone())),
        );
        let mut p = vec![(i as u8) << 1, 0];
        p.extend(partita_types::encode(m));
        write("peer_message", &format!("{i}"), &p);
    }
    write(
        "wire_frame",
        "request",
        &frame(&Wire::Request(cmds[0].clone())),
    );
    let reply = Reply {
        client: 7,
        seq: 1,
        instance: 2,
        result: Ok(BPlusTree::encode_reply(&partita_btree::OpResult::Inserted(
            true,
        ))),
    };
    write(
        "wire_frame",
        "reply",
        &frame(&Wire::Reply {
            reply,
            leader: Some(1),
        }),
    );
    write(
        "wire_frame",
        "hello",
        &frame(&Wire::ClientHello { client: 7 }),
    );

    // WAL: a few records of acceptor state, framed as on disk.
    let mut records = Vec::new();
    for (i, m) in msgs.iter().take(3).enumerate() {
        partita_wal::frame_record(&mut records, &partita_types::encode(m));
        write("wal_segment", &format!("records-{i}"), &records);
    }
    let mut image = partita_wal::segment_header(7, 1, 1).to_vec();
    image.extend_from_slice(&records);
    write("wal_segment", "segment", &image);

    // Checkpoints of both services with a little state.
    let mut tree = BPlusTree::new();
    for k in 0..40 {
        tree.execute(&Op::Insert {
            key: k * 3,
            value: k,
        });
    }
    write(
        "checkpoint",
        "btree",
        &SequentialReplica::new(4, tree).checkpoint(),
    );
    let mut kv = KvStore::new();
    for k in 0..10u8 {
        kv.execute(&KvCommand::Put(PutRequest {
            key: vec![b'k', k],
            value: vec![k; 5],
            prev_kv: false,
        }));
    }
    write(
        "checkpoint",
        "kv",
        &SequentialReplica::new(4, kv).checkpoint(),
    );

    // Commands of each service (first byte: which service).
    let ops = [
        Op::Insert { key: 5, value: 6 },
        Op::Read { key: 5 },
        Op::Query { min: 1, max: 100 },
        Op::Delete { key: 5 },
    ];
    for (i, op) in ops.iter().enumerate() {
        let mut c = vec![0];
        c.extend_from_slice(&BPlusTree::encode_command(op));
        write("service_commands", &format!("btree-{i}"), &c);
    }
    let kvs = [
        KvCommand::Put(PutRequest {
            key: b"a".to_vec(),
            value: b"1".to_vec(),
            prev_kv: true,
        }),
        KvCommand::Range(RangeRequest {
            key: b"a".to_vec(),
            end: vec![0],
            limit: 3,
            keys_only: false,
            count_only: false,
        }),
    ];
    for (i, c) in kvs.iter().enumerate() {
        let mut v = vec![1];
        v.extend_from_slice(&KvStore::encode_command(c));
        write("service_commands", &format!("kv-{i}"), &v);
    }
}
