//! The asynchronous API: an [`Io`] owns its buffer while in flight and hands it back
//! in its [`IoDone`], through a callback or an [`IoFuture`]; a [`Submitter`] submits
//! from anywhere, completion callbacks included, without borrowing the runtime.

use crate::callback::{Callback, Completion, deliver};
use crate::shared::Shared;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::units::{SECTOR_SHIFT, SECTOR_SIZE, Sector};
use zblk_core::zone::ZoneInfo;
use zblk_dev::buf::Buffer;

/// One asynchronous I/O: an operation and, for reads and writes, the buffer it owns
/// until it completes.
#[derive(Debug)]
pub struct Io {
    pub(crate) op: Op,
    pub(crate) sector: Sector,
    pub(crate) nr_sectors: u32,
    pub(crate) flags: BioFlags,
    pub(crate) buf: Option<Buffer>,
}

impl Io {
    fn with_buf(op: Op, sector: Sector, buf: Buffer) -> Io {
        let n = buf.as_slice().len() as u64;
        // A length that is no whole number of sectors (or too large) becomes a
        // zero-sector BIO, which the engine refuses with EINVAL.
        let nr = if n % SECTOR_SIZE == 0 { u32::try_from(n >> SECTOR_SHIFT).unwrap_or(0) } else { 0 };
        Io { op, sector, nr_sectors: nr, flags: BioFlags::NONE, buf: Some(buf) }
    }

    /// Read `buf.len()` bytes at `sector` into `buf`.
    pub fn read(sector: Sector, buf: impl Into<Buffer>) -> Io {
        Io::with_buf(Op::Read, sector, buf.into())
    }

    /// Write `buf` at `sector`.
    pub fn write(sector: Sector, buf: impl Into<Buffer>) -> Io {
        Io::with_buf(Op::Write, sector, buf.into())
    }

    /// Append `buf` to the zone starting at `zone_start`; the result is the sector
    /// written.
    pub fn append(zone_start: Sector, buf: impl Into<Buffer>) -> Io {
        Io::with_buf(Op::ZoneAppend, zone_start, buf.into())
    }

    /// Make `nr_sectors` at `sector` read as zeroes (a write on a sequential zone).
    pub fn write_zeroes(sector: Sector, nr_sectors: u32) -> Io {
        Io { op: Op::WriteZeroes, sector, nr_sectors, flags: BioFlags::NONE, buf: None }
    }

    /// Deallocate `nr_sectors` at `sector` (DISCARD: only conventional zones and
    /// regular devices take it).
    pub fn discard(sector: Sector, nr_sectors: u32) -> Io {
        Io { op: Op::Discard, sector, nr_sectors, flags: BioFlags::NONE, buf: None }
    }

    /// A zone management operation on the zone starting at `zone_start` (any sector
    /// for RESET_ALL).
    pub fn zone(op: Op, zone_start: Sector) -> Io {
        assert!(op.is_zone_mgmt(), "{op} is not a zone management operation");
        Io { op, sector: zone_start, nr_sectors: 0, flags: BioFlags::NONE, buf: None }
    }

    /// Make every completed write durable.
    pub fn flush() -> Io {
        Io { op: Op::Flush, sector: Sector::ZERO, nr_sectors: 0, flags: BioFlags::NONE, buf: None }
    }

    /// The same I/O on the first `bytes` of its buffer, for a buffer kept at its
    /// largest size and reused for I/Os of every length (a server's per-request
    /// buffer). A length past the buffer, or no whole number of sectors, makes a
    /// zero-sector BIO, which the engine refuses with EINVAL.
    pub fn with_len(mut self, bytes: usize) -> Io {
        let fits = self.buf.as_ref().is_some_and(|b| bytes <= b.as_slice().len());
        self.nr_sectors = match u32::try_from(bytes as u64 >> SECTOR_SHIFT) {
            Ok(n) if fits && bytes as u64 % SECTOR_SIZE == 0 => n,
            _ => 0,
        };
        self
    }

    /// The same I/O with `flags` added (FUA, PREFLUSH).
    pub fn with_flags(mut self, flags: BioFlags) -> Io {
        self.flags = self.flags | flags;
        self
    }
}

/// The end of an asynchronous I/O: its result (for an append, the sector written) and
/// its buffer back.
#[derive(Debug)]
pub struct IoDone {
    /// The sector the data starts at, or why it failed.
    pub result: Result<Sector, Status>,
    /// The I/O's buffer (read data in it, for a read).
    pub buf: Option<Buffer>,
}

/// What an [`IoFuture`] and the completion that resolves it share.
#[derive(Default)]
pub(crate) struct FutState {
    /// The I/O's end, once it has come.
    pub(crate) done: Option<IoDone>,
    /// Who to wake when it comes.
    pub(crate) waker: Option<Waker>,
}

/// A future resolving to an [`IoDone`]. Any executor can poll it; the runtime's
/// completion path wakes it.
pub struct IoFuture {
    pub(crate) st: Arc<Mutex<FutState>>,
}

impl Future for IoFuture {
    type Output = IoDone;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<IoDone> {
        // Recovered: the slot's fields are only ever assigned whole (see
        // `Runtime::submit_async`).
        let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
        match st.done.take() {
            Some(d) => Poll::Ready(d),
            None => {
                st.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Submits to a [`Runtime`](crate::Runtime) without borrowing it: clonable, `'static`, usable from
/// completion callbacks. After the runtime has closed, I/Os complete with EIO.
#[derive(Clone)]
pub struct Submitter {
    pub(crate) shared: std::sync::Weak<Shared>,
}

impl std::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Submitter")
    }
}

impl Submitter {
    /// As [`Runtime::submit`](crate::Runtime::submit).
    pub fn submit(&self, io: Io, done: impl FnOnce(IoDone) + Send + 'static) {
        match self.shared.upgrade() {
            Some(sh) => sh.submit_io(io, done),
            None => {
                let buf = io.buf;
                deliver(Callback::Boxed(Box::new(move |result| done(IoDone { result, buf }))), Err(Status::IoErr));
            }
        }
    }

    /// As [`Submitter::submit`], the I/O's end going to `sink` as `token`
    /// ([`Completion::complete`]) instead of to a callback of its own: what a caller
    /// with many I/Os in flight uses, at no allocation per I/O.
    pub fn submit_to(&self, io: Io, sink: Arc<dyn Completion>, token: u64) {
        match self.shared.upgrade() {
            Some(sh) => sh.submit_io_to(io, sink, token),
            None => deliver(Callback::To { sink, token, buf: io.buf }, Err(Status::IoErr)),
        }
    }

    /// As [`Runtime::batch`](crate::Runtime::batch).
    pub fn batch<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.shared.upgrade() {
            Some(sh) => sh.batch(f),
            None => f(),
        }
    }

    /// The descriptor of the zone holding `sector`, as the device reports it now.
    pub fn zone_info(&self, sector: Sector) -> Result<ZoneInfo, Status> {
        self.shared.upgrade().ok_or(Status::IoErr)?.device.report_zone(sector)
    }
}
