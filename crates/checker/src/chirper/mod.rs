//! Linearizability of Chirper histories (the social network of paper 003 §5.2, as
//! `partita-dssmr` serves it), against a model of its sequential specification written
//! independently of the service.
//!
//! # The model
//!
//! The state maps user ids to users. A user has its own posts (the last
//! [`POSTS_KEPT`]), followers, followees, and a timeline (the last [`TIMELINE_KEPT`]
//! posts of its followees, in the order they reached it). A post is identified by
//! `(author, id)`, and **posts are compared by `(author, id)` only**: their text is not
//! part of the model. "Keeping the last n" drops the oldest entries beyond n.
//!
//! | operation | effect | result |
//! |-----------|--------|--------|
//! | `post(user, id)` | append `(user, id)` to `user`'s posts, then to the timeline of every existing follower, ascending | `posted(n)`, n = followers, counting deleted ones |
//! | `follow(user, whom)` | unless `user == whom` or already following: add the edge, append `whom`'s posts to `user`'s timeline | `followed(changed)` |
//! | `unfollow(user, whom)` | if following: remove the edge and every post of `whom` from `user`'s timeline | `unfollowed(changed)` |
//! | `timeline(user)` | none | `timeline[(author, id), ...]`, oldest first |
//! | `create(user)` | insert an empty user if absent | `created(inserted)` |
//! | `delete(user)` | remove the user (not from others' follower and followee sets) | `deleted` |
//!
//! Every operation but `create` returns `no_user` when a user it names does not
//! exist, and then changes nothing. [`ChirperSpec`] executes this table plainly; the
//! initial state is a social graph with empty posts and timelines
//! ([`ChirperInitial`]).
//!
//! # Histories
//!
//! A [`ChirperEvent`] per operation: client, operation, invocation and return times
//! (nanoseconds on one clock), and the result. An event without return time and
//! result is an *info* operation: its client gave up on it, so it may have taken
//! effect at any time after its invocation, or never; the client may go on with other
//! operations. The JSON-lines format is in [`event`].
//!
//! # The check
//!
//! [`check_chirper`] first refuses malformed histories (an event returning before its
//! invocation, a result without return time or the reverse, a result of the wrong
//! kind, a client with two overlapping operations: only an info operation may be
//! followed by another of its client before it returned). It then searches for a
//! linearization: a total order of the operations that respects real time (an
//! operation that returned before another was invoked precedes it; operations whose
//! intervals merely touch count as concurrent) in which every operation returns what
//! was observed, info operations being placed anywhere after their invocation or left
//! out.
//!
//! The search ([`linearize`], generic over a [`Model`]) is Lowe's just-in-time
//! linearization with Wing & Gong's memoization of configurations (the linearized set
//! and the model state, as a 128-bit fingerprint whose collision odds, under N²/2^129
//! for N configurations, are in [`linearize`]'s documentation), iterative with an
//! explicit stack. The model's state is persistent: users are shared between saved
//! states and copied only when an operation changes them, and each carries a
//! fingerprint so that the state's is updated incrementally. Info posts that no
//! timeline of the history shows are left out of the search when no list of the
//! model can overflow (`unobservable_posts` proves that this changes no verdict):
//! each would otherwise fit between any two posts of its author, and a few of them
//! multiplied the configurations past the budget on a 68-operation history.
//!
//! **Cost.** Linearizability checking is NP-complete; the search is exponential in the
//! worst case in the number of operations that are concurrent and outstanding (the
//! clients plus pending info operations). Valid histories typically need a little
//! more than one configuration per operation. The number of configurations explored
//! is capped by [`ChirperCheckOptions::max_configurations`]; past it the verdict is
//! [`ChirperCheckError::Unknown`], never a guess.
//!
//! **Reports.** A [`ChirperViolation`] names the operation that could not be
//! linearized after the longest linearizable prefix the search found, its observed
//! result, what the model would have returned there, and the prefix's length.
//!
//! [`gen`] generates linearizable histories from a seed.

pub mod event;
pub mod gen;
pub mod linearize;
pub mod model;

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use event::{
    read_chirper_history, read_chirper_history_from, ChirperEvent, ChirperHistoryWriter,
    ChirperInitial, ChirperOp, ChirperResult, PostRef,
};
pub use gen::{generate, ChirperGenOptions, GeneratedChirper};
pub use linearize::{fingerprint_of, search, Model, Operation, Outcome, Stuck};
pub use model::{ChirperSpec, ChirperUser, POSTS_KEPT, TIMELINE_KEPT};

use model::SearchModel;

/// Default bound on configurations explored: about 50 MB of memo at most.
pub const DEFAULT_MAX_CONFIGURATIONS: u64 = 2_000_000;

/// How to check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChirperCheckOptions {
    /// Give up with [`ChirperCheckError::Unknown`] after exploring this many
    /// configurations.
    pub max_configurations: u64,
}

impl Default for ChirperCheckOptions {
    fn default() -> Self {
        ChirperCheckOptions {
            max_configurations: DEFAULT_MAX_CONFIGURATIONS,
        }
    }
}

/// What a successful check covered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChirperSummary {
    /// Events in the history.
    pub ops: usize,
    /// Of those, completed ones.
    pub ok_ops: usize,
    /// Of those, info ones (outcome unknown).
    pub info_ops: usize,
    /// Configurations the search explored.
    pub configurations: u64,
}

impl fmt::Display for ChirperSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations ({} ok, {} info) linearizable ({} configurations explored)",
            self.ops, self.ok_ops, self.info_ops, self.configurations
        )
    }
}

/// An operation no linearization accounts for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChirperViolation {
    /// Its index in the checked slice.
    pub index: usize,
    /// The event as recorded.
    pub event: ChirperEvent,
    /// What the model returns to it after the longest linearizable prefix found.
    pub model_result: ChirperResult,
    /// That prefix's length (operations linearized before it).
    pub prefix_len: usize,
    /// Human-readable account.
    pub message: String,
}

impl fmt::Display for ChirperViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The search gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChirperUnknown {
    pub configurations: u64,
    pub limit: u64,
    pub ops: usize,
}

impl fmt::Display for ChirperUnknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown: the search explored {} configurations (limit {}) of a history of {} \
             operations without a verdict",
            self.configurations, self.limit, self.ops
        )
    }
}

/// A history the checker refuses to judge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedHistory {
    /// The offending event (the later one, for overlapping operations).
    pub index: usize,
    pub message: String,
}

impl fmt::Display for MalformedHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event #{}: {}", self.index, self.message)
    }
}

/// Why a Chirper history was not found linearizable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChirperCheckError {
    #[error("not linearizable: {0}")]
    Violation(Box<ChirperViolation>),
    #[error("{0}")]
    Unknown(ChirperUnknown),
    #[error("malformed history: {0}")]
    Malformed(MalformedHistory),
}

impl ChirperCheckError {
    /// The violation, if that is what this is.
    pub fn violation(&self) -> Option<&ChirperViolation> {
        match self {
            ChirperCheckError::Violation(v) => Some(v),
            _ => None,
        }
    }
}

/// Refuse malformed histories (see the module documentation).
fn validate(events: &[ChirperEvent]) -> Result<(), MalformedHistory> {
    for (index, e) in events.iter().enumerate() {
        e.validate().map_err(|message| MalformedHistory {
            index,
            message: format!("{e}: {message}"),
        })?;
    }
    let mut by_client: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        by_client.entry(e.client).or_default().push(i);
    }
    let mut clients: Vec<_> = by_client.into_iter().collect();
    clients.sort_unstable_by_key(|(c, _)| *c);
    for (client, mut idx) in clients {
        // By invocation; at equal times, info operations (which the client left
        // behind) first, then by return time.
        idx.sort_by_key(|&i| {
            let e = &events[i];
            (e.invoked, e.returned.is_some(), e.returned, i)
        });
        for pair in idx.windows(2) {
            let (a, b) = (&events[pair[0]], &events[pair[1]]);
            if let Some(ret) = a.returned {
                if ret > b.invoked {
                    return Err(MalformedHistory {
                        index: pair[1].max(pair[0]),
                        message: format!(
                            "client {client} has two overlapping operations: #{} ({a}) and \
                             #{} ({b})",
                            pair[0], pair[1]
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// What differs between an observed and a model timeline, for messages.
fn timeline_difference(seen: &[PostRef], model: &[PostRef]) -> String {
    // Entries of `a` not in `b`, each once, in `a`'s order.
    let absent = |a: &[PostRef], b: &[PostRef]| {
        let mut out: Vec<PostRef> = Vec::new();
        for p in a {
            if !b.contains(p) && !out.contains(p) {
                out.push(*p);
            }
        }
        out
    };
    let missing = absent(model, seen);
    let extra = absent(seen, model);
    let mut sorted = seen.to_vec();
    sorted.sort_unstable();
    let mut dups: Vec<PostRef> = sorted
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    dups.dedup();
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing {}", event::fmt_posts(&missing)));
    }
    if !extra.is_empty() {
        parts.push(format!("unexpected {}", event::fmt_posts(&extra)));
    }
    if !dups.is_empty() {
        parts.push(format!("duplicated {}", event::fmt_posts(&dups)));
    }
    if parts.is_empty() {
        "same posts, different order or count".to_string()
    } else {
        parts.join("; ")
    }
}

/// The optional posts that no result of the history can tell apart from posts that
/// never happened, when no list of the model ever drops an entry: `true` at their
/// indices. The search leaves them out, which changes no verdict:
///
/// Suppose no user has more than [`POSTS_KEPT`] posts in the whole history and no
/// timeline can receive more than [`TIMELINE_KEPT`] entries (every post, plus what each
/// follow of the history could copy), whatever the order: then no `keep_last` ever
/// truncates. Take an optional post of `(u, x)`, and suppose `(u, x)` appears in no
/// result. In any linearization that applies it, the states differ from those of the
/// same linearization without it only by the entries `(u, x)` in `u`'s posts and in
/// timelines (nothing is evicted in its place; an unfollow removes all of `u`'s entries
/// either way). Results other than timelines never depend on posts and timelines;
/// every timeline read shows no `(u, x)`, so in that linearization its timeline held
/// none, with or without the post. So dropping the post keeps every result: a history
/// is linearizable with the post exactly when it is without it. Left in, such posts
/// multiply the configurations: each fits between any two posts of its author.
fn unobservable_posts(events: &[ChirperEvent]) -> Vec<bool> {
    let mut dropped = vec![false; events.len()];
    let mut posts_by: HashMap<u64, usize> = HashMap::new();
    let mut follows_by: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut seen: std::collections::HashSet<PostRef> = std::collections::HashSet::new();
    let mut candidates = false;
    for e in events {
        match e.op {
            ChirperOp::Post { user, .. } => {
                *posts_by.entry(user).or_default() += 1;
                candidates |= e.is_info();
            }
            ChirperOp::Follow { user, whom } if user != whom => {
                follows_by.entry(user).or_default().push(whom)
            }
            _ => {}
        }
        if let Some(ChirperResult::Timeline(posts)) = &e.result {
            seen.extend(posts.iter().copied());
        }
    }
    if !candidates || posts_by.values().any(|&n| n > POSTS_KEPT) {
        return dropped;
    }
    let posts: usize = posts_by.values().sum();
    let fits = follows_by.values().all(|whom| {
        let copied: usize = whom
            .iter()
            .map(|w| posts_by.get(w).copied().unwrap_or(0).min(POSTS_KEPT))
            .sum();
        posts + copied <= TIMELINE_KEPT
    });
    // Users that follow nobody in the history receive at most `posts` entries.
    if !fits || posts > TIMELINE_KEPT {
        return dropped;
    }
    for (i, e) in events.iter().enumerate() {
        if let (ChirperOp::Post { user, id }, true) = (e.op, e.is_info()) {
            dropped[i] = !seen.contains(&(user, id));
        }
    }
    dropped
}

/// Decide whether `events` (in any order) are linearizable with respect to Chirper's
/// specification from `initial` (see the module documentation).
pub fn check_chirper(
    events: &[ChirperEvent],
    initial: &ChirperInitial,
    opts: &ChirperCheckOptions,
) -> Result<ChirperSummary, ChirperCheckError> {
    validate(events).map_err(ChirperCheckError::Malformed)?;
    let info_ops = events.iter().filter(|e| e.is_info()).count();
    // The search runs over the events that can matter (see `unobservable_posts`);
    // `kept[i]` is the index in `events` of the search's operation i.
    let dropped = unobservable_posts(events);
    let kept: Vec<usize> = (0..events.len()).filter(|&i| !dropped[i]).collect();
    let searched: std::borrow::Cow<'_, [ChirperEvent]> = if kept.len() == events.len() {
        std::borrow::Cow::Borrowed(events)
    } else {
        kept.iter().map(|&i| events[i].clone()).collect()
    };
    let (model, state) = SearchModel::new(initial, &searched, []);
    let ops: Vec<Operation<'_, ChirperOp, ChirperResult>> = searched
        .iter()
        .map(|e| Operation {
            op: &e.op,
            invoked: e.invoked,
            returned: e.returned,
            result: e.result.as_ref(),
        })
        .collect();
    match search(&model, &state, &ops, opts.max_configurations) {
        Outcome::Linearizable { explored } => Ok(ChirperSummary {
            ops: events.len(),
            ok_ops: events.len() - info_ops,
            info_ops,
            configurations: explored,
        }),
        Outcome::Unknown { explored } => Err(ChirperCheckError::Unknown(ChirperUnknown {
            configurations: explored,
            limit: opts.max_configurations,
            ops: events.len(),
        })),
        Outcome::NotLinearizable(stuck) => {
            let index = kept[stuck.op];
            let event = events[index].clone();
            let model_result = model.result(&stuck.state, &event.op);
            let mut message = format!(
                "{event}, but no linearization allows that: after the longest linearizable \
                 prefix found ({} of {} operations), the model returns {model_result}",
                stuck.prefix_len,
                events.len()
            );
            if let (Some(ChirperResult::Timeline(seen)), ChirperResult::Timeline(want)) =
                (&event.result, &model_result)
            {
                message += &format!(" ({})", timeline_difference(seen, want));
            }
            Err(ChirperCheckError::Violation(Box::new(ChirperViolation {
                index,
                event,
                model_result,
                prefix_len: stuck.prefix_len,
                message,
            })))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(user: u64, id: u64) -> ChirperOp {
        ChirperOp::Post { user, id }
    }

    fn timeline(user: u64) -> ChirperOp {
        ChirperOp::Timeline { user }
    }

    #[test]
    fn violation_message_names_the_operation() {
        let initial = ChirperInitial::new([(2, [1])]);
        let events = vec![
            ChirperEvent::ok(1, post(1, 7), 0, 10, ChirperResult::Posted(1)),
            ChirperEvent::ok(2, timeline(2), 20, 30, ChirperResult::Timeline(vec![])),
        ];
        let err = check_chirper(&events, &initial, &ChirperCheckOptions::default()).unwrap_err();
        let v = err.violation().expect("a violation");
        assert_eq!(v.index, 1);
        assert_eq!(v.prefix_len, 1);
        assert_eq!(v.model_result, ChirperResult::Timeline(vec![(1, 7)]));
        assert_eq!(
            v.message,
            "client 2: timeline(user=2) [invoked 20 ns, returned 30 ns] returned timeline[], \
             but no linearization allows that: after the longest linearizable prefix found \
             (1 of 2 operations), the model returns timeline[(1,7)] (missing [(1,7)])"
        );
        assert!(err.to_string().starts_with("not linearizable: client 2"));
    }

    #[test]
    fn empty_and_info_only_histories() {
        let initial = ChirperInitial::default();
        let opts = ChirperCheckOptions::default();
        assert_eq!(
            check_chirper(&[], &initial, &opts).unwrap(),
            ChirperSummary::default()
        );
        let events = vec![ChirperEvent::info(1, post(1, 1), 0)];
        let s = check_chirper(&events, &initial, &opts).unwrap();
        assert_eq!((s.ops, s.ok_ops, s.info_ops), (1, 0, 1));
    }

    #[test]
    fn timeline_differences() {
        assert_eq!(
            timeline_difference(&[(1, 1), (2, 2), (2, 2)], &[(1, 1), (3, 3)]),
            "missing [(3,3)]; unexpected [(2,2)]; duplicated [(2,2)]"
        );
        assert_eq!(
            timeline_difference(&[(2, 2), (1, 1)], &[(1, 1), (2, 2)]),
            "same posts, different order or count"
        );
    }
}
