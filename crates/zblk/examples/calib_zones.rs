//! The random multi-zone workload under each policy.
use zblk::core::IssuePolicy;
use zblk::sim::experiments::*;
use zblk::sim::hdd::HddParams;

fn main() {
    let t = std::time::Instant::now();
    for k in SMR_ZONES_K {
        let mut line = format!("K={k:>3}:");
        for policy in [IssuePolicy::Zwp, IssuePolicy::Qd1] {
            let r = run_on_disk(&HddParams::smr_30tb(), 0, policy, &[smr_zones_job(k, 20_000_000_000)], 1);
            let lat = r.jobs[0].write.clat.percentiles.iter().find(|(p, _)| *p == 99.0).map(|x| x.1).unwrap_or(0);
            line.push_str(&format!(
                "  {}: {:6.1} MB/s p99 {:6.0} ms resets {:4}",
                policy.name(),
                write_mb_s(&r),
                lat as f64 / 1e6,
                r.jobs[0].zone_resets
            ));
        }
        println!("{line}");
    }
    eprintln!("{:.1}s", t.elapsed().as_secs_f64());
}
