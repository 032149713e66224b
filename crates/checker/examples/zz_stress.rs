use partita_checker::gen::*;
use partita_checker::*;
use rand::{Rng, SeedableRng};
fn main() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(99);
    let (mut ok, mut unknown, mut bad, mut maxstates, mut maxt) = (0, 0, 0, 0u64, 0f64);
    for seed in 0..600 {
        let cfg = GenConfig {
            seed,
            clients: rng.gen_range(1..33),
            ops: rng.gen_range(100..4000),
            keys: [4, 16, 64, 256, 4096][rng.gen_range(0..5)],
            values: [2, 4, 8, 1_000_000][rng.gen_range(0..4)],
            mix: if rng.gen_bool(0.3) {
                OpMix::point_only()
            } else {
                OpMix::all()
            },
            info_rate: [0.0, 0.01, 0.05, 0.1][rng.gen_range(0..4)],
            fail_rate: 0.02,
            max_range: [4, 16, 64, 512][rng.gen_range(0..4)],
            ..GenConfig::default()
        };
        let g = generate(&cfg);
        let t = std::time::Instant::now();
        let r = check_with_final_state(&g.events, &CheckOptions::default(), &g.final_state);
        let dt = t.elapsed().as_secs_f64();
        if dt > maxt {
            maxt = dt;
        }
        match r {
            Ok(s) => {
                ok += 1;
                maxstates = maxstates.max(s.states);
            }
            Err(CheckError::Unknown(u)) => {
                unknown += 1;
                println!("unknown {cfg:?} {u}");
            }
            Err(e) => {
                bad += 1;
                println!(
                    "FALSE ALARM {:?}: {e}",
                    (
                        seed,
                        cfg.clients,
                        cfg.ops,
                        cfg.keys,
                        cfg.values,
                        cfg.info_rate
                    )
                );
            }
        }
    }
    println!(
        "ok {ok} unknown {unknown} false alarms {bad} max states {maxstates} max time {maxt:.2}s"
    );
}
