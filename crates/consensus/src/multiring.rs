//! Multi-Ring Paxos (paper 002 §V-B and its reference [18]): the two pieces that turn
//! several independent Ring Paxos streams into one atomic multicast.
//!
//! - [`RingMerge`], at a learner: it subscribes to a set of rings and merges their
//!   decided streams deterministically, round-robin in ascending ring order, `M`
//!   logical instances of each ring per round. A ring's stream is what its own learner
//!   delivers (in instance order); the merge blocks on a ring whose next instance is not
//!   decided yet. Every learner that subscribes to the same rings with the same `M`
//!   delivers the same sequence, whatever the order in which the rings' decisions
//!   arrive: that is what makes a command multicast to a group (a ring) land at the same
//!   point of every stream it shares with other groups.
//! - [`SkipPacer`], at a ring's coordinator: an idle ring would stall every learner that
//!   merges it, so a coordinator that proposed fewer than `λ·Δ` logical instances in the
//!   last interval `Δ` proposes one *skip* instance worth the difference. A skip is one
//!   consensus instance that counts as `n` logical instances in the merge and delivers
//!   nothing; it costs one value however many instances it stands for (as in
//!   URingPaxos).
//! - **Skips on demand** (the papers pace idle rings with `λ` and `Δ` only): a merge
//!   that waits for a ring that looks idle (its last two decided instances skips)
//!   while other rings' values queue behind it names that ring and the position that
//!   releases them ([`RingMerge::wanted`]); the learner asks the ring's leader
//!   ([`crate::Msg::SkipRequest`]), which proposes at once the skip its pacer would
//!   propose at the end of the interval. At 0% dependent commands P-SMR's g_all ring
//!   is idle, and every thread ring's values waited for its skips, up to `Δ` each.
//!
//! Write-down of the merge rule (the papers leave it out): round `k` takes, for each
//! subscribed ring in ascending id order, the next `M` logical instances of that ring.
//! A value is one logical instance; a skip of `n` covers `n`, and when fewer than `n`
//! remain of the ring's turn the rest of the skip carries over to the ring's next turn.
//! The merge position (round, the ring whose turn it is, what is left of its turn, and
//! per ring the next instance and the skip carried) is all the merge state; it goes into
//! checkpoints so that a replica restored from one continues the same sequence.
//!
//! Sans-IO like every core here: no clock (the pacer is given the time), no I/O.

use partita_types::choice::FieldError;
use partita_types::Instance;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// A ring's identity in the cluster file.
pub type RingId = u32;

/// What one consensus instance of a ring stands for in the merge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingItem<V> {
    /// A decided value: one logical instance, delivered.
    Value(V),
    /// A skip: `n` logical instances (at least 1), nothing delivered.
    Skip(u64),
    /// A skip to logical position `t` of the ring (what a coordinator proposes: its
    /// clock times λ): as many logical instances as the ring is short of `t`, none if
    /// it is there already. Nothing delivered.
    SkipTo(u64),
}

impl RingItem<std::sync::Arc<crate::Value>> {
    /// What a decided value of a ring is in the merge: a skip instance moves the ring
    /// to the logical position it names, any other value (a no-op included) is one
    /// instance, delivered.
    pub fn of(value: std::sync::Arc<crate::Value>) -> Self {
        match value.skip {
            0 => RingItem::Value(value),
            t => RingItem::SkipTo(t),
        }
    }
}

/// Skips in a row after which a ring looks idle to [`RingMerge::wanted`]: a ring with
/// values between its pacer's skips is busy, and its values will move it.
const IDLE_SKIPS: u8 = 2;

/// A value the merge delivers ([`RingMerge::pop_merged`]): its ring, its consensus
/// instance there, and its place in the round-robin: the turn of its ring in round
/// `round`, at place `offset` (0-based, below `M`) of that turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merged<V> {
    pub ring: RingId,
    pub instance: Instance,
    pub round: u64,
    pub offset: u64,
    pub value: V,
}

/// What [`RingMerge::pop_merged_if`] found at the head of the merge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Head<V> {
    /// The next value, taken.
    Taken(Merged<V>),
    /// The next value, where it stands, left at the head.
    Refused(Merged<()>),
    /// The ring whose turn it is has nothing decided yet.
    Waiting,
}

/// The name of the value a merge took in round `round`, at place `offset` of the turn
/// of the ring ranked `rank` (0-based, ascending id) among the `rings` rings of the
/// cluster, `m` instances per turn: its place in the round-robin of *every* ring,
/// counted from 1, `(round · rings + rank) · m + offset + 1`.
///
/// A ring's logical instance `l` is taken in round `l / m` at place `l % m` by every
/// merge that has the ring (each turn takes `m` of the ring's logical instances,
/// whatever the other rings are). So a value has the same name at every learner that
/// merges its ring, whichever rings it merges besides, and every merge (of any subset
/// of the rings, in ascending order) delivers in ascending name order: the name is
/// the value's position in the one sequence that every learner's sequence is a
/// projection of. Names are not dense (skips and other rings' turns take places, and
/// a value shares its turn with the ring's other values). Saturates at `u64::MAX`,
/// which only skips past what a u64 counts reach (see
/// `skips_beyond_what_a_u64_counts_saturate`).
pub fn slot_name(round: u64, offset: u64, rank: usize, rings: usize, m: u64) -> Instance {
    assert!(
        rank < rings && offset < m,
        "rank {rank} of {rings} rings, place {offset} of a turn of {m}"
    );
    let slot =
        (u128::from(round) * rings as u128 + rank as u128) * u128::from(m) + u128::from(offset) + 1;
    u64::try_from(slot).unwrap_or(u64::MAX)
}

/// Where a merge stands: everything needed to continue the same sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergePosition {
    /// Rounds completed.
    pub round: u64,
    /// Index (among the subscribed rings, ascending) of the ring whose turn it is.
    pub turn: usize,
    /// Logical instances left in that ring's turn.
    pub left: u64,
    /// Per subscribed ring (ascending): the next consensus instance the merge expects
    /// from it, the logical instances still to skip of a skip taken in part, and the
    /// ring's logical position after the instances before the next one.
    pub rings: Vec<(RingId, Instance, u64, u64)>,
}

/// Counters of a merge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeStats {
    pub values_delivered: u64,
    pub skips_consumed: u64,
    pub logical_skipped: u64,
}

/// A ring's part of the merge.
#[derive(Clone, Debug)]
struct RingQueue<V> {
    id: RingId,
    /// The consensus instance the next pushed item must have.
    next_push: Instance,
    /// The consensus instance of the queue's head (`next_push - queue.len()`).
    head: Instance,
    /// Logical instances still to skip from a skip taken in part (already popped).
    carried_skip: u64,
    /// The ring's logical position after every instance before `head`, and after
    /// every instance pushed.
    logical_head: u64,
    logical_push: u64,
    /// Values and relative skips (`Skip(0)`: a skip to where the ring was already).
    queue: VecDeque<RingItem<V>>,
    /// How many of `queue`'s items are values.
    values: usize,
    /// Skips pushed since the last value (capped; a ring nothing was pushed for
    /// counts as idle): two or more in a row and the ring looks idle (a busy ring has
    /// values between its pacer's skips).
    skips_in_a_row: u8,
}

/// An item pushed out of order: the ring's learner must hand instances in order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    #[error("ring {0} is not one this merge subscribes to")]
    UnknownRing(RingId),
    #[error("ring {ring}: instance {got} pushed where {expected} was due")]
    OutOfOrder {
        ring: RingId,
        expected: Instance,
        got: Instance,
    },
    #[error("ring {0}: a skip of 0 instances")]
    EmptySkip(RingId),
}

/// The deterministic merge of several rings' decided streams (see the module
/// documentation for the rule).
#[derive(Clone, Debug)]
pub struct RingMerge<V> {
    /// Subscribed rings, ascending by id.
    rings: Vec<RingQueue<V>>,
    m: u64,
    round: u64,
    turn: usize,
    left: u64,
    stats: MergeStats,
    /// Planted bug (`merge-order`): rings take their turns in descending order, so
    /// learners with this bug and without disagree on the order of multicast commands.
    pub unsafe_reverse_order: bool,
}

impl<V> RingMerge<V> {
    /// A merge of `rings` (any order, no duplicates), `m` logical instances per ring
    /// per round, starting at instance 1 of every ring.
    pub fn new(rings: &[RingId], m: u64) -> Result<RingMerge<V>, FieldError> {
        Self::check(rings, m)?;
        let mut ids = rings.to_vec();
        ids.sort_unstable();
        let pos = MergePosition {
            round: 0,
            turn: 0,
            left: m,
            rings: ids.iter().map(|&r| (r, 1, 0, 0)).collect(),
        };
        Ok(Self::resume(pos, m).expect("a fresh position is valid"))
    }

    fn check(rings: &[RingId], m: u64) -> Result<(), FieldError> {
        if rings.is_empty() {
            return Err(FieldError::new(
                "rings",
                "a learner subscribes to at least one ring",
            ));
        }
        let mut ids = rings.to_vec();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(FieldError::new(
                "rings",
                format!("ring {} is named twice", w[0]),
            ));
        }
        if m == 0 {
            return Err(FieldError::new(
                "m",
                "instances per ring per round must be at least 1",
            ));
        }
        Ok(())
    }

    /// Continue from `pos` (a checkpoint's), `m` as before.
    pub fn resume(pos: MergePosition, m: u64) -> Result<RingMerge<V>, FieldError> {
        let ids: Vec<RingId> = pos.rings.iter().map(|r| r.0).collect();
        Self::check(&ids, m)?;
        if ids.windows(2).any(|w| w[0] > w[1]) {
            return Err(FieldError::new(
                "rings",
                "a position lists its rings ascending",
            ));
        }
        if pos.turn >= ids.len() || pos.left == 0 || pos.left > m {
            return Err(FieldError::new(
                "position",
                format!(
                    "turn {} with {} left is not a position of {} rings, M = {m}",
                    pos.turn,
                    pos.left,
                    ids.len()
                ),
            ));
        }
        if let Some(r) = pos.rings.iter().find(|r| r.1 == 0) {
            return Err(FieldError::new(
                "position",
                format!("ring {}'s next instance is 0 (instances start at 1)", r.0),
            ));
        }
        Ok(RingMerge {
            rings: pos
                .rings
                .iter()
                .map(|&(id, next, carried, logical)| RingQueue {
                    id,
                    next_push: next,
                    head: next,
                    carried_skip: carried,
                    logical_head: logical,
                    logical_push: logical,
                    queue: VecDeque::new(),
                    values: 0,
                    skips_in_a_row: IDLE_SKIPS,
                })
                .collect(),
            m,
            round: pos.round,
            turn: pos.turn,
            left: pos.left,
            stats: MergeStats::default(),
            unsafe_reverse_order: false,
        })
    }

    /// Where the merge stands (what it delivered, not what it holds queued).
    pub fn position(&self) -> MergePosition {
        MergePosition {
            round: self.round,
            turn: self.turn,
            left: self.left,
            rings: self
                .rings
                .iter()
                .map(|r| (r.id, r.head, r.carried_skip, r.logical_head))
                .collect(),
        }
    }

    pub fn stats(&self) -> &MergeStats {
        &self.stats
    }

    /// The subscribed rings, ascending.
    pub fn rings(&self) -> impl Iterator<Item = RingId> + '_ {
        self.rings.iter().map(|r| r.id)
    }

    /// Items queued (pushed, not yet merged) for `ring`.
    pub fn queued(&self, ring: RingId) -> usize {
        self.rings
            .iter()
            .find(|r| r.id == ring)
            .map_or(0, |r| r.queue.len())
    }

    /// Whether any ring's queue holds a value (not only skips) not merged yet.
    pub fn holds_values(&self) -> bool {
        self.rings.iter().any(|r| r.values > 0)
    }

    /// Skips on demand: while the merge waits for an idle ring (its last two decided
    /// instances were skips) that has nothing queued although other rings hold values,
    /// that ring and the logical position it must reach for every queued value to be
    /// merged (the furthest such ring's position after what it pushed, rounded up to
    /// a whole turn of `M`). What a learner asks that ring's coordinator to skip to,
    /// rather than waiting for its pacing interval to end. `None` when the merge does
    /// not wait, waits for a ring whose values are coming, or waits with nothing
    /// queued behind it.
    pub fn wanted(&self) -> Option<(RingId, u64)> {
        let r = &self.rings[self.turn_index()];
        if r.carried_skip > 0 || !r.queue.is_empty() || r.skips_in_a_row < IDLE_SKIPS {
            return None;
        }
        let furthest = self
            .rings
            .iter()
            .filter(|q| q.values > 0)
            .map(|q| q.logical_push)
            .max()?;
        let to = furthest.div_ceil(self.m).saturating_mul(self.m);
        (to > r.logical_push).then_some((r.id, to))
    }

    /// Where the round-robin stands: the ring whose turn it is, the round, and the
    /// place (0-based, below `M`) in that ring's turn that the merge takes next.
    /// Every place before it was taken (a value merged, or a logical instance
    /// skipped).
    pub fn cursor(&self) -> (RingId, u64, u64) {
        (
            self.rings[self.turn_index()].id,
            self.round,
            self.m - self.left,
        )
    }

    /// The next consensus instance `ring` must push (what its learner delivers next).
    pub fn next_instance(&self, ring: RingId) -> Option<Instance> {
        self.rings
            .iter()
            .find(|r| r.id == ring)
            .map(|r| r.next_push)
    }

    /// Ring `ring` decided `item` at consensus instance `instance` (its learner hands
    /// them in order). Instances below the merge's position are ignored (a replay after
    /// a restore).
    pub fn push(
        &mut self,
        ring: RingId,
        instance: Instance,
        item: RingItem<V>,
    ) -> Result<(), PushError> {
        let r = self
            .rings
            .iter_mut()
            .find(|r| r.id == ring)
            .ok_or(PushError::UnknownRing(ring))?;
        if instance < r.next_push {
            return Ok(());
        }
        if instance > r.next_push {
            return Err(PushError::OutOfOrder {
                ring,
                expected: r.next_push,
                got: instance,
            });
        }
        r.skips_in_a_row = match item {
            RingItem::Value(_) => 0,
            _ => r.skips_in_a_row.saturating_add(1).min(IDLE_SKIPS),
        };
        let item = match item {
            RingItem::Skip(0) => return Err(PushError::EmptySkip(ring)),
            RingItem::Skip(n) => {
                r.logical_push = r.logical_push.saturating_add(n);
                RingItem::Skip(n)
            }
            RingItem::SkipTo(t) => {
                let n = t.saturating_sub(r.logical_push);
                r.logical_push += n;
                RingItem::Skip(n)
            }
            RingItem::Value(v) => {
                r.logical_push = r.logical_push.saturating_add(1);
                r.values += 1;
                RingItem::Value(v)
            }
        };
        r.queue.push_back(item);
        r.next_push += 1;
        Ok(())
    }

    /// The index of the ring whose turn it is.
    fn turn_index(&self) -> usize {
        if self.unsafe_reverse_order {
            self.rings.len() - 1 - self.turn
        } else {
            self.turn
        }
    }

    /// `n` logical instances of the current turn are used up.
    fn consume(&mut self, n: u64) {
        debug_assert!(n >= 1 && n <= self.left);
        self.left -= n;
        if self.left == 0 {
            self.left = self.m;
            self.turn += 1;
            if self.turn == self.rings.len() {
                self.turn = 0;
                self.round = self.round.saturating_add(1);
            }
        }
    }

    /// The next value in merge order, with its ring and consensus instance, or `None`
    /// while the ring whose turn it is has nothing decided yet. Skips are consumed on
    /// the way.
    pub fn pop(&mut self) -> Option<(RingId, Instance, V)> {
        self.pop_merged().map(|m| (m.ring, m.instance, m.value))
    }

    /// [`RingMerge::pop`], with where in the round-robin the value was taken (what
    /// [`slot_name`] names it by).
    pub fn pop_merged(&mut self) -> Option<Merged<V>> {
        match self.pop_merged_if(|_| true) {
            Head::Taken(m) => Some(m),
            Head::Refused(_) => unreachable!("every value is taken"),
            Head::Waiting => None,
        }
    }

    /// The next value in merge order if `take` accepts it (shown its ring, instance
    /// and place, with the value). Skips before it are consumed either way; a refused
    /// value stays at the head, and the merge's position is just before it (what a
    /// learner that may not deliver a value yet checkpoints).
    pub fn pop_merged_if(&mut self, mut take: impl FnMut(&Merged<&V>) -> bool) -> Head<V> {
        loop {
            if self.turn == 0 && self.left == self.m {
                self.skip_whole_rounds();
            }
            let i = self.turn_index();
            let left = self.left;
            let (round, offset) = (self.round, self.m - left);
            let r = &mut self.rings[i];
            if r.carried_skip > 0 {
                let n = r.carried_skip.min(left);
                r.carried_skip -= n;
                self.stats.logical_skipped = self.stats.logical_skipped.saturating_add(n);
                self.consume(n);
                continue;
            }
            let Some(front) = r.queue.front() else {
                return Head::Waiting;
            };
            if let RingItem::Value(v) = front {
                // Where the round-robin stands before the value takes its place: the
                // ring's logical instance `logical_head`, in round `logical / M` at
                // place `logical % M` of the ring's turn (the same at every merge that
                // has the ring, whatever else it has).
                let at = Merged {
                    ring: r.id,
                    instance: r.head,
                    round,
                    offset,
                    value: v,
                };
                if !take(&at) {
                    return Head::Refused(Merged {
                        ring: at.ring,
                        instance: at.instance,
                        round,
                        offset,
                        value: (),
                    });
                }
            }
            let item = r.queue.pop_front().expect("a front");
            let instance = r.head;
            r.head += 1;
            match item {
                RingItem::Value(v) => {
                    let id = r.id;
                    r.values -= 1;
                    r.logical_head += 1;
                    self.stats.values_delivered += 1;
                    self.consume(1);
                    return Head::Taken(Merged {
                        ring: id,
                        instance,
                        round,
                        offset,
                        value: v,
                    });
                }
                RingItem::Skip(0) => self.stats.skips_consumed += 1,
                RingItem::Skip(n) => {
                    r.logical_head = r.logical_head.saturating_add(n);
                    let now = n.min(left);
                    r.carried_skip = n - now;
                    self.stats.skips_consumed += 1;
                    self.stats.logical_skipped = self.stats.logical_skipped.saturating_add(now);
                    self.consume(now);
                }
                RingItem::SkipTo(_) => unreachable!("pushes turn SkipTo into Skip"),
            }
        }
    }

    /// Move the merge to `pos` (a checkpoint's, restored by state transfer), which must
    /// name the same rings. Items already queued at or past the new heads stay queued
    /// (the rings' learners need not deliver them again); a ring whose new head lies
    /// past everything pushed expects its next push there. Returns, per ring, the
    /// consensus instance its learner must deliver next. Refused (nothing changed) when
    /// `pos` names other rings, is no position of this `M`, or lies behind the merge.
    pub fn advance_to(&mut self, pos: &MergePosition) -> Result<Vec<(RingId, Instance)>, String> {
        self.check_advance(pos)?;
        for (&(_, head, carried, logical), r) in pos.rings.iter().zip(self.rings.iter_mut()) {
            if head >= r.next_push {
                r.queue.clear();
                r.values = 0;
                r.next_push = head;
                r.logical_push = logical;
            } else {
                let drop = (head - r.head) as usize;
                let dropped = r
                    .queue
                    .drain(..drop)
                    .filter(|i| matches!(i, RingItem::Value(_)))
                    .count();
                r.values -= dropped;
            }
            r.head = head;
            r.carried_skip = carried;
            r.logical_head = logical;
        }
        self.round = pos.round;
        self.turn = pos.turn;
        self.left = pos.left;
        Ok(self.rings.iter().map(|r| (r.id, r.next_push)).collect())
    }

    /// Whether [`RingMerge::advance_to`] takes `pos` (it changes nothing when it does
    /// not): a position of the same rings and `M`, no ring's next instance 0, none
    /// behind the merge.
    pub fn check_advance(&self, pos: &MergePosition) -> Result<(), String> {
        let ids: Vec<RingId> = pos.rings.iter().map(|r| r.0).collect();
        if !ids.iter().copied().eq(self.rings()) {
            return Err(format!(
                "a position of rings {ids:?}, this merge subscribes to {:?}",
                self.rings().collect::<Vec<_>>()
            ));
        }
        if pos.turn >= ids.len() || pos.left == 0 || pos.left > self.m {
            return Err("not a position of this merge's M".into());
        }
        if pos
            .rings
            .iter()
            .zip(&self.rings)
            .any(|(&(_, head, _, _), r)| head < r.head)
        {
            return Err("a position behind the merge".into());
        }
        Ok(())
    }

    /// At a round's start: take every ring's next skips (they come before anything
    /// else of the ring), and pass the whole rounds that every ring skips at once, so
    /// that skips of millions of logical instances (a ring's first skip names its
    /// clock times λ) cost as little as small ones.
    fn skip_whole_rounds(&mut self) {
        for r in &mut self.rings {
            while r.carried_skip == 0 {
                match r.queue.front() {
                    Some(RingItem::Skip(n)) => {
                        let n = *n;
                        r.queue.pop_front();
                        r.head += 1;
                        r.logical_head = r.logical_head.saturating_add(n);
                        r.carried_skip = n;
                        self.stats.skips_consumed += 1;
                    }
                    _ => break,
                }
            }
        }
        let k = self
            .rings
            .iter()
            .map(|r| r.carried_skip / self.m)
            .min()
            .unwrap_or(0);
        if k == 0 {
            return;
        }
        for r in &mut self.rings {
            r.carried_skip -= k * self.m;
        }
        // Saturating: skips that a faulty peer got decided, or a checkpoint's, may
        // name more rounds than a u64 counts (fuzzing finding 6); every replica
        // computes the same.
        self.round = self.round.saturating_add(k);
        self.stats.logical_skipped = self
            .stats
            .logical_skipped
            .saturating_add((k * self.m).saturating_mul(self.rings.len() as u64));
    }

    /// Invariants: the position is one of these rings and `M`; heads and pushes agree.
    pub fn invariants(&self) {
        assert!(self.turn < self.rings.len(), "turn beyond the rings");
        assert!(self.left >= 1 && self.left <= self.m, "a turn of 1..=M");
        for r in &self.rings {
            assert_eq!(
                r.head + r.queue.len() as u64,
                r.next_push,
                "ring {}: the queue is the instances between head and next push",
                r.id
            );
            // O(queue): in debug builds (the tests) only.
            debug_assert_eq!(
                r.values,
                r.queue
                    .iter()
                    .filter(|i| matches!(i, RingItem::Value(_)))
                    .count(),
                "ring {}: the count of queued values",
                r.id
            );
        }
        assert!(
            self.rings.windows(2).all(|w| w[0].id < w[1].id),
            "rings ascending"
        );
    }
}

/// The skip rule at a ring's coordinator: at least `λ` logical instances per second,
/// checked every `Δ`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipConfig {
    /// λ: logical instances per second the ring advances at least.
    pub lambda_per_s: u64,
    /// Δ: how often the coordinator checks its rate, in milliseconds.
    pub delta_ms: u64,
}

impl Default for SkipConfig {
    /// URingPaxos's defaults are of this order: a check every 5 ms, and a rate well
    /// above any one ring's real rate of values so that skips, not waits, pace the
    /// merge when a ring is idle.
    fn default() -> Self {
        SkipConfig {
            lambda_per_s: 20_000,
            delta_ms: 5,
        }
    }
}

impl SkipConfig {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.delta_ms == 0 {
            return Err(FieldError::new(
                "delta_ms",
                "the check interval must be at least 1 ms",
            ));
        }
        if self.lambda_per_s.saturating_mul(self.delta_ms) < 1000 {
            return Err(FieldError::new(
                "lambda",
                format!(
                    "λ = {}/s with Δ = {} ms expects less than one instance per interval; \
                     raise λ or Δ",
                    self.lambda_per_s, self.delta_ms
                ),
            ));
        }
        Ok(())
    }

    /// Logical instances expected per interval.
    pub fn per_interval(&self) -> u64 {
        self.lambda_per_s.saturating_mul(self.delta_ms) / 1000
    }
}

/// A coordinator's pacing of skips (see the module documentation).
#[derive(Clone, Debug)]
pub struct SkipPacer {
    cfg: SkipConfig,
    /// Start of the current interval (`None`: not started; the first tick starts it).
    interval_start_ms: Option<u64>,
    /// Logical instances proposed in the current interval.
    proposed: u64,
}

impl SkipPacer {
    pub fn new(cfg: SkipConfig) -> Result<SkipPacer, FieldError> {
        cfg.validate()?;
        Ok(SkipPacer {
            cfg,
            interval_start_ms: None,
            proposed: 0,
        })
    }

    pub fn config(&self) -> &SkipConfig {
        &self.cfg
    }

    /// The coordinator proposed `logical` instances (1 per value).
    pub fn on_proposed(&mut self, logical: u64) {
        self.proposed = self.proposed.saturating_add(logical);
    }

    /// The time is `now_ms`: the size of the skip to propose now, if any. Called by a
    /// coordinator that leads its ring; at the end of each interval, a ring that fell
    /// short of `λ·Δ` makes up the difference with one skip. A coordinator that was
    /// not leading (or a pause) restarts its interval instead of catching up on the
    /// time it missed.
    pub fn on_tick(&mut self, now_ms: u64) -> Option<u64> {
        let Some(start) = self.interval_start_ms else {
            self.interval_start_ms = Some(now_ms);
            self.proposed = 0;
            return None;
        };
        let elapsed = now_ms.saturating_sub(start);
        if elapsed < self.cfg.delta_ms {
            return None;
        }
        let expected = self.cfg.per_interval();
        let short = expected.saturating_sub(self.proposed);
        self.interval_start_ms = Some(now_ms);
        self.proposed = 0;
        (short > 0).then_some(short)
    }

    /// When [`SkipPacer::on_tick`] may next return a skip: the end of the interval (a
    /// pacer not started starts at the next tick).
    pub fn due(&self) -> crate::TickDue {
        match self.interval_start_ms {
            None => crate::TickDue::NEXT,
            Some(start) => crate::TickDue::NEVER.clock(start.saturating_add(self.cfg.delta_ms)),
        }
    }

    /// Leadership lost or regained: start a new interval at the next tick.
    pub fn reset(&mut self) {
        self.interval_start_ms = None;
        self.proposed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn drain(m: &mut RingMerge<u64>) -> Vec<(RingId, u64)> {
        let mut out = Vec::new();
        while let Some((r, _, v)) = m.pop() {
            out.push((r, v));
        }
        m.invariants();
        out
    }

    /// Skips to a position (what coordinators propose: λ times their clock) cover
    /// what the ring is short of, a skip behind the ring's position covers nothing,
    /// and rounds that every ring skips pass at once, whatever their number.
    #[test]
    fn skips_to_positions_and_whole_rounds_at_once() {
        let big = 1_000_000_000_000u64;
        let mut m = RingMerge::<u64>::new(&[1, 2], 1).unwrap();
        m.push(1, 1, RingItem::SkipTo(big)).unwrap();
        m.push(1, 2, RingItem::Value(10)).unwrap();
        m.push(2, 1, RingItem::Value(20)).unwrap();
        m.push(2, 2, RingItem::SkipTo(big)).unwrap();
        m.push(2, 3, RingItem::SkipTo(5)).unwrap();
        m.push(2, 4, RingItem::Value(21)).unwrap();
        assert_eq!(drain(&mut m), vec![(2, 20), (1, 10), (2, 21)]);
        let pos = m.position();
        assert_eq!(pos.round, big + 1);
        assert_eq!(pos.rings, vec![(1, 3, 0, big + 1), (2, 5, 0, big + 1)]);
        assert_eq!(
            m.stats().skips_consumed,
            3,
            "the skip behind the ring counts too"
        );
    }

    /// Skips on demand: a merge that waits for an idle ring (its last two decided
    /// instances skips, or none decided) while another ring's values are queued names that ring and the position that
    /// releases them all (rounded up to a whole turn); a skip there releases them; a
    /// merge that does not wait, waits for a ring whose last was a value, or waits
    /// with nothing queued behind, wants nothing.
    #[test]
    fn a_waiting_merge_names_the_ring_and_position_it_needs() {
        let mut m = RingMerge::<u64>::new(&[1, 2, 3], 2).unwrap();
        assert_eq!(m.wanted(), None, "nothing queued");
        m.push(2, 1, RingItem::SkipTo(4)).unwrap();
        m.push(2, 2, RingItem::Value(20)).unwrap();
        m.push(2, 3, RingItem::Value(21)).unwrap();
        m.push(3, 1, RingItem::Value(30)).unwrap();
        // Ring 2 stands at logical 6 after its pushes: ring 1 must reach 6.
        assert_eq!(m.wanted(), Some((1, 6)));
        assert_eq!(m.pop(), None);
        m.push(2, 4, RingItem::Value(22)).unwrap();
        assert_eq!(m.wanted(), Some((1, 8)), "7, rounded up to a turn of 2");
        m.push(1, 1, RingItem::SkipTo(8)).unwrap();
        assert_eq!(m.wanted(), None, "ring 1 has something to give");
        // Ring 1's skip releases ring 3's first value, then the merge waits for ring
        // 3 (nothing more queued there) while ring 2's values wait.
        assert_eq!(drain(&mut m), vec![(3, 30)]);
        assert_eq!(
            m.wanted(),
            None,
            "ring 3's last was a value: more are coming"
        );
        m.push(3, 2, RingItem::SkipTo(4)).unwrap();
        assert_eq!(drain(&mut m), vec![(2, 20), (2, 21)]);
        assert_eq!(m.wanted(), None, "one skip after a value: not idle yet");
        m.push(3, 3, RingItem::SkipTo(5)).unwrap();
        assert_eq!(drain(&mut m), vec![]);
        assert_eq!(
            m.wanted(),
            Some((3, 8)),
            "two skips in a row: ring 3 idles at 5"
        );
        m.push(3, 4, RingItem::SkipTo(8)).unwrap();
        assert_eq!(drain(&mut m), vec![(2, 22)]);
        assert_eq!(m.wanted(), None, "nothing queued behind the wait");
        assert!(!m.holds_values());
        m.invariants();
    }

    /// Fuzzing finding 6: skips of more rounds than a u64 counts (a checkpoint's, or
    /// what a faulty peer got decided) overflowed `round` and the skipped count. The
    /// merge saturates instead, and delivers what follows.
    #[test]
    fn skips_beyond_what_a_u64_counts_saturate() {
        let pos = MergePosition {
            round: u64::MAX - 3,
            turn: 0,
            left: 2,
            rings: vec![(1, 1, u64::MAX, 0), (2, 1, u64::MAX - 1, 0)],
        };
        let mut m = RingMerge::<u64>::resume(pos, 2).unwrap();
        m.push(1, 1, RingItem::Value(10)).unwrap();
        // Whole rounds pass at once (ring 2's skip, the smaller, counts them): ring 1
        // has one logical instance left to skip, then its value.
        assert_eq!(m.pop(), Some((1, 1, 10)));
        assert_eq!(m.position().round, u64::MAX, "saturated");
        m.invariants();
        let mut m = RingMerge::<u64>::new(&[1, 2], 3).unwrap();
        m.push(1, 1, RingItem::Skip(u64::MAX)).unwrap();
        m.push(2, 1, RingItem::Skip(u64::MAX - 7)).unwrap();
        m.push(2, 2, RingItem::Value(20)).unwrap();
        m.push(1, 2, RingItem::Value(10)).unwrap();
        // (u64::MAX - 7) / 3 whole rounds at once; ring 1 has 9 left, ring 2 two, and
        // then its value.
        assert_eq!(m.pop(), Some((2, 2, 20)));
        assert_eq!(
            m.position().round,
            (u64::MAX - 7) / 3 + 1,
            "and the round it ended"
        );
        assert_eq!(m.stats().logical_skipped, u64::MAX, "saturated");
        m.invariants();
    }

    /// Fuzzing finding 7: a position naming instance 0 as a ring's next (a learner
    /// starts at 1) and, for a state transfer, one behind the merge: refused before
    /// anything uses them.
    #[test]
    fn positions_no_merge_reaches_are_refused() {
        let pos = |next1, next2| MergePosition {
            round: 1,
            turn: 0,
            left: 1,
            rings: vec![(1, next1, 0, 0), (2, next2, 0, 0)],
        };
        let Err(e) = RingMerge::<u64>::resume(pos(0, 3), 1) else {
            panic!("a next instance 0 taken");
        };
        assert!(e.to_string().contains("next instance is 0"), "{e}");
        let mut m = RingMerge::<u64>::new(&[1, 2], 1).unwrap();
        for i in 1..=3 {
            m.push(1, i, RingItem::Value(i)).unwrap();
            m.push(2, i, RingItem::Value(10 + i)).unwrap();
        }
        assert_eq!(drain(&mut m).len(), 6);
        let before = m.position();
        assert!(m.check_advance(&pos(2, 5)).unwrap_err().contains("behind"));
        assert!(m.check_advance(&pos(0, 5)).is_err());
        assert!(m.advance_to(&pos(2, 5)).is_err());
        assert_eq!(m.position(), before, "nothing changed");
        assert!(m.check_advance(&pos(4, 6)).is_ok());
        assert_eq!(m.advance_to(&pos(4, 6)).unwrap(), vec![(1, 4), (2, 6)]);
    }

    /// A merge moved to a later position (state transfer) continues exactly as one
    /// that merged everything up to there, keeping what was queued past it.
    #[test]
    fn advance_to_continues_like_a_merge_that_got_there() {
        let feed = |m: &mut RingMerge<u64>, upto: u64| {
            for i in 1..=upto {
                m.push(1, i, RingItem::Value(100 + i)).unwrap();
                let item = if i % 3 == 0 {
                    RingItem::Skip(4)
                } else {
                    RingItem::Value(200 + i)
                };
                m.push(2, i, item).unwrap();
            }
        };
        let mut whole = RingMerge::<u64>::new(&[1, 2], 2).unwrap();
        feed(&mut whole, 12);
        let mut first = Vec::new();
        for _ in 0..7 {
            first.push(whole.pop().unwrap());
        }
        let pos = whole.position();
        let rest = drain(&mut whole);
        // A lagging merge that holds fewer items than the position needs.
        let mut lagging = RingMerge::<u64>::new(&[1, 2], 2).unwrap();
        feed(&mut lagging, 2);
        let next = lagging.advance_to(&pos).unwrap();
        assert_eq!(
            next,
            pos.rings.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>()
        );
        // Everything arrives (again, from the start): what the position covers is
        // passed over.
        feed(&mut lagging, 12);
        assert_eq!(drain(&mut lagging), rest);
        // A merge that queued past the position keeps its queue.
        let mut ahead = RingMerge::<u64>::new(&[1, 2], 2).unwrap();
        feed(&mut ahead, 12);
        ahead.advance_to(&pos).unwrap();
        assert_eq!(drain(&mut ahead), rest);
        // Behind or foreign positions are refused.
        assert!(ahead.advance_to(&pos).is_err(), "behind the merge");
        let mut other = RingMerge::<u64>::new(&[1, 3], 2).unwrap();
        assert!(other.advance_to(&pos).is_err(), "other rings");
    }

    /// Round-robin, M per ring per round, ascending ring order, and the merge waits
    /// for the ring whose turn it is.
    #[test]
    fn rings_take_turns_of_m_in_ascending_order() {
        let mut m = RingMerge::<u64>::new(&[7, 2], 2).unwrap();
        for (i, v) in (1..=4).zip([70, 71, 72, 73]) {
            m.push(7, i, RingItem::Value(v)).unwrap();
        }
        assert_eq!(drain(&mut m), vec![], "ring 2 goes first and has nothing");
        m.push(2, 1, RingItem::Value(20)).unwrap();
        assert_eq!(drain(&mut m), vec![(2, 20)], "one of ring 2's two");
        m.push(2, 2, RingItem::Value(21)).unwrap();
        m.push(2, 3, RingItem::Value(22)).unwrap();
        assert_eq!(
            drain(&mut m),
            vec![(2, 21), (7, 70), (7, 71), (2, 22)],
            "then two of ring 7, then ring 2 again"
        );
        assert_eq!(m.position().round, 1);
    }

    /// A skip counts as many instances as it says, carrying over into the ring's next
    /// turn when it is longer than what is left of this one.
    #[test]
    fn skips_cover_their_instances_across_turns() {
        let mut m = RingMerge::<u64>::new(&[1, 2], 3).unwrap();
        m.push(1, 1, RingItem::Value(10)).unwrap();
        m.push(1, 2, RingItem::Skip(7)).unwrap();
        m.push(1, 3, RingItem::Value(11)).unwrap();
        for (i, v) in (1..=9).zip(20..) {
            m.push(2, i, RingItem::Value(v)).unwrap();
        }
        // Round 0: ring 1 delivers 10 then skips 2 (5 carried), ring 2 delivers 20..22;
        // round 1: ring 1 skips 3 (2 carried), ring 2 23..25; round 2: ring 1 skips 2
        // and delivers 11, ring 2 26..28.
        assert_eq!(
            drain(&mut m),
            vec![
                (1, 10),
                (2, 20),
                (2, 21),
                (2, 22),
                (2, 23),
                (2, 24),
                (2, 25),
                (1, 11),
                (2, 26),
                (2, 27),
                (2, 28)
            ]
        );
        assert_eq!(m.stats().logical_skipped, 7);
        assert_eq!(m.stats().skips_consumed, 1);
    }

    #[test]
    fn bad_pushes_and_settings_are_refused() {
        assert!(RingMerge::<u64>::new(&[], 1).is_err());
        assert_eq!(
            RingMerge::<u64>::new(&[1, 1], 1).unwrap_err().field,
            "rings"
        );
        assert_eq!(RingMerge::<u64>::new(&[1], 0).unwrap_err().field, "m");
        let mut m = RingMerge::<u64>::new(&[1], 1).unwrap();
        assert_eq!(
            m.push(2, 1, RingItem::Value(0)),
            Err(PushError::UnknownRing(2))
        );
        assert_eq!(
            m.push(1, 2, RingItem::Value(0)),
            Err(PushError::OutOfOrder {
                ring: 1,
                expected: 1,
                got: 2
            })
        );
        assert_eq!(
            m.push(1, 1, RingItem::Skip(0)),
            Err(PushError::EmptySkip(1))
        );
        m.push(1, 1, RingItem::Value(5)).unwrap();
        assert_eq!(
            m.push(1, 1, RingItem::Value(6)),
            Ok(()),
            "a replay is ignored"
        );
        assert_eq!(drain(&mut m), vec![(1, 5)]);
        let bad = MergePosition {
            round: 0,
            turn: 3,
            left: 1,
            rings: vec![(1, 1, 0, 0)],
        };
        assert_eq!(
            RingMerge::<u64>::resume(bad, 1).unwrap_err().field,
            "position"
        );
    }

    #[test]
    fn decided_values_become_merge_items() {
        use crate::{Ballot, Value, Vid};
        let vid = Vid {
            ballot: Ballot::new(1, 1),
            seq: 1,
        };
        let skip = std::sync::Arc::new(Value::skip(vid, 40));
        assert_eq!(RingItem::of(skip), RingItem::SkipTo(40));
        let noop = std::sync::Arc::new(Value::new(vid, Vec::new()));
        assert_eq!(RingItem::of(noop.clone()), RingItem::Value(noop));
        assert_eq!(
            Value::skip(vid, 0).skip,
            1,
            "a skip names a position of at least 1"
        );
    }

    #[test]
    fn the_pacer_makes_up_what_an_interval_fell_short_of() {
        assert!(SkipPacer::new(SkipConfig {
            lambda_per_s: 100,
            delta_ms: 5
        })
        .is_err());
        let mut p = SkipPacer::new(SkipConfig {
            lambda_per_s: 2_000,
            delta_ms: 5,
        })
        .unwrap();
        assert_eq!(p.on_tick(100), None, "the first tick starts the interval");
        p.on_proposed(3);
        assert_eq!(p.on_tick(104), None, "inside the interval");
        assert_eq!(p.on_tick(105), Some(7), "10 expected, 3 proposed");
        p.on_proposed(12);
        assert_eq!(p.on_tick(110), None, "a busy ring needs no skip");
        assert_eq!(
            p.on_tick(10_000),
            Some(10),
            "one interval's worth, not the gap's"
        );
        p.reset();
        assert_eq!(p.on_tick(20_000), None);
    }

    type Streams = Vec<Vec<RingItem<u64>>>;

    fn streams() -> impl Strategy<Value = Streams> {
        let item = prop_oneof![
            4 => any::<u64>().prop_map(RingItem::Value),
            1 => (1u64..12).prop_map(RingItem::Skip),
        ];
        prop::collection::vec(prop::collection::vec(item, 0..30), 1..5)
    }

    /// Feed `streams` (ring i has id 3·i + 1) in the order `schedule` picks, popping
    /// whenever `schedule` says so; returns what was delivered.
    fn run(streams: &Streams, m: u64, schedule: &[u8], reverse: bool) -> Vec<(RingId, u64)> {
        let ids: Vec<RingId> = (0..streams.len() as RingId).map(|i| 3 * i + 1).collect();
        let mut merge = RingMerge::<u64>::new(&ids, m).unwrap();
        merge.unsafe_reverse_order = reverse;
        let mut fed = vec![0usize; streams.len()];
        let mut out = Vec::new();
        let feed = |merge: &mut RingMerge<u64>, fed: &mut [usize], i: usize| {
            if let Some(item) = streams[i].get(fed[i]) {
                fed[i] += 1;
                merge.push(ids[i], fed[i] as u64, item.clone()).unwrap();
            }
        };
        for &s in schedule {
            if s % 4 == 0 {
                out.extend(std::iter::from_fn(|| merge.pop()).map(|(r, _, v)| (r, v)));
            } else {
                feed(&mut merge, &mut fed, s as usize % streams.len());
            }
        }
        for i in 0..streams.len() {
            while fed[i] < streams[i].len() {
                feed(&mut merge, &mut fed, i);
            }
        }
        out.extend(std::iter::from_fn(|| merge.pop()).map(|(r, _, v)| (r, v)));
        merge.invariants();
        out
    }

    proptest! {
        /// Two learners fed the same rings in different interleavings deliver the same
        /// sequence; a learner restored from a position mid-way continues it.
        #[test]
        fn learners_merge_identically_whatever_the_arrival_order(
            s in streams(),
            m in 1u64..4,
            a in prop::collection::vec(any::<u8>(), 0..200),
            b in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let one = run(&s, m, &a, false);
            let two = run(&s, m, &b, false);
            prop_assert_eq!(&one, &two);
            // Each ring's values come out in the ring's own order.
            for (i, stream) in s.iter().enumerate() {
                let id = 3 * i as RingId + 1;
                let mine: Vec<u64> = one.iter().filter(|(r, _)| *r == id).map(|(_, v)| *v).collect();
                let values: Vec<u64> = stream.iter().filter_map(|it| match it {
                    RingItem::Value(v) => Some(*v),
                    RingItem::Skip(_) | RingItem::SkipTo(_) => None,
                }).collect();
                prop_assert!(values.starts_with(&mine));
            }
        }

        #[test]
        fn a_restored_merge_continues_the_same_sequence(s in streams(), m in 1u64..4, cut in 0usize..40) {
            let ids: Vec<RingId> = (0..s.len() as RingId).map(|i| 3 * i + 1).collect();
            let mut whole = RingMerge::<u64>::new(&ids, m).unwrap();
            for (i, stream) in s.iter().enumerate() {
                for (k, item) in stream.iter().enumerate() {
                    whole.push(ids[i], k as u64 + 1, item.clone()).unwrap();
                }
            }
            let all: Vec<_> = std::iter::from_fn(|| whole.pop()).collect();
            // Another merge delivers `cut` values, saves its position, and a third
            // resumes from it, fed every instance again (replays below are ignored).
            let mut first = RingMerge::<u64>::new(&ids, m).unwrap();
            for (i, stream) in s.iter().enumerate() {
                for (k, item) in stream.iter().enumerate() {
                    first.push(ids[i], k as u64 + 1, item.clone()).unwrap();
                }
            }
            let head: Vec<_> = std::iter::from_fn(|| first.pop()).take(cut).collect();
            let mut resumed = RingMerge::<u64>::resume(first.position(), m).unwrap();
            for (i, stream) in s.iter().enumerate() {
                for (k, item) in stream.iter().enumerate() {
                    resumed.push(ids[i], k as u64 + 1, item.clone()).unwrap();
                }
            }
            let tail: Vec<_> = std::iter::from_fn(|| resumed.pop()).collect();
            let joined: Vec<_> = head.into_iter().chain(tail).collect();
            prop_assert_eq!(joined, all);
        }
    }

    /// Every value of `streams` (ring i has id 3·i + 1) on the rings `pick` selects
    /// (a bit per ring), merged: (ring, instance, name), in merge order.
    fn named(streams: &Streams, m: u64, pick: u32) -> Vec<(RingId, Instance, Instance)> {
        let all: Vec<RingId> = (0..streams.len() as RingId).map(|i| 3 * i + 1).collect();
        let mine: Vec<usize> = (0..streams.len())
            .filter(|i| pick & (1 << i) != 0)
            .collect();
        let ids: Vec<RingId> = mine.iter().map(|&i| all[i]).collect();
        let mut merge = RingMerge::<u64>::new(&ids, m).unwrap();
        for &i in &mine {
            for (k, item) in streams[i].iter().enumerate() {
                merge.push(all[i], k as u64 + 1, item.clone()).unwrap();
            }
        }
        let out = std::iter::from_fn(|| merge.pop_merged())
            .map(|v| {
                let rank = all.binary_search(&v.ring).unwrap();
                let name = slot_name(v.round, v.offset, rank, all.len(), m);
                (v.ring, v.instance, name)
            })
            .collect();
        merge.invariants();
        out
    }

    /// Names of values merged after skips of more rounds than a u64 counts saturate
    /// (they cannot count on): the largest name, not a wrap to a small one.
    #[test]
    fn names_saturate() {
        assert_eq!(slot_name(0, 0, 0, 1, 1), 1, "names count from 1");
        assert_eq!(slot_name(2, 1, 1, 3, 2), (2 * 3 + 1) * 2 + 1 + 1);
        assert_eq!(slot_name(u64::MAX, 0, 0, 2, 1), u64::MAX);
        assert_eq!(slot_name(u64::MAX / 64, 5, 63, 64, 1_000_000), u64::MAX);
    }

    proptest! {
        /// Learners of different subsets of the rings (the partitions' replicas of
        /// Multi-Ring Paxos with subscriptions) name every value they share alike,
        /// and each delivers in ascending name order: the subset's sequence is the
        /// whole merge's, projected.
        #[test]
        fn learners_of_any_rings_name_shared_values_alike(
            s in streams(),
            m in 1u64..4,
            pick in 1u32..16,
        ) {
            let whole = named(&s, m, (1 << s.len()) - 1);
            let pick = pick & ((1 << s.len()) - 1);
            prop_assume!(pick != 0);
            let part = named(&s, m, pick);
            prop_assert!(whole.windows(2).all(|w| w[0].2 < w[1].2), "ascending names");
            let ranks = |r: RingId| ((r - 1) / 3) as usize;
            let projected: Vec<_> = whole
                .iter()
                .copied()
                .filter(|(r, _, _)| pick & (1 << ranks(*r)) != 0)
                .collect();
            // The subset's merge may stop earlier (it waits on fewer rings, but a
            // ring it has may run dry sooner relative to the others): a prefix either
            // way, the same values under the same names.
            let n = projected.len().min(part.len());
            prop_assert_eq!(&part[..n], &projected[..n]);
        }
    }

    /// The control: a learner with the planted `merge-order` bug and a correct one,
    /// fed the same rings, deliver different sequences (what the checks must see).
    #[test]
    fn a_learner_merging_in_another_order_disagrees() {
        let s: Streams = vec![
            vec![RingItem::Value(1), RingItem::Value(2)],
            vec![RingItem::Value(3), RingItem::Value(4)],
        ];
        let good = run(&s, 1, &[], false);
        let bad = run(&s, 1, &[], true);
        assert_eq!(good, vec![(1, 1), (4, 3), (1, 2), (4, 4)]);
        assert_eq!(bad, vec![(4, 3), (1, 1), (4, 4), (1, 2)]);
        assert_ne!(good, bad, "the bug changes the merged order");
    }
}
