//! `partita snapshot save|status|restore`: backups of a running cluster's service
//! state, and new clusters seeded from them.
//!
//! A backup is a replica checkpoint (`partita_smr::checkpoint`): one service state at
//! one instance boundary, with its digest, object count and CRC32C, taken from a live
//! replica over a one-shot connection (`Wire::SnapshotRequest`). `restore` writes, for
//! every replica of a new cluster, a checkpoint of the same state at instance 0
//! (`partita_smr::seed_checkpoint`: a new cluster id, no client sessions, no ordering
//! position), and the cluster file; `partita up --data-dir D` then starts it, its
//! replicas restoring the state before they take a command.

use anyhow::{anyhow, bail, Context};
use partita_config::{ClusterConfig, Role};
use partita_smr::{service_id, verify_checkpoint, CheckpointInfo};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long `save` waits for a node's whole checkpoint.
const SAVE_TIMEOUT: Duration = Duration::from_secs(120);

/// The built-in service a checkpoint holds, by the id in its header.
fn service_name(info: &CheckpointInfo) -> Option<&'static str> {
    partita_config::services::BUILTIN
        .into_iter()
        .find(|n| service_id(n) == info.service)
}

fn describe(info: &CheckpointInfo) -> String {
    format!(
        "service {}, instance {}, {} objects, digest {:016x}, {} bytes, crc32c {:08x}",
        service_name(info).unwrap_or("(not built in)"),
        info.instance,
        info.entries,
        info.digest,
        info.bytes,
        info.crc32c
    )
}

/// Save a checkpoint of `node` (or of the first replica that gives one) to `file`.
pub async fn save(cluster: &ClusterConfig, node: Option<u32>, file: &Path) -> anyhow::Result<()> {
    if cluster.partitioning.partitions > 1 {
        bail!(
            "this cluster has {} partitions and a replica holds only its own: a snapshot of a \
             partitioned cluster is not supported yet",
            cluster.partitioning.partitions
        );
    }
    let replicas: Vec<u32> = match node {
        Some(id) => {
            let n = cluster
                .node(id)
                .ok_or_else(|| anyhow!("the cluster file has no node {id}"))?;
            if !n.roles.contains(&Role::Replica) {
                bail!("node {id} is not a replica: it holds no service state to save");
            }
            vec![id]
        }
        None => cluster
            .nodes
            .iter()
            .filter(|n| n.roles.contains(&Role::Replica))
            .map(|n| n.id)
            .collect(),
    };
    let mut errors = Vec::new();
    for id in replicas {
        match partita_client::fetch_snapshot(cluster, id, SAVE_TIMEOUT).await {
            Ok((_, bytes)) => {
                let info = verify_checkpoint(&bytes).map_err(|e| {
                    anyhow!("node {id} sent a checkpoint that fails its check: {e}")
                })?;
                write_atomically(file, &bytes)?;
                println!(
                    "saved {} from node {id}: {}",
                    file.display(),
                    describe(&info)
                );
                return Ok(());
            }
            Err(e) => errors.push(e),
        }
    }
    bail!("no replica gave a checkpoint: {}", errors.join("; "))
}

/// `bytes` into `file`: a temporary file beside it, fsynced, renamed over it, and the
/// directory fsynced, so `file` is the whole backup or untouched.
fn write_atomically(file: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = dir.join(format!(
        ".{}.partial",
        file.file_name()
            .ok_or_else(|| anyhow!("{} names no file", file.display()))?
            .to_string_lossy()
    ));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, file).with_context(|| format!("renaming to {}", file.display()))?;
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    Ok(())
}

/// Read and verify a backup: a file `partita snapshot save` wrote, or one `etcdctl
/// snapshot save` wrote from a Partita gateway (the same checkpoint in etcd's snapshot
/// file layout, whose SHA-256 is checked too).
fn load(file: &Path) -> anyhow::Result<(Vec<u8>, CheckpointInfo)> {
    let mut bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    // etcd's layout begins with the checkpoint too: tell them apart by the trailer.
    if verify_checkpoint(&bytes).is_err() {
        if let Ok(inner) = partita_etcd::convert::snapshot_in_file(&bytes) {
            bytes = inner.to_vec();
        }
    }
    let info = verify_checkpoint(&bytes)
        .map_err(|e| anyhow!("{} is not a usable snapshot: {e}", file.display()))?;
    Ok((bytes, info))
}

/// Print what a backup holds, after checking it.
pub fn status(file: &Path, json: bool) -> anyhow::Result<()> {
    let (_, info) = load(file)?;
    if json {
        let v = serde_json::json!({
            "service": service_name(&info),
            "cluster_id": info.cluster_id,
            "node": info.node_id,
            "instance": info.instance,
            "objects": info.entries,
            "digest": format!("{:016x}", info.digest),
            "bytes": info.bytes,
            "crc32c": format!("{:08x}", info.crc32c),
            "clients": info.clients,
        });
        println!("{v}");
    } else {
        println!(
            "{}: {} (cluster {}, node {})",
            file.display(),
            describe(&info),
            info.cluster_id,
            info.node_id
        );
    }
    Ok(())
}

/// Seed a new cluster in `data_dir` from the backup `file`: its cluster file (from
/// `template`, or the default local layout for the backup's service, with a new
/// cluster id either way) and every replica's checkpoint. Returns the cluster file.
pub fn restore(
    file: &Path,
    data_dir: &Path,
    template: Option<ClusterConfig>,
    default: impl FnOnce(&str, u64) -> ClusterConfig,
) -> anyhow::Result<PathBuf> {
    let (bytes, info) = load(file)?;
    let cluster_file = data_dir.join("cluster.toml");
    if cluster_file.exists() {
        bail!(
            "{} already holds a cluster ({}): restore into a new directory",
            data_dir.display(),
            cluster_file.display()
        );
    }
    let id = rand::random::<u64>() >> 1;
    let cluster = match template {
        Some(mut c) => {
            if service_id(&c.cluster.service) != info.service {
                bail!(
                    "the snapshot holds {} and the cluster file's service is {}",
                    service_name(&info).unwrap_or("another service"),
                    c.cluster.service
                );
            }
            c.cluster.id = id;
            c
        }
        None => {
            let name = service_name(&info)
                .filter(|n| matches!(*n, "btree" | "kv"))
                .ok_or_else(|| {
                    anyhow!(
                        "the snapshot's service ({}) has no default layout: pass the cluster \
                         file to restore into with --cluster",
                        service_name(&info).unwrap_or("not built in")
                    )
                })?;
            default(name, id)
        }
    };
    if cluster.partitioning.partitions > 1 {
        bail!("a snapshot holds one partition's state: restore it into a cluster of one partition");
    }
    if cluster.cluster.mode != partita_config::Mode::Smr {
        bail!("the cluster file is not a replicated (smr) cluster");
    }
    let durable = cluster.cluster.durability == partita_config::Durability::Fsync;
    let mut replicas = 0;
    for n in cluster
        .nodes
        .iter()
        .filter(|n| n.roles.contains(&Role::Replica))
    {
        let seeded = partita_smr::seed_checkpoint(&bytes, id, n.id)?;
        partita_runtime::seed_replica_dir(data_dir, id, n.id, &seeded, durable)?;
        replicas += 1;
    }
    if replicas == 0 {
        bail!("the cluster file has no replica to restore into");
    }
    std::fs::write(&cluster_file, cluster.to_toml())
        .with_context(|| format!("writing {}", cluster_file.display()))?;
    println!(
        "restored {} into {}: {} replicas of a new cluster {id} hold its state ({}); start it \
         with `partita up --data-dir {}`",
        file.display(),
        data_dir.display(),
        replicas,
        describe(&info),
        data_dir.display()
    );
    Ok(cluster_file)
}
