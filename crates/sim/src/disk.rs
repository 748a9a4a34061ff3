//! One simulated disk: the in-memory device (data and device-side zone state), the
//! timing model that decides when its requests complete, its seeded faults and,
//! with checking on, the checker watching it and its engine. A request executes
//! here when the model completes it.

use super::checker::Checker;
use super::faults::{Fault, Faults};
use super::model::DeviceModel;
use super::oracle::{DeviceOracle, errno, errno_of};
use zblk_core::bio::{Op, Request, Status};
use zblk_core::stack::DevId;
use zblk_core::units::{SECTOR_SIZE, Sector};
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
    /// The run's seed, for violations.
    pub seed: u64,
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
        let expected = self.oracle.as_mut().map(|o| match fault {
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
        });
        let mut partial = 0;
        let result = match fault {
            Fault::ZoneReadOnly | Fault::ZoneOffline => {
                let z = seq_zone.expect("zone fault on a sequential zone");
                let cond = if fault == Fault::ZoneReadOnly { ZoneCond::ReadOnly } else { ZoneCond::Offline };
                self.mem.zones_mut().expect("zoned").set_failed(z, cond);
                if let Some(c) = &mut self.checker {
                    c.on_zone_failed(z);
                }
                self.execute_data(req, stamp, buf)
            }
            Fault::PartialWrite(k) if req.op == Op::Write => {
                if k > 0 {
                    let head = Request { nr_sectors: k, ..*req };
                    if self.execute_data(&head, stamp, buf).is_ok() {
                        partial = k;
                    }
                }
                Err(Status::IoErr)
            }
            Fault::ReadError | Fault::Timeout(false) => Err(Status::IoErr),
            _ => self.execute_data(req, stamp, buf),
        };
        if let Some(expected) = expected {
            let got = result.map(|s| s.0).map_err(|s| s.errno());
            let agree = match (got, expected) {
                (Ok(a), Ok(b)) => a == b,
                (Err(a), Err(b)) => a == b,
                _ => false,
            };
            if !agree {
                panic!(
                    "oracle violation (seed {}): {req:?} (fault {fault:?}): the device answered {result:?} (errno {}), the model {expected:?}",
                    self.seed,
                    errno_of(result)
                );
            }
            if let (Some(o), Some(zones)) = (&self.oracle, self.mem.zones()) {
                if let Err(e) = o.compare(zones.zones()) {
                    panic!("oracle violation (seed {}): after {req:?} (fault {fault:?}): {e}", self.seed);
                }
            }
        }
        if let Some(now_ns) = trace {
            eprintln!("{now_ns:>12} execute {req:?} -> {result:?} (fault {fault:?})");
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

    fn execute_data(&mut self, req: &Request, stamp: u64, buf: &mut Vec<u8>) -> Result<Sector, Status> {
        let bytes = (u64::from(req.nr_sectors) * SECTOR_SIZE) as usize;
        let with_data = self.mem.memory_backed() && bytes > 0;
        match req.op {
            Op::Write | Op::ZoneAppend if with_data => {
                buf.resize(bytes, 0);
                pattern::fill(stamp, req.bio_offset, buf);
                self.mem.execute(req, IoBuf::Write(buf))
            }
            Op::Read if with_data => {
                buf.resize(bytes, 0);
                let r = self.mem.execute(req, IoBuf::Read(buf));
                if let (Some(c), Ok(_)) = (&mut self.checker, r) {
                    c.on_read_data(req, buf);
                }
                r
            }
            _ => self.mem.execute(req, IoBuf::None),
        }
    }
}
