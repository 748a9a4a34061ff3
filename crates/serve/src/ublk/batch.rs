//! Batched commands (`UBLK_F_BATCH_IO`, Linux 7.3's driver): the transport between
//! the driver and a queue's thread when the kernel's requests come many to a
//! command instead of one command per request.
//!
//! - At the start, one `UBLK_U_IO_PREP_IO_CMDS` hands the driver every tag of the
//!   queue (the device starts once every queue has done so).
//! - Multishot `UBLK_U_IO_FETCH_IO_CMDS` commands stay with the driver; each
//!   completion they post names the tags of new requests, written by the driver into
//!   one of the queue's fetch buffers, which the thread gives back at once. The
//!   buffers are a registered buffer ring (`IORING_REGISTER_PBUF_RING`): giving one
//!   back is a store to the ring's tail, not a ring operation and its completion.
//! - `UBLK_U_IO_COMMIT_IO_CMDS` commits the results gathered since the last one: a
//!   tag, its result and, for a zone append, the sector written
//!   (`UBLK_BATCH_F_HAS_ZONE_LBA`).
//!
//! Data still moves by user copy, as on the per-request path: only how the queue's
//! thread learns of requests and commits them changes (the rest is queue.rs's).
//! libublk's own batched transport refuses zoned and user-copy devices, which is why
//! zblk has this one.

use io_uring::{cqueue, opcode, squeue, types};
use libublk::io::{RawSqe, UblkIOCtx, UblkQueue};
use libublk::sys;
use slab::Slab;
use std::sync::atomic::{AtomicBool, Ordering};

/// The `op` of a fetch command's entries (their tag field: the command's index).
pub(super) const OP_FETCH: u32 = 3;
/// The `op` of a commit's entries (their tag field: the commit's key).
pub(super) const OP_COMMIT: u32 = 4;
/// The `op` of the preparation of the queue's tags.
const OP_PREP: u32 = 6;

/// Multishot fetch commands kept with the driver: the driver fills one at a time;
/// the second goes on while the first is armed again after it ended (out of
/// buffers).
const FETCH_COMMANDS: u16 = 2;
/// Fetch buffers, each able to hold every tag of the queue: the driver never runs
/// out while the thread gives each back as soon as it has read it. A power of two:
/// the buffer ring's size.
const FETCH_BUFFERS: u16 = 4;
/// The buffer group of the fetch buffers' ring on the queue's ring (its own: the
/// runtime's transfers on the ring select no buffers).
const BUFFER_GROUP: u16 = 0x7a62;
/// `IORING_URING_CMD_MULTISHOT` (the io_uring crate does not name it).
const URING_CMD_MULTISHOT: u32 = 1 << 1;

/// One element of a preparation or a commit: `struct ublk_elem_header` followed by
/// the zone append's sector (`UBLK_BATCH_F_HAS_ZONE_LBA`; no buffer address: the
/// data moves by user copy).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Elem {
    tag: u16,
    buf_index: u16,
    result: i32,
    zone_lba: u64,
}

/// The flags of every preparation and commit: elements carry a zone append's sector.
const ELEM_FLAGS: u16 = sys::UBLK_BATCH_F_HAS_ZONE_LBA as u16;
const ELEM_BYTES: usize = std::mem::size_of::<Elem>();

/// `struct ublk_batch_io`, the 16 bytes of a batched command's SQE.
fn header(qid: u16, flags: u16, nr_elem: usize, elem_bytes: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..2].copy_from_slice(&qid.to_ne_bytes());
    h[2..4].copy_from_slice(&flags.to_ne_bytes());
    h[4..6].copy_from_slice(&(nr_elem as u16).to_ne_bytes());
    h[6] = elem_bytes as u8;
    h
}

fn user_data(id: u16, op: u32) -> u64 {
    UblkIOCtx::build_user_data(id, op, 0, true)
}

/// A commit the driver has not answered in full: it may take only the first
/// elements (its result counts the bytes it took), the rest is sent again.
struct Commit {
    elems: Vec<Elem>,
    done: usize,
}

/// The planted bug `commit-drops-one` has dropped its request (once per process:
/// one request that never completes is enough to hang its submitter).
static DROPPED: AtomicBool = AtomicBool::new(false);

/// The batched transport's state of one queue, owned by its thread.
pub(super) struct Batch {
    qid: u16,
    /// The fetch buffers, by id; the driver writes tags (`u16`) into them.
    bufs: Vec<Box<[u16]>>,
    /// Their ring, through which they are given to the driver.
    ring: BufRing,
    /// Fetch commands the driver holds.
    fetches: u16,
    /// Results waiting for the next commit.
    pending: Vec<Elem>,
    /// Commits in flight, by key (their entries' tag field).
    commits: Slab<Commit>,
    /// Vectors of answered commits, kept for the next ones.
    spare: Vec<Vec<Elem>>,
    /// The driver has ended the fetch commands: the device is stopping.
    stopped: bool,
    /// Commits queued since the queue's last wait: each completes as soon as it is
    /// submitted ([`Batch::take_sent`]).
    sent: u32,
    /// The planted bug `commit-drops-one`: which tags hold a write (the bug leaves
    /// a write out, not the reads of the kernel's partition scan, which would keep
    /// the device from starting).
    writes: Vec<bool>,
}

impl Batch {
    /// Gives the ring the fetch buffers and the driver every tag of the queue, waits
    /// for the driver, and queues the fetch commands (sent with the queue's next
    /// wait).
    pub(super) fn start(q: &UblkQueue, depth: u16) -> Result<Batch, String> {
        let qid = q.get_qid();
        let bufs: Vec<Box<[u16]>> =
            (0..FETCH_BUFFERS).map(|_| vec![0u16; usize::from(depth)].into_boxed_slice()).collect();
        let ring = libublk::io::with_task_io_ring(|r| BufRing::register(&r.submitter(), BUFFER_GROUP))
            .map_err(|e| format!("fetch buffers' ring: {e}"))?;
        // Made before anything else can fail: dropped, it releases the ring.
        let mut b = Batch {
            qid,
            bufs,
            ring,
            fetches: 0,
            pending: Vec::with_capacity(usize::from(depth)),
            commits: Slab::new(),
            spare: Vec::new(),
            stopped: false,
            sent: 0,
            writes: Vec::new(),
        };
        for (id, buf) in b.bufs.iter_mut().enumerate() {
            b.ring.give(buf, id as u16);
        }
        let prep: Vec<Elem> = (0..depth).map(|tag| Elem { tag, ..Elem::default() }).collect();
        let entry = opcode::UringCmd16::new(types::Fixed(0), sys::UBLK_U_IO_PREP_IO_CMDS)
            .cmd(header(qid, ELEM_FLAGS, prep.len(), ELEM_BYTES))
            .addr(Some(prep.as_ptr() as u64))
            .build()
            .user_data(user_data(0, OP_PREP));
        q.ublk_submit_sqe_sync(entry).map_err(|e| format!("preparing its tags: {e}"))?;
        // Nothing else is on the ring yet: the one completion is the preparation's.
        for (_, res) in wait_completions(1)? {
            if res < 0 {
                return Err(format!("preparing its tags: {}", std::io::Error::from_raw_os_error(-res)));
            }
        }
        for id in 0..FETCH_COMMANDS {
            b.arm_fetch(q, id);
        }
        Ok(b)
    }

    /// How many completions the commits queued since the last call will bring at
    /// once: the driver and the ring answer them while they are
    /// submitted. A wait for the next request asks for these as well, so that the
    /// same system call that sends a commit waits for what comes next, instead of
    /// returning at once with the commit's answer (which would take a second call
    /// per request at QD 1).
    pub(super) fn take_sent(&mut self) -> u32 {
        std::mem::take(&mut self.sent)
    }

    /// Whether the device is stopping (the driver ended the fetch commands).
    pub(super) fn stopping(&self) -> bool {
        self.stopped
    }

    /// Whether the queue is done: no fetch command with the driver, no commit on
    /// the ring.
    pub(super) fn finished(&self) -> bool {
        self.stopped && self.fetches == 0 && self.commits.is_empty()
    }

    fn arm_fetch(&mut self, q: &UblkQueue, id: u16) {
        let mut entry = opcode::UringCmd16::new(types::Fixed(0), sys::UBLK_U_IO_FETCH_IO_CMDS)
            .cmd(header(self.qid, 0, 0, std::mem::size_of::<u16>()))
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(user_data(id, OP_FETCH));
        // SAFETY: RawSqe is libublk's image of the 64-byte submission entry
        // (repr(C), the kernel's layout), which an Entry is; the io_uring crate has
        // no setter for a command's flags or a buffer group.
        let raw = unsafe { &mut *std::ptr::from_mut(&mut entry).cast::<RawSqe>() };
        raw.rw_flags |= URING_CMD_MULTISHOT;
        raw.buf_index = BUFFER_GROUP;
        match q.ublk_submit_sqe_sync(entry) {
            Ok(()) => self.fetches += 1,
            Err(e) => crate::say(&format!("ublk queue {}: fetch command: {e}", self.qid)),
        }
    }

    /// A fetch command's completion (`id`, its result and flags): the tags of new
    /// requests, put in `tags`.
    pub(super) fn fetched(&mut self, q: &UblkQueue, id: u16, res: i32, flags: u32, tags: &mut Vec<u16>) {
        let more = cqueue::more(flags);
        if !more {
            // (Saturating: a driver that ended a fetch twice does not stop the queue.)
            self.fetches = self.fetches.saturating_sub(1);
        }
        if res < 0 {
            // ENODEV (UBLK_IO_RES_ABORT): the device stops. ENOBUFS: the driver had
            // tags but no buffer to put them in; they wait for the next fetch.
            if res == -libc::ENOBUFS && !self.stopped && !more {
                self.arm_fetch(q, id);
            } else if !more {
                if res != sys::UBLK_IO_RES_ABORT {
                    crate::say(&format!("ublk queue {}: fetch: {}", self.qid, std::io::Error::from_raw_os_error(-res)));
                }
                self.stopped = true;
            }
            return;
        }
        if let Some(bid) = cqueue::buffer_select(flags) {
            match self.bufs.get_mut(usize::from(bid)) {
                Some(buf) => {
                    let n = (res as usize / std::mem::size_of::<u16>()).min(buf.len());
                    tags.extend_from_slice(&buf[..n]);
                    self.ring.give(buf, bid);
                }
                None => crate::say(&format!("ublk queue {}: fetch into unknown buffer {bid}", self.qid)),
            }
        }
        if !more && !self.stopped {
            self.arm_fetch(q, id);
        }
    }

    /// The planted bug `commit-drops-one`: whether `tag`'s request is a write.
    pub(super) fn planted_write(&mut self, tag: u16, write: bool) {
        let tag = usize::from(tag);
        if self.writes.len() <= tag {
            self.writes.resize(tag + 1, false);
        }
        self.writes[tag] = write;
    }

    /// The result of `tag`'s request, for the next commit; `lba`: a zone append's
    /// sector.
    pub(super) fn push(&mut self, tag: u16, result: i32, lba: u64) {
        self.pending.push(Elem { tag, buf_index: 0, result, zone_lba: lba });
    }

    /// Commits every result gathered since the last commit, in one command.
    pub(super) fn commit(&mut self, q: &UblkQueue) {
        if self.pending.is_empty() {
            return;
        }
        let planted = zblk_core::mutation::Mutation::CommitDropsOne;
        if zblk_core::mutation::on(planted) && self.pending.len() > 1 {
            // The planted bug: a write of a commit of several is never committed.
            let write = self.pending.iter().rposition(|e| self.writes.get(usize::from(e.tag)) == Some(&true));
            if let Some(at) = write
                && !DROPPED.swap(true, Ordering::Relaxed)
            {
                self.pending.remove(at);
            }
        }
        let mut elems = self.spare.pop().unwrap_or_default();
        std::mem::swap(&mut elems, &mut self.pending);
        let key = self.commits.insert(Commit { elems, done: 0 });
        self.send_commit(q, key);
    }

    fn send_commit(&mut self, q: &UblkQueue, key: usize) {
        let c = &self.commits[key];
        let rest = &c.elems[c.done..];
        let id = u16::try_from(key).expect("fewer commits in flight than a queue's tags");
        let entry = opcode::UringCmd16::new(types::Fixed(0), sys::UBLK_U_IO_COMMIT_IO_CMDS)
            .cmd(header(self.qid, ELEM_FLAGS, rest.len(), ELEM_BYTES))
            .addr(Some(rest.as_ptr() as u64))
            .build()
            .user_data(user_data(id, OP_COMMIT));
        match q.ublk_submit_sqe_sync(entry) {
            Ok(()) => self.sent += 1,
            Err(e) => {
                crate::say(&format!("ublk queue {}: commit: {e}", self.qid));
                self.recycle(key);
            }
        }
    }

    /// A commit's completion: the bytes of the elements the driver took, or an
    /// errno for the first one it refused.
    pub(super) fn committed(&mut self, q: &UblkQueue, key: u16, res: i32) {
        let key = usize::from(key);
        let Some(c) = self.commits.get_mut(key) else {
            crate::say(&format!("ublk queue {}: completion of unknown commit {key}", self.qid));
            return;
        };
        let left = c.elems.len() - c.done;
        if res > 0 {
            c.done += (res as usize / ELEM_BYTES).min(left);
        } else if self.stopped {
            // A stopping device takes no commit: nothing waits for them any more.
            c.done = c.elems.len();
        } else {
            // The driver walks the elements in order and stops at the first it
            // refuses: that one is dropped (said), the others are sent again.
            let e = c.elems[c.done];
            crate::say(&format!(
                "ublk queue {}: the driver refused the commit of tag {} (result {}): {}",
                self.qid,
                e.tag,
                e.result,
                std::io::Error::from_raw_os_error(-res)
            ));
            c.done += 1;
        }
        if c.done < c.elems.len() {
            self.send_commit(q, key);
        } else {
            self.recycle(key);
        }
    }

    fn recycle(&mut self, key: usize) {
        let mut c = self.commits.remove(key);
        c.elems.clear();
        self.spare.push(c.elems);
    }
}

/// The fetch buffers' ring (`IORING_REGISTER_PBUF_RING`), registered on the
/// queue's ring as [`BUFFER_GROUP`]: [`FETCH_BUFFERS`] descriptors (address, length,
/// id) the kernel takes a buffer from when a fetch completes, and a tail the thread
/// moves as it gives buffers back. Before it, a legacy provided buffer: a
/// `PROVIDE_BUFFERS` operation and its completion for every fetch.
///
/// The descriptors live in a page of their own (the kernel pins it while the ring is
/// registered). A queue given up with fetch commands still armed is forgotten with
/// its [`Batch`], ring and buffers included: the driver may still write into them.
struct BufRing {
    base: std::ptr::NonNull<types::BufRingEntry>,
    /// The next free descriptor, modulo [`FETCH_BUFFERS`]; the kernel reads it from
    /// the ring's shared tail.
    tail: u16,
    /// Its buffer group on the io_uring it is registered with.
    group: u16,
    /// Its page's layout (the system's page size: the kernel maps the ring by pages).
    layout: std::alloc::Layout,
    /// Unregistered and its page freed ([`BufRing::release`]).
    released: bool,
}

/// A page of the system, which the ring's descriptors live in.
fn page_layout() -> std::alloc::Layout {
    let page = super::page_size().max(4096);
    std::alloc::Layout::from_size_align(page, page).expect("a page size is a power of two")
}

impl BufRing {
    /// Allocates the ring and registers it as buffer group `group` of the io_uring
    /// `sub` submits to.
    fn register(sub: &io_uring::Submitter<'_>, group: u16) -> std::io::Result<BufRing> {
        const { assert!(FETCH_BUFFERS.is_power_of_two()) };
        const { assert!(FETCH_BUFFERS as usize * std::mem::size_of::<types::BufRingEntry>() <= 4096) };
        let layout = page_layout();
        // SAFETY: the layout is a page, not zero-sized.
        let page = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(base) = std::ptr::NonNull::new(page.cast::<types::BufRingEntry>()) else {
            std::alloc::handle_alloc_error(layout);
        };
        // SAFETY: the page outlives the registration: it is unregistered before the
        // page is freed (`release`), or both are forgotten with a queue given up.
        let registered = unsafe { sub.register_buf_ring_with_flags(base.as_ptr() as u64, FETCH_BUFFERS, group, 0) };
        match registered {
            Ok(()) => Ok(BufRing { base, tail: 0, group, layout, released: false }),
            Err(e) => {
                // SAFETY: allocated above with this layout, never registered.
                unsafe { std::alloc::dealloc(page, layout) };
                Err(e)
            }
        }
    }

    /// Gives fetch buffer `buf` (id `bid`) to the kernel: its descriptor at the
    /// tail, then the tail moved past it.
    fn give(&mut self, buf: &mut [u16], bid: u16) {
        assert!(!self.released, "a buffer given to a released ring");
        let len = u32::try_from(std::mem::size_of_val(buf)).expect("a fetch buffer holds at most 4,096 tags");
        let slot = usize::from(self.tail & (FETCH_BUFFERS - 1));
        // SAFETY: `slot` is below FETCH_BUFFERS, all in the ring's page; the kernel
        // reads a descriptor only once the tail has passed it, and this one is free
        // (at most FETCH_BUFFERS buffers exist, each given once after it came back).
        let e = unsafe { &mut *self.base.as_ptr().add(slot) };
        e.set_addr(buf.as_mut_ptr() as u64);
        e.set_len(len);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the first descriptor's last 2 bytes (aligned, in the
        // page), which the kernel only reads; the release store publishes the
        // descriptor written above before the tail that covers it.
        unsafe {
            let tail = types::BufRingEntry::tail(self.base.as_ptr()).cast_mut();
            std::sync::atomic::AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }

    /// Unregisters the ring from the io_uring `sub` submits to and frees its page:
    /// whether the kernel let go of it. If the unregistration fails the page is left
    /// as it is, and so must be the buffers it names: the kernel may still use them.
    fn release(&mut self, sub: &io_uring::Submitter<'_>) -> bool {
        if self.released {
            return true;
        }
        if sub.unregister_buf_ring(self.group).is_ok() {
            // SAFETY: allocated with this layout in `register`, no longer registered.
            unsafe { std::alloc::dealloc(self.base.as_ptr().cast(), self.layout) };
            self.released = true;
        }
        self.released
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // The ring is unregistered before the buffers go, so that no fetch command
        // still armed (a queue ended by a ring error) can take one afterwards (a
        // queue given up is forgotten, not dropped). Not while unwinding: the
        // queue's ring may be borrowed, and a second panic would abort; the page
        // and the buffers are then left to the ring's own end.
        if std::thread::panicking() || !libublk::io::with_task_io_ring(|r| self.ring.release(&r.submitter())) {
            // The kernel may still hand out the buffers the ring names.
            std::mem::forget(std::mem::take(&mut self.bufs));
        }
    }
}

/// Submits what the ring holds and waits for `n` completions: (user data, result)
/// of each. Only at the queue's start, when nothing else is on the ring.
fn wait_completions(n: usize) -> Result<Vec<(u64, i32)>, String> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let left = n - got.len();
        libublk::io::with_task_io_ring_mut(|r| {
            match r.submit_and_wait(left) {
                Err(e) if e.kind() != std::io::ErrorKind::Interrupted => return Err(e),
                _ => {}
            }
            got.extend(r.completion().map(|c| (c.user_data(), c.result())));
            Ok(())
        })
        .map_err(|e| format!("waiting for the driver: {e}"))?;
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads 2 bytes of `fd` into a buffer the kernel selects from `group`: the
    /// buffer's id, or the errno.
    fn read_selected(ring: &mut io_uring::IoUring, fd: i32, group: u16) -> Result<u16, i32> {
        let entry = opcode::Read::new(types::Fd(fd), std::ptr::null_mut(), 2)
            .offset(0)
            .buf_group(group)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT);
        // SAFETY: the read's buffer is one of the ring's, alive for the test.
        unsafe { ring.submission().push(&entry).unwrap() };
        ring.submit_and_wait(1).unwrap();
        let c = ring.completion().next().unwrap();
        if c.result() < 0 {
            return Err(-c.result());
        }
        assert_eq!(c.result(), 2);
        Ok(cqueue::buffer_select(c.flags()).expect("a selected buffer"))
    }

    #[test]
    fn the_fetch_buffers_ring_hands_out_each_buffer_given_back_once_in_order() {
        use std::os::fd::AsRawFd;
        let mut ring = io_uring::IoUring::new(8).expect("io_uring on this kernel");
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &[0xab, 0xcd]).unwrap();
        let fd = file.as_raw_fd();
        let group = 7;
        let mut bufs: Vec<Box<[u16]>> = (0..FETCH_BUFFERS).map(|_| vec![0u16; 8].into_boxed_slice()).collect();
        let mut br = BufRing::register(&ring.submitter(), group).expect("a buffer ring (Linux 5.19)");
        for (id, buf) in bufs.iter_mut().enumerate() {
            br.give(buf, id as u16);
        }
        // Given 0..4: taken in that order, then none is left.
        for want in 0..FETCH_BUFFERS {
            assert_eq!(read_selected(&mut ring, fd, group), Ok(want));
            assert_eq!(bufs[usize::from(want)][0], u16::from_ne_bytes([0xab, 0xcd]), "the data went into it");
            bufs[usize::from(want)][0] = 0;
        }
        assert_eq!(read_selected(&mut ring, fd, group), Err(libc::ENOBUFS));
        // Given back out of order, many times over (the tail wraps the ring's four
        // slots twenty times): each comes out once, in the order given back.
        for round in 0..20u16 {
            let order = [(round + 2) % 4, round % 4, (round + 3) % 4];
            for &bid in &order {
                br.give(&mut bufs[usize::from(bid)], bid);
            }
            for &bid in &order {
                assert_eq!(read_selected(&mut ring, fd, group), Ok(bid), "round {round}");
            }
            assert_eq!(read_selected(&mut ring, fd, group), Err(libc::ENOBUFS), "round {round}");
        }
        assert!(br.release(&ring.submitter()));
        // Released: the group is gone.
        assert_eq!(read_selected(&mut ring, fd, group), Err(libc::ENOBUFS));
    }

    #[test]
    fn elements_and_headers_have_the_driver_s_layout() {
        // struct ublk_elem_header (8 bytes) and the zone append's sector.
        assert_eq!(ELEM_BYTES, 16);
        assert_eq!(std::mem::offset_of!(Elem, result), 4);
        assert_eq!(std::mem::offset_of!(Elem, zone_lba), 8);
        let h = header(3, ELEM_FLAGS, 64, ELEM_BYTES);
        let want =
            sys::ublk_batch_io { q_id: 3, flags: ELEM_FLAGS, nr_elem: 64, elem_bytes: 16, reserved: 0, reserved2: 0 };
        assert_eq!(std::mem::size_of::<sys::ublk_batch_io>(), 16);
        // SAFETY: ublk_batch_io is 16 bytes of plain integers.
        let bytes: [u8; 16] = unsafe { std::mem::transmute(want) };
        assert_eq!(h, bytes);
    }
}
