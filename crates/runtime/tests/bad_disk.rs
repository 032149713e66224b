//! Bad disks at start: a WAL segment with a foreign or damaged header, or a checkpoint
//! of another cluster or node, is refused with a message naming the file, and nothing
//! in the data directory changes. A damaged newest checkpoint is skipped for the valid
//! one before it (and left in place for inspection).

use crate::common;

use common::{local_config, TestCluster};
use partita_btree::BPlusTree;
use partita_btree::Op;
use partita_config::ClusterConfig;
use partita_consensus::{Value, Vid};
use partita_runtime::checkpoint::checkpoint_file_name;
use partita_runtime::NodeOptions;
use partita_smr::SequentialReplica;
use partita_types::{Ballot, NodeId};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const CLUSTER: u64 = 0xBAD;

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn identity(data: &Path, node: NodeId) {
    let dir = data.join(format!("node-{node}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("identity"),
        format!("cluster_id = {CLUSTER}\nnode_id = {node}\n"),
    )
    .unwrap();
}

/// Start node `id` and expect it to refuse: returns the error message.
async fn refused(cfg: &ClusterConfig, data: &Path, id: NodeId) -> String {
    let opts = NodeOptions {
        service: partita_smr::service::<partita_btree::BPlusTree>(),
        cluster: cfg.clone(),
        id,
        data_dir: data.to_path_buf(),
        unsafe_bugs: Vec::new(),
        io_thread: false,
    };
    let run = partita_runtime::run_node_until(opts, std::future::pending());
    match tokio::time::timeout(Duration::from_secs(5), run).await {
        Ok(Err(e)) => format!("{e:#}"),
        Ok(Ok(())) => panic!("node {id} stopped without an error"),
        Err(_) => panic!("node {id} started on a bad data directory"),
    }
}

fn wal_with(data: &Path, node: NodeId, cluster: u64) -> PathBuf {
    let dir = data.join(format!("node-{node}/wal"));
    let (mut wal, _) =
        partita_wal::Wal::open(&dir, partita_wal::WalOptions::new(cluster, node)).unwrap();
    wal.append(b"a record").unwrap();
    wal.sync().unwrap();
    drop(wal);
    dir.join(partita_wal::segment_file_name(1))
}

/// A checkpoint of `instance` written by replica `node` of `cluster`.
fn checkpoint(cluster: u64, node: NodeId, instance: u64) -> Vec<u8> {
    let mut r = SequentialReplica::new(node, BPlusTree::new());
    r.set_cluster_id(cluster);
    let mut replies = Vec::new();
    for i in 1..=instance {
        let value = Value {
            vid: Vid {
                ballot: Ballot::ZERO,
                seq: i,
            },
            commands: vec![partita_btree::service::command(
                1,
                i,
                node,
                &Op::Insert { key: i, value: i },
            )],
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        };
        r.execute(i, &value, &mut replies);
    }
    r.checkpoint()
}

fn put_checkpoint(data: &Path, node: NodeId, instance: u64, bytes: &[u8]) -> PathBuf {
    let dir = data.join(format!("node-{node}/checkpoint"));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(checkpoint_file_name(instance));
    std::fs::write(&p, bytes).unwrap();
    p
}

#[tokio::test]
async fn foreign_and_damaged_wal_headers_are_refused_untouched() {
    let cfg = local_config(CLUSTER);
    // Another cluster's WAL in node 1's directory.
    let data = tempfile::tempdir().unwrap();
    identity(data.path(), 1);
    let seg = wal_with(data.path(), 1, CLUSTER + 1);
    let before = snapshot(data.path());
    let e = refused(&cfg, data.path(), 1).await;
    assert!(e.contains(&seg.display().to_string()), "{e}");
    assert!(e.contains("belongs to cluster"), "{e}");
    assert_eq!(snapshot(data.path()), before, "the data directory changed");

    // Another node's WAL.
    let data = tempfile::tempdir().unwrap();
    identity(data.path(), 2);
    let seg = wal_with(data.path(), 2, CLUSTER);
    std::fs::rename(data.path().join("node-2"), data.path().join("node-1")).unwrap();
    identity(data.path(), 1);
    let before = snapshot(data.path());
    let e = refused(&cfg, data.path(), 1).await;
    assert!(e.contains("node 2"), "{e}");
    assert!(
        e.contains(&seg.file_name().unwrap().to_string_lossy().to_string()),
        "{e}"
    );
    assert_eq!(snapshot(data.path()), before);

    // A damaged header (one flipped bit in the magic).
    let data = tempfile::tempdir().unwrap();
    identity(data.path(), 1);
    let seg = wal_with(data.path(), 1, CLUSTER);
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[3] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();
    let before = snapshot(data.path());
    let e = refused(&cfg, data.path(), 1).await;
    assert!(e.contains(&seg.display().to_string()), "{e}");
    assert!(e.contains("bad header"), "{e}");
    assert_eq!(snapshot(data.path()), before);
}

#[tokio::test]
async fn checkpoints_of_another_node_or_cluster_are_refused_untouched() {
    let cfg = local_config(CLUSTER);
    for (cluster, node, what) in [(CLUSTER, 5, "node 5"), (CLUSTER + 1, 4, "cluster 2990")] {
        let data = tempfile::tempdir().unwrap();
        identity(data.path(), 4);
        // A valid checkpoint of our own, and a newer foreign one: the foreign one is
        // refused wherever it is, not skipped.
        put_checkpoint(data.path(), 4, 3, &checkpoint(CLUSTER, 4, 3));
        let p = put_checkpoint(data.path(), 4, 5, &checkpoint(cluster, node, 5));
        std::fs::write(p.with_extension("bin.tmp"), b"half-written").unwrap();
        let before = snapshot(data.path());
        let e = refused(&cfg, data.path(), 4).await;
        assert!(e.contains(&p.display().to_string()), "{e}");
        assert!(e.contains(what), "{e}");
        assert_eq!(snapshot(data.path()), before, "the data directory changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_newest_checkpoint_falls_back_to_the_previous_one() {
    let data = tempfile::tempdir().unwrap();
    let cfg = local_config(CLUSTER);
    identity(data.path(), 4);
    put_checkpoint(data.path(), 4, 10, &checkpoint(CLUSTER, 4, 10));
    let mut newest = checkpoint(CLUSTER, 4, 20);
    let mid = newest.len() / 2;
    newest[mid] ^= 0x40;
    let damaged = put_checkpoint(data.path(), 4, 20, &newest);
    let mut c = TestCluster::new(cfg, data.path());
    c.start(4);
    let s = c.wait_for(4, 10, "start", |_| true).await;
    assert_eq!(s.executed_up_to, Some(10), "restored the older checkpoint");
    assert_eq!(s.entries, Some(10));
    assert_eq!(std::fs::read(&damaged).unwrap(), newest, "evidence kept");
    c.stop(4).await;
}

/// A bit flipped inside a WAL record, in an earlier segment or in the last one with
/// valid records after it, is damage a crash cannot leave (not a torn tail): the node
/// refuses to start, names the segment and the offset, and changes nothing.
#[tokio::test]
async fn a_flipped_bit_in_a_wal_record_is_refused_untouched() {
    let cfg = local_config(CLUSTER);
    for (segment, what) in [
        (0usize, "an earlier segment"),
        (usize::MAX, "the last segment"),
    ] {
        let data = tempfile::tempdir().unwrap();
        identity(data.path(), 1);
        let dir = data.path().join("node-1/wal");
        let opts = partita_wal::WalOptions {
            segment_bytes_max: 256,
            ..partita_wal::WalOptions::new(CLUSTER, 1)
        };
        let (mut wal, _) = partita_wal::Wal::open(&dir, opts).unwrap();
        for i in 0..20u8 {
            wal.append(&[i; 40]).unwrap();
        }
        wal.sync().unwrap();
        drop(wal);
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        segments.sort();
        assert!(segments.len() >= 3, "{segments:?}");
        // The last segment: flip a bit in its first record, which has valid ones after.
        let seg = segments[segment.min(segments.len() - 1)].clone();
        let mut bytes = std::fs::read(&seg).unwrap();
        let at = partita_wal::SEGMENT_HEADER_LEN + partita_wal::RECORD_HEADER_LEN + 5;
        assert!(
            bytes.len() > at + 60,
            "{what}: a record follows the flipped one ({} bytes, {segments:?})",
            bytes.len()
        );
        bytes[at] ^= 0x10;
        std::fs::write(&seg, &bytes).unwrap();
        let before = snapshot(data.path());
        let e = refused(&cfg, data.path(), 1).await;
        assert!(e.contains("WAL corrupt"), "{what}: {e}");
        assert!(
            e.contains(&seg.file_name().unwrap().to_string_lossy().to_string()),
            "{what}: {e}"
        );
        assert_eq!(
            snapshot(data.path()),
            before,
            "{what}: the data directory changed"
        );
    }
}
