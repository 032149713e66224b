//! Seeded generator of linearizable Chirper histories, for tests and benchmarks.
//!
//! Every client issues operations one after another, each with a random interval
//! (random gap before it, random duration) and a random *linearization point* inside
//! its interval. The operations are then executed on [`ChirperSpec`] in the order of
//! their linearization points, the operation itself chosen at random at that moment,
//! and each records what the specification returned. The history is linearizable by
//! construction (that order respects real time), while intervals of different
//! clients overlap freely.
//!
//! A fraction of the operations is recorded as *info* (no return time, no result);
//! half of those take effect at their linearization point, the others never.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::event::{ChirperEvent, ChirperInitial, ChirperOp};
use super::model::ChirperSpec;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct ChirperGenOptions {
    /// Users `1..=users` exist initially.
    pub users: u64,
    /// Initial followees per user (distinct, random; fewer if `users` is small).
    pub followees: usize,
    pub clients: u64,
    /// Operations in all.
    pub ops: usize,
    /// Fraction of operations recorded as info.
    pub info_rate: f64,
    /// Fraction of operations that are posts; the others are 57% timeline reads, 17%
    /// follows, 17% unfollows, and (with `churn`) 4.5% creates and 4.5% deletes.
    pub post_rate: f64,
    /// Whether to create and delete users (ids up to `users + users / 4`).
    pub churn: bool,
    /// Time between a client's operations, ns, at most (drawn uniformly).
    pub max_gap: u64,
    /// Duration of an operation, ns, at most (drawn uniformly, at least 2).
    pub max_duration: u64,
}

impl Default for ChirperGenOptions {
    fn default() -> Self {
        ChirperGenOptions {
            users: 12,
            followees: 3,
            clients: 3,
            ops: 60,
            info_rate: 0.0,
            post_rate: 0.3,
            churn: true,
            max_gap: 40,
            max_duration: 200,
        }
    }
}

/// A generated history.
#[derive(Clone, Debug)]
pub struct GeneratedChirper {
    pub initial: ChirperInitial,
    /// Sorted by invocation time.
    pub events: Vec<ChirperEvent>,
    /// For each event, its position in the linearization used to build it (`None` for
    /// info operations that never took effect).
    pub order: Vec<Option<usize>>,
    /// The specification's state after every operation.
    pub final_state: ChirperSpec,
}

/// A linearizable history (see the module documentation); the same seed and options
/// give the same history.
pub fn generate(seed: u64, opts: &ChirperGenOptions) -> GeneratedChirper {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let users = opts.users.max(1);
    let initial = ChirperInitial::new((1..=users).map(|u| {
        let mut whom = Vec::new();
        for _ in 0..opts.followees {
            let w = rng.gen_range(1..=users);
            if w != u {
                whom.push(w);
            }
        }
        (u, whom)
    }));

    // Intervals first: (linearization point, client, invoked, returned).
    let clients = opts.clients.max(1);
    let mut free = vec![0u64; clients as usize];
    let mut slots: Vec<(u64, u64, u64, u64)> = Vec::with_capacity(opts.ops);
    for k in 0..opts.ops {
        let c = (k as u64 % clients) as usize;
        let invoked = free[c] + rng.gen_range(0..=opts.max_gap);
        let duration = rng.gen_range(2..=opts.max_duration.max(2));
        let returned = invoked + duration;
        let point = rng.gen_range(invoked + 1..returned);
        free[c] = returned;
        slots.push((point, c as u64, invoked, returned));
    }
    slots.sort_unstable();

    let max_id = if opts.churn { users + users / 4 } else { users };
    let mut spec = ChirperSpec::new(&initial);
    let mut post_id = 0u64;
    let mut events = Vec::with_capacity(slots.len());
    let mut order = Vec::with_capacity(slots.len());
    let mut applied = 0usize;
    for (_, client, invoked, returned) in slots {
        let user = rng.gen_range(1..=users);
        let op = if rng.gen_bool(opts.post_rate.clamp(0.0, 1.0)) {
            post_id += 1;
            ChirperOp::Post { user, id: post_id }
        } else {
            match rng.gen_range(0..70) {
                0..=11 => ChirperOp::Follow {
                    user,
                    whom: rng.gen_range(1..=users),
                },
                12..=23 => ChirperOp::Unfollow {
                    user,
                    whom: rng.gen_range(1..=users),
                },
                24..=26 if opts.churn => ChirperOp::Create {
                    user: rng.gen_range(1..=max_id),
                },
                27..=29 if opts.churn => ChirperOp::Delete {
                    user: rng.gen_range(1..=max_id),
                },
                _ => ChirperOp::Timeline { user },
            }
        };
        if rng.gen_bool(opts.info_rate.clamp(0.0, 1.0)) {
            if rng.gen_bool(0.5) {
                spec.apply(&op);
                order.push(Some(applied));
                applied += 1;
            } else {
                order.push(None);
            }
            events.push(ChirperEvent::info(client, op, invoked));
        } else {
            let result = spec.apply(&op);
            order.push(Some(applied));
            applied += 1;
            events.push(ChirperEvent::ok(client, op, invoked, returned, result));
        }
    }
    // Present them in invocation order, as a recorder might.
    let mut idx: Vec<usize> = (0..events.len()).collect();
    idx.sort_by_key(|&i| (events[i].invoked, i));
    let events = idx.iter().map(|&i| events[i].clone()).collect();
    let order = idx.iter().map(|&i| order[i]).collect();
    GeneratedChirper {
        initial,
        events,
        order,
        final_state: spec,
    }
}
