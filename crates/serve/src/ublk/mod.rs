//! The kernel's side of serving (feature `ublk`): a zoned ublk block device whose
//! queues serve every request through a [`Served`] device ([`serve`]).
//!
//! The ublk driver requires `UBLK_F_USER_COPY` with `UBLK_F_ZONED` (it refuses a zoned
//! device without it: zone reports travel back through the character device), so data
//! moves with `pread`/`pwrite` on `/dev/ublkcN` at each request's user-copy position.

mod batch;
mod queue;
mod request;

pub use queue::poll_summary;
pub use request::served_summary;

use crate::served::Served;
use crate::{ServeError, ServedRecord, io_buf_bytes};
use libublk::ctrl::UblkCtrl;
use libublk::io::UblkDev;
use libublk::{UblkFlags, sys};
use std::sync::Arc;
use std::time::Duration;
use zblk_core::geometry::Geometry;
use zblk_core::units::SECTOR_SIZE;

/// How to serve.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Hardware queues of the ublk device, one serving thread each.
    pub queues: u16,
    /// Requests per queue the kernel may have in flight.
    pub depth: u16,
    /// The kernel sees a rotational disk (`queue/rotational`).
    pub rotational: bool,
    /// What becomes of the device if the server dies.
    pub recovery: Recovery,
    /// After a request, how long a queue's thread keeps looking for the next one
    /// before it sleeps (zero: it sleeps at once). See docs/serve.md, "Polling".
    pub poll: std::time::Duration,
    /// What is served, recorded with the device (its target data) for a later
    /// recovery to check ([`ServedRecord::check_recovery`]).
    pub record: ServedRecord,
    /// How requests travel between the driver and the queues' threads.
    pub transport: Transport,
}

/// How requests travel between the ublk driver and the queues' threads (data moves by
/// user copy either way). See docs/serve.md, "The driver's paths".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transport {
    /// Batched commands if the driver offers them (`UBLK_F_BATCH_IO`, Linux 7.3),
    /// else a command per request: the default.
    #[default]
    Auto,
    /// One io_uring command per request (`FETCH_REQ`, `COMMIT_AND_FETCH_REQ`): every
    /// driver since Linux 6.6.
    Command,
    /// Batched commands (`PREP_IO_CMDS`, multishot `FETCH_IO_CMDS`,
    /// `COMMIT_IO_CMDS`): refused by a driver that does not offer them.
    Batch,
}

impl Transport {
    /// Whether batched commands are used with a driver of these features (`None`:
    /// it did not say), or why not.
    pub fn batched(self, features: Option<u64>) -> Result<bool, ServeError> {
        let offered = features.is_some_and(offers_batches);
        match self {
            Transport::Command => Ok(false),
            Transport::Auto => Ok(offered),
            Transport::Batch if offered => Ok(true),
            Transport::Batch => Err(ServeError(format!(
                "batched commands: this ublk driver does not offer them (UBLK_F_BATCH_IO, Linux 7.3; its features: {}); \
                 --transport command or auto serves a command per request",
                features.map_or("unknown".into(), |f| format!("{f:#x}"))
            ))),
        }
    }
}

/// A server that dies (SIGKILL, a crash) without stopping its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// The kernel removes the device and fails its I/O.
    None,
    /// The device is added recoverable (`UBLK_F_USER_RECOVERY` with
    /// `UBLK_F_USER_RECOVERY_REISSUE`): if the server dies, the kernel keeps
    /// `/dev/ublkbN`, holds the I/O sent meanwhile, and gives what was in flight again
    /// to the next server, which [`Recovery::Recover`] starts.
    Recoverable,
    /// Serves recoverable device `N`, left quiesced by a server that died: its queues
    /// and depth are the device's, its geometry must be the served device's, and what
    /// it served (its record) the same image.
    Recover(u32),
}

/// Each queue's thread runs on one CPU of the queue's CPUs (one picked at random, as
/// rublk and ublksrv do), not on all of them: a thread the scheduler moves between
/// CPUs loses its cache and, when one queue covers every CPU, keeps meeting the
/// submitter on a CPU it then has to wake from idle.
const QUEUE_AFFINITY: UblkFlags = UblkFlags::UBLK_DEV_F_SINGLE_CPU_AFFINITY;

/// The system's page size (4 KiB where it cannot be read): what the kernel maps a
/// queue's command buffer and a buffer ring by.
fn page_size() -> usize {
    // SAFETY: sysconf takes no pointer.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// Whether driver features, or a device's flags, have batched commands
/// (`UBLK_F_BATCH_IO`).
fn offers_batches(flags: u64) -> bool {
    flags & u64::from(sys::UBLK_F_BATCH_IO) != 0
}

/// The control flags of a zoned ublk device served by zblk.
fn ctrl_flags(recoverable: bool, batched: bool) -> u64 {
    let recovery = sys::UBLK_F_USER_RECOVERY | sys::UBLK_F_USER_RECOVERY_REISSUE;
    let batch = if batched { sys::UBLK_F_BATCH_IO } else { 0 };
    u64::from(sys::UBLK_F_USER_COPY | sys::UBLK_F_ZONED | batch | if recoverable { recovery } else { 0 })
}

/// The control of the device to serve: a new one (on batched commands with
/// `batched`), or recoverable device `id` taken over after its server died (on the
/// transport it was added with).
fn control(cfg: &ServeConfig, geo: &Geometry, batched: bool) -> Result<UblkCtrl, ServeError> {
    let builder = libublk::ctrl::UblkCtrlBuilder::default().name("zblk").io_buf_bytes(io_buf_bytes(geo));
    let Recovery::Recover(id) = cfg.recovery else {
        return builder
            .nr_queues(cfg.queues)
            .depth(cfg.depth)
            .ctrl_flags(ctrl_flags(cfg.recovery == Recovery::Recoverable, batched))
            .dev_flags(UblkFlags::UBLK_DEV_F_ADD_DEV | QUEUE_AFFINITY)
            .build()
            .map_err(|e| ublk_error("adding the ublk device", e));
    };
    let dev = format!("/dev/ublkb{id}");
    let old = UblkCtrl::new_simple(id as i32).map_err(|e| ublk_error(&format!("{dev}: reading its state"), e))?;
    let info = old.dev_info();
    if info.flags & u64::from(sys::UBLK_F_USER_RECOVERY) == 0 {
        return Err(ServeError(format!(
            "{dev} was not added recoverable (zblk serve --recoverable): it cannot be recovered"
        )));
    }
    if info.state != sys::UBLK_S_DEV_QUIESCED as u16 {
        let state = match u32::from(info.state) {
            sys::UBLK_S_DEV_LIVE => "live: its server is running",
            sys::UBLK_S_DEV_DEAD => "stopped",
            _ => "not quiesced",
        };
        return Err(ServeError(format!("{dev} is {state}: only a device whose server died can be recovered")));
    }
    let mut params = sys::ublk_params::default();
    old.get_params(&mut params).map_err(|e| ublk_error(&format!("{dev}: reading its parameters"), e))?;
    let (b, z) = (params.basic, params.zoned);
    let lbs_shift = geo.lbs_bytes().trailing_zeros() as u8;
    if b.dev_sectors != geo.nr_sectors()
        || u64::from(b.chunk_sectors) != geo.zone_sectors()
        || b.logical_bs_shift != lbs_shift
        || z.max_open_zones != geo.max_open()
        || z.max_active_zones != geo.max_active()
    {
        let shape = |sectors: u64, zone: u64, lbs: u32, open: u32, active: u32| {
            format!(
                "{sectors} sectors, zones of {zone} sectors, {lbs}-byte blocks, max open {open}, max active {active}"
            )
        };
        return Err(ServeError(format!(
            "{dev} has another geometry ({}) than the device to serve ({})",
            shape(
                b.dev_sectors,
                b.chunk_sectors.into(),
                1u32 << b.logical_bs_shift,
                z.max_open_zones,
                z.max_active_zones
            ),
            shape(geo.nr_sectors(), geo.zone_sectors(), geo.lbs_bytes(), geo.max_open(), geo.max_active()),
        )));
    }
    // The geometry matches; the image must be the one the device was served from,
    // which its record says (the device is left as it was when it is not).
    cfg.record.check_recovery(&dev, old.get_target_data_from_json().as_ref())?;
    old.start_user_recover().map_err(|e| ublk_error(&format!("{dev}: starting its recovery"), e))?;
    libublk::ctrl::UblkCtrlBuilder::default()
        .name("zblk")
        .id(id as i32)
        .nr_queues(info.nr_hw_queues)
        .depth(info.queue_depth)
        .io_buf_bytes(info.max_io_buf_bytes)
        .ctrl_flags(ctrl_flags(true, offers_batches(info.flags)))
        .dev_flags(UblkFlags::UBLK_DEV_F_RECOVER_DEV | QUEUE_AFFINITY)
        .build()
        .map_err(|e| ublk_error(&format!("{dev}: recovering"), e))
}

/// The device the kernel made, once it is ready.
#[derive(Clone, Debug)]
pub struct Ready {
    /// `/dev/ublkbN`.
    pub device: String,
    /// `N`.
    pub id: u32,
    /// How requests and data travel between the driver and zblk.
    pub path: DriverPath,
}

/// How requests and data travel between the ublk driver and zblk, and what the
/// driver offers beside it.
///
/// Data moves by user copy (`pread`/`pwrite` on `/dev/ublkcN`), which every driver
/// since Linux 6.6 takes with a zoned device; requests come either one io_uring
/// command each (`FETCH_REQ`, then `COMMIT_AND_FETCH_REQ` with the result, a zone
/// append's sector in it), as every such driver gives them, or with batched
/// commands (`UBLK_F_BATCH_IO`, Linux 7.3's driver: many requests fetched and
/// committed by one command, the commit carrying a zone append's sector), which
/// zblk drives itself (libublk 0.4's batched transport refuses zoned and user-copy
/// devices): [`Transport`]. Newer drivers also take automatic buffer registration
/// (`UBLK_F_AUTO_BUF_REG`) or zero copy (`UBLK_F_SUPPORT_ZERO_COPY`, then without
/// user copy); zblk's runtime moves a request's data with its own buffers, so it
/// uses neither yet (docs/serve.md, "The driver's paths").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverPath {
    /// The driver's features (`UBLK_U_CMD_GET_FEATURES`), if it answered.
    pub features: Option<u64>,
    /// Requests come with batched commands (else a command per request).
    pub batched: bool,
}

/// The newer paths a driver may offer, by feature bit, with their names.
const NEWER_PATHS: [(u64, &str); 4] = [
    (sys::UBLK_F_BATCH_IO as u64, "batched commands"),
    (sys::UBLK_F_AUTO_BUF_REG as u64, "automatic buffer registration"),
    (sys::UBLK_F_SUPPORT_ZERO_COPY as u64, "zero copy"),
    (sys::UBLK_F_PER_IO_DAEMON as u64, "a thread per request tag"),
];

impl DriverPath {
    /// The path of the running driver, requests coming with batched commands or not.
    pub fn probe(batched: bool) -> DriverPath {
        DriverPath { features: UblkCtrl::get_features(), batched }
    }

    /// The path zblk takes.
    pub fn used(&self) -> &'static str {
        if self.batched { "batched commands, data by user copy" } else { "a command per request, data by user copy" }
    }

    /// The newer paths the driver offers, which zblk does not take.
    pub fn offered(&self) -> Vec<&'static str> {
        let mut f = self.features.unwrap_or(0);
        if self.batched {
            f &= !u64::from(sys::UBLK_F_BATCH_IO);
        }
        NEWER_PATHS.iter().filter(|(bit, _)| f & bit != 0).map(|&(_, name)| name).collect()
    }

    /// One line for a person: the path, and what the driver offers beside it.
    pub fn describe(&self) -> String {
        let offered = self.offered();
        if offered.is_empty() {
            format!("{} (the driver offers no other path)", self.used())
        } else {
            format!("{}; the driver also offers {}, not used yet", self.used(), offered.join(", "))
        }
    }
}

/// How long a device that failed to start waits, with no queue's thread starting or
/// ending meanwhile, for its queues' threads to end once told to (they may still be
/// setting up: in an emulated guest on a loaded host, seconds each; 17 s in all were
/// seen at a load of 8 on 2 cores, when a 10 s limit on the whole wait left the
/// device added).
const START_FAILED_WAIT: Duration = Duration::from_secs(10);

/// A device that failed to start with no queue's thread started this long after:
/// libublk failed before it made them (each of them has reported to it before the
/// start is tried), so none is waited for.
const NO_QUEUES_AFTER: Duration = Duration::from_secs(1);

/// libublk records every device it adds or recovers in `/run/ublksrvd/N.json` (for
/// ublk's tools) and fails the device's start when it cannot (a read-only `/run`, a
/// file of that name, as in a container): checked before the device is added, so
/// that the reason is said and nothing is left to remove.
fn check_run_dir() -> Result<(), ServeError> {
    let dir = std::path::PathBuf::from(UblkCtrl::run_dir());
    let probe = dir.join(format!(".zblk-{}", std::process::id()));
    let checked = (|| {
        if !dir.exists() {
            std::fs::create_dir_all(&dir)?;
            // As libublk makes it: its records are read by other users' tools.
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        }
        std::fs::File::create(&probe).map(drop)
    })();
    let _ = std::fs::remove_file(&probe);
    checked.map_err(|e| {
        ServeError(format!(
            "{}: {e}: the ublk library records each device it adds there, so it must be a writable directory \
             (mount a tmpfs on /run)",
            dir.display()
        ))
    })
}

/// Adds a zoned ublk device serving `served`, runs `until_stop` once the kernel has it
/// (its zones revalidated, the block device present) and stops the device when
/// `until_stop` returns: what the device still holds ends at once ([`Served::stop`]).
/// Returns once every queue has ended. A device that fails to start is removed
/// before the error returns.
pub fn serve(
    cfg: &ServeConfig,
    served: Arc<dyn Served>,
    until_stop: impl FnOnce(&Ready) + Send + Sync + 'static,
) -> Result<(), ServeError> {
    let geo = served.geometry().clone();
    crate::check_geometry(&geo)?;
    check_run_dir()?;
    let batched = cfg.transport.batched(UblkCtrl::get_features())?;
    let ctrl = control(cfg, &geo, batched)?;
    // What the device was added with (a recovered one: what its first server chose).
    let batched = offers_batches(ctrl.dev_info().flags);
    let rotational = cfg.rotational;
    let record = cfg.record.to_json();
    let tgt_init = move |dev: &mut UblkDev| {
        set_params(dev, &geo, rotational);
        // Kept with the device (the ublk library's record of it), for a recovery.
        dev.set_target_json(record.clone());
        // Room on each queue's ring beside a command per tag: the eventfd read, and
        // the runtime's transfers for the tags' requests.
        dev.tgt.sq_depth = dev.tgt.sq_depth.saturating_mul(2).saturating_add(1);
        dev.tgt.cq_depth = dev.tgt.cq_depth.saturating_mul(2).saturating_add(1);
        Ok(())
    };
    let poll = cfg.poll;
    let track = Arc::new(queue::Queues::default());
    let queues = Arc::clone(&track);
    let stopping = Arc::clone(&served);
    let q_fn = move |qid: u16, dev: &UblkDev| {
        queues.started();
        // Fail-stop: a panic on a queue's thread (an assertion of the engine or the
        // device, which run here) leaves the kernel's requests on that queue with no
        // one to complete them, and the device hung. The process ends instead: the
        // ublk driver then fails or, for a recoverable device, holds the device's
        // I/O until `zblk serve --recover` takes it over, as after a SIGKILL.
        let run = std::panic::AssertUnwindSafe(|| queue::serve_queue(qid, dev, &served, poll, batched, &queues));
        if std::panic::catch_unwind(run).is_err() {
            std::process::abort();
        }
        queues.ended();
    };
    let wait = move |ctrl: &UblkCtrl| {
        until_stop(&Ready {
            device: ctrl.get_bdev_path(),
            id: ctrl.dev_info().dev_id,
            path: DriverPath::probe(batched),
        });
        // The kernel removes the disk once no request is in flight: what the device
        // holds ends now, not in its own time.
        stopping.stop();
        // Removing the device makes the kernel fail its pending commands: the queue
        // threads then return, and run_target joins them.
        let _ = ctrl.kill_dev();
    };
    let nr_queues = u32::from(ctrl.dev_info().nr_hw_queues);
    let Err(e) = ctrl.run_target(tgt_init, q_fn, wait) else {
        return Ok(());
    };
    // The device was added but not started, and run_target left its queues' threads
    // running, each waiting on its fetch commands. Dropping the control now would
    // delete the device, which the kernel finishes only once those threads have
    // closed its character device: a wait for ever, which SIGINT and SIGTERM cannot
    // interrupt (every thread blocks them). Nor does stopping a device that never
    // started abort its fetch commands (Linux 6.12): each queue's thread is told to
    // end without serving, which closes its ring, and the kernel aborts them then.
    // (Not stopped first: a recoverable device whose recovery failed stays quiesced,
    // holding its I/O for the next server, as after its server died; a new device
    // is removed when the control is dropped.)
    let err = ublk_error("starting the ublk device", e);
    track.abandon();
    if !track.wait_ended(nr_queues, NO_QUEUES_AFTER, START_FAILED_WAIT) {
        // Not deleted, rather than a delete that never returns: the device stays,
        // stopped (`ublk del` removes it).
        ctrl.disown();
        return Err(ServeError(format!("{}; the device's queues did not stop: it is left added", err.0)));
    }
    Err(err)
}

fn ublk_error(what: &str, e: libublk::UblkError) -> ServeError {
    let text = match &e {
        libublk::UblkError::IOError(io) => format!("{e}: {io}"),
        _ => e.to_string(),
    };
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
    ServeError(format!("{what}: {text}{hint}"))
}

/// The parameters the kernel's queue limits come from.
fn set_params(dev: &mut UblkDev, geo: &Geometry, rotational: bool) {
    let lbs_shift = geo.lbs_bytes().trailing_zeros() as u8;
    let io_sectors = io_buf_bytes(geo) / SECTOR_SIZE as u32;
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
        types: sys::UBLK_PARAM_TYPE_BASIC | sys::UBLK_PARAM_TYPE_ZONED | sys::UBLK_PARAM_TYPE_DISCARD,
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
        // DISCARD and WRITE_ZEROES go through zblk's engine as it takes them: a
        // discard deallocates a conventional zone's range (a sequential zone refuses
        // it: its space is freed by a reset); WRITE_ZEROES is a write at a sequential
        // zone's write pointer, unmapped unless the kernel sets NOUNMAP. Neither
        // crosses a zone, as the kernel splits at most at these sizes.
        discard: sys::ublk_param_discard {
            discard_granularity: geo.lbs_bytes(),
            max_discard_sectors: zone_sectors,
            max_write_zeroes_sectors: geo.max_write_zeroes_sectors().min(zone_sectors),
            max_discard_segments: 1,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transport_follows_what_the_driver_offers() {
        let batch = u64::from(sys::UBLK_F_BATCH_IO);
        let (linux_7_3, linux_6_12) = (Some(0x1f_ffff), Some(0x1fe));
        assert_eq!(linux_7_3.map(|f: u64| f & batch != 0), Some(true));
        assert_eq!(Transport::Auto.batched(linux_7_3).ok(), Some(true));
        assert_eq!(Transport::Auto.batched(linux_6_12).ok(), Some(false));
        assert_eq!(Transport::Auto.batched(None).ok(), Some(false), "a driver that does not say: no batches");
        assert_eq!(Transport::Command.batched(linux_7_3).ok(), Some(false));
        assert_eq!(Transport::Batch.batched(linux_7_3).ok(), Some(true));
        let refused = Transport::Batch.batched(linux_6_12).unwrap_err().0;
        assert!(refused.contains("does not offer them") && refused.contains("0x1fe"), "{refused}");
        // The path said: batched commands move from what the driver offers to the
        // path used.
        let used = DriverPath { features: linux_7_3, batched: true };
        assert_eq!(used.used(), "batched commands, data by user copy");
        assert!(!used.offered().contains(&"batched commands"));
        let offered = DriverPath { features: linux_7_3, batched: false };
        assert_eq!(offered.used(), "a command per request, data by user copy");
        assert_eq!(offered.offered()[0], "batched commands");
    }
}
