//! S-SMR and DS-SMR (paper 003) as sans-IO cores, with the Eyrie-style object API
//! (§5.1) and Chirper (§5.2).
//!
//! - A service implements [`ObjectService`]: objects with ids, commands that name the
//!   objects they access ([`Kind`]), and `execute` over a [`View`] of objects that
//!   does not know where the objects live (Eyrie's `StateMachine.executeCommand`),
//!   with the oracle's hooks: the service's own placement (`placement`) and the
//!   partitions a command may touch under a static map (`static_partitions`).
//! - [`StaticMap`] is the initial placement, also S-SMR's static map: objects hashed
//!   to partitions (knowing nothing of the workload, as the paper's DS-SMR starts) or
//!   the service's own placement (Chirper's: by community, an optimised static map).
//! - [`server::Server`] is the proxy of one member: a data partition (Algorithm 3, and
//!   S-SMR's Algorithm 1 for commands sent to several partitions) or the oracle
//!   (Algorithm 4). Members exchange [`Exchange`] messages at execution; every
//!   command with several destinations is execution-atomic.
//! - [`client::ClientProxy`] is the client proxy (Algorithm 2 with §4.3's cache and
//!   random target partition, and the S-SMR fallback after a number of retries).
//! - [`chirper`] is the social network, its social graph and its four workloads.
//!
//! Drivers deliver commands to members in one order per member that is an atomic
//! multicast's (every two commands two members both deliver are delivered by both in
//! the same order, and the order is acyclic); every replica of a member delivers the
//! same sequence.

pub mod chirper;
pub mod client;
pub mod kv;
pub mod replica;
pub mod server;
mod view;
pub mod wire;

pub use view::View;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;

/// An object's id (Chirper: a user id).
pub type ObjectId = u64;

/// Which objects a scanning command reads ([`ObjectService::scanner`]).
pub type Scanner<'c, O> = Box<dyn Fn(ObjectId, &O) -> bool + 'c>;

/// Data partitions a deployment may have (the oracle is a member beside them).
pub const PARTITIONS_MAX: usize = 63;

/// A member: a data partition (`0..partitions`) or the oracle.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Member {
    Partition(u16),
    Oracle,
}

impl Member {
    fn bit(self) -> u64 {
        match self {
            Member::Partition(p) => 1 << p,
            Member::Oracle => 1 << 63,
        }
    }
}

/// The members a command is multicast to: a bit per data partition, bit 63 the
/// oracle.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Dests(pub u64);

impl Dests {
    pub fn none() -> Dests {
        Dests(0)
    }
    pub fn of(m: Member) -> Dests {
        Dests(m.bit())
    }
    pub fn oracle() -> Dests {
        Dests::of(Member::Oracle)
    }
    pub fn partition(p: u16) -> Dests {
        Dests::of(Member::Partition(p))
    }
    /// Every data partition of `n`.
    pub fn all_partitions(n: usize) -> Dests {
        assert!((1..=PARTITIONS_MAX).contains(&n), "1 to 63 partitions");
        Dests((1u64 << n) - 1)
    }
    pub fn with(self, m: Member) -> Dests {
        Dests(self.0 | m.bit())
    }
    pub fn contains(self, m: Member) -> bool {
        self.0 & m.bit() != 0
    }
    pub fn count(self) -> usize {
        self.0.count_ones() as usize
    }
    /// The data partitions, ascending.
    pub fn partitions(self) -> impl Iterator<Item = u16> {
        let bits = self.0 & !(1 << 63);
        (0..63u16).filter(move |p| bits & (1 << p) != 0)
    }
    /// Every member, partitions ascending, then the oracle.
    pub fn members(self) -> impl Iterator<Item = Member> {
        self.partitions()
            .map(Member::Partition)
            .chain(self.contains(Member::Oracle).then_some(Member::Oracle))
    }
    /// Whether every member names a partition below `n` (or the oracle).
    pub fn valid(self, partitions: usize) -> bool {
        self.0 != 0 && self.partitions().all(|p| usize::from(p) < partitions)
    }
}

/// What a command is to the partitioning (the oracle's `extractObject`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Reads and writes of objects; it names those it reads (and may write objects it
    /// finds through them: Chirper's post writes every follower's timeline).
    Access(Vec<ObjectId>),
    /// Creates one object.
    Create(ObjectId),
    /// Deletes one object.
    Delete(ObjectId),
}

/// A service whose state is a set of objects (Eyrie's `PRObject`s) that DS-SMR moves
/// between partitions.
///
/// Contract, so that every member that executes a command computes the same reply:
/// `execute` reads only objects its command names (it may write others, found
/// through what it read, such as a post's followers), is deterministic, and leaves
/// alone an object the view does not give it (it lives in another partition, whose
/// members execute the write themselves, or it does not exist).
pub trait ObjectService: Send + 'static {
    const NAME: &'static str;
    type Object: Clone + Debug + PartialEq + Send + Sync + Serialize + DeserializeOwned + 'static;
    type Command: Clone + Debug + Send + Sync + Serialize + DeserializeOwned + 'static;
    type Reply: Clone + Debug + PartialEq + Send + Sync + Serialize + DeserializeOwned + 'static;

    fn kind(cmd: &Self::Command) -> Kind;
    /// The service's own placement (Chirper's `getObjectPlacement`): what
    /// [`StaticMap::Service`] puts where. A service that knows nothing of its workload
    /// may leave it to [`StaticMap::hashed`].
    fn placement(id: ObjectId, partitions: usize) -> u16 {
        StaticMap::hashed(id, partitions)
    }
    /// S-SMR's oracle: a superset of the partitions the command touches when every
    /// object is where `map` puts it; `None` when that cannot be known from the
    /// command (Chirper's post: its followers; a scan), and the command goes to all.
    fn static_partitions(cmd: &Self::Command, partitions: usize, map: StaticMap) -> Option<Dests> {
        placed::<Self>(cmd, partitions, map)
    }
    /// The object a `Create` command makes.
    fn create(cmd: &Self::Command) -> Self::Object;
    /// `Some(value)`: every id names an object from the start, holding `value`, in
    /// the partition the static map puts it in, until a move takes it elsewhere; such
    /// a service never creates or deletes (a key-value store: a key that holds
    /// nothing is an empty object, written by the first put). `None` (the default):
    /// objects exist once loaded or created.
    fn implicit() -> Option<Self::Object> {
        None
    }
    /// Whether the command reads objects it cannot name (a range over keys): it runs
    /// at every data partition (S-SMR's execution, under DS-SMR too), each sending the
    /// others its objects that [`ObjectService::scanner`] picks, and
    /// [`View::scan`] gives the execution all of them.
    fn scans(_cmd: &Self::Command) -> bool {
        false
    }
    /// Which objects a scanning command reads (called once per command, then for each
    /// object of the partition).
    fn scanner<'c>(_cmd: &'c Self::Command) -> Scanner<'c, Self::Object> {
        Box::new(|_, _| false)
    }
    /// What a destination sends the others of its object `obj` for `cmd` (the
    /// objects a command spanning partitions names, and a scan's): `None`, the whole
    /// object (the default); a service may leave out what the execution of `cmd`
    /// does not read at another partition, which writes only its own objects. Moves
    /// always carry whole objects.
    fn exchanged(_cmd: &Self::Command, _obj: &Self::Object) -> Option<Self::Object> {
        None
    }
    /// Execute an access over the objects the view gives.
    fn execute(cmd: &Self::Command, view: &mut View<'_, Self::Object>) -> Self::Reply;
}

/// The partitions `map` puts an access's objects in (S-SMR's default static
/// oracle); `None` for creates and deletes.
pub fn placed<S: ObjectService + ?Sized>(
    cmd: &S::Command,
    partitions: usize,
    map: StaticMap,
) -> Option<Dests> {
    let Kind::Access(objects) = S::kind(cmd) else {
        return None;
    };
    if S::scans(cmd) {
        return None;
    }
    let mut d = Dests::none();
    for o in objects {
        d = d.with(Member::Partition(map.place::<S>(o, partitions)));
    }
    Some(d)
}

/// The initial placement of objects, which is also S-SMR's static map: where the
/// objects a deployment starts with are loaded, where a new object is created, and
/// where S-SMR's oracle sends a command. Every member and client of a deployment
/// must use the same one (the cluster file's `[chirper] placement`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StaticMap {
    /// Each object hashed to a partition: knows nothing of which objects are used
    /// together (paper 003 §1: DS-SMR "does not need any prior information about the
    /// workload"; the map the paper's S-SMR and DS-SMR start from).
    Hashed,
    /// The service's own [`ObjectService::placement`] (Chirper: by community, so that
    /// most follows stay in one partition; an optimised static map).
    #[default]
    Service,
}

impl StaticMap {
    /// The partition `map` puts object `id` in.
    pub fn place<S: ObjectService + ?Sized>(self, id: ObjectId, partitions: usize) -> u16 {
        match self {
            StaticMap::Hashed => StaticMap::hashed(id, partitions),
            StaticMap::Service => S::placement(id, partitions),
        }
    }

    /// `id` hashed to one of `partitions` (SplitMix64's finaliser, so that ids that
    /// share bits, such as Chirper's community in the high ones, spread evenly).
    pub fn hashed(id: ObjectId, partitions: usize) -> u16 {
        let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % partitions.max(1) as u64) as u16
    }

    pub fn name(self) -> &'static str {
        match self {
            StaticMap::Hashed => "hashed",
            StaticMap::Service => "service",
        }
    }

    /// Parse a cluster file's or a command line's name.
    pub fn parse(s: &str) -> Result<StaticMap, String> {
        match s {
            "hashed" => Ok(StaticMap::Hashed),
            "service" => Ok(StaticMap::Service),
            _ => Err(format!(
                "`{s}` is not a placement: `hashed` (objects hashed to partitions) or \
                 `service` (the service's own placement)"
            )),
        }
    }
}

/// A delivered command, named the same at every member: the ordering's instance it
/// was delivered in and the client's id and sequence number (an instance never holds
/// two copies of one command, and members see different parts of an instance, so an
/// index would not do). What exchanges and replies name; ordered by instance first.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CmdRef {
    pub instance: u64,
    pub client: u64,
    pub seq: u64,
}

/// A location per object, as the oracle (or a cache) knows it.
pub type Locations = Vec<(ObjectId, u16)>;

/// What a client proxy multicasts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum DsCommand<C> {
    /// Ask the oracle where the command's objects (and `extra` ones, learned from a
    /// retry) are: answered with a [`Prophecy`].
    Consult { cmd: C, extra: Vec<ObjectId> },
    /// DS-SMR: execute at the one partition it is sent to, if every object in
    /// `omega` (and every object it touches) is there at delivery; otherwise answer
    /// retry.
    Access { cmd: C, omega: Vec<ObjectId> },
    /// S-SMR (and DS-SMR's fallback): every destination executes it, exchanging the
    /// values of the named objects it holds; the answer leaves once every
    /// destination has signalled.
    Global { cmd: C },
    /// Move these objects (each with the partition it is believed to be at) to `to`;
    /// multicast to the oracle, `to` and every source. Several moves in one command
    /// act as the same moves delivered one after the other. Not answered.
    Move { moves: Locations, to: u16 },
    /// Create the command's object at `at`; multicast to `at` and the oracle, which
    /// answers.
    Create { cmd: C, at: u16 },
    /// Delete the command's object where the client believes it is (the destination
    /// partitions); the oracle answers.
    Delete { cmd: C },
}

/// The oracle's answer to a consult.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Prophecy {
    /// Where every object is.
    At(Locations),
    /// The command cannot run: an object it accesses (or deletes) does not exist, or
    /// the object it creates exists already.
    Nok,
    /// Where a create makes its object.
    CreateAt(u16),
}

/// A member's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum DsReply<R> {
    Done(R),
    /// An access found objects elsewhere at delivery: every object it touched, to be
    /// moved together before it is sent again.
    Retry(Vec<ObjectId>),
    Prophecy(Prophecy),
    /// A create's outcome (false: the object existed).
    Created(bool),
    /// A delete's outcome (false: there was nothing to delete).
    Deleted(bool),
    /// From a destination that does not answer the command: it ran it (its signal to
    /// the client; the answer is another destination's).
    Signal,
    /// The command cannot run here (sent to a member that does not take its kind).
    Invalid(String),
}

impl<R> DsReply<R> {
    /// Whether this is a destination's signal rather than the command's answer.
    pub fn is_signal(&self) -> bool {
        matches!(self, DsReply::Signal)
    }
}

/// What one member sends the others of a command's destinations when the command
/// reaches the head of its queue: the signal of execution atomicity, with the values
/// of the named objects it holds (S-SMR), the moved objects (a move's sources), or
/// the oracle's verdict on a create. Sent by every replica of the member to every
/// replica of the others (reliable multicast: the first copy counts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    pub at: CmdRef,
    pub from: Member,
    /// (object, encoded value).
    pub values: Vec<(ObjectId, Vec<u8>)>,
    pub verdict: bool,
    /// The sender's place for the command among its commands of the instance (see
    /// `server::position`): every destination takes the largest, so that a command
    /// has one position everywhere.
    pub clock: u64,
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    partita_types::encode(v)
}

pub(crate) fn decode<T: DeserializeOwned>(b: &[u8]) -> Option<T> {
    partita_types::decode(b).ok()
}

/// The same service on one whole, unpartitioned state: what every execution of a
/// partitioned deployment must be equivalent to (tests and checks).
pub struct Reference<S: ObjectService> {
    pub objects: partita_types::DetHashMap<ObjectId, S::Object>,
}

impl<S: ObjectService> Default for Reference<S> {
    fn default() -> Self {
        Reference {
            objects: Default::default(),
        }
    }
}

impl<S: ObjectService> Reference<S> {
    pub fn load(&mut self, objects: impl IntoIterator<Item = (ObjectId, S::Object)>) {
        self.objects.extend(objects);
    }

    /// Execute an access.
    pub fn execute(&mut self, cmd: &S::Command) -> S::Reply {
        self.execute_at(cmd, 0)
    }

    /// Execute an access at `position` of the order ([`View::position`]).
    pub fn execute_at(&mut self, cmd: &S::Command, position: u64) -> S::Reply {
        let empty = std::collections::BTreeMap::new();
        if let (Some(v), Kind::Access(named)) = (S::implicit(), S::kind(cmd)) {
            for id in named {
                self.objects.entry(id).or_insert_with(|| v.clone());
            }
        }
        let mut view = View::new(&self.objects, &empty, false, position, S::scans(cmd));
        let r = S::execute(cmd, &mut view);
        let (writes, _, _) = view.finish();
        self.objects.extend(writes);
        r
    }

    /// Create the command's object; whether it did not exist.
    pub fn create(&mut self, id: ObjectId, cmd: &S::Command) -> bool {
        if self.objects.contains_key(&id) {
            return false;
        }
        self.objects.insert(id, S::create(cmd));
        true
    }

    pub fn delete(&mut self, id: ObjectId) {
        self.objects.remove(&id);
    }
}
