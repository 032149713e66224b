//! A checkpoint from disk or from a peer (state transfer): the header and checksum
//! check, then the restore of a replica of each service. Never a panic: damage is an
//! error.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_smr::SequentialReplica;

fuzz_target!(|data: &[u8]| {
    restore(data);
    // The same bytes with a correct checksum trailer (the last 4 bytes, CRC32C of the
    // rest), so that the fuzzer reaches the decoders behind the checksum: a peer or a
    // bug could hand over a checkpoint whose checksum holds and whose body is wrong.
    if data.len() >= 4 {
        let mut sealed = data.to_vec();
        let body = sealed.len() - 4;
        let crc = crc32c::crc32c(&sealed[..body]);
        sealed[body..].copy_from_slice(&crc.to_le_bytes());
        restore(&sealed);
    }
});

fn restore(data: &[u8]) {
    let _ = partita_smr::verify_checkpoint(data);
    let _ = partita_smr::checkpoint_header(data);
    if let Ok(r) = SequentialReplica::<partita_btree::BPlusTree>::restore(data) {
        r.invariants();
    }
    if let Ok(r) = SequentialReplica::<partita_kv::KvStore>::restore(data) {
        r.invariants();
    }
}
