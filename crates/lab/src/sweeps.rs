//! The published SMR experiments as sweeps: every point run under every policy on a
//! simulated disk, one [`SweepRow`] per (point, policy), with the published figure
//! beside the simulated one where there is one. Every number produced here is a
//! simulator number (`simulated: true` in every row).
//!
//! The CLI (`zblk sweep`) prints the rows as tables, draws them and shows progress;
//! this module only runs the simulations, so that tests and other programs get the
//! same rows.

use crate::experiments::{
    HOST_LATENCY_NS, SMR_20TB_TESTS, SMR_SEQ_QD, SMR_SEQ_QD1, SMR_SEQ_ZWP, SMR_ZONES_K, smr_20tb_job, smr_device,
    smr_seq_job, smr_zones_job,
};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::params::DeviceParams;
use zblk_sim::hdd::{HddModel, HddParams};
use zblk_sim::{BenchReport, Sim, SimConfig, run_jobs_on};
use zblk_workload::job::{JobSpec, Rw};

/// The experiments [`run`] knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// Sequential 1 MiB writes across zones at QD 1…128, 30 TB disk.
    SmrSeq,
    /// 16 jobs × QD 32 × 1 MiB writes to random zones among the first K, 30 TB disk.
    SmrZones,
    /// The 20 TB disk's six tests.
    Smr20tb,
    /// `smr-seq` with the disk's write cache off: what QD=1 costs without a cache.
    SmrNocache,
}

impl Experiment {
    /// Every experiment, in the order `all` runs them.
    pub const ALL: [Experiment; 4] =
        [Experiment::SmrSeq, Experiment::SmrZones, Experiment::Smr20tb, Experiment::SmrNocache];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::SmrSeq => "smr-seq",
            Experiment::SmrZones => "smr-zones",
            Experiment::Smr20tb => "smr-20tb",
            Experiment::SmrNocache => "smr-nocache",
        }
    }

    /// The policies the experiment runs by default: the published ones first.
    pub fn default_policies(self) -> Vec<IssuePolicy> {
        match self {
            Experiment::Smr20tb => vec![IssuePolicy::Zwp, IssuePolicy::Zwl, IssuePolicy::Qd1, IssuePolicy::Batch],
            _ => vec![IssuePolicy::Zwp, IssuePolicy::Qd1, IssuePolicy::Batch, IssuePolicy::Zwl],
        }
    }

    /// The disk it runs on.
    pub fn disk(self) -> HddParams {
        match self {
            Experiment::Smr20tb => HddParams::smr_20tb(),
            Experiment::SmrNocache => HddParams { write_cache: false, ..HddParams::smr_30tb() },
            _ => HddParams::smr_30tb(),
        }
    }

    /// Runs each point is averaged over by default. The 20 TB disk's zone advance
    /// is not known, so each run draws one, and its random tests move by ±20-40 %
    /// with the draw (docs/calibration.md, *Revision 3*): 16 runs put their mean
    /// within about 5 % of the expectation. The 30 TB disk's advance is fitted, so
    /// its runs differ only in the simulation seed.
    pub fn default_layouts(self) -> u32 {
        if self == Experiment::Smr20tb { 16 } else { 4 }
    }

    /// The device's open zone limit (0: none): the 20 TB disk reports 128.
    pub fn max_open(self) -> u32 {
        if self == Experiment::Smr20tb { 128 } else { 0 }
    }

    /// The x axis: queue depth, zone count or test index.
    pub fn default_points(self) -> Vec<u32> {
        match self {
            Experiment::SmrSeq | Experiment::SmrNocache => SMR_SEQ_QD.to_vec(),
            Experiment::SmrZones => SMR_ZONES_K.to_vec(),
            Experiment::Smr20tb => (0..SMR_20TB_TESTS.len() as u32).collect(),
        }
    }
}

/// How much of each experiment to run.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepOptions {
    /// Policies, in column order.
    pub policies: Vec<IssuePolicy>,
    /// Points (queue depths for `smr-seq`, K for `smr-zones`, test indexes for
    /// `smr-20tb`); `None`: the experiment's own.
    pub points: Option<Vec<u32>>,
    /// Runs each point is averaged over: run `i` has its own layout seed (which
    /// draws the zone advance where the disk does not fix it; see
    /// `HddParams::zone_advance`) and simulation seed. `None`: the experiment's
    /// own ([`Experiment::default_layouts`]).
    pub layouts: Option<u32>,
    /// Zones written by each `smr-seq` run.
    pub seq_zones: u64,
    /// Virtual time of each `smr-zones` run.
    pub zones_runtime_ns: u64,
    /// Bytes of each sequential `smr-20tb` test.
    pub seq20_bytes: u64,
    /// I/Os of each random `smr-20tb` test.
    pub rand20_ios: u64,
    /// Base seed: run `i` of a point uses layout seed `seed - 1 + i` and simulation
    /// seed `seed + i`.
    pub seed: u64,
    /// The batching issuer's bound (see `EngineConfig::batch_max_bypass`).
    pub batch_max_bypass: u32,
    /// The batching issuer's anticipation (see `EngineConfig::batch_anticipate_ns`).
    pub batch_anticipate_ns: u64,
}

impl Default for SweepOptions {
    fn default() -> Self {
        SweepOptions {
            policies: Vec::new(),
            points: None,
            layouts: None,
            seq_zones: 32,
            zones_runtime_ns: 20_000_000_000,
            seq20_bytes: 4 << 30,
            rand20_ios: 60_000,
            seed: 1,
            batch_max_bypass: EngineConfig::default().batch_max_bypass,
            batch_anticipate_ns: EngineConfig::default().batch_anticipate_ns,
        }
    }
}

/// One simulated point under one policy.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SweepRow {
    /// `smr-seq`, `smr-zones`, `smr-20tb` or `smr-nocache`.
    pub experiment: String,
    /// The simulated disk.
    pub device: String,
    /// `zwp`, `qd1`, `batch`, `zwl`.
    pub policy: String,
    /// fio-style workload name.
    pub workload: String,
    /// I/Os in flight per job.
    pub qd: Option<u32>,
    /// fio jobs.
    pub jobs: Option<u32>,
    /// Zones the workload chooses from (`smr-zones`' K).
    pub zones: Option<u32>,
    /// Block size.
    pub bs_bytes: u64,
    /// Simulated write throughput, MB/s (10^6 bytes per virtual second), averaged
    /// over the layouts.
    pub mb_s: f64,
    /// Simulated write IOPS.
    pub iops: f64,
    /// The published figure for this point and policy, MB/s, if there is one.
    pub published_mb_s: Option<f64>,
    /// Simulated 99th percentile completion latency, ms (worst layout).
    pub p99_ms: f64,
    /// Simulated mean completion latency, ms (mean of the layouts).
    pub mean_ms: f64,
    /// The simulated disk's sustained media rate over the region written, MB/s:
    /// what a perfect issuer would reach once the cache is flushed.
    pub media_mb_s: Option<f64>,
    /// Layouts averaged.
    pub layouts: u32,
    /// I/Os simulated for this row (all layouts).
    pub ios: u64,
    /// Always true: these are simulator numbers.
    pub simulated: bool,
}

impl SweepRow {
    /// Simulated / published − 1, if published.
    pub fn error(&self) -> Option<f64> {
        self.published_mb_s.map(|p| self.mb_s / p - 1.0)
    }
}

/// One run of a sweep, before it starts (for progress displays).
#[derive(Clone, Debug)]
pub struct SweepStep<'a> {
    /// Runs done so far.
    pub done: usize,
    /// Runs in the sweep.
    pub total: usize,
    /// The experiment.
    pub experiment: Experiment,
    /// The workload about to run.
    pub workload: &'a str,
    /// The policy it runs under.
    pub policy: IssuePolicy,
}

/// A refused sweep set-up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SweepError {
    /// A point outside what the experiment has.
    #[error("{experiment}: point {point}: {why}")]
    BadPoint {
        /// The experiment.
        experiment: &'static str,
        /// The point given.
        point: u32,
        /// Why it is refused.
        why: String,
    },
    /// An option out of range.
    #[error("{0}")]
    BadOption(String),
}

struct Point {
    job: JobSpec,
    qd: u32,
    jobs: u32,
    zones: Option<u32>,
    /// Published figures at this point, by policy.
    published: Vec<(IssuePolicy, f64)>,
    region: Option<(u64, u64)>,
}

fn points(exp: Experiment, o: &SweepOptions) -> Result<Vec<Point>, SweepError> {
    let list = o.points.clone().unwrap_or_else(|| exp.default_points());
    if list.is_empty() {
        return Err(SweepError::BadOption(format!("{}: no points to run", exp.name())));
    }
    let bad = |point: u32, why: &str| SweepError::BadPoint { experiment: exp.name(), point, why: why.to_string() };
    let mut out = Vec::new();
    for &x in &list {
        let p = match exp {
            Experiment::SmrSeq | Experiment::SmrNocache => {
                if !(1..=4096).contains(&x) {
                    return Err(bad(x, "the queue depth must be 1 to 4096"));
                }
                let published = match SMR_SEQ_QD.iter().position(|&q| q == x) {
                    Some(i) if exp == Experiment::SmrSeq => {
                        vec![(IssuePolicy::Zwp, SMR_SEQ_ZWP[i]), (IssuePolicy::Qd1, SMR_SEQ_QD1[i])]
                    }
                    _ => Vec::new(),
                };
                Point {
                    job: JobSpec { end_fsync: true, ..smr_seq_job(x, o.seq_zones) },
                    qd: x,
                    jobs: 1,
                    zones: None,
                    published,
                    region: Some((0, o.seq_zones * (256 << 20))),
                }
            }
            Experiment::SmrZones => {
                if !(1..=4096).contains(&x) {
                    return Err(bad(x, "K (zones to choose from) must be 1 to 4096"));
                }
                Point {
                    job: smr_zones_job(x, o.zones_runtime_ns),
                    qd: 32,
                    jobs: 16,
                    zones: Some(x),
                    published: Vec::new(),
                    region: None,
                }
            }
            Experiment::Smr20tb => {
                let Some(t) = SMR_20TB_TESTS.get(x as usize) else {
                    return Err(bad(x, &format!("the 20 TB disk has tests 0 to {}", SMR_20TB_TESTS.len() - 1)));
                };
                let random = t.rw == Rw::RandWrite;
                Point {
                    // Sequential tests flush at the end, so that they measure the media, not
                    // the cache; random ones ran as published (fio's time-free defaults).
                    job: JobSpec { end_fsync: !random, ..smr_20tb_job(t, o.seq20_bytes, o.rand20_ios) },
                    qd: t.qd,
                    jobs: 1,
                    zones: None,
                    published: vec![(IssuePolicy::Zwp, t.zwp_mb_s), (IssuePolicy::Zwl, t.zwl_mb_s)],
                    region: if random { None } else { Some((0, o.seq20_bytes)) },
                }
            }
        };
        out.push(p);
    }
    Ok(out)
}

/// One run: `job` on `disk` with the engine configured by `engine` (its queue depth
/// is the disk's).
pub fn run_one(
    disk: &HddParams,
    max_open: u32,
    engine: EngineConfig,
    job: &JobSpec,
    layout_seed: u64,
    seed: u64,
) -> Result<BenchReport, SweepError> {
    run_one_with(disk, max_open, engine, job, (layout_seed, seed), HOST_LATENCY_NS)
}

/// [`run_one`] with another host turnaround than the fitted one (for refitting it,
/// `crate::loo`); `seeds` are the layout seed and the simulation seed.
pub fn run_one_with(
    disk: &HddParams,
    max_open: u32,
    engine: EngineConfig,
    job: &JobSpec,
    seeds: (u64, u64),
    host_latency_ns: u64,
) -> Result<BenchReport, SweepError> {
    run_on_device(disk, smr_device(disk, max_open), engine, job, seeds, host_latency_ns)
}

/// [`run_one_with`] on `device` as the host sees the disk (for a run with another
/// host limit than [`smr_device`]'s).
pub fn run_on_device(
    disk: &HddParams,
    device: DeviceParams,
    engine: EngineConfig,
    job: &JobSpec,
    seeds: (u64, u64),
    host_latency_ns: u64,
) -> Result<BenchReport, SweepError> {
    let (layout_seed, seed) = seeds;
    let disk = HddParams { layout_seed, ..disk.clone() };
    let engine = EngineConfig { queue_depth: disk.ncq_depth, ..engine };
    let cfg = SimConfig { engine, host_latency_ns, ..SimConfig::new(device, seed) };
    let mut sim =
        Sim::with_model(&cfg, Box::new(HddModel::new(disk))).map_err(|e| SweepError::BadOption(e.to_string()))?;
    run_jobs_on(&mut sim, std::slice::from_ref(job), true).map_err(|e| SweepError::BadOption(e.to_string()))
}

/// The number of runs [`run`] makes (for progress displays).
pub fn runs(exp: Experiment, o: &SweepOptions) -> Result<usize, SweepError> {
    Ok(points(exp, o)?.len() * policies(exp, o).len() * o.layouts_for(exp) as usize)
}

impl SweepOptions {
    /// The runs each point of `exp` is averaged over.
    pub fn layouts_for(&self, exp: Experiment) -> u32 {
        self.layouts.unwrap_or(exp.default_layouts())
    }
}

fn policies(exp: Experiment, o: &SweepOptions) -> Vec<IssuePolicy> {
    if o.policies.is_empty() { exp.default_policies() } else { o.policies.clone() }
}

/// Runs `exp`: every point under every policy, averaged over `o.layouts` layouts.
/// `step` is called before each run.
pub fn run(
    exp: Experiment,
    o: &SweepOptions,
    step: &mut dyn FnMut(&SweepStep<'_>),
) -> Result<Vec<SweepRow>, SweepError> {
    let layouts = o.layouts_for(exp);
    if layouts == 0 || layouts > 64 {
        return Err(SweepError::BadOption(format!("layouts: {layouts} (must be 1 to 64)")));
    }
    if o.seq_zones == 0 || o.zones_runtime_ns == 0 || o.rand20_ios == 0 {
        return Err(SweepError::BadOption("run lengths must be positive".to_string()));
    }
    if exp == Experiment::Smr20tb && (o.seq20_bytes == 0 || o.seq20_bytes % (256 << 20) != 0) {
        return Err(SweepError::BadOption(format!(
            "sequential 20 TB tests: {} bytes is not a whole number of 256 MiB zones",
            o.seq20_bytes
        )));
    }
    if let Some(bad) = o
        .policies
        .iter()
        .find(|p| !matches!(p, IssuePolicy::Zwp | IssuePolicy::Qd1 | IssuePolicy::Batch | IssuePolicy::Zwl))
    {
        return Err(SweepError::BadOption(format!(
            "policy {}: a sweep compares zwp, qd1, batch and zwl (passthrough breaks zone writes)",
            bad.name()
        )));
    }
    let pts = points(exp, o)?;
    let pols = policies(exp, o);
    let disk = exp.disk();
    let total = pts.len() * pols.len() * layouts as usize;
    let mut done = 0;
    let mut rows = Vec::new();
    for p in &pts {
        for &policy in &pols {
            let (mut bw, mut iops, mut p99, mut ios, mut mean) = (0.0, 0.0, 0u64, 0u64, 0.0);
            let mut device = String::new();
            let engine = EngineConfig {
                policy,
                batch_max_bypass: o.batch_max_bypass,
                batch_anticipate_ns: o.batch_anticipate_ns,
                ..EngineConfig::default()
            };
            for i in 0..u64::from(layouts) {
                step(&SweepStep { done, total, experiment: exp, workload: &p.job.name, policy });
                let r =
                    run_one(&disk, exp.max_open(), engine, &p.job, o.seed.wrapping_sub(1).wrapping_add(i), o.seed + i)?;
                done += 1;
                let j = &r.jobs[0];
                assert_eq!(
                    j.errors,
                    0,
                    "{} under {}: {} I/Os failed ({:?})",
                    p.job.name,
                    policy.name(),
                    j.errors,
                    j.first_error
                );
                bw += j.write.bw_bytes;
                iops += j.write.iops;
                ios += j.write.ios;
                mean += j.write.clat.mean_ns;
                let q99 = j.write.clat.percentiles.iter().find(|(q, _)| *q == 99.0).map_or(0, |x| x.1);
                p99 = p99.max(q99);
                device = r.device;
            }
            let n = f64::from(layouts);
            rows.push(SweepRow {
                experiment: exp.name().to_string(),
                device,
                policy: policy.name().to_string(),
                workload: p.job.name.clone(),
                qd: Some(p.qd),
                jobs: Some(p.jobs),
                zones: p.zones,
                bs_bytes: p.job.bs_bytes,
                mb_s: bw / n / 1e6,
                iops: iops / n,
                published_mb_s: p.published.iter().find(|(q, _)| *q == policy).map(|x| x.1),
                p99_ms: p99 as f64 / 1e6,
                mean_ms: mean / n / 1e6,
                media_mb_s: p.region.map(|(start, len)| HddModel::new(disk.clone()).sustained_mb_s(start, len)),
                layouts,
                ios,
                simulated: true,
            });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SweepOptions {
        SweepOptions {
            layouts: Some(1),
            seq_zones: 4,
            zones_runtime_ns: 2_000_000_000,
            seq20_bytes: 256 << 20,
            rand20_ios: 500,
            ..SweepOptions::default()
        }
    }

    #[test]
    fn single_issuer_keeps_the_media_rate_where_per_zone_plugging_loses_it() {
        let o = SweepOptions {
            policies: vec![IssuePolicy::Zwp, IssuePolicy::Qd1],
            points: Some(vec![1, 8, 64]),
            ..small()
        };
        let mut steps = 0;
        let rows = run(Experiment::SmrSeq, &o, &mut |s| {
            assert_eq!(s.done, steps);
            steps += 1;
        })
        .unwrap();
        assert_eq!(steps, 6);
        assert_eq!(rows.len(), 6);
        for r in &rows {
            assert!(r.simulated);
            assert!(r.published_mb_s.is_some(), "{r:?}");
            let media = r.media_mb_s.unwrap();
            if r.policy == "qd1" {
                assert!((r.mb_s / media - 1.0).abs() < 0.02, "qd1 at QD{:?}: {} vs media {media}", r.qd, r.mb_s);
            }
        }
        let zwp64 = rows.iter().find(|r| r.policy == "zwp" && r.qd == Some(64)).unwrap();
        let qd164 = rows.iter().find(|r| r.policy == "qd1" && r.qd == Some(64)).unwrap();
        assert!(zwp64.mb_s < 0.9 * qd164.mb_s, "zwp {} qd1 {}", zwp64.mb_s, qd164.mb_s);
    }

    /// What issue 12 asks of `smr-seq` (docs/calibration.md, *Revision 3*): per-zone
    /// plugging within ±10 % of every published point, the single issuer within
    /// 2 % of the media rate. The full run (32 zones), one run per point: the
    /// 30 TB disk's zone advance is fitted, so there is no layout to average.
    #[test]
    fn the_30tb_model_meets_every_published_smr_seq_point() {
        let o = SweepOptions {
            policies: vec![IssuePolicy::Zwp, IssuePolicy::Qd1],
            layouts: Some(1),
            ..SweepOptions::default()
        };
        let rows = run(Experiment::SmrSeq, &o, &mut |_| {}).unwrap();
        assert_eq!(rows.len(), 2 * SMR_SEQ_QD.len());
        for r in &rows {
            let e = r.mb_s / r.published_mb_s.expect("published") - 1.0;
            assert!(e.abs() <= 0.10, "{} QD{:?}: {:.1} MB/s, {:+.1} % off", r.policy, r.qd, r.mb_s, e * 100.0);
            if r.policy == "qd1" {
                let media = r.media_mb_s.expect("a media rate");
                assert!((r.mb_s / media - 1.0).abs() <= 0.02, "qd1 QD{:?}: {} vs media {media}", r.qd, r.mb_s);
            }
        }
    }

    /// Mechanism M9 (docs/calibration.md, revision 2): a 1 MiB write split at the
    /// AHCI limit costs per-zone plugging on random zones (its second part waits
    /// behind other zones' requests: two zone changes per write), and barely costs
    /// the single issuer (both parts in a row). K = 16, 20 s, one layout.
    #[test]
    fn the_ahci_split_costs_per_zone_plugging_on_random_zones_not_the_single_issuer() {
        let disk = Experiment::SmrZones.disk();
        let job = smr_zones_job(16, 20_000_000_000);
        let rate = |policy: IssuePolicy, split: bool| {
            let mut device = smr_device(&disk, Experiment::SmrZones.max_open());
            assert_eq!(device.geometry.max_sectors, crate::experiments::AHCI_MAX_SECTORS);
            if !split {
                device.geometry.max_sectors = 2048;
            }
            let engine = EngineConfig { policy, ..EngineConfig::default() };
            let r = run_on_device(&disk, device, engine, &job, (disk.layout_seed, 1), HOST_LATENCY_NS).unwrap();
            crate::experiments::write_mb_s(&r)
        };
        let (zwp_split, zwp_whole) = (rate(IssuePolicy::Zwp, true), rate(IssuePolicy::Zwp, false));
        let (qd1_split, qd1_whole) = (rate(IssuePolicy::Qd1, true), rate(IssuePolicy::Qd1, false));
        let all = format!("zwp {zwp_split:.1} / {zwp_whole:.1}, qd1 {qd1_split:.1} / {qd1_whole:.1} MB/s");
        assert!(zwp_split < 0.8 * zwp_whole, "{all}");
        assert!(qd1_split > 0.9 * qd1_whole, "{all}");
        assert!(qd1_split > 1.3 * zwp_split, "{all}");
        assert!(zwp_whole < 1.1 * qd1_whole, "{all}");
    }

    #[test]
    fn random_zones_gain_from_the_single_issuer_and_more_from_batching() {
        // 40 s: long enough that the cache's fill (450 MiB) does not decide the rates.
        let o = SweepOptions {
            policies: vec![IssuePolicy::Zwp, IssuePolicy::Qd1, IssuePolicy::Batch],
            points: Some(vec![4]),
            zones_runtime_ns: 40_000_000_000,
            ..small()
        };
        let rows = run(Experiment::SmrZones, &o, &mut |_| {}).unwrap();
        assert_eq!(rows[0].zones, Some(4));
        assert_eq!((rows[0].jobs, rows[0].qd), (Some(16), Some(32)));
        let (zwp, qd1, batch) = (&rows[0], &rows[1], &rows[2]);
        assert!(qd1.mb_s > 1.1 * zwp.mb_s, "{rows:?}");
        // Anticipation extends zone visits: fewer resumes (M2) per byte.
        assert!(batch.mb_s > 1.3 * qd1.mb_s, "{rows:?}");
        assert!(rows.iter().all(|r| r.published_mb_s.is_none() && r.p99_ms > 0.0));
    }

    /// Sanity rule: over a run longer than the cache holds, ended by a flush, no
    /// policy writes faster than the media. Resets included (K = 1 resets zone 0
    /// every 256 MiB): a reset must not let cached data escape the media (M1).
    #[test]
    fn no_sustained_rate_above_the_media_rate() {
        let disk = Experiment::SmrZones.disk();
        let cache = u64::from(disk.cache_segments) * disk.segment_bytes;
        for k in [1u32, 4] {
            let runtime_ns = 4_000_000_000;
            let media = HddModel::new(disk.clone()).sustained_mb_s(0, u64::from(k) * (256 << 20));
            // Longer than the cache holds at the media rate.
            assert!(runtime_ns as f64 * 1e-9 * media * 1e6 > 2.0 * cache as f64);
            let job = JobSpec { end_fsync: true, ..smr_zones_job(k, runtime_ns) };
            for policy in [IssuePolicy::Zwp, IssuePolicy::Qd1, IssuePolicy::Batch, IssuePolicy::Zwl] {
                let engine = EngineConfig { policy, ..EngineConfig::default() };
                let r = run_one(&disk, 0, engine, &job, 1, 2).unwrap();
                let mb_s = r.jobs[0].write.bw_bytes / 1e6;
                assert!(mb_s <= media * 1.001, "K={k} {}: {mb_s} MB/s above the media rate {media}", policy.name());
                assert!(mb_s > 0.2 * media, "K={k} {}: {mb_s} MB/s", policy.name());
            }
        }
    }

    /// Sanity rule: per-zone plugging's cost of zone boundaries (interleaved writes
    /// of two zones) grows with the queue depth; nothing in the model makes a deeper
    /// queue cheaper, so its throughput never rises with QD.
    #[test]
    fn per_zone_plugging_never_gains_from_a_deeper_queue() {
        let o = SweepOptions { policies: vec![IssuePolicy::Zwp], ..small() };
        let rows = run(Experiment::SmrSeq, &o, &mut |_| {}).unwrap();
        assert_eq!(rows.len(), SMR_SEQ_QD.len());
        for w in rows.windows(2) {
            assert!(w[1].mb_s <= w[0].mb_s * 1.005, "QD{:?} {} > QD{:?} {}", w[1].qd, w[1].mb_s, w[0].qd, w[0].mb_s);
        }
        assert!(rows.last().unwrap().mb_s < 0.8 * rows[0].mb_s, "{rows:?}");
    }

    /// The premise of docs/calibration.md's bound on the window family: at each zone
    /// boundary, per-zone plugging hands the disk a strict alternation of the two
    /// zones' requests, about 2(QD − 1) writes long, at QD 64 as at QD 128; only
    /// its share of a zone's 256 writes differs (about half, about all). Each 1 MiB
    /// write reaches the disk as two requests (split at the AHCI limit), so the
    /// alternation is 2 × 2(QD − 1) zone changes. Counted at the disk's door,
    /// before its cache.
    #[test]
    fn per_zone_plugging_alternates_two_zones_for_2_qd_writes_per_boundary() {
        let zones = 6;
        for qd in [16, 64, 128] {
            let job = smr_seq_job(qd, zones);
            let engine = EngineConfig { policy: IssuePolicy::Zwp, ..EngineConfig::default() };
            let r = run_one(&Experiment::SmrSeq.disk(), Experiment::SmrSeq.max_open(), engine, &job, 1, 1).unwrap();
            let switches = r.model.iter().find(|c| c.0 == "arrival_switches").expect("counter").1;
            let per_boundary = switches / (zones - 1) as f64;
            let parts = (1u64 << 20).div_ceil(u64::from(crate::experiments::AHCI_MAX_SECTORS) * 512);
            assert_eq!(parts, 2);
            let expect = 2.0 * parts as f64 * f64::from(qd - 1);
            assert!(
                (per_boundary / expect - 1.0).abs() < 0.05,
                "QD{qd}: {per_boundary:.1} zone changes per boundary, expected about {expect}"
            );
        }
    }

    #[test]
    fn the_20tb_tests_carry_their_published_figures() {
        let o = SweepOptions { points: Some(vec![0, 4]), ..small() };
        let rows = run(Experiment::Smr20tb, &o, &mut |_| {}).unwrap();
        let get = |w: &str, p: &str| rows.iter().find(|r| r.workload == w && r.policy == p).unwrap().clone();
        assert_eq!(get("seqw4K1", "zwp").published_mb_s, Some(115.0));
        assert_eq!(get("seqw4K1", "zwl").published_mb_s, Some(107.0));
        assert_eq!(get("seqw4K1", "batch").published_mb_s, None);
        let rnd = get("rndw4K16", "zwp");
        assert!((rnd.published_mb_s.unwrap() - 2.2e3 * 4096.0 / 1e6).abs() < 1e-9);
        assert!(rnd.media_mb_s.is_none());
    }

    #[test]
    fn bad_set_ups_are_refused() {
        let err = |exp, o: SweepOptions| run(exp, &o, &mut |_| {}).unwrap_err().to_string();
        assert!(err(Experiment::SmrSeq, SweepOptions { points: Some(vec![0]), ..small() }).contains("queue depth"));
        assert!(err(Experiment::Smr20tb, SweepOptions { points: Some(vec![6]), ..small() }).contains("tests 0 to 5"));
        assert!(err(Experiment::SmrSeq, SweepOptions { layouts: Some(0), ..small() }).contains("layouts"));
        let o = SweepOptions { policies: vec![IssuePolicy::Passthrough], ..small() };
        assert!(err(Experiment::SmrSeq, o).contains("passthrough"));
        assert!(err(Experiment::SmrZones, SweepOptions { points: Some(vec![]), ..small() }).contains("no points"));
        assert!(err(Experiment::Smr20tb, SweepOptions { seq20_bytes: 1 << 20, ..small() }).contains("256 MiB zones"));
    }
}
