//! The network model: one directed link per ordered pair of endpoints (nodes and
//! clients).
//!
//! A message of `bytes` sent on a link at time `now`:
//! 1. waits for the link to finish sending what was queued before it, then occupies it
//!    for `bytes / bandwidth` (serialization delay: large values slow the messages behind
//!    them);
//! 2. is lost with probability `loss`, or dropped if the link is cut (partition);
//! 3. arrives after the link's propagation latency plus a uniform jitter, plus, with
//!    probability `reorder`, an extra uniform delay of up to `reorder_ns_max` (which lets
//!    later messages overtake it);
//! 4. with probability `dup` is delivered a second time, later.
//!
//! A link cut while a message is in flight drops the message on arrival, as a severed
//! cable would. Cuts are counted per link, so overlapping partitions heal independently.
//!
//! **Network cards** (optional, [`NetParams::nic`]; the experiment mode uses them, the
//! swarm does not): instead of per-link serialization, every endpoint has one card of
//! `bytes_per_s` shared by all its links, as a machine on a switched LAN has. A message
//! occupies the sender's card for `wire bytes / bandwidth` after what the card was
//! already sending, travels the link's latency, and finishes arriving no earlier than
//! `wire bytes / bandwidth` into the receiver's card (its switch port; cut-through: the
//! two serializations overlap). Wire bytes add `overhead_bytes` per `mss_bytes`
//! segment (TCP/IP/Ethernet headers). The receiving port is a timeline of the
//! receptions reserved on it ([`Port`]): a message takes the first free stretch of its
//! length that starts no earlier than its own propagation allows, so messages queue at
//! a busy port in the order they reach it, and one still crossing an ocean reserves
//! only its own future stretch, never holding up a message from next door that
//! arrives first (a port that queued in send order made a client beside its replica
//! wait for the replica's answer from another continent).
//!
//! **Client machines** (optional, [`NicParams::client_cards`]): the clients share that
//! many cards, as sessions share connections in `partita bench --connections N`
//! (client `i` of `c` on card `⌊i·N/c⌋`, so each card holds a contiguous range of
//! clients, as the bench's groups do): a client machine that keeps
//! a window of commands outstanding, as paper 002's clients keep 50, sends and
//! receives them all through its one card. Each client keeps its own links (their
//! latencies and cuts).
//!
//! **IP multicast** (optional, [`NicParams::multicast`], a what-if for experiments: paper
//! 001's Ring Paxos sent each value to acceptors and learners by IP multicast): a message
//! a node sends to several peers in one step (a group send, `copy` in
//! [`Network::send`]) occupies the sender's card once, as one datagram the switch
//! replicates; each copy still takes its receiver's port for its full length. Without
//! it, every copy is a TCP stream of its own and occupies the sender's card again.
//!
//! **Regions** (optional, the cluster file's `[wan]`, [`Network::apply_wan`]): a link
//! between endpoints of two different regions has the matrix's one-way delay (RTT / 2)
//! as its propagation latency instead of the LAN latency drawn for it; jitter,
//! bandwidth, cards and faults stay as configured. The real processes delay the same
//! links by the same amounts (the runtime between nodes, the client on its side), so
//! both drivers run the same emulated WAN.
//!
//! Invariants: arrivals are never before the send time; a cut link delivers nothing.

use crate::queue::Time;
use partita_config::{Region, Wan};
use partita_types::NodeId;
use rand::Rng;
use serde::Serialize;

/// Who sends or receives: a node of the cluster, or a simulated client (by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Endpoint {
    Node(NodeId),
    Client(u32),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Node(n) => write!(f, "n{n}"),
            Endpoint::Client(c) => write!(f, "c{c}"),
        }
    }
}

/// Timing of a class of links.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinkTiming {
    /// Mean one-way propagation latency; each link draws its own around it.
    pub latency_ns: u64,
    /// Each link's latency is the mean times a factor drawn in `1/spread..=spread`.
    pub latency_spread: f64,
    /// Uniform extra delay per message, `0..=jitter_ns`.
    pub jitter_ns: u64,
    /// Link bandwidth.
    pub bandwidth_bytes_per_s: u64,
}

/// Faults of a class of links (all zero: a perfect network).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LinkFaults {
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
    pub reorder_ns_max: u64,
}

impl LinkFaults {
    pub fn none() -> LinkFaults {
        LinkFaults::default()
    }
}

/// Everything the network needs at construction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetParams {
    /// Links between nodes.
    pub peer: LinkTiming,
    /// Links between a client and a node (both directions).
    pub client: LinkTiming,
    pub peer_faults: LinkFaults,
    pub client_faults: LinkFaults,
    /// One network card per endpoint instead of per-link bandwidth (see the module
    /// documentation); `None`: per-link bandwidth.
    pub nic: Option<NicParams>,
}

/// Every endpoint's network card.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NicParams {
    pub bytes_per_s: u64,
    /// Header bytes per segment of `mss_bytes` payload (TCP/IP/Ethernet: 66 per 1448).
    pub overhead_bytes: u64,
    pub mss_bytes: u64,
    /// Group sends leave the sender's card once (IP multicast; see the module
    /// documentation). `false`: one copy per receiver (TCP, as the runtime does).
    pub multicast: bool,
    /// The clients share this many cards (see the module documentation); `None`: a
    /// card per client.
    pub client_cards: Option<u32>,
}

impl NicParams {
    /// Gigabit Ethernet with TCP/IPv4 headers.
    pub fn gigabit() -> NicParams {
        NicParams {
            bytes_per_s: 125_000_000,
            overhead_bytes: 66,
            mss_bytes: 1448,
            multicast: false,
            client_cards: None,
        }
    }

    /// Bytes on the wire for a message of `bytes`.
    pub fn wire_bytes(&self, bytes: usize) -> u64 {
        let b = bytes as u64;
        b + b.div_ceil(self.mss_bytes.max(1)).max(1) * self.overhead_bytes
    }
}

#[derive(Clone, Debug)]
struct Link {
    latency_ns: u64,
    jitter_ns: u64,
    bandwidth_bytes_per_s: u64,
    /// The link finishes serializing what it was given at this time.
    free_at: Time,
    /// Number of partitions currently cutting this link.
    cuts: u16,
    client: bool,
}

/// What became of a message handed to the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Arrives at these times (the second one is a duplicate).
    Arrives(Time, Option<Time>),
    Dropped(DropReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DropReason {
    Loss,
    Partition,
}

impl DropReason {
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Loss => "net_dropped_loss",
            DropReason::Partition => "net_dropped_partition",
        }
    }
}

/// A receiving port: the receptions reserved on it that have not ended, as disjoint,
/// non-touching `[start, end)` stretches (touching ones are merged, so a queue that
/// backs up is one stretch and a reservation looks at a few at most).
#[derive(Clone, Debug, Default)]
struct Port {
    busy: std::collections::BTreeMap<Time, Time>,
}

impl Port {
    /// Reserve `len` nanoseconds starting no earlier than `earliest` (and forget what
    /// ended by `now`); the reception's end.
    fn reserve(&mut self, now: Time, earliest: Time, len: u64) -> Time {
        while let Some((&s, &e)) = self.busy.first_key_value() {
            if e > now {
                break;
            }
            self.busy.remove(&s);
        }
        if len == 0 {
            return earliest;
        }
        let mut s = earliest;
        if let Some((_, &e)) = self.busy.range(..=s).next_back() {
            s = s.max(e);
        }
        while let Some((_, &e)) = self.busy.range(s..s + len).next() {
            s = e;
        }
        let (mut lo, mut hi) = (s, s + len);
        if let Some((&ps, &pe)) = self.busy.range(..=lo).next_back() {
            if pe == lo {
                lo = ps;
                self.busy.remove(&ps);
            }
        }
        if let Some(e) = self.busy.remove(&hi) {
            hi = e;
        }
        self.busy.insert(lo, hi);
        s + len
    }
}

pub struct Network {
    /// Node ids in index order; clients follow the nodes.
    nodes: Vec<NodeId>,
    clients: u32,
    links: Vec<Link>,
    params: NetParams,
    /// With network cards: per card (see [`Network::card`]), when it finishes sending, and
    /// when its port finishes receiving, what it was given so far.
    egress_free: Vec<Time>,
    ingress: Vec<Port>,
    /// Per card (nodes in order, then the clients' cards): nanoseconds it spent
    /// sending.
    pub egress_busy_ns: Vec<u64>,
    /// Per client: the index of its card ([`NicParams::client_cards`]).
    client_card: Vec<usize>,
    /// Per card: (start, length) of its last transmission to a peer
    /// that was not a copy (what a multicast copy shares).
    group_tx: Vec<(Time, u64)>,
}

impl Network {
    /// A network between `nodes` and `clients` clients; per-link latencies are drawn
    /// from `rng` once, here.
    pub fn new(nodes: &[NodeId], clients: u32, params: NetParams, rng: &mut impl Rng) -> Network {
        let m = nodes.len();
        let n = m + clients as usize;
        // Clients talk to nodes only: links between two clients are never stored
        // (16,200 clients would need 262 million of them), but their latencies are
        // still drawn, in the same order as every other link's, so that a seed's
        // draws do not depend on which links are kept.
        let mut links = vec![None; m * m + 2 * m * clients as usize];
        let draws_between_clients = params.client.latency_spread > 1.0;
        for from in 0..n {
            let last = if from >= m && !draws_between_clients {
                m
            } else {
                n
            };
            for to in 0..last {
                let client = from >= m || to >= m;
                let t = if client { &params.client } else { &params.peer };
                let spread = t.latency_spread.max(1.0);
                let factor = if spread > 1.0 {
                    rng.gen_range(1.0 / spread..=spread)
                } else {
                    1.0
                };
                let Some(slot) = Self::slot(m, clients as usize, from, to) else {
                    continue;
                };
                links[slot] = Some(Link {
                    latency_ns: (t.latency_ns as f64 * factor) as u64,
                    jitter_ns: t.jitter_ns,
                    bandwidth_bytes_per_s: t.bandwidth_bytes_per_s.max(1),
                    free_at: 0,
                    cuts: 0,
                    client,
                });
            }
        }
        let cards = params
            .nic
            .as_ref()
            .and_then(|nic| nic.client_cards)
            .map_or(clients as usize, |c| {
                (c as usize).clamp(1, (clients as usize).max(1))
            });
        // Client i of c on card ⌊i·N/c⌋: contiguous ranges, as `partita bench
        // --connections N` groups its sessions.
        let client_card = (0..clients as usize)
            .map(|i| m + i * cards / (clients as usize))
            .collect();
        let n_cards = m + cards;
        Network {
            nodes: nodes.to_vec(),
            clients,
            client_card,
            links: links
                .into_iter()
                .map(|l| l.expect("every stored link drawn"))
                .collect(),
            params,
            egress_free: vec![0; n_cards],
            ingress: vec![Port::default(); n_cards],
            egress_busy_ns: vec![0; n_cards],
            group_tx: vec![(0, 0); n_cards],
        }
    }

    /// Where the link between endpoint indices `from` and `to` is stored, with `m`
    /// nodes and `c` clients: node to node first (m × m), then each client's links to
    /// the nodes (c × m), then the nodes' links to each client (c × m); none between
    /// two clients.
    fn slot(m: usize, c: usize, from: usize, to: usize) -> Option<usize> {
        match (from < m, to < m) {
            (true, true) => Some(from * m + to),
            (false, true) => Some(m * m + (from - m) * m + to),
            (true, false) => Some(m * m + c * m + (to - m) * m + from),
            (false, false) => None,
        }
    }

    fn slot_of(&self, from: Endpoint, to: Endpoint) -> usize {
        Self::slot(
            self.nodes.len(),
            self.clients as usize,
            self.index(from),
            self.index(to),
        )
        .unwrap_or_else(|| panic!("no link between two clients ({from:?} -> {to:?})"))
    }

    /// Position of an endpoint in per-endpoint tables (nodes in order, then clients).
    pub fn index(&self, e: Endpoint) -> usize {
        match e {
            // Node ids are 1..=N in order where the simulator builds the network; any
            // other list is searched.
            Endpoint::Node(id) => match (id as usize).checked_sub(1) {
                Some(i) if self.nodes.get(i) == Some(&id) => i,
                _ => self
                    .nodes
                    .iter()
                    .position(|&n| n == id)
                    .unwrap_or_else(|| panic!("node {id} is not on the network")),
            },
            Endpoint::Client(c) => {
                assert!(c < self.clients, "client {c} is not on the network");
                self.nodes.len() + c as usize
            }
        }
    }

    /// The card of an endpoint in per-card tables (nodes in order, then the clients'
    /// cards): a node's is its [`Network::index`].
    pub fn card(&self, e: Endpoint) -> usize {
        match e {
            Endpoint::Node(_) => self.index(e),
            Endpoint::Client(c) => {
                assert!(c < self.clients, "client {c} is not on the network");
                self.client_card[c as usize]
            }
        }
    }

    fn link(&mut self, from: Endpoint, to: Endpoint) -> &mut Link {
        let i = self.slot_of(from, to);
        &mut self.links[i]
    }

    fn link_ref(&self, from: Endpoint, to: Endpoint) -> &Link {
        &self.links[self.slot_of(from, to)]
    }

    pub fn params(&self) -> &NetParams {
        &self.params
    }

    /// The propagation latency of the link `from -> to` (jitter and serialization
    /// come on top).
    pub fn latency_ns(&self, from: Endpoint, to: Endpoint) -> u64 {
        self.link_ref(from, to).latency_ns
    }

    /// The emulated WAN: every link between endpoints of different regions takes the
    /// one-way delay of `wan` as its latency. `regions` gives each endpoint's region by
    /// index (nodes in order, then clients; see [`Network::index`]); an endpoint
    /// without one keeps its links' LAN latency, as do links within a region. Draws
    /// nothing, so the rest of a run's randomness is unchanged.
    pub fn apply_wan(&mut self, wan: &Wan, regions: &[Option<Region>]) {
        let (m, c) = (self.nodes.len(), self.clients as usize);
        assert_eq!(regions.len(), m + c, "one region (or none) per endpoint");
        for (from, ra) in regions.iter().enumerate() {
            for (to, rb) in regions.iter().enumerate() {
                let Some(slot) = Self::slot(m, c, from, to) else {
                    continue;
                };
                if let (Some(a), Some(b)) = (*ra, *rb) {
                    if a != b {
                        let ns = wan.one_way(a, b).as_nanos() as u64;
                        assert!(ns > 0 || wan.rtt_ms(a, b) == 0);
                        self.links[slot].latency_ns = ns;
                    }
                }
            }
        }
    }

    /// Replace the loss/duplication/reordering of every link (the liveness phase sets
    /// them to none).
    pub fn set_faults(&mut self, peer: LinkFaults, client: LinkFaults) {
        self.params.peer_faults = peer;
        self.params.client_faults = client;
    }

    /// Whether group sends leave a card once (IP multicast).
    pub fn multicast(&self) -> bool {
        self.params.nic.as_ref().is_some_and(|n| n.multicast)
    }

    /// Hand a message of `bytes` to the link `from -> to` at `now`. `copy`: the same
    /// message as `from`'s previous send that was not a copy, in the same step (a group
    /// send); with IP multicast cards it shares that transmission.
    pub fn send(
        &mut self,
        now: Time,
        from: Endpoint,
        to: Endpoint,
        bytes: usize,
        copy: bool,
        rng: &mut impl Rng,
    ) -> Fate {
        let link = self.link_ref(from, to).clone();
        let faults = if link.client {
            self.params.client_faults.clone()
        } else {
            self.params.peer_faults.clone()
        };
        // Serialization: the message occupies the link (or the sender's card) after
        // what is queued on it.
        let (start, tx_ns, port) = match &self.params.nic {
            None => {
                let start = now.max(link.free_at);
                let tx_ns =
                    (bytes as u128 * 1_000_000_000 / link.bandwidth_bytes_per_s as u128) as u64;
                self.link(from, to).free_at = start + tx_ns;
                (start, tx_ns, false)
            }
            Some(nic) => {
                let wire = nic.wire_bytes(bytes);
                let tx_ns = (wire as u128 * 1_000_000_000 / nic.bytes_per_s.max(1) as u128) as u64;
                let f = self.card(from);
                let start = if copy && nic.multicast {
                    // The datagram already left (or is leaving) the card.
                    self.group_tx[f].0
                } else {
                    let start = now.max(self.egress_free[f]);
                    self.egress_free[f] = start + tx_ns;
                    self.egress_busy_ns[f] += tx_ns;
                    if !link.client {
                        self.group_tx[f] = (start, tx_ns);
                    }
                    start
                };
                (start, tx_ns, true)
            }
        };
        // Draw every random number whatever the outcome, so that turning one fault off
        // does not shift the draws of the others.
        let lost = rng.gen::<f64>() < faults.loss;
        let jitter = rng.gen_range(0..=link.jitter_ns);
        let reordered = rng.gen::<f64>() < faults.reorder;
        let extra = rng.gen_range(0..=faults.reorder_ns_max);
        let duplicated = rng.gen::<f64>() < faults.dup;
        let dup_extra = rng.gen_range(0..=link.jitter_ns + faults.reorder_ns_max + 1);
        if link.cuts > 0 {
            return Fate::Dropped(DropReason::Partition);
        }
        if lost {
            return Fate::Dropped(DropReason::Loss);
        }
        let mut at = start + tx_ns + link.latency_ns + jitter;
        if port {
            let t = self.card(to);
            at = self.ingress[t].reserve(now, at - tx_ns, tx_ns);
        }
        if reordered {
            at += extra;
        }
        let dup_at = duplicated.then_some(at + dup_extra);
        debug_assert!(at >= now);
        Fate::Arrives(at, dup_at)
    }

    /// Whether `from -> to` is cut now (checked again on arrival).
    pub fn is_cut(&self, from: Endpoint, to: Endpoint) -> bool {
        self.link_ref(from, to).cuts > 0
    }

    /// Cut `from -> to` (one direction) until a matching [`Network::uncut`].
    pub fn cut(&mut self, from: Endpoint, to: Endpoint) {
        self.link(from, to).cuts += 1;
    }

    pub fn uncut(&mut self, from: Endpoint, to: Endpoint) {
        let l = self.link(from, to);
        assert!(l.cuts > 0, "uncut of a link that is not cut");
        l.cuts -= 1;
    }

    /// Remove every partition.
    pub fn heal_all(&mut self) {
        for l in &mut self.links {
            l.cuts = 0;
        }
    }

    /// Links currently cut.
    pub fn cut_links(&self) -> usize {
        self.links.iter().filter(|l| l.cuts > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn params(faults: LinkFaults) -> NetParams {
        let t = LinkTiming {
            latency_ns: 100_000,
            latency_spread: 1.0,
            jitter_ns: 0,
            bandwidth_bytes_per_s: 1_000_000_000,
        };
        NetParams {
            peer: t.clone(),
            client: t,
            peer_faults: faults.clone(),
            client_faults: faults,
            nic: None,
        }
    }

    #[test]
    fn latency_and_bandwidth_delay_messages_in_order() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut net = Network::new(&[1, 2], 1, params(LinkFaults::none()), &mut rng);
        let (a, b) = (Endpoint::Node(1), Endpoint::Node(2));
        // 1 MB at 1 GB/s takes 1 ms on the wire, then 100 µs of latency.
        assert_eq!(
            net.send(0, a, b, 1_000_000, false, &mut rng),
            Fate::Arrives(1_100_000, None)
        );
        // The next message waits for the first to leave the link.
        assert_eq!(
            net.send(0, a, b, 1_000, false, &mut rng),
            Fate::Arrives(1_101_000, None)
        );
        // The other direction is another link.
        assert_eq!(
            net.send(0, b, a, 0, false, &mut rng),
            Fate::Arrives(100_000, None)
        );
    }

    /// Clients talk to nodes only, so no link between two clients is stored (the
    /// paper-004 scale of 16,200 clients would need 262 million), and every stored
    /// link's latency is the one a link-per-pair network draws for it: the draws for
    /// links between clients still happen, in the same order.
    #[test]
    fn no_link_between_clients_is_stored_and_draws_are_unchanged() {
        let mut p = params(LinkFaults::none());
        p.peer.latency_spread = 3.0;
        p.client.latency_spread = 2.0;
        let (nodes, clients) = ([1u32, 2, 3], 4u32);
        let net = Network::new(
            &nodes,
            clients,
            p.clone(),
            &mut ChaCha8Rng::seed_from_u64(9),
        );
        assert_eq!(net.links.len(), 9 + 2 * 3 * 4);
        // Every pair drawn in order, as a dense network would.
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let n = nodes.len() + clients as usize;
        let endpoint = |i: usize| match nodes.get(i) {
            Some(&id) => Endpoint::Node(id),
            None => Endpoint::Client((i - nodes.len()) as u32),
        };
        for from in 0..n {
            for to in 0..n {
                let client = from >= nodes.len() || to >= nodes.len();
                let t = if client { &p.client } else { &p.peer };
                let s = t.latency_spread;
                let want = (t.latency_ns as f64 * rng.gen_range(1.0 / s..=s)) as u64;
                if from < nodes.len() || to < nodes.len() {
                    assert_eq!(net.latency_ns(endpoint(from), endpoint(to)), want);
                }
            }
        }
        // Without spread nothing is drawn, and 16,200 clients cost 2 × 3 × 16,200 links.
        let big = Network::new(
            &nodes,
            16_200,
            params(LinkFaults::none()),
            &mut ChaCha8Rng::seed_from_u64(9),
        );
        assert_eq!(big.links.len(), 9 + 2 * 3 * 16_200);
        assert_eq!(
            big.latency_ns(Endpoint::Client(16_199), Endpoint::Node(3)),
            100_000
        );
    }

    #[test]
    fn links_between_regions_take_the_one_way_delay() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut net = Network::new(&[1, 2, 3], 2, params(LinkFaults::none()), &mut rng);
        let wan = Wan::paper();
        let r = |name| wan.region(name);
        // Nodes in California, Virginia, Europe; client 0 in Europe, client 1 nowhere.
        let regions = [
            r("California"),
            r("Virginia"),
            r("Europe"),
            r("Europe"),
            None,
        ];
        net.apply_wan(&wan, &regions);
        let [ca, va, eu] = [1, 2, 3].map(Endpoint::Node);
        let (c_eu, c_none) = (Endpoint::Client(0), Endpoint::Client(1));
        let ms = 1_000_000;
        for (from, to, want) in [
            (ca, va, 35 * ms),
            (va, ca, 35 * ms),
            (va, eu, 45 * ms),
            (eu, ca, 75 * ms),
            (c_eu, va, 45 * ms),
            (va, c_eu, 45 * ms),
            // Same region, or no region: the LAN latency.
            (c_eu, eu, 100_000),
            (c_none, ca, 100_000),
        ] {
            assert_eq!(net.latency_ns(from, to), want, "{from} -> {to}");
            // No jitter, 1 GB/s: a 0-byte message arrives after the latency exactly.
            assert_eq!(
                net.send(0, from, to, 0, false, &mut rng),
                Fate::Arrives(want, None),
                "{from} -> {to}"
            );
        }
    }

    #[test]
    fn cuts_are_directed_and_counted() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut net = Network::new(&[1, 2], 1, params(LinkFaults::none()), &mut rng);
        let (a, c) = (Endpoint::Node(1), Endpoint::Client(0));
        net.cut(a, c);
        net.cut(a, c);
        assert_eq!(
            net.send(0, a, c, 10, false, &mut rng),
            Fate::Dropped(DropReason::Partition)
        );
        assert!(matches!(
            net.send(0, c, a, 10, false, &mut rng),
            Fate::Arrives(..)
        ));
        net.uncut(a, c);
        assert!(net.is_cut(a, c));
        net.uncut(a, c);
        assert!(!net.is_cut(a, c));
        net.cut(c, a);
        net.heal_all();
        assert_eq!(net.cut_links(), 0);
    }

    #[test]
    fn loss_and_duplication_rates_are_roughly_right() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let faults = LinkFaults {
            loss: 0.3,
            dup: 0.2,
            reorder: 0.0,
            reorder_ns_max: 0,
        };
        let mut net = Network::new(&[1, 2], 0, params(faults), &mut rng);
        let (mut lost, mut dups) = (0, 0);
        for _ in 0..10_000 {
            match net.send(0, Endpoint::Node(1), Endpoint::Node(2), 0, false, &mut rng) {
                Fate::Dropped(DropReason::Loss) => lost += 1,
                Fate::Arrives(at, Some(again)) => {
                    assert!(again >= at);
                    dups += 1
                }
                _ => {}
            }
        }
        assert!((2700..3300).contains(&lost), "{lost}");
        assert!((1200..1600).contains(&dups), "{dups}");
    }

    /// Nodes 1..=n with 1 GB/s cards, no headers, 100 µs links.
    fn cards(n: NodeId, multicast: bool) -> (Network, ChaCha8Rng) {
        cards_with_clients(n, 0, multicast, None)
    }

    /// [`cards`] and `clients` clients, on `client_cards` machines.
    fn cards_with_clients(
        n: NodeId,
        clients: u32,
        multicast: bool,
        client_cards: Option<u32>,
    ) -> (Network, ChaCha8Rng) {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut p = params(LinkFaults::none());
        p.nic = Some(NicParams {
            bytes_per_s: 1_000_000_000,
            overhead_bytes: 0,
            mss_bytes: 1_000_000,
            multicast,
            client_cards,
        });
        let nodes: Vec<NodeId> = (1..=n).collect();
        let net = Network::new(&nodes, clients, p, &mut rng);
        (net, rng)
    }

    #[test]
    fn network_cards_are_shared_by_every_link_of_an_endpoint() {
        let (mut net, mut rng) = cards(3, false);
        let (a, b, c) = (Endpoint::Node(1), Endpoint::Node(2), Endpoint::Node(3));
        // 1 MB takes 1 ms on a's card, then 100 µs of latency.
        assert_eq!(
            net.send(0, a, b, 1_000_000, false, &mut rng),
            Fate::Arrives(1_100_000, None)
        );
        // To another node: it still waits for a's card.
        assert_eq!(
            net.send(0, a, c, 1_000_000, false, &mut rng),
            Fate::Arrives(2_100_000, None)
        );
        // c sends to b at once, but b's port is receiving a's message until 1.1 ms.
        assert_eq!(
            net.send(0, c, b, 1_000_000, false, &mut rng),
            Fate::Arrives(2_100_000, None)
        );
        assert_eq!(net.egress_busy_ns[0], 2_000_000);
        // Headers: 66 bytes per 1448-byte segment.
        let g = NicParams::gigabit();
        assert_eq!(g.wire_bytes(100), 166);
        assert_eq!(g.wire_bytes(2_896), 2_896 + 132);
        assert_eq!(g.wire_bytes(0), 66);
    }

    /// A port receives in the order messages reach it: a message still crossing an
    /// ocean does not hold up one from next door that arrives first, and a later one
    /// fills a gap left free between two reservations.
    #[test]
    fn a_port_receives_in_arrival_order_not_send_order() {
        let (mut net, mut rng) = cards(3, false);
        let wan = Wan::paper();
        let r = |name| wan.region(name);
        // Nodes 1 and 2 in California, node 3 in Europe (75 ms away).
        net.apply_wan(&wan, &[r("California"), r("California"), r("Europe")]);
        let (a, b, far) = (Endpoint::Node(1), Endpoint::Node(2), Endpoint::Node(3));
        let ms = 1_000_000;
        // 1 KB takes 1 µs on a card.
        assert_eq!(
            net.send(0, far, a, 1_000, false, &mut rng),
            Fate::Arrives(75 * ms + 1_000, None)
        );
        // Sent later from next door: arrives after 100 µs, not behind the far one.
        assert_eq!(
            net.send(10, b, a, 1_000, false, &mut rng),
            Fate::Arrives(10 + 1_000 + 100_000, None)
        );
        // Next door again, arriving while the far message is being received: it
        // queues behind it.
        assert_eq!(
            net.send(75 * ms - 100_000, b, a, 1_000, false, &mut rng),
            Fate::Arrives(75 * ms + 2_000, None)
        );
    }

    #[test]
    fn a_port_fills_gaps_and_merges_touching_receptions() {
        let mut p = Port::default();
        assert_eq!(p.reserve(0, 100, 10), 110);
        assert_eq!(p.reserve(0, 200, 10), 210);
        // Fits in the gap [110, 200).
        assert_eq!(p.reserve(0, 105, 20), 130);
        // Does not fit before 200 once [110, 130) is taken: queues behind [200, 210).
        assert_eq!(p.reserve(0, 125, 80), 290);
        // Touching receptions merged: [100, 130) and [200, 290).
        assert_eq!(p.busy.len(), 2);
        // What ended by `now` is forgotten.
        assert_eq!(p.reserve(300, 300, 5), 305);
        assert_eq!(p.busy.len(), 1);
    }

    #[test]
    fn a_multicast_group_send_leaves_the_card_once() {
        for multicast in [false, true] {
            let (mut net, mut rng) = cards(4, multicast);
            let [a, b, c, d] = [1, 2, 3, 4].map(Endpoint::Node);
            let first = net.send(0, a, b, 1_000_000, false, &mut rng);
            let second = net.send(0, a, c, 1_000_000, true, &mut rng);
            assert_eq!(first, Fate::Arrives(1_100_000, None));
            if multicast {
                // One datagram: both arrive together, the card was busy once.
                assert_eq!(second, Fate::Arrives(1_100_000, None));
                assert_eq!(net.egress_busy_ns[0], 1_000_000);
            } else {
                assert_eq!(second, Fate::Arrives(2_100_000, None));
                assert_eq!(net.egress_busy_ns[0], 2_000_000);
            }
            // The receiver's port still takes every byte: d's message to b waits for
            // a's copy into b.
            assert_eq!(
                net.send(0, d, b, 1_000_000, false, &mut rng),
                Fate::Arrives(2_100_000, None)
            );
        }
    }

    /// Four clients on two cards: a client machine's sessions queue at its one card,
    /// another machine's do not wait for them; nodes keep their own cards.
    #[test]
    fn clients_share_the_cards_of_their_machines() {
        let (mut net, mut rng) = cards_with_clients(2, 4, false, Some(2));
        let cards: Vec<usize> = (0..4).map(|c| net.card(Endpoint::Client(c))).collect();
        assert_eq!(cards, vec![2, 2, 3, 3]);
        assert_eq!(net.card(Endpoint::Node(2)), 1);
        // 1 MB takes 1 ms on a card; the link adds 100 µs.
        let send = |net: &mut Network, rng: &mut ChaCha8Rng, c: u32, to: NodeId| match net.send(
            0,
            Endpoint::Client(c),
            Endpoint::Node(to),
            1_000_000,
            false,
            rng,
        ) {
            Fate::Arrives(at, None) => at,
            other => panic!("{other:?}"),
        };
        assert_eq!(send(&mut net, &mut rng, 0, 1), 1_100_000);
        // Client 1 shares client 0's card: it sends after it, to another node.
        assert_eq!(send(&mut net, &mut rng, 1, 2), 2_100_000);
        // Client 2 has a card of its own machine.
        assert_eq!(send(&mut net, &mut rng, 2, 2), 1_100_000);
        assert_eq!(net.egress_busy_ns[2], 2_000_000);
        assert_eq!(net.egress_busy_ns[3], 1_000_000);
        // Client 3 waits for client 2's send on their machine's card.
        assert_eq!(send(&mut net, &mut rng, 3, 1), 2_100_000);
    }
}
