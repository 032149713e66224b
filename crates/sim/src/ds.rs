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
use partita_dssmr::server::Server;
use partita_dssmr::ObjectId;
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
pub fn check_placement(
    partitions: &[(u16, &Server<Chirper>)],
    oracle: Option<&Server<Chirper>>,
) -> Result<BTreeMap<ObjectId, u16>, String> {
    let mut located: BTreeMap<ObjectId, u16> = BTreeMap::new();
    for (p, s) in partitions {
        for id in s.objects().keys() {
            if let Some(q) = located.insert(*id, *p) {
                return Err(format!("user {id:#x} is in partitions {q} and {p}"));
            }
        }
    }
    if let Some(o) = oracle {
        let map: BTreeMap<ObjectId, u16> = o.map().iter().map(|(k, v)| (*k, *v)).collect();
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
                "the oracle's map is wrong about {} users: {}",
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
