//! Reads of a served memory device from one thread, then from several at once, as
//! several ublk queues read: each read checked (`Served::serve_now`), then its pages
//! handed out (`PagesOut::write_out`) to a `pwritev` on /dev/null, where a queue
//! writes them to the ublk device. Natively, without the kernel: what the reads'
//! sharing of the device costs when queues read side by side (docs/serve.md, "Reads
//! side by side").
//!
//! Usage: `cargo run --release -p zblk-serve --example served_reads -- [COUNT] [THREADS]`
//! (COUNT 4 KiB reads a thread, default 300,000, at random over 16 MiB written first;
//! one thread, then THREADS, default 2, then one and THREADS again).

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
use zblk_serve::served::{CopyOut, ReplyTo, Req, RuntimeServed, Served};

/// `count` random 4 KiB reads of the first 16 MiB, each handed out to /dev/null.
fn reads(served: &RuntimeServed, count: u64, seed: u64) {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null opens");
    let (mut buf, mut iov, mut x) = (AlignedBuf::zeroed(4096), Vec::new(), 0x9e37_79b9_7f4a_7c15 ^ seed);
    for _ in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let req = Req::Io { op: Op::Read, sector: Sector((x % 4096) * 8), nr_sectors: 8, flags: BioFlags::NONE, buf };
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

fn main() {
    let arg = |i: usize, default: u64| std::env::args().nth(i).map_or(default, |s| s.parse().expect("a number"));
    let (count, threads) = (arg(1, 300_000), arg(2, 2) as usize);
    let mut p = DeviceParams::default();
    p.apply("size=1024,zone_size=16,zone_nr_conv=2,zone_max_open=8,completion_nsec=0,memory_backed=1")
        .expect("valid parameters");
    let geo = p.validate().expect("a valid geometry");
    let dev = Arc::new(Locked::new(MemDevice::new(&geo, true), "memory", false));
    let rt = Runtime::start(dev.clone(), RuntimeConfig::default()).expect("the runtime starts");
    let served = RuntimeServed::new(rt.submitter(), geo, None).reading_from(dev);
    // The first (conventional) zone written whole, so that every read hands out pages.
    for i in 0..16u64 {
        let (tx, rx) = channel();
        let buf = AlignedBuf::from_slice(&[7u8; 1 << 20]);
        let req = Req::Io { op: Op::Write, sector: Sector(i * 2048), nr_sectors: 2048, flags: BioFlags::NONE, buf };
        served.submit(req, ReplyTo::call(move |r| tx.send(r.result).expect("the waiter is there")));
        assert!(rx.recv().expect("a reply").is_ok(), "a write of the first zone");
    }
    for n in [1, threads, 1, threads] {
        let t = Instant::now();
        std::thread::scope(|s| {
            for k in 0..n {
                let served = &served;
                s.spawn(move || reads(served, count, k as u64));
            }
        });
        let secs = t.elapsed().as_secs_f64();
        println!("{n} thread(s): {:.0} reads a second in all", (n as u64 * count) as f64 / secs);
    }
    drop(served);
    rt.close().expect("the runtime closes");
}
