//! A ublk request in zblk's terms: the descriptor the kernel fills decoded into a
//! [`Req`], the data copied through `/dev/ublkcN` (user copy), and the count of what
//! the kernel sent.

use crate::served::{Done, PagesOut, Req};
use libublk::sys;
use std::sync::atomic::{AtomicU64, Ordering};
use zblk_core::bio::{BioFlags, Op};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_dev::buf::AlignedBuf;

/// The ublk operations counted, with the names the summary gives them (the kernel's
/// `REQ_OP_*` names, lower case).
const OPS: [(u32, &str); 12] = [
    (sys::UBLK_IO_OP_READ, "read"),
    (sys::UBLK_IO_OP_WRITE, "write"),
    (sys::UBLK_IO_OP_FLUSH, "flush"),
    (sys::UBLK_IO_OP_DISCARD, "discard"),
    (sys::UBLK_IO_OP_WRITE_ZEROES, "write_zeroes"),
    (sys::UBLK_IO_OP_ZONE_OPEN, "zone_open"),
    (sys::UBLK_IO_OP_ZONE_CLOSE, "zone_close"),
    (sys::UBLK_IO_OP_ZONE_FINISH, "zone_finish"),
    (sys::UBLK_IO_OP_ZONE_APPEND, "zone_append"),
    (sys::UBLK_IO_OP_ZONE_RESET_ALL, "zone_reset_all"),
    (sys::UBLK_IO_OP_ZONE_RESET, "zone_reset"),
    (sys::UBLK_IO_OP_REPORT_ZONES, "report_zones"),
];

/// Requests received per operation of [`OPS`], and one more slot for any other.
static SERVED: [AtomicU64; OPS.len() + 1] = [const { AtomicU64::new(0) }; OPS.len() + 1];

/// WRITE_ZEROES requests the kernel sent with NOUNMAP (zeroes to be written, not
/// deallocated: `fallocate --zero-range` on the device).
static NOUNMAP: AtomicU64 = AtomicU64::new(0);

fn count_served(op: u32) {
    let slot = OPS.iter().position(|&(o, _)| o == op).unwrap_or(OPS.len());
    SERVED[slot].fetch_add(1, Ordering::Relaxed);
}

/// `read 12, write 3, ..., write_zeroes 4 (nounmap 1), ..., other 0`: every counted
/// operation, zeroes included, so a script can look for `zone_append 0`.
pub fn served_summary() -> String {
    let names = OPS.iter().map(|&(_, n)| n).chain(["other"]);
    let each = names.zip(&SERVED).map(|(n, c)| match n {
        "write_zeroes" => format!("{n} {} (nounmap {})", c.load(Ordering::Relaxed), NOUNMAP.load(Ordering::Relaxed)),
        _ => format!("{n} {}", c.load(Ordering::Relaxed)),
    });
    each.collect::<Vec<_>>().join(", ")
}

/// The request the kernel sent on a tag, in the tag's buffer; a write's data is not
/// copied in yet. A refusal gives the buffer back with the errno.
pub(super) fn decode(geo: &Geometry, iod: &sys::ublksrv_io_desc, buf: AlignedBuf) -> Result<Req, (i32, AlignedBuf)> {
    let op = iod.op_flags & 0xff;
    count_served(op);
    let sector = Sector(iod.start_sector);
    let mut flags = BioFlags::NONE;
    if iod.op_flags & sys::UBLK_IO_F_FUA != 0 {
        flags = flags | BioFlags::FUA;
    }
    if iod.op_flags & sys::UBLK_IO_F_NOUNMAP != 0 {
        flags = flags | BioFlags::NOUNMAP;
    }
    let io = |op, nr_sectors, flags, buf| Ok(Req::Io { op, sector, nr_sectors, flags, buf });
    // A zone operation on a conventional zone is an I/O error, as null_blk answers
    // (null_open_zone() and its siblings return BLK_STS_IOERR) and as the block layer
    // itself fails a reset or finish of a conventional zone before any driver sees it;
    // zblk's engine refuses it as invalid (EINVAL), which the kernel would pass on.
    let zone = |op, buf| {
        if sector.0 < geo.nr_sectors() && geo.zone_is_conv(geo.zone_no(sector)) {
            return Err((libc::EIO, buf));
        }
        io(op, 0, BioFlags::NONE, buf)
    };
    match op {
        sys::UBLK_IO_OP_READ | sys::UBLK_IO_OP_WRITE | sys::UBLK_IO_OP_ZONE_APPEND => {
            if iod.nr_sectors as usize * SECTOR_SIZE as usize > buf.len() {
                return Err((libc::EINVAL, buf));
            }
            let op = match op {
                sys::UBLK_IO_OP_READ => Op::Read,
                sys::UBLK_IO_OP_WRITE => Op::Write,
                _ => Op::ZoneAppend,
            };
            io(op, iod.nr_sectors, flags, buf)
        }
        sys::UBLK_IO_OP_DISCARD => io(Op::Discard, iod.nr_sectors, BioFlags::NONE, buf),
        sys::UBLK_IO_OP_WRITE_ZEROES => {
            if flags.contains(BioFlags::NOUNMAP) {
                NOUNMAP.fetch_add(1, Ordering::Relaxed);
            }
            io(Op::WriteZeroes, iod.nr_sectors, flags, buf)
        }
        sys::UBLK_IO_OP_FLUSH => io(Op::Flush, 0, BioFlags::NONE, buf),
        sys::UBLK_IO_OP_ZONE_OPEN => zone(Op::ZoneOpen, buf),
        sys::UBLK_IO_OP_ZONE_CLOSE => zone(Op::ZoneClose, buf),
        sys::UBLK_IO_OP_ZONE_FINISH => zone(Op::ZoneFinish, buf),
        sys::UBLK_IO_OP_ZONE_RESET => zone(Op::ZoneReset, buf),
        sys::UBLK_IO_OP_ZONE_RESET_ALL => io(Op::ZoneResetAll, 0, BioFlags::NONE, buf),
        // The kernel's nr_zones shares nr_sectors' place in the descriptor.
        sys::UBLK_IO_OP_REPORT_ZONES => {
            Ok(Req::Report { first: geo.zone_no(sector).0, nr_zones: iod.nr_sectors as usize, buf })
        }
        _ => Err((libc::EOPNOTSUPP, buf)),
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// Copies a read's data into the kernel's request.
pub(super) fn copy_to_kernel(cdev: i32, pos: u64, data: &[u8]) -> Result<(), i32> {
    // SAFETY: data is a valid slice for its length; cdev is the device's open
    // /dev/ublkcN, which stays open while the queue runs.
    let n = unsafe { libc::pwrite(cdev, data.as_ptr().cast(), data.len(), pos as libc::off_t) };
    if n < 0 {
        return Err(errno());
    }
    if n as usize != data.len() { Err(libc::EIO) } else { Ok(()) }
}

/// Copies a read's data into the kernel's request straight from the memory device's
/// pages: vectored writes to the request's bytes (user copy takes them at any offset
/// of the request), one for up to 1,024 slices of pages.
pub(super) fn copy_pages_to_kernel(cdev: i32, pos: u64, p: &PagesOut, iov: &mut Vec<libc::iovec>) -> Result<(), i32> {
    p.write_out(iov, |at, group| {
        // SAFETY: the iovecs point into the memory device's pages, locked while
        // `write_out` runs; cdev as in copy_to_kernel.
        let n = unsafe { libc::pwritev(cdev, group.as_ptr(), group.len() as i32, (pos + at) as libc::off_t) };
        if n < 0 { Err(errno()) } else { Ok(n as usize) }
    })
}

/// Copies a write's data out of the kernel's request.
pub(super) fn copy_from_kernel(cdev: i32, pos: u64, data: &mut [u8]) -> Result<(), i32> {
    // SAFETY: as copy_to_kernel, the slice is writable for its length.
    let n = unsafe { libc::pread(cdev, data.as_mut_ptr().cast(), data.len(), pos as libc::off_t) };
    if n < 0 {
        return Err(errno());
    }
    if n as usize != data.len() { Err(libc::EIO) } else { Ok(()) }
}

/// Copies a zone report into the kernel's request and completes the whole request.
///
/// ublk_report_zones() sizes its buffer for every zone from the first one asked (at
/// most max_hw_sectors), then asks for it in requests of as many zones as fit, each
/// request the whole buffer. The last request of a multi-request report asks for
/// fewer zones than its buffer holds: completing it with only the zones' bytes is a
/// partial completion, which __ublk_complete_rq() requeues (blk_update_request()
/// leaves bytes), and the requeued remainder, asking for the same zones again, is
/// shorter than their report: the user copy falls short and the revalidation fails.
/// So the zones are followed by zeroes (a zero-length zone ends a report) up to the
/// longest request, the copy stops at the request's end, and the request completes
/// with every byte it has.
pub(super) fn copy_report_to_kernel(cdev: i32, pos: u64, buf: &mut [u8], zones_bytes: usize) -> Result<Done, i32> {
    let n = copy_report_padded(buf, zones_bytes, |data| {
        // SAFETY: as copy_to_kernel; the kernel copies at most the request's bytes
        // and returns how many.
        let n = unsafe { libc::pwrite(cdev, data.as_ptr().cast(), data.len(), pos as libc::off_t) };
        if n < 0 { Err(errno()) } else { Ok(n as usize) }
    })?;
    Ok(Done::Bytes(n as i32))
}

/// Pads a report of `zones_bytes` with zeroes to the longest request (the tag's
/// buffer: the device's `max_io_buf_bytes`, which bounds the kernel's report buffer),
/// hands it to `write` (which copies what the request holds) and returns the bytes
/// copied: an error if they do not hold every zone.
fn copy_report_padded(
    buf: &mut [u8],
    zones_bytes: usize,
    write: impl FnOnce(&[u8]) -> Result<usize, i32>,
) -> Result<usize, i32> {
    assert!(zones_bytes <= buf.len(), "a report fits its tag's buffer");
    // The buffer may hold an earlier request's data.
    buf[zones_bytes..].fill(0);
    let n = write(buf)?;
    if n < zones_bytes { Err(libc::EIO) } else { Ok(n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_report_completes_the_whole_request() {
        // The last request of a report: 5,262 zones (the 30 TB preset's 111,758 less
        // 13 full requests) in a 512 KiB buffer, answered in a buffer holding an
        // earlier read's data.
        let zones = 5262 * crate::BLK_ZONE_BYTES;
        let mut buf = vec![0xa5u8; crate::MIN_IO_BUF_BYTES as usize];
        buf[..zones].fill(1);
        let request = crate::MIN_IO_BUF_BYTES as usize;
        let mut sent = Vec::new();
        let n = copy_report_padded(&mut buf, zones, |d| {
            sent = d[..d.len().min(request)].to_vec();
            Ok(sent.len())
        });
        assert_eq!(n, Ok(request), "every byte of the request, not only the zones'");
        assert!(sent[..zones].iter().all(|&b| b == 1));
        assert!(sent[zones..].iter().all(|&b| b == 0), "a zero-length zone after the last one");
        // A request shorter than the longest (a report of few zones): its own bytes.
        let mut buf = vec![0u8; crate::MIN_IO_BUF_BYTES as usize];
        assert_eq!(copy_report_padded(&mut buf, 128, |d| Ok(d.len().min(4096))), Ok(4096));
        // A request that does not hold the zones: an error, not a truncated report.
        assert_eq!(copy_report_padded(&mut buf, 8192, |d| Ok(d.len().min(4096))), Err(libc::EIO));
    }
}
