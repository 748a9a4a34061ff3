//! Executing requests: the [`Device`] implementation of an image. Reads and plain
//! writes are transfers a driver may move itself; FUA and PREFLUSH writes, write
//! zeroes, discards, flushes and zone management block and run here, between the
//! commits they ask for.

use super::FileImage;
use super::format::Entry;
use super::zeroing::{self, FileZeroing};
use crate::device::{DataFds, Device, DeviceZeroing, Plan, Transfer};
use crate::error::{DeviceError, describe_io};
use crate::{IoBuf, check_discard, check_write_zeroes, zero_past};
use std::io;
use std::os::fd::BorrowedFd;
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;

impl FileImage {
    /// Remembers what a failed file operation under a request stood for, and gives
    /// the request's status: EIO, as a disk's media error (the errno is told by
    /// [`Device::last_error`]).
    fn note(&self, e: &io::Error) -> Status {
        if let Some(n) = e.raw_os_error() {
            self.last_errno.store(n, std::sync::atomic::Ordering::Relaxed);
        }
        Status::IoErr
    }

    /// Deallocates `[offset, offset + len)` of the file (see
    /// [`Media::punch_hole`](super::media::Media::punch_hole)), counted first in
    /// [`DataFds::holes_punched`]: a driver writing through a mapping of the file that
    /// saw the count before the punch treats the pages as allocated no longer than a
    /// `mincore` of them before the punch would have.
    pub(super) fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.may_deallocate();
        self.media.punch_hole(offset, len)
    }

    /// Counts, before it happens, an operation that may deallocate part of the file
    /// ([`DataFds::holes_punched`]).
    fn may_deallocate(&self) {
        self.holes_punched.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// Carries out a transfer synchronously (the thread-pool driver's path for every
    /// read and write, and every driver's for buffers it cannot hand to the kernel)
    /// and finishes it.
    fn perform_transfer(&self, req: &Request, t: Transfer, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let len = u64::from(req.nr_sectors) << SECTOR_SHIFT;
        let r = match (t.write, buf) {
            (false, IoBuf::Read(out)) => {
                assert_eq!(out.len() as u64, len, "read buffer size");
                let r = self.media.read_at(out, t.offset);
                zero_past(out, t.valid_sectors);
                r
            }
            (true, IoBuf::Write(data)) => {
                assert_eq!(data.len() as u64, len, "write buffer size");
                self.media.write_at(data, t.offset)
            }
            // A write without data: the range reads back as zeroes.
            (true, _) => self.punch_hole(t.offset, len),
            // A read nobody wants the data of.
            (false, _) => Ok(()),
        };
        Device::finish(self, req, t, r)
    }

    /// Runs `write` between the commits its flags ask for: before it with PREFLUSH
    /// (every write completed so far becomes durable), after it with FUA (this one
    /// too).
    fn with_commits(&self, req: &Request, write: impl FnOnce() -> Result<Sector, Status>) -> Result<Sector, Status> {
        let io = |r: io::Result<()>| r.map_err(|e| self.note(&e));
        if req.flags.contains(BioFlags::PREFLUSH) {
            io(self.commit_io())?;
        }
        let at = write()?;
        if req.flags.contains(BioFlags::FUA) {
            io(self.commit_io())?;
        }
        Ok(at)
    }

    fn perform_blocking(&self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let io = |r: io::Result<()>| r.map_err(|e| self.note(&e));
        match req.op {
            Op::Write | Op::ZoneAppend => self.with_commits(req, || {
                let plain = Request { flags: BioFlags::NONE, ..*req };
                let t = self.prepare_transfer(&plain)?;
                self.perform_transfer(&plain, t, buf)
            }),
            Op::WriteZeroes => self.with_commits(req, || self.execute_write_zeroes(req)),
            Op::Discard => {
                check_discard(&self.geo, req)?;
                io(self.punch_hole(self.file_offset(req.sector), u64::from(req.nr_sectors) << SECTOR_SHIFT))?;
                Ok(req.sector)
            }
            Op::Flush => io(self.commit_io()).map(|()| req.sector),
            op if op.is_zone_mgmt() => self.zone_mgmt(req),
            Op::Read => self.read_by_zone(req, buf),
            op => unreachable!("{op} is not a blocking operation"),
        }
    }

    /// Whether read `req` of a zoned image ends in another zone than it starts in.
    fn crosses_zones(&self, req: &Request) -> bool {
        let last = req.sector.0 + u64::from(req.nr_sectors).max(1) - 1;
        self.geo.is_zoned()
            && last < self.geo.nr_sectors()
            && self.geo.zone_no(req.sector) != self.geo.zone_no(Sector(last))
    }

    /// A read across zone boundaries, one transfer per zone.
    fn read_by_zone(&self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let mut out = match buf {
            IoBuf::Read(out) => Some(out),
            _ => None,
        };
        let end = req.sector.0 + u64::from(req.nr_sectors);
        let mut s = req.sector.0;
        while s < end {
            let z = self.geo.zone_no(Sector(s));
            let zend = (self.geo.zone_start(z).0 + self.geo.zone_len(z)).min(end);
            let piece = Request { sector: Sector(s), nr_sectors: (zend - s) as u32, ..*req };
            let t = self.prepare_transfer(&piece)?;
            let from = ((s - req.sector.0) * SECTOR_SIZE) as usize;
            let part = match out.as_deref_mut() {
                Some(o) => IoBuf::Read(&mut o[from..from + ((zend - s) * SECTOR_SIZE) as usize]),
                None => IoBuf::None,
            };
            self.perform_transfer(&piece, t, part)?;
            s = zend;
        }
        Ok(req.sector)
    }

    /// WRITE_ZEROES: accepted as a write (at the write pointer of a sequential
    /// zone, completed like one), the range of the file zeroed by
    /// [`FileImage::zero_file`].
    fn execute_write_zeroes(&self, req: &Request) -> Result<Sector, Status> {
        check_write_zeroes(&self.geo, req)?;
        let req_w = Request { op: Op::Write, flags: BioFlags::NONE, ..*req };
        let t = self.prepare_transfer(&req_w)?;
        let len = u64::from(req.nr_sectors) << SECTOR_SHIFT;
        let r = self.zero_file(t.offset, len, req.flags.contains(BioFlags::NOUNMAP));
        Device::finish(self, &req_w, t, r.map(|_| ()))
    }

    /// Zeroes `[offset, offset + len)` of the file: with NOUNMAP by writing zeroes,
    /// otherwise with the unmap path's method; a fallocate method the file system
    /// refuses (EOPNOTSUPP) is dropped for the next one, for good. Returns the method
    /// that did it.
    fn zero_file(&self, offset: u64, len: u64, nounmap: bool) -> io::Result<FileZeroing> {
        // A fallocate method may deallocate the range as a punch does.
        self.may_deallocate();
        loop {
            let m = self.zeroing_for(nounmap);
            match self.media.zero_range(m, offset, len) {
                Ok(()) => return Ok(m),
                Err(e) if m.is_fallocate() && zeroing::is_not_supported(&e) => self.zeroing.refused(m),
                Err(e) => return Err(e),
            }
        }
    }

    /// Zone management. A reset only moves the write pointer: the zone's blocks stay
    /// allocated in the file, as a device's capacity stays (reads past a write pointer
    /// return zeroes whatever the file holds there). Punching them out would make
    /// every write after a reset allocate blocks and convert unwritten extents, with
    /// that latency on the critical path of a zone whose writes go one at a time
    /// (zone write plugging). A finish exposes `[wp, end)` to reads: those blocks are
    /// punched out first.
    fn zone_mgmt(&self, req: &Request) -> Result<Sector, Status> {
        let io = |r: io::Result<()>| r.map_err(|e| self.note(&e));
        if !self.geo.is_zoned() {
            return Err(Status::NotSupported);
        }
        if req.op == Op::ZoneFinish && self.geo.is_zone_start(req.sector) {
            let z = self.geo.zone_no(req.sector);
            if !self.geo.zone_is_conv(z) {
                let wp = self.lock_state().done[z.idx()].wp_offset.min(self.geo.zone_len(z));
                // Before the finish is recorded anywhere: a crash after the punch and
                // before the commit leaves zeroes past the write pointer, harmless.
                let start = self.geo.zone_start(z) + wp;
                io(self.punch_hole(self.file_offset(start), (self.geo.zone_len(z) - wp) << SECTOR_SHIFT))?;
            }
        }
        let mut st = self.lock_state();
        let zs = st.zones.as_mut().ok_or(Status::NotSupported)?;
        let reset: Vec<ZoneNo> = match req.op {
            Op::ZoneResetAll => zs.reset_all(),
            op => {
                zs.zone_mgmt(op, req.sector)?;
                if op == Op::ZoneReset { vec![self.geo.zone_no(req.sector)] } else { Vec::new() }
            }
        };
        self.refresh_all(&mut st);
        let changes: Vec<(ZoneNo, Entry)> = reset.iter().map(|&z| (z, st.done[z.idx()])).collect();
        drop(st);
        match req.op {
            // A reset lowers write pointers only: the newest durable table with them
            // lowered needs no data synced first.
            Op::ZoneResetAll | Op::ZoneReset => io(self.commit_zones(&changes))?,
            // A finish moves the write pointer past data that may not be durable yet:
            // a full commit syncs it first.
            Op::ZoneFinish => io(self.commit_io())?,
            // OPEN and CLOSE change no write pointer: nothing to make durable.
            _ => {}
        }
        Ok(req.sector)
    }
}

impl Device for FileImage {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn rotational(&self) -> bool {
        self.sb.rotational
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }

    /// A write is accepted (its zone's write pointer moves) when it is prepared, and
    /// lands where its offset says whenever the transfer runs.
    fn keeps_zone_order(&self) -> bool {
        true
    }

    fn data_fds(&self) -> DataFds<'_> {
        // SAFETY: both descriptors belong to the media, which lives as long as `self`.
        let direct = self.direct.map(|(fd, align)| (unsafe { BorrowedFd::borrow_raw(fd) }, align));
        // With a direct descriptor, none through the page cache: a transfer from an
        // unaligned buffer goes to `perform`, which bounces it (a page reached both
        // ways goes stale, see `FileMedia::goes_direct`).
        // SAFETY: as above.
        let buffered = if direct.is_some() { None } else { Some(unsafe { BorrowedFd::borrow_raw(self.buffered_fd) }) };
        DataFds { direct, buffered, holes_punched: Some(&self.holes_punched) }
    }

    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Status::IoErr);
        }
        if self.read_only && req.op != Op::Read {
            return Err(Status::NotSupported);
        }
        let synced = req.flags.contains(BioFlags::FUA) || req.flags.contains(BioFlags::PREFLUSH);
        match req.op {
            // A read across a zone boundary is read zone by zone: past each zone's
            // write pointer it reads as zeroes, which one transfer's `valid_sectors`
            // (a prefix) cannot say. The engine splits every BIO at zone boundaries:
            // only direct callers (`read_direct`, tools) send such a read.
            Op::Read if self.crosses_zones(req) => self.prepare_transfer(req).map(|_| Plan::Blocking),
            Op::Read => self.prepare_transfer(req).map(Plan::Transfer),
            // A FUA or PREFLUSH write commits around its data: a thread that may block
            // does all of it.
            Op::Write | Op::ZoneAppend if !synced => self.prepare_transfer(req).map(Plan::Transfer),
            _ => Ok(Plan::Blocking),
        }
    }

    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        match plan {
            Plan::Transfer(t) => self.perform_transfer(req, t, buf),
            Plan::Blocking => self.perform_blocking(req, buf),
        }
    }

    /// Records a completed write in the live table; a failed one moves the zone's
    /// write pointer back to where it started (later writes to the zone already
    /// accepted fail too) and discards what it may have written.
    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        if let Err(e) = &io {
            self.note(e);
        }
        if t.write {
            self.finish_write(t.at, u64::from(req.nr_sectors), io.is_ok())
        } else {
            io.map(|()| req.sector).map_err(|_| Status::IoErr)
        }
    }

    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        match &self.lock_state().zones {
            Some(z) => Ok(z.report(from, max, out)),
            None => Err(Status::NotSupported),
        }
    }

    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        (self.geo.max_write_zeroes_sectors() > 0).then(|| DeviceZeroing::File(self.zeroing_for(nounmap)))
    }

    fn close(&self) -> Result<(), DeviceError> {
        self.close_inner().map_err(|e| DeviceError::io(&self.path, "close", e))
    }

    fn last_error(&self) -> Option<String> {
        match self.last_errno.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            n => Some(describe_io(&io::Error::from_raw_os_error(n))),
        }
    }
}

impl FileImage {
    /// Reads `buf.len()` bytes (whole sectors) at `sector` straight from the device,
    /// without an engine: for checkers and tools. Past a write pointer reads zeroes.
    pub fn read_direct(&self, sector: Sector, buf: &mut [u8]) -> Result<(), Status> {
        if buf.len() as u64 % SECTOR_SIZE != 0 {
            return Err(Status::Invalid);
        }
        let nr_sectors = u32::try_from(buf.len() as u64 / SECTOR_SIZE).map_err(|_| Status::Invalid)?;
        let req = Request {
            id: zblk_core::bio::ReqId::unissued(0),
            op: Op::Read,
            sector,
            nr_sectors,
            flags: BioFlags::NONE,
            user_data: 0,
            bio_offset: 0,
        };
        self.execute(&req, IoBuf::Read(buf)).map(|_| ())
    }

    /// The descriptor of the zone holding `sector`, as a report shows it now.
    pub fn zone_info(&self, sector: Sector) -> Result<ZoneInfo, Status> {
        self.report_zone(sector)
    }
}
