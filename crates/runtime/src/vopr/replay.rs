//! The host's side of a runtime round, judged after it: every BIO's submission and
//! completion and every decision of the device, each stamped with its place on the
//! run's clock, replayed in that order through the simulator's host model
//! ([`HostOracle`]: each zone's write pointer as the BIOs submitted so far leave it,
//! what the host must not refuse, where an emulated append lands, the errno a user
//! sees, zone order of acknowledgements under pipelining); then, zone by zone, the
//! outcomes the users saw against the ones the device gave: each write the device
//! completed (and did not revoke) acknowledged once at the same sector, each failure
//! of the device seen by a user with the same errno, and no other failure but the
//! host's own EIO (a write off the write pointer or aborted in its plug) or, under
//! zone write locking, EOPNOTSUPP for an append it cannot emulate.

use super::Done;
use super::device::DevEvent;
use std::collections::BTreeMap;
use zblk_core::bio::{Bio, BioFlags, Op};
use zblk_core::engine::{EngineConfig, WpRecovery};
use zblk_core::geometry::Geometry;
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_sim::oracle::errno::{self, EIO, EOPNOTSUPP};
use zblk_sim::oracle::{HostBio, HostOracle, HostRules, errno_of};

/// How the host model judges the runtime with `engine` over an image of `geo`.
pub(super) fn host_rules(geo: &Geometry, engine: &EngineConfig) -> HostRules {
    HostRules {
        ordered: engine.policy.plugs(),
        kernel_recovery: engine.wp_recovery == WpRecovery::Kernel,
        append_may_be_unsupported: !engine.policy.plugs(),
        piece_sectors: u64::from(geo.max_sectors()),
        piece_aligned: false,
        wz_piece_sectors: u64::from(geo.max_write_zeroes_sectors()),
        report_is_wp: true,
        // Not the zone order of acknowledgements under pipelining: the engine keeps
        // it, but the runtime runs the callbacks of completions taken on different
        // threads in any order, so the order in which the users hear of them says
        // nothing of it. An acknowledgement ahead of a failure still shows: the
        // device revokes the write, and its user is told it succeeded.
        pipelined: false,
    }
}

/// A zone report as the host model reads it: the write pointer offset (the capacity
/// of a FULL zone), `None` for a failed zone.
pub(super) fn report_wp(info: &ZoneInfo) -> Option<u64> {
    info.wp_offset().map(|wp| wp.min(info.capacity))
}

enum Item {
    Submit(usize),
    Complete(usize),
    Device(usize),
}

/// Replays the round (`done`, its BIOs; `events`, the device's decisions; `before`,
/// the zones when it began, nothing in flight) through `host`. Returns the first
/// violation.
pub(super) fn replay(
    host: &mut HostOracle,
    before: &[ZoneInfo],
    done: &[Done],
    events: &[DevEvent],
) -> Result<(), String> {
    let mut wp: Vec<Option<u64>> = before.iter().map(report_wp).collect();
    host.restart(&mut |z| wp[z.idx()]);
    let mut items: Vec<(u64, Item)> = Vec::with_capacity(done.len() * 2 + events.len());
    for (i, d) in done.iter().enumerate() {
        items.push((d.submitted, Item::Submit(i)));
        items.push((d.completed, Item::Complete(i)));
    }
    items.extend(events.iter().enumerate().map(|(j, e)| (e.seq, Item::Device(j))));
    items.sort_by_key(|(seq, _)| *seq);
    let mut recs: Vec<Option<HostBio>> = vec![None; done.len()];
    // FLUSHes the device executed (and failed) that no FLUSH BIO has claimed yet
    // (their places on the clock): a FLUSH BIO claims one executed after it was
    // submitted (the device executes them in any order); a failed one excuses its
    // failure.
    let mut flushes: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    let trace = std::env::var_os("ZBLK_VOPR_TRACE").is_some();
    for (seq, item) in items {
        if trace {
            let what = match &item {
                Item::Submit(i) => format!("submit {:?}", done[*i]),
                Item::Complete(i) => format!("complete #{i} {:?}", done[*i].result),
                Item::Device(j) => format!("device {:?}", events[*j]),
            };
            eprintln!("{seq:>8} {what}");
        }
        match item {
            Item::Submit(i) => {
                let d = &done[i];
                let flags = if d.fua { BioFlags::FUA } else { BioFlags::NONE };
                let bio = Bio { op: d.op, sector: d.sector, nr_sectors: d.nr_sectors, flags, user_data: i as u64 };
                recs[i] = Some(host.on_submit(&bio, std::iter::empty(), false));
            }
            Item::Device(j) => {
                let e = &events[j];
                if let Some((z, w)) = e.wp {
                    wp[z as usize] = w;
                    if e.result.is_err() || !e.revoked.is_empty() {
                        host.on_zone_error(ZoneNo(z));
                    }
                }
                if e.req.op == Op::Flush {
                    flushes[usize::from(e.result.is_err())].push(e.seq);
                }
            }
            Item::Complete(i) => {
                let mut rec = recs[i].take().expect("a BIO completes after its submission");
                if done[i].op == Op::Flush {
                    let list = &mut flushes[usize::from(done[i].result.is_err())];
                    if let Some(k) = list.iter().position(|&seq| seq > done[i].submitted) {
                        list.remove(k);
                        rec.flush_executed = done[i].result.is_ok();
                        rec.dev_err = done[i].result.is_err();
                    }
                }
                host.on_complete(&rec, done[i].result, &mut |z| wp[z.idx()]).map_err(|v| format!("host model: {v}"))?;
            }
        }
    }
    Ok(())
}

/// One zone's outcomes: writes and appends completed at `(sector, sectors)`, and
/// the errnos of the failures, of writes and of reads; reads that succeeded.
#[derive(Debug, Default, PartialEq, Eq)]
struct Outcomes {
    written: BTreeMap<(u64, u32), u32>,
    write_errors: BTreeMap<i32, u32>,
    read_errors: BTreeMap<i32, u32>,
    reads: u32,
}

fn count<K: Ord>(m: &mut BTreeMap<K, u32>, k: K) {
    *m.entry(k).or_default() += 1;
}

/// The users' outcomes against the device's, zone by zone (see the module
/// documentation). `emulated_zwl`: appends may be refused with EOPNOTSUPP. A
/// violation names its zone.
pub(super) fn conservation(
    geo: &Geometry,
    done: &[Done],
    events: &[DevEvent],
    emulated_zwl: bool,
) -> Result<(), (usize, String)> {
    let n = geo.nr_zones() as usize;
    let (mut user, mut dev): (Vec<Outcomes>, Vec<Outcomes>) =
        ((0..n).map(|_| Outcomes::default()).collect(), (0..n).map(|_| Outcomes::default()).collect());
    for d in done.iter().filter(|d| d.op != Op::Flush) {
        let o = &mut user[geo.zone_no(d.sector).idx()];
        match (d.op, d.result) {
            (Op::Read, Ok(_)) => o.reads += 1,
            (Op::Read, r) => count(&mut o.read_errors, errno_of(r)),
            (_, Ok(at)) => count(&mut o.written, (at.0, d.nr_sectors)),
            (_, r) => count(&mut o.write_errors, errno_of(r)),
        }
    }
    // In the device's order: a revocation takes back the write completed at its sector
    // before it (a later write may complete there again).
    for e in events.iter().filter(|e| e.req.op.has_range()) {
        for &at in &e.revoked {
            let o = &mut dev[geo.zone_no(Sector(at)).idx()];
            let Some(&(k, n)) = o.written.keys().find(|(s, _)| *s == at) else {
                let z = geo.zone_no(Sector(at)).idx();
                return Err((z, format!("the device revoked a write at {at} it had not completed")));
            };
            let left = o.written.get_mut(&(k, n)).expect("found");
            *left -= 1;
            if *left == 0 {
                o.written.remove(&(k, n));
            }
            count(&mut o.write_errors, EIO);
        }
        if !e.last {
            continue;
        }
        let o = &mut dev[geo.zone_no(Sector(e.at)).idx()];
        match (e.req.op, e.result) {
            (Op::Read, Ok(_)) => o.reads += 1,
            (Op::Read, Err(x)) => count(&mut o.read_errors, x),
            (_, Ok(at)) => count(&mut o.written, (at, e.req.nr_sectors)),
            (_, Err(x)) => count(&mut o.write_errors, x),
        }
    }
    for (z, (u, d)) in user.iter().zip(&dev).enumerate() {
        compare_zone(z, u, d, emulated_zwl).map_err(|v| (z, v))?;
    }
    Ok(())
}

/// Zone `z`'s outcomes as its users saw them (`u`) against the device's (`d`).
fn compare_zone(z: usize, u: &Outcomes, d: &Outcomes, emulated_zwl: bool) -> Result<(), String> {
    if u.written != d.written {
        return Err(format!(
            "zone {z}: the device completed writes at {:?} (sector, sectors: times), its users were told of {:?}",
            d.written, u.written
        ));
    }
    if u.reads != d.reads || u.read_errors != d.read_errors {
        return Err(format!(
            "zone {z}: the device ended {} reads well and failed {:?} (errno: times), the users saw {} and {:?}",
            d.reads, d.read_errors, u.reads, u.read_errors
        ));
    }
    for (&e, &k) in &d.write_errors {
        let seen = u.write_errors.get(&e).copied().unwrap_or(0);
        if seen < k {
            return Err(format!(
                "zone {z}: the device failed {k} writes with {}, their users saw it {seen} times (users' errors: {:?})",
                errno::name(e),
                u.write_errors
            ));
        }
    }
    for (&e, &k) in &u.write_errors {
        let extra = k - d.write_errors.get(&e).copied().unwrap_or(0).min(k);
        let host_may = e == EIO || (e == EOPNOTSUPP && emulated_zwl);
        if extra > 0 && !host_may {
            return Err(format!(
                "zone {z}: {extra} writes failed with {} that no device answer explains (the device's: {:?})",
                errno::name(e),
                d.write_errors
            ));
        }
    }
    Ok(())
}
