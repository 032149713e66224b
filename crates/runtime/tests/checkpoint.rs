//! Checkpoints, log truncation and state transfer through the real runtime (TCP on
//! 127.0.0.1, WAL and checkpoint files in a temporary directory), with nodes stopped
//! and restarted in-process on their data directories:
//!
//! - replicas write checkpoints (at most two kept) and acceptors truncate their WALs:
//!   the oldest segments are deleted;
//! - an acceptor restarted after truncation still has its promise and the values
//!   above the truncation point;
//! - a replica restarted on its directory restores its newest checkpoint and learns
//!   only the suffix;
//! - a replica whose data directory was lost catches up by state transfer from the
//!   other replica, and answers a resubmitted command from the transferred cache.

use crate::common;

use common::{counter, local_config, TestClient, TestCluster};
use partita_btree::{Op, OpResult};
use partita_config::Durability;
use std::path::Path;

const INTERVAL: u64 = 50;

/// "round.node" as shown by status.
fn ballot(s: &Option<String>) -> (u64, u32) {
    let s = s.as_deref().expect("an acceptor shows its promise");
    let (r, n) = s.split_once('.').unwrap();
    (r.parse().unwrap(), n.parse().unwrap())
}

fn wal_segments(dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            name.strip_prefix("wal-")?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect();
    v.sort();
    v
}

fn checkpoint_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("checkpoint"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `n` inserts of fresh keys by `client`, one at a time (one instance each).
async fn inserts(client: &mut TestClient, keys: std::ops::Range<u64>) {
    for key in keys {
        let r = client
            .execute(Op::Insert {
                key,
                value: key * 3,
            })
            .await;
        assert_eq!(
            TestClient::result(&r),
            OpResult::Inserted(true),
            "key {key}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_truncation_restarts_and_state_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = local_config(0x7e57);
    cfg.cluster.durability = Durability::Memory;
    cfg.storage.checkpoint_instances = INTERVAL;
    cfg.storage.wal_segment_bytes_max = 4096;
    let mut c = TestCluster::new(cfg.clone(), dir.path());
    c.start_all();
    for id in 1..=5 {
        c.wait_for(id, 10, "start", |_| true).await;
    }

    // Load: a few hundred instances, checkpoints every 50.
    let mut a = TestClient::connect(&cfg, 4, 1001).await;
    inserts(&mut a, 0..400).await;
    let s4 = c
        .wait_for(4, 10, "checkpoint 300", |s| {
            counter(s, "checkpoint_instance") >= 300
        })
        .await;
    c.wait_for(5, 10, "checkpoint 300", |s| {
        counter(s, "checkpoint_instance") >= 300
    })
    .await;
    assert!(counter(&s4, "checkpoints_saved") >= 6);
    for id in 1..=3 {
        let s = c
            .wait_for(id, 10, "truncation", |s| {
                counter(s, "truncated_below") > 250
            })
            .await;
        assert!(counter(&s, "wal_truncations_requested") >= 1);
    }
    // The WALs lost their oldest segments: most of the log is gone.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    for id in 1..=3 {
        let segs = wal_segments(&c.node_dir(id));
        let (first, last) = (segs[0], *segs.last().unwrap());
        assert!(
            first > last / 2,
            "node {id}: WAL still starts at LSN {first} of {last} ({} segments)",
            segs.len()
        );
    }
    for id in [4, 5] {
        let files = checkpoint_files(&c.node_dir(id));
        assert!((1..=2).contains(&files.len()), "node {id} keeps {files:?}");
    }

    // The leader's acceptor restarted after truncation: its promise (at least: a new
    // leader may have raised it since), its truncation point and the values above it
    // survive. Another node takes over meanwhile; the new leader starts with no
    // decided values in memory, so below the truncation point only checkpoints help.
    let before = c.status(1).await.unwrap();
    c.stop(1).await;
    c.start(1);
    let after = c.wait_for(1, 10, "restart", |_| true).await;
    assert!(
        ballot(&after.promised) >= ballot(&before.promised),
        "promise {:?} lost, now {:?}",
        before.promised,
        after.promised
    );
    assert_eq!(
        counter(&after, "truncated_below"),
        counter(&before, "truncated_below")
    );
    assert!(after.accepted_max_instance >= before.accepted_max_instance);
    assert!(after.accepted >= before.accepted);
    inserts(&mut a, 400..420).await;
    assert!(
        !c.status(1).await.unwrap().coordinator,
        "the restarted leader took over again"
    );

    // A replica restarted on its directory restores its checkpoint, learns the rest.
    let ckpt5 = counter(&c.status(5).await.unwrap(), "checkpoint_instance");
    c.stop(5).await;
    inserts(&mut a, 420..450).await;
    c.start(5);
    let s5 = c.wait_for(5, 10, "restart", |_| true).await;
    assert!(
        s5.executed_up_to.unwrap() >= ckpt5,
        "replica 5 restarted at {:?}, its checkpoint covers {ckpt5}",
        s5.executed_up_to
    );
    let target = c.status(4).await.unwrap().executed_up_to.unwrap();
    let s5 = c
        .wait_for(5, 10, "catch up", |s| s.executed_up_to >= Some(target))
        .await;
    assert_eq!(counter(&s5, "state_transfers_started"), 0);
    let s4 = c.status(4).await.unwrap();
    if s4.executed_up_to == s5.executed_up_to {
        assert_eq!(s4.digest, s5.digest);
    }

    // Replica 5 loses its data directory. The last command of client 1002 is executed
    // while it is away.
    c.stop(5).await;
    std::fs::remove_dir_all(c.node_dir(5)).unwrap();
    let mut b = TestClient::connect(&cfg, 4, 1002).await;
    inserts(&mut a, 450..500).await;
    let first = b
        .execute(Op::Insert {
            key: 10_000,
            value: 1,
        })
        .await;
    c.start(5);
    let target = c.status(4).await.unwrap().executed_up_to.unwrap();
    let s5 = c
        .wait_for(5, 60, "state transfer", |s| {
            s.executed_up_to >= Some(target) && counter(s, "state_transfers_completed") == 1
        })
        .await;
    let s4 = c.status(4).await.unwrap();
    assert_eq!(s5.executed_up_to, s4.executed_up_to);
    assert_eq!(
        s5.digest, s4.digest,
        "replicas diverge after state transfer"
    );
    // The node writes the transferred checkpoint in the background, after it counts the
    // transfer completed (an fsync this VM sometimes stalls for seconds): wait for the
    // write to be reported before looking for the file.
    c.wait_for(5, 60, "the transferred checkpoint saved", |s| {
        counter(s, "checkpoints_saved") >= 1
    })
    .await;
    assert!(
        !checkpoint_files(&c.node_dir(5)).is_empty(),
        "transferred checkpoint not saved"
    );

    // Client 1002 never saw its reply and resubmits to replica 5: the answer comes from
    // the reply cache that travelled in the checkpoint, not from a second execution.
    let mut b5 = TestClient::connect(&cfg, 5, 1002).await;
    b5.session = b.session;
    let again = b5
        .submit(b5.command(
            1,
            &Op::Insert {
                key: 10_000,
                value: 1,
            },
        ))
        .await;
    assert_eq!(again, first);
    let target = c.status(4).await.unwrap().executed_up_to.unwrap();
    let s5 = c
        .wait_for(5, 10, "final", |s| s.executed_up_to >= Some(target))
        .await;
    assert_eq!(s5.digest, c.status(4).await.unwrap().digest);
    c.stop_all().await;
}
