//! The order-independent checks of a runtime round (each zone's write pointer moved
//! by the writes acknowledged in it, acknowledged data reads back, plugs agree with
//! the device) and the zone management between rounds.

use super::{Done, RuntimeSeedRun};
use crate::Runtime;
use rand::RngExt;
use rand::rngs::ChaCha8Rng;
use std::collections::BTreeSet;
use zblk_core::bio::{Op, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo};
use zblk_workload::pattern::{self, Decoded};

/// What the round did in zone `zi`, in the order the completions came: a per-zone
/// violation shows it, so that a race that will not replay can still be read.
pub(super) fn zone_history(geo: &Geometry, done: &[Done], zi: usize) -> String {
    let mut out = String::new();
    for d in done.iter().filter(|d| d.op != Op::Flush && geo.zone_no(d.sector).idx() == zi) {
        let flags = if d.fua { " FUA" } else { "" };
        out += &format!(
            "\n  {}{flags} at {} of {} sectors (stamp {}): {:?}",
            d.op, d.sector, d.nr_sectors, d.stamp, d.result
        );
    }
    out
}

/// The order-independent checks of a round, with nothing in flight (the exact ones
/// are the replay's, `super::replay`): where each write and append landed,
/// each zone's write pointer and data, the plugs.
pub(super) fn check_round(
    rt: &Runtime,
    geo: &Geometry,
    before: &[ZoneInfo],
    done: &[Done],
    (write_hit, _): &(BTreeSet<u32>, BTreeSet<u32>),
    run: &mut RuntimeSeedRun,
) -> Result<(), String> {
    let after = rt.report_zones().map_err(|e| format!("report: {e:?}"))?;
    // Acknowledged extents per zone: (start, end, stamp).
    let mut acked: Vec<Vec<(u64, u64, u64)>> = vec![Vec::new(); geo.nr_zones() as usize];
    for d in done {
        run.checks += 1;
        match (d.op, d.result) {
            (Op::Write | Op::ZoneAppend, Ok(at)) => {
                let z = geo.zone_no(at);
                if d.op == Op::ZoneAppend && z != geo.zone_no(d.sector) {
                    return Err(format!("append to zone {} landed at {at}, in zone {z}", geo.zone_no(d.sector)));
                }
                if d.op == Op::Write && at != d.sector {
                    return Err(format!("write at {} completed at {at}", d.sector));
                }
                acked[z.idx()].push((at.0, at.0 + u64::from(d.nr_sectors), d.stamp));
            }
            (Op::Flush, Err(e)) => return Err(format!("FLUSH failed with {e:?}")),
            _ => {}
        }
    }
    for (zi, list) in acked.iter_mut().enumerate() {
        check_zone(rt, geo, &before[zi], &after[zi], zi, list, write_hit, run)
            .map_err(|v| format!("{v}; the round in zone {zi}:{}", zone_history(geo, done, zi)))?;
    }
    check_plugs(rt, &after, run)
        .map_err(|(zi, v)| format!("{v}; the round in zone {zi}:{}", zone_history(geo, done, zi)))
}

/// With nothing in flight, each plug that trusts its write pointer (no update
/// needed) has it where the device says: the host never writes past a failed write
/// on a belief the device does not share.
fn check_plugs(rt: &Runtime, after: &[ZoneInfo], run: &mut RuntimeSeedRun) -> Result<(), (usize, String)> {
    for p in rt.plugs() {
        let zi = p.zone.idx();
        let Some(wp) = after[zi].wp_offset() else { continue };
        run.checks += 1;
        if !p.need_wp_update && !p.busy && p.queued == 0 && p.wp_offset != wp {
            return Err((
                zi,
                format!("zone {zi}: the host's write pointer offset is {}, the device's {wp}", p.wp_offset),
            ));
        }
    }
    Ok(())
}

/// The checks of zone `zi` after a round: its acknowledged extents `list`, its
/// write pointer's move from `b` to `a`.
#[allow(clippy::too_many_arguments)]
fn check_zone(
    rt: &Runtime,
    geo: &Geometry,
    b: &ZoneInfo,
    a: &ZoneInfo,
    zi: usize,
    list: &mut [(u64, u64, u64)],
    write_hit: &BTreeSet<u32>,
    run: &mut RuntimeSeedRun,
) -> Result<(), String> {
    if geo.zone_is_conv(ZoneNo(zi as u32)) {
        return Ok(());
    }
    run.checks += 1;
    let wp_of = |z: &ZoneInfo| match z.cond {
        ZoneCond::Full => z.start.0 + z.capacity,
        _ => z.wp.0,
    };
    let (wp0, wp1) = (wp_of(b), wp_of(a));
    let sum: u64 = list.iter().map(|e| e.1 - e.0).sum();
    list.sort_unstable();
    for w in list.windows(2) {
        if w[0].1 > w[1].0 {
            return Err(format!("acknowledged writes overlap in zone {zi}: {:?} and {:?}", w[0], w[1]));
        }
    }
    if let (Some(first), Some(last)) = (list.first(), list.last()) {
        if first.0 < wp0 || last.1 > wp1 {
            return Err(format!(
                "zone {zi}: acknowledged writes span {}..{}, outside the write pointer's move {wp0}..{wp1}",
                first.0, last.1
            ));
        }
    }
    if !write_hit.contains(&(zi as u32)) && wp1 - wp0 != sum {
        return Err(format!(
            "zone {zi} (no fault): its write pointer moved from {wp0} to {wp1}, the writes acknowledged in it sum to {sum} sectors"
        ));
    }
    for &(s, e, stamp) in list.iter() {
        let mut buf = vec![0u8; ((e - s) * SECTOR_SIZE) as usize];
        rt.read_at(Sector(s), &mut buf).map_err(|st| format!("reading back {s}..{e}: {st:?}"))?;
        for (k, sector) in buf.chunks_exact(SECTOR_SIZE as usize).enumerate() {
            run.checks += 1;
            let got = pattern::decode(sector);
            if got != Decoded::Data((stamp, k as u32)) {
                return Err(format!(
                    "sector {} of the write acknowledged at {s} reads {got:?}, not ({stamp}, {k})",
                    s + k as u64
                ));
            }
        }
    }
    Ok(())
}

/// Between rounds: resets, finishes or leaves each zone (RESET_ALL now and then),
/// one operation at a time, and checks their outcome. Returns the operations that
/// succeeded, with their zones.
pub(super) fn manage_zones(
    rt: &Runtime,
    geo: &Geometry,
    seq: &[u32],
    rng: &mut ChaCha8Rng,
    run: &mut RuntimeSeedRun,
) -> Result<Vec<(Op, u32)>, String> {
    let mut done = Vec::new();
    if rng.random_range(0..10) == 0 {
        rt.zone_op(Op::ZoneResetAll, Sector::ZERO).map_err(|e| format!("RESET_ALL: {e:?}"))?;
        for &z in seq {
            let info = rt.report_zone(geo.zone_start(ZoneNo(z))).map_err(|e| format!("report: {e:?}"))?;
            run.checks += 1;
            if info.cond != ZoneCond::Empty {
                return Err(format!("zone {z} is {:?} after RESET_ALL", info.cond));
            }
        }
        return Ok(vec![(Op::ZoneResetAll, 0)]);
    }
    for &z in seq {
        let start = geo.zone_start(ZoneNo(z));
        let (op, cond) = match rng.random_range(0..8) {
            0 | 1 => (Op::ZoneReset, ZoneCond::Empty),
            2 => (Op::ZoneFinish, ZoneCond::Full),
            _ => continue,
        };
        match rt.zone_op(op, start) {
            Ok(()) => done.push((op, z)),
            // FINISH of an EMPTY or CLOSED zone takes resources (null_blk's
            // null_check_zone_resources()).
            Err(e) if op == Op::ZoneFinish && [Status::ZoneActiveResource, Status::ZoneOpenResource].contains(&e) => {
                continue;
            }
            Err(e) => return Err(format!("{op} of zone {z}: {e:?}")),
        }
        let info = rt.report_zone(start).map_err(|e| format!("report: {e:?}"))?;
        run.checks += 1;
        if info.cond != cond {
            return Err(format!("zone {z} is {:?} after {op}", info.cond));
        }
    }
    Ok(done)
}
