//! Property tests of the store against a naive reference model of etcd's semantics
//! (every operation, transactions, limits, prefixes, `end == [0]`), undo, snapshots,
//! the digest, split and merge across partitions, and history JSON round trips.

use std::collections::BTreeMap;

use partita_kv::history::{command_from_json, event_json, event_line, Outcome};
use partita_kv::*;
use partita_service::{ServiceCodec, StateMachine};
use partita_types::PartitionMap;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------
// The reference: a map scanned in full for every range, written to be obviously right.

#[derive(Clone, Debug, Default)]
struct Reference {
    revision: u64,
    /// key -> (value, create, mod, version)
    map: BTreeMap<Vec<u8>, (Vec<u8>, u64, u64, u64)>,
    /// Every event not compacted away, oldest first.
    events: Vec<Event>,
    compacted: u64,
}

fn in_range(k: &[u8], key: &[u8], end: &[u8]) -> bool {
    if end.is_empty() {
        k == key
    } else if end == [0] {
        k >= key
    } else {
        k >= key && k < end
    }
}

impl Reference {
    fn new() -> Reference {
        Reference {
            revision: 1,
            map: BTreeMap::new(),
            events: Vec::new(),
            compacted: 0,
        }
    }

    fn kv(&self, k: &[u8]) -> KeyValue {
        let (v, c, m, ver) = &self.map[k];
        KeyValue {
            key: k.to_vec(),
            value: v.clone(),
            create_revision: *c,
            mod_revision: *m,
            version: *ver,
            lease: 0,
        }
    }

    fn put(&mut self, p: &PutRequest, rev: u64) -> PutResponse {
        let prev = self.map.get(&p.key).map(|_| self.kv(&p.key));
        let (create, version) = match &prev {
            Some(kv) => (kv.create_revision, kv.version + 1),
            None => (rev, 1),
        };
        self.map
            .insert(p.key.clone(), (p.value.clone(), create, rev, version));
        self.events.push(Event {
            kind: EventKind::Put,
            kv: self.kv(&p.key),
            prev_kv: prev.clone(),
        });
        PutResponse {
            revision: rev,
            prev_kv: if p.prev_kv { prev } else { None },
        }
    }

    fn range(&self, r: &RangeRequest, rev: u64) -> RangeResponse {
        let all: Vec<KeyValue> = self
            .map
            .keys()
            .filter(|k| in_range(k, &r.key, &r.end))
            .map(|k| self.kv(k))
            .collect();
        let count = all.len() as u64;
        let mut kvs = if r.count_only { vec![] } else { all };
        if r.limit > 0 && kvs.len() as u64 > r.limit {
            kvs.truncate(r.limit as usize);
        }
        if r.keys_only {
            for kv in &mut kvs {
                kv.value.clear();
            }
        }
        RangeResponse {
            more: !r.count_only && (kvs.len() as u64) < count,
            kvs,
            count,
            revision: rev,
        }
    }

    fn delete(&mut self, d: &DeleteRangeRequest, rev: u64) -> Vec<KeyValue> {
        let keys: Vec<Vec<u8>> = self
            .map
            .keys()
            .filter(|k| in_range(k, &d.key, &d.end))
            .cloned()
            .collect();
        let gone: Vec<KeyValue> = keys.iter().map(|k| self.kv(k)).collect();
        for (k, prev) in keys.into_iter().zip(&gone) {
            self.map.remove(&k);
            self.events.push(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key: k,
                    value: vec![],
                    create_revision: 0,
                    mod_revision: rev,
                    version: 0,
                    lease: 0,
                },
                prev_kv: Some(prev.clone()),
            });
        }
        gone
    }

    fn compare(&self, c: &Compare) -> bool {
        let e = self.map.get(&c.key);
        let ord = match (&c.target, e) {
            (CompareTarget::Value(_), None) => return false,
            (CompareTarget::Value(v), Some(e)) => e.0.cmp(v),
            (CompareTarget::Version(v), e) => e.map_or(0, |e| e.3).cmp(v),
            (CompareTarget::CreateRevision(v), e) => e.map_or(0, |e| e.1).cmp(v),
            (CompareTarget::ModRevision(v), e) => e.map_or(0, |e| e.2).cmp(v),
            // The model draws no lease: every key's lease is 0.
            (CompareTarget::Lease(v), _) => 0.cmp(v),
        };
        match c.op {
            CompareOp::Equal => ord.is_eq(),
            CompareOp::NotEqual => ord.is_ne(),
            CompareOp::Less => ord.is_lt(),
            CompareOp::Greater => ord.is_gt(),
        }
    }

    fn execute(&mut self, cmd: &KvCommand) -> KvReply {
        let next = self.revision + 1;
        match cmd {
            KvCommand::Put(p) => {
                self.revision = next;
                KvReply::Put(self.put(p, next))
            }
            KvCommand::Range(r) => KvReply::Range(self.range(r, self.revision)),
            KvCommand::DeleteRange(d) => {
                let gone = self.delete(d, next);
                if !gone.is_empty() {
                    self.revision = next;
                }
                KvReply::DeleteRange(DeleteRangeResponse {
                    deleted: gone.len() as u64,
                    prev_kvs: if d.prev_kv { gone } else { vec![] },
                    revision: self.revision,
                })
            }
            KvCommand::Txn(t) => {
                let succeeded = t.compare.iter().all(|c| self.compare(c));
                let branch = if succeeded { &t.success } else { &t.failure };
                let mut wrote = false;
                let mut responses = vec![];
                for op in branch {
                    let seen = |wrote: bool| if wrote { next } else { next - 1 };
                    responses.push(match op {
                        RequestOp::Put(p) => {
                            wrote = true;
                            ResponseOp::Put(self.put(p, next))
                        }
                        RequestOp::Range(r) => ResponseOp::Range(self.range(r, seen(wrote))),
                        RequestOp::DeleteRange(d) => {
                            let gone = self.delete(d, next);
                            wrote |= !gone.is_empty();
                            ResponseOp::DeleteRange(DeleteRangeResponse {
                                deleted: gone.len() as u64,
                                prev_kvs: if d.prev_kv { gone } else { vec![] },
                                revision: seen(wrote),
                            })
                        }
                    });
                }
                if wrote {
                    self.revision = next;
                }
                KvReply::Txn(TxnResponse {
                    succeeded,
                    responses,
                    revision: self.revision,
                })
            }
            KvCommand::Batch(cmds) => {
                KvReply::Batch(cmds.iter().map(|c| self.execute(c)).collect())
            }
            KvCommand::LeaseGrant(_)
            | KvCommand::LeaseRevoke(_)
            | KvCommand::LeaseExpire(_)
            | KvCommand::LeaseKeepAlive(_)
            | KvCommand::LeaseTimeToLive(_)
            | KvCommand::LeaseLeases
            | KvCommand::Hash(_) => unreachable!("the model draws no lease or hash"),
            KvCommand::Compact(c) => {
                let error = if c.revision <= self.compacted {
                    Some("mvcc: required revision has been compacted".to_string())
                } else if c.revision > self.revision {
                    Some("mvcc: required revision is a future revision".to_string())
                } else {
                    self.events.retain(|e| e.kv.mod_revision >= c.revision);
                    self.compacted = c.revision;
                    None
                };
                KvReply::Compact(CompactResponse {
                    revision: self.revision,
                    compacted: self.compacted,
                    error,
                })
            }
            KvCommand::Events(r) => {
                let start = if r.start_revision == 0 {
                    self.revision + 1
                } else {
                    r.start_revision
                };
                if start < self.compacted {
                    return KvReply::Events(EventsResponse {
                        events: vec![],
                        compacted: Some(self.compacted),
                        more: false,
                        revision: self.revision,
                    });
                }
                let matching = self
                    .events
                    .iter()
                    .filter(|e| e.kv.mod_revision >= start && in_range(&e.kv.key, &r.key, &r.end));
                let mut events: Vec<Event> = vec![];
                let mut more = false;
                for e in matching {
                    let last = events.last().map(|l| l.kv.mod_revision);
                    if r.limit > 0
                        && events.len() as u64 >= r.limit
                        && last != Some(e.kv.mod_revision)
                    {
                        more = true;
                        break;
                    }
                    events.push(e.clone());
                }
                KvReply::Events(EventsResponse {
                    events,
                    compacted: None,
                    more,
                    revision: self.revision,
                })
            }
        }
    }

    fn contents(&self) -> Vec<KeyValue> {
        self.map.keys().map(|k| self.kv(k)).collect()
    }
}

// ---------------------------------------------------------------------------------------
// Generators: few short keys over an alphabet with 0x00 and 0xff, so that ranges,
// prefixes and `[0]` ends meet the edge cases.

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(vec![0u8, b'a', b'b', b'c', 0xff]),
        1..=3,
    )
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![0u8, b'x', b'y', 0xc3]), 0..=3)
}

fn end() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(vec![]),
        Just(vec![0]),
        key(),
        key().prop_map(|k| prefix_end(&k)),
    ]
}

fn put() -> impl Strategy<Value = PutRequest> {
    (key(), value(), any::<bool>()).prop_map(|(key, value, prev_kv)| PutRequest {
        key,
        value,
        prev_kv,
        lease: 0,
    })
}

fn range() -> impl Strategy<Value = RangeRequest> {
    (key(), end(), 0u64..4, any::<bool>(), any::<bool>()).prop_map(
        |(key, end, limit, keys_only, count_only)| RangeRequest {
            key,
            end,
            limit,
            keys_only: keys_only && limit % 2 == 0,
            count_only: count_only && limit == 3,
            revision: 0,
        },
    )
}

fn delete() -> impl Strategy<Value = DeleteRangeRequest> {
    (key(), end(), any::<bool>()).prop_map(|(key, end, prev_kv)| DeleteRangeRequest {
        key,
        end,
        prev_kv,
    })
}

fn request_op() -> impl Strategy<Value = RequestOp> {
    prop_oneof![
        put().prop_map(RequestOp::Put),
        range().prop_map(RequestOp::Range),
        delete().prop_map(RequestOp::DeleteRange),
    ]
}

fn compare() -> impl Strategy<Value = Compare> {
    let target = prop_oneof![
        value().prop_map(CompareTarget::Value),
        (0u64..4).prop_map(CompareTarget::Version),
        (0u64..12).prop_map(CompareTarget::CreateRevision),
        (0u64..12).prop_map(CompareTarget::ModRevision),
    ];
    let op = prop::sample::select(vec![
        CompareOp::Equal,
        CompareOp::NotEqual,
        CompareOp::Less,
        CompareOp::Greater,
    ]);
    (key(), op, target).prop_map(|(key, op, target)| Compare { key, op, target })
}

fn command() -> impl Strategy<Value = KvCommand> {
    prop_oneof![
        4 => put().prop_map(KvCommand::Put),
        3 => range().prop_map(KvCommand::Range),
        2 => delete().prop_map(KvCommand::DeleteRange),
        2 => (
            prop::collection::vec(compare(), 0..3),
            prop::collection::vec(request_op(), 0..4),
            prop::collection::vec(request_op(), 0..4),
        )
            .prop_map(|(compare, success, failure)| KvCommand::Txn(TxnRequest {
                compare,
                success,
                failure,
            })),
        1 => (0u64..12).prop_map(|revision| KvCommand::Compact(CompactRequest { revision })),
        2 => (key(), end(), 0u64..12, 0u64..4).prop_map(|(key, end, start_revision, limit)| {
            KvCommand::Events(EventsRequest { key, end, start_revision, limit })
        }),
        // The etcd gateway's batches (an empty one is refused by `check`).
        1 => prop::collection::vec(
            prop_oneof![
                put().prop_map(KvCommand::Put),
                range().prop_map(KvCommand::Range),
                delete().prop_map(KvCommand::DeleteRange),
            ],
            0..4
        )
        .prop_map(KvCommand::Batch),
    ]
}

fn commands(max: usize) -> impl Strategy<Value = Vec<KvCommand>> {
    prop::collection::vec(command(), 0..max)
}

/// Execute the commands `check` accepts.
fn build(cmds: &[KvCommand]) -> KvStore {
    let mut s = KvStore::new();
    for c in cmds.iter().filter(|c| check(c).is_ok()) {
        s.execute(c);
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn matches_the_reference_model(cmds in commands(60)) {
        let mut store = KvStore::new();
        let mut reference = Reference::new();
        for cmd in &cmds {
            if let Err(why) = check(cmd) {
                // Only duplicate writes in a transaction branch, and empty batches, are
                // refused here.
                prop_assert!(
                    why.contains("duplicate key given in txn request")
                        || why.starts_with("batch: 0 requests"),
                    "{}",
                    why
                );
                continue;
            }
            let (got, _) = store.execute(cmd);
            let want = reference.execute(cmd);
            prop_assert_eq!(&got, &want, "{:?}", cmd);
            prop_assert_eq!(store.revision(), reference.revision);
            prop_assert_eq!(store.iter().collect::<Vec<_>>(), reference.contents());
            prop_assert_eq!(store.len(), reference.map.len());
        }
    }

    #[test]
    fn undoing_a_random_suffix_restores_state_and_digest(
        prefix in commands(30),
        suffix in commands(30),
        keep in 0usize..30,
    ) {
        let mut s = build(&prefix);
        let start = (s.clone(), s.digest());
        let mut undos = Vec::new();
        let mut states = Vec::new();
        for c in suffix.iter().filter(|c| check(c).is_ok()) {
            states.push((s.clone(), s.digest()));
            undos.push(s.execute(c).1);
        }
        // Undo newest first down to an intermediate state, then to the start.
        let keep = keep.min(undos.len());
        while undos.len() > keep {
            s.undo(undos.pop().unwrap());
        }
        if let Some((state, digest)) = states.get(keep) {
            prop_assert_eq!(&s, state);
            prop_assert_eq!(s.digest(), *digest);
        }
        while let Some(u) = undos.pop() {
            s.undo(u);
        }
        prop_assert_eq!(&s, &start.0);
        prop_assert_eq!(s.digest(), start.1);
    }

    #[test]
    fn snapshots_round_trip_and_refuse_damage(
        cmds in commands(40),
        flips in prop::collection::vec(any::<prop::sample::Index>(), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let s = build(&cmds);
        let bytes = s.snapshot();
        let back = KvStore::restore(&bytes).unwrap();
        prop_assert_eq!(&back, &s);
        // The incrementally kept digest equals the one recomputed from the contents.
        prop_assert_eq!(back.digest(), s.digest());
        let via_trait = <KvStore as StateMachine>::restore(&StateMachine::snapshot(&s)).unwrap();
        prop_assert_eq!(&via_trait, &s);
        for f in &flips {
            let bit = f.index(bytes.len() * 8);
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(KvStore::restore(&b).is_err());
        }
        prop_assert!(KvStore::restore(&bytes[..cut.index(bytes.len())]).is_err());
    }

    /// Equal stores have equal digests whatever led to them: commands that change
    /// nothing (reads, deletes of absent keys, transactions that take an empty branch),
    /// executing and undoing, or a snapshot restore.
    #[test]
    fn the_digest_depends_on_the_contents_only(cmds in commands(40), noise in commands(20)) {
        let direct = build(&cmds);
        let mut winding = KvStore::new();
        for c in cmds.iter().filter(|c| check(c).is_ok()) {
            for n in noise.iter().filter(|n| check(n).is_ok()) {
                let (_, u) = winding.execute(n);
                winding.undo(u);
            }
            winding.execute(c);
            for n in noise.iter().filter(|n| is_read_only(n)) {
                winding.execute(n);
            }
            winding.execute(&KvCommand::delete(vec![b'z'; 9]));
        }
        prop_assert_eq!(&winding, &direct);
        prop_assert_eq!(winding.digest(), direct.digest());
        let restored = KvStore::restore(&direct.snapshot()).unwrap();
        prop_assert_eq!(restored.digest(), direct.digest());
        // And a different state has a different digest.
        let mut other = direct.clone();
        other.execute(&KvCommand::put("a", "changed"));
        prop_assert_ne!(other.digest(), direct.digest());
    }

    #[test]
    fn sizes_beyond_the_limits_are_refused(
        key_len in 0usize..=KEY_BYTES_MAX + 2,
        value_len in prop_oneof![0usize..8, VALUE_BYTES_MAX - 1..=VALUE_BYTES_MAX + 1],
        end_len in KEY_BYTES_MAX - 1..=KEY_BYTES_MAX + 1,
    ) {
        let put = check(&KvCommand::put(vec![b'k'; key_len], vec![b'v'; value_len]));
        let key_ok = (1..=KEY_BYTES_MAX).contains(&key_len);
        prop_assert_eq!(put.is_ok(), key_ok && value_len <= VALUE_BYTES_MAX);
        if let Err(why) = put {
            let size = if key_ok { value_len } else { key_len };
            prop_assert!(why.contains(&size.to_string()) || why.contains("empty key"), "{}", why);
        }
        let range = check(&KvCommand::range("a", vec![b'z'; end_len]));
        prop_assert_eq!(range.is_ok(), end_len <= KEY_BYTES_MAX);
    }

    #[test]
    fn history_json_round_trips(cmds in commands(20)) {
        let mut s = KvStore::new();
        // Compactions and event reads are not operations of the checker's model.
        let recorded = |c: &&KvCommand| {
            check(c).is_ok() && !matches!(c, KvCommand::Compact(_) | KvCommand::Events(_))
        };
        for (i, cmd) in cmds.iter().filter(recorded).enumerate() {
            let (reply, _) = s.execute(cmd);
            for outcome in [Outcome::Ok(&reply), Outcome::Info, Outcome::Fail] {
                let line = event_line(i as u64, cmd, 5, 9, outcome);
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                prop_assert_eq!(&v, &event_json(i as u64, cmd, 5, 9, outcome));
                prop_assert_eq!(&v["service"], "kv");
                let back = command_from_json(&v).unwrap();
                // A range over one key without a limit or flags is recorded as a get,
                // which reads back as exactly that range.
                prop_assert_eq!(&back, cmd);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Partitioning: split commands over four partitions, merge the replies, and compare with
// one unpartitioned store.

/// Keys spread over the four partitions (by first byte) and across their borders.
fn spread_key() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![0x00u8, 0x3f, 0x40, 0x41, 0x7f, 0x80, 0xbf, 0xc0, 0xff]),
        prop::collection::vec(prop::sample::select(vec![0u8, 0x40, 0xff]), 0..10),
    )
        .prop_map(|(first, rest)| {
            let mut k = vec![first];
            k.extend(rest);
            k
        })
}

fn spread_end() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![Just(vec![]), Just(vec![0]), spread_key()]
}

#[derive(Clone, Debug)]
enum PartOp {
    Put(Vec<u8>),
    Range(RangeRequest),
    Delete(DeleteRangeRequest),
}

fn part_op() -> impl Strategy<Value = PartOp> {
    prop_oneof![
        4 => spread_key().prop_map(PartOp::Put),
        3 => (spread_key(), spread_end(), 0u64..5, any::<bool>(), any::<bool>()).prop_map(
            |(key, end, limit, keys_only, count_only)| PartOp::Range(RangeRequest {
                key,
                end,
                limit,
                keys_only,
                count_only: count_only && keys_only,
                revision: 0,
            })
        ),
        1 => (spread_key(), spread_end(), any::<bool>()).prop_map(|(key, end, prev_kv)| {
            PartOp::Delete(DeleteRangeRequest { key, end, prev_kv })
        }),
    ]
}

/// What partitioning keeps of a key-value pair: revisions are per partition.
fn strip(kvs: &[KeyValue]) -> Vec<(Vec<u8>, Vec<u8>, u64)> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), kv.value.clone(), kv.version))
        .collect()
}

fn run_split(parts: &mut [KvStore], cmd: &KvCommand, map: &PartitionMap) -> KvReply {
    let subs = <KvStore as ServiceCodec>::split(cmd, map).unwrap();
    let replies = subs
        .iter()
        .map(|(p, c)| (*p, parts[*p as usize].execute(c).0))
        .collect();
    <KvStore as ServiceCodec>::merge(cmd, replies, map).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn split_and_merge_equal_one_store(ops in prop::collection::vec(part_op(), 1..60)) {
        let map = PartitionMap::new(4, u64::MAX).unwrap();
        let mut whole = KvStore::new();
        let mut parts: Vec<KvStore> = (0..4).map(|_| KvStore::new()).collect();
        for (i, op) in ops.iter().enumerate() {
            let cmd = match op {
                PartOp::Put(k) => KvCommand::put(k.clone(), i.to_string()),
                PartOp::Range(r) => KvCommand::Range(r.clone()),
                PartOp::Delete(d) => KvCommand::DeleteRange(d.clone()),
            };
            let (want, _) = whole.execute(&cmd);
            let got = run_split(&mut parts, &cmd, &map);
            let largest = parts.iter().map(|p| p.revision()).max().unwrap();
            match (&want, &got) {
                (KvReply::Put(_), KvReply::Put(_)) => {}
                (KvReply::Range(w), KvReply::Range(g)) => {
                    prop_assert_eq!(strip(&w.kvs), strip(&g.kvs), "{:?}", cmd);
                    prop_assert_eq!((w.count, w.more), (g.count, g.more));
                    // The merged reply reports the largest revision that answered.
                    prop_assert!(g.revision <= largest);
                }
                (KvReply::DeleteRange(w), KvReply::DeleteRange(g)) => {
                    prop_assert_eq!(w.deleted, g.deleted);
                    prop_assert_eq!(strip(&w.prev_kvs), strip(&g.prev_kvs));
                }
                _ => prop_assert!(false, "reply kinds differ: {:?} {:?}", want, got),
            }
            // Each partition holds exactly the keys of its range.
            let mut union: Vec<KeyValue> = parts.iter().flat_map(|p| p.iter()).collect();
            for (p, store) in parts.iter().enumerate() {
                for kv in store.iter() {
                    prop_assert_eq!(map.of_key(partita_service::PartitionKey::position(&kv.key)), p as u32);
                }
            }
            union.sort_by(|a, b| a.key.cmp(&b.key));
            prop_assert_eq!(strip(&union), strip(&whole.iter().collect::<Vec<_>>()));
        }
    }

    #[test]
    fn transactions_spanning_partitions_are_refused(a in spread_key(), b in spread_key()) {
        let map = PartitionMap::new(4, u64::MAX).unwrap();
        let txn = KvCommand::Txn(TxnRequest {
            compare: vec![Compare { key: a.clone(), op: CompareOp::Equal, target: CompareTarget::Version(0) }],
            success: vec![RequestOp::Put(PutRequest { key: b.clone(), value: vec![], prev_kv: false, lease: 0 })],
            failure: vec![],
        });
        let pa = map.of_key(partita_service::PartitionKey::position(&a));
        let pb = map.of_key(partita_service::PartitionKey::position(&b));
        let split = <KvStore as ServiceCodec>::split(&txn, &map);
        if pa == pb {
            prop_assert_eq!(split.unwrap(), vec![(pa, txn.clone())]);
        } else {
            prop_assert_eq!(
                split.unwrap_err(),
                partita_service::SplitError::Spans { partitions: vec![pa.min(pb), pa.max(pb)] }
            );
        }
    }
}
