//! Any service placed on GeoPaxos+'s serializers (paper 004 §III): [`Placed<S>`] is
//! service `S` with an [`ObjectMap`] beside it, so that the common replica routes,
//! decides and reconfigures for services that do not place their own objects (the
//! key-value store, the B+tree, a user's), the objects being what `S::access` names
//! (the key-value store's keys and its store-wide revision, the B+tree's keys).
//!
//! - **The same service to clients.** `Placed<S>` has `S`'s name, commands (in `S`'s
//!   encoding), replies and checks: clients, histories and checkers are `S`'s.
//! - **Replicated placement.** The map is part of the state: in the snapshot (with the
//!   topology and options it was configured with) and the digest, so checkpoints,
//!   state transfer and convergence checks cover it.
//! - **Configuration by genesis.** `StateMachine::new()` takes no arguments: a
//!   genesis command ([`PLACED_GENESIS_MAGIC`] then a [`PlacedGenesis`]) configures
//!   the map before anything is ordered (`partita_smr::ServiceFactory::seeded`);
//!   `check` refuses it from a client. Unconfigured, the service places nothing (every
//!   command goes to every serializer: correct, and slow).
//! - **Counting.** `execute_at` counts the command's accesses (as `access` names them
//!   with the state as it is when the command runs, which is what the delivery decision
//!   judged) before executing it; the replica calls it at every replica for every
//!   command, reads included, so every replica counts alike.

use crate::objects::{ObjectMap, ObjectMapOptions};
use crate::topology::Topology;
use partita_service::{
    Access, ExecutionWork, MergeError, Objects, ServiceCodec, SplitError, StateMachine,
};
use partita_types::{DecodeError, PartitionId, PartitionMap, Payload};
use serde::{Deserialize, Serialize};
use std::ops::Bound;

/// First bytes of a genesis command of [`Placed`].
pub const PLACED_GENESIS_MAGIC: [u8; 8] = *b"PLC\0gen1";

/// What configures a [`Placed`] service: the replicas' topology (replica `i` hosts
/// serializer `i`) and how objects are placed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedGenesis {
    pub topology: Topology,
    pub options: ObjectMapOptions,
}

/// A command of [`Placed<S>`]: one of `S`'s, or the genesis that configures the map.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum PlacedCommand<C> {
    Op(C),
    Genesis(Box<PlacedGenesis>),
}

/// Service `S` placed on serializers by an [`ObjectMap`] (see the module doc).
pub struct Placed<S: StateMachine> {
    inner: S,
    /// The map and what configured it (`None`: not configured, nothing placed).
    map: Option<(ObjectMap, PlacedGenesis)>,
}

impl<S: StateMachine> Placed<S> {
    /// The genesis command configuring a placed service with `g`.
    pub fn genesis(g: &PlacedGenesis) -> Payload {
        let mut b = PLACED_GENESIS_MAGIC.to_vec();
        b.extend_from_slice(&partita_types::encode(g));
        Payload::from(b)
    }

    /// The service inside.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The placement, once configured.
    pub fn map(&self) -> Option<&ObjectMap> {
        self.map.as_ref().map(|(m, _)| m)
    }

    fn access_of(&self, cmd: &PlacedCommand<S::Command>) -> Access {
        match cmd {
            PlacedCommand::Op(c) => self.inner.access(c),
            PlacedCommand::Genesis(_) => Access::everything(),
        }
    }
}

/// The genesis a [`Placed`] service takes, from its bytes (after the magic).
pub fn decode_placed_genesis(bytes: &[u8]) -> Result<PlacedGenesis, DecodeError> {
    let Some(rest) = bytes.strip_prefix(&PLACED_GENESIS_MAGIC[..]) else {
        return Err(DecodeError("not a placed service's genesis".into()));
    };
    let g: PlacedGenesis = partita_types::decode(rest).map_err(|e| {
        DecodeError(format!(
            "a placed service's genesis that does not decode: {e}"
        ))
    })?;
    g.options
        .validate()
        .map_err(|e| DecodeError(format!("a placed service's genesis refused: {e}")))?;
    Ok(g)
}

/// What a snapshot of [`Placed`] holds: the inner service's, and the map's with what
/// configured it.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    inner: Vec<u8>,
    map: Option<(Vec<u8>, PlacedGenesis)>,
}

impl<S: StateMachine> ServiceCodec for Placed<S> {
    const NAME: &'static str = S::NAME;
    type Command = PlacedCommand<S::Command>;
    type Reply = S::Reply;
    type Key = S::Key;
    fn encode_command(cmd: &Self::Command) -> Payload {
        match cmd {
            PlacedCommand::Op(c) => S::encode_command(c),
            PlacedCommand::Genesis(g) => Self::genesis(g),
        }
    }
    /// `S`'s encoding; a genesis only when that fails and the bytes say so.
    fn decode_command(bytes: &[u8]) -> Result<Self::Command, DecodeError> {
        match S::decode_command(bytes) {
            Ok(c) => Ok(PlacedCommand::Op(c)),
            Err(e) if !bytes.starts_with(&PLACED_GENESIS_MAGIC) => Err(e),
            Err(_) => Ok(PlacedCommand::Genesis(Box::new(decode_placed_genesis(
                bytes,
            )?))),
        }
    }
    fn encode_reply(reply: &Self::Reply) -> Payload {
        S::encode_reply(reply)
    }
    fn decode_reply(bytes: &[u8]) -> Result<Self::Reply, DecodeError> {
        S::decode_reply(bytes)
    }
    fn check(cmd: &Self::Command) -> Result<(), String> {
        match cmd {
            PlacedCommand::Op(c) => S::check(c),
            PlacedCommand::Genesis(_) => Err(format!(
                "a genesis configures a {} replica's placement before anything is ordered; \
                 no client may send one",
                S::NAME
            )),
        }
    }
    fn is_read_only(cmd: &Self::Command) -> bool {
        match cmd {
            PlacedCommand::Op(c) => S::is_read_only(c),
            PlacedCommand::Genesis(_) => false,
        }
    }
    fn objects(cmd: &Self::Command) -> Objects<Self::Key> {
        match cmd {
            PlacedCommand::Op(c) => S::objects(c),
            PlacedCommand::Genesis(_) => Objects {
                keys: Vec::new(),
                ranges: vec![(Bound::Unbounded, Bound::Unbounded)],
            },
        }
    }
    fn split(
        cmd: &Self::Command,
        map: &PartitionMap,
    ) -> Result<Vec<(PartitionId, Self::Command)>, SplitError> {
        match cmd {
            PlacedCommand::Op(c) => Ok(S::split(c, map)?
                .into_iter()
                .map(|(p, c)| (p, PlacedCommand::Op(c)))
                .collect()),
            PlacedCommand::Genesis(_) => Err(SplitError::Refused(
                "a genesis is not split across partitions".into(),
            )),
        }
    }
    fn merge(
        cmd: &Self::Command,
        parts: Vec<(PartitionId, Self::Reply)>,
        map: &PartitionMap,
    ) -> Result<Self::Reply, MergeError> {
        match cmd {
            PlacedCommand::Op(c) => S::merge(c, parts, map),
            PlacedCommand::Genesis(_) => Err(MergeError("a genesis has no reply".into())),
        }
    }
}

impl<S: StateMachine> StateMachine for Placed<S> {
    type Undo = S::Undo;

    fn new() -> Self {
        Placed {
            inner: S::new(),
            map: None,
        }
    }

    /// A client's command; a genesis is applied by [`StateMachine::genesis`] before
    /// anything is ordered, and `check` refuses it anywhere else, so no replica ever
    /// executes one.
    fn execute(&mut self, cmd: &Self::Command) -> Self::Reply {
        match cmd {
            PlacedCommand::Op(c) => self.inner.execute(c),
            PlacedCommand::Genesis(_) => {
                unreachable!("`check` refuses a genesis: no replica executes one")
            }
        }
    }

    fn genesis(&mut self, cmd: &Self::Command) {
        match cmd {
            PlacedCommand::Genesis(g) if self.map.is_none() => {
                let map = ObjectMap::new(g.topology.clone(), g.options)
                    .expect("a genesis that decoded is valid");
                self.map = Some((map, (**g).clone()));
            }
            PlacedCommand::Genesis(_) => {}
            PlacedCommand::Op(c) => self.inner.genesis(c),
        }
    }

    fn execute_undoable(&mut self, cmd: &Self::Command) -> (Self::Reply, Self::Undo) {
        match cmd {
            PlacedCommand::Op(c) => self.inner.execute_undoable(c),
            PlacedCommand::Genesis(_) => panic!("a genesis is never executed speculatively"),
        }
    }

    fn undo(&mut self, undo: Self::Undo) {
        self.inner.undo(undo)
    }

    fn snapshot(&self) -> Vec<u8> {
        partita_types::encode(&Snapshot {
            inner: self.inner.snapshot(),
            map: self.map.as_ref().map(|(m, g)| (m.snapshot(), g.clone())),
        })
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let s: Snapshot =
            partita_types::decode(bytes).map_err(|e| format!("a placed snapshot: {e}"))?;
        let inner = S::restore(&s.inner)?;
        let map = match s.map {
            None => None,
            Some((bytes, g)) => {
                g.options.validate().map_err(|e| e.to_string())?;
                let mut m =
                    ObjectMap::new(g.topology.clone(), g.options).map_err(|e| e.to_string())?;
                m.restore(&bytes)?;
                Some((m, g))
            }
        };
        Ok(Placed { inner, map })
    }

    fn digest(&self) -> u64 {
        let placement = self.map.as_ref().map_or(0, |(m, _)| m.digest());
        let d = self.inner.digest() ^ placement.rotate_left(17);
        d.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (d >> 29)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn op_count(cmd: &Self::Command) -> u64 {
        match cmd {
            PlacedCommand::Op(c) => S::op_count(c),
            PlacedCommand::Genesis(_) => 0,
        }
    }

    fn account(cmd: &Self::Command, reply: &Self::Reply, work: &mut ExecutionWork) {
        match cmd {
            PlacedCommand::Op(c) => S::account(c, reply, work),
            PlacedCommand::Genesis(_) => {}
        }
    }

    fn access(&self, cmd: &Self::Command) -> Access {
        self.access_of(cmd)
    }

    fn psite(&self, cmd: &Self::Command, from: usize) -> Option<u64> {
        let (m, _) = self.map.as_ref()?;
        Some(m.psite(&self.access_of(cmd), from))
    }

    fn misplaced(&self, cmd: &Self::Command, from: usize, dst: u64) -> Option<u64> {
        let (m, _) = self.map.as_ref()?;
        m.misplaced(&self.access_of(cmd), from, dst)
    }

    fn execute_at(&mut self, cmd: &Self::Command, from: usize) -> Self::Reply {
        if let (Some((m, _)), PlacedCommand::Op(c)) = (self.map.as_mut(), cmd) {
            let access = self.inner.access(c);
            m.record(&access, from);
        }
        self.execute(cmd)
    }

    fn reconfigure(&mut self) {
        if let Some((m, _)) = self.map.as_mut() {
            m.reconfigure();
        }
    }
}
