//! Connections: framed reads and queued writes over tokio TCP.
//!
//! Every connection has a writer task fed by a bounded queue of encoded frames; when
//! the queue is full the frame is dropped and counted (consensus retransmits, clients
//! resubmit), so one slow peer never blocks the node. Readers parse frames and hand
//! decoded messages to the caller; a malformed, oversized or wrong-version frame ends
//! that connection only.

use partita_types::frame::{self, FrameError};
use partita_wire::Wire;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

pub type FrameBytes = Arc<Vec<u8>>;

/// Bound of a connection's outgoing queue, in frames.
pub const SEND_QUEUE_FRAMES_MAX: usize = 65_536;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("connection closed")]
    Closed,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    #[error("{0}")]
    Decode(#[from] partita_types::DecodeError),
}

/// Reads whole frames from a stream. [`FrameReader::next`] is cancel-safe: bytes enter
/// the buffer only once a read completed, so it can sit in `select!` or under a timeout.
pub struct FrameReader {
    rd: OwnedReadHalf,
    buf: Vec<u8>,
    start: usize,
    scratch: Box<[u8]>,
}

impl FrameReader {
    pub fn new(rd: OwnedReadHalf) -> FrameReader {
        FrameReader {
            rd,
            buf: Vec::with_capacity(64 * 1024),
            start: 0,
            scratch: vec![0; 64 * 1024].into_boxed_slice(),
        }
    }

    pub async fn next(&mut self) -> Result<Wire, ReadError> {
        loop {
            if let Some((range, used)) = frame::parse_frame(&self.buf[self.start..])? {
                let payload = &self.buf[self.start + range.start..self.start + range.end];
                let w = partita_types::decode::<Wire>(payload);
                self.start += used;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                return Ok(w?);
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let n = self.rd.read(&mut self.scratch).await?;
            if n == 0 {
                return Err(ReadError::Closed);
            }
            self.buf.extend_from_slice(&self.scratch[..n]);
        }
    }
}

/// Spawn the writer task of a connection; returns its queue.
pub fn spawn_writer(mut wr: OwnedWriteHalf) -> mpsc::Sender<FrameBytes> {
    let (tx, mut rx) = mpsc::channel::<FrameBytes>(SEND_QUEUE_FRAMES_MAX);
    tokio::spawn(async move {
        let mut buf: Vec<u8> = Vec::with_capacity(256 * 1024);
        while let Some(f) = rx.recv().await {
            buf.extend_from_slice(&f);
            // Coalesce whatever else is queued into one write.
            while buf.len() < 1 << 20 {
                match rx.try_recv() {
                    Ok(f) => buf.extend_from_slice(&f),
                    Err(_) => break,
                }
            }
            if wr.write_all(&buf).await.is_err() {
                break;
            }
            buf.clear();
        }
        let _ = wr.shutdown().await;
    });
    tx
}

/// The lowest port of the kernel's ephemeral range (outgoing connections take their
/// local port from it), from `/proc/sys/net/ipv4/ip_local_port_range`; Linux's
/// default when that file cannot be read.
fn ephemeral_port_min() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// `count` consecutive ports on 127.0.0.1, starting at a random multiple of `count`,
/// that are free now and lie below the kernel's ephemeral range.
///
/// Below the ephemeral range because a node that restarts must bind its port again:
/// a port the kernel hands out (`bind(0)`) may meanwhile have become the local end of
/// some outgoing connection (a peer reconnecting, a client), and then the restarted
/// node fails with `Address already in use` until that connection closes. Tests and
/// local clusters take their ports from here.
pub fn free_port_block(count: u16) -> std::io::Result<u16> {
    use rand::Rng;
    const LOW: u16 = 10_000;
    let count = count.max(1);
    let high = ephemeral_port_min().max(LOW + 2 * count);
    let slots = (high - LOW) / count - 1;
    let mut rng = rand::thread_rng();
    for _ in 0..200 {
        let base = LOW + rng.gen_range(0..slots) * count;
        let free = (0..count).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if free {
            return Ok(base);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no {count} consecutive free ports between {LOW} and {high}"),
    ))
}
