//! The published zoned-write experiments, run on the simulated disks: every policy
//! side by side, with the published figure beside each simulated one where there is
//! one. Every number produced here is a simulator number.
//!
//! - `smr-seq`: sequential 1 MiB direct writes across zones at QD 1…128 on the 30 TB
//!   SMR disk (published: per-zone plugging and single issuer).
//! - `smr-20tb`: the 20 TB SMR disk's sequential and random write tests (published:
//!   per-zone plugging and zone write locking).
//! - `smr-zones`: 16 jobs × QD 32 × 1 MiB writes to random zones among the first K
//!   zones (published without numbers).

use super::driver::{Sim, SimConfig};
use super::hdd::{HddModel, HddParams};
use super::{BenchReport, run_jobs_on};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::params::{DeviceParams, LatencyDist};
use zblk_workload::job::{JobSpec, Rw, ZoneMode};

/// Fitted: the application's completion-to-next-submission turnaround (fio reaping a
/// completion and issuing the next I/O through a system call). See
/// docs/calibration.md.
pub const HOST_LATENCY_NS: u64 = 18_000;

/// Published sequential write throughput of the 30 TB disk (MB/s) by QD.
pub const SMR_SEQ_QD: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// Per-zone plugging.
pub const SMR_SEQ_ZWP: [f64; 8] = [244.0, 244.0, 245.0, 242.0, 222.0, 211.0, 193.0, 112.0];
/// Single issuer.
pub const SMR_SEQ_QD1: [f64; 8] = [245.0, 245.0, 245.0, 245.0, 246.0, 245.0, 244.0, 246.0];

/// One test of the 20 TB disk.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Test20 {
    /// fio-style name.
    pub name: &'static str,
    /// Pattern.
    pub rw: Rw,
    /// Block size.
    pub bs_bytes: u64,
    /// Queue depth.
    pub qd: u32,
    /// Published with per-zone plugging, MB/s.
    pub zwp_mb_s: f64,
    /// Published with zone write locking (mq-deadline), MB/s.
    pub zwl_mb_s: f64,
}

const fn iops_to_mb_s(kiops: f64, bs: u64) -> f64 {
    kiops * 1000.0 * bs as f64 / 1e6
}

/// The 20 TB disk's tests (random results were published in IOPS; converted).
pub const SMR_20TB_TESTS: [Test20; 6] = [
    Test20 { name: "seqw4K1", rw: Rw::Write, bs_bytes: 4096, qd: 1, zwp_mb_s: 115.0, zwl_mb_s: 107.0 },
    Test20 { name: "seqw4K16", rw: Rw::Write, bs_bytes: 4096, qd: 16, zwp_mb_s: 235.0, zwl_mb_s: 243.0 },
    Test20 { name: "seqw1M1", rw: Rw::Write, bs_bytes: 1 << 20, qd: 1, zwp_mb_s: 249.0, zwl_mb_s: 245.0 },
    Test20 { name: "seqw1M16", rw: Rw::Write, bs_bytes: 1 << 20, qd: 16, zwp_mb_s: 242.0, zwl_mb_s: 246.0 },
    Test20 {
        name: "rndw4K16",
        rw: Rw::RandWrite,
        bs_bytes: 4096,
        qd: 16,
        zwp_mb_s: iops_to_mb_s(2.2, 4096),
        zwl_mb_s: iops_to_mb_s(2.2, 4096),
    },
    Test20 {
        name: "rndw128K16",
        rw: Rw::RandWrite,
        bs_bytes: 128 << 10,
        qd: 16,
        zwp_mb_s: iops_to_mb_s(0.763, 128 << 10),
        zwl_mb_s: iops_to_mb_s(0.763, 128 << 10),
    },
];

/// The largest request the host sends a SATA disk, in sectors: 672 KiB. An AHCI
/// port's command table holds 168 scatter-gather entries (`AHCI_MAX_SG` in the
/// kernel's `drivers/ata/ahci.h`), and a direct write from a user buffer in 4 KiB
/// pages (fio's default `mem=malloc`) takes one entry per page, so the block layer
/// splits a 1 MiB write into 672 KiB + 352 KiB. Per-zone plugging issues the
/// second part only when the first completes; the single issuer issues both in a
/// row (docs/calibration.md, *Revision 2*). `max_sectors=` overrides it.
pub const AHCI_MAX_SECTORS: u32 = 168 * 8;

/// The zoned device seen by the host for a disk: its capacity in 256 MiB zones,
/// emulated zone append, the NCQ depth, rotational, no data kept, requests split
/// at [`AHCI_MAX_SECTORS`].
pub fn smr_device(disk: &HddParams, max_open: u32) -> DeviceParams {
    let zone = disk.zone_bytes.max(256 << 20);
    let mut p = DeviceParams::default();
    p.geometry.capacity_bytes = disk.capacity_bytes / zone * zone;
    p.geometry.zoned = disk.zone_bytes != 0;
    p.geometry.zone_size_bytes = zone;
    p.geometry.max_append_sectors = 0;
    p.geometry.max_open = max_open;
    p.memory_backed = false;
    p.rotational = true;
    p.hw_queue_depth = disk.ncq_depth;
    p.completion_dist = LatencyDist::Fixed;
    // SATA disks zero by writing (WRITE SAME without unmap on an SMR zone).
    p.geometry.write_zeroes_unmap_max_hw_bytes = 0;
    p.geometry.max_sectors = AHCI_MAX_SECTORS;
    p
}

/// One simulated run of `jobs` on `disk` with `policy`.
pub fn run_on_disk(disk: &HddParams, max_open: u32, policy: IssuePolicy, jobs: &[JobSpec], seed: u64) -> BenchReport {
    let device = smr_device(disk, max_open);
    let engine = EngineConfig { policy, queue_depth: disk.ncq_depth, ..EngineConfig::default() };
    let cfg = SimConfig { engine, host_latency_ns: HOST_LATENCY_NS, ..SimConfig::new(device, seed) };
    let mut sim = Sim::with_model(&cfg, Box::new(HddModel::new(disk.clone()))).expect("preset device is valid");
    run_jobs_on(&mut sim, jobs, true).expect("preset jobs are valid")
}

/// Write throughput of a report, MB/s (10^6 bytes/s, as fio prints MB/s).
pub fn write_mb_s(r: &BenchReport) -> f64 {
    r.jobs.iter().map(|j| j.write.bw_bytes).sum::<f64>() / 1e6
}

/// The `smr-seq` job at queue depth `qd`: sequential 1 MiB writes from the start of
/// the disk across `zones` zones.
pub fn smr_seq_job(qd: u32, zones: u64) -> JobSpec {
    JobSpec {
        name: format!("seqw1M-qd{qd}"),
        rw: Rw::Write,
        bs_bytes: 1 << 20,
        iodepth: qd,
        size_bytes: Some(zones * (256 << 20)),
        zonemode: ZoneMode::Zbd,
        ..JobSpec::default()
    }
}

/// A 20 TB disk test as a job: sequential ones write `seq_zones` zones from the
/// start; random ones write `rand_ios` I/Os to random zones of the whole disk (fio
/// keeps at most the device's open zone limit open).
pub fn smr_20tb_job(t: &Test20, seq_bytes: u64, rand_ios: u64) -> JobSpec {
    let random = t.rw == Rw::RandWrite;
    JobSpec {
        name: t.name.to_string(),
        rw: t.rw,
        bs_bytes: t.bs_bytes,
        iodepth: t.qd,
        size_bytes: if random { None } else { Some(seq_bytes) },
        io_size_bytes: Some(if random { rand_ios * t.bs_bytes } else { seq_bytes }),
        zonemode: ZoneMode::Zbd,
        ..JobSpec::default()
    }
}

/// Zone counts of the `smr-zones` experiment.
pub const SMR_ZONES_K: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// The `smr-zones` jobs: 16 jobs × QD 32 × 1 MiB writes to random zones among the
/// first `k` zones, for `runtime_ns` of virtual time.
pub fn smr_zones_job(k: u32, runtime_ns: u64) -> JobSpec {
    JobSpec {
        name: format!("rndw1M-16x32-k{k}"),
        rw: Rw::RandWrite,
        bs_bytes: 1 << 20,
        iodepth: 32,
        numjobs: 16,
        size_bytes: Some(u64::from(k) * (256 << 20)),
        runtime_ns: Some(runtime_ns),
        zonemode: ZoneMode::Zbd,
        ..JobSpec::default()
    }
}
