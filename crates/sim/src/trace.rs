//! The event trace: a 64-bit hash folded over every processed event, and the last few
//! events kept for failure reports.
//!
//! The hash covers (virtual time, endpoint, event kind, detail) of each event in
//! processing order, so two runs with the same hash processed the same events at the
//! same times. The determinism self-check runs a seed twice and compares hashes.
//!
//! The hash is our own (a SplitMix64-style fold), not `std`'s `DefaultHasher`, whose
//! algorithm may change between Rust releases: a seed must replay on a newer compiler.

use crate::net::Endpoint;
use crate::queue::Time;
use std::collections::VecDeque;
use std::fmt;

/// Extra data of a trace entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detail {
    None,
    /// The other end (sender of a delivered message, receiver of a sent one).
    Peer(Endpoint),
    /// A number: a sequence number, a count of tokens, an instance.
    Num(u64),
    /// Free text (faults, phases: rare events).
    Text(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub time: Time,
    pub who: Endpoint,
    pub what: &'static str,
    pub detail: Detail,
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.time as f64 / 1e6;
        write!(
            f,
            "{ms:>12.6} ms  {:<5} {}",
            self.who.to_string(),
            self.what
        )?;
        match &self.detail {
            Detail::None => Ok(()),
            Detail::Peer(p) => write!(f, " ({p})"),
            Detail::Num(n) => write!(f, " {n}"),
            Detail::Text(t) => write!(f, " {t}"),
        }
    }
}

pub struct Trace {
    hash: u64,
    events: u64,
    tail: VecDeque<Entry>,
    tail_max: usize,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn str_code(s: &str) -> u64 {
    // FNV-1a: stable, and short strings cost little.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn endpoint_code(e: Endpoint) -> u64 {
    match e {
        Endpoint::Node(n) => n as u64,
        Endpoint::Client(c) => (1 << 40) | c as u64,
    }
}

impl Trace {
    pub fn new(tail_max: usize) -> Trace {
        Trace {
            hash: 0,
            events: 0,
            tail: VecDeque::with_capacity(tail_max),
            tail_max,
        }
    }

    /// Fold one processed event into the hash and the tail.
    pub fn record(&mut self, time: Time, who: Endpoint, what: &'static str, detail: Detail) {
        let d = match &detail {
            Detail::None => 0,
            Detail::Peer(p) => endpoint_code(*p),
            Detail::Num(n) => *n,
            Detail::Text(t) => str_code(t),
        };
        let mut h = self.hash;
        for x in [time, endpoint_code(who), str_code(what), d] {
            h = mix(h ^ x);
        }
        self.hash = h;
        self.events += 1;
        if self.tail_max > 0 {
            if self.tail.len() == self.tail_max {
                self.tail.pop_front();
            }
            self.tail.push_back(Entry {
                time,
                who,
                what,
                detail,
            });
        }
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Events recorded so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The last events, oldest first.
    pub fn tail(&self) -> impl Iterator<Item = &Entry> {
        self.tail.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_every_field_and_on_order() {
        let run = |events: &[(Time, u32, &'static str)]| {
            let mut t = Trace::new(2);
            for &(time, n, what) in events {
                t.record(time, Endpoint::Node(n), what, Detail::None);
            }
            t.hash()
        };
        let base = run(&[(1, 1, "tick"), (2, 2, "deliver")]);
        assert_eq!(base, run(&[(1, 1, "tick"), (2, 2, "deliver")]));
        assert_ne!(base, run(&[(2, 2, "deliver"), (1, 1, "tick")]));
        assert_ne!(base, run(&[(1, 1, "tick"), (3, 2, "deliver")]));
        assert_ne!(base, run(&[(1, 1, "tick"), (2, 3, "deliver")]));
        assert_ne!(base, run(&[(1, 1, "tick"), (2, 2, "persisted")]));
    }

    #[test]
    fn tail_keeps_the_last_entries() {
        let mut t = Trace::new(2);
        for i in 0..5 {
            t.record(i, Endpoint::Client(0), "x", Detail::Num(i));
        }
        let kept: Vec<Time> = t.tail().map(|e| e.time).collect();
        assert_eq!(kept, vec![3, 4]);
        assert_eq!(t.events(), 5);
    }
}
