//! Every integration test of this package in one test binary (`cargo test -p <package> --test it`;
//! one module per file), so a test run links one binary per package, not one per file.

mod batcher;
mod checkpoint;
mod common;
mod dssmr;
mod early_replies;
mod epaxos;
mod failover;
mod geo;
mod hostile;
mod members;
mod multiring;
mod speculation;
