//! Early replies (paper 001 §VII, future work): with speculative execution, the replica
//! the client chose answers as soon as it executes a command speculatively, with a
//! *tentative* reply, and sends a short [`Confirm`] once the decision confirms the order
//! it executed in. A client treats a result as final only when it is confirmed
//! ([`EarlyWait`]); replies of decided executions (no speculation, or the reply cache
//! answering a resubmission from decided state) are final as before.
//!
//! A confirmation names the result it confirms: `(client, seq, instance, result
//! digest)`. It is a statement about the *decided* order: "executing the decided
//! instance `instance` gave `(client, seq)` a result with this digest". Because every
//! replica executes the decided order deterministically, that statement is true
//! whichever replica, incarnation or speculation attempt sends it. So a client accepts a
//! tentative result exactly when it holds a confirmation with the same instance and the
//! digest of that very result ([`result_digest`], computed by the client from the bytes
//! it received). A stale tentative result (rolled back, then re-executed with another
//! result) never matches the confirmation of the new one; a confirmation that arrives
//! before its tentative reply (reordering) is kept until the reply comes.

use crate::{ClientId, Instance, Outcome, Reply};
use serde::{Deserialize, Serialize};

/// The short message that makes a tentative result final.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirm {
    pub client: ClientId,
    pub seq: u64,
    /// The instance of the tentative reply it confirms ([`Reply::instance`]).
    pub instance: Instance,
    /// [`result_digest`] of the confirmed result.
    pub result_digest: u64,
}

/// What a replica with early replies sends besides final replies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EarlyReply {
    /// The result of a speculative execution: not final until confirmed.
    Tentative(Reply),
    /// The decision confirmed the order a tentative result was computed in.
    Confirm(Confirm),
}

impl EarlyReply {
    pub fn client(&self) -> ClientId {
        match self {
            EarlyReply::Tentative(r) => r.client,
            EarlyReply::Confirm(c) => c.client,
        }
    }
    pub fn seq(&self) -> u64 {
        match self {
            EarlyReply::Tentative(r) => r.seq,
            EarlyReply::Confirm(c) => c.seq,
        }
    }
    /// The confirmation of `reply` (a held speculative reply whose order was decided).
    pub fn confirm(reply: &Reply) -> EarlyReply {
        EarlyReply::Confirm(Confirm {
            client: reply.client,
            seq: reply.seq,
            instance: reply.instance,
            result_digest: result_digest(&reply.result),
        })
    }
}

/// 64-bit FNV-1a of the outcome (its kind, then the reply's bytes or the refusal's
/// text): identifies a result in a confirmation. (Results are not adversarial; a
/// collision would need two different results of one command at one instance.)
pub fn result_digest(result: &Outcome) -> u64 {
    let text;
    let (tag, bytes): (u8, &[u8]) = match result {
        Ok(p) => (0, p),
        Err(crate::Refusal::Rejected(e)) => (1, e.as_bytes()),
        Err(crate::Refusal::Resubmit(e)) => (3, e.as_bytes()),
        Err(crate::Refusal::SessionExpired) => {
            text = [];
            (2, &text)
        }
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in std::iter::once(tag).chain(bytes.iter().copied()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A client's view of one outstanding command under early replies: the tentative
/// results and the confirmations received for it, each at most [`EarlyWait::KEPT_MAX`]
/// (the oldest is forgotten: at worst the client resubmits). The caller checks that
/// the messages are for the outstanding (client, seq).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EarlyWait {
    /// (instance, digest, result) of each distinct tentative reply.
    tentative: Vec<(Instance, u64, Outcome)>,
    /// (instance, digest) of each distinct confirmation.
    confirmed: Vec<(Instance, u64)>,
}

impl EarlyWait {
    pub const KEPT_MAX: usize = 8;

    /// Handle a tentative reply or a confirmation; returns the result once one is
    /// confirmed (the caller then returns or records it).
    pub fn on_early(&mut self, e: &EarlyReply) -> Option<Outcome> {
        match e {
            EarlyReply::Tentative(r) => self.on_tentative(r),
            EarlyReply::Confirm(c) => self.on_confirm(c),
        }
    }

    /// [`EarlyWait::on_early`], with the instance the confirmed result was computed
    /// at (with state partitioning, a client merges only sub-results of one instance).
    pub fn on_early_at(&mut self, e: &EarlyReply) -> Option<(Instance, Outcome)> {
        match e {
            EarlyReply::Tentative(r) => self.on_tentative(r).map(|res| (r.instance, res)),
            EarlyReply::Confirm(c) => self.on_confirm(c).map(|res| (c.instance, res)),
        }
    }

    pub fn on_tentative(&mut self, r: &Reply) -> Option<Outcome> {
        let key = (r.instance, result_digest(&r.result));
        if self.confirmed.contains(&key) {
            return Some(r.result.clone());
        }
        if !self.tentative.iter().any(|(i, d, _)| (*i, *d) == key) {
            if self.tentative.len() == Self::KEPT_MAX {
                let _ = self.tentative.remove(0);
            }
            self.tentative.push((key.0, key.1, r.result.clone()));
        }
        None
    }

    pub fn on_confirm(&mut self, c: &Confirm) -> Option<Outcome> {
        let key = (c.instance, c.result_digest);
        if let Some((_, _, result)) = self.tentative.iter().find(|(i, d, _)| (*i, *d) == key) {
            return Some(result.clone());
        }
        if !self.confirmed.contains(&key) {
            if self.confirmed.len() == Self::KEPT_MAX {
                self.confirmed.remove(0);
            }
            self.confirmed.push(key);
        }
        None
    }

    /// Tentative results received and not (yet) confirmed.
    pub fn tentative(&self) -> usize {
        self.tentative.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: Option<u64>) -> Outcome {
        Ok(crate::Payload::from(crate::encode(&v)))
    }

    fn reply(instance: Instance, v: Option<u64>) -> Reply {
        Reply {
            client: 7,
            seq: 3,
            instance,
            result: value(v),
        }
    }

    #[test]
    fn a_tentative_result_is_final_only_once_confirmed() {
        let mut w = EarlyWait::default();
        let r = reply(5, Some(1));
        assert_eq!(w.on_early(&EarlyReply::Tentative(r.clone())), None);
        assert_eq!(w.tentative(), 1);
        assert_eq!(w.on_early(&EarlyReply::confirm(&r)), Some(r.result));
    }

    #[test]
    fn the_confirmed_result_comes_with_its_instance() {
        let mut w = EarlyWait::default();
        let r = reply(9, Some(4));
        assert_eq!(w.on_early_at(&EarlyReply::confirm(&r)), None);
        assert_eq!(
            w.on_early_at(&EarlyReply::Tentative(r.clone())),
            Some((9, r.result))
        );
    }

    #[test]
    fn a_confirmation_before_its_reply_is_kept() {
        let mut w = EarlyWait::default();
        let r = reply(5, Some(1));
        assert_eq!(w.on_early(&EarlyReply::confirm(&r)), None);
        assert_eq!(
            w.on_early(&EarlyReply::Tentative(r.clone())),
            Some(r.result)
        );
    }

    #[test]
    fn a_confirmation_of_another_result_confirms_nothing() {
        // Speculated at instance 5 with result 1, rolled back, re-speculated at the
        // same instance with result 2, which is confirmed. The stale result 1 (first,
        // or duplicated late) must never be taken for the confirmed one.
        let mut w = EarlyWait::default();
        let stale = reply(5, Some(1));
        let fresh = reply(5, Some(2));
        assert_eq!(w.on_tentative(&stale), None);
        assert_eq!(w.on_early(&EarlyReply::confirm(&reply(6, Some(1)))), None);
        assert_eq!(w.on_early(&EarlyReply::confirm(&fresh)), None);
        assert_eq!(
            w.on_tentative(&stale),
            None,
            "a late duplicate of the stale one"
        );
        assert_eq!(w.on_tentative(&fresh), Some(value(Some(2))));
    }

    #[test]
    fn kept_state_is_bounded() {
        let mut w = EarlyWait::default();
        for i in 0..100 {
            assert_eq!(w.on_tentative(&reply(i, Some(i))), None);
            assert_eq!(
                w.on_confirm(&Confirm {
                    client: 7,
                    seq: 3,
                    instance: 1000 + i,
                    result_digest: i,
                }),
                None
            );
        }
        assert_eq!(w.tentative(), EarlyWait::KEPT_MAX);
        assert_eq!(w.confirmed.len(), EarlyWait::KEPT_MAX);
        // The newest are kept.
        assert!(w
            .on_early(&EarlyReply::confirm(&reply(99, Some(99))))
            .is_some());
    }

    #[test]
    fn digests_tell_results_apart() {
        let a = result_digest(&value(Some(1)));
        assert_eq!(a, result_digest(&value(Some(1))));
        assert_ne!(a, result_digest(&value(Some(2))));
        assert_ne!(a, result_digest(&value(None)));
        assert_ne!(
            a,
            result_digest(&Err(crate::Refusal::Rejected("refused".into())))
        );
        assert_ne!(
            result_digest(&Ok(crate::Payload::from_static(b"x"))),
            result_digest(&Err(crate::Refusal::Rejected("x".into()))),
            "a reply and a refusal with the same bytes differ"
        );
        assert_ne!(
            result_digest(&Ok(crate::Payload::new())),
            result_digest(&Err(crate::Refusal::SessionExpired))
        );
    }
}
