//! Client histories: one JSON object per operation, one per line.
//!
//! ```text
//! {"client":3,"op":"insert","key":17,"value":5,"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"inserted":true}}
//! ```
//!
//! The operation's own fields are flattened into the event (`key`, `value`, `min`, `max`,
//! `ops`). Which fields an operation takes, and which result goes with it:
//!
//! | `op`     | fields         | `result` (status `ok` only)           |
//! |----------|----------------|---------------------------------------|
//! | `insert` | `key`, `value` | `{"inserted":bool}`                   |
//! | `delete` | `key`          | `{"removed":V\|null}`                 |
//! | `read`   | `key`          | `{"value":V\|null}`                   |
//! | `update` | `key`, `value` | `{"old":V\|null}`                     |
//! | `query`  | `min`, `max`   | `{"entries":[[k,v],...]}`             |
//! | `next`   | `key`          | `{"entry":[k,v]\|null}`               |
//! | `prev`   | `key`          | `{"entry":[k,v]\|null}`               |
//! | `batch`  | `ops`          | `{"results":[{..},...]}`, one per op  |
//!
//! A batch's `ops` are `{"op":"insert","key":k,"value":v}` and `{"op":"delete","key":k}`.
//! `status` is `ok`, `fail` (definitely not applied) or `info` (outcome unknown). `result`
//! is present exactly when the status is `ok`, and must be of the kind the operation
//! returns; a line that breaks any of this is refused with its line number, because a
//! checker that guesses about malformed input can only hide recorder bugs. Fields this
//! format does not know are ignored, so recorders may add annotations.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;

use partita_btree::{BatchOp, Op, OpResult};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How an operation ended, as far as the client knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Completed; the result is known.
    Ok,
    /// Definitely not applied (refused before being ordered).
    Fail,
    /// Unknown: the client gave up (timeout, lost connection). The operation may take
    /// effect at any time after its invocation, or never.
    Info,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::Fail => "fail",
            Status::Info => "info",
        })
    }
}

/// One operation of a client history.
///
/// Serializes to (and parses from) exactly one JSON object of the history format; see
/// the [module documentation](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The client that issued it. A client has at most one operation outstanding, except
    /// that it may move on after giving up on one (`info`).
    pub client: u64,
    pub op: Op,
    /// Invocation time, ns, on a clock shared by every client of the history.
    pub call_ns: u64,
    /// Response time (or, for `info`, the time the client gave up), same clock.
    pub ret_ns: u64,
    pub status: Status,
    /// The result, present exactly when `status` is [`Status::Ok`].
    pub result: Option<OpResult>,
}

impl Event {
    /// An event from the wire types. The result is kept only for [`Status::Ok`]: for the
    /// other statuses there is no result by definition.
    pub fn new(
        client: u64,
        op: &Op,
        call_ns: u64,
        ret_ns: u64,
        status: Status,
        result: Option<&OpResult>,
    ) -> Event {
        Event {
            client,
            op: op.clone(),
            call_ns,
            ret_ns,
            status,
            result: if status == Status::Ok {
                result.cloned()
            } else {
                None
            },
        }
    }

    /// The operation, as submitted.
    pub fn to_op(&self) -> Op {
        self.op.clone()
    }

    /// One-line human-readable account, used in violation reports.
    pub fn describe(&self) -> String {
        let outcome = match (&self.status, &self.result) {
            (Status::Ok, Some(r)) => format!("returned {}", fmt_result(r)),
            (Status::Ok, None) => "returned nothing".to_string(),
            (Status::Fail, _) => "failed".to_string(),
            (Status::Info, _) => "had an unknown outcome".to_string(),
        };
        format!(
            "client {} {} [call {} ns, ret {} ns] {}",
            self.client,
            fmt_op(&self.op),
            self.call_ns,
            self.ret_ns,
            outcome
        )
    }
}

/// Compact rendering of an operation, e.g. `insert(17, 5)` or `query(0..=10)`.
pub fn fmt_op(op: &Op) -> String {
    match op {
        Op::Insert { key, value } => format!("insert({key}, {value})"),
        Op::Delete { key } => format!("delete({key})"),
        Op::Read { key } => format!("read({key})"),
        Op::Update { key, value } => format!("update({key}, {value})"),
        Op::Query { min, max } => format!("query({min}..={max})"),
        Op::Next { key } => format!("next({key})"),
        Op::Prev { key } => format!("prev({key})"),
        Op::Batch(ops) => {
            let parts: Vec<String> = ops.iter().map(|b| fmt_op(&Op::from(*b))).collect();
            format!("batch[{}]", parts.join(", "))
        }
    }
}

/// Compact rendering of a result, e.g. `value=5`, `removed=null`,
/// `entries=[(1,1), (3,3)]` (long lists are elided in the middle).
pub fn fmt_result(r: &OpResult) -> String {
    fn opt(v: &Option<u64>) -> String {
        v.map_or_else(|| "null".to_string(), |v| v.to_string())
    }
    match r {
        OpResult::Inserted(b) => format!("inserted={b}"),
        OpResult::Removed(v) => format!("removed={}", opt(v)),
        OpResult::Value(v) => format!("value={}", opt(v)),
        OpResult::Old(v) => format!("old={}", opt(v)),
        OpResult::Entries(es) => format!("entries={}", fmt_entries(es)),
        OpResult::Entry(e) => match e {
            Some((k, v)) => format!("entry=({k},{v})"),
            None => "entry=null".to_string(),
        },
        OpResult::Batch(rs) => {
            let parts: Vec<String> = rs.iter().map(fmt_result).collect();
            format!("results=[{}]", parts.join(", "))
        }
    }
}

/// `[(k,v), ...]`, eliding the middle of long lists so reports stay one line.
pub(crate) fn fmt_entries(es: &[(u64, u64)]) -> String {
    const SHOWN: usize = 8;
    let show =
        |s: &[(u64, u64)]| -> Vec<String> { s.iter().map(|(k, v)| format!("({k},{v})")).collect() };
    if es.len() <= SHOWN {
        format!("[{}]", show(es).join(", "))
    } else {
        format!(
            "[{}, ... {} more ..., {}] ({} entries)",
            show(&es[..SHOWN / 2]).join(", "),
            es.len() - SHOWN,
            show(&es[es.len() - SHOWN / 2..]).join(", "),
            es.len()
        )
    }
}

// ---------------------------------------------------------------------------------------
// Wire representation. Events go through these flat structs so that the field names and
// their order are exactly those of the format, and so that parsing can say precisely
// what is wrong with a line.

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RawResult {
    Inserted(bool),
    Removed(Option<u64>),
    Value(Option<u64>),
    Old(Option<u64>),
    Entries(Vec<(u64, u64)>),
    Entry(Option<(u64, u64)>),
    Results(Vec<RawResult>),
}

/// Borrowing twin of [`RawResult`] so that writing an event never copies a large query
/// result.
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum RawResultRef<'a> {
    Inserted(bool),
    Removed(Option<u64>),
    Value(Option<u64>),
    Old(Option<u64>),
    Entries(&'a [(u64, u64)]),
    Entry(Option<(u64, u64)>),
    Results(Vec<RawResultRef<'a>>),
}

impl<'a> From<&'a OpResult> for RawResultRef<'a> {
    fn from(r: &'a OpResult) -> Self {
        match r {
            OpResult::Inserted(b) => RawResultRef::Inserted(*b),
            OpResult::Removed(v) => RawResultRef::Removed(*v),
            OpResult::Value(v) => RawResultRef::Value(*v),
            OpResult::Old(v) => RawResultRef::Old(*v),
            OpResult::Entries(es) => RawResultRef::Entries(es),
            OpResult::Entry(e) => RawResultRef::Entry(*e),
            OpResult::Batch(rs) => RawResultRef::Results(rs.iter().map(Into::into).collect()),
        }
    }
}

impl From<RawResult> for OpResult {
    fn from(r: RawResult) -> Self {
        match r {
            RawResult::Inserted(b) => OpResult::Inserted(b),
            RawResult::Removed(v) => OpResult::Removed(v),
            RawResult::Value(v) => OpResult::Value(v),
            RawResult::Old(v) => OpResult::Old(v),
            RawResult::Entries(es) => OpResult::Entries(es),
            RawResult::Entry(e) => OpResult::Entry(e),
            RawResult::Results(rs) => OpResult::Batch(rs.into_iter().map(Into::into).collect()),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct RawBatchOp {
    op: String,
    key: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<u64>,
}

#[derive(Serialize)]
struct RawEventRef<'a> {
    client: u64,
    op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ops: Option<Vec<RawBatchOp>>,
    call_ns: u64,
    ret_ns: u64,
    status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<RawResultRef<'a>>,
}

#[derive(Deserialize)]
struct RawEvent {
    client: u64,
    op: String,
    #[serde(default)]
    key: Option<u64>,
    #[serde(default)]
    value: Option<u64>,
    #[serde(default)]
    min: Option<u64>,
    #[serde(default)]
    max: Option<u64>,
    #[serde(default)]
    ops: Option<Vec<RawBatchOp>>,
    call_ns: u64,
    ret_ns: u64,
    status: Status,
    #[serde(default)]
    result: Option<RawResult>,
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut raw = RawEventRef {
            client: self.client,
            op: self.op.name(),
            key: None,
            value: None,
            min: None,
            max: None,
            ops: None,
            call_ns: self.call_ns,
            ret_ns: self.ret_ns,
            status: self.status,
            result: self.result.as_ref().map(Into::into),
        };
        match &self.op {
            Op::Insert { key, value } | Op::Update { key, value } => {
                raw.key = Some(*key);
                raw.value = Some(*value);
            }
            Op::Delete { key } | Op::Read { key } | Op::Next { key } | Op::Prev { key } => {
                raw.key = Some(*key)
            }
            Op::Query { min, max } => {
                raw.min = Some(*min);
                raw.max = Some(*max);
            }
            Op::Batch(ops) => {
                raw.ops = Some(
                    ops.iter()
                        .map(|b| match *b {
                            BatchOp::Insert { key, value } => RawBatchOp {
                                op: "insert".into(),
                                key,
                                value: Some(value),
                            },
                            BatchOp::Delete { key } => RawBatchOp {
                                op: "delete".into(),
                                key,
                                value: None,
                            },
                        })
                        .collect(),
                )
            }
        }
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Event, D::Error> {
        let raw = RawEvent::deserialize(d)?;
        Event::try_from(raw).map_err(serde::de::Error::custom)
    }
}

/// Whether `r` is the kind of result `op` returns (batches: one matching result per op).
fn result_fits(op: &Op, r: &OpResult) -> bool {
    match (op, r) {
        (Op::Insert { .. }, OpResult::Inserted(_))
        | (Op::Delete { .. }, OpResult::Removed(_))
        | (Op::Read { .. }, OpResult::Value(_))
        | (Op::Update { .. }, OpResult::Old(_))
        | (Op::Query { .. }, OpResult::Entries(_))
        | (Op::Next { .. } | Op::Prev { .. }, OpResult::Entry(_)) => true,
        (Op::Batch(ops), OpResult::Batch(rs)) => {
            ops.len() == rs.len()
                && ops
                    .iter()
                    .zip(rs)
                    .all(|(b, r)| result_fits(&Op::from(*b), r))
        }
        _ => false,
    }
}

impl TryFrom<RawEvent> for Event {
    type Error = String;

    fn try_from(raw: RawEvent) -> Result<Event, String> {
        let name = raw.op.as_str();
        // Which of the optional fields this op takes; any other one present is an error.
        let (needs_key, needs_value, needs_range, needs_ops) = match name {
            "insert" | "update" => (true, true, false, false),
            "delete" | "read" | "next" | "prev" => (true, false, false, false),
            "query" => (false, false, true, false),
            "batch" => (false, false, false, true),
            other => return Err(format!("unknown op `{other}`")),
        };
        let field = |present: bool, needed: bool, what: &str| -> Result<(), String> {
            match (present, needed) {
                (false, true) => Err(format!("{name} needs field `{what}`")),
                (true, false) => Err(format!("{name} takes no field `{what}`")),
                _ => Ok(()),
            }
        };
        field(raw.key.is_some(), needs_key, "key")?;
        field(raw.value.is_some(), needs_value, "value")?;
        field(raw.min.is_some(), needs_range, "min")?;
        field(raw.max.is_some(), needs_range, "max")?;
        field(raw.ops.is_some(), needs_ops, "ops")?;
        let key = raw.key.unwrap_or_default();
        let value = raw.value.unwrap_or_default();
        let op = match name {
            "insert" => Op::Insert { key, value },
            "update" => Op::Update { key, value },
            "delete" => Op::Delete { key },
            "read" => Op::Read { key },
            "next" => Op::Next { key },
            "prev" => Op::Prev { key },
            "query" => Op::Query {
                min: raw.min.unwrap_or_default(),
                max: raw.max.unwrap_or_default(),
            },
            _ => {
                let mut ops = Vec::new();
                for (i, b) in raw.ops.unwrap_or_default().into_iter().enumerate() {
                    ops.push(match (b.op.as_str(), b.value) {
                        ("insert", Some(value)) => BatchOp::Insert { key: b.key, value },
                        ("insert", None) => {
                            return Err(format!("batch op {i}: insert needs field `value`"))
                        }
                        ("delete", None) => BatchOp::Delete { key: b.key },
                        ("delete", Some(_)) => {
                            return Err(format!("batch op {i}: delete takes no field `value`"))
                        }
                        (other, _) => {
                            return Err(format!(
                            "batch op {i}: `{other}` is not allowed in a batch (insert or delete)"
                        ))
                        }
                    });
                }
                Op::Batch(ops)
            }
        };
        let result: Option<OpResult> = raw.result.map(Into::into);
        match (raw.status, &result) {
            (Status::Ok, None) => return Err("status ok needs a `result`".into()),
            (Status::Fail | Status::Info, Some(_)) => {
                return Err(format!(
                    "status {} must not carry a `result` (only ok does)",
                    raw.status
                ))
            }
            (Status::Ok, Some(r)) if !result_fits(&op, r) => {
                return Err(format!(
                    "result {} does not fit {}",
                    fmt_result(r),
                    fmt_op(&op)
                ))
            }
            _ => {}
        }
        if raw.ret_ns < raw.call_ns {
            return Err(format!(
                "ret_ns {} is before call_ns {}",
                raw.ret_ns, raw.call_ns
            ));
        }
        Ok(Event {
            client: raw.client,
            op,
            call_ns: raw.call_ns,
            ret_ns: raw.ret_ns,
            status: raw.status,
            result,
        })
    }
}

// ---------------------------------------------------------------------------------------

/// Reading a history failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read history {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("history {what}, line {line}: {message}")]
    Parse {
        what: String,
        /// 1-based line number.
        line: usize,
        message: String,
    },
}

/// Buffered JSON-lines writer of events.
pub struct HistoryWriter<W: Write> {
    out: BufWriter<W>,
    written: u64,
}

impl HistoryWriter<File> {
    /// Create (truncate) `path` and write to it.
    pub fn create(path: impl AsRef<Path>) -> io::Result<HistoryWriter<File>> {
        Ok(HistoryWriter::new(File::create(path)?))
    }
}

impl<W: Write> HistoryWriter<W> {
    pub fn new(out: W) -> HistoryWriter<W> {
        HistoryWriter {
            out: BufWriter::new(out),
            written: 0,
        }
    }

    /// Append one event as one line.
    pub fn write(&mut self, e: &Event) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, e)?;
        self.out.write_all(b"\n")?;
        self.written += 1;
        Ok(())
    }

    /// Events written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flush and hand back the underlying writer.
    pub fn into_inner(self) -> io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
}

/// Read a history file. Blank lines are skipped; any malformed line is an error naming
/// its line number.
pub fn read_history(path: impl AsRef<Path>) -> Result<Vec<Event>, Error> {
    let path = path.as_ref();
    let what = path.display().to_string();
    let file = File::open(path).map_err(|source| Error::Io {
        what: what.clone(),
        source,
    })?;
    parse_lines(BufReader::new(file), &what)
}

/// Read a history from any reader (see [`read_history`]).
pub fn read_history_from(reader: impl Read) -> Result<Vec<Event>, Error> {
    parse_lines(BufReader::new(reader), "<input>")
}

fn parse_lines(reader: impl BufRead, what: &str) -> Result<Vec<Event>, Error> {
    let mut events = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| Error::Io {
            what: what.to_string(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let event = serde_json::from_str::<Event>(&line).map_err(|e| Error::Parse {
            what: what.to_string(),
            line: i + 1,
            message: strip_position(&e),
        })?;
        events.push(event);
    }
    Ok(events)
}

/// serde_json appends "at line 1 column N"; the line is always 1 here since each line is
/// parsed alone, so keep only the column (when there is one: errors about the decoded
/// event as a whole have none).
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let base = match text.rfind(" at line ") {
        Some(i) => &text[..i],
        None => &text,
    };
    match e.column() {
        0 => base.to_string(),
        c => format!("{base} (column {c})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(op: Op, result: OpResult) -> Event {
        Event::new(3, &op, 1200, 1960, Status::Ok, Some(&result))
    }

    #[test]
    fn exact_wire_format() {
        let e = ok(Op::Insert { key: 17, value: 5 }, OpResult::Inserted(true));
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"client":3,"op":"insert","key":17,"value":5,"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"inserted":true}}"#
        );
        let cases = [
            (
                ok(Op::Delete { key: 1 }, OpResult::Removed(None)),
                r#"{"client":3,"op":"delete","key":1,"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"removed":null}}"#,
            ),
            (
                ok(Op::Read { key: 1 }, OpResult::Value(Some(4))),
                r#"{"client":3,"op":"read","key":1,"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"value":4}}"#,
            ),
            (
                ok(Op::Update { key: 1, value: 2 }, OpResult::Old(Some(4))),
                r#"{"client":3,"op":"update","key":1,"value":2,"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"old":4}}"#,
            ),
            (
                ok(
                    Op::Query { min: 0, max: 9 },
                    OpResult::Entries(vec![(1, 2), (3, 4)]),
                ),
                r#"{"client":3,"op":"query","min":0,"max":9,"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"entries":[[1,2],[3,4]]}}"#,
            ),
            (
                ok(Op::Next { key: 1 }, OpResult::Entry(Some((3, 4)))),
                r#"{"client":3,"op":"next","key":1,"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"entry":[3,4]}}"#,
            ),
            (
                ok(Op::Prev { key: 1 }, OpResult::Entry(None)),
                r#"{"client":3,"op":"prev","key":1,"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"entry":null}}"#,
            ),
            (
                ok(
                    Op::Batch(vec![
                        BatchOp::Insert { key: 1, value: 2 },
                        BatchOp::Delete { key: 3 },
                    ]),
                    OpResult::Batch(vec![OpResult::Inserted(true), OpResult::Removed(None)]),
                ),
                r#"{"client":3,"op":"batch","ops":[{"op":"insert","key":1,"value":2},{"op":"delete","key":3}],"call_ns":1200,"ret_ns":1960,"status":"ok","result":{"results":[{"inserted":true},{"removed":null}]}}"#,
            ),
            (
                Event::new(3, &Op::Delete { key: 1 }, 1200, 1960, Status::Info, None),
                r#"{"client":3,"op":"delete","key":1,"call_ns":1200,"ret_ns":1960,"status":"info"}"#,
            ),
            (
                Event::new(3, &Op::Read { key: 1 }, 1200, 1960, Status::Fail, None),
                r#"{"client":3,"op":"read","key":1,"call_ns":1200,"ret_ns":1960,"status":"fail"}"#,
            ),
        ];
        for (event, line) in cases {
            assert_eq!(serde_json::to_string(&event).unwrap(), line);
            assert_eq!(serde_json::from_str::<Event>(line).unwrap(), event);
        }
    }

    #[test]
    fn new_keeps_result_only_for_ok_and_converts_back() {
        let op = Op::Insert { key: 1, value: 2 };
        let r = OpResult::Inserted(true);
        let e = Event::new(1, &op, 0, 1, Status::Info, Some(&r));
        assert_eq!(e.result, None);
        assert_eq!(e.to_op(), op);
        let e = Event::new(1, &op, 0, 1, Status::Ok, Some(&r));
        assert_eq!(e.result, Some(r));
    }

    #[test]
    fn writer_and_reader_round_trip() {
        let events = vec![
            ok(Op::Insert { key: 17, value: 5 }, OpResult::Inserted(true)),
            Event::new(4, &Op::Delete { key: 17 }, 2000, 9000, Status::Info, None),
        ];
        let mut w = HistoryWriter::new(Vec::new());
        for e in &events {
            w.write(e).unwrap();
        }
        assert_eq!(w.written(), 2);
        let bytes = w.into_inner().unwrap();
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 2);
        assert_eq!(read_history_from(&bytes[..]).unwrap(), events);
    }

    #[test]
    fn malformed_lines_name_their_line() {
        let good = r#"{"client":1,"op":"read","key":1,"call_ns":0,"ret_ns":1,"status":"ok","result":{"value":null}}"#;
        let bad = [
            (
                r#"{"client":1,"op":"insert","key":1,"call_ns":0,"ret_ns":1,"status":"ok","result":{"inserted":true}}"#,
                "insert needs field `value`",
            ),
            (
                r#"{"client":1,"op":"read","key":1,"value":3,"call_ns":0,"ret_ns":1,"status":"ok","result":{"value":null}}"#,
                "read takes no field `value`",
            ),
            (
                r#"{"client":1,"op":"frob","key":1,"call_ns":0,"ret_ns":1,"status":"ok"}"#,
                "unknown op `frob`",
            ),
            (
                r#"{"client":1,"op":"read","key":1,"call_ns":0,"ret_ns":1,"status":"ok"}"#,
                "status ok needs a `result`",
            ),
            (
                r#"{"client":1,"op":"read","key":1,"call_ns":0,"ret_ns":1,"status":"info","result":{"value":1}}"#,
                "must not carry a `result`",
            ),
            (
                r#"{"client":1,"op":"read","key":1,"call_ns":0,"ret_ns":1,"status":"ok","result":{"inserted":true}}"#,
                "does not fit read(1)",
            ),
            (
                r#"{"client":1,"op":"read","key":1,"call_ns":5,"ret_ns":1,"status":"ok","result":{"value":1}}"#,
                "before call_ns",
            ),
            (
                r#"{"client":1,"op":"read","key":1,"call_ns":0,"ret_ns":1,"status":"maybe"}"#,
                "unknown variant `maybe`",
            ),
            (
                r#"{"client":1,"op":"batch","ops":[{"op":"read","key":1}],"call_ns":0,"ret_ns":1,"status":"fail"}"#,
                "not allowed in a batch",
            ),
            (
                r#"{"client":1,"op":"batch","ops":[{"op":"insert","key":1,"value":1}],"call_ns":0,"ret_ns":1,"status":"ok","result":{"results":[]}}"#,
                "does not fit batch",
            ),
            (r#"{"client":1,"op":"read","key":1,"call_ns":0"#, "EOF"),
        ];
        for (line, want) in bad {
            let text = format!("{good}\n\n{line}\n{good}\n");
            let err = read_history_from(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains("line 3"), "{err}");
            assert!(err.contains(want), "{err} should mention {want}");
        }
        // Unknown extra fields are annotations, not errors.
        let annotated = good.replace("\"client\"", "\"replica\":\"r1\",\"client\"");
        assert_eq!(read_history_from(annotated.as_bytes()).unwrap().len(), 1);
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let err = read_history("/nonexistent/history.jsonl").unwrap_err();
        assert!(matches!(err, Error::Io { .. }));
        assert!(err.to_string().contains("/nonexistent/history.jsonl"));
    }
}
