//! IP multicast for Ring Paxos (cluster file `[multicast]`, optional): paper 001's
//! dissemination. The coordinator sends each Phase 2A value (with the decisions riding
//! on it) once, as a UDP datagram to a group, instead of once per receiver over TCP.
//!
//! ```toml
//! [multicast]
//! group = "239.77.0.1"   # the group of partition 0 (or of the whole cluster)
//! port = 7700            # the UDP port every group uses
//! ```
//!
//! With state partitioning, partition p's values go to group `group + p` (the last
//! octets counted up), joined by the acceptors and the replicas of partition p; without
//! it, one group joined by the acceptors and the replicas. Anything else (votes, the
//! coordinator's retransmissions of what TCP carried before, learners' gap requests
//! and their replies, decisions without a value) stays on TCP. A lost datagram is a
//! lost Phase 2A: the acceptor holds the ring's vote until the coordinator retransmits,
//! and a learner that missed a value asks for it like any gap.
//!
//! Datagrams carry no authentication, so the section needs plain TCP said on purpose
//! (`[tls] insecure = true`): a cluster with mutual TLS would otherwise accept values
//! from anyone on the network. Nodes need addresses off loopback (an interface that
//! carries multicast: a LAN, or the bridge of `partita up --netns`).

use partita_types::FieldError;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;

/// The `[multicast]` section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MulticastSection {
    /// The first group (IPv4, 224.0.0.0/4).
    pub group: Ipv4Addr,
    /// The UDP port of every group.
    pub port: u16,
}

/// Datagrams larger than this go over TCP instead (UDP's limit, less headers).
pub const DATAGRAM_BYTES_MAX: usize = 65_000;

impl MulticastSection {
    /// The group of partition `p` (0 without partitioning).
    pub fn group_of(&self, p: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.group).wrapping_add(p))
    }

    /// The section's own fields, for a cluster of `partitions` partitions.
    pub fn validate(&self, partitions: u32) -> Result<(), FieldError> {
        let f = |field: &str, m: String| Err(FieldError::new(format!("multicast.{field}"), m));
        let last = self.group_of(partitions.max(1) - 1);
        if !self.group.is_multicast() || !last.is_multicast() || last < self.group {
            return f(
                "group",
                format!(
                    "{} is not an IPv4 multicast group (224.0.0.0/4){}",
                    self.group,
                    if partitions > 1 {
                        format!(", or the groups of {partitions} partitions leave it")
                    } else {
                        String::new()
                    }
                ),
            );
        }
        if self.port == 0 {
            return f("port", "must be a UDP port (1..=65535)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_their_checks() {
        let s = MulticastSection {
            group: Ipv4Addr::new(239, 77, 0, 1),
            port: 7700,
        };
        assert!(s.validate(4).is_ok());
        assert_eq!(s.group_of(3), Ipv4Addr::new(239, 77, 0, 4));
        let unicast = MulticastSection {
            group: Ipv4Addr::new(10, 0, 0, 1),
            ..s.clone()
        };
        assert_eq!(unicast.validate(1).unwrap_err().field, "multicast.group");
        let edge = MulticastSection {
            group: Ipv4Addr::new(239, 255, 255, 254),
            ..s.clone()
        };
        assert!(edge.validate(2).is_ok());
        assert!(edge.validate(3).is_err(), "240.0.0.0 is not multicast");
        let no_port = MulticastSection { port: 0, ..s };
        assert_eq!(no_port.validate(1).unwrap_err().field, "multicast.port");
    }
}
