//! Command execution with logical undo (paper 001 §IV).
//!
//! Rolling back a speculatively executed command does not restore the tree's shape,
//! only its contents: each change a command makes is recorded as the inverse logical
//! operation. Applying the undos of a sequence of commands in reverse order restores
//! exactly the prior contents (and so the prior digest).

use crate::ops::{BatchOp, Op, OpResult};
use crate::tree::BPlusTree;
use serde::{Deserialize, Serialize};

/// The inverse of one change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum UndoRecord {
    /// The command inserted `key`: remove it.
    RemoveInserted { key: u64 },
    /// The command deleted `(key, value)`: put it back.
    Reinsert { key: u64, value: u64 },
    /// The command replaced the value of `key`: restore `old`.
    RestoreValue { key: u64, old: u64 },
}

/// The undo records of one command, in execution order. Commands that change nothing
/// have an empty undo. A single record (the common case) is stored inline, so
/// executing a non-batch command never allocates for its undo.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Undo {
    first: Option<UndoRecord>,
    rest: Vec<UndoRecord>,
}

impl Undo {
    pub fn new() -> Undo {
        Undo::default()
    }

    pub fn push(&mut self, record: UndoRecord) {
        if self.first.is_none() {
            debug_assert!(self.rest.is_empty());
            self.first = Some(record);
        } else {
            self.rest.push(record);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub fn len(&self) -> usize {
        self.first.iter().len() + self.rest.len()
    }

    /// The records in execution order.
    pub fn records(&self) -> impl DoubleEndedIterator<Item = &UndoRecord> + '_ {
        self.first.iter().chain(self.rest.iter())
    }
}

impl BPlusTree {
    /// Execute `op` and return its result with the undo that reverts it.
    pub fn execute(&mut self, op: &Op) -> (OpResult, Undo) {
        let mut undo = Undo::new();
        let result = match *op {
            Op::Insert { key, value } => {
                OpResult::Inserted(self.insert_logged(key, value, &mut undo))
            }
            Op::Delete { key } => OpResult::Removed(self.delete_logged(key, &mut undo)),
            Op::Read { key } => OpResult::Value(self.read(key)),
            Op::Update { key, value } => {
                let old = self.update(key, value);
                if let Some(old) = old {
                    undo.push(UndoRecord::RestoreValue { key, old });
                }
                OpResult::Old(old)
            }
            Op::Query { min, max } => OpResult::Entries(self.query(min, max)),
            Op::Next { key } => OpResult::Entry(self.get_next(key)),
            Op::Prev { key } => OpResult::Entry(self.get_prev(key)),
            Op::Batch(ref ops) => OpResult::Batch(
                ops.iter()
                    .map(|b| match *b {
                        BatchOp::Insert { key, value } => {
                            OpResult::Inserted(self.insert_logged(key, value, &mut undo))
                        }
                        BatchOp::Delete { key } => {
                            OpResult::Removed(self.delete_logged(key, &mut undo))
                        }
                    })
                    .collect(),
            ),
        };
        (result, undo)
    }

    /// Execute `op` when no rollback will be needed.
    pub fn apply(&mut self, op: &Op) -> OpResult {
        self.execute(op).0
    }

    fn insert_logged(&mut self, key: u64, value: u64, undo: &mut Undo) -> bool {
        let inserted = self.insert(key, value);
        if inserted {
            undo.push(UndoRecord::RemoveInserted { key });
        }
        inserted
    }

    fn delete_logged(&mut self, key: u64, undo: &mut Undo) -> Option<u64> {
        let removed = self.delete(key);
        if let Some(value) = removed {
            undo.push(UndoRecord::Reinsert { key, value });
        }
        removed
    }

    /// Revert one command: apply its records in reverse order. Undos of several
    /// commands must be applied newest first; anything else is a caller bug, caught by
    /// the assertions (each record's inverse must find the state its command left).
    pub fn apply_undo(&mut self, undo: &Undo) {
        for record in undo.records().rev() {
            match *record {
                UndoRecord::RemoveInserted { key } => {
                    assert!(
                        self.delete(key).is_some(),
                        "undo: inserted key {key} is missing"
                    );
                }
                UndoRecord::Reinsert { key, value } => {
                    assert!(
                        self.insert(key, value),
                        "undo: deleted key {key} is present"
                    );
                }
                UndoRecord::RestoreValue { key, old } => {
                    assert!(
                        self.update(key, old).is_some(),
                        "undo: updated key {key} is missing"
                    );
                }
            }
        }
    }
}
