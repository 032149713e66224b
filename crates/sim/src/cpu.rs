//! The CPU model: every handler a node runs costs it virtual time, from a cost table.
//!
//! A node handles one input at a time (the runtime's single event-loop task). An input
//! that arrives while the node is busy waits in the node's inbox; the outputs of a
//! handler leave when the handler's cost has elapsed. The cost of one handler is
//!
//! ```text
//! base(input kind) + recv_ns (peer messages and requests) + decode(input)
//!   + Σ sends   (send_ns)    + Σ persists (persist_ns)   + Σ replies (reply_ns)
//!   + Σ encode(every distinct message, record and reply produced)
//!   + B+tree work + commands executed * command_ns
//! ```
//!
//! where `base` is `tick_ns`, `request_ns` (`cs_request_ns` at a client-server
//! server, `batcher_request_ns` at a batcher that does not lead), `persisted_ns +
//! tokens * persisted_token_ns`, `peer_message_ns` (overridden per message kind by
//! `message_kind_ns`, e.g. `phase2a = 3000`), or 0 for a node's deferred work
//! (`NodeCore::on_continue`: the speculative execution a handler left, run as its own
//! step right after that handler's outputs left).
//!
//! **Batches.** A `forwardbatch` (a batcher's batch of client commands) costs the
//! leader what any peer message costs (its base, `recv_ns` and decode: the fixed cost
//! of one message, paid once per batch) plus `request_ns` for every command it carries,
//! since each goes through the same `Coordinator::on_command` work as a command sent
//! directly (`Work::forwarded_commands`). So a batch of N commands saves the leader
//! N − 1 receptions (`recv_ns`, the dominant cost of a small request), which is what
//! batchers are for. A node that does not lead drops a batch for the base cost alone.
//! `partita calibrate` measures `forwardbatch` at the leader and subtracts the
//! commands' `request_ns`, so the two parts are not counted twice.
//!
//! **Codec.** `decode(kind, bytes)` and `encode(kind, bytes)` come from the per-kind
//! line in `codec` (`[codec.phase2a] encode_ns, encode_byte_ps, decode_ns,
//! decode_byte_ps`; kinds are `Msg::kind()` names plus `request`, `reply`, `refused`
//! and `record`, a WAL record). A kind with such a line is encoded once per distinct
//! message, as the runtime does when it sends one message to several peers. A kind
//! without one falls back to the flat `byte_in_ps` / `byte_out_ps`, charged per byte
//! of every send (the original model, which the swarm's default table still uses).
//!
//! **B+tree.** Execution is charged once, in the handler that ran it, from the
//! replica's work counters (`partita_smr::ExecutionWork`, never rewound: a speculation
//! rolled back later did run): a speculated instance is charged where it was
//! speculated, not again where the decision releases its replies. Without
//! `btree_kind_ns`, every B+tree operation costs `btree_op_ns` (a batch of 7 counts
//! 7). With it, operations are charged by kind (`insert`, `delete`, `update`, `read`,
//! `next`, `prev`, `query`, the latter plus `btree_query_entry_ps` per entry
//! returned), as the replica executed them, replying or not. `command_ns` is the
//! replica's per-command overhead (reply cache, reply).
//!
//! A restart costs `restart_ns + recovered records * recover_record_ns`.
//!
//! **P-SMR worker threads** (paper 002) run on CPUs of their own, beside the node's
//! event loop: the handler that delivers a value only queues its commands (no
//! execution is charged there); each command a thread runs costs that thread its
//! B+tree work, `command_ns`, its reply, and, for a g_all command in synchronous
//! mode, `2 (K − 1) psmr_signal_ns` (a signal from each other thread and one back).
//!
//! **Disk.** `[disk]` gives the WAL's write and fsync latency for the experiment mode
//! ([`crate::bench`]); the swarm draws its own disk per seed and ignores it.
//!
//! The table is plain data with TOML load/save ([`CostTable::from_toml`],
//! [`CostTable::to_toml`]); unknown fields are refused, missing ones take the defaults
//! below (rough figures for a 2020s server core, chosen long ago for the swarm; the
//! fields added for `partita calibrate` default to "off", so an old table loads and
//! costs exactly what it did). `partita calibrate` measures a full table on this
//! machine (`crates/sim/calibration/this-machine.toml`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Encoding and decoding one message of a kind: a fixed cost plus a cost per byte of
/// the frame (picoseconds per byte).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CodecCost {
    pub encode_ns: u64,
    pub encode_byte_ps: u64,
    pub decode_ns: u64,
    pub decode_byte_ps: u64,
}

impl CodecCost {
    pub fn encode(&self, bytes: usize) -> u64 {
        self.encode_ns + bytes as u64 * self.encode_byte_ps / 1000
    }
    pub fn decode(&self, bytes: usize) -> u64 {
        self.decode_ns + bytes as u64 * self.decode_byte_ps / 1000
    }
}

/// The WAL's disk, for the experiment mode: writing one record (plus per byte), then
/// one fsync covering everything written (group commit).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskCost {
    pub write_ns: u64,
    pub write_byte_ps: u64,
    pub fsync_ns: u64,
}

impl Default for DiskCost {
    fn default() -> Self {
        DiskCost {
            write_ns: 10_000,
            write_byte_ps: 1_000,
            fsync_ns: 1_000_000,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CostTable {
    /// Handling one message from a peer (decode excluded).
    pub peer_message_ns: u64,
    /// Per message kind (`Msg::kind()`: phase1a, phase2a, ringvote, ...), replacing
    /// `peer_message_ns`.
    pub message_kind_ns: BTreeMap<String, u64>,
    /// Handling one client request (at the coordinator or any node that forwards it).
    pub request_ns: u64,
    /// One clock tick.
    pub tick_ns: u64,
    /// A batch of persist completions, plus each token in it.
    pub persisted_ns: u64,
    pub persisted_token_ns: u64,
    /// Decoding received bytes, picoseconds per byte (kinds without a `codec` line).
    pub byte_in_ps: u64,
    /// Encoding sent or persisted bytes, picoseconds per byte, per send (kinds without
    /// a `codec` line).
    pub byte_out_ps: u64,
    /// Handing one message to the network (the socket write).
    pub send_ns: u64,
    /// Handing one record to the WAL.
    pub persist_ns: u64,
    /// Sending one reply or refusal to a client.
    pub reply_ns: u64,
    /// One B+tree operation executed by the replica (a batch of 7 counts 7), when
    /// `btree_kind_ns` is empty (and for kinds it lacks).
    pub btree_op_ns: u64,
    /// Starting a node, plus each recovered WAL record replayed.
    pub restart_ns: u64,
    pub recover_record_ns: u64,
    /// Taking one message or request off a connection (socket read, event channel).
    pub recv_ns: u64,
    /// Handling one request at the client-server baseline's server (execution and
    /// reply excluded); `request_ns` when absent.
    pub cs_request_ns: Option<u64>,
    /// Handling one request at a batcher that does not lead (buffering it, and the
    /// batch it may send); `request_ns` when absent.
    pub batcher_request_ns: Option<u64>,
    /// Per command a replica executes, besides its B+tree operations.
    pub command_ns: u64,
    /// B+tree operations by kind: insert, delete, update, read, next, prev, query.
    pub btree_kind_ns: BTreeMap<String, u64>,
    /// A range query's cost per entry returned, picoseconds.
    pub btree_query_entry_ps: u64,
    /// Per message kind (and `request`, `reply`, `refused`, `record`): codec costs.
    pub codec: BTreeMap<String, CodecCost>,
    /// The WAL's disk (experiment mode only).
    pub disk: DiskCost,
    /// P-SMR: one signal between worker threads. A g_all command in synchronous mode
    /// costs the thread that runs it one signal from each other thread and one back to
    /// each (counted one after the other, though the others signal at once). Threads
    /// on cores of their own spin: `partita calibrate` measures a spinning handoff
    /// (37 ns between this VM's two vCPUs); the default allows for a cache line
    /// crossing sockets. A futex handoff (a sleeping thread woken) costs about 5 µs.
    pub psmr_signal_ns: u64,
}

impl Default for CostTable {
    fn default() -> Self {
        CostTable {
            peer_message_ns: 2_000,
            message_kind_ns: BTreeMap::new(),
            request_ns: 3_000,
            tick_ns: 300,
            persisted_ns: 1_000,
            persisted_token_ns: 200,
            byte_in_ps: 500,
            byte_out_ps: 500,
            send_ns: 1_500,
            persist_ns: 1_000,
            reply_ns: 1_500,
            btree_op_ns: 800,
            restart_ns: 1_000_000,
            recover_record_ns: 500,
            recv_ns: 0,
            cs_request_ns: None,
            batcher_request_ns: None,
            command_ns: 0,
            btree_kind_ns: BTreeMap::new(),
            btree_query_entry_ps: 0,
            codec: BTreeMap::new(),
            disk: DiskCost::default(),
            psmr_signal_ns: 100,
        }
    }
}

/// The B+tree operations kinds of the cost table, in the order of [`BtreeWork::known`].
pub const BTREE_KINDS: [&str; 7] = [
    "insert", "delete", "update", "read", "next", "prev", "query",
];

/// B+tree work of one handler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BtreeWork {
    /// Operations executed (the replica's counter).
    pub ops: u64,
    /// Of those, the ones whose kind is known, by kind ([`BTREE_KINDS`] order); any
    /// rest is charged at the mean of insert and delete.
    pub known: [u64; 7],
    /// Entries returned by range queries.
    pub query_entries: u64,
}

/// What a handler did, for costing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Bytes received, charged at `byte_in_ps` (inputs of kinds without a codec line).
    pub bytes_in: usize,
    pub sends: usize,
    pub persists: usize,
    pub replies: usize,
    /// Bytes produced, charged at `byte_out_ps` (kinds without a codec line, per send).
    pub bytes_out: usize,
    pub btree_ops: u64,
    /// Codec costs already computed from `codec` lines.
    pub codec_ns: u64,
    /// Commands the replica executed.
    pub commands: u64,
    /// Set when `btree_kind_ns` is in use: replaces `btree_ops * btree_op_ns`.
    pub btree: Option<BtreeWork>,
    /// Client commands a batch brought to the leader's coordinator (each charged
    /// `request_ns`).
    pub forwarded_commands: u64,
}

/// The kind of input a handler ran for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind<'a> {
    Peer(&'a str),
    Request,
    /// A request at the client-server baseline's server.
    ServerRequest,
    /// A request at a batcher that does not lead.
    BatcherRequest,
    Tick,
    Persisted(usize),
    /// A node's deferred work (no input: nothing received, no base cost).
    Continue,
}

impl CostTable {
    pub fn from_toml(text: &str) -> Result<CostTable, String> {
        toml::from_str(text).map_err(|e| format!("cost table: {e}"))
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a cost table serializes")
    }

    /// Whether B+tree operations are charged by kind.
    pub fn btree_by_kind(&self) -> bool {
        !self.btree_kind_ns.is_empty()
    }

    /// The codec line of a kind, if the table has one.
    pub fn codec_of(&self, kind: &str) -> Option<&CodecCost> {
        self.codec.get(kind)
    }

    fn btree_kind(&self, kind: &str) -> u64 {
        self.btree_kind_ns
            .get(kind)
            .copied()
            .unwrap_or(self.btree_op_ns)
    }

    /// Virtual nanoseconds of B+tree work.
    pub fn btree_cost(&self, w: &BtreeWork) -> u64 {
        let mut ns = 0;
        let mut known = 0;
        for (i, &n) in w.known.iter().enumerate() {
            if n == 0 {
                continue;
            }
            known += n;
            ns += n * self.btree_kind(BTREE_KINDS[i]);
        }
        ns += w.query_entries * self.btree_query_entry_ps / 1000;
        let mutation = (self.btree_kind("insert") + self.btree_kind("delete")) / 2;
        ns + w.ops.saturating_sub(known) * mutation
    }

    /// Virtual nanoseconds one handler costs.
    pub fn cost(&self, input: InputKind<'_>, work: &Work) -> u64 {
        let base = match input {
            InputKind::Peer(kind) => {
                self.recv_ns
                    + self
                        .message_kind_ns
                        .get(kind)
                        .copied()
                        .unwrap_or(self.peer_message_ns)
            }
            InputKind::Request => self.recv_ns + self.request_ns,
            InputKind::ServerRequest => {
                self.recv_ns + self.cs_request_ns.unwrap_or(self.request_ns)
            }
            InputKind::BatcherRequest => {
                self.recv_ns + self.batcher_request_ns.unwrap_or(self.request_ns)
            }
            InputKind::Tick => self.tick_ns,
            InputKind::Persisted(n) => self.persisted_ns + n as u64 * self.persisted_token_ns,
            InputKind::Continue => 0,
        };
        let btree = match &work.btree {
            Some(b) => self.btree_cost(b),
            None => work.btree_ops * self.btree_op_ns,
        };
        base + work.bytes_in as u64 * self.byte_in_ps / 1000
            + work.sends as u64 * self.send_ns
            + work.persists as u64 * self.persist_ns
            + work.replies as u64 * self.reply_ns
            + work.bytes_out as u64 * self.byte_out_ps / 1000
            + btree
            + work.codec_ns
            + work.commands * self.command_ns
            + work.forwarded_commands * self.request_ns
    }

    /// Virtual nanoseconds a (re)start costs.
    pub fn restart_cost(&self, recovered_records: usize) -> u64 {
        self.restart_ns + recovered_records as u64 * self.recover_record_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_round_trips_and_fills_defaults() {
        let mut t = CostTable::default();
        t.message_kind_ns.insert("phase2a".into(), 4_000);
        let back = CostTable::from_toml(&t.to_toml()).unwrap();
        assert_eq!(back, t);
        let partial = CostTable::from_toml("tick_ns = 7\n").unwrap();
        assert_eq!(partial.tick_ns, 7);
        assert_eq!(partial.request_ns, CostTable::default().request_ns);
        let err = CostTable::from_toml("tick_nanos = 7\n").unwrap_err();
        assert!(err.contains("tick_nanos"), "{err}");
    }

    #[test]
    fn cost_adds_up_the_work() {
        let mut t = CostTable::default();
        t.message_kind_ns.insert("phase2a".into(), 10_000);
        let w = Work {
            bytes_in: 2_000,
            sends: 2,
            persists: 1,
            replies: 0,
            bytes_out: 4_000,
            btree_ops: 3,
            ..Work::default()
        };
        let c = t.cost(InputKind::Peer("phase2a"), &w);
        assert_eq!(c, 10_000 + 1_000 + 3_000 + 1_000 + 2_000 + 2_400);
        assert_eq!(
            t.cost(InputKind::Peer("ringvote"), &Work::default()),
            t.peer_message_ns
        );
        assert_eq!(t.cost(InputKind::Persisted(5), &Work::default()), 2_000);
    }

    /// A table written before the calibration fields existed (the output of
    /// `partita sim --print-cost-table` then) loads and costs what it did.
    #[test]
    fn an_old_table_loads_unchanged() {
        let old = "peer_message_ns = 2000\nrequest_ns = 3000\ntick_ns = 300\n\
                   persisted_ns = 1000\npersisted_token_ns = 200\nbyte_in_ps = 500\n\
                   byte_out_ps = 500\nsend_ns = 1500\npersist_ns = 1000\nreply_ns = 1500\n\
                   btree_op_ns = 800\nrestart_ns = 1000000\nrecover_record_ns = 500\n\n\
                   [message_kind_ns]\n";
        let t = CostTable::from_toml(old).unwrap();
        assert_eq!(t, CostTable::default());
        let w = Work {
            bytes_in: 100,
            sends: 3,
            bytes_out: 300,
            btree_ops: 2,
            ..Work::default()
        };
        assert_eq!(
            t.cost(InputKind::Peer("phase2a"), &w),
            2_000 + 50 + 4_500 + 150 + 1_600
        );
    }

    #[test]
    fn codec_lines_and_btree_kinds_are_charged() {
        let mut t = CostTable::default();
        let c = CodecCost {
            encode_ns: 100,
            encode_byte_ps: 2_000,
            decode_ns: 50,
            decode_byte_ps: 1_000,
        };
        assert_eq!(c.encode(1_000), 2_100);
        assert_eq!(c.decode(1_000), 1_050);
        t.codec.insert("phase2a".into(), c);
        assert!(t.codec_of("phase2a").is_some() && t.codec_of("reply").is_none());
        t.btree_kind_ns.insert("insert".into(), 400);
        t.btree_kind_ns.insert("delete".into(), 600);
        t.btree_kind_ns.insert("query".into(), 1_000);
        t.btree_kind_ns.insert("next".into(), 100);
        t.btree_kind_ns.insert("prev".into(), 300);
        t.btree_query_entry_ps = 5_000;
        assert!(t.btree_by_kind());
        let mut known = [0; 7];
        known[6] = 1; // one query
        known[4] = 2; // two next
        known[5] = 1; // one prev
        let b = BtreeWork {
            ops: 10,
            known,
            query_entries: 1_000,
        };
        // 1 query (1000 + 1000 entries * 5 ns) + 2 next + 1 prev + 6 operations of
        // unknown kind at mean(insert, delete).
        assert_eq!(t.btree_cost(&b), 1_000 + 5_000 + 2 * 100 + 300 + 6 * 500);
        t.recv_ns = 700;
        t.cs_request_ns = Some(10);
        t.command_ns = 20;
        let w = Work {
            codec_ns: 33,
            commands: 2,
            btree: Some(b),
            ..Work::default()
        };
        assert_eq!(
            t.cost(InputKind::ServerRequest, &w),
            700 + 10 + 33 + 40 + t.btree_cost(&b)
        );
        assert_eq!(t.cost(InputKind::Request, &Work::default()), 700 + 3_000);
        assert_eq!(
            t.cost(InputKind::BatcherRequest, &Work::default()),
            700 + 3_000
        );
        t.batcher_request_ns = Some(400);
        assert_eq!(
            t.cost(InputKind::BatcherRequest, &Work::default()),
            700 + 400
        );
        assert_eq!(t.cost(InputKind::Continue, &Work::default()), 0);
        // A batch of 50 commands at the leader: one message, 50 times the
        // coordinator's work per command.
        let batch = Work {
            forwarded_commands: 50,
            ..Work::default()
        };
        assert_eq!(
            t.cost(InputKind::Peer("forwardbatch"), &batch),
            700 + t.peer_message_ns + 50 * 3_000
        );
        let back = CostTable::from_toml(&t.to_toml()).unwrap();
        assert_eq!(back, t);
    }
}
