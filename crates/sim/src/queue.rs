//! The event queue: every future happening of a run, ordered by (virtual time, sequence
//! number).
//!
//! Input: `push(time, event)`. Output: `pop()` returns the earliest event; among events
//! of the same nanosecond, the one pushed first. The sequence number makes the order
//! total and independent of how the heap breaks ties, so a run is a pure function of its
//! seed. Invariant: time never goes backwards (`pop` never returns an event earlier than
//! the previous one, and `push` refuses the past).
//!
//! Timers (`set_timer(slot, time, event)`) are events kept beside the heap, one per
//! slot, a new one replacing the slot's pending one: a node's next tick, by far the
//! most frequent event, costs a scan of a few slots instead of a heap push and pop.
//! They take sequence numbers like any event, so the order stays (time, sequence).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time in nanoseconds since the start of the run.
pub type Time = u64;

pub const MICROS: Time = 1_000;
pub const MILLIS: Time = 1_000_000;
pub const SECONDS: Time = 1_000_000_000;

/// A timer slot with nothing pending (after every real key).
const NO_TIMER: (Time, u64) = (Time::MAX, u64::MAX);

/// A heap entry: the event's key and the slot that holds it. Events stay in their
/// slots while the heap moves only these 24-byte keys (an event, with the message it
/// carries, is several times larger, and a heap moves its entries on every push and
/// pop).
#[derive(Clone, Copy)]
struct Key {
    time: Time,
    seq: u64,
    slot: u32,
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    /// Reversed, so that the max-heap pops the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// A priority queue of events keyed by (time, insertion sequence).
pub struct EventQueue<E> {
    heap: BinaryHeap<Key>,
    /// The events, by slot; `None` where a slot is free.
    slots: Vec<Option<E>>,
    /// Free slots, reused before new ones.
    free: Vec<u32>,
    next_seq: u64,
    now: Time,
    /// Timer slots' (time, sequence), `NO_TIMER` where none is pending, apart from
    /// their events so that finding the earliest scans a few words.
    timer_keys: Vec<(Time, u64)>,
    timer_events: Vec<Option<E>>,
    /// The slot of the earliest pending timer.
    timer_min: Option<usize>,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
            now: 0,
            timer_keys: Vec::new(),
            timer_events: Vec::new(),
            timer_min: None,
        }
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The time of the last popped event.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Schedule `event` at `time` (not before the current time).
    pub fn push(&mut self, time: Time, event: E) {
        assert!(
            time >= self.now,
            "event scheduled in the past ({time} < {})",
            self.now
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 pending events")
            }
        };
        self.heap.push(Key { time, seq, slot });
    }

    /// Schedule `event` at `time` in timer `slot`, dropping the slot's pending event
    /// if it has one.
    pub fn set_timer(&mut self, slot: usize, time: Time, event: E) {
        assert!(
            time >= self.now,
            "timer set in the past ({time} < {})",
            self.now
        );
        if self.timer_keys.len() <= slot {
            self.timer_keys.resize(slot + 1, NO_TIMER);
            self.timer_events.resize_with(slot + 1, || None);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.timer_keys[slot] = (time, seq);
        self.timer_events[slot] = Some(event);
        self.find_timer_min();
    }

    fn find_timer_min(&mut self) {
        let mut min = NO_TIMER;
        self.timer_min = None;
        for (i, &k) in self.timer_keys.iter().enumerate() {
            if k < min {
                min = k;
                self.timer_min = Some(i);
            }
        }
    }

    /// The earliest event and its time; advances `now`.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        if let Some(i) = self.timer_min {
            let (time, seq) = self.timer_keys[i];
            let heap_first = self
                .heap
                .peek()
                .is_some_and(|k| (k.time, k.seq) < (time, seq));
            if !heap_first {
                self.timer_keys[i] = NO_TIMER;
                let event = self.timer_events[i].take().expect("the earliest timer");
                self.find_timer_min();
                debug_assert!(time >= self.now, "time went backwards");
                self.now = time;
                return Some((time, event));
            }
        }
        let k = self.heap.pop()?;
        debug_assert!(k.time >= self.now, "time went backwards");
        self.now = k.time;
        let event = self.slots[k.slot as usize]
            .take()
            .expect("a queued event in its slot");
        self.free.push(k.slot);
        Some((k.time, event))
    }

    /// Events pending, timers included.
    pub fn len(&self) -> usize {
        self.heap.len() + self.timer_keys.iter().filter(|&&k| k != NO_TIMER).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Events pushed so far (the next sequence number).
    pub fn pushed(&self) -> u64 {
        self.next_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut q = EventQueue::new();
        q.push(5, "c");
        q.push(1, "a");
        q.push(5, "d");
        q.push(1, "b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(1, "a"), (1, "b"), (5, "c"), (5, "d")]);
        assert_eq!(q.now(), 5);
    }

    /// Slots are reused, and the order is (time, insertion) whatever the reuse.
    #[test]
    fn interleaved_pushes_and_pops_keep_the_order() {
        let mut q = EventQueue::new();
        let mut expected = Vec::new();
        let mut got = Vec::new();
        for round in 0..50u64 {
            for i in 0..7u64 {
                let t = q.now() + (i * 7 + round) % 5;
                q.push(t, (t, round, i));
            }
            for _ in 0..5 {
                got.push(q.pop().unwrap().1);
            }
        }
        while let Some((_, e)) = q.pop() {
            got.push(e);
        }
        assert!(q.slots.len() <= 7 * 50, "slots reused");
        assert!(q.free.len() == q.slots.len(), "every slot free at the end");
        // Each pop returns the earliest pending event, ties by insertion: replay it
        // with a sorted list.
        let mut pending: Vec<(u64, u64, (u64, u64, u64))> = Vec::new();
        let mut seq = 0;
        let mut q2_now = 0;
        for round in 0..50u64 {
            for i in 0..7u64 {
                let t = q2_now + (i * 7 + round) % 5;
                pending.push((t, seq, (t, round, i)));
                seq += 1;
            }
            for _ in 0..5 {
                pending.sort();
                let (t, _, e) = pending.remove(0);
                q2_now = t;
                expected.push(e);
            }
        }
        pending.sort();
        expected.extend(pending.into_iter().map(|p| p.2));
        assert_eq!(got, expected);
    }

    /// Timers and heap events pop in one (time, sequence) order, and a timer set
    /// again replaces its slot's pending event.
    #[test]
    fn timers_interleave_with_events_and_replace() {
        let mut q = EventQueue::new();
        q.push(5, "e5");
        q.set_timer(0, 5, "t5");
        q.set_timer(1, 3, "stale");
        q.set_timer(1, 4, "t4");
        q.push(4, "e4");
        q.set_timer(2, 9, "t9");
        assert_eq!(q.len(), 5);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(4, "t4"), (4, "e4"), (5, "e5"), (5, "t5"), (9, "t9")]
        );
        assert!(q.is_empty());
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn refuses_the_past() {
        let mut q = EventQueue::new();
        q.push(10, ());
        q.pop();
        q.push(9, ());
    }
}
