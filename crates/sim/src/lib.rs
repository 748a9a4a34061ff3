//! The deterministic simulator: virtual clock, device timing models, seeded faults,
//! fio-like workloads and a checker, driving the same [`zblk_core::engine::Engine`] the real
//! runtime drives, under a [`zblk_core::stack::Stack`]: one simulator for a single
//! device (a stack of one disk) and for striped and linear stacks. Every run is a
//! function of its configuration and seed.

pub mod checker;
pub mod checks;
mod disk;
pub mod driver;
pub mod faults;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod hdd;
pub mod model;
pub mod oracle;

pub mod presets;
pub mod random;
pub mod seqjobs;
pub mod ssd;

pub mod vopr;
pub mod workload;

pub use checker::Checker;
pub use driver::{
    ModelFactory, ProgressFn, Sim, SimChecks, SimCompletion, SimConfig, SimStats, StackSimConfig, TraceSink, Workload,
    join_or_raise, null_model,
};
pub use faults::FaultConfig;
pub use model::{DeviceModel, NullModel};
pub use seqjobs::{SeqJob, SeqJobResult, SeqJobs};
pub use workload::FioJobs;
pub use zblk_workload::fio::HostCpus;
pub use zblk_workload::job::{JobError, JobResult, JobSpec, Rw, ZoneMode};

use zblk_core::engine::EngineStats;
use zblk_core::params::ParamError;

/// What a simulated benchmark run produced.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchReport {
    /// The timing model, described.
    pub device: String,
    /// The engine's issue policy.
    pub policy: String,
    /// The seed.
    pub seed: u64,
    /// Virtual time the run took.
    pub virtual_ns: u64,
    /// Per job (or per group) results.
    pub jobs: Vec<JobResult>,
    /// Engine counters.
    pub engine: EngineStats,
    /// Simulator counters.
    pub sim: SimStats,
    /// The timing model's counters (seeks, rotation, ... for a disk).
    pub model: Vec<(&'static str, f64)>,
}

/// A refused benchmark set-up.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A device parameter.
    #[error("device parameter {0}")]
    Device(#[from] ParamError),
    /// A job option.
    #[error("job option {0}")]
    Job(#[from] JobError),
}

/// Runs fio-like `jobs` on a simulated null device as `cfg` describes.
pub fn run_jobs(cfg: &SimConfig, jobs: &[JobSpec], group: bool) -> Result<BenchReport, BenchError> {
    let mut sim = Sim::new(cfg)?;
    run_jobs_on(&mut sim, jobs, group)
}

/// Runs fio-like `jobs` on an already built simulation (any timing model).
pub fn run_jobs_on(sim: &mut Sim, jobs: &[JobSpec], group: bool) -> Result<BenchReport, BenchError> {
    let geo = sim.device_geometry();
    let zones = sim.report_zones(sim.stack().top());
    let mut w = FioJobs::with_zones(jobs, &geo, &zones, sim.seed())?;
    w.set_host(sim.host_cpus());
    sim.run(&mut w);
    Ok(BenchReport {
        device: sim.model_description(),
        policy: sim.engine().config().policy.name().to_string(),
        seed: sim.seed(),
        virtual_ns: sim.now_ns(),
        jobs: w.results(group),
        engine: sim.engine_stats(),
        sim: sim.stats(),
        model: sim.model_counters(),
    })
}
