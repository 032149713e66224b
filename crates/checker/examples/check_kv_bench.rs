//! Time the key-value checker on generated histories:
//! `cargo run --release -p partita-checker --example check_kv_bench [ops] [clients]`.

use std::time::Instant;

use partita_checker::kv::gen::{generate_kv, KvGenConfig};
use partita_checker::kv::{check_kv, KvCheckOptions, ModelStore};

fn main() {
    let mut args = std::env::args().skip(1);
    let ops: usize = args.next().map_or(20_000, |a| a.parse().expect("ops"));
    let clients: u32 = args.next().map_or(16, |a| a.parse().expect("clients"));
    let base = KvGenConfig {
        ops,
        clients,
        ..KvGenConfig::default()
    };
    let cases = [
        (
            "1024 keys, 16 values, 1% info",
            KvGenConfig {
                keys: 1024,
                values: 16,
                info_rate: 0.01,
                fail_rate: 0.01,
                ..base.clone()
            },
        ),
        (
            "64 keys, 4 values, 2% info",
            KvGenConfig {
                keys: 64,
                values: 4,
                info_rate: 0.02,
                ..base.clone()
            },
        ),
        (
            "64 keys, 4 values, 2% info, reads without revision",
            KvGenConfig {
                keys: 64,
                values: 4,
                info_rate: 0.02,
                read_revisions: false,
                ..base.clone()
            },
        ),
        (
            "8 keys, 2 values, 5% info",
            KvGenConfig {
                keys: 8,
                values: 2,
                info_rate: 0.05,
                ..base.clone()
            },
        ),
    ];
    println!("{ops} operations, {clients} clients (generated; release build recommended)");
    for (name, cfg) in cases {
        let events = generate_kv(&cfg, &mut ModelStore::default());
        let start = Instant::now();
        let verdict = match check_kv(&events, &KvCheckOptions::default()) {
            Ok(s) => format!("linearizable: {s}"),
            Err(e) => e.to_string(),
        };
        println!("{name}: {:.3} s, {verdict}", start.elapsed().as_secs_f64());
    }
}
