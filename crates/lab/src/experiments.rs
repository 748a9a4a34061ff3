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

use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_sim::hdd::{HddModel, HddParams};
use zblk_sim::{BenchReport, Sim, SimConfig, run_jobs_on};
use zblk_workload::job::{JobSpec, Rw, ZoneMode};

/// The host side of the simulated disks, as the presets (`zblk bench --dev`) have
/// it: the fitted host turnaround, the AHCI port's request size and the zoned
/// device the host sees.
pub use zblk_sim::presets::{AHCI_MAX_SECTORS, HOST_LATENCY_NS, smr_device};

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

/// `smr-streams`' stream counts N.
pub const SMR_STREAMS_N: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
/// I/Os in flight per stream.
pub const SMR_STREAMS_QD: u32 = 4;
/// Zones all streams write together: each stream writes `SMR_STREAMS_ZONES / N` zones
/// (at least one) of its own, so every point moves about as much data.
pub const SMR_STREAMS_ZONES: u64 = 32;

/// The `smr-streams` jobs: `n` sequential writers (fio's `numjobs` with
/// `offset_increment`), each with [`SMR_STREAMS_QD`] 1 MiB writes in flight, each
/// writing its own run of zones from the start of the disk, stream `i` from zone
/// `i × zones`: the writers of a log-structured file system or an object store,
/// each sequential in its own zones.
pub fn smr_streams_job(n: u32) -> JobSpec {
    let zones = (SMR_STREAMS_ZONES / u64::from(n)).max(1);
    let region = zones * (256 << 20);
    JobSpec {
        name: format!("seqw1M-{n}x{SMR_STREAMS_QD}-streams"),
        rw: Rw::Write,
        bs_bytes: 1 << 20,
        iodepth: SMR_STREAMS_QD,
        numjobs: n,
        offset_increment_bytes: region,
        size_bytes: Some(region),
        zonemode: ZoneMode::Zbd,
        ..JobSpec::default()
    }
}

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
