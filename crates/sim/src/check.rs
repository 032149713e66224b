//! The checks of a run, and what a failed one reports.
//!
//! During the run:
//! - **invariants**: `NodeCore::invariants()` after every handler of every node; a panic
//!   inside a core (an assertion such as "instance decided twice with different
//!   values") is caught and reported the same way;
//! - **codec**: every message crosses the wire codec (encode, then decode and use the
//!   decoded copy); a message that does not decode back is a failure;
//! - **agreement** ([`Agreement`]): an oracle watching every message that leaves a node
//!   for decisions (Phase 2A piggybacks, `Decide`, `DecideValue`, `LearnReply`) and
//!   values (by value id): one instance decided with two value ids, or one value id
//!   carrying two different values, is a safety violation even if no client noticed.
//!
//! After the run ([`final_checks`]):
//! - **liveness** (by the world): every command completed after healing;
//! - **convergence**: the replicas of each partition executed up to the same
//!   instance and hold the same digest (partitions number their own sequences under
//!   Multi-Ring Paxos, where each merges only its own rings);
//! - **linearizability** and **final-state**: the clients' history, with the final
//!   contents of a replica appended as a last observation, is linearizable
//!   (`partita_checker::check_with_final_state`); an acknowledged write missing from the
//!   final state is reported as `final-state`.

use partita_checker::{CheckError, CheckOptions, CheckSummary, Event, Initial, KvCheckSummary};
use partita_consensus::{Msg, Value, Vid};
use partita_types::{Instance, NodeId, PartitionId, PartitionMap};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Which check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// A core's `invariants()` or another assertion inside a core panicked.
    Invariants,
    /// A message did not survive the wire codec.
    Codec,
    /// Two different decisions for one instance, or one value id for two values.
    Agreement,
    /// Commands submitted after healing did not all complete in time.
    Liveness,
    /// Replicas ended in different states.
    Convergence,
    /// The history is not linearizable.
    Linearizability,
    /// The final contents of the replicas contradict the history (e.g. a lost
    /// acknowledged insert).
    FinalState,
    /// A replica truncated what fewer than a majority of replicas' durable checkpoints
    /// cover: losing the others would lose decided commands.
    Durability,
    /// The checker gave up (state budget): neither a pass nor a proof of a bug.
    Inconclusive,
    /// The simulator itself misbehaved (a bug in `partita-sim`).
    Simulator,
}

impl Check {
    pub fn name(self) -> &'static str {
        match self {
            Check::Invariants => "invariants",
            Check::Codec => "codec",
            Check::Agreement => "agreement",
            Check::Liveness => "liveness",
            Check::Convergence => "convergence",
            Check::Linearizability => "linearizability",
            Check::Durability => "durability",
            Check::FinalState => "final-state",
            Check::Inconclusive => "inconclusive",
            Check::Simulator => "simulator",
        }
    }

    /// Whether this is a safety violation (as opposed to liveness or a tool limit).
    pub fn is_safety(self) -> bool {
        matches!(
            self,
            Check::Invariants
                | Check::Codec
                | Check::Agreement
                | Check::Convergence
                | Check::Linearizability
                | Check::FinalState
        )
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed check: which, when (virtual ns), what, and the last events before it.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub check: Check,
    pub time_ns: u64,
    pub message: String,
    pub trace_tail: Vec<String>,
}

/// A cheap fingerprint of a value's contents (its commands), to tell whether two
/// messages carrying the same value id carry the same value.
pub fn fingerprint(v: &Value) -> u64 {
    fn mix(h: u64, x: u64) -> u64 {
        let mut z = (h ^ x).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn mix_bytes(mut h: u64, b: &[u8]) -> u64 {
        h = mix(h, b.len() as u64);
        for chunk in b.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            h = mix(h, u64::from_le_bytes(w));
        }
        h
    }
    let mut h = mix(0, v.commands.len() as u64);
    // A split value and a whole one with the same commands are different values.
    h = mix(h, v.parts.len() as u64);
    for &n in &v.parts {
        h = mix(h, n as u64);
    }
    for c in &v.commands {
        h = mix(h, c.client);
        h = mix(h, c.seq);
        h = mix(h, c.reply_to as u64);
        h = mix(h, c.body.groups());
        match &c.body {
            partita_types::Body::Whole { payload, .. } => h = mix_bytes(h, payload),
            partita_types::Body::Split { payloads, .. } => {
                for p in payloads {
                    h = mix_bytes(mix(h, p.len() as u64), p);
                }
            }
        }
    }
    h
}

/// The agreement oracle. Input: every message a node sends ([`Agreement::observe`]).
/// Output: the first contradiction. Invariant: once an instance is announced decided
/// with value id `v` in an ordering epoch (`v`'s ballot's, see
/// `partita_types::members`), every later announcement for it in that epoch names `v`;
/// a value id always carries the same commands. A later epoch decides again the
/// instances an earlier one decided above the change that ended it: those were never
/// executed (the replicas' prefixes, checked apart, judge what runs).
#[derive(Default)]
pub struct Agreement {
    /// Per ring (0: the one stream without Multi-Ring Paxos), instance and ordering
    /// epoch.
    decided: FxHashMap<(u32, Instance, u64), (Vid, NodeId)>,
    /// The ring of the message being observed.
    ring: u32,
    /// Fingerprint per ring and value id, of the whole value (`None`) and, with state
    /// partitioning, of each partition's part (`Some(p)`). Value ids are a ring's own:
    /// GeoPaxos+'s serializers (each a Multi-Paxos group on the same nodes, sent as
    /// rings) number their values independently.
    values: FxHashMap<(u32, Vid, Option<PartitionId>), (u64, NodeId)>,
    /// The values judged last (`JUDGED_LAST` of them), each with its ring and what was
    /// judged of it, and held so that its address names it alone: a copy of one (a
    /// node sends one value to every acceptor or learner of a group, observed one
    /// after another) agrees as the first did, and is not judged again.
    judged: Vec<(u32, Judged, Arc<Value>)>,
    judged_next: usize,
    pub decisions_seen: u64,
    /// State partitioning: the key ranges and the partition of each learner that is
    /// not also an acceptor (such a learner receives only its partition's part).
    partitioning: Option<(PartitionMap, BTreeMap<NodeId, PartitionId>)>,
}

/// What [`Agreement`] judged of one value: the whole value and every partition's part,
/// the part one learner's partition receives, or one part of a split value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Judged {
    Whole,
    LearnerPart(PartitionId),
    SplitPart(PartitionId),
}

/// How many values [`Agreement`] remembers having judged.
const JUDGED_LAST: usize = 8;

impl Agreement {
    /// Judge `v` as `what` with `judge`, unless it was judged so lately.
    fn judged_once(
        &mut self,
        v: &Arc<Value>,
        what: Judged,
        judge: impl FnOnce(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        let ring = self.ring;
        if self
            .judged
            .iter()
            .any(|(r, w, j)| *r == ring && *w == what && Arc::ptr_eq(j, v))
        {
            return Ok(());
        }
        judge(self)?;
        let entry = (ring, what, v.clone());
        if self.judged.len() < JUDGED_LAST {
            self.judged.push(entry);
        } else {
            self.judged[self.judged_next] = entry;
        }
        self.judged_next = (self.judged_next + 1) % JUDGED_LAST;
        Ok(())
    }

    fn decision(&mut self, from: NodeId, i: Instance, vid: Vid) -> Result<(), String> {
        self.decisions_seen += 1;
        let key = (self.ring, i, vid.ballot.epoch());
        match self.decided.get(&key) {
            Some(&(old, by)) if old != vid => Err(format!(
                "ring {} instance {i} decided twice: value {}/{} announced by node {by}, then value {}/{} announced by node {from}",
                self.ring, old.ballot, old.seq, vid.ballot, vid.seq
            )),
            Some(_) => Ok(()),
            None => {
                self.decided.insert(key, (vid, from));
                Ok(())
            }
        }
    }

    /// With state partitioning (`learners`: the partition of every learner that is not
    /// an acceptor).
    pub fn partitioned(map: PartitionMap, learners: BTreeMap<NodeId, PartitionId>) -> Agreement {
        Agreement {
            partitioning: map.is_partitioned().then_some((map, learners)),
            ..Agreement::default()
        }
    }

    /// A value sent to `to`: the whole value (to an acceptor) must agree with every
    /// other whole value of its id, and each partition's part with what that
    /// partition's learners received.
    fn value(&mut self, from: NodeId, to: NodeId, v: &Arc<Value>) -> Result<(), String> {
        let what = match &self.partitioning {
            Some((_, learners)) => learners
                .get(&to)
                .map_or(Judged::Whole, |&p| Judged::LearnerPart(p)),
            None => Judged::Whole,
        };
        self.judged_once(v, what, |a| a.judge_value(from, what, v))
    }

    fn judge_value(&mut self, from: NodeId, what: Judged, v: &Value) -> Result<(), String> {
        let Some((map, _)) = &self.partitioning else {
            return self.one_value(from, v, None);
        };
        if let Judged::LearnerPart(p) = what {
            let part = v.project(map, p);
            return self.one_value(from, &part, Some(p));
        }
        let parts: Vec<Value> = (0..map.count()).map(|p| v.project(map, p)).collect();
        self.one_value(from, v, None)?;
        for (p, part) in parts.iter().enumerate() {
            self.one_value(from, part, Some(p as PartitionId))?;
        }
        Ok(())
    }

    fn one_value(
        &mut self,
        from: NodeId,
        v: &Value,
        part: Option<PartitionId>,
    ) -> Result<(), String> {
        let fp = fingerprint(v);
        match self.values.get(&(self.ring, v.vid, part)) {
            Some(&(old, by)) if old != fp => Err({
                let what = match part {
                    None => String::new(),
                    Some(p) => format!(" (partition {p}'s part)"),
                };
                let ring = match self.ring {
                    0 => String::new(),
                    r => format!("ring {} ", r - 1),
                };
                format!(
                "{ring}value id {}/{}{what} carries two different values (first seen from node {by}, then from node {from} with {} commands)",
                v.vid.ballot, v.vid.seq, v.commands.len()
                )
            }),
            Some(_) => Ok(()),
            None => {
                self.values.insert((self.ring, v.vid, part), (fp, from));
                Ok(())
            }
        }
    }

    /// Whether a copy of the message observed last, sent to another node, needs looking
    /// at again: only with state partitioning, where what a learner receives depends
    /// on its partition. (Without, the copy would find exactly what its original did.)
    pub fn observes_copies(&self) -> bool {
        self.partitioning.is_some()
    }

    /// Look at one message sent by `from` to `to`.
    pub fn observe(&mut self, from: NodeId, to: NodeId, msg: &Msg) -> Result<(), String> {
        if let Msg::OnRing { ring, msg } = msg {
            // Multi-Ring Paxos: every ring numbers its instances from 1.
            self.ring = *ring + 1;
            let r = self.observe(from, to, msg);
            self.ring = 0;
            return r;
        }
        match msg {
            Msg::Phase2A {
                value,
                decided,
                part,
                ..
            } => {
                match part {
                    // One partition's part of a split value, to its group (the
                    // partition's learners and every acceptor): it must agree with that
                    // partition's part of every other copy of the value.
                    Some(part) if self.partitioning.is_some() => {
                        let p = part.index;
                        self.judged_once(value, Judged::SplitPart(p), |a| {
                            a.one_value(from, value, Some(p))
                        })?
                    }
                    _ => self.value(from, to, value)?,
                }
                for &(i, vid) in decided {
                    self.decision(from, i, vid)?;
                }
            }
            Msg::Decide { decided } => {
                for &(i, vid) in decided {
                    self.decision(from, i, vid)?;
                }
            }
            Msg::DecideValue { instance, value } => {
                self.value(from, to, value)?;
                self.decision(from, *instance, value.vid)?;
            }
            Msg::LearnReply { decided } => {
                for (i, v) in decided {
                    self.value(from, to, v)?;
                    self.decision(from, *i, v.vid)?;
                }
            }
            Msg::Phase1B { accepted, .. } => {
                for (_, _, v) in accepted {
                    self.value(from, to, v)?;
                }
            }
            // Everything else carries neither decisions nor values.
            _ => {}
        }
        Ok(())
    }

    /// Instances announced decided so far.
    pub fn instances(&self) -> usize {
        self.decided.len()
    }
}

/// What the end-of-run checks need from one replica.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaEnd {
    pub node: NodeId,
    /// Its partition (0 without state partitioning): only replicas of one partition
    /// hold the same state.
    pub partition: PartitionId,
    pub executed_up_to: Instance,
    pub digest: u64,
    pub entries: usize,
}

/// Convergence: the same executed prefix and the same digest at every replica of a
/// partition (the replicas of different partitions hold different states, and with
/// Multi-Ring Paxos deliver sequences of different lengths: each merges its own
/// partition's rings).
pub fn convergence(replicas: &[ReplicaEnd]) -> Result<(), String> {
    replicas.first().ok_or("no replica to compare")?;
    let mut parts: Vec<PartitionId> = replicas.iter().map(|r| r.partition).collect();
    parts.sort_unstable();
    parts.dedup();
    for &p in &parts {
        let of_p: Vec<&ReplicaEnd> = replicas.iter().filter(|r| r.partition == p).collect();
        if of_p
            .iter()
            .any(|r| r.executed_up_to != of_p[0].executed_up_to)
        {
            let ends: Vec<String> = of_p
                .iter()
                .map(|r| format!("node {} up to {}", r.node, r.executed_up_to))
                .collect();
            return Err(format!(
                "replicas of partition {p} executed different prefixes: {}",
                ends.join(", ")
            ));
        }
    }
    for p in parts {
        let digests: Vec<(String, u64)> = replicas
            .iter()
            .filter(|r| r.partition == p)
            .map(|r| {
                (
                    format!("node {} (partition {p}, {} entries)", r.node, r.entries),
                    r.digest,
                )
            })
            .collect();
        partita_checker::check_convergence(&digests)?;
    }
    Ok(())
}

/// Linearizability of the history from `initial` (empty for the swarm's clusters; a
/// geo seed's tree starts with keys `0..K`), with `final_entries` (a replica's
/// contents after the run) as a last observation. Maps the checker's answer onto [`Check`]s.
pub fn history(
    events: &[Event],
    initial: Initial,
    final_entries: &[(u64, u64)],
    max_states: u64,
) -> Result<CheckSummary, (Check, String)> {
    let opts = CheckOptions {
        initial,
        max_states,
    };
    partita_checker::check_with_final_state(events, &opts, final_entries).map_err(|e| match e {
        CheckError::NotLinearizable(v) if v.index.is_none() => (Check::FinalState, v.to_string()),
        CheckError::NotLinearizable(v) => (Check::Linearizability, v.to_string()),
        CheckError::Unknown(u) => (Check::Inconclusive, u.to_string()),
        CheckError::Invalid(m) => (
            Check::Simulator,
            format!("the simulator recorded an invalid history: {m}"),
        ),
    })
}

/// Linearizability of a key-value history (lines of `partita_kv::history`'s format,
/// the store starting empty) under the key-value checker's model of etcd's semantics.
/// The key-value store has no final-state observation: revisions already pin every
/// acknowledged write, so a lost one contradicts a later read or revision.
pub fn kv_history(lines: &[String], max_steps: u64) -> Result<KvCheckSummary, (Check, String)> {
    use partita_checker::KvCheckError as E;
    let text = lines.join("\n");
    let events = partita_checker::kv::read_kv_history_from(text.as_bytes()).map_err(|e| {
        (
            Check::Simulator,
            format!("the simulator recorded an invalid key-value history: {e}"),
        )
    })?;
    let opts = partita_checker::KvCheckOptions {
        max_steps,
        ..partita_checker::KvCheckOptions::default()
    };
    partita_checker::check_kv(&events, &opts).map_err(|e| match e {
        E::NotLinearizable(v) => (Check::Linearizability, v.to_string()),
        E::Unknown(u) => (Check::Inconclusive, u.to_string()),
        other => (
            Check::Simulator,
            format!("the key-value checker refused the history: {other}"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use partita_types::Ballot;
    use std::sync::Arc;

    fn value(seq: u64, key: u64) -> Arc<Value> {
        Arc::new(Value {
            vid: Vid {
                ballot: Ballot::new(0, 1),
                seq,
            },
            commands: vec![partita_btree::service::command(
                1,
                1,
                4,
                &partita_btree::Op::Insert { key, value: 1 },
            )],
            parts: Vec::new(),
            time_ms: 0,
            skip: 0,
        })
    }

    #[test]
    fn agreement_catches_two_decisions_for_one_instance() {
        let mut a = Agreement::default();
        let v1 = value(1, 1);
        let v2 = value(2, 1);
        a.observe(
            1,
            4,
            &Msg::Decide {
                decided: vec![(5, v1.vid)],
            },
        )
        .unwrap();
        a.observe(
            2,
            4,
            &Msg::LearnReply {
                decided: vec![(5, v1.clone())],
            },
        )
        .unwrap();
        let e = a
            .observe(
                1,
                4,
                &Msg::DecideValue {
                    instance: 5,
                    value: v2,
                },
            )
            .unwrap_err();
        assert!(e.contains("instance 5 decided twice"), "{e}");
    }

    #[test]
    fn agreement_catches_a_value_id_reused_for_another_value() {
        let mut a = Agreement::default();
        let reply = |i, v: Arc<Value>| Msg::LearnReply {
            decided: vec![(i, v)],
        };
        a.observe(2, 4, &reply(1, value(1, 1))).unwrap();
        a.observe(3, 4, &reply(1, value(1, 1))).unwrap();
        let e = a.observe(2, 4, &reply(2, value(1, 2))).unwrap_err();
        assert!(e.contains("two different values"), "{e}");
    }

    #[test]
    fn convergence_names_the_odd_replica() {
        let r = |node, up, digest| ReplicaEnd {
            node,
            partition: 0,
            executed_up_to: up,
            digest,
            entries: 0,
        };
        assert!(convergence(&[r(4, 9, 1), r(5, 9, 1)]).is_ok());
        let e = convergence(&[r(4, 9, 1), r(5, 8, 1)]).unwrap_err();
        assert!(e.contains("node 5 up to 8"), "{e}");
        let e = convergence(&[r(4, 9, 1), r(5, 9, 2), r(6, 9, 1)]).unwrap_err();
        assert!(e.contains("diverged"), "{e}");
        // Partitions are compared within themselves only.
        let of = |p, node, up, digest| ReplicaEnd {
            partition: p,
            ..r(node, up, digest)
        };
        assert!(convergence(&[of(0, 4, 9, 1), of(0, 5, 9, 1), of(1, 6, 7, 3)]).is_ok());
        let e = convergence(&[of(0, 4, 9, 1), of(1, 6, 7, 3), of(1, 7, 6, 3)]).unwrap_err();
        assert!(
            e.contains("partition 1") && e.contains("node 7 up to 6"),
            "{e}"
        );
    }
}
