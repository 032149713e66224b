//! The B+tree operations of the four papers and their results.
//!
//! Semantics (paper 001 §IV, paper 002 §V-B, paper 004 Table III):
//! - `Insert` adds (k, v) only if k is absent; inserting an existing key changes nothing.
//! - `Delete` removes k if present and returns the removed value.
//! - `Query` returns every entry with `min <= k <= max` in key order (empty when min > max).
//! - `Read` returns the value of k; `Update` replaces the value of an existing k and
//!   returns the old one (absent: nothing changes).
//! - `Next` is the smallest entry with key > k, `Prev` the largest with key < k.
//! - `Batch` is several inserts and deletes executed as one command (paper 001 workload (c)).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    Insert { key: u64, value: u64 },
    Delete { key: u64 },
    Read { key: u64 },
    Update { key: u64, value: u64 },
    Query { min: u64, max: u64 },
    Next { key: u64 },
    Prev { key: u64 },
    Batch(Vec<BatchOp>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BatchOp {
    Insert { key: u64, value: u64 },
    Delete { key: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpResult {
    Inserted(bool),
    Removed(Option<u64>),
    Value(Option<u64>),
    Old(Option<u64>),
    Entries(Vec<(u64, u64)>),
    Entry(Option<(u64, u64)>),
    Batch(Vec<OpResult>),
}

impl Op {
    /// Whether executing the operation can change the tree. Read-only operations are
    /// executed only by the replica the client chose (paper 001 §IV).
    pub fn is_mutation(&self) -> bool {
        matches!(
            self,
            Op::Insert { .. } | Op::Delete { .. } | Op::Update { .. } | Op::Batch(_)
        )
    }

    /// Number of B+tree operations the command stands for (a batch of seven counts 7).
    pub fn btree_ops(&self) -> usize {
        match self {
            Op::Batch(ops) => ops.len(),
            _ => 1,
        }
    }

    /// Lowercase name as used in histories and output.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Insert { .. } => "insert",
            Op::Delete { .. } => "delete",
            Op::Read { .. } => "read",
            Op::Update { .. } => "update",
            Op::Query { .. } => "query",
            Op::Next { .. } => "next",
            Op::Prev { .. } => "prev",
            Op::Batch(_) => "batch",
        }
    }
}

impl From<BatchOp> for Op {
    fn from(b: BatchOp) -> Op {
        match b {
            BatchOp::Insert { key, value } => Op::Insert { key, value },
            BatchOp::Delete { key } => Op::Delete { key },
        }
    }
}
