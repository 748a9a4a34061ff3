//! One simulated run: a job on a disk model under one issue policy, the engine's
//! queue depth the disk's NCQ depth. Every sweep point is made of such runs, and so
//! is every refit of `crate::loo`, which changes one thing at a time: the disk, the
//! host turnaround or the device the host sees.

use super::SweepError;
use crate::experiments::{HOST_LATENCY_NS, smr_device};
use zblk_core::engine::EngineConfig;
use zblk_core::params::DeviceParams;
use zblk_sim::hdd::{HddModel, HddParams};
use zblk_sim::{BenchReport, Sim, SimConfig, run_jobs_on};
use zblk_workload::job::JobSpec;

/// How the host sees the disk in one run, and the run's seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSetup {
    /// The device as the host sees the disk: geometry, request size limit, queue.
    pub device: DeviceParams,
    /// The disk's layout seed (it draws the zone advance where the disk does not
    /// fix it; see `HddParams::zone_advance`).
    pub layout_seed: u64,
    /// The simulation seed.
    pub seed: u64,
    /// The application's completion-to-next-submission turnaround.
    pub host_latency_ns: u64,
}

impl RunSetup {
    /// `disk` as the sweeps run it: [`smr_device`] with the open zone limit
    /// `max_open`, the fitted host turnaround, the given seeds.
    pub fn for_disk(disk: &HddParams, max_open: u32, layout_seed: u64, seed: u64) -> RunSetup {
        RunSetup { device: smr_device(disk, max_open), layout_seed, seed, host_latency_ns: HOST_LATENCY_NS }
    }
}

/// One run: `job` on `disk` (with `setup`'s layout seed) with the engine configured
/// by `engine` (its queue depth is the disk's).
pub fn run_one(
    disk: &HddParams,
    engine: EngineConfig,
    job: &JobSpec,
    setup: &RunSetup,
) -> Result<BenchReport, SweepError> {
    let disk = HddParams { layout_seed: setup.layout_seed, ..disk.clone() };
    let engine = EngineConfig { queue_depth: disk.ncq_depth, ..engine };
    let cfg = SimConfig {
        engine,
        host_latency_ns: setup.host_latency_ns,
        ..SimConfig::new(setup.device.clone(), setup.seed)
    };
    let mut sim =
        Sim::with_model(&cfg, Box::new(HddModel::new(disk))).map_err(|e| SweepError::BadOption(e.to_string()))?;
    run_jobs_on(&mut sim, std::slice::from_ref(job), true).map_err(|e| SweepError::BadOption(e.to_string()))
}
