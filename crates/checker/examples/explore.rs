use partita_checker::gen::*;
use partita_checker::*;
use std::time::Instant;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let clients: u32 = args[1].parse().unwrap();
    let ops: usize = args[2].parse().unwrap();
    let keys: u64 = args[3].parse().unwrap();
    let values: u64 = args[4].parse().unwrap();
    let mix = if args[5] == "all" {
        OpMix::all()
    } else {
        OpMix::point_only()
    };
    let range: u64 = args[6].parse().unwrap();
    let info: f64 = args[7].parse().unwrap();
    for seed in 0..args.get(8).map_or(3, |s| s.parse().unwrap()) {
        let cfg = GenConfig {
            seed,
            clients,
            ops,
            keys,
            values,
            mix,
            max_range: range,
            info_rate: info,
            ..GenConfig::default()
        };
        let g = generate(&cfg);
        let t = Instant::now();
        let r = check(&g.events, &CheckOptions::default());
        let dt = t.elapsed();
        match r {
            Ok(s) => println!(
                "seed {seed}: ok {:?} groups {} largest {} states {}",
                dt, s.groups, s.largest_group, s.states
            ),
            Err(e) => println!("seed {seed}: {:?} {}", dt, e),
        }
    }
}
