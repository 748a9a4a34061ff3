//! A Linux zoned block device in zblk's terms: the [`Geometry`] its sysfs limits and
//! its zone report give, and its zones as [`ZoneInfo`]. zblk's geometry has one zone
//! size, one zone capacity and its conventional zones first (as null_blk and most
//! SMR disks); a device laid out otherwise is refused, saying where it differs.

use super::ioctl::RawZone;
use super::sysfs::QueueLimits;
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneSet};

/// `BLK_ZONE_TYPE_CONVENTIONAL`.
const TYPE_CONVENTIONAL: u8 = 1;
/// `BLK_ZONE_TYPE_SEQWRITE_REQ`.
const TYPE_SEQ_REQUIRED: u8 = 2;
/// `BLK_ZONE_TYPE_SEQWRITE_PREF`: a host-aware zone.
const TYPE_SEQ_PREFERRED: u8 = 3;

/// The geometry of a device with `limits` whose zone report is `zones`, and its
/// zones, checked against each other. Native zone append is never offered: the
/// kernel has none for userspace on a raw block device, so the engine emulates it
/// (`max_append_sectors` 0).
pub fn geometry(limits: &QueueLimits, zones: &[RawZone]) -> Result<(Geometry, Vec<ZoneInfo>), String> {
    if zones.len() as u64 != u64::from(limits.nr_zones) {
        return Err(format!("the zone report has {} zones, queue/nr_zones says {}", zones.len(), limits.nr_zones));
    }
    for (i, z) in zones.iter().enumerate() {
        match z.ztype {
            TYPE_CONVENTIONAL | TYPE_SEQ_REQUIRED => {}
            TYPE_SEQ_PREFERRED => {
                return Err(format!(
                    "zone {i} (start {:#x}) is sequential-write-preferred (host-aware): zblk drives \
                     host-managed zones only",
                    z.start
                ));
            }
            t => return Err(format!("zone {i} (start {:#x}) has an unknown zone type {t}", z.start)),
        }
    }
    let nr_conv = zones.iter().take_while(|z| z.ztype == TYPE_CONVENTIONAL).count();
    if let Some((i, z)) = zones.iter().enumerate().skip(nr_conv).find(|(_, z)| z.ztype == TYPE_CONVENTIONAL) {
        return Err(format!(
            "zone {i} (start {:#x}) is conventional after sequential zones: zblk's geometry has its \
             conventional zones first",
            z.start
        ));
    }
    let Some(first_seq) = zones.get(nr_conv) else {
        return Err("every zone is conventional: there is no sequential zone to drive".to_string());
    };
    let params = GeometryParams {
        lbs_bytes: limits.logical_block_size,
        capacity_bytes: limits.nr_sectors * 512,
        zoned: true,
        zone_size_bytes: limits.chunk_sectors * 512,
        zone_capacity_bytes: first_seq.capacity.saturating_mul(512),
        nr_conv: nr_conv as u32,
        max_open: limits.max_open_zones,
        max_active: limits.max_active_zones,
        max_append_sectors: 0,
        max_sectors: limits.max_sectors(),
        write_zeroes_max_bytes: limits.write_zeroes_max_bytes,
        write_zeroes_unmap_max_hw_bytes: limits.write_zeroes_unmap_bytes(),
    };
    let geo = Geometry::new(&params).map_err(|e| format!("the device's geometry is refused: {e}"))?;
    let infos = zones
        .iter()
        .enumerate()
        .map(|(i, z)| zone_info(&geo, z).map_err(|e| format!("zone {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    // The device-side state machine's own check: conditions and write pointers agree.
    ZoneSet::from_zones(&geo, &infos).map_err(|e| format!("the zone report is inconsistent: {e}"))?;
    Ok((geo, infos))
}

/// A zone as the kernel reports it, as a [`ZoneInfo`] of `geo`; refused where the
/// report does not fit the geometry (a zone elsewhere, another capacity, an unknown
/// condition, a write pointer outside the zone).
pub fn zone_info(geo: &Geometry, z: &RawZone) -> Result<ZoneInfo, String> {
    if z.start >= geo.nr_sectors() {
        return Err(format!("start {:#x} is past the end of the device", z.start));
    }
    let zno = geo.zone_no(Sector(z.start));
    if z.start != geo.zone_start(zno).0 || z.len != geo.zone_len(zno) {
        return Err(format!(
            "start {:#x}, length {:#x}: not the zone the zone size gives ({:#x}, length {:#x})",
            z.start,
            z.len,
            geo.zone_start(zno).0,
            geo.zone_len(zno)
        ));
    }
    let conventional = geo.zone_is_conv(zno);
    if conventional != (z.ztype == TYPE_CONVENTIONAL) {
        return Err(format!("(start {:#x}) has zone type {}, the geometry expects otherwise", z.start, z.ztype));
    }
    if conventional {
        return Ok(ZoneInfo::of(geo, zno, ZoneCond::NotWp, 0));
    }
    if z.capacity != geo.zone_capacity(zno) {
        return Err(format!(
            "(start {:#x}) has capacity {:#x}, the first sequential zone {:#x}: zblk's geometry has one zone \
             capacity",
            z.start,
            z.capacity,
            geo.zone_capacity(ZoneNo(geo.nr_conv()))
        ));
    }
    let wp_offset = z.wp.checked_sub(z.start).filter(|&o| o <= z.capacity);
    let open_or_closed = |c| matches!(c, ZoneCond::ImpOpen | ZoneCond::ExpOpen | ZoneCond::Closed);
    let (cond, wp_offset) = match (ZoneCond::of_code(z.cond), wp_offset) {
        (Some(ZoneCond::Empty), _) => (ZoneCond::Empty, 0),
        (Some(c), Some(o)) if open_or_closed(c) => (c, o),
        // The write pointer of these is not valid (ZBC): zblk's convention is the
        // zone end for FULL, the start otherwise.
        (Some(ZoneCond::ReadOnly), _) => (ZoneCond::ReadOnly, 0),
        (Some(ZoneCond::Full), _) => (ZoneCond::Full, z.len),
        (Some(ZoneCond::Offline), _) => (ZoneCond::Offline, 0),
        (Some(c), None) if open_or_closed(c) => {
            return Err(format!(
                "(start {:#x}) has its write pointer {:#x} outside its capacity {:#x}",
                z.start, z.wp, z.capacity
            ));
        }
        // NOT_WP on a sequential zone, or a code no condition has.
        _ => return Err(format!("(start {:#x}) has an unknown condition {:#x}", z.start, z.cond)),
    };
    Ok(ZoneInfo::of(geo, zno, cond, wp_offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::sysfs::{self, tests as fake};

    fn limits() -> QueueLimits {
        let dir = fake::fake(fake::NULLB);
        sysfs::read(dir.path()).unwrap()
    }

    /// null_blk's report: 16 zones of 64 MiB, the first two conventional.
    fn report(nr_conv: usize) -> Vec<RawZone> {
        (0..16u64)
            .map(|i| {
                let start = i * 131072;
                let conv = (i as usize) < nr_conv;
                RawZone {
                    start,
                    len: 131072,
                    capacity: 131072,
                    wp: if conv { start + 131072 } else { start },
                    ztype: if conv { 1 } else { 2 },
                    cond: if conv { 0 } else { 1 },
                    reset: 0,
                    non_seq: 0,
                }
            })
            .collect()
    }

    #[test]
    fn geometry_of_null_blk() {
        let mut zones = report(2);
        zones[3].cond = 2;
        zones[3].wp += 8;
        zones[4].cond = 0xe;
        zones[4].wp = u64::MAX; // not valid for a FULL zone, and not used
        let (geo, infos) = geometry(&limits(), &zones).unwrap();
        assert_eq!((geo.nr_zones(), geo.nr_conv(), geo.zone_sectors()), (16, 2, 131072));
        assert_eq!((geo.max_open(), geo.max_active(), geo.max_append_sectors()), (4, 0, 0));
        assert!(geo.emulates_zone_append());
        assert_eq!(geo.max_sectors(), 254);
        assert_eq!(geo.max_write_zeroes_sectors(), 0);
        assert_eq!((infos[3].cond, infos[3].wp), (ZoneCond::ImpOpen, Sector(3 * 131072 + 8)));
        assert_eq!((infos[4].cond, infos[4].wp_offset()), (ZoneCond::Full, Some(131072)));
        assert_eq!(infos[0].cond, ZoneCond::NotWp);
    }

    #[test]
    fn layouts_the_geometry_cannot_describe_are_refused() {
        let l = limits();
        let check = |zones: Vec<RawZone>, want: &str| {
            let e = geometry(&l, &zones).unwrap_err();
            assert!(e.contains(want), "{e}");
        };
        check(report(0)[..15].to_vec(), "the zone report has 15 zones, queue/nr_zones says 16");
        let mut z = report(1);
        z[5].ztype = 3;
        check(z, "zone 5 (start 0xa0000) is sequential-write-preferred");
        let mut z = report(1);
        z[7].ztype = 9;
        check(z, "unknown zone type 9");
        let mut z = report(1);
        z[9] = report(16)[9];
        check(z, "zone 9 (start 0x120000) is conventional after sequential zones");
        check(report(16), "every zone is conventional");
        let mut z = report(0);
        z[6].capacity = 1000;
        check(z, "zone 6: (start 0xc0000) has capacity 0x3e8, the first sequential zone 0x20000");
        let mut z = report(0);
        z[2].cond = 2;
        z[2].wp = z[2].start + 200000;
        check(z, "write pointer 0x70d40 outside its capacity");
        let mut z = report(0);
        z[2].cond = 7;
        check(z, "unknown condition 0x7");
        let mut z = report(0);
        z[2].start += 8;
        check(z, "not the zone the zone size gives");
        let mut z = report(0);
        z[1].cond = 4; // CLOSED at the zone start: impossible
        check(z, "the zone report is inconsistent");
    }
}
