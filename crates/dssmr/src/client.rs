//! The client proxy (paper 003 Algorithm 2, with §4.3's location cache and random
//! target partition, and the fallback to S-SMR after a number of retries), sans-IO.

use crate::{
    Dests, DsCommand, DsReply, Kind, Locations, Member, ObjectId, ObjectService, Prophecy,
    StaticMap,
};
use partita_types::DetHashMap;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;

/// Static partitioning (S-SMR: every command to every partition it may touch, objects
/// never move) or dynamic (DS-SMR).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Ssmr,
    Dssmr,
}

#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub scheme: Scheme,
    pub partitions: usize,
    /// Retries of one command before it falls back to S-SMR (the paper's "given
    /// threshold"; 3 by default).
    pub retries_max: u32,
    /// Use the location cache (§4.3).
    pub cache: bool,
    /// The deployment's initial placement and S-SMR's static map (the cluster file's
    /// `[chirper] placement`; the service's own by default).
    pub static_map: StaticMap,
}

impl ProxyConfig {
    pub fn new(scheme: Scheme, partitions: usize) -> ProxyConfig {
        ProxyConfig {
            scheme,
            partitions,
            retries_max: 3,
            cache: true,
            static_map: StaticMap::default(),
        }
    }
}

/// Where an access's objects are gathered when they are in several partitions (the
/// oracle's `getTargetPartition`). `candidates` are the partitions that hold them,
/// ascending, with how many each holds.
pub trait Placement: Send {
    fn target(&mut self, candidates: &[(u16, usize)], rng: &mut ChaCha8Rng) -> u16;
}

/// The paper's default: one of the partitions involved, at random (§4.3: spreads the
/// objects and keeps everything from collapsing into one partition).
pub struct RandomPlacement;

impl Placement for RandomPlacement {
    fn target(&mut self, candidates: &[(u16, usize)], rng: &mut ChaCha8Rng) -> u16 {
        candidates[rng.gen_range(0..candidates.len())].0
    }
}

/// The partition that already holds most of the objects (fewest moves; ties to the
/// lowest).
pub struct MostObjectsPlacement;

impl Placement for MostObjectsPlacement {
    fn target(&mut self, candidates: &[(u16, usize)], _rng: &mut ChaCha8Rng) -> u16 {
        let mut best = candidates[0];
        for c in candidates {
            if c.1 > best.1 {
                best = *c;
            }
        }
        best.0
    }
}

/// What the proxy asks its driver to multicast.
#[derive(Clone, Debug, PartialEq)]
pub struct Multicast<C> {
    pub dests: Dests,
    pub cmd: DsCommand<C>,
    /// Whether an answer comes back (moves are not answered and not waited for).
    pub answered: bool,
}

/// What the application gets.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome<R> {
    Done(R),
    /// An object the command needs does not exist (or the object a create makes
    /// exists already: see `Created`).
    Nok,
    Created(bool),
    Deleted,
    /// A member refused what the proxy sent.
    Failed(String),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    pub commands: u64,
    pub consults: u64,
    /// Accesses sent from the cache alone.
    pub cache_hits: u64,
    pub move_commands: u64,
    pub objects_moved: u64,
    pub retries: u64,
    pub fallbacks: u64,
}

impl std::ops::AddAssign<&ProxyStats> for ProxyStats {
    fn add_assign(&mut self, o: &ProxyStats) {
        self.commands += o.commands;
        self.consults += o.consults;
        self.cache_hits += o.cache_hits;
        self.move_commands += o.move_commands;
        self.objects_moved += o.objects_moved;
        self.retries += o.retries;
        self.fallbacks += o.fallbacks;
    }
}

struct Current<C> {
    cmd: C,
    attempts: u32,
    /// Objects the access is known to touch (named, and those retries named).
    omega: BTreeSet<ObjectId>,
    consulting: bool,
}

pub struct ClientProxy<S: ObjectService> {
    cfg: ProxyConfig,
    cache: DetHashMap<ObjectId, u16>,
    placement: Box<dyn Placement>,
    rng: ChaCha8Rng,
    current: Option<Current<S::Command>>,
    stats: ProxyStats,
}

impl<S: ObjectService> ClientProxy<S> {
    pub fn new(cfg: ProxyConfig, seed: u64) -> ClientProxy<S> {
        assert!((1..=crate::PARTITIONS_MAX).contains(&cfg.partitions));
        ClientProxy {
            cfg,
            cache: DetHashMap::default(),
            placement: Box::new(RandomPlacement),
            rng: ChaCha8Rng::seed_from_u64(seed),
            current: None,
            stats: ProxyStats::default(),
        }
    }

    pub fn set_placement(&mut self, p: Box<dyn Placement>) {
        self.placement = p;
    }
    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }
    pub fn busy(&self) -> bool {
        self.current.is_some()
    }
    /// Give up the command in flight (its outcome is unknown to the application).
    pub fn abandon(&mut self) {
        self.current = None;
    }
    /// Fill the cache ahead of time (§4.3's prefetch), e.g. with the initial placement.
    pub fn prefetch(&mut self, locations: impl IntoIterator<Item = (ObjectId, u16)>) {
        self.cache.extend(locations);
    }
    /// Fill the cache with where the static map put `ids` (the objects a deployment
    /// starts with).
    pub fn prefetch_initial(&mut self, ids: impl IntoIterator<Item = ObjectId>) {
        let (n, map) = (self.cfg.partitions, self.cfg.static_map);
        self.cache
            .extend(ids.into_iter().map(|id| (id, map.place::<S>(id, n))));
    }

    /// Issue a command (one at a time).
    pub fn submit(&mut self, cmd: S::Command, out: &mut Vec<Multicast<S::Command>>) {
        assert!(self.current.is_none(), "one command at a time");
        self.stats.commands += 1;
        let kind = S::kind(&cmd);
        let omega: BTreeSet<ObjectId> = match &kind {
            Kind::Access(o) => o.iter().copied().collect(),
            Kind::Create(v) | Kind::Delete(v) => [*v].into(),
        };
        self.current = Some(Current {
            cmd,
            attempts: 0,
            omega,
            consulting: false,
        });
        if self.cfg.scheme == Scheme::Ssmr {
            self.ssmr(out);
            return;
        }
        if S::scans(&self.current.as_ref().expect("current").cmd) {
            // Objects it cannot name: every partition runs it (S-SMR's execution),
            // and no move can gather what it reads.
            out.push(Multicast {
                dests: Dests::all_partitions(self.cfg.partitions),
                cmd: DsCommand::Global {
                    cmd: self.current.as_ref().expect("current").cmd.clone(),
                },
                answered: true,
            });
            return;
        }
        // An implicit object the cache does not know is taken to be at its home (the
        // static map's partition: where it is unless it moved), as if prefetched; if
        // it moved, its home says so and the oracle is consulted then.
        let implicit = S::implicit().is_some();
        let (n, map) = (self.cfg.partitions, self.cfg.static_map);
        let cached: Option<Locations> = match (&kind, self.cfg.cache) {
            (Kind::Access(_), true) => {
                let cur = self.current.as_ref().expect("current");
                cur.omega
                    .iter()
                    .map(|o| {
                        let home = || implicit.then(|| map.place::<S>(*o, n));
                        self.cache.get(o).copied().or_else(home).map(|p| (*o, p))
                    })
                    .collect()
            }
            _ => None,
        };
        match cached {
            // The cache sends an access only where it needs no move. A move planned
            // from a stale entry is a multicast to three groups that does nothing (its
            // source no longer holds the object) and stales no one's cache less; so
            // objects the cache puts in different partitions are located by the
            // oracle first, whose answer then decides the move.
            Some(locs) if locs.iter().all(|(_, p)| *p == locs[0].1) => {
                self.stats.cache_hits += 1;
                self.plan(locs, out);
            }
            _ => self.consult(out),
        }
    }

    fn ssmr(&mut self, out: &mut Vec<Multicast<S::Command>>) {
        let cur = self.current.as_ref().expect("current");
        let (n, map) = (self.cfg.partitions, self.cfg.static_map);
        let dests = match S::kind(&cur.cmd) {
            Kind::Create(v) | Kind::Delete(v) => Dests::partition(map.place::<S>(v, n)),
            Kind::Access(_) => S::static_partitions(&cur.cmd, n, map)
                .filter(|d| d.count() > 0)
                .unwrap_or_else(|| Dests::all_partitions(n)),
        };
        out.push(Multicast {
            dests,
            cmd: DsCommand::Global {
                cmd: cur.cmd.clone(),
            },
            answered: true,
        });
    }

    fn consult(&mut self, out: &mut Vec<Multicast<S::Command>>) {
        let cur = self.current.as_mut().expect("current");
        cur.consulting = true;
        self.stats.consults += 1;
        let named: BTreeSet<ObjectId> = match S::kind(&cur.cmd) {
            Kind::Access(o) => o.into_iter().collect(),
            _ => BTreeSet::new(),
        };
        let extra = cur.omega.difference(&named).copied().collect();
        out.push(Multicast {
            dests: Dests::oracle(),
            cmd: DsCommand::Consult {
                cmd: cur.cmd.clone(),
                extra,
            },
            answered: true,
        });
    }

    /// Algorithm 2, lines 8 to 21, for an access whose objects are at `locs`.
    fn plan(&mut self, locs: Locations, out: &mut Vec<Multicast<S::Command>>) {
        let cur = self.current.as_mut().expect("current");
        cur.consulting = false;
        let mut count: Vec<(u16, usize)> = Vec::new();
        for (_, p) in &locs {
            match count.iter_mut().find(|(q, _)| q == p) {
                Some(c) => c.1 += 1,
                None => count.push((*p, 1)),
            }
        }
        count.sort_unstable();
        let to = match count.len() {
            0 => self.rng.gen_range(0..self.cfg.partitions) as u16,
            1 => count[0].0,
            _ => self.placement.target(&count, &mut self.rng),
        };
        let moves: Locations = locs.iter().filter(|(_, p)| *p != to).copied().collect();
        if !moves.is_empty() {
            let mut dests = Dests::oracle().with(Member::Partition(to));
            for (o, p) in &moves {
                dests = dests.with(Member::Partition(*p));
                self.cache.insert(*o, to);
            }
            self.stats.move_commands += 1;
            self.stats.objects_moved += moves.len() as u64;
            out.push(Multicast {
                dests,
                cmd: DsCommand::Move { moves, to },
                answered: false,
            });
        }
        out.push(Multicast {
            dests: Dests::partition(to),
            cmd: DsCommand::Access {
                cmd: cur.cmd.clone(),
                omega: cur.omega.iter().copied().collect(),
            },
            answered: true,
        });
    }

    /// The answer to the command in flight; `Some` when the application's command is
    /// finished.
    pub fn on_reply(
        &mut self,
        reply: DsReply<S::Reply>,
        out: &mut Vec<Multicast<S::Command>>,
    ) -> Option<Outcome<S::Reply>> {
        let cur = self.current.as_mut()?;
        let finished = match reply {
            DsReply::Signal => return None,
            // A member that cannot run what this proxy sent (a bug somewhere): the
            // command ends, never retried.
            DsReply::Invalid(why) => Some(Outcome::Failed(why)),
            DsReply::Done(r) => Some(Outcome::Done(r)),
            DsReply::Created(b) => Some(Outcome::Created(b)),
            DsReply::Deleted(true) => Some(Outcome::Deleted),
            DsReply::Deleted(false) => Some(Outcome::Nok),
            DsReply::Prophecy(p) => match p {
                Prophecy::Nok => Some(Outcome::Nok),
                Prophecy::CreateAt(at) => {
                    let cmd = cur.cmd.clone();
                    out.push(Multicast {
                        dests: Dests::oracle().with(Member::Partition(at)),
                        cmd: DsCommand::Create { cmd, at },
                        answered: true,
                    });
                    None
                }
                Prophecy::At(locs) => {
                    for (o, p) in &locs {
                        self.cache.insert(*o, *p);
                    }
                    match S::kind(&cur.cmd) {
                        // An object the access found through another (a follower of
                        // the poster) that exists nowhere any more (deleted): no
                        // partition can hold everything, and only the execution
                        // across every partition can find that out at its delivery.
                        Kind::Access(_)
                            if cur.omega.iter().any(|o| !locs.iter().any(|(x, _)| x == o)) =>
                        {
                            self.fallback(out)
                        }
                        Kind::Access(_) => self.plan(locs, out),
                        Kind::Delete(_) | Kind::Create(_) => {
                            let mut dests = Dests::oracle();
                            for (_, p) in &locs {
                                dests = dests.with(Member::Partition(*p));
                            }
                            let cmd = cur.cmd.clone();
                            out.push(Multicast {
                                dests,
                                cmd: DsCommand::Delete { cmd },
                                answered: true,
                            });
                        }
                    }
                    None
                }
            },
            DsReply::Retry(gamma) => {
                self.stats.retries += 1;
                cur.attempts += 1;
                for o in &gamma {
                    self.cache.remove(o);
                }
                cur.omega.extend(gamma);
                if cur.attempts > self.cfg.retries_max {
                    self.fallback(out);
                } else {
                    self.consult(out);
                }
                None
            }
        };
        if finished.is_some() {
            self.current = None;
        }
        finished
    }

    /// Send the command in flight to every partition (and the oracle, for a create
    /// or delete): S-SMR's execution, which needs no object to be anywhere.
    fn fallback(&mut self, out: &mut Vec<Multicast<S::Command>>) {
        let cur = self.current.as_ref().expect("current");
        self.stats.fallbacks += 1;
        let mut dests = Dests::all_partitions(self.cfg.partitions);
        if matches!(S::kind(&cur.cmd), Kind::Create(_) | Kind::Delete(_)) {
            dests = dests.with(Member::Oracle);
        }
        out.push(Multicast {
            dests,
            cmd: DsCommand::Global {
                cmd: cur.cmd.clone(),
            },
            answered: true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chirper::{user_id, Chirper, ChirperCommand};

    fn proxy() -> ClientProxy<Chirper> {
        ClientProxy::new(ProxyConfig::new(Scheme::Dssmr, 2), 1)
    }

    /// The cache sends an access whose objects it puts in one partition straight
    /// there; objects it puts in two are located by the oracle first, and the move
    /// comes from the oracle's answer, not from the cache.
    #[test]
    fn the_cache_never_plans_a_move() {
        let (a, b) = (user_id(0, 1), user_id(1, 2));
        let follow = ChirperCommand::Follow { user: a, whom: b };

        let mut p = proxy();
        p.prefetch([(a, 1), (b, 1)]);
        let mut out = Vec::new();
        p.submit(follow.clone(), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].dests, Dests::partition(1));
        assert!(matches!(out[0].cmd, DsCommand::Access { .. }));
        assert_eq!((p.stats().cache_hits, p.stats().consults), (1, 0));

        let mut p = proxy();
        p.prefetch([(a, 0), (b, 1)]);
        let mut out = Vec::new();
        p.submit(follow, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].dests, Dests::oracle());
        assert!(matches!(out[0].cmd, DsCommand::Consult { .. }));
        assert_eq!((p.stats().cache_hits, p.stats().consults), (0, 1));
        // The oracle says both are in partition 1 already: no move at all.
        let mut out = Vec::new();
        let done = p.on_reply(
            DsReply::Prophecy(Prophecy::At(vec![(a, 1), (b, 1)])),
            &mut out,
        );
        assert!(done.is_none());
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].dests, Dests::partition(1));
        assert_eq!(p.stats().move_commands, 0);
    }

    /// An implicit object the cache does not know is sent to its home partition at
    /// once, with no consult; if it moved away, the home's retry brings the oracle in.
    #[test]
    fn implicit_objects_start_at_home() {
        use crate::kv::{key_object, KvObjects};
        let mut p = ClientProxy::<KvObjects>::new(ProxyConfig::new(Scheme::Dssmr, 4), 1);
        let put = partita_kv::KvCommand::put("k", "v");
        let id = key_object(b"k");
        let home = StaticMap::default().place::<KvObjects>(id, 4);
        let mut out = Vec::new();
        p.submit(put, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].dests, Dests::partition(home));
        assert!(matches!(out[0].cmd, DsCommand::Access { .. }));
        assert_eq!((p.stats().cache_hits, p.stats().consults), (1, 0));
        let mut out = Vec::new();
        assert!(p.on_reply(DsReply::Retry(vec![id]), &mut out).is_none());
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].dests, Dests::oracle());
        assert_eq!(p.stats().consults, 1);
    }
}
