//! Property tests: whatever a crash does to the end of the last segment, recovery
//! returns exactly the records that are complete before the cut, which include every
//! record synced before it; and damage anywhere before the last record is refused.

use crate::common;

use std::fs;

use common::*;
use partita_wal::{Durability, Wal, WalError, RECORD_HEADER_LEN, SEGMENT_HEADER_LEN};
use proptest::prelude::*;

const SEGMENT_MAX: u64 = 600;

struct Written {
    payloads: Vec<Vec<u8>>,
    /// (LSN synced, segment it lived in, that segment's length right after the sync)
    syncs: Vec<(u64, std::path::PathBuf, u64)>,
}

/// Fresh log with the given record sizes, synced every `sync_every` records and at
/// the end. Memory durability: the file contents are identical, only faster.
fn write(dir: &std::path::Path, sizes: &[usize], sync_every: usize) -> Written {
    let (mut wal, _) = Wal::open(dir, opts(SEGMENT_MAX, Durability::Memory)).unwrap();
    let mut w = Written {
        payloads: Vec::new(),
        syncs: Vec::new(),
    };
    for (i, &size) in sizes.iter().enumerate() {
        let p = payload(i as u64, size);
        wal.append(&p).unwrap();
        w.payloads.push(p);
        if (i + 1) % sync_every == 0 || i + 1 == sizes.len() {
            let lsn = wal.sync().unwrap();
            let seg = segments(dir).pop().unwrap();
            let len = fs::metadata(&seg).unwrap().len();
            w.syncs.push((lsn, seg, len));
        }
    }
    w
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn torn_last_segment_recovers_exactly_the_complete_prefix(
        sizes in prop::collection::vec(0usize..150, 1..60),
        sync_every in 1usize..8,
        cut_frac in 0.0f64..=1.0,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let w = write(dir.path(), &sizes, sync_every);
        let last = segments(dir.path()).pop().unwrap();
        let last_first = first_lsn_of(&last);
        let len = fs::metadata(&last).unwrap().len();
        // The header is created atomically, so a crash can only cut the record area.
        let header = SEGMENT_HEADER_LEN as u64;
        let cut = header + ((len - header) as f64 * cut_frac) as u64;
        truncate(&last, cut);

        // Records complete before the cut.
        let mut complete = last_first - 1;
        let mut end = header;
        for p in &w.payloads[last_first as usize - 1..] {
            let next = end + (RECORD_HEADER_LEN + p.len()) as u64;
            if next > cut {
                break;
            }
            complete += 1;
            end = next;
        }

        let (mut wal, rec) = Wal::open(dir.path(), opts(SEGMENT_MAX, Durability::Memory)).unwrap();
        prop_assert_eq!(rec.len() as u64, complete);
        for r in rec.iter() {
            prop_assert_eq!(&r.payload, &w.payloads[r.lsn as usize - 1]);
        }
        prop_assert_eq!(rec.torn_tail.is_some(), end != cut);
        // Every sync whose bytes all lie before the cut survived.
        for (lsn, seg, seg_len) in &w.syncs {
            if *seg != last || *seg_len <= cut {
                prop_assert!(rec.len() as u64 >= *lsn, "synced LSN {} lost", lsn);
            }
        }

        // And the log goes on from there.
        let more = payload(4242, 77);
        prop_assert_eq!(wal.append(&more).unwrap(), complete + 1);
        wal.sync().unwrap();
        drop(wal);
        let (_, rec) = Wal::open(dir.path(), opts(SEGMENT_MAX, Durability::Memory)).unwrap();
        prop_assert_eq!(rec.len() as u64, complete + 1);
        prop_assert_eq!(&rec.records.last().unwrap().payload, &more);
        prop_assert!(rec.torn_tail.is_none());
    }

    #[test]
    fn any_bit_flip_before_the_last_record_is_refused(
        sizes in prop::collection::vec(0usize..150, 2..40),
        victim_frac in 0.0f64..1.0,
        bit in 0u8..8,
    ) {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &sizes, 1000);
        // A byte of any record except the very last one of the log, in any segment.
        let segs = segments(dir.path());
        let mut candidates = Vec::new();
        for (k, seg) in segs.iter().enumerate() {
            let len = fs::metadata(seg).unwrap().len();
            let mut end = len;
            if k + 1 == segs.len() {
                let last_len = RECORD_HEADER_LEN + sizes.last().unwrap();
                end -= last_len as u64;
            }
            candidates.extend((SEGMENT_HEADER_LEN as u64..end).map(|o| (seg.clone(), o)));
        }
        prop_assume!(!candidates.is_empty());
        let (seg, off) = &candidates[(victim_frac * candidates.len() as f64) as usize];
        flip_bit(seg, *off, bit);
        let before = snapshot(dir.path());
        let res = Wal::open(dir.path(), opts(SEGMENT_MAX, Durability::Memory));
        prop_assert!(matches!(res, Err(WalError::Corrupt { .. })), "{:?}", res.map(|_| ()));
        prop_assert_eq!(snapshot(dir.path()), before);
    }
}
