//! How many records per second can the WAL make durable on this disk?
//!
//! ```text
//! cargo run --release -p partita-wal --example fsync_bench -- [DIR] [SECONDS_PER_RUN]
//! ```
//!
//! DIR defaults to `./target/wal-fsync-bench` (so it measures the disk the workspace
//! is on; /tmp may be tmpfs). It is deleted before and after. Three runs:
//!
//! 1. no group commit: append + sync per record (records/s == fsyncs/s);
//! 2. group commit, closed loop: N clients, each with one record in flight (waits for
//!    its completion before submitting the next), like acceptors serving N proposers'
//!    requests;
//! 3. group commit, open loop: 4 threads submitting as fast as the bounded queue lets
//!    them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use partita_wal::{Completion, Durability, GroupCommit, GroupCommitOptions, Wal, WalOptions};

const RECORD_BYTES: usize = 128;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(
        args.next()
            .unwrap_or_else(|| "target/wal-fsync-bench".into()),
    );
    let secs: f64 = args.next().map_or(2.0, |s| s.parse().expect("seconds"));
    let run_for = Duration::from_secs_f64(secs);
    println!(
        "dir {}, {RECORD_BYTES}-byte records, {secs}s per run",
        dir.display()
    );

    let opts = WalOptions {
        durability: Durability::Fsync,
        ..WalOptions::new(0xBE_4C, 1)
    };

    // 1. One fsync per record.
    let _ = std::fs::remove_dir_all(&dir);
    {
        let (mut wal, _) = Wal::open(&dir, opts.clone()).unwrap();
        let payload = vec![0xAB; RECORD_BYTES];
        let fsyncs_before = wal.stats().fsyncs;
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < run_for {
            wal.append(&payload).unwrap();
            wal.sync().unwrap();
            n += 1;
        }
        let t = start.elapsed().as_secs_f64();
        let fsyncs = wal.stats().fsyncs - fsyncs_before;
        println!(
            "sync per record          : {:>9.0} records/s {:>8.0} fsyncs/s  ({:.3} ms per fsync)",
            n as f64 / t,
            fsyncs as f64 / t,
            t * 1e3 / fsyncs as f64
        );
    }

    // 2. Closed loop with various numbers of clients.
    for clients in [1usize, 8, 64] {
        let _ = std::fs::remove_dir_all(&dir);
        let (wal, _) = Wal::open(&dir, opts.clone()).unwrap();
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..clients).map(|_| mpsc::channel::<()>()).unzip();
        let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| match c {
            Completion::Durable { tokens, .. } => {
                for t in tokens {
                    let _ = txs[(t >> 32) as usize].send(());
                }
            }
            Completion::Failed { error, .. } => panic!("{error}"),
        })
        .unwrap();
        let stop = AtomicBool::new(false);
        let start = Instant::now();
        std::thread::scope(|s| {
            for (c, rx) in rxs.into_iter().enumerate() {
                let (gc, stop) = (&gc, &stop);
                s.spawn(move || {
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        gc.submit(vec![c as u8; RECORD_BYTES], ((c as u64) << 32) | seq)
                            .unwrap();
                        rx.recv().unwrap();
                        seq += 1;
                    }
                });
            }
            std::thread::sleep(run_for);
            stop.store(true, Ordering::Relaxed);
        });
        report(&format!("group commit, {clients:>2} clients"), &gc, start);
        drop(gc.shutdown());
    }

    // 3. Open loop.
    {
        let _ = std::fs::remove_dir_all(&dir);
        let (wal, _) = Wal::open(&dir, opts.clone()).unwrap();
        let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), |c| {
            if let Completion::Failed { error, .. } = c {
                panic!("{error}");
            }
        })
        .unwrap();
        let stop = AtomicBool::new(false);
        let start = Instant::now();
        std::thread::scope(|s| {
            for th in 0..4u64 {
                let (gc, stop) = (&gc, &stop);
                s.spawn(move || {
                    let mut seq = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        gc.submit(vec![th as u8; RECORD_BYTES], (th << 32) | seq)
                            .unwrap();
                        seq += 1;
                    }
                });
            }
            std::thread::sleep(run_for);
            stop.store(true, Ordering::Relaxed);
        });
        // Shut down first so the records still queued at the stop are counted too.
        let max_batch = gc.stats().max_batch;
        let wal = gc.shutdown();
        let ws = wal.stats();
        let t = start.elapsed().as_secs_f64();
        let (records, syncs, fsyncs, bytes) = (ws.records, ws.syncs, ws.fsyncs, ws.bytes);
        print_line(
            "group commit, open loop",
            t,
            records,
            syncs,
            fsyncs,
            bytes,
            max_batch,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn report(label: &str, gc: &GroupCommit, start: Instant) {
    let t = start.elapsed().as_secs_f64();
    let s = gc.stats();
    print_line(label, t, s.records, s.syncs, s.fsyncs, s.bytes, s.max_batch);
}

fn print_line(
    label: &str,
    secs: f64,
    records: u64,
    syncs: u64,
    fsyncs: u64,
    bytes: u64,
    max_batch: u64,
) {
    println!(
        "{label:<25}: {:>9.0} records/s {:>8.0} fsyncs/s  (avg batch {:.1}, max {max_batch}, {:.1} MB/s)",
        records as f64 / secs,
        fsyncs as f64 / secs,
        records as f64 / syncs.max(1) as f64,
        bytes as f64 / secs / 1e6
    );
}
