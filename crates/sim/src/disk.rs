//! One simulated disk: the in-memory device (data and device-side zone state), the
//! timing model that decides when its requests complete, its seeded faults and,
//! with checking on, the checker watching it and its engine. A request executes
//! here when the model completes it; on a disk that keeps a zone's writes in order
//! (`in_order`), when it arrives, its result kept until the model completes it.
//!
//! A disk may have a volatile write cache ([`WriteCache`]): a request completes
//! once it is in the cache; the cache destages in arrival order, and a FLUSH, a
//! FUA or PREFLUSH write, a RESET, RESET_ALL or FINISH (zone metadata goes to the
//! medium) and a zone failing make everything before them durable. A power loss
//! keeps what is durable plus the part of the cache destaged by then (any prefix,
//! drawn from the seed): each zone's write pointer rolls back to where that state
//! leaves it, and, as at any power-on reset (ZBC), the zones open then come back
//! CLOSED (EMPTY if nothing of them is written).

use super::checker::Checker;
use super::faults::{Fault, Faults};
use super::model::DeviceModel;
use super::oracle::{DeviceOracle, errno, errno_of};
use rustc_hash::FxHashMap;
use std::io::Write as _;
use zblk_core::bio::{BioFlags, Op, ReqId, Request, Status};
use zblk_core::stack::DevId;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_dev::{BlockDevice, IoBuf, MemDevice};
use zblk_workload::pattern;

/// A disk of the simulated stack. See the module documentation.
pub(crate) struct SimDisk {
    /// Its device in the stack.
    pub dev: DevId,
    /// Its data and zones.
    pub mem: MemDevice,
    /// When its requests complete.
    pub model: Box<dyn DeviceModel>,
    /// Checks the disk and its engine after every step.
    pub checker: Option<Checker>,
    /// Faults injected into its requests.
    pub faults: Faults,
    /// The reference model every execution is compared with (checking on).
    pub oracle: Option<DeviceOracle>,
    /// A difference from the model is a violation (off only to show what the other
    /// checks catch without it; the model still follows the device).
    pub oracle_checks: bool,
    /// The run's seed, for violations.
    pub seed: u64,
    /// Its volatile write cache, if it has one.
    pub cache: Option<WriteCache>,
    /// It executes each request when the request arrives, in arrival order, and
    /// completes it when its model says (`SimConfig::keeps_zone_order`).
    pub in_order: bool,
    /// With `in_order`: the requests executed and not completed yet.
    pub arrived: FxHashMap<ReqId, Arrived>,
    /// Requests that arrived so far (with `in_order`).
    pub arrivals: u64,
}

/// A request a disk that keeps zone order executed when it arrived, waiting for
/// its model to complete it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arrived {
    /// What it executed with.
    pub result: Result<Sector, Status>,
    /// Its completion is lost: the driver's timeout ends it.
    pub timed_out: bool,
    /// Its place in arrival order.
    pub order: u64,
    /// For a pipelined write, its zone.
    pub pipelined_zone: Option<ZoneNo>,
}

/// A disk's volatile write cache: the state made durable so far (the device and its
/// model, as they were at the last durable point) and what executed since, in
/// arrival order. See the module documentation.
#[derive(Debug)]
pub(crate) struct WriteCache {
    durable: MemDevice,
    durable_oracle: Option<DeviceOracle>,
    /// Requests executed since the durable point, with their data stamps.
    log: Vec<(Request, u64)>,
}

impl WriteCache {
    /// An empty cache over `mem` as it is, with its model.
    pub fn new(mem: &MemDevice, oracle: Option<&DeviceOracle>) -> WriteCache {
        WriteCache { durable: mem.clone(), durable_oracle: oracle.cloned(), log: Vec::new() }
    }

    /// Destages the `n` oldest cached requests: replays them, in arrival order, on
    /// the durable device and its model.
    fn destage(&mut self, n: usize, buf: &mut Vec<u8>) {
        for (req, stamp) in self.log.drain(..n) {
            let _ = execute_on(&mut self.durable, &req, stamp, buf);
            if let Some(o) = &mut self.durable_oracle {
                let _ = o.execute(&req);
            }
        }
    }

    /// Everything cached becomes durable.
    fn destage_all(&mut self, buf: &mut Vec<u8>) {
        self.destage(self.log.len(), buf);
    }
}

/// Executes `req` on `mem`, the data of a write being the pattern of `stamp`;
/// `buf` is scratch space, and holds a read's data afterwards.
fn execute_on(mem: &mut MemDevice, req: &Request, stamp: u64, buf: &mut Vec<u8>) -> Result<Sector, Status> {
    let bytes = (u64::from(req.nr_sectors) * SECTOR_SIZE) as usize;
    let with_data = mem.memory_backed() && bytes > 0;
    match req.op {
        Op::Write | Op::ZoneAppend if with_data => {
            buf.resize(bytes, 0);
            pattern::fill(stamp, req.bio_offset, buf);
            mem.execute(req, IoBuf::Write(buf))
        }
        Op::Read if with_data => {
            buf.resize(bytes, 0);
            mem.execute(req, IoBuf::Read(buf))
        }
        _ => mem.execute(req, IoBuf::None),
    }
}

/// What happened to an executed request beyond its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Executed {
    /// A fault was injected into it.
    pub fault: bool,
    /// Its zone turned READONLY or OFFLINE.
    pub zone_failed: bool,
    /// Its completion was lost: the driver times it out later, with this result.
    pub timed_out: bool,
}

impl SimDisk {
    /// Executes `req`, which the model completes now, with the fault drawn for it;
    /// the data of a write is the pattern of `stamp`; `buf` is scratch space. Tells
    /// the checker. `trace` prints the execution to stderr, at `now_ns`.
    pub fn execute(
        &mut self,
        req: &Request,
        stamp: u64,
        buf: &mut Vec<u8>,
        trace: Option<u64>,
    ) -> (Result<Sector, Status>, Executed) {
        let (fault, seq_zone) = self.draw_fault(req);
        let expected = self.oracle_expects(req, fault, seq_zone);
        let (result, partial) = self.execute_with(req, fault, seq_zone, stamp, buf);
        let durable_point = match req.op {
            Op::Flush => result.is_ok(),
            Op::Write | Op::ZoneAppend | Op::WriteZeroes => {
                result.is_ok() && (req.flags.contains(BioFlags::FUA) || req.flags.contains(BioFlags::PREFLUSH))
            }
            Op::ZoneReset | Op::ZoneResetAll | Op::ZoneFinish => true,
            _ => false,
        };
        if let (true, Some(cache)) = (durable_point, &mut self.cache) {
            cache.destage_all(buf);
        }
        if let Some(expected) = expected {
            self.check_with_oracle(req, fault, result, expected);
        }
        if let Some(now_ns) = trace {
            let _ = writeln!(std::io::stderr(), "{now_ns:>12} execute {req:?} -> {result:?} (fault {fault:?})");
        }
        if let Some(c) = &mut self.checker {
            c.on_execute(req, result, partial, stamp);
        }
        let timed_out = matches!(fault, Fault::Timeout(_));
        self.faults.count(fault);
        if let (true, Some(c)) = (timed_out, &mut self.checker) {
            c.completion_lost(req);
        }
        let executed = Executed {
            fault: fault != Fault::None,
            zone_failed: matches!(fault, Fault::ZoneReadOnly | Fault::ZoneOffline),
            timed_out,
        };
        // A lost completion: whatever the device did, the driver's timeout fails it.
        (if timed_out { Err(Status::IoErr) } else { result }, executed)
    }

    /// The fault `req` meets, drawn from the seed (a write or read fault first,
    /// then a lost completion for a request that has none), and the sequential zone
    /// `req` starts in, if any: zone faults strike only there.
    fn draw_fault(&mut self, req: &Request) -> (Fault, Option<ZoneNo>) {
        let geo = self.mem.geometry();
        let seq_zone =
            (geo.is_zoned() && req.op.has_range()).then(|| geo.zone_no(req.sector)).filter(|z| !geo.zone_is_conv(*z));
        let lbs = geo.lbs_sectors();
        let fault = match (req.op, seq_zone) {
            (Op::Write | Op::ZoneAppend | Op::WriteZeroes, Some(_)) => self.faults.for_write(req.nr_sectors, lbs),
            (Op::Read, _) => self.faults.for_read(),
            _ => Fault::None,
        };
        let fault = match (fault, self.faults.for_completion()) {
            (Fault::None, Some(executed)) => Fault::Timeout(executed),
            (f, _) => f,
        };
        (fault, seq_zone)
    }

    /// What the reference model answers to `req` meeting `fault` (checking on),
    /// the model following the device: a failed zone fails in it too, a partial
    /// write's head executes in it.
    fn oracle_expects(&mut self, req: &Request, fault: Fault, seq_zone: Option<ZoneNo>) -> Option<Result<u64, i32>> {
        self.oracle.as_mut().map(|o| match fault {
            Fault::ZoneReadOnly | Fault::ZoneOffline => {
                let cond = if fault == Fault::ZoneReadOnly { ZoneCond::ReadOnly } else { ZoneCond::Offline };
                o.fail_zone(seq_zone.expect("zone fault on a sequential zone"), cond);
                o.execute(req)
            }
            Fault::PartialWrite(k) if req.op == Op::Write => {
                if k > 0 {
                    let _ = o.execute(&Request { nr_sectors: k, ..*req });
                }
                Err(errno::EIO)
            }
            Fault::ReadError => Err(errno::EIO),
            Fault::Timeout(false) => Err(errno::EIO),
            _ => o.execute(req),
        })
    }

    /// Executes `req` on the device as `fault` has it: after failing its zone, as
    /// its first sectors only (a partial write), not at all (a read error, a
    /// timeout before execution) or whole. Returns the result and the sectors a
    /// partial write wrote.
    fn execute_with(
        &mut self,
        req: &Request,
        fault: Fault,
        seq_zone: Option<ZoneNo>,
        stamp: u64,
        buf: &mut Vec<u8>,
    ) -> (Result<Sector, Status>, u32) {
        let mut partial = 0;
        let result = match fault {
            Fault::ZoneReadOnly | Fault::ZoneOffline => {
                let z = seq_zone.expect("zone fault on a sequential zone");
                let cond = if fault == Fault::ZoneReadOnly { ZoneCond::ReadOnly } else { ZoneCond::Offline };
                self.fail_zone(z, cond, buf);
                self.cached(req, stamp);
                self.execute_data(req, stamp, buf)
            }
            Fault::PartialWrite(k) if req.op == Op::Write => {
                if k > 0 {
                    let head = Request { nr_sectors: k, ..*req };
                    self.cached(&head, stamp);
                    if self.execute_data(&head, stamp, buf).is_ok() {
                        partial = k;
                    }
                }
                Err(Status::IoErr)
            }
            Fault::ReadError | Fault::Timeout(false) => Err(Status::IoErr),
            _ => {
                self.cached(req, stamp);
                self.execute_data(req, stamp, buf)
            }
        };
        (result, partial)
    }

    /// Zone `z` fails (`cond`: READONLY or OFFLINE) on the device, in its durable
    /// state too (the medium failed: no cache keeps that from the zone), and the
    /// checker learns of it.
    fn fail_zone(&mut self, z: ZoneNo, cond: ZoneCond, buf: &mut Vec<u8>) {
        self.mem.zones_mut().expect("zoned").set_failed(z, cond);
        if let Some(cache) = &mut self.cache {
            cache.destage_all(buf);
            cache.durable.zones_mut().expect("zoned").set_failed(z, cond);
            if let Some(o) = &mut cache.durable_oracle {
                o.fail_zone(z, cond);
            }
        }
        if let Some(c) = &mut self.checker {
            c.on_zone_failed(z);
        }
    }

    /// The device's answer `result` to `req` (meeting `fault`) must be the model's,
    /// `expected`, and every zone must be as the model has it (with model checks on).
    fn check_with_oracle(
        &self,
        req: &Request,
        fault: Fault,
        result: Result<Sector, Status>,
        expected: Result<u64, i32>,
    ) {
        let got = result.map(|s| s.0).map_err(|s| s.errno());
        let agree = match (got, expected) {
            (Ok(a), Ok(b)) => a == b,
            (Err(a), Err(b)) => a == b,
            _ => false,
        };
        if !agree && self.oracle_checks {
            panic!(
                "device oracle violation (seed {}): {req:?} (fault {fault:?}): the device answered {result:?} (errno {}), the model {expected:?}",
                self.seed,
                errno_of(result)
            );
        }
        if let (Some(o), Some(zones), true) = (&self.oracle, self.mem.zones(), self.oracle_checks) {
            if let Err(e) = o.compare(zones.zones()) {
                panic!("device oracle violation (seed {}): after {req:?} (fault {fault:?}): {e}", self.seed);
            }
        }
    }

    /// `req` is about to execute on the device: into the write cache, if there is
    /// one and it changes anything.
    fn cached(&mut self, req: &Request, stamp: u64) {
        if let (Some(cache), false) = (&mut self.cache, matches!(req.op, Op::Read | Op::Flush)) {
            cache.log.push((*req, stamp));
        }
    }

    fn execute_data(&mut self, req: &Request, stamp: u64, buf: &mut Vec<u8>) -> Result<Sector, Status> {
        let r = execute_on(&mut self.mem, req, stamp, buf);
        if let (Op::Read, true, Some(c), Ok(_)) = (req.op, self.mem.memory_backed(), &mut self.checker, r) {
            if req.nr_sectors > 0 {
                c.on_read_data(req, buf);
            }
        }
        r
    }

    /// The power fails and comes back: the device keeps what is durable and the
    /// oldest `destaged` cached requests (drawn from the seed when `None`), its
    /// open zones come back CLOSED, and the model follows. What was in flight is
    /// the caller's to forget (the timing model's requests, `arrived`): a request
    /// that had not executed never does; one that executed at its arrival is in
    /// the cache, or on the medium without one. Then the checker checks that every
    /// write made durable is there and rebuilds its view of the content from the
    /// device. Panics on a violation.
    pub fn power_loss(&mut self, destaged: Option<usize>, buf: &mut Vec<u8>) {
        if let Some(mut cache) = self.cache.take() {
            let n = destaged.unwrap_or_else(|| self.faults.destaged(cache.log.len())).min(cache.log.len());
            cache.destage(n, buf);
            cache.log.clear();
            self.mem = cache.durable.clone();
            if self.oracle.is_some() {
                self.oracle = cache.durable_oracle.clone();
            }
            self.cache = Some(cache);
        }
        // A power-on reset closes the open zones (ZBC): the condition of an open
        // zone is not kept across it.
        let open: Vec<ZoneNo> = self.mem.zones().map_or(Vec::new(), |zs| {
            zs.zones()
                .iter()
                .enumerate()
                .filter(|(_, z)| matches!(z.cond, ZoneCond::ImpOpen | ZoneCond::ExpOpen))
                .map(|(i, _)| ZoneNo(i as u32))
                .collect()
        });
        let geo = self.mem.geometry().clone();
        for z in open {
            let close = Request::direct(Op::ZoneClose, geo.zone_start(z), 0);
            let r = self.mem.execute(&close, IoBuf::None);
            assert!(r.is_ok(), "closing open zone {z} at power-on: {r:?}");
            if let Some(o) = &mut self.oracle {
                let _ = o.execute(&close);
            }
        }
        if let Some(cache) = &mut self.cache {
            *cache = WriteCache::new(&self.mem, self.oracle.as_ref());
        }
        if let (Some(o), Some(zones), true) = (&self.oracle, self.mem.zones(), self.oracle_checks) {
            if let Err(e) = o.compare(zones.zones()) {
                panic!("device oracle violation (seed {}): after a power loss: {e}", self.seed);
            }
        }
        if let Some(c) = &mut self.checker {
            c.power_loss(&self.mem);
        }
    }
}
