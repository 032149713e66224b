// Scratch experiment (not part of the deliverable).
use partita_btree::BPlusTree;
use rand::{Rng, SeedableRng};
use std::time::Instant;
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(12_000_000);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut keys: Vec<u64> = (0..n).map(|_| rng.gen()).collect();
    keys.sort_unstable();
    keys.dedup();
    let t0 = Instant::now();
    let tree = BPlusTree::bulk_load(keys.iter().map(|&k| (k, k ^ 1))).unwrap();
    println!("bulk load {:?} height {}", t0.elapsed(), tree.height());
    for span in [1usize, 100, 1000, 10000] {
        let q = 20_000_000 / (span + 200);
        let b: Vec<(u64, u64)> = (0..q)
            .map(|_| {
                let i = rng.gen_range(0..keys.len() - span);
                (keys[i], keys[i + span - 1])
            })
            .collect();
        let mut best = 0f64;
        for _ in 0..4 {
            let t = Instant::now();
            let mut s = 0u64;
            for &(lo, hi) in &b {
                tree.query_with(lo, hi, |k, v| s = s.wrapping_add(k ^ v));
            }
            std::hint::black_box(s);
            best = best.max(q as f64 / t.elapsed().as_secs_f64());
        }
        println!(
            "span {span}: {best:.0} q/s, {:.1} ns/query, {:.2} ns/entry",
            1e9 / best,
            1e9 / best / span as f64
        );
    }
}
