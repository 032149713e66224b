//! The event queue: every future happening of a run, ordered by (virtual time, sequence
//! number).
//!
//! Input: `push(time, event)`. Output: `pop()` returns the earliest event; among events
//! of the same nanosecond, the one pushed first. The sequence number makes the order
//! total and independent of how the heap breaks ties, so a run is a pure function of its
//! seed. Invariant: time never goes backwards (`pop` never returns an event earlier than
//! the previous one, and `push` refuses the past).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time in nanoseconds since the start of the run.
pub type Time = u64;

pub const MICROS: Time = 1_000;
pub const MILLIS: Time = 1_000_000;
pub const SECONDS: Time = 1_000_000_000;

struct Entry<E> {
    time: Time,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.seq == other.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed, so that the max-heap pops the earliest (time, seq) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

/// A priority queue of events keyed by (time, insertion sequence).
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
    now: Time,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
            now: 0,
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
        self.heap.push(Entry { time, seq, event });
    }

    /// The earliest event and its time; advances `now`.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let e = self.heap.pop()?;
        debug_assert!(e.time >= self.now, "time went backwards");
        self.now = e.time;
        Some((e.time, e.event))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
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

    #[test]
    #[should_panic(expected = "in the past")]
    fn refuses_the_past() {
        let mut q = EventQueue::new();
        q.push(10, ());
        q.pop();
        q.push(9, ());
    }
}
