//! The zone state machine's tests: conditions, write pointers, open and active
//! limits, and reports, against what the kernel's zoned devices do.

use super::*;
use crate::geometry::GeometryParams;

fn set(max_open: u32, max_active: u32) -> ZoneSet {
    let geo = Geometry::new(&GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        zone_capacity_bytes: 768 << 10,
        nr_conv: 1,
        max_open,
        max_active,
        ..GeometryParams::default()
    })
    .unwrap();
    ZoneSet::new(&geo)
}

const Z: u64 = 2048; // sectors per zone
const CAP: u64 = 1536;

#[test]
fn condition_names_are_blkzones_and_the_kernels() {
    let all = [
        ZoneCond::NotWp,
        ZoneCond::Empty,
        ZoneCond::ImpOpen,
        ZoneCond::ExpOpen,
        ZoneCond::Closed,
        ZoneCond::ReadOnly,
        ZoneCond::Full,
        ZoneCond::Offline,
    ];
    let short: Vec<&str> = all.iter().map(|c| c.short_name()).collect();
    assert_eq!(short, ["nw", "em", "oi", "oe", "cl", "ro", "fu", "of"]);
    let long: Vec<&str> = all.iter().map(|c| c.name()).collect();
    assert_eq!(long, ["NOT_WP", "EMPTY", "IMP_OPEN", "EXP_OPEN", "CLOSED", "READONLY", "FULL", "OFFLINE"]);
    // Codes no condition has, as a device may report them.
    assert_eq!((ZoneCond::short_name_of(5), ZoneCond::name_of(12)), ("x5", "0xC"));
}

#[test]
fn write_at_wp_opens_and_fills() {
    let mut s = set(0, 0);
    assert_eq!(s.write(Sector(Z), 8, false), Ok(Sector(Z)));
    assert_eq!(s.zone(ZoneNo(1)).cond, ZoneCond::ImpOpen);
    assert_eq!(s.write(Sector(Z + 16), 8, false), Err(Status::Unaligned));
    assert_eq!(s.write(Sector(Z), 8, true), Ok(Sector(Z + 8)));
    assert_eq!(s.write(Sector(Z + 16), (CAP - 16) as u32 + 8, false), Err(Status::ZoneFull));
    assert_eq!(s.write(Sector(Z + 16), (CAP - 16) as u32, false), Ok(Sector(Z + 16)));
    assert_eq!(s.zone(ZoneNo(1)).cond, ZoneCond::Full);
    assert_eq!(s.nr_open(), 0);
    assert_eq!(s.write(Sector(Z + CAP), 8, false), Err(Status::ZoneFull));
    assert_eq!(s.zone(ZoneNo(1)).wp_offset(), Some(Z));
}

#[test]
fn invariants_hold_through_every_transition_and_a_miscount_trips_them() {
    let mut s = set(2, 3);
    s.check_invariants();
    let steps: [&dyn Fn(&mut ZoneSet); 8] = [
        &|s| {
            let _ = s.write(Sector(Z), 8, false);
        },
        &|s| {
            let _ = s.write(Sector(2 * Z), 8, false);
        },
        // An implicit close of zone 1:
        &|s| {
            let _ = s.write(Sector(3 * Z), 8, false);
        },
        &|s| {
            let _ = s.open_zone(ZoneNo(4));
        },
        &|s| {
            let _ = s.close_zone(ZoneNo(2));
        },
        &|s| {
            let _ = s.finish_zone(ZoneNo(3));
        },
        &|s| {
            let _ = s.reset_zone(ZoneNo(1));
        },
        &|s| {
            let _ = s.reset_all();
        },
    ];
    for step in steps {
        step(&mut s);
        s.check_invariants();
    }
    // The check bites: a counter off by one is caught (in release builds too).
    s.write(Sector(Z), 8, false).unwrap();
    let mut bad = s.clone();
    bad.nr_imp_open += 1;
    assert!(std::panic::catch_unwind(|| bad.check_invariants()).is_err());
    let mut bad = s.clone();
    bad.zones[1].cond = ZoneCond::Full;
    bad.nr_imp_open -= 1;
    bad.zones[2].wp = bad.zones[2].start + 8; // EMPTY with a write pointer moved
    assert!(std::panic::catch_unwind(|| bad.check_invariants()).is_err());
}

#[test]
fn conventional_zone_takes_random_writes_not_appends() {
    let mut s = set(0, 0);
    assert_eq!(s.write(Sector(100), 8, false), Ok(Sector(100)));
    assert_eq!(s.write(Sector(0), 8, false), Ok(Sector(0)));
    assert_eq!(s.write(Sector(0), 8, true), Err(Status::Invalid));
    assert_eq!(s.reset_zone(ZoneNo(0)), Err(Status::Invalid));
    assert_eq!(s.zone(ZoneNo(0)).cond, ZoneCond::NotWp);
}

#[test]
fn open_limit_closes_an_implicitly_open_zone() {
    let mut s = set(2, 0);
    s.write(Sector(Z), 8, false).unwrap();
    s.write(Sector(2 * Z), 8, false).unwrap();
    s.write(Sector(3 * Z), 8, false).unwrap();
    assert_eq!(s.nr_open(), 2);
    assert_eq!(s.zone(ZoneNo(1)).cond, ZoneCond::Closed);
    // explicitly open zones are never closed by the device
    s.open_zone(ZoneNo(2)).unwrap();
    s.open_zone(ZoneNo(3)).unwrap();
    assert_eq!(s.write(Sector(4 * Z), 8, false), Err(Status::ZoneOpenResource));
    assert_eq!(s.open_zone(ZoneNo(4)), Err(Status::ZoneOpenResource));
}

#[test]
fn active_limit_counts_closed_zones() {
    let mut s = set(0, 2);
    s.write(Sector(Z), 8, false).unwrap();
    s.write(Sector(2 * Z), 8, false).unwrap();
    s.close_zone(ZoneNo(1)).unwrap();
    assert_eq!(s.write(Sector(3 * Z), 8, false), Err(Status::ZoneActiveResource));
    // a closed zone can reopen: it is already active
    s.write(Sector(Z + 8), 8, false).unwrap();
    s.finish_zone(ZoneNo(1)).unwrap();
    s.write(Sector(3 * Z), 8, false).unwrap();
    assert_eq!(s.nr_active(), 2);
}

#[test]
fn open_and_active_limits_together() {
    let mut s = set(1, 2);
    s.write(Sector(Z), 8, false).unwrap();
    // opening a second zone closes the first (active 2 allowed)
    s.write(Sector(2 * Z), 8, false).unwrap();
    assert_eq!(s.zone(ZoneNo(1)).cond, ZoneCond::Closed);
    // a third zone: active limit reached, nothing can be closed to help
    assert_eq!(s.write(Sector(3 * Z), 8, false), Err(Status::ZoneActiveResource));
}

#[test]
fn a_refusal_names_the_rule_the_zone_set_applied() {
    let mut s = set(0, 0);
    s.write(Sector(Z), 8, false).unwrap();
    let rule = |r: Result<Sector, Status>| r.unwrap_err().rule();
    assert_eq!(rule(s.write(Sector(Z + 16), 8, false)), Some(Rule::NotAtWp { wp: Sector(Z + 8) }));
    assert_eq!(rule(s.write(Sector(Z + 8), CAP as u32, false)), Some(Rule::PastCapacity { wp: Sector(Z + 8) }));
    assert_eq!(rule(s.write(Sector(Z + 8), 8, true)), Some(Rule::NotZoneStart));
    assert_eq!(rule(s.write(Sector(Z - 8), 16, false)), Some(Rule::CrossesZone));
    assert_eq!(rule(s.write(Sector(8 * Z), 8, false)), Some(Rule::BeyondEnd));
    assert_eq!(s.close_zone(ZoneNo(2)).unwrap_err().rule(), Some(Rule::Transition { cond: ZoneCond::Empty }));
    s.finish_zone(ZoneNo(2)).unwrap();
    assert_eq!(s.open_zone(ZoneNo(2)).unwrap_err().rule(), Some(Rule::Transition { cond: ZoneCond::Full }));
    assert_eq!(rule(s.write(Sector(2 * Z), 8, false)), Some(Rule::ZoneFull));
    assert_eq!(s.reset_zone(ZoneNo(0)).unwrap_err().rule(), Some(Rule::Conventional));
}

#[test]
fn management_transitions() {
    let mut s = set(0, 0);
    let z = ZoneNo(2);
    assert_eq!(s.close_zone(z), Err(Status::IoErr)); // EMPTY cannot close
    s.open_zone(z).unwrap();
    assert_eq!(s.zone(z).cond, ZoneCond::ExpOpen);
    s.close_zone(z).unwrap();
    assert_eq!(s.zone(z).cond, ZoneCond::Empty); // nothing written
    s.write(Sector(2 * Z), 8, false).unwrap();
    s.close_zone(z).unwrap();
    assert_eq!(s.zone(z).cond, ZoneCond::Closed);
    s.finish_zone(z).unwrap();
    assert_eq!(s.zone(z).cond, ZoneCond::Full);
    assert_eq!(s.zone(z).wp, Sector(3 * Z));
    assert_eq!(s.open_zone(z), Err(Status::ZoneFull));
    s.reset_zone(z).unwrap();
    assert_eq!(s.zone(z).cond, ZoneCond::Empty);
    assert_eq!(s.zone(z).wp, Sector(2 * Z));
    s.write(Sector(3 * Z), 8, false).unwrap();
    s.finish_zone(ZoneNo(5)).unwrap();
    assert_eq!(s.reset_all(), vec![ZoneNo(3), ZoneNo(5)]);
    assert_eq!(s.nr_active(), 0);
}

#[test]
fn reads_past_wp_are_short() {
    let mut s = set(0, 0);
    s.write(Sector(Z), 16, false).unwrap();
    assert_eq!(s.read(Sector(Z), 32), Ok(16));
    assert_eq!(s.read(Sector(Z + 20), 8), Ok(0));
    assert_eq!(s.read(Sector(0), 8), Ok(8));
    // across the conventional/sequential boundary
    assert_eq!(s.read(Sector(Z - 8), 16), Ok(8 + 8));
    assert_eq!(s.read(Sector(8 * Z), 8), Err(Status::Invalid));
    s.set_failed(ZoneNo(1), ZoneCond::Offline);
    assert_eq!(s.read(Sector(Z), 8), Err(Status::ZoneOffline));
}

#[test]
fn failed_zones_refuse_writes() {
    let mut s = set(0, 0);
    s.write(Sector(Z), 8, false).unwrap();
    s.set_failed(ZoneNo(1), ZoneCond::ReadOnly);
    assert_eq!(s.nr_open(), 0);
    assert_eq!(s.write(Sector(Z + 8), 8, false), Err(Status::ZoneReadOnly));
    assert_eq!(s.reset_zone(ZoneNo(1)), Err(Status::ZoneReadOnly));
    assert_eq!(s.read(Sector(Z), 8), Ok(8));
}

#[test]
fn saved_zones_are_checked() {
    let mut s = set(0, 0);
    s.write(Sector(Z), 16, false).unwrap();
    s.close_zone(ZoneNo(1)).unwrap();
    let r = ZoneSet::from_zones(s.geometry(), s.zones()).unwrap();
    assert_eq!(r.nr_active(), 1);
    let mut bad = s.zones().to_vec();
    bad[2].wp = Sector(2 * Z + 8); // EMPTY with a moved write pointer
    assert!(ZoneSet::from_zones(s.geometry(), &bad).is_err());
}
