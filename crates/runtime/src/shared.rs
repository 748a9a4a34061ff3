//! The state every thread of a runtime shares: the engine under its lock with the
//! context of each BIO in flight, the channels to the workers and the timer, the
//! ring, the device's data descriptors; and the entry points that submit BIOs and
//! complete requests, each taking the lock once and pumping the engine's actions.
//!
//! The plug of [`Runtime::batch`](crate::Runtime::batch) is here too: entries queued
//! on the ring while a thread is plugged are submitted once, when it unplugs.

use crate::callback::{Done, deliver};
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
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawBuf {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the buffer is owned by the BIO's submitter, which keeps it alive and does
// not touch it until the BIO completes; requests use disjoint parts of it.
unsafe impl Send for RawBuf {}

impl RawBuf {
    /// The part of the buffer request `req` moves.
    pub(crate) fn part(self, req: &Request) -> RawBuf {
        let off = (u64::from(req.bio_offset) * SECTOR_SIZE) as usize;
        let len = (u64::from(req.nr_sectors) * SECTOR_SIZE) as usize;
        assert!(off + len <= self.len, "request {req:?} outside its BIO's buffer");
        // SAFETY: in bounds of the buffer, checked above.
        RawBuf { ptr: unsafe { self.ptr.add(off) }, len }
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
    pub(crate) geo: Geometry,
    pub(crate) core: Mutex<Core>,
    /// Signalled when no BIO is in the engine.
    pub(crate) idle: Condvar,
    pub(crate) uring: Option<Uring>,
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
