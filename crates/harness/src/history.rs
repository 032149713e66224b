//! Histories: recording the bench's operations in DESIGN.md's JSON-lines format and
//! judging them with the checker (`partita check`).

use crate::bench::{Record, PRELOAD_STRIDE};
use anyhow::Context;
use partita_btree::{Op, OpResult};
use partita_checker::{Event, HistoryWriter, Initial, Status};
use std::path::Path;

pub fn to_event(r: &Record) -> Event {
    match &r.result {
        Some(res) => Event::new(r.client, &r.op, r.call_ns, r.ret_ns, Status::Ok, Some(res)),
        None => Event::new(r.client, &r.op, r.call_ns, r.ret_ns, Status::Info, None),
    }
}

pub fn write_history(path: &Path, records: &[Record]) -> anyhow::Result<()> {
    let mut w =
        HistoryWriter::create(path).with_context(|| format!("creating {}", path.display()))?;
    for r in records {
        w.write(&to_event(r))?;
    }
    w.flush()?;
    Ok(())
}

/// The JSON object of one operation and its result (for `partita kv --json`).
pub fn result_json(op: &Op, result: &OpResult) -> serde_json::Value {
    let e = Event::new(0, op, 0, 0, Status::Ok, Some(result));
    let mut v = serde_json::to_value(&e).expect("events serialize");
    if let Some(m) = v.as_object_mut() {
        for k in ["client", "call_ns", "ret_ns", "status"] {
            m.remove(k);
        }
    }
    v
}

/// The initial state a bench history starts from.
pub fn preload_initial(preload: u64) -> Initial {
    if preload == 0 {
        Initial::Empty
    } else {
        Initial::Preload {
            count: preload,
            stride: PRELOAD_STRIDE,
        }
    }
}

/// `partita check --history FILE`: exit 0 when linearizable, 1 otherwise.
pub fn check_command(path: &Path, preload: u64) -> anyhow::Result<i32> {
    let opts = partita_checker::CheckOptions {
        initial: preload_initial(preload),
        ..Default::default()
    };
    // The history says which service it is (its `service` field): each has its model.
    let report = partita_checker::check_history_file(path, &opts)?;
    println!("{report}");
    Ok(if report.is_linearizable() { 0 } else { 1 })
}

/// Judge a run: its records against the contents read back at the end, starting from
/// the `preload` keys the run began with (the checker's verdict with the final state).
pub fn judge(
    records: &[Record],
    preload: u64,
    final_entries: &[(u64, u64)],
) -> Result<partita_checker::CheckSummary, partita_checker::CheckError> {
    judge_from(records, preload_initial(preload), final_entries)
}

/// [`judge`] from any initial state (a GeoPaxos+ tree starts with the keys its cluster
/// file loads).
pub fn judge_from(
    records: &[Record],
    initial: Initial,
    final_entries: &[(u64, u64)],
) -> Result<partita_checker::CheckSummary, partita_checker::CheckError> {
    let events: Vec<Event> = records.iter().map(to_event).collect();
    let opts = partita_checker::CheckOptions {
        initial,
        ..Default::default()
    };
    partita_checker::check_with_final_state(&events, &opts, final_entries)
}
