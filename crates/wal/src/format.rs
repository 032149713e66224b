//! Byte layout of segments and records, and the pure (I/O-free) parsing used by
//! recovery. See the crate documentation for the format description.

/// First 8 bytes of every segment.
pub const MAGIC: [u8; 8] = *b"PARTWAL1";
/// The only on-disk format version this build reads and writes. 2: the records the
/// runtime writes changed (consensus values gained `parts`, the split form of state
/// partitioning), so a log written by an older build is refused with this version in
/// the message rather than misread. 3: commands became opaque payloads for
/// destination groups with a session, and values carry their time. 4: an EPaxos
/// instance's record holds a batch of commands (and every record change since 3:
/// P-SMR's thread masks, GeoPaxos+'s routes and groups).
pub const FORMAT_VERSION: u32 = 4;
/// Size of the segment header: magic, version, node id, cluster id, first LSN, CRC.
pub const SEGMENT_HEADER_LEN: usize = 8 + 4 + 4 + 8 + 8 + 4;
/// Bytes before each record's payload: `len:u32 | crc32c:u32`.
pub const RECORD_HEADER_LEN: usize = 8;
/// Largest payload accepted. Recovery treats a larger length field as damage
/// immediately, so a flipped high bit in a length cannot make us read (or skip) a
/// gigabyte of "payload".
pub const MAX_RECORD_LEN: usize = 256 << 20;

/// Offset of the header CRC: it covers every header byte before it.
const HEADER_CRC_AT: usize = SEGMENT_HEADER_LEN - 4;

/// Decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub cluster_id: u64,
    pub node_id: u32,
    pub first_lsn: u64,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut h = [0u8; SEGMENT_HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.node_id.to_le_bytes());
        h[16..24].copy_from_slice(&self.cluster_id.to_le_bytes());
        h[24..32].copy_from_slice(&self.first_lsn.to_le_bytes());
        let crc = crc32c::crc32c(&h[..HEADER_CRC_AT]);
        h[HEADER_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decode and validate the header at the start of `buf`. The error is a
    /// human-readable reason; the caller attaches the path.
    pub fn decode(buf: &[u8]) -> Result<SegmentHeader, String> {
        if buf.len() < SEGMENT_HEADER_LEN {
            return Err(format!(
                "file is {} bytes, shorter than the {SEGMENT_HEADER_LEN}-byte header",
                buf.len()
            ));
        }
        let h = &buf[..SEGMENT_HEADER_LEN];
        // Magic first: a file that is not ours at all deserves that message rather
        // than a checksum complaint.
        if h[0..8] != MAGIC {
            return Err(format!(
                "bad magic {:02x?} (expected {:?}): not a Partita WAL segment",
                &h[0..8],
                String::from_utf8_lossy(&MAGIC)
            ));
        }
        let stored = u32_at(h, HEADER_CRC_AT);
        let computed = crc32c::crc32c(&h[..HEADER_CRC_AT]);
        if stored != computed {
            return Err(format!(
                "header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let version = u32_at(h, 8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "unsupported format version {version} (this build reads {FORMAT_VERSION})"
            ));
        }
        Ok(SegmentHeader {
            node_id: u32_at(h, 12),
            cluster_id: u64_at(h, 16),
            first_lsn: u64_at(h, 24),
        })
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// CRC of one record: covers the length field and the payload, so a torn or flipped
/// length is caught by the checksum even when it happens to point at plausible data.
pub(crate) fn record_crc(len_le: [u8; 4], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len_le), payload)
}

/// Append the encoding of one record to `out`.
pub(crate) fn encode_record(out: &mut Vec<u8>, payload: &[u8]) {
    assert!(payload.len() <= MAX_RECORD_LEN, "caller checks the limit");
    let len_le = (payload.len() as u32).to_le_bytes();
    out.extend_from_slice(&len_le);
    out.extend_from_slice(&record_crc(len_le, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Result of trying to read one record at an offset.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RecordAt {
    /// Exactly at the end of the buffer: a clean end.
    End,
    /// A valid record; `next` is the offset just past it.
    Valid {
        payload: std::ops::Range<usize>,
        next: usize,
    },
    /// Not a valid record, with the reason.
    Bad(String),
}

pub(crate) fn read_record(buf: &[u8], off: usize) -> RecordAt {
    debug_assert!(off <= buf.len());
    let avail = buf.len() - off;
    if avail == 0 {
        return RecordAt::End;
    }
    if avail < RECORD_HEADER_LEN {
        return RecordAt::Bad(format!(
            "incomplete record header ({avail} of {RECORD_HEADER_LEN} bytes)"
        ));
    }
    let len_le: [u8; 4] = buf[off..off + 4].try_into().expect("4 bytes");
    let len = u32::from_le_bytes(len_le) as usize;
    if len > MAX_RECORD_LEN {
        return RecordAt::Bad(format!(
            "implausible record length {len} (limit {MAX_RECORD_LEN})"
        ));
    }
    let start = off + RECORD_HEADER_LEN;
    if avail - RECORD_HEADER_LEN < len {
        return RecordAt::Bad(format!(
            "record of {len} bytes extends past the end of the file ({} bytes left)",
            avail - RECORD_HEADER_LEN
        ));
    }
    let stored = u32_at(buf, off + 4);
    let computed = record_crc(len_le, &buf[start..start + len]);
    if stored != computed {
        return RecordAt::Bad(format!(
            "record checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    RecordAt::Valid {
        payload: start..start + len,
        next: start + len,
    }
}

/// Where a segment's record area stops being valid.
#[derive(Debug)]
pub(crate) struct Damage {
    /// Offset of the first byte that does not start a valid record.
    pub offset: usize,
    pub reason: String,
    /// Whether a valid-looking record follows the damage. Its presence is what turns
    /// "torn tail" into "corruption in the middle".
    pub after: AfterDamage,
}

/// What the search for a valid record after a damaged one found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterDamage {
    /// No valid record anywhere after the damage: a torn tail (in the last segment).
    Nothing,
    /// A valid record starts at this offset.
    ValidRecordAt(usize),
    /// The search gave up after checksumming this many bytes (see
    /// [`SCAN_BUDGET_MIN`]): it cannot tell, so the caller must not assume a torn tail.
    Undecided { checksummed: u64 },
}

/// Bytes the search after a damaged record may checksum: this much plus
/// [`SCAN_BUDGET_PER_BYTE`] per byte of the segment. Every offset is a candidate and
/// each may claim a length up to the rest of the file, so without a bound a region of
/// garbage whose bytes read as plausible lengths (0x01 repeated: 16 MiB at every
/// offset) would make recovery quadratic, hours for one segment.
pub(crate) const SCAN_BUDGET_MIN: u64 = 256 << 20;
pub(crate) const SCAN_BUDGET_PER_BYTE: u64 = 16;

/// Result of scanning the record area of one segment.
#[derive(Debug)]
pub(crate) struct SegmentScan {
    /// Payload ranges of the valid records, in order.
    pub records: Vec<std::ops::Range<usize>>,
    /// Offset just past the last valid record.
    pub valid_end: usize,
    pub damage: Option<Damage>,
}

/// Scan all records of a segment image (header included in `buf`).
pub(crate) fn scan_segment(buf: &[u8]) -> SegmentScan {
    assert!(buf.len() >= SEGMENT_HEADER_LEN, "header validated first");
    let mut records = Vec::new();
    let mut off = SEGMENT_HEADER_LEN;
    loop {
        match read_record(buf, off) {
            RecordAt::End => {
                return SegmentScan {
                    records,
                    valid_end: off,
                    damage: None,
                }
            }
            RecordAt::Valid { payload, next } => {
                records.push(payload);
                off = next;
            }
            RecordAt::Bad(reason) => {
                let after = find_valid_record(buf, off + 1);
                return SegmentScan {
                    records,
                    valid_end: off,
                    damage: Some(Damage {
                        offset: off,
                        reason,
                        after,
                    }),
                };
            }
        }
    }
}

/// First offset `>= from` at which a complete, checksum-valid record starts.
///
/// Record boundaries are lost after a damaged record, so we cannot walk on; instead we
/// try every byte offset. A torn tail (bytes of unsynced writes that never fully
/// reached the disk, or zeros from a file extension) almost never contains a valid
/// record: an all-zero region fails the CRC (crc32c of a zero length is not zero),
/// and random bytes pass with probability 2^-32 per offset. Real records after the
/// damage, however, always will be found, which is the point: their presence means
/// the damage is not a torn tail and dropping the rest would lose data.
///
/// The checksumming is bounded (see [`SCAN_BUDGET_MIN`]); past the bound the answer is
/// [`AfterDamage::Undecided`], never a guess.
fn find_valid_record(buf: &[u8], from: usize) -> AfterDamage {
    let budget = SCAN_BUDGET_MIN + SCAN_BUDGET_PER_BYTE * buf.len() as u64;
    let mut checksummed = 0u64;
    for o in from..buf.len().saturating_sub(RECORD_HEADER_LEN - 1) {
        let len = u32_at(buf, o) as usize;
        let fits = len <= MAX_RECORD_LEN && len <= buf.len() - o - RECORD_HEADER_LEN;
        if fits {
            checksummed += len as u64;
            if checksummed > budget {
                return AfterDamage::Undecided { checksummed };
            }
            if matches!(read_record(buf, o), RecordAt::Valid { .. }) {
                return AfterDamage::ValidRecordAt(o);
            }
        }
    }
    AfterDamage::Nothing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(payloads: &[&[u8]]) -> Vec<u8> {
        let mut buf = SegmentHeader {
            cluster_id: 7,
            node_id: 3,
            first_lsn: 1,
        }
        .encode()
        .to_vec();
        for p in payloads {
            encode_record(&mut buf, p);
        }
        buf
    }

    #[test]
    fn header_round_trip_and_damage() {
        let h = SegmentHeader {
            cluster_id: 0xdead_beef_0123_4567,
            node_id: 42,
            first_lsn: 1001,
        };
        let enc = h.encode();
        assert_eq!(SegmentHeader::decode(&enc), Ok(h));
        for bit in 0..SEGMENT_HEADER_LEN * 8 {
            let mut bad = enc;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(SegmentHeader::decode(&bad).is_err(), "bit {bit} undetected");
        }
        assert!(SegmentHeader::decode(&enc[..SEGMENT_HEADER_LEN - 1]).is_err());
    }

    #[test]
    fn zero_fill_is_not_a_record() {
        // The premise of torn-tail detection: a zeroed tail never parses as a record.
        let buf = vec![0u8; 64];
        assert!(matches!(read_record(&buf, 0), RecordAt::Bad(_)));
        assert_eq!(find_valid_record(&buf, 0), AfterDamage::Nothing);
    }

    #[test]
    fn scan_detects_every_single_bit_flip_in_records() {
        let clean = segment(&[b"alpha", b"", b"gamma-gamma"]);
        let scan = scan_segment(&clean);
        assert_eq!(scan.records.len(), 3);
        assert!(scan.damage.is_none());
        for bit in SEGMENT_HEADER_LEN * 8..clean.len() * 8 {
            let mut bad = clean.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let scan = scan_segment(&bad);
            assert!(scan.damage.is_some(), "bit {bit} undetected");
            assert!(scan.records.len() < 3);
        }
    }

    #[test]
    fn damage_followed_by_valid_record_is_reported() {
        let mut buf = segment(&[b"first", b"second", b"third"]);
        // Flip a payload bit of "first": "second" and "third" follow intact.
        buf[SEGMENT_HEADER_LEN + RECORD_HEADER_LEN] ^= 0x10;
        let scan = scan_segment(&buf);
        let d = scan.damage.expect("damage");
        assert_eq!(d.offset, SEGMENT_HEADER_LEN);
        assert_eq!(
            d.after,
            AfterDamage::ValidRecordAt(SEGMENT_HEADER_LEN + RECORD_HEADER_LEN + 5)
        );
    }

    /// Garbage whose every offset reads as a long plausible record (0x01 repeated: a
    /// 16 MiB length) would make the search quadratic; it stops at its budget and says
    /// it cannot tell, and a real record after ordinary garbage is still found.
    #[test]
    fn the_search_after_damage_is_bounded() {
        let mut buf = segment(&[b"first"]);
        buf.extend(std::iter::repeat_n(0x01u8, 24 << 20));
        let started = std::time::Instant::now();
        let scan = scan_segment(&buf);
        let d = scan.damage.expect("damage");
        match d.after {
            AfterDamage::Undecided { checksummed } => {
                let budget = SCAN_BUDGET_MIN + SCAN_BUDGET_PER_BYTE * buf.len() as u64;
                assert!(checksummed > budget && checksummed <= budget + (MAX_RECORD_LEN as u64));
            }
            other => panic!("expected Undecided, got {other:?}"),
        }
        eprintln!("gave up after {:?}", started.elapsed());

        let mut buf = segment(&[b"first"]);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..(1 << 20) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf.push(x as u8);
        }
        let real = buf.len();
        encode_record(&mut buf, b"later");
        let d = scan_segment(&buf).damage.expect("damage");
        assert_eq!(d.after, AfterDamage::ValidRecordAt(real));
    }
}
