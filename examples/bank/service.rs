//! The bank: accounts with balances, deposits, and transfers that never overdraw.

use partita_service::{Objects, ServiceCodec, StateMachine};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum BankCmd {
    Deposit {
        account: String,
        amount: u64,
    },
    /// Moves `amount` only if `from` holds it.
    Transfer {
        from: String,
        to: String,
        amount: u64,
    },
    Balance {
        account: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum BankReply {
    /// The balance after the command (of `from`, for a transfer).
    Balance(u64),
    /// A transfer that would overdraw: nothing changed.
    Insufficient,
}

#[derive(Default)]
pub struct Bank {
    accounts: BTreeMap<String, u64>,
}

impl Bank {
    fn get(&self, account: &str) -> u64 {
        self.accounts.get(account).copied().unwrap_or(0)
    }

    /// Set a balance, remembering the old one for undo.
    fn set(&mut self, account: &str, balance: u64, undo: &mut Vec<(String, Option<u64>)>) {
        undo.push((
            account.into(),
            self.accounts.insert(account.into(), balance),
        ));
    }
}

impl ServiceCodec for Bank {
    const NAME: &'static str = "bank";
    type Command = BankCmd;
    type Reply = BankReply;
    type Key = String;
    fn is_read_only(cmd: &BankCmd) -> bool {
        matches!(cmd, BankCmd::Balance { .. })
    }
    fn objects(cmd: &BankCmd) -> Objects<String> {
        match cmd {
            BankCmd::Deposit { account, .. } | BankCmd::Balance { account } => {
                Objects::key(account.clone())
            }
            BankCmd::Transfer { from, to, .. } => Objects {
                keys: vec![from.clone(), to.clone()],
                ranges: Vec::new(),
            },
        }
    }
}

impl StateMachine for Bank {
    /// The accounts a command changed, as they were before it.
    type Undo = Vec<(String, Option<u64>)>;

    fn new() -> Self {
        Bank::default()
    }

    fn execute(&mut self, cmd: &BankCmd) -> BankReply {
        self.execute_undoable(cmd).0
    }

    fn execute_undoable(&mut self, cmd: &BankCmd) -> (BankReply, Self::Undo) {
        let mut undo = Vec::new();
        let reply = match cmd {
            BankCmd::Deposit { account, amount } => {
                let b = self.get(account).saturating_add(*amount);
                self.set(account, b, &mut undo);
                BankReply::Balance(b)
            }
            BankCmd::Transfer { from, to, amount } if self.get(from) >= *amount => {
                let left = self.get(from) - amount;
                self.set(from, left, &mut undo);
                let b = self.get(to).saturating_add(*amount);
                self.set(to, b, &mut undo);
                BankReply::Balance(self.get(from))
            }
            BankCmd::Transfer { .. } => BankReply::Insufficient,
            BankCmd::Balance { account } => BankReply::Balance(self.get(account)),
        };
        (reply, undo)
    }

    fn undo(&mut self, undo: Self::Undo) {
        for (account, old) in undo.into_iter().rev() {
            match old {
                Some(b) => self.accounts.insert(account, b),
                None => self.accounts.remove(&account),
            };
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        partita_types::encode(&self.accounts)
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let accounts = partita_types::decode(bytes).map_err(|e| e.to_string())?;
        Ok(Bank { accounts })
    }

    /// FNV-1a of the accounts in order: equal banks, equal digests.
    fn digest(&self) -> u64 {
        let h = 0xcbf2_9ce4_8422_2325u64;
        self.snapshot()
            .iter()
            .fold(h, |h, b| (h ^ *b as u64).wrapping_mul(0x100_0000_01b3))
    }
}

/// The bank on S-SMR or DS-SMR (paper 003): an account is an object (its id a hash of
/// its name; the object holds the balances of every name of that hash), implicit:
/// every account exists from the start with nothing in it, so a deposit opens one as
/// the bank above does. A transfer names two accounts: DS-SMR moves them into one
/// partition before it runs there; S-SMR runs it at both partitions.
impl partita_dssmr::ObjectService for Bank {
    const NAME: &'static str = "bank";
    type Object = BTreeMap<String, u64>;
    type Command = BankCmd;
    type Reply = BankReply;

    fn kind(cmd: &BankCmd) -> partita_dssmr::Kind {
        let mut ids: Vec<u64> = match cmd {
            BankCmd::Deposit { account, .. } | BankCmd::Balance { account } => {
                vec![account_object(account)]
            }
            BankCmd::Transfer { from, to, .. } => vec![account_object(from), account_object(to)],
        };
        ids.sort_unstable();
        ids.dedup();
        partita_dssmr::Kind::Access(ids)
    }

    fn implicit() -> Option<BTreeMap<String, u64>> {
        Some(BTreeMap::new())
    }

    fn create(_cmd: &BankCmd) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }

    /// The bank's rules over the accounts the view gives; each partition writes its
    /// own (under S-SMR a transfer's two accounts may be in two).
    fn execute(cmd: &BankCmd, view: &mut partita_dssmr::View<'_, Self::Object>) -> BankReply {
        fn balance(view: &mut partita_dssmr::View<'_, BTreeMap<String, u64>>, a: &str) -> u64 {
            view.get(account_object(a))
                .and_then(|o| o.get(a).copied())
                .unwrap_or(0)
        }
        fn set(view: &mut partita_dssmr::View<'_, BTreeMap<String, u64>>, a: &str, b: u64) {
            if let Some(o) = view.get_mut(account_object(a)) {
                o.insert(a.to_string(), b);
            }
        }
        match cmd {
            BankCmd::Deposit { account, amount } => {
                let b = balance(view, account).saturating_add(*amount);
                set(view, account, b);
                BankReply::Balance(b)
            }
            BankCmd::Transfer { from, amount, .. } if balance(view, from) < *amount => {
                BankReply::Insufficient
            }
            BankCmd::Transfer { from, to, .. } if from == to => {
                BankReply::Balance(balance(view, from))
            }
            BankCmd::Transfer { from, to, amount } => {
                let (f, t) = (balance(view, from), balance(view, to));
                set(view, from, f - amount);
                set(view, to, t.saturating_add(*amount));
                BankReply::Balance(f - amount)
            }
            BankCmd::Balance { account } => BankReply::Balance(balance(view, account)),
        }
    }
}

/// The object that holds `account` (FNV-1a of its name).
pub fn account_object(account: &str) -> u64 {
    account.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
