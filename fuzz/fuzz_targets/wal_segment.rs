//! A WAL segment read back from disk: the header check and the record scan that
//! recovery runs on every segment. Never a panic; the valid records it reports lie
//! inside the file, in order, before where the damage starts.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A record's payload as recovery decodes it (an acceptor's promise or vote).
    let _ = partita_types::decode::<partita_consensus::AcceptorRecord>(data);
    check(data);
    // The same bytes behind a valid header, so that the scan itself is exercised.
    let mut image = partita_wal::segment_header(7, 1, 1).to_vec();
    image.extend_from_slice(data);
    check(&image);
});

fn check(buf: &[u8]) {
    if let Ok((records, valid_end, _damaged)) = partita_wal::scan_segment_image(buf) {
        assert!(valid_end <= buf.len());
        let mut last = 0;
        for r in &records {
            assert!(r.start <= r.end && r.end <= valid_end && r.start >= last);
            last = r.end;
            let _ = partita_types::decode::<partita_consensus::AcceptorRecord>(&buf[r.clone()]);
        }
    }
}
