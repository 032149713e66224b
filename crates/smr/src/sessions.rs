//! Client sessions: what a replica remembers of each client, and when it forgets.
//!
//! A client opens a session with a command of sequence number 0 and session 0
//! ([`Command::open`]), addressed to every partition; the replicas answer with the
//! instance they executed it at, and the session's commands name that instance
//! ([`Command::session`]). Per session a replica keeps the reply to the client's last
//! mutating command (exactly-once: a resubmission is answered from it, an older
//! command is ignored) and when the session was last renewed.
//!
//! Time is the ordered time of the values executed (`Value::time_ms`, the leader's
//! clock, never going back): the same at every replica. With a lease (`[sessions]
//! lease_ms` in the cluster file) a session that was not renewed for longer than the
//! lease is forgotten before the next value runs, so the reply cache holds only the
//! clients of the last lease, whatever the number of clients ever seen. Clients renew
//! with a command of sequence number 0 naming their session ([`Command::renew`]), also
//! addressed to every partition, whenever half the lease has passed since they opened
//! or last renewed: the renewal is their traffic. Opens, renewals and expiries are the
//! only changes to the table besides the cached replies, and every partition sees all
//! of them at the same positions, so every partition admits or refuses a command
//! alike: a command for several partitions runs at all of them or at none (a
//! partition's own traffic must not keep a session alive there and not elsewhere).
//!
//! A command of a forgotten session, or of an older session of the same client id,
//! is refused ([`Refusal::SessionExpired`]) and runs nowhere; an earlier copy of it
//! may have run before the session expired, so its client learns only that the
//! outcome is unknown, never a wrong answer. An open always starts a new session (a
//! late copy of an old open ends the session it finds: its commands are then
//! refused, a spurious expiry that costs a client one unknown outcome, never safety).
//! Without a lease, sessions never expire, and a client that sends a command without
//! opening gets a session implicitly (scripted tests use this); a command naming
//! another session than the client's current one is refused with or without a lease
//! (a new open, or a late copy of an old one, ends the previous session).
//!
//! Every change goes through [`Sessions::set`], which keeps the expiry index and can
//! log the previous entry, so a speculation can be rolled back exactly.

use partita_types::{ClientId, Command, DetHashMap, Instance, Refusal, Reply};
use std::collections::BTreeSet;

/// One client's session.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Session {
    pub client: ClientId,
    /// The instance its open was executed at (what its commands name).
    pub opened_at: Instance,
    /// Ordered time it was opened or last renewed.
    pub renewed_ms: u64,
    /// The reply to its last mutating command (this partition's part of it).
    pub last: Option<Reply>,
    /// GeoPaxos+: the serializers every mutation of the session must be ordered by
    /// (bit `i` for replica `i`'s; its open's origin), so that one client's mutations
    /// run in one order at every replica. 0 elsewhere.
    pub home: u64,
}

/// A session as checkpoint format 4 (and 3) wrote it: without its home.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionV4 {
    pub client: ClientId,
    pub opened_at: Instance,
    pub renewed_ms: u64,
    pub last: Option<Reply>,
}

impl From<SessionV4> for Session {
    fn from(s: SessionV4) -> Session {
        Session {
            client: s.client,
            opened_at: s.opened_at,
            renewed_ms: s.renewed_ms,
            last: s.last,
            home: 0,
        }
    }
}

/// What a rolled-back speculation restores: each changed entry's previous value.
pub type SessionLog = Vec<(ClientId, Option<Session>)>;

/// What the session table says about a command, before it runs.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// Run it in this session (`last_seq`: the sequence number of the session's cached
    /// reply, which [`Sessions::get`] gives).
    Run { last_seq: Option<u64> },
    /// Refuse it: it belongs to no live session.
    Refuse(Refusal),
}

#[derive(Clone, Debug, Default)]
pub struct Sessions {
    map: DetHashMap<ClientId, Session>,
    /// (renewed_ms, client) of every session, for expiry in time order (kept only
    /// with a lease).
    by_renewal: BTreeSet<(u64, ClientId)>,
    now_ms: u64,
    lease_ms: Option<u64>,
    /// Planted bug: commands of unknown sessions run as if the session were new.
    pub unsafe_reopen_expired: bool,
}

impl Sessions {
    pub fn new(lease_ms: Option<u64>) -> Sessions {
        Sessions {
            lease_ms,
            ..Sessions::default()
        }
    }

    pub fn lease_ms(&self) -> Option<u64> {
        self.lease_ms
    }

    /// Change the lease (the replica was built before its configuration arrived).
    /// The index is rebuilt to match.
    pub fn set_lease(&mut self, lease_ms: Option<u64>) {
        self.lease_ms = lease_ms;
        self.by_renewal = match lease_ms {
            Some(_) => self
                .map
                .values()
                .map(|s| (s.renewed_ms, s.client))
                .collect(),
            None => BTreeSet::new(),
        };
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn get(&self, client: ClientId) -> Option<&Session> {
        self.map.get(&client)
    }

    /// Every session, in client order (checkpoints).
    pub fn sorted(&self) -> Vec<&Session> {
        let mut v: Vec<&Session> = self.map.values().collect();
        v.sort_unstable_by_key(|s| s.client);
        v
    }

    /// Replace `client`'s entry (`None`: remove it), keeping the expiry index, and log
    /// what was there. Returns it.
    pub fn set(
        &mut self,
        client: ClientId,
        entry: Option<Session>,
        log: Option<&mut SessionLog>,
    ) -> Option<Session> {
        let lease = self.lease_ms.is_some();
        let new_key = entry.as_ref().map(|s| s.renewed_ms);
        let prev = match entry {
            Some(s) => {
                assert_eq!(s.client, client, "a session is filed under its client");
                self.map.insert(client, s)
            }
            None => self.map.remove(&client),
        };
        if lease {
            let old_key = prev.as_ref().map(|p| p.renewed_ms);
            if old_key != new_key {
                if let Some(k) = old_key {
                    self.by_renewal.remove(&(k, client));
                }
                if let Some(k) = new_key {
                    self.by_renewal.insert((k, client));
                }
            }
        }
        if let Some(l) = log {
            l.push((client, prev.clone()));
        }
        prev
    }

    /// Time moves to `t` (a value's time; never back): forget every session not
    /// renewed for longer than the lease. Returns how many were forgotten.
    pub fn advance(&mut self, t: u64, mut log: Option<&mut SessionLog>) -> u64 {
        self.now_ms = self.now_ms.max(t);
        let Some(lease) = self.lease_ms else {
            return 0;
        };
        let mut n = 0;
        while let Some(&(renewed, client)) = self.by_renewal.first() {
            if renewed.saturating_add(lease) >= self.now_ms {
                break;
            }
            self.set(client, None, log.as_deref_mut());
            n += 1;
        }
        n
    }

    /// P-SMR: whether [`Sessions::advance`] to `t` could forget a session, judged from
    /// this state (which may lag the delivery order: renewals and opens still queued
    /// only make sessions younger, so a "no" here is a "no" there too, as long as no
    /// open is queued).
    pub fn would_expire(&self, t: u64) -> bool {
        let Some(lease) = self.lease_ms else {
            return false;
        };
        self.by_renewal
            .first()
            .is_some_and(|&(renewed, _)| renewed.saturating_add(lease) < self.now_ms.max(t))
    }

    /// P-SMR: set the time to `t`, back or forth, without expiring anything: a command
    /// a worker thread runs sees the time of the value that ordered it (what a
    /// session opened or created by it is stamped with).
    pub fn set_time(&mut self, t: u64) {
        self.now_ms = t;
    }

    /// Restore the previous entries a log recorded, newest first, and the time.
    pub fn undo(&mut self, log: SessionLog, now_ms_before: u64) {
        for (client, prev) in log.into_iter().rev() {
            self.set(client, prev, None);
        }
        self.now_ms = now_ms_before;
    }

    /// Open a new session for `client` at `instance` (ending any it had): the
    /// instance it opened at, which the open's reply carries.
    ///
    /// An open names the session it replaces (the client's last, 0: none). If the
    /// client's current session is newer than that, this open is a copy of the one
    /// that made it (a duplicate, or a resend whose first copy was ordered): the
    /// current session is its answer, unchanged. Otherwise copies of an old open would
    /// end the live session and refuse its commands.
    pub fn open(
        &mut self,
        client: ClientId,
        instance: Instance,
        replaces: Instance,
        home: u64,
        log: Option<&mut SessionLog>,
    ) -> Instance {
        if let Some(s) = self.map.get(&client) {
            if s.opened_at > replaces {
                return s.opened_at;
            }
        }
        let s = Session {
            client,
            opened_at: instance,
            renewed_ms: self.now_ms,
            last: None,
            home,
        };
        self.set(client, Some(s), log);
        instance
    }

    /// Renew `client`'s session opened at `opened_at`: its lease starts again now.
    /// Refused when that session is not (or no longer) the client's.
    pub fn renew(
        &mut self,
        client: ClientId,
        opened_at: Instance,
        log: Option<&mut SessionLog>,
    ) -> Result<Instance, Refusal> {
        match self.map.get(&client) {
            Some(s) if s.opened_at == opened_at => {
                let renewed = Session {
                    renewed_ms: self.now_ms,
                    ..s.clone()
                };
                self.set(client, Some(renewed), log);
                Ok(opened_at)
            }
            _ => Err(Refusal::SessionExpired),
        }
    }

    /// Whether `cmd` (not an open or a renewal) runs, and in which session; a session
    /// created implicitly (no lease) is created here.
    /// `home`: the serializers a session created here gets (see [`Session::home`]).
    pub fn admit(&mut self, cmd: &Command, home: u64, log: Option<&mut SessionLog>) -> Admission {
        match self.map.get(&cmd.client) {
            // The session the command names, lease or not: a command of an older
            // session of this client id runs nowhere (its client left that session,
            // e.g. after giving up on a command for several partitions, and opened
            // this one at every partition in one order with the late command).
            Some(s) if s.opened_at == cmd.session => Admission::Run {
                last_seq: s.last.as_ref().map(|r| r.seq),
            },
            Some(_) if !self.unsafe_reopen_expired => Admission::Refuse(Refusal::SessionExpired),
            None if self.lease_ms.is_some() && !self.unsafe_reopen_expired => {
                Admission::Refuse(Refusal::SessionExpired)
            }
            _ => {
                // No lease: sessions open implicitly. (Or the planted bug: an
                // expired session comes back, with an empty reply cache.)
                let s = Session {
                    client: cmd.client,
                    opened_at: cmd.session,
                    renewed_ms: self.now_ms,
                    last: None,
                    home,
                };
                self.set(cmd.client, Some(s), log);
                Admission::Run { last_seq: None }
            }
        }
    }

    /// Cache `reply` as `client`'s last mutation's.
    pub fn cache(&mut self, client: ClientId, reply: Reply, log: Option<&mut SessionLog>) {
        let Some(s) = self.map.get_mut(&client) else {
            return;
        };
        assert!(
            s.last.as_ref().is_none_or(|p| p.seq <= reply.seq),
            "reply cache went backwards"
        );
        // In place: the renewal time (the expiry index's key) does not change.
        let prev = s.last.replace(reply);
        if let Some(l) = log {
            let before = Session {
                last: prev,
                ..s.clone()
            };
            l.push((client, Some(before)));
        }
    }

    /// Drop every cached reply, keeping the sessions (planted bug).
    pub fn unsafe_clear_replies(&mut self) {
        for s in self.map.values_mut() {
            s.last = None;
        }
    }

    /// The highest instance of any cached reply (0: none).
    pub fn max_cached_instance(&self) -> Instance {
        self.map
            .values()
            .filter_map(|s| s.last.as_ref().map(|r| r.instance))
            .max()
            .unwrap_or(0)
    }

    /// Rebuild from a checkpoint's entries and time.
    pub fn restore(entries: Vec<Session>, now_ms: u64, lease_ms: Option<u64>) -> Sessions {
        let mut s = Sessions::new(lease_ms);
        s.now_ms = now_ms;
        for e in entries {
            s.set(e.client, Some(e), None);
        }
        s
    }

    /// O(1) checks (the index matches the map's size with a lease).
    pub fn invariants(&self) {
        if self.lease_ms.is_some() {
            assert_eq!(
                self.by_renewal.len(),
                self.map.len(),
                "the expiry index and the sessions disagree"
            );
        } else {
            assert!(
                self.by_renewal.is_empty(),
                "an expiry index without a lease"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(client: ClientId, seq: u64, session: Instance) -> Command {
        Command {
            seq,
            session,
            ..Command::single(client, 1, 1, partita_types::Payload::new())
        }
    }

    #[test]
    fn a_copy_of_an_old_open_leaves_the_live_session_alone() {
        let mut s = Sessions::new(Some(100));
        assert_eq!(s.open(7, 5, 0, 0, None), 5);
        // A duplicate of that open, ordered later: answered with session 5.
        assert_eq!(s.open(7, 8, 0, 0, None), 5);
        assert_eq!(
            s.admit(&cmd(7, 1, 5), 0, None),
            Admission::Run { last_seq: None }
        );
        // The client replaces session 5 knowingly: a new session.
        assert_eq!(s.open(7, 9, 5, 0, None), 9);
        assert_eq!(
            s.admit(&cmd(7, 2, 5), 0, None),
            Admission::Refuse(Refusal::SessionExpired)
        );
        // Once the session expired, even a copy of the first open opens a new one.
        s.advance(500, None);
        assert_eq!(s.open(7, 12, 0, 0, None), 12);
    }

    #[test]
    fn with_a_lease_unknown_and_stale_sessions_are_refused() {
        let mut s = Sessions::new(Some(100));
        assert_eq!(
            s.admit(&cmd(7, 1, 0), 0, None),
            Admission::Refuse(Refusal::SessionExpired),
            "never opened"
        );
        s.advance(10, None);
        assert_eq!(s.open(7, 5, 0, 0, None), 5);
        assert_eq!(
            s.admit(&cmd(7, 1, 5), 0, None),
            Admission::Run { last_seq: None }
        );
        assert_eq!(
            s.admit(&cmd(7, 1, 4), 0, None),
            Admission::Refuse(Refusal::SessionExpired),
            "a command of an older session of the same client"
        );
        // An open always starts a new session: the old one's commands are refused.
        assert_eq!(s.open(7, 9, 5, 0, None), 9);
        assert_eq!(
            s.admit(&cmd(7, 2, 5), 0, None),
            Admission::Refuse(Refusal::SessionExpired)
        );
        assert_eq!(s.renew(7, 5, None), Err(Refusal::SessionExpired));
        assert_eq!(s.renew(7, 9, None), Ok(9));
        s.invariants();
    }

    #[test]
    fn sessions_expire_a_lease_after_their_renewal_and_undo_brings_them_back() {
        let mut s = Sessions::new(Some(100));
        s.advance(0, None);
        s.open(1, 1, 0, 0, None);
        s.advance(50, None);
        s.open(2, 2, 0, 0, None);
        s.advance(100, None);
        assert_eq!(s.len(), 2, "renewed exactly one lease ago: kept");
        let mut log = SessionLog::new();
        let before = s.now_ms();
        assert_eq!(s.advance(101, Some(&mut log)), 1);
        assert!(s.get(1).is_none() && s.get(2).is_some());
        assert_eq!(s.renew(2, 2, Some(&mut log)), Ok(2));
        s.undo(log, before);
        assert_eq!((s.len(), s.now_ms()), (2, 100));
        assert_eq!(s.get(2).unwrap().renewed_ms, 50);
        s.invariants();
        // A renewal keeps a session alive; commands alone do not.
        assert_eq!(s.advance(140, None), 1, "session 1, renewed at 0");
        s.renew(2, 2, None).unwrap();
        assert_eq!(
            s.admit(&cmd(2, 1, 2), 0, None),
            Admission::Run { last_seq: None }
        );
        assert_eq!(s.advance(200, None), 0, "session 2 was renewed at 140");
        assert_eq!(
            s.admit(&cmd(2, 2, 2), 0, None),
            Admission::Run { last_seq: None }
        );
        assert_eq!(s.advance(241, None), 1, "session 2, not renewed since 140");
        s.invariants();
    }

    #[test]
    fn cached_replies_never_go_back() {
        let mut s = Sessions::new(None);
        s.open(3, 1, 0, 0, None);
        let reply = |seq| Reply {
            client: 3,
            seq,
            instance: seq,
            result: Ok(partita_types::Payload::new()),
        };
        s.cache(3, reply(2), None);
        assert_eq!(
            s.admit(&cmd(3, 3, 1), 0, None),
            Admission::Run { last_seq: Some(2) }
        );
        let back = std::panic::catch_unwind(move || s.cache(3, reply(1), None));
        assert!(back.is_err());
    }

    #[test]
    fn without_a_lease_sessions_open_implicitly_and_never_expire() {
        let mut s = Sessions::new(None);
        assert_eq!(
            s.admit(&cmd(3, 1, 0), 0, None),
            Admission::Run { last_seq: None }
        );
        assert_eq!(s.advance(u64::MAX, None), 0);
        assert!(s.get(3).is_some());
        s.invariants();
    }

    /// A new open ends the previous session with or without a lease: a late command
    /// of the old one is refused (a client leaves a session after giving up on a
    /// command for several partitions, so that the late command runs at all of them
    /// or none; without a lease it used to run after the open with the reply cache
    /// emptied, and so could run twice).
    #[test]
    fn a_new_open_ends_the_previous_session_without_a_lease_too() {
        for lease in [None, Some(1000)] {
            let mut s = Sessions::new(lease);
            s.open(3, 5, 0, 0, None);
            assert_eq!(
                s.admit(&cmd(3, 1, 5), 0, None),
                Admission::Run { last_seq: None }
            );
            s.open(3, 9, 5, 0, None);
            assert_eq!(
                s.admit(&cmd(3, 1, 5), 0, None),
                Admission::Refuse(Refusal::SessionExpired),
                "lease {lease:?}"
            );
            assert_eq!(
                s.admit(&cmd(3, 2, 9), 0, None),
                Admission::Run { last_seq: None }
            );
            s.invariants();
        }
    }

    #[test]
    fn the_planted_bug_reopens_expired_sessions() {
        let mut s = Sessions::new(Some(10));
        s.unsafe_reopen_expired = true;
        assert_eq!(
            s.admit(&cmd(7, 3, 2), 0, None),
            Admission::Run { last_seq: None }
        );
    }
}
