//! Terse constructors for hand-written histories.
#![allow(dead_code)]

use partita_btree::{BatchOp, Op, OpResult};
use partita_checker::{CheckError, CheckOptions, Event, Status, Violation};

pub fn ok(client: u64, op: Op, call: u64, ret: u64, result: OpResult) -> Event {
    Event::new(client, &op, call, ret, Status::Ok, Some(&result))
}

pub fn info(client: u64, op: Op, call: u64, ret: u64) -> Event {
    Event::new(client, &op, call, ret, Status::Info, None)
}

pub fn fail(client: u64, op: Op, call: u64, ret: u64) -> Event {
    Event::new(client, &op, call, ret, Status::Fail, None)
}

pub fn insert(key: u64, value: u64) -> Op {
    Op::Insert { key, value }
}
pub fn delete(key: u64) -> Op {
    Op::Delete { key }
}
pub fn read(key: u64) -> Op {
    Op::Read { key }
}
pub fn update(key: u64, value: u64) -> Op {
    Op::Update { key, value }
}
pub fn query(min: u64, max: u64) -> Op {
    Op::Query { min, max }
}
pub fn next(key: u64) -> Op {
    Op::Next { key }
}
pub fn prev(key: u64) -> Op {
    Op::Prev { key }
}
pub fn batch(ops: &[BatchOp]) -> Op {
    Op::Batch(ops.to_vec())
}

/// Assert the history is linearizable (printing the account if not).
pub fn assert_linearizable(events: &[Event], opts: &CheckOptions) {
    if let Err(e) = partita_checker::check(events, opts) {
        panic!("expected linearizable, got {e}");
    }
}

/// Assert the history is reported as a violation and return it.
pub fn assert_violation(events: &[Event], opts: &CheckOptions) -> Violation {
    match partita_checker::check(events, opts) {
        Err(CheckError::NotLinearizable(v)) => *v,
        other => panic!("expected a violation, got {other:?}"),
    }
}
