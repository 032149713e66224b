//! Connections: framed reads and queued writes over tokio TCP.
//!
//! Every connection has a writer task fed by a bounded queue of encoded frames; when
//! the queue is full the frame is dropped and counted (consensus retransmits, clients
//! resubmit), so one slow peer never blocks the node. Readers parse frames and hand
//! decoded messages to the caller; a malformed, oversized or wrong-version frame ends
//! that connection only.
//!
//! Readers and writers take any byte stream: a TCP socket's halves, or the halves of a
//! TLS stream ([`tls`]), so the frames are the same over both.

use partita_types::frame::{self, FrameError};
use partita_wire::Wire;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

pub mod tls;

/// The reading half of a connection, plain or TLS.
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a connection, plain or TLS.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// Split a TLS (or any) stream into boxed halves.
pub fn split_boxed<S: AsyncRead + AsyncWrite + Send + 'static>(s: S) -> (BoxRead, BoxWrite) {
    let (rd, wr) = tokio::io::split(s);
    (Box::new(rd), Box::new(wr))
}

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
    rd: BoxRead,
    buf: Vec<u8>,
    start: usize,
    scratch: Box<[u8]>,
}

impl FrameReader {
    pub fn new(rd: impl AsyncRead + Send + Unpin + 'static) -> FrameReader {
        FrameReader::with_prefix(rd, &[])
    }

    /// A reader whose stream already gave `prefix` (bytes read to tell what the
    /// connection is).
    pub fn with_prefix(rd: impl AsyncRead + Send + Unpin + 'static, prefix: &[u8]) -> FrameReader {
        let mut buf = Vec::with_capacity(64 * 1024);
        buf.extend_from_slice(prefix);
        FrameReader {
            rd: Box::new(rd),
            buf,
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
pub fn spawn_writer(mut wr: impl AsyncWrite + Send + Unpin + 'static) -> mpsc::Sender<FrameBytes> {
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
            // (Flushing is a no-op on TCP; TLS may hold the last record until then.)
            if wr.write_all(&buf).await.is_err() || wr.flush().await.is_err() {
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
