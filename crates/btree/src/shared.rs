//! P-SMR on OS threads (paper 002 §III-F, §IV): one B+tree that K worker threads
//! execute their own commands on at the same time.
//!
//! A [`SharedTree`] borrows the tree exclusively and hands out, through `&self`, what
//! thread `t` may do alone while the others run: read, update, and range-query keys of
//! its own range (`KeyPartition::range(t)`); and, only when the opt-PSMR safety check
//! passes, insert into and delete from a leaf that lies wholly inside its range without
//! splitting, merging or borrowing. Nothing else: a command that does not fit is
//! answered [`Shared::Alone`] and changes nothing, so the caller runs it with every
//! other thread stopped.
//!
//! # Why threads never write memory another thread touches
//!
//! Internal nodes are never written through the view: separators, children and the
//! root stay as they are while it lives, so every descent is a read of unchanging
//! memory. A leaf reached by a key of thread `t` is routed an interval (from its
//! ancestors' separators) that contains the key, so it is either wholly `t`'s or
//! straddles two or more threads' ranges. Only a leaf wholly inside `t`'s range has its
//! length, keys or neighbour links changed (an insert or delete that passed the check),
//! and only by `t`: no other thread's key leads there. In a straddling leaf, threads
//! only read the header and keys (nobody writes them) and read or write the value of a
//! key of their own (each value word belongs to one key, hence to one thread). A range
//! query walks leaf by leaf by descending again from each leaf's routed upper bound,
//! never peeking at a leaf its range does not reach (which could be another thread's,
//! in the middle of an insert).
//!
//! Leaves are accessed through raw pointers taken from the exclusive borrow (never
//! through references that would cover another thread's words). The entry count and
//! the content digest, which every mutation updates, are kept per thread while the
//! view lives and folded into the tree when it is dropped.

use crate::digest::entry_hash;
use crate::hooks::Located;
use crate::node::{rank_le, rank_lt, CHUNK_MASK, CHUNK_SHIFT, IK, LEAF_BIT, LK};
use crate::ops::{BatchOp, Op, OpResult};
use crate::psmr::KeyPartition;
use crate::BPlusTree;
use partita_service::{Shared, SharedExecution, ThreadLayout};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The entry count and digest changes of one thread, on a cache line of their own.
#[repr(align(64))]
#[derive(Default)]
struct Delta {
    len: AtomicI64,
    digest: AtomicU64,
}

/// The tree as K worker threads share it (see the module documentation).
pub struct SharedTree<'a> {
    tree: *mut BPlusTree,
    part: KeyPartition,
    cap: usize,
    min: usize,
    root: u32,
    root_is_leaf: bool,
    leaf_chunks: Vec<*mut u64>,
    leaf_stride: usize,
    inner_chunks: Vec<*const u64>,
    inner_stride: usize,
    deltas: Vec<Delta>,
    _borrow: PhantomData<&'a mut BPlusTree>,
}

// SAFETY: the raw pointers address the tree's node memory, which the view borrows
// exclusively for 'a; `execute` only lets a thread write words no other thread reads
// or writes meanwhile (module documentation), and the deltas are atomics.
unsafe impl Sync for SharedTree<'_> {}
unsafe impl Send for SharedTree<'_> {}

impl<'a> SharedTree<'a> {
    /// The view of `tree` for the worker threads of `part`.
    pub fn new(tree: &'a mut BPlusTree, part: KeyPartition) -> SharedTree<'a> {
        let tree: *mut BPlusTree = tree;
        // SAFETY: `tree` comes from the exclusive borrow; the fields are read, and the
        // chunk pointers derived from it, before any thread uses the view.
        let t = unsafe { &mut *tree };
        let leaf_chunks = t.leaves.chunk_ptrs();
        let inner_chunks = t
            .inners
            .chunk_ptrs()
            .into_iter()
            .map(|p| p.cast_const())
            .collect();
        SharedTree {
            part,
            cap: t.cap,
            min: t.min,
            root: t.root.raw(),
            root_is_leaf: t.height == 0,
            leaf_stride: t.leaves.stride,
            inner_stride: t.inners.stride,
            leaf_chunks,
            inner_chunks,
            deltas: (0..part.threads()).map(|_| Delta::default()).collect(),
            tree,
            _borrow: PhantomData,
        }
    }

    /// An internal node's words (nobody writes internal nodes while the view lives).
    #[inline(always)]
    fn inner(&self, i: u32) -> &[u64] {
        let base = self.inner_chunks[(i >> CHUNK_SHIFT) as usize];
        // SAFETY: a live node's slot inside its chunk; internal nodes are only read.
        unsafe {
            std::slice::from_raw_parts(
                base.add((i & CHUNK_MASK) as usize * self.inner_stride),
                self.inner_stride,
            )
        }
    }

    /// The first word of leaf `i` (accessed word by word, see the module doc).
    #[inline(always)]
    fn leaf(&self, i: u32) -> *mut u64 {
        let base = self.leaf_chunks[(i >> CHUNK_SHIFT) as usize];
        // SAFETY: a live leaf's slot inside its chunk.
        unsafe { base.add((i & CHUNK_MASK) as usize * self.leaf_stride) }
    }

    /// The leaf `key` leads to and the interval routed to it (`BPlusTree::locate`).
    fn locate(&self, key: u64) -> Located {
        let cap = self.cap;
        let (mut low, mut high) = (0, u64::MAX);
        let mut id = self.root;
        while id & LEAF_BIT == 0 {
            let w = self.inner(id);
            let n = w[0] as usize;
            let keys = &w[IK..IK + n];
            let c = rank_le(keys, key);
            if c > 0 {
                low = keys[c - 1];
            }
            if c < n {
                high = keys[c] - 1;
            }
            id = crate::node::children(w, cap)[c];
        }
        Located {
            leaf: id & !LEAF_BIT,
            low,
            high,
        }
    }

    /// Leaf `li`'s entry count and the position of `key` in it: `(n, pos, found)`.
    fn search(&self, li: u32, key: u64) -> (usize, usize, bool) {
        let w = self.leaf(li);
        // SAFETY: header and keys of a leaf a key of the calling thread leads to: no
        // other thread writes them (module documentation).
        unsafe {
            let n = w.read() as usize;
            let keys = std::slice::from_raw_parts(w.add(LK), n);
            let pos = rank_lt(keys, key);
            (n, pos, pos < n && keys[pos] == key)
        }
    }

    fn owns(&self, t: usize, low: u64, high: u64) -> bool {
        let r = self.part.range(t);
        *r.start() <= low && high <= *r.end()
    }

    fn record(&self, t: usize, len: i64, digest: u64) {
        let d = &self.deltas[t];
        d.len.fetch_add(len, Ordering::Relaxed);
        d.digest.fetch_add(digest, Ordering::Relaxed);
    }

    /// The opt-PSMR verdict of `ops` for thread `t`: the tree's own rule
    /// (`hooks::batch_check`, `KeyPartition::verdict_of`), reading leaves word by word;
    /// every key must be `t`'s (a leaf a key of `t` leads to is safe to read).
    fn check(&self, t: usize, ops: &[BatchOp]) -> Result<(), String> {
        let check = crate::hooks::batch_check(ops, self.cap, self.min, self.root_is_leaf, |key| {
            let at = self.locate(key);
            let (n, _, found) = self.search(at.leaf, key);
            (at, n, found)
        });
        self.part.verdict_of(check, t).reason(t)
    }

    /// Insert in place into a leaf wholly `t`'s with room (checked by the caller).
    fn insert(&self, t: usize, key: u64, value: u64) -> bool {
        let at = self.locate(key);
        debug_assert!(self.owns(t, at.low, at.high));
        let (n, pos, found) = self.search(at.leaf, key);
        if found {
            return false;
        }
        assert!(n < self.cap, "an in-place insert into a full leaf");
        let (w, cap) = (self.leaf(at.leaf), self.cap);
        // SAFETY: the leaf is wholly thread t's (checked): no other thread reads or
        // writes any of its words while the view lives.
        unsafe {
            std::ptr::copy(w.add(LK + pos), w.add(LK + pos + 1), n - pos);
            w.add(LK + pos).write(key);
            std::ptr::copy(w.add(LK + cap + pos), w.add(LK + cap + pos + 1), n - pos);
            w.add(LK + cap + pos).write(value);
            w.write(n as u64 + 1);
        }
        self.record(t, 1, entry_hash(key, value));
        true
    }

    /// Delete in place from a leaf wholly `t`'s that stays at least half full.
    fn delete(&self, t: usize, key: u64) -> Option<u64> {
        let at = self.locate(key);
        debug_assert!(self.owns(t, at.low, at.high));
        let (n, pos, found) = self.search(at.leaf, key);
        if !found {
            return None;
        }
        let (w, cap) = (self.leaf(at.leaf), self.cap);
        // SAFETY: as in `insert`.
        let value = unsafe {
            let value = w.add(LK + cap + pos).read();
            std::ptr::copy(w.add(LK + pos + 1), w.add(LK + pos), n - pos - 1);
            std::ptr::copy(
                w.add(LK + cap + pos + 1),
                w.add(LK + cap + pos),
                n - pos - 1,
            );
            w.write(n as u64 - 1);
            value
        };
        self.record(t, -1, entry_hash(key, value).wrapping_neg());
        Some(value)
    }

    /// Thread `t` runs `op` (see [`SharedExecution`]).
    pub fn run(&self, t: usize, op: &Op, check: bool) -> Shared<OpResult> {
        let mine = self.part.range(t);
        match *op {
            Op::Read { key } if mine.contains(&key) => {
                let at = self.locate(key);
                let (_, pos, found) = self.search(at.leaf, key);
                // SAFETY: the value word of a key of thread t: only t touches it.
                let v =
                    found.then(|| unsafe { self.leaf(at.leaf).add(LK + self.cap + pos).read() });
                Shared::Done(OpResult::Value(v))
            }
            Op::Update { key, value } if mine.contains(&key) && !check => {
                let at = self.locate(key);
                let (_, pos, found) = self.search(at.leaf, key);
                if !found {
                    return Shared::Done(OpResult::Old(None));
                }
                // SAFETY: as for a read.
                let old = unsafe {
                    let slot = self.leaf(at.leaf).add(LK + self.cap + pos);
                    let old = slot.read();
                    slot.write(value);
                    old
                };
                self.record(
                    t,
                    0,
                    entry_hash(key, value).wrapping_sub(entry_hash(key, old)),
                );
                Shared::Done(OpResult::Old(Some(old)))
            }
            Op::Query { min, max } if min > max => Shared::Done(OpResult::Entries(Vec::new())),
            Op::Query { min, max } if mine.contains(&min) && mine.contains(&max) => {
                let mut out = Vec::new();
                let mut cursor = min;
                loop {
                    let at = self.locate(cursor);
                    let (n, pos, _) = self.search(at.leaf, cursor);
                    let w = self.leaf(at.leaf);
                    for i in pos..n {
                        // SAFETY: keys of a leaf t's key leads to (nobody writes them)
                        // and values of t's own keys (cursor..=max is t's).
                        let k = unsafe { w.add(LK + i).read() };
                        if k > max {
                            break;
                        }
                        out.push((k, unsafe { w.add(LK + self.cap + i).read() }));
                    }
                    if at.high >= max {
                        break;
                    }
                    cursor = at.high + 1;
                }
                Shared::Done(OpResult::Entries(out))
            }
            Op::Insert { key, value } if mine.contains(&key) => {
                let ops = [BatchOp::Insert { key, value }];
                match self.check(t, &ops) {
                    Ok(()) => Shared::Done(OpResult::Inserted(self.insert(t, key, value))),
                    Err(why) if check => Shared::Refused(why),
                    Err(_) => Shared::Alone,
                }
            }
            Op::Delete { key } if mine.contains(&key) => {
                match self.check(t, &[BatchOp::Delete { key }]) {
                    Ok(()) => Shared::Done(OpResult::Removed(self.delete(t, key))),
                    Err(why) if check => Shared::Refused(why),
                    Err(_) => Shared::Alone,
                }
            }
            Op::Batch(ref ops) if ops.iter().all(|b| mine.contains(&batch_key(b))) => {
                match self.check(t, ops) {
                    Ok(()) => Shared::Done(OpResult::Batch(
                        ops.iter()
                            .map(|b| match *b {
                                BatchOp::Insert { key, value } => {
                                    OpResult::Inserted(self.insert(t, key, value))
                                }
                                BatchOp::Delete { key } => OpResult::Removed(self.delete(t, key)),
                            })
                            .collect(),
                    )),
                    Err(why) if check => Shared::Refused(why),
                    Err(_) => Shared::Alone,
                }
            }
            _ => Shared::Alone,
        }
    }
}

fn batch_key(b: &BatchOp) -> u64 {
    match *b {
        BatchOp::Insert { key, .. } | BatchOp::Delete { key } => key,
    }
}

impl Drop for SharedTree<'_> {
    fn drop(&mut self) {
        let (mut len, mut digest) = (0i64, 0u64);
        for d in &self.deltas {
            len += d.len.load(Ordering::Relaxed);
            digest = digest.wrapping_add(d.digest.load(Ordering::Relaxed));
        }
        // SAFETY: the exclusive borrow the view was made from; no thread uses the
        // view any more (it is being dropped).
        let tree = unsafe { &mut *self.tree };
        tree.len = tree
            .len
            .checked_add_signed(len as isize)
            .expect("entry count stays non-negative");
        tree.digest_sum = tree.digest_sum.wrapping_add(digest);
    }
}

impl SharedExecution<BPlusTree> for SharedTree<'_> {
    fn execute(&self, t: usize, cmd: &Op, check: bool) -> Shared<OpResult> {
        self.run(t, cmd, check)
    }
}

/// The view for `StateMachine::shared`.
pub(crate) fn shared<'a>(
    tree: &'a mut BPlusTree,
    layout: &ThreadLayout,
) -> Option<Box<dyn SharedExecution<BPlusTree> + 'a>> {
    let part = KeyPartition::of(layout).ok()?;
    Some(Box::new(SharedTree::new(tree, part)))
}
