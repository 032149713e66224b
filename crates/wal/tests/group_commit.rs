//! GroupCommit: batching, ordering, backpressure, shutdown, truncation.

use crate::common;

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};

use common::*;
use partita_wal::{Completion, Durability, GroupCommit, GroupCommitOptions, Lsn, SubmitError, Wal};

/// Token -> LSN, from a stream of completions; asserts the stream is well formed:
/// batches in LSN order, contiguous, durable_lsn covering the batch.
fn collect(rx: &mpsc::Receiver<Completion>, expect_records: usize) -> Vec<(u64, Lsn)> {
    let mut out = Vec::new();
    let mut next: Option<Lsn> = None;
    while out.len() < expect_records {
        match rx.recv().expect("completion") {
            Completion::Durable {
                tokens,
                first_lsn,
                durable_lsn,
                ..
            } => {
                assert!(!tokens.is_empty());
                if let Some(n) = next {
                    assert_eq!(first_lsn, n, "batches are contiguous and in order");
                }
                assert_eq!(durable_lsn, first_lsn + tokens.len() as u64 - 1);
                next = Some(durable_lsn + 1);
                out.extend(tokens.into_iter().zip(first_lsn..));
            }
            Completion::Failed { error, .. } => panic!("unexpected failure: {error}"),
        }
    }
    out
}

fn token_payload(token: u64) -> Vec<u8> {
    let mut p = token.to_le_bytes().to_vec();
    p.extend(payload(token, (token % 61) as usize));
    p
}

/// Reopen and check that each token's payload sits at the LSN it was reported with.
fn verify_on_disk(dir: &std::path::Path, reported: &[(u64, Lsn)]) {
    let (_wal, rec) = Wal::open(dir, opts(4096, Durability::Fsync)).unwrap();
    assert_eq!(rec.len(), reported.len());
    let by_lsn: HashMap<Lsn, &Vec<u8>> = rec.iter().map(|r| (r.lsn, &r.payload)).collect();
    for &(token, lsn) in reported {
        assert_eq!(
            by_lsn[&lsn],
            &token_payload(token),
            "token {token} at {lsn}"
        );
    }
}

#[test]
fn single_submitter_tokens_reported_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), opts(4096, Durability::Fsync)).unwrap();
    let (tx, rx) = mpsc::channel();
    let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
        tx.send(c).unwrap();
    })
    .unwrap();
    const N: u64 = 500;
    for t in 0..N {
        gc.submit(token_payload(t), t).unwrap();
    }
    let got = collect(&rx, N as usize);
    let tokens: Vec<u64> = got.iter().map(|&(t, _)| t).collect();
    assert_eq!(tokens, (0..N).collect::<Vec<_>>());
    assert_eq!(got[0].1, 1);
    let stats = gc.stats();
    assert_eq!(stats.records, N);
    assert_eq!(stats.durable_lsn, N);
    assert!(stats.syncs <= N && stats.fsyncs >= stats.syncs);
    let bytes: usize = (0..N).map(|t| 8 + token_payload(t).len()).sum();
    assert_eq!(stats.bytes, bytes as u64);
    drop(gc.shutdown());
    verify_on_disk(dir.path(), &got);
}

#[test]
fn concurrent_submitters_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), opts(4096, Durability::Fsync)).unwrap();
    let (tx, rx) = mpsc::channel();
    let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
        tx.send(c).unwrap();
    })
    .unwrap();
    const THREADS: u64 = 4;
    const PER: u64 = 250;
    let start = Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for th in 0..THREADS {
            let (gc, start) = (&gc, &start);
            s.spawn(move || {
                start.wait();
                for k in 0..PER {
                    let t = th * 1_000_000 + k;
                    gc.submit(token_payload(t), t).unwrap();
                }
            });
        }
    });
    let got = collect(&rx, (THREADS * PER) as usize);
    let stats = gc.stats();
    assert_eq!(stats.records, THREADS * PER);
    assert!(
        stats.syncs < stats.records,
        "no group commit happened: {stats:?}"
    );
    // Every token exactly once, and each submitter's tokens in its submission order.
    let mut last_k: HashMap<u64, u64> = HashMap::new();
    for &(t, _) in &got {
        let (th, k) = (t / 1_000_000, t % 1_000_000);
        if let Some(prev) = last_k.insert(th, k) {
            assert_eq!(k, prev + 1, "thread {th} out of order");
        } else {
            assert_eq!(k, 0);
        }
    }
    assert!(last_k.values().all(|&k| k == PER - 1));
    drop(gc.shutdown());
    verify_on_disk(dir.path(), &got);
}

/// Deterministic version: hold the thread in its first completion callback until all
/// submitters are done, so everything else must go into one batch with one fsync.
#[test]
fn records_queued_during_a_sync_share_the_next_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), opts(1 << 20, Durability::Fsync)).unwrap();
    let (tx, rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let mut first = true;
    let gc = GroupCommit::spawn(
        wal,
        GroupCommitOptions {
            queue_records_max: 10_000,
        },
        move |c| {
            if std::mem::take(&mut first) {
                gate_rx.recv().unwrap();
            }
            tx.send(c).unwrap();
        },
    )
    .unwrap();
    const THREADS: u64 = 4;
    const PER: u64 = 200;
    std::thread::scope(|s| {
        for th in 0..THREADS {
            let gc = &gc;
            s.spawn(move || {
                for k in 0..PER {
                    let t = th * 1_000_000 + k;
                    gc.submit(token_payload(t), t).unwrap();
                }
            });
        }
    });
    gate_tx.send(()).unwrap();
    let got = collect(&rx, (THREADS * PER) as usize);
    let stats = gc.stats();
    assert_eq!(stats.records, THREADS * PER);
    // The first batch (whatever had been queued when the thread woke up), then
    // everything else at once.
    assert!(stats.syncs <= 2, "{stats:?}");
    assert!(stats.max_batch >= THREADS * PER / 2, "{stats:?}");
    drop(gc.shutdown());
    verify_on_disk(dir.path(), &got);
}

#[test]
fn full_queue_pushes_back() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), opts(4096, Durability::Memory)).unwrap();
    let (tx, rx) = mpsc::channel();
    let (gate_tx, gate_rx) = mpsc::channel::<()>();
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let mut first = true;
    let gc = GroupCommit::spawn(
        wal,
        GroupCommitOptions {
            queue_records_max: 2,
        },
        move |c| {
            if std::mem::take(&mut first) {
                entered_tx.send(()).unwrap();
                gate_rx.recv().unwrap();
            }
            tx.send(c).unwrap();
        },
    )
    .unwrap();
    gc.submit(token_payload(0), 0).unwrap();
    entered_rx.recv().unwrap(); // the thread is stuck reporting batch {0}
    gc.try_submit(token_payload(1), 1).unwrap();
    gc.try_submit(token_payload(2), 2).unwrap();
    match gc.try_submit(token_payload(3), 3) {
        Err(SubmitError::Full { payload, token }) => {
            assert_eq!((payload, token), (token_payload(3), 3));
        }
        other => panic!("expected Full, got {other:?}"),
    }
    // A blocking submit waits for room instead of failing.
    std::thread::scope(|s| {
        let blocked = s.spawn(|| gc.submit(token_payload(3), 3));
        gate_tx.send(()).unwrap();
        blocked.join().unwrap().unwrap();
    });
    let got = collect(&rx, 4);
    assert_eq!(
        got.iter().map(|&(t, _)| t).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    drop(gc);
}

#[test]
fn shutdown_commits_everything_queued() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), opts(4096, Durability::Fsync)).unwrap();
    let (tx, rx) = mpsc::channel();
    let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
        tx.send(c).unwrap();
    })
    .unwrap();
    for t in 0..300 {
        gc.submit(token_payload(t), t).unwrap();
    }
    let wal = gc.shutdown();
    assert_eq!(wal.durable_lsn(), 300);
    assert!(!wal.is_poisoned());
    drop(wal);
    let got = collect(&rx, 300);
    assert!(rx.recv().is_err(), "thread gone, callback dropped");
    verify_on_disk(dir.path(), &got);
}

#[test]
fn truncation_requests_run_on_the_wal_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), opts(256, Durability::Fsync)).unwrap();
    let (tx, rx) = mpsc::channel();
    let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
        tx.send(c).unwrap();
    })
    .unwrap();
    for t in 0..100 {
        gc.submit(token_payload(t), t).unwrap();
    }
    collect(&rx, 100);
    let before = segments(dir.path()).len();
    assert!(before > 5);
    gc.request_truncate_prefix(50);
    gc.request_truncate_prefix(40); // a smaller bound never undoes a larger one
    let wal = gc.shutdown();
    let after = segments(dir.path());
    assert!(after.len() < before);
    assert_eq!(wal.first_lsn(), first_lsn_of(&after[0]));
    assert!(
        wal.first_lsn() <= 50,
        "nothing at or above the bound deleted"
    );
}

#[test]
fn memory_durability_group_commit_never_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), opts(512, Durability::Memory)).unwrap();
    let (tx, rx) = mpsc::channel();
    let gc = GroupCommit::spawn(wal, GroupCommitOptions::default(), move |c| {
        tx.send(c).unwrap();
    })
    .unwrap();
    let gc = Arc::new(gc);
    for t in 0..200 {
        gc.submit(token_payload(t), t).unwrap();
    }
    collect(&rx, 200);
    assert_eq!(gc.stats().fsyncs, 0);
    let wal = Arc::into_inner(gc).unwrap().shutdown();
    assert_eq!((wal.stats().fsyncs, wal.stats().dir_fsyncs), (0, 0));
}
