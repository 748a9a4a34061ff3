//! 20 TB disk points with the disk's internal counters.
use zblk::core::IssuePolicy;
use zblk::sim::experiments::*;
use zblk::sim::hdd::HddParams;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cache_mb: u64 = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(64);
    let cmds: u32 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(4096);
    let ios: u64 = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(20000);
    let _ = cache_mb;
    let disk = HddParams { cache_segments: cmds, ..HddParams::smr_20tb() };
    for test in SMR_20TB_TESTS {
        let job = smr_20tb_job(&test, 32 * (256 << 20), ios);
        let r = run_on_disk(&disk, 128, IssuePolicy::Zwp, &[job], 1);
        let zwp = write_mb_s(&r);
        println!(
            "{:>10}: {:>7.2} / {:>7.2} ({:+5.1}%) resets {} virtual {:.2}s",
            test.name,
            test.zwp_mb_s,
            zwp,
            100.0 * (zwp / test.zwp_mb_s - 1.0),
            r.jobs[0].zone_resets,
            r.virtual_ns as f64 / 1e9
        );
    }
}
