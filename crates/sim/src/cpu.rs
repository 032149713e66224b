//! The CPU model: every handler a node runs costs it virtual time, from a cost table.
//!
//! A node handles one input at a time (the runtime's single event-loop task). An input
//! that arrives while the node is busy waits in the node's inbox; the outputs of a
//! handler leave when the handler's cost has elapsed. The cost of one handler is
//!
//! ```text
//! base(input kind) + bytes_in * byte_in_ps / 1000
//!   + Σ sends   (send_ns + bytes * byte_out_ps / 1000)
//!   + Σ persists(persist_ns + bytes * byte_out_ps / 1000)
//!   + Σ replies (reply_ns + bytes * byte_out_ps / 1000)
//!   + B+tree operations executed * btree_op_ns
//! ```
//!
//! where `base` is `tick_ns`, `request_ns`, `persisted_ns + tokens * persisted_token_ns`,
//! or `peer_message_ns` (overridden per message kind by `message_kind_ns`, e.g.
//! `phase2a = 3000`). A restart costs `restart_ns + recovered records * recover_record_ns`.
//!
//! The table is plain data with TOML load/save ([`CostTable::from_toml`],
//! [`CostTable::to_toml`]); unknown fields are refused, missing ones take the defaults
//! below (rough figures for a 2020s server core; `partita calibrate` is meant to
//! measure them).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CostTable {
    /// Handling one message from a peer (decode excluded).
    pub peer_message_ns: u64,
    /// Per message kind (`Msg::kind()`: phase1a, phase2a, ringvote, ...), replacing
    /// `peer_message_ns`.
    pub message_kind_ns: BTreeMap<String, u64>,
    /// Handling one client request.
    pub request_ns: u64,
    /// One clock tick.
    pub tick_ns: u64,
    /// A batch of persist completions, plus each token in it.
    pub persisted_ns: u64,
    pub persisted_token_ns: u64,
    /// Decoding received bytes, picoseconds per byte.
    pub byte_in_ps: u64,
    /// Encoding sent or persisted bytes, picoseconds per byte.
    pub byte_out_ps: u64,
    /// Handing one message to the network.
    pub send_ns: u64,
    /// Handing one record to the WAL.
    pub persist_ns: u64,
    /// Sending one reply or refusal to a client.
    pub reply_ns: u64,
    /// One B+tree operation executed by the replica (a batch of 7 counts 7).
    pub btree_op_ns: u64,
    /// Starting a node, plus each recovered WAL record replayed.
    pub restart_ns: u64,
    pub recover_record_ns: u64,
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
        }
    }
}

/// What a handler did, for costing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    pub bytes_in: usize,
    pub sends: usize,
    pub persists: usize,
    pub replies: usize,
    pub bytes_out: usize,
    pub btree_ops: u64,
}

/// The kind of input a handler ran for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind<'a> {
    Peer(&'a str),
    Request,
    Tick,
    Persisted(usize),
}

impl CostTable {
    pub fn from_toml(text: &str) -> Result<CostTable, String> {
        toml::from_str(text).map_err(|e| format!("cost table: {e}"))
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a cost table serializes")
    }

    /// Virtual nanoseconds one handler costs.
    pub fn cost(&self, input: InputKind<'_>, work: &Work) -> u64 {
        let base = match input {
            InputKind::Peer(kind) => self
                .message_kind_ns
                .get(kind)
                .copied()
                .unwrap_or(self.peer_message_ns),
            InputKind::Request => self.request_ns,
            InputKind::Tick => self.tick_ns,
            InputKind::Persisted(n) => self.persisted_ns + n as u64 * self.persisted_token_ns,
        };
        base + work.bytes_in as u64 * self.byte_in_ps / 1000
            + work.sends as u64 * self.send_ns
            + work.persists as u64 * self.persist_ns
            + work.replies as u64 * self.reply_ns
            + work.bytes_out as u64 * self.byte_out_ps / 1000
            + work.btree_ops * self.btree_op_ns
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
        };
        let c = t.cost(InputKind::Peer("phase2a"), &w);
        assert_eq!(c, 10_000 + 1_000 + 3_000 + 1_000 + 2_000 + 2_400);
        assert_eq!(
            t.cost(InputKind::Peer("ringvote"), &Work::default()),
            t.peer_message_ns
        );
        assert_eq!(t.cost(InputKind::Persisted(5), &Work::default()), 2_000);
    }
}
