//! Writes the seed corpora (`fuzz/corpus/<target>/seed-*`): real frames, peer
//! messages, client commands, WAL records and segments, checkpoints and commands of
//! every service, so that the fuzzers start from what the system really reads, and for
//! each a truncated and a garbled copy (`-cut`, `-flip`). `cargo run --bin seeds` in
//! `fuzz/` (stable or nightly); the output is deterministic, so rerunning it after a
//! format change shows in `git status` which seeds changed.
use partita_btree::{BPlusTree, BatchOp, Op};
use partita_consensus::{AcceptorRecord, Msg, Value, Vid};
use partita_dssmr::chirper::{user_id, Chirper, ChirperCommand};
use partita_dssmr::replica::ExecMsg;
use partita_dssmr::{CmdRef, Dests, DsCommand, Exchange, Member};
use partita_fuzz::bank::{Bank, BankCmd};
use partita_kv::{KvCommand, KvStore, PutRequest, RangeRequest};
use partita_service::StateMachine;
use partita_smr::{SequentialReplica, ServiceFactory};
use partita_types::{Ballot, Command, Reply};
use partita_wire::Wire;
use std::sync::Arc;

/// A seed, its first half, and a copy with one byte flipped in the middle.
fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = format!("corpus/{target}");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(format!("{dir}/seed-{name}"), bytes).unwrap();
    if bytes.len() >= 4 {
        std::fs::write(format!("{dir}/seed-{name}-cut"), &bytes[..bytes.len() / 2]).unwrap();
        let mut flip = bytes.to_vec();
        let at = bytes.len() / 2 + 1;
        flip[at.min(bytes.len() - 1)] ^= 0x5a;
        std::fs::write(format!("{dir}/seed-{name}-flip"), flip).unwrap();
    }
}

/// `head`, then each part behind a one-byte length (the last behind 0: the rest).
fn framed(head: u8, parts: &[Vec<u8>]) -> Vec<u8> {
    let mut v = vec![head];
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            v.push(0);
        } else {
            v.push(u8::try_from(p.len()).expect("seed parts under 256 bytes"));
        }
        v.extend_from_slice(p);
    }
    v
}

fn main() {
    let b = Ballot::new(3, 1);
    let vid = Vid { ballot: b, seq: 9 };
    let ops = [
        Op::Insert { key: 5, value: 6 },
        Op::Read { key: 5 },
        Op::Update { key: 5, value: 7 },
        Op::Query { min: 1, max: 100 },
        Op::Next { key: 4 },
        Op::Prev { key: 9 },
        Op::Delete { key: 5 },
        Op::Batch(vec![
            BatchOp::Insert { key: 1, value: 2 },
            BatchOp::Delete { key: 1 },
        ]),
    ];
    let cmds: Vec<Command> = ops[..2]
        .iter()
        .enumerate()
        .map(|(i, op)| partita_btree::service::command(7, i as u64 + 1, 4, op))
        .collect();
    let value = Arc::new(Value::new(vid, cmds.clone()).at(1_000));
    let exchange = ExecMsg::Exchange(Exchange {
        at: CmdRef {
            instance: 1,
            client: 3,
            seq: 1,
        },
        from: Member::Partition(1),
        values: vec![(
            user_id(1, 0),
            partita_types::encode(&partita_dssmr::chirper::User::default()),
        )],
        verdict: true,
    });
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
        Msg::Exec {
            data: partita_types::encode(&exchange),
        },
    ];
    for (i, m) in msgs.iter().enumerate() {
        write(
            "wire_frame",
            &format!("peer-{i}"),
            &partita_wire::to_frame(&Wire::Peer(m.clone())),
        );
        // From node 1 (acceptors' messages) or 6 (a Chirper replica's exchange).
        let from = if matches!(m, Msg::Exec { .. }) { 5 } else { 0 };
        write(
            "peer_message",
            &format!("{i}"),
            &framed(from << 1 | (i as u8 & 1), &[partita_types::encode(m)]),
        );
    }
    let reply = Reply {
        client: 7,
        seq: 1,
        instance: 2,
        result: Ok(BPlusTree::encode_reply(&partita_btree::OpResult::Inserted(
            true,
        ))),
    };
    let wires = [
        ("request", Wire::Request(cmds[0].clone())),
        (
            "reply",
            Wire::Reply {
                reply,
                leader: Some(1),
            },
        ),
        ("hello", Wire::ClientHello { client: 7 }),
        (
            "peer-hello",
            Wire::PeerHello {
                from: 2,
                cluster_id: 1,
            },
        ),
        ("status", Wire::StatusRequest),
    ];
    let mut stream = Vec::new();
    for (name, w) in &wires {
        let f = partita_wire::to_frame(w);
        write("wire_frame", name, &f);
        stream.extend_from_slice(&f);
    }
    write("wire_frame", "stream", &stream);

    // Client commands at the entry node: payloads (bit 2 clear) and whole commands.
    let btree: Vec<Vec<u8>> = ops
        .iter()
        .map(|op| BPlusTree::encode_command(op).to_vec())
        .collect();
    write("client_command", "btree", &framed(0, &btree));
    let whole: Vec<Vec<u8>> = cmds.iter().map(partita_types::encode).collect();
    write("client_command", "btree-whole", &framed(4, &whole));
    write(
        "client_command",
        "open",
        &framed(4, &[partita_types::encode(&Command::open(7, 1, 1))]),
    );
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
    let kv: Vec<Vec<u8>> = kvs
        .iter()
        .map(|c| KvStore::encode_command(c).to_vec())
        .collect();
    write("client_command", "kv", &framed(1, &kv));
    let banks = [
        BankCmd::Deposit {
            account: "a".into(),
            amount: 10,
        },
        BankCmd::Transfer {
            from: "a".into(),
            to: "b".into(),
            amount: 4,
        },
        BankCmd::Balance {
            account: "b".into(),
        },
    ];
    let bank: Vec<Vec<u8>> = banks
        .iter()
        .map(|c| Bank::encode_command(c).to_vec())
        .collect();
    write("client_command", "bank", &framed(2, &bank));

    // Commands of each service (first byte: which service).
    for (i, c) in btree.iter().enumerate() {
        write(
            "service_commands",
            &format!("btree-{i}"),
            &[&[0][..], c].concat(),
        );
    }
    for (i, c) in kv.iter().enumerate() {
        write(
            "service_commands",
            &format!("kv-{i}"),
            &[&[1][..], c].concat(),
        );
    }
    for (i, c) in bank.iter().enumerate() {
        write(
            "service_commands",
            &format!("bank-{i}"),
            &[&[2][..], c].concat(),
        );
    }
    let (u0, u1) = (user_id(0, 0), user_id(1, 1));
    let chirps = [
        (
            Dests::partition(0),
            DsCommand::Access {
                cmd: ChirperCommand::Post {
                    user: u0,
                    id: 1,
                    text: "hi".into(),
                },
                omega: vec![],
            },
        ),
        (
            Dests::partition(0).with(Member::Partition(1)),
            DsCommand::Access {
                cmd: ChirperCommand::Follow { user: u0, whom: u1 },
                omega: vec![],
            },
        ),
        (
            Dests::oracle(),
            DsCommand::Consult {
                cmd: ChirperCommand::GetTimeline { user: u0 },
                extra: vec![],
            },
        ),
        (
            Dests::oracle(),
            DsCommand::Create {
                cmd: ChirperCommand::CreateUser {
                    user: user_id(0, 9),
                },
                at: 0,
            },
        ),
        (
            Dests::partition(0).with(Member::Partition(1)),
            DsCommand::Move {
                moves: vec![(u1, 0)],
                to: 0,
            },
        ),
    ];
    let chirp: Vec<Vec<u8>> = chirps.iter().map(partita_types::encode).collect();
    for (i, c) in chirp.iter().enumerate() {
        write(
            "service_commands",
            &format!("chirper-{i}"),
            &[&[3][..], c].concat(),
        );
    }

    // A Chirper member: commands (tag 0), an exchange from replica 6 (tag 1, sender 2),
    // a tick (tag 2); DS-SMR (bit 0), partition 0.
    let mut member = vec![1];
    for c in &chirp {
        member.extend_from_slice(&[0, c.len() as u8]);
        member.extend_from_slice(c);
    }
    let x = partita_types::encode(&exchange);
    member.extend_from_slice(&[1 | 2 << 2, x.len() as u8]);
    member.extend_from_slice(&x);
    member.extend_from_slice(&[2, 0]);
    write("dssmr_member", "dssmr", &member);
    member[0] = 0;
    write("dssmr_member", "ssmr", &member);

    // WAL: acceptor records, framed as on disk, and a whole segment of them.
    let recs = [
        AcceptorRecord::Promise { ballot: b },
        AcceptorRecord::Accept {
            instance: 2,
            ballot: b,
            value: value.clone(),
        },
        AcceptorRecord::Truncated {
            below: 1,
            promised: b,
        },
    ];
    let mut records = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let payload = partita_types::encode(r);
        write("wal_segment", &format!("record-{i}"), &payload);
        partita_wal::frame_record(&mut records, &payload);
    }
    write("wal_segment", "records", &records);
    let mut image = partita_wal::segment_header(7, 1, 1).to_vec();
    image.extend_from_slice(&records);
    write("wal_segment", "segment", &image);

    // Checkpoints of every service with a little state (cluster 1, node 4).
    let mut tree = BPlusTree::new();
    for k in 0..40 {
        tree.execute(&Op::Insert {
            key: k * 3,
            value: k,
        });
    }
    write("checkpoint", "btree", &checkpoint(tree));
    let mut kv = KvStore::new();
    for c in &kvs {
        kv.execute(c);
    }
    write("checkpoint", "kv", &checkpoint(kv));
    let mut bank = Bank::new();
    for c in &banks {
        bank.execute(c);
    }
    write("checkpoint", "bank", &checkpoint(bank));
    let users = partita_fuzz::chirper_users();
    let f = partita_dssmr::replica::factory::<Chirper>(partita_dssmr::client::Scheme::Dssmr, users);
    let mut r = f.fresh(4);
    r.configure(&partita_smr::ReplicaOptions {
        cluster_id: 1,
        partition: Some((partita_fuzz::chirper_layout(3), 0)),
        ..Default::default()
    });
    write("checkpoint", "chirper", &r.checkpoint(&[]));
    // Cluster files: what `partita up` and the experiments write, and sections of
    // every kind (each seed is a file the parser takes; a refused one says why here).
    let local = partita_config::ClusterConfig::default_local(7100, 42);
    let mut files = vec![
        ("local", local.to_toml()),
        (
            "cs",
            partita_config::ClusterConfig::client_server(7100, 42).to_toml(),
        ),
        (
            "partitions",
            local
                .clone()
                .with_partitions(2, 2, 1 << 32)
                .unwrap()
                .to_toml(),
        ),
        (
            "batchers",
            local.clone().with_batchers(2).unwrap().to_toml(),
        ),
        (
            "replicas-batch",
            local.clone().with_replicas_batching().unwrap().to_toml(),
        ),
    ];
    let text = local.to_toml();
    files.push((
        "execution",
        format!("{text}\n[execution]\nthreads = 3\nkey_max = 999\noptimistic = true\n"),
    ));
    files.push(("wan", {
        let mut t = String::new();
        for line in text.lines() {
            t.push_str(line);
            t.push('\n');
            if line.starts_with("roles") {
                t.push_str("region = \"Virginia\"\n");
            }
        }
        format!("{t}\n[wan]\npreset = \"paper\"\nclients = [\"Europe\"]\n")
    }));
    files.push((
        "multicast",
        format!(
            "{}\n[tls]\ninsecure = true\n\n[multicast]\ngroup = \"239.77.0.1\"\nport = 7700\n",
            text.replace("127.0.0.1", "10.99.0.1")
        ),
    ));
    for (name, file) in &files {
        if let Err(e) = partita_config::ClusterConfig::parse(file, name) {
            eprintln!("cluster_config seed {name} is refused: {e}");
        }
        write("cluster_config", name, file.as_bytes());
    }

    // Multicast datagrams: a Phase 2A as a coordinator sends it, and other messages
    // that a receiver refuses.
    for (i, m) in msgs.iter().enumerate() {
        let frame = partita_wire::to_frame(&Wire::Peer(m.clone()));
        let d = partita_wire::datagram::encode_datagram(9, 2, &frame);
        write("multicast_datagram", &format!("msg-{i}"), &d);
    }
}

fn checkpoint<S: StateMachine>(state: S) -> Vec<u8> {
    let mut r = SequentialReplica::new(4, state);
    r.set_cluster_id(1);
    r.checkpoint()
}
