//! The served path's own cost, natively: writes handed to a served memory device one
//! at a time, as a ublk queue hands the kernel's requests over (`Served::submit`, the
//! engine's zone write plugging, the runtime, the memory device's page store, the
//! completion), without the kernel. What each request costs here is what zblk adds
//! to ublk's own round trip at QD 1; `valgrind --tool=callgrind` on it counts the
//! instructions (docs/serve.md).
//!
//! Usage: `cargo run --release -p zblk-serve --example served_qd1 -- [SECTORS] [COUNT]`
//! (writes of SECTORS 512-byte sectors, default 8; COUNT writes, default 300,000), on
//! a 1 GiB device of 16 MiB zones, 2 conventional, cycling through 8 zones in random
//! order at their write pointers, each zone reset when full.

use std::sync::Arc;
use std::time::Instant;
use zblk_core::bio::Op;
use zblk_core::engine::EngineConfig;
use zblk_core::params::DeviceParams;
use zblk_dev::buf::AlignedBuf;
use zblk_dev::{Locked, MemDevice};
use zblk_runtime::{Runtime, RuntimeConfig};
use zblk_serve::served::{DataLimit, RuntimeServed, Tagged};

mod common;
use common::{Slot, serve};

fn main() {
    let arg = |i: usize, default: u64| std::env::args().nth(i).map_or(default, |s| s.parse().expect("a number"));
    let (sectors, count) = (arg(1, 8) as u32, arg(2, 300_000));
    let mut p = DeviceParams::default();
    p.apply("size=1024,zone_size=16,zone_nr_conv=2,zone_max_open=8,completion_nsec=0,memory_backed=1")
        .expect("valid parameters");
    let geo = p.validate().expect("a valid geometry");
    let dev = Arc::new(Locked::new(MemDevice::new(&geo, true), "memory", false));
    let rt = Runtime::start(dev.clone(), RuntimeConfig { engine: EngineConfig::default(), ..RuntimeConfig::default() })
        .expect("the runtime starts");
    let served = RuntimeServed::new(rt.submitter(), geo.clone(), Some(DataLimit::new(dev, 4 << 30)));
    let zs = geo.zone_sectors();
    let mut wps: Vec<u64> = (0..8).map(|i| (2 + i) * zs).collect();
    let mut buf = AlignedBuf::zeroed(sectors as usize * 512);
    let slot = Tagged::new(Slot::default());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let t = Instant::now();
    for _ in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let z = (x % 8) as usize;
        let start = (2 + z as u64) * zs;
        if wps[z] + u64::from(sectors) > start + zs {
            buf = serve(&served, &slot, Op::ZoneReset, start, 0, buf);
            wps[z] = start;
        }
        buf = serve(&served, &slot, Op::Write, wps[z], sectors, buf);
        wps[z] += u64::from(sectors);
    }
    let ns = t.elapsed().as_nanos() as f64 / count as f64;
    println!("{count} writes of {} bytes, QD 1, on a served memory device: {ns:.0} ns each", sectors * 512);
}
