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
