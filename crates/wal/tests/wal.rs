//! Wal: round trips, recovery rules, prefix truncation, durability modes.

use crate::common;

use std::fs;
use std::path::Path;

use common::*;
use partita_wal::{
    segment_file_name, Durability, Recovered, Wal, WalError, MAX_RECORD_LEN, RECORD_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};

/// Write `n` records of sizes cycling 0..97 into a fresh log with small segments,
/// sync, close. Returns the payloads (index = LSN - 1).
fn write_log(dir: &Path, n: u64, durability: Durability) -> Vec<Vec<u8>> {
    let (mut wal, rec) = Wal::open(dir, opts(512, durability)).unwrap();
    assert!(rec.is_empty());
    let mut written = Vec::new();
    for i in 0..n {
        let p = payload(i, (i as usize * 13) % 97);
        assert_eq!(wal.append(&p).unwrap(), i + 1);
        written.push(p);
    }
    assert_eq!(wal.sync().unwrap(), n);
    written
}

fn assert_records(rec: &Recovered, expected: &[Vec<u8>], first_lsn: u64) {
    assert_eq!(rec.len(), expected.len(), "record count");
    for (k, (r, p)) in rec.iter().zip(expected).enumerate() {
        assert_eq!(r.lsn, first_lsn + k as u64);
        assert_eq!(&r.payload, p, "payload of LSN {}", r.lsn);
    }
}

/// Offset within its segment, and length, of the last record of the last segment.
fn last_record(dir: &Path, written: &[Vec<u8>]) -> (std::path::PathBuf, u64, u64) {
    let last = segments(dir).pop().unwrap();
    let first = first_lsn_of(&last);
    let mut off = SEGMENT_HEADER_LEN as u64;
    for p in &written[first as usize - 1..written.len() - 1] {
        off += (RECORD_HEADER_LEN + p.len()) as u64;
    }
    let len = (RECORD_HEADER_LEN + written.last().unwrap().len()) as u64;
    assert_eq!(fs::metadata(&last).unwrap().len(), off + len);
    (last, off, len)
}

#[test]
fn round_trip_across_segments_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut written = write_log(dir.path(), 200, Durability::Fsync);

    let segs = segments(dir.path());
    assert!(
        segs.len() >= 5,
        "expected several segments, got {}",
        segs.len()
    );
    for s in &segs {
        let size = fs::metadata(s).unwrap().len();
        assert!(size <= 512, "{} is {size} bytes", s.display());
        assert_eq!(
            s.file_name().unwrap().to_str().unwrap(),
            segment_file_name(first_lsn_of(s))
        );
    }

    let (mut wal, rec) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    assert_records(&rec, &written, 1);
    assert!(rec.torn_tail.is_none());
    assert_eq!(wal.next_lsn(), 201);
    assert_eq!(wal.durable_lsn(), 200);
    assert_eq!(wal.segment_count(), segs.len());

    // Appending continues the LSN sequence, across further segments.
    for i in 200..260 {
        let p = payload(i, 40);
        assert_eq!(wal.append(&p).unwrap(), i + 1);
        written.push(p);
    }
    assert_eq!(wal.sync().unwrap(), 260);
    drop(wal);
    let (_wal, rec) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    assert_records(&rec, &written, 1);
}

#[test]
fn empty_records_and_oversized_records() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts(128, Durability::Fsync)).unwrap();
    assert_eq!(wal.append(b"").unwrap(), 1);
    // Bigger than a whole segment: gets a segment of its own.
    let big = payload(1, 1000);
    assert_eq!(wal.append(&big).unwrap(), 2);
    assert_eq!(wal.append(b"after").unwrap(), 3);
    let too_big = vec![0u8; MAX_RECORD_LEN + 1];
    assert!(matches!(
        wal.append(&too_big),
        Err(WalError::RecordTooLarge { .. })
    ));
    assert!(!wal.is_poisoned(), "a rejected record is not fatal");
    assert_eq!(wal.sync().unwrap(), 3);
    assert_eq!(wal.segment_count(), 3);
    drop(wal);
    let (_, rec) = Wal::open(dir.path(), opts(128, Durability::Fsync)).unwrap();
    assert_records(&rec, &[b"".to_vec(), big, b"after".to_vec()], 1);
}

#[test]
fn sync_without_appends_does_not_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (mut wal, _) = Wal::open(dir.path(), opts(4096, Durability::Fsync)).unwrap();
    assert_eq!(wal.sync().unwrap(), 0);
    wal.append(b"x").unwrap();
    assert_eq!(wal.sync().unwrap(), 1);
    let fsyncs = wal.stats().fsyncs;
    assert_eq!(wal.sync().unwrap(), 1);
    assert_eq!(wal.stats().fsyncs, fsyncs);
    assert_eq!(wal.stats().syncs, 1);
}

#[test]
fn torn_tail_mid_record_is_truncated_and_appends_continue() {
    for cut_into_header in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut written = write_log(dir.path(), 50, Durability::Fsync);
        let (last, off, len) = last_record(dir.path(), &written);
        // Cut inside the payload, or inside the 8-byte record header.
        let cut = if cut_into_header {
            off + 5
        } else {
            off + len - 1
        };
        truncate(&last, cut);

        let (res, warnings) = with_warnings(|| Wal::open(dir.path(), opts(512, Durability::Fsync)));
        let (mut wal, rec) = res.unwrap();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("torn tail"), "{warnings:?}");
        written.pop();
        assert_records(&rec, &written, 1);
        let torn = rec.torn_tail.as_ref().expect("torn tail reported");
        assert_eq!((torn.segment.as_path(), torn.offset), (last.as_path(), off));
        assert_eq!(torn.bytes_dropped, cut - off);
        assert_eq!(fs::metadata(&last).unwrap().len(), off, "tail cut off");

        // The LSN of the lost record is reused: it was never acknowledged.
        assert_eq!(wal.next_lsn(), 50);
        for i in 49..53 {
            let p = payload(i + 1000, 20);
            assert_eq!(wal.append(&p).unwrap(), i + 1);
            written.push(p);
        }
        wal.sync().unwrap();
        drop(wal);
        let (res, warnings) = with_warnings(|| Wal::open(dir.path(), opts(512, Durability::Fsync)));
        let (_, rec) = res.unwrap();
        assert_records(&rec, &written, 1);
        assert!(rec.torn_tail.is_none());
        assert!(warnings.is_empty(), "clean open warns: {warnings:?}");
    }
}

#[test]
fn torn_tail_flipped_bit_in_last_record_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let mut written = write_log(dir.path(), 40, Durability::Fsync);
    let (last, off, len) = last_record(dir.path(), &written);
    flip_bit(&last, off + len - 1, 6);

    let (mut wal, rec) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    written.pop();
    assert_records(&rec, &written, 1);
    assert!(rec.torn_tail.as_ref().unwrap().reason.contains("checksum"));
    let p = payload(77, 33);
    assert_eq!(wal.append(&p).unwrap(), 40);
    written.push(p);
    wal.sync().unwrap();
    drop(wal);
    let (_, rec) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    assert_records(&rec, &written, 1);
}

#[test]
fn zero_filled_tail_is_torn() {
    // What a crash after a file extension but before the data write typically leaves.
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), 30, Durability::Fsync);
    let last = segments(dir.path()).pop().unwrap();
    let len = fs::metadata(&last).unwrap().len();
    truncate(&last, len + 4096);
    let (_, rec) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    assert_records(&rec, &written, 1);
    assert_eq!(rec.torn_tail.unwrap().bytes_dropped, 4096);
    assert_eq!(fs::metadata(&last).unwrap().len(), len);
}

#[test]
fn crc_error_in_the_middle_is_refused_without_modification() {
    let dir = tempfile::tempdir().unwrap();
    {
        // One big segment: the damaged record is followed by valid ones in the same,
        // last, segment.
        let (mut wal, _) = Wal::open(dir.path(), opts(1 << 16, Durability::Fsync)).unwrap();
        for i in 0..20 {
            wal.append(&payload(i, 50)).unwrap();
        }
        wal.sync().unwrap();
    }
    let last = segments(dir.path()).pop().unwrap();
    assert_eq!(first_lsn_of(&last), 1);
    // Damage the first record; 19 valid records follow it.
    let off = SEGMENT_HEADER_LEN as u64;
    flip_bit(&last, off + RECORD_HEADER_LEN as u64 - 1, 0); // its CRC field
    let before = snapshot(dir.path());

    let err = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap_err();
    match &err {
        WalError::Corrupt {
            segment, offset, ..
        } => {
            assert_eq!(segment, &last);
            assert_eq!(*offset, off);
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(err.to_string().contains("not a torn tail"), "{err}");
    assert_eq!(
        snapshot(dir.path()),
        before,
        "refused open modified the log"
    );
    // Refusal is stable: a second attempt says the same and still touches nothing.
    assert!(matches!(
        Wal::open(dir.path(), opts(512, Durability::Fsync)),
        Err(WalError::Corrupt { .. })
    ));
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn corrupt_length_field_in_the_middle_is_refused() {
    // A flipped high bit in a length makes the record "extend past the end of the
    // file", which must not be mistaken for a torn tail.
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 60, Durability::Fsync);
    let last = segments(dir.path()).pop().unwrap();
    flip_bit(&last, SEGMENT_HEADER_LEN as u64 + 2, 3);
    let before = snapshot(dir.path());
    assert!(matches!(
        Wal::open(dir.path(), opts(512, Durability::Fsync)),
        Err(WalError::Corrupt { .. })
    ));
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn damaged_tail_of_a_non_last_segment_is_refused() {
    for damage in ["truncate", "flip"] {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), 100, Durability::Fsync);
        let segs = segments(dir.path());
        let victim = &segs[1];
        let len = fs::metadata(victim).unwrap().len();
        match damage {
            "truncate" => truncate(victim, len - 3),
            _ => flip_bit(victim, len - 1, 1),
        }
        let before = snapshot(dir.path());
        match Wal::open(dir.path(), opts(512, Durability::Fsync)) {
            Err(WalError::Corrupt { segment, .. }) => assert_eq!(&segment, victim),
            other => panic!("{damage}: expected Corrupt, got {other:?}"),
        }
        assert_eq!(snapshot(dir.path()), before, "{damage}");
    }
}

#[test]
fn missing_middle_segment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 100, Durability::Fsync);
    let segs = segments(dir.path());
    fs::remove_file(&segs[2]).unwrap();
    let before = snapshot(dir.path());
    let err = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap_err();
    assert!(
        matches!(&err, WalError::Corrupt { segment, .. } if segment == &segs[3]),
        "{err:?}"
    );
    assert!(err.to_string().contains("LSN sequence broken"), "{err}");
    assert_eq!(snapshot(dir.path()), before);
}

#[test]
fn foreign_cluster_or_node_is_refused_without_modification() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), 20, Durability::Fsync);
    // Leave a torn tail too: a refused open must not "repair" it either.
    let last = segments(dir.path()).pop().unwrap();
    let len = fs::metadata(&last).unwrap().len();
    truncate(&last, len - 1);
    let before = snapshot(dir.path());

    let mut other_cluster = opts(512, Durability::Fsync);
    other_cluster.cluster_id ^= 1;
    let err = Wal::open(dir.path(), other_cluster).unwrap_err();
    match &err {
        WalError::ForeignHeader {
            expected_cluster_id,
            found_cluster_id,
            found_node_id,
            ..
        } => {
            assert_eq!(*found_cluster_id, CLUSTER);
            assert_eq!(*expected_cluster_id, CLUSTER ^ 1);
            assert_eq!(*found_node_id, NODE);
        }
        other => panic!("expected ForeignHeader, got {other:?}"),
    }
    assert!(err
        .to_string()
        .contains("is the data directory the right one"));
    assert_eq!(snapshot(dir.path()), before);

    let mut other_node = opts(512, Durability::Fsync);
    other_node.node_id += 1;
    assert!(matches!(
        Wal::open(dir.path(), other_node),
        Err(WalError::ForeignHeader { .. })
    ));
    assert_eq!(snapshot(dir.path()), before);

    // The rightful owner still gets everything but the torn record.
    let (_, rec) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    assert_records(&rec, &written[..19], 1);
}

#[test]
fn damaged_or_alien_headers_are_refused_without_modification() {
    // A flipped bit in the header of the last segment.
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 30, Durability::Fsync);
    let last = segments(dir.path()).pop().unwrap();
    flip_bit(&last, 20, 2);
    let before = snapshot(dir.path());
    let err = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap_err();
    assert!(
        matches!(&err, WalError::BadHeader { segment, .. } if segment == &last),
        "{err:?}"
    );
    assert!(err.to_string().contains("checksum"), "{err}");
    assert_eq!(snapshot(dir.path()), before);

    // A file that is not a segment at all, under a segment name.
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(segment_file_name(1)),
        b"#!/bin/sh\necho definitely not a WAL segment\n",
    )
    .unwrap();
    let before = snapshot(dir.path());
    let err = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap_err();
    assert!(err.to_string().contains("bad magic"), "{err}");
    assert_eq!(snapshot(dir.path()), before);

    // An empty file under a segment name (segments are created atomically, so this
    // is not a crash artefact).
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(segment_file_name(1)), b"").unwrap();
    assert!(matches!(
        Wal::open(dir.path(), opts(512, Durability::Fsync)),
        Err(WalError::BadHeader { .. })
    ));

    // A segment renamed so that name and header disagree.
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 3, Durability::Fsync);
    fs::rename(
        dir.path().join(segment_file_name(1)),
        dir.path().join(segment_file_name(2)),
    )
    .unwrap();
    let err = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap_err();
    assert!(err.to_string().contains("file name says 2"), "{err}");

    // An unparseable segment-like name.
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("wal-17.log"), b"?").unwrap();
    assert!(matches!(
        Wal::open(dir.path(), opts(512, Durability::Fsync)),
        Err(WalError::BadHeader { .. })
    ));
}

#[test]
fn creates_missing_directories_and_removes_unfinished_segments() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("a").join("b");
    let written = write_log(&dir, 5, Durability::Fsync);
    // A crash while creating the next segment leaves its temp file behind.
    let tmp = dir.join(format!("{}.tmp", segment_file_name(6)));
    fs::write(&tmp, b"PARTWAL1 half a hea").unwrap();
    let (_, rec) = Wal::open(&dir, opts(512, Durability::Fsync)).unwrap();
    assert_records(&rec, &written, 1);
    assert!(!tmp.exists());
    // Unrelated files are left alone.
    fs::write(dir.join("README"), b"hi").unwrap();
}

#[test]
fn a_log_can_be_opened_only_once() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    assert!(matches!(
        Wal::open(dir.path(), opts(512, Durability::Fsync)),
        Err(WalError::Locked { .. })
    ));
    drop(wal);
    Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
}

#[test]
fn truncate_prefix_deletes_whole_old_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), 200, Durability::Fsync);
    let segs = segments(dir.path());
    let firsts: Vec<u64> = segs.iter().map(|s| first_lsn_of(s)).collect();
    let (mut wal, _) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();

    // Below the end of the first segment: nothing to delete.
    assert_eq!(wal.truncate_prefix(firsts[1] - 1).unwrap(), 0);
    // Exactly the first LSN of segment 2: segments 0 and 1 hold only smaller LSNs.
    assert_eq!(wal.truncate_prefix(firsts[2]).unwrap(), 2);
    assert_eq!(segments(dir.path()), segs[2..]);
    assert_eq!(wal.first_lsn(), firsts[2]);
    // Idempotent.
    assert_eq!(wal.truncate_prefix(firsts[2]).unwrap(), 0);
    // Never the active segment, however high the bound.
    let n = wal.truncate_prefix(u64::MAX).unwrap();
    assert_eq!(n, segs.len() - 3);
    assert_eq!(segments(dir.path()), segs[segs.len() - 1..]);
    assert_eq!(wal.segment_count(), 1);
    assert_eq!(wal.stats().segments_deleted, segs.len() as u64 - 1);
    let last_first = *firsts.last().unwrap();
    assert_eq!(wal.first_lsn(), last_first);

    // The log keeps working and recovers from its new first LSN.
    let extra = payload(999, 10);
    assert_eq!(wal.append(&extra).unwrap(), 201);
    wal.sync().unwrap();
    drop(wal);
    let (wal, rec) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    let mut expected = written[last_first as usize - 1..].to_vec();
    expected.push(extra);
    assert_records(&rec, &expected, last_first);
    assert_eq!(wal.first_lsn(), last_first);
}

#[test]
fn memory_durability_never_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_log(dir.path(), 150, Durability::Memory);
    let (mut wal, rec) = Wal::open(dir.path(), opts(512, Durability::Memory)).unwrap();
    assert_records(&rec, &written, 1);
    for i in 0..100 {
        wal.append(&payload(i, 30)).unwrap();
        wal.sync().unwrap();
    }
    wal.truncate_prefix(100).unwrap();
    let s = wal.stats();
    assert!(s.segments_created > 0 && s.segments_deleted > 0 && s.syncs == 100);
    assert_eq!((s.fsyncs, s.dir_fsyncs), (0, 0), "{s:?}");

    // The counters are real: the same work in Fsync mode does fsync.
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 150, Durability::Fsync);
    let (mut wal, _) = Wal::open(dir.path(), opts(512, Durability::Fsync)).unwrap();
    let at_open = wal.stats();
    assert!(at_open.fsyncs > 0 && at_open.dir_fsyncs > 0);
    wal.append(b"x").unwrap();
    wal.sync().unwrap();
    assert_eq!(wal.stats().fsyncs, at_open.fsyncs + 1);
}

#[test]
fn invalid_options_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Wal::open(dir.path(), opts(10, Durability::Fsync)),
        Err(WalError::InvalidOptions(_))
    ));
}

/// Preallocation: the active segment runs ahead of its records in zeros; closed
/// segments end at their last record; every reopen (a crash at any point looks the
/// same on disk) recovers exactly the records, cuts the zeros, and goes on.
#[test]
fn preallocated_segments_hold_zeros_ahead_and_recover_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let o = partita_wal::WalOptions {
        preallocate_bytes: 1024,
        ..opts(4096, Durability::Fsync)
    };
    let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
    let mut written = Vec::new();
    let mut logical = SEGMENT_HEADER_LEN as u64;
    for i in 0..10u64 {
        let p = payload(i, 40);
        logical += (RECORD_HEADER_LEN + p.len()) as u64;
        wal.append(&p).unwrap();
        written.push(p);
        wal.sync().unwrap();
        let seg = segments(dir.path()).pop().unwrap();
        let on_disk = fs::metadata(&seg).unwrap().len();
        assert!(
            on_disk > logical || on_disk == 4096,
            "the file runs ahead of its {logical} bytes of records: {on_disk}"
        );
        let bytes = fs::read(&seg).unwrap();
        assert!(
            bytes[logical as usize..].iter().all(|&b| b == 0),
            "zeros past the records"
        );
    }
    // Ten records of 48 bytes, 1 KiB at a time: one extension.
    assert_eq!(wal.stats().preallocations, 1);
    // A record larger than what is preallocated extends past it at once.
    let big = payload(10, 3000);
    wal.append(&big).unwrap();
    written.push(big);
    wal.sync().unwrap();
    assert_eq!(wal.stats().preallocations, 2);
    // Enough to roll: the closed segments end exactly at their records.
    for i in 11..200u64 {
        let p = payload(i, 60);
        wal.append(&p).unwrap();
        written.push(p);
    }
    wal.sync().unwrap();
    drop(wal);
    let segs = segments(dir.path());
    assert!(segs.len() >= 3, "{segs:?}");
    for s in &segs[..segs.len() - 1] {
        let bytes = fs::read(s).unwrap();
        assert!(bytes.len() <= 4096 || bytes.len() > 3000, "{}", bytes.len());
        assert_ne!(
            *bytes.last().unwrap(),
            0,
            "{} ends in a record",
            s.display()
        );
    }
    let last = segs.last().unwrap().clone();
    let preallocated = fs::metadata(&last).unwrap().len();
    let (mut wal, rec) = Wal::open(dir.path(), o.clone()).unwrap();
    assert_records(&rec, &written, 1);
    let cut = rec.torn_tail.expect("the zeros are cut");
    assert!(cut.all_zero, "{cut:?}");
    assert_eq!(cut.offset + cut.bytes_dropped, preallocated);
    assert_eq!(fs::metadata(&last).unwrap().len(), cut.offset);
    // And it goes on, preallocating again.
    let more = payload(999, 10);
    wal.append(&more).unwrap();
    written.push(more);
    wal.sync().unwrap();
    assert!(fs::metadata(&last).unwrap().len() > cut.offset + 18);
    drop(wal);
    let (_, rec) = Wal::open(dir.path(), o).unwrap();
    assert_records(&rec, &written, 1);
}

/// A torn write inside the preallocated zeros is still a torn tail (not all zero).
#[test]
fn a_torn_record_inside_preallocated_zeros_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let o = partita_wal::WalOptions {
        preallocate_bytes: 1024,
        ..opts(1 << 20, Durability::Fsync)
    };
    let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
    let mut written = Vec::new();
    for i in 0..5u64 {
        let p = payload(i, 30);
        wal.append(&p).unwrap();
        written.push(p);
    }
    wal.sync().unwrap();
    drop(wal);
    let seg = segments(dir.path()).pop().unwrap();
    let end = SEGMENT_HEADER_LEN + 5 * (RECORD_HEADER_LEN + 30);
    // Half of a sixth record's header reached the disk.
    let mut bytes = fs::read(&seg).unwrap();
    bytes[end..end + 4].copy_from_slice(&30u32.to_le_bytes());
    fs::write(&seg, &bytes).unwrap();
    let (_, rec) = Wal::open(dir.path(), o).unwrap();
    assert_records(&rec, &written, 1);
    let t = rec.torn_tail.unwrap();
    assert!(!t.all_zero);
    assert_eq!(t.offset, end as u64);
}

/// Without fsync nothing is preallocated: the file is exactly its records.
#[test]
fn no_preallocation_without_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let o = partita_wal::WalOptions {
        preallocate_bytes: 1024,
        ..opts(1 << 20, Durability::Memory)
    };
    let (mut wal, _) = Wal::open(dir.path(), o).unwrap();
    wal.append(&payload(0, 30)).unwrap();
    wal.sync().unwrap();
    assert_eq!(wal.stats().preallocations, 0);
    let seg = segments(dir.path()).pop().unwrap();
    assert_eq!(
        fs::metadata(&seg).unwrap().len(),
        (SEGMENT_HEADER_LEN + RECORD_HEADER_LEN + 30) as u64
    );
}
