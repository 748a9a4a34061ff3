//! The runtime over a real Linux zoned block device (`zblk_dev::linux::LinuxZoned`):
//! a zoned null_blk in a Linux VM (6.12 or 7.3) (`shared/tools/kernel-vm.sh`), with io_uring
//! and with the thread pool. The host side boots the VM and runs this same test binary
//! in it, on the `linux_device_in_the_vm` test, which the device path in
//! `ZBLK_LINUX_DEVICE` turns on (it does nothing elsewhere).
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use std::path::Path;
use std::sync::Arc;
use zblk_core::bio::{BioFlags, Op, ReqId, Request, Status};
use zblk_core::engine::ZeroingMethod;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneCond;
use zblk_dev::linux::{LinuxOptions, LinuxZoned};
use zblk_dev::{Device, DeviceErrorKind, IoBuf};
use zblk_runtime::{AlignedBuf, Backend, Io, Runtime, RuntimeConfig, ZeroingFlags};

/// 1 GiB of 4 MiB zones, 3 MiB writable, the first two conventional; at most 4 open.
const NULLB: &str = "zoned=1 gb=1 zone_size=4 zone_capacity=3 zone_nr_conv=2 memory_backed=1 zone_max_open=4";
/// Sectors per zone, and writable ones.
const ZONE: u64 = 8192;
const CAP: u64 = 6144;
const DEVICE_ENV: &str = "ZBLK_LINUX_DEVICE";

fn zone(n: u64) -> Sector {
    Sector(n * ZONE)
}

#[test]
fn runtime_on_null_blk() {
    let script = match vm::ready() {
        Ok(s) => s,
        Err(why) => return vm::skipped("runtime_on_null_blk", &why),
    };
    let share = tempfile::Builder::new().prefix("zblk-vm").tempdir_in("/var/tmp").unwrap();
    let exe = vm::stage(share.path(), &std::env::current_exe().unwrap().display().to_string());
    let env = format!("{DEVICE_ENV}=/dev/nullb0");
    let cmd = ["env", &env, &exe, "--exact", "linux_device_in_the_vm", "--ignored", "--nocapture"];
    let t = std::time::Instant::now();
    let (out, log) = vm::run(&script, share.path(), NULLB, &cmd);
    assert!(
        out.status.success() && log.contains("@@ exit 0") && log.contains("test result: ok. 1 passed"),
        "the test in the VM failed:\n{log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("in the VM ({:.1} s):\n{log}", t.elapsed().as_secs_f64());
}

fn open(path: &Path) -> LinuxZoned {
    LinuxZoned::open(path, &LinuxOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
#[ignore = "runs inside the VM, started by runtime_on_null_blk"]
fn linux_device_in_the_vm() {
    let Ok(path) = std::env::var(DEVICE_ENV) else { return };
    let path = Path::new(&path);
    the_geometry_comes_from_sysfs_and_the_zone_report(path);
    for backend in [Backend::IoUring, Backend::Threads] {
        the_runtime_apis(path, backend);
    }
    devices_that_are_not_zoned_are_refused();
}

fn the_geometry_comes_from_sysfs_and_the_zone_report(path: &Path) {
    let dev = open(path);
    let geo = dev.geometry();
    assert_eq!((geo.nr_zones(), geo.nr_conv(), geo.zone_sectors(), geo.zone_cap_sectors()), (256, 2, ZONE, CAP));
    assert_eq!((geo.max_open(), geo.max_active(), geo.lbs_bytes()), (4, 0, 512));
    assert!(geo.emulates_zone_append(), "no zone append for userspace: emulated");
    assert!(dev.limits().zone_append_max_bytes > 0, "although null_blk has it");
    assert!(!dev.rotational());
    assert_eq!(dev.name(), path.display().to_string());
    let zones = dev.zones().unwrap();
    assert_eq!((zones.len(), zones[0].cond, zones[2].cond), (256, ZoneCond::NotWp, ZoneCond::Empty));
    // Held exclusively: a second open for writing is refused, naming the device.
    let e = LinuxZoned::open(path, &LinuxOptions::default()).unwrap_err();
    assert!(matches!(e.kind, DeviceErrorKind::InUse(_)), "{e}");
    assert!(e.to_string().starts_with(&path.display().to_string()), "{e}");
    eprintln!("{}: {} zones, sysfs {:?}", path.display(), geo.nr_zones(), dev.limits());
}

fn the_runtime_apis(path: &Path, backend: Backend) {
    let dev = Arc::new(open(path));
    let rt = Runtime::start(dev.clone(), RuntimeConfig { backend, ..RuntimeConfig::default() }).unwrap();
    let what = rt.backend().to_string();
    eprintln!("{}: {what}", path.display());
    assert_eq!(rt.uses_io_uring(), backend == Backend::IoUring);
    rt.zone_op(Op::ZoneResetAll, Sector::ZERO).unwrap();
    // A write on an aligned buffer (the ring, with io_uring), an emulated append on an
    // unaligned one (bounced by a worker), a write off the write pointer refused.
    rt.write_at(zone(2), &AlignedBuf::from_slice(&[1u8; 4096])).unwrap();
    let unaligned = vec![2u8; 4096 + 1];
    assert_eq!(rt.append(zone(2), &unaligned[1..]), Ok(zone(2) + 8), "{what}");
    assert_eq!(rt.engine_stats().emulated_appends, 1, "{what}");
    assert_eq!(rt.write_at(zone(2) + 64, &[3u8; 512]), Err(Status::Unaligned), "{what}");
    // Reads, aligned and not: the data, then what the device returns past the write
    // pointer, passed through (null_blk fills with 0xff; ZBC disks return a fill
    // pattern or fail the read).
    let mut out = AlignedBuf::zeroed(24 * 512);
    rt.read_at(zone(2), &mut out).unwrap();
    let expect = |b: &[u8]| {
        assert!(b[..4096].iter().all(|&x| x == 1) && b[4096..8192].iter().all(|&x| x == 2), "{what}");
        let fill = b[8192];
        assert!(b[8192..].iter().all(|&x| x == fill), "{what}: past the write pointer, one fill pattern");
    };
    expect(&out);
    let mut out = vec![0xeeu8; 24 * 512 + 1];
    rt.read_at(zone(2), &mut out[1..]).unwrap();
    expect(&out[1..]);
    // The asynchronous API (the future is the same callback underneath).
    let (tx, rx) = std::sync::mpsc::channel();
    let tx2 = tx.clone();
    rt.submit(Io::append(zone(2), AlignedBuf::from_slice(&[4u8; 8192])), move |d| tx.send(d.result).unwrap());
    assert_eq!(rx.recv().unwrap(), Ok(zone(2) + 16), "{what}");
    rt.submit(Io::write(zone(2) + 32, vec![5u8; 4096]), move |d| tx2.send(d.result).unwrap());
    assert_eq!(rx.recv().unwrap(), Ok(zone(2) + 32), "{what}");
    // FUA, flush; the conventional zones.
    rt.write_at_flags(zone(2) + 40, &AlignedBuf::from_slice(&[6u8; 4096]), BioFlags::FUA).unwrap();
    rt.flush().unwrap();
    rt.write_at(Sector(1000), &AlignedBuf::from_slice(&[7u8; 4096])).unwrap();
    rt.write_at(Sector(8), &AlignedBuf::from_slice(&[8u8; 4096])).unwrap();
    let mut out = AlignedBuf::zeroed(4096);
    rt.read_at(Sector(1000), &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 7), "{what}");
    // Zone management through the kernel's ioctls.
    rt.zone_op(Op::ZoneFinish, zone(3)).unwrap();
    rt.zone_op(Op::ZoneOpen, zone(4)).unwrap();
    let zones = rt.report_zones().unwrap();
    let conds: Vec<ZoneCond> = zones[2..5].iter().map(|z| z.cond).collect();
    assert_eq!(conds, [ZoneCond::ImpOpen, ZoneCond::Full, ZoneCond::ExpOpen], "{what}");
    assert_eq!(zones[2].wp, zone(2) + 48, "{what}");
    assert_eq!(rt.write_at(zone(3), &AlignedBuf::zeroed(4096)), Err(Status::ZoneFull), "{what}");
    assert_eq!(rt.zone_op(Op::ZoneReset, Sector(0)), Err(Status::Invalid), "{what}: a conventional zone");
    // The open limit, from the device: four zones explicitly open, a write to a fifth
    // fails with ETOOMANYREFS (no implicitly open zone to close).
    rt.zone_op(Op::ZoneClose, zone(2)).unwrap();
    for z in 5..8 {
        rt.zone_op(Op::ZoneOpen, zone(z)).unwrap();
    }
    assert_eq!(rt.write_at(zone(9), &AlignedBuf::zeroed(4096)), Err(Status::ZoneOpenResource), "{what}");
    rt.zone_op(Op::ZoneClose, zone(7)).unwrap();
    rt.write_at(zone(9), &AlignedBuf::zeroed(4096)).unwrap();
    // null_blk has no WRITE_ZEROES: zero buffers are written (zone 10 opens: null_blk
    // closes zone 9, the one implicitly open).
    assert_eq!(rt.device_zeroing(false), None);
    let r = rt.write_zeroes(zone(10), 16, ZeroingFlags::default()).unwrap();
    assert_eq!((r.method, r.device_method), (ZeroingMethod::ZeroBuffers, None));
    assert_eq!(rt.report_zone(zone(10)).unwrap().wp, zone(10) + 16);
    rt.close().unwrap();
    let flush = Request {
        id: ReqId::unissued(0),
        op: Op::Flush,
        sector: Sector::ZERO,
        nr_sectors: 0,
        flags: BioFlags::NONE,
        user_data: 0,
        bio_offset: 0,
    };
    assert_eq!(dev.execute(&flush, IoBuf::None), Err(Status::IoErr), "closed");
    drop(dev);
    // What the device kept, as a fresh open reports it.
    let zones = open(path).zones().unwrap();
    let state = |z: usize| (zones[z].cond, zones[z].wp);
    assert_eq!(state(2), (ZoneCond::Closed, zone(2) + 48), "{what}");
    assert_eq!(state(9), (ZoneCond::Closed, zone(9) + 8), "{what}");
    assert_eq!(state(10), (ZoneCond::ImpOpen, zone(10) + 16), "{what}");
}

/// A regular null_blk device (made through configfs) and a regular file.
fn devices_that_are_not_zoned_are_refused() {
    let dir = Path::new("/sys/kernel/config/nullb/zblk-plain");
    std::fs::create_dir(dir).unwrap();
    // (A configfs device starts from the module's parameters, zoned=1 among them.)
    for (attr, value) in [("size", "64"), ("zoned", "0"), ("memory_backed", "1"), ("power", "1")] {
        std::fs::write(dir.join(attr), value).unwrap();
    }
    // The disk takes the configfs directory's name (older kernels: nullb<index>);
    // devtmpfs makes its node a moment later.
    let index = std::fs::read_to_string(dir.join("index")).unwrap();
    let names = ["/dev/zblk-plain".to_string(), format!("/dev/nullb{}", index.trim())];
    let t = std::time::Instant::now();
    let plain = loop {
        match names.iter().find(|n| Path::new(n).exists()) {
            Some(n) => break n.clone(),
            None if t.elapsed().as_secs() < 5 => std::thread::sleep(std::time::Duration::from_millis(20)),
            None => panic!("none of {names:?} appeared"),
        }
    };
    let e = LinuxZoned::open(Path::new(&plain), &LinuxOptions::default()).unwrap_err();
    assert!(matches!(e.kind, DeviceErrorKind::Unsupported(_)), "{e}");
    assert!(e.to_string().starts_with(&format!("{plain}: not a zoned block device")), "{e}");
    eprintln!("refused: {e}");
    std::fs::write(dir.join("power"), "0").unwrap();
    std::fs::remove_dir(dir).unwrap();
    let e = LinuxZoned::open(Path::new("/proc/version"), &LinuxOptions::default()).unwrap_err();
    assert!(e.to_string().contains("a regular file, not a block device"), "{e}");
}
