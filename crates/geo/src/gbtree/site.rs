//! psite (Algorithm 1, lines 17–37) and the delivery decision (lines 10–16).

use super::{Decision, Delivery, GbTreeError, GeoBTree, NodeId, Op};
use crate::set::{Config, Replica};

impl GeoBTree {
    /// The serializers that must order `op` submitted at replica `from`, on the tree as
    /// it is now (Algorithm 1's psite; the module documentation lists the rules).
    ///
    /// # Panics
    /// When `from` is not a replica of the topology.
    pub fn psite(&self, op: &Op, from: Replica) -> Config {
        self.check_from(from);
        let dst = match *op {
            Op::Dop => self.topology().all(),
            Op::Read { key } => self.closest(self.find_leaf(key), from),
            Op::GetNext { key } | Op::GetPrev { key } => {
                let leaf = self.find_leaf(key);
                let mut dst = self.closest(leaf, from);
                if let Some((other, _)) = self.neighbour(op) {
                    dst = dst.union(self.closest(other, from));
                }
                dst
            }
            Op::Update { key, .. } => self.node(self.find_leaf(key)).reps,
            Op::Insert { key, .. } => self.insert_site(key),
        };
        debug_assert!(dst.span() <= self.n());
        dst
    }

    /// Whether `op`, submitted at `from` and serialized by `dst`, may execute now, or
    /// must be re-serialized (and with which serializers). Every replica computes the
    /// same decision: it depends on the tree, `op`, `from` and `dst` only.
    ///
    /// Reads need one current serializer of every node read (`reps ∩ dst ≠ ∅` for k's
    /// leaf and, for GET-NEXT/GET-PREV, the answer's leaf); writes and the DOP need
    /// every serializer psite names now (`psite(op, from) ⊆ dst`), which also catches
    /// insertions whose split was not predicted at submission.
    ///
    /// # Panics
    /// When `from` is not a replica of the topology.
    pub fn deliver_decision(&self, op: &Op, from: Replica, dst: Config) -> Decision {
        self.check_from(from);
        let covered = |id: NodeId| self.node(id).reps.mask() & dst.mask() != 0;
        let ok = match *op {
            Op::Read { key } => covered(self.find_leaf(key)),
            Op::GetNext { key } | Op::GetPrev { key } => {
                covered(self.find_leaf(key)) && self.neighbour(op).is_none_or(|(l, _)| covered(l))
            }
            Op::Update { .. } | Op::Insert { .. } | Op::Dop => {
                self.psite(op, from).is_subset_of(dst)
            }
        };
        if ok {
            return Decision::Execute;
        }
        let again = self.psite(op, from);
        // A resubmission adds a serializer that did not order the request.
        assert!(
            !again.is_subset_of(dst),
            "{} resubmitted to {again} although {dst} covers it",
            op.name()
        );
        Decision::Resubmit(again)
    }

    /// Algorithm 1's `deliver`: [`GeoBTree::deliver_decision`], then
    /// [`GeoBTree::execute`] when it says so.
    pub fn deliver(
        &mut self,
        op: &Op,
        from: Replica,
        dst: Config,
    ) -> Result<Delivery, GbTreeError> {
        match self.deliver_decision(op, from, dst) {
            Decision::Execute => Ok(Delivery::Executed(self.execute(op, from)?)),
            Decision::Resubmit(c) => Ok(Delivery::Resubmit(c)),
        }
    }

    /// GET-NEXT's answer, the entry with the smallest key above `key`, without counting
    /// an access (what an ordering that orders only conflicting commands asks before
    /// proposing: which keys a GET-NEXT reads).
    pub fn next_entry(&self, key: u64) -> Option<(u64, &[u8])> {
        let (id, i) = self.neighbour(&Op::GetNext { key })?;
        let n = self.node(id);
        Some((n.keys[i], &n.values[i][..]))
    }

    /// GET-PREV's answer, the entry with the largest key below `key`, without counting
    /// an access.
    pub fn prev_entry(&self, key: u64) -> Option<(u64, &[u8])> {
        let (id, i) = self.neighbour(&Op::GetPrev { key })?;
        let n = self.node(id);
        Some((n.keys[i], &n.values[i][..]))
    }

    /// The serializer of `id` closest to `from` (`from` itself when it is one).
    fn closest(&self, id: NodeId, from: Replica) -> Config {
        let (g, _) = self.topology().nearest(from, self.node(id).reps);
        Config::single(g)
    }

    /// INSERT's serializers: the leaf's, then each parent's while the node below it
    /// would split (it is full: one more key overflows it).
    pub(super) fn insert_site(&self, key: u64) -> Config {
        let mut id = self.find_leaf(key);
        let mut dst = self.node(id).reps;
        while let Some(parent) = self.node(id).parent {
            if self.node(id).keys.len() < self.order {
                break;
            }
            id = parent;
            dst = dst.union(self.node(id).reps);
        }
        dst
    }

    /// GET-NEXT and GET-PREV: the leaf and position of the answer, or `None` when there
    /// is none. Leaves below a non-leaf root are never empty (there is no delete), so
    /// the answer is in k's leaf or in the neighbouring one.
    pub(super) fn neighbour(&self, op: &Op) -> Option<(NodeId, usize)> {
        match *op {
            Op::GetNext { key } => {
                let id = self.find_leaf(key);
                let n = self.node(id);
                let i = n.keys.partition_point(|&x| x <= key);
                if i < n.keys.len() {
                    return Some((id, i));
                }
                let next = n.next_leaf?;
                assert!(
                    !self.node(next).keys.is_empty(),
                    "an empty leaf below the root"
                );
                Some((next, 0))
            }
            Op::GetPrev { key } => {
                let id = self.find_leaf(key);
                let n = self.node(id);
                let i = n.keys.partition_point(|&x| x < key);
                if i > 0 {
                    return Some((id, i - 1));
                }
                let prev = n.prev_leaf?;
                let len = self.node(prev).keys.len();
                assert!(len > 0, "an empty leaf below the root");
                Some((prev, len - 1))
            }
            _ => None,
        }
    }
}
