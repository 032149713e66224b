//! Length-prefixed, versioned, checksummed frames.
//!
//! Layout, little endian: `len:u32 | version:u8 | crc32c:u32 | payload[len - 5]`.
//! `len` counts everything after itself. The checksum covers the payload only.
//! A frame whose length exceeds [`FRAME_BYTES_MAX`], whose version is not
//! [`FRAME_VERSION`] or whose checksum does not match is refused with a typed error;
//! the driver closes that one connection and keeps serving everyone else.

/// The only frame version this build speaks. 2: Ring Paxos Phase 2A messages and
/// consensus values changed (parts of split values). 3: commands carry opaque
/// payloads for destination groups, replies an outcome, and replies to clients a hint
/// of who leads. 4: an EPaxos instance carries a batch of commands. Peers of
/// different builds refuse each other's frames instead of misreading them.
pub const FRAME_VERSION: u8 = 4;
/// Upper bound of a frame (header excluded). A batch is 8 KiB by default, a snapshot
/// chunk at most a few MiB; anything larger is a peer bug or an attack.
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// Bytes before the payload: length, version, checksum.
pub const FRAME_HEADER_BYTES: usize = 4 + 1 + 4;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes exceeds the limit of {FRAME_BYTES_MAX}")]
    Oversized(usize),
    #[error("frame length {0} is shorter than its header")]
    Undersized(usize),
    #[error("frame version {0} is not the supported version {FRAME_VERSION}")]
    Version(u8),
    #[error("frame checksum mismatch: header says {expected:#010x}, payload has {actual:#010x}")]
    Checksum { expected: u32, actual: u32 },
}

/// Append one frame holding `payload` to `out`.
pub fn write_frame(out: &mut Vec<u8>, payload: &[u8]) {
    assert!(
        payload.len() + 5 <= FRAME_BYTES_MAX,
        "payload too large for a frame"
    );
    let len = (payload.len() + 5) as u32;
    out.extend_from_slice(&len.to_le_bytes());
    out.push(FRAME_VERSION);
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Try to take one frame from the front of `buf`. Returns `Ok(None)` when more bytes
/// are needed, `Ok(Some((payload_range, consumed)))` for a whole, valid frame.
pub fn parse_frame(buf: &[u8]) -> Result<Option<(std::ops::Range<usize>, usize)>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(FrameError::Oversized(len));
    }
    if len < 5 {
        return Err(FrameError::Undersized(len));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    let version = buf[4];
    if version != FRAME_VERSION {
        return Err(FrameError::Version(version));
    }
    let expected = u32::from_le_bytes(buf[5..9].try_into().unwrap());
    let payload = 9..4 + len;
    let actual = crc32c::crc32c(&buf[payload.clone()]);
    if expected != actual {
        return Err(FrameError::Checksum { expected, actual });
    }
    Ok(Some((payload, 4 + len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_partial_input() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello");
        write_frame(&mut buf, b"");
        for cut in 0..9 + 5 {
            assert_eq!(parse_frame(&buf[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (range, used) = parse_frame(&buf).unwrap().unwrap();
        assert_eq!(&buf[range], b"hello");
        let (range, used2) = parse_frame(&buf[used..]).unwrap().unwrap();
        assert!(range.is_empty());
        assert_eq!(used + used2, buf.len());
    }

    #[test]
    fn refuses_bad_frames() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"payload");
        let mut bad = buf.clone();
        bad[10] ^= 1;
        assert!(matches!(
            parse_frame(&bad),
            Err(FrameError::Checksum { .. })
        ));
        let mut bad = buf.clone();
        bad[4] = 9;
        assert_eq!(parse_frame(&bad), Err(FrameError::Version(9)));
        let mut bad = buf.clone();
        bad[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            parse_frame(&bad),
            Err(FrameError::Oversized(u32::MAX as usize))
        );
        let mut bad = buf;
        bad[0..4].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(parse_frame(&bad), Err(FrameError::Undersized(2)));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_frame(&bytes);
        }
    }
}
