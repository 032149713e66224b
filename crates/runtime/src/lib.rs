//! The tokio TCP driver of Partita: one process per node (`partita node`), its roles
//! from the cluster file, frames over TCP on 127.0.0.1, the acceptor's WAL and the
//! replica's checkpoints on disk. See `node` for the event loop, `net` for
//! connections and `checkpoint` for the checkpoint files.

pub mod checkpoint;
pub mod config;
pub mod net;
pub mod node;
pub mod wire;

pub use config::{ClusterConfig, Durability, Mode, Role, StorageSection};
pub use node::{run_node, run_node_until, NodeOptions};
pub use wire::{NodeStatus, Wire};
