//! The [`Runtime`] handle: starting one on a device (the engine from the device's zone
//! report, the I/O driver, the worker, timer and completion threads), what it runs
//! on, asynchronous submission, and closing it (every BIO drained, threads stopped,
//! the device closed).

use crate::config::{Backend, RuntimeConfig, RuntimeError};
use crate::failstop::{panic_text, run_thread};
use crate::io::{FutState, Io, IoDone, IoFuture, Submitter};
use crate::mapped::MappedFile;
use crate::shared::{Core, Job, Shared, Timer};
use crate::threads::{completion_loop, timer_loop, worker_loop};
use crate::uring::{Completions, RingStats, Uring};
use crossbeam_channel::Receiver;
use slab::Slab;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use zblk_core::bio::Status;
use zblk_core::engine::{Engine, EngineStats};
use zblk_core::geometry::Geometry;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneInfo;
use zblk_dev::buf::{AlignedBuf, Region};
use zblk_dev::{Device, DeviceError};

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

/// The runtime's ring, as `cfg.backend` asks: none for the thread pool, none for a
/// device without data descriptors (a ring would carry nothing), a refusal when
/// io_uring is required and cannot be had.
fn open_ring(
    device: &dyn Device,
    cfg: &RuntimeConfig,
    has_fds: bool,
) -> Result<Option<(Arc<Uring>, Completions)>, RuntimeError> {
    // A device whose transfers are passthrough commands needs the wide entries.
    let wide = device.uring_cmd().is_some();
    Ok(match cfg.backend {
        Backend::Threads => None,
        Backend::IoUring if !has_fds => {
            return Err(RuntimeError::IoUring(io::Error::other(format!(
                "{} offers no descriptor for io_uring to move data through",
                device.name()
            ))));
        }
        Backend::IoUring => Some(Uring::new(cfg.engine.queue_depth, wide).map_err(RuntimeError::IoUring)?),
        // A ring would carry nothing for a device without descriptors.
        Backend::Auto if !has_fds => None,
        Backend::Auto => Uring::new(cfg.engine.queue_depth, wide).ok(),
    })
}

/// How many worker threads: as configured, or by default 4 beside a ring (which
/// carries the transfers), the queue depth (at most 64) without one, and none for a
/// device that works inline.
fn worker_count(device: &dyn Device, cfg: &RuntimeConfig, uring: bool) -> usize {
    match (cfg.workers, uring) {
        // Every request runs on its submitting thread: none to hand over.
        (0, _) if device.inline() => 0,
        (0, true) => 4,
        (0, false) => cfg.engine.queue_depth.clamp(1, 64) as usize,
        (n, _) => n,
    }
}

/// The threaded runtime over one device. See the crate documentation.
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
        if let Some(why) = cfg.engine.policy.refusal_on(device.keeps_zone_order()) {
            return Err(RuntimeError::Policy { device: device.name(), why });
        }
        let zones = device.zones().map_err(|status| RuntimeError::ZoneReport { device: device.name(), status })?;
        let engine = Engine::new(&geo, cfg.engine, &zones);
        let fds = device.data_fds();
        let direct = fds.direct.map(|(fd, a)| (fd.as_raw_fd(), a));
        let buffered = fds.buffered.map(|fd| fd.as_raw_fd());
        // A passthrough device moves its data through the ring too.
        let has_fds = direct.is_some() || buffered.is_some() || device.uring_cmd().is_some();
        let (uring, completions) = open_ring(&*device, &cfg, has_fds)?.unzip();
        let workers = worker_count(&*device, &cfg, uring.is_some());
        let description =
            describe(uring.is_some(), direct.map(|(_, a)| a), buffered.is_some(), workers, device.inline());
        let description = match &uring {
            Some(u) if u.wide() => "io_uring NVMe passthrough (IORING_OP_URING_CMD, 128-byte entries)".to_string(),
            _ => description,
        };
        let description = match (&uring, cfg.backend, has_fds) {
            (None, Backend::Auto, true) => format!("{description} (io_uring is not available)"),
            _ => description,
        };
        let data_fd = direct.map(|(fd, _)| fd).or(buffered);
        let memory_file = in_memory(data_fd);
        let completions = completions.map(|mut c| {
            c.take_posted(memory_file);
            c
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let (timers, timer_rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            inline: device.inline(),
            device,
            geo,
            core: Mutex::new(Core { engine, bios: Slab::new(), idle_waiters: 0 }),
            idle: Condvar::new(),
            uring,
            jobs: tx,
            timers,
            direct,
            buffered,
            memory_file,
            mapped: memory_file.then(|| data_fd.and_then(MappedFile::new)).flatten(),
            stopping: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            why: Default::default(),
            busy: Default::default(),
            batches: Default::default(),
        });
        let mut rt = Runtime { shared: Some(shared.clone()), threads: Vec::new(), workers, description };
        let spawned = rt.spawn_threads(&shared, &rx, timer_rx, completions, cfg.poll);
        // Before `rt` can drop: its shutdown waits until it holds the last reference
        // to the shared state, so a failed spawn must not keep this one.
        drop(shared);
        spawned?;
        Ok(rt)
    }

    /// Starts the workers, the io_uring completion thread (with a ring) and the timer.
    fn spawn_threads(
        &mut self,
        shared: &Arc<Shared>,
        jobs: &Receiver<Job>,
        timer_rx: Receiver<Timer>,
        completions: Option<Completions>,
        poll: Duration,
    ) -> Result<(), RuntimeError> {
        // Each thread runs under run_thread: a panic on it fails the runtime
        // (crate::failstop) instead of leaving the BIOs it held waiting for ever.
        for i in 0..self.workers {
            let (sh, rx) = (shared.clone(), jobs.clone());
            let t = std::thread::Builder::new()
                .name(format!("zblk-worker-{i}"))
                .spawn(move || run_thread(sh, |sh| worker_loop(sh, rx)));
            self.threads.push(t.map_err(RuntimeError::Thread)?);
        }
        if let Some(cq) = completions {
            // The ring's completion queue moves into its thread, its only reader.
            let sh = shared.clone();
            let t = std::thread::Builder::new()
                .name("zblk-completion".into())
                .spawn(move || run_thread(sh, move |sh| completion_loop(sh, cq, poll)));
            self.threads.push(t.map_err(RuntimeError::Thread)?);
        }
        let sh = shared.clone();
        let t = std::thread::Builder::new()
            .name("zblk-timer".into())
            .spawn(move || run_thread(sh, |sh| timer_loop(sh, timer_rx)));
        self.threads.push(t.map_err(RuntimeError::Thread)?);
        Ok(())
    }

    /// The shared state (the runtime runs until it is closed or dropped).
    pub(crate) fn sh(&self) -> &Shared {
        self.shared.as_ref().expect("runtime is running")
    }

    /// Batches of completions the io_uring completion thread took so far: found
    /// while polling ([`RuntimeConfig::poll`]), and after a wait in `io_uring_enter`
    /// (both 0 without a ring).
    pub fn completion_batches(&self) -> (u64, u64) {
        let b = &self.sh().batches;
        (b[0].load(Ordering::Relaxed), b[1].load(Ordering::Relaxed))
    }

    /// Buffers of `sizes` bytes for this runtime's I/O (zeroed, aligned for
    /// `O_DIRECT`), cut from one region that the runtime's io_uring ring registers,
    /// when it has one, moves the device's data with `O_DIRECT` and has registered no
    /// other region: the kernel then pins the region's pages once, where a transfer
    /// from or to a buffer of its own pins them on every request (`get_user_pages` on
    /// each `O_DIRECT` read or write). The buffers are plain aligned buffers
    /// otherwise, and usable as any other ([`RingStats::fixed`] counts the transfers
    /// that used the registration). Take them once, for the buffers a workload keeps
    /// reusing (fio's `fixedbufs`).
    ///
    /// A buffered file (an image in tmpfs: `statx` gives no direct I/O alignment
    /// there, so zblk assumes 4 KiB, more than the image's 512-byte blocks, and opens
    /// it buffered; tmpfs's own `O_DIRECT` copies through the page cache anyway) has
    /// nothing to pin: its transfers copy through the page cache, and from a
    /// registered buffer that copy was the slower one (1 MiB writes to an image in
    /// /dev/shm: 5.4-5.9 GB/s from registered buffers, 6.5-7.0 from the same buffers
    /// unregistered; docs/real-io.md, run 16), so such a runtime registers nothing.
    pub fn buffers(&self, sizes: &[usize]) -> Vec<AlignedBuf> {
        let (region, bufs) = Region::carve(sizes);
        if let (Some(u), true) = (&self.sh().uring, self.direct_io()) {
            u.register(&region);
        }
        bufs
    }

    /// How the io_uring ring handed its entries to the kernel so far (`None` without
    /// a ring).
    pub fn ring_stats(&self) -> Option<RingStats> {
        self.sh().uring.as_ref().map(|u| u.stats())
    }

    /// Which I/O driver runs, in words: io_uring or threads, `O_DIRECT` or buffered.
    pub fn backend(&self) -> &str {
        &self.description
    }

    /// Whether io_uring is in use.
    pub fn uses_io_uring(&self) -> bool {
        self.sh().uring.is_some()
    }

    /// Whether the device's data moves with `O_DIRECT` (its aligned transfers at
    /// least), where registered buffers save the kernel pinning pages.
    pub fn direct_io(&self) -> bool {
        self.sh().direct.is_some()
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

    /// The engine's zone write plugs as they are now, for checkers (an idle plug's
    /// `wp_offset` is the host's idea of its zone's write pointer).
    pub fn plugs(&self) -> Vec<zblk_core::engine::PlugView> {
        self.sh().lock_core().engine.plugs().collect()
    }

    /// Submits `io`; `done` is called once with its [`IoDone`], from whichever thread
    /// completes it (possibly this one, before `submit` returns, if it is refused).
    /// Called from inside another callback, a submission that completes at once has
    /// its callback run after that callback returns, never inside it: chains of I/Os
    /// submitted from callbacks run as a loop, however many are refused inline.
    pub fn submit(&self, io: Io, done: impl FnOnce(IoDone) + Send + 'static) {
        self.sh().submit_io(io, done);
    }

    /// As [`Runtime::submit`], the I/O's end going to `sink` as `token`
    /// ([`Completion::complete`](crate::Completion::complete)): no boxed callback per
    /// I/O.
    pub fn submit_to(&self, io: Io, sink: Arc<dyn crate::Completion>, token: u64) {
        self.sh().submit_io_to(io, sink, token);
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
            // Recovered: the slot's fields are only ever assigned whole; a panic under
            // the lock (a waker's own code) leaves them consistent.
            let mut s = st2.lock().unwrap_or_else(|p| p.into_inner());
            s.done = Some(d);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        });
        IoFuture { st }
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
    ///
    /// # Panics
    /// If a thread of the runtime panicked ([`Runtime::failure`]), with its message:
    /// the device is then left as a crash leaves it, not closed.
    pub fn close(mut self) -> Result<(), DeviceError> {
        match self.shutdown() {
            Some(Ok(device)) => device.close(),
            Some(Err(why)) => panic!("{why}"),
            None => Ok(()),
        }
    }

    /// Waits for every I/O and stops the threads; returns the device unless it was
    /// done already, or why the runtime failed (its device forgotten, unclosed).
    fn shutdown(&mut self) -> Option<Result<Arc<dyn Device>, String>> {
        let shared = self.shared.take()?;
        shared.wait_idle();
        shared.stopping.store(true, Ordering::Release);
        for _ in 0..self.workers {
            let _ = shared.jobs.send(Job::Stop);
        }
        let _ = shared.timers.send(Timer::Stop);
        if let Some(u) = &shared.uring {
            u.wake();
        }
        for t in self.threads.drain(..) {
            // A thread's panic is caught where it runs (failstop::run_thread) and
            // kept as the runtime's failure: the join itself does not fail.
            if let Err(p) = t.join() {
                shared.fail(format!("a runtime thread panicked: {}", panic_text(&*p)));
            }
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
        match shared.why.get() {
            None => Some(Ok(shared.device)),
            Some(why) => {
                // Not closed (an image would commit the state of a runtime whose
                // engine broke, and mark it clean): left for the next open to
                // recover, as after a crash.
                std::mem::forget(shared.device);
                Some(Err(format!("the runtime failed: {why}")))
            }
        }
    }
}

impl Drop for Runtime {
    /// Closes the runtime as [`Runtime::close`] does (errors ignored); a failed
    /// runtime's panic is raised again, unless this thread is unwinding already.
    fn drop(&mut self) {
        match self.shutdown() {
            Some(Err(why)) if !std::thread::panicking() => panic!("{why}"),
            _ => {}
        }
    }
}

/// Whether `fd` is a file of a file system that keeps its data in memory (tmpfs,
/// ramfs): reads and writes of it are copies, done faster on the spot than through
/// io_uring, which hands each of them to a worker thread (such a file system cannot
/// write without blocking).
fn in_memory(fd: Option<std::os::fd::RawFd>) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    let Some(fd) = fd else { return false };
    // SAFETY: the device's data descriptor, open while the device lives.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    rustix::fs::fstatfs(fd).is_ok_and(|st| matches!(st.f_type as u64, TMPFS_MAGIC | RAMFS_MAGIC))
}
