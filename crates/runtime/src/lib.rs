//! The tokio TCP driver of Partita: one process per node (`partita node`), its roles
//! from the cluster file (`partita-config`), frames over TCP (`partita-net`,
//! `partita-wire`), the acceptor's WAL and the replica's checkpoints on disk. See
//! `node` for the event loop and `checkpoint` for the checkpoint files.

pub mod checkpoint;
pub mod metrics;
pub mod multicast;
pub mod node;

pub use node::{run_node, run_node_until, seed_replica_dir, NodeOptions};
