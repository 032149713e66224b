//! Replica checkpoints on disk: `DIR/node-N/checkpoint/checkpoint-{instance:020}.bin`.
//!
//! Each file is one checkpoint as the node core produced it (the format of
//! `partita_smr::checkpoint`: magic, version, cluster and node id, instance, contents,
//! CRC32C). A checkpoint is written atomically: to `….bin.tmp`, fsynced, renamed,
//! directory fsynced; so a file with the final name is always complete, and a crash
//! leaves at most a stale `.tmp`, removed at the next start. The newest
//! [`CHECKPOINTS_KEPT`] are kept: should the newest be damaged, the one before it
//! still lets the replica restart without a state transfer.
//!
//! At start ([`CheckpointStore::load_newest`]) every checkpoint's identity is checked
//! first, and one of another cluster or node is refused with an error naming the file,
//! before anything in the directory is touched (a data directory in the wrong place
//! must not be adopted). Then the newest checkpoint that verifies is used; damaged ones
//! are reported and skipped, never deleted at start.

use anyhow::{bail, Context};
use partita_smr::{checkpoint_identity, verify_checkpoint, CHECKPOINT_IDENTITY_BYTES};
use partita_types::{Instance, NodeId};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use tracing::{info, warn};

/// Checkpoints kept on disk after each write.
pub const CHECKPOINTS_KEPT: usize = 2;

/// File name of the checkpoint of `instance`.
pub fn checkpoint_file_name(instance: Instance) -> String {
    format!("checkpoint-{instance:020}.bin")
}

fn parse_file_name(name: &str) -> Option<Instance> {
    let digits = name.strip_prefix("checkpoint-")?.strip_suffix(".bin")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A checkpoint read back at start.
#[derive(Debug)]
pub struct Loaded {
    pub path: PathBuf,
    pub instance: Instance,
    pub bytes: Vec<u8>,
}

/// Checkpoint files by instance (ascending), and stale temp files.
type Listing = (Vec<(Instance, PathBuf)>, Vec<PathBuf>);

/// The checkpoint directory of one replica.
#[derive(Clone, Debug)]
pub struct CheckpointStore {
    dir: PathBuf,
    fsync: bool,
}

impl CheckpointStore {
    /// `fsync`: whether writes are made durable (off with `durability = "memory"`).
    pub fn new(dir: impl Into<PathBuf>, fsync: bool) -> CheckpointStore {
        CheckpointStore {
            dir: dir.into(),
            fsync,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Checkpoint files by instance, ascending, and stale temp files. A file that
    /// looks like a checkpoint but whose name does not parse is an error.
    fn list(&self) -> anyhow::Result<Listing> {
        let mut found = Vec::new();
        let mut tmps = Vec::new();
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((found, tmps)),
            Err(e) => return Err(e).with_context(|| format!("listing {}", self.dir.display())),
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("listing {}", self.dir.display()))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if let Some(instance) = parse_file_name(&name) {
                found.push((instance, path));
            } else if name.starts_with("checkpoint-") && name.ends_with(".bin.tmp") {
                tmps.push(path);
            } else if name.starts_with("checkpoint-") {
                bail!(
                    "{}: looks like a checkpoint but its name is not \
                     checkpoint-<20-digit instance>.bin; refusing to start (nothing was changed)",
                    path.display()
                );
            }
        }
        found.sort();
        Ok((found, tmps))
    }

    /// The newest valid checkpoint of node `node_id` of cluster `cluster_id`, if any.
    /// Refuses (naming the file, changing nothing) if any checkpoint belongs to another
    /// cluster or node; skips damaged ones with a warning.
    pub fn load_newest(&self, cluster_id: u64, node_id: NodeId) -> anyhow::Result<Option<Loaded>> {
        let (found, tmps) = self.list()?;
        // Identity of every file first: a foreign one anywhere means the directory is
        // not ours, whatever the newest one says.
        let mut candidates = Vec::new();
        for (instance, path) in found.iter().rev() {
            let mut head = Vec::with_capacity(CHECKPOINT_IDENTITY_BYTES);
            File::open(path)
                .and_then(|f| {
                    f.take(CHECKPOINT_IDENTITY_BYTES as u64)
                        .read_to_end(&mut head)
                })
                .with_context(|| format!("reading {}", path.display()))?;
            match checkpoint_identity(&head) {
                Ok((c, n, _)) if c != cluster_id || n != node_id => bail!(
                    "checkpoint {} belongs to cluster {c} node {n}, but this node is cluster \
                     {cluster_id} node {node_id}; refusing to start (nothing was changed; is \
                     the data directory the right one?)",
                    path.display()
                ),
                Ok((_, _, i)) if i != *instance => {
                    warn!(path = %path.display(), header_instance = i, "checkpoint file name and header disagree; skipping it");
                }
                Ok(_) => candidates.push((*instance, path.clone())),
                Err(e) => {
                    warn!(path = %path.display(), "damaged checkpoint header ({e}); skipping it")
                }
            }
        }
        let mut chosen = None;
        for (instance, path) in candidates {
            let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            match verify_checkpoint(&bytes) {
                Ok(_) => {
                    chosen = Some(Loaded {
                        path,
                        instance,
                        bytes,
                    });
                    break;
                }
                Err(e) => {
                    warn!(path = %path.display(), "damaged checkpoint ({e}); trying an older one")
                }
            }
        }
        if chosen.is_none() && !found.is_empty() {
            warn!(dir = %self.dir.display(), "no valid checkpoint among {} files; starting empty", found.len());
        }
        // Only now, with the directory known to be ours: clear what a crash mid-write
        // left behind.
        for tmp in tmps {
            warn!(path = %tmp.display(), "removing an unfinished checkpoint file");
            fs::remove_file(&tmp).with_context(|| format!("removing {}", tmp.display()))?;
        }
        if let Some(l) = &chosen {
            info!(path = %l.path.display(), instance = l.instance, bytes = l.bytes.len(), "checkpoint found");
        }
        Ok(chosen)
    }

    /// Write checkpoint `instance` atomically and durably, then delete all but the
    /// newest [`CHECKPOINTS_KEPT`]. Blocking: run it off the event loop.
    pub fn save(&self, instance: Instance, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        let result = self.save_inner(instance, bytes);
        if let Err(e) = &result {
            if is_no_space(e) {
                // A full disk: leave no half-written file to take the space.
                let tmp = self
                    .dir
                    .join(format!("{}.tmp", checkpoint_file_name(instance)));
                let _ = fs::remove_file(tmp);
            }
        }
        result
    }

    fn save_inner(&self, instance: Instance, bytes: &[u8]) -> anyhow::Result<PathBuf> {
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let name = checkpoint_file_name(instance);
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("writing {}", tmp.display()))?;
        partita_wal::failpoint::hit("checkpoint-write");
        if self.fsync {
            f.sync_all()
                .with_context(|| format!("fsync of {}", tmp.display()))?;
        }
        drop(f);
        partita_wal::failpoint::hit("checkpoint-rename");
        fs::rename(&tmp, &path).with_context(|| format!("renaming {}", tmp.display()))?;
        self.sync_dir()?;
        let (found, _) = self.list()?;
        let excess = found.len().saturating_sub(CHECKPOINTS_KEPT);
        for (old, p) in found.into_iter().take(excess) {
            if old >= instance {
                continue;
            }
            partita_wal::failpoint::hit("checkpoint-remove");
            fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
        }
        if excess > 0 {
            self.sync_dir()?;
        }
        Ok(path)
    }

    fn sync_dir(&self) -> anyhow::Result<()> {
        if self.fsync {
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("fsync of directory {}", self.dir.display()))?;
        }
        Ok(())
    }
}

/// Whether a failed [`CheckpointStore::save`] failed for lack of space (or quota), the
/// one checkpoint failure a node survives. A failed fsync is never this: fsync
/// errors stay fatal whatever their errno.
pub fn is_no_space(e: &anyhow::Error) -> bool {
    let fsync = e.chain().any(|c| c.to_string().starts_with("fsync"));
    !fsync
        && e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                )
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(
            checkpoint_file_name(7),
            "checkpoint-00000000000000000007.bin"
        );
        assert_eq!(parse_file_name(&checkpoint_file_name(7)), Some(7));
        assert_eq!(parse_file_name("checkpoint-7.bin"), None);
        assert_eq!(parse_file_name("checkpoint-0000000000000000000x.bin"), None);
    }

    #[test]
    fn only_a_full_disk_is_survivable() {
        // ENOSPC (28) and EIO (5) on Linux.
        let nospc = || std::io::Error::from_raw_os_error(28);
        let e = anyhow::Error::from(nospc()).context("writing checkpoint-1.tmp");
        assert!(is_no_space(&e));
        let e = anyhow::Error::from(nospc()).context("fsync of checkpoint-1.tmp");
        assert!(
            !is_no_space(&e),
            "a failed fsync stays fatal whatever its errno"
        );
        let e = anyhow::Error::from(std::io::Error::from_raw_os_error(5))
            .context("writing checkpoint-1.tmp");
        assert!(!is_no_space(&e));
    }
}
