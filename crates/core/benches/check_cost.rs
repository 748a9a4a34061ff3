//! The engine's invariant check stays linear in the writes waiting in a plug: its cost
//! with 200,000 writes queued in one plug against its cost with 20,000, measured in one
//! run, the fastest of nine each. Linear gives 10; the check that looked each fragment
//! up in its plug's queue (2 * 10^10 steps at 200,000, about 5 s) gives 100. A ratio,
//! not a time limit: a loaded machine stretches both sides alike, and
//! each is measured in the thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), so that
//! time another process took the CPU is not counted. Exits 1 at 40 or more: the larger
//! table also misses the caches more, the more so when other processes share them
//! (8x to 15x seen on a machine loaded 4 to 1; the lookup of each fragment in its
//! plug's queue, planted by hand, gave 119.5x).
//!
//! `cargo bench -p zblk-core --bench check_cost` (scripts/test runs it with the suite's
//! profile).

// A benchmark's report is its output.
#![allow(clippy::disallowed_macros)]

use std::time::Duration;
use zblk_core::bio::Bio;
use zblk_core::engine::{Action, Engine, EngineConfig};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::ZoneNo;

/// An engine with one write out to the device and `queued` more waiting behind it in
/// zone 1's plug.
fn busy_plug(queued: u64) -> Engine {
    let g = Geometry::new(&GeometryParams {
        capacity_bytes: 1 << 30,
        zone_size_bytes: 256 << 20,
        nr_conv: 1,
        max_append_sectors: 0,
        ..GeometryParams::default()
    })
    .expect("a valid geometry");
    let z = g.zone_start(ZoneNo(1));
    let mut e = Engine::new_empty(&g, EngineConfig::default());
    // The check runs here by hand, not after every step.
    e.set_self_check(false);
    for i in 0..=queued {
        e.submit(Bio::write(z + i, 1, i));
    }
    let mut out = 0;
    while let Some(a) = e.poll_action() {
        out += usize::from(matches!(a, Action::Issue(_)));
    }
    assert_eq!(out, 1, "one write out, the rest plugged");
    e
}

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the call writes only it.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn fastest(queued: u64) -> Duration {
    let e = busy_plug(queued);
    (0..9)
        .map(|_| {
            let t = thread_cpu();
            e.check_invariants();
            thread_cpu() - t
        })
        .min()
        .expect("nine runs")
}

fn main() {
    let (small, large) = (fastest(20_000), fastest(200_000));
    let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-9);
    println!("check_invariants: 20,000 queued {small:?}, 200,000 queued {large:?}: {ratio:.1}x (linear: 10x)");
    if ratio >= 40.0 {
        eprintln!("check_cost: 10x the queued fragments cost {ratio:.1}x the check: not linear");
        std::process::exit(1);
    }
}
