//! The state every thread of a runtime shares: the engine under its lock with the
//! context of each BIO in flight, the channels to the workers and the timer, the
//! ring, the device's data descriptors; and the entry points that submit BIOs and
//! complete requests, each taking the lock once and pumping the engine's actions.
//!
//! The plug of [`Runtime::batch`](crate::Runtime::batch) is here too: entries queued
//! on the ring while a thread is plugged are submitted once, when it unplugs.

use crate::callback::{Callback, Completion, Done, deliver};
use crate::io::{Io, IoDone};
use crate::mapped::MappedFile;
use crate::uring::Uring;
use crossbeam_channel::Sender;
use slab::Slab;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use zblk_core::bio::{Bio, ReqId, Request, Status};
use zblk_core::engine::Engine;
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_dev::{Device, Plan};

/// A BIO's buffer, lent to the runtime until the BIO completes.
///
/// A write's buffer comes from the caller's `&[u8]`: the runtime may only read it
/// (the device, the ring's `IORING_OP_WRITE`, a copy into a file's mapping), never
/// write into it, so it is made only by [`RawBuf::reading`] and never becomes a
/// `&mut [u8]`; a read's buffer ([`RawBuf::filling`]) may be written into, by one
/// request at a time for each part of it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBuf {
    /// The first byte. A `*mut` for both kinds, as a kernel's iovec is: whether it
    /// may be written through is `writable`.
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
    /// Lent as `&mut [u8]` (a read fills it): the only kind a `&mut [u8]` is made of.
    /// Private: a `RawBuf` is made only by [`RawBuf::reading`], [`RawBuf::filling`]
    /// and [`RawBuf::part`], so it says how its memory was lent.
    writable: bool,
}

// SAFETY: the buffer is owned by the BIO's submitter, which keeps it alive and does
// not touch it until the BIO completes; requests use disjoint parts of it, each
// carried by one thread at a time (the one that starts, performs or reaps it).
unsafe impl Send for RawBuf {}

impl RawBuf {
    /// The buffer of a write: read by the runtime, never written into.
    pub(crate) fn reading(b: &[u8]) -> RawBuf {
        // The cast does not make it writable: `writable` is false, and every
        // `&mut [u8]` the runtime makes checks it (`RawBuf::bytes_mut`).
        RawBuf { ptr: b.as_ptr().cast_mut(), len: b.len(), writable: false }
    }

    /// The buffer of a read: the runtime fills it.
    pub(crate) fn filling(b: &mut [u8]) -> RawBuf {
        RawBuf { ptr: b.as_mut_ptr(), len: b.len(), writable: true }
    }

    /// The part of the buffer request `req` moves.
    pub(crate) fn part(self, req: &Request) -> RawBuf {
        let off = (u64::from(req.bio_offset) * SECTOR_SIZE) as usize;
        let len = (u64::from(req.nr_sectors) * SECTOR_SIZE) as usize;
        assert!(off + len <= self.len, "request {req:?} outside its BIO's buffer");
        // SAFETY: `off + len <= self.len` (checked above): the pointer stays within
        // the buffer's allocation.
        RawBuf { ptr: unsafe { self.ptr.add(off) }, len, writable: self.writable }
    }

    /// The bytes, to read them.
    ///
    /// # Safety
    /// The buffer is still lent (its BIO has not completed) and no `&mut` to any of
    /// it is live for `'a`.
    pub(crate) unsafe fn bytes<'a>(self) -> &'a [u8] {
        // SAFETY: `ptr..ptr + len` is valid for reads while the buffer is lent; the
        // caller rules out a `&mut` to it for `'a`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, to fill them. Panics for a write's buffer, which came from a
    /// `&[u8]` and must not be written into.
    ///
    /// # Safety
    /// The buffer is still lent and nothing else refers to this part of it for `'a`
    /// (one request moves it, on one thread).
    pub(crate) unsafe fn bytes_mut<'a>(self) -> &'a mut [u8] {
        assert!(self.writable, "a write's buffer (lent as &[u8]) written into");
        // SAFETY: lent as `&mut [u8]` (checked above), valid while lent; the caller
        // guarantees exclusive use for `'a`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// What the runtime keeps of a BIO in flight (the engine knows it by its slab key,
/// the BIO's `user_data`).
pub(crate) struct BioCtx {
    /// Its buffer, which its requests move parts of.
    pub(crate) buf: Option<RawBuf>,
    /// What ends it.
    pub(crate) done: Done,
}

/// What the engine lock guards.
pub(crate) struct Core {
    /// The engine: plugs, write pointers, issuers.
    pub(crate) engine: Engine,
    /// The BIOs in the engine.
    pub(crate) bios: Slab<BioCtx>,
    /// Threads waiting on [`Shared::idle`]: it is signalled only when some wait (a
    /// condition variable's signal is a system call even with no one to wake).
    pub(crate) idle_waiters: usize,
}

/// Work for a worker thread.
pub(crate) enum Job {
    /// Carry out a request the device planned ([`Device::perform`]).
    Run { req: Request, plan: Plan, buf: Option<RawBuf> },
    /// The runtime closes: return.
    Stop,
}

/// The batching issuer's anticipation timers
/// ([`Action::Anticipate`](zblk_core::engine::Action::Anticipate)): the engine has no
/// clock, this thread is its clock.
pub(crate) enum Timer {
    /// Expire anticipation `token` at `at`.
    Arm { at: std::time::Instant, token: u64 },
    /// The runtime closes: return.
    Stop,
}

/// Everything a runtime's threads and handles share.
pub(crate) struct Shared {
    pub(crate) device: Arc<dyn Device>,
    /// The device works in memory ([`Device::inline`], asked once): its requests
    /// are carried out by the thread that pumps, under the engine lock.
    pub(crate) inline: bool,
    pub(crate) geo: Geometry,
    pub(crate) core: Mutex<Core>,
    /// Signalled when no BIO is in the engine.
    pub(crate) idle: Condvar,
    /// The ring's submission side (its completions are the completion thread's,
    /// [`crate::uring::Completions`]).
    pub(crate) uring: Option<Arc<Uring>>,
    pub(crate) jobs: Sender<Job>,
    pub(crate) timers: Sender<Timer>,
    /// The device's data descriptors ([`Device::data_fds`]), valid while `device`
    /// lives.
    pub(crate) direct: Option<(RawFd, u64)>,
    pub(crate) buffered: Option<RawFd>,
    /// The data descriptors are files of a file system in memory (tmpfs, ramfs):
    /// a transfer a thread would carry on its own ring is done there and then, a
    /// copy from or into `mapped` (or `pread`/`pwrite`), see [`crate::local`].
    pub(crate) memory_file: bool,
    /// The file in memory, mapped shared (read-write if its descriptor is):
    /// transfers done on the spot copy from or into it ([`crate::mapped`]).
    pub(crate) mapped: Option<MappedFile>,
    /// The runtime closes: BIOs submitted now complete with EIO.
    pub(crate) stopping: AtomicBool,
    /// A thread of the runtime panicked: nothing touches the engine again, and every
    /// BIO ends with EIO ([`crate::failstop`]).
    pub(crate) broken: AtomicBool,
    /// Why (the first panic's thread and message).
    pub(crate) why: OnceLock<String>,
    /// Requests being carried out outside the engine lock ([`Shared::busy`]).
    pub(crate) busy: AtomicUsize,
    /// Batches of completions the io_uring completion thread took without waiting
    /// (found while polling, [`RuntimeConfig::poll`](crate::RuntimeConfig::poll)),
    /// and after a wait in `io_uring_enter`.
    pub(crate) batches: [AtomicU64; 2],
}

thread_local! {
    /// This thread is inside [`Runtime::batch`](crate::Runtime::batch) (its depth, and
    /// whether entries were queued meanwhile): entries queued on the ring are
    /// submitted once, when the batch ends (as the kernel's blk_start_plug() /
    /// blk_finish_plug() batch a task's requests).
    pub(crate) static BATCH: std::cell::Cell<(u32, bool)> = const { std::cell::Cell::new((0, false)) };
}

impl Shared {
    /// Submits an asynchronous I/O; `done` gets its result and its buffer back.
    pub(crate) fn submit_io(&self, io: Io, done: impl FnOnce(IoDone) + Send + 'static) {
        let Io { op, sector, nr_sectors, flags, mut buf } = io;
        if self.stopping.load(Ordering::Acquire) {
            // Submitted while the runtime closes: a caller bug, answered with EIO.
            deliver(Callback::Boxed(Box::new(move |result| done(IoDone { result, buf }))), Err(Status::IoErr));
            return;
        }
        // The buffer is the runtime's (moved in): lent as writable whatever the
        // operation, as the caller's `&mut [u8]` would be.
        let raw = buf.as_mut().map(|b| RawBuf::filling(b.as_mut_slice()));
        let bio = Bio { op, sector, nr_sectors, flags, user_data: 0 };
        // The buffer moves into the callback: its heap memory, which `raw` points
        // to, stays where it is until the callback hands it back.
        let f = Callback::Boxed(Box::new(move |result| done(IoDone { result, buf })));
        self.submit_bio(bio, raw, Done::Call(f));
    }

    /// Submits an asynchronous I/O whose end goes to `sink` as `token`: no boxed
    /// callback.
    pub(crate) fn submit_io_to(&self, io: Io, sink: Arc<dyn Completion>, token: u64) {
        let Io { op, sector, nr_sectors, flags, mut buf } = io;
        if self.stopping.load(Ordering::Acquire) {
            // Submitted while the runtime closes: a caller bug, answered with EIO.
            deliver(Callback::To { sink, token, buf }, Err(Status::IoErr));
            return;
        }
        // As in submit_io: the buffer is lent writable, and its heap memory stays
        // where it is while the BIO's context holds it.
        let raw = buf.as_mut().map(|b| RawBuf::filling(b.as_mut_slice()));
        let bio = Bio { op, sector, nr_sectors, flags, user_data: 0 };
        self.submit_bio(bio, raw, Done::Call(Callback::To { sink, token, buf }));
    }

    /// Runs `f` plugged: what it queues on the ring is submitted when the outermost
    /// batch of this thread ends (by the completion thread, as [`Shared::submit_queued`]
    /// says).
    pub(crate) fn batch<R>(&self, f: impl FnOnce() -> R) -> R {
        BATCH.with(|b| {
            let (d, pending) = b.get();
            b.set((d + 1, pending));
        });
        let r = f();
        let (d, pending) = BATCH.with(|b| b.get());
        BATCH.with(|b| b.set((d - 1, pending && d > 1)));
        if d == 1 && pending {
            self.submit_queued();
        }
        r
    }

    /// Hands what this thread queued on the ring to the kernel. The completion
    /// thread hands its entries over when enough wait ([`Uring::submit_due`]), the
    /// rest with its next wait, which submits too.
    pub(crate) fn submit_queued(&self) {
        let Some(u) = &self.uring else { return };
        if crate::pump::REAPER.with(|r| r.get()) && !u.submit_due() {
            return;
        }
        let r = u.submit();
        assert!(r.is_ok(), "io_uring submission failed: {r:?}");
    }

    /// Hands `bio` to the engine and carries out what it does about it; ends it with
    /// EIO at once if the runtime has failed ([`crate::failstop`]).
    pub(crate) fn submit_bio(&self, mut bio: Bio, buf: Option<RawBuf>, done: Done) {
        let Some(mut core) = self.lock_for_submit() else {
            return done.run(Err(Status::IoErr));
        };
        let key = core.bios.insert(BioCtx { buf, done });
        bio.user_data = key as u64;
        core.engine.submit(bio);
        self.pump(core);
    }

    /// Completes request `id` in the engine and carries out what follows.
    pub(crate) fn complete_one(&self, id: ReqId, result: Result<Sector, Status>) {
        if self.failed() {
            // Its BIO ends with the others' EIO.
            return;
        }
        let mut core = self.lock_core();
        core.engine.complete(id, result);
        self.pump(core);
    }

    /// Completes a batch of requests under one taking of the lock, emptying `results`.
    pub(crate) fn complete_many(&self, results: &mut Vec<(ReqId, Result<Sector, Status>)>) {
        if self.failed() {
            // Their BIOs end with the others' EIO.
            results.clear();
            return;
        }
        let mut core = self.lock_core();
        for (id, r) in results.drain(..) {
            core.engine.complete(id, r);
        }
        self.pump(core);
    }
}

#[cfg(test)]
mod tests {
    use super::RawBuf;
    use zblk_core::bio::{Op, Request};
    use zblk_core::units::Sector;

    /// The request of sectors `from..from + n` of a BIO at sector 0.
    fn part(from: u32, n: u32) -> Request {
        Request { bio_offset: from, ..Request::direct(Op::Write, Sector(u64::from(from)), n) }
    }

    /// A write's buffer, lent as `&[u8]`, is read in parts and never made a `&mut`
    /// (run under Miri too: docs/ARCHITECTURE.md, "Unsafe code").
    #[test]
    fn a_writes_buffer_is_read_in_parts() {
        let data: Vec<u8> = (0..2048).map(|i| (i / 512) as u8).collect();
        let lent = RawBuf::reading(&data);
        for s in 0..4u32 {
            // SAFETY: `data` outlives the part, and nothing writes it.
            let bytes = unsafe { lent.part(&part(s, 1)).bytes() };
            assert!(bytes.len() == 512 && bytes.iter().all(|&b| u32::from(b) == s));
        }
        // SAFETY: as above.
        assert_eq!(unsafe { lent.part(&part(1, 2)).bytes() }, &data[512..1536]);
        assert_eq!(data[0], 0, "the caller's borrow still reads");
    }

    /// A write's buffer written into is a bug the runtime stops at, not undefined
    /// behaviour.
    #[test]
    #[should_panic(expected = "a write's buffer (lent as &[u8]) written into")]
    fn a_writes_buffer_is_never_made_mutable() {
        let data = vec![0u8; 512];
        // SAFETY: `data` outlives the slice (which is never made).
        let _ = unsafe { RawBuf::reading(&data).bytes_mut() };
    }

    /// A read's buffer is filled in parts, each by its own request.
    #[test]
    fn a_reads_buffer_is_filled_in_parts() {
        let mut data = vec![0u8; 2048];
        let lent = RawBuf::filling(&mut data);
        let (a, b) = (lent.part(&part(0, 2)), lent.part(&part(2, 2)));
        // SAFETY: `data` outlives both parts, which are apart, and is not used
        // meanwhile.
        let (a, b) = unsafe { (a.bytes_mut(), b.bytes_mut()) };
        a.fill(1);
        b.fill(2);
        assert!(data[..1024].iter().all(|&x| x == 1) && data[1024..].iter().all(|&x| x == 2));
    }

    /// A request reaching past its BIO's buffer is refused before any pointer is made.
    #[test]
    #[should_panic(expected = "outside its BIO's buffer")]
    fn a_part_outside_the_buffer_is_refused() {
        let data = vec![0u8; 1024];
        let _ = RawBuf::reading(&data).part(&part(1, 2));
    }
}
