//! A WAL segment read back from disk (`partita_wal`): the header check and the record
//! scan that recovery runs on every segment, then each record's payload as the runtime
//! decodes it (an acceptor's `AcceptorRecord`). Never a panic, never a hang (the
//! search after damage is bounded); the valid records lie inside the file, back to
//! back from the header on, and framed again they give the same bytes; without damage
//! they reach the end of the file; a decoded record re-encodes to what decodes equal.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_consensus::AcceptorRecord;
use partita_wal::SEGMENT_HEADER_LEN;

fuzz_target!(|data: &[u8]| {
    // One record's payload, as recovery decodes it.
    record(data);
    // The bytes as a whole segment file, header included.
    check(data);
    // The same bytes behind a valid header, so that the scan itself is exercised.
    let mut image = partita_wal::segment_header(7, 1, 1).to_vec();
    image.extend_from_slice(data);
    check(&image);
});

fn record(payload: &[u8]) {
    if let Ok(r) = partita_types::decode::<AcceptorRecord>(payload) {
        let again = partita_types::encode(&r);
        assert_eq!(
            partita_types::decode::<AcceptorRecord>(&again).as_ref(),
            Ok(&r)
        );
    }
}

fn check(buf: &[u8]) {
    let Ok((records, valid_end, damaged)) = partita_wal::scan_segment_image(buf) else {
        return;
    };
    assert!(valid_end <= buf.len());
    assert!(
        damaged || valid_end == buf.len(),
        "no damage: every byte is a record"
    );
    let mut framed = Vec::new();
    for r in &records {
        assert!(r.start <= r.end && r.end <= valid_end);
        partita_wal::frame_record(&mut framed, &buf[r.clone()]);
        record(&buf[r.clone()]);
    }
    assert_eq!(
        &framed[..],
        &buf[SEGMENT_HEADER_LEN..valid_end],
        "records back to back"
    );
}
