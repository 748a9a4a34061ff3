//! The ublk side of `zblk serve` (feature `ublk`): the device's parameters, its
//! queues, each request handed to the served device and committed when it is done.

use super::paced::{DataStore, PacedSim, SimBuilder};
use super::served::{Done, Reply, Req, RuntimeServed, Served};
use super::{IO_BUF_BYTES, ServeArgs, check_geometry};
use crate::out::{self, errln};
use crate::{CliError, devspec, image, stacksim};
use libublk::ctrl::UblkCtrl;
use libublk::io::{BufDescList, UblkDev, UblkIOCtx, UblkQueue};
use libublk::{BufDesc, UblkFlags, UblkIORes, sys};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use zblk_core::bio::{BioFlags, Op};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::geometry::Geometry;
use zblk_core::stack::{SplitOrder, StackConfig};
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_runtime::{Backend, Runtime};
use zblk_sim::{Sim, SimConfig, StackSimConfig, null_model};

/// What must be stopped once the queues have ended.
enum Owner {
    /// The runtime: closing it persists every acknowledged write.
    Runtime(Runtime),
    /// The pacing thread, which ends once the queues' handles are dropped.
    Paced(JoinHandle<()>),
}

/// The device to serve and what the ready line says of it.
struct Device {
    served: Arc<dyn Served>,
    owner: Owner,
    /// The image's path, or the simulated device's spec.
    name: String,
    /// Whether the data survives the server (an image).
    persistent: bool,
    /// The kernel sees a rotational disk.
    rotational: bool,
    /// What the ready line's JSON adds: `data`, `policy`, `models`.
    extra: serde_json::Map<String, serde_json::Value>,
}

/// Serves the device (the driver is there: [`super::check_driver`] said so).
pub(super) fn run(a: &ServeArgs) -> Result<(), CliError> {
    let dev = start_device(a)?;
    // SIGINT and SIGTERM are blocked in every thread (the queues' inherit the mask
    // from here; the runtime's and the pacing thread's were started earlier and are
    // blocked there too below) and taken synchronously by the main thread, which
    // then stops the device: no handler runs in the middle of a request.
    let signals = block_signals();
    let Device { served, owner, name, persistent, rotational, extra } = dev;
    let outcome = serve(a, served, &name, rotational, extra, &signals);
    // The queue threads have ended and dropped their handles to the device.
    let closed = match owner {
        Owner::Runtime(rt) => rt.close().map_err(|e| CliError(format!("{name}: closing: {e}"))),
        Owner::Paced(t) => t.join().map_err(|_| CliError(format!("{name}: the simulation's thread panicked"))),
    };
    // What the kernel sent, by operation: shows which of the block layer's operations
    // (zone append, RESET_ALL, FLUSH) a file system or a tool really issued.
    errln!("zblk: {name}: requests served: {}", served_summary());
    outcome?;
    closed?;
    if persistent {
        errln!("zblk: {name}: stopped, every acknowledged write persisted");
    }
    Ok(())
}

fn start_device(a: &ServeArgs) -> Result<Device, CliError> {
    if a.dev.is_some() || a.stack.is_some() {
        return start_paced(a);
    }
    let path = a.image.as_ref().ok_or_else(|| CliError::msg("give an image, --dev or --stack"))?;
    let target = image::Target::open(path, false, a.lock)?;
    check_geometry(target.geo())?;
    let rotational = target.rotational();
    let policy = a.policy.unwrap_or_else(|| target.default_policy());
    let engine = EngineConfig { policy, ..EngineConfig::default() };
    // Blocked before the runtime starts its threads, so they never take the signal.
    let _ = block_signals();
    let rt = target.start(engine, Backend::Auto)?;
    let served: Arc<dyn Served> = Arc::new(RuntimeServed::new(rt.submitter(), rt.geometry().clone()));
    let mut extra = serde_json::Map::new();
    extra.insert("data".into(), "image".into());
    extra.insert("policy".into(), policy.name().into());
    Ok(Device {
        served,
        owner: Owner::Runtime(rt),
        name: path.display().to_string(),
        persistent: true,
        rotational,
        extra,
    })
}

/// A simulated device or stack, paced to wall-clock time.
fn start_paced(a: &ServeArgs) -> Result<Device, CliError> {
    let limit = if a.no_data { None } else { Some(a.data_limit) };
    let policy = a.policy.unwrap_or(IssuePolicy::Zwp);
    let (build, name, rotational): (SimBuilder, String, bool) = if let Some(text) = &a.dev {
        let spec = devspec::parse(text)?;
        let geo = spec.params.validate().map_err(|e| CliError(format!("--dev: {e}")))?;
        check_geometry(&geo)?;
        let rotational = spec.rotational();
        let build: SimBuilder = Box::new(move || {
            let mut cfg = SimConfig::new(spec.params.clone(), 1);
            cfg.engine = EngineConfig { policy, ..EngineConfig::default() };
            // The simulator keeps no data: the server does (DataStore).
            cfg.device.memory_backed = false;
            spec.sim(&cfg).map_err(|e| CliError(format!("--dev: {e}")))
        });
        (build, text.clone(), rotational)
    } else {
        let text = a.stack.clone().expect("--stack");
        let spec = stacksim::parse_stack(&text)?;
        let build: SimBuilder = Box::new(move || {
            let mut built = spec
                .build(StackConfig { split_order: SplitOrder::Head, ..StackConfig::default() }, Some(policy))
                .map_err(|e| CliError(format!("--stack: {e}")))?;
            for (_, p) in &mut built.disks {
                p.memory_backed = false;
            }
            Ok(Sim::with_stack(built, StackSimConfig::new(1), &mut null_model))
        });
        (build, text, false)
    };
    let _ = block_signals();
    let (served, info, thread) = PacedSim::start(build, DataStore::new(limit))?;
    check_geometry(&info.geo)?;
    let mut extra = serde_json::Map::new();
    extra.insert("data".into(), if a.no_data { "none: reads return zeroes" } else { "memory" }.into());
    if !a.no_data {
        extra.insert("data_limit".into(), a.data_limit.into());
    }
    extra.insert("policy".into(), policy.name().into());
    extra.insert("paced".into(), "wall-clock".into());
    extra.insert("models".into(), info.models.clone().into());
    if a.no_data {
        errln!("zblk: --no-data: written data is not kept, every read returns zeroes");
    }
    for m in &info.models {
        errln!("zblk: {m} (paced to wall-clock time)");
    }
    let served: Arc<dyn Served> = served;
    Ok(Device { served, owner: Owner::Paced(thread), name, persistent: false, rotational, extra })
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

fn serve(
    a: &ServeArgs,
    served: Arc<dyn Served>,
    name: &str,
    rotational: bool,
    extra: serde_json::Map<String, serde_json::Value>,
    signals: &Signals,
) -> Result<(), CliError> {
    let geo = served.geometry().clone();
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
        set_params(dev, &tgt_geo, rotational);
        // One more entry each way than the queue depth: the eventfd read beside a
        // command per tag.
        dev.tgt.sq_depth = dev.tgt.sq_depth.saturating_add(1);
        dev.tgt.cq_depth = dev.tgt.cq_depth.saturating_add(1);
        Ok(())
    };
    let q_fn = move |qid: u16, dev: &UblkDev| serve_queue(qid, dev, &served);
    let json = a.json;
    let name_owned = name.to_string();
    let wait = {
        let set = Signals(signals.0);
        move |ctrl: &UblkCtrl| {
            let path = ctrl.get_bdev_path();
            let line = if json {
                let mut obj = serde_json::Map::new();
                obj.insert("device".into(), path.clone().into());
                obj.insert("id".into(), ctrl.dev_info().dev_id.into());
                obj.insert("serving".into(), name_owned.clone().into());
                obj.extend(extra.clone());
                serde_json::Value::Object(obj).to_string()
            } else {
                path
            };
            // The device serves whether or not its name could be printed: then it is
            // said on standard error now, and by the exit status at the end.
            if !out::stdout(format_args!("{line}\n")) {
                errln!("zblk: standard output could not be written: serving {line}");
            }
            out::done(format!("served {line}"));
            let sig = wait_signal(&set);
            errln!("zblk: signal {sig}: stopping the device");
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
fn set_params(dev: &mut UblkDev, geo: &Geometry, rotational: bool) {
    let lbs_shift = geo.lbs_bytes().trailing_zeros() as u8;
    let io_sectors = IO_BUF_BYTES / SECTOR_SIZE as u32;
    let max_sectors = geo.max_sectors().min(io_sectors);
    let zone_sectors = geo.zone_sectors() as u32;
    // Appends the device takes natively go to it; otherwise zblk emulates them (a
    // plugged write), one request each, never split: either way the kernel may send
    // one as large as a request.
    let append = geo.append_limit_sectors().min(max_sectors).min(zone_sectors);
    // The ublk driver refuses a zoned device without zone append: a device that has
    // none at all (a striped stack) is given the request size too, and fails each
    // append it gets (EOPNOTSUPP) rather than not being served.
    let append = if append == 0 { max_sectors.min(zone_sectors) } else { append };
    let tgt = &mut dev.tgt;
    tgt.dev_size = geo.nr_sectors() * SECTOR_SIZE;
    tgt.params = sys::ublk_params {
        types: sys::UBLK_PARAM_TYPE_BASIC | sys::UBLK_PARAM_TYPE_ZONED,
        basic: sys::ublk_param_basic {
            // A volatile cache with FUA: the kernel sends FLUSH and FUA, which reach
            // the image's durable state before they complete.
            attrs: sys::UBLK_ATTR_VOLATILE_CACHE
                | sys::UBLK_ATTR_FUA
                | if rotational { sys::UBLK_ATTR_ROTATIONAL } else { 0 },
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

/// Completions waiting for their queue's thread: the backends finish requests on
/// their own threads, but only the queue's thread may commit them to the kernel
/// (its io_uring carries the commands), so they are posted here and the thread is
/// woken through an eventfd its ring reads.
struct Mailbox {
    done: Mutex<Vec<(u16, Reply)>>,
    efd: OwnedFd,
}

impl Mailbox {
    fn post(&self, tag: u16, r: Reply) {
        self.done.lock().unwrap_or_else(|p| p.into_inner()).push((tag, r));
        let one = 1u64.to_ne_bytes();
        // SAFETY: efd is an open eventfd, the buffer 8 bytes. A full counter (never
        // reached: the ring reads it) or a closed ring loses nothing: the vector holds
        // the completion.
        unsafe { libc::write(self.efd.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// Target-I/O data of the eventfd read on the queue's ring (any tag: the handler
/// tells it from the kernel's commands by its target bit).
const EVENTFD_TGT: u32 = 1;

/// Arms the read of the mailbox's eventfd on the queue's ring.
fn arm_eventfd(q: &UblkQueue, efd: i32, counter: *mut u64) {
    let sqe = io_uring::opcode::Read::new(io_uring::types::Fd(efd), counter.cast(), 8)
        .build()
        .user_data(libublk::io::UblkIOCtx::build_user_data(0, 0, EVENTFD_TGT, true));
    if let Err(e) = q.ublk_submit_sqe_sync(sqe) {
        errln!("zblk: ublk queue {}: arming its completion wake-up: {e}", q.get_qid());
    }
}

/// One queue: each request the kernel sends goes to the device at once (as many in
/// flight as the kernel's queue depth), and is committed when the device is done.
fn serve_queue(qid: u16, dev: &UblkDev, served: &Arc<dyn Served>) {
    let cdev = dev.tgt.fds[0];
    let geo = served.geometry().clone();
    // SAFETY: eventfd takes no pointer; a negative result is checked.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        errln!("zblk: ublk queue {qid}: eventfd: {}", std::io::Error::last_os_error());
        return;
    }
    // SAFETY: efd was just opened and is owned by nobody else.
    let mailbox = Arc::new(Mailbox { done: Mutex::new(Vec::new()), efd: unsafe { OwnedFd::from_raw_fd(efd) } });
    // The eventfd read's target: leaked on purpose, as the ring may still complete the
    // read after this function has returned (the ring outlives the handler).
    let counter: *mut u64 = Box::leak(Box::new(0u64));
    let served = Arc::clone(served);
    let depth = dev.dev_info.queue_depth as usize;
    // Each tag's data buffer, lent to the device while its request is in flight.
    let mut bufs: Vec<Vec<u8>> = (0..depth).map(|_| Vec::new()).collect();
    let mb = Arc::clone(&mailbox);
    let handler = move |q: &UblkQueue, tag: u16, io: &UblkIOCtx| {
        if io.is_tgt_io() {
            let ready = std::mem::take(&mut *mb.done.lock().unwrap_or_else(|p| p.into_inner()));
            for (tag, reply) in ready {
                let pos = UblkIOCtx::ublk_user_copy_pos(q.get_qid(), tag, 0);
                let res = match reply.result {
                    Ok(d) if reply.copy_out > 0 => copy_to_kernel(cdev, pos, &reply.buf[..reply.copy_out]).map(|_| d),
                    r => r,
                };
                bufs[tag as usize] = reply.buf;
                commit(q, tag, res);
            }
            if !q.is_stopping() {
                arm_eventfd(q, mb.efd.as_raw_fd(), counter);
            }
            return;
        }
        let iod = q.get_iod(tag);
        let pos = UblkIOCtx::ublk_user_copy_pos(q.get_qid(), tag, 0);
        let buf = std::mem::take(&mut bufs[tag as usize]);
        match request(&geo, cdev, pos, iod, buf) {
            Ok(req @ Req::Report { .. }) => {
                // Answered before the handler returns: the kernel revalidates the
                // zones (reports only) while it adds the device, and a report does
                // no device I/O, so it need not wait for the completion path.
                let (tx, rx) = std::sync::mpsc::channel();
                served.submit(req, Box::new(move |r| drop(tx.send(r))));
                let mut reply = rx.recv().unwrap_or(Reply { result: Err(libc::EIO), buf: Vec::new(), copy_out: 0 });
                let res = match reply.result {
                    Ok(_) => copy_report_to_kernel(cdev, pos, &mut reply.buf, reply.copy_out),
                    r => r,
                };
                bufs[tag as usize] = reply.buf;
                commit(q, tag, res);
            }
            Ok(req) => {
                let mb = Arc::clone(&mb);
                served.submit(req, Box::new(move |r| mb.post(tag, r)));
            }
            Err((errno, buf)) => {
                bufs[tag as usize] = buf;
                commit(q, tag, Err(errno));
            }
        }
    };
    let queue = match UblkQueue::new(qid, dev).and_then(|q| q.submit_fetch_commands_unified(BufDescList::Slices(None)))
    {
        Ok(q) => q,
        Err(e) => {
            errln!("zblk: ublk queue {qid}: {e}");
            return;
        }
    };
    arm_eventfd(&queue, mailbox.efd.as_raw_fd(), counter);
    queue.wait_and_handle_io(handler);
}

/// Commits a request's result to the kernel (and fetches the tag's next request).
fn commit(q: &UblkQueue, tag: u16, res: Result<Done, i32>) {
    let res = match res {
        Ok(Done::Bytes(n)) => UblkIORes::Result(n),
        Ok(Done::Appended(n, lba)) => UblkIORes::FatRes(libublk::UblkFatRes::ZonedAppendRes((n, lba))),
        Err(errno) => UblkIORes::Result(-errno),
    };
    let _ = q.complete_io_cmd_unified(tag, BufDesc::Slice(&[]), Ok(res));
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

/// The request the kernel sent on a tag, its write data copied in. A refusal gives
/// the buffer back with the errno.
fn request(
    geo: &Geometry,
    cdev: i32,
    pos: u64,
    iod: &sys::ublksrv_io_desc,
    mut buf: Vec<u8>,
) -> Result<Req, (i32, Vec<u8>)> {
    let op = iod.op_flags & 0xff;
    count_served(op);
    let sector = Sector(iod.start_sector);
    let flags = if iod.op_flags & sys::UBLK_IO_F_FUA != 0 { BioFlags::FUA } else { BioFlags::NONE };
    // A zone operation on a conventional zone is an I/O error, as null_blk answers
    // (null_open_zone() and its siblings return BLK_STS_IOERR) and as the block layer
    // itself fails a reset or finish of a conventional zone before any driver sees it;
    // zblk's engine refuses it as invalid (EINVAL), which the kernel would pass on.
    let zone = |op| {
        if sector.0 < geo.nr_sectors() && geo.zone_is_conv(geo.zone_no(sector)) {
            return Err((libc::EIO, Vec::new()));
        }
        Ok(Req::Io { op, sector, flags: BioFlags::NONE, buf: Vec::new() })
    };
    match op {
        sys::UBLK_IO_OP_READ | sys::UBLK_IO_OP_WRITE | sys::UBLK_IO_OP_ZONE_APPEND => {
            let len = iod.nr_sectors as usize * SECTOR_SIZE as usize;
            if len > IO_BUF_BYTES as usize {
                return Err((libc::EINVAL, buf));
            }
            buf.resize(len, 0);
            let op = match op {
                sys::UBLK_IO_OP_READ => Op::Read,
                sys::UBLK_IO_OP_WRITE => Op::Write,
                _ => Op::ZoneAppend,
            };
            if op != Op::Read {
                if let Err(e) = copy_from_kernel(cdev, pos, &mut buf) {
                    return Err((e, buf));
                }
            }
            Ok(Req::Io { op, sector, flags, buf })
        }
        sys::UBLK_IO_OP_FLUSH => {
            Ok(Req::Io { op: Op::Flush, sector: Sector(0), flags: BioFlags::NONE, buf: Vec::new() })
        }
        sys::UBLK_IO_OP_ZONE_OPEN => zone(Op::ZoneOpen),
        sys::UBLK_IO_OP_ZONE_CLOSE => zone(Op::ZoneClose),
        sys::UBLK_IO_OP_ZONE_FINISH => zone(Op::ZoneFinish),
        sys::UBLK_IO_OP_ZONE_RESET => zone(Op::ZoneReset),
        sys::UBLK_IO_OP_ZONE_RESET_ALL => {
            Ok(Req::Io { op: Op::ZoneResetAll, sector: Sector(0), flags: BioFlags::NONE, buf: Vec::new() })
        }
        sys::UBLK_IO_OP_REPORT_ZONES => {
            // The kernel's nr_zones shares nr_sectors' place in the descriptor.
            let nr_zones = iod.nr_sectors as usize;
            buf.resize(IO_BUF_BYTES as usize, 0);
            Ok(Req::Report { first: geo.zone_no(sector).0, nr_zones, buf })
        }
        _ => Err((libc::EOPNOTSUPP, buf)),
    }
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
fn copy_report_to_kernel(cdev: i32, pos: u64, buf: &mut Vec<u8>, zones_bytes: usize) -> Result<Done, i32> {
    let n = copy_report_padded(buf, zones_bytes, |data| {
        // SAFETY: as copy_to_kernel; the kernel copies at most the request's bytes
        // and returns how many.
        let n = unsafe { libc::pwrite(cdev, data.as_ptr().cast(), data.len(), pos as libc::off_t) };
        if n < 0 { Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)) } else { Ok(n as usize) }
    })?;
    Ok(Done::Bytes(n as i32))
}

/// Pads a report of `zones_bytes` with zeroes to the longest request
/// ([`IO_BUF_BYTES`]), hands it to `write` (which copies what the request holds) and
/// returns the bytes copied: an error if they do not hold every zone.
fn copy_report_padded(
    buf: &mut Vec<u8>,
    zones_bytes: usize,
    write: impl FnOnce(&[u8]) -> Result<usize, i32>,
) -> Result<usize, i32> {
    let len = (IO_BUF_BYTES as usize).max(zones_bytes);
    buf.resize(len, 0);
    // The buffer may hold an earlier request's data.
    buf[zones_bytes..].fill(0);
    let n = write(buf)?;
    if n < zones_bytes { Err(libc::EIO) } else { Ok(n) }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_report_completes_the_whole_request() {
        // The last request of a report: 5,262 zones (the 30 TB preset's 111,758 less
        // 13 full requests) in a 512 KiB buffer, answered in a buffer holding an
        // earlier read's data.
        let zones = 5262 * super::super::served::BLK_ZONE_BYTES;
        let mut buf = vec![0xa5u8; IO_BUF_BYTES as usize];
        buf[..zones].fill(1);
        let request = IO_BUF_BYTES as usize;
        let mut sent = Vec::new();
        let n = copy_report_padded(&mut buf, zones, |d| {
            sent = d[..d.len().min(request)].to_vec();
            Ok(sent.len())
        });
        assert_eq!(n, Ok(request), "every byte of the request, not only the zones'");
        assert!(sent[..zones].iter().all(|&b| b == 1));
        assert!(sent[zones..].iter().all(|&b| b == 0), "a zero-length zone after the last one");
        // A request shorter than the longest (a report of few zones): its own bytes.
        let mut buf = Vec::new();
        assert_eq!(copy_report_padded(&mut buf, 128, |d| Ok(d.len().min(4096))), Ok(4096));
        // A request that does not hold the zones: an error, not a truncated report.
        assert_eq!(copy_report_padded(&mut buf, 8192, |d| Ok(d.len().min(4096))), Err(libc::EIO));
    }
}
