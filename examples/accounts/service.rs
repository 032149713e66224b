//! The whole service: bank accounts that DS-SMR (paper 003) partitions dynamically.
//! Each account is an object (its balance), starting in the partition a hash of its id
//! names; a transfer touches two accounts, and DS-SMR moves them into one partition
//! before it runs there, so accounts that trade with each other end up together.

use partita_dssmr::{Kind, ObjectId, ObjectService, View};
use serde::{Deserialize, Serialize};

/// The service (its state is the objects, which the replicas keep).
pub struct Accounts;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cmd {
    /// Create an account with a balance of 0.
    Open {
        account: ObjectId,
    },
    Deposit {
        account: ObjectId,
        amount: u64,
    },
    /// Spans two objects: both must be in one partition when it runs.
    Transfer {
        from: ObjectId,
        to: ObjectId,
        amount: u64,
    },
    Balance {
        account: ObjectId,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The balance after the command (of `from` for a transfer).
    Balance(u64),
    Insufficient,
    /// An account named is not there (never opened).
    NoAccount,
}

impl ObjectService for Accounts {
    const NAME: &'static str = "accounts";
    type Object = u64;
    type Command = Cmd;
    type Reply = Reply;

    /// The objects a command reads and writes, or the one it creates.
    fn kind(cmd: &Cmd) -> Kind {
        match cmd {
            Cmd::Open { account } => Kind::Create(*account),
            Cmd::Deposit { account, .. } | Cmd::Balance { account } => Kind::Access(vec![*account]),
            Cmd::Transfer { from, to, .. } if from == to => Kind::Access(vec![*from]),
            Cmd::Transfer { from, to, .. } => Kind::Access(vec![*from, *to]),
        }
    }

    /// Where an account starts without a map of the workload: hashed (the default,
    /// written out as a service of one's own would replace it).
    fn placement(id: ObjectId, partitions: usize) -> u16 {
        partita_dssmr::StaticMap::hashed(id, partitions)
    }

    fn create(_cmd: &Cmd) -> u64 {
        0
    }

    /// Deterministic, and it reads only the objects the command names.
    fn execute(cmd: &Cmd, view: &mut View<'_, u64>) -> Reply {
        match *cmd {
            Cmd::Open { .. } => Reply::NoAccount, // creates never execute here
            Cmd::Deposit { account, amount } => match view.get_mut(account) {
                Some(b) => {
                    *b += amount;
                    Reply::Balance(*b)
                }
                None => Reply::NoAccount,
            },
            Cmd::Balance { account } => view
                .get(account)
                .map_or(Reply::NoAccount, |b| Reply::Balance(*b)),
            Cmd::Transfer { from, to, amount } => {
                let Some(&f) = view.get(from) else {
                    return Reply::NoAccount;
                };
                let Some(&t) = view.get(to) else {
                    return Reply::NoAccount;
                };
                if f < amount {
                    return Reply::Insufficient;
                }
                if from == to {
                    return Reply::Balance(f);
                }
                // Under S-SMR (DS-SMR's fallback) the two accounts may be in two
                // partitions, each of which writes its own: `get_mut` gives only
                // this partition's objects, `get` the others' values too.
                if let Some(b) = view.get_mut(from) {
                    *b = f - amount;
                }
                if let Some(b) = view.get_mut(to) {
                    *b = t + amount;
                }
                Reply::Balance(f - amount)
            }
        }
    }
}
