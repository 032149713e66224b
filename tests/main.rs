//! Every integration test of this package in one test binary (`cargo test -p <package> --test it`;
//! one module per file), so a test run links one binary per package, not one per file.

/// Held by every test that builds this process's network namespaces
/// (`partita_harness::netns::create`): a process has one topology, and a test's
/// teardown removes it under any other test using it.
pub static NAMESPACES: std::sync::Mutex<()> = std::sync::Mutex::new(());

mod accounts_example;
mod backup;
mod bank_example;
mod chirper;
mod cluster;
mod dashboard;
mod deploy;
mod disk_faults;
mod disk_full;
mod etcd;
mod etcd_leases;
mod experiment;
mod experiment_partition;
mod geo;
mod kv;
mod kv_objects;
mod layers;
mod members;
mod metrics;
mod names;
mod nemesis;
mod netns;
mod node_cpu;
mod partitioned;
mod tidy;
mod tls;
mod wan;
