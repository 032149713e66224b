//! The key-value store on S-SMR and DS-SMR (`partita_dssmr::kv`) in a small
//! deterministic world: one atomic-multicast sequence that every member delivers its
//! part of, clients whose commands interleave at random (puts, reads, deletes,
//! transactions over pairs of keys in different partitions, ranges and delete
//! ranges, reads at the revision of a write acknowledged before and event reads
//! from one, over the objects' histories), moves, retries and fallbacks. Every run is judged against one
//! unpartitioned `KvStore` that executes the commands that took effect in the order
//! of their positions:
//!
//! - every reply equals the store's, with the store's dense revisions translated to
//!   the positions of the writes that made them (so create and mod revisions are
//!   checked exactly, not only values);
//! - the keys at the end are the store's, every object is in one partition at most,
//!   and the oracle places every object where it is.
//!
//! The DS-SMR planted bugs are caught by the check they break.

use partita_dssmr::client::*;
use partita_dssmr::kv::{changed, key_object, KvObjects};
use partita_dssmr::server::*;
use partita_dssmr::*;
use partita_kv::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};

struct Client {
    proxy: ClientProxy<KvObjects>,
    cmd: Option<KvCommand>,
    /// Multicasts made and not yet ordered.
    outbox: VecDeque<Multicast<KvCommand>>,
    seq: u64,
}

/// What one run gives the checks.
struct Run {
    /// (place in the sequence, instance, command, reply) of every command that took
    /// effect (an instance holds one command or several).
    done: Vec<(u64, u64, KvCommand, KvReply)>,
    servers: Vec<Server<KvObjects>>,
    partitions: usize,
    scheme: Scheme,
    moves: u64,
    scans: u64,
    /// Commands that read history (at a past revision, or events from one).
    history: u64,
}

fn key(rng: &mut ChaCha8Rng) -> Vec<u8> {
    format!("k{:02}", rng.gen_range(0..24)).into_bytes()
}

fn command(rng: &mut ChaCha8Rng) -> KvCommand {
    let put = |k: Vec<u8>, v: u64| PutRequest {
        key: k,
        value: format!("v{v}").into_bytes(),
        prev_kv: v.is_multiple_of(2),
        lease: 0,
    };
    match rng.gen_range(0..100) {
        0..=34 => KvCommand::Put(put(key(rng), rng.gen())),
        35..=54 => KvCommand::Range(RangeRequest::new(key(rng), Vec::new())),
        55..=59 => KvCommand::DeleteRange(DeleteRangeRequest {
            key: key(rng),
            end: Vec::new(),
            prev_kv: true,
        }),
        // A compare-and-swap over two keys (likely in two partitions).
        60..=79 => {
            let (a, mut b) = (key(rng), key(rng));
            if a == b {
                b.push(b'x');
            }
            KvCommand::Txn(TxnRequest {
                compare: vec![Compare {
                    key: a.clone(),
                    op: CompareOp::Less,
                    target: CompareTarget::Version(rng.gen_range(0..4)),
                }],
                success: vec![
                    RequestOp::Put(put(a.clone(), rng.gen())),
                    RequestOp::Put(put(b.clone(), rng.gen())),
                ],
                failure: vec![RequestOp::Range(RangeRequest::new(b, Vec::new()))],
            })
        }
        80..=91 => {
            let (a, b) = (key(rng), key(rng));
            let (a, b) = if a <= b { (a, b) } else { (b, a) };
            let mut r = RangeRequest::new(a, b);
            r.limit = rng.gen_range(0..4);
            KvCommand::Range(r)
        }
        92..=95 => {
            let a = key(rng);
            let mut b = a.clone();
            b.push(b'9');
            KvCommand::DeleteRange(DeleteRangeRequest {
                key: a,
                end: b,
                prev_kv: false,
            })
        }
        _ => KvCommand::Txn(TxnRequest {
            compare: vec![],
            success: vec![RequestOp::DeleteRange(DeleteRangeRequest {
                key: key(rng),
                end: vec![0],
                prev_kv: false,
            })],
            failure: vec![],
        }),
    }
}

/// A command that reads history: a range or one key at revision `at` (a write's
/// position), or the events of a range or a key from `at` on.
fn history_command(rng: &mut ChaCha8Rng, at: u64) -> KvCommand {
    let (a, b) = (key(rng), key(rng));
    let (a, b) = if a <= b { (a, b) } else { (b, a) };
    let end = if rng.gen_bool(0.5) { b } else { Vec::new() };
    if rng.gen_bool(0.5) {
        let mut r = RangeRequest::new(a, end);
        r.revision = at;
        KvCommand::Range(r)
    } else {
        KvCommand::Events(EventsRequest {
            key: a,
            end,
            start_revision: at,
            limit: 0,
        })
    }
}

fn run(
    scheme: Scheme,
    partitions: usize,
    clients: usize,
    commands: u64,
    seed: u64,
    planted: Planted,
) -> Run {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let static_map = StaticMap::Hashed;
    let mut members: Vec<Member> = (0..partitions as u16).map(Member::Partition).collect();
    if scheme == Scheme::Dssmr {
        members.push(Member::Oracle);
    }
    let mut servers: Vec<Server<KvObjects>> = members
        .iter()
        .map(|m| {
            let mut s = Server::new(*m, partitions, static_map);
            s.set_planted(planted);
            s
        })
        .collect();
    let index = |m: Member| match m {
        Member::Partition(p) => usize::from(p),
        Member::Oracle => partitions,
    };
    let mut cs: Vec<Client> = (0..clients)
        .map(|c| {
            let mut cfg = ProxyConfig::new(scheme, partitions);
            cfg.static_map = static_map;
            Client {
                proxy: ClientProxy::new(cfg, seed ^ (c as u64 + 1)),
                cmd: None,
                outbox: VecDeque::new(),
                seq: 0,
            }
        })
        .collect();
    let (mut issued, mut instance, mut order) = (0u64, 0u64, 0u64);
    let mut done = Vec::new();
    let mut scans = 0;
    // The writes acknowledged so far: (instance, position). A history command reads
    // at one of an instance before the newest: this world delivers a multicast as it
    // orders it, so a later command may join the instance of a write that already
    // answered, which no real ordering does (an instance is decided whole before any
    // of it is delivered), and there its position may be below the write's.
    let mut written: Vec<(u64, u64)> = Vec::new();
    let mut history = 0;
    // Which client and whether answered, by (client, seq) of each multicast ordered.
    while issued < commands || cs.iter().any(|c| c.cmd.is_some()) {
        let c = rng.gen_range(0..clients);
        if cs[c].cmd.is_none() {
            if issued >= commands {
                continue;
            }
            issued += 1;
            let before = written.partition_point(|(i, _)| *i < instance);
            let cmd = match before {
                n if n > 0 && rng.gen_bool(0.1) => {
                    let at = written[rng.gen_range(0..n)].1;
                    history += 1;
                    history_command(&mut rng, at)
                }
                _ => command(&mut rng),
            };
            scans += u64::from(KvObjects::scans(&cmd));
            let mut out = Vec::new();
            cs[c].proxy.submit(cmd.clone(), &mut out);
            cs[c].cmd = Some(cmd);
            cs[c].outbox.extend(out);
            continue;
        }
        let Some(m) = cs[c].outbox.pop_front() else {
            continue;
        };
        // Order it: every destination delivers it now; exchanges go at once.
        // Half of the multicasts share the instance of the one before (a batch).
        if instance == 0 || rng.gen_bool(0.5) {
            instance += 1;
        }
        order += 1;
        cs[c].seq += 1;
        let at = CmdRef {
            instance,
            client: c as u64,
            seq: cs[c].seq,
        };
        let mut outs: Vec<(Member, Output<KvReply>)> = Vec::new();
        for d in m.dests.members() {
            let mut o = Vec::new();
            // Ordered time: 10 ms per instance.
            servers[index(d)].deliver(at, instance * 10, m.dests, m.cmd.clone(), &mut o);
            outs.extend(o.into_iter().map(|x| (d, x)));
        }
        let mut answer = None;
        while let Some((from, o)) = outs.pop() {
            match o {
                Output::Exchange { to, msg } => {
                    for d in to.members() {
                        let mut more = Vec::new();
                        servers[index(d)].on_exchange(msg.clone(), &mut more);
                        outs.extend(more.into_iter().map(|x| (d, x)));
                    }
                }
                Output::Reply { reply, .. } if !reply.is_signal() => {
                    assert!(answer.is_none(), "two answers from {from:?}");
                    answer = Some(reply);
                }
                Output::Reply { .. } => {}
            }
        }
        for s in &servers {
            assert_eq!(s.waiting(), 0, "a command left waiting in a lockstep world");
        }
        if !m.answered {
            continue;
        }
        let reply = answer.expect("an answered multicast is answered");
        if let DsReply::Done(r) = &reply {
            if changed(r) {
                written.push((instance, r.revision()));
            }
            done.push((order, instance, cs[c].cmd.clone().unwrap(), r.clone()));
        }
        let mut out = Vec::new();
        let outcome = cs[c].proxy.on_reply(reply, &mut out);
        cs[c].outbox.extend(out);
        if let Some(o) = outcome {
            assert!(matches!(o, Outcome::Done(_)), "{o:?}");
            cs[c].cmd = None;
        }
    }
    let moves = cs.iter().map(|c| c.proxy.stats().objects_moved).sum();
    Run {
        done,
        servers,
        partitions,
        scheme,
        moves,
        scans,
        history,
    }
}

/// `reply` with every revision of a key translated by `f`, and the header revisions
/// (a read's differs by definition: see `partita_dssmr::kv`) set to 0; events sorted
/// by key within one revision (a transaction's come in the order of its operations
/// from one store, of their objects from the objects' histories).
fn normalized(reply: &KvReply, f: &dyn Fn(u64) -> u64) -> KvReply {
    let kv = |k: &KeyValue| KeyValue {
        create_revision: f(k.create_revision),
        mod_revision: f(k.mod_revision),
        ..k.clone()
    };
    let range = |r: &RangeResponse| RangeResponse {
        kvs: r.kvs.iter().map(kv).collect(),
        revision: 0,
        ..r.clone()
    };
    let delete = |d: &DeleteRangeResponse| DeleteRangeResponse {
        prev_kvs: d.prev_kvs.iter().map(kv).collect(),
        revision: 0,
        ..d.clone()
    };
    let put = |p: &PutResponse| PutResponse {
        prev_kv: p.prev_kv.as_ref().map(kv),
        revision: 0,
    };
    match reply {
        KvReply::Put(p) => KvReply::Put(put(p)),
        KvReply::Range(r) => KvReply::Range(range(r)),
        KvReply::DeleteRange(d) => KvReply::DeleteRange(delete(d)),
        KvReply::Txn(t) => KvReply::Txn(TxnResponse {
            succeeded: t.succeeded,
            responses: t
                .responses
                .iter()
                .map(|r| match r {
                    ResponseOp::Put(p) => ResponseOp::Put(put(p)),
                    ResponseOp::Range(q) => ResponseOp::Range(range(q)),
                    ResponseOp::DeleteRange(d) => ResponseOp::DeleteRange(delete(d)),
                })
                .collect(),
            revision: 0,
        }),
        KvReply::Events(e) => {
            let mut events: Vec<Event> = e
                .events
                .iter()
                .map(|ev| Event {
                    kind: ev.kind,
                    kv: kv(&ev.kv),
                    prev_kv: ev.prev_kv.as_ref().map(kv),
                })
                .collect();
            events.sort_by(|a, b| {
                (a.kv.mod_revision, &a.kv.key).cmp(&(b.kv.mod_revision, &b.kv.key))
            });
            KvReply::Events(EventsResponse {
                events,
                revision: 0,
                ..e.clone()
            })
        }
        other => other.clone(),
    }
}

/// `cmd` with the revisions it reads at (positions) translated by `f`.
fn at_revisions(cmd: &KvCommand, f: &dyn Fn(u64) -> u64) -> KvCommand {
    match cmd {
        KvCommand::Range(r) if r.revision != 0 => KvCommand::Range(RangeRequest {
            revision: f(r.revision),
            ..r.clone()
        }),
        KvCommand::Events(e) if e.start_revision != 0 => KvCommand::Events(EventsRequest {
            start_revision: f(e.start_revision),
            ..e.clone()
        }),
        other => other.clone(),
    }
}

/// The first violation of a run, if any.
fn violation(r: &Run) -> Option<String> {
    let mut done = r.done.clone();
    // Replayed in the order of their positions: a write's revision, one past a read's.
    // Commands of one instance at different partitions may take positions in another
    // order than the sequence's (they commute); at any one member, positions follow
    // its delivery.
    done.sort_by_key(|(_, _, _, r)| r.revision() + u64::from(!changed(r)));
    if let Some(w) = done.windows(2).find(|w| {
        w[0].3.revision() + u64::from(!changed(&w[0].3))
            == w[1].3.revision() + u64::from(!changed(&w[1].3))
    }) {
        return Some(format!("{:?} and {:?} have one position", w[0].2, w[1].2));
    }
    let mut store = KvStore::new();
    // The store's dense revision → the position of the write that made it.
    let mut revisions: BTreeMap<u64, u64> = BTreeMap::new();
    // ... and back.
    let mut dense: BTreeMap<u64, u64> = BTreeMap::new();
    for (_, p, cmd, got) in &done {
        if let KvReply::Events(e) = got {
            if !e.events.is_sorted_by_key(|ev| ev.kv.mod_revision) {
                return Some(format!("{cmd:?}: events out of revision order: {e:?}"));
            }
        }
        let before = store.revision();
        let (want, _) = store.execute(&at_revisions(cmd, &|pos| {
            dense.get(&pos).copied().unwrap_or(u64::MAX)
        }));
        if store.revision() != before {
            // A write's revision is its position: its instance's name, then its place.
            if got.revision() >> 24 != *p {
                return Some(format!(
                    "{cmd:?} wrote in instance {p} but reported revision {}",
                    got.revision()
                ));
            }
            revisions.insert(store.revision(), got.revision());
            dense.insert(got.revision(), store.revision());
        }
        // Zero (a deleted key's create revision in its event) stays zero.
        let f = |rev: u64| match rev {
            0 => 0,
            r => revisions.get(&r).copied().unwrap_or(u64::MAX),
        };
        let (want, got) = (normalized(&want, &f), normalized(got, &|rev| rev));
        if want != got {
            return Some(format!(
                "{cmd:?} in instance {p}: replied {got:?}, the unpartitioned store {want:?}"
            ));
        }
    }
    // The keys at the end, each object in one partition at most.
    let mut held: BTreeMap<ObjectId, u16> = BTreeMap::new();
    let mut keys: BTreeMap<Vec<u8>, KeyValue> = BTreeMap::new();
    for s in &r.servers {
        let Member::Partition(p) = s.member() else {
            continue;
        };
        for (id, o) in s.objects() {
            if o.keys.is_empty() {
                continue;
            }
            if let Some(q) = held.insert(*id, p) {
                return Some(format!("object {id:x} in partitions {q} and {p}"));
            }
            for kv in &o.keys {
                if key_object(&kv.key) != *id {
                    return Some(format!("key {:?} in object {id:x}", kv.key));
                }
                keys.insert(kv.key.clone(), kv.clone());
            }
        }
    }
    let f = |rev: u64| revisions.get(&rev).copied().unwrap_or(u64::MAX);
    let want: BTreeMap<Vec<u8>, KeyValue> = store
        .iter()
        .map(|kv| {
            let kv = KeyValue {
                create_revision: f(kv.create_revision),
                mod_revision: f(kv.mod_revision),
                ..kv
            };
            (kv.key.clone(), kv)
        })
        .collect();
    if want != keys {
        return Some(format!(
            "the keys at the end: {keys:?}, the store's {want:?}"
        ));
    }
    if r.scheme == Scheme::Dssmr {
        let oracle = r.servers.last().expect("the oracle");
        for (id, p) in &held {
            let at = oracle
                .map()
                .get(id)
                .copied()
                .unwrap_or_else(|| StaticMap::hashed(*id, r.partitions));
            if at != *p {
                return Some(format!(
                    "object {id:x} is in partition {p}; the oracle says {at}"
                ));
            }
        }
    }
    None
}

#[test]
fn kv_on_ssmr_and_dssmr_equals_one_store() {
    for (scheme, partitions) in [
        (Scheme::Ssmr, 1),
        (Scheme::Ssmr, 3),
        (Scheme::Dssmr, 1),
        (Scheme::Dssmr, 2),
        (Scheme::Dssmr, 4),
    ] {
        for seed in 0..6 {
            let r = run(scheme, partitions, 4, 300, seed, Planted::default());
            assert_eq!(r.done.len(), 300, "every command took effect once");
            if let Some(v) = violation(&r) {
                panic!("{scheme:?} on {partitions} partitions, seed {seed}: {v}");
            }
            if scheme == Scheme::Dssmr && partitions > 1 {
                assert!(r.moves > 0, "DS-SMR moved keys");
            }
            assert!(r.scans > 0, "ranges ran");
            assert!(r.history > 10, "reads of history ran: {}", r.history);
        }
    }
}

/// Each planted bug of the server proxies is caught on the key-value store by the
/// check it breaks: an access run over what happens to be local answers as if absent
/// keys were empty; an oracle that ignores moves misplaces the keys it moved.
#[test]
fn planted_ds_bugs_are_caught_on_the_kv_store() {
    let caught = |planted: Planted, what: &str| {
        let found =
            (0..8).find_map(|seed| violation(&run(Scheme::Dssmr, 3, 4, 300, seed, planted)));
        let v = found.unwrap_or_else(|| panic!("{planted:?} went unnoticed"));
        assert!(v.contains(what), "{planted:?}: {v}");
    };
    caught(
        Planted {
            locality_at_consult: true,
            ..Planted::default()
        },
        "the unpartitioned store",
    );
    caught(
        Planted {
            oracle_ignores_moves: true,
            ..Planted::default()
        },
        "the oracle says",
    );
}
