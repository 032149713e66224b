//! Every integration test of this package in one test binary (`cargo test -p <package> --test it`;
//! one module per file), so a test run links one binary per package, not one per file.

mod kv;
mod world;
