//! Checkpoint and state-transfer costs at scale (run in release):
//!
//! ```sh
//! cargo run --release -p partita-runtime --example checkpoint_bench -- [ENTRIES] [--no-transfer]
//! ```
//!
//! 1. Builds a replica whose B+tree holds ENTRIES entries (default 12,000,000, keys
//!    0, 2, 4, …, by `BPlusTree::bulk_load`) and a reply cache of 10,000 clients, then
//!    times `checkpoint()` (serialization, in the event loop in the runtime),
//!    `verify_checkpoint` (the checksum pass), writing the file with fsync
//!    (`CheckpointStore::save`, off the event loop in the runtime), and `restore`.
//! 2. State transfer through the real runtime over loopback: a 5-node cluster (Ring
//!    Paxos, durability fsync) in this process, where replica 4 starts from that
//!    checkpoint (instance 1,000,000), the acceptors' WALs say every instance up to it
//!    was truncated, and replica 5 starts empty. Replica 5 learns that from the
//!    acceptors, fetches replica 4's checkpoint in 1 MiB chunks, restores it and
//!    reports the instance: timed from replica 5's start to its status showing the
//!    instance and replica 4's digest.
//!
//! Everything runs on this machine's 2 cores; the transfer shares them with the four
//! other nodes' event loops.

use partita_btree::BPlusTree;
use partita_btree::Op;
use partita_config::ClusterConfig;
use partita_consensus::{AcceptorRecord, Value, Vid};
use partita_runtime::checkpoint::CheckpointStore;
use partita_runtime::NodeOptions;
use partita_smr::{verify_checkpoint, SequentialReplica};
use partita_types::{Ballot, Command, NodeId};
use partita_wire::{NodeStatus, Wire};
use std::path::Path;
use std::time::{Duration, Instant};

const CLUSTER: u64 = 0x5ca1e;
const INSTANCE: u64 = 1_000_000;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn build_replica(entries: u64) -> SequentialReplica<BPlusTree> {
    let tree = BPlusTree::bulk_load((0..entries).map(|k| (k * 2, k))).expect("sorted keys");
    let mut r = SequentialReplica::new(4, tree);
    r.set_cluster_id(CLUSTER);
    // Instance 1: 10,000 clients' updates fill the reply cache; then empty values up
    // to INSTANCE (cheap), so the checkpoint covers a realistic instance number.
    let cmds: Vec<Command> = (0..10_000u64)
        .map(|c| {
            partita_btree::service::command(
                c + 1,
                1,
                4,
                &Op::Update {
                    key: c * 2,
                    value: c,
                },
            )
        })
        .collect();
    let mut out = Vec::new();
    r.execute(
        1,
        &Value {
            vid: Vid {
                ballot: Ballot::ZERO,
                seq: 1,
            },
            commands: cmds,
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        },
        &mut out,
    );
    let empty = Value {
        vid: Vid {
            ballot: Ballot::ZERO,
            seq: 2,
        },
        commands: Vec::new(),
        parts: Vec::new(),
        time_ms: 0,
        skip: 0,
    };
    for i in 2..=INSTANCE {
        r.execute(i, &empty, &mut out);
    }
    r
}

async fn status(addr: std::net::SocketAddr) -> Option<NodeStatus> {
    use partita_net::FrameReader;
    use partita_wire::to_frame;
    use tokio::io::AsyncWriteExt;
    let fut = async {
        let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let (rd, mut wr) = stream.into_split();
        wr.write_all(&to_frame(&Wire::StatusRequest)).await.ok()?;
        match FrameReader::new(rd).next().await {
            Ok(Wire::Status(s)) => Some(*s),
            _ => None,
        }
    };
    tokio::time::timeout(Duration::from_secs(2), fut)
        .await
        .ok()
        .flatten()
}

fn free_ports(n: usize) -> Vec<u16> {
    let base = partita_net::free_port_block(n as u16).expect("free ports");
    (0..n as u16).map(|i| base + i).collect()
}

fn seed_data_dir(data: &Path, cfg: &ClusterConfig, ckpt: &[u8]) {
    for n in &cfg.nodes {
        let dir = data.join(format!("node-{}", n.id));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("identity"),
            format!("cluster_id = {CLUSTER}\nnode_id = {}\n", n.id),
        )
        .unwrap();
    }
    for a in 1..=3u32 {
        let (mut wal, _) = partita_wal::Wal::open(
            data.join(format!("node-{a}/wal")),
            partita_wal::WalOptions::new(CLUSTER, a),
        )
        .unwrap();
        let rec = AcceptorRecord::Truncated {
            below: INSTANCE + 1,
            promised: Ballot::ZERO,
        };
        wal.append(&partita_types::encode(&rec)).unwrap();
        wal.sync().unwrap();
    }
    CheckpointStore::new(data.join("node-4/checkpoint"), true)
        .save(INSTANCE, ckpt)
        .unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let entries: u64 = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(|a| a.replace('_', "").parse().expect("ENTRIES is a number"))
        .unwrap_or(12_000_000);
    let transfer = !args.iter().any(|a| a == "--no-transfer");

    println!("checkpoint_bench: {entries} entries, 10000 cached replies, release build expected");
    let t = Instant::now();
    let r = build_replica(entries);
    println!("bulk load + reply cache: {:.0} ms", ms(t.elapsed()));

    let t = Instant::now();
    let bytes = r.checkpoint();
    let serialize = t.elapsed();
    let t = Instant::now();
    verify_checkpoint(&bytes).unwrap();
    let verify = t.elapsed();
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::new(dir.path().join("checkpoint"), true);
    let t = Instant::now();
    store.save(INSTANCE, &bytes).unwrap();
    let write = t.elapsed();
    let t = Instant::now();
    let read = std::fs::read(
        dir.path()
            .join("checkpoint")
            .join(partita_runtime::checkpoint::checkpoint_file_name(INSTANCE)),
    )
    .unwrap();
    let read_t = t.elapsed();
    let t = Instant::now();
    let back = SequentialReplica::<BPlusTree>::restore(&read).unwrap();
    let restore = t.elapsed();
    assert_eq!(back.digest(), r.digest());
    drop(back);
    let t = Instant::now();
    let back = SequentialReplica::<BPlusTree>::restore(&read).unwrap();
    let restore_again = t.elapsed();
    println!(
        "checkpoint: {} bytes ({:.1} MiB, {:.2} bytes/entry)",
        bytes.len(),
        bytes.len() as f64 / (1 << 20) as f64,
        bytes.len() as f64 / entries as f64
    );
    println!("  serialize (in the event loop): {:.0} ms", ms(serialize));
    println!("  verify (CRC32C pass):          {:.0} ms", ms(verify));
    println!(
        "  write + fsync + rename (blocking thread): {:.0} ms",
        ms(write)
    );
    println!("  read file:                     {:.0} ms", ms(read_t));
    println!(
        "  restore (verify + bulk load):  {:.0} ms (again, allocator warm: {:.0} ms)",
        ms(restore),
        ms(restore_again)
    );
    drop(back);
    drop(read);
    if !transfer {
        return;
    }

    let ckpt = bytes;
    let digest = r.digest();
    drop(r);
    let data = tempfile::tempdir().unwrap();
    let mut cfg = ClusterConfig::default_local(7100, CLUSTER);
    for (n, port) in cfg.nodes.iter_mut().zip(free_ports(5)) {
        n.addr = format!("127.0.0.1:{port}");
    }
    seed_data_dir(data.path(), &cfg, &ckpt);
    drop(ckpt);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut stops = Vec::new();
        let mut handles = Vec::new();
        let start = |id: NodeId, stops: &mut Vec<_>, handles: &mut Vec<_>| {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let opts = NodeOptions {
                service: partita_smr::service::<partita_btree::BPlusTree>(),
                cluster: cfg.clone(),
                id,
                data_dir: data.path().to_path_buf(),
                unsafe_bugs: Vec::new(),
                io_thread: false,
            };
            handles.push(tokio::spawn(partita_runtime::run_node_until(
                opts,
                async move {
                    let _ = rx.await;
                },
            )));
            stops.push(tx);
        };
        let t = Instant::now();
        for id in 1..=4 {
            start(id, &mut stops, &mut handles);
        }
        loop {
            if let Some(s) = status(cfg.addr(4)).await {
                if s.executed_up_to == Some(INSTANCE) {
                    assert_eq!(s.digest, Some(digest));
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "replica 4 restarted from its checkpoint file (read + restore): {:.0} ms",
            ms(t.elapsed())
        );

        let t = Instant::now();
        start(5, &mut stops, &mut handles);
        let mut transferring_at = None;
        let mut last_progress_at: Option<(Duration, u64)> = None;
        loop {
            if let Some(s) = status(cfg.addr(5)).await {
                let got = s
                    .counters
                    .iter()
                    .find(|(k, _)| k == "state_transfer_bytes_received")
                    .map(|(_, v)| *v);
                if transferring_at.is_none() && got.is_some() {
                    transferring_at = Some(t.elapsed());
                }
                if got.is_some() {
                    last_progress_at = Some((t.elapsed(), got.unwrap_or(0)));
                }
                if s.executed_up_to >= Some(INSTANCE) {
                    assert_eq!(s.digest, Some(digest), "transferred state differs");
                    break;
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(300),
                "state transfer stalled"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let total = t.elapsed();
        println!(
            "state transfer over loopback (runtime, 1 MiB chunks, window 8): replica 5 \
             restored instance {INSTANCE} after {:.0} ms from its start (first chunk \
             requested after ~{:.0} ms: gap detection and the acceptors' Truncated answer)",
            ms(total),
            ms(transferring_at.unwrap_or_default())
        );
        if let Some((at, got)) = last_progress_at {
            println!(
                "  last progress seen at {:.0} ms with {got} bytes received (status is \
                 polled every 10 ms; the rest is restore, checksum and re-stamp in \
                 replica 5's event loop)",
                ms(at)
            );
        }
        for tx in stops {
            let _ = tx.send(());
        }
        for h in handles {
            h.await.unwrap().unwrap();
        }
    });
}
