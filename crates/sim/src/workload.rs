//! fio-like jobs in the simulator: [`FioJobs`] drives the sans-IO generator
//! [`FioGen`] (fio's options and `zonemode=zbd` rules, see [`zblk_workload::fio`])
//! in virtual time, on the top device of the simulated stack (a single device, or a
//! stacked one). A write's data is its stamp's pattern; a zone report the
//! generator asks for is answered at once from the simulated disks.

use super::driver::{Sim, SimCompletion, Workload};
use zblk_core::geometry::Geometry;
use zblk_core::zone::{ZoneInfo, ZoneSet};
use zblk_workload::fio::{FioAction, FioDone, FioGen, HostCpus};
use zblk_workload::job::{JobError, JobResult, JobSpec};

/// A set of fio jobs as one simulation workload.
#[derive(Debug)]
pub struct FioJobs {
    fio: FioGen,
}

impl FioJobs {
    /// Jobs for `specs` on a fresh device of geometry `geo` (every zone EMPTY),
    /// validated, seeded.
    pub fn new(specs: &[JobSpec], geo: &Geometry, seed: u64) -> Result<FioJobs, JobError> {
        let zones = if geo.is_zoned() { ZoneSet::new(geo).zones().to_vec() } else { Vec::new() };
        FioJobs::with_zones(specs, geo, &zones, seed)
    }

    /// Jobs for `specs` on a device of geometry `geo` whose zones are as `zones`
    /// reports them (empty for a device that is not zoned).
    pub fn with_zones(specs: &[JobSpec], geo: &Geometry, zones: &[ZoneInfo], seed: u64) -> Result<FioJobs, JobError> {
        Ok(FioJobs { fio: FioGen::new(specs, geo, zones, seed)? })
    }

    /// Runs the jobs on `cpus` in time ([`HostCpus`]); before the run.
    pub fn set_host(&mut self, cpus: HostCpus) {
        self.fio.set_host(cpus);
    }

    /// Per-job results; with `group`, one result per job description (fio's
    /// `group_reporting`).
    pub fn results(&self, group: bool) -> Vec<JobResult> {
        self.fio.results(group)
    }

    /// Carries out what the generator decided; returns how many BIOs it submitted.
    fn drain(&mut self, sim: &mut Sim) -> u64 {
        let mut submitted = 0;
        while let Some(a) = self.fio.next(sim.now_ns()) {
            match a {
                FioAction::Submit(io) => {
                    sim.submit_by(io.job, io.bio, io.token, io.stamp);
                    submitted += 1;
                }
                FioAction::ReportZone(z) => {
                    let info = sim.report_zone(sim.stack().top(), z);
                    self.fio.zone_report(z, info);
                }
            }
        }
        submitted
    }
}

impl Workload for FioJobs {
    fn start(&mut self, sim: &mut Sim) {
        self.fio.start();
        self.drain(sim);
    }

    fn on_complete(&mut self, sim: &mut Sim, c: SimCompletion) {
        let done = FioDone {
            token: c.token,
            op: c.op,
            sector: c.sector,
            nr_sectors: c.nr_sectors,
            result: c.result,
            latency_ns: c.latency_ns,
        };
        self.fio.on_complete(sim.now_ns(), done);
        self.drain(sim);
    }

    fn on_idle(&mut self, sim: &mut Sim) -> bool {
        self.fio.idle();
        self.drain(sim) > 0
    }

    fn is_done(&self) -> bool {
        self.fio.is_done()
    }

    fn due_ns(&self) -> Option<u64> {
        self.fio.next_due()
    }

    fn on_due(&mut self, sim: &mut Sim) {
        self.drain(sim);
    }
}
