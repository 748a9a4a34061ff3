//! The published SMR experiments as sweeps: every point run under every policy on a
//! simulated disk, one [`SweepRow`] per (point, policy), with the published figure
//! beside the simulated one where there is one. Every number produced here is a
//! simulator number (`simulated: true` in every row).
//!
//! The CLI (`zblk sweep`) prints the rows as tables, draws them and shows progress;
//! this module only runs the simulations, so that tests and other programs get the
//! same rows.

mod one_run;
mod points;
#[cfg(test)]
mod tests;

pub use one_run::{RunSetup, run_one};

use crate::experiments::{SMR_20TB_TESTS, SMR_SEQ_QD, SMR_STREAMS_N, SMR_ZONES_K};
use points::{Point, points};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_sim::BenchReport;
use zblk_sim::hdd::{HddModel, HddParams};

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
    /// N sequential streams (1…64), each QD 4 × 1 MiB writes in its own zones, 30
    /// TB disk: where an issuer that keeps to a zone pays fewer zone switches.
    SmrStreams,
}

impl Experiment {
    /// Every experiment `all` runs, in that order (the published ones, and what the
    /// cache hides).
    pub const ALL: [Experiment; 4] =
        [Experiment::SmrSeq, Experiment::SmrZones, Experiment::Smr20tb, Experiment::SmrNocache];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::SmrSeq => "smr-seq",
            Experiment::SmrZones => "smr-zones",
            Experiment::Smr20tb => "smr-20tb",
            Experiment::SmrNocache => "smr-nocache",
            Experiment::SmrStreams => "smr-streams",
        }
    }

    /// The policies the experiment runs by default: the published ones first.
    pub fn default_policies(self) -> Vec<IssuePolicy> {
        let mut policies = IssuePolicy::compared();
        if self == Experiment::Smr20tb {
            // The published ones first: the 20 TB disk's figures are for zwp and zwl.
            policies.sort_by_key(|p| !matches!(p, IssuePolicy::Zwp | IssuePolicy::Zwl));
        }
        policies
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
            Experiment::SmrStreams => SMR_STREAMS_N.to_vec(),
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

/// Refuses options `exp` cannot run: the layout count, run lengths, the 20 TB
/// sequential size, a policy a sweep does not compare. Returns the layout count.
fn check(exp: Experiment, o: &SweepOptions) -> Result<u32, SweepError> {
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
    if let Some(bad) = o.policies.iter().find(|p| p.info().baseline) {
        let names: Vec<&str> = IssuePolicy::compared().iter().map(|p| p.name()).collect();
        let (last, rest) = names.split_last().expect("policies to compare");
        return Err(SweepError::BadOption(format!(
            "policy {0}: a sweep compares {1} and {2} ({0} breaks zone writes)",
            bad.name(),
            rest.join(", "),
            last
        )));
    }
    Ok(layouts)
}

/// Runs `exp`: every point under every policy, averaged over `o.layouts` layouts.
/// `step` is called before each run.
pub fn run(
    exp: Experiment,
    o: &SweepOptions,
    step: &mut dyn FnMut(&SweepStep<'_>),
) -> Result<Vec<SweepRow>, SweepError> {
    let layouts = check(exp, o)?;
    let pts = points(exp, o)?;
    let pols = policies(exp, o);
    let mut sweep =
        Sweep { exp, o, disk: exp.disk(), layouts, done: 0, total: pts.len() * pols.len() * layouts as usize };
    let mut rows = Vec::new();
    for p in &pts {
        for &policy in &pols {
            rows.push(sweep.row(p, policy, step)?);
        }
    }
    Ok(rows)
}

/// A sweep under way: what every run of it shares, and the runs made so far.
struct Sweep<'a> {
    exp: Experiment,
    o: &'a SweepOptions,
    disk: HddParams,
    layouts: u32,
    done: usize,
    total: usize,
}

impl Sweep<'_> {
    /// Point `p` under `policy`: one run per layout (run `i` with layout seed
    /// `seed - 1 + i` and simulation seed `seed + i`), averaged into one row.
    fn row(
        &mut self,
        p: &Point,
        policy: IssuePolicy,
        step: &mut dyn FnMut(&SweepStep<'_>),
    ) -> Result<SweepRow, SweepError> {
        let (exp, o) = (self.exp, self.o);
        let engine = EngineConfig {
            policy,
            batch_max_bypass: o.batch_max_bypass,
            batch_anticipate_ns: o.batch_anticipate_ns,
            ..EngineConfig::default()
        };
        let mut sum = LayoutSum::default();
        for i in 0..u64::from(self.layouts) {
            step(&SweepStep { done: self.done, total: self.total, experiment: exp, workload: &p.job.name, policy });
            let setup =
                RunSetup::for_disk(&self.disk, exp.max_open(), o.seed.wrapping_sub(1).wrapping_add(i), o.seed + i);
            let r = run_one(&self.disk, engine, &p.job, &setup)?;
            self.done += 1;
            sum.add(r, &p.job.name, policy);
        }
        let n = f64::from(self.layouts);
        Ok(SweepRow {
            experiment: exp.name().to_string(),
            device: sum.device,
            policy: policy.name().to_string(),
            workload: p.job.name.clone(),
            qd: Some(p.qd),
            jobs: Some(p.jobs),
            zones: p.zones,
            bs_bytes: p.job.bs_bytes,
            mb_s: sum.bw / n / 1e6,
            iops: sum.iops / n,
            published_mb_s: p.published.iter().find(|(q, _)| *q == policy).map(|x| x.1),
            p99_ms: sum.p99 as f64 / 1e6,
            mean_ms: sum.mean / n / 1e6,
            media_mb_s: p.region.map(|(start, len)| HddModel::new(self.disk.clone()).sustained_mb_s(start, len)),
            layouts: self.layouts,
            ios: sum.ios,
            simulated: true,
        })
    }
}

/// The writes of a point's runs under one policy, summed over the layouts (the
/// worst 99th percentile kept).
#[derive(Default)]
struct LayoutSum {
    bw: f64,
    iops: f64,
    p99: u64,
    ios: u64,
    mean: f64,
    device: String,
}

impl LayoutSum {
    /// Adds run `r` of workload `name` under `policy`. A failed I/O is a bug in the
    /// model or the set-up (nothing is injected): it stops the sweep.
    fn add(&mut self, r: BenchReport, name: &str, policy: IssuePolicy) {
        let j = &r.jobs[0];
        assert_eq!(j.errors, 0, "{} under {}: {} I/Os failed ({:?})", name, policy.name(), j.errors, j.first_error);
        self.bw += j.write.bw_bytes;
        self.iops += j.write.iops;
        self.ios += j.write.ios;
        self.mean += j.write.clat.mean_ns;
        let q99 = j.write.clat.percentiles.iter().find(|(q, _)| *q == 99.0).map_or(0, |x| x.1);
        self.p99 = self.p99.max(q99);
        self.device = r.device;
    }
}
