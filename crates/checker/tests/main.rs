//! Every integration test of this package in one test binary (`cargo test -p <package> --test it`;
//! one module per file), so a test run links one binary per package, not one per file.

mod chirper;
mod common;
mod differential;
mod generated;
mod kv_common;
mod kv_differential;
mod kv_generated;
mod kv_history;
mod kv_planted;
mod planted;
mod report;
