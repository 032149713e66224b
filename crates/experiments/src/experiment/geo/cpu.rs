//! A replica's CPU: `cores` cores shared by named threads, each thread a FIFO queue of
//! work served by at most `limit` cores at once (1 for a learner, the EPaxos core or
//! its executor; more for the pool of worker threads that take client requests).
//!
//! The model runs a handler when its work gets a core, asks the handler what it did,
//! charges the service time that work costs (the calibrated table) and releases the
//! handler's messages when the service time is over. Throughput saturates when a
//! thread (or every core) is busy all the time.

use std::collections::VecDeque;

struct Thread<W> {
    name: String,
    queue: VecDeque<W>,
    limit: u32,
    running: u32,
    /// Entries of this thread in the ready list (at most `limit - running` and at most
    /// the queue's length).
    in_ready: u32,
    /// Service time charged inside the measured window, in ns.
    busy_ns: u64,
}

/// One replica's cores and threads.
pub struct Cpu<W> {
    cores: u32,
    busy: u32,
    threads: Vec<Thread<W>>,
    /// Threads that may start work as soon as a core is free, in the order they
    /// became ready.
    ready: VecDeque<usize>,
    /// Core time charged inside the measured window, in ns.
    pub busy_ns: u64,
    queued: usize,
}

impl<W> Cpu<W> {
    pub fn new(cores: u32) -> Cpu<W> {
        assert!(cores >= 1);
        Cpu {
            cores,
            busy: 0,
            threads: Vec::new(),
            ready: VecDeque::new(),
            busy_ns: 0,
            queued: 0,
        }
    }

    /// Adds a thread that runs at most `limit` work items at once; returns its index.
    pub fn add_thread(&mut self, name: String, limit: u32) -> usize {
        assert!(limit >= 1);
        self.threads.push(Thread {
            name,
            queue: VecDeque::new(),
            limit,
            running: 0,
            in_ready: 0,
            busy_ns: 0,
        });
        self.threads.len() - 1
    }

    pub fn cores(&self) -> u32 {
        self.cores
    }

    /// Work waiting or running.
    pub fn is_idle(&self) -> bool {
        self.busy == 0 && self.queued == 0
    }

    pub fn push(&mut self, t: usize, w: W) {
        self.threads[t].queue.push_back(w);
        self.queued += 1;
        self.mark(t);
    }

    fn mark(&mut self, t: usize) {
        let th = &mut self.threads[t];
        while th.running + th.in_ready < th.limit && (th.queue.len() as u32) > th.in_ready {
            th.in_ready += 1;
            self.ready.push_back(t);
        }
        debug_assert!(th.in_ready as usize <= th.queue.len());
    }

    /// The next work to start now, if a core is free and a thread has work.
    pub fn start_next(&mut self) -> Option<(usize, W)> {
        if self.busy >= self.cores {
            return None;
        }
        let t = self.ready.pop_front()?;
        let th = &mut self.threads[t];
        th.in_ready -= 1;
        th.running += 1;
        assert!(th.running <= th.limit, "thread {} over its limit", th.name);
        self.busy += 1;
        self.queued -= 1;
        Some((t, th.queue.pop_front().expect("a ready thread has work")))
    }

    /// Thread `t` finished one work item.
    pub fn done(&mut self, t: usize) {
        assert!(self.threads[t].running > 0 && self.busy > 0);
        self.threads[t].running -= 1;
        self.busy -= 1;
        self.mark(t);
    }

    /// Charges `ns` of the measured window to thread `t` (and the cores).
    pub fn charge(&mut self, t: usize, ns: u64) {
        self.threads[t].busy_ns += ns;
        self.busy_ns += ns;
    }

    /// The thread with the most service time charged, and that time in ns.
    pub fn busiest(&self) -> (&str, u64, u32) {
        self.threads
            .iter()
            .max_by_key(|t| t.busy_ns)
            .map(|t| (t.name.as_str(), t.busy_ns, t.limit))
            .unwrap_or(("none", 0, 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_never_runs_more_than_its_limit_and_cores_bound_everything() {
        let mut cpu: Cpu<u32> = Cpu::new(2);
        let a = cpu.add_thread("a".into(), 1);
        let b = cpu.add_thread("b".into(), 2);
        for i in 0..3 {
            cpu.push(a, i);
            cpu.push(b, 10 + i);
        }
        // a:0 then b:10 (ready order), then no core left.
        assert_eq!(cpu.start_next(), Some((a, 0)));
        assert_eq!(cpu.start_next(), Some((b, 10)));
        assert_eq!(cpu.start_next(), None);
        cpu.done(a);
        // b still has room for one more; a got back in line behind it.
        assert_eq!(cpu.start_next(), Some((b, 11)));
        cpu.done(b);
        cpu.done(b);
        assert_eq!(cpu.start_next(), Some((a, 1)));
        assert_eq!(cpu.start_next(), Some((b, 12)));
        assert_eq!(cpu.start_next(), None);
        cpu.done(a);
        cpu.done(b);
        assert_eq!(cpu.start_next(), Some((a, 2)));
        cpu.done(a);
        assert!(cpu.is_idle());
    }
}
