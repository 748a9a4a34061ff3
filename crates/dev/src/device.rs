//! [`Device`]: what the real-time runtime drives, from many threads at once. One
//! interface for every device it runs over: a zoned image ([`crate::FileImage`]), a
//! Linux zoned block device ([`crate::linux::LinuxZoned`]), memory
//! ([`Locked`]`<`[`crate::MemDevice`]`>`), and later devices served to the kernel.
//!
//! A request goes through three steps, so that the driver can move data itself (with
//! io_uring) while the device keeps its own checks and bookkeeping:
//!
//! 1. [`Device::prepare`]: the device-side checks (a write to a sequential zone is
//!    *accepted* here: the device's write pointer moves) and a [`Plan`];
//! 2. the data transfer, by the driver through one of the device's [`DataFds`], or by
//!    [`Device::perform`] on a thread that may block;
//! 3. [`Device::finish`]: the device records the outcome (a completed write, or a
//!    failed one that moves its zone's write pointer back) and gives the result.

use crate::error::DeviceError;
use crate::file::zeroing::FileZeroing;
use crate::{BlockDevice, IoBuf};
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use zblk_core::bio::{Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;

/// How a request is carried out, decided by [`Device::prepare`] after the device-side
/// checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// A data transfer between the request's buffer and the device. The driver may do
    /// it itself through the device's [`DataFds`] (when the buffer meets a
    /// descriptor's alignment) and end it with [`Device::finish`]; otherwise it calls
    /// [`Device::perform`] with this plan, which transfers and finishes.
    Transfer(Transfer),
    /// Nothing a driver can do by itself (flush, zone management, write zeroes,
    /// discard, FUA or PREFLUSH writes, every request of a device without
    /// descriptors): [`Device::perform`] carries out the whole request, device-side
    /// checks included, on a thread that may block.
    Blocking,
}

/// A data transfer the device has checked and, for a write, accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// Data goes from the buffer to the device (a write or a zone append); else a read.
    pub write: bool,
    /// The sector the request executes at: for a native zone append, where the device
    /// puts the data (the zone's write pointer when it was accepted).
    pub at: Sector,
    /// Byte offset of the data in the device's [`DataFds`].
    pub offset: u64,
    /// For a read, the sectors from this one on lie past a write pointer and must read
    /// as zeroes whatever the descriptor holds ([`crate::zero_past`]); the request's
    /// length when all are below it.
    pub valid_sectors: u32,
}

/// The descriptors a driver may move a device's data through itself: for a
/// [`Plan::Transfer`], `offset` bytes into whichever suits the buffer. Valid while the
/// device lives.
#[derive(Clone, Copy, Debug, Default)]
pub struct DataFds<'a> {
    /// A descriptor opened with `O_DIRECT`, and the alignment (bytes) it needs of the
    /// buffer's address, the length and the offset.
    pub direct: Option<(BorrowedFd<'a>, u64)>,
    /// A descriptor through the page cache, for transfers that do not meet the direct
    /// one's alignment. None: such transfers go to [`Device::perform`] (a block
    /// device bounces them through an aligned buffer: its page cache must not reorder
    /// writes to a sequential zone).
    pub buffered: Option<BorrowedFd<'a>>,
    /// How many times the device has deallocated a range of the file behind the
    /// descriptors (punched a hole) so far, raised before each punch; `None` for a
    /// device that never does. A driver that writes through a mapping of the file
    /// knows from it when a page it found allocated may have become a hole again.
    pub holes_punched: Option<&'a AtomicU64>,
}

/// How a device carries out a WRITE_ZEROES: what [`Device::zeroing`] says and the
/// runtime reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceZeroing {
    /// A zoned image: the file system call that zeroes the range of the file.
    File(FileZeroing),
    /// A Linux block device: `fallocate` on it, which the kernel turns into
    /// WRITE_ZEROES. With `unmap`, `FALLOC_FL_PUNCH_HOLE` (the device may
    /// deallocate; never written zeroes); without, `FALLOC_FL_ZERO_RANGE`
    /// (WRITE_ZEROES with NOUNMAP).
    BlockDevice {
        /// The device may deallocate the range.
        unmap: bool,
    },
    /// Memory: the range's pages freed (unmap) or filled with zeroes.
    Memory {
        /// Pages are freed.
        unmap: bool,
    },
}

impl DeviceZeroing {
    /// The method's name: the image's (`fallocate-zero-range`, ...),
    /// `blkdev-write-zeroes-unmap`, `blkdev-write-zeroes-nounmap`, `memory-free-pages`
    /// or `memory-zero-fill`.
    pub fn name(self) -> &'static str {
        match self {
            DeviceZeroing::File(m) => m.name(),
            DeviceZeroing::BlockDevice { unmap: true } => "blkdev-write-zeroes-unmap",
            DeviceZeroing::BlockDevice { unmap: false } => "blkdev-write-zeroes-nounmap",
            DeviceZeroing::Memory { unmap: true } => "memory-free-pages",
            DeviceZeroing::Memory { unmap: false } => "memory-zero-fill",
        }
    }

    /// The image's method, for a zoned image.
    pub fn file(self) -> Option<FileZeroing> {
        match self {
            DeviceZeroing::File(m) => Some(m),
            _ => None,
        }
    }
}

impl std::fmt::Display for DeviceZeroing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for DeviceZeroing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// A device the runtime drives from many threads at once: every method takes
/// `&self`, and none holds a lock across I/O that another request needs.
pub trait Device: Send + Sync {
    /// The geometry: zones, limits, whether zone append is native (the engine
    /// emulates it when `max_append_sectors` is 0).
    fn geometry(&self) -> &Geometry;

    /// Whether the device is rotational (`queue/rotational`): the single issuer is
    /// the default policy of a rotational zoned device (`zoned_qd1_writes`).
    fn rotational(&self) -> bool;

    /// What the device is, for messages and reports: its path, or its kind.
    fn name(&self) -> String;

    /// The descriptors a driver may move data through itself for a
    /// [`Plan::Transfer`]; none by default (every transfer goes to
    /// [`Device::perform`]).
    fn data_fds(&self) -> DataFds<'_> {
        DataFds::default()
    }

    /// The device-side checks of `req` and how to carry it out. Writes are accepted
    /// here in the order of the calls: a driver calls this in the order the engine
    /// issues. An error is the request's result.
    fn prepare(&self, req: &Request) -> Result<Plan, Status>;

    /// Carries out a prepared request synchronously on a thread that may block: the
    /// transfer of a [`Plan::Transfer`] (then [`Device::finish`]), or the whole of a
    /// [`Plan::Blocking`] request. `buf` is the request's data (`nr_sectors * 512`
    /// bytes) for reads and writes.
    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status>;

    /// Ends a [`Plan::Transfer`] the driver moved itself: `io` is the transfer's
    /// outcome (a short transfer the driver completed is `Ok`). Returns the request's
    /// result.
    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status>;

    /// Appends up to `max` zone descriptors, starting with the zone holding `from`,
    /// to `out` (REPORT_ZONES), as the device has them now. Returns how many were
    /// added. A regular device fails with [`Status::NotSupported`].
    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status>;

    /// How the device carries out a WRITE_ZEROES with NOUNMAP set or not; `None`
    /// when it has no WRITE_ZEROES (`write_zeroes_max_bytes` 0).
    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing>;

    /// Makes everything acknowledged so far durable and says so, or why not. Call it
    /// once no request is in flight; requests prepared afterwards fail.
    fn close(&self) -> Result<(), DeviceError>;

    /// Whether every request completes in memory without blocking (the in-memory
    /// device): a driver may then carry out [`Device::perform`] on the submitting
    /// thread instead of handing it to another, which costs more than the work.
    fn inline(&self) -> bool {
        false
    }

    /// Whether the device keeps a zone's writes in the order [`Device::prepare`] is
    /// called for them (an [`Device::inline`] device: [`Device::perform`]), whatever order they complete in, so that several writes of
    /// one zone may be in flight at once (zone write pipelining, the policy
    /// `pipeline`): an image accepts a write when it is prepared and lands it where
    /// its offset says; the memory device executes it then. A Linux zoned device may
    /// reorder what it is sent (so may a simulated disk's queue): no.
    fn keeps_zone_order(&self) -> bool {
        false
    }

    /// Why the device's last failed request failed, in the kernel's words, when the
    /// device knows more than its [`Status`] says (an image: the file system's
    /// ENOSPC or EFBIG behind an EIO). `None` when it does not.
    fn last_error(&self) -> Option<String> {
        None
    }

    /// The device's data transfers as io_uring passthrough commands, when it takes
    /// them (an NVMe generic device): a driver with a ring of 128-byte entries and
    /// 32-byte completions carries a [`Plan::Transfer`] as the command this builds
    /// and ends it with [`UringCmd::complete`] instead of [`Device::finish`].
    fn uring_cmd(&self) -> Option<&dyn UringCmd> {
        None
    }

    /// Executes `req` synchronously: [`Device::prepare`], then [`Device::perform`].
    fn execute(&self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let plan = self.prepare(req)?;
        self.perform(req, plan, buf)
    }

    /// The descriptor of the zone holding `sector`.
    fn report_zone(&self, sector: Sector) -> Result<ZoneInfo, Status> {
        let mut out = Vec::with_capacity(1);
        self.report_zones(sector, 1, &mut out)?;
        out.pop().ok_or(Status::Invalid)
    }

    /// Every zone, in order (none on a regular device): what an engine starts from,
    /// as the kernel revalidates zones.
    fn zones(&self) -> Result<Vec<ZoneInfo>, Status> {
        let geo = self.geometry();
        if !geo.is_zoned() {
            return Ok(Vec::new());
        }
        let n = geo.nr_zones() as usize;
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let from = geo.zone_start(ZoneNo(out.len() as u32));
            if self.report_zones(from, n - out.len(), &mut out)? == 0 {
                return Err(Status::IoErr);
            }
        }
        out.truncate(n);
        Ok(out)
    }
}

/// A device's transfers as `IORING_OP_URING_CMD` entries (see
/// [`Device::uring_cmd`]). The buffer stays the submitter's, as for any transfer:
/// the command only points at it, and the driver keeps it valid until the
/// completion is reaped.
pub trait UringCmd: Send + Sync {
    /// The descriptor the commands go to.
    fn fd(&self) -> BorrowedFd<'_>;
    /// The entry's `cmd_op` (`NVME_URING_CMD_IO`).
    fn cmd_op(&self) -> u32;
    /// The entry's 80 command bytes for a prepared transfer of `req` with its `len`
    /// bytes at `addr`.
    fn command(&self, req: &Request, addr: *mut u8, len: usize) -> [u8; 80];
    /// The request's result from the completion's `res` and first big-CQE word (a
    /// zone append's LBA).
    fn complete(&self, req: &Request, res: i32, result: u64) -> Result<Sector, Status>;
}

/// A shared device is a device: the runtime can drive it while its owner keeps a
/// handle (to look at it, or to close it).
impl<D: Device + ?Sized> Device for Arc<D> {
    fn geometry(&self) -> &Geometry {
        (**self).geometry()
    }
    fn rotational(&self) -> bool {
        (**self).rotational()
    }
    fn name(&self) -> String {
        (**self).name()
    }
    fn data_fds(&self) -> DataFds<'_> {
        (**self).data_fds()
    }
    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        (**self).prepare(req)
    }
    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        (**self).perform(req, plan, buf)
    }
    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        (**self).finish(req, t, io)
    }
    fn execute(&self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        (**self).execute(req, buf)
    }
    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        (**self).report_zones(from, max, out)
    }
    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        (**self).zeroing(nounmap)
    }
    fn close(&self) -> Result<(), DeviceError> {
        (**self).close()
    }
    fn inline(&self) -> bool {
        (**self).inline()
    }
    fn keeps_zone_order(&self) -> bool {
        (**self).keeps_zone_order()
    }
    fn last_error(&self) -> Option<String> {
        (**self).last_error()
    }
    fn uring_cmd(&self) -> Option<&dyn UringCmd> {
        (**self).uring_cmd()
    }
}

/// A synchronous [`BlockDevice`] (the in-memory device, a simulated device's data
/// side) behind a reader-writer lock: every request is [`Plan::Blocking`] and
/// executes under the lock, held exclusively. The device executes in memory, so the
/// lock is held for a copy, not for I/O. What only looks ([`Locked::read`]: a zone
/// report, a served read's check and its copy to the kernel straight from the pages)
/// shares it: reads arriving on several queues at once copy side by side instead of
/// one after the other.
#[derive(Debug)]
pub struct Locked<D> {
    dev: RwLock<D>,
    geo: Geometry,
    name: String,
    rotational: bool,
}

impl<D: BlockDevice> Locked<D> {
    /// Wraps `dev`, which stands for a device called `name` (its kind: "memory")
    /// that is `rotational` or not.
    pub fn new(dev: D, name: impl Into<String>, rotational: bool) -> Locked<D> {
        Locked { geo: dev.geometry().clone(), dev: RwLock::new(dev), name: name.into(), rotational }
    }

    /// The device, locked: for checkers that look at its state. A lock poisoned by
    /// a panic under it (a request executing) propagates the panic: the device's
    /// zones and data may be half way through the request, and a checker or a
    /// caller taking the device back would judge or keep that state.
    pub fn lock(&self) -> RwLockWriteGuard<'_, D> {
        self.dev.write().unwrap_or_else(|_| panic!("{}: the device lock is poisoned: a request panicked", self.name))
    }

    /// The device, shared with other readers: for what only looks at it (a zone
    /// report, a read's check and its data). Blocks while a request executes. A
    /// poisoned lock panics, as [`Locked::lock`].
    pub fn read(&self) -> RwLockReadGuard<'_, D> {
        self.dev.read().unwrap_or_else(|_| panic!("{}: the device lock is poisoned: a request panicked", self.name))
    }

    /// The device back. Panics if a request panicked under the lock (see
    /// [`Locked::lock`]).
    pub fn into_inner(self) -> D {
        let name = self.name;
        self.dev.into_inner().unwrap_or_else(|_| panic!("{name}: the device lock is poisoned: a request panicked"))
    }
}

impl<D: BlockDevice + Send + Sync> Device for Locked<D> {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn rotational(&self) -> bool {
        self.rotational
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn prepare(&self, _req: &Request) -> Result<Plan, Status> {
        // The device checks when it executes, under its lock: in the order of the
        // perform calls, which for writes to one zone is the engine's issue order
        // (one write per zone in flight).
        Ok(Plan::Blocking)
    }

    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        assert_eq!(plan, Plan::Blocking, "a locked device plans nothing else");
        self.lock().execute(req, buf)
    }

    fn finish(&self, _req: &Request, _t: Transfer, _io: io::Result<()>) -> Result<Sector, Status> {
        unreachable!("a locked device never plans a transfer")
    }

    fn execute(&self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        // `prepare` plans nothing and `perform` executes under the lock: one call,
        // no plan made and checked between them (a served memory device's every
        // request comes this way).
        self.lock().execute(req, buf)
    }

    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        self.read().report_zones(from, max, out)
    }

    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        self.read().zeroing(nounmap)
    }

    fn close(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn inline(&self) -> bool {
        // Every request is a copy under the lock.
        true
    }

    /// An inline device executes each request when it is performed, which a driver
    /// does right after preparing it: in the order it is handed them, if the driver
    /// performs a zone's writes in issue order (the runtime does, under a pipelining
    /// policy).
    fn keeps_zone_order(&self) -> bool {
        true
    }
}
