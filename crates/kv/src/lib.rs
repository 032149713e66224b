//! A byte-string key-value store in etcd's data model, as a Partita service
//! ([`partita_service::StateMachine`], `NAME = "kv"`).
//!
//! It follows etcd's v3 API (`etcdserverpb`) and its `mvcc` store, with one revision
//! of the keys kept (no reads at older revisions) and the event history of every
//! revision since the last compaction (what watches read):
//!
//! * **Data.** Keys are 1 byte to 4 KiB ([`KEY_BYTES_MAX`]), values up to 1 MiB
//!   ([`VALUE_BYTES_MAX`]), both arbitrary bytes, ordered lexicographically; a
//!   `BTreeMap` holds them (deterministic iteration, no hash-map state).
//! * **Revisions.** A store-wide revision starts at 1 ([`INITIAL_REVISION`], as etcd's)
//!   and every request that changes something increments it once: a put; a delete that
//!   deleted something; a transaction that wrote anything (all its writes share the new
//!   revision). Reads, deletes of nothing and transactions that changed nothing leave it
//!   alone. Each key carries its create revision, mod revision and version (1 on
//!   creation, +1 per put); a delete removes the key, so a later put starts again at
//!   version 1 with a new create revision.
//! * **Commands** ([`KvCommand`], replies [`KvReply`]): `Put`, `Range` (etcd's range
//!   conventions: an empty `end` is the single key, `end == [0]` every key `>= key`,
//!   otherwise `[key, end)`; a `limit` of 0 is no limit; `keys_only`, `count_only`),
//!   `DeleteRange`, and `Txn` (compares on value, version, create or mod revision with
//!   `=`, `!=`, `<`, `>`, then the success or failure branch of puts, ranges and
//!   deletes). [`check`] refuses what etcd refuses (empty keys, too many transaction
//!   operations, a key written twice in one branch: "duplicate key given in txn
//!   request") and what exceeds the size limits, naming the limit and the size found.
//! * **Leases** (module [`lease`]): granted, renewed and revoked by commands, expired
//!   in ordered time before each value's commands ([`KvStore::advance_time`]), the
//!   same at every replica; a lease's expiry or revoke deletes its keys in one
//!   revision.
//! * **Undo** for speculative execution: [`KvUndo`] restores the revision and every
//!   changed key's entry and metadata exactly.
//! * **Snapshots** ([`KvStore::snapshot`], [`KvStore::restore`]): checksummed with
//!   CRC32C and validated; damage is an error, never a panic.
//! * **Digest**: a function of the contents only (keys, values, metadata, revision),
//!   maintained incrementally, O(1) to read.
//! * **Partitioning** (module [`service`]): point commands go to their key's partition,
//!   ranges and delete ranges to every partition they overlap (replies merged in key
//!   order), transactions must stay within one partition.
//!
//! **Limitation.** With state partitioning each partition keeps its own revision
//! counter, so revisions are comparable only within a partition, and a reply merged
//! from several partitions reports the largest of their revisions (see [`service`]).
//!
//! [`history`] records operations in DESIGN.md §2's JSON-lines format for the checker.

mod digest;
pub mod history;
pub mod lease;
pub mod mix;
pub mod service;
pub mod snapshot;
pub mod store;
pub mod types;

pub use snapshot::SnapshotError;
pub use store::{KvStore, KvUndo, INITIAL_REVISION};
pub use types::*;
