//! The services this program can run, by the name a cluster file gives
//! (`[cluster] service`).

use partita_smr::ServiceFactory;
use std::sync::Arc;

/// Every built-in service's name.
pub const BUILTIN: [&str; 2] = ["btree", "kv"];

/// The factory of the built-in service called `name`.
pub fn builtin(name: &str) -> Option<Arc<dyn ServiceFactory>> {
    match name {
        "btree" => Some(partita_smr::service::<partita_btree::BPlusTree>()),
        "kv" => Some(partita_smr::service::<partita_kv::KvStore>()),
        _ => None,
    }
}

/// [`builtin`], or an error naming the known services.
pub fn resolve(name: &str) -> anyhow::Result<Arc<dyn ServiceFactory>> {
    builtin(name).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown service `{name}` (this program runs: {}); a service of your own runs \
             with a program of your own (see examples/)",
            BUILTIN.join(", ")
        )
    })
}
