//! GeoPaxos+ (paper 004) from the bytes its peers and clients send, at two levels.
//!
//! **Node core** (head bit 0 clear): a real GeoPaxos+ node core (`NodeCore` over
//! `partita_node::GeoOrdering`) of the cluster file `partita_fuzz::geo_cluster` (three
//! nodes, each an acceptor, a replica and its serializer's first leader), node 1, 2 or
//! 3, takes up to [`EVENTS_MAX`] events with clock ticks between: a peer's message
//! (decoded `Msg`, serializers' groups as `Msg::OnRing { ring: g }`) from a member,
//! itself or a stranger; a client's B+tree command (a payload of client 7's next
//! command, or a whole encoded `Command`); a serializer log entry
//! (`Entry<OpId, GeoValue>`, decoded) forwarded by a peer to serializer `g`'s leader, as
//! origins ask leaders to order their requests (`Msg::OnRing { ring: g, Forward }`).
//! The driver's part is done as `partita node` does it: every write acknowledged
//! durable at once, in token order.
//!
//! **Replica core** (head bit 0 set): three `partita_geo::replica::GeoReplica`s over the
//! same initial geo B+tree, with the serializers' logs modelled as shared vectors (what
//! Paxos would decide): clients' operations (`partita_geo::Op`, decoded) submitted at
//! any replica, each replica learning any serializer's next entries in any interleaving,
//! entries decoded from the input ordered by a serializer as a faulty origin could get
//! them ordered (its leader stamps them, as the node does), the leaders' clock entries
//! and re-ordering of stalled operations, DOPs. At the end every replica learns every
//! log to the end.
//!
//! What must hold: no panic; the node core's and the replicas' invariants (tree, merge,
//! groups) after every step; a decoded `Msg`, `Command`, `Entry` or `Op` re-encodes to
//! what decodes equal; every reply answers a command the node took and decodes as a
//! B+tree reply or is a refusal; persist tokens increase. Replica core: once every
//! replica has learned the same logs, all agree (digest, executed, DOPs, refusals,
//! operations decided for resubmission or deduplicated), whatever order they learned
//! them in; no
//! request is answered twice, and without injected entries, once the merges are empty,
//! every request submitted was answered exactly once, by its origin.
//!
//! Input: byte 0: bit 0 the level, bits 1–2 the node (node core). Then events, each a
//! tag byte (bits 0–1 the kind) and, for all but ticks, a 2-byte little-endian length
//! and that many bytes. Node core: 0 a peer message from `SENDERS[tag >> 2 & 7]`; 1 a
//! client command (bit 2: whole); 2 an entry for serializer `tag >> 2 & 3` from
//! `SENDERS[tag >> 4 & 7]`; 3 `1 + (tag >> 2)` ticks. Replica core: 0 submit at replica
//! `tag >> 2 & 3` (mod 3); 1 replica `tag >> 2 & 3` learns `1 + (tag >> 6)` entries of
//! serializer `tag >> 4 & 3` (no bytes); 2 an injected entry for serializer
//! `tag >> 2 & 3`; 3 the leaders' housekeeping, and with bit 2 a DOP submitted at
//! replica 0 (no bytes).
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_btree::BPlusTree;
use partita_consensus::geopaxos::{Entry, SerializerId, SerializerSet};
use partita_consensus::Msg;
use partita_geo::replica::{GeoAction, GeoReplica, GeoValue, OpId};
use partita_geo::{GeoBTree, Op};
use partita_node::{NodeCore, Output};
use partita_types::{Body, Command, NodeId, Payload};
use std::collections::BTreeMap;

/// Events that are not ticks, per input. A request that splits a leaf is executed
/// after about 24 events at its origin (the seeds replay a real cluster's traffic).
const EVENTS_MAX: usize = 24;
/// Ticks per input at most (node 1 submits a DOP every 100).
const TICKS_MAX: u32 = 600;
/// Senders: the three members, then a stranger, nobody, and the largest id.
const SENDERS: [NodeId; 8] = [1, 2, 3, 4, 7, 99, 0, u32::MAX];

type GeoEntry = Entry<OpId, GeoValue>;

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    if head & 1 == 0 {
        node_core(1 + NodeId::from((head >> 1) & 3) % 3, rest);
    } else {
        replica_core(rest);
    }
});

/// The events of an input: (tag, bytes), bytes empty for the kinds that take none.
fn events(mut rest: &[u8], takes_bytes: impl Fn(u8) -> bool) -> Vec<(u8, &[u8])> {
    let mut evs = Vec::new();
    while let Some((&tag, tail)) = rest.split_first() {
        rest = tail;
        if !takes_bytes(tag) {
            evs.push((tag, &[][..]));
            continue;
        }
        let n = match rest {
            [a, b, ..] => usize::from(u16::from_le_bytes([*a, *b])),
            _ => 0,
        };
        rest = &rest[rest.len().min(2)..];
        let (bytes, after) = rest.split_at(n.min(rest.len()));
        evs.push((tag, bytes));
        rest = after;
    }
    evs
}

/// What decodes as `T` re-encodes to what decodes equal.
fn round_trip<T>(bytes: &[u8]) -> Option<T>
where
    T: serde::Serialize + for<'de> serde::Deserialize<'de> + PartialEq + std::fmt::Debug,
{
    let v = partita_types::decode::<T>(bytes).ok()?;
    let again = partita_types::encode(&v);
    assert_eq!(
        partita_types::decode::<T>(&again).as_ref(),
        Ok(&v),
        "round trip"
    );
    Some(v)
}

/// `PARTITA_FUZZ_KNOWN=1`: feed forged identities too ([`Geo::colliding`]; read once).
fn feed_known() -> bool {
    static FEED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FEED.get_or_init(|| std::env::var("PARTITA_FUZZ_KNOWN").is_ok_and(|v| v == "1"))
}

/// Serializer log entries a message carries (in the commands of its values, or
/// forwarded), each decoded as the replicas decode them and round-tripped.
fn entries_in(m: &Msg) {
    let cmds: Vec<&Command> = match m {
        Msg::OnRing { msg, .. } => return entries_in(msg),
        Msg::Phase1B { accepted, .. } | Msg::AcceptedValues { accepted, .. } => accepted
            .iter()
            .flat_map(|(_, _, v)| v.commands.iter())
            .collect(),
        Msg::Phase2A { value, .. } | Msg::DecideValue { value, .. } => {
            value.commands.iter().collect()
        }
        Msg::LearnReply { decided } => decided
            .iter()
            .flat_map(|(_, v)| v.commands.iter())
            .collect(),
        Msg::Forward { cmd } => vec![cmd],
        Msg::ForwardBatch { cmds, .. } => cmds.iter().collect(),
        _ => Vec::new(),
    };
    for c in cmds {
        if let Body::Whole { payload, .. } = &c.body {
            round_trip::<GeoEntry>(payload);
        }
    }
}

// ---------------------------------------------------------------------------------
// The node core.

struct Driver {
    node: NodeCore,
    /// (client, seq) of every command the node took → whether it opens a session.
    taken: BTreeMap<(u64, u64), bool>,
    last_token: u64,
    now_ms: u64,
}

impl Driver {
    /// The driver's part after a step: writes acknowledged at once (in order) until
    /// none is left; what goes out checked; invariants.
    fn settle(&mut self, mut out: Vec<Output>) {
        let me = self.node.id();
        loop {
            let mut tokens = Vec::new();
            for o in out.drain(..) {
                match o {
                    Output::Send { to, msg } => {
                        assert_ne!(to, me, "a message to itself leaves the node");
                        let _ = msg;
                    }
                    Output::Persist { token, .. } => {
                        assert!(token > self.last_token, "persist tokens increase");
                        self.last_token = token;
                        tokens.push(token);
                    }
                    Output::Reply(r) => {
                        let open = *self
                            .taken
                            .get(&(r.client, r.seq))
                            .unwrap_or_else(|| panic!("a reply to a command never taken: {r:?}"));
                        // A session open's reply carries the session, not a B+tree
                        // result; a refusal is a refusal.
                        if !open && r.result.is_ok() {
                            partita_service::decode_outcome::<BPlusTree>(&r.result)
                                .expect("a reply's outcome decodes as a B+tree reply");
                        }
                    }
                    Output::Refused { client, seq, .. } => {
                        assert!(
                            self.taken.contains_key(&(client, seq)),
                            "refused a command never taken"
                        );
                    }
                    Output::MemberDone { .. } => {
                        panic!("a membership answer nobody asked for")
                    }
                    Output::SaveCheckpoint { .. }
                    | Output::Early(_)
                    | Output::TruncateLog { .. } => {}
                }
            }
            self.node.invariants();
            if tokens.is_empty() {
                return;
            }
            self.node.on_persisted(&tokens, &mut out);
        }
    }

    /// The node's invariants, its replica's (the geo tree's, which walk the whole
    /// tree) and its ordering's (the merge's): after every event. Between ticks the node core's own
    /// (a tick executes nothing: with three acceptors a decision needs a peer's vote).
    fn check(&self) {
        self.node.invariants();
    }
}

/// Nodes 1–3's setups (the cluster file parsed once).
fn setups() -> &'static [partita_node::NodeSetup; 3] {
    static SETUPS: std::sync::OnceLock<[partita_node::NodeSetup; 3]> = std::sync::OnceLock::new();
    SETUPS.get_or_init(|| [1, 2, 3].map(partita_fuzz::geo_setup))
}

fn node_core(id: NodeId, rest: &[u8]) {
    let evs = events(rest, |tag| tag & 3 != 3);
    let mut out = Vec::new();
    let node = NodeCore::new(
        setups()[(id - 1) as usize].clone(),
        Vec::new(),
        partita_fuzz::planted().clone(),
        &mut out,
    );
    let mut d = Driver {
        node,
        taken: BTreeMap::new(),
        last_token: 0,
        now_ms: 1_000,
    };
    d.settle(out);
    let mut seq = 0;
    let mut taken = 0;
    let mut ticks = 0;
    for (tag, bytes) in evs {
        let mut out = Vec::new();
        match tag & 3 {
            0 => {
                let Some(m) = round_trip::<Msg>(bytes) else {
                    continue;
                };
                entries_in(&m);
                let _ = m.check();
                d.node
                    .on_peer(SENDERS[usize::from(tag >> 2 & 7)], m, &mut out);
            }
            1 => {
                let cmd = if tag & 4 != 0 {
                    let Some(c) = round_trip::<Command>(bytes) else {
                        continue;
                    };
                    c
                } else {
                    seq += 1;
                    Command::single(7, seq, id, Payload::copy_from_slice(bytes))
                };
                d.taken.insert((cmd.client, cmd.seq), cmd.is_open());
                d.node.on_request(cmd, &mut out);
            }
            2 => {
                // An origin's request for serializer `g` (or a clock entry), as its
                // leader receives it; what does not decode goes as it is.
                let g = u32::from(tag >> 2 & 3);
                let from = SENDERS[usize::from(tag >> 4 & 7)];
                let (client, payload) = match round_trip::<GeoEntry>(bytes) {
                    Some(Entry::Op { op, .. }) => (
                        1 << 63 | u64::from(op.from) << 32 | u64::from(op.incarnation),
                        bytes,
                    ),
                    _ => (3 << 62 | u64::from(from), bytes),
                };
                seq += 1;
                let cmd = Command {
                    client,
                    seq,
                    session: 0,
                    reply_to: from,
                    body: Body::single(Payload::copy_from_slice(payload)),
                    route: 0,
                };
                let m = Msg::OnRing {
                    ring: g,
                    msg: Box::new(Msg::Forward { cmd }),
                };
                d.node.on_peer(from, m, &mut out);
            }
            _ => {
                let n = 1 + u32::from(tag >> 2);
                for _ in 0..n.min(TICKS_MAX - ticks) {
                    d.now_ms += 1;
                    d.node.on_tick(d.now_ms, &mut out);
                    d.settle(std::mem::take(&mut out));
                }
                ticks = (ticks + n).min(TICKS_MAX);
                d.check();
                continue;
            }
        }
        d.settle(out);
        d.node.on_continue(&mut Vec::new());
        d.check();
        taken += 1;
        if taken == EVENTS_MAX {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------
// The replica core.

/// The initial tree of the cluster file (built once).
fn initial_tree() -> &'static GeoBTree {
    static TREE: std::sync::OnceLock<GeoBTree> = std::sync::OnceLock::new();
    TREE.get_or_init(|| {
        let partita_node::OrderingSetup::GeoPaxosPlus(g) = &setups()[0].ordering else {
            panic!("a GeoPaxos+ cluster")
        };
        g.initial_tree().expect("the cluster file's tree")
    })
}

struct Geo {
    replicas: Vec<GeoReplica>,
    /// Serializer `g`'s decided log.
    logs: Vec<Vec<GeoEntry>>,
    /// `learned[r][g]`: entries of serializer `g`'s log replica `r` has learned.
    learned: Vec<Vec<usize>>,
    /// Request id → its origin.
    submitted: BTreeMap<u64, usize>,
    /// Request id → answers.
    answered: BTreeMap<u64, u32>,
    injected: usize,
    /// What injected operations were, by id and by request id ([`Geo::colliding`]).
    injected_ids: BTreeMap<OpId, (SerializerSet, GeoValue)>,
    injected_requests: BTreeMap<u64, GeoValue>,
    next_request: u64,
}

impl Geo {
    /// Serializer `g`'s leader (replica `g`) orders `entry`: stamped with its clock (a
    /// forwarded entry keeps a higher hint), as `GeoOrdering` does.
    fn order(&mut self, g: SerializerId, entry: GeoEntry) {
        let entry = entry.stamped(self.replicas[usize::from(g)].hint());
        self.logs[usize::from(g)].push(entry);
    }

    fn actions(&mut self, r: usize, acts: Vec<GeoAction>) {
        for a in acts {
            match a {
                GeoAction::Serialize {
                    serializer,
                    op,
                    dst,
                    value,
                } => {
                    assert_eq!(usize::from(op.from), r, "only the origin serializes");
                    assert!(dst.contains(serializer), "a serializer of its own dst");
                    let hint = self.replicas[r].hint();
                    self.order(
                        serializer,
                        Entry::Op {
                            op,
                            dst,
                            hint,
                            value,
                        },
                    );
                }
                GeoAction::Reply { request, .. } | GeoAction::Refused { request, .. } => {
                    let n = self.answered.entry(request).or_default();
                    *n += 1;
                    // Injected entries may carry any request id and origin.
                    if self.injected == 0 {
                        let origin = self.submitted.get(&request);
                        assert_eq!(origin, Some(&r), "request {request} answered by its origin");
                        assert_eq!(*n, 1, "request {request} answered twice");
                    }
                }
            }
        }
    }

    /// Whether injected entry `e` forges an identity a genuine or another injected
    /// operation has (findings 2 and 5, docs/fuzzing.md: outside the crash-fault model,
    /// where an origin's identities are its own; fed with `PARTITA_FUZZ_KNOWN=1`), and
    /// else records what it claims.
    ///
    /// Finding 2: an operation id another operation has (or may get). The merge lets
    /// the first entry of an id a replica learns define the operation, so replicas that
    /// learn the serializers' logs in different orders execute different operations
    /// under that id and diverge. Genuine origins here are incarnation 0 (their ids are
    /// taken as they submit), so an injected operation of incarnation 0 may collide;
    /// one of another incarnation collides with an earlier injected one of the same id
    /// that differs.
    ///
    /// Finding 5: a write under a request id another write has. Replicas deduplicate
    /// writes by request id alone, so of two different writes with one id on disjoint
    /// serializers (which the merge may run in either order) each replica runs the one
    /// it meets first and drops the other as a copy: replicas diverge. Request ids of
    /// genuine requests are never injected ones ([`Geo::submit`] skips them).
    fn colliding(&mut self, e: &GeoEntry) -> bool {
        if feed_known() {
            return false;
        }
        let Entry::Op { op, dst, value, .. } = e else {
            return false;
        };
        if op.incarnation == 0 || self.submitted.contains_key(&value.request) {
            return true;
        }
        let same_id = self
            .injected_ids
            .get(op)
            .is_some_and(|was| *was != (*dst, value.clone()));
        let same_request = self
            .injected_requests
            .get(&value.request)
            .is_some_and(|v| v != value);
        if same_id || same_request {
            return true;
        }
        self.injected_ids.insert(*op, (*dst, value.clone()));
        self.injected_requests.insert(value.request, value.clone());
        false
    }

    fn submit(&mut self, r: usize, op: Op) {
        self.next_request += 1;
        while self.injected_requests.contains_key(&self.next_request) {
            self.next_request += 1;
        }
        let request = self.next_request;
        let mut acts = Vec::new();
        match self.replicas[r].submit(request, op, &mut acts) {
            Ok(()) => {
                self.submitted.insert(request, r);
            }
            Err(_) => assert!(acts.is_empty(), "a refused request is not ordered"),
        }
        self.actions(r, acts);
        self.replicas[r].invariants();
    }

    /// Replica `r` learns up to `n` more entries of serializer `g`; returns how many.
    fn learn(&mut self, r: usize, g: usize, n: usize) -> usize {
        let mut k = 0;
        while k < n && self.learned[r][g] < self.logs[g].len() {
            let position = self.learned[r][g];
            let entry = self.logs[g][position].clone();
            self.learned[r][g] += 1;
            let mut acts = Vec::new();
            self.replicas[r]
                .on_decided(g as SerializerId, position as u64, entry, &mut acts)
                .expect("a serializer's log learned in order");
            self.actions(r, acts);
            self.replicas[r].invariants();
            k += 1;
        }
        k
    }

    /// Every leader's clock entry where its merge waits, and its stalled operations
    /// ordered again.
    fn housekeeping(&mut self) {
        for g in 0..self.replicas.len() {
            let leader = &self.replicas[g];
            let sid = g as SerializerId;
            let wanted = leader.wanted_clock(sid);
            let stalled = leader.stalled_for(sid);
            if let Some(w) = wanted {
                self.order(sid, Entry::Clock { hint: w });
            }
            for (op, dst, value) in stalled {
                self.order(
                    sid,
                    Entry::Op {
                        op,
                        dst,
                        hint: 0,
                        value,
                    },
                );
            }
        }
    }
}

fn replica_core(rest: &[u8]) {
    let evs = events(rest, |tag| matches!(tag & 3, 0 | 2));
    let tree = initial_tree();
    let n = tree.n();
    let mut geo = Geo {
        replicas: (0..n)
            .map(|r| {
                GeoReplica::new(r, tree.clone())
                    .expect("a replica of the tree")
                    .with_dedup()
            })
            .collect(),
        logs: vec![Vec::new(); n],
        learned: vec![vec![0; n]; n],
        submitted: BTreeMap::new(),
        answered: BTreeMap::new(),
        injected: 0,
        injected_ids: BTreeMap::new(),
        injected_requests: BTreeMap::new(),
        next_request: 0,
    };
    for (tag, bytes) in evs.into_iter().take(48) {
        let a = usize::from(tag >> 2 & 3);
        match tag & 3 {
            0 => {
                if let Some(op) = round_trip::<Op>(bytes) {
                    geo.submit(a % n, op);
                }
            }
            1 => {
                let g = usize::from(tag >> 4 & 3) % n;
                geo.learn(a % n, g, 1 + usize::from(tag >> 6));
            }
            2 => {
                let Some(entry) = round_trip::<GeoEntry>(bytes) else {
                    continue;
                };
                if geo.colliding(&entry) {
                    continue;
                }
                if a >= n {
                    // No such serializer: refused, nothing changed.
                    let mut acts = Vec::new();
                    let r = &mut geo.replicas[0];
                    let before = r.digest();
                    assert!(r
                        .on_decided(a as SerializerId, 0, entry, &mut acts)
                        .is_err());
                    assert!(acts.is_empty() && r.digest() == before);
                    continue;
                }
                geo.injected += 1;
                geo.order(a as SerializerId, entry);
            }
            _ => {
                geo.housekeeping();
                if tag & 4 != 0 {
                    geo.submit(0, Op::Dop);
                }
            }
        }
    }
    // Every replica learns every log to the end (and what that orders), with the
    // leaders' clock entries, until nothing more comes.
    for _ in 0..64 {
        geo.housekeeping();
        let mut learned = 0;
        for r in 0..n {
            for g in 0..n {
                learned += geo.learn(r, g, usize::MAX);
            }
        }
        if learned == 0 {
            break;
        }
    }
    for r in &geo.replicas {
        r.invariants();
    }
    let all_learned = (0..n).all(|r| (0..n).all(|g| geo.learned[r][g] == geo.logs[g].len()));
    if !all_learned {
        // Still ordering after 64 rounds (resubmissions that keep coming): what
        // follows is about replicas that learned the same logs.
        return;
    }
    // Every replica pops the same operations; each is executed, refused, deduplicated
    // or decided for resubmission. Which of the last two can differ (finding 4: a
    // replica that ran a later attempt of a write first deduplicates the earlier one,
    // where the others decide to resubmit it), their sum cannot.
    let summary = |r: &GeoReplica| {
        let s = r.stats();
        (
            r.digest(),
            s.executed,
            s.executed_multi,
            s.dops,
            s.refused,
            s.resubmit_decisions + s.deduplicated,
            r.merge().pending_len(),
        )
    };
    let first = summary(&geo.replicas[0]);
    for r in &geo.replicas {
        assert_eq!(
            summary(r),
            first,
            "replicas that learned the same logs agree"
        );
    }
    let quiet = geo.replicas.iter().all(|r| r.merge().pending_len() == 0);
    if quiet && geo.injected == 0 {
        for (request, origin) in &geo.submitted {
            assert_eq!(
                geo.answered.get(request),
                Some(&1),
                "request {request} (origin {origin}) answered exactly once"
            );
        }
    }
}
