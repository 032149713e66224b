//! Chirper (paper 003 §5.2): a social network over [`ObjectService`]. Users are the
//! objects; each holds its own posts, followers, followees and a materialized
//! timeline, so that `getTimeline` touches one user. A post writes into the timeline
//! of every follower (so it may span every partition); follow and unfollow touch two
//! users (copying or removing the followee's posts).
//!
//! Choices where the paper is silent (also in docs/experiments.md):
//! - a user id carries its community in its high 32 bits (`community << 32 | index`),
//!   and Chirper's own placement ([`crate::StaticMap::Service`]: the paper's
//!   interest-based `f`, an optimised static map) is the community modulo the
//!   partitions, so communities start whole in one partition; with
//!   [`crate::StaticMap::Hashed`] (the paper's runs) users are hashed to partitions
//!   and every community starts spread over all of them;
//! - a user keeps its last [`POSTS_KEPT`] posts and a timeline of the last
//!   [`TIMELINE_KEPT`] posts of its followees, in the order they reached it; a post's
//!   text is at most 140 bytes;
//! - the social graph ([`Graph::generate`]): every user gets a follower count drawn
//!   from a heavy-tailed (Pareto, α = 1.5) distribution with the given mean, capped
//!   at a tenth of the users; each follower is from the user's own community with
//!   probability `p_local` (0.9 by default), otherwise from anywhere;
//! - with [`GraphSpec::scattered`], the groups of shared interest are not the
//!   communities the ids (and so the placement) carry: user `(c, i)` shares its
//!   interests with the users `(c', i')` where `c' + i' ≡ c + i` (mod the communities),
//!   a group spread evenly over every community, so the placement knows nothing of
//!   who follows whom, and the workloads' follows pick a peer of the own group with
//!   the same probability as the followers (an experiment's variant; see
//!   docs/experiments.md).

use crate::{Dests, Kind, ObjectId, ObjectService, View};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

pub const POSTS_KEPT: usize = 20;
pub const TIMELINE_KEPT: usize = 50;
pub const TEXT_MAX: usize = 140;

/// A user id from its community and its index in it.
pub fn user_id(community: u32, index: u32) -> ObjectId {
    (u64::from(community) << 32) | u64::from(index)
}

pub fn community_of(user: ObjectId) -> u32 {
    (user >> 32) as u32
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Post {
    pub author: ObjectId,
    /// Unique per post (the client's id and its count).
    pub id: u64,
    pub text: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub posts: Vec<Post>,
    pub followers: BTreeSet<ObjectId>,
    pub followees: BTreeSet<ObjectId>,
    pub timeline: Vec<Post>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChirperCommand {
    Post {
        user: ObjectId,
        id: u64,
        text: String,
    },
    Follow {
        user: ObjectId,
        whom: ObjectId,
    },
    Unfollow {
        user: ObjectId,
        whom: ObjectId,
    },
    GetTimeline {
        user: ObjectId,
    },
    CreateUser {
        user: ObjectId,
    },
    DeleteUser {
        user: ObjectId,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChirperReply {
    /// The post reached this many followers.
    Posted(u32),
    /// Whether following (or unfollowing) changed anything.
    Followed(bool),
    Unfollowed(bool),
    Timeline(Vec<Post>),
    /// A user the command names does not exist.
    NoUser,
}

pub struct Chirper;

fn keep_last(v: &mut Vec<Post>, n: usize) {
    if v.len() > n {
        v.drain(..v.len() - n);
    }
}

impl ObjectService for Chirper {
    const NAME: &'static str = "chirper";
    type Object = User;
    type Command = ChirperCommand;
    type Reply = ChirperReply;

    fn kind(cmd: &ChirperCommand) -> Kind {
        match cmd {
            ChirperCommand::Post { user, .. } | ChirperCommand::GetTimeline { user } => {
                Kind::Access(vec![*user])
            }
            ChirperCommand::Follow { user, whom } | ChirperCommand::Unfollow { user, whom } => {
                Kind::Access(vec![*user, *whom])
            }
            ChirperCommand::CreateUser { user } => Kind::Create(*user),
            ChirperCommand::DeleteUser { user } => Kind::Delete(*user),
        }
    }

    fn placement(id: ObjectId, partitions: usize) -> u16 {
        (community_of(id) as usize % partitions) as u16
    }

    fn static_partitions(
        cmd: &ChirperCommand,
        partitions: usize,
        map: crate::StaticMap,
    ) -> Option<Dests> {
        match cmd {
            // Its followers can be anywhere.
            ChirperCommand::Post { .. } => None,
            _ => crate::placed::<Self>(cmd, partitions, map),
        }
    }

    fn create(_cmd: &ChirperCommand) -> User {
        User::default()
    }

    fn execute(cmd: &ChirperCommand, view: &mut View<'_, User>) -> ChirperReply {
        match cmd {
            ChirperCommand::Post { user, id, text } => {
                let Some(u) = view.get(*user) else {
                    return ChirperReply::NoUser;
                };
                let followers: Vec<ObjectId> = u.followers.iter().copied().collect();
                let post = Post {
                    author: *user,
                    id: *id,
                    text: text.chars().take(TEXT_MAX).collect(),
                };
                if let Some(u) = view.get_mut(*user) {
                    u.posts.push(post.clone());
                    keep_last(&mut u.posts, POSTS_KEPT);
                }
                for f in &followers {
                    if let Some(fu) = view.get_mut(*f) {
                        fu.timeline.push(post.clone());
                        keep_last(&mut fu.timeline, TIMELINE_KEPT);
                    }
                }
                ChirperReply::Posted(followers.len() as u32)
            }
            ChirperCommand::Follow { user, whom } => {
                let (Some(a), Some(b)) = (view.get(*user).cloned(), view.get(*whom).cloned())
                else {
                    return ChirperReply::NoUser;
                };
                if user == whom || a.followees.contains(whom) {
                    return ChirperReply::Followed(false);
                }
                if let Some(a) = view.get_mut(*user) {
                    a.followees.insert(*whom);
                    a.timeline.extend(b.posts.iter().cloned());
                    keep_last(&mut a.timeline, TIMELINE_KEPT);
                }
                if let Some(b) = view.get_mut(*whom) {
                    b.followers.insert(*user);
                }
                ChirperReply::Followed(true)
            }
            ChirperCommand::Unfollow { user, whom } => {
                let (Some(a), Some(_)) = (view.get(*user).cloned(), view.get(*whom).cloned())
                else {
                    return ChirperReply::NoUser;
                };
                if !a.followees.contains(whom) {
                    return ChirperReply::Unfollowed(false);
                }
                if let Some(a) = view.get_mut(*user) {
                    a.followees.remove(whom);
                    a.timeline.retain(|p| p.author != *whom);
                }
                if let Some(b) = view.get_mut(*whom) {
                    b.followers.remove(user);
                }
                ChirperReply::Unfollowed(true)
            }
            ChirperCommand::GetTimeline { user } => match view.get(*user) {
                Some(u) => ChirperReply::Timeline(u.timeline.clone()),
                None => ChirperReply::NoUser,
            },
            // Creates and deletes are the proxies' (they never reach `execute`).
            ChirperCommand::CreateUser { .. } | ChirperCommand::DeleteUser { .. } => {
                ChirperReply::NoUser
            }
        }
    }
}

/// A social graph with communities.
#[derive(Clone, Debug)]
pub struct Graph {
    pub communities: u32,
    pub per_community: u32,
    /// Interest groups across the communities ([`GraphSpec::scattered`]).
    pub scattered: bool,
    /// Probability that a workload's follow or unfollow names a user of the same
    /// interest group: 0.9, or with scattered interests the graph's own `p_local`.
    pub peer_local: f64,
    /// (follower, followee) pairs.
    pub follows: Vec<(ObjectId, ObjectId)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphSpec {
    pub users: u32,
    pub communities: u32,
    /// Mean followers per user.
    pub mean_followers: f64,
    /// Probability that a follower is from the user's own community (with
    /// `scattered`: from the user's own interest group).
    pub p_local: f64,
    pub seed: u64,
    /// Followers and peers from interest groups that cut across the communities, and
    /// so across the placement (see the module doc); `false`: the communities are the
    /// interest groups.
    #[serde(default)]
    pub scattered: bool,
}

impl GraphSpec {
    pub fn new(users: u32, communities: u32) -> GraphSpec {
        GraphSpec {
            users,
            communities,
            mean_followers: 8.0,
            p_local: 0.9,
            seed: 1,
            scattered: false,
        }
    }
}

impl Graph {
    /// Users `user_id(c, i)` for every community c and i below `users / communities`.
    pub fn generate(spec: &GraphSpec) -> Graph {
        assert!(spec.communities >= 1 && spec.users >= spec.communities);
        let per = spec.users / spec.communities;
        let shape = Graph {
            communities: spec.communities,
            per_community: per,
            scattered: spec.scattered,
            peer_local: if spec.scattered { spec.p_local } else { 0.9 },
            follows: Vec::new(),
        };
        let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
        let total = u64::from(per) * u64::from(spec.communities);
        let cap = (total / 10).max(1) as f64;
        // Pareto with alpha 1.5 has mean 3 x_min.
        let alpha = 1.5;
        let x_min = spec.mean_followers * (alpha - 1.0) / alpha;
        let mut follows = Vec::new();
        for c in 0..spec.communities {
            for i in 0..per {
                let u = user_id(c, i);
                let x: f64 = x_min / (1.0 - rng.gen::<f64>()).powf(1.0 / alpha);
                let n = x.min(cap).round() as u64;
                let mut chosen = BTreeSet::new();
                for _ in 0..n {
                    let f = if !rng.gen_bool(spec.p_local) {
                        user_id(rng.gen_range(0..spec.communities), rng.gen_range(0..per))
                    } else if spec.scattered {
                        shape.member_of(shape.interest_of(u), &mut rng)
                    } else {
                        user_id(c, rng.gen_range(0..per))
                    };
                    if f != u {
                        chosen.insert(f);
                    }
                }
                follows.extend(chosen.into_iter().map(|f| (f, u)));
            }
        }
        Graph { follows, ..shape }
    }

    /// The interest group of `user`: its community, or with scattered interests
    /// `(c + i) mod communities` for user `(c, i)`.
    pub fn interest_of(&self, user: ObjectId) -> u32 {
        let c = community_of(user);
        if self.scattered {
            ((u64::from(c) + (user & 0xffff_ffff)) % u64::from(self.communities)) as u32
        } else {
            c
        }
    }

    /// A random user of interest group `g` (with scattered interests: a random
    /// community, then one of the group's users in it).
    fn member_of(&self, g: u32, rng: &mut impl Rng) -> ObjectId {
        if !self.scattered {
            return user_id(g, rng.gen_range(0..self.per_community));
        }
        let n = self.communities;
        loop {
            // A community, then one of its indices i < per_community with c + i ≡ g
            // (mod n): base, base + n, ... (none when base ≥ per_community: draw
            // again; community g itself has base 0).
            let c = rng.gen_range(0..n);
            let base = (g + n - c) % n;
            if base < self.per_community {
                let count = (self.per_community - base).div_ceil(n);
                return user_id(c, base + n * rng.gen_range(0..count));
            }
        }
    }

    pub fn users(&self) -> impl Iterator<Item = ObjectId> + '_ {
        (0..self.communities).flat_map(move |c| (0..self.per_community).map(move |i| user_id(c, i)))
    }

    /// Every user with its followers and followees (empty posts and timelines).
    pub fn objects(&self) -> Vec<(ObjectId, User)> {
        let mut users: std::collections::BTreeMap<ObjectId, User> =
            self.users().map(|u| (u, User::default())).collect();
        for (f, u) in &self.follows {
            users.get_mut(f).expect("a user").followees.insert(*u);
            users.get_mut(u).expect("a user").followers.insert(*f);
        }
        users.into_iter().collect()
    }

    /// A random user, uniformly.
    pub fn random_user(&self, rng: &mut impl Rng) -> ObjectId {
        user_id(
            rng.gen_range(0..self.communities),
            rng.gen_range(0..self.per_community),
        )
    }

    /// A random user of `user`'s community (interest group) with probability
    /// `p_local`, otherwise any.
    pub fn random_peer(&self, user: ObjectId, p_local: f64, rng: &mut impl Rng) -> ObjectId {
        if rng.gen_bool(p_local) {
            self.member_of(self.interest_of(user), rng)
        } else {
            self.random_user(rng)
        }
    }
}

/// The paper's four workloads (§6).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// 100% getTimeline.
    Timeline,
    /// 100% post.
    Post,
    /// 50% follow, 50% unfollow.
    FollowUnfollow,
    /// 7.5% post, 3.75% follow, 3.75% unfollow, 85% getTimeline.
    Mix,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::Timeline,
        Workload::Post,
        Workload::FollowUnfollow,
        Workload::Mix,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Timeline => "timeline",
            Workload::Post => "post",
            Workload::FollowUnfollow => "follow",
            Workload::Mix => "mix",
        }
    }

    pub fn parse(s: &str) -> Result<Workload, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("unknown Chirper workload `{s}` (timeline, post, follow, mix)"))
    }

    /// The next command of a client (`post_id` unique per post).
    pub fn next(self, graph: &Graph, post_id: u64, rng: &mut impl Rng) -> ChirperCommand {
        let user = graph.random_user(rng);
        let r: f64 = rng.gen();
        let pick = match self {
            Workload::Timeline => 0,
            Workload::Post => 1,
            Workload::FollowUnfollow => {
                if r < 0.5 {
                    2
                } else {
                    3
                }
            }
            Workload::Mix => {
                if r < 0.075 {
                    1
                } else if r < 0.1125 {
                    2
                } else if r < 0.15 {
                    3
                } else {
                    0
                }
            }
        };
        match pick {
            0 => ChirperCommand::GetTimeline { user },
            1 => ChirperCommand::Post {
                user,
                id: post_id,
                text: format!("post {post_id}"),
            },
            2 => ChirperCommand::Follow {
                user,
                whom: graph.random_peer(user, graph.peer_local, rng),
            },
            _ => ChirperCommand::Unfollow {
                user,
                whom: graph.random_peer(user, graph.peer_local, rng),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reference;

    fn run(r: &mut Reference<Chirper>, cmd: ChirperCommand) -> ChirperReply {
        r.execute(&cmd)
    }

    #[test]
    fn posts_reach_followers_and_follows_copy_posts() {
        let (a, b, c) = (user_id(0, 0), user_id(0, 1), user_id(1, 0));
        let mut r = Reference::<Chirper>::default();
        r.load([a, b, c].map(|u| (u, User::default())));
        assert_eq!(
            run(&mut r, ChirperCommand::Follow { user: b, whom: a }),
            ChirperReply::Followed(true)
        );
        assert_eq!(
            run(&mut r, ChirperCommand::Follow { user: b, whom: a }),
            ChirperReply::Followed(false)
        );
        let post = |id| ChirperCommand::Post {
            user: a,
            id,
            text: format!("hello {id}"),
        };
        assert_eq!(run(&mut r, post(1)), ChirperReply::Posted(1));
        let ChirperReply::Timeline(t) = run(&mut r, ChirperCommand::GetTimeline { user: b }) else {
            panic!()
        };
        assert_eq!(t.iter().map(|p| p.id).collect::<Vec<_>>(), vec![1]);
        // c follows a later: a's posts are copied into c's timeline.
        run(&mut r, ChirperCommand::Follow { user: c, whom: a });
        let ChirperReply::Timeline(t) = run(&mut r, ChirperCommand::GetTimeline { user: c }) else {
            panic!()
        };
        assert_eq!(t.len(), 1);
        assert_eq!(
            run(&mut r, ChirperCommand::Unfollow { user: b, whom: a }),
            ChirperReply::Unfollowed(true)
        );
        assert_eq!(
            run(&mut r, ChirperCommand::GetTimeline { user: b }),
            ChirperReply::Timeline(vec![])
        );
        assert_eq!(
            run(
                &mut r,
                ChirperCommand::GetTimeline {
                    user: user_id(9, 9)
                }
            ),
            ChirperReply::NoUser
        );
        // Timelines and posts stay bounded.
        for id in 2..200 {
            run(&mut r, post(id));
        }
        assert_eq!(r.objects[&a].posts.len(), POSTS_KEPT);
        assert_eq!(r.objects[&c].timeline.len(), TIMELINE_KEPT);
    }

    #[test]
    fn the_graph_has_communities_and_a_heavy_tail() {
        let g = Graph::generate(&GraphSpec::new(10_000, 10));
        let users = g.objects();
        assert_eq!(users.len(), 10_000);
        let local = g
            .follows
            .iter()
            .filter(|(f, u)| community_of(*f) == community_of(*u))
            .count();
        let share = local as f64 / g.follows.len() as f64;
        assert!(share > 0.85, "followers from the own community: {share}");
        let mean = g.follows.len() as f64 / 10_000.0;
        assert!((5.0..11.0).contains(&mean), "mean followers {mean}");
        let max = users.iter().map(|(_, u)| u.followers.len()).max().unwrap();
        assert!(
            max as f64 > 10.0 * mean,
            "heaviest user has {max} followers (mean {mean})"
        );
        // Placement keeps communities whole.
        for (u, _) in users.iter().take(100) {
            assert_eq!(Chirper::placement(*u, 4), (community_of(*u) % 4) as u16);
        }
        // Deterministic.
        assert_eq!(
            Graph::generate(&GraphSpec::new(10_000, 10)).follows,
            g.follows
        );
    }

    /// The paper's placement: users hashed to partitions, so every community starts
    /// spread over all of them (about a 1/P share of follows inside a partition),
    /// evenly; Chirper's own map keeps each community whole (almost every follow
    /// inside one partition). The same ids always hash alike.
    #[test]
    fn a_hashed_map_spreads_every_community_and_the_service_map_keeps_it_whole() {
        use crate::StaticMap;
        let g = Graph::generate(&GraphSpec::new(10_000, 64));
        let users: Vec<ObjectId> = g.users().collect();
        let inside = |map: StaticMap| {
            let n = g
                .follows
                .iter()
                .filter(|(f, u)| map.place::<Chirper>(*f, 8) == map.place::<Chirper>(*u, 8))
                .count();
            n as f64 / g.follows.len() as f64
        };
        assert!(
            inside(StaticMap::Service) > 0.85,
            "{}",
            inside(StaticMap::Service)
        );
        let hashed = inside(StaticMap::Hashed);
        assert!((0.08..0.18).contains(&hashed), "{hashed} of follows inside");
        for c in 0..64 {
            let mut per = [0u32; 8];
            for u in users.iter().filter(|u| community_of(**u) == c) {
                per[usize::from(StaticMap::Hashed.place::<Chirper>(*u, 8))] += 1;
            }
            assert!(per.iter().all(|&n| n > 0), "community {c}: {per:?}");
            let whole: std::collections::BTreeSet<u16> = users
                .iter()
                .filter(|u| community_of(**u) == c)
                .map(|u| StaticMap::Service.place::<Chirper>(*u, 8))
                .collect();
            assert_eq!(whole.len(), 1, "community {c}");
        }
        let mut per = [0u32; 8];
        for u in &users {
            per[usize::from(StaticMap::hashed(*u, 8))] += 1;
        }
        assert!(
            per.iter().all(|&n| (1_050..1_450).contains(&n)),
            "10,000 users over 8 partitions: {per:?}"
        );
        assert!(users.iter().all(|u| StaticMap::hashed(*u, 1) == 0));
        // Pinned: nodes and clients of different builds must put every user in the
        // same partition, so the hash may never change.
        let pinned = [0, 1, user_id(3, 7), user_id(63, 155)];
        assert_eq!(pinned.map(|u| StaticMap::hashed(u, 8)), [7, 1, 3, 6]);
        assert_eq!(pinned.map(|u| StaticMap::hashed(u, 5)), [0, 0, 0, 3]);
        assert_eq!(StaticMap::parse("hashed"), Ok(StaticMap::Hashed));
        assert_eq!(StaticMap::parse("service"), Ok(StaticMap::Service));
        assert!(StaticMap::parse("community")
            .unwrap_err()
            .contains("hashed"));
    }

    /// Scattered interests: every follow inside one interest group (p_local = 1),
    /// each group spread over every community and so over every partition of the
    /// placement; peers drawn the same way; fewer users per community than
    /// communities still works.
    #[test]
    fn scattered_interests_cut_across_the_placement() {
        for (users, communities) in [(10_000, 64), (4_000, 64), (300, 10)] {
            let spec = GraphSpec {
                p_local: 1.0,
                scattered: true,
                ..GraphSpec::new(users, communities)
            };
            let g = Graph::generate(&spec);
            assert!(!g.follows.is_empty());
            assert_eq!(g.peer_local, 1.0, "the workloads' peers as the followers");
            for (f, u) in &g.follows {
                assert_eq!(g.interest_of(*f), g.interest_of(*u), "{f:x} follows {u:x}");
            }
            // Follows across the placement: most pairs are in different partitions.
            let crossing = g
                .follows
                .iter()
                .filter(|(f, u)| Chirper::placement(*f, 4) != Chirper::placement(*u, 4))
                .count();
            let share = crossing as f64 / g.follows.len() as f64;
            assert!(
                share > 0.6,
                "{users}/{communities}: {share} of follows cross"
            );
            // Every group reaches every community.
            let mut seen = std::collections::BTreeSet::new();
            for u in g.users() {
                seen.insert((g.interest_of(u), community_of(u)));
            }
            let pairs = u64::from(communities) * u64::from(communities);
            assert!(
                seen.len() as u64 >= pairs * 9 / 10,
                "{} of {pairs}",
                seen.len()
            );
            let mut rng = ChaCha8Rng::seed_from_u64(5);
            for u in g.users().take(50) {
                let p = g.random_peer(u, 1.0, &mut rng);
                assert_eq!(g.interest_of(p), g.interest_of(u));
                assert!(
                    community_of(p) < communities && (p & 0xffff_ffff) < u64::from(g.per_community)
                );
            }
        }
        // Without it, the interest group is the community.
        let g = Graph::generate(&GraphSpec::new(1_000, 10));
        assert!(g.users().all(|u| g.interest_of(u) == community_of(u)));
        assert_eq!(g.peer_local, 0.9);
    }
}
