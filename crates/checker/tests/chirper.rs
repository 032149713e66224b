//! The Chirper linearizability checker: generated linearizable histories (which must
//! pass), planted anomalies with their legal twins, info operations, malformed
//! histories, the budget, a brute-force oracle on tiny histories, and a
//! performance-shaped history.

use std::time::Instant;

use partita_checker::chirper::{
    check_chirper, generate, read_chirper_history, ChirperCheckError, ChirperCheckOptions,
    ChirperEvent, ChirperGenOptions, ChirperHistoryWriter, ChirperInitial, ChirperOp,
    ChirperResult, ChirperSpec, ChirperViolation, PostRef, POSTS_KEPT, TIMELINE_KEPT,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

// ---------------------------------------------------------------------------------------
// Helpers.

fn post(user: u64, id: u64) -> ChirperOp {
    ChirperOp::Post { user, id }
}

fn follow(user: u64, whom: u64) -> ChirperOp {
    ChirperOp::Follow { user, whom }
}

fn unfollow(user: u64, whom: u64) -> ChirperOp {
    ChirperOp::Unfollow { user, whom }
}

fn timeline(user: u64) -> ChirperOp {
    ChirperOp::Timeline { user }
}

fn ok(client: u64, op: ChirperOp, invoked: u64, returned: u64, r: ChirperResult) -> ChirperEvent {
    ChirperEvent::ok(client, op, invoked, returned, r)
}

fn info(client: u64, op: ChirperOp, invoked: u64) -> ChirperEvent {
    ChirperEvent::info(client, op, invoked)
}

fn posted(n: u32) -> ChirperResult {
    ChirperResult::Posted(n)
}

fn tl(posts: &[PostRef]) -> ChirperResult {
    ChirperResult::Timeline(posts.to_vec())
}

fn opts() -> ChirperCheckOptions {
    ChirperCheckOptions::default()
}

fn assert_linearizable(events: &[ChirperEvent], initial: &ChirperInitial) {
    if let Err(e) = check_chirper(events, initial, &opts()) {
        panic!("expected linearizable, got {e}\nhistory: {events:#?}");
    }
}

/// The violation, which must name event `index` in its message.
fn assert_violation(
    events: &[ChirperEvent],
    initial: &ChirperInitial,
    index: usize,
) -> ChirperViolation {
    let err = match check_chirper(events, initial, &opts()) {
        Ok(s) => panic!("expected a violation, got {s}"),
        Err(e) => e,
    };
    let v = err
        .violation()
        .unwrap_or_else(|| panic!("expected a violation, got {err}"))
        .clone();
    assert_eq!(v.index, index, "{v}");
    assert_eq!(v.event, events[index]);
    let e = &events[index];
    assert!(
        v.message
            .contains(&format!("client {}: {}", e.client, e.op)),
        "{v}"
    );
    if let Some(r) = &e.result {
        assert!(v.message.contains(&format!("returned {r}")), "{v}");
    }
    v
}

/// Users 1 (the author) and 2 following it; 3 follows nobody.
fn graph() -> ChirperInitial {
    ChirperInitial::new([(1, vec![]), (2, vec![1]), (3, vec![])])
}

// ---------------------------------------------------------------------------------------
// Generated histories.

#[test]
fn generated_histories_are_linearizable() {
    let gen = ChirperGenOptions::default(); // 12 users, 3 clients, 60 operations
    for seed in 0..200 {
        let h = generate(seed, &gen);
        let s = check_chirper(&h.events, &h.initial, &opts())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!((s.ops, s.info_ops), (60, 0));
    }
}

#[test]
fn generated_histories_with_info_ops_are_linearizable() {
    let gen = ChirperGenOptions {
        info_rate: 0.1,
        ..ChirperGenOptions::default()
    };
    let mut info = 0;
    for seed in 0..200 {
        let h = generate(seed, &gen);
        let s = check_chirper(&h.events, &h.initial, &opts())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        info += s.info_ops;
    }
    assert!(info > 500, "{info}");
}

#[test]
fn generated_histories_are_actually_concurrent() {
    // The generator is worth something only if intervals overlap.
    let h = generate(1, &ChirperGenOptions::default());
    let overlapping = h
        .events
        .windows(2)
        .filter(|w| w[0].returned.is_some_and(|r| r > w[1].invoked))
        .count();
    assert!(overlapping > 20, "{overlapping}");
}

/// Generation options of any shape: the ranges the property below draws from.
fn any_shape(rng: &mut ChaCha8Rng) -> (u64, ChirperGenOptions) {
    (
        rng.gen(),
        ChirperGenOptions {
            users: rng.gen_range(1..10),
            followees: 2,
            clients: rng.gen_range(1..6),
            ops: rng.gen_range(0..80),
            info_rate: rng.gen_range(0.0..0.3),
            post_rate: 0.3,
            churn: rng.gen(),
            max_gap: 30,
            max_duration: rng.gen_range(2..400),
        },
    )
}

/// The budget for histories of any shape: a search that needs more gives up
/// (`Unknown`) in about a second here.
const SHAPE_BUDGET: u64 = 200_000;

/// Checks a generated history of any shape: never a violation or a malformed
/// history; `Unknown` only when the budget ran out (true when the answer is `true`).
fn check_any_shape(seed: u64, gen: &ChirperGenOptions) -> Result<bool, String> {
    let h = generate(seed, gen);
    let opts = ChirperCheckOptions {
        max_configurations: SHAPE_BUDGET,
    };
    match check_chirper(&h.events, &h.initial, &opts) {
        Ok(_) => Ok(false),
        Err(ChirperCheckError::Unknown(u)) if u.configurations > SHAPE_BUDGET => Ok(true),
        Err(e) => Err(format!("seed {seed}, {gen:?}: {e}")),
    }
}

#[test]
fn generated_histories_of_every_shape_rarely_exhaust_the_budget() {
    // Linearizable histories of every shape the property below draws, from fixed
    // seeds: none may be judged a violation, and the search may give up on at most
    // 0.2% of them (4 of 30,000 when this was written). Histories of one client with many info operations and few reads
    // are the hard ones: every subset of the info operations applied since the last
    // read is a state of its own until a read rules it out.
    let mut rng = ChaCha8Rng::seed_from_u64(0x005e_a50f_5ea5);
    let cases = 5000;
    let mut unknown = Vec::new();
    for case in 0..cases {
        let (seed, gen) = any_shape(&mut rng);
        if check_any_shape(seed, &gen).unwrap_or_else(|e| panic!("case {case}: {e}")) {
            unknown.push((seed, gen));
        }
    }
    eprintln!(
        "{} of {cases} histories exhausted the budget",
        unknown.len()
    );
    assert!(unknown.len() * 500 <= cases, "{unknown:?}");
}

#[test]
fn the_stability_of_followed_authors_prunes_no_op_follows() {
    // Found by the property below (1 client, 3 users, 19% info operations): info
    // follows of an author the reader already follows kept every entry of that
    // author "unstable", so posts that no read showed were carried, in every
    // subset, to the end of the history (2 million configurations, unknown).
    // Such a follow can only answer "already following" while no unfollow may
    // come first.
    let gen = ChirperGenOptions {
        users: 3,
        followees: 2,
        clients: 1,
        ops: 59,
        info_rate: 0.193_439_319_659_174_35,
        post_rate: 0.3,
        churn: false,
        max_gap: 30,
        max_duration: 65,
    };
    let h = generate(432_864_185_599_343_750, &gen);
    let s = check_chirper(&h.events, &h.initial, &opts()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.ops, s.info_ops), (59, 20));
    assert!(s.configurations < 10_000, "{s}");
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 64,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]
        /// Never a violation; the search may give up (rarely: see
        /// `generated_histories_of_every_shape_rarely_exhaust_the_budget`).
        #[test]
        fn generated_histories_pass_whatever_the_shape(
            seed in any::<u64>(),
            users in 1u64..10,
            clients in 1u64..6,
            ops in 0usize..80,
            info_rate in 0.0f64..0.3,
            churn in any::<bool>(),
            max_duration in 2u64..400,
        ) {
            let gen = ChirperGenOptions {
                users,
                followees: 2,
                clients,
                ops,
                info_rate,
                post_rate: 0.3,
                churn,
                max_gap: 30,
                max_duration,
            };
            let r = check_any_shape(seed, &gen);
            prop_assert!(r.is_ok(), "{:?}", r);
        }
    }
}

#[test]
fn performance_shaped_history() {
    // 2,000 operations of 8 clients on 32 users.
    let ops = 2_000;
    let gen = ChirperGenOptions {
        users: 32,
        followees: 4,
        clients: 8,
        ops,
        info_rate: 0.01,
        post_rate: 0.3,
        churn: true,
        max_gap: 50,
        max_duration: 300,
    };
    for seed in 0..2 {
        let h = generate(seed, &gen);
        let start = Instant::now();
        let s = check_chirper(&h.events, &h.initial, &opts())
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let took = start.elapsed();
        eprintln!("seed {seed}: {s} in {took:?}");
        assert_eq!(s.ops, ops);
        // A guard against a search that blows up (about 60 configurations per
        // operation here; the budget is 2 million).
        assert!(s.configurations < 100 * ops as u64, "{s}");
    }
}

// ---------------------------------------------------------------------------------------
// Planted anomalies, each with a legal twin.

#[test]
fn read_missing_a_completed_post() {
    let mut h = vec![
        ok(1, post(1, 7), 0, 10, posted(1)),
        ok(2, timeline(2), 20, 30, tl(&[])),
    ];
    let v = assert_violation(&h, &graph(), 1);
    assert_eq!(v.model_result, tl(&[(1, 7)]));
    assert_eq!(v.prefix_len, 1);
    assert!(v.message.contains("missing [(1,7)]"), "{v}");
    // Concurrent with the post, the read may miss it.
    h[1].invoked = 5;
    assert_linearizable(&h, &graph());
}

#[test]
fn post_of_an_author_never_followed() {
    let mut h = vec![
        ok(1, post(3, 5), 0, 10, posted(0)),
        ok(2, timeline(2), 20, 30, tl(&[(3, 5)])),
    ];
    let v = assert_violation(&h, &graph(), 1);
    assert_eq!(v.model_result, tl(&[]));
    assert!(v.message.contains("unexpected [(3,5)]"), "{v}");
    // Had user 2 followed 3 (concurrently), fine.
    h.push(ok(3, follow(2, 3), 15, 25, ChirperResult::Followed(true)));
    assert_linearizable(&h, &graph());
}

#[test]
fn stale_read_after_a_completed_follow() {
    let mut h = vec![
        ok(1, post(3, 5), 0, 10, posted(0)),
        ok(1, follow(2, 3), 20, 30, ChirperResult::Followed(true)),
        ok(2, timeline(2), 40, 50, tl(&[])),
    ];
    let v = assert_violation(&h, &graph(), 2);
    assert_eq!(v.model_result, tl(&[(3, 5)]));
    assert_eq!(v.prefix_len, 2);
    // Concurrent with the follow, the old timeline is fine.
    h[2].invoked = 25;
    assert_linearizable(&h, &graph());
}

#[test]
fn stale_read_after_a_completed_unfollow() {
    let mut h = vec![
        ok(1, post(1, 5), 0, 10, posted(1)),
        ok(2, timeline(2), 20, 30, tl(&[(1, 5)])),
        ok(1, unfollow(2, 1), 40, 50, ChirperResult::Unfollowed(true)),
        ok(2, timeline(2), 60, 70, tl(&[(1, 5)])),
    ];
    let v = assert_violation(&h, &graph(), 3);
    assert_eq!(v.model_result, tl(&[]));
    h[3].invoked = 45;
    assert_linearizable(&h, &graph());
}

#[test]
fn post_applied_twice() {
    let mut h = vec![
        ok(1, post(1, 7), 0, 10, posted(1)),
        ok(2, timeline(2), 20, 30, tl(&[(1, 7), (1, 7)])),
    ];
    let v = assert_violation(&h, &graph(), 1);
    assert!(v.message.contains("duplicated [(1,7)]"), "{v}");
    // Two posts are two entries.
    h.insert(1, ok(1, post(1, 8), 12, 15, posted(1)));
    h[2].result = Some(tl(&[(1, 7), (1, 8)]));
    assert_linearizable(&h, &graph());
}

#[test]
fn wrong_follower_count() {
    let mut h = vec![
        ok(3, follow(3, 1), 0, 5, ChirperResult::Followed(true)),
        ok(1, post(1, 7), 10, 20, posted(1)),
    ];
    let v = assert_violation(&h, &graph(), 1);
    assert_eq!(v.model_result, posted(2));
    // Concurrent with the follow, 1 is right.
    h[1].invoked = 2;
    assert_linearizable(&h, &graph());
    // Followers that were deleted still count.
    let h = vec![
        ok(
            2,
            ChirperOp::Delete { user: 2 },
            0,
            5,
            ChirperResult::Deleted,
        ),
        ok(1, post(1, 7), 10, 20, posted(1)),
    ];
    assert_linearizable(&h, &graph());
}

#[test]
fn followed_true_twice() {
    let mut h = vec![
        ok(1, follow(3, 1), 0, 10, ChirperResult::Followed(true)),
        ok(2, follow(3, 1), 20, 30, ChirperResult::Followed(true)),
    ];
    let v = assert_violation(&h, &graph(), 1);
    assert_eq!(v.model_result, ChirperResult::Followed(false));
    // With an unfollow in between, fine.
    h.insert(
        1,
        ok(1, unfollow(3, 1), 12, 15, ChirperResult::Unfollowed(true)),
    );
    assert_linearizable(&h, &graph());
}

#[test]
fn read_sees_a_post_from_the_future() {
    let mut h = vec![
        ok(2, timeline(2), 0, 10, tl(&[(1, 7)])),
        ok(1, post(1, 7), 20, 30, posted(1)),
    ];
    let v = assert_violation(&h, &graph(), 0);
    assert_eq!(v.prefix_len, 0);
    assert_eq!(v.model_result, tl(&[]));
    // Overlapping, the read may see it.
    h[1].invoked = 8;
    assert_linearizable(&h, &graph());
}

#[test]
fn reads_disagreeing_on_the_order_of_concurrent_posts() {
    let initial = ChirperInitial::new([(2, [1]), (3, [1])]);
    let mut h = vec![
        ok(1, post(1, 1), 0, 100, posted(2)),
        ok(4, post(1, 2), 0, 100, posted(2)),
        ok(2, timeline(2), 200, 210, tl(&[(1, 1), (1, 2)])),
        ok(3, timeline(3), 220, 230, tl(&[(1, 2), (1, 1)])),
    ];
    assert_violation(&h, &initial, 3);
    h[3].result = Some(tl(&[(1, 1), (1, 2)]));
    assert_linearizable(&h, &initial);
}

#[test]
fn planted_anomalies_in_generated_histories() {
    // In generated histories without info operations or deletions, duplicating an
    // entry of a timeline read, or adding a post that was never made, is always a
    // violation: post ids are unique, and a timeline holds a post twice only if its
    // user was deleted and re-created while its followees still listed it.
    let gen = ChirperGenOptions {
        ops: 80,
        churn: false,
        ..ChirperGenOptions::default()
    };
    let (mut planted, mut named) = (0, 0);
    for seed in 0..60 {
        let h = generate(seed, &gen);
        let reads: Vec<usize> = (0..h.events.len())
            .filter(|&i| matches!(&h.events[i].result, Some(ChirperResult::Timeline(t)) if !t.is_empty()))
            .collect();
        let Some(&i) = reads.get(reads.len() / 2) else {
            continue;
        };
        for tamper in 0..2 {
            let mut events = h.events.clone();
            if let Some(ChirperResult::Timeline(t)) = &mut events[i].result {
                if tamper == 0 {
                    let last = t[t.len() - 1];
                    t.push(last);
                } else {
                    t.insert(0, (1, 1_000_000));
                }
            }
            let err = check_chirper(&events, &h.initial, &opts()).unwrap_err();
            let v = err
                .violation()
                .unwrap_or_else(|| panic!("seed {seed}: {err}"));
            planted += 1;
            if v.index == i {
                named += 1;
            }
        }
    }
    assert!(planted >= 100, "{planted}");
    // The culprit reported is the deepest failure, usually the tampered read.
    assert!(named * 10 >= planted * 8, "{named} of {planted}");
}

// ---------------------------------------------------------------------------------------
// Info operations.

#[test]
fn info_post_that_shows_up_later() {
    let h = vec![
        info(1, post(1, 7), 0),
        ok(1, post(1, 8), 50, 60, posted(1)),
        ok(2, timeline(2), 100, 110, tl(&[(1, 7), (1, 8)])),
    ];
    assert_linearizable(&h, &graph());
    // Even after the same client's next operation.
    let h = vec![
        info(1, post(1, 7), 0),
        ok(1, post(1, 8), 50, 60, posted(1)),
        ok(2, timeline(2), 100, 110, tl(&[(1, 8), (1, 7)])),
    ];
    assert_linearizable(&h, &graph());
}

#[test]
fn info_post_that_never_shows_up() {
    let h = vec![
        info(1, post(1, 7), 0),
        ok(2, timeline(2), 100, 110, tl(&[])),
        ok(1, post(1, 8), 120, 130, posted(1)),
        ok(2, timeline(2), 200, 210, tl(&[(1, 8)])),
    ];
    let s = check_chirper(&h, &graph(), &opts()).unwrap();
    assert_eq!((s.ops, s.ok_ops, s.info_ops), (4, 3, 1));
}

#[test]
fn info_post_that_shows_up_before_its_invocation() {
    let h = vec![
        ok(2, timeline(2), 0, 10, tl(&[(1, 7)])),
        info(1, post(1, 7), 20),
    ];
    let v = assert_violation(&h, &graph(), 0);
    assert_eq!(v.model_result, tl(&[]));
}

#[test]
fn info_post_seen_then_unseen() {
    // Once a read saw it, a later read cannot miss it (the post took effect once).
    let h = vec![
        info(1, post(1, 7), 0),
        ok(2, timeline(2), 100, 110, tl(&[(1, 7)])),
        ok(2, timeline(2), 120, 130, tl(&[])),
    ];
    assert_violation(&h, &graph(), 2);
}

#[test]
fn info_follow_and_unfollow() {
    let h = vec![
        ok(1, post(1, 7), 0, 5, posted(1)),
        info(3, follow(3, 1), 10),
        ok(3, unfollow(3, 1), 20, 30, ChirperResult::Unfollowed(true)),
        ok(3, timeline(3), 40, 50, tl(&[])),
    ];
    assert_linearizable(&h, &graph());
}

// ---------------------------------------------------------------------------------------
// Malformed histories.

fn malformed(events: &[ChirperEvent]) -> String {
    match check_chirper(events, &graph(), &opts()) {
        Err(e @ ChirperCheckError::Malformed(_)) => e.to_string(),
        other => panic!("expected a malformed history, got {other:?}"),
    }
}

#[test]
fn malformed_histories_are_refused() {
    let good = ok(1, timeline(2), 0, 10, tl(&[]));
    let m = malformed(&[good.clone(), ok(2, timeline(2), 30, 20, tl(&[]))]);
    assert!(
        m.contains("event #1") && m.contains("before it was invoked"),
        "{m}"
    );

    let mut e = good.clone();
    e.returned = None;
    let m = malformed(&[e]);
    assert!(
        m.contains("has a result (timeline[]) but no return time"),
        "{m}"
    );

    let mut e = good.clone();
    e.result = None;
    let m = malformed(&[e]);
    assert!(m.contains("has a return time but no result"), "{m}");

    let m = malformed(&[ok(1, post(1, 1), 0, 10, tl(&[]))]);
    assert!(m.contains("post cannot return timeline[]"), "{m}");

    let m = malformed(&[good.clone(), ok(1, post(1, 1), 5, 20, posted(1))]);
    assert!(
        m.contains("client 1 has two overlapping operations: #0") && m.contains("#1"),
        "{m}"
    );

    // Touching is not overlapping, other clients may overlap, and a client may move
    // on after an info operation.
    let fine = vec![
        good.clone(),
        ok(1, post(1, 1), 10, 20, posted(1)),
        ok(2, timeline(3), 5, 15, tl(&[])),
        info(3, post(1, 2), 0),
        ok(3, timeline(3), 0, 4, tl(&[])),
    ];
    assert_linearizable(&fine, &graph());
}

// ---------------------------------------------------------------------------------------
// The budget.

/// Twelve concurrent follows, six of user 1 and six of user 2, and a concurrent post
/// of user 1 that claims seven followers: not linearizable, but only after trying the
/// post after every subset of the follows (2^12 configurations).
fn hard_history() -> (Vec<ChirperEvent>, ChirperInitial) {
    let initial = ChirperInitial::with_users((1..=2).chain(10..16).chain(20..26));
    let mut h: Vec<ChirperEvent> = (10..16)
        .map(|u| ok(u, follow(u, 1), 0, 100, ChirperResult::Followed(true)))
        .chain((20..26).map(|u| ok(u, follow(u, 2), 0, 100, ChirperResult::Followed(true))))
        .collect();
    h.push(ok(99, post(1, 1), 0, 100, posted(7)));
    (h, initial)
}

#[test]
fn budget_exhausted_is_unknown_not_a_violation() {
    let (h, initial) = hard_history();
    let tiny = ChirperCheckOptions {
        max_configurations: 50,
    };
    match check_chirper(&h, &initial, &tiny) {
        Err(ChirperCheckError::Unknown(u)) => {
            assert_eq!(u.limit, 50);
            assert!(u.configurations > 50);
        }
        other => panic!("expected unknown, got {other:?}"),
    }
    // With the default budget the verdict comes.
    let err = check_chirper(&h, &initial, &opts()).unwrap_err();
    let v = err.violation().expect("a violation");
    assert_eq!(v.index, 12);
    assert_eq!(v.model_result, posted(6));
    // A valid history past a tiny budget is unknown too.
    let g = generate(3, &ChirperGenOptions::default());
    let r = check_chirper(&g.events, &g.initial, &tiny);
    assert!(matches!(r, Err(ChirperCheckError::Unknown(_))), "{r:?}");
}

// ---------------------------------------------------------------------------------------
// An exhaustive oracle on small histories.

/// Whether some order of `events` respecting real time explains every result (info
/// operations placed anywhere after their invocation, or nowhere): a depth-first
/// search over every order, on the plain specification, remembering the (linearized
/// set, state) pairs that failed. Shares no code with the checker's search. `None`
/// if it takes more than `limit` steps.
fn oracle(events: &[ChirperEvent], initial: &ChirperInitial, limit: u64) -> Option<bool> {
    use std::collections::HashSet;
    assert!(events.len() <= 128);
    let required: u128 = (0..events.len())
        .filter(|&i| !events[i].is_info())
        .fold(0, |m, i| m | 1 << i);
    // must_precede[i]: operations that returned before i was invoked.
    let must_precede: Vec<u128> = events
        .iter()
        .map(|e| {
            (0..events.len())
                .filter(|&j| events[j].returned.is_some_and(|r| r < e.invoked))
                .fold(0, |m, j| m | 1 << j)
        })
        .collect();
    struct Search<'a> {
        events: &'a [ChirperEvent],
        must_precede: Vec<u128>,
        required: u128,
        failed: HashSet<(u128, ChirperSpec)>,
        steps: u64,
    }
    fn go(s: &mut Search<'_>, done: u128, spec: &ChirperSpec) -> Option<bool> {
        let (events, required) = (s.events, s.required);
        if done & required == required {
            return Some(true);
        }
        if s.failed.contains(&(done, spec.clone())) {
            return Some(false);
        }
        s.steps = s.steps.checked_sub(1)?;
        for (i, e) in events.iter().enumerate() {
            if done & (1 << i) != 0 || s.must_precede[i] & required & !done != 0 {
                continue;
            }
            let mut next = spec.clone();
            let got = next.apply(&e.op);
            if e.result.as_ref().is_some_and(|r| *r != got) {
                continue;
            }
            if go(s, done | 1 << i, &next)? {
                return Some(true);
            }
        }
        s.failed.insert((done, spec.clone()));
        Some(false)
    }
    let mut search = Search {
        events,
        must_precede,
        required,
        failed: HashSet::new(),
        steps: limit,
    };
    go(&mut search, 0, &ChirperSpec::new(initial))
}

/// A plausible wrong result for `op` (or the same, sometimes).
fn perturb(result: &ChirperResult, rng: &mut ChaCha8Rng) -> ChirperResult {
    match result {
        ChirperResult::Posted(n) => ChirperResult::Posted(if rng.gen_bool(0.5) {
            n + 1
        } else {
            n.saturating_sub(1)
        }),
        ChirperResult::Followed(b) => ChirperResult::Followed(!b),
        ChirperResult::Unfollowed(b) => ChirperResult::Unfollowed(!b),
        ChirperResult::Created(b) => ChirperResult::Created(!b),
        ChirperResult::Timeline(t) => {
            let mut t = t.clone();
            match rng.gen_range(0..3) {
                0 if !t.is_empty() => {
                    t.remove(rng.gen_range(0..t.len()));
                }
                1 if t.len() >= 2 => t.swap(0, 1),
                _ => t.push((rng.gen_range(1..4), rng.gen_range(1..6))),
            }
            ChirperResult::Timeline(t)
        }
        ChirperResult::NoUser | ChirperResult::Deleted => result.clone(),
    }
}

/// Generated histories, one in four left alone and the others corrupted (a result
/// changed, an operation shifted in time), judged by the checker and the oracle.
fn compare_with_oracle(
    seeds: std::ops::Range<u64>,
    max_ops: usize,
    max_users: u64,
    post_rate: f64,
) -> (usize, usize) {
    let (mut valid, mut invalid) = (0, 0);
    for seed in seeds {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let gen = ChirperGenOptions {
            users: rng.gen_range(2..=max_users),
            followees: rng.gen_range(0..3),
            clients: rng.gen_range(1..5),
            ops: rng.gen_range(1..=max_ops),
            info_rate: [0.0, 0.1, 0.3][seed as usize % 3],
            post_rate,
            churn: seed % 2 == 0,
            max_gap: 20,
            max_duration: 80,
        };
        let h = generate(seed, &gen);
        let mut events = h.events.clone();
        if seed % 4 != 0 {
            for _ in 0..rng.gen_range(1..3) {
                let i = rng.gen_range(0..events.len());
                if rng.gen_bool(0.7) {
                    if let Some(r) = &events[i].result {
                        events[i].result = Some(perturb(r, &mut rng));
                    }
                } else {
                    let shift = rng.gen_range(0..150);
                    let e = &mut events[i];
                    e.invoked += shift;
                    if let Some(r) = &mut e.returned {
                        *r += shift;
                    }
                }
            }
        }
        let Some(expected) = oracle(&events, &h.initial, 200_000) else {
            continue;
        };
        match check_chirper(&events, &h.initial, &opts()) {
            Ok(_) => {
                assert!(
                    expected,
                    "seed {seed}: checker accepts, oracle refuses: {events:#?}"
                );
                valid += 1;
            }
            Err(ChirperCheckError::Violation(v)) => {
                assert!(
                    !expected,
                    "seed {seed}: checker refuses ({v}), oracle accepts: {events:#?}"
                );
                invalid += 1;
            }
            // A time shift may make a client's operations overlap.
            Err(ChirperCheckError::Malformed(_)) => {}
            Err(e) => panic!("seed {seed}: {e} ({gen:?}, oracle says {expected}): {events:#?}"),
        }
    }
    (valid, invalid)
}

#[test]
fn agrees_with_an_exhaustive_oracle_on_tiny_histories() {
    let (valid, invalid) = compare_with_oracle(0..600, 8, 5, 0.3);
    assert!(
        valid > 150 && invalid > 150,
        "{valid} valid, {invalid} invalid"
    );
}

#[test]
fn agrees_with_an_exhaustive_oracle_on_small_histories() {
    let (valid, invalid) = compare_with_oracle(1_000..1_300, 30, 5, 0.3);
    assert!(
        valid > 60 && invalid > 60,
        "{valid} valid, {invalid} invalid"
    );
}

// ---------------------------------------------------------------------------------------
// Files.

#[test]
fn history_file_round_trip() {
    let h = generate(
        5,
        &ChirperGenOptions {
            info_rate: 0.2,
            ..ChirperGenOptions::default()
        },
    );
    let path = std::env::temp_dir().join(format!("partita-chirper-{}.jsonl", std::process::id()));
    let mut w = ChirperHistoryWriter::create(&path).unwrap();
    for e in &h.events {
        w.write(e).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let read = read_chirper_history(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(read, h.events);
    assert!(check_chirper(&read, &h.initial, &opts()).is_ok());
    let missing = read_chirper_history(&path).unwrap_err().to_string();
    assert!(missing.contains("cannot read history"), "{missing}");
}

/// A history that once exhausted the budget (2 million configurations) in the
/// property test above: 68 operations of 3 clients on 2 users, a sixth of them
/// unknown, among them seven posts that no read ever shows. Each such post fit between
/// any two posts of its author; left out of the search (they cannot change a verdict),
/// the history takes a few hundred configurations.
#[test]
fn unobserved_unknown_posts_do_not_blow_up_the_search() {
    let gen = ChirperGenOptions {
        users: 2,
        followees: 2,
        clients: 3,
        ops: 68,
        info_rate: 0.1672254733641989,
        post_rate: 0.3,
        churn: false,
        max_gap: 30,
        max_duration: 65,
    };
    let h = generate(6772910482964791676, &gen);
    let s = check_chirper(&h.events, &h.initial, &opts()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.ops, s.info_ops), (68, 17));
    assert!(s.configurations < 10_000, "{s}");
}

/// User 3 follows 1, 2, 4 and 5. An unknown post of user 1 that no read shows is
/// still needed: it pushed the oldest entry out of user 3's full timeline before an
/// unfollow of user 1 removed it. Without it the final read, which lacks the oldest
/// entry, is impossible. The reduction that leaves unobserved unknown posts out must
/// see that timelines can fill up here and keep the post.
#[test]
fn an_unobserved_unknown_post_that_evicted_an_entry_is_kept() {
    let initial = ChirperInitial::new([(3, vec![1, 2, 4, 5])]);
    let mut events = Vec::new();
    let mut t = 0;
    let mut next = |op, r| {
        t += 10;
        ok(1, op, t, t + 5, r)
    };
    events.push(next(post(2, 0), posted(1)));
    let mut shown = Vec::new();
    for i in 1..=49 {
        let author = [2, 4, 5][i as usize % 3];
        events.push(next(post(author, i), posted(1)));
        shown.push((author, i));
    }
    events.push(next(unfollow(3, 1), ChirperResult::Unfollowed(true)));
    events.push(next(timeline(3), tl(&shown)));
    // The unknown post, by another client, concurrent with the first two posts.
    events.push(info(2, post(1, 999), 12));
    const { assert!(POSTS_KEPT < 50 && TIMELINE_KEPT == 50) };
    let s = check_chirper(&events, &initial, &opts()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.info_ops, 1);
    // And without the unknown post the read is a violation, named as such.
    events.pop();
    let last = events.len() - 1;
    let v = assert_violation(&events, &initial, last);
    assert!(v.message.contains("missing [(2,0)]"), "{v}");
}
