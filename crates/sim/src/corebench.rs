//! The core's own cost: BIOs per second through submit → issue → complete on the
//! simulated null device (no data, fixed latency), 4 KiB writes spread round-robin
//! over 128 zones at QD 16, with per-zone plugging and with plugging bypassed. The
//! BIOs take the simulator's host side: the stack's submission path (one disk)
//! and the disk's engine.
//!
//! Wall-clock time is measured by the caller (the `zblk corebench` command); this
//! module only builds and runs the workload, so that a test can run it too.

use super::driver::{Sim, SimCompletion, SimConfig, Workload};
use zblk_core::bio::Bio;
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::geometry::Geometry;
use zblk_core::params::{DeviceParams, LatencyDist};
use zblk_core::units::ZoneNo;

/// The benchmark's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CoreBenchSpec {
    /// BIOs to complete.
    pub bios: u64,
    /// Zones written round-robin.
    pub zones: u32,
    /// BIOs in flight.
    pub iodepth: u32,
    /// Bytes per write.
    pub bs_bytes: u32,
}

impl Default for CoreBenchSpec {
    fn default() -> Self {
        CoreBenchSpec { bios: 2_000_000, zones: 128, iodepth: 16, bs_bytes: 4096 }
    }
}

/// Writes `bs` round-robin over the first `zones` zones, each at its next offset,
/// keeping `iodepth` in flight; a zone that fills is reset before it is written again.
#[derive(Debug)]
struct RoundRobin {
    spec: CoreBenchSpec,
    geo: Geometry,
    next_offset: Vec<u64>,
    zone: u32,
    submitted: u64,
    completed: u64,
    errors: u64,
    inflight: u32,
}

impl RoundRobin {
    fn submit_one(&mut self, sim: &mut Sim) {
        let z = ZoneNo(self.zone);
        self.zone = (self.zone + 1) % self.spec.zones;
        let n = self.spec.bs_bytes / 512;
        let off = &mut self.next_offset[z.idx()];
        let bio = if *off + u64::from(n) > self.geo.zone_capacity(z) {
            *off = 0;
            Bio::zone_op(zblk_core::bio::Op::ZoneReset, self.geo.zone_start(z), 0)
        } else {
            let b = Bio::write(self.geo.zone_start(z) + *off, n, 0);
            *off += u64::from(n);
            b
        };
        self.submitted += 1;
        self.inflight += 1;
        sim.submit(bio, 0, 0);
    }

    fn fill(&mut self, sim: &mut Sim) {
        while self.inflight < self.spec.iodepth && self.submitted < self.spec.bios {
            self.submit_one(sim);
        }
    }
}

impl Workload for RoundRobin {
    fn start(&mut self, sim: &mut Sim) {
        self.fill(sim);
    }

    fn on_complete(&mut self, sim: &mut Sim, c: SimCompletion) {
        self.inflight -= 1;
        self.completed += 1;
        if c.result.is_err() {
            self.errors += 1;
        }
        self.fill(sim);
    }

    fn is_done(&self) -> bool {
        self.completed == self.spec.bios
    }
}

/// What one run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CoreBenchRun {
    /// The policy.
    pub policy: IssuePolicy,
    /// BIOs completed.
    pub bios: u64,
    /// BIOs that failed (must be 0).
    pub errors: u64,
    /// Requests the engine issued.
    pub requests: u64,
}

/// The device the benchmark runs on: 128+ zones of 256 MiB, no data, fixed latency,
/// a queue deep enough never to hold a request back.
pub fn corebench_device(spec: &CoreBenchSpec) -> DeviceParams {
    let mut p = DeviceParams::default();
    p.geometry.capacity_bytes = u64::from(spec.zones.max(1)) * (256 << 20);
    p.memory_backed = false;
    p.hw_queue_depth = spec.iodepth.max(1);
    p.completion_nsec = 1_000;
    p.completion_dist = LatencyDist::Fixed;
    p
}

/// Runs the benchmark once with `policy`. The caller times it.
pub fn run_corebench(spec: &CoreBenchSpec, policy: IssuePolicy) -> CoreBenchRun {
    let device = corebench_device(spec);
    let engine = EngineConfig { policy, queue_depth: spec.iodepth, ..EngineConfig::default() };
    let cfg = SimConfig { engine, ..SimConfig::new(device, 1) };
    let mut sim = Sim::new(&cfg).expect("the benchmark device is valid");
    let geo = sim.device_geometry();
    let mut w = RoundRobin {
        spec: *spec,
        next_offset: vec![0; geo.nr_zones() as usize],
        geo,
        zone: 0,
        submitted: 0,
        completed: 0,
        errors: 0,
        inflight: 0,
    };
    sim.run(&mut w);
    CoreBenchRun { policy, bios: w.completed, errors: w.errors, requests: sim.engine_stats().requests }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_policies_complete_every_bio_without_error() {
        let spec = CoreBenchSpec { bios: 20_000, ..CoreBenchSpec::default() };
        for policy in [IssuePolicy::Zwp, IssuePolicy::Passthrough] {
            let r = run_corebench(&spec, policy);
            assert_eq!((r.bios, r.errors, r.requests), (20_000, 0, 20_000), "{policy:?}");
        }
    }

    #[test]
    fn full_zones_are_reset() {
        // 4 zones of 256 MiB at 1 MiB: 256 writes fill a zone; 2000 BIOs wrap twice.
        let spec = CoreBenchSpec { bios: 2_000, zones: 4, iodepth: 4, bs_bytes: 1 << 20 };
        let r = run_corebench(&spec, IssuePolicy::Zwp);
        assert_eq!(r.errors, 0);
    }
}
