//! The client side on Partita's client core: [`DsWire`] is a member multicast as a
//! `partita_service::ServiceCodec` (the client's half of a service, without execution),
//! so that `ClientCore<DsWire<S>>` (the simulator's clients, `partita-client`) carries
//! it with sessions, sequence numbers, timeouts, resubmissions and leader hints, and
//! hands back the answer once every destination replied from one instance. Replicas of
//! an S-SMR or DS-SMR cluster are [`crate::replica::DsReplica`]s.

use crate::replica::dests_to_groups;
use crate::{encode, Dests, DsCommand, DsReply, ObjectService};
use partita_service::{MergeError, Objects, ServiceCodec, SplitError};
use partita_types::{DecodeError, PartitionId, PartitionMap, Payload};
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;

/// One multicast: the destinations and the command, with the number of data
/// partitions (the oracle is the partition after them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireCommand<C> {
    pub dests: Dests,
    pub data: u32,
    pub cmd: DsCommand<C>,
}

impl<C> WireCommand<C> {
    pub fn groups(&self) -> u64 {
        dests_to_groups(self.dests, self.data as usize)
    }
}

/// The multicast wire of service `S` (client side only).
pub struct DsWire<S>(PhantomData<fn() -> S>);

impl<S: ObjectService> ServiceCodec for DsWire<S> {
    const NAME: &'static str = S::NAME;
    type Command = WireCommand<S::Command>;
    type Reply = DsReply<S::Reply>;
    type Key = u64;

    /// What a destination receives: the destinations and the command (replicas see
    /// only their own partition's projection of the body).
    fn encode_command(c: &Self::Command) -> Payload {
        Payload::from(encode(&(c.dests, &c.cmd)))
    }
    /// (Replicas decode with `DsReplica`; the number of data partitions is not in the
    /// bytes and comes back as 0.)
    fn decode_command(bytes: &[u8]) -> Result<Self::Command, DecodeError> {
        let (dests, cmd): (Dests, DsCommand<S::Command>) = partita_types::decode(bytes)?;
        Ok(WireCommand {
            dests,
            data: 0,
            cmd,
        })
    }
    fn check(c: &Self::Command) -> Result<(), String> {
        if c.dests.0 == 0 || !c.dests.valid(c.data as usize) {
            return Err(format!(
                "destinations {:?} outside {} partitions",
                c.dests, c.data
            ));
        }
        Ok(())
    }
    fn is_read_only(_c: &Self::Command) -> bool {
        false
    }
    fn objects(_c: &Self::Command) -> Objects<u64> {
        Objects::default()
    }
    /// The same command for every destination.
    fn split(
        c: &Self::Command,
        map: &PartitionMap,
    ) -> Result<Vec<(PartitionId, Self::Command)>, SplitError> {
        let parts: Vec<PartitionId> = partita_types::mask_partitions(c.groups());
        if parts.is_empty() || parts.iter().any(|p| *p >= map.count()) {
            return Err(SplitError::Refused(format!(
                "destinations {:?} outside the cluster's {} partitions",
                c.dests,
                map.count()
            )));
        }
        Ok(parts.into_iter().map(|p| (p, c.clone())).collect())
    }
    /// The answer among the destinations' replies (the others are signals); a move,
    /// answered by none, is a signal.
    fn merge(
        _c: &Self::Command,
        parts: Vec<(PartitionId, Self::Reply)>,
        _map: &PartitionMap,
    ) -> Result<Self::Reply, MergeError> {
        let mut answers = parts.into_iter().map(|(_, r)| r).filter(|r| !r.is_signal());
        match (answers.next(), answers.next()) {
            (None, _) => Ok(DsReply::Signal),
            (Some(a), None) => Ok(a),
            (Some(a), Some(b)) => Err(MergeError(format!("two answers: {a:?} and {b:?}"))),
        }
    }
}
