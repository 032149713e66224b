//! Time the checker on generated histories:
//! `cargo run --release -p partita-checker --example check_bench [ops] [clients]`.

use std::time::Instant;

use partita_btree::{Op, OpResult};
use partita_checker::gen::{generate, GenConfig, OpMix};
use partita_checker::{check, check_with_final_state, CheckOptions, Initial, Status};

fn main() {
    let mut args = std::env::args().skip(1);
    let ops: usize = args.next().map_or(20_000, |a| a.parse().expect("ops"));
    let clients: u32 = args.next().map_or(16, |a| a.parse().expect("clients"));
    let base = GenConfig {
        ops,
        clients,
        values: 1_000_000_000,
        ..GenConfig::default()
    };
    let cases = [
        (
            "point ops, 1024 keys, 2% info",
            GenConfig {
                keys: 1024,
                mix: OpMix::point_only(),
                info_rate: 0.02,
                ..base.clone()
            },
        ),
        (
            "all ops, preload 2^19 keys (stride 2), ranges <= 64, 1% info",
            GenConfig {
                keys: 1 << 20,
                initial: Initial::Preload {
                    count: 1 << 19,
                    stride: 2,
                },
                max_range: 64,
                info_rate: 0.01,
                ..base.clone()
            },
        ),
        (
            "all ops, 256 keys, ranges <= 256 (one group), 1% info",
            GenConfig {
                keys: 256,
                max_range: 256,
                info_rate: 0.01,
                ..base.clone()
            },
        ),
        (
            "all ops, 64 keys, 8 values (dense, ambiguous), 1% info",
            GenConfig {
                keys: 64,
                values: 8,
                info_rate: 0.01,
                ..base.clone()
            },
        ),
    ];
    for (name, cfg) in cases {
        let g = generate(&cfg);
        let opts = CheckOptions::with_initial(cfg.initial.clone());
        let start = Instant::now();
        let verdict = check(&g.events, &opts);
        let t_check = start.elapsed();
        let start = Instant::now();
        let with_final = check_with_final_state(&g.events, &opts, &g.final_state);
        let t_final = start.elapsed();
        println!("{name}: {ops} ops, {clients} clients");
        match verdict {
            Ok(s) => println!(
                "  check {t_check:.2?}: linearizable: {s} [{} groups, largest {}]",
                s.groups, s.largest_group
            ),
            Err(e) => println!("  check {t_check:.2?}: {e}"),
        }
        println!(
            "  check_with_final_state {t_final:.2?}: {}",
            if with_final.is_ok() { "ok" } else { "FAILED" }
        );
        // One read near the middle returning a value never written.
        let mut bad = g.events.clone();
        if let Some(e) = bad
            .iter_mut()
            .skip(ops / 2)
            .find(|e| e.status == Status::Ok && matches!(e.op, Op::Read { .. }))
        {
            e.result = Some(OpResult::Value(Some(u64::MAX)));
        }
        let start = Instant::now();
        let caught = check(&bad, &opts).is_err();
        println!(
            "  corrupted read {:.2?}: {}",
            start.elapsed(),
            if caught { "caught" } else { "MISSED" }
        );
    }
}
