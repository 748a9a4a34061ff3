//! Errors that explain: a request the engine or the device refused, told with the
//! errno the kernel would return *and* the zone rule that refused it. The rule comes
//! with the refusal, from the place that decided ([`Status::rule`]: the engine's
//! validation and plugs, the device's zone state machine); nothing is worked out
//! again here. A status without a rule (a Linux device's errno) is told by its code.
//! And a range refused before anything is submitted ([`RangeError`]), in words.
//!
//! The `zblk` command says its errors in these words too: one wording for the
//! library's [`Error`](crate::Error)s and the command's messages.
//!
//! ```
//! use zblk::explain::explain;
//! use zblk_core::bio::{Op, Status};
//! use zblk_core::params::DeviceParams;
//! use zblk_core::rule::Rule;
//! use zblk_core::units::Sector;
//!
//! let mut p = DeviceParams::default();
//! p.apply("zone_size=4,size=64").unwrap();
//! let geo = p.validate().unwrap();
//! let st = Status::Unaligned.because(Rule::NotAtWp { wp: Sector(8192) });
//! assert_eq!(
//!     explain(&geo, Op::Write, Sector(8200), 8, st),
//!     "EIO: write at sector 8200 is not at zone 1's write pointer (sector 8192)"
//! );
//! ```

use zblk_core::bio::{Op, Status, StatusCode};
use zblk_core::geometry::Geometry;
use zblk_core::rule::Rule;
use zblk_core::units::Sector;
use zblk_runtime::Runtime;
use zblk_runtime::single::RangeError;

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
/// rule in words.
pub fn explain(geo: &Geometry, op: Op, sector: Sector, nr_sectors: u64, st: Status) -> String {
    let e = st.errno_name();
    let what = op_name(op);
    // The zone a sector lies in, by name (only for sectors inside the device).
    let zone = |s: Sector| format!("zone {}", geo.zone_no(s).0);
    let zone_op = op.is_zone_mgmt();
    let lbs = u64::from(geo.lbs_bytes());
    match st.rule() {
        Some(Rule::BeyondEnd) if op.has_range() => format!(
            "{e}: sectors {}..{} are beyond the device end ({} sectors)",
            sector.0,
            sector.0.saturating_add(nr_sectors),
            geo.nr_sectors()
        ),
        Some(Rule::BeyondEnd) => {
            format!("{e}: {what} at sector {}: beyond the device end ({} sectors)", sector.0, geo.nr_sectors())
        }
        Some(Rule::LengthZero) => format!("{e}: length 0"),
        Some(Rule::NotBlockAligned) if op == Op::ZoneAppend => {
            format!("{e}: zone append of {nr_sectors} sectors is not a whole number of {lbs}-byte logical blocks")
        }
        Some(Rule::NotBlockAligned) => format!(
            "{e}: {what} at sector {} of {nr_sectors} sectors is not aligned to the {lbs}-byte logical block",
            sector.0
        ),
        Some(Rule::NotZoneStart) if zone_op => format!("{e}: {what} at sector {}: not a zone start", sector.0),
        Some(Rule::NotZoneStart) => format!("{e}: {what} at sector {} is not a zone start", sector.0),
        Some(Rule::Conventional) if zone_op => format!("{e}: {what} of conventional {}", zone(sector)),
        Some(Rule::Conventional) => format!("{e}: {what} to conventional {}", zone(sector)),
        Some(Rule::NotZoned) => format!("{e}: {what} on a device that is not zoned"),
        Some(Rule::UnexpectedLength) => format!("{e}: {what} takes no length"),
        Some(Rule::AppendOverLimit) => format!(
            "{e}: zone append of {nr_sectors} sectors is larger than the device's zone append limit ({} sectors, {} \
             bytes)",
            geo.append_limit_sectors(),
            u64::from(geo.append_limit_sectors()) * 512
        ),
        Some(Rule::AppendOverCapacity) => format!(
            "{e}: zone append of {nr_sectors} sectors is larger than {}'s capacity ({} sectors)",
            zone(sector),
            geo.zone_capacity(geo.zone_no(sector))
        ),
        Some(Rule::NoZoneAppend) => format!("{e}: the device has no zone append (and it is not emulated here)"),
        Some(Rule::DiscardSequential) => format!("{e}: discard reaches a sequential zone (reset it instead)"),
        Some(Rule::NoWriteZeroes) => format!("{e}: the device has no write zeroes"),
        Some(Rule::WriteZeroesOverLimit) => format!(
            "{e}: write zeroes of {nr_sectors} sectors is larger than the device's limit ({} sectors)",
            geo.max_write_zeroes_sectors()
        ),
        Some(Rule::OverMaxSectors) => format!(
            "{e}: a request of {nr_sectors} sectors is larger than the device's max_sectors ({})",
            geo.max_sectors()
        ),
        Some(Rule::CrossesZone) => {
            format!("{e}: {what} at sector {} of {nr_sectors} sectors runs past its conventional zone", sector.0)
        }
        Some(rule @ (Rule::NotAtWp { .. } | Rule::ZoneFull | Rule::PastCapacity { .. } | Rule::Transition { .. })) => {
            zone_state(geo, op, sector, nr_sectors, e, rule)
        }
        None => by_code(geo, op, sector, st),
    }
}

/// A refusal by a zone's state (its write pointer, its condition, its capacity), in
/// words.
fn zone_state(geo: &Geometry, op: Op, sector: Sector, nr_sectors: u64, e: &str, rule: Rule) -> String {
    let what = op_name(op);
    let zone = |s: Sector| format!("zone {}", geo.zone_no(s).0);
    let zone_op = op.is_zone_mgmt();
    match rule {
        Rule::NotAtWp { wp } => {
            format!("{e}: write at sector {} is not at {}'s write pointer (sector {})", sector.0, zone(wp), wp.0)
        }
        Rule::ZoneFull if zone_op => format!("{e}: cannot {what} {}: it is FULL", zone(sector)),
        Rule::ZoneFull => format!("{e}: {} is FULL", zone(sector)),
        Rule::PastCapacity { wp } if op == Op::ZoneAppend => {
            let z = geo.zone_no(wp);
            let end = geo.zone_start(z).0 + geo.zone_capacity(z);
            format!(
                "{e}: zone append of {nr_sectors} sectors does not fit in {}: its write pointer is at sector {}, {} \
                 sectors left",
                zone(wp),
                wp.0,
                end - wp.0
            )
        }
        Rule::PastCapacity { wp } => {
            let z = geo.zone_no(wp);
            format!(
                "{e}: write of {nr_sectors} sectors at sector {} goes past {}'s capacity (it ends at sector {})",
                sector.0,
                zone(wp),
                geo.zone_start(z).0 + geo.zone_capacity(z)
            )
        }
        Rule::Transition { cond } => format!("{e}: cannot {what} {}: it is {}", zone(sector), cond.name()),
        _ => unreachable!("only a zone state's rules are worded here"),
    }
}

/// A status whose code says it all, or a device's errno.
fn by_code(geo: &Geometry, op: Op, sector: Sector, st: Status) -> String {
    let e = st.errno_name();
    let what = op_name(op);
    let zname = || match geo.is_zoned() && sector.0 < geo.nr_sectors() {
        true => format!("zone {}", geo.zone_no(sector).0),
        false => "the zone".to_string(),
    };
    let zone_op = op.is_zone_mgmt() && op != Op::ZoneResetAll;
    match st.code() {
        StatusCode::ZoneReadOnly if zone_op => format!("{e}: cannot {what} {}: it is READONLY", zname()),
        StatusCode::ZoneOffline if zone_op => format!("{e}: cannot {what} {}: it is OFFLINE", zname()),
        StatusCode::ZoneReadOnly => format!("{e}: {} is READONLY", zname()),
        StatusCode::ZoneOffline => format!("{e}: {} is OFFLINE", zname()),
        StatusCode::ZoneOpenResource if zone_op => {
            format!("{e}: cannot {what} {}: the open zone limit is reached (zone_max_open {})", zname(), geo.max_open())
        }
        StatusCode::ZoneOpenResource => format!(
            "{e}: {} cannot be opened: the open zone limit is reached (zone_max_open {})",
            zname(),
            geo.max_open()
        ),
        StatusCode::ZoneActiveResource if zone_op => format!(
            "{e}: cannot {what} {}: the active zone limit is reached (zone_max_active {})",
            zname(),
            geo.max_active()
        ),
        StatusCode::ZoneActiveResource => format!(
            "{e}: {} cannot be made active: the active zone limit is reached (zone_max_active {})",
            zname(),
            geo.max_active()
        ),
        StatusCode::NotSupported if op.is_zone_mgmt() => format!("{e}: {what}: the device is not zoned"),
        _ => format!("{e}: {st}"),
    }
}

/// A failed request's cause as the device knows it: for an EIO under an image, the
/// file system's errno in words (ENOSPC, EFBIG, EDQUOT, ...: `Device::last_error`),
/// which a full file system or a file size limit is told by. An EIO that names the
/// rule that refused it (a zone transition the condition does not allow) was refused,
/// not failed: its cause is the rule.
///
/// Under an NVMe generic device, any status the drive gave (no rule: nothing refused
/// it before the drive) is told with the NVMe status the drive answered.
pub fn device_cause(rt: &Runtime, st: Status) -> Option<String> {
    let drive = rt.device().uring_cmd().is_some();
    if (st == Status::IoErr || drive) && st.rule().is_none() { rt.device().last_error() } else { None }
}

/// A request's range refused before it was submitted, in words (the errno's name
/// first); `zero` follows "length 0" (what was empty, or why that is refused).
pub fn range(offset: u64, length: u64, e: RangeError, zero: &str) -> String {
    match e {
        RangeError::LengthZero => format!("EINVAL: length 0{zero}"),
        RangeError::OffsetNotSector => format!("EINVAL: offset {offset} is not a multiple of 512 bytes"),
        RangeError::OffsetNotBlock { lbs } => {
            format!("EINVAL: offset {offset} is not a multiple of the logical block size ({lbs} bytes)")
        }
        RangeError::BeyondEnd { dev_bytes } => {
            format!("EINVAL: offset {offset} + length {length} is beyond the device end ({dev_bytes} bytes)")
        }
        RangeError::LengthNotBlock { lbs } => {
            format!("EINVAL: length {length} is not a multiple of the logical block size ({lbs} bytes)")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zblk_core::geometry::GeometryParams;
    use zblk_core::zone::ZoneCond;

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

    #[test]
    fn every_rule_is_named_with_its_errno() {
        let g = geo();
        let st = |s: Status, r: Rule| s.because(r);
        let cases: Vec<(String, &str)> = vec![
            (
                explain(&g, Op::Write, Sector(16448), 8, st(Status::Unaligned, Rule::NotAtWp { wp: Sector(16400) })),
                "EIO: write at sector 16448 is not at zone 2's write pointer (sector 16400)",
            ),
            (
                explain(
                    &g,
                    Op::Write,
                    Sector(16400),
                    8192,
                    st(Status::ZoneFull, Rule::PastCapacity { wp: Sector(16400) }),
                ),
                "EIO: write of 8192 sectors at sector 16400 goes past zone 2's capacity (it ends at sector 22528)",
            ),
            (explain(&g, Op::Write, Sector(16400), 8, st(Status::ZoneFull, Rule::ZoneFull)), "EIO: zone 2 is FULL"),
            (
                explain(&g, Op::Write, Sector(16400), 1, st(Status::Invalid, Rule::NotBlockAligned)),
                "EINVAL: write at sector 16400 of 1 sectors is not aligned to the 4096-byte logical block",
            ),
            (
                explain(&g, Op::Read, Sector(65528), 16, st(Status::Invalid, Rule::BeyondEnd)),
                "EINVAL: sectors 65528..65544 are beyond the device end (65536 sectors)",
            ),
            (
                explain(&g, Op::ZoneAppend, Sector(16392), 8, st(Status::Invalid, Rule::NotZoneStart)),
                "EINVAL: zone append at sector 16392 is not a zone start",
            ),
            (
                explain(&g, Op::ZoneAppend, Sector(0), 8, st(Status::Invalid, Rule::Conventional)),
                "EINVAL: zone append to conventional zone 0",
            ),
            (
                explain(&g, Op::ZoneAppend, Sector(16384), 256, st(Status::Invalid, Rule::AppendOverLimit)),
                "EINVAL: zone append of 256 sectors is larger than the device's zone append limit (128 sectors, 65536 bytes)",
            ),
            (
                explain(
                    &g,
                    Op::ZoneAppend,
                    Sector(16384),
                    128,
                    st(Status::ZoneFull, Rule::PastCapacity { wp: Sector(22484) }),
                ),
                "EIO: zone append of 128 sectors does not fit in zone 2: its write pointer is at sector 22484, 44 sectors left",
            ),
            (
                explain(
                    &g,
                    Op::ZoneClose,
                    Sector(16384),
                    0,
                    st(Status::IoErr, Rule::Transition { cond: ZoneCond::Empty }),
                ),
                "EIO: cannot close zone 2: it is EMPTY",
            ),
            (
                explain(
                    &g,
                    Op::ZoneOpen,
                    Sector(16384),
                    0,
                    st(Status::ZoneFull, Rule::Transition { cond: ZoneCond::Full }),
                ),
                "EIO: cannot open zone 2: it is FULL",
            ),
            (
                explain(&g, Op::ZoneFinish, Sector(0), 0, st(Status::Invalid, Rule::Conventional)),
                "EINVAL: finish of conventional zone 0",
            ),
            (
                explain(&g, Op::ZoneOpen, Sector(16392), 0, st(Status::Invalid, Rule::NotZoneStart)),
                "EINVAL: open at sector 16392: not a zone start",
            ),
            (
                explain(&g, Op::ZoneOpen, Sector(16384), 0, Status::ZoneOpenResource),
                "ETOOMANYREFS: cannot open zone 2: the open zone limit is reached (zone_max_open 2)",
            ),
            (
                explain(&g, Op::Write, Sector(16384), 8, Status::ZoneOpenResource),
                "ETOOMANYREFS: zone 2 cannot be opened: the open zone limit is reached (zone_max_open 2)",
            ),
            (explain(&g, Op::Write, Sector(16384), 8, Status::IoErr), "EIO: I/O error"),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }
}
