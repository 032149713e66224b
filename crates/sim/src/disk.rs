//! The disk model of one node: an append-only log with group commit, like `partita-wal`.
//!
//! Records handed to [`Disk::submit`] queue up. When the disk is idle, a *sync job*
//! takes every queued record, writes them one after the other (`write_ns` plus
//! `write_byte_ps` per byte each), then issues one fsync (`fsync_ns`, occasionally a
//! stall of `stall_ns`). When the job ends every record of it is durable at once; the
//! records queued meanwhile form the next job. Completions are therefore reported in
//! submission order, in batches, exactly as the WAL's group-commit thread does.
//!
//! A crash ([`Disk::crash`]) loses the queue and the running job. By default nothing
//! that was not fsynced survives. With `unsynced_survive` > 0, a crash may instead keep
//! a prefix of the records the running job had completely *written* (the OS flushed its
//! page cache before the power went): the record being written at the instant of the
//! crash is torn and lost, and so is everything after it, as WAL recovery truncates a
//! torn tail. Either way the surviving log is a prefix of what was submitted.
//!
//! Log positions: persist tokens are positions in the log. At a (re)start the durable
//! records are handed to the core as positions 1, 2, …, n, and the core's next tokens
//! continue from n + 1; [`Disk::complete`] checks that every record made durable has
//! the next position. [`Disk::truncate_below`] deletes the records below a position
//! (the core's `TruncateLog`), at once: the most aggressive thing a real log may do.
//!
//! Invariants: `durable` only grows between crashes and truncations, in submission
//! order; a completion is reported only for records in `durable`.

use crate::queue::Time;
use partita_consensus::{AcceptorRecord, PersistToken};
use rand::Rng;
use serde::Serialize;
use std::collections::VecDeque;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiskParams {
    /// Time to write one record (plus `write_byte_ps` per byte).
    pub write_ns: u64,
    pub write_byte_ps: u64,
    /// Time of one fsync.
    pub fsync_ns: u64,
    /// Probability that an fsync stalls, and for how long (uniform `0..=stall_ns_max`).
    pub stall: f64,
    pub stall_ns_max: u64,
    /// Probability that a crash keeps a prefix of the written but unsynced records.
    pub unsynced_survive: f64,
}

#[derive(Clone, Debug)]
struct Pending {
    token: PersistToken,
    record: AcceptorRecord,
    bytes: usize,
}

#[derive(Clone, Debug)]
struct Job {
    id: u64,
    records: Vec<Pending>,
    /// When each record's write completes (before the fsync).
    written_at: Vec<Time>,
    ends_at: Time,
}

/// What a crash did to the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashLoss {
    /// Records submitted and never made durable.
    pub lost: usize,
    /// Written-but-unsynced records that survived anyway.
    pub survived: usize,
    /// Whether a record was being written at the crash (torn).
    pub torn: bool,
}

pub struct Disk {
    params: DiskParams,
    durable: VecDeque<AcceptorRecord>,
    /// Log position (token) of `durable[0]` in the current incarnation's numbering.
    first_token: PersistToken,
    /// Truncation requested for positions not yet durable.
    truncate_pending: PersistToken,
    pub truncated: u64,
    queue: VecDeque<Pending>,
    job: Option<Job>,
    next_job: u64,
    pub syncs: u64,
    pub stalls: u64,
}

impl Disk {
    pub fn new(params: DiskParams) -> Disk {
        Disk {
            params,
            durable: VecDeque::new(),
            first_token: 1,
            truncate_pending: 0,
            truncated: 0,
            queue: VecDeque::new(),
            job: None,
            next_job: 1,
            syncs: 0,
            stalls: 0,
        }
    }

    pub fn set_params(&mut self, params: DiskParams) {
        self.params = params;
    }

    pub fn params(&self) -> &DiskParams {
        &self.params
    }

    /// Everything durable, oldest first: what a restarting node recovers. From now on
    /// these records are log positions 1..=n (a restart renumbers the log).
    pub fn recover(&mut self) -> Vec<AcceptorRecord> {
        self.first_token = 1;
        self.truncate_pending = 0;
        self.durable.iter().cloned().collect()
    }

    /// Records in the durable log.
    pub fn durable_len(&self) -> usize {
        self.durable.len()
    }

    /// Delete the durable records at positions below `below_token`; a position not
    /// durable yet is deleted when it becomes durable.
    pub fn truncate_below(&mut self, below_token: PersistToken) {
        self.truncate_pending = self.truncate_pending.max(below_token);
        self.apply_truncation();
    }

    fn apply_truncation(&mut self) {
        while self.first_token < self.truncate_pending && !self.durable.is_empty() {
            self.durable.pop_front();
            self.first_token += 1;
            self.truncated += 1;
        }
    }

    /// Records submitted and not yet durable.
    pub fn in_flight(&self) -> usize {
        self.queue.len() + self.job.as_ref().map_or(0, |j| j.records.len())
    }

    /// Queue a record. Returns `Some((job id, completion time))` when this starts a sync
    /// job; the caller schedules [`Disk::complete`] for it then.
    pub fn submit(
        &mut self,
        now: Time,
        token: PersistToken,
        record: AcceptorRecord,
        bytes: usize,
        rng: &mut impl Rng,
    ) -> Option<(u64, Time)> {
        self.queue.push_back(Pending {
            token,
            record,
            bytes,
        });
        self.start_job(now, rng)
    }

    fn start_job(&mut self, now: Time, rng: &mut impl Rng) -> Option<(u64, Time)> {
        if self.job.is_some() || self.queue.is_empty() {
            return None;
        }
        let records: Vec<Pending> = self.queue.drain(..).collect();
        let mut t = now;
        let mut written_at = Vec::with_capacity(records.len());
        for r in &records {
            t += self.params.write_ns + r.bytes as u64 * self.params.write_byte_ps / 1000;
            written_at.push(t);
        }
        let stalled = rng.gen::<f64>() < self.params.stall;
        let stall = rng.gen_range(0..=self.params.stall_ns_max);
        let mut ends_at = t + self.params.fsync_ns;
        if stalled {
            ends_at += stall;
            self.stalls += 1;
        }
        let id = self.next_job;
        self.next_job += 1;
        self.job = Some(Job {
            id,
            records,
            written_at,
            ends_at,
        });
        Some((id, ends_at))
    }

    /// The sync job `id` ended at `now`: its records are durable. Returns their tokens
    /// (in order) and, if queued records start the next job, its id and end time.
    /// A completion for a job that no longer exists (lost in a crash) returns nothing.
    /// An error if a token is not the next log position (the core broke the contract
    /// that tokens are log positions).
    #[allow(clippy::type_complexity)]
    pub fn complete(
        &mut self,
        now: Time,
        id: u64,
        rng: &mut impl Rng,
    ) -> Result<(Vec<PersistToken>, Option<(u64, Time)>), String> {
        match &self.job {
            Some(j) if j.id == id => {}
            _ => return Ok((Vec::new(), None)),
        }
        let job = self.job.take().expect("checked above");
        assert_eq!(job.ends_at, now, "a sync job completes when scheduled");
        self.syncs += 1;
        let mut tokens = Vec::with_capacity(job.records.len());
        for p in job.records {
            let position = self.first_token + self.durable.len() as u64;
            if p.token != position {
                return Err(format!(
                    "persist token {} made durable at log position {position}: tokens are not log positions",
                    p.token
                ));
            }
            tokens.push(p.token);
            self.durable.push_back(p.record);
        }
        self.apply_truncation();
        Ok((tokens, self.start_job(now, rng)))
    }

    /// Power loss at `now`: the queue and the running job are lost, except possibly a
    /// prefix of the records fully written before `now` (see the module docs).
    pub fn crash(&mut self, now: Time, rng: &mut impl Rng) -> CrashLoss {
        let mut loss = CrashLoss {
            lost: self.queue.len(),
            ..CrashLoss::default()
        };
        self.queue.clear();
        let survive = rng.gen::<f64>() < self.params.unsynced_survive;
        if let Some(job) = self.job.take() {
            let written = job.written_at.iter().filter(|&&t| t <= now).count();
            loss.torn = written < job.records.len();
            let keep = if survive && written > 0 {
                rng.gen_range(0..=written)
            } else {
                0
            };
            loss.survived = keep;
            loss.lost += job.records.len() - keep;
            self.durable
                .extend(job.records.into_iter().take(keep).map(|p| p.record));
            self.apply_truncation();
        }
        loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_types::Ballot;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn params() -> DiskParams {
        DiskParams {
            write_ns: 10,
            write_byte_ps: 0,
            fsync_ns: 100,
            stall: 0.0,
            stall_ns_max: 0,
            unsynced_survive: 0.0,
        }
    }

    fn promise(round: u64) -> AcceptorRecord {
        AcceptorRecord::Promise {
            ballot: Ballot::new(round, 1),
        }
    }

    #[test]
    fn group_commit_covers_everything_queued_before_the_sync_started() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut d = Disk::new(params());
        let (job1, end1) = d.submit(0, 1, promise(1), 10, &mut rng).unwrap();
        assert_eq!(end1, 110);
        // Arrive while the first sync runs: they wait for the next one, together.
        assert!(d.submit(5, 2, promise(2), 10, &mut rng).is_none());
        assert!(d.submit(6, 3, promise(3), 10, &mut rng).is_none());
        let (tokens, next) = d.complete(110, job1, &mut rng).unwrap();
        assert_eq!(tokens, vec![1]);
        let (job2, end2) = next.unwrap();
        assert_eq!(end2, 110 + 20 + 100);
        let (tokens, next) = d.complete(end2, job2, &mut rng).unwrap();
        assert_eq!(tokens, vec![2, 3]);
        assert!(next.is_none());
        assert_eq!(d.durable_len(), 3);
        assert_eq!(d.syncs, 2);
        // Truncation deletes below a position, and a restart renumbers from 1.
        d.truncate_below(3);
        assert_eq!(d.recover(), vec![promise(3)]);
        let (job, end) = d.submit(400, 2, promise(4), 10, &mut rng).unwrap();
        assert_eq!(d.complete(end, job, &mut rng).unwrap().0, vec![2]);
        let (job, end) = d.submit(500, 7, promise(5), 10, &mut rng).unwrap();
        assert!(d
            .complete(end, job, &mut rng)
            .unwrap_err()
            .contains("not log positions"));
    }

    #[test]
    fn a_crash_loses_what_was_not_fsynced() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let mut d = Disk::new(params());
        let (job, end) = d.submit(0, 1, promise(1), 10, &mut rng).unwrap();
        d.complete(end, job, &mut rng).unwrap();
        let (job, _) = d.submit(200, 2, promise(2), 10, &mut rng).unwrap();
        d.submit(201, 3, promise(3), 10, &mut rng);
        let loss = d.crash(250, &mut rng);
        assert_eq!(loss.lost, 2);
        assert_eq!(loss.survived, 0);
        assert_eq!(d.recover(), vec![promise(1)]);
        // The completion of the lost job is ignored.
        assert_eq!(d.complete(310, job, &mut rng).unwrap().0, Vec::<u64>::new());
        assert_eq!(d.in_flight(), 0);
    }

    #[test]
    fn surviving_unsynced_records_are_a_written_prefix() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut p = params();
        p.unsynced_survive = 1.0;
        let mut survived_any = false;
        for _ in 0..50 {
            let mut d = Disk::new(p.clone());
            d.submit(0, 1, promise(1), 0, &mut rng);
            // The job of one record was written at 10; a second one queues behind it.
            d.submit(1, 2, promise(2), 0, &mut rng);
            let loss = d.crash(50, &mut rng);
            assert!(loss.survived <= 1, "only the written record can survive");
            assert_eq!(d.durable_len(), loss.survived);
            survived_any |= loss.survived == 1;
        }
        assert!(survived_any);
        // A crash in the middle of a write tears that record.
        let mut d = Disk::new(p);
        d.submit(0, 1, promise(1), 0, &mut rng);
        let loss = d.crash(5, &mut rng);
        assert!(loss.torn);
        assert_eq!(d.durable_len(), 0);
    }
}
