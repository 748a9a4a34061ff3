//! Zone switches the 30 TB disk performs per zone written, by QD.
use zblk::core::IssuePolicy;
use zblk::sim::experiments::*;
use zblk::sim::hdd::HddParams;

fn main() {
    for qd in [8u32, 16, 32, 64, 128] {
        let r = run_on_disk(&HddParams::smr_30tb(), 0, IssuePolicy::Zwp, &[smr_seq_job(qd, 32)], 1);
        println!("qd {qd}: {:.1} MB/s", write_mb_s(&r));
    }
}
