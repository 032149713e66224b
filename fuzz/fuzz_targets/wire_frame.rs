//! Bytes from a socket: the frame parser (`partita_types::frame`), then the wire decoder
//! (`partita_wire::Wire`), as `partita_net::FrameReader` runs them on what every node
//! and client connection reads. Never a panic, never an allocation beyond the bounds
//! (libFuzzer's RSS limit); a frame that parses whole also parses from any prefix as
//! "more bytes needed", never as an error (it may arrive in pieces); whatever decodes
//! re-encodes to bytes that decode to the same message.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_types::frame::{parse_frame, write_frame, FRAME_HEADER_BYTES};
use partita_wire::Wire;

fuzz_target!(|data: &[u8]| {
    // As a stream: frames one after the other until the bytes run out or one is bad
    // (the reader closes the connection then).
    let mut at = 0;
    while at < data.len() {
        match parse_frame(&data[at..]) {
            Ok(Some((range, used))) => {
                assert!(used >= FRAME_HEADER_BYTES && at + used <= data.len());
                assert!(range.start == FRAME_HEADER_BYTES && range.end == used);
                for cut in [0, 3, 4, FRAME_HEADER_BYTES, used / 2, used - 1] {
                    if cut < used {
                        assert_eq!(parse_frame(&data[at..at + cut]), Ok(None), "cut {cut}");
                    }
                }
                let payload = &data[at + range.start..at + range.end];
                let mut again = Vec::new();
                write_frame(&mut again, payload);
                assert_eq!(&again[..], &data[at..at + used], "frames re-encode");
                round_trip(payload);
                at += used;
            }
            Ok(None) | Err(_) => break,
        }
    }
    // And as one frame's payload (the checksum guards the frame, not its meaning: a
    // buggy or hostile peer sends well-framed garbage).
    round_trip(data);
});

fn round_trip(payload: &[u8]) {
    if let Ok(w) = partita_types::decode::<Wire>(payload) {
        let again = partita_types::encode(&w);
        let w2: Wire = partita_types::decode(&again).expect("what was encoded decodes");
        assert_eq!(w2, w, "decode(encode(w)) == w");
        assert_eq!(
            partita_wire::to_frame(&w).len(),
            again.len() + FRAME_HEADER_BYTES
        );
        // What a client does with a reply: the outcome as each service reads it.
        if let Wire::Reply { reply, .. } = &w {
            let _ = partita_service::decode_outcome::<partita_btree::BPlusTree>(&reply.result);
            let _ = partita_service::decode_outcome::<partita_kv::KvStore>(&reply.result);
        }
    }
}
