//! Two executions of Chirper's sequential specification:
//!
//! - [`ChirperSpec`], the specification written down plainly (a map of users), used
//!   to generate histories and as the reference in tests;
//! - `SearchModel`, the same semantics over a persistent state the search can save
//!   and fingerprint cheaply: users are `Arc`-shared, an operation copies only the
//!   users it changes, and each user carries a fingerprint so that the state's is
//!   updated in O(changed users).
//!
//! A test runs both on random operation sequences and compares every result and the
//! final states.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::event::{ChirperEvent, ChirperInitial, ChirperOp, ChirperResult, PostRef};
use super::linearize::{fingerprint_of, Model};

/// Posts a user keeps (its own, the newest).
pub const POSTS_KEPT: usize = 20;
/// Timeline entries a user keeps (the newest).
pub const TIMELINE_KEPT: usize = 50;

fn keep_last<T>(v: &mut Vec<T>, n: usize) {
    if v.len() > n {
        v.drain(..v.len() - n);
    }
}

/// A user of [`ChirperSpec`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChirperUser {
    /// Its own posts, oldest first (the last [`POSTS_KEPT`]).
    pub posts: Vec<PostRef>,
    pub followers: BTreeSet<u64>,
    pub followees: BTreeSet<u64>,
    /// Posts of its followees in the order they reached it (the last
    /// [`TIMELINE_KEPT`]).
    pub timeline: Vec<PostRef>,
}

/// Chirper's sequential specification, executed plainly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChirperSpec {
    pub users: BTreeMap<u64, ChirperUser>,
}

impl ChirperSpec {
    /// The state `initial` describes.
    pub fn new(initial: &ChirperInitial) -> ChirperSpec {
        let followers = initial.followers();
        let users = followers
            .into_iter()
            .map(|(id, followers)| {
                let followees = initial.followees.get(&id).cloned().unwrap_or_default();
                let user = ChirperUser {
                    followers,
                    followees,
                    ..ChirperUser::default()
                };
                (id, user)
            })
            .collect();
        ChirperSpec { users }
    }

    /// Execute one operation.
    pub fn apply(&mut self, op: &ChirperOp) -> ChirperResult {
        match *op {
            ChirperOp::Post { user, id } => {
                let Some(u) = self.users.get_mut(&user) else {
                    return ChirperResult::NoUser;
                };
                u.posts.push((user, id));
                keep_last(&mut u.posts, POSTS_KEPT);
                let followers: Vec<u64> = u.followers.iter().copied().collect();
                for f in &followers {
                    if let Some(fu) = self.users.get_mut(f) {
                        fu.timeline.push((user, id));
                        keep_last(&mut fu.timeline, TIMELINE_KEPT);
                    }
                }
                ChirperResult::Posted(followers.len() as u32)
            }
            ChirperOp::Follow { user, whom } => {
                let (Some(u), Some(w)) = (self.users.get(&user), self.users.get(&whom)) else {
                    return ChirperResult::NoUser;
                };
                if user == whom || u.followees.contains(&whom) {
                    return ChirperResult::Followed(false);
                }
                let posts = w.posts.clone();
                if let Some(u) = self.users.get_mut(&user) {
                    u.followees.insert(whom);
                    u.timeline.extend(posts);
                    keep_last(&mut u.timeline, TIMELINE_KEPT);
                }
                if let Some(w) = self.users.get_mut(&whom) {
                    w.followers.insert(user);
                }
                ChirperResult::Followed(true)
            }
            ChirperOp::Unfollow { user, whom } => {
                let (Some(u), Some(_)) = (self.users.get(&user), self.users.get(&whom)) else {
                    return ChirperResult::NoUser;
                };
                if !u.followees.contains(&whom) {
                    return ChirperResult::Unfollowed(false);
                }
                if let Some(u) = self.users.get_mut(&user) {
                    u.followees.remove(&whom);
                    u.timeline.retain(|(author, _)| *author != whom);
                }
                if let Some(w) = self.users.get_mut(&whom) {
                    w.followers.remove(&user);
                }
                ChirperResult::Unfollowed(true)
            }
            ChirperOp::Timeline { user } => match self.users.get(&user) {
                Some(u) => ChirperResult::Timeline(u.timeline.clone()),
                None => ChirperResult::NoUser,
            },
            ChirperOp::Create { user } => match self.users.entry(user) {
                std::collections::btree_map::Entry::Occupied(_) => ChirperResult::Created(false),
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(ChirperUser::default());
                    ChirperResult::Created(true)
                }
            },
            ChirperOp::Delete { user } => match self.users.remove(&user) {
                Some(_) => ChirperResult::Deleted,
                None => ChirperResult::NoUser,
            },
        }
    }
}

// ---------------------------------------------------------------------------------------
// The search's model.

/// A user in the search's state: follower and followee sets as sorted vectors (cheap
/// to copy), and the user's fingerprint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct UserState {
    posts: Vec<PostRef>,
    followers: Vec<u64>,
    followees: Vec<u64>,
    timeline: Vec<PostRef>,
}

#[derive(Clone, Debug)]
struct Slot {
    user: UserState,
    /// `fingerprint_of((slot index, user))`.
    digest: u128,
}

/// The search's state: one slot per user id the history or the initial graph names
/// (ascending ids), `None` for users that do not exist.
#[derive(Clone, Debug)]
pub(crate) struct State {
    users: Arc<Vec<Option<Arc<Slot>>>>,
    /// Wrapping sum of the digests of the existing users.
    digest: u128,
}

fn sorted_insert(v: &mut Vec<u64>, x: u64) {
    if let Err(at) = v.binary_search(&x) {
        v.insert(at, x);
    }
}

fn sorted_remove(v: &mut Vec<u64>, x: u64) {
    if let Ok(at) = v.binary_search(&x) {
        v.remove(at);
    }
}

/// [`Model`] of Chirper for the search of one history.
pub(crate) struct SearchModel<'h> {
    /// Every user id the history and the initial graph name, ascending.
    ids: Vec<u64>,
    look: LookAhead<'h>,
}

/// Pending timeline reads to look ahead at, per user, after each step.
const READS_LOOKED_AT: usize = 3;

/// What the look-ahead ([`SearchModel::doomed`]) needs to know about the history.
struct LookAhead<'h> {
    events: &'h [ChirperEvent],
    /// Off when two posts share `(author, id)`: the argument needs posts to be unique.
    enabled: bool,
    /// User -> its completed timeline reads that returned a timeline, by invocation.
    reads: HashMap<u64, Vec<usize>>,
    /// `(user, whom)` -> follow and unfollow operations of that pair.
    pair_ops: HashMap<(u64, u64), Vec<usize>>,
    /// User -> delete operations of it.
    deletes: HashMap<u64, Vec<usize>>,
    /// Post -> the operation that makes it.
    post_op: HashMap<PostRef, usize>,
    /// Post operation -> earlier posts of the same author some read showed before
    /// it: `(their post operation, that read)`.
    after: HashMap<usize, Vec<(usize, usize)>>,
    /// `(user, post)` -> the reads of `reads` that show that post, by invocation.
    showing: HashMap<(u64, PostRef), Vec<usize>>,
    /// Every post operation, by invocation.
    posts_by_invocation: Vec<usize>,
    /// User -> its follow operations, by invocation.
    follows_by: HashMap<u64, Vec<usize>>,
}

/// Whether a result says its operation changed nothing: no such user, already
/// following, not following, already existing.
fn says_unchanged(r: &ChirperResult) -> bool {
    matches!(
        r,
        ChirperResult::NoUser
            | ChirperResult::Followed(false)
            | ChirperResult::Unfollowed(false)
            | ChirperResult::Created(false)
    )
}

impl<'h> LookAhead<'h> {
    fn new(events: &'h [ChirperEvent]) -> LookAhead<'h> {
        let mut look = LookAhead {
            events,
            enabled: true,
            reads: HashMap::new(),
            pair_ops: HashMap::new(),
            deletes: HashMap::new(),
            post_op: HashMap::new(),
            after: HashMap::new(),
            showing: HashMap::new(),
            posts_by_invocation: Vec::new(),
            follows_by: HashMap::new(),
        };
        // Creates that may have succeeded: (user, operation).
        let mut recreatable: Vec<(u64, usize)> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            match e.op {
                ChirperOp::Timeline { user } => {
                    if let Some(ChirperResult::Timeline(_)) = e.result {
                        look.reads.entry(user).or_default().push(i);
                    }
                }
                ChirperOp::Follow { user, whom } => {
                    look.pair_ops.entry((user, whom)).or_default().push(i);
                    look.follows_by.entry(user).or_default().push(i);
                }
                ChirperOp::Unfollow { user, whom } => {
                    look.pair_ops.entry((user, whom)).or_default().push(i);
                }
                ChirperOp::Delete { user } => look.deletes.entry(user).or_default().push(i),
                ChirperOp::Post { user, id } => {
                    if look.post_op.insert((user, id), i).is_some() {
                        look.enabled = false;
                    }
                    look.posts_by_invocation.push(i);
                }
                ChirperOp::Create { user } => {
                    if !matches!(e.result, Some(ChirperResult::Created(false))) {
                        recreatable.push((user, i));
                    }
                }
            }
        }
        let by_invocation = |ops: &mut Vec<usize>| ops.sort_by_key(|&i| (events[i].invoked, i));
        look.reads.values_mut().for_each(by_invocation);
        look.follows_by.values_mut().for_each(by_invocation);
        by_invocation(&mut look.posts_by_invocation);
        for (user, reads) in &look.reads {
            for &read in reads {
                if let Some(ChirperResult::Timeline(seen)) = &events[read].result {
                    for p in seen {
                        look.showing.entry((*user, *p)).or_default().push(read);
                    }
                }
            }
        }
        // Posts of one author appear in every timeline in the order they were made,
        // except in users created while the history runs (see `doomed_post`).
        for (user, reads) in &look.reads {
            for &read in reads {
                let Some(ChirperResult::Timeline(seen)) = &events[read].result else {
                    continue;
                };
                // Skip reads that a successful create of their user may precede.
                let horizon = events[read].returned.unwrap_or(u64::MAX);
                if recreatable
                    .iter()
                    .any(|&(u, i)| u == *user && events[i].invoked <= horizon)
                {
                    continue;
                }
                let mut last_of: Vec<(u64, usize)> = Vec::new(); // author -> post op
                for p in seen {
                    let Some(&op) = look.post_op.get(p) else {
                        continue;
                    };
                    match last_of.iter_mut().find(|(a, _)| *a == p.0) {
                        Some((_, prev)) => {
                            look.after.entry(op).or_default().push((*prev, read));
                            *prev = op;
                        }
                        None => last_of.push((p.0, op)),
                    }
                }
            }
        }
        for list in look.after.values_mut() {
            list.sort_unstable();
            list.dedup_by_key(|(op, _)| *op);
        }
        look
    }

    /// Whether event `i`'s observed result says it changed nothing (see
    /// [`Model::changes_nothing`]; info operations may have changed anything).
    fn changes_nothing(&self, i: usize) -> bool {
        self.events[i].result.as_ref().is_some_and(says_unchanged)
    }

    /// A read that showed, before the post of operation `post` (just linearized),
    /// a post of the same author not yet linearized.
    ///
    /// In a user that existed from the start or was created only once (no create
    /// operation of it that may have succeeded and may precede the read), follower and followee sets agree
    /// (u in a's followers implies a in u's followees: only re-creating u with empty
    /// sets breaks that). Then a's posts reach u's timeline either one by one as they
    /// are made, appended, or all at once when u follows a, in the order they were
    /// made, and only when the timeline holds none of a's posts (unfollowing removes
    /// them all). Either way a timeline holds a's posts in the order they were made.
    fn doomed_post(&self, post: usize, done: &[bool]) -> Option<usize> {
        if !self.enabled {
            return None;
        }
        let earlier = self.after.get(&post)?;
        earlier
            .iter()
            .find(|(op, _)| !done[*op])
            .map(|(_, read)| *read)
    }

    /// A pending read of `user`, whose timeline is now `timeline`, that no future can
    /// satisfy. Looked at: the first [`READS_LOOKED_AT`] pending reads, and the first
    /// pending one that shows the newest entry.
    ///
    /// Call an entry of the timeline *stable* (for a given read) when no operation
    /// that could remove it and bring it back may come between now and the read: no
    /// delete of the user, no follow or unfollow between the user and the entry's
    /// author that can change anything, that is not linearized yet and was invoked
    /// before the read returned (posts are unique, so no other post makes the same
    /// entry). A follow or unfollow whose observed result says it changed nothing
    /// cannot; nor can a follow of an author the user follows now when no unfollow
    /// may come first (it would answer "already following": deleting the author
    /// leaves the user's followees as they are). From now on, stable entries only leave the
    /// timeline by truncation, which drops the oldest first, and never come back; new
    /// entries are appended after every current one. So a later timeline holds a
    /// suffix of the current stable entries, in their current order, before every
    /// entry not in the timeline now; and an entry by a stable author that is not in
    /// the timeline now can only arrive with its post, which must then be pending.
    fn doomed_read(
        &self,
        user: u64,
        followees: &[u64],
        timeline: &[PostRef],
        done: &[bool],
    ) -> Option<usize> {
        if !self.enabled {
            return None;
        }
        fn first<'a>(
            reads: Option<&'a Vec<usize>>,
            done: &'a [bool],
            n: usize,
        ) -> impl Iterator<Item = usize> + 'a {
            reads
                .into_iter()
                .flatten()
                .copied()
                .filter(|&i| !done[i])
                .take(n)
        }
        let newest = timeline.last().and_then(|p| self.showing.get(&(user, *p)));
        let mut reads: Vec<usize> = first(self.reads.get(&user), done, READS_LOOKED_AT)
            .chain(first(newest, done, 1))
            .collect();
        reads.dedup();
        let mut now: Vec<(PostRef, Option<usize>)> = Vec::with_capacity(timeline.len());
        let mut stable_at: Vec<usize> = Vec::with_capacity(timeline.len());
        let mut authors: Vec<(u64, bool)> = Vec::new();
        for read in reads {
            let event = &self.events[read];
            let Some(ChirperResult::Timeline(seen)) = &event.result else {
                continue;
            };
            // Operations that may still come before the read: not linearized, and
            // not invoked after it returned.
            let horizon = event.returned.unwrap_or(u64::MAX);
            let may_precede = |i: usize| !done[i] && self.events[i].invoked <= horizon;
            let deletes = self.deletes.get(&user).into_iter().flatten();
            if deletes.copied().any(may_precede) {
                continue;
            }
            authors.clear();
            let mut stable = |author: u64| match authors.iter().find(|(a, _)| *a == author) {
                Some((_, s)) => *s,
                None => {
                    let pair = || self.pair_ops.get(&(user, author)).into_iter().flatten();
                    // Pair operations that may precede the read and change something.
                    let live = |i: &usize| may_precede(*i) && !self.changes_nothing(*i);
                    let unfollows = pair()
                        .filter(|&&i| matches!(self.events[i].op, ChirperOp::Unfollow { .. }));
                    let s = if followees.binary_search(&author).is_ok() {
                        !unfollows.into_iter().any(live)
                    } else {
                        !pair().any(live)
                    };
                    authors.push((author, s));
                    s
                }
            };
            // Current entries -> (position among stable entries, or None if unstable);
            // `stable_at`: the stable entries' indices in the timeline.
            now.clear();
            stable_at.clear();
            let mut stable_count = 0;
            for (t, p) in timeline.iter().enumerate() {
                if stable(p.0) {
                    now.push((*p, Some(stable_count)));
                    stable_at.push(t);
                    stable_count += 1;
                } else {
                    now.push((*p, None));
                }
            }
            now.sort_unstable();
            if now.windows(2).any(|w| w[0].0 == w[1].0) {
                continue; // duplicates (possible only after deletes): no argument
            }
            // Position expected next among stable entries, once one was seen, and
            // the first one seen.
            let mut next: Option<usize> = None;
            let mut first_seen: Option<usize> = None;
            let mut seen_new = false;
            let fits = seen
                .iter()
                .all(|p| match now.binary_search_by(|(q, _)| q.cmp(p)) {
                    Ok(k) => match now[k].1 {
                        Some(pos) => {
                            let ok = !seen_new && next.is_none_or(|n| n == pos);
                            first_seen.get_or_insert(pos);
                            next = Some(pos + 1);
                            ok
                        }
                        None => true,
                    },
                    Err(_) => {
                        seen_new = true;
                        !stable(p.0) || self.post_op.get(p).is_some_and(|&i| may_precede(i))
                    }
                });
            if !fits || next.is_some_and(|n| n != stable_count) {
                return Some(read);
            }
            // The stable entries before the first one seen must go by truncation:
            // the last of them, at index q, only once 50 entries follow it, which
            // takes at least 51 - len + q appends (removals only make it more). An
            // append is a post, or up to 20 with a follow.
            let dropped = first_seen.unwrap_or(stable_count);
            if dropped > 0 {
                let needed =
                    (TIMELINE_KEPT + 1 + stable_at[dropped - 1]).saturating_sub(timeline.len());
                let pending = |ops: &[usize]| {
                    ops.iter()
                        .take_while(|&&i| self.events[i].invoked <= horizon)
                        .filter(|&&i| !done[i])
                        .count()
                };
                let follows = self.follows_by.get(&user).map_or(0, |f| pending(f));
                if pending(&self.posts_by_invocation) + POSTS_KEPT * follows < needed {
                    return Some(read);
                }
            }
        }
        None
    }
}

impl<'h> SearchModel<'h> {
    /// A model for checking `events`, over every user they, `initial` and `extra`
    /// name, with `initial`'s state.
    pub(crate) fn new(
        initial: &ChirperInitial,
        events: &'h [ChirperEvent],
        extra: impl IntoIterator<Item = u64>,
    ) -> (SearchModel<'h>, State) {
        let spec = ChirperSpec::new(initial);
        let mut all: Vec<u64> = events
            .iter()
            .flat_map(|e| e.op.users())
            .chain(extra)
            .chain(spec.users.keys().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        let model = SearchModel {
            ids: all,
            look: LookAhead::new(events),
        };
        let mut state = State {
            users: Arc::new(vec![None; model.ids.len()]),
            digest: 0,
        };
        for (id, u) in spec.users {
            let user = UserState {
                posts: u.posts,
                followers: u.followers.into_iter().collect(),
                followees: u.followees.into_iter().collect(),
                timeline: u.timeline,
            };
            if let Some(slot) = model.slot(id) {
                model.put(&mut state, slot, Some(user));
            }
        }
        (model, state)
    }

    fn slot(&self, id: u64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    fn user<'s>(&self, state: &'s State, id: u64) -> Option<&'s UserState> {
        let slot = self.slot(id)?;
        state.users[slot].as_deref().map(|s| &s.user)
    }

    /// Replace a slot's user (`None`: remove it).
    fn put(&self, state: &mut State, slot: usize, user: Option<UserState>) {
        let users = Arc::make_mut(&mut state.users);
        if let Some(old) = &users[slot] {
            state.digest = state.digest.wrapping_sub(old.digest);
        }
        users[slot] = user.map(|user| {
            let digest = fingerprint_of(&(slot as u64, &user));
            state.digest = state.digest.wrapping_add(digest);
            Arc::new(Slot { user, digest })
        });
    }

    /// Change an existing user in place (copying it if shared).
    fn update(&self, state: &mut State, id: u64, change: impl FnOnce(&mut UserState)) {
        let Some(slot) = self.slot(id) else { return };
        let users = Arc::make_mut(&mut state.users);
        let Some(entry) = users[slot].as_mut() else {
            return;
        };
        let s = Arc::make_mut(entry);
        change(&mut s.user);
        let digest = fingerprint_of(&(slot as u64, &s.user));
        state.digest = state.digest.wrapping_sub(s.digest).wrapping_add(digest);
        s.digest = digest;
    }

    /// The result of `op` on `state`.
    pub(crate) fn result(&self, state: &State, op: &ChirperOp) -> ChirperResult {
        match *op {
            ChirperOp::Post { user, .. } => match self.user(state, user) {
                Some(u) => ChirperResult::Posted(u.followers.len() as u32),
                None => ChirperResult::NoUser,
            },
            ChirperOp::Follow { user, whom } => {
                match (self.user(state, user), self.user(state, whom)) {
                    (Some(u), Some(_)) => ChirperResult::Followed(
                        user != whom && u.followees.binary_search(&whom).is_err(),
                    ),
                    _ => ChirperResult::NoUser,
                }
            }
            ChirperOp::Unfollow { user, whom } => {
                match (self.user(state, user), self.user(state, whom)) {
                    (Some(u), Some(_)) => {
                        ChirperResult::Unfollowed(u.followees.binary_search(&whom).is_ok())
                    }
                    _ => ChirperResult::NoUser,
                }
            }
            ChirperOp::Timeline { user } => match self.user(state, user) {
                Some(u) => ChirperResult::Timeline(u.timeline.clone()),
                None => ChirperResult::NoUser,
            },
            ChirperOp::Create { user } => ChirperResult::Created(self.user(state, user).is_none()),
            ChirperOp::Delete { user } => match self.user(state, user) {
                Some(_) => ChirperResult::Deleted,
                None => ChirperResult::NoUser,
            },
        }
    }

    /// The state after `op`, given its `result` on `state` (from [`Self::result`]).
    fn apply(&self, state: &State, op: &ChirperOp, result: &ChirperResult) -> State {
        let mut next = state.clone();
        match (*op, result) {
            (ChirperOp::Post { user, id }, ChirperResult::Posted(_)) => {
                let followers = self
                    .user(state, user)
                    .map(|u| u.followers.clone())
                    .unwrap_or_default();
                self.update(&mut next, user, |u| {
                    u.posts.push((user, id));
                    keep_last(&mut u.posts, POSTS_KEPT);
                });
                for f in followers {
                    self.update(&mut next, f, |fu| {
                        fu.timeline.push((user, id));
                        keep_last(&mut fu.timeline, TIMELINE_KEPT);
                    });
                }
            }
            (ChirperOp::Follow { user, whom }, ChirperResult::Followed(true)) => {
                let posts = self
                    .user(state, whom)
                    .map(|w| w.posts.clone())
                    .unwrap_or_default();
                self.update(&mut next, user, |u| {
                    sorted_insert(&mut u.followees, whom);
                    u.timeline.extend(posts);
                    keep_last(&mut u.timeline, TIMELINE_KEPT);
                });
                self.update(&mut next, whom, |w| sorted_insert(&mut w.followers, user));
            }
            (ChirperOp::Unfollow { user, whom }, ChirperResult::Unfollowed(true)) => {
                self.update(&mut next, user, |u| {
                    sorted_remove(&mut u.followees, whom);
                    u.timeline.retain(|(author, _)| *author != whom);
                });
                self.update(&mut next, whom, |w| sorted_remove(&mut w.followers, user));
            }
            (ChirperOp::Create { user }, ChirperResult::Created(true)) => {
                if let Some(slot) = self.slot(user) {
                    self.put(&mut next, slot, Some(UserState::default()));
                }
            }
            (ChirperOp::Delete { user }, ChirperResult::Deleted) => {
                if let Some(slot) = self.slot(user) {
                    self.put(&mut next, slot, None);
                }
            }
            // Everything else changes nothing.
            _ => {}
        }
        next
    }

    /// The state as a plain [`ChirperSpec`] (for tests and reports).
    #[cfg(test)]
    pub(crate) fn to_spec(&self, state: &State) -> ChirperSpec {
        let users = self
            .ids
            .iter()
            .zip(state.users.iter())
            .filter_map(|(id, slot)| {
                let u = &slot.as_ref()?.user;
                let user = ChirperUser {
                    posts: u.posts.clone(),
                    followers: u.followers.iter().copied().collect(),
                    followees: u.followees.iter().copied().collect(),
                    timeline: u.timeline.clone(),
                };
                Some((*id, user))
            })
            .collect();
        ChirperSpec { users }
    }
}

impl Model for SearchModel<'_> {
    type State = State;
    type Op = ChirperOp;
    type Result = ChirperResult;

    fn step(&self, state: &State, op: &ChirperOp) -> (State, ChirperResult) {
        let result = self.result(state, op);
        (self.apply(state, op, &result), result)
    }

    fn accepts(&self, model: &ChirperResult, observed: &ChirperResult) -> bool {
        model == observed
    }

    /// The wrapping sum of the users' fingerprints, each over its slot and contents
    /// ([`fingerprint_of`]). States differ exactly when some slot's contents differ,
    /// and then the sums differ unless the digests happen to cancel: as for any
    /// random function, probability 2^-128 per pair.
    fn fingerprint(&self, state: &State) -> u128 {
        state.digest
    }

    /// See [`LookAhead::doomed_read`]: after a step, the pending reads of every user
    /// whose timeline (or whose entries' stability) it may have changed.
    fn doomed(&self, state: &State, done: &[bool], last: usize) -> Option<usize> {
        let check = |user: u64| {
            let u = self.user(state, user)?;
            self.look.doomed_read(user, &u.followees, &u.timeline, done)
        };
        match self.look.events[last].op {
            ChirperOp::Post { user, .. } => self.look.doomed_post(last, done).or_else(|| {
                let followers = &self.user(state, user)?.followers;
                followers.iter().find_map(|&f| check(f))
            }),
            ChirperOp::Follow { user, .. }
            | ChirperOp::Unfollow { user, .. }
            | ChirperOp::Create { user } => check(user),
            ChirperOp::Timeline { .. } | ChirperOp::Delete { .. } => None,
        }
    }

    fn changes_nothing(&self, op: &ChirperOp, observed: Option<&ChirperResult>) -> bool {
        match (op, observed) {
            (ChirperOp::Timeline { .. }, _) => true,
            (_, None) => false,
            (_, Some(r)) => says_unchanged(r),
        }
    }

    fn try_step(
        &self,
        state: &State,
        op: &ChirperOp,
        observed: Option<&ChirperResult>,
    ) -> Option<State> {
        // Compare timelines in place rather than copying them into a result.
        if let (ChirperOp::Timeline { user }, Some(seen)) = (op, observed) {
            let fits = match (self.user(state, *user), seen) {
                (Some(u), ChirperResult::Timeline(posts)) => u.timeline == *posts,
                (None, ChirperResult::NoUser) => true,
                _ => false,
            };
            return fits.then(|| state.clone());
        }
        let result = self.result(state, op);
        match observed {
            Some(seen) if *seen != result => None,
            _ => Some(self.apply(state, op, &result)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn random_op(rng: &mut ChaCha8Rng, post_id: &mut u64) -> ChirperOp {
        let user = rng.gen_range(0..8);
        let whom = rng.gen_range(0..8);
        match rng.gen_range(0..12) {
            0..=3 => {
                *post_id += 1;
                ChirperOp::Post { user, id: *post_id }
            }
            4 | 5 => ChirperOp::Follow { user, whom },
            6 | 7 => ChirperOp::Unfollow { user, whom },
            8 | 9 => ChirperOp::Timeline { user },
            10 => ChirperOp::Create { user },
            _ => ChirperOp::Delete { user },
        }
    }

    #[test]
    fn search_model_agrees_with_the_spec() {
        for seed in 0..40 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let initial = ChirperInitial::new((0..6).map(|u| (u, [(u + 1) % 6, (u + 3) % 6])));
            let mut spec = ChirperSpec::new(&initial);
            let (model, mut state) = SearchModel::new(&initial, &[], 0..8);
            assert_eq!(model.to_spec(&state), spec);
            let mut post_id = 0;
            for _ in 0..400 {
                let op = random_op(&mut rng, &mut post_id);
                let want = spec.apply(&op);
                let (next, got) = model.step(&state, &op);
                assert_eq!(got, want, "seed {seed}: {op}");
                // try_step agrees with step, and refuses other results.
                let tried = model.try_step(&state, &op, Some(&want)).expect("fits");
                assert_eq!(tried.digest, next.digest);
                assert!(model
                    .try_step(&state, &op, Some(&ChirperResult::Created(true)))
                    .is_none_or(|_| want == ChirperResult::Created(true)));
                state = next;
                assert_eq!(model.to_spec(&state), spec, "seed {seed}: after {op}");
            }
        }
    }

    #[test]
    fn fingerprints_follow_contents() {
        let initial = ChirperInitial::with_users([1, 2]);
        let (model, s0) = SearchModel::new(&initial, &[], []);
        let post = |s: &State, id| model.step(s, &ChirperOp::Post { user: 1, id }).0;
        let follow = |s: &State| model.step(s, &ChirperOp::Follow { user: 2, whom: 1 }).0;
        // The same state reached in two orders has one fingerprint.
        let a = follow(&post(&s0, 7));
        let b = post(&follow(&s0), 7);
        assert_eq!(model.to_spec(&a), model.to_spec(&b));
        assert_eq!(model.fingerprint(&a), model.fingerprint(&b));
        // Different states differ.
        let c = post(&s0, 7);
        let d = post(&s0, 8);
        assert_ne!(model.fingerprint(&c), model.fingerprint(&d));
        assert_ne!(model.fingerprint(&s0), model.fingerprint(&c));
        // Deleting and re-creating an untouched user gives back the same state.
        let gone = model.step(&s0, &ChirperOp::Delete { user: 2 }).0;
        assert_ne!(model.fingerprint(&gone), model.fingerprint(&s0));
        let back = model.step(&gone, &ChirperOp::Create { user: 2 }).0;
        assert_eq!(model.fingerprint(&back), model.fingerprint(&s0));
    }

    #[test]
    fn keeps_only_the_newest() {
        let initial = ChirperInitial::new([(2, [1])]);
        let mut spec = ChirperSpec::new(&initial);
        for id in 0..60 {
            assert_eq!(
                spec.apply(&ChirperOp::Post { user: 1, id }),
                ChirperResult::Posted(1)
            );
        }
        assert_eq!(
            spec.users[&1].posts,
            (40..60).map(|i| (1, i)).collect::<Vec<_>>()
        );
        assert_eq!(
            spec.users[&2].timeline,
            (10..60).map(|i| (1, i)).collect::<Vec<_>>()
        );
        // A new follower gets the kept posts only.
        assert_eq!(
            spec.apply(&ChirperOp::Create { user: 3 }),
            ChirperResult::Created(true)
        );
        assert_eq!(
            spec.apply(&ChirperOp::Follow { user: 3, whom: 1 }),
            ChirperResult::Followed(true)
        );
        assert_eq!(spec.users[&3].timeline, spec.users[&1].posts);
        // Deleting a follower leaves it counted.
        assert_eq!(
            spec.apply(&ChirperOp::Delete { user: 2 }),
            ChirperResult::Deleted
        );
        assert_eq!(
            spec.apply(&ChirperOp::Post { user: 1, id: 99 }),
            ChirperResult::Posted(2)
        );
    }
}
