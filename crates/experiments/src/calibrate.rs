//! `partita calibrate`: measure the simulator's cost table (`partita_sim::CostTable`)
//! on this machine by running the real code, and write it as the TOML that
//! `partita sim --cost-table` and `partita experiment ... --sim --cost-table` read.
//!
//! What is measured, and how it maps to the table (`crates/sim/src/cpu.rs`):
//!
//! | measurement | real code | table fields |
//! | --- | --- | --- |
//! | encode (frame + CRC) and decode (frame check + decode) of every message kind at a few sizes, a line fitted over the sizes | `partita_wire::to_frame`, `partita_types::frame::parse_frame`, `partita_types::decode` | `[codec.KIND]` (`Msg` kinds, `request`, `reply`, `refused`, `record`), `byte_in_ps`, `byte_out_ps` |
//! | B+tree insert, delete, update, read, next, prev, and range queries of 1 to 1000 keys (a line over the keys returned) on a bulk-loaded tree of `--entries` entries, keys drawn as `partita bench` draws them | `BPlusTree::execute` (result and undo record included, as the replica runs it) | `btree_kind_ns`, `btree_query_entry_ps`, `btree_op_ns` |
//! | a replica executing values of 64 updates, minus their B+tree work | `SequentialReplica::execute` | `command_ns` |
//! | one signal between two threads: a spinning ping-pong over one atomic word (the handoff a P-SMR barrier between threads on cores of their own makes), half a round trip | `std::sync::atomic` | `psmr_signal_ns` |
//! | each handler of an in-process cluster (3 acceptors, 2 replicas) by input kind, for both protocols | `NodeCore` (see `partita_sim::calibrate`) | `message_kind_ns`, `peer_message_ns`, `request_ns`, `tick_ns`, `persisted_ns`, `persisted_token_ns` |
//! | the same cluster with a standalone batcher taking every command: the batcher's requests, the leader's batches (minus `request_ns` per command they carry) and the acknowledgements | `NodeCore` with a `Batcher` | `batcher_request_ns`, `message_kind_ns.forwardbatch`, `message_kind_ns.forwardack` |
//! | the client-server server taking a request, minus execution | `NodeCore` in `Mode::Cs` | `cs_request_ns` |
//! | a socket write of a small frame (loopback TCP), the extra CPU of a blocking request/reply exchange, and a tokio channel hop between two tasks | `std::net`, `tokio::sync::mpsc` | `send_ns`, `reply_ns`, `recv_ns` |
//! | handing a record to the WAL's group-commit thread | `partita_wal::GroupCommit::submit` | `persist_ns` |
//! | WAL write (per record, per byte) and fdatasync latency, in a temporary directory next to the system's temp dir | `partita_wal::Wal::append` + `sync` with `Durability::Memory` and `Fsync` | `[disk]` |
//!
//! Wall-clock timings are medians over rounds (handler calls: the mean of the
//! fastest 95%), so that a machine shared with other work disturbs them little; the
//! socket costs use the thread's CPU time. Costs the table does not model are left at
//! their defaults (restart). The output starts with a comment saying when, where and
//! how it was measured.

use anyhow::Context;
use partita_btree::BPlusTree;
use partita_btree::{BatchOp, Op, OpResult};
use partita_consensus::{AcceptorRecord, Msg, Protocol, Value, Vid};
use partita_sim::calibrate::{
    fit_line, measure_batched_handlers, measure_cs_request, measure_handlers,
};
use partita_sim::cpu::{CodecCost, CostTable, DiskCost};
use partita_smr::SequentialReplica;
use partita_types::{Ballot, Command, Reply};
use partita_wire::to_frame;
use partita_wire::Wire;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct Options {
    /// Entries of the B+tree the operations run on.
    pub entries: u64,
    /// Fewer rounds and iterations (a few seconds; for tests and a first look).
    pub quick: bool,
    /// Where the WAL is measured (a directory is made inside and removed after).
    pub wal_dir: PathBuf,
}

impl Options {
    pub fn new(entries: u64, quick: bool) -> Options {
        Options {
            entries,
            quick,
            wal_dir: std::env::temp_dir(),
        }
    }

    fn rounds(&self) -> usize {
        if self.quick {
            3
        } else {
            9
        }
    }
}

/// One line of the readable table.
#[derive(Clone, Debug)]
pub struct Row {
    pub section: &'static str,
    pub item: String,
    pub value: String,
}

/// A measured table, its header and the readable rows.
#[derive(Clone, Debug)]
pub struct Calibration {
    pub table: CostTable,
    pub header: String,
    pub rows: Vec<Row>,
}

impl Calibration {
    /// The TOML file: the header comment, then the table.
    pub fn to_toml(&self) -> String {
        format!("{}\n{}", self.header, self.table.to_toml())
    }

    /// The rows, section by section.
    pub fn readable(&self) -> String {
        let mut s = String::new();
        let mut section = "";
        for r in &self.rows {
            if r.section != section {
                section = r.section;
                s += &format!("\n{section}\n");
            }
            s += &format!("  {:<34} {}\n", r.item, r.value);
        }
        s
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Nanoseconds per call of `f`, one value per round (after a warm-up).
fn per_call(rounds: usize, iters: usize, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..iters.min(64) {
        f();
    }
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect()
}

/// CPU time of the calling thread, nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; the clock id is a constant.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ------------------------------------------------------------------ sample messages

fn update(i: u64) -> Command {
    partita_btree::service::command(
        i % 500 + 1,
        i + 1,
        4 + (i % 2) as u32,
        &if i.is_multiple_of(2) {
            Op::Insert {
                key: i * 7_919 % 24_000_000,
                value: i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            }
        } else {
            Op::Delete {
                key: i * 7_919 % 24_000_000,
            }
        },
    )
}

fn batch(i: u64) -> Command {
    with_op(
        update(i),
        Op::Batch(
            (0..7)
                .map(|j| BatchOp::Insert {
                    key: (i * 7 + j) * 13 % 24_000_000,
                    value: i ^ j,
                })
                .collect(),
        ),
    )
}

fn query(i: u64) -> Command {
    let min = (i * 7_919 % 24_000_000) & !1;
    with_op(
        update(i),
        Op::Query {
            min,
            max: min + 1998,
        },
    )
}

/// `c` with its operation replaced by `op` (same session, sequence and replica).
fn with_op(c: Command, op: Op) -> Command {
    partita_btree::service::command(c.client, c.seq, c.reply_to, &op)
}

/// A reply to client 12 carrying `result`.
fn encoded(result: &OpResult) -> partita_types::Outcome {
    Ok(<partita_btree::BPlusTree as partita_service::ServiceCodec>::encode_reply(result))
}

fn value(commands: u64) -> Arc<Value> {
    Arc::new(Value {
        vid: Vid {
            ballot: Ballot::new(3, 1),
            seq: 1234,
        },
        commands: (0..commands).map(update).collect(),
        parts: Vec::new(),
        time_ms: 0,
        skip: 0,
    })
}

fn decided(n: u64) -> Vec<(u64, Vid)> {
    (0..n)
        .map(|i| {
            (
                1_000 + i,
                Vid {
                    ballot: Ballot::new(3, 1),
                    seq: 900 + i,
                },
            )
        })
        .collect()
}

/// A few wire messages of each kind, of different sizes.
fn samples() -> BTreeMap<&'static str, Vec<Wire>> {
    let b = Ballot::new(3, 1);
    let vid = Vid { ballot: b, seq: 77 };
    let sizes = [1u64, 10, 50, 170];
    let peer = |m: Msg| Wire::Peer(m);
    let accepted = |n: u64| -> Vec<(u64, Ballot, Arc<Value>)> {
        (0..n).map(|i| (100 + i, b, value(20))).collect()
    };
    let mut m: BTreeMap<&'static str, Vec<Wire>> = BTreeMap::new();
    m.insert(
        "phase1a",
        vec![peer(Msg::Phase1A {
            ballot: b,
            from: 1,
            to: 100_001,
        })],
    );
    m.insert(
        "phase1b",
        [0u64, 2, 8]
            .iter()
            .map(|&n| {
                peer(Msg::Phase1B {
                    ballot: b,
                    from: 1,
                    to: 100_001,
                    accepted: accepted(n),
                    truncated_below: 1,
                })
            })
            .collect(),
    );
    m.insert(
        "nack",
        vec![peer(Msg::Nack {
            ballot: b,
            promised: Ballot::new(4, 2),
        })],
    );
    m.insert(
        "phase2a",
        sizes
            .iter()
            .map(|&n| {
                peer(Msg::Phase2A {
                    ballot: b,
                    instance: 5_000,
                    value: value(n),
                    decided: decided(2),
                    ring: 0b111,
                    part: None,
                })
            })
            .collect(),
    );
    m.insert(
        "ringvote",
        vec![peer(Msg::RingVote {
            ballot: b,
            instance: 5_000,
            vid,
            votes: 0b011,
            ring: 0b111,
        })],
    );
    m.insert(
        "phase2b",
        vec![peer(Msg::Phase2B {
            ballot: b,
            instance: 5_000,
            vid,
            votes: 0b001,
        })],
    );
    m.insert(
        "decide",
        [1u64, 8, 32]
            .iter()
            .map(|&n| {
                peer(Msg::Decide {
                    decided: decided(n),
                })
            })
            .collect(),
    );
    m.insert(
        "decidevalue",
        sizes
            .iter()
            .map(|&n| {
                peer(Msg::DecideValue {
                    instance: 5_000,
                    value: value(n),
                })
            })
            .collect(),
    );
    m.insert(
        "heartbeat",
        vec![peer(Msg::Heartbeat {
            ballot: b,
            decided_up_to: 5_000,
        })],
    );
    m.insert("alive", vec![peer(Msg::Alive { ballot: b })]);
    m.insert(
        "forward",
        vec![
            peer(Msg::Forward { cmd: update(1) }),
            peer(Msg::Forward { cmd: batch(2) }),
            peer(Msg::Forward { cmd: query(3) }),
        ],
    );
    m.insert(
        "forwardbatch",
        sizes
            .iter()
            .map(|&n| {
                peer(Msg::ForwardBatch {
                    seq: 4_321,
                    cmds: (0..n).map(update).collect(),
                })
            })
            .collect(),
    );
    m.insert("forwardack", vec![peer(Msg::ForwardAck { seq: 4_321 })]);
    m.insert(
        "learnrequest",
        vec![peer(Msg::LearnRequest { from: 10, to: 200 })],
    );
    m.insert(
        "learnreply",
        [1u64, 4, 16]
            .iter()
            .map(|&n| {
                peer(Msg::LearnReply {
                    decided: (0..n).map(|i| (100 + i, value(20))).collect(),
                })
            })
            .collect(),
    );
    m.insert(
        "readaccepted",
        vec![peer(Msg::ReadAccepted { from: 10, to: 200 })],
    );
    m.insert(
        "acceptedvalues",
        [0u64, 2, 8]
            .iter()
            .map(|&n| {
                peer(Msg::AcceptedValues {
                    from: 10,
                    to: 200,
                    accepted: accepted(n),
                })
            })
            .collect(),
    );
    m.insert(
        "checkpointed",
        vec![peer(Msg::Checkpointed { instance: 50_000 })],
    );
    m.insert("truncated", vec![peer(Msg::Truncated { below: 50_000 })]);
    m.insert(
        "checkpointrequest",
        vec![peer(Msg::CheckpointRequest {
            instance: 50_000,
            min_instance: 1,
            offset: 1 << 20,
            len: 1 << 20,
        })],
    );
    m.insert(
        "checkpointchunk",
        [1usize << 10, 64 << 10, 1 << 20]
            .iter()
            .map(|&n| {
                peer(Msg::CheckpointChunk {
                    instance: 50_000,
                    offset: 0,
                    total: 1 << 30,
                    crc32c: 7,
                    data: vec![0xA5; n],
                })
            })
            .collect(),
    );
    m.insert(
        "request",
        vec![
            Wire::Request(update(1)),
            Wire::Request(batch(2)),
            Wire::Request(query(3)),
        ],
    );
    let reply = |result: OpResult| Wire::Reply {
        reply: Reply {
            client: 12,
            seq: 99,
            instance: 5_000,
            result: encoded(&result),
        },
        leader: Some(1),
    };
    let entries = |n: u64| OpResult::Entries((0..n).map(|i| (2 * i, 2 * i)).collect());
    m.insert(
        "reply",
        vec![
            reply(OpResult::Inserted(true)),
            reply(OpResult::Batch(vec![OpResult::Removed(Some(3)); 7])),
            reply(entries(10)),
            reply(entries(100)),
            reply(entries(1000)),
        ],
    );
    m.insert(
        "refused",
        [10usize, 100]
            .iter()
            .map(|&n| Wire::Refused {
                client: 12,
                seq: 99,
                reason: "x".repeat(n),
                leader: Some(1),
            })
            .collect(),
    );
    m
}

fn records() -> Vec<AcceptorRecord> {
    let mut v = vec![AcceptorRecord::Promise {
        ballot: Ballot::new(3, 1),
    }];
    for n in [1u64, 10, 50, 170] {
        v.push(AcceptorRecord::Accept {
            instance: 5_000,
            ballot: Ballot::new(3, 1),
            value: value(n),
        });
    }
    v
}

fn iters_for(bytes: usize, quick: bool) -> usize {
    let budget = if quick { 200_000 } else { 2_000_000 };
    (budget / (bytes + 200)).clamp(5, 20_000)
}

/// Codec lines by kind: (encode, decode) fitted over the sample sizes.
/// One signal between two threads, in ns: two threads pass a counter back and forth
/// through one atomic word, each spinning until the other's write arrives; half a round
/// trip is one signal. The median of 5 rounds of `round_trips` each.
fn measure_signal(round_trips: u64) -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let word = Arc::new(AtomicU64::new(0));
        let other = word.clone();
        let peer = std::thread::spawn(move || {
            for i in 0..round_trips {
                while other.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                other.store(2 * i + 2, Ordering::Release);
            }
        });
        let start = std::time::Instant::now();
        for i in 0..round_trips {
            word.store(2 * i + 1, Ordering::Release);
            while word.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        }
        rounds.push(start.elapsed().as_nanos() as f64 / (2 * round_trips) as f64);
        peer.join().expect("the signalling thread");
    }
    median(&mut rounds)
}

fn measure_codec(o: &Options) -> BTreeMap<String, CodecCost> {
    let rounds = o.rounds();
    let mut out = BTreeMap::new();
    let line = |enc: Vec<(f64, f64)>, dec: Vec<(f64, f64)>| {
        let (ea, eb) = fit_line(&enc);
        let (da, db) = fit_line(&dec);
        CodecCost {
            encode_ns: ea.round() as u64,
            encode_byte_ps: (eb * 1000.0).round() as u64,
            decode_ns: da.round() as u64,
            decode_byte_ps: (db * 1000.0).round() as u64,
        }
    };
    for (kind, wires) in samples() {
        let (mut enc, mut dec) = (Vec::new(), Vec::new());
        for w in &wires {
            let frame = to_frame(w);
            let bytes = frame.len() as f64;
            let iters = iters_for(frame.len(), o.quick);
            for ns in per_call(rounds, iters, || {
                black_box(to_frame(black_box(w)));
            }) {
                enc.push((bytes, ns));
            }
            for ns in per_call(rounds, iters, || {
                let (range, _) = partita_types::frame::parse_frame(black_box(&frame))
                    .expect("a valid frame")
                    .expect("a whole frame");
                black_box(partita_types::decode::<Wire>(&frame[range]).expect("decodes"));
            }) {
                dec.push((bytes, ns));
            }
        }
        out.insert(kind.to_string(), line(enc, dec));
    }
    // WAL records: encoded by the node (the WAL thread adds its own CRC), decoded at
    // recovery.
    let (mut enc, mut dec) = (Vec::new(), Vec::new());
    for r in records() {
        let bytes = partita_types::encode(&r);
        let n = bytes.len() as f64;
        let iters = iters_for(bytes.len(), o.quick);
        for ns in per_call(rounds, iters, || {
            black_box(partita_types::encode(black_box(&r)));
        }) {
            enc.push((n, ns));
        }
        for ns in per_call(rounds, iters, || {
            black_box(partita_types::decode::<AcceptorRecord>(black_box(&bytes)).expect("decodes"));
        }) {
            dec.push((n, ns));
        }
    }
    out.insert("record".into(), line(enc, dec));
    out
}

// ------------------------------------------------------------------ B+tree

struct BtreeCosts {
    /// By kind, nanoseconds per operation (query: the fitted fixed part).
    kinds: BTreeMap<String, f64>,
    query_entry_ns: f64,
    /// (keys asked, ns per query) as measured.
    queries: Vec<(u64, f64)>,
    command_ns: f64,
    build_s: f64,
    /// A 1000-key range query, whole.
    query1000_ns: f64,
}

fn measure_btree(o: &Options) -> anyhow::Result<BtreeCosts> {
    let n = o.entries.max(1_000);
    let keys = n * 2;
    let t = Instant::now();
    let mut tree = BPlusTree::bulk_load((0..n).map(|i| (2 * i, 2 * i)))
        .map_err(|e| anyhow::anyhow!("bulk load: {e}"))?;
    let build_s = t.elapsed().as_secs_f64();
    let rounds = o.rounds();
    let per_round = if o.quick { 2_000 } else { 20_000 };
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut kinds = BTreeMap::new();
    for kind in ["insert", "delete", "update", "read", "next", "prev"] {
        let mut v = Vec::new();
        for _ in 0..rounds {
            let ops: Vec<Op> = (0..per_round)
                .map(|_| {
                    let key = rng.gen_range(0..keys);
                    match kind {
                        "insert" => Op::Insert {
                            key,
                            value: rng.gen(),
                        },
                        "delete" => Op::Delete { key },
                        "update" => Op::Update {
                            key,
                            value: rng.gen(),
                        },
                        "read" => Op::Read { key },
                        "next" => Op::Next { key },
                        _ => Op::Prev { key },
                    }
                })
                .collect();
            let t = Instant::now();
            for op in &ops {
                black_box(tree.execute(black_box(op)));
            }
            v.push(t.elapsed().as_nanos() as f64 / per_round as f64);
        }
        kinds.insert(kind.to_string(), median(&mut v));
    }
    // Range queries: a line over the keys returned.
    let mut points = Vec::new();
    let mut queries = Vec::new();
    for len in [1u64, 10, 100, 1000] {
        let count = (per_round as u64 * 10 / (len + 10)).max(20);
        let mut v = Vec::new();
        let mut returned = 0u64;
        let mut asked = 0u64;
        for _ in 0..rounds {
            let ops: Vec<Op> = (0..count)
                .map(|_| {
                    let min = rng.gen_range(0..keys) & !1;
                    Op::Query {
                        min,
                        max: min + (len - 1) * 2,
                    }
                })
                .collect();
            let t = Instant::now();
            for op in &ops {
                let (r, _) = tree.execute(black_box(op));
                if let OpResult::Entries(e) = &r {
                    returned += e.len() as u64;
                }
                asked += 1;
                black_box(r);
            }
            v.push(t.elapsed().as_nanos() as f64 / count as f64);
        }
        let per_query_entries = returned as f64 / asked.max(1) as f64;
        for &ns in &v {
            points.push((per_query_entries, ns));
        }
        queries.push((len, median(&mut v)));
    }
    let (qa, qb) = fit_line(&points);
    kinds.insert("query".into(), qa);
    // A replica executing values of 64 updates (half of them its own to answer),
    // minus their B+tree work: the per-command overhead.
    let mut replica = SequentialReplica::new(4, tree);
    let mut instance = 0u64;
    let mut seqs: Vec<u64> = vec![0; 1000];
    let mut v = Vec::new();
    let values_per_round = (per_round / 64).max(4);
    for _ in 0..rounds {
        let values: Vec<Value> = (0..values_per_round)
            .map(|_| Value {
                vid: Vid {
                    ballot: Ballot::new(1, 1),
                    seq: 0,
                },
                commands: (0..64)
                    .map(|j| {
                        let c = rng.gen_range(0..seqs.len());
                        seqs[c] += 1;
                        let key = rng.gen_range(0..keys);
                        partita_btree::service::command(
                            c as u64 + 1,
                            seqs[c],
                            4 + (j % 2) as u32,
                            &if rng.gen_bool(0.5) {
                                Op::Insert {
                                    key,
                                    value: rng.gen(),
                                }
                            } else {
                                Op::Delete { key }
                            },
                        )
                    })
                    .collect(),
                parts: Vec::new(),
                time_ms: 0,
                skip: 0,
            })
            .collect();
        let mut replies = Vec::new();
        let t = Instant::now();
        for val in &values {
            instance += 1;
            replica.execute(instance, val, &mut replies);
            replies.clear();
        }
        v.push(t.elapsed().as_nanos() as f64 / (values_per_round * 64) as f64);
    }
    let per_command = median(&mut v);
    let mutation = (kinds["insert"] + kinds["delete"]) / 2.0;
    let query1000_ns = queries.last().map_or(0.0, |q| q.1);
    Ok(BtreeCosts {
        kinds,
        query_entry_ns: qb,
        queries,
        command_ns: (per_command - mutation).max(0.0),
        build_s,
        query1000_ns,
    })
}

// ------------------------------------------------------------------ network stack

struct SocketCosts {
    /// CPU of one socket write of a small frame (streaming, the reader keeping up).
    write_ns: f64,
    /// One tokio channel hop between two tasks of a current-thread runtime.
    hop_ns: f64,
}

fn measure_sockets(o: &Options) -> anyhow::Result<SocketCosts> {
    use std::net::{TcpListener, TcpStream};
    let frame = to_frame(&Wire::Request(update(7)));
    let len = frame.len();
    let rounds = o.rounds();
    let per_round = if o.quick { 2_000 } else { 10_000 };
    let n = rounds * per_round;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<()> {
        let (s, _) = listener.accept()?;
        let mut r = BufReader::with_capacity(64 << 10, s);
        let mut buf = vec![0u8; len];
        for _ in 0..n {
            r.read_exact(&mut buf)?;
        }
        Ok(())
    });
    let mut w = TcpStream::connect(addr)?;
    w.set_nodelay(true)?;
    let mut v = Vec::new();
    for _ in 0..rounds {
        let cpu = thread_cpu_ns();
        for _ in 0..per_round {
            w.write_all(&frame)?;
        }
        v.push((thread_cpu_ns() - cpu) as f64 / per_round as f64);
    }
    let write_ns = median(&mut v);
    drop(w);
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("socket reader panicked"))??;
    // A channel hop between two tasks, on a thread of its own (the caller may be
    // inside a runtime already).
    let hops = if o.quick { 20_000 } else { 200_000 };
    let hop_ns = std::thread::spawn(move || -> std::io::Result<f64> {
        let rt = tokio::runtime::Builder::new_current_thread().build()?;
        Ok(rt.block_on(async move {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
            let (back_tx, mut back_rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
            let echo = tokio::spawn(async move {
                while let Some(x) = rx.recv().await {
                    if back_tx.send(x).is_err() {
                        break;
                    }
                }
            });
            let t = Instant::now();
            for i in 0..hops {
                tx.send(i).expect("echo task alive");
                black_box(back_rx.recv().await);
            }
            let ns = t.elapsed().as_nanos() as f64 / (2 * hops) as f64;
            drop(tx);
            let _ = echo.await;
            ns
        }))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("channel measurement panicked"))??;
    Ok(SocketCosts { write_ns, hop_ns })
}

/// CPU time of another thread (by its pthread CPU clock), nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into; `clock` came from
    // pthread_getcpuclockid for a thread that is still running.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(thread CPU clock)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

struct ServerCost {
    /// CPU of the server's thread per request (idle ticking subtracted).
    per_request_ns: f64,
    requests: u64,
    clients: usize,
}

/// A real client-server node (`partita_runtime::run_node_until` on a current-thread
/// runtime, as `partita node` runs) under closed-loop load from 16 real clients
/// reading absent keys: the node thread's CPU time per request, from its pthread CPU
/// clock, minus what it spends idle (ticks).
fn measure_server(o: &Options) -> anyhow::Result<ServerCost> {
    use partita_client::{Client, ClientOptions};
    use std::os::unix::thread::JoinHandleExt;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let cluster = partita_config::ClusterConfig::client_server(port, 0xCA1B_0002);
    let dir = o
        .wal_dir
        .join(format!("partita-calibrate-node-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let opts = partita_runtime::NodeOptions {
        service: partita_smr::service::<partita_btree::BPlusTree>(),
        cluster: cluster.clone(),
        id: 1,
        data_dir: dir.clone(),
        unsafe_bugs: Vec::new(),
        io_thread: false,
    };
    let node = std::thread::spawn(move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(partita_runtime::run_node_until(opts, async move {
            let _ = stop_rx.await;
        }))
    });
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the thread is alive (joined only below) and `clock` is writable.
    let r = unsafe { libc::pthread_getcpuclockid(node.as_pthread_t(), &mut clock) };
    let result = (|| -> anyhow::Result<ServerCost> {
        anyhow::ensure!(r == 0, "pthread_getcpuclockid failed ({r})");
        let addr = cluster.addr(1);
        let t = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            anyhow::ensure!(
                t.elapsed().as_secs() < 10,
                "the node did not start listening on {addr}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Idle: ticks only.
        let idle_s = 0.3;
        let c0 = clock_ns(clock);
        std::thread::sleep(std::time::Duration::from_secs_f64(idle_s));
        let idle_per_s = (clock_ns(clock) - c0) as f64 / idle_s;
        let clients = 16usize;
        let load_s = if o.quick { 0.5 } else { 3.0 };
        let done = std::sync::Arc::new(AtomicU64::new(0));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (d2, s2, c2) = (done.clone(), stop.clone(), cluster.clone());
        let load = std::thread::spawn(move || -> anyhow::Result<()> {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let mut tasks = Vec::new();
                for c in 0..clients {
                    let (done, stop, cluster) = (d2.clone(), s2.clone(), c2.clone());
                    tasks.push(tokio::spawn(async move {
                        let mut client = Client::<partita_btree::BPlusTree>::connect(
                            cluster,
                            ClientOptions::default(),
                        )
                        .await?;
                        let mut k = c as u64;
                        while !stop.load(Ordering::Relaxed) {
                            k += clients as u64;
                            client.execute(Op::Read { key: 2 * k + 1 }).await?;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        anyhow::Ok(())
                    }));
                }
                for t in tasks {
                    t.await??;
                }
                anyhow::Ok(())
            })
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (c1, n1, t1) = (
            clock_ns(clock),
            done.load(Ordering::Relaxed),
            Instant::now(),
        );
        std::thread::sleep(std::time::Duration::from_secs_f64(load_s));
        let (c2, n2, el) = (
            clock_ns(clock),
            done.load(Ordering::Relaxed),
            t1.elapsed().as_secs_f64(),
        );
        stop.store(true, Ordering::Relaxed);
        load.join()
            .map_err(|_| anyhow::anyhow!("load thread panicked"))??;
        let requests = n2 - n1;
        anyhow::ensure!(requests > 0, "no request completed");
        let busy = (c2 - c1) as f64 - idle_per_s * el;
        Ok(ServerCost {
            per_request_ns: busy.max(0.0) / requests as f64,
            requests,
            clients,
        })
    })();
    let _ = stop_tx.send(());
    let joined = node.join();
    let _ = std::fs::remove_dir_all(&dir);
    match joined {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.context("the measured node failed")),
        Err(_) => anyhow::bail!("the measured node panicked"),
    }
    result
}

// ------------------------------------------------------------------ disk

struct DiskCosts {
    disk: DiskCost,
    /// Sync latencies with three WALs syncing at once (what the table uses), and
    /// with one alone.
    fsync_samples: Vec<f64>,
    lone_samples: Vec<f64>,
    submit_ns: f64,
    dir: PathBuf,
}

fn measure_disk(o: &Options) -> anyhow::Result<DiskCosts> {
    use partita_wal::{Durability, GroupCommit, GroupCommitOptions, Wal, WalOptions};
    let dir = o
        .wal_dir
        .join(format!("partita-calibrate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let result = (|| -> anyhow::Result<DiskCosts> {
        let opts = |d: Durability| WalOptions {
            durability: d,
            ..WalOptions::new(0xCA1B, 1)
        };
        // fdatasync: append one small record, time the sync (write + fdatasync);
        // first one WAL alone, then three at once (as a cluster's three acceptors
        // on one machine sync).
        let small = vec![0x5Au8; 128];
        let syncs = if o.quick { 20 } else { 200 };
        let sync_loop = |name: String| -> anyhow::Result<Vec<f64>> {
            let (mut wal, _) = Wal::open(dir.join(&name), opts(Durability::Fsync))
                .with_context(|| format!("opening a WAL in {}", dir.display()))?;
            let mut v = Vec::new();
            for _ in 0..syncs {
                wal.append(&small)?;
                let t = Instant::now();
                wal.sync()?;
                v.push(t.elapsed().as_nanos() as f64);
            }
            Ok(v)
        };
        let lone = sync_loop("lone".into())?;
        let mut fsync = Vec::new();
        std::thread::scope(|sc| -> anyhow::Result<()> {
            let hs: Vec<_> = (0..3)
                .map(|i| {
                    let f = &sync_loop;
                    sc.spawn(move || f(format!("acceptor-{i}")))
                })
                .collect();
            for h in hs {
                fsync.extend(
                    h.join()
                        .map_err(|_| anyhow::anyhow!("fsync thread panicked"))??,
                );
            }
            Ok(())
        })?;
        // Writes without fsync: a line over records per sync and over bytes.
        let (mut wal, _) = Wal::open(dir.join("memory"), opts(Durability::Memory))?;
        let rounds = o.rounds() * 3;
        let mut time = |records: usize, size: usize| -> anyhow::Result<Vec<f64>> {
            let payload = vec![0xA5u8; size];
            let mut v = Vec::new();
            for _ in 0..rounds {
                let t = Instant::now();
                for _ in 0..records {
                    wal.append(&payload)?;
                }
                wal.sync()?;
                v.push(t.elapsed().as_nanos() as f64);
            }
            Ok(v)
        };
        let mut by_records = Vec::new();
        for r in [1usize, 8, 64] {
            for ns in time(r, 128)? {
                by_records.push((r as f64, ns));
            }
        }
        let mut by_bytes = Vec::new();
        for size in [128usize, 1024, 8192, 32768] {
            for ns in time(16, size)? {
                by_bytes.push(((16 * size) as f64, ns));
            }
        }
        let mut write_only: Vec<f64> = time(1, 128)?;
        drop(wal);
        let (_, per_record) = fit_line(&by_records);
        let (_, per_byte) = fit_line(&by_bytes);
        let fsync_ns = (median(&mut fsync.clone()) - median(&mut write_only)).max(0.0);
        // Handing records to the group-commit thread.
        let (wal, _) = Wal::open(dir.join("group"), opts(Durability::Memory))?;
        let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), |_| {})?;
        let k = if o.quick { 500 } else { 2_000 };
        let mut sub = Vec::new();
        for _ in 0..o.rounds() {
            let t = Instant::now();
            for i in 0..k {
                gc.submit(small.clone(), i as u64)
                    .map_err(|e| anyhow::anyhow!("WAL submit: {e}"))?;
            }
            sub.push(t.elapsed().as_nanos() as f64 / k as f64);
            // Let the thread catch up before the next round.
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(gc.shutdown());
        Ok(DiskCosts {
            disk: DiskCost {
                write_ns: per_record.round() as u64,
                write_byte_ps: (per_byte * 1000.0).round() as u64,
                fsync_ns: fsync_ns.round() as u64,
            },
            fsync_samples: fsync,
            lone_samples: lone,
            submit_ns: median(&mut sub),
            dir: dir.clone(),
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

// ------------------------------------------------------------------ the whole table

fn loadavg() -> String {
    read_trimmed("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// `YYYY-MM-DD HH:MM UTC` of a Unix time.
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

fn header(o: &Options, disk_dir: &Path, load_before: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let host = read_trimmed("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into());
    let kernel = read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_after = loadavg();
    format!(
        "# Partita simulator cost table (partita_sim::CostTable), measured by `partita calibrate{}`\n\
         # when:  {}\n\
         # where: host {host}, {}, {cores} cores, Linux {kernel}\n\
         # B+tree of {} entries; WAL measured in a temporary directory under {}\n\
         # load average before/after: {load_before} / {load_after} (the machine may have been\n\
         # shared with other work; timings are medians, handler calls trimmed means)\n\
         # Units: *_ns nanoseconds, *_ps picoseconds per byte (btree_query_entry_ps: per entry).\n\
         # Read by `partita sim --cost-table FILE` and `partita experiment NAME --sim --cost-table FILE`.\n",
        if o.quick { " --quick" } else { "" },
        utc(now),
        cpu_model(),
        o.entries,
        disk_dir.parent().unwrap_or(disk_dir).display(),
    )
}

/// Measure everything and assemble the table.
pub fn run(o: &Options, progress: bool) -> anyhow::Result<Calibration> {
    // On a terminal a spinner names the step; elsewhere one line per step.
    let spinner = progress
        .then(|| partita_harness::progress::spinner("calibrate"))
        .flatten();
    let say = |what: &str| match &spinner {
        Some(s) => s.set_message(what.to_string()),
        None if progress => eprintln!("calibrate: {what}"),
        None => {}
    };
    let load_before = loadavg();
    let mut rows = Vec::new();
    let mut row = |section: &'static str, item: String, value: String| {
        rows.push(Row {
            section,
            item,
            value,
        })
    };
    let mut t = CostTable::default();

    say("codec of every message kind");
    let codec = measure_codec(o);
    for (kind, c) in &codec {
        row(
            "codec (encode | decode: fixed ns + ps per byte of frame)",
            kind.clone(),
            format!(
                "{:>6} ns + {:>5} ps/B | {:>6} ns + {:>5} ps/B",
                c.encode_ns, c.encode_byte_ps, c.decode_ns, c.decode_byte_ps
            ),
        );
    }
    // The flat fallback: the median over the kinds whose size varies.
    let mut enc_ps: Vec<f64> = codec
        .values()
        .filter(|c| c.encode_byte_ps > 0)
        .map(|c| c.encode_byte_ps as f64)
        .collect();
    let mut dec_ps: Vec<f64> = codec
        .values()
        .filter(|c| c.decode_byte_ps > 0)
        .map(|c| c.decode_byte_ps as f64)
        .collect();
    t.byte_out_ps = median(&mut enc_ps).round() as u64;
    t.byte_in_ps = median(&mut dec_ps).round() as u64;
    t.codec = codec;

    say(&format!("B+tree operations on {} entries", o.entries));
    let b = measure_btree(o)?;
    row(
        "B+tree (per operation, via BPlusTree::execute)",
        "bulk load".into(),
        format!("{:.2} s for {} entries", b.build_s, o.entries),
    );
    for (k, ns) in &b.kinds {
        row(
            "B+tree (per operation, via BPlusTree::execute)",
            k.clone(),
            format!("{ns:>9.0} ns"),
        );
    }
    for (len, ns) in &b.queries {
        row(
            "B+tree (per operation, via BPlusTree::execute)",
            format!("range query of {len} keys"),
            format!("{ns:>9.0} ns"),
        );
    }
    row(
        "B+tree (per operation, via BPlusTree::execute)",
        "range query: per entry returned".into(),
        format!("{:>9.1} ns", b.query_entry_ns),
    );
    row(
        "B+tree (per operation, via BPlusTree::execute)",
        "replica, per command (besides B+tree)".into(),
        format!("{:>9.0} ns", b.command_ns),
    );
    t.btree_kind_ns = b
        .kinds
        .iter()
        .map(|(k, v)| (k.clone(), v.round() as u64))
        .collect();
    t.btree_query_entry_ps = (b.query_entry_ns * 1000.0).round() as u64;
    let point: Vec<f64> = ["insert", "delete", "update", "read"]
        .iter()
        .map(|k| b.kinds[*k])
        .collect();
    t.btree_op_ns = (point.iter().sum::<f64>() / point.len() as f64).round() as u64;
    t.command_ns = b.command_ns.round() as u64;
    let _ = b.query1000_ns;

    say("a signal between two threads");
    let signal = measure_signal(if o.quick { 20_000 } else { 200_000 });
    row(
        "threads (P-SMR synchronous mode)",
        "one signal (spinning handoff)".into(),
        format!("{signal:>9.1} ns"),
    );
    t.psmr_signal_ns = signal.round().max(1.0) as u64;

    say("node core handlers (in-process cluster, both protocols)");
    let (rounds, per_round) = if o.quick { (30, 300) } else { (300, 600) };
    let mut kinds: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    let mut persisted = Vec::new();
    for p in [Protocol::RingPaxos, Protocol::MultiPaxos] {
        let h = measure_handlers(p, rounds, per_round);
        row(
            "node core handlers (mean ns per call, codec excluded)",
            format!("{p}: commands per value"),
            format!("{:>9.1}", h.commands_per_value),
        );
        for (k, c) in &h.by_kind {
            row(
                "node core handlers (mean ns per call, codec excluded)",
                format!("{p}: {k}"),
                format!("{:>9.0} ns  ({} calls)", c.mean_ns, c.calls),
            );
            let e = kinds.entry(k.clone()).or_insert((0, 0.0));
            // Weighted by calls across both protocols.
            e.1 = (e.1 * e.0 as f64 + c.mean_ns * c.calls as f64) / (e.0 + c.calls) as f64;
            e.0 += c.calls;
        }
        persisted.push((h.persisted_ns, h.persisted_token_ns));
    }
    let cs = measure_cs_request(if o.quick { 2_000 } else { 50_000 });
    t.request_ns = kinds
        .remove("request")
        .map_or(t.request_ns, |k| k.1.round() as u64);
    t.tick_ns = kinds
        .remove("tick")
        .map_or(t.tick_ns, |k| k.1.round() as u64);
    kinds.remove("persisted");
    t.persisted_ns =
        (persisted.iter().map(|p| p.0).sum::<f64>() / persisted.len() as f64).round() as u64;
    t.persisted_token_ns =
        (persisted.iter().map(|p| p.1).sum::<f64>() / persisted.len() as f64).round() as u64;
    t.message_kind_ns = kinds
        .iter()
        .map(|(k, v)| (k.clone(), v.1.round().max(1.0) as u64))
        .collect();
    let mut msg: Vec<f64> = kinds.values().map(|v| v.1).collect();
    t.peer_message_ns = median(&mut msg).round().max(1.0) as u64;

    // Batchers: the same cluster with a standalone batcher taking every command. The
    // leader's `forwardbatch` handler includes the coordinator's work for each command
    // it carries, which the simulator charges as `request_ns` apiece (crates/sim cpu).
    let batched = "node core handlers with a batcher (mean ns per call, codec excluded)";
    let mut bkinds: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    let mut per_batch = Vec::new();
    for p in [Protocol::RingPaxos, Protocol::MultiPaxos] {
        let h = measure_batched_handlers(p, rounds, per_round);
        row(
            batched,
            format!("{p}: commands per batch"),
            format!("{:>9.1}", h.commands_per_batch),
        );
        per_batch.push(h.commands_per_batch);
        for k in ["batcher-request", "forwardbatch", "forwardack"] {
            let Some(c) = h.by_kind.get(k) else { continue };
            row(
                batched,
                format!("{p}: {k}"),
                format!("{:>9.0} ns  ({} calls)", c.mean_ns, c.calls),
            );
            let e = bkinds.entry(k.to_string()).or_insert((0, 0.0));
            e.1 = (e.1 * e.0 as f64 + c.mean_ns * c.calls as f64) / (e.0 + c.calls) as f64;
            e.0 += c.calls;
        }
    }
    let per_batch = per_batch.iter().sum::<f64>() / per_batch.len() as f64;
    if let Some(k) = bkinds.get("batcher-request") {
        t.batcher_request_ns = Some(k.1.round().max(1.0) as u64);
    }
    if let Some(k) = bkinds.get("forwardack") {
        t.message_kind_ns
            .insert("forwardack".into(), k.1.round().max(1.0) as u64);
    }
    if let Some(k) = bkinds.get("forwardbatch") {
        let base = k.1 - per_batch * t.request_ns as f64;
        t.message_kind_ns
            .insert("forwardbatch".into(), base.round().max(1.0) as u64);
        row(
            batched,
            "forwardbatch without its commands".into(),
            format!(
                "{:>9.0} ns  (minus {per_batch:.1} commands x request_ns {} ns)",
                base.max(1.0),
                t.request_ns
            ),
        );
    }
    t.cs_request_ns = Some(
        (cs.on_request_ns - cs.read_ns - b.command_ns)
            .max(0.0)
            .round() as u64,
    );
    row(
        "node core handlers (mean ns per call, codec excluded)",
        "client-server: taking a request".into(),
        format!(
            "{:>9.0} ns  (on_request {:.0} ns, minus a read {:.0} ns and the per-command cost)",
            t.cs_request_ns.unwrap_or(0),
            cs.on_request_ns,
            cs.read_ns
        ),
    );

    say("sockets, channels, and a real client-server node under load");
    let sk = measure_sockets(o)?;
    let srv = measure_server(o)?;
    t.send_ns = (sk.write_ns + sk.hop_ns).round() as u64;
    t.reply_ns = t.send_ns;
    // The node's thread per request, minus the core (on_request with its execution)
    // and the codec: the runtime's own cost (socket read, channels, wake-ups) and the
    // reply's write. What is left after the write is charged per message received.
    let read = with_op(update(1), Op::Read { key: 1 });
    let req_bytes = to_frame(&Wire::Request(read)).len();
    let rep_bytes = to_frame(&Wire::Reply {
        reply: Reply {
            client: 1,
            seq: 1,
            instance: 1,
            result: encoded(&OpResult::Value(None)),
        },
        leader: Some(1),
    })
    .len();
    let codec_ns = t.codec.get("request").map_or(0, |c| c.decode(req_bytes))
        + t.codec.get("reply").map_or(0, |c| c.encode(rep_bytes));
    let runtime_ns = srv.per_request_ns - cs.on_request_ns - codec_ns as f64;
    t.recv_ns = (runtime_ns - t.reply_ns as f64).max(sk.hop_ns).round() as u64;
    let net = "network stack (CPU time)";
    row(
        net,
        "socket write of a small frame".into(),
        format!("{:>9.0} ns  (loopback TCP, streaming)", sk.write_ns),
    );
    row(
        net,
        "tokio channel hop between tasks".into(),
        format!("{:>9.0} ns", sk.hop_ns),
    );
    row(
        net,
        "real cs node: CPU per request".into(),
        format!(
            "{:>9.0} ns  ({} requests from {} closed-loop clients; core {:.0} ns, codec {} ns)",
            srv.per_request_ns, srv.requests, srv.clients, cs.on_request_ns, codec_ns
        ),
    );
    row(
        net,
        "  of which runtime (read, write, wake)".into(),
        format!(
            "{:>9.0} ns  -> send/reply {} ns, recv {} ns",
            runtime_ns, t.send_ns, t.recv_ns
        ),
    );

    say("WAL disk (write, fdatasync, group-commit submit)");
    let d = measure_disk(o)?;
    t.persist_ns = d.submit_ns.round() as u64;
    t.disk = d.disk.clone();
    let pct = |v: &[f64]| {
        let mut f = v.to_vec();
        f.sort_by(|a, b| a.total_cmp(b));
        let q = |p: f64| f[((f.len() as f64 * p) as usize).min(f.len() - 1)] / 1e3;
        format!("{:.0} / {:.0} / {:.0} µs", q(0.1), q(0.5), q(0.9))
    };
    row(
        "WAL disk (partita-wal)",
        "sync of 128 B, 3 WALs at once p10/50/90".into(),
        pct(&d.fsync_samples),
    );
    row(
        "WAL disk (partita-wal)",
        "sync of 128 B, one WAL alone p10/50/90".into(),
        pct(&d.lone_samples),
    );
    row(
        "WAL disk (partita-wal)",
        "fsync (3 at once, minus the write)".into(),
        format!("{:>9} ns", t.disk.fsync_ns),
    );
    row(
        "WAL disk (partita-wal)",
        "write per record, per byte".into(),
        format!("{} ns, {} ps/B", t.disk.write_ns, t.disk.write_byte_ps),
    );
    row(
        "WAL disk (partita-wal)",
        "group-commit submit".into(),
        format!("{:>9} ns", t.persist_ns),
    );
    let mut all = rows;
    all.push(Row {
        section: "table (what the simulator charges)",
        item: "send / reply / recv / request / tick".into(),
        value: format!(
            "{} / {} / {} / {} / {} ns",
            t.send_ns, t.reply_ns, t.recv_ns, t.request_ns, t.tick_ns
        ),
    });
    all.push(Row {
        section: "table (what the simulator charges)",
        item: "persisted batch, per token".into(),
        value: format!("{} ns, {} ns", t.persisted_ns, t.persisted_token_ns),
    });
    all.push(Row {
        section: "table (what the simulator charges)",
        item: "peer message (kinds not measured)".into(),
        value: format!("{} ns", t.peer_message_ns),
    });
    if let Some(s) = &spinner {
        s.finish_and_clear();
    }
    Ok(Calibration {
        header: header(o, &d.dir, &load_before),
        table: t,
        rows: all,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc(951_782_400 + 3_600 + 120), "2000-02-29 01:02 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13 UTC");
    }

    /// `calibrate --quick` gives a table the simulator loads back, with every cost
    /// it measured positive.
    #[test]
    fn quick_calibration_gives_a_loadable_table() {
        let o = Options::new(20_000, true);
        let c = run(&o, false).unwrap();
        let text = c.to_toml();
        assert!(text.starts_with("# Partita simulator cost table"), "{text}");
        let t = CostTable::from_toml(&text).unwrap();
        assert_eq!(t, c.table);
        for (what, v) in [
            ("request_ns", t.request_ns),
            ("tick_ns", t.tick_ns),
            ("send_ns", t.send_ns),
            ("btree_op_ns", t.btree_op_ns),
            ("persisted_ns", t.persisted_ns),
            ("disk.write_ns", t.disk.write_ns),
            ("peer_message_ns", t.peer_message_ns),
        ] {
            assert!(v > 0, "{what} = {v}\n{text}");
        }
        for k in [
            "insert", "delete", "update", "read", "next", "prev", "query",
        ] {
            assert!(t.btree_kind_ns[k] > 0, "{k}\n{text}");
        }
        assert!(t.btree_query_entry_ps > 0, "{text}");
        for k in ["phase2a", "request", "reply", "record", "decide"] {
            let c = &t.codec[k];
            assert!(c.encode_ns + c.encode_byte_ps > 0, "{k}: {c:?}");
            assert!(c.decode_ns + c.decode_byte_ps > 0, "{k}: {c:?}");
        }
        for k in [
            "phase2a",
            "ringvote",
            "phase2b",
            "forwardbatch",
            "forwardack",
        ] {
            assert!(t.message_kind_ns[k] > 0, "{k}\n{text}");
        }
        for k in ["forwardbatch", "forwardack"] {
            let c = &t.codec[k];
            assert!(c.encode_ns + c.encode_byte_ps > 0, "{k}: {c:?}");
        }
        assert!(t.batcher_request_ns.is_some_and(|n| n > 0), "{text}");
        assert!(c.readable().contains("phase2a"));
    }
}
