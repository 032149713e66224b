//! The `partita` program: a thin command-line front end. Clusters, benchmarks and the
//! nemesis live in `partita-harness`, the papers' experiments and calibration in
//! `partita-experiments`, the protocols in the other crates of the workspace; see
//! ARCHITECTURE.md. What stays here is argument parsing and printing.

pub mod backup;
pub mod cli;
pub mod kvcli;
pub mod member;
pub mod sim;
