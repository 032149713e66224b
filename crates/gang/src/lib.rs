//! partita-gang: a gang of OS threads for P-SMR's rounds, the driver's
//! [`partita_service::ThreadRunner`]. `run(f)` calls `f(0)` on the calling thread
//! and `f(1)`, …, `f(k − 1)` on k − 1 threads of the gang at the same time, and returns
//! once every call returned.
//!
//! A round of P-SMR commands lasts tens of microseconds, about what waking a sleeping
//! thread costs, so the gang's threads spin for a while after a round before they sleep
//! (on a condition variable), and the calling thread, which would otherwise only wait,
//! takes a share itself. A thread sleeps only after spinning for the gang's spin time
//! (the cluster file's `[execution] spin_us`), so a busy replica pays no system call
//! per round and an idle one burns no core.
//!
//! `f` borrows from the caller's stack: its pointer is handed to the threads for one
//! round only, and `run` does not return (nor unwind) before every thread is done with
//! it. A panic in any call is caught where it happens and raised again by `run` once
//! every call has returned.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Spins between two looks at the clock.
const SPIN_CHECK: u32 = 64;
/// How long the calling thread spins for the others to finish before it yields.
const CALLER_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

type Job = *const (dyn Fn(usize) + Sync + 'static);

struct Inner {
    /// How long an idle thread spins before it sleeps.
    spin: std::time::Duration,
    /// Bumped for every round (and to stop).
    epoch: AtomicU64,
    /// The round's function, written before `epoch` is bumped.
    job: UnsafeCell<Option<Job>>,
    /// Threads done with the current round.
    done: AtomicUsize,
    panic: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    stop: AtomicBool,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by `run` while no gang thread reads it (all are done
// with the previous round, or waiting for the epoch that publishes it), and read by
// the threads only between that epoch and their `done` increment.
unsafe impl Sync for Inner {}
unsafe impl Send for Inner {}

/// K − 1 OS threads that, with the caller, run K calls at the same time.
pub struct Gang {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

impl Gang {
    /// A gang for rounds of `k` calls (`k − 1` threads, named `name-1`, …) whose idle
    /// threads spin for `spin` before they sleep.
    pub fn new(k: usize, name: &str, spin: std::time::Duration) -> Gang {
        assert!(k >= 1, "a gang of at least one");
        let inner = Arc::new(Inner {
            spin,
            epoch: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
            stop: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let threads = (1..k)
            .map(|i| {
                let inner = inner.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || worker(&inner, i))
                    .expect("a gang thread starts")
            })
            .collect();
        Gang { inner, threads }
    }

    /// Calls in a round.
    pub fn size(&self) -> usize {
        self.threads.len() + 1
    }

    /// `f(i)` for every `i` in `0..size()`, at the same time; returns when all did.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        let others = self.threads.len();
        if others > 0 {
            // SAFETY: the pointer outlives its use: `run` waits below until every
            // thread counted itself done with this round, even if `f(0)` panics.
            let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync), Job>(f) };
            unsafe { *self.inner.job.get() = Some(job) };
            self.inner.done.store(0, SeqCst);
            self.inner.epoch.fetch_add(1, SeqCst);
            if self.inner.sleepers.load(SeqCst) > 0 {
                let _g = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
                self.inner.wake.notify_all();
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        let mut spins = 0u32;
        let mut since: Option<std::time::Instant> = None;
        while self.inner.done.load(SeqCst) < others {
            spins += 1;
            if !spins.is_multiple_of(SPIN_CHECK)
                || since.get_or_insert_with(std::time::Instant::now).elapsed() < CALLER_SPIN
            {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        if others > 0 {
            unsafe { *self.inner.job.get() = None };
        }
        if let Err(p) = mine {
            resume_unwind(p);
        }
        let theirs = self
            .inner
            .panic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(p) = theirs {
            resume_unwind(p);
        }
    }
}

fn worker(inner: &Inner, i: usize) {
    let mut seen = 0;
    loop {
        let mut spins = 0u32;
        let idle = std::time::Instant::now();
        loop {
            let e = inner.epoch.load(SeqCst);
            if inner.stop.load(SeqCst) {
                return;
            }
            if e != seen {
                seen = e;
                break;
            }
            spins += 1;
            if !spins.is_multiple_of(SPIN_CHECK) || idle.elapsed() < inner.spin {
                std::hint::spin_loop();
                continue;
            }
            let mut g = inner.lock.lock().unwrap_or_else(|e| e.into_inner());
            inner.sleepers.fetch_add(1, SeqCst);
            while inner.epoch.load(SeqCst) == seen && !inner.stop.load(SeqCst) {
                g = inner.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            inner.sleepers.fetch_sub(1, SeqCst);
        }
        // SAFETY: published before the epoch this thread just saw; `run` keeps it
        // alive until this thread counts itself done.
        let job = unsafe { (*inner.job.get()).expect("a round's job") };
        let f = unsafe { &*job };
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
            *inner.panic.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
        }
        inner.done.fetch_add(1, SeqCst);
    }
}

impl partita_service::ThreadRunner for Gang {
    fn threads(&self) -> usize {
        self.size()
    }
    fn run(&self, f: &(dyn Fn(usize) + Sync)) {
        Gang::run(self, f)
    }
}

impl Drop for Gang {
    fn drop(&mut self) {
        self.inner.stop.store(true, SeqCst);
        self.inner.epoch.fetch_add(1, SeqCst);
        {
            let _g = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.inner.wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    const SPIN_TEST: std::time::Duration = std::time::Duration::from_micros(25);

    #[test]
    fn every_call_runs_once_per_round_on_its_own_thread() {
        for k in 1..=4 {
            let gang = Gang::new(k, "test", SPIN_TEST);
            assert_eq!(gang.size(), k);
            let counts: Vec<AtomicU64> = (0..k).map(|_| AtomicU64::new(0)).collect();
            let names = Mutex::new(std::collections::HashSet::new());
            let rounds = if cfg!(miri) { 30 } else { 2_000u64 };
            for round in 0..rounds {
                gang.run(&|i| {
                    counts[i].fetch_add(round, SeqCst);
                    if round == 0 {
                        names.lock().unwrap().insert(std::thread::current().id());
                    }
                });
                // Every call of the round finished before run returned.
                let expected = round * (round + 1) / 2;
                assert!(counts.iter().all(|c| c.load(SeqCst) == expected));
            }
            assert_eq!(names.lock().unwrap().len(), k, "one thread per call");
        }
    }

    #[test]
    fn threads_that_slept_wake_for_the_next_round() {
        let gang = Gang::new(3, "test", SPIN_TEST);
        let n = AtomicU64::new(0);
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(30));
            gang.run(&|_| {
                n.fetch_add(1, SeqCst);
            });
        }
        assert_eq!(n.load(SeqCst), 9);
    }

    #[test]
    fn a_panic_in_any_call_is_raised_after_every_call_returned() {
        let gang = Gang::new(3, "test", SPIN_TEST);
        for bad in 0..3 {
            let finished = AtomicU64::new(0);
            let r = catch_unwind(AssertUnwindSafe(|| {
                gang.run(&|i| {
                    if i == bad {
                        panic!("call {i} fails");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    finished.fetch_add(1, SeqCst);
                })
            }));
            assert!(r.is_err(), "call {bad}'s panic was raised");
            assert_eq!(finished.load(SeqCst), 2, "the other calls ran to the end");
        }
        // The gang still works.
        let n = AtomicU64::new(0);
        gang.run(&|_| {
            n.fetch_add(1, SeqCst);
        });
        assert_eq!(n.load(SeqCst), 3);
    }
}
