//! The harness around real clusters: launching local clusters of `partita node`
//! processes and stopping them by pid (`launch`), per-node CPU budgets in cgroups
//! (`node_cpu`), the closed-loop benchmark driver and its workloads (`bench`), CPU
//! time of processes (`cpu`), histories in DESIGN.md's format (`history`), the nemesis
//! that kills, restarts and pauses real nodes under load (`nemesis`), and the services
//! a node program can run (`services`), the live cluster page (`dashboard`) and progress
//! bars for long jobs (`progress`), and the cluster CA and certificates of mutual TLS
//! (`certs`). The `partita` binary is a command-line front
//! end over it; tests and experiments use it directly.

pub mod bench;
pub mod certs;
pub mod chirper;
pub mod cpu;
pub mod dashboard;
pub mod history;
pub mod join_bench;
pub mod kvload;
pub mod launch;
pub mod nemesis;
pub mod netns;
pub mod node_cpu;
pub mod objects;
pub mod progress;
pub mod services;
