//! The batcher role: clients send commands to batchers, which pack many commands into
//! one message to the leader (proposer batching).
//!
//! Why: every message a node receives costs it a fixed amount of CPU (taking it off a
//! connection, the event channel, dispatch) whatever it carries. When every client
//! command is a message to the coordinator, that fixed cost caps the whole service at
//! one coordinator's message rate (in the calibrated simulator about 400,000 commands
//! per second), however many partitions execute them (paper 001 Figure 9). A tier of
//! batchers in front of the leader divides the leader's per-message cost by the batch
//! size; the batchers scale out because they hold no state that needs agreement
//! (Whittaker et al., *Scaling Replicated State Machines with Compartmentalization*,
//! VLDB 2021, §3: "batchers"). Paper 001 batches only at the coordinator, into 8 KiB
//! values; it does not discuss a tier in front of it.
//!
//! Policy (Nagle's algorithm with acknowledgements, so an idle system adds no delay and
//! a loaded one batches):
//!
//! - a command is buffered; a batch of buffered commands (up to `batch_bytes_max`
//!   bytes, [`command_bytes`]) leaves for the leader at once while fewer than
//!   `outstanding_max` batches are unacknowledged, and also while fewer than
//!   `outstanding_hard_max` are when the buffer holds a full batch;
//! - the leader answers each batch with [`Msg::ForwardAck`] once every command of it
//!   went through its coordinator's `on_command` (queued, or refused when its queue is
//!   full); an acknowledged batch frees its slot and the next one leaves;
//! - a batch unacknowledged for `ack_timeout_ticks` is sent again, to whoever leads
//!   now; after `resends_max` resends it is abandoned and counted. Resending is safe:
//!   the coordinator drops a command it still holds queued or in flight by (client,
//!   seq), and the replicas' reply cache answers one it ordered already. Clients
//!   resubmit abandoned commands after their own timeout;
//! - with `min_interval_ticks` > 0, a batch that is not full also waits until that
//!   many ticks have passed since the batcher's last send (it leaves at the first tick
//!   after): fewer, larger batches for the leader, for up to that much added latency.
//!   Off (0) by default: Nagle's rule alone;
//! - while no leader is known, commands wait in the buffer (at most
//!   `buffer_commands_max`; beyond that a command is refused and its client retries).
//!
//! An acknowledgement means "queued at the coordinator", not "decided": a leader that
//! loses its queue (it crashes, or is deposed) loses the commands of acknowledged
//! batches too, exactly as it loses commands clients sent it directly, and clients
//! resubmit them after their timeout. Acknowledging on decision would make the batcher
//! hold every command until it is decided, a second window on top of the
//! coordinator's, for a failure the clients already recover from.
//!
//! Batch sequence numbers start at 1 in every incarnation of a batcher: a late
//! acknowledgement of a batch sent before a restart can acknowledge a new batch of the
//! same number, whose commands are then left to their clients' timeouts (a delay, never
//! a safety problem: nothing is ordered twice that the reply cache does not answer).
//!
//! Inputs: [`Batcher::on_command`] (a client command), [`Batcher::on_ack`] (the
//! leader's acknowledgement), [`Batcher::on_tick`] (time, as a tick count),
//! [`Batcher::set_leader`] (who leads, as the node core sees it: its elector or learner
//! on a co-located batcher, the leader's heartbeats on a standalone one). Actions:
//! [`Action::Send`] of [`Msg::ForwardBatch`] to the leader, and nothing else.
//!
//! Invariants ([`Batcher::invariants`], O(outstanding batches)): at most
//! `outstanding_hard_max` batches unacknowledged and `buffer_commands_max` commands
//! buffered; the buffer's byte count is zero exactly when it is empty; every
//! outstanding batch is non-empty, within `batch_bytes_max` unless it is a single
//! command, numbered below the next sequence number and sent at most `1 + resends_max`
//! times; and the policy left nothing it could send: with a leader known and commands
//! buffered, at least `outstanding_max` batches are outstanding (unless the buffer is
//! not full and `min_interval_ticks` have not passed since the last send), and
//! `outstanding_hard_max` when a full batch is buffered.

use crate::{command_bytes, Action, Drop, DropCounts, Msg, Outbox, TickDue};
use partita_types::{Command, FieldError, NodeId};
use std::collections::{BTreeMap, VecDeque};

/// Tunables of a batcher (the cluster file's `[batching] batch_bytes_max`; the rest are
/// defaults scaled to the cluster's tick).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatcherConfig {
    /// A batch holds commands up to this many bytes ([`command_bytes`]); a single
    /// larger command goes alone.
    pub batch_bytes_max: usize,
    /// Batches sent and not acknowledged, at most, before the batcher waits for a full
    /// batch (1: Nagle's algorithm).
    pub outstanding_max: usize,
    /// Batches sent and not acknowledged, at most, even when full batches wait.
    pub outstanding_hard_max: usize,
    /// A batch unacknowledged for this many ticks is sent again.
    pub ack_timeout_ticks: u64,
    /// A batch is abandoned after this many resends (its clients resubmit).
    pub resends_max: u32,
    /// Commands buffered, at most; beyond that new commands are refused.
    pub buffer_commands_max: usize,
    /// A batch that is not full leaves no sooner than this many ticks after the last
    /// send (0: as soon as Nagle's rule allows). The cluster file's
    /// `[batching] batcher_interval_ms`.
    pub min_interval_ticks: u64,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        BatcherConfig {
            batch_bytes_max: crate::BATCH_BYTES_MAX_DEFAULT,
            outstanding_max: 1,
            outstanding_hard_max: 4,
            ack_timeout_ticks: 100,
            resends_max: 3,
            buffer_commands_max: 100_000,
            min_interval_ticks: 0,
        }
    }
}

impl BatcherConfig {
    /// Check the values are usable: the error names the field at fault.
    pub fn validate(&self) -> Result<(), FieldError> {
        let bad = |field: &str, m: &str| Err(FieldError::new(field, m));
        if self.batch_bytes_max == 0 {
            return bad("batch_bytes_max", "must be positive");
        }
        if self.outstanding_max == 0 || self.outstanding_max > self.outstanding_hard_max {
            return bad("outstanding_max", "must be in 1..=outstanding_hard_max");
        }
        if self.outstanding_hard_max > 64 {
            return bad("outstanding_hard_max", "must be at most 64");
        }
        if self.min_interval_ticks > 10_000 {
            return bad("min_interval_ticks", "must be at most 10000");
        }
        if self.ack_timeout_ticks == 0 {
            return bad("ack_timeout_ticks", "must be positive");
        }
        if self.buffer_commands_max == 0 {
            return bad("buffer_commands_max", "must be positive");
        }
        Ok(())
    }
}

/// What a batcher did (`partita status` shows these).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatcherStats {
    pub commands_received: u64,
    /// Refused because the buffer was full.
    pub commands_refused: u64,
    /// Batches sent (first sends only) and the commands they carried.
    pub batches_sent: u64,
    pub commands_forwarded: u64,
    pub resends: u64,
    pub acks: u64,
    /// Batches given up after `resends_max` resends, and their commands.
    pub batches_abandoned: u64,
    pub commands_abandoned: u64,
}

impl BatcherStats {
    /// Every counter with its name, for status output and reports.
    pub fn named(&self) -> [(&'static str, u64); 8] {
        [
            ("commands_received", self.commands_received),
            ("commands_refused", self.commands_refused),
            ("batches_sent", self.batches_sent),
            ("commands_forwarded", self.commands_forwarded),
            ("resends", self.resends),
            ("acks", self.acks),
            ("batches_abandoned", self.batches_abandoned),
            ("commands_abandoned", self.commands_abandoned),
        ]
    }

    /// Mean commands per batch (0 before the first batch).
    pub fn mean_batch_commands(&self) -> f64 {
        if self.batches_sent == 0 {
            0.0
        } else {
            self.commands_forwarded as f64 / self.batches_sent as f64
        }
    }
}

#[derive(Clone, Debug)]
struct Outstanding {
    cmds: Vec<Command>,
    bytes: usize,
    sent_at_tick: u64,
    /// Times sent (1 + resends).
    sends: u32,
}

pub struct Batcher {
    cfg: BatcherConfig,
    /// Who leads, as the node core last said; `None`: nobody known.
    leader: Option<NodeId>,
    buffer: VecDeque<Command>,
    buffer_bytes: usize,
    /// Batches sent and not acknowledged, by sequence number.
    outstanding: BTreeMap<u64, Outstanding>,
    next_seq: u64,
    now_tick: u64,
    /// The tick of the last first send of a batch (resends do not count).
    last_send_tick: Option<u64>,
    stats: BatcherStats,
    drops: DropCounts,
}

impl Batcher {
    /// A batcher that sends to `leader` (`None`: wait until [`Batcher::set_leader`]).
    pub fn new(cfg: BatcherConfig, leader: Option<NodeId>) -> Batcher {
        if let Err(e) = cfg.validate() {
            panic!("invalid batcher configuration: {e}");
        }
        Batcher {
            cfg,
            leader,
            buffer: VecDeque::new(),
            buffer_bytes: 0,
            outstanding: BTreeMap::new(),
            next_seq: 1,
            now_tick: 0,
            last_send_tick: None,
            stats: BatcherStats::default(),
            drops: DropCounts::default(),
        }
    }

    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }
    pub fn stats(&self) -> &BatcherStats {
        &self.stats
    }
    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }
    pub fn config(&self) -> &BatcherConfig {
        &self.cfg
    }
    /// Commands waiting for a batch.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }
    /// Batches sent and not acknowledged.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// A client command. Returns false (and counts it) when the buffer is full: the
    /// node refuses the client, which retries.
    pub fn on_command(&mut self, cmd: Command, out: &mut Outbox) -> bool {
        self.stats.commands_received += 1;
        if self.buffer.len() >= self.cfg.buffer_commands_max {
            self.stats.commands_refused += 1;
            self.drops.count(Drop::BufferFull);
            return false;
        }
        self.buffer_bytes += command_bytes(&cmd);
        self.buffer.push_back(cmd);
        self.flush(out);
        true
    }

    /// The leader acknowledged batch `seq`: its slot is free.
    pub fn on_ack(&mut self, seq: u64, out: &mut Outbox) {
        if self.outstanding.remove(&seq).is_none() {
            // A duplicate, an acknowledgement of a resend after the first one was
            // acknowledged, or of an abandoned batch.
            self.drops.count(Drop::StaleAck);
            return;
        }
        self.stats.acks += 1;
        self.flush(out);
    }

    /// The node's view of the leader (`None`: nobody known, or this node itself while
    /// it does not coordinate). Commands buffered meanwhile leave once one is known.
    pub fn set_leader(&mut self, leader: Option<NodeId>, out: &mut Outbox) {
        if leader == self.leader {
            return;
        }
        self.leader = leader;
        self.flush(out);
    }

    /// When [`Batcher::on_tick`] may next act: a batch's acknowledgement timeout, or
    /// the next batch of a buffer waiting for the interval between batches.
    pub fn tick_due(&self) -> TickDue {
        if self.leader.is_none() {
            return TickDue::NEVER;
        }
        let mut due = TickDue::NEVER;
        if !self.buffer.is_empty() {
            due = due.tick(match self.last_send_tick {
                Some(t) => t.saturating_add(self.cfg.min_interval_ticks),
                None => 0,
            });
        }
        for b in self.outstanding.values() {
            due = due.tick(b.sent_at_tick.saturating_add(self.cfg.ack_timeout_ticks));
        }
        due
    }

    /// Time passes: resend batches unacknowledged for `ack_timeout_ticks` to the leader
    /// known now, abandon those resent `resends_max` times already.
    pub fn on_tick(&mut self, now_tick: u64, out: &mut Outbox) {
        self.now_tick = now_tick;
        if let Some(leader) = self.leader {
            let timeout = self.cfg.ack_timeout_ticks;
            let due: Vec<u64> = self
                .outstanding
                .iter()
                .filter(|(_, b)| now_tick.saturating_sub(b.sent_at_tick) >= timeout)
                .map(|(&seq, _)| seq)
                .collect();
            for seq in due {
                let b = self.outstanding.get_mut(&seq).expect("just listed");
                if b.sends > self.cfg.resends_max {
                    let n = b.cmds.len() as u64;
                    self.outstanding.remove(&seq);
                    self.stats.batches_abandoned += 1;
                    self.stats.commands_abandoned += n;
                    self.drops.count(Drop::BatchAbandoned);
                    continue;
                }
                b.sends += 1;
                b.sent_at_tick = now_tick;
                self.stats.resends += 1;
                out.push(Action::Send {
                    to: leader,
                    msg: Msg::ForwardBatch {
                        seq,
                        cmds: b.cmds.clone(),
                    },
                });
            }
        }
        // Without a leader, outstanding batches wait (their timeout keeps running, so
        // they go out at the first tick that knows one).
        self.flush(out);
    }

    /// Send what the policy allows.
    fn flush(&mut self, out: &mut Outbox) {
        while let Some(leader) = self.leader {
            if self.buffer.is_empty() {
                break;
            }
            let n = self.outstanding.len();
            let full = self.buffer_bytes >= self.cfg.batch_bytes_max;
            if n >= self.cfg.outstanding_max && !(full && n < self.cfg.outstanding_hard_max) {
                break;
            }
            if !full && !self.interval_passed() {
                break;
            }
            self.send_batch(leader, out);
        }
        self.invariants();
    }

    /// Whether a batch that is not full may leave now (`min_interval_ticks`).
    fn interval_passed(&self) -> bool {
        match self.last_send_tick {
            Some(t) => self.now_tick >= t + self.cfg.min_interval_ticks,
            None => true,
        }
    }

    /// Take a batch off the front of the buffer and send it.
    fn send_batch(&mut self, to: NodeId, out: &mut Outbox) {
        let mut cmds = Vec::new();
        let mut bytes = 0;
        while let Some(c) = self.buffer.front() {
            let b = command_bytes(c);
            if !cmds.is_empty() && bytes + b > self.cfg.batch_bytes_max {
                break;
            }
            bytes += b;
            cmds.push(self.buffer.pop_front().expect("just looked"));
        }
        assert!(!cmds.is_empty(), "a batch from an empty buffer");
        self.buffer_bytes -= bytes;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.batches_sent += 1;
        self.stats.commands_forwarded += cmds.len() as u64;
        self.last_send_tick = Some(self.now_tick);
        out.push(Action::Send {
            to,
            msg: Msg::ForwardBatch {
                seq,
                cmds: cmds.clone(),
            },
        });
        self.outstanding.insert(
            seq,
            Outstanding {
                cmds,
                bytes,
                sent_at_tick: self.now_tick,
                sends: 1,
            },
        );
    }

    pub fn invariants(&self) {
        let cfg = &self.cfg;
        assert!(
            self.outstanding.len() <= cfg.outstanding_hard_max,
            "more batches outstanding than outstanding_hard_max"
        );
        assert!(
            self.buffer.len() <= cfg.buffer_commands_max,
            "buffer overflow"
        );
        assert_eq!(
            self.buffer.is_empty(),
            self.buffer_bytes == 0,
            "buffer byte count out of step"
        );
        for (&seq, b) in &self.outstanding {
            assert!(seq < self.next_seq, "batch {seq} numbered ahead");
            assert!(!b.cmds.is_empty(), "empty batch {seq}");
            assert!(
                b.bytes <= cfg.batch_bytes_max || b.cmds.len() == 1,
                "batch {seq} over batch_bytes_max"
            );
            assert!(b.sends >= 1 && b.sends <= 1 + cfg.resends_max);
        }
        if self.leader.is_some() && !self.buffer.is_empty() {
            assert!(
                self.outstanding.len() >= cfg.outstanding_max
                    || (self.buffer_bytes < cfg.batch_bytes_max && !self.interval_passed()),
                "commands wait while a batch could leave"
            );
            if self.buffer_bytes >= cfg.batch_bytes_max {
                assert_eq!(
                    self.outstanding.len(),
                    cfg.outstanding_hard_max,
                    "a full batch waits below outstanding_hard_max"
                );
            }
        }
        assert!(self.stats.commands_forwarded >= self.stats.batches_sent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_btree::Op;

    fn cmd(seq: u64) -> Command {
        partita_btree::service::command(
            7,
            seq,
            4,
            &Op::Insert {
                key: seq,
                value: seq,
            },
        )
    }

    /// Room for exactly `n` of [`cmd`]'s commands per batch.
    fn cfg(n: usize) -> BatcherConfig {
        BatcherConfig {
            batch_bytes_max: n * command_bytes(&cmd(1)),
            ack_timeout_ticks: 10,
            resends_max: 2,
            buffer_commands_max: 20,
            ..BatcherConfig::default()
        }
    }

    /// The batches sent: (to, seq, the commands' sequence numbers).
    fn batches(out: &[Action]) -> Vec<(NodeId, u64, Vec<u64>)> {
        out.iter()
            .map(|a| match a {
                Action::Send {
                    to,
                    msg: Msg::ForwardBatch { seq, cmds },
                } => (*to, *seq, cmds.iter().map(|c| c.seq).collect()),
                other => panic!("a batcher only sends batches: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_first_command_leaves_at_once_the_next_waits_for_the_ack() {
        let mut b = Batcher::new(cfg(4), Some(1));
        let mut out = Vec::new();
        assert!(b.on_command(cmd(1), &mut out));
        assert_eq!(batches(&out), vec![(1, 1, vec![1])]);
        out.clear();
        assert!(b.on_command(cmd(2), &mut out));
        assert!(b.on_command(cmd(3), &mut out));
        assert!(out.is_empty(), "waits for the acknowledgement");
        assert_eq!((b.buffered(), b.outstanding()), (2, 1));
        b.on_ack(1, &mut out);
        assert_eq!(batches(&out), vec![(1, 2, vec![2, 3])]);
        out.clear();
        // A duplicate acknowledgement is dropped and counted.
        b.on_ack(1, &mut out);
        assert!(out.is_empty());
        assert_eq!(b.drops().0["stale_ack"], 1);
        assert_eq!(b.stats().batches_sent, 2);
        assert_eq!(b.stats().commands_forwarded, 3);
        assert_eq!(b.stats().mean_batch_commands(), 1.5);
    }

    #[test]
    fn with_an_interval_a_batch_that_is_not_full_waits_for_it_a_full_one_does_not() {
        let mut b = Batcher::new(
            BatcherConfig {
                min_interval_ticks: 5,
                ..cfg(3)
            },
            Some(1),
        );
        let mut out = Vec::new();
        b.on_tick(100, &mut out);
        assert!(b.on_command(cmd(1), &mut out));
        assert_eq!(
            batches(&out),
            vec![(1, 1, vec![1])],
            "the first leaves at once"
        );
        out.clear();
        assert!(b.on_command(cmd(2), &mut out));
        b.on_ack(1, &mut out);
        assert!(
            out.is_empty(),
            "acknowledged, but the interval has not passed"
        );
        for t in 101..105 {
            b.on_tick(t, &mut out);
            assert!(out.is_empty(), "tick {t}: still inside the interval");
        }
        b.on_tick(105, &mut out);
        assert_eq!(
            batches(&out),
            vec![(1, 2, vec![2])],
            "leaves once it has passed"
        );
        out.clear();
        b.on_ack(2, &mut out);
        // A full batch does not wait for the interval.
        for s in 3..=5 {
            assert!(b.on_command(cmd(s), &mut out));
        }
        assert_eq!(batches(&out), vec![(1, 3, vec![3, 4, 5])]);
        out.clear();
        // Nor does Nagle's rule go away: with one outstanding, a non-full batch waits
        // for the acknowledgement even after the interval.
        assert!(b.on_command(cmd(6), &mut out));
        b.on_tick(110, &mut out); // past the interval, short of the ack timeout
        assert!(out.is_empty());
        b.on_ack(3, &mut out);
        assert_eq!(batches(&out), vec![(1, 4, vec![6])]);
        b.invariants();
    }

    #[test]
    fn a_full_buffer_leaves_without_waiting_up_to_the_hard_max() {
        let mut b = Batcher::new(cfg(2), Some(1));
        let mut out = Vec::new();
        b.on_command(cmd(1), &mut out);
        assert_eq!(batches(&out), vec![(1, 1, vec![1])]);
        out.clear();
        b.on_command(cmd(2), &mut out);
        assert!(out.is_empty(), "one command is not a full batch");
        b.on_command(cmd(3), &mut out);
        assert_eq!(batches(&out), vec![(1, 2, vec![2, 3])], "a full batch");
        out.clear();
        for seq in 4..=7 {
            b.on_command(cmd(seq), &mut out);
        }
        assert_eq!(
            batches(&out),
            vec![(1, 3, vec![4, 5]), (1, 4, vec![6, 7])],
            "full batches until 4 are outstanding"
        );
        out.clear();
        b.on_command(cmd(8), &mut out);
        b.on_command(cmd(9), &mut out);
        assert!(out.is_empty(), "the hard maximum is reached");
        assert_eq!((b.buffered(), b.outstanding()), (2, 4));
        b.on_ack(2, &mut out);
        assert_eq!(batches(&out), vec![(1, 5, vec![8, 9])]);
    }

    #[test]
    fn an_unacknowledged_batch_goes_to_the_new_leader_then_is_abandoned() {
        let mut b = Batcher::new(cfg(4), Some(1));
        let mut out = Vec::new();
        b.on_tick(5, &mut out);
        b.on_command(cmd(1), &mut out);
        out.clear();
        b.on_tick(14, &mut out);
        assert!(out.is_empty(), "not yet timed out");
        // The leader changed meanwhile: the resend goes to the new one.
        b.set_leader(Some(2), &mut out);
        assert!(out.is_empty(), "nothing buffered to send");
        b.on_tick(15, &mut out);
        assert_eq!(batches(&out), vec![(2, 1, vec![1])]);
        out.clear();
        b.on_tick(25, &mut out);
        assert_eq!(batches(&out), vec![(2, 1, vec![1])]);
        out.clear();
        assert_eq!(b.stats().resends, 2);
        // Resent twice (resends_max): the next timeout abandons it.
        b.on_tick(35, &mut out);
        assert!(out.is_empty());
        assert_eq!(b.outstanding(), 0);
        assert_eq!(b.drops().0["batch_abandoned"], 1);
        assert_eq!(
            (b.stats().batches_abandoned, b.stats().commands_abandoned),
            (1, 1)
        );
        // Its slot is free: the next command leaves at once.
        b.on_command(cmd(2), &mut out);
        assert_eq!(batches(&out), vec![(2, 2, vec![2])]);
    }

    #[test]
    fn a_full_buffer_refuses_commands() {
        let mut b = Batcher::new(cfg(4), None);
        let mut out = Vec::new();
        for seq in 1..=20 {
            assert!(b.on_command(cmd(seq), &mut out));
        }
        assert!(!b.on_command(cmd(21), &mut out), "the 21st is refused");
        assert!(out.is_empty());
        assert_eq!(b.stats().commands_refused, 1);
        assert_eq!(b.drops().0["buffer_full"], 1);
        assert_eq!(b.buffered(), 20);
    }

    #[test]
    fn without_a_leader_commands_wait_and_leave_once_one_is_known() {
        let mut b = Batcher::new(cfg(2), None);
        let mut out = Vec::new();
        for seq in 1..=5 {
            b.on_command(cmd(seq), &mut out);
        }
        b.on_tick(100, &mut out);
        assert!(out.is_empty(), "nobody to send to");
        assert_eq!(b.buffered(), 5);
        b.set_leader(Some(3), &mut out);
        assert_eq!(
            batches(&out),
            vec![(3, 1, vec![1, 2]), (3, 2, vec![3, 4])],
            "one batch, then full ones while any are buffered"
        );
        assert_eq!(b.buffered(), 1);
        out.clear();
        // The leader is lost: an outstanding batch times out but waits for one.
        b.set_leader(None, &mut out);
        b.on_tick(200, &mut out);
        assert!(out.is_empty());
        b.set_leader(Some(2), &mut out);
        b.on_tick(201, &mut out);
        assert_eq!(batches(&out), vec![(2, 1, vec![1, 2]), (2, 2, vec![3, 4])]);
    }

    #[test]
    fn a_command_larger_than_a_batch_goes_alone() {
        let mut b = Batcher::new(
            BatcherConfig {
                batch_bytes_max: 10,
                ..cfg(1)
            },
            Some(1),
        );
        let mut out = Vec::new();
        b.on_command(cmd(1), &mut out);
        b.on_command(cmd(2), &mut out);
        b.on_command(cmd(3), &mut out);
        assert_eq!(
            batches(&out),
            vec![(1, 1, vec![1]), (1, 2, vec![2]), (1, 3, vec![3])],
            "each command is a full batch"
        );
    }

    #[test]
    fn bad_configurations_are_refused() {
        let ok = BatcherConfig::default();
        assert!(ok.validate().is_ok());
        for bad in [
            BatcherConfig {
                outstanding_max: 0,
                ..ok.clone()
            },
            BatcherConfig {
                outstanding_max: 5,
                outstanding_hard_max: 4,
                ..ok.clone()
            },
            BatcherConfig {
                ack_timeout_ticks: 0,
                ..ok.clone()
            },
            BatcherConfig {
                batch_bytes_max: 0,
                ..ok.clone()
            },
            BatcherConfig {
                min_interval_ticks: 10_001,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
