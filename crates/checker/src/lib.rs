//! Client histories and a linearizability checker for Partita's replicated ordered map
//! (u64 -> u64 with insert, delete, read, update, range query, next, prev and atomic
//! batches; semantics in `partita_btree::ops`).
//!
//! # Histories
//!
//! A history is a JSON-lines file, one [`Event`] per operation: who issued it, the
//! operation, invocation and response times on one monotonic clock, the status (`ok`,
//! `fail`: definitely not applied, `info`: unknown) and, for `ok`, the result. The format
//! is documented in [`history`]; [`HistoryWriter`] writes it and [`read_history`] reads it,
//! refusing malformed lines with their line number.
//!
//! # Checking
//!
//! [`check()`] decides whether some total order of the operations (a) respects real time
//! (an operation that responded before another was invoked comes first), (b) agrees with
//! every observed result when executed on the map, starting from [`Initial`] state.
//!
//! 1. **Preparation.** `fail` operations are dropped. `info` reads are dropped (they
//!    changed nothing and there is nothing to check). `info` mutations are kept with no
//!    response time and no result: they may take effect at any point after their
//!    invocation, or never.
//! 2. **Partitioning.** Every operation has a *footprint*: the keys its result depends on
//!    or that it may change (one key for point operations, `min..=max` for a query, the
//!    gap up to the returned entry for next/prev, the keys of a batch). Operations with
//!    connected footprints form a group; groups touch disjoint keys, so by the locality of
//!    linearizability each group is checked on its own against the map restricted to its
//!    keys. A history of point operations thus splits into one small search per key;
//!    multi-key operations merge only the keys they actually span.
//! 3. **Per-key pre-check.** In groups that multi-key operations joined, every
//!    operation is also projected onto each key it involves (a query of `1..=9` that
//!    returned `[(3, x)]` reads `x` at 3 and "absent" at every other key of `1..=9` that
//!    some operation changes or names) and each key is checked alone. A linearization of
//!    the whole projects onto one of every key, so a failure here is a real violation,
//!    found cheaply and explained per key.
//! 4. **Search** (per group, module `search`): Lowe's just-in-time linearization with
//!    Wing & Gong-style memoization of (linearized set, model state), iterative with an
//!    explicit stack. Reads are linearized as soon as their result matches (never a
//!    branch); `ok` mutations only when their response forces it, preceded only by
//!    operations in conflict with them; `info` mutations are applied at invocation or
//!    left pending for later. A per-key reachability argument prunes configurations that
//!    can no longer satisfy an operation, including the next reads of a key just
//!    written, so that a wrong choice is undone at once rather than after a long detour.
//!    The model is a `BTreeMap` mutated in place and undone while backtracking; its
//!    contents are hashed incrementally (XOR of a 128-bit mix per entry).
//!
//! **Bounds.** Linearizability checking is NP-complete; the search is exponential in the
//! worst case in the number of mutually conflicting operations that are concurrent
//! (bounded by the number of clients plus outstanding `info` mutations in one group).
//! Valid histories typically need about one state per operation (a 20,000-operation
//! history of 16 clients whose range queries merge all keys into one group checks in
//! about 0.1 s, release build). A state costs 1 to 40 µs. The total number of explored
//! states is capped by [`CheckOptions::max_states`]; past it the answer is
//! [`CheckError::Unknown`], never a hang. Memory is 20 to 40 bytes per explored state
//! plus the model of the largest group.
//!
//! What makes a history hard is many `info` operations outstanding on the same few keys
//! (each may or may not have taken effect, at any later time): on generated histories of
//! up to 32 clients and 4,000 operations over as few as 4 keys, none with up to 2% `info`
//! operations exceeded the default budget, about 3% of those with 5% did, and about 20%
//! of those with 10%. Histories over many keys, or with few timeouts, are not a concern.
//! Soundness does not depend on any of this: every pruning rule only discards
//! configurations that provably cannot be completed, and the reductions only skip orders
//! equivalent to ones explored. A test compares the verdicts with a brute-force oracle on
//! thousands of small random histories, valid and not (several hundred thousand in
//! longer runs during development), in both directions.
//!
//! On failure the [`Violation`] names the operation that could not be linearized at the
//! furthest point any partial linearization reached, its observed result and what the
//! model would have returned there.
//!
//! [`check_with_final_state`] additionally checks a final dump of the map (catching
//! acknowledged writes lost without any read noticing), [`check_convergence`] compares
//! replica digests, and [`check_file`] is the entry point of `partita check`.
//!
//! [`gen`] generates linearizable histories from a seed, for tests and benchmarks.
//!
//! # Key-value histories
//!
//! Histories of the key-value service (`service: "kv"` on every line) have a checker of
//! their own, [`kv`], with its own model of etcd's semantics: revisions pin each
//! operation's place, so it checks them in near-linear time. [`check_history_file`]
//! looks at a file's `service` field and runs the right one.

pub mod check;
pub mod chirper;
pub mod gen;
pub mod history;
pub mod initial;
pub mod kv;
pub mod locks;
pub mod model;
pub mod report;
mod search;

pub use check::{
    check, check_with_final_state, CheckError, CheckOptions, CheckSummary, Unknown, Violation,
    DEFAULT_MAX_STATES,
};
pub use history::{
    fmt_op, fmt_result, read_history, read_history_from, Error, Event, HistoryWriter, Status,
};
pub use initial::Initial;
pub use kv::{
    check_history_file, check_kv, check_kv_file, KvCheckError, KvCheckOptions, KvCheckSummary,
    KvEvent, KvReport, KvVerdict, KvViolation, KvViolationKind, ServiceReport,
};
pub use model::apply_op;
pub use report::{check_file, Report, Verdict};

/// Check that replicas agree: every `(replica name, state digest)` must carry the same
/// digest. On divergence the error lists which replicas hold which digest.
pub fn check_convergence(digests: &[(String, u64)]) -> Result<(), String> {
    let mut by_digest: Vec<(u64, Vec<&str>)> = Vec::new();
    for (name, d) in digests {
        match by_digest.iter_mut().find(|(x, _)| x == d) {
            Some((_, names)) => names.push(name),
            None => by_digest.push((*d, vec![name])),
        }
    }
    if by_digest.len() <= 1 {
        return Ok(());
    }
    // Largest camp first: the odd ones out are usually the broken replicas.
    by_digest.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let camps: Vec<String> = by_digest
        .iter()
        .map(|(d, names)| format!("{d:#018x} on {}", names.join(", ")))
        .collect();
    Err(format!(
        "replicas diverged ({} distinct digests): {}",
        by_digest.len(),
        camps.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convergence() {
        assert!(check_convergence(&[]).is_ok());
        let same = [("a".to_string(), 7), ("b".to_string(), 7)];
        assert!(check_convergence(&same).is_ok());
        let split = [
            ("a".to_string(), 7),
            ("b".to_string(), 9),
            ("c".to_string(), 7),
        ];
        let err = check_convergence(&split).unwrap_err();
        assert!(err.contains("2 distinct digests"), "{err}");
        assert!(err.contains("0x0000000000000007 on a, c"), "{err}");
        assert!(err.contains("0x0000000000000009 on b"), "{err}");
    }
}
