//! IP multicast for Ring Paxos's Phase 2A (cluster file `[multicast]`,
//! `partita_config::multicast`): the coordinator's value goes out once, as one UDP
//! datagram to its group, instead of one TCP frame per receiver.
//!
//! # Datagrams
//!
//! Their format is [`partita_wire::datagram`]'s: a header naming the cluster and the
//! sending node, then the message as the same frame TCP carries. A receiver takes only
//! a `Phase2A` of its own cluster from another node of the file, whole and with a good
//! checksum; anything else is dropped and counted (`multicast_refused`), never fatal.
//! The core then checks the message as it checks every peer message (ballot, instance
//! range, membership).
//!
//! # Who joins which group
//!
//! Partition p's group ([`MulticastSection::group_of`]) is joined by every acceptor and
//! by the replicas of partition p (without partitioning: one group, every acceptor and
//! replica). The sender takes a run of identical `Phase2A` sends from one step of the
//! core: if their destinations are exactly the group's members other than itself, one
//! datagram replaces them; otherwise (a retransmission to one acceptor, a value sent
//! whole to the acceptors of a partitioned cluster) they go over TCP as before. So a
//! datagram reaches nobody the core did not address.
//!
//! # Loss
//!
//! UDP may drop a datagram (a full socket buffer, a lost fragment): to Ring Paxos that
//! is a lost Phase 2A. An acceptor that gets the ring's vote without the value holds
//! the vote, and the coordinator's retransmission (over TCP) completes it; a learner
//! that misses a value sees the gap and asks for it. Sends that would block fall back
//! to TCP (`multicast_fallback_tcp`).

use partita_config::multicast::{MulticastSection, DATAGRAM_BYTES_MAX};
use partita_config::{ClusterConfig, Role};
use partita_consensus::Msg;
use partita_types::NodeId;
use partita_wire::datagram::{encode_datagram, parse_datagram, HEADER_BYTES};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tracing::{info, warn};

/// The sending side of a node, and what its receiving task counts.
pub struct Multicast {
    section: MulticastSection,
    cluster_id: u64,
    me: NodeId,
    socket: UdpSocket,
    /// Per group: the nodes that joined it, ascending.
    members: Vec<Vec<NodeId>>,
    pub received: Arc<AtomicU64>,
    pub refused: Arc<AtomicU64>,
}

/// The groups node `n` joins.
fn groups_of(cfg: &ClusterConfig, n: NodeId, count: u32) -> Vec<u32> {
    let Some(node) = cfg.node(n) else {
        return Vec::new();
    };
    if node.roles.contains(&Role::Acceptor) {
        return (0..count).collect();
    }
    if node.roles.contains(&Role::Replica) {
        return vec![node.partition.unwrap_or(0)];
    }
    Vec::new()
}

fn ipv4(addr: SocketAddr) -> anyhow::Result<Ipv4Addr> {
    match addr {
        SocketAddr::V4(a) => Ok(*a.ip()),
        SocketAddr::V6(_) => anyhow::bail!("IP multicast needs IPv4 node addresses"),
    }
}

impl Multicast {
    /// Open node `me`'s sockets: one to send from its own address, and, if it joins a
    /// group, one that receives them, read by a task that feeds `deliver`.
    pub fn open(
        cfg: &ClusterConfig,
        me: NodeId,
        deliver: impl Fn(NodeId, Msg) -> bool + Send + 'static,
    ) -> anyhow::Result<Option<Multicast>> {
        use anyhow::Context;
        let Some(section) = cfg.multicast.clone() else {
            return Ok(None);
        };
        let count = cfg.partitioning.partitions.max(1);
        let ip = ipv4(cfg.addr(me))?;
        let mut members = vec![Vec::new(); count as usize];
        for n in &cfg.nodes {
            for g in groups_of(cfg, n.id, count) {
                members[g as usize].push(n.id);
            }
        }
        let send = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        send.set_multicast_if_v4(&ip)?;
        send.set_multicast_ttl_v4(1)?;
        send.set_multicast_loop_v4(false)?;
        let _ = send.set_send_buffer_size(4 << 20);
        send.bind(&SocketAddr::V4(SocketAddrV4::new(ip, 0)).into())
            .with_context(|| format!("binding a UDP socket to {ip}"))?;
        send.set_nonblocking(true)?;
        let mine = groups_of(cfg, me, count);
        let received = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        if !mine.is_empty() {
            let recv = socket2::Socket::new(
                socket2::Domain::IPV4,
                socket2::Type::DGRAM,
                Some(socket2::Protocol::UDP),
            )?;
            recv.set_reuse_address(true)?;
            let _ = recv.set_recv_buffer_size(8 << 20);
            recv.bind(
                &SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, section.port)).into(),
            )
            .with_context(|| format!("binding UDP port {} for multicast", section.port))?;
            for &g in &mine {
                recv.join_multicast_v4(&section.group_of(g), &ip)
                    .with_context(|| format!("joining {} on {ip}", section.group_of(g)))?;
            }
            recv.set_nonblocking(true)?;
            let sock = tokio::net::UdpSocket::from_std(recv.into())?;
            let nodes: Vec<NodeId> = cfg.nodes.iter().map(|n| n.id).collect();
            let (cluster_id, rc, rf) = (cfg.cluster.id, received.clone(), refused.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65_536];
                loop {
                    // One wake-up, then every datagram already queued.
                    if let Err(e) = sock.readable().await {
                        warn!("multicast receive failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                    loop {
                        let n = match sock.try_recv(&mut buf) {
                            Ok(n) => n,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            Err(e) => {
                                warn!("multicast receive failed: {e}");
                                break;
                            }
                        };
                        match parse_datagram(&buf[..n], cluster_id, me, &nodes) {
                            Ok((from, msg)) => {
                                rc.fetch_add(1, Ordering::Relaxed);
                                if !deliver(from, msg) {
                                    return;
                                }
                            }
                            Err(why) => {
                                if rf.fetch_add(1, Ordering::Relaxed) % 100 == 0 {
                                    warn!("multicast datagram dropped: {why}");
                                }
                            }
                        }
                    }
                }
            });
            info!(
                node = me,
                groups = ?mine.iter().map(|&g| section.group_of(g)).collect::<Vec<_>>(),
                port = section.port,
                "IP multicast on: Phase 2A values arrive as UDP datagrams"
            );
        }
        Ok(Some(Multicast {
            section,
            cluster_id: cfg.cluster.id,
            me,
            socket: send.into(),
            members,
            received,
            refused,
        }))
    }

    /// The group that carries `msg` to exactly `to` (ascending, distinct), if any.
    pub fn group_for(&self, msg: &Msg, to: &[NodeId]) -> Option<u32> {
        let Msg::Phase2A { part, .. } = msg else {
            return None;
        };
        let g = match part {
            Some(p) => p.index,
            None if self.members.len() == 1 => 0,
            None => return None,
        };
        let members = self.members.get(g as usize)?;
        let others = members.iter().filter(|&&n| n != self.me);
        (others.clone().count() == to.len() && others.zip(to).all(|(a, b)| a == b)).then_some(g)
    }

    /// Send `frame` (a `Wire::Peer` frame) to group `g`. `false`: not sent (too big, or
    /// the socket would block): the caller sends over TCP.
    pub fn send(&self, g: u32, frame: &[u8]) -> bool {
        if frame.len() + HEADER_BYTES > DATAGRAM_BYTES_MAX {
            return false;
        }
        let d = encode_datagram(self.cluster_id, self.me, frame);
        let to = SocketAddrV4::new(self.section.group_of(g), self.section.port);
        match self.socket.send_to(&d, to) {
            Ok(n) => n == d.len(),
            Err(e) => {
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    warn!("multicast send to {to} failed: {e}");
                }
                false
            }
        }
    }
}
