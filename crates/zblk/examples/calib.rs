//! Calibration harness: prints the simulated published experiments next to the
//! published figures, for a grid of the fitted parameters given on the command line.

use zblk::core::IssuePolicy;
use zblk::sim::experiments::*;
use zblk::sim::hdd::HddParams;

fn seq(disk: &HddParams, zones: u64, seeds: u64) {
    let mut worst: f64 = 0.0;
    let mut line = String::new();
    for (i, qd) in SMR_SEQ_QD.iter().enumerate() {
        let mut zwp = 0.0;
        for s in 0..seeds {
            let d = HddParams { layout_seed: s, ..disk.clone() };
            zwp += write_mb_s(&run_on_disk(&d, 0, IssuePolicy::Zwp, &[smr_seq_job(*qd, zones)], s + 1));
        }
        zwp /= seeds as f64;
        let err = 100.0 * (zwp / SMR_SEQ_ZWP[i] - 1.0);
        worst = worst.max(err.abs());
        line.push_str(&format!(" {qd}:{zwp:.0}({err:+.0}%)"));
    }
    println!("worst {worst:5.1}% |{line}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let window: u32 = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(1);
    let cache_mb: u64 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(64);
    let merge = args.get(3).is_some_and(|v| v == "merge");
    let mut disk = HddParams::smr_30tb();
    disk.destage.window = window;
    disk.destage.merge = merge;
    disk.cache_segments = (cache_mb << 4) as u32;
    print!("30TB window={window} cache={cache_mb}MiB merge={merge}: ");
    seq(&disk, 32, 4);
}
