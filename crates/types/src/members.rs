//! The replicas of a running cluster: what `partita member add|promote|remove`
//! changes, as commands in the order.
//!
//! The cluster file names the initial replicas. A change is a command like any other
//! ([`crate::SystemOp::Member`]): every replica applies it when it delivers it, at the
//! same position of the order, to the same [`Members`] (which its checkpoints carry),
//! so every replica agrees on who the replicas are at every position, and on whether a
//! change was refused (a refusal depends only on the changes before it). Nodes that do
//! not execute (acceptors, batchers) take the newest [`Members`] a replica tells them
//! (the highest [`Members::epoch`]).
//!
//! Replicas do not vote: who they are decides where decisions are sent, whose
//! checkpoints acceptors wait for before truncating, and who answers clients, never
//! which values are chosen. So a change of replicas takes effect at the position it was
//! decided at, with no window.
//!
//! Acceptors vote, so a change of them ends an *ordering epoch* (stop and restart, as
//! in "Reconfiguring a State Machine"): the change decided at instance `i` makes
//! epoch `e + 1` ([`Members::ordering_epoch`]) order every instance from `i + 1`
//! ([`Members::ordering_from`]) with the new acceptors and ballots of its own
//! ([`crate::Ballot::epoch`]); whatever epoch `e` decides above `i` is never executed
//! (its commands are proposed again). Each epoch is plain Paxos over one fixed set of
//! acceptors, and the hand-off is the decided prefix up to `i`, which every node
//! agrees on; so no two configurations decide an instance that is executed. The rule,
//! and what each role does with it, is in `ARCHITECTURE.md` ("Membership").

use crate::{Instance, NodeId, PartitionId, PartitionLayout};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// One change of the replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberChange {
    /// A new replica `node`, reached at `addr`, of partition `partition` (0 when the
    /// state is not partitioned). It joins as a learner: decisions reach it and it
    /// catches up (state transfer, then the suffix), but it answers no client until it
    /// is promoted. With `promote`, it proposes its own promotion once caught up;
    /// otherwise it waits for `partita member promote`.
    Add {
        node: NodeId,
        addr: String,
        partition: PartitionId,
        promote: bool,
    },
    /// A learner becomes a replica that serves. Only the learner itself proposes it,
    /// once caught up (a learner that is behind refuses to).
    Promote { node: NodeId },
    /// A replica (serving or learner) leaves for good: it stops at this position and
    /// its id is never used again.
    Remove { node: NodeId },
    /// A new acceptor `node`, reached at `addr`, last in the ring order. It votes from
    /// the instance after the change on (a new ordering epoch), with no history: the
    /// instances before are decided by the acceptors of the epochs before.
    AddAcceptor { node: NodeId, addr: String },
    /// An acceptor votes on nothing after the change (a new ordering epoch); its id
    /// is never an acceptor again.
    RemoveAcceptor { node: NodeId },
}

impl MemberChange {
    /// The node the change is about.
    pub fn node(&self) -> NodeId {
        match self {
            MemberChange::Add { node, .. }
            | MemberChange::Promote { node }
            | MemberChange::Remove { node }
            | MemberChange::AddAcceptor { node, .. }
            | MemberChange::RemoveAcceptor { node } => *node,
        }
    }

    /// Whether it changes the acceptors (and so starts an ordering epoch).
    pub fn changes_acceptors(&self) -> bool {
        matches!(
            self,
            MemberChange::AddAcceptor { .. } | MemberChange::RemoveAcceptor { .. }
        )
    }
}

impl std::fmt::Display for MemberChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemberChange::Add {
                node,
                addr,
                partition,
                promote,
            } => write!(
                f,
                "add replica {node} at {addr} (partition {partition}{})",
                if *promote {
                    ", promoted once caught up"
                } else {
                    ", a learner until promoted"
                }
            ),
            MemberChange::Promote { node } => write!(f, "promote learner {node}"),
            MemberChange::Remove { node } => write!(f, "remove replica {node}"),
            MemberChange::AddAcceptor { node, addr } => write!(f, "add acceptor {node} at {addr}"),
            MemberChange::RemoveAcceptor { node } => write!(f, "remove acceptor {node}"),
        }
    }
}

/// A replica, as the changes left it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// Where it is reached, for one added at run time (`None`: the cluster file says).
    pub addr: Option<String>,
    pub partition: PartitionId,
    /// Still a learner: catching up, answering no client.
    pub learner: bool,
    /// Proposes its own promotion once caught up.
    pub promote: bool,
    /// The position of its `Add` (0: one of the cluster file's).
    pub at: Instance,
}

/// The replicas after the changes applied so far. Before the first change (epoch 0)
/// they are the cluster file's; the first change copies those in, and from then on
/// the file's replicas are never consulted again (a node whose file was edited since
/// still applies every later change the same way).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Members {
    /// How many changes were applied (0: the cluster file's replicas).
    pub epoch: u64,
    /// The position of the newest change (0: none).
    pub at: Instance,
    /// Every replica, learners included (empty at epoch 0).
    pub replicas: BTreeMap<NodeId, Replica>,
    /// Ids removed, never to be used again.
    pub removed: BTreeSet<NodeId>,
    /// The acceptors in ring order once any was changed (empty until then: the
    /// cluster file's).
    pub acceptors: Vec<NodeId>,
    /// Where the acceptors added at run time are reached.
    pub acceptor_addrs: BTreeMap<NodeId, String>,
    /// Acceptor ids removed, never to be acceptors again.
    pub acceptors_removed: BTreeSet<NodeId>,
    /// The ordering epoch: how many acceptor changes were applied (0: the cluster
    /// file's acceptors). Ballots carry it ([`crate::Ballot::epoch`]).
    pub ordering_epoch: u64,
    /// The first instance the current acceptors order: the one after the newest
    /// acceptor change (1 before any).
    pub ordering_from: Instance,
}

/// What the cluster file that the first change of a cluster applies to starts from
/// (its proposer's file, carried by the change, so that a node whose file was edited
/// since replays the changes alike).
#[derive(Clone, Copy, Debug)]
pub struct Initial<'a> {
    /// The replicas, with their partitions.
    pub replicas: &'a [(NodeId, PartitionId)],
    /// The acceptors, in ring order.
    pub acceptors: &'a [NodeId],
    /// Every other node's id (batchers, acceptors that are not replicas): taken.
    pub others: &'a [NodeId],
}

/// The system-command kind of membership changes ([`crate::Command::system`]).
pub const MEMBER_KIND: u8 = 7;

/// Why an ordering's members do not change at run time (EPaxos, GeoPaxos+), for the
/// operator: the node and the cluster-file check say the same.
pub const NO_MEMBER_CHANGES: &str = "replicas and acceptors change only in clusters ordered \
     by Ring Paxos, Multi-Paxos or Multi-Ring Paxos (not built for EPaxos and GeoPaxos+ \
     yet: their leaders would need a barrier that stops them all at one point)";

/// Why Multi-Ring Paxos's acceptors do not change at run time, for the operator.
pub const RING_ACCEPTORS_FIXED: &str = "the acceptors of Multi-Ring Paxos rings do not \
     change at run time yet (each ring would need an ordering epoch of its own, and the \
     merge a rule for a ring whose epoch changes); replicas can be added and removed";

/// Whether `cmd` is a membership change (by its client id alone: nothing decoded).
pub fn is_member_command(cmd: &crate::Command) -> bool {
    cmd.is_system() && ((cmd.client >> 48) & 0xff) as u8 == MEMBER_KIND
}

/// Acceptors at most: a vote mask has one bit per acceptor.
pub const ACCEPTORS_MAX: usize = 64;

/// A change refused (the same at every replica, since it depends only on the changes
/// ordered before it).
pub type MemberRefusal = String;

impl Members {
    /// Every replica at this point (learners included), in id order; `initial` are
    /// the cluster file's (with their partitions), used until the first change.
    pub fn replicas(&self, initial: &[NodeId]) -> Vec<NodeId> {
        match self.epoch {
            0 => initial.to_vec(),
            _ => self.replicas.keys().copied().collect(),
        }
    }

    /// Whether `node` is a replica at this point (learners included).
    pub fn is_replica(&self, initial: &[NodeId], node: NodeId) -> bool {
        match self.epoch {
            0 => initial.contains(&node),
            _ => self.replicas.contains_key(&node),
        }
    }

    /// Whether `node` is a learner still catching up.
    pub fn is_learner(&self, node: NodeId) -> bool {
        self.replicas.get(&node).is_some_and(|r| r.learner)
    }

    /// Whether `node` answers clients: a replica that is not a learner.
    pub fn serves(&self, initial: &[NodeId], node: NodeId) -> bool {
        self.is_replica(initial, node) && !self.is_learner(node)
    }

    /// The replicas that serve (learners left out), in id order.
    pub fn serving(&self, initial: &[NodeId]) -> Vec<NodeId> {
        self.replicas(initial)
            .into_iter()
            .filter(|&n| !self.is_learner(n))
            .collect()
    }

    /// State partitioning: `file` (the cluster file's layout) with the replicas at this
    /// point, each in the partition it was added to: every replica (learners included:
    /// decisions of their partition must reach them) or, with `serving_only`, the
    /// ones that answer clients. An unpartitioned layout, or epoch 0, is `file`.
    pub fn layout(&self, file: &PartitionLayout, serving_only: bool) -> PartitionLayout {
        if self.epoch == 0 || !file.map.is_partitioned() {
            return file.clone();
        }
        let mut replicas = vec![Vec::new(); file.replicas.len()];
        for (&n, r) in &self.replicas {
            if serving_only && r.learner {
                continue;
            }
            if let Some(p) = replicas.get_mut(r.partition as usize) {
                p.push(n);
            }
        }
        PartitionLayout {
            map: file.map,
            replicas,
        }
    }

    /// The acceptors in ring order at this point; `initial` are the cluster file's,
    /// used until the first acceptor change.
    pub fn acceptors(&self, initial: &[NodeId]) -> Vec<NodeId> {
        match self.ordering_epoch {
            0 => initial.to_vec(),
            _ => self.acceptors.clone(),
        }
    }

    /// The position of the newest acceptor change (0: none).
    pub fn acceptor_change_at(&self) -> Instance {
        match self.ordering_epoch {
            0 => 0,
            _ => self.ordering_from - 1,
        }
    }

    /// The first instance the current acceptors order (1 before any change).
    pub fn ordering_from(&self) -> Instance {
        self.ordering_from.max(1)
    }

    /// Replicas added at run time, with their addresses.
    pub fn added(&self) -> impl Iterator<Item = (NodeId, &str)> {
        self.replicas
            .iter()
            .filter_map(|(&n, r)| r.addr.as_deref().map(|a| (n, a)))
    }

    /// Apply `change`, decided at `at`, to the members of a cluster whose file starts
    /// from `initial`. A refusal leaves everything as it was.
    pub fn apply(
        &mut self,
        initial: Initial<'_>,
        change: &MemberChange,
        at: Instance,
    ) -> Result<(), MemberRefusal> {
        let others = initial.others;
        let mut next = self.clone();
        if next.ordering_epoch == 0 {
            next.acceptors = initial.acceptors.to_vec();
        }
        if next.epoch == 0 {
            next.replicas = initial
                .replicas
                .iter()
                .map(|&(n, partition)| {
                    let r = Replica {
                        addr: None,
                        partition,
                        learner: false,
                        promote: false,
                        at: 0,
                    };
                    (n, r)
                })
                .collect();
        }
        match change {
            MemberChange::Add {
                node,
                addr,
                partition,
                promote,
            } => {
                if next.removed.contains(node) {
                    return Err(format!(
                        "member id {node} was removed before; a removed id is never used again"
                    ));
                }
                if next.replicas.contains_key(node) {
                    return Err(format!("member id {node} already exists"));
                }
                if others.contains(node) {
                    return Err(format!(
                        "node id {node} is taken by another node of the cluster file"
                    ));
                }
                if let Some((pending, _)) = next.replicas.iter().find(|(_, r)| r.learner) {
                    return Err(format!(
                        "too many learner members in cluster: node {pending} is still a \
                         learner; wait for its promotion or remove it first"
                    ));
                }
                next.replicas.insert(
                    *node,
                    Replica {
                        addr: Some(addr.clone()),
                        partition: *partition,
                        learner: true,
                        promote: *promote,
                        at,
                    },
                );
            }
            MemberChange::Promote { node } => match next.replicas.get_mut(node) {
                Some(r) if r.learner => r.learner = false,
                _ => {
                    return Err(format!(
                        "can only promote a learner member; node {node} is not one"
                    ))
                }
            },
            MemberChange::Remove { node } => {
                let Some(gone) = next.replicas.remove(node) else {
                    return Err(format!("member not found: node {node} is not a replica"));
                };
                let left = next
                    .replicas
                    .values()
                    .filter(|r| !r.learner && r.partition == gone.partition)
                    .count();
                if !gone.learner && left == 0 {
                    return Err(format!(
                        "node {node} is the last replica that serves partition {}; add \
                         another first",
                        gone.partition
                    ));
                }
                next.removed.insert(*node);
            }
            MemberChange::AddAcceptor { node, addr } => {
                if next.acceptors_removed.contains(node) {
                    return Err(format!(
                        "acceptor id {node} was removed before; a removed id is never an \
                         acceptor again"
                    ));
                }
                if next.acceptors.contains(node) {
                    return Err(format!("acceptor id {node} already exists"));
                }
                if next.acceptors.len() >= ACCEPTORS_MAX {
                    return Err(format!(
                        "a cluster has at most {ACCEPTORS_MAX} acceptors (a vote mask's bits)"
                    ));
                }
                next.acceptors.push(*node);
                next.acceptor_addrs.insert(*node, addr.clone());
            }
            MemberChange::RemoveAcceptor { node } => {
                let Some(i) = next.acceptors.iter().position(|a| a == node) else {
                    return Err(format!("member not found: node {node} is not an acceptor"));
                };
                if next.acceptors.len() == 1 {
                    return Err(format!(
                        "node {node} is the last acceptor; add another first"
                    ));
                }
                next.acceptors.remove(i);
                next.acceptor_addrs.remove(node);
                next.acceptors_removed.insert(*node);
            }
        }
        if change.changes_acceptors() {
            next.ordering_epoch += 1;
            next.ordering_from = at + 1;
        }
        next.epoch += 1;
        next.at = at;
        *self = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(node: NodeId) -> MemberChange {
        MemberChange::Add {
            node,
            addr: format!("127.0.0.1:{}", 7100 + node),
            partition: 0,
            promote: true,
        }
    }

    #[test]
    fn a_replica_joins_as_a_learner_serves_once_promoted_and_its_id_is_never_reused() {
        let initial = [(4, 0), (5, 0)];
        let ids = [4, 5];
        let others = [1, 2, 3];
        let ini = Initial {
            replicas: &initial,
            acceptors: &others,
            others: &others,
        };
        let mut m = Members::default();
        m.apply(ini, &add(6), 10).unwrap();
        assert_eq!((m.epoch, m.at), (1, 10));
        assert!(m.is_replica(&ids, 6) && m.is_learner(6) && !m.serves(&ids, 6));
        assert_eq!(m.replicas(&ids), vec![4, 5, 6]);
        assert_eq!(m.serving(&ids), vec![4, 5]);
        assert_eq!(m.added().collect::<Vec<_>>(), vec![(6, "127.0.0.1:7106")]);
        // From the first change on, the file's replicas are never consulted again.
        assert_eq!(m.replicas(&[4, 5, 9]), vec![4, 5, 6]);
        // One learner at a time, as etcd's default.
        let e = m.apply(ini, &add(7), 11).unwrap_err();
        assert!(e.contains("too many learner members"), "{e}");
        m.apply(ini, &MemberChange::Promote { node: 6 }, 12)
            .unwrap();
        assert!(m.serves(&ids, 6));
        let e = m
            .apply(ini, &MemberChange::Promote { node: 6 }, 13)
            .unwrap_err();
        assert!(e.contains("can only promote a learner"), "{e}");
        m.apply(ini, &MemberChange::Remove { node: 4 }, 14).unwrap();
        assert_eq!(m.serving(&ids), vec![5, 6]);
        for id in [4, 5, 6] {
            assert!(m.apply(ini, &add(id), 15).is_err());
        }
        let e = m.apply(ini, &add(2), 15).unwrap_err();
        assert!(e.contains("taken by another node"), "{e}");
        assert_eq!(m.epoch, 3, "refusals change nothing");
    }

    #[test]
    fn the_last_serving_replica_cannot_be_removed() {
        let initial = [(4, 0)];
        let ini = Initial {
            replicas: &initial,
            acceptors: &[],
            others: &[],
        };
        let mut m = Members::default();
        let e = m
            .apply(ini, &MemberChange::Remove { node: 4 }, 3)
            .unwrap_err();
        assert!(e.contains("last replica"), "{e}");
        let e = m
            .apply(ini, &MemberChange::Remove { node: 9 }, 3)
            .unwrap_err();
        assert!(e.contains("member not found"), "{e}");
        assert_eq!(m, Members::default());
    }

    #[test]
    fn an_acceptor_change_starts_an_ordering_epoch_at_the_next_instance() {
        let initial = [(1, 0), (2, 0), (3, 0)];
        let ini = Initial {
            replicas: &initial,
            acceptors: &[1, 2, 3],
            others: &[],
        };
        let mut m = Members::default();
        assert_eq!(
            (m.acceptors(&[1, 2, 3]), m.ordering_from()),
            (vec![1, 2, 3], 1)
        );
        let add = |node| MemberChange::AddAcceptor {
            node,
            addr: format!("127.0.0.1:{}", 7100 + node),
        };
        m.apply(ini, &add(4), 20).unwrap();
        assert_eq!((m.ordering_epoch, m.ordering_from(), m.epoch), (1, 21, 1));
        assert_eq!(
            m.acceptors(&[9]),
            vec![1, 2, 3, 4],
            "the file is not read again"
        );
        // Replica changes leave the ordering epoch alone.
        m.apply(ini, &MemberChange::Remove { node: 3 }, 22).unwrap();
        assert_eq!((m.ordering_epoch, m.ordering_from(), m.epoch), (1, 21, 2));
        let e = m.apply(ini, &add(4), 23).unwrap_err();
        assert!(e.contains("already exists"), "{e}");
        m.apply(ini, &MemberChange::RemoveAcceptor { node: 1 }, 24)
            .unwrap();
        assert_eq!(m.acceptors(&[]), vec![2, 3, 4]);
        assert_eq!((m.ordering_epoch, m.ordering_from()), (2, 25));
        let e = m.apply(ini, &add(1), 26).unwrap_err();
        assert!(e.contains("removed before"), "{e}");
        let e = m
            .apply(ini, &MemberChange::RemoveAcceptor { node: 7 }, 26)
            .unwrap_err();
        assert!(e.contains("member not found"), "{e}");
        for node in [2, 3] {
            m.apply(ini, &MemberChange::RemoveAcceptor { node }, 27)
                .unwrap();
        }
        let e = m
            .apply(ini, &MemberChange::RemoveAcceptor { node: 4 }, 28)
            .unwrap_err();
        assert!(e.contains("last acceptor"), "{e}");
        assert_eq!((m.ordering_epoch, m.ordering_from()), (4, 28));
    }
}
