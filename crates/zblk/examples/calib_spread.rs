//! Spread of the smr-seq points across layout seeds.
use zblk::core::IssuePolicy;
use zblk::sim::experiments::*;
use zblk::sim::hdd::HddParams;

fn main() {
    let zones: u64 = std::env::args().nth(1).and_then(|v| v.parse().ok()).unwrap_or(32);
    for qd in [16u32, 32, 64, 128] {
        let mut v = Vec::new();
        for s in 0..12u64 {
            let d = HddParams { layout_seed: s, ..HddParams::smr_30tb() };
            v.push(write_mb_s(&run_on_disk(&d, 0, IssuePolicy::Zwp, &[smr_seq_job(qd, zones)], s + 1)));
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let (lo, hi) = v.iter().fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(*x), b.max(*x)));
        println!("qd {qd:>3}: mean {mean:.0} min {lo:.0} max {hi:.0}");
    }
}
