//! The io_uring driver: one ring shared by every thread. Submitters push entries under
//! a short lock on the submission queue ([`Uring`]); one completion thread reaps
//! completions, through the ring's one [`Completions`], which it owns: the completion
//! queue has a single consumer (its head is advanced without a lock), and that is
//! what the type enforces.
//! Reads and writes of the data region go through it (`O_DIRECT` when the buffer,
//! offset and length are aligned, the page cache otherwise); everything that may
//! block (flushes, zone management) goes to the worker threads.
//!
//! For a device whose transfers are io_uring passthrough commands (an NVMe generic
//! device: [`zblk_dev::UringCmd`]) the same ring is set up with 128-byte entries and
//! 32-byte completions, which `IORING_OP_URING_CMD` with an NVMe command needs; the
//! rest of the driver is the same (plain entries are widened as they are pushed).

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use zblk_core::bio::Request;
use zblk_dev::Transfer;
use zblk_dev::buf::Region;

use crate::shared::RawBuf;

/// The `user_data` of the entry that wakes the completion thread.
pub(super) const WAKE: u64 = u64::MAX;

/// One request on the ring: what the completion thread needs to end it.
#[derive(Debug)]
pub(super) struct Inflight {
    pub req: Request,
    /// Where the data goes: `t.offset` bytes into `fd`.
    pub t: Transfer,
    /// The request's part of its BIO's buffer (read-only for a write).
    pub buf: RawBuf,
    pub fd: RawFd,
    /// Carried as the device's passthrough command ([`zblk_dev::UringCmd`]), not a
    /// read or write of `fd`.
    pub passthrough: bool,
}

impl Inflight {
    /// The read or write that moves the request's data (its user data is the ring
    /// owner's to set). With `fixed`, the region registered as the ring's buffer 0:
    /// a transfer whose buffer lies in it goes as `READ_FIXED`/`WRITE_FIXED`, which
    /// use the pages the registration pinned instead of pinning them again (the
    /// second value says so).
    pub fn entry(&self, fixed: Option<&Region>) -> (io_uring::squeue::Entry, bool) {
        let (fd, ptr, len, off) = (types::Fd(self.fd), self.buf.ptr, self.buf.len as u32, self.t.offset);
        let registered = fixed.is_some_and(|r| r.offset_of(ptr, self.buf.len).is_some());
        let entry = match (self.t.write, registered) {
            (true, false) => opcode::Write::new(fd, ptr, len).offset(off).build(),
            (false, false) => opcode::Read::new(fd, ptr, len).offset(off).build(),
            (true, true) => opcode::WriteFixed::new(fd, ptr, len, 0).offset(off).build(),
            (false, true) => opcode::ReadFixed::new(fd, ptr, len, 0).offset(off).build(),
        };
        (entry, registered)
    }
}

impl Inflight {
    /// Carries the transfer out with one `pread`/`pwrite` on the calling thread;
    /// returns what a ring's completion would (bytes moved, or a negative errno).
    pub fn run_sync(&self) -> i32 {
        // SAFETY: `fd` is the device's data descriptor, open while the device lives,
        // which outlives its requests.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) };
        // The request's part of its BIO's buffer is lent until the request completes
        // and moved by this request alone, on this thread (as for the ring's entry).
        let r = if self.t.write {
            // SAFETY: lent as above; a write only reads it.
            let data = unsafe { self.buf.bytes() };
            rustix::io::pwrite(fd, data, self.t.offset)
        } else {
            // SAFETY: lent as above, writable (a read's).
            let data = unsafe { self.buf.bytes_mut() };
            rustix::io::pread(fd, data, self.t.offset)
        };
        match r {
            Ok(n) => i32::try_from(n).expect("a request moves less than 2 GiB"),
            Err(e) => -e.raw_os_error(),
        }
    }
}

/// The ring: plain entries, or the wide ones a passthrough command needs.
enum Ring {
    Plain(IoUring),
    Wide(IoUring<squeue::Entry128, cqueue::Entry32>),
}

/// Calls `$f` with the ring, whichever its entry sizes.
macro_rules! with_ring {
    ($ring:expr, $r:ident => $f:expr) => {
        match $ring {
            Ring::Plain($r) => $f,
            Ring::Wide($r) => $f,
        }
    };
}

/// The ring's submission side and its lock, shared by every thread.
pub(super) struct Uring {
    ring: Ring,
    sq: Mutex<()>,
    /// Requests pushed and not yet completed by the completion thread (wake-ups
    /// not counted): those it is completing count, so that the depth it sees while
    /// it runs their callbacks is the workload's.
    inflight: AtomicUsize,
    /// `io_uring_enter` calls that handed entries to the kernel, the entries they
    /// handed, every call, waits included, and the transfers pushed with the
    /// registered buffer ([`RingStats`]).
    handed: [AtomicU64; 4],
    /// The region registered as the ring's buffer 0 ([`Uring::register`]), kept as
    /// long as the ring.
    fixed: OnceLock<Arc<Region>>,
    /// Set up with `IORING_SETUP_COOP_TASKRUN` (see [`build`]).
    coop: bool,
}

/// The ring's completion queue: its one reader. Made once per ring, by
/// [`Uring::new`], neither `Clone` nor `Sync`, and reading takes `&mut self`: whoever
/// owns it (the runtime's completion thread, into which it is moved) is the only
/// thread that can advance the queue's head, as `io_uring_cqe_seen()` requires of a
/// ring without a lock around its completion queue.
pub(super) struct Completions {
    uring: Arc<Uring>,
    /// [`Completions::reap`] takes completions already posted without a system call
    /// ([`Completions::take_posted`]).
    take_posted: bool,
    /// Not `Sync`: moved to one thread, never shared.
    _one_reader: std::marker::PhantomData<std::cell::Cell<()>>,
}

/// A ring of `entries` entries (completion queue twice as deep) whose completions'
/// task work waits for its task's next entry into the kernel instead of interrupting
/// it (`IORING_SETUP_COOP_TASKRUN`, Linux 5.19; without it on an older kernel, which
/// refuses the flag with EINVAL): whether the flag took.
///
/// A completion's task work runs on the task that submitted the request. Without the
/// flag the kernel interrupts that task with an inter-processor interrupt whenever it
/// runs in user space; the runtime's completion thread, which submits most requests
/// (its callbacks' next I/O, the writes its completions unplug) and enters the kernel
/// after every batch anyway, was interrupted for most completions while it ran the
/// previous ones' callbacks (4 KiB writes at QD 16 on an image: 8.0 us of CPU per
/// write with the flag against 10.1 without, docs/real-io.md). A task asleep (a blocking
/// call's wait, the completion thread's `io_uring_enter`) is woken as before; a
/// thread that submits and then computes in user space without a system call sees
/// its request complete at its next system call or scheduler tick.
fn build<S: squeue::EntryMarker, C: cqueue::EntryMarker>(entries: u32) -> io::Result<(IoUring<S, C>, bool)> {
    let mut plain = IoUring::builder();
    plain.setup_cqsize(entries * 2);
    // With the cooperative task work, the kernel says in the ring's flags when it
    // holds some for the ring's task (`IORING_SETUP_TASKRUN_FLAG`): [`Completions::reap`]
    // then enters the kernel even with completions already posted.
    match plain.clone().setup_coop_taskrun().setup_taskrun_flag().build(entries) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((plain.build(entries)?, false)),
        r => r.map(|ring| (ring, true)),
    }
}

/// How the runtime's ring handed its entries to the kernel: each submission is one
/// `io_uring_enter` system call (a wait included) that carried `entries / submissions`
/// on average; `calls` counts every `io_uring_enter`, those that only waited too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RingStats {
    /// System calls that handed entries over.
    pub submissions: u64,
    /// Entries handed over.
    pub entries: u64,
    /// `io_uring_enter` calls in all: submissions, and waits that handed nothing.
    pub calls: u64,
    /// Reads and writes whose buffer was in the ring's registered region
    /// ([`crate::Runtime::buffers`]): sent as `READ_FIXED`/`WRITE_FIXED`.
    pub fixed: u64,
}

impl RingStats {
    /// The counts from `before` to `self`.
    pub fn since(self, before: RingStats) -> RingStats {
        RingStats {
            submissions: self.submissions - before.submissions,
            entries: self.entries - before.entries,
            calls: self.calls - before.calls,
            fixed: self.fixed - before.fixed,
        }
    }
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = with_ring!(&self.ring, r => r.params().sq_entries());
        write!(f, "Uring({n} entries, wide: {}, cooperative task work: {})", self.wide(), self.coop)
    }
}

impl Uring {
    /// The submission side's lock. Its poisoning is recovered: it guards no data of
    /// its own, only the ring's submission queue, whose entries are pushed whole and
    /// published by moving the tail (`sync`, and the queue's drop as a panic
    /// unwinds), so a panic under it leaves the ring as consistent as a return
    /// would; the runtime fails for the panic itself (`failstop.rs`).
    fn lock_sq(&self) -> std::sync::MutexGuard<'_, ()> {
        self.sq.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A ring with room for `depth` requests in flight (and wake-ups); with `wide`,
    /// 128-byte entries and 32-byte completions (for passthrough commands): its
    /// submission side, to share, and its completion queue's only reader.
    pub fn new(depth: u32, wide: bool) -> io::Result<(Arc<Uring>, Completions)> {
        let entries = (depth * 2 + 8).next_power_of_two();
        let (ring, coop) = if wide {
            let (r, coop) = build(entries)?;
            (Ring::Wide(r), coop)
        } else {
            let (r, coop) = build(entries)?;
            (Ring::Plain(r), coop)
        };
        // The probe the io-uring crate's own tests do: a NOP must come back.
        let u = Arc::new(Uring {
            ring,
            sq: Mutex::new(()),
            inflight: AtomicUsize::new(0),
            handed: Default::default(),
            fixed: OnceLock::new(),
            coop,
        });
        let mut c = Completions { uring: u.clone(), take_posted: false, _one_reader: std::marker::PhantomData };
        u.push(opcode::Nop::new().build().user_data(WAKE));
        let mut out = Vec::new();
        c.reap(&mut out, 1)?;
        if !out.first().is_some_and(|&(t, res, _)| t == WAKE && res >= 0) {
            return Err(io::Error::other("io_uring NOP did not complete"));
        }
        Ok((u, c))
    }

    /// Whether the ring has the wide entries passthrough commands need.
    pub fn wide(&self) -> bool {
        matches!(self.ring, Ring::Wide(_))
    }

    fn push(&self, entry: squeue::Entry) {
        match &self.ring {
            Ring::Plain(r) => self.push_on(r, entry),
            Ring::Wide(r) => self.push_on(r, squeue::Entry128::from(entry)),
        }
    }

    fn push_on<S: squeue::EntryMarker, C: cqueue::EntryMarker>(&self, ring: &IoUring<S, C>, entry: S) {
        let _g = self.lock_sq();
        // SAFETY: the submission queue is only touched under `sq`.
        let mut sq = unsafe { ring.submission_shared() };
        // SAFETY: the entry's buffer (if any) stays valid until its completion is
        // reaped (see push_rw).
        while unsafe { sq.push(&entry) }.is_err() {
            // Full: hand what is queued to the kernel. The ring is sized for the
            // engine's queue depth, so this is rare.
            sq.sync();
            drop(sq);
            let _ = self.count(ring.submit());
            // SAFETY: as above.
            sq = unsafe { ring.submission_shared() };
        }
        sq.sync();
    }

    /// Queues `r` as the passthrough command `cmd` to `fd` (boxed, as push_rw).
    /// The ring must be wide.
    pub fn push_cmd(&self, r: Box<Inflight>, cmd_op: u32, cmd: [u8; 80]) {
        let Ring::Wide(ring) = &self.ring else { unreachable!("a passthrough command on a plain ring") };
        let entry = opcode::UringCmd80::new(types::Fd(r.fd), cmd_op).cmd(cmd).build();
        let token = Box::into_raw(r) as u64;
        assert_ne!(token, WAKE, "a heap pointer cannot be all ones");
        self.inflight.fetch_add(1, Ordering::Relaxed);
        self.push_on(ring, entry.user_data(token));
    }

    /// Registers `region` as the ring's buffer 0 (`IORING_REGISTER_BUFFERS`): the
    /// kernel pins its pages once, and the transfers from and to its buffers go as
    /// `READ_FIXED`/`WRITE_FIXED` from then on. One region per ring: false if one is
    /// registered already, or if the kernel refuses (a region over 1 GiB, or over the
    /// locked-memory limit of a process without `CAP_IPC_LOCK`): its buffers then
    /// move as any others do.
    pub fn register(&self, region: &Arc<Region>) -> bool {
        if region.is_empty() || self.fixed.get().is_some() {
            return false;
        }
        let iov = libc::iovec { iov_base: region.addr().cast(), iov_len: region.len() };
        // (Under the submission lock: of two threads registering at once, the second
        // finds the first's region.)
        let _g = self.lock_sq();
        if self.fixed.get().is_some() {
            return false;
        }
        // SAFETY: the region stays allocated, at the same address, as long as the
        // ring: `fixed` keeps it, and a ring's registration ends with the ring.
        let r = with_ring!(&self.ring, u => unsafe { u.submitter().register_buffers(std::slice::from_ref(&iov)) });
        r.is_ok() && self.fixed.set(region.clone()).is_ok()
    }

    /// Queues a read or write for `r` (boxed; its pointer is the entry's user data).
    pub fn push_rw(&self, r: Box<Inflight>) {
        let (entry, fixed) = r.entry(self.fixed.get().map(|a| &**a));
        if fixed {
            self.handed[3].fetch_add(1, Ordering::Relaxed);
        }
        let token = Box::into_raw(r) as u64;
        assert_ne!(token, WAKE, "a heap pointer cannot be all ones");
        // The buffer stays valid until the completion thread takes the box back.
        self.inflight.fetch_add(1, Ordering::Relaxed);
        self.push(entry.user_data(token));
    }

    /// Whether the completion thread should hand what it queued to the kernel now
    /// rather than with its next wait. The thread queues a request for most
    /// completions it reaps (a callback that submits the next I/O).
    ///
    /// Passthrough commands wait until a quarter of the ring's requests are queued
    /// (at least one): handed over one at a time, each costs a system call and a
    /// doorbell write (the kernel plugs a submission, and the NVMe driver rings once
    /// for a batch, only when it carries more than two), while held until the wait,
    /// the device runs short of commands as the rest of the batch is processed; a
    /// quarter of the depth bounds both (four or more a call at depth 16).
    ///
    /// Reads and writes of the device's files go at once: measured on files on a
    /// disk, holding them lost 2-5 % (docs/real-devices.md, "Submissions in
    /// batches", where the passthrough reads gain half again in the guest).
    pub fn submit_due(&self) -> bool {
        !self.wide() || self.queued() >= (self.inflight.load(Ordering::Relaxed) / 4).max(1)
    }

    /// `n` requests taken back from the ring are complete.
    pub fn completed(&self, n: usize) {
        let before = self.inflight.fetch_sub(n, Ordering::Relaxed);
        assert!(before >= n, "{n} requests completed of {before} pushed");
    }

    /// Requests pushed and not yet completed (a failed runtime waits for none).
    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Entries queued and not yet handed to the kernel.
    fn queued(&self) -> usize {
        let _g = self.lock_sq();
        // SAFETY: the submission queue is only touched under `sq`.
        with_ring!(&self.ring, r => unsafe { r.submission_shared() }.len())
    }

    /// Hands the queued entries to the kernel.
    pub fn submit(&self) -> io::Result<()> {
        self.count(with_ring!(&self.ring, r => r.submit())).map(|_| ())
    }

    /// Counts what an `io_uring_enter` handed over.
    fn count(&self, r: io::Result<usize>) -> io::Result<usize> {
        self.handed[2].fetch_add(1, Ordering::Relaxed);
        if let Ok(n @ 1..) = r {
            self.handed[0].fetch_add(1, Ordering::Relaxed);
            self.handed[1].fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }

    /// What the ring handed to the kernel so far.
    pub fn stats(&self) -> RingStats {
        RingStats {
            submissions: self.handed[0].load(Ordering::Relaxed),
            entries: self.handed[1].load(Ordering::Relaxed),
            calls: self.handed[2].load(Ordering::Relaxed),
            fixed: self.handed[3].load(Ordering::Relaxed),
        }
    }

    /// Wakes the completion thread (for shutdown).
    pub fn wake(&self) {
        self.push(opcode::Nop::new().build().user_data(WAKE));
        let _ = self.submit();
    }
}

impl Completions {
    /// With `on`, [`Completions::reap`] takes completions already posted without entering
    /// the kernel (see there). For a file in memory only: every write of tmpfs goes
    /// to io_uring's workers and is posted by the task work the next submission
    /// runs, so the completion thread's wait found it posted for nearly every write
    /// (4 KiB writes at QD 16: 8-18 % more IOPS without the second call). On a file
    /// on a disk there is little to save: completions come from interrupts, a dozen
    /// or so at a time, and the thread made about 1.08 calls per write with the
    /// wait included; the rule measured no gain there (docs/real-io.md), so the
    /// thread enters the kernel after each batch as before.
    pub fn take_posted(&mut self, on: bool) {
        self.take_posted = on;
    }

    /// Waits for at least `want` completions (0: none, a look) and moves every
    /// available one into `out` as `(user_data, result, first big-CQE word)` (the
    /// last 0 on a plain ring).
    pub fn reap(&mut self, out: &mut Vec<(u64, i32, u64)>, want: u32) -> io::Result<()> {
        // Entering the kernel even to wait for nothing runs the task work that posts
        // this thread's completions. With `take_posted`, not when completions are
        // posted already and the kernel holds no task work for the ring, nothing is
        // queued and nothing overflowed: a write of a file in memory is posted by
        // the task work that the call submitting the next one runs, so the
        // completion thread, which submits its callbacks' next writes itself, would
        // otherwise make two calls per write (one to submit, one to find what the
        // first posted) where one does.
        if !(self.take_posted && self.posted()) {
            let u = &*self.uring;
            match u.count(with_ring!(&u.ring, r => r.submit_and_wait(want as usize))) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        match &self.uring.ring {
            Ring::Plain(r) => {
                // SAFETY: `self` is the ring's only reader of its completion queue
                // (one per ring, not `Clone`, borrowed mutably here), so no other
                // `CompletionQueue` of this ring exists while this one advances the
                // head.
                let mut cq = unsafe { r.completion_shared() };
                cq.sync();
                out.extend(cq.map(|c| (c.user_data(), c.result(), 0)));
            }
            Ring::Wide(r) => {
                // SAFETY: as above.
                let mut cq = unsafe { r.completion_shared() };
                cq.sync();
                out.extend(cq.map(|c| (c.user_data(), c.result(), c.big_cqe()[0])));
            }
        }
        Ok(())
    }

    /// Whether [`Completions::reap`] can take completions without entering the kernel:
    /// some are posted, none is held as task work (flagged only with the cooperative
    /// task work; without it the kernel interrupts the thread to post them), no
    /// entry is queued and the completion queue has not overflowed.
    fn posted(&mut self) -> bool {
        let u = &*self.uring;
        let _g = u.lock_sq();
        with_ring!(&u.ring, r => {
            // SAFETY: `self` is the completion queue's only reader (see `reap`), and
            // is borrowed mutably here; the submission queue is only touched under
            // `sq`, held.
            let (sq, cq) = unsafe { (r.submission_shared(), r.completion_shared()) };
            !cq.is_empty() && sq.is_empty() && !sq.taskrun() && !sq.cq_overflow()
        })
    }
}

/// Takes back the request behind a completion's user data.
///
/// # Safety
/// `token` must come from [`Uring::push_rw`] or [`Uring::push_cmd`] and be taken back
/// once.
pub(super) unsafe fn take(token: u64) -> Box<Inflight> {
    // SAFETY: the caller guarantees the token is a live box pointer from a push.
    unsafe { Box::from_raw(token as *mut Inflight) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether io_uring can be tested here. As the runtime's io_uring tests
    /// (tests/common): required under ZBLK_REQUIRE_URING=1, else `test` says SKIPPED,
    /// written past the harness's capture so that the suite's summary lists it.
    fn uring_or_skip(test: &str) -> bool {
        let Err(e) = crate::io_uring_available() else { return true };
        let required = std::env::var("ZBLK_REQUIRE_URING").is_ok_and(|v| v == "1");
        assert!(!required, "io_uring is required (ZBLK_REQUIRE_URING=1) but not available: {e}");
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {e}");
        false
    }

    /// The completion thread's rule on a passthrough (wide) ring: what it queued
    /// goes once a quarter of the requests in flight wait (at least one); on a plain
    /// ring, at once. And what the ring handed over is counted per system call.
    #[test]
    fn passthrough_commands_go_a_quarter_of_the_depth_at_a_time() {
        if !uring_or_skip("passthrough_commands_go_a_quarter_of_the_depth_at_a_time") {
            return;
        }
        let nop = || opcode::Nop::new().build().user_data(7);
        let (u, mut c) = Uring::new(16, true).expect("a wide ring");
        let start = u.stats();
        u.inflight.store(16, Ordering::Relaxed);
        for i in 0..4 {
            assert!(!u.submit_due(), "{i} of 16 queued: held");
            u.push(nop());
        }
        assert!(u.submit_due(), "4 of 16 queued: due");
        u.submit().unwrap();
        assert_eq!(u.stats().since(start), RingStats { submissions: 1, entries: 4, calls: 1, fixed: 0 });
        assert!(!u.submit_due(), "nothing queued");
        // A shallow workload: one queued is enough.
        u.inflight.store(3, Ordering::Relaxed);
        u.push(nop());
        assert!(u.submit_due(), "1 of 3 queued");
        let mut out = Vec::new();
        while out.len() < 5 {
            c.reap(&mut out, 1).unwrap();
        }
        let s = u.stats().since(start);
        assert_eq!((s.submissions, s.entries), (2, 5), "the wait submitted the fifth");
        u.completed(3);
        // Files: at once.
        let (plain, _) = Uring::new(16, false).expect("a plain ring");
        plain.inflight.store(16, Ordering::Relaxed);
        assert!(plain.submit_due());
    }

    /// Asked to (a file in memory), a completion already posted is taken without
    /// entering the kernel again (a NOP completes inside the call that submits it);
    /// with none posted, or an entry queued, the kernel is entered; not asked to, it
    /// is entered every time.
    #[test]
    fn completions_already_posted_are_reaped_without_a_system_call() {
        if !uring_or_skip("completions_already_posted_are_reaped_without_a_system_call") {
            return;
        }
        let nop = || opcode::Nop::new().build().user_data(7);
        for wide in [false, true] {
            let (u, mut c) = Uring::new(16, wide).expect("a ring");
            let mut out = Vec::new();
            // Not asked to: the completion is found by a call, as on a disk.
            u.push(nop());
            u.submit().unwrap();
            let start = u.stats();
            c.reap(&mut out, 1).unwrap();
            assert_eq!((out.len(), u.stats().since(start).calls), (1, 1), "wide {wide}: by default, a call");
            c.take_posted(true);
            out.clear();
            u.push(nop());
            u.submit().unwrap();
            let start = u.stats();
            c.reap(&mut out, 1).unwrap();
            assert_eq!(out.len(), 1, "wide {wide}: the NOP came back");
            assert_eq!(u.stats().since(start).calls, 0, "wide {wide}: posted, taken without a call");
            // Nothing posted: a look (want 0) enters the kernel, to run task work.
            c.reap(&mut out, 0).unwrap();
            assert_eq!(u.stats().since(start).calls, 1, "wide {wide}: nothing posted, one call");
            // Posted, but an entry queued behind it: this reap's call submits it
            // (held back, it would wait until nothing is posted).
            u.push(nop());
            u.submit().unwrap();
            u.push(nop());
            out.clear();
            c.reap(&mut out, 1).unwrap();
            let s = u.stats().since(start);
            assert_eq!((s.calls, s.submissions, s.entries), (3, 2, 2), "wide {wide}: the queued entry went");
            while out.len() < 2 {
                c.reap(&mut out, 1).unwrap();
            }
        }
    }

    /// Both kinds of ring run their task work cooperatively wherever the kernel has
    /// the flag (5.19 on): a set-up the kernel refuses (another flag added beside it,
    /// wrongly) falls back to a ring without it, silently but for this test.
    #[test]
    fn rings_run_task_work_cooperatively_where_the_kernel_can() {
        if !uring_or_skip("rings_run_task_work_cooperatively_where_the_kernel_can") {
            return;
        }
        let release = rustix::system::uname().release().to_string_lossy().into_owned();
        let mut v = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().unwrap_or(0));
        let (wide, plain) =
            (Uring::new(16, true).expect("a wide ring").0, Uring::new(16, false).expect("a plain ring").0);
        if (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (5, 19) {
            assert!(wide.coop && plain.coop, "Linux {release} has IORING_SETUP_COOP_TASKRUN: {wide:?}, {plain:?}");
        } else {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED rings_run_task_work_cooperatively_where_the_kernel_can: Linux {release} is older than 5.19"
            );
        }
    }
}
