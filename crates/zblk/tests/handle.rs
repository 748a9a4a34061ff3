//! The handle on an image and on simulated presets: appends from two threads to one
//! zone land at distinct places and read back, on an image after a reopen too; every
//! bad input is a typed error with its errno and rule, never a panic.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use zblk::{Error, Handle, IssuePolicy, Options, ZoneCond, ZoneOp};
use zblk_core::bio::StatusCode;
use zblk_core::geometry::GeometryParams;
use zblk_core::rule::Rule;
use zblk_dev::file::{CreateOptions, FileImage};

const EIO: i32 = 5;
const EINVAL: i32 = 22;

/// An image of 8 zones of 1 MiB, the first conventional.
fn image(dir: &Path) -> PathBuf {
    let p = dir.join("img.zbd");
    let geometry =
        GeometryParams { capacity_bytes: 8 << 20, zone_size_bytes: 1 << 20, nr_conv: 1, ..GeometryParams::default() };
    FileImage::create(&p, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    p
}

/// A record that names its writer and its number, a block long.
fn record(thread: u8, n: u8, len: usize) -> Vec<u8> {
    let mut r = vec![thread; len];
    r[1] = n;
    r
}

/// Two threads append `per_thread` records each to the zone at `zone`; every record
/// lands in the zone at its own place, and reads back from there.
fn two_threads_append(h: &Handle, zone: u64, per_thread: u8) -> Vec<(u64, Vec<u8>)> {
    let len = h.block_size().max(512) as usize;
    let landed: Vec<(u64, Vec<u8>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (1..=2u8)
            .map(|t| {
                let h = h.clone();
                s.spawn(move || {
                    (0..per_thread)
                        .map(|n| {
                            let r = record(t, n, len);
                            (h.append(zone, &r).expect("append"), r)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let places: BTreeSet<u64> = landed.iter().map(|(at, _)| *at).collect();
    assert_eq!(places.len(), 2 * usize::from(per_thread), "every record at a place of its own");
    let end = zone + 2 * u64::from(per_thread) * len as u64;
    assert!(places.iter().all(|&at| at >= zone && at < end && at % len as u64 == 0), "{places:?}");
    assert_eq!(h.zone(zone).unwrap().wp, end, "the zone's write pointer past every record");
    read_back(h, &landed);
    landed
}

fn read_back(h: &Handle, landed: &[(u64, Vec<u8>)]) {
    for (at, r) in landed {
        let mut back = vec![0u8; r.len()];
        h.read_at(*at, &mut back).unwrap();
        assert_eq!(&back, r, "the record at {at}");
    }
}

#[test]
fn handles_are_shared_across_threads() {
    fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<Handle>();
    fn error<T: std::error::Error + Send + Sync + 'static>() {}
    error::<Error>();
}

#[test]
fn two_threads_append_to_one_zone_of_an_image_and_read_back_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let spec = p.to_str().unwrap();
    let h = Handle::open(spec).unwrap();
    assert_eq!((h.capacity(), h.zone_size()), (8 << 20, 1 << 20));
    let landed = two_threads_append(&h, h.zone_size(), 64);
    h.flush().unwrap();
    h.close().unwrap();
    assert!(matches!(h.append(1 << 20, &[0; 512]), Err(Error::Closed)));
    h.close().unwrap();

    let again = Handle::open(spec).unwrap();
    assert!(again.repairs().is_empty(), "a clean close: {:?}", again.repairs());
    read_back(&again, &landed);
    assert_eq!(again.zone(1 << 20).unwrap().wp, (1 << 20) + 128 * 512);
}

#[test]
fn two_threads_append_to_one_zone_of_simulated_presets() {
    for spec in ["sim:nullb:zone_size=4,size=64", "sim:nullb:zone_size=64,zone_nr_conv=2,zone_append_max_sectors=0"] {
        let h = Handle::open(spec).unwrap();
        two_threads_append(&h, 3 * h.zone_size(), 100);
    }
    // The 30 TB SMR disk's geometry (a rotational disk: the single issuer), its
    // data in memory.
    let h = Handle::open("sim:smr-30tb").unwrap();
    assert_eq!(h.policy(), IssuePolicy::Qd1);
    assert!(h.capacity() > 29_000_000_000_000);
    let last = h.report().unwrap().last().unwrap().start;
    two_threads_append(&h, last, 50);
}

#[test]
fn the_zone_operations_and_the_report() {
    let h = Options::new().policy(IssuePolicy::Zwp).open("sim:nullb:zone_size=4,size=64,zone_nr_conv=1").unwrap();
    let zs = h.zone_size();
    let zones = h.report().unwrap();
    assert_eq!(zones.len(), 16);
    assert!(!zones[0].is_sequential() && zones[1].is_sequential());
    h.write_at(zs, &[1; 4096]).unwrap();
    assert_eq!(h.zone(zs).unwrap().remaining(), zs - 4096);
    h.close_zone(zs).unwrap();
    assert_eq!(h.zone(zs).unwrap().cond, ZoneCond::Closed);
    h.open_zone(zs).unwrap();
    assert_eq!(h.zone(zs).unwrap().cond, ZoneCond::ExpOpen);
    h.finish_zone(zs).unwrap();
    assert_eq!((h.zone(zs).unwrap().cond, h.zone(zs).unwrap().remaining()), (ZoneCond::Full, 0));
    h.reset_zone(zs).unwrap();
    let z = h.zone(zs).unwrap();
    assert_eq!((z.cond, z.wp), (ZoneCond::Empty, zs));
    // The plug learned of the reset: an append lands at the zone's start again.
    assert_eq!(h.append(zs, &[2; 512]).unwrap(), zs);
    h.zone_op(ZoneOp::Reset, zs).unwrap();
}

/// `r`'s error, which must be one.
fn err<T: std::fmt::Debug>(r: Result<T, Error>) -> Error {
    r.expect_err("an error")
}

#[test]
fn bad_target_strings_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    for spec in ["", "sim:", "sim:nosuch", "sim:nullb:zone_size=3", "sim:nullb:nosuch=1", "stack:linear[", "stack:"] {
        let e = err(Handle::open(spec));
        assert!(matches!(e, Error::Spec { .. }), "{spec}: {e:?}");
        assert_eq!(e.errno(), EINVAL, "{spec}");
    }
    // (A stack opens: tests/stack.rs.)
    let e = err(Options::new().read_only(true).open("stack:linear[nullb:zone_size=64; nullb:zone_size=64]"));
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert_eq!(e.errno(), 95);

    let missing = dir.path().join("nosuch.zbd");
    let e = err(Handle::open(missing.to_str().unwrap()));
    assert_eq!(e.errno(), 2, "ENOENT: {e}");
    assert!(e.to_string().contains("nosuch.zbd"), "{e}");
    let not_an_image = dir.path().join("text");
    std::fs::write(&not_an_image, vec![b'x'; 1 << 16]).unwrap();
    let e = err(Handle::open(not_an_image.to_str().unwrap()));
    assert!(matches!(e, Error::Open { errno: EINVAL, .. }), "{e:?}");
    assert!(e.to_string().contains("not a zblk image"), "{e}");
}

#[test]
fn bad_options_are_typed_errors() {
    for o in [
        Options::new().queue_depth(0),
        Options::new().queue_depth(zblk::MAX_QUEUE_DEPTH + 1),
        Options::new().max_io_bytes(0),
        Options::new().max_io_bytes(zblk::MAX_IO_BYTES + 1),
    ] {
        let e = err(o.open("sim:nullb"));
        assert!(matches!(e, Error::Limit { .. }), "{e:?}");
        assert_eq!(e.errno(), EINVAL);
    }
    assert!(err(Options::new().queue_depth(0).open("sim:nullb")).to_string().contains("queue depth 0"));
}

#[test]
fn bad_requests_are_typed_errors_with_their_rule() {
    let h = Options::new().max_io_bytes(1 << 20).open("sim:nullb:zone_size=4,size=64,zone_nr_conv=1").unwrap();
    let zs = h.zone_size();
    let range = |e: &Error, rule: Rule| {
        assert!(matches!(e, Error::Range { .. }), "{e:?}");
        assert_eq!((e.errno(), e.rule()), (EINVAL, Some(rule)), "{e}");
    };
    range(&err(h.write_at(zs + 100, &[0; 512])), Rule::NotBlockAligned);
    range(&err(h.write_at(zs, &[0; 100])), Rule::NotBlockAligned);
    range(&err(h.read_at(zs, &mut [])), Rule::LengthZero);
    range(&err(h.read_at(h.capacity() - 512, &mut [0; 1024])), Rule::BeyondEnd);
    range(&err(h.append(u64::MAX - 511, &[0; 512])), Rule::BeyondEnd);
    range(&err(h.reset_zone(h.capacity())), Rule::BeyondEnd);

    // A huge request: past the handle's bound, refused before it is submitted.
    let e = err(h.write_at(zs, &vec![0; 2 << 20]));
    assert!(matches!(e, Error::Limit { what: "request length", value, .. } if value == 2 << 20), "{e:?}");

    // Past the write pointer: the plug refuses it, naming where the pointer is.
    h.write_at(zs, &[1; 4096]).unwrap();
    let e = err(h.write_at(zs + 8192, &[1; 4096]));
    assert_eq!(e.status().map(|s| s.code()), Some(StatusCode::Unaligned), "{e:?}");
    assert_eq!((e.errno(), e.rule()), (EIO, Some(Rule::NotAtWp { wp: zblk_core::units::Sector(zs / 512 + 8) })));
    assert_eq!(
        e.to_string(),
        format!("EIO: write at sector {} is not at zone 1's write pointer (sector {})", zs / 512 + 16, zs / 512 + 8)
    );
    assert!(matches!(e, Error::Io { op: zblk_core::bio::Op::Write, offset, len: 4096, .. } if offset == zs + 8192));

    // Appends: not at a zone's start, to a conventional zone, larger than a zone.
    let io = |e: Error, errno: i32, rule: Rule| assert_eq!((e.errno(), e.rule()), (errno, Some(rule)), "{e}");
    io(err(h.append(zs + 4096, &[0; 512])), EINVAL, Rule::NotZoneStart);
    io(err(h.append(0, &[0; 512])), EINVAL, Rule::Conventional);
    io(err(h.finish_zone(0)), EINVAL, Rule::Conventional);
    // (The device's append limit is at most a zone's capacity, 1 MiB here.)
    let small = Options::new().open("sim:nullb:zone_size=4,size=64,zone_capacity=1").unwrap();
    io(err(small.append(small.zone_size(), &vec![0; 1152 << 10])), EINVAL, Rule::AppendOverLimit);
    // A zone transition the zone's condition does not allow.
    io(err(h.close_zone(2 * zs)), EIO, Rule::Transition { cond: ZoneCond::Empty });
    // The handle still works after every refusal.
    assert_eq!(h.append(zs, &[2; 512]).unwrap(), zs + 4096);
}

#[test]
fn a_read_only_handle_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let h = Options::new().read_only(true).open(p.to_str().unwrap()).unwrap();
    let mut buf = [0u8; 4096];
    h.read_at(1 << 20, &mut buf).unwrap();
    let e = err(Options::new().read_only(true).open("sim:nullb"));
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    let e = err(h.write_at(1 << 20, &buf));
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert_eq!(e.errno(), 95, "EOPNOTSUPP, as the image refuses it: {e}");
}
