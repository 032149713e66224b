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
use partita_service::{ServiceCodec, StateMachine};
use partita_smr::SequentialReplica;
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
        clock: 0,
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
            lease: 0,
        }),
        KvCommand::Range(RangeRequest {
            key: b"a".to_vec(),
            end: vec![0],
            limit: 3,
            keys_only: false,
            count_only: false,
            revision: 0,
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
    let f = partita_dssmr::replica::factory::<Chirper>(
        partita_dssmr::client::Scheme::Dssmr,
        partita_dssmr::StaticMap::Service,
        users,
    );
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
        format!("{text}\n[execution]\nmodel = \"opt-psmr\"\nthreads = 3\nkey_max = 999\n"),
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

    etcd_seeds();
    geo_seeds();
    multiring_seeds();

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

/// What a node core took, in order: a peer's message, a client's command, a tick.
#[derive(Clone)]
enum Event {
    Peer(partita_types::NodeId, Msg),
    Request(Command),
    Tick,
}

/// A few node cores on an in-memory network (one FIFO queue, nothing lost), their
/// writes durable at once, their checkpoints saved at once; as the drivers do. Records
/// what each node took, so that a seed can replay it to one node, and the checkpoints
/// they wrote.
struct Net {
    nodes: std::collections::BTreeMap<partita_types::NodeId, partita_node::NodeCore>,
    queue: std::collections::VecDeque<(partita_types::NodeId, partita_types::NodeId, Msg)>,
    now_ms: u64,
    trace: std::collections::BTreeMap<partita_types::NodeId, Vec<Event>>,
    checkpoints: Vec<(partita_types::NodeId, Vec<u8>)>,
    replies: Vec<(partita_types::NodeId, Reply)>,
}

impl Net {
    fn new(setups: Vec<partita_node::NodeSetup>) -> Net {
        let mut net = Net {
            nodes: Default::default(),
            queue: Default::default(),
            now_ms: 1_000,
            trace: Default::default(),
            checkpoints: Vec::new(),
            replies: Vec::new(),
        };
        for s in setups {
            let id = s.id;
            let mut out = Vec::new();
            let n = partita_node::NodeCore::new(
                s,
                Vec::new(),
                partita_node::UnsafeBugs::default(),
                &mut out,
            );
            net.nodes.insert(id, n);
            net.trace.insert(id, Vec::new());
            net.handle(id, out);
        }
        net
    }

    /// The driver's part after a step of node `id`: send, persist (acknowledged at
    /// once, in token order), save checkpoints, keep replies; until nothing is left.
    fn handle(&mut self, id: partita_types::NodeId, mut out: Vec<partita_node::Output>) {
        use partita_node::Output;
        loop {
            let mut tokens = Vec::new();
            let mut saved = Vec::new();
            for o in out.drain(..) {
                match o {
                    Output::Send { to, msg } => self.queue.push_back((id, to, msg)),
                    Output::Persist { token, .. } => tokens.push(token),
                    Output::SaveCheckpoint { instance, bytes } => {
                        self.checkpoints.push((id, bytes.0.to_vec()));
                        saved.push(instance);
                    }
                    Output::Reply(r) => self.replies.push((id, r)),
                    _ => {}
                }
            }
            let n = self.nodes.get_mut(&id).expect("a node of the net");
            let mut next = Vec::new();
            if !tokens.is_empty() {
                n.on_persisted(&tokens, &mut next);
            }
            for i in saved {
                n.on_checkpoint_saved(i, &mut next);
            }
            n.invariants();
            if next.is_empty() {
                return;
            }
            out = next;
        }
    }

    fn request(&mut self, id: partita_types::NodeId, cmd: Command) {
        self.trace
            .get_mut(&id)
            .unwrap()
            .push(Event::Request(cmd.clone()));
        let mut out = Vec::new();
        self.nodes.get_mut(&id).unwrap().on_request(cmd, &mut out);
        self.handle(id, out);
    }

    /// Deliver everything in flight (and what that sends), then tick every node once.
    fn step(&mut self) {
        while let Some((from, to, msg)) = self.queue.pop_front() {
            if !self.nodes.contains_key(&to) {
                continue;
            }
            self.trace
                .get_mut(&to)
                .unwrap()
                .push(Event::Peer(from, msg.clone()));
            let mut out = Vec::new();
            self.nodes
                .get_mut(&to)
                .unwrap()
                .on_peer(from, msg, &mut out);
            self.handle(to, out);
        }
        self.now_ms += 1;
        let ids: Vec<_> = self.nodes.keys().copied().collect();
        for id in ids {
            self.trace.get_mut(&id).unwrap().push(Event::Tick);
            let mut out = Vec::new();
            self.nodes
                .get_mut(&id)
                .unwrap()
                .on_tick(self.now_ms, &mut out);
            self.handle(id, out);
        }
    }

    fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step();
        }
    }
}

/// Senders as `geo_replica` names them (3 bits).
const GEO_SENDERS: [partita_types::NodeId; 8] = [1, 2, 3, 4, 7, 99, 0, u32::MAX];

/// `events` in `geo_replica`'s format for node `node` (head: node core mode, the node),
/// at most `max` events that are not ticks (ticks merged, up to 64 a tag).
fn geo_events(node: partita_types::NodeId, events: &[Event], max: usize) -> Vec<u8> {
    let mut v = vec![((node - 1) as u8) << 1];
    let mut taken = 0;
    let mut ticks = 0u32;
    let flush = |v: &mut Vec<u8>, ticks: &mut u32| {
        while *ticks > 0 {
            let k = (*ticks).min(64);
            v.push(3 | ((k - 1) as u8) << 2);
            *ticks -= k;
        }
    };
    for e in events {
        if taken == max {
            break;
        }
        let (tag, bytes) = match e {
            Event::Tick => {
                ticks += 1;
                continue;
            }
            Event::Peer(from, m) => {
                let i = GEO_SENDERS
                    .iter()
                    .position(|s| s == from)
                    .expect("a sender") as u8;
                (i << 2, partita_types::encode(m))
            }
            Event::Request(c) => (1 | 4, partita_types::encode(c)),
        };
        flush(&mut v, &mut ticks);
        v.push(tag);
        v.extend_from_slice(
            &u16::try_from(bytes.len())
                .expect("under 64 KiB")
                .to_le_bytes(),
        );
        v.extend_from_slice(&bytes);
        taken += 1;
    }
    flush(&mut v, &mut ticks);
    v
}

/// `head`, then each event as `geo_replica` and `etcd_grpc` take it: a tag and, when
/// it has bytes, their 2-byte little-endian length and the bytes.
fn tagged(head: Option<u8>, events: &[(u8, Option<Vec<u8>>)]) -> Vec<u8> {
    let mut v: Vec<u8> = head.into_iter().collect();
    for (tag, bytes) in events {
        v.push(*tag);
        if let Some(b) = bytes {
            v.extend_from_slice(&u16::try_from(b.len()).expect("under 64 KiB").to_le_bytes());
            v.extend_from_slice(b);
        }
    }
    v
}

/// GeoPaxos+: what nodes of a real three-node cluster took (replayed to one node
/// core), log entries forwarded to a serializer's leader, and scripts for the replica
/// cores.
fn geo_seeds() {
    use partita_consensus::geopaxos::{Entry, SerializerSet};
    use partita_geo::replica::{GeoValue, OpId};
    // Requests at every node: local and remote writes, reads, inserts that split a
    // leaf, next/prev, a command the geo tree does not have; then long enough for a
    // DOP (every 100 ms at node 1).
    let scenarios: [(&str, Vec<(partita_types::NodeId, Op)>); 3] = [
        (
            "local",
            vec![
                (2, Op::Update { key: 9, value: 90 }),
                (2, Op::Read { key: 10 }),
                (1, Op::Read { key: 1 }),
                (3, Op::Next { key: 20 }),
            ],
        ),
        (
            "split",
            vec![
                (3, Op::Insert { key: 100, value: 7 }),
                (3, Op::Insert { key: 101, value: 8 }),
                (3, Op::Insert { key: 102, value: 9 }),
                (1, Op::Prev { key: 5 }),
            ],
        ),
        (
            "remote",
            vec![
                (1, Op::Update { key: 20, value: 1 }),
                (2, Op::Read { key: 0 }),
                (1, Op::Delete { key: 3 }),
                (3, Op::Insert { key: 4, value: 2 }),
            ],
        ),
    ];
    for (name, ops) in &scenarios {
        let mut net = Net::new((1..=3).map(partita_fuzz::geo_setup).collect());
        net.run(5);
        for (i, (node, op)) in ops.iter().enumerate() {
            let cmd = partita_btree::service::command(9, i as u64 + 1, *node, op);
            net.request(*node, cmd);
            net.run(4);
        }
        net.run(120);
        assert!(
            net.replies.len() >= ops.len(),
            "GeoPaxos+ answered the seeds' requests"
        );
        for node in 1..=3 {
            let events = &net.trace[&node];
            write(
                "geo_replica",
                &format!("node{node}-{name}"),
                &geo_events(node, events, 24),
            );
        }
    }
    // Log entries forwarded to serializer g's leader: an origin's write for g alone,
    // a read for two serializers, a clock entry.
    let value = |op: partita_geo::Op| GeoValue { op, request: 77 };
    let entries = [
        (
            1u8,
            Entry::Op {
                op: OpId {
                    from: 0,
                    incarnation: 1,
                    seq: 0,
                    attempt: 0,
                },
                dst: SerializerSet(0b010),
                hint: 3,
                value: value(partita_geo::Op::Update {
                    key: 9,
                    value: vec![1; 16],
                }),
            },
        ),
        (
            0,
            Entry::Op {
                op: OpId {
                    from: 2,
                    incarnation: 1,
                    seq: 4,
                    attempt: 1,
                },
                dst: SerializerSet(0b011),
                hint: 9,
                value: value(partita_geo::Op::GetNext { key: 7 }),
            },
        ),
        (2, Entry::Clock { hint: 12 }),
    ];
    for (i, (g, e)) in entries.iter().enumerate() {
        let bytes = partita_types::encode(e);
        // To node g + 1 (the leader of serializer g) from node 1 or 2, after the
        // node's first ticks.
        let from = if *g == 0 { 1u8 } else { 0 };
        let seed = tagged(
            Some((*g) << 1),
            &[
                (3 | 9 << 2, None),
                (2 | g << 2 | from << 4, Some(bytes.clone())),
                (3 | 20 << 2, None),
            ],
        );
        write("geo_replica", &format!("entry-{i}"), &seed);
    }
    // Replica cores: submissions at every replica, each replica learning the logs in
    // its own interleaving, the leaders' clock entries, a DOP, an injected entry.
    let op = |o: partita_geo::Op| Some(partita_types::encode(&o));
    let learn = |r: u8, g: u8, n: u8| (1 | r << 2 | g << 4 | (n - 1) << 6, None);
    let mut script = vec![
        (
            0 | 1 << 2,
            op(partita_geo::Op::Update {
                key: 9,
                value: vec![2; 16],
            }),
        ),
        (0, op(partita_geo::Op::Read { key: 20 })),
        (
            0 | 2 << 2,
            op(partita_geo::Op::Insert {
                key: 50,
                value: vec![3; 8],
            }),
        ),
        (0 | 2 << 2, op(partita_geo::Op::GetPrev { key: 50 })),
    ];
    for r in 0..3 {
        for g in 0..3 {
            script.push(learn((r + g) % 3, g, 4));
        }
    }
    script.push((3, None));
    for r in 0..3 {
        for g in 0..3 {
            script.push(learn(r, 2 - g, 4));
        }
    }
    write("geo_replica", "replicas", &tagged(Some(1), &script));
    let mut dop = script.clone();
    dop.insert(2, (3 | 4, None));
    write("geo_replica", "replicas-dop", &tagged(Some(1), &dop));
    let mut injected = script;
    injected.insert(1, (2 | 1 << 2, Some(partita_types::encode(&entries[0].1))));
    injected.insert(2, (2 | 2 << 2, Some(partita_types::encode(&entries[2].1))));
    write(
        "geo_replica",
        "replicas-injected",
        &tagged(Some(1), &injected),
    );
}

/// Multi-Ring Paxos: checkpoints its replicas wrote in a real run (two rings, skips,
/// requests through both rings), with their merge positions.
fn multiring_seeds() {
    let c = partita_fuzz::multiring_cluster();
    let ids: Vec<partita_types::NodeId> = c.nodes.iter().map(|n| n.id).collect();
    let mut net = Net::new(
        ids.iter()
            .map(|&id| partita_fuzz::multiring_setup(id))
            .collect(),
    );
    net.run(20);
    for i in 0..12u64 {
        // Clients spread over the rings (by client id), entering at a replica or a
        // ring's coordinator.
        let at = [4, 1, 6][i as usize % 3];
        let op = Op::Insert {
            key: i * 7,
            value: i,
        };
        net.request(at, partita_btree::service::command(100 + i, 1, at, &op));
        net.run(6);
    }
    net.run(200);
    let mut taken = 0;
    for node in [4, 5] {
        let mine: Vec<&Vec<u8>> = net
            .checkpoints
            .iter()
            .filter(|(id, _)| *id == node)
            .map(|(_, b)| b)
            .collect();
        assert!(mine.len() >= 2, "replica {node} wrote checkpoints");
        for (k, b) in [mine[0], mine[mine.len() / 2], mine[mine.len() - 1]]
            .iter()
            .enumerate()
        {
            write("checkpoint_multiring", &format!("replica{node}-{k}"), b);
            taken += 1;
        }
    }
    assert_eq!(taken, 6);
}

/// The etcd gateway: requests as etcd's clients encode them (prost), alone and in
/// sequences that write, read sorted, compare and watch what was written.
fn etcd_seeds() {
    use partita_etcd::pb::etcdserverpb as pb;
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    use pb::range_request::{SortOrder, SortTarget};
    use pb::request_op::Request;
    use prost::Message;
    let put = |k: &str, v: &str, prev: bool| pb::PutRequest {
        key: k.into(),
        value: v.into(),
        prev_kv: prev,
        ..Default::default()
    };
    let range = |k: &str, end: &str| pb::RangeRequest {
        key: k.into(),
        range_end: end.into(),
        ..Default::default()
    };
    let sorted = pb::RangeRequest {
        limit: 2,
        sort_order: SortOrder::Descend as i32,
        sort_target: SortTarget::Mod as i32,
        ..range("a", "\0")
    };
    let txn = pb::TxnRequest {
        compare: vec![
            pb::Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Version as i32,
                key: "a".into(),
                target_union: Some(TargetUnion::Version(1)),
                range_end: vec![],
            },
            pb::Compare {
                result: CompareResult::Greater as i32,
                target: CompareTarget::Value as i32,
                key: "b".into(),
                target_union: Some(TargetUnion::Value("1".into())),
                range_end: vec![],
            },
        ],
        success: vec![
            pb::RequestOp {
                request: Some(Request::RequestPut(put("c", "3", true))),
            },
            pb::RequestOp {
                request: Some(Request::RequestRange(pb::RangeRequest {
                    sort_order: SortOrder::Ascend as i32,
                    sort_target: SortTarget::Value as i32,
                    ..range("a", "z")
                })),
            },
        ],
        failure: vec![pb::RequestOp {
            request: Some(Request::RequestDeleteRange(pb::DeleteRangeRequest {
                key: "a".into(),
                range_end: "b".into(),
                prev_kv: true,
            })),
        }],
    };
    let watch = pb::WatchRequest {
        request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
            pb::WatchCreateRequest {
                key: "a".into(),
                range_end: "z".into(),
                start_revision: 1,
                filters: vec![pb::watch_create_request::FilterType::Nodelete as i32],
                prev_kv: true,
                ..Default::default()
            },
        )),
    };
    let reqs: Vec<(&str, u8, Vec<u8>)> = vec![
        ("range", 0, range("a", "").encode_to_vec()),
        ("range-sorted", 0, sorted.encode_to_vec()),
        ("put", 1, put("a", "1", true).encode_to_vec()),
        (
            "delete",
            2,
            pb::DeleteRangeRequest {
                key: "a".into(),
                range_end: vec![0],
                prev_kv: true,
            }
            .encode_to_vec(),
        ),
        ("txn", 3, txn.encode_to_vec()),
        (
            "compact",
            4,
            pb::CompactionRequest {
                revision: 2,
                physical: true,
            }
            .encode_to_vec(),
        ),
        ("watch", 5, watch.encode_to_vec()),
        ("status", 6, pb::StatusRequest {}.encode_to_vec()),
        (
            "members",
            7,
            pb::MemberListRequest { linearizable: true }.encode_to_vec(),
        ),
        ("unsupported", 8, pb::Unsupported {}.encode_to_vec()),
    ];
    for (name, tag, bytes) in &reqs {
        write(
            "etcd_grpc",
            name,
            &tagged(None, &[(*tag, Some(bytes.clone()))]),
        );
    }
    let seq = |steps: Vec<(u8, Vec<u8>)>| {
        tagged(
            None,
            &steps
                .into_iter()
                .map(|(t, b)| (t, Some(b)))
                .collect::<Vec<_>>(),
        )
    };
    write(
        "etcd_grpc",
        "sequence",
        &seq(vec![
            (1, put("a", "1", false).encode_to_vec()),
            (1, put("b", "2", true).encode_to_vec()),
            // Succeeds (version(a) = 1, value(b) > "1"): puts c, reads sorted by value.
            (3, txn.encode_to_vec()),
            (1, put("a", "4", true).encode_to_vec()),
            (0, sorted.encode_to_vec()),
            (5, watch.encode_to_vec()),
            (
                4,
                pb::CompactionRequest {
                    revision: 3,
                    physical: false,
                }
                .encode_to_vec(),
            ),
            (5, watch.encode_to_vec()),
            (2, range("a", "").encode_to_vec()),
            // Fails now (version(a) = 2): deletes a.
            (3, txn.encode_to_vec()),
        ]),
    );
}
