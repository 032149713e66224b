use partita_checker::gen::*;
use partita_checker::*;
use partita_types::{BatchOp, Op};
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let p = |i: usize| a[i].parse::<u64>().unwrap();
    let cfg = GenConfig {
        seed: p(1),
        clients: p(2) as u32,
        ops: p(3) as usize,
        keys: p(4),
        values: p(5),
        mix: if a[6] == "all" {
            OpMix::all()
        } else {
            OpMix::point_only()
        },
        info_rate: a[7].parse().unwrap(),
        fail_rate: 0.02,
        max_range: p(8),
        ..GenConfig::default()
    };
    let g = generate(&cfg);
    if a.len() > 9 {
        let key = p(9);
        let lo = p(10);
        let hi = p(11);
        let mut ev: Vec<_> = g
            .events
            .iter()
            .filter(|e| e.call_ns <= hi && e.ret_ns >= lo)
            .filter(|e| match &e.op {
                Op::Insert { key: k, .. }
                | Op::Delete { key: k }
                | Op::Read { key: k }
                | Op::Update { key: k, .. } => *k == key,
                Op::Query { min, max } => *min <= key && key <= *max,
                Op::Next { key: k } => *k < key,
                Op::Prev { key: k } => *k > key,
                Op::Batch(ops) => ops.iter().any(|b| match b {
                    BatchOp::Insert { key: k, .. } | BatchOp::Delete { key: k } => *k == key,
                }),
            })
            .collect();
        ev.sort_by_key(|e| e.call_ns);
        for e in ev {
            println!("{} {:?}", e.describe(), e.status);
        }
        return;
    }
    let t = std::time::Instant::now();
    let r = check_with_final_state(&g.events, &CheckOptions::default(), &g.final_state);
    println!(
        "{:?} {}",
        t.elapsed(),
        match r {
            Ok(s) => format!("ok {s}"),
            Err(e) => e.to_string(),
        }
    );
}
