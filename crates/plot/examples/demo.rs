//! Draws a sample figure: `cargo run -p partita-plot --example demo -- /tmp/demo`
//! writes `/tmp/demo.svg` and `/tmp/demo.png`.

use partita_plot::{Figure, Panel, Series};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let stem = std::env::args().nth(1).unwrap_or_else(|| "demo".into());
    let clients = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];
    let curve = |label: &str, f: &dyn Fn(f64) -> f64| Series {
        label: label.into(),
        points: clients.iter().map(|&c| (c, f(c))).collect(),
    };
    let throughput = Panel {
        title: "throughput".into(),
        x_label: "clients".into(),
        y_label: "commands/s".into(),
        log_x: true,
        log_y: false,
        series: vec![
            curve("CS (1 server)", &|c| 9000.0 * c / (c + 6.0)),
            curve("SMR", &|c| 5200.0 * c / (c + 8.0)),
            curve("P-SMR, 2 partitions", &|c| 9800.0 * c / (c + 9.0)),
            curve("P-SMR, 4 partitions", &|c| 17500.0 * c / (c + 12.0)),
        ],
    };
    let latency = Panel {
        title: "response time (p50)".into(),
        x_label: "clients".into(),
        y_label: "ms".into(),
        log_x: true,
        log_y: true,
        series: vec![
            curve("CS (1 server)", &|c| 0.3 + c * 0.11),
            curve("SMR", &|c| 0.9 + c * 0.19),
            curve("P-SMR, 2 partitions", &|c| 1.0 + c * 0.1),
            curve("P-SMR, 4 partitions", &|c| 1.1 + c * 0.06),
        ],
    };
    let improvement = Panel {
        title: "replica CPU (mean of 4 replicas; execution + replies, one event loop)".into(),
        x_label: "% cross-partition queries".into(),
        y_label: "improvement %".into(),
        log_x: false,
        log_y: false,
        series: [1, 8, 32]
            .iter()
            .map(|&c| Series {
                label: format!("{c} clients"),
                points: (0..=10)
                    .map(|p| {
                        let p = p as f64 * 10.0;
                        (p, 20.0 - p * 0.3 * (c as f64).ln_1p())
                    })
                    .collect(),
            })
            .collect(),
    };
    let empty = Panel {
        title: "no data yet".into(),
        x_label: "clients".into(),
        y_label: "% busy".into(),
        log_x: false,
        log_y: false,
        series: vec![Series {
            label: "replies".into(),
            points: vec![],
        }],
    };
    let fig = Figure {
        title: "Figure 9: state partitioning vs classic SMR, round 2 of 3 (the median)".into(),
        footnote: "simulated: 4 replicas per partition, 1 Gbit/s links, 0.1 ms one-way delay, \
                   64-byte commands, batches of up to 32 commands or 1 ms, 100000 keys, \
                   B+tree fanout 64, 3 rounds of 10 s after 2 s of warm-up, seed 7"
            .into(),
        panels: vec![throughput, latency, improvement, empty],
        cols: 2,
    };
    for path in fig.write(std::path::Path::new(&stem))? {
        println!("{}", path.display());
    }
    Ok(())
}
