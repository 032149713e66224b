//! The `partita` program: CLI, local cluster launcher and benchmark harness. The
//! protocols live in the `crates/` of the workspace; see ARCHITECTURE.md.

pub mod bench;
pub mod calibrate;
pub mod cli;
pub mod cpu;
pub mod experiment;
pub mod experiment_partition;
pub mod history;
pub mod kvcli;
pub mod launch;
pub mod nemesis;
pub mod node_cpu;
pub mod plot;
pub mod services;
pub mod sim;
