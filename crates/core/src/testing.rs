//! A hand-driven harness for the engine's scenario tests, shared by the core's own
//! tests and the simulator's (behind the `testing` feature, which only test builds
//! turn on): an [`Engine`] and a scripted zoned device, the test deciding exactly
//! when and in which order the device executes and completes each issued request.
//! Zone reports the engine asks for (write pointer recovery) are answered from the
//! same device, and anticipations (the batching issuer's) expire at once unless the
//! test holds them.
//!
//! The device is a [`ScriptedDevice`]: by default a [`ZoneSet`], the device side's
//! zone state machine with no data; the simulator's tests put an in-memory device
//! with data behind the same trait (WRITE_ZEROES, then reading zeroes back).
//!
//! The engine's invariants are checked after every step, as the simulator's checker
//! does; what needs a timing model, fault injection or data stays in the
//! simulator's tests.

use crate::bio::{Bio, Completion, Op, Request, Status};
use crate::engine::{Action, Engine, EngineConfig, IssuePolicy, WpRecovery};
use crate::geometry::{Geometry, GeometryParams};
use crate::rule::Rule;
use crate::units::{Sector, ZoneNo};
use crate::zone::{ZoneInfo, ZoneSet};

/// The device a [`Harness`] issues to: it executes a request when the test says,
/// and describes a zone when the engine asks.
pub trait ScriptedDevice {
    /// Executes `r` on a device of geometry `geo`.
    fn execute(&mut self, geo: &Geometry, r: &Request) -> Result<Sector, Status>;
    /// The device's zone `z`.
    fn zone(&self, z: ZoneNo) -> ZoneInfo;
}

/// Zone state without data, as a zoned device without data would execute: a
/// transfer above `max_sectors` is refused, as a real device refuses a command above
/// its transfer limit.
impl ScriptedDevice for ZoneSet {
    fn execute(&mut self, geo: &Geometry, r: &Request) -> Result<Sector, Status> {
        if matches!(r.op, Op::Read | Op::Write) && r.nr_sectors > geo.max_sectors() {
            return Err(Status::Invalid.because(Rule::OverMaxSectors));
        }
        match r.op {
            Op::Read => self.read(r.sector, r.nr_sectors).map(|_| r.sector),
            Op::Write => self.write(r.sector, r.nr_sectors, false),
            Op::ZoneAppend => self.write(r.sector, r.nr_sectors, true),
            Op::Flush => Ok(r.sector),
            Op::ZoneReset | Op::ZoneResetAll | Op::ZoneOpen | Op::ZoneClose | Op::ZoneFinish => {
                self.zone_mgmt(r.op, r.sector).map(|()| r.sector)
            }
            op => panic!("the scripted device does not execute {op}"),
        }
    }

    fn zone(&self, z: ZoneNo) -> ZoneInfo {
        *ZoneSet::zone(self, z)
    }
}

/// An engine and the scripted device it issues to.
pub struct Harness<D = ZoneSet> {
    /// The engine under test.
    pub engine: Engine,
    /// The device (a [`ZoneSet`] unless the test brings its own).
    pub dev: D,
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
    /// The device keeps a zone's writes in the order it is handed them, as an image
    /// does (pipelining): each request is executed on the zones when it is issued,
    /// and completes later with that result, in whatever order the test says.
    pub execute_at_issue: bool,
    /// Results of requests executed at issue, by request.
    pub executed: Vec<(crate::bio::ReqId, Result<Sector, Status>)>,
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
    /// An engine with `policy` and `recovery` (queue depth 64) on `geo`.
    pub fn new(geo: &Geometry, policy: IssuePolicy, recovery: WpRecovery) -> Harness {
        let cfg =
            EngineConfig { policy, wp_recovery: recovery, queue_depth: 64, max_bios: 1 << 16, ..Default::default() };
        Harness::with_config(geo, cfg)
    }

    /// An engine with `cfg` on `geo`.
    pub fn with_config(geo: &Geometry, cfg: EngineConfig) -> Harness {
        Harness::with_device(geo, cfg, ZoneSet::new(geo))
    }

    /// Default: per-zone plugging, report recovery, 8 MiB device of 1 MiB zones, one
    /// conventional zone, emulated append, max_sectors 64.
    pub fn zwp() -> Harness {
        Harness::new(&geometry(|_| {}), IssuePolicy::Zwp, WpRecovery::Report)
    }
}

impl<D: ScriptedDevice> Harness<D> {
    /// An engine with `cfg` on `geo`, issuing to `dev` (in its initial state: every
    /// sequential zone EMPTY, as the engine starts).
    pub fn with_device(geo: &Geometry, cfg: EngineConfig, dev: D) -> Harness<D> {
        Harness {
            engine: Engine::new_empty(geo, cfg),
            dev,
            issued: Vec::new(),
            history: Vec::new(),
            done: Vec::new(),
            reports: Vec::new(),
            auto_report: true,
            anticipations: Vec::new(),
            auto_expire: true,
            execute_at_issue: false,
            executed: Vec::new(),
        }
    }

    /// Takes the engine's actions until it has none, then answers reports and
    /// expires anticipations as told, and checks the engine's invariants.
    fn pump(&mut self) {
        while let Some(a) = self.engine.poll_action() {
            match a {
                Action::Issue(r) => {
                    self.issued.push(r);
                    self.history.push(r);
                    if self.execute_at_issue {
                        let res = self.execute(&r);
                        self.executed.push((r.id, res));
                    }
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
                let info = self.dev.zone(z);
                self.engine.zone_report(&info);
                self.pump();
            }
        }
        self.engine.check_invariants();
    }

    /// Answers the engine's pending report of `info`'s zone with `info` (which may be
    /// older than the device's state, as a report read before a write landed).
    pub fn answer_report(&mut self, info: ZoneInfo) {
        let z = self.engine.geometry().zone_no(info.start);
        let i = self.reports.iter().position(|&r| r == z).expect("a report of the zone was asked for");
        self.reports.remove(i);
        self.engine.zone_report(&info);
        self.pump();
    }

    /// The anticipation with `token` expired.
    pub fn expire(&mut self, token: u64) {
        self.anticipations.retain(|&t| t != token);
        self.engine.anticipation_expired(token);
        self.pump();
    }

    /// Submits `bio` and takes what follows.
    pub fn submit(&mut self, bio: Bio) {
        self.engine.submit(bio);
        self.pump();
    }

    /// Executes `r` on the device.
    pub fn execute(&mut self, r: &Request) -> Result<Sector, Status> {
        self.dev.execute(self.engine.geometry(), r)
    }

    /// Executes issued request `i` (in issue order among those outstanding) on the
    /// device and completes it with the device's result.
    pub fn run(&mut self, i: usize) -> Result<Sector, Status> {
        let r = self.issued.remove(i);
        let res = match self.executed.iter().position(|e| e.0 == r.id) {
            Some(j) => self.executed.remove(j).1,
            None => self.execute(&r),
        };
        self.engine.complete(r.id, res);
        self.pump();
        res
    }

    /// Completes issued request `i` with `status` without executing it.
    pub fn fail(&mut self, i: usize, status: Status) {
        let r = self.issued.remove(i);
        self.executed.retain(|e| e.0 != r.id);
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

    /// The result of the BIO with `user_data`, once it completed.
    pub fn result(&self, user_data: u64) -> Option<Result<Sector, Status>> {
        self.done.iter().find(|c| c.user_data == user_data).map(|c| c.result)
    }

    /// The device's write pointer of zone `z`, from the zone's start.
    pub fn device_wp(&self, z: u32) -> u64 {
        let zone = self.dev.zone(ZoneNo(z));
        zone.wp.since(zone.start)
    }

    /// The device's report of the zone holding `sector`.
    pub fn report_zone(&self, sector: Sector) -> ZoneInfo {
        self.dev.zone(self.engine.geometry().zone_no(sector))
    }
}
