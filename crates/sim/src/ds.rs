//! S-SMR/DS-SMR Chirper runs as the checker sees them: commands and outcomes in the
//! checker's own Chirper model (`partita_checker::chirper`, which shares no code with
//! the service it judges), the swarm's command mix, and the checks of the state at
//! the end (every user in at most one partition, the oracle's map where the users
//! are, and a final read of every timeline appended to the history so that a post
//! lost after its acknowledgement shows up as a violation). The real-process nemesis
//! (`partita-harness`) uses the same functions.

use partita_checker::chirper::{ChirperEvent, ChirperInitial, ChirperOp, ChirperResult};
use partita_dssmr::chirper::{user_id, Chirper, ChirperCommand, ChirperReply, Graph};
use partita_dssmr::client::Outcome;
use partita_dssmr::kv::changed;
use partita_dssmr::server::Server;
use partita_dssmr::{ObjectId, ObjectService, StaticMap};
use partita_kv::history::{event_line, Outcome as KvOutcome};
use partita_kv::{
    DeleteRangeResponse, KeyValue, KvCommand, KvReply, PutResponse, RangeRequest, RangeResponse,
    ResponseOp, TxnResponse,
};
use rand::Rng;
use std::collections::BTreeMap;

/// Ids past each community's users that the swarm's creates may bring to life.
pub const EXTRA_PER_COMMUNITY: u32 = 2;

/// The checker's op for a Chirper command.
pub fn op_of(cmd: &ChirperCommand) -> ChirperOp {
    match cmd {
        ChirperCommand::Post { user, id, .. } => ChirperOp::Post {
            user: *user,
            id: *id,
        },
        ChirperCommand::Follow { user, whom } => ChirperOp::Follow {
            user: *user,
            whom: *whom,
        },
        ChirperCommand::Unfollow { user, whom } => ChirperOp::Unfollow {
            user: *user,
            whom: *whom,
        },
        ChirperCommand::GetTimeline { user } => ChirperOp::Timeline { user: *user },
        ChirperCommand::CreateUser { user } => ChirperOp::Create { user: *user },
        ChirperCommand::DeleteUser { user } => ChirperOp::Delete { user: *user },
    }
}

/// The checker's result for a reply of the service.
pub fn reply_of(r: &ChirperReply) -> ChirperResult {
    match r {
        ChirperReply::Posted(n) => ChirperResult::Posted(*n),
        ChirperReply::Followed(b) => ChirperResult::Followed(*b),
        ChirperReply::Unfollowed(b) => ChirperResult::Unfollowed(*b),
        ChirperReply::Timeline(posts) => {
            ChirperResult::Timeline(posts.iter().map(|p| (p.author, p.id)).collect())
        }
        ChirperReply::NoUser => ChirperResult::NoUser,
    }
}

/// The checker's result for what the client proxy ended `cmd` with; `Err` when a
/// member refused what the proxy sent (never in a correct run). The proxy's `Nok`
/// is "no such user", or for a create "the user exists already".
pub fn result_of(cmd: &ChirperCommand, o: &Outcome<ChirperReply>) -> Result<ChirperResult, String> {
    match o {
        Outcome::Done(r) => Ok(reply_of(r)),
        Outcome::Nok if matches!(cmd, ChirperCommand::CreateUser { .. }) => {
            Ok(ChirperResult::Created(false))
        }
        Outcome::Nok => Ok(ChirperResult::NoUser),
        Outcome::Created(b) => Ok(ChirperResult::Created(*b)),
        Outcome::Deleted => Ok(ChirperResult::Deleted),
        Outcome::Failed(why) => Err(why.clone()),
    }
}

/// The initial state every member loads, in the checker's terms.
pub fn initial_of(graph: &Graph) -> ChirperInitial {
    ChirperInitial::new(
        graph
            .objects()
            .into_iter()
            .map(|(u, user)| (u, user.followees.into_iter().collect::<Vec<_>>())),
    )
}

/// Every user id a swarm run may name: the graph's and a few more per community.
pub fn universe(graph: &Graph) -> Vec<ObjectId> {
    (0..graph.communities)
        .flat_map(|c| (0..graph.per_community + EXTRA_PER_COMMUNITY).map(move |i| user_id(c, i)))
        .collect()
}

/// The swarm's mix: every command kind (timelines 30%, posts 25%, follows and
/// unfollows 15% each, creates 8%, deletes 7%), users mostly of the graph and
/// sometimes past it (so creates succeed and commands meet missing users), peers
/// from the user's community half of the time.
pub fn swarm_command(graph: &Graph, post_id: u64, rng: &mut impl Rng) -> ChirperCommand {
    let any = |rng: &mut dyn rand::RngCore| {
        let c = rng.gen_range(0..graph.communities);
        let i = if rng.gen_bool(0.1) {
            graph.per_community + rng.gen_range(0..EXTRA_PER_COMMUNITY)
        } else {
            rng.gen_range(0..graph.per_community)
        };
        user_id(c, i)
    };
    let user = any(rng);
    let peer = |rng: &mut dyn rand::RngCore| {
        if rng.gen_bool(0.5) {
            user_id(
                partita_dssmr::chirper::community_of(user),
                rng.gen_range(0..graph.per_community),
            )
        } else {
            any(rng)
        }
    };
    match rng.gen_range(0..100) {
        0..30 => ChirperCommand::GetTimeline { user },
        30..55 => ChirperCommand::Post {
            user,
            id: post_id,
            text: format!("post {post_id}"),
        },
        55..70 => ChirperCommand::Follow {
            user,
            whom: peer(rng),
        },
        70..85 => ChirperCommand::Unfollow {
            user,
            whom: peer(rng),
        },
        85..93 => ChirperCommand::CreateUser { user },
        _ => ChirperCommand::DeleteUser { user },
    }
}

/// The state at the end: `partitions` (one server per data partition) and the
/// oracle's, if any. Every user must be in at most one partition, and the oracle's
/// map must say where each one is and name no other.
///
/// For a service of implicit objects (the key-value store's), the oracle lists only
/// the objects away from where `static_map` puts them (among `data` partitions).
pub fn check_placement<S: ObjectService>(
    partitions: &[(u16, &Server<S>)],
    oracle: Option<&Server<S>>,
    static_map: StaticMap,
    data: usize,
) -> Result<BTreeMap<ObjectId, u16>, String> {
    let mut located: BTreeMap<ObjectId, u16> = BTreeMap::new();
    for (p, s) in partitions {
        for id in s.objects().keys() {
            if let Some(q) = located.insert(*id, *p) {
                return Err(format!("object {id:#x} is in partitions {q} and {p}"));
            }
        }
    }
    if let Some(o) = oracle {
        let map: BTreeMap<ObjectId, u16> = o.map().iter().map(|(k, v)| (*k, *v)).collect();
        let located: BTreeMap<ObjectId, u16> = match S::implicit() {
            Some(_) => located
                .iter()
                .filter(|(id, p)| static_map.place::<S>(**id, data) != **p)
                .map(|(id, p)| (*id, *p))
                .collect(),
            None => located.clone(),
        };
        if map != located {
            let wrong: Vec<String> = map
                .iter()
                .filter(|(k, v)| located.get(k) != Some(v))
                .map(|(k, v)| format!("{k:#x} at {v} (is at {:?})", located.get(k)))
                .chain(
                    located
                        .keys()
                        .filter(|k| !map.contains_key(k))
                        .map(|k| format!("{k:#x} missing")),
                )
                .take(5)
                .collect();
            return Err(format!(
                "the oracle's map is wrong about {} objects: {}",
                map.iter()
                    .filter(|(k, v)| located.get(k) != Some(v))
                    .count()
                    + located.keys().filter(|k| !map.contains_key(k)).count(),
                wrong.join(", ")
            ));
        }
    }
    Ok(located)
}

/// A read of every timeline in `users` from the final state of `partitions`, as one
/// client (`client`) reading one user after another from time `at` on: appended to
/// a history, they make the checker judge the state the run left behind.
pub fn final_reads(
    partitions: &[(u16, &Server<Chirper>)],
    users: &[ObjectId],
    client: u64,
    at: u64,
) -> Vec<ChirperEvent> {
    users
        .iter()
        .enumerate()
        .map(|(i, &u)| {
            let result = partitions
                .iter()
                .find_map(|(_, s)| s.objects().get(&u))
                .map(|user| {
                    ChirperResult::Timeline(
                        user.timeline.iter().map(|p| (p.author, p.id)).collect(),
                    )
                })
                .unwrap_or(ChirperResult::NoUser);
            let t = at + 2 * i as u64;
            ChirperEvent {
                client,
                op: ChirperOp::Timeline { user: u },
                invoked: t,
                returned: Some(t + 1),
                result: Some(result),
            }
        })
        .collect()
}

/// One command of a key-value S-SMR/DS-SMR client: its reply, `None` when unknown.
#[derive(Clone, Debug)]
pub struct KvEvent {
    pub client: u64,
    pub cmd: KvCommand,
    pub invoked: u64,
    pub returned: Option<u64>,
    pub reply: Option<KvReply>,
}

/// Every pair a reply shows (read, or before a change).
fn reply_kvs(reply: &KvReply) -> Vec<&KeyValue> {
    fn op(r: &ResponseOp) -> Vec<&KeyValue> {
        match r {
            ResponseOp::Put(p) => p.prev_kv.iter().collect(),
            ResponseOp::Range(q) => q.kvs.iter().collect(),
            ResponseOp::DeleteRange(d) => d.prev_kvs.iter().collect(),
        }
    }
    match reply {
        KvReply::Put(p) => p.prev_kv.iter().collect(),
        KvReply::Range(q) => q.kvs.iter().collect(),
        KvReply::DeleteRange(d) => d.prev_kvs.iter().collect(),
        KvReply::Txn(t) => t.responses.iter().flat_map(op).collect(),
        _ => Vec::new(),
    }
}

/// A key-value S-SMR/DS-SMR history in the key-value checker's format, with a read of
/// every key of the final state (`keys`, from the partitions) appended at time `at`.
///
/// The store's revisions there are positions in the order (`partita_dssmr::kv`):
/// unique, growing with real time, not dense; the checker's model counts one
/// revision per change. So they are renumbered: the writes acknowledged, in revision
/// order, take 2, 3, ..., and a revision `r` that a read reports becomes one more
/// than the number of writes at or below it. That is exact when every command's
/// outcome is known (these clients never give up), keeps every order the checker
/// judges, and a key that shows a revision no acknowledged write made is a violation
/// by itself.
///
/// When some outcomes are unknown, a revision that keys show and no acknowledged
/// write made is kept too (for the checker to give to one of them); one they made
/// that nothing shows gets no revision, which the checker can only take for one that
/// never happened (or after everything): then a delete of unknown outcome seen only
/// as a key's absence may be judged a violation. The simulator's seeds avoid unknown
/// outcomes there (no short session leases).
pub fn kv_lines(events: &[KvEvent], keys: Vec<KeyValue>, at: u64) -> Result<Vec<String>, String> {
    let mut writes: Vec<u64> = events
        .iter()
        .filter_map(|e| {
            e.reply
                .as_ref()
                .filter(|r| changed(r))
                .map(|r| r.revision())
        })
        .collect();
    writes.sort_unstable();
    if let Some(d) = writes.windows(2).find(|w| w[0] == w[1]) {
        let both: Vec<String> = events
            .iter()
            .filter(|e| {
                e.reply
                    .as_ref()
                    .is_some_and(|r| changed(r) && r.revision() == d[0])
            })
            .map(|e| format!("client {} {:?} -> {:?}", e.client, e.cmd, e.reply))
            .collect();
        return Err(format!(
            "two acknowledged writes report revision {}: {}",
            d[0],
            both.join("; ")
        ));
    }
    if events.iter().any(|e| e.reply.is_none()) {
        let mut shown: Vec<u64> = keys
            .iter()
            .chain(
                events
                    .iter()
                    .filter_map(|e| e.reply.as_ref())
                    .flat_map(reply_kvs),
            )
            .flat_map(|k| [k.create_revision, k.mod_revision])
            .filter(|r| writes.binary_search(r).is_err())
            .collect();
        shown.sort_unstable();
        shown.dedup();
        writes.extend(shown);
        writes.sort_unstable();
    }
    let writes = writes;
    let dense = |r: u64| 1 + writes.partition_point(|w| *w <= r) as u64;
    let made = |r: u64| -> Result<u64, String> {
        match writes.binary_search(&r) {
            Ok(i) => Ok(2 + i as u64),
            Err(_) => Err(format!(
                "a key shows revision {r}, which no acknowledged write made"
            )),
        }
    };
    let kv = |k: &KeyValue| -> Result<KeyValue, String> {
        Ok(KeyValue {
            create_revision: made(k.create_revision)?,
            mod_revision: made(k.mod_revision)?,
            ..k.clone()
        })
    };
    let range = |r: &RangeResponse| -> Result<RangeResponse, String> {
        Ok(RangeResponse {
            kvs: r.kvs.iter().map(kv).collect::<Result<_, _>>()?,
            revision: dense(r.revision),
            ..r.clone()
        })
    };
    let delete = |d: &DeleteRangeResponse| -> Result<DeleteRangeResponse, String> {
        Ok(DeleteRangeResponse {
            prev_kvs: d.prev_kvs.iter().map(kv).collect::<Result<_, _>>()?,
            revision: dense(d.revision),
            ..d.clone()
        })
    };
    let put = |p: &PutResponse| -> Result<PutResponse, String> {
        Ok(PutResponse {
            prev_kv: p.prev_kv.as_ref().map(kv).transpose()?,
            revision: dense(p.revision),
        })
    };
    let renumber = |r: &KvReply| -> Result<KvReply, String> {
        Ok(match r {
            KvReply::Put(p) => KvReply::Put(put(p)?),
            KvReply::Range(q) => KvReply::Range(range(q)?),
            KvReply::DeleteRange(d) => KvReply::DeleteRange(delete(d)?),
            KvReply::Txn(t) => KvReply::Txn(TxnResponse {
                succeeded: t.succeeded,
                responses: t
                    .responses
                    .iter()
                    .map(|o| {
                        Ok(match o {
                            ResponseOp::Put(p) => ResponseOp::Put(put(p)?),
                            ResponseOp::Range(q) => ResponseOp::Range(range(q)?),
                            ResponseOp::DeleteRange(d) => ResponseOp::DeleteRange(delete(d)?),
                        })
                    })
                    .collect::<Result<_, String>>()?,
                revision: dense(t.revision),
            }),
            other => return Err(format!("a reply of no kind the mix sends: {other:?}")),
        })
    };
    let mut lines = Vec::with_capacity(events.len() + 1);
    for e in events {
        let line = match (&e.reply, e.returned) {
            (Some(r), Some(ret)) => {
                let r = renumber(r).map_err(|m| format!("{:?}: {m}", e.cmd))?;
                event_line(e.client, &e.cmd, e.invoked, ret, KvOutcome::Ok(&r))
            }
            _ => event_line(e.client, &e.cmd, e.invoked, e.invoked, KvOutcome::Info),
        };
        lines.push(line);
    }
    let all = KvCommand::Range(RangeRequest::new(vec![0], vec![0]));
    let last = writes.last().copied().unwrap_or(0);
    let finals = KvReply::Range(RangeResponse {
        count: keys.len() as u64,
        kvs: keys,
        more: false,
        revision: last,
    });
    let finals = renumber(&finals).map_err(|m| format!("the final state: {m}"))?;
    lines.push(event_line(
        u64::MAX / 2,
        &all,
        at,
        at + 1,
        KvOutcome::Ok(&finals),
    ));
    Ok(lines)
}
