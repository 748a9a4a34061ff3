//! A hand-driven harness for scenario tests: an engine and an in-memory device, with
//! the test deciding exactly when and in which order the device executes and
//! completes each issued request.

#![allow(dead_code)]

use zblk_core::engine::{Action, Engine, EngineConfig, IssuePolicy, WpRecovery};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::params::DeviceParams;
use zblk_core::{Bio, Completion, Request, Sector, Status, ZoneNo};
use zblk_dev::{BlockDevice, IoBuf, MemDevice};
use zblk_sim::driver::{Sim, SimCompletion, SimConfig};

pub struct Harness {
    pub engine: Engine,
    pub dev: MemDevice,
    /// Requests issued and not completed, in issue order.
    pub issued: Vec<Request>,
    /// Every request ever issued, in order.
    pub history: Vec<Request>,
    /// BIO completions, in order.
    pub done: Vec<Completion>,
    /// Zone reports the engine asked for and the harness has not answered.
    pub reports: Vec<ZoneNo>,
    /// Answer report requests automatically.
    pub auto_report: bool,
    /// Anticipation tokens the engine handed out and the harness has not expired.
    pub anticipations: Vec<u64>,
    /// Expire anticipations at once (as if no write came in time).
    pub auto_expire: bool,
}

/// The scenarios' device: 8 MiB of 1 MiB zones, one conventional, emulated zone
/// append, max_sectors 64.
pub fn base_params() -> GeometryParams {
    GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 1,
        max_append_sectors: 0,
        max_sectors: 64,
        ..GeometryParams::default()
    }
}

/// [`base_params`] changed by `f`, validated.
pub fn geometry(f: impl FnOnce(&mut GeometryParams)) -> Geometry {
    let mut p = base_params();
    f(&mut p);
    Geometry::new(&p).expect("test geometry")
}

impl Harness {
    pub fn new(geo: &Geometry, policy: IssuePolicy, recovery: WpRecovery) -> Harness {
        let cfg =
            EngineConfig { policy, wp_recovery: recovery, queue_depth: 64, max_bios: 1 << 16, ..Default::default() };
        Harness {
            engine: Engine::new_empty(geo, cfg),
            dev: MemDevice::new(geo, false),
            issued: Vec::new(),
            history: Vec::new(),
            done: Vec::new(),
            reports: Vec::new(),
            auto_report: true,
            anticipations: Vec::new(),
            auto_expire: true,
        }
    }

    /// Default: per-zone plugging, report recovery, 8 MiB device of 1 MiB zones, one
    /// conventional zone, emulated append, max_sectors 64.
    pub fn zwp() -> Harness {
        Harness::new(&geometry(|_| {}), IssuePolicy::Zwp, WpRecovery::Report)
    }

    pub fn zone_start(&self, z: u32) -> Sector {
        self.engine.geometry().zone_start(ZoneNo(z))
    }

    fn pump(&mut self) {
        while let Some(a) = self.engine.poll_action() {
            match a {
                Action::Issue(r) => {
                    self.issued.push(r);
                    self.history.push(r);
                }
                Action::Complete(c) => self.done.push(c),
                Action::ReportZone(z) => self.reports.push(z),
                Action::Anticipate { token, .. } => self.anticipations.push(token),
            }
        }
        if self.auto_expire {
            while let Some(t) = self.anticipations.pop() {
                self.engine.anticipation_expired(t);
                self.pump();
            }
        }
        if self.auto_report {
            while let Some(z) = self.reports.pop() {
                let info = self.dev.report_zone(self.engine.geometry().zone_start(z)).unwrap();
                self.engine.zone_report(&info);
                self.pump();
            }
        }
        self.engine.check_invariants();
    }

    /// The anticipation with `token` expired.
    pub fn expire(&mut self, token: u64) {
        self.anticipations.retain(|&t| t != token);
        self.engine.anticipation_expired(token);
        self.pump();
    }

    pub fn submit(&mut self, bio: Bio) {
        self.engine.submit(bio);
        self.pump();
    }

    /// Executes issued request `i` (in issue order among those outstanding) on the
    /// device and completes it with the device's result.
    pub fn run(&mut self, i: usize) -> Result<Sector, Status> {
        let r = self.issued.remove(i);
        let res = self.dev.execute(&r, IoBuf::None);
        self.engine.complete(r.id, res);
        self.pump();
        res
    }

    /// Completes issued request `i` with `result` without executing it.
    pub fn fail(&mut self, i: usize, status: Status) {
        let r = self.issued.remove(i);
        self.engine.complete(r.id, Err(status));
        self.pump();
    }

    /// Runs outstanding requests oldest first until none is left.
    pub fn run_all(&mut self) {
        while !self.issued.is_empty() {
            self.run(0).ok();
        }
    }

    /// Runs outstanding requests newest first until none is left (worst reordering).
    pub fn run_all_reversed(&mut self) {
        while !self.issued.is_empty() {
            let last = self.issued.len() - 1;
            self.run(last).ok();
        }
    }

    pub fn result(&self, user_data: u64) -> Option<Result<Sector, Status>> {
        self.done.iter().find(|c| c.user_data == user_data).map(|c| c.result)
    }

    pub fn device_wp(&self, z: u32) -> u64 {
        let zone = self.dev.zones().unwrap().zone(ZoneNo(z));
        zone.wp.since(zone.start)
    }
}

// ---- Scenarios on the simulator (checker and oracles on) ----

/// A fresh zoned memory-backed null device (1 MiB zones, 1 conventional, no
/// native append), checker and oracles on, no random faults.
pub fn sim(policy: IssuePolicy, recovery: WpRecovery) -> Sim {
    let mut device = DeviceParams::default();
    device.apply("size=16,zone_size=1,zone_nr_conv=1,zone_append_max_sectors=0,memory_backed=1").expect("params");
    let cfg = SimConfig {
        engine: EngineConfig { policy, wp_recovery: recovery, ..EngineConfig::default() },
        check: true,
        ..SimConfig::new(device, 1)
    };
    Sim::new(&cfg).expect("device")
}

/// A memory-backed null device of 1 MiB zones (one conventional, no native append)
/// whose completion latencies are uniform, so that completions reorder; it keeps a
/// zone's writes in order, and its engine pipelines `depth` writes per zone (0: the
/// queue depth). Checker and oracles on, no random faults.
pub fn pipelined_sim(depth: u32, seed: u64) -> Sim {
    let mut device = DeviceParams::default();
    device
        .apply("size=16,zone_size=1,zone_nr_conv=1,zone_append_max_sectors=0,memory_backed=1,completion_dist=uniform")
        .expect("params");
    let cfg = SimConfig {
        engine: EngineConfig { policy: IssuePolicy::Pipeline, pipeline_depth: depth, ..EngineConfig::default() },
        check: true,
        keeps_zone_order: true,
        ..SimConfig::new(device, seed)
    };
    Sim::new(&cfg).expect("a disk that keeps zone order takes pipelining")
}

pub fn zone_start(sim: &Sim, z: u32) -> Sector {
    sim.device_geometry().zone_start(ZoneNo(z))
}

/// Submits `bios` at once (tokens 0, 1, ...) and runs until idle.
pub fn run(sim: &mut Sim, bios: &[Bio]) -> Vec<SimCompletion> {
    for (i, b) in bios.iter().enumerate() {
        sim.submit(*b, i as u64, 1000 + i as u64);
    }
    sim.run_until_idle();
    let mut c = sim.take_completions();
    c.sort_by_key(|c| c.token);
    c
}

pub fn results(c: &[SimCompletion]) -> Vec<Result<Sector, Status>> {
    c.iter().map(|c| c.result).collect()
}
