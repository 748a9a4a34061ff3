//! A served memory device's reads go to the kernel straight from the device's pages
//! (`RuntimeServed::reading_from`, `CopyOut::Pages`): the bytes handed out are the
//! bytes a read into a buffer returns, in vectored writes of at most 1,024 slices at
//! the right offsets; a failed read hands out nothing, a short write is an error.

use std::sync::Arc;
use std::sync::mpsc::channel;
use zblk_core::bio::{BioFlags, Op};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::Sector;
use zblk_dev::buf::AlignedBuf;
use zblk_dev::{Locked, MemDevice};
use zblk_runtime::{Runtime, RuntimeConfig};
use zblk_serve::{CopyOut, Done, Reply, ReplyTo, Req, RuntimeServed, Served};

const ZONE: u64 = 16384; // sectors (8 MiB)

fn call(s: &dyn Served, req: Req) -> Reply {
    let (tx, rx) = channel();
    s.submit(req, ReplyTo::call(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap()
}

fn io(op: Op, sector: u64, data: &[u8]) -> Req {
    let buf = AlignedBuf::from_slice(data);
    Req::Io { op, sector: Sector(sector), nr_sectors: (data.len() / 512) as u32, flags: BioFlags::NONE, buf }
}

/// What a reply's copy-out did: its result, the bytes it handed the kernel, and each
/// vectored write's offset and number of slices.
type HandedOut = (Result<(), i32>, Vec<u8>, Vec<(u64, usize)>);

/// What a reply's copy-out hands the kernel; `short` makes the second write take a
/// byte less.
fn handed_out(r: &Reply, short: bool) -> HandedOut {
    let CopyOut::Pages(p) = &r.copy_out else { panic!("not from the pages: {:?}", r.copy_out) };
    let (mut out, mut calls, mut iov) = (Vec::new(), Vec::new(), Vec::new());
    let res = p.write_out(&mut iov, |at, group| {
        calls.push((at, group.len()));
        assert_eq!(at as usize, out.len(), "each write starts where the last one ended");
        for v in group {
            // SAFETY: the iovecs point into the device's pages, locked meanwhile.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) });
        }
        let n: usize = group.iter().map(|v| v.iov_len).sum();
        Ok(if short && calls.len() == 2 { n - 1 } else { n })
    });
    assert!(iov.is_empty(), "no pointer into the pages is left behind");
    (res, out, calls)
}

/// A 64 MiB memory device of 8 MiB zones (the first conventional) under a runtime,
/// served two ways: `plain` reads through the engine, `served` from the pages.
struct Setup {
    geo: Geometry,
    dev: Arc<Locked<MemDevice>>,
    rt: Runtime,
    plain: RuntimeServed,
    served: RuntimeServed,
}

fn setup(max_sectors: u32) -> Setup {
    let geo = Geometry::new(&GeometryParams {
        capacity_bytes: 64 << 20,
        zone_size_bytes: 8 << 20,
        nr_conv: 1,
        max_sectors,
        ..GeometryParams::default()
    })
    .unwrap();
    let dev = Arc::new(Locked::new(MemDevice::new(&geo, true), "memory", false));
    let rt = Runtime::start(dev.clone(), RuntimeConfig::default()).unwrap();
    let plain = RuntimeServed::new(rt.submitter(), geo.clone(), None);
    let served = RuntimeServed::new(rt.submitter(), geo.clone(), None).reading_from(dev.clone());
    Setup { geo, dev, rt, plain, served }
}

#[test]
fn a_read_hands_out_the_devices_pages_as_a_read_into_a_buffer_returns_them() {
    let Setup { geo, rt, plain, served, .. } = setup(16384);
    // The conventional zone's 4 MiB written a page at a time from the last page to the
    // first: no two pages next to each other in memory, 1,024 slices and more.
    for page in (0..1024u64).rev() {
        let data: Vec<u8> = (0..4096).map(|i| (i as u64 * 7 + page) as u8).collect();
        assert_eq!(call(&plain, io(Op::Write, page * 8, &data)).result, Ok(Done::Bytes(4096)));
    }
    // A sequential zone: 12 KiB written, read 1 MiB from its start (zeroes past the
    // write pointer).
    assert_eq!(call(&plain, io(Op::Write, ZONE, &[9u8; 12288])).result, Ok(Done::Bytes(12288)));
    for (sector, len) in [(3u64, 4 << 20), (0, 4096), (ZONE, 1 << 20), (ZONE + 20, 512), (5000, 8 << 20)] {
        let want = call(&plain, io(Op::Read, sector, &vec![0u8; len]));
        let got = call(&served, io(Op::Read, sector, &vec![0u8; len]));
        assert_eq!(got.result, want.result, "{len} bytes at {sector}");
        if want.result.is_err() {
            assert!(matches!(got.copy_out, CopyOut::Nothing), "a failed read hands out nothing");
            continue;
        }
        let (res, out, calls) = handed_out(&got, false);
        assert_eq!(res, Ok(()));
        assert!(out == want.buf[..len], "{len} bytes at {sector}: the bytes of a read into a buffer");
        assert!(calls.iter().all(|&(_, n)| n <= 1024), "{calls:?}");
        if sector == 3 {
            assert_eq!(calls.len(), 2, "1,025 slices: two vectored writes");
            let (res, ..) = handed_out(&got, true);
            assert_eq!(res, Err(libc::EIO), "a short write is an error");
        }
    }
    // Past the device's end: the read is refused, nothing is handed out.
    let r = call(&served, io(Op::Read, geo.nr_sectors() - 8, &[0u8; 8192]));
    assert_eq!(r.result, Err(libc::EINVAL));
    assert!(matches!(r.copy_out, CopyOut::Nothing));
    drop((plain, served));
    rt.close().unwrap();
}

#[test]
fn a_read_checked_without_the_engine_ends_as_one_through_it() {
    // Random writes, appends, resets, finishes and failed zones through the engine;
    // after each, random reads (past the end, of no sectors, across zones, of failed
    // zones) both ways: the same result, and the same bytes when it succeeds. Seeded:
    // the seed is in every failure's message.
    use rand::rngs::ChaCha8Rng;
    use rand::{RngExt, SeedableRng};
    use zblk_core::units::ZoneNo;
    use zblk_core::zone::ZoneCond;
    let (mut compared, mut failed) = (0, std::collections::BTreeMap::new());
    for seed in 1..=12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut rnd = move |n: u64| rng.random_range(0..n);
        let Setup { geo, dev, rt, plain, served } = setup(256);
        for step in 0..80u64 {
            let z = rnd(8);
            let start = z * ZONE;
            let wp = if z == 0 { rnd(ZONE) } else { dev.lock().zones().unwrap().zone(ZoneNo(z as u32)).wp.0 };
            let data: Vec<u8> = (0..(1 + rnd(64)) * 512).map(|i| (i ^ seed ^ step) as u8).collect();
            let _ = match rnd(10) {
                0 if z > 0 => call(&plain, io(Op::ZoneReset, start, &[])),
                1 if z > 0 => call(&plain, io(Op::ZoneFinish, start, &[])),
                2 if z > 0 => call(&plain, io(Op::ZoneAppend, start, &data)),
                // Halfway, a zone goes offline and another read-only.
                _ if step == 40 => {
                    let mut d = dev.lock();
                    d.zones_mut().unwrap().set_failed(ZoneNo(2 + rnd(3) as u32), ZoneCond::Offline);
                    d.zones_mut().unwrap().set_failed(ZoneNo(5 + rnd(3) as u32), ZoneCond::ReadOnly);
                    continue;
                }
                _ => call(&plain, io(Op::Write, wp, &data)),
            };
            for _ in 0..6 {
                let nr = match rnd(12) {
                    0 => 0,
                    1 => 1 + rnd(2 * ZONE),
                    _ => 1 + rnd(600),
                };
                let at = if rnd(6) == 0 { geo.nr_sectors() - rnd(64) } else { rnd(geo.nr_sectors()) };
                let len = nr as usize * 512;
                let want = call(&plain, io(Op::Read, at, &vec![0u8; len]));
                // Half through `submit`, half as a queue asks first (`serve_now`).
                let read = io(Op::Read, at, &vec![0u8; len]);
                let got = match rnd(2) {
                    0 => call(&served, read),
                    _ => served.serve_now(read).expect("a read of the memory device is answered at once"),
                };
                let what = format!("seed {seed}, step {step}: {nr} sectors at {at}");
                assert_eq!(got.result, want.result, "{what}");
                if let Err(errno) = want.result {
                    *failed.entry(errno).or_insert(0) += 1;
                    assert!(matches!(got.copy_out, CopyOut::Nothing), "{what}: a failed read hands out nothing");
                    continue;
                }
                compared += 1;
                let (res, out, _) = handed_out(&got, false);
                assert_eq!(res, Ok(()), "{what}");
                assert!(out == want.buf[..len], "{what}: not the bytes of a read through the engine");
            }
        }
        drop((plain, served));
        rt.close().unwrap();
    }
    // Failures of both kinds: out of range or of no sectors (EINVAL), offline zones.
    eprintln!("{compared} reads compared, failures by errno: {failed:?}");
    assert!(compared > 2_000 && failed.len() == 2 && failed.values().all(|&n| n > 50), "{compared}, {failed:?}");
}

#[test]
fn only_a_read_of_the_memory_device_is_answered_at_once() {
    let Setup { dev, rt, plain, served, .. } = setup(256);
    // Everything else is given back as it came, for `submit`: nothing was done.
    let back = |s: &RuntimeServed, req: Req| match s.serve_now(req) {
        Err(Req::Io { op, sector, nr_sectors, buf, .. }) => (op, sector.0, nr_sectors, buf[0]),
        other => panic!("answered at once: {other:?}"),
    };
    assert_eq!(back(&served, io(Op::Write, ZONE, &[7u8; 4096])), (Op::Write, ZONE, 8, 7));
    assert_eq!(back(&served, io(Op::ZoneReset, ZONE, &[3u8; 512])), (Op::ZoneReset, ZONE, 1, 3));
    assert_eq!(back(&plain, io(Op::Read, 0, &[5u8; 4096])), (Op::Read, 0, 8, 5));
    assert_eq!(dev.lock().zones().unwrap().zone(zblk_core::units::ZoneNo(1)).wp.0, ZONE, "no write was done");
    assert!(served.serve_now(Req::Report { first: 0, nr_zones: 1, buf: AlignedBuf::zeroed(64) }).is_err());
    // A read is, and its pages hold what a write through `submit` left there.
    assert_eq!(call(&served, io(Op::Write, ZONE, &[7u8; 4096])).result, Ok(Done::Bytes(4096)));
    let r = served.serve_now(io(Op::Read, ZONE, &[0u8; 4096])).expect("answered at once");
    let (res, out, _) = handed_out(&r, false);
    assert_eq!((r.result, res, out), (Ok(Done::Bytes(4096)), Ok(()), vec![7u8; 4096]));
    drop((plain, served));
    rt.close().unwrap();
}

/// Reads share the device's lock: one read handing out its pages (its copy to the
/// kernel under way, in the callback) lets another read hand out its own at the same
/// time, as two queues' reads do; a write waits until no read holds the pages.
#[test]
fn reads_hand_out_side_by_side_and_a_write_waits_for_them() {
    use std::time::Duration;
    let Setup { rt, plain, served, .. } = setup(16384);
    assert_eq!(call(&plain, io(Op::Write, 0, &[7u8; 4096])).result, Ok(Done::Bytes(4096)));
    let first = call(&served, io(Op::Read, 0, &[0u8; 4096]));
    let second = call(&served, io(Op::Read, 0, &[0u8; 4096]));
    let (inside_tx, inside_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let (done_tx, done_rx) = channel();
    std::thread::scope(|s| {
        // The first read stays inside its copy until told to go on.
        s.spawn(move || {
            let mut iov = Vec::new();
            let CopyOut::Pages(p) = &first.copy_out else { panic!("not from the pages") };
            let r = p.write_out(&mut iov, |_, group| {
                inside_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                Ok(group.iter().map(|v| v.iov_len).sum())
            });
            assert_eq!(r, Ok(()));
        });
        inside_rx.recv().unwrap();
        // Meanwhile a second read hands out its pages: it gets in beside the first.
        let (in_tx, in_rx) = channel();
        s.spawn(move || {
            let mut iov = Vec::new();
            let CopyOut::Pages(p) = &second.copy_out else { panic!("not from the pages") };
            let r = p.write_out(&mut iov, |_, group| {
                in_tx.send(()).unwrap();
                Ok(group.iter().map(|v| v.iov_len).sum())
            });
            assert_eq!(r, Ok(()));
        });
        let beside = in_rx.recv_timeout(Duration::from_secs(20));
        // And a write to the same pages (the conventional zone) waits for the first.
        let plain = &plain;
        s.spawn(move || {
            let r = call(plain, io(Op::Write, 0, &[8u8; 4096]));
            done_tx.send(r.result).unwrap();
        });
        let early = done_rx.recv_timeout(Duration::from_millis(300));
        go_tx.send(()).unwrap();
        assert!(beside.is_ok(), "a second read did not get in while the first handed out its pages");
        assert!(early.is_err(), "a write went ahead while a read handed out the pages it overwrites: {early:?}");
        assert_eq!(done_rx.recv().unwrap(), Ok(Done::Bytes(4096)), "the write, once the read is done");
    });
    let r = call(&served, io(Op::Read, 0, &[0u8; 4096]));
    assert_eq!(handed_out(&r, false).1, vec![8u8; 4096]);
    drop((plain, served));
    rt.close().unwrap();
}
