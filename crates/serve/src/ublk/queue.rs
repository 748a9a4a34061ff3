//! One ublk queue: its thread takes every request the kernel sends on the queue's
//! ring, hands it to the served device at once (as many in flight as the kernel's
//! queue depth), and commits each when the device is done.
//!
//! Requests arrive and results go back one io_uring command per request (libublk's
//! queue: `FETCH_REQ`, `COMMIT_AND_FETCH_REQ`) or with batched commands
//! ([`super::batch`]: many requests a fetch, many results a commit); everything
//! else here is the same for both.
//!
//! The queue's thread does as much of the work as it can itself, because every hand-off
//! to another thread costs two context switches, more than the work on a memory
//! device or a file in the page cache:
//!
//! - the runtime's data transfers for the requests this thread submits (and for those
//!   its completions unplug) go on the queue's own ring, beside the kernel's commands
//!   ([`zblk_runtime::Submitter::on_local_ring`]), and their completions come back to
//!   this thread, which completes the request and commits it at once;
//! - a device that works in memory completes the request inside the submission;
//! - a request completed on another thread (a flush done by a worker, a paced
//!   simulation's completion) is posted to the queue's mailbox, whose eventfd the
//!   ring reads to wake the thread.
//!
//! Each tag has a page-aligned buffer of the largest request (the device's
//! `max_io_buf_bytes`), lent to the device while
//! its request is in flight: the runtime moves an image's data through its `O_DIRECT`
//! descriptor straight from and to it. A read of the memory device leaves it unused:
//! its data goes to the kernel from the device's pages ([`CopyOut::Pages`]).

use super::batch::{Batch, OP_COMMIT, OP_FETCH};
use super::request::{copy_from_kernel, copy_pages_to_kernel, copy_report_to_kernel, copy_to_kernel, decode};
use crate::served::{CopyOut, Done, Replies, Reply, ReplyTo, Req, Served, Tagged};
use libublk::io::{BufDescList, UblkDev, UblkIOCtx, UblkQueue};
use libublk::{BufDesc, UblkIORes};
use slab::Slab;
use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use zblk_core::bio::Op;
use zblk_core::units::SECTOR_SIZE;
use zblk_dev::buf::AlignedBuf;
use zblk_runtime::{LocalIo, PollWindow};

/// The `op` of a target entry on the queue's ring that reads the mailbox's eventfd.
const OP_WAKE: u32 = 1;
/// The `op` of a target entry that carries one of the runtime's transfers (its tag
/// field is the transfer's key in the queue's table).
const OP_TRANSFER: u32 = 2;

/// Completions waiting for their queue's thread: only the queue's thread may commit
/// (its ring carries the kernel's commands), so a request finished on another thread
/// is posted here and the thread is woken through an eventfd its ring reads.
struct Mailbox {
    done: Mutex<Vec<(u16, Reply)>>,
    efd: OwnedFd,
}

/// A request's reply: committed by the queue's thread if it comes there (into
/// [`READY`]), else posted to the mailbox, which wakes the thread.
impl Replies for Mailbox {
    fn reply(&self, tag: u16, r: Reply) {
        if HOME.with(|h| std::ptr::eq(h.get(), self)) {
            READY.with(|v| v.borrow_mut().push((tag, r)));
        } else {
            self.post(tag, r);
        }
    }
}

impl Mailbox {
    fn post(&self, tag: u16, r: Reply) {
        self.done.lock().unwrap_or_else(|p| p.into_inner()).push((tag, r));
        self.wake();
    }

    /// Wakes the queue's thread: its ring reads the eventfd.
    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: efd is an open eventfd, the buffer 8 bytes. A full counter (never
        // reached: the ring reads it) or a closed ring loses nothing: the vector holds
        // the completion.
        unsafe { libc::write(self.efd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// The queues' threads, for a device whose start failed: how many have ended, and
/// each serving queue's mailbox, to wake its thread. Such a device is removed only
/// once every queue has ended (the kernel frees the device only when its character
/// device is closed, which the last queue does).
#[derive(Default)]
pub(super) struct Queues {
    /// Queues' threads started and ended.
    counts: Mutex<(u32, u32)>,
    changed: Condvar,
    /// The device never started: each queue ends without serving ([`abandon`]).
    abandoned: AtomicBool,
    mailboxes: Mutex<Vec<Arc<Tagged<Mailbox>>>>,
}

impl Queues {
    /// A queue is about to serve; its thread is woken through `mailbox`.
    fn serving(&self, mailbox: &Arc<Tagged<Mailbox>>) {
        self.mailboxes.lock().unwrap_or_else(|p| p.into_inner()).push(Arc::clone(mailbox));
    }

    /// A queue's thread has started.
    pub(super) fn started(&self) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
        self.changed.notify_all();
    }

    /// A queue's thread has ended.
    pub(super) fn ended(&self) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).1 += 1;
        self.changed.notify_all();
    }

    /// Waits until `n` queues have ended; whether they have. Gives up once no queue's
    /// thread has started or ended for `stalled` (threads still setting up on a
    /// loaded machine keep it waiting: each one that moves starts the wait again).
    /// When no queue's thread has started after `none_after` (the device failed
    /// before libublk made them), there is nothing to wait for.
    pub(super) fn wait_ended(&self, n: u32, none_after: Duration, stalled: Duration) -> bool {
        let start = std::time::Instant::now();
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = (start, *c);
        while c.1 < n {
            let now = std::time::Instant::now();
            if *c != last.1 {
                last = (now, *c);
            }
            let waited = now - start;
            if c.0 == 0 && waited >= none_after {
                return true;
            }
            let Some(left) = stalled.checked_sub(now - last.0) else { return false };
            let step = if c.0 == 0 { left.min(none_after.saturating_sub(waited)) } else { left };
            c = self.changed.wait_timeout(c, step).unwrap_or_else(|p| p.into_inner()).0;
        }
        true
    }

    /// The device will never start: every queue's thread ends without serving, now
    /// or as soon as it is set up. (A queue registers its mailbox before it looks at
    /// the flag, and the flag is set before the mailboxes are woken: none waits on.)
    pub(super) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
        for m in self.mailboxes.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            m.wake();
        }
    }
}

thread_local! {
    /// The mailbox of the queue this thread serves: a completion that runs here goes
    /// to [`READY`] instead.
    static HOME: Cell<*const Mailbox> = const { Cell::new(std::ptr::null()) };
    /// Requests completed on the queue's own thread, committed when its handler
    /// returns.
    static READY: RefCell<Vec<(u16, Reply)>> = const { RefCell::new(Vec::new()) };
}

/// Batches of completions a queue's thread took without waiting (`--poll`: found
/// while it looked again), and after a wait in `io_uring_enter`, over every queue.
static BATCHES: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// `N found while polling, M after a wait`: how often the queues' threads found
/// their next work without being woken (with `--poll`, most of them while requests
/// keep coming).
pub fn poll_summary() -> String {
    format!(
        "{} found while polling, {} after a wait",
        BATCHES[0].load(Ordering::Relaxed),
        BATCHES[1].load(Ordering::Relaxed)
    )
}

/// What a tag's request is, for its commit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Data,
    Report,
}

/// The queue's state, owned by its thread.
struct Queue {
    cdev: i32,
    served: Arc<dyn Served>,
    mailbox: Arc<Tagged<Mailbox>>,
    /// Each tag's buffer, `None` while its request is in flight.
    bufs: Vec<Option<AlignedBuf>>,
    kinds: Vec<Kind>,
    /// The runtime's transfers on this ring, by key (the entries' tag field).
    transfers: Slab<LocalIo>,
    /// Transfers the runtime just handed over, to queue.
    fresh: Vec<LocalIo>,
    /// What [`READY`] held, swapped out to commit (kept, so that neither vector is
    /// allocated again for every request).
    ready: Vec<(u16, Reply)>,
    /// The eventfd read's target: leaked on purpose, as the ring may still complete
    /// the read after the queue's thread has stopped serving.
    counter: *mut u64,
    /// Scratch space for the `iovec`s of a read copied out of the memory device's
    /// pages (kept, so that no read allocates them).
    iov: Vec<libc::iovec>,
    /// With batched commands, their transport's state; `None`: a command per request.
    batch: Option<Batch>,
    /// Scratch space for the tags a batched fetch brings.
    tags: Vec<u16>,
}

/// Runs `f` with the transfers `served`'s runtime issues meanwhile on this thread
/// taken into `fresh`, for the queue's ring (directly when it has no runtime).
fn on_ring(served: &dyn Served, fresh: &mut Vec<LocalIo>, f: impl FnOnce()) {
    match served.runtime() {
        Some(sub) => sub.on_local_ring(fresh, f),
        None => f(),
    }
}

/// Serves queue `qid` of `dev` until the device stops, or until `queues` gives the
/// device up.
pub(super) fn serve_queue(
    qid: u16,
    dev: &UblkDev,
    served: &Arc<dyn Served>,
    poll: Duration,
    batched: bool,
    queues: &Queues,
) {
    // SAFETY: eventfd takes no pointer; a negative result is checked.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        crate::say(&format!("ublk queue {qid}: eventfd: {}", std::io::Error::last_os_error()));
        return;
    }
    // SAFETY: efd was just opened and is owned by nobody else.
    let mailbox = Tagged::new(Mailbox { done: Mutex::new(Vec::new()), efd: unsafe { OwnedFd::from_raw_fd(efd) } });
    HOME.with(|h| h.set(std::ptr::from_ref::<Mailbox>(&mailbox)));
    let depth = dev.dev_info.queue_depth as usize;
    let mut st = Queue {
        cdev: dev.tgt.fds[0],
        served: Arc::clone(served),
        mailbox,
        bufs: (0..depth).map(|_| Some(AlignedBuf::zeroed(dev.dev_info.max_io_buf_bytes as usize))).collect(),
        kinds: vec![Kind::Data; depth],
        transfers: Slab::new(),
        fresh: Vec::new(),
        ready: Vec::new(),
        counter: Box::leak(Box::new(0u64)),
        iov: Vec::new(),
        batch: None,
        tags: Vec::with_capacity(depth),
    };
    let queue = match start_queue(qid, dev, batched) {
        Ok((q, batch)) => {
            st.batch = batch;
            q
        }
        Err(e) => {
            crate::say(&format!("ublk queue {qid}: {e}"));
            return;
        }
    };
    st.arm_wake(&queue);
    queues.serving(&st.mailbox);
    if st.run(&queue, poll, &queues.abandoned) {
        // The driver may still hold fetch commands that write into the fetch
        // buffers: they are leaked with the queue.
        std::mem::forget(st.batch.take());
        abandon(queue, dev.dev_info.queue_depth);
    } else {
        st.drain(&queue);
    }
    HOME.with(|h| h.set(std::ptr::null()));
}

/// The queue's ring, its tags with the driver: a fetch command each, or with
/// `batched` the batched commands' preparation and fetches.
fn start_queue(qid: u16, dev: &UblkDev, batched: bool) -> Result<(UblkQueue<'_>, Option<Batch>), String> {
    let q = UblkQueue::new(qid, dev).map_err(|e| e.to_string())?;
    if batched {
        let batch = Batch::start(&q, dev.dev_info.queue_depth)?;
        Ok((q, Some(batch)))
    } else {
        let q = q.submit_fetch_commands_unified(BufDescList::Slices(None)).map_err(|e| e.to_string())?;
        Ok((q, None))
    }
}

/// Ends the queue of a device that never started, its fetch commands still with the
/// kernel. Dropping the queue would first unregister the ring's files, which waits
/// (io_rsrc_ref_quiesce) for those very commands for ever; and stopping a device
/// that never started does not abort them. The ring going does: the queue is
/// forgotten rather than dropped, its command buffer (a mapping of the character
/// device, which must go for the kernel to free the device) unmapped here, and the
/// ring (this thread's) is closed as the thread ends, which cancels the commands.
fn abandon(queue: UblkQueue, depth: u16) {
    let base = std::ptr::from_ref(queue.get_iod(0)).cast_mut().cast::<libc::c_void>();
    let page = super::page_size();
    let len = (usize::from(depth) * std::mem::size_of::<libublk::sys::ublksrv_io_desc>()).next_multiple_of(page);
    std::mem::forget(queue);
    // SAFETY: the queue's command buffer is mapped at its first descriptor, `len`
    // bytes as libublk maps it, and nothing reads it any more (the queue is
    // forgotten).
    unsafe { libc::munmap(base, len) };
}

impl Queue {
    /// Takes what the queue's ring completes until the queue stops: each of the
    /// kernel's commands that brings a request, and the target's own entries (the
    /// runtime's transfers, the mailbox's wake-up). With `poll`, after a batch that
    /// brought something the thread looks again without sleeping for that long:
    /// while requests follow each other closer than that, none of them waits for
    /// the thread to be woken (a wake-up from idle is the largest part of a small
    /// request's turnaround at QD 1), at the price of a CPU kept busy meanwhile.
    /// Whether the device was given up before it started (`abandoned`).
    fn run(&mut self, q: &UblkQueue, poll: Duration, abandoned: &AtomicBool) -> bool {
        let mut window = PollWindow::new(poll);
        loop {
            if abandoned.load(Ordering::Acquire) {
                return true;
            }
            let mut to_wait = window.want();
            // (Taken on every pass: a pass that only polls does not wait for them, and
            // they must not count towards a later wait.)
            let sent = self.batch.as_mut().map_or(0, Batch::take_sent);
            if to_wait > 0 {
                to_wait += sent;
            }
            let handled = q.flush_and_wake_io_tasks(
                |user_data, cqe, _| {
                    let tag = UblkIOCtx::user_data_to_tag(user_data) as u16;
                    if user_data & libublk::UblkUringData::Target as u64 != 0 {
                        self.handle(q, tag, Some((user_data, cqe.result(), cqe.flags())));
                    } else if cqe.result() == libublk::sys::UBLK_IO_RES_OK as i32 {
                        // (A command aborted as the queue stops brings no request.)
                        self.handle(q, tag, None);
                    }
                },
                to_wait as usize,
            );
            match handled {
                // A wait interrupted is not the end of the queue: a stop signal
                // (SIGSTOP, a terminal's Ctrl-Z, a debugger attaching) makes
                // io_uring_enter return EINTR once the thread runs again, and the
                // queue is as it was. Ending the loop there would drop the ring with
                // the kernel's fetch commands still on it: the ring's teardown then
                // waits in io_rsrc_ref_quiesce for commands that complete only when
                // the device stops, and the device cannot stop while its queue is
                // neither serving nor gone (every later request hangs). SIGINT and
                // SIGTERM never interrupt it: every thread of the server blocks them
                // (the command takes them with sigwait); stop signals cannot be
                // blocked, so the wait starts again.
                Err(libublk::UblkError::IOError(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
                Ok(n) => window.took(to_wait, n > 0, &BATCHES),
            }
            // Batched commands: what completed meanwhile is committed in one command,
            // and the queue ends once the driver has ended its fetches and answered
            // every commit (libublk's queue never learns that it stops).
            if let Some(b) = &mut self.batch {
                b.commit(q);
                if b.finished() {
                    return false;
                }
            }
        }
    }

    /// One completion of the queue's ring: a target entry (its user data, result
    /// and flags) or, with `None`, a new request on `tag`.
    fn handle(&mut self, q: &UblkQueue, tag: u16, target: Option<(u64, i32, u32)>) {
        if let Some((user_data, res, flags)) = target {
            match UblkIOCtx::user_data_to_op(user_data) {
                OP_TRANSFER => {
                    let t = self.transfers.remove(tag as usize);
                    self.on_ring(|| t.complete(res));
                }
                op @ (OP_FETCH | OP_COMMIT) => self.batched(q, op, tag, res, flags),
                _ => {
                    let posted = std::mem::take(&mut *self.mailbox.done.lock().unwrap_or_else(|p| p.into_inner()));
                    for (tag, reply) in posted {
                        self.commit(q, tag, reply);
                    }
                    if !self.stopping(q) {
                        self.arm_wake(q);
                    }
                }
            }
        } else {
            self.request(q, tag);
        }
        self.queue_transfers(q);
        let mut ready = std::mem::take(&mut self.ready);
        READY.with(|r| std::mem::swap(&mut *r.borrow_mut(), &mut ready));
        for (tag, reply) in ready.drain(..) {
            self.commit(q, tag, reply);
        }
        self.ready = ready;
    }

    /// A completion of the batched commands' transport: the requests a fetch
    /// brought are taken at once.
    fn batched(&mut self, q: &UblkQueue, op: u32, id: u16, res: i32, flags: u32) {
        let Some(b) = &mut self.batch else {
            return crate::say(&format!("ublk queue {}: a batched command's completion on its own", q.get_qid()));
        };
        match op {
            OP_FETCH => {
                let mut tags = std::mem::take(&mut self.tags);
                b.fetched(q, id, res, flags, &mut tags);
                for &tag in &tags {
                    if u32::from(tag) < q.get_depth() {
                        self.request(q, tag);
                    } else {
                        crate::say(&format!(
                            "ublk queue {}: the driver fetched tag {tag}, past its depth",
                            q.get_qid()
                        ));
                    }
                }
                tags.clear();
                self.tags = tags;
            }
            _ => b.committed(q, id, res),
        }
    }

    /// Whether the device is stopping (nothing is fetched any more).
    fn stopping(&self, q: &UblkQueue) -> bool {
        q.is_stopping() || self.batch.as_ref().is_some_and(Batch::stopping)
    }

    /// Runs `f` with the runtime's transfers taken for this ring.
    fn on_ring(&mut self, f: impl FnOnce()) {
        on_ring(&*self.served, &mut self.fresh, f);
    }

    /// A new request on `tag`: its data copied in, handed to the device.
    fn request(&mut self, q: &UblkQueue, tag: u16) {
        let buf = self.bufs[tag as usize].take().expect("a tag's buffer is home when the kernel sends on it");
        let pos = UblkIOCtx::ublk_user_copy_pos(q.get_qid(), tag, 0);
        let mut req = match decode(self.served.geometry(), q.get_iod(tag), buf) {
            Ok(req) => req,
            Err((errno, buf)) => return self.finish(q, tag, buf, Err(errno)),
        };
        // The planted assertion of the fail-stop test (a write only: the kernel's
        // partition scan, which reads, lets the device start first).
        let planted = zblk_core::mutation::Mutation::PanicOnServeQueue;
        if zblk_core::mutation::on(planted) && matches!(req, Req::Io { op: Op::Write, .. }) {
            panic!("planted bug {}: assertion failed when the kernel brought a write", planted.name());
        }
        if zblk_core::mutation::on(zblk_core::mutation::Mutation::CommitDropsOne)
            && let Some(b) = &mut self.batch
        {
            b.planted_write(tag, matches!(req, Req::Io { op: Op::Write, .. }));
        }
        // (A device that keeps no data needs none: its writes' data is not copied in.)
        if let Req::Io { op: Op::Write | Op::ZoneAppend, nr_sectors, buf, .. } = &mut req
            && self.served.keeps_data()
        {
            let len = *nr_sectors as usize * SECTOR_SIZE as usize;
            if let Err(e) = copy_from_kernel(self.cdev, pos, &mut buf[..len]) {
                let buf = std::mem::replace(buf, AlignedBuf::zeroed(0));
                return self.finish(q, tag, buf, Err(e));
            }
        }
        self.kinds[tag as usize] = if matches!(req, Req::Report { .. }) { Kind::Report } else { Kind::Data };
        // A request the device answers at once (a read of the memory device) is
        // committed here: no boxed completion, no trip through `READY`.
        let req = match self.served.serve_now(req) {
            Ok(reply) => return self.commit(q, tag, reply),
            Err(req) => req,
        };
        // The reply goes to the queue's mailbox by tag: no closure per request.
        let done = ReplyTo::tag(&self.mailbox, tag);
        // (Not `self.on_ring`: the closure borrows the served device, a field apart.)
        on_ring(&*self.served, &mut self.fresh, || self.served.submit(req, done));
    }

    /// Queues the transfers the runtime handed over on the ring.
    fn queue_transfers(&mut self, q: &UblkQueue) {
        for t in self.fresh.drain(..) {
            let entry = t.entry();
            let key = self.transfers.insert(t);
            let tag = u16::try_from(key).expect("fewer transfers in flight than the engine's queue depth");
            let entry = entry.user_data(UblkIOCtx::build_user_data(tag, OP_TRANSFER, 0, true));
            if let Err(e) = q.ublk_submit_sqe_sync(entry) {
                // The ring is gone: the transfer never started.
                crate::say(&format!("ublk queue {}: queueing a transfer: {e}", q.get_qid()));
                self.transfers.remove(key).complete(-libc::EIO);
            }
        }
    }

    /// Copies out what the request returns and commits it.
    fn commit(&mut self, q: &UblkQueue, tag: u16, reply: Reply) {
        let Reply { result, mut buf, copy_out } = reply;
        let pos = UblkIOCtx::ublk_user_copy_pos(q.get_qid(), tag, 0);
        let res = match (result, self.kinds[tag as usize], copy_out) {
            (Ok(_), Kind::Report, out) => copy_report_to_kernel(self.cdev, pos, &mut buf, out.buf_bytes()),
            (Ok(d), Kind::Data, CopyOut::Buf(n)) if n > 0 => copy_to_kernel(self.cdev, pos, &buf[..n]).map(|_| d),
            (Ok(d), Kind::Data, CopyOut::Pages(p)) => {
                copy_pages_to_kernel(self.cdev, pos, &p, &mut self.iov).map(|_| d)
            }
            (r, _, _) => r,
        };
        self.finish(q, tag, buf, res);
    }

    /// Takes the tag's buffer back and commits its result to the kernel (which
    /// fetches the tag's next request).
    fn finish(&mut self, q: &UblkQueue, tag: u16, buf: AlignedBuf, res: Result<Done, i32>) {
        assert!(self.bufs[tag as usize].replace(buf).is_none(), "tag {tag} committed twice");
        if let Some(b) = &mut self.batch {
            // Committed with the others at the end of this batch of completions.
            let (result, lba) = match res {
                Ok(Done::Bytes(n)) => (n, 0),
                Ok(Done::Appended(n, lba)) => (n, lba),
                Err(errno) => (-errno, 0),
            };
            return b.push(tag, result, lba);
        }
        let res = match res {
            Ok(Done::Bytes(n)) => UblkIORes::Result(n),
            Ok(Done::Appended(n, lba)) => UblkIORes::FatRes(libublk::UblkFatRes::ZonedAppendRes((n, lba))),
            Err(errno) => UblkIORes::Result(-errno),
        };
        // A stopping device refuses the commit: nothing waits for it any more.
        let _ = q.complete_io_cmd_unified(tag, BufDesc::Slice(&[]), Ok(res));
    }

    /// Arms the read of the mailbox's eventfd on the queue's ring.
    fn arm_wake(&self, q: &UblkQueue) {
        let fd = io_uring::types::Fd(self.mailbox.efd.as_raw_fd());
        let sqe = io_uring::opcode::Read::new(fd, self.counter.cast(), 8)
            .build()
            .user_data(UblkIOCtx::build_user_data(0, OP_WAKE, 0, true));
        if let Err(e) = q.ublk_submit_sqe_sync(sqe) {
            crate::say(&format!("ublk queue {}: arming its completion wake-up: {e}", q.get_qid()));
        }
    }

    /// Once the kernel has stopped the queue: waits for the transfers still on the
    /// ring (their buffers are the tags', which must outlive them) and completes them.
    fn drain(&mut self, q: &UblkQueue) {
        while !self.transfers.is_empty() {
            let reaped = libublk::io::with_task_io_ring_mut(|r| {
                match r.submit_and_wait(1) {
                    Err(e) if e.kind() != std::io::ErrorKind::Interrupted => return Err(e),
                    _ => {}
                }
                let transfer = |c: &io_uring::cqueue::Entry| {
                    c.user_data() & libublk::UblkUringData::Target as u64 != 0
                        && UblkIOCtx::user_data_to_op(c.user_data()) == OP_TRANSFER
                };
                Ok(r.completion()
                    .filter(transfer)
                    .map(|c| (UblkIOCtx::user_data_to_tag(c.user_data()) as usize, c.result()))
                    .collect::<Vec<_>>())
            });
            let done = match reaped {
                Ok(done) => done,
                Err(e) => {
                    crate::say(&format!("ublk queue {}: waiting for its transfers: {e}", q.get_qid()));
                    // The kernel may still own the buffers: leaked rather than freed
                    // under it.
                    std::mem::forget(std::mem::take(&mut self.bufs));
                    for (_, t) in std::mem::take(&mut self.transfers) {
                        t.complete(-libc::EIO);
                    }
                    break;
                }
            };
            for (key, res) in done {
                let t = self.transfers.remove(key);
                self.on_ring(|| t.complete(res));
            }
            self.queue_transfers(q);
        }
        // Whatever completed meanwhile finds no device to commit to.
        READY.with(|r| r.borrow_mut().clear());
    }
}
