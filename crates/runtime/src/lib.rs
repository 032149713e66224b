//! The tokio TCP driver of Partita: one process per node (`partita node`), its roles
//! from the cluster file, frames over TCP on 127.0.0.1, and the acceptor's WAL on disk.
//! See `node` for the event loop and `net` for connections.

pub mod config;
pub mod net;
pub mod node;
pub mod wire;

pub use config::{ClusterConfig, Durability, Mode, Role};
pub use node::{run_node, NodeOptions};
pub use wire::{NodeStatus, Wire};
