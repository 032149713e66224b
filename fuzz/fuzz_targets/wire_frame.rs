//! Bytes from a socket: the frame parser, then the wire decoder (what every connection
//! task of a node and every client runs on what it reads). Never a panic; whatever
//! decodes re-encodes to bytes that decode to the same encoding.
#![no_main]
use libfuzzer_sys::fuzz_target;
use partita_types::frame::parse_frame;
use partita_wire::Wire;

fuzz_target!(|data: &[u8]| {
    // As a frame stream: frames one after the other until the bytes run out.
    let mut at = 0;
    while at < data.len() {
        match parse_frame(&data[at..]) {
            Ok(Some((range, used))) => {
                assert!(used > 0 && at + used <= data.len());
                let payload = &data[at + range.start..at + range.end];
                round_trip(payload);
                at += used;
            }
            Ok(None) | Err(_) => break,
        }
    }
    // And as one frame's payload.
    round_trip(data);
});

fn round_trip(payload: &[u8]) {
    if let Ok(w) = partita_types::decode::<Wire>(payload) {
        let again = partita_types::encode(&w);
        let w2: Wire = partita_types::decode(&again).expect("what was encoded decodes");
        assert_eq!(partita_types::encode(&w2), again, "encoding is stable");
    }
}
