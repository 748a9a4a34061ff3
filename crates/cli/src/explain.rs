//! Errors that explain: a request the engine or the device refused, told with the
//! errno the kernel would return *and* the zone rule that refused it, re-derived
//! from the geometry and the zone as it was just before the request (the engine's
//! [`Status`] stays a small code on the hot path; the words are made only when a
//! command prints a failure).

use zblk_core::bio::{Op, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::Sector;
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneType};

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
        Op::ZoneAppend => "zone append",
        Op::WriteZeroes => "write zeroes",
        Op::ZoneOpen => "open",
        Op::ZoneClose => "close",
        Op::ZoneFinish => "finish",
        Op::ZoneReset => "reset",
        Op::ZoneResetAll => "reset of all zones",
        _ => "request",
    }
}

/// Why `op` of `nr_sectors` at `sector` failed with `st`: the errno's name, then the
/// rule in words. `before` is the zone holding `sector` as reported just before the
/// request (`None` when it could not be reported).
pub fn explain(
    geo: &Geometry,
    op: Op,
    sector: Sector,
    nr_sectors: u64,
    before: Option<&ZoneInfo>,
    st: Status,
) -> String {
    let e = st.errno_name();
    let generic = format!("{e}: {st}");
    let end = sector.0.saturating_add(nr_sectors);
    if end > geo.nr_sectors() && op != Op::ZoneResetAll {
        return format!("{e}: sectors {}..{end} are beyond the device end ({} sectors)", sector.0, geo.nr_sectors());
    }
    let z = geo.zone_no(sector);
    let zname = format!("zone {}", z.0);
    let lbs = u64::from(geo.lbs_bytes());
    let zoned = geo.is_zoned();
    let conv = zoned && geo.zone_is_conv(z);
    let wp = |b: &ZoneInfo| format!("sector {}", b.wp.0);
    match op {
        Op::Write | Op::WriteZeroes | Op::Read => match st {
            Status::Invalid if nr_sectors == 0 => format!("{e}: length 0"),
            Status::Invalid if !geo.is_block_aligned(sector, nr_sectors) => format!(
                "{e}: {} at sector {} of {nr_sectors} sectors is not aligned to the {lbs}-byte logical block",
                op_name(op),
                sector.0
            ),
            Status::Unaligned => match before {
                Some(b) => format!("{e}: write at sector {} is not at {zname}'s write pointer ({})", sector.0, wp(b)),
                None => format!("{e}: write at sector {} is not at {zname}'s write pointer", sector.0),
            },
            Status::ZoneFull => match before {
                Some(b) if b.cond == ZoneCond::Full => format!("{e}: {zname} is FULL"),
                _ => format!(
                    "{e}: write of {nr_sectors} sectors at sector {} goes past {zname}'s capacity (it ends at sector {})",
                    sector.0,
                    geo.zone_start(z).0 + geo.zone_capacity(z)
                ),
            },
            Status::ZoneReadOnly => format!("{e}: {zname} is READONLY"),
            Status::ZoneOffline => format!("{e}: {zname} is OFFLINE"),
            Status::ZoneOpenResource => format!(
                "{e}: {zname} cannot be opened: the open zone limit is reached (zone_max_open {})",
                geo.max_open()
            ),
            Status::ZoneActiveResource => format!(
                "{e}: {zname} cannot be made active: the active zone limit is reached (zone_max_active {})",
                geo.max_active()
            ),
            _ => generic,
        },
        Op::ZoneAppend => match st {
            Status::Invalid if !zoned => format!("{e}: zone append on a device that is not zoned"),
            Status::Invalid if conv => format!("{e}: zone append to conventional {zname}"),
            Status::Invalid if !geo.is_zone_start(sector) => {
                format!("{e}: zone append at sector {} is not a zone start", sector.0)
            }
            Status::Invalid if nr_sectors > u64::from(geo.append_limit_sectors()) => format!(
                "{e}: zone append of {nr_sectors} sectors is larger than the device's zone append limit ({} sectors, \
                 {} bytes)",
                geo.append_limit_sectors(),
                u64::from(geo.append_limit_sectors()) * 512
            ),
            Status::Invalid if nr_sectors > geo.zone_capacity(z) => format!(
                "{e}: zone append of {nr_sectors} sectors is larger than {zname}'s capacity ({} sectors)",
                geo.zone_capacity(z)
            ),
            Status::Invalid if !geo.is_block_aligned(sector, nr_sectors) => {
                format!("{e}: zone append of {nr_sectors} sectors is not a whole number of {lbs}-byte logical blocks")
            }
            Status::ZoneFull => match before {
                Some(b) if b.cond == ZoneCond::Full => format!("{e}: {zname} is FULL"),
                Some(b) => format!(
                    "{e}: zone append of {nr_sectors} sectors does not fit in {zname}: its write pointer is at {}, \
                     {} sectors left",
                    wp(b),
                    (b.start.0 + b.capacity).saturating_sub(b.wp.0)
                ),
                None => format!("{e}: zone append of {nr_sectors} sectors does not fit in {zname}"),
            },
            Status::NotSupported => format!("{e}: the device has no zone append (and it is not emulated here)"),
            _ => explain(geo, Op::Write, sector, nr_sectors, before, st),
        },
        Op::ZoneOpen | Op::ZoneClose | Op::ZoneFinish | Op::ZoneReset => {
            let what = op_name(op);
            match (st, before.map(|b| b.cond)) {
                (Status::Invalid, _) if conv || before.is_some_and(|b| b.ztype == ZoneType::Conventional) => {
                    format!("{e}: {what} of conventional {zname}")
                }
                (Status::Invalid, _) if !geo.is_zone_start(sector) => {
                    format!("{e}: {what} at sector {}: not a zone start", sector.0)
                }
                (Status::NotSupported, _) => format!("{e}: {what}: the device is not zoned"),
                (Status::IoErr | Status::ZoneFull, Some(c))
                    if matches!(c, ZoneCond::Empty | ZoneCond::Full) && op == Op::ZoneClose =>
                {
                    format!("{e}: cannot close {zname}: it is {}", c.name())
                }
                (Status::ZoneFull, Some(c)) => format!("{e}: cannot {what} {zname}: it is {}", c.name()),
                (Status::ZoneReadOnly, _) => format!("{e}: cannot {what} {zname}: it is READONLY"),
                (Status::ZoneOffline, _) => format!("{e}: cannot {what} {zname}: it is OFFLINE"),
                (Status::ZoneOpenResource, _) => format!(
                    "{e}: cannot {what} {zname}: the open zone limit is reached (zone_max_open {})",
                    geo.max_open()
                ),
                (Status::ZoneActiveResource, _) => format!(
                    "{e}: cannot {what} {zname}: the active zone limit is reached (zone_max_active {})",
                    geo.max_active()
                ),
                _ => generic,
            }
        }
        _ => generic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zblk_core::geometry::GeometryParams;

    fn geo() -> Geometry {
        // 8 zones of 4 MiB (8192 sectors), capacity 3 MiB, zone 0 conventional,
        // appends up to 64 KiB, 4 KiB blocks.
        Geometry::new(&GeometryParams {
            capacity_bytes: 32 << 20,
            zone_size_bytes: 4 << 20,
            zone_capacity_bytes: 3 << 20,
            nr_conv: 1,
            max_open: 2,
            max_append_sectors: 128,
            lbs_bytes: 4096,
            ..GeometryParams::default()
        })
        .unwrap()
    }

    fn zone(n: u64, wp: u64, cond: ZoneCond) -> ZoneInfo {
        ZoneInfo {
            start: Sector(n * 8192),
            len: 8192,
            capacity: 6144,
            wp: Sector(n * 8192 + wp),
            ztype: ZoneType::SeqWriteRequired,
            cond,
        }
    }

    #[test]
    fn every_zone_rule_is_named_with_its_errno() {
        let g = geo();
        let z2 = zone(2, 16, ZoneCond::ImpOpen);
        let cases: Vec<(String, &str)> = vec![
            (
                explain(&g, Op::Write, Sector(16384 + 64), 8, Some(&z2), Status::Unaligned),
                "EIO: write at sector 16448 is not at zone 2's write pointer (sector 16400)",
            ),
            (
                explain(&g, Op::Write, Sector(16400), 8192, Some(&z2), Status::ZoneFull),
                "EIO: write of 8192 sectors at sector 16400 goes past zone 2's capacity (it ends at sector 22528)",
            ),
            (
                explain(&g, Op::Write, Sector(16400), 8, Some(&zone(2, 8192, ZoneCond::Full)), Status::ZoneFull),
                "EIO: zone 2 is FULL",
            ),
            (
                explain(&g, Op::Write, Sector(16400), 1, Some(&z2), Status::Invalid),
                "EINVAL: write at sector 16400 of 1 sectors is not aligned to the 4096-byte logical block",
            ),
            (
                explain(&g, Op::Read, Sector(65528), 16, None, Status::Invalid),
                "EINVAL: sectors 65528..65544 are beyond the device end (65536 sectors)",
            ),
            (
                explain(&g, Op::ZoneAppend, Sector(16392), 8, Some(&z2), Status::Invalid),
                "EINVAL: zone append at sector 16392 is not a zone start",
            ),
            (
                explain(&g, Op::ZoneAppend, Sector(0), 8, None, Status::Invalid),
                "EINVAL: zone append to conventional zone 0",
            ),
            (
                explain(&g, Op::ZoneAppend, Sector(16384), 256, Some(&z2), Status::Invalid),
                "EINVAL: zone append of 256 sectors is larger than the device's zone append limit (128 sectors, 65536 bytes)",
            ),
            (
                explain(
                    &g,
                    Op::ZoneAppend,
                    Sector(16384),
                    128,
                    Some(&zone(2, 6100, ZoneCond::ImpOpen)),
                    Status::ZoneFull,
                ),
                "EIO: zone append of 128 sectors does not fit in zone 2: its write pointer is at sector 22484, 44 sectors left",
            ),
            (
                explain(&g, Op::ZoneClose, Sector(16384), 0, Some(&zone(2, 0, ZoneCond::Empty)), Status::IoErr),
                "EIO: cannot close zone 2: it is EMPTY",
            ),
            (
                explain(&g, Op::ZoneOpen, Sector(16384), 0, Some(&zone(2, 8192, ZoneCond::Full)), Status::ZoneFull),
                "EIO: cannot open zone 2: it is FULL",
            ),
            (explain(&g, Op::ZoneFinish, Sector(0), 0, None, Status::Invalid), "EINVAL: finish of conventional zone 0"),
            (
                explain(&g, Op::ZoneOpen, Sector(16392), 0, Some(&z2), Status::Invalid),
                "EINVAL: open at sector 16392: not a zone start",
            ),
            (
                explain(
                    &g,
                    Op::ZoneOpen,
                    Sector(16384),
                    0,
                    Some(&zone(2, 0, ZoneCond::Empty)),
                    Status::ZoneOpenResource,
                ),
                "ETOOMANYREFS: cannot open zone 2: the open zone limit is reached (zone_max_open 2)",
            ),
            (
                explain(&g, Op::Write, Sector(16384), 8, Some(&zone(2, 0, ZoneCond::Empty)), Status::ZoneOpenResource),
                "ETOOMANYREFS: zone 2 cannot be opened: the open zone limit is reached (zone_max_open 2)",
            ),
            (explain(&g, Op::Write, Sector(16384), 8, None, Status::IoErr), "EIO: I/O error"),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
