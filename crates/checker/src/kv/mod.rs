//! Linearizability of key-value histories (`service: "kv"`), against a model of etcd's
//! data model with revisions ([`model`], written independently of `partita-kv`).
//!
//! # What is checked
//!
//! That some total order of the operations (a) respects real time (one that responded
//! before another was invoked comes first), (b) gives every `ok` operation exactly the
//! recorded result when executed on the model from the initial state, with revisions:
//! the store's revision starts at [`KvInitial::revision`] (1, as etcd's) and every
//! operation that changes something creates the next one. `fail` operations never
//! took effect; an `info` operation may have taken effect at any time after its
//! invocation, or never.
//!
//! # How: revisions pin the linearization
//!
//! In etcd's model, every change creates one revision, and every result names the
//! revision it was made at: a write the one it created, a read (and a delete of
//! nothing, a transaction that wrote nothing) the one it read at. A linearization is
//! then nearly fixed by the results themselves, which is what makes the check fast:
//!
//! 1. **Pins.** Each `ok` operation gets a *slot*: `(r, 0)` for the write that created
//!    revision r, `(r, 1)` for a read at r. Slots are totally ordered, and reads in the
//!    same slot commute (they change nothing), so a history whose operations all have
//!    slots has at most one linearization up to the order of equal reads.
//! 2. **Revisions are created once** (else [`KvViolationKind::DuplicateRevision`]), after
//!    the initial one ([`KvViolationKind::BadRevision`]), and no more revisions were
//!    observed than there are writes to create them ([`KvViolationKind::MissingWrite`]).
//! 3. **Real time.** If A returned before B was invoked, A's slot must not be later than
//!    B's: one sweep over the operations sorted by response, with a running maximum,
//!    checks every pair in O(n log n) ([`KvViolationKind::RealTimeOrder`]: a revision
//!    going backwards, a stale read that reports its stale revision).
//! 4. **Replay.** The model executes the writes in revision order. At each revision it
//!    checks the write's result against the state before it (prev values, deleted
//!    counts, compare outcomes, inner results) and every read pinned there against the
//!    state after it ([`KvViolationKind::WrongResult`]: a read that reports a current
//!    revision with a stale value, a lost put that a later read does not see).
//! 5. **Unknown outcomes.** A revision no acknowledged write claims must have been
//!    created by an `info` operation, and by one not invoked after some operation had
//!    already returned with that revision or a newer one (real time). Which one is a
//!    search: at each such gap, in revision order, the candidates are tried one at a
//!    time (most recently invoked first: a timed-out operation usually took effect
//!    soon, if at all), and the replay goes back to the newest gap with untried
//!    candidates when something fails. Reads pin candidates down: an entry seen with
//!    mod revision g says which key and value g's write put, so usually one candidate
//!    fits. Identical candidates are tried once (the earliest invoked: it constrains
//!    the rest least). A configuration at a gap (revision, model contents, `info`
//!    operations used, reads placed; hashed to 128 bits) that was explored and failed
//!    is not explored again. `info` operations not needed are taken to have never
//!    happened, or to have happened after everything observed.
//! 6. **Reads without a revision.** DESIGN.md's `get` and `txn` results carry no read
//!    revision. Such a read is placed during the replay, at the first revision where
//!    real time allows it (after every operation that returned before it was invoked,
//!    and after the other reads without revision that did) and its result matches the
//!    model; it must be placed before any revision an operation invoked after it
//!    returned reports or creates ([`KvViolationKind::Unplaceable`]). The earliest
//!    fitting revision is always the best choice: the constraints among such reads
//!    only bound later ones from below, and an `info` write invoked after one returned
//!    may only be placed once it is. A read that fits nowhere up to the newest revision
//!    observed may still fit after `info` writes that nothing else observed (a get of
//!    `null` after an unacknowledged delete), so the search goes on past it with only
//!    `info` writes; there a read that saw a key at some mod revision can no longer be
//!    placed once the key changed (new revisions were observed by nobody), and writes
//!    that cannot affect the unplaced reads are left out (module `check`,
//!    `tail_relevant`).
//!
//! # Why it is sound and complete
//!
//! *Sound* (a history it accepts is linearizable): acceptance exhibits an order, the
//! operations sorted by (slot, invocation time) with placed `info` writes at their
//! revisions, reads without revision at theirs, and unused `info` operations dropped.
//! Every result was compared with the model at its place; real time holds between
//! pinned operations by step 3, between `info` writes and operations that returned
//! before they were invoked by the candidate bounds, and for reads without revision by
//! construction; and within one slot, invocation order respects real time (an
//! operation that returned before another was invoked was also invoked before it).
//!
//! *Complete* (a linearizable history is accepted, budget permitting): in any
//! linearization each change creates the next revision and each result reports its
//! revision truthfully, so the writes appear in the order of their revisions and each
//! read sits between the write of its revision and the next; every revision no `ok`
//! write claims was made by some `info` write, which satisfies the real-time bound and
//! the witnesses of that revision. The search enumerates every assignment of `info`
//! writes to such revisions that survives the checks, and each pruning rule only
//! discards assignments that cannot succeed or that another one tried dominates (the
//! witness filter, the deduplication of identical operations, the memo, the rules past
//! the newest revision observed), so it meets an assignment that works whenever one
//! does; for it, the greedy placement of reads without revision succeeds, since the
//! least solution of their constraints exists when any does. A test compares the
//! verdicts with a brute-force search over all orders on thousands of small random
//! histories, valid and corrupted (hundreds of thousands during development).
//!
//! *Where it is not complete*: the search is exponential in the number of ambiguous
//! `info` writes (several candidates at several gaps with no read to tell them apart)
//! and stops at [`KvCheckOptions::max_steps`] with an unknown verdict. That happens to
//! valid histories only when they are dense with unknown outcomes on few keys (on
//! generated histories of 300 operations on 2 to 4 keys with 2 values, 10 to 20 % of
//! them `info`, the most any needed was about 0.7 of the default budget), and to
//! violations more often, since proving one means exhausting the choices (1 to 2 %
//! of corrupted histories of 1,000 operations on 4 keys with 10 % `info` ended unknown).
//!
//! # Cost
//!
//! Sorting, one sweep, and one model execution per operation (a range read costs its
//! range), plus the search at revisions only `info` writes can explain: generated
//! histories of 100,000 operations from 64 clients with 1 to 5 % `info` operations
//! check in 0.2 to 0.7 s (release build, `examples/check_kv_bench.rs`). Memory is the
//! history plus the model, the memo (16 bytes per gap visited) and, while a choice is
//! open, an undo record per revision since.
//!
//! # Reports
//!
//! A [`KvViolation`] names its kind, the revision, the culprit and the operations that
//! created the revisions involved (e.g. for a lost put: the read, and the put whose
//! revision the model holds for that key), and what the model returns instead.

pub mod check;
pub mod gen;
pub mod history;
pub mod model;
pub mod report;

pub use check::{
    check_kv, KvCheckError, KvCheckOptions, KvCheckSummary, KvInitial, KvUnknown, KvViolation,
    KvViolationKind,
};
pub use history::{
    bytes_from_json, bytes_to_json, fmt_op as fmt_kv_op, fmt_result as fmt_kv_result,
    read_kv_history, read_kv_history_from, CmpOp, Compare, KvEvent, KvOp, KvResult, Target,
};
pub use model::{Entry, ModelStore};
pub use report::{
    check_history_file, check_kv_file, history_service, KvReport, KvVerdict, ServiceReport,
};
