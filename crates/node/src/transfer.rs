//! State transfer: fetching a peer replica's checkpoint in chunks.
//!
//! A replica whose learner is told by an acceptor that the instances it needs were
//! truncated ([`Msg::Truncated`]) asks another replica for its newest checkpoint
//! covering at least the truncated prefix. The checkpoint travels in chunks of at most
//! [`CheckpointConfig::chunk_bytes`] (1 MiB by default; frames are bounded at 64 MiB),
//! each request naming the checkpoint's instance and a byte offset, with a window of
//! requests outstanding. Every chunk repeats the checkpoint's total size and its
//! CRC32C (the checkpoint's trailer, over every byte before it); the assembled bytes
//! must match that checksum, then pass the checkpoint's own validation, before
//! anything is restored.
//!
//! The fetcher tolerates loss, duplication and reordering (chunks are placed by
//! offset, missing ones are requested again after `transfer_timeout_ticks`), a peer
//! that replaces its checkpoint meanwhile (it answers with the start of its newest,
//! and the transfer restarts on that one), and a peer that has nothing suitable or
//! stops answering (the next replica is asked).

use crate::CheckpointConfig;
use partita_consensus::Msg;
use partita_types::{Instance, NodeId};
use std::collections::BTreeMap;

/// Largest chunk a replica serves, whatever it is asked for (far below the frame bound).
pub const CHUNK_BYTES_MAX: u64 = 8 << 20;

/// What became of one chunk.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ChunkOutcome {
    /// Not for this transfer, or malformed: counted under this name and ignored.
    Ignored(&'static str),
    /// The peer has no checkpoint covering what we need: try another.
    PeerLacks,
    /// Stored; the transfer goes on.
    Progress,
    /// Every chunk is here and the checksum matches.
    Complete,
    /// The assembled bytes do not match the announced checksum.
    BadChecksum,
}

pub(crate) struct Transfer {
    /// The checkpoint must cover at least this instance.
    pub min_instance: Instance,
    pub peer: NodeId,
    /// Replicas asked so far for this transfer (to pace rounds over all of them).
    pub peers_tried: usize,
    /// The checkpoint being fetched: 0 until the first chunk names it.
    pub instance: Instance,
    pub total: u64,
    pub crc32c: u32,
    pub buf: Vec<u8>,
    received: Vec<bool>,
    pub received_chunks: u64,
    /// Next chunk index not yet requested.
    next_chunk: u64,
    /// Chunk index → tick it was (last) requested.
    outstanding: BTreeMap<u64, u64>,
    pub last_progress_tick: u64,
    pub timeouts: u64,
}

impl Transfer {
    pub fn new(min_instance: Instance, peer: NodeId, now_tick: u64) -> Transfer {
        Transfer {
            min_instance,
            peer,
            peers_tried: 1,
            instance: 0,
            total: 0,
            crc32c: 0,
            buf: Vec::new(),
            received: Vec::new(),
            received_chunks: 0,
            next_chunk: 0,
            outstanding: BTreeMap::new(),
            last_progress_tick: now_tick,
            timeouts: 0,
        }
    }

    fn chunks(&self, cfg: &CheckpointConfig) -> u64 {
        self.total.div_ceil(cfg.chunk_bytes)
    }

    /// Forget what was fetched and start over with `peer` (the same or another).
    pub fn restart(&mut self, peer: NodeId, now_tick: u64) {
        let (min, tried) = (self.min_instance, self.peers_tried);
        *self = Transfer::new(min, peer, now_tick);
        self.peers_tried = tried + 1;
    }

    fn request(&self, chunk: u64, cfg: &CheckpointConfig) -> Msg {
        Msg::CheckpointRequest {
            instance: self.instance,
            min_instance: self.min_instance,
            offset: chunk * cfg.chunk_bytes,
            len: cfg.chunk_bytes,
        }
    }

    /// The requests to send now: the first one before the checkpoint is known, then
    /// new chunks up to the window.
    pub fn requests(&mut self, cfg: &CheckpointConfig, now_tick: u64) -> Vec<Msg> {
        let mut msgs = Vec::new();
        if self.instance == 0 {
            if self.outstanding.is_empty() {
                self.outstanding.insert(0, now_tick);
                msgs.push(self.request(0, cfg));
            }
            return msgs;
        }
        let chunks = self.chunks(cfg);
        while (self.outstanding.len() as u64) < cfg.transfer_window_chunks
            && self.next_chunk < chunks
        {
            let c = self.next_chunk;
            self.next_chunk += 1;
            if !self.received[c as usize] {
                self.outstanding.insert(c, now_tick);
                msgs.push(self.request(c, cfg));
            }
        }
        msgs
    }

    /// Requests unanswered for `transfer_timeout_ticks`, sent again. Returns them and
    /// counts a timeout if there were any (or if nothing is outstanding at all, e.g.
    /// after every peer said it lacks a checkpoint).
    pub fn resend_stale(&mut self, cfg: &CheckpointConfig, now_tick: u64) -> Vec<Msg> {
        if now_tick.saturating_sub(self.last_progress_tick) < cfg.transfer_timeout_ticks {
            return Vec::new();
        }
        self.timeouts += 1;
        self.last_progress_tick = now_tick;
        if self.outstanding.is_empty() {
            return self.requests(cfg, now_tick);
        }
        let stale: Vec<u64> = self.outstanding.keys().copied().collect();
        stale
            .into_iter()
            .map(|c| {
                self.outstanding.insert(c, now_tick);
                self.request(c, cfg)
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn on_chunk(
        &mut self,
        cfg: &CheckpointConfig,
        now_tick: u64,
        instance: Instance,
        offset: u64,
        total: u64,
        crc32c: u32,
        data: &[u8],
    ) -> ChunkOutcome {
        if total == 0 {
            self.outstanding.clear();
            return ChunkOutcome::PeerLacks;
        }
        if instance < self.min_instance {
            return ChunkOutcome::Ignored("dropped_chunk_too_old");
        }
        if instance != self.instance {
            // The first chunk of a transfer, or the peer moved on to a newer
            // checkpoint: (re)start on this one, from its first chunk.
            if offset != 0 {
                return ChunkOutcome::Ignored("dropped_chunk_of_another_checkpoint");
            }
            if total > cfg.transfer_bytes_max {
                return ChunkOutcome::Ignored("dropped_chunk_checkpoint_too_large");
            }
            let (min, peer, tried) = (self.min_instance, self.peer, self.peers_tried);
            *self = Transfer::new(min, peer, now_tick);
            self.peers_tried = tried;
            self.instance = instance;
            self.total = total;
            self.crc32c = crc32c;
            self.buf = vec![0; total as usize];
            let chunks = self.chunks(cfg);
            self.received = vec![false; chunks as usize];
            // The first chunk answers the request for chunk 0.
            self.next_chunk = 1;
        } else if total != self.total || crc32c != self.crc32c {
            return ChunkOutcome::Ignored("dropped_chunk_inconsistent");
        }
        let chunks = self.chunks(cfg);
        if !offset.is_multiple_of(cfg.chunk_bytes) || offset / cfg.chunk_bytes >= chunks {
            return ChunkOutcome::Ignored("dropped_chunk_bad_offset");
        }
        let c = offset / cfg.chunk_bytes;
        let len = cfg.chunk_bytes.min(total - offset);
        if data.len() as u64 != len {
            return ChunkOutcome::Ignored("dropped_chunk_bad_length");
        }
        self.outstanding.remove(&c);
        if self.received[c as usize] {
            return ChunkOutcome::Ignored("dropped_chunk_duplicate");
        }
        self.received[c as usize] = true;
        self.received_chunks += 1;
        self.buf[offset as usize..(offset + len) as usize].copy_from_slice(data);
        self.last_progress_tick = now_tick;
        self.timeouts = 0;
        if self.received_chunks < chunks {
            return ChunkOutcome::Progress;
        }
        // The announced checksum is the checkpoint's CRC32C trailer, over every byte
        // before it: check both that it covers what arrived and that the trailer that
        // arrived is the one announced.
        let body = self.buf.len().saturating_sub(4);
        if self.buf.len() < 4
            || crc32c::crc32c(&self.buf[..body]) != self.crc32c
            || self.buf[body..] != self.crc32c.to_le_bytes()
        {
            return ChunkOutcome::BadChecksum;
        }
        ChunkOutcome::Complete
    }

    /// Bounds that hold whatever arrived.
    pub fn invariants(&self, cfg: &CheckpointConfig) {
        assert!(self.outstanding.len() as u64 <= cfg.transfer_window_chunks.max(1));
        if self.instance != 0 {
            assert_eq!(self.buf.len() as u64, self.total, "transfer buffer size");
            assert_eq!(self.received.len() as u64, self.chunks(cfg));
            assert!(self.received_chunks <= self.chunks(cfg));
            assert!(self.instance >= self.min_instance);
        } else {
            assert_eq!(self.received_chunks, 0);
        }
    }
}

/// The answer of a replica holding checkpoint `held` (instance and bytes, if any) to
/// a chunk request.
pub(crate) fn serve(
    held: Option<(Instance, &[u8], u32)>,
    instance: Instance,
    min_instance: Instance,
    offset: u64,
    len: u64,
) -> Result<Msg, &'static str> {
    let none = |have: Instance| Msg::CheckpointChunk {
        instance: have,
        offset: 0,
        total: 0,
        crc32c: 0,
        data: Vec::new(),
    };
    let Some((have, bytes, crc)) = held else {
        return Ok(none(0));
    };
    if have < min_instance {
        return Ok(none(have));
    }
    // Asked for a checkpoint we replaced since: the start of the newest instead.
    let offset = if instance != have { 0 } else { offset };
    let total = bytes.len() as u64;
    if offset >= total || len == 0 {
        return Err("dropped_chunk_request_malformed");
    }
    let end = offset + len.min(CHUNK_BYTES_MAX).min(total - offset);
    Ok(Msg::CheckpointChunk {
        instance: have,
        offset,
        total,
        crc32c: crc,
        data: bytes[offset as usize..end as usize].to_vec(),
    })
}
