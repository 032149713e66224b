//! Requests and responses, after etcd's v3 API (`etcdserverpb`: `PutRequest`,
//! `RangeRequest`, `DeleteRangeRequest`, `TxnRequest`, `Compare`, `RequestOp` and their
//! responses), and the checks that refuse impossible requests before they are ordered
//! (etcd's `checkPutRequest`, `checkRangeRequest`, `checkTxnRequest`, `checkIntervals`).
//!
//! Leases (etcd's `LeaseGrantRequest` and the rest) are commands too: a lease is
//! replicated state whose expiry is decided in ordered time (see the `lease` module).
//!
//! What is left out of etcd's messages: `ignore_value`/`ignore_lease`, sorting (the
//! gateway sorts), the min/max revision filters (the gateway applies them), compare
//! ranges (`Compare.range_end`) and nested transactions.

use serde::{Deserialize, Serialize};

/// Longest key, in bytes (a key is 1 to 4 KiB; so is a range end, which may also be
/// empty).
pub const KEY_BYTES_MAX: usize = 4096;
/// Longest value, in bytes (1 MiB). etcd's own bound is its request size limit.
pub const VALUE_BYTES_MAX: usize = 1 << 20;
/// Most compares, and most operations per branch, in one transaction: etcd's default
/// `--max-txn-ops`.
pub const TXN_OPS_MAX: usize = 128;
/// The most requests in a [`KvCommand::Batch`].
pub const BATCH_MAX: usize = 1024;
/// Most key, value and range-end bytes in one request: etcd's default
/// `--max-request-bytes` (1.5 MiB). One put of the largest key and value fits.
pub const REQUEST_BYTES_MAX: usize = 3 << 19;

/// A key with its value and metadata (etcd's `mvccpb.KeyValue`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// The revision of the put that created the key (the first put after it was absent).
    pub create_revision: u64,
    /// The revision of the last put to the key.
    pub mod_revision: u64,
    /// Puts since creation: 1 on creation, +1 per put.
    pub version: u64,
    /// The lease the key is attached to (0: none); its expiry deletes the key.
    pub lease: i64,
}

/// Store `value` at `key`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutRequest {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// Return the pair as it was before the put.
    pub prev_kv: bool,
    /// Attach the key to this lease (0: to none, detaching it from any lease it had).
    /// The lease must exist when the put executes, else the put (and a transaction
    /// holding it) fails with [`KvError::LeaseNotFound`] and changes nothing.
    pub lease: i64,
}

/// Read the keys in a range. `end` follows etcd's `range_end`: empty for the single
/// key `key`, `[0]` (one zero byte) for every key `>= key`, otherwise `[key, end)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeRequest {
    pub key: Vec<u8>,
    pub end: Vec<u8>,
    /// At most this many entries (0: no limit).
    pub limit: u64,
    /// Return keys and metadata with empty values.
    pub keys_only: bool,
    /// Return only the count.
    pub count_only: bool,
    /// Read the keys as they were at this revision (0: now), from the event history:
    /// refused with [`KvError::Compacted`] below the compaction, and with
    /// [`KvError::FutureRevision`] above the store's revision, as etcd refuses them.
    pub revision: u64,
}

/// Delete the keys in a range (`end` as in [`RangeRequest`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeRequest {
    pub key: Vec<u8>,
    pub end: Vec<u8>,
    /// Return the deleted pairs.
    pub prev_kv: bool,
}

/// What a compare looks at, with the operand it is compared to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    /// The value, compared as bytes (lexicographically).
    Value(Vec<u8>),
    Version(u64),
    CreateRevision(u64),
    ModRevision(u64),
    /// The lease the key is attached to (0: none, and for an absent key).
    Lease(i64),
}

/// etcd's `Compare.CompareResult`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Less,
    Greater,
}

impl CompareOp {
    /// The operator as written in histories and messages.
    pub fn symbol(self) -> &'static str {
        match self {
            CompareOp::Equal => "=",
            CompareOp::NotEqual => "!=",
            CompareOp::Less => "<",
            CompareOp::Greater => ">",
        }
    }

    /// Whether `ordering` (the key's side compared to the operand) satisfies it.
    pub fn holds(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CompareOp::Equal => ordering == Equal,
            CompareOp::NotEqual => ordering != Equal,
            CompareOp::Less => ordering == Less,
            CompareOp::Greater => ordering == Greater,
        }
    }
}

/// One condition of a transaction: `key`'s target `op` operand. On an absent key the
/// version and both revisions are 0, and a value compare is false whatever the
/// operator (etcd's `applyCompare`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    pub key: Vec<u8>,
    pub op: CompareOp,
    pub target: CompareTarget,
}

/// One operation of a transaction branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestOp {
    Put(PutRequest),
    Range(RangeRequest),
    DeleteRange(DeleteRangeRequest),
}

/// If every compare holds, run `success`, else `failure`, atomically.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<RequestOp>,
    pub failure: Vec<RequestOp>,
}

/// Drop the event history below `revision` (etcd's `Compact`): watches from an older
/// revision are then refused as compacted. Refused in the reply (see
/// [`CompactResponse::error`]) when `revision` is not above the current compaction or
/// lies in the future, as etcd does. Creates no revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactRequest {
    pub revision: u64,
}

/// Read the retained events of a key range (`end` as in [`RangeRequest`]) from
/// `start_revision` on (0: from the next revision, i.e. none yet): what an etcd watch
/// delivers. Read-only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsRequest {
    pub key: Vec<u8>,
    pub end: Vec<u8>,
    pub start_revision: u64,
    /// Stop after the revision that reaches this many events (0: no limit). The events
    /// of one revision are never split.
    pub limit: u64,
}

/// etcd's `mvccpb.Event.EventType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change of one key (etcd's `mvccpb.Event`). A put's `kv` is the key as written;
/// a delete's `kv` holds the key and the delete's revision as `mod_revision`, with an
/// empty value, zero create revision and version (as etcd's). `prev_kv` is the key
/// before the change, if it existed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    pub kv: KeyValue,
    pub prev_kv: Option<KeyValue>,
}

impl Event {
    /// The revision of the change.
    pub fn revision(&self) -> u64 {
        self.kv.mod_revision
    }
}

/// The shortest lease, in seconds: a shorter TTL is raised to it, silently, as etcd
/// raises it to its `minLeaseTTL` (2 s with its default election timeout).
pub const LEASE_TTL_MIN: i64 = 2;
/// The longest lease, in seconds (etcd's `MaxLeaseTTL`, 9,000,000,000).
pub const LEASE_TTL_MAX: i64 = 9_000_000_000;

/// Grant a lease of `ttl` seconds (etcd's `LeaseGrantRequest`). `id` 0: the store picks
/// one, never used before; otherwise that id, which must be positive and not held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantRequest {
    pub id: i64,
    pub ttl: i64,
}

/// A lease command naming one lease: revoke it (deleting its keys in one revision),
/// renew it for its whole TTL from now (a keep-alive), or read its time to live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRequest {
    pub id: i64,
    /// Time to live only: list the keys attached to it.
    pub keys: bool,
}

/// Why the store refused a request it executed (etcd's gRPC errors from the apply
/// path). Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvError {
    /// `etcdserver: requested lease not found` (NotFound).
    LeaseNotFound(i64),
    /// `etcdserver: lease already exists` (FailedPrecondition).
    LeaseExists(i64),
    /// `etcdserver: too large lease TTL` (OutOfRange).
    LeaseTtlTooLarge(i64),
    /// `etcdserver: mvcc: required revision has been compacted` (OutOfRange): a read at a
    /// revision below the compaction (which it names).
    Compacted(u64),
    /// `etcdserver: mvcc: required revision is a future revision` (OutOfRange): a read at a
    /// revision above the store's (which it names).
    FutureRevision(u64),
    /// Not served by this cluster's execution model (Unimplemented), and why: S-SMR and
    /// DS-SMR keep no store-wide history, digest or revision counter (see
    /// `partita_dssmr::kv`).
    Unsupported(String),
}

impl KvError {
    /// etcd's message, word for word (clients match on it).
    pub fn etcd_message(&self) -> &'static str {
        match self {
            KvError::LeaseNotFound(_) => "etcdserver: requested lease not found",
            KvError::LeaseExists(_) => "etcdserver: lease already exists",
            KvError::LeaseTtlTooLarge(_) => "etcdserver: too large lease TTL",
            KvError::Compacted(_) => "etcdserver: mvcc: required revision has been compacted",
            KvError::FutureRevision(_) => {
                "etcdserver: mvcc: required revision is a future revision"
            }
            KvError::Unsupported(_) => {
                "partita: not supported by this cluster's execution model (S-SMR or DS-SMR)"
            }
        }
    }
}

impl std::fmt::Display for KvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvError::LeaseNotFound(id) => write!(f, "lease {id:x} not found"),
            KvError::LeaseExists(id) => write!(f, "lease {id:x} already exists"),
            KvError::LeaseTtlTooLarge(ttl) => write!(
                f,
                "lease TTL of {ttl} s exceeds the limit of {LEASE_TTL_MAX} s"
            ),
            KvError::Compacted(c) => write!(f, "revisions below {c} are compacted"),
            KvError::FutureRevision(r) => write!(f, "the store is at revision {r}"),
            KvError::Unsupported(why) => write!(f, "not supported: {why}"),
        }
    }
}

/// A hash of the store, equal at every replica at one revision: etcd's `HashKV` (the
/// keys as they were at `revision`, 0: now, with the event history the store keeps up
/// to it), or with `store` etcd's `Hash` (the whole replicated state: keys, history,
/// leases, ordered time; `revision` must be 0). Read-only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashRequest {
    pub revision: u64,
    pub store: bool,
}

/// A command of the key-value service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvCommand {
    Put(PutRequest),
    Range(RangeRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
    /// Compaction of the event history (added with the etcd gateway).
    Compact(CompactRequest),
    /// A read of the event history (added with the etcd gateway).
    Events(EventsRequest),
    /// Several requests ordered as one command and executed one after the other, each
    /// as if alone (each change takes its own revision): how the etcd gateway orders
    /// the requests it has in flight together. Puts, ranges, delete ranges and
    /// transactions only, at most [`BATCH_MAX`], never empty.
    Batch(Vec<KvCommand>),
    LeaseGrant(LeaseGrantRequest),
    LeaseRevoke(LeaseRequest),
    LeaseKeepAlive(LeaseRequest),
    /// Read-only.
    LeaseTimeToLive(LeaseRequest),
    /// Every lease held (read-only).
    LeaseLeases,
    Hash(HashRequest),
    /// Revoke the lease only if it has expired at this command's ordered time (added
    /// with leases on S-SMR/DS-SMR, where no partition holds every lease and the etcd
    /// endpoints send these for the leases they find expired; etcd's leader likewise
    /// proposes a revoke for each lease its lessor finds expired). The one store
    /// expires its leases itself, so there a lease it holds has not expired and this
    /// changes nothing. Answers [`KvReply::LeaseRevoke`], or
    /// [`KvError::LeaseNotFound`] when there is no such lease.
    LeaseExpire(LeaseRequest),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResponse {
    /// The revision the put created.
    pub revision: u64,
    /// The pair before the put, when asked for and the key existed.
    pub prev_kv: Option<KeyValue>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeResponse {
    /// Entries in key order (none with `count_only`).
    pub kvs: Vec<KeyValue>,
    /// Keys in the range, whatever the limit.
    pub count: u64,
    /// Whether the limit left entries out.
    pub more: bool,
    /// The store's revision when it read.
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeResponse {
    pub deleted: u64,
    /// The deleted pairs in key order, when asked for.
    pub prev_kvs: Vec<KeyValue>,
    /// The revision the delete created, or the store's revision when it deleted nothing.
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseOp {
    Put(PutResponse),
    Range(RangeResponse),
    DeleteRange(DeleteRangeResponse),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnResponse {
    /// Whether every compare held (the success branch ran).
    pub succeeded: bool,
    /// One response per operation of the branch that ran, in order.
    pub responses: Vec<ResponseOp>,
    /// The revision the transaction created if it wrote anything, else the store's.
    pub revision: u64,
}

/// Why a compaction is refused, in etcd's words ([`CompactResponse::error`]): at or
/// below the last one ...
pub const COMPACTED_ALREADY: &str = "mvcc: required revision has been compacted";
/// ... or above the store's revision.
pub const COMPACT_IN_FUTURE: &str = "mvcc: required revision is a future revision";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactResponse {
    /// The store's revision (a compaction creates none).
    pub revision: u64,
    /// Events below this revision are gone (after the compaction, if it was done).
    pub compacted: u64,
    /// Why the compaction was refused, in etcd's words: `mvcc: required revision has
    /// been compacted` or `mvcc: required revision is a future revision`.
    pub error: Option<String>,
}

/// The reply to [`EventsRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventsResponse {
    /// The events in revision order (within a revision, in the order of the writes).
    pub events: Vec<Event>,
    /// `Some(c)` when `start_revision` is below `c`, the oldest revision whose events
    /// are retained: the history was compacted past the start, and no events are
    /// returned (etcd's `compact_revision` in a watch response).
    pub compacted: Option<u64>,
    /// Whether the limit left retained events out (read again from the revision after
    /// the last event).
    pub more: bool,
    /// The store's revision when it read.
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantResponse {
    pub id: i64,
    /// The TTL granted, in seconds (raised to [`LEASE_TTL_MIN`] if below).
    pub ttl: i64,
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRevokeResponse {
    pub revision: u64,
}

/// A keep-alive's answer: the lease renewed for `ttl` seconds from the ordered time of
/// the renewal, or `ttl` 0 when there is no such lease (expired, revoked, never
/// granted), as etcd answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseKeepAliveResponse {
    pub id: i64,
    pub ttl: i64,
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTimeToLiveResponse {
    pub id: i64,
    /// Whole seconds left in ordered time (truncated: it expires in under `ttl + 1`
    /// seconds), or -1 when there is no such lease.
    pub ttl: i64,
    /// The TTL it was granted (0 when there is no such lease).
    pub granted_ttl: i64,
    /// Its keys in key order, when asked for.
    pub keys: Vec<Vec<u8>>,
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseLeasesResponse {
    /// Every lease held, by id.
    pub ids: Vec<i64>,
    /// For each, the ordered milliseconds it has left (0: it has expired and awaits
    /// its revocation, which only the partitioned store leaves to a later command).
    pub remaining_ms: Vec<u64>,
    pub revision: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashResponse {
    /// CRC-32C of what was hashed (see [`HashRequest`]).
    pub hash: u32,
    /// The revision hashed.
    pub hash_revision: u64,
    /// Events below this revision are gone (the compaction).
    pub compact_revision: u64,
    /// The bytes of the store's snapshot (what `Status` reports as the database size).
    pub size: u64,
    pub revision: u64,
}

/// A request the store refused as it executed it (see [`KvError`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: KvError,
    /// The store's revision (unchanged).
    pub revision: u64,
}

/// A reply of the key-value service, of the command's kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvReply {
    Put(PutResponse),
    Range(RangeResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
    Compact(CompactResponse),
    Events(EventsResponse),
    /// One reply per request of a [`KvCommand::Batch`], in order.
    Batch(Vec<KvReply>),
    LeaseGrant(LeaseGrantResponse),
    LeaseRevoke(LeaseRevokeResponse),
    LeaseKeepAlive(LeaseKeepAliveResponse),
    LeaseTimeToLive(LeaseTimeToLiveResponse),
    LeaseLeases(LeaseLeasesResponse),
    Hash(HashResponse),
    /// Refused as executed, whatever the command (a put or transaction naming a lease
    /// that does not exist, a grant of an id held): nothing changed.
    Error(ErrorResponse),
}

impl KvReply {
    /// The revision the reply reports (see each response).
    pub fn revision(&self) -> u64 {
        match self {
            KvReply::Put(r) => r.revision,
            KvReply::Range(r) => r.revision,
            KvReply::DeleteRange(r) => r.revision,
            KvReply::Txn(r) => r.revision,
            KvReply::Compact(r) => r.revision,
            KvReply::Events(r) => r.revision,
            KvReply::LeaseGrant(r) => r.revision,
            KvReply::LeaseRevoke(r) => r.revision,
            KvReply::LeaseKeepAlive(r) => r.revision,
            KvReply::LeaseTimeToLive(r) => r.revision,
            KvReply::LeaseLeases(r) => r.revision,
            KvReply::Hash(r) => r.revision,
            KvReply::Error(r) => r.revision,
            // The store's revision after the last request.
            KvReply::Batch(rs) => rs.last().map_or(0, KvReply::revision),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Constructors, for tests and tools.

impl KvCommand {
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> KvCommand {
        KvCommand::Put(PutRequest {
            key: key.into(),
            value: value.into(),
            prev_kv: false,
            lease: 0,
        })
    }

    /// A put attaching the key to lease `lease`.
    pub fn put_leased(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, lease: i64) -> KvCommand {
        KvCommand::Put(PutRequest {
            key: key.into(),
            value: value.into(),
            prev_kv: false,
            lease,
        })
    }

    pub fn lease_grant(id: i64, ttl: i64) -> KvCommand {
        KvCommand::LeaseGrant(LeaseGrantRequest { id, ttl })
    }

    pub fn lease_revoke(id: i64) -> KvCommand {
        KvCommand::LeaseRevoke(LeaseRequest { id, keys: false })
    }

    pub fn lease_keep_alive(id: i64) -> KvCommand {
        KvCommand::LeaseKeepAlive(LeaseRequest { id, keys: false })
    }

    pub fn lease_expire(id: i64) -> KvCommand {
        KvCommand::LeaseExpire(LeaseRequest { id, keys: false })
    }

    pub fn lease_time_to_live(id: i64, keys: bool) -> KvCommand {
        KvCommand::LeaseTimeToLive(LeaseRequest { id, keys })
    }

    /// A single key.
    pub fn get(key: impl Into<Vec<u8>>) -> KvCommand {
        KvCommand::Range(RangeRequest::get(key))
    }

    /// `[key, end)` (etcd's conventions for `end`).
    pub fn range(key: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> KvCommand {
        KvCommand::Range(RangeRequest::new(key, end))
    }

    /// Every key starting with `prefix` (etcd's `WithPrefix`).
    pub fn prefix(prefix: impl Into<Vec<u8>>) -> KvCommand {
        let key = prefix.into();
        let end = prefix_end(&key);
        KvCommand::Range(RangeRequest::new(key, end))
    }

    pub fn delete(key: impl Into<Vec<u8>>) -> KvCommand {
        KvCommand::DeleteRange(DeleteRangeRequest {
            key: key.into(),
            end: Vec::new(),
            prev_kv: false,
        })
    }

    pub fn delete_range(key: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> KvCommand {
        KvCommand::DeleteRange(DeleteRangeRequest {
            key: key.into(),
            end: end.into(),
            prev_kv: false,
        })
    }

    /// The command's name in messages (`put`, `range`, `delete_range`, `txn`,
    /// `compact`, `events`, `batch`, `lease_grant`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            KvCommand::Put(_) => "put",
            KvCommand::Range(_) => "range",
            KvCommand::DeleteRange(_) => "delete_range",
            KvCommand::Txn(_) => "txn",
            KvCommand::Compact(_) => "compact",
            KvCommand::Events(_) => "events",
            KvCommand::Batch(_) => "batch",
            KvCommand::LeaseGrant(_) => "lease_grant",
            KvCommand::LeaseRevoke(_) => "lease_revoke",
            KvCommand::LeaseKeepAlive(_) => "lease_keep_alive",
            KvCommand::LeaseTimeToLive(_) => "lease_time_to_live",
            KvCommand::LeaseLeases => "lease_leases",
            KvCommand::Hash(_) => "hash",
            KvCommand::LeaseExpire(_) => "lease_expire",
        }
    }
}

impl RangeRequest {
    pub fn get(key: impl Into<Vec<u8>>) -> RangeRequest {
        RangeRequest::new(key, Vec::new())
    }

    pub fn new(key: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> RangeRequest {
        RangeRequest {
            key: key.into(),
            end: end.into(),
            limit: 0,
            keys_only: false,
            count_only: false,
            revision: 0,
        }
    }
}

/// The range end that selects every key with prefix `prefix` (etcd's `GetPrefixRangeEnd`):
/// the prefix with its last byte below 0xff incremented and what follows dropped; `[0]`
/// (every key) when there is no such byte.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    match prefix.iter().rposition(|&b| b < 0xff) {
        Some(i) => {
            let mut end = prefix[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

// ---------------------------------------------------------------------------------------
// Key ranges.

/// The keys a `(key, end)` pair selects, with etcd's conventions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRange<'a> {
    /// One key (`end` empty).
    Single(&'a [u8]),
    /// Every key `>= from` (`end == [0]`).
    From(&'a [u8]),
    /// `[from, to)`, possibly empty (`to <= from`).
    Between(&'a [u8], &'a [u8]),
}

impl<'a> KeyRange<'a> {
    pub fn new(key: &'a [u8], end: &'a [u8]) -> KeyRange<'a> {
        match end {
            [] => KeyRange::Single(key),
            [0] => KeyRange::From(key),
            _ => KeyRange::Between(key, end),
        }
    }

    pub fn contains(&self, k: &[u8]) -> bool {
        match *self {
            KeyRange::Single(key) => k == key,
            KeyRange::From(from) => k >= from,
            KeyRange::Between(from, to) => k >= from && k < to,
        }
    }

    /// Whether it selects no key at all.
    pub fn is_empty(&self) -> bool {
        matches!(*self, KeyRange::Between(from, to) if to <= from)
    }
}

// ---------------------------------------------------------------------------------------
// Checks.

/// A key for messages: [`show_bytes`] cut to 40 characters.
pub fn show_key(key: &[u8]) -> String {
    const SHOWN: usize = 40;
    let full = show_bytes(key);
    if full.chars().count() <= SHOWN {
        full
    } else {
        let head: String = full.chars().take(SHOWN).collect();
        format!("{head}... ({} bytes)", key.len())
    }
}

/// Bytes for people, whole: valid UTF-8 without control characters as quoted text
/// (as etcdctl shows it), anything else as `0x` and hex.
pub fn show_bytes(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(char::is_control) => format!("\"{s}\""),
        _ => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("0x{hex}")
        }
    }
}

fn check_key(what: &str, key: &[u8]) -> Result<(), String> {
    if key.is_empty() {
        return Err(format!(
            "{what}: empty key (keys are 1 to {KEY_BYTES_MAX} bytes)"
        ));
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(format!(
            "{what}: key of {} bytes exceeds the limit of {KEY_BYTES_MAX} bytes",
            key.len()
        ));
    }
    Ok(())
}

fn check_end(what: &str, end: &[u8]) -> Result<(), String> {
    if end.len() > KEY_BYTES_MAX {
        return Err(format!(
            "{what}: range end of {} bytes exceeds the limit of {KEY_BYTES_MAX} bytes",
            end.len()
        ));
    }
    Ok(())
}

fn check_value(what: &str, value: &[u8]) -> Result<(), String> {
    if value.len() > VALUE_BYTES_MAX {
        return Err(format!(
            "{what}: value of {} bytes exceeds the limit of {VALUE_BYTES_MAX} bytes (1 MiB)",
            value.len()
        ));
    }
    Ok(())
}

fn check_lease_id(what: &str, lease: i64) -> Result<(), String> {
    if lease < 0 {
        return Err(format!("{what}: lease id {lease} is negative"));
    }
    Ok(())
}

fn check_op(what: &str, op: &RequestOp) -> Result<(), String> {
    match op {
        RequestOp::Put(p) => {
            check_key(what, &p.key)?;
            check_value(what, &p.value)?;
            check_lease_id(what, p.lease)
        }
        RequestOp::Range(r) => {
            check_key(what, &r.key)?;
            check_end(what, &r.end)
        }
        RequestOp::DeleteRange(d) => {
            check_key(what, &d.key)?;
            check_end(what, &d.end)
        }
    }
}

/// etcd's `checkIntervals` for one branch: no key is put twice, and no key put lies in
/// a range the branch deletes (overlapping deletes are allowed). Either would make the
/// outcome depend on the order of the writes inside one revision.
fn check_branch_intervals(branch: &str, ops: &[RequestOp]) -> Result<(), String> {
    let mut puts: Vec<&[u8]> = ops
        .iter()
        .filter_map(|op| match op {
            RequestOp::Put(p) => Some(p.key.as_slice()),
            _ => None,
        })
        .collect();
    puts.sort_unstable();
    if let Some(w) = puts.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!(
            "duplicate key given in txn request: the {branch} branch puts key {} twice",
            show_key(w[0])
        ));
    }
    for op in ops {
        if let RequestOp::DeleteRange(d) = op {
            let range = KeyRange::new(&d.key, &d.end);
            if let Some(k) = puts.iter().find(|k| range.contains(k)) {
                return Err(format!(
                    "duplicate key given in txn request: the {branch} branch puts key {} \
                     and deletes it",
                    show_key(k)
                ));
            }
        }
    }
    Ok(())
}

fn request_bytes(op: &RequestOp) -> usize {
    match op {
        RequestOp::Put(p) => p.key.len() + p.value.len(),
        RequestOp::Range(r) => r.key.len() + r.end.len(),
        RequestOp::DeleteRange(d) => d.key.len() + d.end.len(),
    }
}

/// Refuse a command that etcd would refuse, or that exceeds this store's limits (see
/// the constants), naming the limit and the size found.
pub fn check(cmd: &KvCommand) -> Result<(), String> {
    let bytes = checked_bytes(cmd)?;
    if bytes > REQUEST_BYTES_MAX {
        return Err(format!(
            "{}: request of {bytes} key and value bytes exceeds the limit of \
             {REQUEST_BYTES_MAX} bytes",
            cmd.name()
        ));
    }
    Ok(())
}

/// [`check`] without the size limit: the key and value bytes of an acceptable command
/// (what [`REQUEST_BYTES_MAX`] bounds; the etcd gateway bounds its batches by it too).
pub fn checked_bytes(cmd: &KvCommand) -> Result<usize, String> {
    Ok(match cmd {
        KvCommand::Put(p) => {
            check_key("put", &p.key)?;
            check_value("put", &p.value)?;
            check_lease_id("put", p.lease)?;
            p.key.len() + p.value.len()
        }
        KvCommand::Range(r) => {
            check_key("range", &r.key)?;
            check_end("range", &r.end)?;
            r.key.len() + r.end.len()
        }
        KvCommand::DeleteRange(d) => {
            check_key("delete_range", &d.key)?;
            check_end("delete_range", &d.end)?;
            d.key.len() + d.end.len()
        }
        KvCommand::Txn(t) => {
            let most = t.compare.len().max(t.success.len()).max(t.failure.len());
            if most > TXN_OPS_MAX {
                return Err(format!(
                    "txn: too many operations in txn request ({} compares, {} success and {} \
                     failure operations; the limit is {TXN_OPS_MAX} of each)",
                    t.compare.len(),
                    t.success.len(),
                    t.failure.len()
                ));
            }
            let mut bytes = 0;
            for (i, c) in t.compare.iter().enumerate() {
                let what = format!("txn compare {i}");
                check_key(&what, &c.key)?;
                bytes += c.key.len();
                if let CompareTarget::Value(v) = &c.target {
                    check_value(&what, v)?;
                    bytes += v.len();
                }
            }
            for (branch, ops) in [("success", &t.success), ("failure", &t.failure)] {
                for (i, op) in ops.iter().enumerate() {
                    check_op(&format!("txn {branch} operation {i}"), op)?;
                    bytes += request_bytes(op);
                }
                check_branch_intervals(branch, ops)?;
            }
            bytes
        }
        KvCommand::Compact(_) | KvCommand::LeaseLeases => 0,
        KvCommand::Hash(h) => {
            if h.store && h.revision != 0 {
                return Err(format!(
                    "hash: the whole store is hashed at its current revision (revision {} \
                     asked)",
                    h.revision
                ));
            }
            0
        }
        KvCommand::LeaseGrant(g) => {
            if g.id < 0 {
                return Err(format!(
                    "lease_grant: lease id {} is negative (an id is positive, or 0 for \
                     one the store picks)",
                    g.id
                ));
            }
            0
        }
        KvCommand::LeaseRevoke(l)
        | KvCommand::LeaseExpire(l)
        | KvCommand::LeaseKeepAlive(l)
        | KvCommand::LeaseTimeToLive(l) => {
            if l.id <= 0 {
                return Err(format!("{}: lease id {} is not positive", cmd.name(), l.id));
            }
            0
        }
        KvCommand::Events(e) => {
            check_key("events", &e.key)?;
            check_end("events", &e.end)?;
            e.key.len() + e.end.len()
        }
        KvCommand::Batch(cmds) => {
            if cmds.is_empty() || cmds.len() > BATCH_MAX {
                return Err(format!(
                    "batch: {} requests; a batch holds 1 to {BATCH_MAX}",
                    cmds.len()
                ));
            }
            let mut bytes = 0;
            for (i, c) in cmds.iter().enumerate() {
                if !matches!(
                    c,
                    KvCommand::Put(_)
                        | KvCommand::Range(_)
                        | KvCommand::DeleteRange(_)
                        | KvCommand::Txn(_)
                        | KvCommand::LeaseKeepAlive(_)
                ) {
                    return Err(format!(
                        "batch: request {i} is a {}; a batch holds puts, ranges, delete \
                         ranges, transactions and lease keep-alives",
                        c.name()
                    ));
                }
                bytes += checked_bytes(c).map_err(|e| format!("batch request {i}: {e}"))?;
            }
            bytes
        }
    })
}

/// Whether `cmd` can never change the store: a range, or a transaction with no put or
/// delete in either branch.
pub fn is_read_only(cmd: &KvCommand) -> bool {
    match cmd {
        KvCommand::Range(_)
        | KvCommand::Events(_)
        | KvCommand::LeaseTimeToLive(_)
        | KvCommand::LeaseLeases
        | KvCommand::Hash(_) => true,
        KvCommand::Put(_)
        | KvCommand::DeleteRange(_)
        | KvCommand::Compact(_)
        | KvCommand::LeaseGrant(_)
        | KvCommand::LeaseRevoke(_)
        | KvCommand::LeaseExpire(_)
        | KvCommand::LeaseKeepAlive(_) => false,
        KvCommand::Txn(t) => t
            .success
            .iter()
            .chain(&t.failure)
            .all(|op| matches!(op, RequestOp::Range(_))),
        KvCommand::Batch(cmds) => cmds.iter().all(is_read_only),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends_follow_etcd() {
        assert_eq!(prefix_end(b"abc"), b"abd".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn key_ranges_follow_etcd_conventions() {
        let single = KeyRange::new(b"b", b"");
        assert!(single.contains(b"b") && !single.contains(b"ba"));
        let from = KeyRange::new(b"b", b"\0");
        assert!(from.contains(b"b") && from.contains(b"zz") && !from.contains(b"a"));
        let between = KeyRange::new(b"b", b"d");
        assert!(between.contains(b"c\xff") && !between.contains(b"d"));
        assert!(KeyRange::new(b"d", b"b").is_empty());
        assert!(!between.is_empty());
    }

    #[test]
    fn checks_name_the_limit_and_the_size() {
        let err = check(&KvCommand::put(vec![b'k'; 5000], "v")).unwrap_err();
        assert!(err.contains("5000 bytes") && err.contains("4096"), "{err}");
        let err = check(&KvCommand::put("", "v")).unwrap_err();
        assert!(err.contains("empty key"), "{err}");
        let err = check(&KvCommand::put("k", vec![0; VALUE_BYTES_MAX + 1])).unwrap_err();
        assert!(
            err.contains("1048577 bytes") && err.contains("1048576"),
            "{err}"
        );
        assert!(check(&KvCommand::put(
            vec![1; KEY_BYTES_MAX],
            vec![0; VALUE_BYTES_MAX]
        ))
        .is_ok());
        let err = check(&KvCommand::range("a", vec![b'z'; 4097])).unwrap_err();
        assert!(err.contains("range end of 4097 bytes"), "{err}");
        assert!(check(&KvCommand::get("")).is_err());
        assert!(check(&KvCommand::delete("")).is_err());
    }

    #[test]
    fn transactions_refuse_duplicate_writes_as_etcd() {
        let put = |k: &str| {
            RequestOp::Put(PutRequest {
                key: k.into(),
                value: b"v".to_vec(),
                prev_kv: false,
                lease: 0,
            })
        };
        let del = |k: &str, e: &str| {
            RequestOp::DeleteRange(DeleteRangeRequest {
                key: k.into(),
                end: e.into(),
                prev_kv: false,
            })
        };
        let txn = |success: Vec<RequestOp>, failure: Vec<RequestOp>| {
            KvCommand::Txn(TxnRequest {
                compare: vec![],
                success,
                failure,
            })
        };
        let err = check(&txn(vec![put("a"), put("a")], vec![])).unwrap_err();
        assert!(err.contains("duplicate key given in txn request"), "{err}");
        let err = check(&txn(vec![], vec![del("a", "c"), put("b")])).unwrap_err();
        assert!(err.contains("duplicate key given in txn request"), "{err}");
        // The same key in both branches, and overlapping deletes, are fine.
        assert!(check(&txn(vec![put("a")], vec![put("a")])).is_ok());
        assert!(check(&txn(vec![del("a", "c"), del("b", "d"), put("e")], vec![])).is_ok());
        let many = txn(
            (0..=TXN_OPS_MAX).map(|i| put(&i.to_string())).collect(),
            vec![],
        );
        let err = check(&many).unwrap_err();
        assert!(
            err.contains("too many operations") && err.contains("129"),
            "{err}"
        );
        let big = txn(
            vec![
                RequestOp::Put(PutRequest {
                    key: b"a".to_vec(),
                    value: vec![0; VALUE_BYTES_MAX],
                    prev_kv: false,
                    lease: 0,
                }),
                RequestOp::Put(PutRequest {
                    key: b"b".to_vec(),
                    value: vec![0; VALUE_BYTES_MAX],
                    prev_kv: false,
                    lease: 0,
                }),
            ],
            vec![],
        );
        let err = check(&big).unwrap_err();
        assert!(err.contains("exceeds the limit of 1572864 bytes"), "{err}");
    }

    #[test]
    fn read_only_commands() {
        assert!(is_read_only(&KvCommand::get("a")));
        assert!(!is_read_only(&KvCommand::put("a", "b")));
        assert!(!is_read_only(&KvCommand::delete("a")));
        let ro = KvCommand::Txn(TxnRequest {
            compare: vec![],
            success: vec![RequestOp::Range(RangeRequest::get("a"))],
            failure: vec![],
        });
        assert!(is_read_only(&ro));
        let rw = KvCommand::Txn(TxnRequest {
            compare: vec![],
            success: vec![],
            failure: vec![RequestOp::DeleteRange(DeleteRangeRequest {
                key: b"a".to_vec(),
                end: vec![],
                prev_kv: false,
            })],
        });
        assert!(!is_read_only(&rw));
    }
}
