//! What a ublk queue hands its requests to: a device that serves them
//! asynchronously and calls back when each one is done, from any thread. The image
//! and Linux zoned devices are served by zblk's runtime ([`RuntimeServed`]);
//! simulated devices and stacks by the simulator paced to wall-clock time
//! (`super::paced`).

use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneInfo;
use zblk_runtime::{Io, IoDone, Submitter};

/// One request of the kernel.
#[derive(Debug)]
pub(crate) enum Req {
    /// A read, write or zone append (`buf` holds the write's data, or receives the
    /// read's), a flush or a zone management operation (`buf` empty).
    Io {
        /// The operation.
        op: Op,
        /// Its sector (the zone start for zone operations and appends).
        sector: Sector,
        /// FUA.
        flags: BioFlags,
        /// The data.
        buf: Vec<u8>,
    },
    /// A zone report of `nr_zones` zones from zone `first`, into `buf`.
    Report {
        /// First zone.
        first: u32,
        /// Zones the kernel's buffer holds.
        nr_zones: usize,
        /// Where the 64-byte `struct blk_zone`s go.
        buf: Vec<u8>,
    },
}

/// A served request's outcome.
#[derive(Debug)]
pub(crate) struct Reply {
    /// Bytes done, the sector of an append, or a positive errno.
    pub result: Result<Done, i32>,
    /// The request's buffer back.
    pub buf: Vec<u8>,
    /// How many bytes of `buf` go to the kernel (a read's data, a zone report).
    pub copy_out: usize,
}

/// What a served request returns to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Done {
    /// Bytes transferred (0 for requests without data).
    Bytes(i32),
    /// A zone append: bytes, and the sector the data landed at.
    Appended(i32, u64),
}

/// Called once with a request's [`Reply`], from any thread.
pub(crate) type DoneFn = Box<dyn FnOnce(Reply) + Send>;

/// A device the ublk queues serve.
pub(crate) trait Served: Send + Sync {
    /// Its geometry (what the kernel is told).
    fn geometry(&self) -> &Geometry;
    /// Serves `req`; `done` is called exactly once, maybe before this returns.
    fn submit(&self, req: Req, done: DoneFn);
}

/// Size of the kernel's `struct blk_zone`.
pub(crate) const BLK_ZONE_BYTES: usize = 64;

/// A zone as the kernel's `struct blk_zone` (little-endian x86/arm layout: start, len,
/// wp, type, cond, non_seq, reset, 4 reserved, capacity, 24 reserved).
pub(crate) fn encode_zone(z: &ZoneInfo, out: &mut [u8]) {
    let raw = crate::image::raw(z);
    out.fill(0);
    out[0..8].copy_from_slice(&raw.start.to_ne_bytes());
    out[8..16].copy_from_slice(&raw.len.to_ne_bytes());
    out[16..24].copy_from_slice(&raw.wp.to_ne_bytes());
    out[24] = raw.ztype;
    out[25] = raw.cond;
    out[32..40].copy_from_slice(&raw.capacity.to_ne_bytes());
}

/// How many zones of a report fit: the kernel asks from a zone start for as many as
/// its buffer holds, never past the last zone.
pub(crate) fn report_count(geo: &Geometry, first: u32, nr_zones: usize, buf_len: usize) -> usize {
    let total = geo.nr_zones() as usize;
    nr_zones.min(total.saturating_sub(first as usize)).min(buf_len / BLK_ZONE_BYTES)
}

/// The image or Linux zoned device through zblk's runtime: many requests in flight
/// per queue, each completed from the runtime's completion path.
pub(crate) struct RuntimeServed {
    sub: Submitter,
    geo: Geometry,
}

impl RuntimeServed {
    /// Serves through `sub` a device of geometry `geo`.
    pub(crate) fn new(sub: Submitter, geo: Geometry) -> RuntimeServed {
        RuntimeServed { sub, geo }
    }
}

impl Served for RuntimeServed {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn submit(&self, req: Req, done: DoneFn) {
        match req {
            Req::Report { first, nr_zones, mut buf } => {
                let count = report_count(&self.geo, first, nr_zones, buf.len());
                let mut result = Ok(Done::Bytes((count * BLK_ZONE_BYTES) as i32));
                for i in 0..count {
                    let start = self.geo.zone_start(zblk_core::units::ZoneNo(first + i as u32));
                    match self.sub.zone_info(start) {
                        Ok(z) => encode_zone(&z, &mut buf[i * BLK_ZONE_BYTES..(i + 1) * BLK_ZONE_BYTES]),
                        Err(s) => {
                            result = Err(s.errno());
                            break;
                        }
                    }
                }
                let copy_out = if result.is_ok() { count * BLK_ZONE_BYTES } else { 0 };
                done(Reply { result, buf, copy_out });
            }
            Req::Io { op, sector, flags, buf } => {
                let len = buf.len();
                let io = match op {
                    Op::Read => Io::read(sector, buf),
                    Op::Write => Io::write(sector, buf),
                    Op::ZoneAppend => Io::append(sector, buf),
                    Op::Flush => Io::flush(),
                    op if op.is_zone_mgmt() => Io::zone(op, sector),
                    _ => {
                        done(Reply { result: Err(libc::EOPNOTSUPP), buf, copy_out: 0 });
                        return;
                    }
                };
                self.sub.submit(io.with_flags(flags), move |d: IoDone| {
                    let buf = match d.buf {
                        Some(zblk_runtime::Buffer::Vec(v)) => v,
                        Some(zblk_runtime::Buffer::Aligned(a)) => a.to_vec(),
                        None => Vec::new(),
                    };
                    let (result, copy_out) = outcome(op, len, d.result);
                    done(Reply { result, buf, copy_out });
                });
            }
        }
    }
}

/// The kernel's view of a finished I/O of `len` bytes.
pub(crate) fn outcome(op: Op, len: usize, r: Result<Sector, Status>) -> (Result<Done, i32>, usize) {
    match r {
        Err(s) => (Err(s.errno()), 0),
        Ok(at) => match op {
            Op::ZoneAppend => (Ok(Done::Appended(len as i32, at.0)), 0),
            Op::Read => (Ok(Done::Bytes(len as i32)), len),
            Op::Write => (Ok(Done::Bytes(len as i32)), 0),
            _ => (Ok(Done::Bytes(0)), 0),
        },
    }
}
