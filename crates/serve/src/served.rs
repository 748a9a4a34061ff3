//! What a server hands the kernel's requests to: a device that serves them
//! asynchronously and calls back when each one is done, from any thread
//! ([`Served`]). Images, Linux zoned devices and the memory device are served by
//! zblk's runtime ([`RuntimeServed`]); simulated devices and stacks by the simulator
//! paced to wall-clock time ([`crate::paced`]).

use crate::{BLK_ZONE_BYTES, say};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_dev::buf::AlignedBuf;
use zblk_dev::{Locked, MemDevice};
use zblk_runtime::{Buffer, Completion, Io, IoDone, Submitter};

/// One request of the kernel.
#[derive(Debug)]
pub enum Req {
    /// A read, write or zone append (the first `nr_sectors` of `buf` hold the write's
    /// data, or receive the read's), a discard or write zeroes (`nr_sectors`, no
    /// data), a flush or a zone management operation.
    Io {
        /// The operation.
        op: Op,
        /// Its sector (the zone start for zone operations and appends).
        sector: Sector,
        /// Its length, in sectors (0 without a range).
        nr_sectors: u32,
        /// FUA, NOUNMAP.
        flags: BioFlags,
        /// The request's buffer: at least `nr_sectors` long for reads and writes,
        /// handed back in the [`Reply`] whatever the operation.
        buf: AlignedBuf,
    },
    /// A zone report of `nr_zones` zones from zone `first`, into `buf`.
    Report {
        /// First zone.
        first: u32,
        /// Zones the kernel's buffer holds.
        nr_zones: usize,
        /// Where the 64-byte `struct blk_zone`s go.
        buf: AlignedBuf,
    },
}

impl Req {
    /// Bytes of data the request moves (a read's, write's or append's).
    pub fn data_len(&self) -> usize {
        match self {
            Req::Io { op, nr_sectors, .. } if op.has_data() => *nr_sectors as usize * SECTOR_SIZE as usize,
            _ => 0,
        }
    }
}

/// A served request's outcome.
#[derive(Debug)]
pub struct Reply {
    /// Bytes done, the sector of an append, or a positive errno.
    pub result: Result<Done, i32>,
    /// The request's buffer back.
    pub buf: AlignedBuf,
    /// What goes to the kernel's request.
    pub copy_out: CopyOut,
}

/// What of a served request goes back to the kernel's request.
pub enum CopyOut {
    /// Nothing (a write, a request without data, a failure).
    Nothing,
    /// The first bytes of the reply's buffer: a read's data, a zone report.
    Buf(usize),
    /// A completed read's data, straight from the memory device's pages: one copy
    /// (into the kernel's request) instead of two.
    Pages(PagesOut),
}

impl CopyOut {
    /// The bytes of the buffer that go out (0 unless [`CopyOut::Buf`]).
    pub fn buf_bytes(&self) -> usize {
        if let CopyOut::Buf(n) = self { *n } else { 0 }
    }
}

impl std::fmt::Debug for CopyOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyOut::Nothing => write!(f, "Nothing"),
            CopyOut::Buf(n) => write!(f, "Buf({n})"),
            CopyOut::Pages(p) => write!(f, "Pages({} bytes at sector {})", p.len, p.sector.0),
        }
    }
}

/// A read of the memory device that passed its checks, whose data the device's
/// pages hold ([`RuntimeServed::reading_from`]).
pub struct PagesOut {
    dev: Arc<Locked<MemDevice>>,
    sector: Sector,
    len: usize,
}

/// Most `iovec`s one vectored system call takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

impl PagesOut {
    /// Hands the read's bytes to `write` as `iovec`s over the device's pages (and
    /// runs of zeroes), under the device's lock shared with other reads (a write
    /// waits), at most 1,024 of them a call (`IOV_MAX`):
    /// `write(offset of the first byte in the read, iovecs)` returns how many bytes
    /// it took, or an errno; fewer than given is EIO. `iov` is scratch space, kept
    /// by the caller so that a read allocates nothing; it holds no pointer after.
    pub fn write_out(
        &self,
        iov: &mut Vec<libc::iovec>,
        mut write: impl FnMut(u64, &[libc::iovec]) -> Result<usize, i32>,
    ) -> Result<(), i32> {
        let dev = self.dev.read();
        iov.clear();
        dev.read_slices(self.sector, self.len, |p| {
            iov.push(libc::iovec { iov_base: p.as_ptr().cast_mut().cast(), iov_len: p.len() })
        });
        let mut at = 0u64;
        let mut result = Ok(());
        for group in iov.chunks(IOV_MAX) {
            let want: usize = group.iter().map(|v| v.iov_len).sum();
            match write(at, group) {
                Ok(n) if n == want => at += want as u64,
                Ok(_) => result = Err(libc::EIO),
                Err(e) => result = Err(e),
            }
            if result.is_err() {
                break;
            }
        }
        // (The pointers are the locked device's: none outlives the lock.)
        iov.clear();
        result
    }
}

/// What a served request returns to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    /// Bytes transferred (0 for requests without data).
    Bytes(i32),
    /// A zone append: bytes, and the sector the data landed at.
    Appended(i32, u64),
}

/// What ends a request: called once with its [`Reply`], from any thread.
pub enum ReplyTo {
    /// A boxed callback.
    Call(Box<dyn FnOnce(Reply) + Send>),
    /// Request `tag` of a queue, whose replies all go to one [`Tagged`]: a request
    /// then costs no allocation, as a kernel request carries its tag, not a closure.
    Tag(Arc<dyn TaggedReplies>, u16),
}

impl ReplyTo {
    /// A boxed callback.
    pub fn call(f: impl FnOnce(Reply) + Send + 'static) -> ReplyTo {
        ReplyTo::Call(Box::new(f))
    }

    /// Request `tag`, its reply to `to`.
    pub fn tag<R: Replies>(to: &Arc<Tagged<R>>, tag: u16) -> ReplyTo {
        ReplyTo::Tag(Arc::clone(to) as Arc<dyn TaggedReplies>, tag)
    }

    /// Ends the request with `r`.
    pub fn reply(self, r: Reply) {
        match self {
            ReplyTo::Call(f) => f(r),
            ReplyTo::Tag(to, tag) => to.reply(tag, r),
        }
    }
}

/// Where the replies of a queue's requests go, named by their tags (a ublk queue's
/// mailbox): what a queue implements, and hands over as a [`Tagged`].
pub trait Replies: Send + Sync + 'static {
    /// Request `tag`'s reply.
    fn reply(&self, tag: u16, r: Reply);
}

/// A queue's [`Replies`], made once per queue, which the requests it names by tag
/// reach both ways: a reply made by the served device ([`ReplyTo::Tag`]), and the
/// end of a request that went to the runtime as one I/O named by a token
/// ([`RuntimeServed`] makes it from the tag, the operation and the length), which
/// the runtime hands to it as its [`Completion`] and which becomes the same reply
/// (`reply_of_io`). Derefs to the queue's own object.
pub struct Tagged<R>(R);

impl<R: Replies> Tagged<R> {
    /// `r`, shared, for its requests to name.
    pub fn new(r: R) -> Arc<Tagged<R>> {
        Arc::new(Tagged(r))
    }
}

impl<R> std::ops::Deref for Tagged<R> {
    type Target = R;
    fn deref(&self) -> &R {
        &self.0
    }
}

/// The end of a request that went to the runtime as one I/O, named by its token.
impl<R: Replies> Completion for Tagged<R> {
    fn complete(&self, token: u64, d: IoDone) {
        let (tag, r) = reply_of_io(token, d);
        self.0.reply(tag, r);
    }
}

/// A [`Tagged`] of any queue: what [`ReplyTo::Tag`] holds.
pub trait TaggedReplies: Send + Sync {
    /// Request `tag`'s reply.
    fn reply(&self, tag: u16, r: Reply);

    /// The same object as the runtime's [`Completion`], for a request that goes to
    /// the runtime as one I/O named by a token.
    fn as_completion(self: Arc<Self>) -> Arc<dyn Completion>;
}

impl<R: Replies> TaggedReplies for Tagged<R> {
    fn reply(&self, tag: u16, r: Reply) {
        self.0.reply(tag, r);
    }

    fn as_completion(self: Arc<Self>) -> Arc<dyn Completion> {
        self
    }
}

/// The tag and reply of the request whose runtime I/O, named by `token` (made by
/// [`RuntimeServed`] from the tag, the operation and the length), ended with `d`.
fn reply_of_io(token: u64, d: IoDone) -> (u16, Reply) {
    let tag = token as u16;
    let op = match (token >> 16) as u8 {
        TOKEN_READ => Op::Read,
        TOKEN_WRITE => Op::Write,
        _ => Op::ZoneAppend,
    };
    let len = (token >> 32) as usize;
    let Some(Buffer::Aligned(buf)) = d.buf else { unreachable!("the runtime hands back the buffer it was given") };
    let (result, copy_out) = outcome(op, len, d.result);
    (tag, Reply { result, buf, copy_out })
}

/// The operation's code in a token of [`reply_of_io`].
const TOKEN_READ: u8 = 0;
const TOKEN_WRITE: u8 = 1;
const TOKEN_APPEND: u8 = 2;

/// A device the ublk queues serve.
pub trait Served: Send + Sync {
    /// Its geometry (what the kernel is told).
    fn geometry(&self) -> &Geometry;

    /// Serves `req`; `done` is called exactly once, maybe before this returns (on
    /// this thread), maybe later on another.
    fn submit(&self, req: Req, done: ReplyTo);

    /// Answers `req` here and now when the device can do so without its engine or a
    /// callback (a read of the memory device: see [`RuntimeServed::reading_from`]);
    /// gives it back otherwise, for [`Served::submit`]. A queue asks this first: a
    /// request answered so costs no boxed completion and no hand-off.
    fn serve_now(&self, req: Req) -> Result<Reply, Req> {
        Err(req)
    }

    /// The runtime behind the device, for a queue that carries the runtime's data
    /// transfers on its own ring ([`Submitter::on_local_ring`]); `None` when there is
    /// none (a paced simulation).
    fn runtime(&self) -> Option<&Submitter> {
        None
    }

    /// Whether the device keeps what is written: one that does not (a simulated
    /// device served for its timing only) needs no write's data copied to it.
    fn keeps_data(&self) -> bool {
        true
    }

    /// The server is stopping: every request the device holds, and every one that
    /// comes from now on, must end at once (fail or complete), whatever it would
    /// still take. The kernel removes the disk only once no request is in flight
    /// (del_gendisk waits for them), so a request the device keeps for its own time
    /// (a paced model's hour at a large time scale) would hold the stop that long.
    /// A device whose requests end by themselves soon (an image's I/O) has nothing
    /// to do.
    fn stop(&self) {}
}

/// A zone as the kernel's `struct blk_zone` (zblk-dev's `BlkZone`, which the zone
/// report ioctl reads too), into `out`, [`BLK_ZONE_BYTES`] long.
pub fn encode_zone(z: &ZoneInfo, out: &mut [u8]) {
    let out: &mut [u8; BLK_ZONE_BYTES] = out.try_into().expect("one struct blk_zone's bytes");
    zblk_dev::linux::BlkZone::of(z).write_to(out);
}

/// How many zones of a report fit: the kernel asks from a zone start for as many as
/// its buffer holds, never past the last zone.
pub fn report_count(geo: &Geometry, first: u32, nr_zones: usize, buf_len: usize) -> usize {
    let total = geo.nr_zones() as usize;
    nr_zones.min(total.saturating_sub(first as usize)).min(buf_len / BLK_ZONE_BYTES)
}

/// A memory bound on the data a served memory device keeps: writes that would take
/// new pages past it fail with ENOSPC (said once on standard error).
pub struct DataLimit {
    dev: Arc<Locked<MemDevice>>,
    bytes: u64,
    said: AtomicBool,
}

impl DataLimit {
    /// At most `bytes` of data in `dev`.
    pub fn new(dev: Arc<Locked<MemDevice>>, bytes: u64) -> DataLimit {
        DataLimit { dev, bytes, said: AtomicBool::new(false) }
    }

    /// Whether a write of `len` bytes at `sector` (an append: into the zone at
    /// `sector`, wherever its write pointer is) must be refused.
    fn refuses(&self, op: Op, sector: Sector, len: usize) -> bool {
        let dev = self.dev.read();
        // Far from the limit, no page needs counting: a write takes at most one page
        // more than its length.
        let page = zblk_dev::pages::PAGE_BYTES as u64;
        if dev.resident_bytes() + (len as u64).div_ceil(page) * page + page <= self.bytes {
            return false;
        }
        let more = if op == Op::ZoneAppend { len as u64 } else { dev.new_bytes(sector, len) };
        let over = more > 0 && dev.resident_bytes().saturating_add(more) > self.bytes;
        drop(dev);
        if over && !self.said.swap(true, Ordering::Relaxed) {
            say(&format!(
                "the data limit ({} bytes) is reached: further writes fail with ENOSPC (raise --data-limit, or \
                 serve with --no-data)",
                self.bytes
            ));
        }
        over
    }
}

/// What a server that recovers a device (its last server died) knows of the writes
/// the kernel gives it again: the kernel's zone write plugging had at most one write
/// per zone in flight, and the image recorded the write pointer of what completed. So
/// the first write of a zone that ends exactly at the zone's write pointer when the
/// server started is that write given again, whose data the image already holds: it
/// is acknowledged without writing once the image's bytes are read back equal to it
/// (anything else, a different write behind the write pointer, fails as ever).
#[derive(Debug)]
pub struct Replay {
    /// Per zone: its write pointer at the start, until the zone's first request that
    /// is not a read.
    wps: std::sync::Mutex<Vec<Option<Sector>>>,
    said: AtomicBool,
}

impl Replay {
    /// The zones as the device reports them when the server starts.
    pub fn new(zones: &[ZoneInfo]) -> Replay {
        use zblk_core::zone::ZoneType;
        let wps = zones.iter().map(|z| (z.ztype != ZoneType::Conventional && z.wp > z.start).then_some(z.wp)).collect();
        Replay { wps: std::sync::Mutex::new(wps), said: AtomicBool::new(false) }
    }

    /// The write pointer zone `z` had at the start if this is the zone's first
    /// request since that is not a read, and it wrote there.
    fn first(&self, z: ZoneNo) -> Option<Sector> {
        let mut wps = self.wps.lock().unwrap_or_else(|p| p.into_inner());
        wps.get_mut(z.0 as usize).and_then(Option::take)
    }

    /// Forgets every zone's window (RESET_ALL).
    fn forget(&self) {
        self.wps.lock().unwrap_or_else(|p| p.into_inner()).fill(None);
    }
}

/// The image, Linux zoned device or memory device through zblk's runtime: many
/// requests in flight per queue, each completed from the runtime's completion path,
/// or on the queue's thread when the queue carries the runtime's transfers on its
/// own ring or the device works in memory.
pub struct RuntimeServed {
    sub: Submitter,
    geo: Geometry,
    limit: Option<DataLimit>,
    replay: Option<Replay>,
    /// The memory device behind the runtime, whose reads go to the kernel straight
    /// from its pages.
    pages: Option<Arc<Locked<MemDevice>>>,
}

impl RuntimeServed {
    /// Serves through `sub` a device of geometry `geo`, its written data bounded by
    /// `limit` (a memory device).
    pub fn new(sub: Submitter, geo: Geometry, limit: Option<DataLimit>) -> RuntimeServed {
        RuntimeServed { sub, geo, limit, replay: None, pages: None }
    }

    /// The same, the device behind `sub` being `dev`, the memory device: a read does
    /// not go through the engine, which would only check it and pass it on; it is
    /// checked here as the engine and the device check it and its data goes to the
    /// kernel from the device's pages ([`CopyOut::Pages`]), instead of being copied
    /// into the request's buffer first and from there.
    pub fn reading_from(mut self, dev: Arc<Locked<MemDevice>>) -> RuntimeServed {
        self.pages = Some(dev);
        self
    }

    /// The same, serving a device recovered from a server that died: the writes
    /// the kernel gives again are acknowledged as [`Replay`] says.
    pub fn recovering(mut self, replay: Replay) -> RuntimeServed {
        self.replay = Some(replay);
        self
    }

    /// Whether `op` at `sector` is a write given again after the last server died,
    /// whose data the image holds (as [`Replay`] says): the zone's first request since
    /// the start other than a read, ending at its write pointer then.
    fn replayed(&self, op: Op, sector: Sector, nr_sectors: u32) -> bool {
        let Some(replay) = &self.replay else { return false };
        if op == Op::ZoneResetAll {
            replay.forget();
            return false;
        }
        // A read (given again too, in any order) leaves the zone as it was: only what
        // changes the zone spends its window.
        if op == Op::Read || !op.has_range() && !op.is_zone_mgmt() || sector.0 >= self.geo.nr_sectors() {
            return false;
        }
        let wp = replay.first(self.geo.zone_no(sector));
        op == Op::Write && wp.is_some_and(|wp| sector < wp && sector + u64::from(nr_sectors) == wp)
    }

    /// Acknowledges the write given again once the device's bytes are read back equal
    /// to its data; fails it as a write behind the write pointer otherwise.
    fn acknowledge_replayed(&self, sector: Sector, len: usize, buf: AlignedBuf, done: ReplyTo) {
        let said = self.replay.as_ref().is_some_and(|r| r.said.swap(true, Ordering::Relaxed));
        self.sub.submit(Io::read(sector, AlignedBuf::zeroed(len)), move |d: IoDone| {
            let same = d.result.is_ok() && matches!(&d.buf, Some(Buffer::Aligned(r)) if r[..] == buf[..len]);
            if same && !said {
                say(&format!(
                    "the write at sector {} that was in flight when the last server died is in the image: \
                     acknowledged without writing it again (said once)",
                    sector.0
                ));
            }
            let result = if same { Ok(Done::Bytes(len as i32)) } else { Err(Status::Unaligned.errno()) };
            done.reply(Reply { result, buf, copy_out: CopyOut::Nothing });
        });
    }

    /// A read of the memory device, without the engine: the engine would only check
    /// it and pass it on (zone write plugging leaves reads alone, as the kernel's
    /// does), and the device, which works in memory, would complete it at once. So
    /// the read gets the device's checks here ([`MemDevice::check_read`]: its length,
    /// range and alignment, which are all the engine checks of a read, and the
    /// condition of its zones), and its data goes to the kernel from the device's
    /// pages when it is committed.
    fn read_pages(&self, dev: &Arc<Locked<MemDevice>>, sector: Sector, nr_sectors: u32, buf: AlignedBuf) -> Reply {
        let checked = dev.read().check_read(sector, nr_sectors);
        let len = nr_sectors as usize * SECTOR_SIZE as usize;
        match checked {
            Ok(_) => Reply {
                result: Ok(Done::Bytes(len as i32)),
                buf,
                copy_out: CopyOut::Pages(PagesOut { dev: Arc::clone(dev), sector, len }),
            },
            Err(s) => Reply { result: Err(s.errno()), buf, copy_out: CopyOut::Nothing },
        }
    }

    fn report(&self, first: u32, nr_zones: usize, mut buf: AlignedBuf, done: ReplyTo) {
        let count = report_count(&self.geo, first, nr_zones, buf.len());
        let mut result = Ok(Done::Bytes((count * BLK_ZONE_BYTES) as i32));
        for i in 0..count {
            let start = self.geo.zone_start(ZoneNo(first + i as u32));
            match self.sub.zone_info(start) {
                Ok(z) => encode_zone(&z, &mut buf[i * BLK_ZONE_BYTES..(i + 1) * BLK_ZONE_BYTES]),
                Err(s) => {
                    result = Err(s.errno());
                    break;
                }
            }
        }
        let copy_out = if result.is_ok() { CopyOut::Buf(count * BLK_ZONE_BYTES) } else { CopyOut::Nothing };
        done.reply(Reply { result, buf, copy_out });
    }
}

impl Served for RuntimeServed {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn runtime(&self) -> Option<&Submitter> {
        // The memory device works inline and has no descriptor: the runtime never
        // has a transfer for a queue's ring to carry, so the queue need not offer it one.
        match self.pages {
            Some(_) => None,
            None => Some(&self.sub),
        }
    }

    fn serve_now(&self, req: Req) -> Result<Reply, Req> {
        match (req, &self.pages) {
            // (A read spends no replay window and takes no data limit: nothing to
            // check but what `read_pages` checks.)
            (Req::Io { op: Op::Read, sector, nr_sectors, buf, .. }, Some(dev)) => {
                Ok(self.read_pages(dev, sector, nr_sectors, buf))
            }
            (req, _) => Err(req),
        }
    }

    fn submit(&self, req: Req, done: ReplyTo) {
        let len = req.data_len();
        let (op, sector, nr_sectors, flags, buf) = match req {
            Req::Report { first, nr_zones, buf } => return self.report(first, nr_zones, buf, done),
            Req::Io { op, sector, nr_sectors, flags, buf } => (op, sector, nr_sectors, flags, buf),
        };
        // What `serve_now` answers (taken apart here: the request is not moved in
        // and out of it on every write).
        if let (Op::Read, Some(dev)) = (op, &self.pages) {
            return done.reply(self.read_pages(dev, sector, nr_sectors, buf));
        }
        if matches!(op, Op::Write | Op::ZoneAppend) && self.limit.as_ref().is_some_and(|l| l.refuses(op, sector, len)) {
            return done.reply(Reply { result: Err(libc::ENOSPC), buf, copy_out: CopyOut::Nothing });
        }
        if self.replayed(op, sector, nr_sectors) {
            return self.acknowledge_replayed(sector, len, buf, done);
        }
        // A data I/O of a queue's request goes named by a token: the tag, the
        // operation and the length say what the reply is (reply_of_io).
        let code = match op {
            Op::Read => Some(TOKEN_READ),
            Op::Write => Some(TOKEN_WRITE),
            Op::ZoneAppend => Some(TOKEN_APPEND),
            _ => None,
        };
        let done = match (done, code) {
            (ReplyTo::Tag(to, tag), Some(code)) => {
                let len32 = u32::try_from(len).expect("a request's length fits the kernel's 32 bits");
                let token = u64::from(tag) | u64::from(code) << 16 | u64::from(len32) << 32;
                let io = match op {
                    Op::Read => Io::read(sector, buf),
                    Op::Write => Io::write(sector, buf),
                    _ => Io::append(sector, buf),
                };
                // (The queue's reference moves on with the I/O: no count taken.)
                return self.sub.submit_to(io.with_len(len).with_flags(flags), to.as_completion(), token);
            }
            (done, _) => done,
        };
        // The buffer travels with a data I/O; the others leave it here until done.
        let (io, spare) = match op {
            Op::Read => (Io::read(sector, buf).with_len(len), None),
            Op::Write => (Io::write(sector, buf).with_len(len), None),
            Op::ZoneAppend => (Io::append(sector, buf).with_len(len), None),
            Op::WriteZeroes => (Io::write_zeroes(sector, nr_sectors), Some(buf)),
            Op::Discard => (Io::discard(sector, nr_sectors), Some(buf)),
            Op::Flush => (Io::flush(), Some(buf)),
            op => (Io::zone(op, sector), Some(buf)),
        };
        self.sub.submit(io.with_flags(flags), move |d: IoDone| {
            let buf = match (d.buf, spare) {
                (Some(Buffer::Aligned(a)), None) => a,
                (None, Some(b)) => b,
                _ => unreachable!("the runtime hands back the buffer it was given"),
            };
            let (result, copy_out) = outcome(op, len, d.result);
            done.reply(Reply { result, buf, copy_out });
        });
    }
}

/// The kernel's view of a finished I/O of `len` bytes (a read's data in the
/// request's buffer).
pub fn outcome(op: Op, len: usize, r: Result<Sector, Status>) -> (Result<Done, i32>, CopyOut) {
    match r {
        Err(s) => (Err(s.errno()), CopyOut::Nothing),
        Ok(at) => match op {
            Op::ZoneAppend => (Ok(Done::Appended(len as i32, at.0)), CopyOut::Nothing),
            Op::Read => (Ok(Done::Bytes(len as i32)), CopyOut::Buf(len)),
            Op::Write => (Ok(Done::Bytes(len as i32)), CopyOut::Nothing),
            _ => (Ok(Done::Bytes(0)), CopyOut::Nothing),
        },
    }
}
