//! S-SMR and DS-SMR (paper 003) on node cores: a partitioned cluster (Ring Paxos and
//! Multi-Paxos, 2 or 3 data partitions, with DS-SMR an oracle partition, 2 replicas
//! each) whose replicas are `partita_dssmr` members, exchanging signals and objects
//! as `Msg::Exec` through the node core. Chirper clients (the client proxy: consults,
//! cache, moves, retries, fallback) run rounds of commands; every command's replies
//! come from each of its destinations, and the run must be equivalent to one
//! unpartitioned Chirper executing the commands that took effect in instance order
//! (same replies, same users at the end, each in one partition, the oracle's map
//! right), with the replicas of each partition converged. Lost `Msg::Exec` messages
//! are asked for again.

use crate::common;

use common::{Cluster, Got};
use partita_consensus::{Msg, Protocol};
use partita_dssmr::chirper::*;
use partita_dssmr::client::*;
use partita_dssmr::replica::{body, factory, DsReplica};
use partita_dssmr::*;
use partita_node::UnsafeBugs;
use partita_smr::Replica;
use partita_types::{Command, NodeId, PartitionLayout, PartitionMap, Reply};
use std::collections::BTreeMap;
use std::sync::Arc;

const PER: usize = 2;

struct Client {
    id: u64,
    proxy: ClientProxy<Chirper>,
    seq: u64,
    /// The answered command in flight: its seq and destinations.
    waiting: Option<(u64, Dests)>,
    finished: u64,
    posts: u64,
    /// The application command of the answered multicast in flight, if it runs one.
    current_cmd: Option<ChirperCommand>,
}

fn cluster(
    protocol: Protocol,
    scheme: Scheme,
    data: usize,
    graph: &Graph,
) -> (Cluster, Vec<Vec<NodeId>>) {
    cluster_with(protocol, scheme, data, graph, false)
}

/// With `checkpoints`, replicas checkpoint every 8 instances and acceptors truncate,
/// so a replica that was down restores a checkpoint (its own or a peer's).
fn cluster_with(
    protocol: Protocol,
    scheme: Scheme,
    data: usize,
    graph: &Graph,
    checkpoints: bool,
) -> (Cluster, Vec<Vec<NodeId>>) {
    let partitions = data + usize::from(scheme == Scheme::Dssmr);
    let replicas: Vec<NodeId> = (4..4 + (PER * partitions) as NodeId).collect();
    let mut setup = common::setup(protocol, &replicas);
    let objects = graph.objects();
    setup.service = factory::<Chirper>(
        scheme,
        partita_dssmr::StaticMap::Service,
        Arc::new(move || objects.clone()),
    );
    let layout: Vec<Vec<NodeId>> = replicas.chunks(PER).map(|r| r.to_vec()).collect();
    setup.membership.partitions = PartitionLayout {
        map: PartitionMap::new(partitions as u32, 1 << 20).expect("a valid map"),
        replicas: layout.clone(),
    };
    if checkpoints {
        setup.checkpoint = partita_node::CheckpointConfig {
            interval_instances: 8,
            announce_ticks: 5,
            chunk_bytes: 256,
            transfer_window_chunks: 3,
            transfer_timeout_ticks: 10,
            ..partita_node::CheckpointConfig::default()
        };
    }
    let mut c = Cluster::new(setup, UnsafeBugs::default());
    c.checkpointing = checkpoints;
    (c, layout)
}

fn replica(c: &Cluster, id: NodeId) -> &DsReplica<Chirper> {
    c.node(id)
        .replica()
        .and_then(|r| r.as_any().downcast_ref::<DsReplica<Chirper>>())
        .expect("a DS-SMR replica")
}

/// `faults`: exec messages are lost (one in three), replicas checkpoint, and a replica
/// of partition 0 is down for a while (it restarts from its checkpoint).
fn run(
    protocol: Protocol,
    scheme: Scheme,
    data: usize,
    workload: Workload,
    seed: u64,
    faults: bool,
) {
    let lose_exec = faults;
    let graph = Graph::generate(&GraphSpec {
        users: 40,
        communities: 4,
        mean_followers: 4.0,
        p_local: 0.8,
        seed,
        scattered: false,
    });
    let (mut c, layout) = cluster_with(protocol, scheme, data, &graph, faults);
    if lose_exec {
        // Lose one exec message in three, at random (every copy of an exchange is
        // lost now and then, and so are asks and resends).
        let mut n = seed;
        c.lose(move |_, _, m| {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            matches!(m, Msg::Exec { .. }) && (n >> 33).is_multiple_of(3)
        });
    }
    c.tick_until_leader(1, 200);
    let reply_to = layout[0][0];
    let mut clients: Vec<Client> = (0..4)
        .map(|i| {
            let mut cfg = ProxyConfig::new(scheme, data);
            cfg.retries_max = 2;
            let mut proxy = ClientProxy::new(cfg, seed * 10 + i);
            if i % 2 == 0 {
                proxy.prefetch_initial(graph.users());
            }
            Client {
                id: 1000 + i,
                proxy,
                seq: 0,
                waiting: None,
                finished: 0,
                posts: 0,
                current_cmd: None,
            }
        })
        .collect();
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed);
    // Everything that took effect, by (instance, submission order: the coordinator
    // keeps the order commands reach it within a value), and its answer.
    let mut effects: BTreeMap<(u64, u64), (ChirperCommand, DsReply<ChirperReply>)> =
        BTreeMap::new();
    let mut submitted: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    let commands = 12;
    let victim = layout[0][1];
    for round in 0..400 {
        if faults && round == 3 {
            c.crash(victim);
        }
        if faults && round == 10 {
            c.start(victim);
        }
        // Every idle client issues its next command.
        for cl in clients.iter_mut() {
            if cl.proxy.busy() || cl.finished >= commands {
                continue;
            }
            cl.posts += 1;
            let cmd = workload.next(&graph, (cl.id << 32) | cl.posts, &mut rng);
            let mut out = Vec::new();
            cl.proxy.submit(cmd, &mut out);
            send(&mut c, cl, out, data, reply_to, &mut submitted);
        }
        c.settle();
        c.tick(3);
        c.settle();
        // Answers back to the proxies.
        let got: Vec<Reply> = c
            .got
            .iter()
            .filter_map(|(_, g)| match g {
                Got::Final(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
        for cl in clients.iter_mut() {
            let Some((seq, dests)) = cl.waiting else {
                continue;
            };
            let mine: Vec<&Reply> = got
                .iter()
                .filter(|r| r.client == cl.id && r.seq == seq)
                .collect();
            if mine.len() < dests.count() {
                continue;
            }
            assert_eq!(
                mine.len(),
                dests.count(),
                "one reply per destination: {mine:?}"
            );
            assert!(
                mine.iter().all(|r| r.instance == mine[0].instance),
                "replies of one instance"
            );
            let replies: Vec<DsReply<ChirperReply>> = mine
                .iter()
                .map(|r| {
                    partita_types::decode(r.result.as_ref().expect("not refused"))
                        .expect("a DS-SMR reply")
                })
                .collect();
            let answers: Vec<_> = replies.into_iter().filter(|r| !r.is_signal()).collect();
            if answers.len() != 1 {
                let from: Vec<_> = c
                    .got
                    .iter()
                    .filter(
                        |(_, g)| matches!(g, Got::Final(r) if r.client == cl.id && r.seq == seq),
                    )
                    .map(|(n, _)| *n)
                    .collect();
                for n in c.nodes.keys() {
                    if let Some(r) = c.node(*n).replica() {
                        let d = r.as_any().downcast_ref::<DsReplica<Chirper>>().unwrap();
                        eprintln!(
                            "node {n}: member {:?} objects {}",
                            d.server().member(),
                            d.server().objects().len()
                        );
                    }
                }
                panic!("one answer: {answers:?} from {from:?} dests {dests:?}");
            }
            let answer = answers.into_iter().next().unwrap();
            cl.waiting = None;
            if let (Some(cmd), true) = (cl.current_cmd.take(), matches!(answer, DsReply::Done(_))) {
                let order = submitted[&(cl.id, seq)];
                effects.insert((mine[0].instance, order), (cmd, answer.clone()));
            }
            let mut out = Vec::new();
            if cl.proxy.on_reply(answer, &mut out).is_some() {
                cl.finished += 1;
            }
            send(&mut c, cl, out, data, reply_to, &mut submitted);
        }
        if clients.iter().all(|cl| cl.finished >= commands) {
            break;
        }
        if round == 399 {
            for n in layout.iter().flatten() {
                let r = replica(&c, *n);
                eprintln!(
                    "node {n}: missing {:?} waiting {} {:?}",
                    r.server().missing(),
                    r.server().waiting(),
                    r.counters()
                );
            }
        }
        assert!(
            round < 399,
            "clients did not finish: {:?}",
            clients.iter().map(|c| c.finished).collect::<Vec<_>>()
        );
    }
    // Until every replica ran everything it delivered (a replica that lost an exchange
    // asks again after a while).
    for _ in 0..100 {
        if layout
            .iter()
            .flatten()
            .all(|n| replica(&c, *n).server().waiting() == 0)
        {
            break;
        }
        c.tick(5);
    }
    let stats: Vec<ProxyStats> = clients.iter().map(|c| c.proxy.stats().clone()).collect();
    let sum = |f: fn(&ProxyStats) -> u64| stats.iter().map(f).sum::<u64>();
    let asks: u64 = layout
        .iter()
        .flatten()
        .map(|n| replica(&c, *n).counters().asks_sent)
        .sum();
    eprintln!(
        "{protocol} {scheme:?} {data} partitions {workload:?}: {} effects, {} moved, {} retries, {} fallbacks, {} cache hits, {} asks",
        effects.len(),
        sum(|s| s.objects_moved),
        sum(|s| s.retries),
        sum(|s| s.fallbacks),
        sum(|s| s.cache_hits),
        asks
    );
    assert!(
        effects.len() as u64 >= 4 * commands,
        "every command took effect once"
    );
    if lose_exec {
        assert!(asks > 0, "lost exchanges were asked for again");
        assert!(
            layout
                .iter()
                .flatten()
                .all(|n| c.checkpoints.contains_key(n)),
            "every replica checkpointed"
        );
    }
    // Equivalence with one unpartitioned Chirper, in instance order.
    let mut reference = Reference::<Chirper>::default();
    reference.load(graph.objects());
    for (instance, (cmd, answer)) in &effects {
        let DsReply::Done(r) = answer else { continue };
        let want = reference.execute(cmd);
        assert_eq!(*r, want, "instance {instance:?} {cmd:?}");
    }
    let mut located: BTreeMap<ObjectId, u16> = BTreeMap::new();
    for (p, nodes) in layout.iter().enumerate() {
        let first = replica(&c, nodes[0]);
        for n in nodes {
            assert_eq!(
                replica(&c, *n).digest(),
                first.digest(),
                "partition {p} converged"
            );
        }
        if p < data {
            for (id, u) in first.server().objects() {
                assert!(
                    located.insert(*id, p as u16).is_none(),
                    "user {id} in two partitions"
                );
                assert_eq!(reference.objects.get(id), Some(u), "user {id}");
            }
        } else {
            let map: BTreeMap<ObjectId, u16> =
                first.server().map().iter().map(|(k, v)| (*k, *v)).collect();
            assert_eq!(map.len(), reference.objects.len());
            assert!(
                map.iter().all(|(k, v)| located.get(k) == Some(v)) || located.len() < map.len()
            );
        }
    }
    assert_eq!(
        located.len(),
        reference.objects.len(),
        "every user in one partition"
    );
    if scheme == Scheme::Dssmr {
        let oracle = replica(&c, layout[data][0]);
        let map: BTreeMap<ObjectId, u16> = oracle
            .server()
            .map()
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        assert_eq!(map, located, "the oracle knows where every user is");
        let moved: u64 = clients.iter().map(|c| c.proxy.stats().objects_moved).sum();
        if workload != Workload::Timeline {
            assert!(moved > 0, "no moves");
        }
    }
}

fn send(
    c: &mut Cluster,
    cl: &mut Client,
    out: Vec<Multicast<ChirperCommand>>,
    data: usize,
    reply_to: NodeId,
    submitted: &mut BTreeMap<(u64, u64), u64>,
) {
    for m in out {
        cl.seq += 1;
        let n = submitted.len() as u64;
        submitted.insert((cl.id, cl.seq), n);
        if m.answered {
            cl.waiting = Some((cl.seq, m.dests));
            if let DsCommand::Access { cmd, .. } | DsCommand::Global { cmd } = &m.cmd {
                cl.current_cmd = Some(cmd.clone());
            }
        }
        let cmd = Command {
            client: cl.id,
            seq: cl.seq,
            session: 0,
            reply_to,
            body: body(m.dests, data, &m.cmd),
            route: 0,
        };
        c.request(1, cmd);
    }
}

#[test]
fn dssmr_on_ring_paxos_nodes() {
    for (seed, w) in [
        (1, Workload::Mix),
        (2, Workload::Post),
        (3, Workload::FollowUnfollow),
    ] {
        run(Protocol::RingPaxos, Scheme::Dssmr, 2, w, seed, false);
    }
}

#[test]
fn dssmr_on_multi_paxos_nodes_with_lost_exchanges() {
    run(
        Protocol::MultiPaxos,
        Scheme::Dssmr,
        3,
        Workload::Mix,
        4,
        true,
    );
    run(
        Protocol::RingPaxos,
        Scheme::Dssmr,
        2,
        Workload::Post,
        5,
        true,
    );
}

#[test]
fn ssmr_on_nodes() {
    run(
        Protocol::RingPaxos,
        Scheme::Ssmr,
        3,
        Workload::Post,
        6,
        false,
    );
    run(
        Protocol::MultiPaxos,
        Scheme::Ssmr,
        2,
        Workload::Mix,
        7,
        true,
    );
}

/// A member never dies from what a peer sent: replicas of a DS-SMR cluster are fed
/// random `Msg::Exec` payloads (bytes, and well-formed exchanges, asks and refusals
/// naming random commands, members and objects) from members and strangers while
/// clients run. Every core's invariants hold after every step (the harness checks);
/// safety is not asserted (a member that forges refusals can stop a command).
#[test]
fn hostile_exec_messages_do_not_crash_members() {
    use partita_dssmr::replica::ExecMsg;
    let graph = Graph::generate(&GraphSpec::new(40, 4));
    let (mut c, layout) = cluster(Protocol::RingPaxos, Scheme::Dssmr, 2, &graph);
    c.tick_until_leader(1, 200);
    let nodes: Vec<NodeId> = layout.iter().flatten().copied().chain([1, 2, 99]).collect();
    let mut x = 7u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut proxy = ClientProxy::<Chirper>::new(ProxyConfig::new(Scheme::Dssmr, 2), 1);
    let mut seq = 0;
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(3);
    for round in 0..60 {
        for _ in 0..30 {
            let at = CmdRef {
                instance: next() % 64,
                client: 1000 + next() % 3,
                seq: next() % 20,
            };
            let member = match next() % 4 {
                0 => Member::Oracle,
                m => Member::Partition((m % 3) as u16),
            };
            let data = match next() % 4 {
                0 => (0..next() % 40).map(|_| next() as u8).collect(),
                1 => partita_types::encode(&ExecMsg::Ask { at }),
                2 => partita_types::encode(&ExecMsg::NotTaken { at }),
                _ => partita_types::encode(&ExecMsg::Exchange(Exchange {
                    at,
                    from: member,
                    values: vec![(
                        graph.random_user(&mut rng),
                        vec![next() as u8; (next() % 9) as usize],
                    )],
                    verdict: next() % 2 == 0,
                    clock: next(),
                })),
            };
            let to = layout
                .iter()
                .flatten()
                .nth((next() % 6) as usize)
                .copied()
                .unwrap();
            let from = nodes[(next() % nodes.len() as u64) as usize];
            let mut out = Vec::new();
            c.nodes
                .get_mut(&to)
                .unwrap()
                .on_peer(from, Msg::Exec { data }, &mut out);
            c.take(to, out);
        }
        if !proxy.busy() {
            let mut out = Vec::new();
            proxy.submit(Workload::Mix.next(&graph, round, &mut rng), &mut out);
            for m in out {
                seq += 1;
                c.request(
                    1,
                    Command {
                        client: 1000,
                        seq,
                        session: 0,
                        reply_to: layout[0][0],
                        body: body(m.dests, 2, &m.cmd),
                        route: 0,
                    },
                );
            }
        }
        c.settle();
        c.tick(2);
    }
}

/// A client that names destinations it did not multicast to (the payload says
/// partitions 0 and 1, the body reaches partition 0 only) cannot stall partition 0:
/// after a wait its replicas ask partition 1, which answers that it never took the
/// command, and partition 0 ends it as invalid and goes on with the next command.
#[test]
fn a_misaddressed_command_ends_invalid_and_stalls_nothing() {
    let graph = Graph::generate(&GraphSpec::new(40, 4));
    let (mut c, layout) = cluster(Protocol::RingPaxos, Scheme::Dssmr, 2, &graph);
    c.tick_until_leader(1, 200);
    let user = graph.users().next().unwrap();
    let claimed = Dests::partition(0).with(Member::Partition(1));
    let lie = DsCommand::Global {
        cmd: ChirperCommand::GetTimeline { user },
    };
    let mut body = body(Dests::partition(0), 2, &lie);
    if let partita_types::Body::Whole { payload, .. } = &mut body {
        *payload = partita_types::encode(&(claimed, &lie)).into();
    }
    let reply_to = layout[0][0];
    c.request(
        1,
        Command {
            client: 77,
            seq: 1,
            session: 0,
            reply_to,
            body,
            route: 0,
        },
    );
    c.settle();
    c.tick(60);
    let got: Vec<Reply> = c.replies_of(77).into_iter().cloned().collect();
    assert_eq!(got.len(), 1, "{got:?}");
    let r: DsReply<ChirperReply> =
        partita_types::decode(got[0].result.as_ref().expect("not refused")).unwrap();
    assert!(matches!(r, DsReply::Invalid(_)), "{r:?}");
    assert!(replica(&c, reply_to).counters().asks_sent > 0);
    // Partition 0 goes on: a correct command afterwards is answered.
    let ok = DsCommand::Access {
        cmd: ChirperCommand::GetTimeline { user },
        omega: vec![user],
    };
    c.request(
        1,
        Command {
            client: 77,
            seq: 2,
            session: 0,
            reply_to,
            body: body_of(&ok),
            route: 0,
        },
    );
    c.settle();
    let r: DsReply<ChirperReply> = partita_types::decode(
        c.replies_of(77)
            .into_iter()
            .find(|r| r.seq == 2)
            .expect("answered")
            .result
            .as_ref()
            .unwrap(),
    )
    .unwrap();
    assert!(
        matches!(r, DsReply::Done(ChirperReply::Timeline(_))),
        "{r:?}"
    );
}

fn body_of(cmd: &DsCommand<ChirperCommand>) -> partita_types::Body {
    body(Dests::partition(0), 2, cmd)
}
