//! The papers' experiments and the simulator's calibration.
//!
//! Every experiment is a sweep of points in series (a configuration, a workload, a
//! number of clients), each point run by a driver, real (a fresh local cluster of real
//! processes and the closed-loop benchmark, `partita-harness`) or simulated (the
//! simulator's experiment mode at the paper's scale); every experiment ends in one
//! report written as JSON, with its figures drawn by `partita-plot` (SVG and PNG)
//! through one path ([`framework`]). `calibrate` measures the simulator's cost table
//! from the real code.

pub mod calibrate;
pub mod experiment;
pub mod experiment_partition;
pub mod framework;
pub mod replica_bench;
pub mod reproduction;
