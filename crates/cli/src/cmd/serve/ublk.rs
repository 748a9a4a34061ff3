//! The ublk side of `zblk serve` (feature `ublk`): the device's parameters, its
//! queues, each request through zblk's runtime.

use super::{IO_BUF_BYTES, ServeArgs, check_geometry};
use crate::{CliError, devspec, image};
use libublk::ctrl::UblkCtrl;
use libublk::io::{BufDescList, UblkDev, UblkIOCtx, UblkQueue};
use libublk::{BufDesc, UblkFlags, UblkIORes, sys};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::engine::EngineConfig;
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_core::zone::ZoneInfo;
use zblk_dev::device::Locked;
use zblk_dev::mem::MemDevice;
use zblk_runtime::{Backend, Runtime, RuntimeConfig};

/// Serves the device (the driver is there: [`super::check_driver`] said so).
pub(super) fn run(a: &ServeArgs) -> Result<(), CliError> {
    let (rt, name, persistent) = start_device(a)?;
    check_geometry(rt.geometry())?;
    // SIGINT and SIGTERM are blocked in every thread (the runtime's and the queues'
    // inherit the mask from here) and taken synchronously by the main thread, which
    // then stops the device: no handler runs in the middle of a request.
    let signals = block_signals();
    let rt = Arc::new(rt);
    let outcome = serve(a, &rt, &name, &signals);
    // The queue threads have ended and dropped their handles: the runtime is ours.
    let rt = Arc::try_unwrap(rt).map_err(|_| CliError::msg("internal error: the runtime is still shared"))?;
    let closed = rt.close().map_err(|e| CliError(format!("{name}: closing: {e}")));
    // What the kernel sent, by operation: shows which of the block layer's operations
    // (zone append, RESET_ALL, FLUSH) a file system or a tool really issued.
    eprintln!("zblk: {name}: requests served: {}", served_summary());
    outcome?;
    closed?;
    if persistent {
        eprintln!("zblk: {name}: stopped, every acknowledged write persisted");
    }
    Ok(())
}

fn start_device(a: &ServeArgs) -> Result<(Runtime, String, bool), CliError> {
    if let Some(spec) = &a.dev {
        let spec = devspec::parse(spec)?;
        let geo = spec.params.validate().map_err(|e| CliError(format!("--dev: {e}")))?;
        check_geometry(&geo)?;
        let dev = Locked::new(MemDevice::new(&geo, true), "memory", false);
        let rt = Runtime::start(dev, RuntimeConfig::default()).map_err(|e| CliError(format!("memory device: {e}")))?;
        return Ok((rt, "memory device".to_string(), false));
    }
    let path = a.image.as_ref().ok_or_else(|| CliError::msg("give an image or --dev"))?;
    let target = image::Target::open(path, false, a.lock)?;
    check_geometry(target.geo())?;
    let engine = EngineConfig { policy: target.default_policy(), ..EngineConfig::default() };
    let rt = target.start(engine, Backend::Auto)?;
    Ok((rt, path.display().to_string(), true))
}

/// The signal set the main thread waits on.
struct Signals(libc::sigset_t);

fn block_signals() -> Signals {
    // SAFETY: sigset_t is plain data initialised by sigemptyset; pthread_sigmask only
    // changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        Signals(set)
    }
}

fn wait_signal(s: &Signals) -> i32 {
    let mut sig = 0;
    // SAFETY: the set is initialised; sigwait writes the signal number.
    unsafe { libc::sigwait(&s.0, &mut sig) };
    sig
}

fn serve(a: &ServeArgs, rt: &Arc<Runtime>, name: &str, signals: &Signals) -> Result<(), CliError> {
    let geo = rt.geometry().clone();
    let ctrl = libublk::ctrl::UblkCtrlBuilder::default()
        .name("zblk")
        .nr_queues(a.queues)
        .depth(a.depth)
        .io_buf_bytes(IO_BUF_BYTES)
        .ctrl_flags(u64::from(sys::UBLK_F_USER_COPY | sys::UBLK_F_ZONED))
        .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV)
        .build()
        .map_err(|e| ublk_error("adding the ublk device", e))?;
    let tgt_geo = geo.clone();
    let tgt_init = move |dev: &mut UblkDev| {
        set_params(dev, &tgt_geo);
        Ok(())
    };
    let q_rt = Arc::clone(rt);
    let q_fn = move |qid: u16, dev: &UblkDev| serve_queue(qid, dev, &q_rt);
    let json = a.json;
    let name_owned = name.to_string();
    let wait = {
        let set = Signals(signals.0);
        move |ctrl: &UblkCtrl| {
            let path = ctrl.get_bdev_path();
            let line = if json {
                serde_json::json!({
                    "device": path,
                    "id": ctrl.dev_info().dev_id,
                    "serving": name_owned,
                })
                .to_string()
            } else {
                path
            };
            println!("{line}");
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let sig = wait_signal(&set);
            eprintln!("zblk: signal {sig}: stopping the device");
            // Removing the device makes the kernel fail its pending commands: the
            // queue threads then return, and run_target joins them.
            let _ = ctrl.kill_dev();
        }
    };
    ctrl.run_target(tgt_init, q_fn, wait).map_err(|e| ublk_error("serving the ublk device", e))?;
    Ok(())
}

fn ublk_error(what: &str, e: libublk::UblkError) -> CliError {
    let text = e.to_string();
    let hint = if text.contains("EPERM") || text.contains("-1)") || text.contains("EACCES") {
        " (not permitted: run as root)"
    } else if text.contains("EINVAL") || text.contains("-22") {
        " (the kernel refused the device: zoned ublk needs Linux 6.6 or later with CONFIG_BLK_DEV_ZONED)"
    } else if text.contains("IO failure") {
        // libublk records each device it adds in /run/ublksrvd/N.json.
        " (the ublk library writes /run/ublksrvd/: it must be writable)"
    } else {
        ""
    };
    CliError(format!("{what}: {text}{hint}"))
}

/// The parameters the kernel's queue limits come from.
fn set_params(dev: &mut UblkDev, geo: &Geometry) {
    let lbs_shift = geo.lbs_bytes().trailing_zeros() as u8;
    let io_sectors = IO_BUF_BYTES / SECTOR_SIZE as u32;
    let max_sectors = geo.max_sectors().min(io_sectors);
    let zone_sectors = geo.zone_sectors() as u32;
    // Appends the device takes natively go to it; otherwise zblk emulates them (a
    // plugged write), one request each, never split: either way the kernel may send
    // one as large as a request.
    let append = geo.append_limit_sectors().min(max_sectors).min(zone_sectors);
    let tgt = &mut dev.tgt;
    tgt.dev_size = geo.nr_sectors() * SECTOR_SIZE;
    tgt.params = sys::ublk_params {
        types: sys::UBLK_PARAM_TYPE_BASIC | sys::UBLK_PARAM_TYPE_ZONED,
        basic: sys::ublk_param_basic {
            // A volatile cache with FUA: the kernel sends FLUSH and FUA, which reach
            // the image's durable state before they complete.
            attrs: sys::UBLK_ATTR_VOLATILE_CACHE | sys::UBLK_ATTR_FUA,
            logical_bs_shift: lbs_shift,
            physical_bs_shift: lbs_shift,
            io_opt_shift: lbs_shift,
            io_min_shift: lbs_shift,
            max_sectors,
            chunk_sectors: zone_sectors,
            dev_sectors: geo.nr_sectors(),
            ..Default::default()
        },
        zoned: sys::ublk_param_zoned {
            max_open_zones: geo.max_open(),
            max_active_zones: geo.max_active(),
            max_zone_append_sectors: append,
            ..Default::default()
        },
        ..Default::default()
    };
}

/// One queue: fetch, serve one request, commit its result, until the device stops.
fn serve_queue(qid: u16, dev: &UblkDev, rt: &Arc<Runtime>) {
    let cdev = dev.tgt.fds[0];
    let geo = rt.geometry().clone();
    let mut buf = vec![0u8; IO_BUF_BYTES as usize];
    let rt = Arc::clone(rt);
    let handler = move |q: &UblkQueue, tag: u16, _io: &UblkIOCtx| {
        let iod = q.get_iod(tag);
        let pos = libublk::io::UblkIOCtx::ublk_user_copy_pos(q.get_qid(), tag, 0);
        let res = handle(&rt, &geo, cdev, pos, iod, &mut buf);
        let res = match res {
            Ok(Done::Bytes(n)) => UblkIORes::Result(n),
            Ok(Done::Appended(n, lba)) => UblkIORes::FatRes(libublk::UblkFatRes::ZonedAppendRes((n, lba))),
            Err(errno) => UblkIORes::Result(-errno),
        };
        let _ = q.complete_io_cmd_unified(tag, BufDesc::Slice(&[]), Ok(res));
    };
    let queue = match UblkQueue::new(qid, dev).and_then(|q| q.submit_fetch_commands_unified(BufDescList::Slices(None)))
    {
        Ok(q) => q,
        Err(e) => {
            eprintln!("zblk: ublk queue {qid}: {e}");
            return;
        }
    };
    queue.wait_and_handle_io(handler);
}

/// What a served request returns to the kernel.
enum Done {
    /// Bytes transferred (0 for requests without data).
    Bytes(i32),
    /// A zone append: bytes, and the sector the data landed at.
    Appended(i32, u64),
}

fn errno(s: Status) -> i32 {
    s.errno()
}

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

fn count_served(op: u32) {
    let slot = OPS.iter().position(|&(o, _)| o == op).unwrap_or(OPS.len());
    SERVED[slot].fetch_add(1, Ordering::Relaxed);
}

/// `read 12, write 3, ..., other 0`: every counted operation, zeroes included, so a
/// script can look for `zone_append 0`.
fn served_summary() -> String {
    let names = OPS.iter().map(|&(_, n)| n).chain(["other"]);
    names.zip(&SERVED).map(|(n, c)| format!("{n} {}", c.load(Ordering::Relaxed))).collect::<Vec<_>>().join(", ")
}

/// Serves one request through the runtime. Errors are positive errno values.
fn handle(
    rt: &Runtime,
    geo: &Geometry,
    cdev: i32,
    pos: u64,
    iod: &sys::ublksrv_io_desc,
    buf: &mut [u8],
) -> Result<Done, i32> {
    let op = iod.op_flags & 0xff;
    count_served(op);
    let sector = Sector(iod.start_sector);
    let flags = if iod.op_flags & sys::UBLK_IO_F_FUA != 0 { BioFlags::FUA } else { BioFlags::NONE };
    match op {
        sys::UBLK_IO_OP_READ | sys::UBLK_IO_OP_WRITE | sys::UBLK_IO_OP_ZONE_APPEND => {
            let nr = iod.nr_sectors as usize;
            let len = nr * SECTOR_SIZE as usize;
            let data = buf.get_mut(..len).ok_or(libc::EINVAL)?;
            match op {
                sys::UBLK_IO_OP_READ => {
                    rt.read_at(sector, data).map_err(errno)?;
                    copy_to_kernel(cdev, pos, data)?;
                    Ok(Done::Bytes(len as i32))
                }
                sys::UBLK_IO_OP_WRITE => {
                    copy_from_kernel(cdev, pos, data)?;
                    rt.write_at_flags(sector, data, flags).map_err(errno)?;
                    Ok(Done::Bytes(len as i32))
                }
                _ => {
                    copy_from_kernel(cdev, pos, data)?;
                    let at = rt.append_flags(sector, data, flags).map_err(errno)?;
                    Ok(Done::Appended(len as i32, at.0))
                }
            }
        }
        sys::UBLK_IO_OP_FLUSH => rt.flush().map(|_| Done::Bytes(0)).map_err(errno),
        sys::UBLK_IO_OP_ZONE_OPEN => zone_op(rt, geo, Op::ZoneOpen, sector),
        sys::UBLK_IO_OP_ZONE_CLOSE => zone_op(rt, geo, Op::ZoneClose, sector),
        sys::UBLK_IO_OP_ZONE_FINISH => zone_op(rt, geo, Op::ZoneFinish, sector),
        sys::UBLK_IO_OP_ZONE_RESET => zone_op(rt, geo, Op::ZoneReset, sector),
        sys::UBLK_IO_OP_ZONE_RESET_ALL => zone_op(rt, geo, Op::ZoneResetAll, Sector(0)),
        sys::UBLK_IO_OP_REPORT_ZONES => {
            // The kernel's nr_zones shares nr_sectors' place in the descriptor.
            let nr_zones = iod.nr_sectors as usize;
            report_zones(rt, geo, cdev, pos, sector, nr_zones, buf)
        }
        _ => Err(libc::EOPNOTSUPP),
    }
}

fn zone_op(rt: &Runtime, geo: &Geometry, op: Op, sector: Sector) -> Result<Done, i32> {
    // A zone operation on a conventional zone is an I/O error, as null_blk answers
    // (null_open_zone() and its siblings return BLK_STS_IOERR) and as the block layer
    // itself fails a reset or finish of a conventional zone before any driver sees it;
    // zblk's engine refuses it as invalid (EINVAL), which the kernel would pass on.
    if op != Op::ZoneResetAll && sector.0 < geo.nr_sectors() && geo.zone_is_conv(geo.zone_no(sector)) {
        return Err(libc::EIO);
    }
    rt.zone_op(op, sector).map(|_| Done::Bytes(0)).map_err(errno)
}

/// Size of the kernel's `struct blk_zone`.
const BLK_ZONE_BYTES: usize = 64;

/// A zone as the kernel's `struct blk_zone` (little-endian x86/arm layout: start, len,
/// wp, type, cond, non_seq, reset, 4 reserved, capacity, 24 reserved).
fn encode_zone(z: &ZoneInfo, out: &mut [u8]) {
    let raw = image::raw(z);
    out.fill(0);
    out[0..8].copy_from_slice(&raw.start.to_ne_bytes());
    out[8..16].copy_from_slice(&raw.len.to_ne_bytes());
    out[16..24].copy_from_slice(&raw.wp.to_ne_bytes());
    out[24] = raw.ztype;
    out[25] = raw.cond;
    out[32..40].copy_from_slice(&raw.capacity.to_ne_bytes());
}

fn report_zones(
    rt: &Runtime,
    geo: &Geometry,
    cdev: i32,
    pos: u64,
    start: Sector,
    nr_zones: usize,
    buf: &mut [u8],
) -> Result<Done, i32> {
    // The kernel asks for whole zones from a zone start, as many as its buffer holds.
    let first = geo.zone_no(start).0 as usize;
    let total = geo.nr_zones() as usize;
    let count = nr_zones.min(total.saturating_sub(first)).min(buf.len() / BLK_ZONE_BYTES);
    if count == 0 {
        return Ok(Done::Bytes(0));
    }
    let zones = rt.report_zones().map_err(errno)?;
    let out = &mut buf[..count * BLK_ZONE_BYTES];
    for (i, z) in zones.iter().skip(first).take(count).enumerate() {
        encode_zone(z, &mut out[i * BLK_ZONE_BYTES..(i + 1) * BLK_ZONE_BYTES]);
    }
    copy_to_kernel(cdev, pos, out)?;
    Ok(Done::Bytes(out.len() as i32))
}

/// Copies a read's data (or a zone report) into the kernel's request.
fn copy_to_kernel(cdev: i32, pos: u64, data: &[u8]) -> Result<(), i32> {
    // SAFETY: data is a valid slice for its length; cdev is the device's open
    // /dev/ublkcN, which stays open while the queue runs.
    let n = unsafe { libc::pwrite(cdev, data.as_ptr().cast(), data.len(), pos as libc::off_t) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    if n as usize != data.len() { Err(libc::EIO) } else { Ok(()) }
}

/// Copies a write's data out of the kernel's request.
fn copy_from_kernel(cdev: i32, pos: u64, data: &mut [u8]) -> Result<(), i32> {
    // SAFETY: as copy_to_kernel, the slice is writable for its length.
    let n = unsafe { libc::pread(cdev, data.as_mut_ptr().cast(), data.len(), pos as libc::off_t) };
    if n < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    if n as usize != data.len() { Err(libc::EIO) } else { Ok(()) }
}
