//! Mutual exclusion of lease-based locks (etcd's `concurrency.Mutex`), judged from the
//! critical sections their holders report, in the Jepsen `lock-etcd-set` style: every
//! holder reads a counter, then writes it plus one in a transaction guarded by the lock
//! key's create revision (the fencing token).
//!
//! A section reports, on one clock shared by every holder (the holders run in one
//! process): when its holder acquired the lock, when it finished (before unlocking),
//! when it learnt that its lease was gone (0: not before it finished), the lock key's
//! create revision, the value it read, and whether its guarded write succeeded (with
//! the write's revision).
//!
//! The verdict:
//!
//! 1. **Exclusion within leases.** No section acquired while another one was held and
//!    its holder's lease was, as far as that holder knew, still alive: holder A held
//!    from `acquired` to `min(released, lost)`, and nobody else may acquire inside
//!    that interval. (The holder's view of its lease is the client's: it runs from the
//!    receipt of the last keep-alive answer, so it may outlast the server's by one
//!    answer's latency; runs keep the TTL well above that.)
//! 2. **No lock lost within a lease.** A guarded write is refused only when the lock key
//!    is gone (its lease expired or was revoked), so a refused write by a holder that
//!    did not know its lease was gone means the cluster dropped the lock inside the
//!    lease as the holder saw it.
//! 3. **Fencing.** The guarded writes that succeeded, in revision order, read 0, 1, 2,
//!    ... (no increment lost, none applied twice), and their lock revisions increase
//!    (or repeat, for one holder that took its own key back after an unlock failed).
//!
//! The first two judge the cluster against each holder's own view of its lease; etcd's
//! Go client notices an ended lease up to half a second late, so a run keeps the TTL
//! well above its outages (a lease then never runs out while its holder holds it).

use serde::Deserialize;

/// One critical section, as `tools/etcd-go locks` prints it (times in ns).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Section {
    pub worker: u64,
    #[serde(default)]
    pub lease: i64,
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub lock_rev: i64,
    #[serde(default)]
    pub acquired: i64,
    #[serde(default)]
    pub released: i64,
    #[serde(default)]
    pub read: i64,
    #[serde(default)]
    pub wrote: bool,
    #[serde(default)]
    pub write_rev: i64,
    #[serde(default)]
    pub lost: i64,
    /// A lock or session that failed (no section was held).
    #[serde(default)]
    pub err: String,
}

impl Section {
    /// Whether the lock was held at all (a failed lock attempt holds nothing).
    pub fn held(&self) -> bool {
        self.acquired > 0
    }

    /// The end of the holder's claim: its release, or the moment it learnt its lease
    /// was gone, whichever came first.
    pub fn claim_end(&self) -> i64 {
        match self.lost {
            0 => self.released,
            l => l.min(self.released),
        }
    }
}

/// What a run of lock holders did, when nothing was violated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockSummary {
    pub sections: usize,
    pub guarded_writes: usize,
    /// Sections whose guarded write was refused (the holder had lost the lock).
    pub fenced: usize,
    /// Lock attempts that failed (timeouts, sessions lost while waiting).
    pub failed: usize,
}

impl std::fmt::Display for LockSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} critical sections, {} guarded writes, {} fenced off, {} failed lock attempts",
            self.sections, self.guarded_writes, self.fenced, self.failed
        )
    }
}

/// Parse `tools/etcd-go locks` output (one JSON object per line).
pub fn parse(text: &str) -> Result<Vec<Section>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}: {l}", i + 1)))
        .collect()
}

/// Judge the sections (see the module documentation); `Err` names the violation.
pub fn check(sections: &[Section]) -> Result<LockSummary, String> {
    let held: Vec<&Section> = sections.iter().filter(|s| s.held()).collect();
    let mut by_start = held.clone();
    by_start.sort_by_key(|s| s.acquired);
    // 1. Exclusion: each acquisition must come after every earlier holder's claim.
    for (i, a) in by_start.iter().enumerate() {
        for b in &by_start[i + 1..] {
            if b.acquired >= a.claim_end() {
                continue;
            }
            return Err(format!(
                "two held the lock at once within their leases: worker {} (lease {:x}, \
                 lock revision {}) held it from {:.3} s to {:.3} s, and worker {} (lease \
                 {:x}, lock revision {}) acquired it at {:.3} s",
                a.worker,
                a.lease,
                a.lock_rev,
                a.acquired as f64 / 1e9,
                a.claim_end() as f64 / 1e9,
                b.worker,
                b.lease,
                b.lock_rev,
                b.acquired as f64 / 1e9
            ));
        }
    }
    // 2. A refused guarded write by a holder that still counted on its lease.
    if let Some(f) = held
        .iter()
        .find(|s| !s.wrote && s.err.is_empty() && s.lost == 0)
    {
        return Err(format!(
            "worker {} (lease {:x}, lock revision {}) lost the lock within its lease: its \
             guarded write was fenced off at {:.3} s, and it did not know its lease was gone",
            f.worker,
            f.lease,
            f.lock_rev,
            f.released as f64 / 1e9
        ));
    }
    // 3. Fencing: the successful guarded writes count up by one, in revision order.
    let mut writes: Vec<&Section> = held.iter().copied().filter(|s| s.wrote).collect();
    writes.sort_by_key(|s| s.write_rev);
    for (n, w) in writes.iter().enumerate() {
        if w.read != n as i64 {
            return Err(format!(
                "guarded write {} (revision {}, worker {}) read the counter at {}, not {n}: \
                 an increment was lost or applied twice",
                n + 1,
                w.write_rev,
                w.worker,
                w.read
            ));
        }
    }
    // A holder whose unlock failed (a timeout across a leader change) still holds its
    // key, and etcd's Mutex takes the same key back on its next Lock (the key is the
    // session's lease): its token repeats, which is no other holder's.
    let same_key = |a: &Section, b: &Section| a.key == b.key && a.lease == b.lease;
    if let Some(p) = writes.windows(2).find(|p| {
        p[1].lock_rev < p[0].lock_rev || (p[1].lock_rev == p[0].lock_rev && !same_key(p[0], p[1]))
    }) {
        return Err(format!(
            "guarded writes at revisions {} and {} hold lock revisions {} and {}: the \
             fencing token went back",
            p[0].write_rev, p[1].write_rev, p[0].lock_rev, p[1].lock_rev
        ));
    }
    Ok(LockSummary {
        sections: held.len(),
        guarded_writes: writes.len(),
        fenced: held.len() - writes.len(),
        failed: sections.len() - held.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(worker: u64, lock_rev: i64, acquired: i64, released: i64, read: i64, rev: i64) -> Section {
        Section {
            worker,
            lease: worker as i64 + 1,
            lock_rev,
            acquired,
            released,
            read,
            wrote: true,
            write_rev: rev,
            ..Section::default()
        }
    }

    #[test]
    fn one_holder_at_a_time_counting_up_passes() {
        let run = [
            s(0, 10, 100, 200, 0, 11),
            s(1, 12, 250, 300, 1, 13),
            s(0, 14, 310, 400, 2, 15),
        ];
        let sum = check(&run).unwrap();
        assert_eq!((sum.sections, sum.guarded_writes, sum.fenced), (3, 3, 0));
    }

    /// Planted: a holder acquired while another's lease was still alive.
    #[test]
    fn overlapping_holders_are_caught() {
        let run = [s(0, 10, 100, 300, 0, 11), s(1, 12, 250, 400, 1, 13)];
        let err = check(&run).unwrap_err();
        assert!(err.contains("two held the lock at once"), "{err}");
        assert!(err.contains("worker 1") && err.contains("0.000 s"), "{err}");
        // A holder that knew its lease was gone before the other acquired: no claim,
        // and its write may be fenced off.
        let mut gone = run.clone();
        gone[0].lost = 240;
        gone[0].wrote = false;
        gone[1].read = 0;
        let sum = check(&gone).unwrap();
        assert_eq!(sum.fenced, 1);
    }

    /// Planted: a holder fenced off while it still counted on its lease.
    #[test]
    fn a_lock_lost_within_its_lease_is_caught() {
        let mut run = [s(0, 10, 100, 200, 0, 0), s(1, 12, 250, 300, 0, 13)];
        run[0].wrote = false;
        let err = check(&run).unwrap_err();
        assert!(err.contains("lost the lock within its lease"), "{err}");
        // A write that failed for another reason (a timeout) says nothing.
        run[0].err = "write: context deadline exceeded".into();
        assert_eq!(check(&run).unwrap().fenced, 1);
    }

    /// Planted: a lost increment, and a fencing token going back.
    #[test]
    fn lost_increments_and_tokens_going_back_are_caught() {
        let lost = [s(0, 10, 100, 200, 0, 11), s(1, 12, 250, 300, 0, 13)];
        let err = check(&lost).unwrap_err();
        assert!(err.contains("read the counter at 0, not 1"), "{err}");
        let back = [s(0, 12, 100, 200, 0, 11), s(1, 10, 250, 300, 1, 13)];
        let err = check(&back).unwrap_err();
        assert!(err.contains("fencing token went back"), "{err}");
        // Two holders with one token: caught too.
        let mut same = [s(0, 10, 100, 200, 0, 11), s(1, 10, 250, 300, 1, 13)];
        same[1].key = "/l/other".into();
        let err = check(&same).unwrap_err();
        assert!(err.contains("fencing token went back"), "{err}");
        // One holder taking its own key back (its unlock failed): the same token.
        let mut again = same.clone();
        again[1].key = again[0].key.clone();
        again[1].lease = again[0].lease;
        again[1].worker = again[0].worker;
        assert_eq!(check(&again).unwrap().guarded_writes, 2);
    }

    #[test]
    fn lines_parse_and_failed_attempts_count() {
        let text = "{\"worker\":0,\"lease\":5,\"key\":\"/l/5\",\"lock_rev\":3,\"acquired\":10,\
                    \"released\":20,\"read\":0,\"wrote\":true,\"write_rev\":4,\"lost\":0}\n\
                    {\"worker\":1,\"lease\":6,\"err\":\"lock: context deadline exceeded\"}\n";
        let v = parse(text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(check(&v).unwrap().failed, 1);
        assert!(parse("{\"worker\":").unwrap_err().starts_with("line 1"));
    }
}
