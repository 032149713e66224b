//! Chirper operations, results, events and the initial social graph, with their
//! JSON-lines form.
//!
//! One event per line; the operation's fields are flattened into the event, the
//! result is externally tagged, times are nanoseconds on one clock shared by all
//! clients:
//!
//! ```text
//! {"service":"chirper","client":3,"op":"post","user":7,"id":41,"invoked":1200,"returned":1960,"result":{"posted":2}}
//! {"service":"chirper","client":4,"op":"timeline","user":9,"invoked":1300,"returned":1500,"result":{"timeline":[[7,40],[2,12]]}}
//! {"service":"chirper","client":5,"op":"follow","user":9,"whom":7,"invoked":1400}
//! ```
//!
//! | `op` | fields | `result` |
//! |------|--------|----------|
//! | `post` | `user`, `id` | `{"posted":n}` or `"no_user"` |
//! | `follow` | `user`, `whom` | `{"followed":bool}` or `"no_user"` |
//! | `unfollow` | `user`, `whom` | `{"unfollowed":bool}` or `"no_user"` |
//! | `timeline` | `user` | `{"timeline":[[author,id],...]}` (oldest first) or `"no_user"` |
//! | `create` | `user` | `{"created":bool}` |
//! | `delete` | `user` | `"deleted"` or `"no_user"` |
//!
//! `returned` and `result` are both present (the operation completed) or both absent
//! (an *info* operation: the client does not know whether it took effect). The
//! `service` field is optional when reading but must then be `"chirper"`; other
//! fields are ignored, so recorders may add annotations (a post's text, say). A line
//! that is not an event, or whose event breaks the rules of
//! [`ChirperEvent::validate`], is refused with its line number.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::history::Error;

/// A post as the model knows it: `(author, id)`. Posts are compared by these two
/// numbers only (their text is not part of the model).
pub type PostRef = (u64, u64);

/// A Chirper operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ChirperOp {
    /// `user` publishes post `(user, id)`.
    Post { user: u64, id: u64 },
    /// `user` starts following `whom`.
    Follow { user: u64, whom: u64 },
    /// `user` stops following `whom`.
    Unfollow { user: u64, whom: u64 },
    /// Read `user`'s timeline.
    Timeline { user: u64 },
    /// Create `user` (empty).
    Create { user: u64 },
    /// Delete `user`.
    Delete { user: u64 },
}

impl ChirperOp {
    /// The operation's name as in the history format.
    pub fn name(&self) -> &'static str {
        match self {
            ChirperOp::Post { .. } => "post",
            ChirperOp::Follow { .. } => "follow",
            ChirperOp::Unfollow { .. } => "unfollow",
            ChirperOp::Timeline { .. } => "timeline",
            ChirperOp::Create { .. } => "create",
            ChirperOp::Delete { .. } => "delete",
        }
    }

    /// Every user the operation names (`user`, then `whom` if any).
    pub fn users(&self) -> impl Iterator<Item = u64> {
        let (a, b) = match *self {
            ChirperOp::Follow { user, whom } | ChirperOp::Unfollow { user, whom } => {
                (user, Some(whom))
            }
            ChirperOp::Post { user, .. }
            | ChirperOp::Timeline { user }
            | ChirperOp::Create { user }
            | ChirperOp::Delete { user } => (user, None),
        };
        std::iter::once(a).chain(b)
    }

    /// Whether `result` is of a kind this operation can return at all.
    pub fn can_return(&self, result: &ChirperResult) -> bool {
        matches!(
            (self, result),
            (
                ChirperOp::Post { .. },
                ChirperResult::Posted(_) | ChirperResult::NoUser
            ) | (
                ChirperOp::Follow { .. },
                ChirperResult::Followed(_) | ChirperResult::NoUser
            ) | (
                ChirperOp::Unfollow { .. },
                ChirperResult::Unfollowed(_) | ChirperResult::NoUser
            ) | (
                ChirperOp::Timeline { .. },
                ChirperResult::Timeline(_) | ChirperResult::NoUser
            ) | (ChirperOp::Create { .. }, ChirperResult::Created(_))
                | (
                    ChirperOp::Delete { .. },
                    ChirperResult::Deleted | ChirperResult::NoUser
                )
        )
    }
}

impl fmt::Display for ChirperOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChirperOp::Post { user, id } => write!(f, "post(user={user}, id={id})"),
            ChirperOp::Follow { user, whom } => write!(f, "follow(user={user}, whom={whom})"),
            ChirperOp::Unfollow { user, whom } => {
                write!(f, "unfollow(user={user}, whom={whom})")
            }
            ChirperOp::Timeline { user } => write!(f, "timeline(user={user})"),
            ChirperOp::Create { user } => write!(f, "create(user={user})"),
            ChirperOp::Delete { user } => write!(f, "delete(user={user})"),
        }
    }
}

/// What a Chirper operation returns.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChirperResult {
    /// The post was delivered to this many followers (counting followers that no
    /// longer exist).
    Posted(u32),
    /// Whether following changed anything.
    Followed(bool),
    /// Whether unfollowing changed anything.
    Unfollowed(bool),
    /// The timeline, oldest post first.
    Timeline(Vec<PostRef>),
    /// A user the operation names does not exist.
    NoUser,
    /// Whether the user was created (false: it existed).
    Created(bool),
    Deleted,
}

impl fmt::Display for ChirperResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChirperResult::Posted(n) => write!(f, "posted({n})"),
            ChirperResult::Followed(b) => write!(f, "followed({b})"),
            ChirperResult::Unfollowed(b) => write!(f, "unfollowed({b})"),
            ChirperResult::Timeline(posts) => write!(f, "timeline{}", fmt_posts(posts)),
            ChirperResult::NoUser => f.write_str("no_user"),
            ChirperResult::Created(b) => write!(f, "created({b})"),
            ChirperResult::Deleted => f.write_str("deleted"),
        }
    }
}

/// `[(author,id), ...]`.
pub(crate) fn fmt_posts(posts: &[PostRef]) -> String {
    let items: Vec<String> = posts.iter().map(|(a, i)| format!("({a},{i})")).collect();
    format!("[{}]", items.join(", "))
}

/// One operation of a Chirper history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChirperEvent {
    /// The client that issued it. A client has at most one operation outstanding,
    /// except that it may move on after giving up on one (an info operation).
    pub client: u64,
    #[serde(flatten)]
    pub op: ChirperOp,
    /// Invocation time (ns, on a clock shared by all clients).
    pub invoked: u64,
    /// Response time; `None` for an info operation (outcome unknown: it may take
    /// effect at any time after `invoked`, or never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned: Option<u64>,
    /// The result; present exactly when `returned` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ChirperResult>,
}

impl ChirperEvent {
    /// A completed operation.
    pub fn ok(
        client: u64,
        op: ChirperOp,
        invoked: u64,
        returned: u64,
        result: ChirperResult,
    ) -> ChirperEvent {
        ChirperEvent {
            client,
            op,
            invoked,
            returned: Some(returned),
            result: Some(result),
        }
    }

    /// An operation with an unknown outcome.
    pub fn info(client: u64, op: ChirperOp, invoked: u64) -> ChirperEvent {
        ChirperEvent {
            client,
            op,
            invoked,
            returned: None,
            result: None,
        }
    }

    /// Whether the outcome is unknown.
    pub fn is_info(&self) -> bool {
        self.returned.is_none()
    }

    /// The rules one event must follow on its own: `returned` and `result` both
    /// present or both absent, no return before the invocation, and a result of a
    /// kind the operation returns.
    pub fn validate(&self) -> Result<(), String> {
        match (self.returned, &self.result) {
            (Some(_), None) => Err("has a return time but no result".to_string()),
            (None, Some(r)) => Err(format!("has a result ({r}) but no return time")),
            (Some(ret), _) if ret < self.invoked => Err(format!(
                "returned at {ret} ns, before it was invoked at {} ns",
                self.invoked
            )),
            (Some(_), Some(r)) if !self.op.can_return(r) => {
                Err(format!("{} cannot return {r}", self.op.name()))
            }
            _ => Ok(()),
        }
    }

    /// One-line account for reports, e.g.
    /// `client 2: timeline(user=5) [invoked 20 ns, returned 25 ns] returned timeline[]`.
    pub fn describe(&self) -> String {
        match (self.returned, &self.result) {
            (Some(ret), Some(r)) => format!(
                "client {}: {} [invoked {} ns, returned {ret} ns] returned {r}",
                self.client, self.op, self.invoked
            ),
            _ => format!(
                "client {}: {} [invoked {} ns, outcome unknown]",
                self.client, self.op, self.invoked
            ),
        }
    }
}

impl fmt::Display for ChirperEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The social graph before the first operation: every user with the users it
/// follows. Followers are derived from it; posts and timelines start empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChirperInitial {
    /// User -> followees. A followee that is not a key exists all the same (with no
    /// followees of its own).
    pub followees: BTreeMap<u64, BTreeSet<u64>>,
}

impl ChirperInitial {
    /// From `(user, followees)` pairs; a user listed twice follows the union.
    pub fn new<I, F>(users: I) -> ChirperInitial
    where
        I: IntoIterator<Item = (u64, F)>,
        F: IntoIterator<Item = u64>,
    {
        let mut followees: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        for (user, whom) in users {
            followees.entry(user).or_default().extend(whom);
        }
        ChirperInitial { followees }
    }

    /// Users that follow nobody and are followed by nobody.
    pub fn with_users(users: impl IntoIterator<Item = u64>) -> ChirperInitial {
        ChirperInitial::new(users.into_iter().map(|u| (u, [])))
    }

    /// Every user, ascending: the keys and every followee.
    pub fn users(&self) -> BTreeSet<u64> {
        self.followees
            .iter()
            .flat_map(|(u, f)| std::iter::once(*u).chain(f.iter().copied()))
            .collect()
    }

    /// User -> followers, for every user (possibly empty).
    pub fn followers(&self) -> BTreeMap<u64, BTreeSet<u64>> {
        let mut out: BTreeMap<u64, BTreeSet<u64>> = self
            .users()
            .into_iter()
            .map(|u| (u, BTreeSet::new()))
            .collect();
        for (user, whom) in &self.followees {
            for w in whom {
                out.entry(*w).or_default().insert(*user);
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// JSON lines.

/// Buffered JSON-lines writer of Chirper events (`service: "chirper"` on every line).
pub struct ChirperHistoryWriter<W: Write> {
    out: BufWriter<W>,
    written: u64,
}

impl ChirperHistoryWriter<File> {
    /// Create (truncate) `path` and write to it.
    pub fn create(path: impl AsRef<Path>) -> io::Result<ChirperHistoryWriter<File>> {
        Ok(ChirperHistoryWriter::new(File::create(path)?))
    }
}

#[derive(Serialize)]
struct Line<'a> {
    service: &'static str,
    #[serde(flatten)]
    event: &'a ChirperEvent,
}

impl<W: Write> ChirperHistoryWriter<W> {
    pub fn new(out: W) -> ChirperHistoryWriter<W> {
        ChirperHistoryWriter {
            out: BufWriter::new(out),
            written: 0,
        }
    }

    /// Append one event as one line.
    pub fn write(&mut self, event: &ChirperEvent) -> io::Result<()> {
        let line = Line {
            service: "chirper",
            event,
        };
        serde_json::to_writer(&mut self.out, &line)?;
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

/// Read a Chirper history file. Blank lines are skipped; a malformed line is an error
/// naming its line number.
pub fn read_chirper_history(path: impl AsRef<Path>) -> Result<Vec<ChirperEvent>, Error> {
    let path = path.as_ref();
    let what = path.display().to_string();
    let file = File::open(path).map_err(|source| Error::Io {
        what: what.clone(),
        source,
    })?;
    parse_lines(BufReader::new(file), &what)
}

/// Read a Chirper history from any reader (see [`read_chirper_history`]).
pub fn read_chirper_history_from(reader: impl Read) -> Result<Vec<ChirperEvent>, Error> {
    parse_lines(BufReader::new(reader), "<input>")
}

/// Parse one line's object.
fn event_from_json(v: Value) -> Result<ChirperEvent, String> {
    match v.get("service") {
        None => {}
        Some(Value::String(s)) if s == "chirper" => {}
        Some(other) => return Err(format!("service {other} in a chirper history")),
    }
    let event: ChirperEvent = serde_json::from_value(v).map_err(|e| e.to_string())?;
    event.validate()?;
    Ok(event)
}

fn parse_lines(reader: impl BufRead, what: &str) -> Result<Vec<ChirperEvent>, Error> {
    let mut events = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|source| Error::Io {
            what: what.to_string(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let parse_error = |message: String| Error::Parse {
            what: what.to_string(),
            line: i + 1,
            message,
        };
        let v: Value = serde_json::from_str(&line).map_err(|e| parse_error(e.to_string()))?;
        events.push(event_from_json(v).map_err(parse_error)?);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_round_trip() {
        let events = vec![
            ChirperEvent::ok(
                1,
                ChirperOp::Post { user: 7, id: 41 },
                10,
                20,
                ChirperResult::Posted(2),
            ),
            ChirperEvent::ok(
                2,
                ChirperOp::Timeline { user: 9 },
                11,
                25,
                ChirperResult::Timeline(vec![(7, 41), (u64::MAX, 3)]),
            ),
            ChirperEvent::info(3, ChirperOp::Follow { user: 9, whom: 7 }, 12),
            ChirperEvent::ok(
                4,
                ChirperOp::Delete { user: 9 },
                30,
                31,
                ChirperResult::NoUser,
            ),
            ChirperEvent::ok(
                4,
                ChirperOp::Create { user: 9 },
                32,
                33,
                ChirperResult::Created(true),
            ),
            ChirperEvent::ok(
                4,
                ChirperOp::Unfollow { user: 9, whom: 7 },
                34,
                35,
                ChirperResult::Unfollowed(false),
            ),
        ];
        let mut w = ChirperHistoryWriter::new(Vec::new());
        for e in &events {
            w.write(e).unwrap();
        }
        assert_eq!(w.written(), events.len() as u64);
        let bytes = w.into_inner().unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with(
            r#"{"service":"chirper","client":1,"op":"post","user":7,"id":41,"invoked":10,"returned":20,"result":{"posted":2}}"#
        ), "{text}");
        assert!(text.contains(r#""op":"follow","user":9,"whom":7,"invoked":12}"#));
        assert_eq!(read_chirper_history_from(&bytes[..]).unwrap(), events);
    }

    #[test]
    fn malformed_lines_name_their_line() {
        let good = r#"{"client":1,"op":"timeline","user":1,"invoked":0,"returned":1,"result":"no_user","note":"ignored"}"#;
        let bad = [
            (
                r#"{"client":1,"op":"timeline","user":1,"invoked":5,"returned":1,"result":"no_user"}"#,
                "before it was invoked",
            ),
            (
                r#"{"client":1,"op":"timeline","user":1,"invoked":0,"returned":1}"#,
                "no result",
            ),
            (
                r#"{"client":1,"op":"timeline","user":1,"invoked":0,"result":"no_user"}"#,
                "no return time",
            ),
            (
                r#"{"client":1,"op":"post","user":1,"id":2,"invoked":0,"returned":1,"result":{"followed":true}}"#,
                "post cannot return followed(true)",
            ),
            (r#"{"client":1,"op":"frob","user":1,"invoked":0}"#, "frob"),
            (r#"{"client":1,"op":"post","user":1,"invoked":0}"#, "id"),
            (
                r#"{"service":"kv","client":1,"op":"timeline","user":1,"invoked":0}"#,
                "service",
            ),
            (
                r#"{"client":-1,"op":"timeline","user":1,"invoked":0}"#,
                "-1",
            ),
            ("not json", "expected"),
        ];
        for (line, needle) in bad {
            let text = format!("{good}\n\n{line}\n");
            let err = read_chirper_history_from(text.as_bytes()).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("line 3"), "{msg}");
            assert!(msg.contains(needle), "{line}: {msg}");
        }
        assert_eq!(read_chirper_history_from(good.as_bytes()).unwrap().len(), 1);
    }

    #[test]
    fn initial_graph() {
        let init = ChirperInitial::new([(1, vec![2, 3]), (2, vec![3]), (1, vec![4])]);
        assert_eq!(init.users(), BTreeSet::from([1, 2, 3, 4]));
        let followers = init.followers();
        assert_eq!(followers[&3], BTreeSet::from([1, 2]));
        assert_eq!(followers[&4], BTreeSet::from([1]));
        assert!(followers[&1].is_empty());
        assert_eq!(ChirperInitial::with_users([5]).users(), BTreeSet::from([5]));
    }
}
