//! Simulated clients: closed loop, one command at a time, with the real client's
//! retry behaviour (`partita-client`).
//!
//! A client thinks (uniform `0..=think_ns_max`), then invokes the next operation of its
//! quota: it sends the command to its entry node (at first the cluster's coordinator,
//! or with batchers batcher `index % batchers`: `Membership::client_entry`) with
//! `reply_to` set to its replica, and waits for that replica's reply. Without a reply
//! after `timeout_ns` it resubmits the *same* command (same client id and sequence
//! number), so the replicas' reply cache answers it if it was executed already. Like
//! `partita-client`, each timeout moves the client to the next entry node of the
//! cluster's rotation (the batchers, then the acceptors: `Membership::entry_rotation`;
//! a node that does not lead batches or forwards to the one it knows), and every second
//! timeout to the next replica (the command keeps its sequence number; only `reply_to`
//! changes). Each resubmission of one command waits twice as long as the one before,
//! up to 4 × `timeout_ns` (`partita_types::timeout_backoff`): an overloaded cluster
//! whose queueing delay exceeds the timeout is not flooded with copies of every command.
//! A refusal makes it resubmit after `refused_retry_ns`. While give-up is allowed (the safety phase), a
//! command still unanswered `give_up_ns` after its invocation is abandoned and recorded
//! as `info` (outcome unknown); in the liveness phase clients never give up.
//!
//! Early replies (`[execution] early_replies`): like `partita-client`, a tentative
//! reply ([`SimClient::on_early`]) is never recorded; the operation ends, with the
//! tentative result, only when a confirmation names that very result
//! ([`partita_types::early::EarlyWait`]), or when a final reply arrives. The response
//! time is until then; the first tentative reply's time is kept in the sample.
//!
//! With the planted `unordered-query` bug the client sends read-only commands straight
//! to its replica, which is how that bug manifests.
//!
//! In the experiment mode ([`SimClient::for_bench`]) a client draws the operations of a
//! `partita bench` workload instead, thinks in whole milliseconds as the bench does,
//! has no quota (the run ends at a fixed virtual time) and keeps only the call and
//! return times of each operation ([`Sample`]), not a history.
//!
//! The client is sans-IO like the node cores: inputs are [`SimClient::on_timer`],
//! [`SimClient::on_reply`] and [`SimClient::on_refused`]; outputs are [`ClientAction`]s;
//! completed operations are appended to its history in the checker's format.
//! Invariant: at most one command outstanding; the history holds exactly one event per
//! invoked operation, once it ended.

use crate::queue::Time;
use partita_checker::{Event, Status};
use partita_types::early::{EarlyReply, EarlyWait};
use partita_types::{
    BatchOp, ClientId, Command, Instance, NodeId, Op, OpResult, PartitionId, PartitionLayout, Reply,
};
use rand::Rng;
use serde::Serialize;
use std::collections::BTreeMap;

/// How clients behave (drawn per seed).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClientParams {
    pub think_ns_max: u64,
    pub timeout_ns: u64,
    pub give_up_ns: u64,
    pub refused_retry_ns: u64,
    /// Keys are drawn from `0..keys`: small, so that operations contend.
    pub keys: u64,
}

/// What the world must do for a client.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientAction {
    /// Send `cmd` to node `to`; `first` for the first send of an invocation (not a
    /// resubmission).
    Send {
        to: NodeId,
        cmd: Command,
        first: bool,
    },
    /// Call `on_timer(gen)` at `at`.
    Timer { at: Time, gen: u64 },
}

/// One operation completed in the experiment mode: no result is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub call_ns: Time,
    pub ret_ns: Time,
    /// B+tree operations of the command (a batch of 7 counts 7).
    pub ops: u32,
    /// Early replies: when the first tentative reply arrived (`None`: none did).
    pub tentative_ns: Option<Time>,
}

#[derive(Clone, Debug)]
struct Waiting {
    op: Op,
    seq: u64,
    call_ns: Time,
    sends: u64,
    /// State partitioning: the sub-results received so far, per instance that
    /// ordered the command (every partition executes a command at the same instance;
    /// a resubmission may be ordered again, and only sub-results of one execution
    /// merge into a linearizable result).
    parts: BTreeMap<Instance, Vec<(PartitionId, OpResult)>>,
    /// The planted `independent-partitions` bug: the sub-commands, sent as commands
    /// of their own with sequence numbers `seq..seq + subs.len()`, and their results.
    subs: Vec<(PartitionId, Op, Option<OpResult>)>,
    /// Early replies received for it, per partition (each partition's answerer
    /// confirms its own sub-result; partition 0 without partitioning), and when the
    /// first tentative one came.
    early: BTreeMap<PartitionId, EarlyWait>,
    tentative_ns: Option<Time>,
}

#[derive(Clone, Debug)]
enum State {
    Thinking,
    Waiting(Waiting),
    Done,
}

pub struct SimClient {
    pub index: u32,
    pub id: ClientId,
    pub replica: NodeId,
    entry: NodeId,
    /// Where the entry node rotates (batchers, then acceptors), and the replicas.
    entries: Vec<NodeId>,
    replicas: Vec<NodeId>,
    timeouts: u64,
    params: ClientParams,
    read_direct: bool,
    seq: u64,
    ops_left: u64,
    state: State,
    gen: u64,
    /// The pending timer is the retry after a refusal (not a timeout).
    refused_pending: bool,
    give_up_allowed: bool,
    history: Vec<Event>,
    /// Experiment mode: the workload and key space, think-time granularity, samples.
    bench: Option<(crate::bench::Workload, u64)>,
    think_step_ns: u64,
    samples: Vec<Sample>,
    pub invoked: u64,
    pub resubmissions: u64,
    pub refusals: u64,
    pub late_replies: u64,
    pub gave_up: u64,
    /// State partitioning: sub-results that did not merge (a bug if ever non-zero).
    pub merge_errors: u64,
    /// State partitioning (paper 001 §III-C): the key ranges and their replicas; the
    /// client waits for one reply per partition a command addresses and merges them.
    layout: PartitionLayout,
    /// The planted `independent-partitions` bug (see [`Waiting::subs`]).
    independent: bool,
    /// Operations that ended on a confirmed tentative reply (early replies).
    pub confirmed: u64,
}

impl SimClient {
    /// A client with a quota of `ops` operations, starting with entry node `entry` (one
    /// of `entries`, the rotation after timeouts) and `replica` (one of `replicas`);
    /// `read_direct` sends read-only commands to the replica (the `unordered-query`
    /// planted bug).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: u32,
        entry: NodeId,
        entries: Vec<NodeId>,
        replica: NodeId,
        replicas: Vec<NodeId>,
        params: ClientParams,
        ops: u64,
        read_direct: bool,
    ) -> SimClient {
        assert!(
            replicas.contains(&replica),
            "the replica is one of the replicas"
        );
        SimClient {
            index,
            id: index as ClientId + 1,
            replica,
            entry,
            entries,
            replicas,
            timeouts: 0,
            params,
            read_direct,
            seq: 0,
            ops_left: ops,
            state: State::Thinking,
            gen: 0,
            refused_pending: false,
            give_up_allowed: true,
            history: Vec::new(),
            bench: None,
            think_step_ns: 1,
            samples: Vec::new(),
            invoked: 0,
            resubmissions: 0,
            refusals: 0,
            late_replies: 0,
            gave_up: 0,
            merge_errors: 0,
            layout: PartitionLayout::default(),
            independent: false,
            confirmed: 0,
        }
    }

    /// Plant the `independent-partitions` bug: a multi-partition command's
    /// sub-commands go out as independent commands (paper 001, Figure 4).
    pub fn with_independent_partitions(mut self, on: bool) -> SimClient {
        self.independent = on;
        self
    }

    /// A client of a partitioned service: it splits nothing itself (every node derives
    /// the sub-commands from the cluster's partition map), but waits for the
    /// sub-result of every partition its command addresses and merges them.
    pub fn with_partitions(mut self, layout: PartitionLayout) -> SimClient {
        self.layout = layout;
        self
    }

    /// The experiment mode: operations of `workload` over keys `0..keys`, think times
    /// in multiples of `think_step_ns`, samples instead of a history.
    pub fn for_bench(
        mut self,
        workload: crate::bench::Workload,
        keys: u64,
        think_step_ns: u64,
    ) -> SimClient {
        self.bench = Some((workload, keys));
        self.think_step_ns = think_step_ns.max(1);
        self
    }

    /// Completed operations (experiment mode).
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Start: think, then invoke the first operation.
    pub fn start(&mut self, now: Time, rng: &mut impl Rng, out: &mut Vec<ClientAction>) {
        self.think(now, rng, out);
    }

    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    pub fn set_give_up_allowed(&mut self, allowed: bool) {
        self.give_up_allowed = allowed;
    }

    pub fn history(&self) -> &[Event] {
        &self.history
    }

    /// The command outstanding, for liveness reports: (seq, op, invoked at, sends).
    pub fn outstanding(&self) -> Option<(u64, &Op, Time, u64)> {
        match &self.state {
            State::Waiting(w) => Some((w.seq, &w.op, w.call_ns, w.sends)),
            _ => None,
        }
    }

    pub fn ops_left(&self) -> u64 {
        self.ops_left
    }

    /// The node commands go to now.
    pub fn entry(&self) -> NodeId {
        self.entry
    }

    /// After a timeout: the next node of the rotation becomes the entry node and, every
    /// second time, the next replica the one that must reply (as `partita-client` does).
    fn rotate(&mut self) {
        self.timeouts += 1;
        if let Some(i) = self.entries.iter().position(|&a| a == self.entry) {
            self.entry = self.entries[(i + 1) % self.entries.len()];
        }
        if self.timeouts.is_multiple_of(2) {
            if let Some(i) = self.replicas.iter().position(|&r| r == self.replica) {
                self.replica = self.replicas[(i + 1) % self.replicas.len()];
            }
        }
    }

    fn timer(&mut self, at: Time, out: &mut Vec<ClientAction>) {
        self.gen += 1;
        out.push(ClientAction::Timer { at, gen: self.gen });
    }

    fn think(&mut self, now: Time, rng: &mut impl Rng, out: &mut Vec<ClientAction>) {
        if self.ops_left == 0 {
            self.state = State::Done;
            self.gen += 1;
            return;
        }
        self.state = State::Thinking;
        let step = self.think_step_ns;
        let t = rng.gen_range(0..=self.params.think_ns_max / step) * step;
        self.timer(now + t, out);
    }

    fn target(&self, op: &Op) -> NodeId {
        if self.read_direct && !op.is_mutation() {
            self.replica
        } else {
            self.entry
        }
    }

    fn send(&mut self, now: Time, out: &mut Vec<ClientAction>) {
        let State::Waiting(w) = &mut self.state else {
            return;
        };
        w.sends += 1;
        let first = w.sends == 1;
        let timeout =
            self.params.timeout_ns * u64::from(partita_types::timeout_backoff(w.sends - 1));
        if !w.subs.is_empty() {
            for (i, (_, op, done)) in w.subs.iter().enumerate() {
                if done.is_none() {
                    out.push(ClientAction::Send {
                        to: self.entry,
                        cmd: Command {
                            client: self.id,
                            seq: w.seq + i as u64,
                            reply_to: self.replica,
                            op: op.clone(),
                        },
                        first,
                    });
                }
            }
            self.timer(now + timeout, out);
            return;
        }
        let cmd = Command {
            client: self.id,
            seq: w.seq,
            reply_to: self.replica,
            op: w.op.clone(),
        };
        let to = self.target(&cmd.op);
        out.push(ClientAction::Send { to, cmd, first });
        self.timer(now + timeout, out);
    }

    fn invoke(&mut self, now: Time, rng: &mut impl Rng, out: &mut Vec<ClientAction>) {
        assert!(self.ops_left > 0);
        self.ops_left -= 1;
        self.seq += 1;
        self.invoked += 1;
        let op = match self.bench {
            Some((w, keys)) => crate::bench::random_op(w, rng, keys),
            None => random_op(rng, self.params.keys),
        };
        let subs: Vec<(PartitionId, Op, Option<OpResult>)> =
            if self.independent && self.layout.map.is_multi(&op) {
                self.layout
                    .map
                    .split(&op)
                    .into_iter()
                    .map(|(p, sub)| (p, sub, None))
                    .collect()
            } else {
                Vec::new()
            };
        let seq = self.seq;
        // Every sub-command has a sequence number of its own.
        self.seq += subs.len().saturating_sub(1) as u64;
        self.state = State::Waiting(Waiting {
            op,
            seq,
            call_ns: now,
            sends: 0,
            parts: BTreeMap::new(),
            subs,
            early: BTreeMap::new(),
            tentative_ns: None,
        });
        self.send(now, out);
    }

    fn finish(&mut self, now: Time, status: Status, result: Option<&OpResult>) {
        let State::Waiting(w) = std::mem::replace(&mut self.state, State::Thinking) else {
            panic!("finish without an outstanding command");
        };
        if self.bench.is_some() {
            if status == Status::Ok {
                self.samples.push(Sample {
                    call_ns: w.call_ns,
                    ret_ns: now,
                    ops: w.op.btree_ops() as u32,
                    tentative_ns: w.tentative_ns,
                });
            }
            return;
        }
        self.history.push(Event::new(
            self.index as u64,
            &w.op,
            w.call_ns,
            now,
            status,
            result,
        ));
    }

    /// A timer set earlier fired (stale generations are ignored).
    pub fn on_timer(
        &mut self,
        now: Time,
        gen: u64,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        if gen != self.gen {
            return;
        }
        let call_ns = match &self.state {
            State::Thinking => return self.invoke(now, rng, out),
            State::Done => return,
            State::Waiting(w) => w.call_ns,
        };
        if self.give_up_allowed && now.saturating_sub(call_ns) >= self.params.give_up_ns {
            self.gave_up += 1;
            self.refused_pending = false;
            self.finish(now, Status::Info, None);
            self.think(now, rng, out);
            return;
        }
        self.resubmissions += 1;
        if !std::mem::take(&mut self.refused_pending) {
            self.rotate();
        }
        self.send(now, out);
    }

    /// A reply arrived (possibly late, for an earlier command, or duplicated).
    /// `from`: the replica that sent it.
    pub fn on_reply(
        &mut self,
        now: Time,
        from: NodeId,
        reply: &Reply,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        let State::Waiting(w) = &mut self.state else {
            self.late_replies += 1;
            return;
        };
        if !w.subs.is_empty() && reply.client == self.id {
            // The planted bug: each sub-command's reply counts, whenever it was ordered.
            let i = reply.seq.wrapping_sub(w.seq) as usize;
            match w.subs.get_mut(i) {
                Some((_, _, done @ None)) => *done = Some(reply.result.clone()),
                _ => {
                    self.late_replies += 1;
                    return;
                }
            }
            if w.subs.iter().any(|(_, _, d)| d.is_none()) {
                return;
            }
            let parts: Vec<(PartitionId, OpResult)> = w
                .subs
                .iter()
                .map(|(p, _, d)| (*p, d.clone().expect("every sub-result")))
                .collect();
            let Ok(result) = self.layout.map.merge(&w.op, &parts) else {
                self.merge_errors += 1;
                return;
            };
            self.finish(now, Status::Ok, Some(&result));
            self.think(now, rng, out);
            return;
        }
        if w.seq != reply.seq || reply.client != self.id {
            self.late_replies += 1;
            return;
        }
        let result = if self.layout.map.is_partitioned() {
            let Some(p) = self.layout.partition_of_replica(from) else {
                self.late_replies += 1;
                return;
            };
            match self.add_part(p, reply.instance, reply.result.clone()) {
                Some(r) => r,
                None => return,
            }
        } else {
            reply.result.clone()
        };
        self.finish(now, Status::Ok, Some(&result));
        self.think(now, rng, out);
    }

    /// State partitioning: partition `p`'s final sub-result, computed at `instance`.
    /// Returns the merged result once every addressed partition's sub-result of one
    /// instance is in.
    fn add_part(&mut self, p: PartitionId, instance: Instance, r: OpResult) -> Option<OpResult> {
        let State::Waiting(w) = &mut self.state else {
            return None;
        };
        let parts = w.parts.entry(instance).or_default();
        if parts.iter().any(|(q, _)| *q == p) {
            self.late_replies += 1;
            return None;
        }
        parts.push((p, r));
        if parts.len() < self.layout.map.mask(&w.op).count_ones() as usize {
            return None;
        }
        match self.layout.map.merge(&w.op, parts) {
            Ok(r) => Some(r),
            Err(_) => {
                self.merge_errors += 1;
                None
            }
        }
    }

    /// A tentative reply or a confirmation arrived from replica `from` (early
    /// replies; possibly late, duplicated, reordered or stale). The operation ends only
    /// when a confirmation and a tentative reply name the same result; with state
    /// partitioning, when that holds for the sub-result of every addressed partition,
    /// all at one instance.
    pub fn on_early(
        &mut self,
        now: Time,
        from: NodeId,
        e: &EarlyReply,
        rng: &mut impl Rng,
        out: &mut Vec<ClientAction>,
    ) {
        let State::Waiting(w) = &mut self.state else {
            self.late_replies += 1;
            return;
        };
        if w.seq != e.seq() || e.client() != self.id {
            self.late_replies += 1;
            return;
        }
        if let EarlyReply::Tentative(_) = e {
            w.tentative_ns.get_or_insert(now);
        }
        let p = if self.layout.map.is_partitioned() {
            match self.layout.partition_of_replica(from) {
                Some(p) => p,
                None => {
                    self.late_replies += 1;
                    return;
                }
            }
        } else {
            0
        };
        let Some((instance, result)) = w.early.entry(p).or_default().on_early_at(e) else {
            return;
        };
        let result = if self.layout.map.is_partitioned() {
            match self.add_part(p, instance, result) {
                Some(r) => r,
                None => return,
            }
        } else {
            result
        };
        self.confirmed += 1;
        self.finish(now, Status::Ok, Some(&result));
        self.think(now, rng, out);
    }

    /// The node refused the command: resubmit it a little later.
    pub fn on_refused(&mut self, now: Time, seq: u64, out: &mut Vec<ClientAction>) {
        if !matches!(&self.state, State::Waiting(w) if w.seq == seq) {
            return;
        }
        self.refusals += 1;
        self.refused_pending = true;
        self.timer(now + self.params.refused_retry_ns, out);
    }
}

/// One operation of the mix: every B+tree operation, on keys `0..keys`.
pub fn random_op(rng: &mut impl Rng, keys: u64) -> Op {
    let keys = keys.max(1);
    let key = |rng: &mut dyn rand::RngCore| rng.gen_range(0..keys);
    // Values are drawn from a large range so that a value identifies its write: a
    // lost or duplicated write then shows up unambiguously in the history.
    let value = |rng: &mut dyn rand::RngCore| rng.gen_range(1..1_000_000_000u64);
    match rng.gen_range(0..100) {
        0..20 => Op::Read { key: key(rng) },
        20..40 => Op::Insert {
            key: key(rng),
            value: value(rng),
        },
        40..52 => Op::Delete { key: key(rng) },
        52..66 => Op::Update {
            key: key(rng),
            value: value(rng),
        },
        66..76 => {
            let min = key(rng);
            let span = rng.gen_range(0..=keys / 3);
            Op::Query {
                min,
                max: min + span,
            }
        }
        76..82 => Op::Next { key: key(rng) },
        82..88 => Op::Prev { key: key(rng) },
        _ => {
            let n = rng.gen_range(2..=4);
            Op::Batch(
                (0..n)
                    .map(|_| {
                        if rng.gen_bool(0.6) {
                            BatchOp::Insert {
                                key: key(rng),
                                value: value(rng),
                            }
                        } else {
                            BatchOp::Delete { key: key(rng) }
                        }
                    })
                    .collect(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_types::OpResult;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn params() -> ClientParams {
        ClientParams {
            think_ns_max: 0,
            timeout_ns: 100,
            give_up_ns: 250,
            refused_retry_ns: 30,
            keys: 8,
        }
    }

    fn timer(out: &[ClientAction]) -> (Time, u64) {
        out.iter()
            .find_map(|a| match a {
                ClientAction::Timer { at, gen } => Some((*at, *gen)),
                _ => None,
            })
            .expect("a timer")
    }

    fn sent(out: &[ClientAction]) -> Command {
        out.iter()
            .find_map(|a| match a {
                ClientAction::Send { cmd, .. } => Some(cmd.clone()),
                _ => None,
            })
            .expect("a send")
    }

    #[test]
    fn resubmits_the_same_command_then_gives_up_with_info() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut c = SimClient::new(0, 1, vec![1, 2, 3], 4, vec![4, 5], params(), 2, false);
        let mut out = Vec::new();
        c.start(0, &mut rng, &mut out);
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at, gen, &mut rng, &mut out);
        let first = sent(&out);
        assert_eq!((first.seq, first.reply_to), (1, 4));
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at, gen, &mut rng, &mut out);
        assert_eq!(sent(&out), first, "the same command, same sequence number");
        assert_eq!(c.resubmissions, 1);
        // Past give-up, the next timeout abandons it.
        let (_, gen) = timer(&out);
        out.clear();
        c.on_timer(300, gen, &mut rng, &mut out);
        assert_eq!(c.history().len(), 1);
        assert_eq!(c.history()[0].status, Status::Info);
        // A stale timer does nothing.
        let before = out.len();
        c.on_timer(301, gen, &mut rng, &mut out);
        assert_eq!(out.len(), before);
    }

    #[test]
    fn accepts_only_the_reply_to_the_current_command() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut c = SimClient::new(0, 1, vec![1, 2, 3], 4, vec![4, 5], params(), 1, false);
        let mut out = Vec::new();
        c.start(0, &mut rng, &mut out);
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at, gen, &mut rng, &mut out);
        let cmd = sent(&out);
        let reply = |seq| Reply {
            client: cmd.client,
            seq,
            instance: 3,
            result: OpResult::Value(None),
        };
        c.on_reply(5, 2, &reply(7), &mut rng, &mut out);
        assert_eq!(c.late_replies, 1);
        assert!(c.history().is_empty());
        c.on_reply(6, 2, &reply(cmd.seq), &mut rng, &mut out);
        assert_eq!(c.history().len(), 1);
        assert_eq!(c.history()[0].ret_ns, 6);
        assert!(c.is_done(), "quota of one operation used");
    }

    #[test]
    fn early_replies_end_the_operation_only_when_confirmed() {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        let mut c = SimClient::new(0, 1, vec![1, 2, 3], 4, vec![4, 5], params(), 2, false);
        let mut out = Vec::new();
        c.start(0, &mut rng, &mut out);
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at, gen, &mut rng, &mut out);
        let cmd = sent(&out);
        let reply = |instance, v| Reply {
            client: cmd.client,
            seq: cmd.seq,
            instance,
            result: OpResult::Value(v),
        };
        let stale = reply(3, Some(1));
        let fresh = reply(3, Some(2));
        c.on_early(
            5,
            4,
            &EarlyReply::Tentative(stale.clone()),
            &mut rng,
            &mut out,
        );
        // The confirmation of another result, and a late one of an earlier command.
        c.on_early(6, 4, &EarlyReply::confirm(&fresh), &mut rng, &mut out);
        let mut old = EarlyReply::confirm(&stale);
        if let EarlyReply::Confirm(x) = &mut old {
            x.seq -= 1;
        }
        c.on_early(7, 4, &old, &mut rng, &mut out);
        assert_eq!(c.late_replies, 1);
        assert!(c.history().is_empty(), "nothing is final yet");
        c.on_early(8, 4, &EarlyReply::Tentative(fresh), &mut rng, &mut out);
        assert_eq!(c.history().len(), 1);
        let e = &c.history()[0];
        assert_eq!((e.status, e.ret_ns), (Status::Ok, 8));
        assert_eq!(e.result, Some(OpResult::Value(Some(2))));
        assert_eq!(c.confirmed, 1);
        // Once the operation ended, more early replies for it are late.
        c.on_early(9, 4, &EarlyReply::Tentative(stale), &mut rng, &mut out);
        assert_eq!(c.late_replies, 2);
    }

    /// A client with a quota of one operation that never gives up, started: with the
    /// timer of its first invocation.
    fn stubborn(seed: u64) -> (SimClient, ChaCha8Rng, Time, u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut c = SimClient::new(0, 1, vec![1, 2, 3], 4, vec![4, 5], params(), 1, false);
        c.set_give_up_allowed(false);
        let mut out = Vec::new();
        c.start(0, &mut rng, &mut out);
        let (at, gen) = timer(&out);
        (c, rng, at, gen)
    }

    #[test]
    fn without_give_up_a_client_keeps_resubmitting() {
        let (mut c, mut rng, mut at, mut gen) = stubborn(3);
        let mut out = Vec::new();
        for _ in 0..20 {
            out.clear();
            c.on_timer(at, gen, &mut rng, &mut out);
            (at, gen) = timer(&out);
        }
        assert!(c.history().is_empty());
        assert_eq!(c.resubmissions, 19);
    }

    #[test]
    fn resubmissions_back_off_to_four_timeouts() {
        let (mut c, mut rng, mut at, mut gen) = stubborn(3);
        let mut out = Vec::new();
        let mut waits = Vec::new();
        for _ in 0..5 {
            out.clear();
            c.on_timer(at, gen, &mut rng, &mut out);
            let (next, g) = timer(&out);
            waits.push(next - at);
            (at, gen) = (next, g);
        }
        assert_eq!(waits, vec![100, 200, 400, 400, 400]);
    }

    #[test]
    fn timeouts_rotate_the_entry_node_and_every_second_one_the_replica() {
        let (mut c, mut rng, mut at, mut gen) = stubborn(5);
        let mut out = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..4 {
            out.clear();
            c.on_timer(at, gen, &mut rng, &mut out);
            let cmd = sent(&out);
            let to = out
                .iter()
                .find_map(|a| match a {
                    ClientAction::Send { to, .. } => Some(*to),
                    _ => None,
                })
                .unwrap();
            seen.push((to, cmd.reply_to, cmd.seq));
            (at, gen) = timer(&out);
        }
        assert_eq!(seen, vec![(1, 4, 1), (2, 4, 1), (3, 5, 1), (1, 5, 1)]);
        // A refusal retries at the same node.
        out.clear();
        c.on_refused(at - 1, 1, &mut out);
        let (at, gen) = timer(&out);
        out.clear();
        c.on_timer(at, gen, &mut rng, &mut out);
        assert!(out
            .iter()
            .any(|a| matches!(a, ClientAction::Send { to: 1, .. })));
    }

    #[test]
    fn the_mix_covers_every_operation() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            seen.insert(random_op(&mut rng, 8).name());
        }
        assert_eq!(seen.len(), 8, "{seen:?}");
    }
}
