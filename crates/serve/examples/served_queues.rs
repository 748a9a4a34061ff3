//! A served memory device's requests from one thread, then from several at once, as
//! several ublk queues hand them over, natively, without the kernel (docs/serve.md,
//! "Reads side by side" and "A model of four queues and more").
//!
//! - `read`: each 4 KiB read checked (`Served::serve_now`), then its pages handed out
//!   (`PagesOut::write_out`) to a `pwritev` on /dev/null, where a queue writes them
//!   to the ublk device; at random over 16 MiB written first.
//! - `write`: 4 KiB writes (`Served::submit`, the engine's zone write plugging, the
//!   page store), each thread at the write pointers of four zones of its own, in
//!   random order, a zone reset when full; the reply by tag, as a queue's.
//!
//! Usage: `cargo run --release -p zblk-serve --example served_queues -- [read|write]
//! [COUNT] [THREADS]` (default `read`, 300,000 requests a thread; one thread, then
//! THREADS, default 2, then one and THREADS again). Prints the requests a second.

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc::channel;
use std::time::Instant;
use zblk_core::bio::{BioFlags, Op};
use zblk_core::params::DeviceParams;
use zblk_core::units::Sector;
use zblk_dev::buf::AlignedBuf;
use zblk_dev::{Locked, MemDevice};
use zblk_runtime::{Runtime, RuntimeConfig};
use zblk_serve::served::{CopyOut, ReplyTo, Req, RuntimeServed, Served, Tagged};

mod common;
use common::{Slot, serve};

/// A xorshift step: the requests' random order, the same every run.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// `count` random 4 KiB reads of the first 16 MiB, each handed out to /dev/null.
fn reads(served: &RuntimeServed, count: u64, seed: u64) {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null opens");
    let (mut buf, mut iov, mut x) = (AlignedBuf::zeroed(4096), Vec::new(), 0x9e37_79b9_7f4a_7c15 ^ seed);
    for _ in 0..count {
        let req = Req::Io {
            op: Op::Read,
            sector: Sector((next(&mut x) % 4096) * 8),
            nr_sectors: 8,
            flags: BioFlags::NONE,
            buf,
        };
        let Ok(reply) = served.serve_now(req) else { panic!("a read of the memory device is answered at once") };
        let CopyOut::Pages(pages) = &reply.copy_out else { panic!("a read hands out the device's pages") };
        let handed = pages.write_out(&mut iov, |_, group| {
            // SAFETY: the iovecs point into the device's pages, held while this runs;
            // /dev/null's descriptor is open.
            let n = unsafe { libc::pwritev(null.as_raw_fd(), group.as_ptr(), group.len() as i32, 0) };
            Ok(n as usize)
        });
        assert_eq!(handed, Ok(()), "the pages handed out");
        buf = reply.buf;
    }
}

/// `count` 4 KiB writes into zones `first..first + 4`, at their write pointers in
/// random order, each zone reset when full (it starts with a reset of all four).
fn writes(served: &RuntimeServed, zone_sectors: u64, first: u64, count: u64, seed: u64) {
    let slot = Tagged::new(Slot::default());
    let (mut buf, mut x) = (AlignedBuf::zeroed(4096), 0x9e37_79b9_7f4a_7c15 ^ seed);
    let mut wps: Vec<u64> = (first..first + 4).map(|z| z * zone_sectors).collect();
    for &start in &wps {
        buf = serve(served, &slot, Op::ZoneReset, start, 0, buf);
    }
    for _ in 0..count {
        let z = (next(&mut x) % 4) as usize;
        let start = (first + z as u64) * zone_sectors;
        if wps[z] + 8 > start + zone_sectors {
            buf = serve(served, &slot, Op::ZoneReset, start, 0, buf);
            wps[z] = start;
        }
        buf = serve(served, &slot, Op::Write, wps[z], 8, buf);
        wps[z] += 8;
    }
}

fn main() {
    let write = match std::env::args().nth(1).as_deref() {
        None | Some("read") => false,
        Some("write") => true,
        Some(other) => panic!("{other}: read or write"),
    };
    let arg = |i: usize, default: u64| std::env::args().nth(i).map_or(default, |s| s.parse().expect("a number"));
    let (count, threads) = (arg(2, 300_000), arg(3, 2));
    let mut p = DeviceParams::default();
    p.apply("size=1024,zone_size=16,zone_nr_conv=2,completion_nsec=0,memory_backed=1").expect("valid parameters");
    let geo = p.validate().expect("a valid geometry");
    assert!(2 + 4 * threads <= u64::from(geo.nr_zones()), "four zones a thread");
    let dev = Arc::new(Locked::new(MemDevice::new(&geo, true), "memory", false));
    let rt = Runtime::start(dev.clone(), RuntimeConfig::default()).expect("the runtime starts");
    let served = RuntimeServed::new(rt.submitter(), geo.clone(), None).reading_from(dev);
    // The first (conventional) zone written whole, so that every read hands out pages.
    for i in 0..16u64 {
        let (tx, rx) = channel();
        let buf = AlignedBuf::from_slice(&[7u8; 1 << 20]);
        let req = Req::Io { op: Op::Write, sector: Sector(i * 2048), nr_sectors: 2048, flags: BioFlags::NONE, buf };
        served.submit(req, ReplyTo::call(move |r| tx.send(r.result).expect("the waiter is there")));
        assert!(rx.recv().expect("a reply").is_ok(), "a write of the first zone");
    }
    let what = if write { "writes" } else { "reads" };
    for n in [1, threads, 1, threads] {
        let t = Instant::now();
        std::thread::scope(|s| {
            for k in 0..n {
                let served = &served;
                let zs = geo.zone_sectors();
                s.spawn(move || if write { writes(served, zs, 2 + 4 * k, count, k) } else { reads(served, count, k) });
            }
        });
        let secs = t.elapsed().as_secs_f64();
        println!("{n} thread(s): {:.0} 4 KiB {what} a second in all", (n * count) as f64 / secs);
    }
    drop(served);
    rt.close().expect("the runtime closes");
}
