//! The real-time driver: the same [`Engine`] the simulator drives, driven by threads
//! against any [`Device`] (a zoned image, a Linux zoned block device, memory), with
//! io_uring (or a thread pool doing `pread`/`pwrite` where io_uring is not available).
//!
//! ```text
//!  submitters ──submit──▶ [engine lock: submit, drain actions] ──▶ prepare + queue I/O
//!                                                                      │ io_uring / workers
//!  callbacks ◀── [engine lock: complete, drain actions] ◀── finish ◀──┘ completion thread
//! ```
//!
//! The engine is a state machine: it is locked only around `submit`, `complete`,
//! `zone_report` and the draining of its actions, never across I/O. Device-side checks
//! ([`Device::prepare`]) and the I/O itself happen outside that lock, so any number
//! of threads submit at once and the completion thread feeds completions in batches.
//!
//! A request the device plans as a data transfer goes on the ring when the device
//! offers a descriptor that suits its buffer ([`Device::data_fds`]); everything else
//! (blocking operations, devices without descriptors, the thread-pool driver) goes to
//! worker threads, which call [`Device::perform`].
//!
//! Two APIs: blocking calls ([`Runtime::write_at`], [`Runtime::append`],
//! [`Runtime::read_at`], [`Runtime::zone_op`], [`Runtime::flush`]) that borrow the
//! caller's buffer and wait; and asynchronous submission of an [`Io`] that owns its
//! buffer, ending with a callback ([`Runtime::submit`]) or a future
//! ([`Runtime::submit_async`]), the buffer handed back in the [`IoDone`].
//!
//! Zeroing: [`Runtime::write_zeroes`] (as the kernel's `blkdev_issue_zeroout()`:
//! WRITE_ZEROES, or zero buffers on a device without it), the
//! `write_zeroes_unmap_max_bytes` attribute, and [`zeroing`]'s timing functions.

pub mod bench;

mod local;
mod uring;
pub mod vopr;
pub mod zeroing;

pub use local::LocalIo;
pub use zblk_dev::buf::{AlignedBuf, Buffer};

use crossbeam_channel::{Receiver, Sender};
use slab::Slab;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use uring::{Inflight, Uring, WAKE};
use zblk_core::bio::{Bio, BioFlags, Op, ReqId, Request, Status};
use zblk_core::engine::{Action, AttrError, Engine, EngineConfig, EngineStats, ZeroingMethod};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_dev::{Device, DeviceError, DeviceZeroing, IoBuf, Plan, zero_past};

/// Which I/O driver to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// io_uring if the kernel allows it, the thread pool otherwise.
    Auto,
    /// io_uring, or fail.
    IoUring,
    /// A pool of threads doing `pread`/`pwrite`.
    Threads,
}

/// How to run.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeConfig {
    /// Engine settings (policy, queue depth, ...).
    pub engine: EngineConfig,
    /// The I/O driver.
    pub backend: Backend,
    /// Threads for blocking work (flushes, zone management; every I/O with the
    /// thread pool). 0: the queue depth for the thread pool (at most 64), 4 with io_uring.
    pub workers: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig { engine: EngineConfig::default(), backend: Backend::Auto, workers: 0 }
    }
}

/// Whether this kernel lets this process use io_uring (a ring is set up and a NOP
/// goes through it); the error says why not.
pub fn io_uring_available() -> io::Result<()> {
    Uring::new(1).map(|_| ())
}

/// A runtime that could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// io_uring was required and is not available.
    #[error("io_uring is not available: {0}")]
    IoUring(io::Error),
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(io::Error),
    /// The device's zone report, which the engine starts from, failed.
    #[error("{device}: zone report failed: {}: {status}", status.errno_name())]
    ZoneReport {
        /// The device.
        device: String,
        /// Why.
        status: Status,
    },
}

/// What ends a BIO: called once, outside every lock.
enum Done {
    /// A caller's callback: run by [`deliver`], never inside another callback.
    Call(Box<dyn FnOnce(Result<Sector, Status>) + Send>),
    /// A blocking caller waiting on its condition variable: woken at once (waking
    /// submits nothing, so it cannot nest).
    Wake(Arc<Waiter>),
}

impl Done {
    fn run(self, r: Result<Sector, Status>) {
        match self {
            Done::Call(f) => deliver(f, r),
            Done::Wake(w) => {
                *w.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                w.cv.notify_one();
            }
        }
    }
}

/// A completion callback and its result.
type Delivery = (Box<dyn FnOnce(Result<Sector, Status>) + Send>, Result<Sector, Status>);

thread_local! {
    /// Callbacks completed on this thread while one of its callbacks runs: they run
    /// when it returns, in order.
    static DEFERRED: std::cell::RefCell<std::collections::VecDeque<Delivery>> = Default::default();
    /// A callback runs on this thread.
    static DELIVERING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs a completion callback, or queues it when this thread is already inside one.
/// A callback that submits an I/O the engine refuses inline (or one submitted after
/// the runtime closed) gets that completion within its own submission: run there, a
/// chain of such I/Os nests one call per I/O until the stack overflows. Queued, the
/// outermost delivery runs the chain as a loop, in completion order.
fn deliver(f: Box<dyn FnOnce(Result<Sector, Status>) + Send>, r: Result<Sector, Status>) {
    if DELIVERING.with(|d| d.replace(true)) {
        DEFERRED.with(|q| q.borrow_mut().push_back((f, r)));
        return;
    }
    /// Leaves the thread out of delivery even when a callback panics.
    struct Out;
    impl Drop for Out {
        fn drop(&mut self) {
            DELIVERING.with(|d| d.set(false));
        }
    }
    let _out = Out;
    f(r);
    while let Some((f, r)) = DEFERRED.with(|q| q.borrow_mut().pop_front()) {
        f(r);
    }
}

/// A BIO's buffer, lent to the runtime until the BIO completes.
#[derive(Clone, Copy, Debug)]
struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is owned by the BIO's submitter, which keeps it alive and does
// not touch it until the BIO completes; requests use disjoint parts of it.
unsafe impl Send for RawBuf {}

impl RawBuf {
    /// The part of the buffer request `req` moves.
    fn part(self, req: &Request) -> RawBuf {
        let off = (u64::from(req.bio_offset) * SECTOR_SIZE) as usize;
        let len = (u64::from(req.nr_sectors) * SECTOR_SIZE) as usize;
        assert!(off + len <= self.len, "request {req:?} outside its BIO's buffer");
        // SAFETY: in bounds of the buffer, checked above.
        RawBuf { ptr: unsafe { self.ptr.add(off) }, len }
    }
}

struct BioCtx {
    buf: Option<RawBuf>,
    done: Done,
}

struct Core {
    engine: Engine,
    bios: Slab<BioCtx>,
    /// Threads waiting on [`Shared::idle`]: it is signalled only when some wait (a
    /// condition variable's signal is a system call even with no one to wake).
    idle_waiters: usize,
}

enum Job {
    Run { req: Request, plan: Plan, buf: Option<RawBuf> },
    Stop,
}

/// The batching issuer's anticipation timers ([`Action::Anticipate`]): the engine
/// has no clock, this thread is its clock.
enum Timer {
    Arm { at: std::time::Instant, token: u64 },
    Stop,
}

struct Shared {
    device: Arc<dyn Device>,
    geo: Geometry,
    core: Mutex<Core>,
    /// Signalled when no BIO is in the engine.
    idle: Condvar,
    uring: Option<Uring>,
    jobs: Sender<Job>,
    timers: Sender<Timer>,
    /// The device's data descriptors ([`Device::data_fds`]), valid while `device`
    /// lives.
    direct: Option<(RawFd, u64)>,
    buffered: Option<RawFd>,
    stopping: AtomicBool,
}

/// A pump's working vectors, kept by each thread between its pumps.
#[derive(Default)]
struct Scratch {
    issues: Vec<(Request, Option<RawBuf>)>,
    dones: Vec<(Done, Result<Sector, Status>)>,
    reports: Vec<ZoneNo>,
    results: Vec<(ReqId, Result<Sector, Status>)>,
    answers: Vec<(ZoneNo, Result<ZoneInfo, Status>)>,
}

thread_local! {
    /// The vectors of this thread's last pump (none while one runs).
    static SCRATCH: std::cell::Cell<Option<Scratch>> = const { std::cell::Cell::new(None) };
    /// This thread is the io_uring completion thread: its next wait submits too.
    static REAPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread is inside [`Runtime::batch`]: entries queued on the ring are
    /// submitted once, when the batch ends (as the kernel's blk_start_plug() /
    /// blk_finish_plug() batch a task's requests).
    static BATCH: std::cell::Cell<(u32, bool)> = const { std::cell::Cell::new((0, false)) };
}

impl Shared {
    fn submit_io(&self, io: Io, done: impl FnOnce(IoDone) + Send + 'static) {
        let Io { op, sector, nr_sectors, flags, mut buf } = io;
        if self.stopping.load(Ordering::Acquire) {
            // Submitted while the runtime closes: a caller bug, answered with EIO.
            deliver(Box::new(move |result| done(IoDone { result, buf })), Err(Status::IoErr));
            return;
        }
        let raw = buf.as_mut().map(|b| {
            let s = b.as_mut_slice();
            RawBuf { ptr: s.as_mut_ptr(), len: s.len() }
        });
        let bio = Bio { op, sector, nr_sectors, flags, user_data: 0 };
        // The buffer moves into the callback: its heap memory, which `raw` points
        // to, stays where it is until the callback hands it back.
        self.submit_bio(bio, raw, Done::Call(Box::new(move |result| done(IoDone { result, buf }))));
    }

    fn batch<R>(&self, f: impl FnOnce() -> R) -> R {
        BATCH.with(|b| {
            let (d, pending) = b.get();
            b.set((d + 1, pending));
        });
        let r = f();
        let (d, pending) = BATCH.with(|b| b.get());
        BATCH.with(|b| b.set((d - 1, pending && d > 1)));
        if d == 1 && pending {
            if let Some(u) = &self.uring {
                let r = u.submit();
                assert!(r.is_ok(), "io_uring submission failed: {r:?}");
            }
        }
        r
    }

    fn lock_core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn submit_bio(&self, mut bio: Bio, buf: Option<RawBuf>, done: Done) {
        let mut core = self.lock_core();
        let key = core.bios.insert(BioCtx { buf, done });
        bio.user_data = key as u64;
        core.engine.submit(bio);
        self.pump(core);
    }

    fn complete_one(&self, id: ReqId, result: Result<Sector, Status>) {
        let mut core = self.lock_core();
        core.engine.complete(id, result);
        self.pump(core);
    }

    fn complete_many(&self, results: &mut Vec<(ReqId, Result<Sector, Status>)>) {
        let mut core = self.lock_core();
        for (id, r) in results.drain(..) {
            core.engine.complete(id, r);
        }
        self.pump(core);
    }

    /// Carries out the engine's actions until it has none: drains them under the
    /// lock, then starts requests, calls completions and answers zone reports
    /// outside it, and feeds what that produced back in.
    fn pump<'a>(&'a self, mut core: MutexGuard<'a, Core>) {
        // The thread's vectors from its last pump: a request's trip through the engine
        // then allocates nothing here. (A pump nested in a callback finds none and
        // makes its own.)
        let mut sc = SCRATCH.with(|s| s.take()).unwrap_or_default();
        loop {
            while let Some(action) = core.engine.poll_action() {
                match action {
                    Action::Issue(req) => {
                        let buf = core.bios[req.user_data as usize].buf.map(|b| b.part(&req));
                        sc.issues.push((req, buf));
                    }
                    Action::Complete(c) => {
                        let ctx = core.bios.remove(c.user_data as usize);
                        sc.dones.push((ctx.done, c.result));
                    }
                    Action::ReportZone(z) => sc.reports.push(z),
                    Action::Anticipate { token, ns } => {
                        let at = std::time::Instant::now() + std::time::Duration::from_nanos(ns);
                        // Unbounded: never blocks under the lock. If the timer thread
                        // is gone the runtime is closing and nothing waits.
                        let _ = self.timers.send(Timer::Arm { at, token });
                    }
                }
            }
            if core.bios.is_empty() && core.idle_waiters > 0 {
                self.idle.notify_all();
            }
            drop(core);
            let mut queued = false;
            for (req, buf) in sc.issues.drain(..) {
                match self.start(req, buf) {
                    Started::Ring => queued = true,
                    Started::Local | Started::Worker => {}
                    Started::Done(r) => sc.results.push((req.id, r)),
                }
            }
            if let (true, Some(u)) = (queued, &self.uring) {
                let (depth, _) = BATCH.with(|b| b.get());
                if depth > 0 {
                    BATCH.with(|b| b.set((depth, true)));
                } else if !REAPER.with(|r| r.get()) {
                    // (The completion thread's next wait submits what it queued.)
                    let r = u.submit();
                    assert!(r.is_ok(), "io_uring submission failed: {r:?}");
                }
            }
            for (done, r) in sc.dones.drain(..) {
                done.run(r);
            }
            for z in sc.reports.drain(..) {
                sc.answers.push((z, self.device.report_zone(self.geo.zone_start(z))));
            }
            if sc.results.is_empty() && sc.answers.is_empty() {
                break;
            }
            core = self.lock_core();
            for (id, r) in sc.results.drain(..) {
                core.engine.complete(id, r);
            }
            for (z, answer) in sc.answers.drain(..) {
                match answer {
                    Ok(info) => core.engine.zone_report(&info),
                    Err(s) => core.engine.zone_report_failed(z, s),
                }
            }
        }
        SCRATCH.with(|s| s.set(Some(sc)));
    }

    /// Device-side checks, then the request goes to a ring (the calling thread's own,
    /// [`local`], or the runtime's), is carried out here (a device that works in
    /// memory), or goes to a worker.
    fn start(&self, req: Request, buf: Option<RawBuf>) -> Started {
        let plan = match self.device.prepare(&req) {
            Ok(plan) => plan,
            Err(status) => return Started::Done(Err(status)),
        };
        if let (Plan::Transfer(t), Some(b)) = (plan, buf) {
            let direct = match self.direct {
                Some((fd, a)) if (b.ptr as u64) % a == 0 && (b.len as u64) % a == 0 && t.offset % a == 0 => Some(fd),
                _ => None,
            };
            if let Some(fd) = direct.or(self.buffered) {
                let r = match local::take(self, Inflight { req, t, ptr: b.ptr, len: b.len, fd }) {
                    None => return Started::Local,
                    Some(r) => r,
                };
                if let Some(u) = &self.uring {
                    u.push_rw(Box::new(r));
                    return Started::Ring;
                }
            }
        }
        if self.device.inline() {
            // SAFETY: as in worker_loop: the request's part of its BIO's buffer.
            return Started::Done(self.device.perform(&req, plan, unsafe { iobuf(req.op, buf) }));
        }
        let sent = self.jobs.send(Job::Run { req, plan, buf });
        assert!(sent.is_ok(), "worker threads gone while requests are issued");
        Started::Worker
    }

    /// Ends a transfer a ring carried: a short one is finished synchronously, a read
    /// zeroed past the write pointer, and the device records the outcome.
    fn finish_transfer(&self, r: &Inflight, res: i32) -> Result<Sector, Status> {
        let io = transfer_result(r, res);
        if !r.t.write {
            // SAFETY: the request's part of its BIO's buffer, as in worker_loop.
            zero_past(unsafe { std::slice::from_raw_parts_mut(r.ptr, r.len) }, r.t.valid_sectors);
        }
        self.device.finish(&r.req, r.t, io)
    }
}

/// Where [`Shared::start`] sent a request.
enum Started {
    /// On the runtime's ring: submitted when the batch ends.
    Ring,
    /// On the calling thread's ring ([`local`]).
    Local,
    /// To a worker thread.
    Worker,
    /// Already over (refused, or carried out here): its result.
    Done(Result<Sector, Status>),
}

/// The data of a request as a device takes it.
///
/// # Safety
/// `buf` must be the request's part of its BIO's buffer, valid and used by nobody
/// else until the request completes.
unsafe fn iobuf<'a>(op: Op, buf: Option<RawBuf>) -> IoBuf<'a> {
    // SAFETY: the caller's guarantee.
    match (buf, op) {
        (Some(b), Op::Read) => IoBuf::Read(unsafe { std::slice::from_raw_parts_mut(b.ptr, b.len) }),
        (Some(b), _) => IoBuf::Write(unsafe { std::slice::from_raw_parts(b.ptr, b.len) }),
        (None, _) => IoBuf::None,
    }
}

/// Expires anticipations when their time has come (earliest first).
fn timer_loop(sh: Arc<Shared>, rx: Receiver<Timer>) {
    use std::cmp::Reverse;
    let mut armed: std::collections::BinaryHeap<Reverse<(std::time::Instant, u64)>> = Default::default();
    loop {
        let msg = match armed.peek() {
            None => rx.recv().ok(),
            Some(Reverse((at, _))) => match rx.recv_timeout(at.saturating_duration_since(std::time::Instant::now())) {
                Ok(m) => Some(m),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    let now = std::time::Instant::now();
                    let mut core = sh.lock_core();
                    while let Some(&Reverse((at, token))) = armed.peek() {
                        if at > now {
                            break;
                        }
                        armed.pop();
                        core.engine.anticipation_expired(token);
                    }
                    sh.pump(core);
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => None,
            },
        };
        match msg {
            Some(Timer::Arm { at, token }) => armed.push(Reverse((at, token))),
            Some(Timer::Stop) | None => return,
        }
    }
}

fn worker_loop(sh: Arc<Shared>, rx: Receiver<Job>) {
    let mut results = Vec::with_capacity(1);
    while let Ok(Job::Run { req, plan, buf }) = rx.recv() {
        // SAFETY: the buffer is the request's part of its BIO's buffer, valid and
        // untouched by anyone else until the BIO completes (after this request).
        let r = sh.device.perform(&req, plan, unsafe { iobuf(req.op, buf) });
        results.push((req.id, r));
        sh.complete_many(&mut results);
    }
}

fn completion_loop(sh: Arc<Shared>) {
    REAPER.with(|r| r.set(true));
    let u = sh.uring.as_ref().expect("completion thread without a ring");
    let mut batch = Vec::new();
    let mut results = Vec::new();
    loop {
        batch.clear();
        let r = u.reap(&mut batch);
        assert!(r.is_ok(), "io_uring wait failed: {r:?}");
        let mut stop = false;
        for &(token, res) in &batch {
            if token == WAKE {
                stop |= sh.stopping.load(Ordering::Acquire);
                continue;
            }
            // SAFETY: every other token is a request pushed by push_rw, reaped once.
            let r = unsafe { uring::take(token) };
            results.push((r.req.id, sh.finish_transfer(&r, res)));
        }
        if !results.is_empty() {
            sh.complete_many(&mut results);
        }
        if stop {
            return;
        }
    }
}

/// The outcome of a ring read or write: a short transfer is finished synchronously.
fn transfer_result(r: &Inflight, res: i32) -> io::Result<()> {
    if res < 0 {
        return Err(io::Error::from_raw_os_error(-res));
    }
    let mut done = res as usize;
    // SAFETY: the descriptor is the device's, open while the runtime runs.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(r.fd) };
    while done < r.len {
        let off = r.t.offset + done as u64;
        // SAFETY: the request's part of its BIO's buffer, as in worker_loop.
        let n = unsafe {
            if !r.t.write {
                rustix::io::pread(fd, std::slice::from_raw_parts_mut(r.ptr.add(done), r.len - done), off)
            } else {
                rustix::io::pwrite(fd, std::slice::from_raw_parts(r.ptr.add(done), r.len - done), off)
            }
        }?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short transfer"));
        }
        done += n;
    }
    Ok(())
}

/// The I/O driver in words: io_uring or threads, and how data moves (`direct`: the
/// alignment of the device's `O_DIRECT` descriptor; `buffered`: it has a page cache
/// one for the rest).
fn describe(uring: bool, direct: Option<u64>, buffered: bool, workers: usize, inline: bool) -> String {
    let data = match (direct, buffered) {
        (None, false) if inline => return "inline on the submitting thread (the device works in memory)".to_string(),
        (Some(a), true) if uring => format!("O_DIRECT (aligned to {a} bytes; unaligned I/O buffered)"),
        (Some(a), false) if uring => format!("O_DIRECT (aligned to {a} bytes; unaligned I/O bounced by workers)"),
        (Some(a), _) => format!("O_DIRECT (aligned to {a} bytes)"),
        (None, true) => {
            "buffered (no O_DIRECT: the file system refuses it, or its alignment exceeds a block)".to_string()
        }
        (None, false) => return format!("{workers} threads (the device moves its own data)"),
    };
    match uring {
        true => format!("io_uring, {data}"),
        false => format!("{workers} threads with pread/pwrite, {data}"),
    }
}

/// How [`Runtime::write_zeroes`] may zero a range (the kernel's `BLKDEV_ZERO_*`
/// flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroingFlags {
    /// Never deallocate: the device must write the zeroes (`BLKDEV_ZERO_NOUNMAP`,
    /// REQ_NOUNMAP on every request).
    pub nounmap: bool,
    /// On a device without WRITE_ZEROES, fail with EOPNOTSUPP instead of writing
    /// buffers of zeroes (`BLKDEV_ZERO_NOFALLBACK`).
    pub no_fallback: bool,
}

/// What [`Runtime::write_zeroes`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ZeroingReport {
    /// How the range was zeroed, as the block layer sees it: `unmap`,
    /// `write-zeroes` (the device wrote zeroes) or `zero-buffers` (no WRITE_ZEROES:
    /// ordinary writes of zeroes).
    pub method: ZeroingMethod,
    /// How the device carried out the WRITE_ZEROES requests; `None` for zero buffers.
    pub device_method: Option<DeviceZeroing>,
    /// Bytes zeroed.
    pub bytes: u64,
}

/// The largest WRITE_ZEROES BIO [`Runtime::write_zeroes`] submits at once (the
/// engine splits it further): 1 TiB, a whole number of 4 KiB blocks within a BIO's
/// 32-bit sector count.
const MAX_ZEROES_BIO_SECTORS: u64 = 1 << 31;

/// Bytes per write when zeroes are written as ordinary writes.
const ZERO_BUFFER_BYTES: usize = 4 << 20;

/// One asynchronous I/O: an operation and, for reads and writes, the buffer it owns
/// until it completes.
#[derive(Debug)]
pub struct Io {
    op: Op,
    sector: Sector,
    nr_sectors: u32,
    flags: BioFlags,
    buf: Option<Buffer>,
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

#[derive(Default)]
struct FutState {
    done: Option<IoDone>,
    waker: Option<Waker>,
}

/// A future resolving to an [`IoDone`]. Any executor can poll it; the runtime's
/// completion path wakes it.
pub struct IoFuture {
    st: Arc<Mutex<FutState>>,
}

impl Future for IoFuture {
    type Output = IoDone;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<IoDone> {
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

#[derive(Default)]
struct Waiter {
    result: Mutex<Option<Result<Sector, Status>>>,
    cv: Condvar,
}

/// Submits to a [`Runtime`] without borrowing it: clonable, `'static`, usable from
/// completion callbacks. After the runtime has closed, I/Os complete with EIO.
#[derive(Clone)]
pub struct Submitter {
    shared: std::sync::Weak<Shared>,
}

impl std::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Submitter")
    }
}

impl Submitter {
    /// As [`Runtime::submit`].
    pub fn submit(&self, io: Io, done: impl FnOnce(IoDone) + Send + 'static) {
        match self.shared.upgrade() {
            Some(sh) => sh.submit_io(io, done),
            None => {
                let buf = io.buf;
                deliver(Box::new(move |result| done(IoDone { result, buf })), Err(Status::IoErr));
            }
        }
    }

    /// As [`Runtime::batch`].
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

/// The threaded runtime over one device. See the module documentation.
pub struct Runtime {
    shared: Option<Arc<Shared>>,
    threads: Vec<JoinHandle<()>>,
    workers: usize,
    description: String,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("backend", &self.description).finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts a runtime on `device`: an engine built from the device's zone report
    /// (as the kernel revalidates zones), the I/O driver `cfg` asks for, its threads.
    /// To keep a handle on the device (to look at it while the runtime runs), give an
    /// `Arc` of it.
    pub fn start<D: Device + 'static>(device: D, cfg: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let device: Arc<dyn Device> = Arc::new(device);
        let geo = device.geometry().clone();
        let zones = device.zones().map_err(|status| RuntimeError::ZoneReport { device: device.name(), status })?;
        let engine = Engine::new(&geo, cfg.engine, &zones);
        let fds = device.data_fds();
        let direct = fds.direct.map(|(fd, a)| (fd.as_raw_fd(), a));
        let buffered = fds.buffered.map(|fd| fd.as_raw_fd());
        let has_fds = direct.is_some() || buffered.is_some();
        let uring = match cfg.backend {
            Backend::Threads => None,
            Backend::IoUring if !has_fds => {
                return Err(RuntimeError::IoUring(io::Error::other(format!(
                    "{} offers no descriptor for io_uring to move data through",
                    device.name()
                ))));
            }
            Backend::IoUring => Some(Uring::new(cfg.engine.queue_depth).map_err(RuntimeError::IoUring)?),
            // A ring would carry nothing for a device without descriptors.
            Backend::Auto if !has_fds => None,
            Backend::Auto => Uring::new(cfg.engine.queue_depth).ok(),
        };
        let workers = match (cfg.workers, &uring) {
            // Every request runs on its submitting thread: none to hand over.
            (0, _) if device.inline() => 0,
            (0, Some(_)) => 4,
            (0, None) => cfg.engine.queue_depth.clamp(1, 64) as usize,
            (n, _) => n,
        };
        let description =
            describe(uring.is_some(), direct.map(|(_, a)| a), buffered.is_some(), workers, device.inline());
        let description = match (&uring, cfg.backend, has_fds) {
            (None, Backend::Auto, true) => format!("{description} (io_uring is not available)"),
            _ => description,
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        let (timers, timer_rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            device,
            geo,
            core: Mutex::new(Core { engine, bios: Slab::new(), idle_waiters: 0 }),
            idle: Condvar::new(),
            uring,
            jobs: tx,
            timers,
            direct,
            buffered,
            stopping: AtomicBool::new(false),
        });
        let mut rt = Runtime { shared: Some(shared.clone()), threads: Vec::new(), workers, description };
        for i in 0..workers {
            let (sh, rx) = (shared.clone(), rx.clone());
            let t = std::thread::Builder::new().name(format!("zblk-worker-{i}")).spawn(move || worker_loop(sh, rx));
            rt.threads.push(t.map_err(RuntimeError::Thread)?);
        }
        if shared.uring.is_some() {
            let sh = shared.clone();
            let t = std::thread::Builder::new().name("zblk-completion".into()).spawn(move || completion_loop(sh));
            rt.threads.push(t.map_err(RuntimeError::Thread)?);
        }
        let sh = shared.clone();
        let t = std::thread::Builder::new().name("zblk-timer".into()).spawn(move || timer_loop(sh, timer_rx));
        rt.threads.push(t.map_err(RuntimeError::Thread)?);
        Ok(rt)
    }

    fn sh(&self) -> &Shared {
        self.shared.as_ref().expect("runtime is running")
    }

    /// Which I/O driver runs, in words: io_uring or threads, `O_DIRECT` or buffered.
    pub fn backend(&self) -> &str {
        &self.description
    }

    /// Whether io_uring is in use.
    pub fn uses_io_uring(&self) -> bool {
        self.sh().uring.is_some()
    }

    /// The device.
    pub fn device(&self) -> &dyn Device {
        &*self.sh().device
    }

    /// The device geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.sh().geo
    }

    /// Engine counters.
    pub fn engine_stats(&self) -> EngineStats {
        self.sh().lock_core().engine.stats()
    }

    /// Submits `io`; `done` is called once with its [`IoDone`], from whichever thread
    /// completes it (possibly this one, before `submit` returns, if it is refused).
    /// Called from inside another callback, a submission that completes at once has
    /// its callback run after that callback returns, never inside it: chains of I/Os
    /// submitted from callbacks run as a loop, however many are refused inline.
    pub fn submit(&self, io: Io, done: impl FnOnce(IoDone) + Send + 'static) {
        self.sh().submit_io(io, done);
    }

    /// Runs `f`, which submits I/Os from this thread, and hands everything it queued
    /// on the ring to the kernel at once when it returns: one system call for a batch
    /// of submissions instead of one each.
    pub fn batch<R>(&self, f: impl FnOnce() -> R) -> R {
        self.sh().batch(f)
    }

    /// A handle that submits to this runtime from anywhere, completion callbacks
    /// included (which cannot borrow the runtime): callbacks can chain I/Os.
    pub fn submitter(&self) -> Submitter {
        Submitter { shared: Arc::downgrade(self.shared.as_ref().expect("runtime is running")) }
    }

    /// Submits `io` and returns a future of its [`IoDone`].
    pub fn submit_async(&self, io: Io) -> IoFuture {
        let st = Arc::new(Mutex::new(FutState::default()));
        let st2 = st.clone();
        self.submit(io, move |d| {
            let mut s = st2.lock().unwrap_or_else(|p| p.into_inner());
            s.done = Some(d);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        });
        IoFuture { st }
    }

    /// Submits a BIO on a borrowed buffer and waits for it.
    fn wait_bio(
        &self,
        op: Op,
        sector: Sector,
        flags: BioFlags,
        buf: Option<&mut [u8]>,
        nr: u32,
    ) -> Result<Sector, Status> {
        let raw = buf.map(|b| RawBuf { ptr: b.as_mut_ptr(), len: b.len() });
        let w = Arc::new(Waiter::default());
        let bio = Bio { op, sector, nr_sectors: nr, flags, user_data: 0 };
        // The caller's buffer is borrowed for this call, and the call returns only
        // once the BIO has completed: no request can use it afterwards.
        self.sh().submit_bio(bio, raw, Done::Wake(w.clone()));
        let mut g = w.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            g = w.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn sectors_of(len: usize) -> Result<u32, Status> {
        let len = len as u64;
        if len == 0 || len % SECTOR_SIZE != 0 {
            return Err(Status::Invalid);
        }
        u32::try_from(len >> SECTOR_SHIFT).map_err(|_| Status::Invalid)
    }

    /// Writes `data` at `sector` and waits.
    pub fn write_at(&self, sector: Sector, data: &[u8]) -> Result<(), Status> {
        self.write_at_flags(sector, data, BioFlags::NONE)
    }

    /// Writes `data` at `sector` with `flags` (FUA: durable when it returns) and waits.
    pub fn write_at_flags(&self, sector: Sector, data: &[u8], flags: BioFlags) -> Result<(), Status> {
        let nr = Runtime::sectors_of(data.len())?;
        // The write path never writes into the buffer: the mutable pointer is only
        // the common currency of reads and writes.
        let ptr = data.as_ptr().cast_mut();
        // SAFETY: `data` is valid for `data.len()` bytes during this call, and the
        // runtime only reads through the pointer of a write.
        let buf = unsafe { std::slice::from_raw_parts_mut(ptr, data.len()) };
        self.wait_bio(Op::Write, sector, flags, Some(buf), nr).map(|_| ())
    }

    /// Appends `data` to the zone starting at `zone_start`, waits, and returns the
    /// sector where the data was written.
    pub fn append(&self, zone_start: Sector, data: &[u8]) -> Result<Sector, Status> {
        self.append_flags(zone_start, data, BioFlags::NONE)
    }

    /// [`Runtime::append`] with flags.
    pub fn append_flags(&self, zone_start: Sector, data: &[u8], flags: BioFlags) -> Result<Sector, Status> {
        let nr = Runtime::sectors_of(data.len())?;
        let ptr = data.as_ptr().cast_mut();
        // SAFETY: as in write_at_flags.
        let buf = unsafe { std::slice::from_raw_parts_mut(ptr, data.len()) };
        self.wait_bio(Op::ZoneAppend, zone_start, flags, Some(buf), nr)
    }

    /// Reads `buf.len()` bytes at `sector` and waits.
    pub fn read_at(&self, sector: Sector, buf: &mut [u8]) -> Result<(), Status> {
        let nr = Runtime::sectors_of(buf.len())?;
        self.wait_bio(Op::Read, sector, BioFlags::NONE, Some(buf), nr).map(|_| ())
    }

    /// A zone management operation (RESET, OPEN, CLOSE, FINISH on the zone starting
    /// at `zone_start`; RESET_ALL) through the engine, and waits.
    pub fn zone_op(&self, op: Op, zone_start: Sector) -> Result<(), Status> {
        if !op.is_zone_mgmt() {
            return Err(Status::Invalid);
        }
        self.wait_bio(op, zone_start, BioFlags::NONE, None, 0).map(|_| ())
    }

    /// Makes every completed write durable, with its write pointer, and waits.
    pub fn flush(&self) -> Result<(), Status> {
        self.wait_bio(Op::Flush, Sector::ZERO, BioFlags::NONE, None, 0).map(|_| ())
    }

    /// Makes `nr_sectors` at `sector` read as zeroes and waits, as the kernel's
    /// `blkdev_issue_zeroout()`: WRITE_ZEROES BIOs (the engine splits them at
    /// `write_zeroes_max_bytes` and zone boundaries; on a sequential zone the range
    /// must start at the write pointer and moves it, as a write), unmapped where the
    /// device can and `flags.nounmap` allows; on a device without WRITE_ZEROES,
    /// ordinary writes of zero buffers, unless `flags.no_fallback` (then EOPNOTSUPP).
    /// A range not aligned to the logical block size, empty or past the end fails
    /// with EINVAL.
    pub fn write_zeroes(&self, sector: Sector, nr_sectors: u64, flags: ZeroingFlags) -> Result<ZeroingReport, Status> {
        let bytes = nr_sectors.checked_mul(SECTOR_SIZE).ok_or(Status::Invalid)?;
        if nr_sectors == 0 || sector.0.checked_add(nr_sectors).is_none_or(|end| end > self.geometry().nr_sectors()) {
            return Err(Status::Invalid);
        }
        let method = self.zeroing_method(flags.nounmap);
        if method != ZeroingMethod::ZeroBuffers {
            let bio_flags = if flags.nounmap { BioFlags::NOUNMAP } else { BioFlags::NONE };
            let mut done = 0;
            while done < nr_sectors {
                let n = (nr_sectors - done).min(MAX_ZEROES_BIO_SECTORS) as u32;
                match self.wait_bio(Op::WriteZeroes, sector + done, bio_flags, None, n) {
                    Ok(_) => done += u64::from(n),
                    // The device lost WRITE_ZEROES between the check and the
                    // submission (it never does today): fall back for the rest.
                    Err(e) if e == Status::NotSupported && !flags.no_fallback => {
                        return self.write_zero_buffers(sector + done, nr_sectors - done).map(|_| ZeroingReport {
                            method: ZeroingMethod::ZeroBuffers,
                            device_method: None,
                            bytes,
                        });
                    }
                    Err(e) => return Err(e),
                }
            }
            let device_method = self.device().zeroing(method == ZeroingMethod::WriteZeroes);
            return Ok(ZeroingReport { method, device_method, bytes });
        }
        if flags.no_fallback {
            return Err(Status::NotSupported);
        }
        self.write_zero_buffers(sector, nr_sectors)?;
        Ok(ZeroingReport { method, device_method: None, bytes })
    }

    /// Writes zeroes as data, in large buffers, one after the other (on a sequential
    /// zone each must land at the write pointer the previous one left).
    fn write_zero_buffers(&self, sector: Sector, nr_sectors: u64) -> Result<(), Status> {
        let zeroes = AlignedBuf::zeroed(ZERO_BUFFER_BYTES.min((nr_sectors * SECTOR_SIZE) as usize));
        let per = zeroes.len() as u64 / SECTOR_SIZE;
        let mut done = 0;
        while done < nr_sectors {
            let n = (nr_sectors - done).min(per);
            self.write_at(sector + done, &zeroes[..(n * SECTOR_SIZE) as usize])?;
            done += n;
        }
        Ok(())
    }

    /// The queue attribute `write_zeroes_unmap_max_bytes` (see
    /// [`Engine::write_zeroes_unmap_max_bytes`]).
    pub fn write_zeroes_unmap_max_bytes(&self) -> u64 {
        self.sh().lock_core().engine.write_zeroes_unmap_max_bytes()
    }

    /// Writes `write_zeroes_unmap_max_bytes`: 0 disables unmap (the device then
    /// writes zeroes), the hardware value enables it; anything else is refused with
    /// the engine's reason. Applies to WRITE_ZEROES submitted from now on.
    pub fn set_write_zeroes_unmap_max_bytes(&self, bytes: u64) -> Result<(), AttrError> {
        self.sh().lock_core().engine.set_write_zeroes_unmap_max_bytes(bytes)
    }

    /// How [`Runtime::write_zeroes`] would zero now, as the block layer sees it.
    pub fn zeroing_method(&self, nounmap: bool) -> ZeroingMethod {
        self.sh().lock_core().engine.zeroing_method(nounmap)
    }

    /// How the device would carry out [`Runtime::write_zeroes`] now (for an image:
    /// its fallocate method for unmap, `pwrite-zeroes` for write zeroes); `None` for
    /// zero buffers (ordinary writes).
    pub fn device_zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        match self.zeroing_method(nounmap) {
            ZeroingMethod::Unmap => self.device().zeroing(false),
            ZeroingMethod::WriteZeroes => self.device().zeroing(true),
            ZeroingMethod::ZeroBuffers => None,
        }
    }

    /// All zones as the device reports them now.
    pub fn report_zones(&self) -> Result<Vec<ZoneInfo>, Status> {
        self.device().zones()
    }

    /// The zone holding `sector` as the device reports it now.
    pub fn report_zone(&self, sector: Sector) -> Result<ZoneInfo, Status> {
        self.device().report_zone(sector)
    }

    /// Waits for every I/O, stops the threads, and closes the device (an image:
    /// commit, live table marked clean), saying why if it cannot.
    pub fn close(mut self) -> Result<(), DeviceError> {
        match self.shutdown() {
            Some(device) => device.close(),
            None => Ok(()),
        }
    }

    /// Waits for every I/O and stops the threads; returns the device unless it was
    /// done already.
    fn shutdown(&mut self) -> Option<Arc<dyn Device>> {
        let shared = self.shared.take()?;
        {
            let mut core = shared.lock_core();
            core.idle_waiters += 1;
            while !core.bios.is_empty() {
                core = shared.idle.wait(core).unwrap_or_else(|p| p.into_inner());
            }
            core.idle_waiters -= 1;
            // Idle: the engine's invariants cost O(plugs) here.
            core.engine.check_invariants();
        }
        shared.stopping.store(true, Ordering::Release);
        for _ in 0..self.workers {
            let _ = shared.jobs.send(Job::Stop);
        }
        let _ = shared.timers.send(Timer::Stop);
        if let Some(u) = &shared.uring {
            u.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // A submitter's call that raced with closing may still hold the runtime for
        // a moment.
        let mut shared = shared;
        let shared = loop {
            match Arc::try_unwrap(shared) {
                Ok(s) => break s,
                Err(s) => {
                    shared = s;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        };
        Some(shared.device)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        drop(self.shutdown());
    }
}
