//! The handle: one zoned target under zblk's runtime, shared by any number of
//! threads, its calls blocking here and asynchronous in [`crate::asynch`].

use crate::explain::{device_cause, explain};
use crate::sim::{SimErr, SimLink};
use crate::{Error, IssuePolicy, Options, ZoneCond, ZoneType};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use zblk_core::bio::{Op, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_core::zone::ZoneInfo;
use zblk_runtime::Runtime;
use zblk_runtime::single::{self, RangeError};

/// One zoned target under zblk's engine: zone write plugging keeps every zone's
/// writes at its write pointer, zone append is emulated where the device has none,
/// write pointers are recovered after errors. Cheap to clone: the clones share the
/// target, from any number of threads (`Send + Sync`).
///
/// Offsets and lengths are bytes, on the device's logical blocks. Closing is
/// [`Handle::close`], or the last clone's drop (which ignores a close's error).
///
/// ```
/// let h = zblk::Handle::open("sim:nullb:zone_size=4,size=64")?;
/// let zone = h.zone_size(); // the second zone (a byte offset, as every offset here)
/// let at = h.append(zone, &[7u8; 4096])?;
/// assert_eq!(at, zone);
/// let mut back = [0u8; 4096];
/// h.read_at(at, &mut back)?;
/// assert_eq!(back, [7u8; 4096]);
/// h.close()?;
/// # Ok::<(), zblk::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Handle {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The runtime, `None` once closed. Calls hold it shared while they submit (and
    /// a blocking call while it waits), so that closing waits for them.
    rt: RwLock<Option<Runtime>>,
    geo: Geometry,
    name: String,
    policy: IssuePolicy,
    max_io_bytes: u64,
    repairs: Vec<String>,
    /// A handle on a simulation's device ([`crate::sim`]): its calls go there.
    sim: Option<SimLink>,
}

/// A zone as the device reports it, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Zone {
    /// Its first byte.
    pub start: u64,
    /// Its size.
    pub len: u64,
    /// The bytes that can be written in it (at most `len`).
    pub capacity: u64,
    /// Its write pointer: where the next write must start (a conventional zone's is
    /// meaningless).
    pub wp: u64,
    /// Conventional or sequential.
    pub kind: ZoneType,
    /// EMPTY, open, CLOSED, FULL, ...
    pub cond: ZoneCond,
}

impl Zone {
    fn of(z: &ZoneInfo) -> Zone {
        Zone {
            start: z.start.0 * SECTOR_SIZE,
            len: z.len * SECTOR_SIZE,
            capacity: z.capacity * SECTOR_SIZE,
            wp: z.wp.0 * SECTOR_SIZE,
            kind: z.ztype,
            cond: z.cond,
        }
    }

    /// Whether writes must go at the write pointer (a sequential-write-required or
    /// -preferred zone).
    pub fn is_sequential(&self) -> bool {
        self.kind != ZoneType::Conventional
    }

    /// Bytes that can still be written in it: from the write pointer to the capacity
    /// (0 in a FULL, READONLY or OFFLINE zone; the capacity in a conventional one).
    pub fn remaining(&self) -> u64 {
        match (self.kind, self.cond) {
            (ZoneType::Conventional, _) => self.capacity,
            (_, ZoneCond::Full | ZoneCond::ReadOnly | ZoneCond::Offline) => 0,
            _ => (self.start + self.capacity).saturating_sub(self.wp),
        }
    }
}

/// A zone management operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneOp {
    /// Empties the zone: its write pointer back to its start (RESET).
    Reset,
    /// Opens it explicitly (OPEN), which counts against the open zone limit until
    /// it is closed or full.
    Open,
    /// Closes an open zone (CLOSE): it stays active, its write pointer kept.
    Close,
    /// Makes it FULL (FINISH): its write pointer to its end.
    Finish,
}

impl ZoneOp {
    pub(crate) fn op(self) -> Op {
        match self {
            ZoneOp::Reset => Op::ZoneReset,
            ZoneOp::Open => Op::ZoneOpen,
            ZoneOp::Close => Op::ZoneClose,
            ZoneOp::Finish => Op::ZoneFinish,
        }
    }
}

impl Handle {
    pub(crate) fn new(rt: Runtime, name: &str, policy: IssuePolicy, max_io_bytes: u64) -> Handle {
        let geo = rt.geometry().clone();
        let inner = Inner {
            rt: RwLock::new(Some(rt)),
            geo,
            name: name.into(),
            policy,
            max_io_bytes,
            repairs: vec![],
            sim: None,
        };
        Handle { inner: Arc::new(inner) }
    }

    /// A handle on a simulation's device.
    pub(crate) fn new_sim(link: SimLink, name: &str, policy: IssuePolicy, geo: Geometry) -> Handle {
        let inner = Inner {
            rt: RwLock::new(None),
            geo,
            name: name.into(),
            policy,
            max_io_bytes: crate::MAX_IO_BYTES,
            repairs: vec![],
            sim: Some(link),
        };
        Handle { inner: Arc::new(inner) }
    }

    /// The simulation this handle is on, if it is.
    pub(crate) fn sim(&self) -> Option<&SimLink> {
        self.inner.sim.as_ref()
    }

    /// The power-loss epoch of the simulation's host this handle belongs to, while
    /// it is open.
    pub(crate) fn sim_epoch(&self) -> Option<u64> {
        self.sim().filter(|s| !s.is_closed()).map(|s| s.epoch)
    }

    /// A simulated request's error.
    pub(crate) fn sim_failed(&self, e: SimErr, op: Op, offset: u64, len: usize) -> Error {
        match e {
            SimErr::Closed => Error::Closed,
            SimErr::Status(st) => self.failed(None, op, offset, len, st),
        }
    }

    /// A simulated zone report.
    fn sim_report(&self, s: &SimLink) -> Result<Vec<ZoneInfo>, Error> {
        s.report().map_err(|e| match e {
            SimErr::Closed => Error::Closed,
            SimErr::Status(status) => {
                Error::Report { status, message: format!("{}: zone report: {status}", status.errno_name()) }
            }
        })
    }

    pub(crate) fn with_repairs(mut self, repairs: Vec<String>) -> Handle {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.repairs = repairs;
        }
        self
    }

    /// Opens the target `spec` names (an image path, a Linux zoned block device, an
    /// NVMe generic device `/dev/ngXnY`, `sim:PRESET[:name=value,...]`, `stack:SPEC`: see
    /// [`crate::spec`]) with the default [`Options`].
    pub fn open(spec: &str) -> Result<Handle, Error> {
        Options::new().open(spec)
    }

    /// The options builder, [`Options::new`].
    pub fn options() -> Options {
        Options::new()
    }

    /// The target string it was opened with.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// What opening an image found and repaired (a crash's leftovers), one line each.
    pub fn repairs(&self) -> &[String] {
        &self.inner.repairs
    }

    /// The issue policy its zone writes run under.
    pub fn policy(&self) -> IssuePolicy {
        self.inner.policy
    }

    /// The device's geometry: zones, limits, logical block size.
    pub fn geometry(&self) -> &Geometry {
        &self.inner.geo
    }

    /// The device's size in bytes.
    pub fn capacity(&self) -> u64 {
        self.inner.geo.nr_sectors() * SECTOR_SIZE
    }

    /// A zone's size in bytes (the device's size on a device that is not zoned).
    pub fn zone_size(&self) -> u64 {
        self.inner.geo.zone_sectors() * SECTOR_SIZE
    }

    /// The logical block size in bytes: every offset and length is a multiple of it.
    pub fn block_size(&self) -> u64 {
        u64::from(self.inner.geo.lbs_bytes())
    }

    /// The largest request this handle takes, in bytes ([`Options::max_io_bytes`]).
    pub fn max_io_bytes(&self) -> u64 {
        self.inner.max_io_bytes
    }

    /// The runtime, shared, or [`Error::Closed`].
    pub(crate) fn rt(&self) -> Result<RtGuard<'_>, Error> {
        let g = self.inner.rt.read().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            return Err(Error::Closed);
        }
        Ok(RtGuard(g))
    }

    /// Every zone as the device reports it now.
    ///
    /// ```
    /// let h = zblk::Handle::open("sim:nullb:zone_size=4,size=64,zone_nr_conv=1")?;
    /// let zones = h.report()?;
    /// assert_eq!(zones.len(), 16);
    /// assert!(!zones[0].is_sequential());
    /// assert_eq!((zones[1].start, zones[1].wp, zones[1].cond), (4 << 20, 4 << 20, zblk::ZoneCond::Empty));
    /// # Ok::<(), zblk::Error>(())
    /// ```
    pub fn report(&self) -> Result<Vec<Zone>, Error> {
        if let Some(s) = self.sim() {
            return Ok(self.sim_report(s)?.iter().map(Zone::of).collect());
        }
        let rt = self.rt()?;
        let zones = rt.get().report_zones().map_err(|st| report_failed(rt.get(), st))?;
        Ok(zones.iter().map(Zone::of).collect())
    }

    /// The zone holding byte `offset`, as the device reports it now.
    pub fn zone(&self, offset: u64) -> Result<Zone, Error> {
        self.check_range(offset, self.block_size())?;
        if let Some(s) = self.sim() {
            let z = s.report_zone(sector(offset)).map_err(|e| match e {
                SimErr::Closed => Error::Closed,
                SimErr::Status(status) => Error::Report { status, message: format!("zone report: {status}") },
            })?;
            return Ok(Zone::of(&z));
        }
        let rt = self.rt()?;
        let z = rt.get().report_zone(sector(offset)).map_err(|st| report_failed(rt.get(), st))?;
        Ok(Zone::of(&z))
    }

    /// Writes `data` at `offset` and waits. In a sequential zone `offset` must be
    /// the zone's write pointer once the writes submitted before it have landed:
    /// writes to a zone go out in submission order (zone write plugging).
    ///
    /// ```
    /// use zblk::Error;
    /// use zblk_core::rule::Rule;
    ///
    /// let h = zblk::Handle::open("sim:nullb:zone_size=4,size=64")?;
    /// let zone = h.zone_size();
    /// h.write_at(zone, &[1; 4096])?;
    /// // Not at the write pointer (zone + 4096): refused, saying where it is.
    /// let e = h.write_at(zone + 8192, &[1; 4096]).unwrap_err();
    /// assert!(matches!(e, Error::Io { .. }));
    /// assert_eq!((e.errno(), e.rule()), (5, Some(Rule::NotAtWp { wp: zblk_core::units::Sector(8200) })));
    /// assert_eq!(e.to_string(), "EIO: write at sector 8208 is not at zone 1's write pointer (sector 8200)");
    /// # Ok::<(), zblk::Error>(())
    /// ```
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.check_io(offset, data.len())?;
        if let Some(s) = self.sim() {
            let r = s.call(Op::Write, sector(offset), Some(data.to_vec().into()));
            return r.map(drop).map_err(|e| self.sim_failed(e, Op::Write, offset, data.len()));
        }
        let rt = self.rt()?;
        rt.get()
            .write_at(sector(offset), data)
            .map_err(|st| self.failed(Some(rt.get()), Op::Write, offset, data.len(), st))
    }

    /// Appends `data` to the zone starting at `zone` (a byte offset), waits, and
    /// returns the byte offset where it landed: appends from many threads to one
    /// zone get distinct places, in the order the engine took them. On a device
    /// without zone append (an SMR disk, a Linux zoned block device from userspace)
    /// zblk emulates it, as the kernel does, with a write at the plug's write pointer.
    pub fn append(&self, zone: u64, data: &[u8]) -> Result<u64, Error> {
        self.check_io(zone, data.len())?;
        if let Some(s) = self.sim() {
            let r = s.call(Op::ZoneAppend, sector(zone), Some(data.to_vec().into()));
            return r
                .map(|(at, _)| at.0 * SECTOR_SIZE)
                .map_err(|e| self.sim_failed(e, Op::ZoneAppend, zone, data.len()));
        }
        let rt = self.rt()?;
        match rt.get().append(sector(zone), data) {
            Ok(at) => Ok(at.0 * SECTOR_SIZE),
            Err(st) => Err(self.failed(Some(rt.get()), Op::ZoneAppend, zone, data.len(), st)),
        }
    }

    /// Reads `buf.len()` bytes at `offset` and waits (past a zone's write pointer,
    /// zeroes).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let len = buf.len();
        self.check_io(offset, len)?;
        if let Some(s) = self.sim() {
            let (_, back) = s
                .call(Op::Read, sector(offset), Some(vec![0u8; len].into()))
                .map_err(|e| self.sim_failed(e, Op::Read, offset, len))?;
            buf.copy_from_slice(back.expect("a read's buffer comes back").as_slice());
            return Ok(());
        }
        let rt = self.rt()?;
        rt.get().read_at(sector(offset), buf).map_err(|st| self.failed(Some(rt.get()), Op::Read, offset, len, st))
    }

    /// A zone management operation on the zone starting at `zone`, and waits: the
    /// plug learns of it as the kernel's does (a reset takes the plug's write
    /// pointer back to the zone's start, a finish to its end).
    ///
    /// ```
    /// use zblk::{ZoneCond, ZoneOp};
    ///
    /// let h = zblk::Handle::open("sim:nullb:zone_size=4,size=64")?;
    /// let zone = 3 * h.zone_size();
    /// h.zone_op(ZoneOp::Finish, zone)?;
    /// assert_eq!(h.zone(zone)?.cond, ZoneCond::Full);
    /// h.reset_zone(zone)?;
    /// assert_eq!(h.zone(zone)?.wp, zone);
    /// # Ok::<(), zblk::Error>(())
    /// ```
    pub fn zone_op(&self, op: ZoneOp, zone: u64) -> Result<(), Error> {
        self.check_range(zone, self.block_size())?;
        if let Some(s) = self.sim() {
            return s.call(op.op(), sector(zone), None).map(drop).map_err(|e| self.sim_failed(e, op.op(), zone, 0));
        }
        let rt = self.rt()?;
        rt.get().zone_op(op.op(), sector(zone)).map_err(|st| self.failed(Some(rt.get()), op.op(), zone, 0, st))
    }

    /// Resets the zone starting at `zone` ([`ZoneOp::Reset`]).
    pub fn reset_zone(&self, zone: u64) -> Result<(), Error> {
        self.zone_op(ZoneOp::Reset, zone)
    }

    /// Opens the zone starting at `zone` explicitly ([`ZoneOp::Open`]).
    pub fn open_zone(&self, zone: u64) -> Result<(), Error> {
        self.zone_op(ZoneOp::Open, zone)
    }

    /// Closes the zone starting at `zone` ([`ZoneOp::Close`]).
    pub fn close_zone(&self, zone: u64) -> Result<(), Error> {
        self.zone_op(ZoneOp::Close, zone)
    }

    /// Finishes the zone starting at `zone` ([`ZoneOp::Finish`]).
    pub fn finish_zone(&self, zone: u64) -> Result<(), Error> {
        self.zone_op(ZoneOp::Finish, zone)
    }

    /// Makes every completed write durable, with its zone's write pointer (FLUSH),
    /// and waits: a write is durable once a flush that started after it completed.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// # let img = dir.path().join("img.zbd");
    /// # let geometry = zblk_core::geometry::GeometryParams { capacity_bytes: 8 << 20, zone_size_bytes: 1 << 20, ..Default::default() };
    /// # zblk_dev::file::FileImage::create(&img, &zblk_dev::file::CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    /// // An image made with `zblk create img.zbd -p zone_size=1,size=8`:
    /// let h = zblk::Handle::open(img.to_str().unwrap())?;
    /// let at = h.append(1 << 20, &[9; 4096])?;
    /// h.flush()?; // the record and the zone's write pointer survive a power loss now
    /// h.close()?;
    /// let again = zblk::Handle::open(img.to_str().unwrap())?;
    /// assert_eq!(again.zone(at)?.wp, at + 4096);
    /// # Ok::<(), zblk::Error>(())
    /// ```
    pub fn flush(&self) -> Result<(), Error> {
        if let Some(s) = self.sim() {
            return s.call(Op::Flush, Sector(0), None).map(drop).map_err(|e| self.sim_failed(e, Op::Flush, 0, 0));
        }
        let rt = self.rt()?;
        rt.get().flush().map_err(|st| self.failed(Some(rt.get()), Op::Flush, 0, 0, st))
    }

    /// Waits for every request of every clone, then closes the device (an image
    /// commits its tables and is marked clean). The clones' calls after it fail
    /// with [`Error::Closed`]; closing again does nothing.
    pub fn close(&self) -> Result<(), Error> {
        if let Some(s) = self.sim() {
            s.close();
            return Ok(());
        }
        let rt = self.inner.rt.write().unwrap_or_else(|p| p.into_inner()).take();
        match rt {
            Some(rt) => rt.close().map_err(Error::of_close),
            None => Ok(()),
        }
    }

    /// A request of `len` bytes at `offset` within the library's bounds and the
    /// device's blocks.
    pub(crate) fn check_io(&self, offset: u64, len: usize) -> Result<(), Error> {
        let max = self.inner.max_io_bytes;
        if len as u64 > max {
            let bounds = format!("a request carries at most {max} bytes (Options::max_io_bytes)");
            return Err(Error::Limit { what: "request length", value: len as u64, bounds });
        }
        self.check_range(offset, len as u64)
    }

    /// `len` bytes at `offset` on the device's blocks and within it.
    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<(), Error> {
        let range = |e: RangeError| Error::Range { range: e, message: crate::explain::range(offset, len, e, "") };
        single::check_request(offset, Some(len)).map_err(range)?;
        single::check_range(&self.inner.geo, offset, len).map_err(range)
    }

    /// A failed request's error: its status, and its words (the rule that refused
    /// it, or for an I/O error the device's cause: a file system's ENOSPC).
    pub(crate) fn failed(&self, rt: Option<&Runtime>, op: Op, offset: u64, len: usize, status: Status) -> Error {
        let nr = len as u64 / SECTOR_SIZE;
        let message = rt
            .and_then(|rt| device_cause(rt, status))
            .unwrap_or_else(|| explain(&self.inner.geo, op, sector(offset), nr, status));
        Error::Io { op, offset, len: len as u64, status, message }
    }
}

/// A failed zone report's error.
fn report_failed(rt: &Runtime, status: Status) -> Error {
    let message = device_cause(rt, status).unwrap_or_else(|| format!("{}: zone report: {status}", status.errno_name()));
    Error::Report { status, message }
}

/// The runtime of an open handle, held shared.
pub(crate) struct RtGuard<'a>(RwLockReadGuard<'a, Option<Runtime>>);

impl RtGuard<'_> {
    pub(crate) fn get(&self) -> &Runtime {
        self.0.as_ref().expect("checked open when taken")
    }
}

/// The sector of a byte offset the range checks found on sectors.
pub(crate) fn sector(offset: u64) -> Sector {
    Sector(offset / SECTOR_SIZE)
}
