//! Crash points in the real file code, for tests: `partita node --failpoint NAME=N`
//! makes the process abort (no destructors, no flush: as a crash leaves it) the Nth time
//! it reaches point NAME. Disarmed, a point costs one relaxed atomic load.
//!
//! Points, in the order a write goes through them: `wal-preallocate` (the active
//! segment extended with zeros ahead of its records, before the records are written),
//! `wal-append` (records written to the segment, before any fsync), `wal-fsync` (before the segment's fsync), `wal-roll`
//! (the full segment synced, before the next one is created), `wal-segment-rename` (a
//! new segment's header written and synced under its temporary name, before the
//! rename), `wal-truncate` (before an obsolete segment is deleted), `checkpoint-write`
//! (a checkpoint's bytes written to its temporary file, before its fsync),
//! `checkpoint-rename` (synced, before the rename to its final name),
//! `checkpoint-remove` (before an old checkpoint is deleted). An acceptor's promise is a
//! WAL record: it goes through `wal-append` and `wal-fsync`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Every point's name: the crash points, then `wal-fsync-error`, where the segment's
/// fsync returns an I/O error instead of crashing (fsync errors are fatal: the WAL is
/// poisoned and the node stops, naming the file).
pub const NAMES: [&str; 10] = [
    "wal-preallocate",
    "wal-append",
    "wal-fsync",
    "wal-roll",
    "wal-segment-rename",
    "wal-truncate",
    "checkpoint-write",
    "checkpoint-rename",
    "checkpoint-remove",
    "wal-fsync-error",
];

static ARMED: AtomicBool = AtomicBool::new(false);
static POINT: Mutex<Option<(&'static str, u64)>> = Mutex::new(None);

/// Arm point `name` to crash the process at its `n`th hit (n ≥ 1).
pub fn arm(name: &str, n: u64) -> Result<(), String> {
    let Some(&known) = NAMES.iter().find(|&&p| p == name) else {
        return Err(format!(
            "no failpoint `{name}`; the points are {}",
            NAMES.join(", ")
        ));
    };
    if n == 0 {
        return Err("a failpoint fires at its first hit or later: N must be at least 1".into());
    }
    *POINT.lock().expect("failpoint lock") = Some((known, n));
    ARMED.store(true, Ordering::Release);
    Ok(())
}

/// Parse and arm `NAME=N`.
pub fn arm_spec(spec: &str) -> Result<(), String> {
    let (name, n) = spec
        .split_once('=')
        .ok_or_else(|| format!("failpoint `{spec}`: expected NAME=N (e.g. wal-fsync=20)"))?;
    let n: u64 = n
        .parse()
        .map_err(|_| format!("failpoint `{spec}`: N must be a positive integer"))?;
    arm(name, n)
}

/// The code reached error point `name`: whether to fail here (its Nth hit; then
/// disarmed).
pub fn error(name: &'static str) -> bool {
    if !ARMED.load(Ordering::Acquire) {
        return false;
    }
    let mut p = POINT.lock().expect("failpoint lock");
    if let Some((armed, left)) = p.as_mut() {
        if *armed == name {
            *left -= 1;
            if *left == 0 {
                *p = None;
                ARMED.store(false, Ordering::Release);
                eprintln!("failpoint {name}: failing here with an injected I/O error");
                return true;
            }
        }
    }
    false
}

/// The code reached point `name`: abort if it is armed and this is its Nth hit.
pub fn hit(name: &'static str) {
    if !ARMED.load(Ordering::Acquire) {
        return;
    }
    let mut p = POINT.lock().expect("failpoint lock");
    if let Some((armed, left)) = p.as_mut() {
        if *armed == name {
            *left -= 1;
            if *left == 0 {
                eprintln!("failpoint {name}: crashing the process here (as a crash would)");
                std::process::abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only refusals here: arming a point in the test process would crash the other
    /// tests of this crate that reach it.
    #[test]
    fn bad_failpoints_are_refused_with_the_reason() {
        assert!(arm_spec("wal-fsync").unwrap_err().contains("NAME=N"));
        assert!(arm_spec("wal-fsync=x")
            .unwrap_err()
            .contains("positive integer"));
        assert!(arm_spec("disk-on-fire=3")
            .unwrap_err()
            .contains("wal-append"));
        assert!(arm("wal-fsync", 0).unwrap_err().contains("at least 1"));
        assert!(!ARMED.load(Ordering::Acquire), "nothing was armed");
        hit("wal-fsync");
    }
}
