//! `cargo run --release -p partita-btree --example bench -- [ENTRIES] [--json FILE]`
//!
//! Runs the B+tree benchmark (see `partita_btree::bench`) and prints the table and the
//! JSON report.

use partita_btree::bench::{run, BenchConfig};

fn main() {
    let mut cfg = BenchConfig::default();
    let mut json_path = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json_path = Some(args.next().expect("--json needs a file")),
            "--reads" => cfg.reads = args.next().and_then(|s| s.parse().ok()).expect("--reads N"),
            "--updates" => {
                cfg.updates = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--updates N")
            }
            "--ranges" => {
                cfg.ranges = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--ranges N")
            }
            "--seed" => cfg.seed = args.next().and_then(|s| s.parse().ok()).expect("--seed N"),
            n => cfg.entries = n.parse().expect("ENTRIES must be a number"),
        }
    }
    let report = run(&cfg);
    print!("{report}");
    let json = serde_json::to_string_pretty(&report).expect("report serializes");
    println!("{json}");
    if let Some(path) = json_path {
        std::fs::write(&path, json).expect("write the JSON report");
    }
}
