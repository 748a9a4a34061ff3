//! Carrying out the engine's actions: drained under the engine lock, then done
//! outside it: a request the engine issues is checked by the device and goes to a
//! ring (the calling thread's own or the runtime's io_uring) or to a worker, or, on
//! a device that works in memory, is carried out as it is drained and completed in
//! the engine at once; completed BIOs' callbacks run; zone reports are answered;
//! and what that produced is fed back in, until the engine has nothing left to do.

use crate::callback::Done;
use crate::local;
use crate::shared::{BATCH, Core, Job, RawBuf, Shared, Timer};
use crate::uring::Inflight;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::MutexGuard;
use zblk_core::bio::{BioFlags, Op, ReqId, Request, Status};
use zblk_core::engine::Action;
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_dev::{IoBuf, Plan, zero_past};

/// A pump's working vectors, kept by each thread between its pumps.
#[derive(Default)]
struct Scratch {
    /// Requests the engine issued, with their part of their BIO's buffer, and their
    /// plan if the device was asked under the lock (pipelining).
    issues: Vec<(Request, Option<RawBuf>, Option<Plan>)>,
    dones: Vec<(Done, Result<Sector, Status>)>,
    reports: Vec<ZoneNo>,
    results: Vec<(ReqId, Result<Sector, Status>)>,
    answers: Vec<(ZoneNo, Result<ZoneInfo, Status>)>,
}

/// The thread's vectors, borrowed by a pump. A pump ends with them empty. One that
/// a panic cuts short leaves in them what it held (completions not yet run,
/// requests not yet started): dropped with the panic, as before the vectors were
/// kept, never found by the thread's next pump.
struct Kept<'a>(std::cell::RefMut<'a, Scratch>);

impl Drop for Kept<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            *self.0 = Scratch::default();
        }
    }
}

impl std::ops::Deref for Kept<'_> {
    type Target = Scratch;
    fn deref(&self) -> &Scratch {
        &self.0
    }
}

impl std::ops::DerefMut for Kept<'_> {
    fn deref_mut(&mut self) -> &mut Scratch {
        &mut self.0
    }
}

thread_local! {
    /// This thread's pump vectors, borrowed while a pump runs.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
    /// This thread is the io_uring completion thread: its next wait submits too.
    pub(crate) static REAPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Shared {
    /// Carries out the engine's actions until it has none: drains them under the
    /// lock, then starts requests, calls completions and answers zone reports
    /// outside it, and feeds what that produced back in.
    pub(crate) fn pump<'a>(&'a self, core: MutexGuard<'a, Core>) {
        // The thread's vectors, kept from pump to pump: a request's trip through the
        // engine then allocates nothing here. They are borrowed in place, not moved
        // out and back. (A pump nested in a callback finds them borrowed and makes
        // its own.)
        SCRATCH.with(|s| match s.try_borrow_mut() {
            Ok(sc) => self.pump_with(core, &mut Kept(sc)),
            Err(_) => self.pump_with(core, &mut Scratch::default()),
        });
    }

    /// [`Shared::pump`] with the vectors `sc`.
    fn pump_with<'a>(&'a self, mut core: MutexGuard<'a, Core>, sc: &mut Scratch) {
        loop {
            self.drain_actions(&mut core, sc);
            // A pipelined request the device refused when it was prepared under the
            // lock: its completion goes back in under the same taking of it.
            while !sc.results.is_empty() {
                feed_back(&mut core, sc);
                self.drain_actions(&mut core, sc);
            }
            drop(core);
            // (Each list looked at before it is drained: on a device in memory, the
            // requests and the reports are none, nearly always.)
            if !sc.issues.is_empty() {
                self.issue_all(sc);
            }
            for (done, r) in sc.dones.drain(..) {
                done.run(r);
            }
            if !sc.reports.is_empty() {
                for z in sc.reports.drain(..) {
                    sc.answers.push((z, self.device.report_zone(self.geo.zone_start(z))));
                }
            }
            if sc.results.is_empty() && sc.answers.is_empty() {
                break;
            }
            if self.failed() {
                // The engine is not touched again: what it was to be told is moot,
                // every BIO ends with EIO (crate::failstop).
                sc.results.clear();
                sc.answers.clear();
                break;
            }
            core = self.lock_core();
            feed_back(&mut core, sc);
        }
    }

    /// Takes the engine's actions into `sc` (under the lock), arming the timer for
    /// anticipations, and wakes whoever waits for the engine to be idle.
    fn drain_actions(&self, core: &mut Core, sc: &mut Scratch) {
        while let Some(action) = core.engine.poll_action() {
            match action {
                Action::Issue(req) => {
                    let buf = core.bios[req.user_data as usize].buf.map(|b| b.part(&req));
                    // Several writes of a zone out at once (pipelining) reach the
                    // device in the order the engine issued them only if the device
                    // sees them under the lock: two pumping threads could otherwise
                    // prepare them the other way round, and the device would refuse
                    // the second as unaligned. Anything else of a pipelined zone
                    // goes only when none of its writes is out.
                    //
                    // A device that works in memory (`Device::inline`) carries the
                    // request out here, under the lock, as the kernel's null_blk does
                    // in its submission path: the copy is what it would do just
                    // after the lock is dropped, on this thread, and serialised by
                    // the device's own lock anyway. Its completion goes into the
                    // engine at once, as a device that completes before the next
                    // request reaches it (the requests still queued here were
                    // issued already, and go to the device in their order): no
                    // second taking of the engine lock, no trip through the issue
                    // and result lists. What it ends comes out of this same drain.
                    if self.inline {
                        // SAFETY: as in threads::worker_loop: the request's part of its BIO's buffer.
                        let r = self.device.execute(&req, unsafe { iobuf(req.op, buf) });
                        core.engine.complete(req.id, r);
                    } else if !req.flags.contains(BioFlags::PIPELINED) {
                        sc.issues.push((req, buf, None));
                    } else {
                        match self.device.prepare(&req) {
                            Ok(plan) => sc.issues.push((req, buf, Some(plan))),
                            Err(status) => sc.results.push((req.id, Err(status))),
                        }
                    }
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
    }

    /// Starts the requests the engine issued; submits the runtime's ring once for
    /// all of them, unless this thread is plugged ([`Shared::batch`]) or is the
    /// completion thread with few queued ([`Shared::submit_queued`]: its next wait
    /// submits them).
    fn issue_all(&self, sc: &mut Scratch) {
        let mut queued = false;
        for (req, buf, plan) in sc.issues.drain(..) {
            // Marked busy while the request is handed on: a failed runtime ends its
            // BIO only once nothing here uses its buffer (crate::failstop).
            let Some(_busy) = self.busy() else { continue };
            match self.start(req, buf, plan) {
                Started::Ring => queued = true,
                Started::Local | Started::Worker => {}
                Started::Done(r) => sc.results.push((req.id, r)),
            }
        }
        if queued {
            let (depth, _) = BATCH.with(|b| b.get());
            if depth > 0 {
                BATCH.with(|b| b.set((depth, true)));
            } else {
                self.submit_queued();
            }
        }
    }

    /// Device-side checks, then the request goes to a ring (the calling thread's own,
    /// [`local`], or the runtime's) or to a worker (a device that works in memory
    /// never comes here: `drain_actions` carried its requests out).
    fn start(&self, req: Request, buf: Option<RawBuf>, prepared: Option<Plan>) -> Started {
        let plan = match prepared.map_or_else(|| self.device.prepare(&req), Ok) {
            Ok(plan) => plan,
            Err(status) => return Started::Done(Err(status)),
        };
        if let (Plan::Transfer(t), Some(b), Some(pc), Some(u)) = (plan, buf, self.device.uring_cmd(), &self.uring) {
            // A passthrough command on the wide ring: the device builds it, the
            // buffer stays the BIO's until the completion thread reaps it.
            let cmd = pc.command(&req, b.ptr, b.len);
            let fd = pc.fd().as_raw_fd();
            u.push_cmd(Box::new(Inflight { req, t, buf: b, fd, passthrough: true }), pc.cmd_op(), cmd);
            return Started::Ring;
        }
        if let (Plan::Transfer(t), Some(b)) = (plan, buf) {
            let direct = match self.direct {
                Some((fd, a)) if (b.ptr as u64) % a == 0 && (b.len as u64) % a == 0 && t.offset % a == 0 => Some(fd),
                _ => None,
            };
            if let Some(fd) = direct.or(self.buffered) {
                let r = match local::take(self, Inflight { req, t, buf: b, fd, passthrough: false }) {
                    local::Taken::Queued => return Started::Local,
                    local::Taken::Done(r, res) => return Started::Done(self.finish_transfer(&r, res)),
                    local::Taken::No(r) => r,
                };
                if let Some(u) = &self.uring {
                    u.push_rw(Box::new(r));
                    return Started::Ring;
                }
            }
        }
        let sent = self.jobs.send(Job::Run { req, plan, buf });
        assert!(sent.is_ok(), "worker threads gone while requests are issued");
        Started::Worker
    }

    /// Ends a transfer a ring carried: a short one is finished synchronously, a read
    /// zeroed past the write pointer, and the device records the outcome.
    pub(crate) fn finish_transfer(&self, r: &Inflight, res: i32) -> Result<Sector, Status> {
        let io = transfer_result(r, res);
        if !r.t.write {
            // SAFETY: the request's part of its BIO's buffer, as in threads::worker_loop;
            // a read's, lent writable.
            zero_past(unsafe { r.buf.bytes_mut() }, r.t.valid_sectors);
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
pub(crate) unsafe fn iobuf<'a>(op: Op, buf: Option<RawBuf>) -> IoBuf<'a> {
    match (buf, op) {
        // SAFETY: the caller's guarantee; a read's buffer was lent writable
        // (`bytes_mut` checks it).
        (Some(b), Op::Read) => IoBuf::Read(unsafe { b.bytes_mut() }),
        // SAFETY: the caller's guarantee; the device only reads a write's data.
        (Some(b), _) => IoBuf::Write(unsafe { b.bytes() }),
        (None, _) => IoBuf::None,
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
    while done < r.buf.len {
        let off = r.t.offset + done as u64;
        // The request's part of its BIO's buffer, as in threads::worker_loop (the
        // ring is done with it: its completion came).
        let n = if !r.t.write {
            // SAFETY: lent as above, writable (a read's).
            let data = unsafe { r.buf.bytes_mut() };
            rustix::io::pread(fd, &mut data[done..], off)
        } else {
            // SAFETY: lent as above; a write only reads it.
            let data = unsafe { r.buf.bytes() };
            rustix::io::pwrite(fd, &data[done..], off)
        }?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short transfer"));
        }
        done += n;
    }
    Ok(())
}

/// Feeds the results of requests over at once and the zone reports' answers back into
/// the engine (under the lock).
fn feed_back(core: &mut Core, sc: &mut Scratch) {
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
