//! Device geometry and limits: block size, capacity, zones, open/active limits, the
//! zone append limit and `max_sectors`, validated once so every user can trust them.
//!
//! The zone layout follows null_blk (`drivers/block/null_blk/zoned.c`): the first
//! `nr_conv` zones are conventional, the rest sequential-write-required; zones are
//! `zone_size` long (a power of two) except a smaller last ("runt") zone when the
//! capacity is not a multiple of the zone size; a zone's capacity is
//! `min(zone length, zone_capacity)`, and conventional zones are writable to their end.

use crate::units::{SECTOR_SHIFT, Sector, ZoneNo, format_bytes_exact};

/// The kernel's `BLK_DEF_MAX_SECTORS_CAP`: the default largest request, 1280 KiB.
pub const DEFAULT_MAX_SECTORS: u32 = 2560;

/// What a device looks like, before validation. Sizes are in bytes; the null_blk
/// parameter each field corresponds to is named in its doc line.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GeometryParams {
    /// `blocksize`: logical block size in bytes, 512 or 4096.
    pub lbs_bytes: u32,
    /// `size`: device capacity in bytes.
    pub capacity_bytes: u64,
    /// `zoned`: whether the device is zoned. A regular device ignores the zone fields.
    pub zoned: bool,
    /// `zone_size`: zone size in bytes, a power of two.
    pub zone_size_bytes: u64,
    /// `zone_capacity`: writable bytes of each zone; 0 means the zone size.
    pub zone_capacity_bytes: u64,
    /// `zone_nr_conv`: number of conventional zones at the start of the device.
    pub nr_conv: u32,
    /// `zone_max_open`: limit on implicitly + explicitly open zones; 0: no limit.
    pub max_open: u32,
    /// `zone_max_active`: limit on open + closed zones; 0: no limit.
    pub max_active: u32,
    /// `zone_append_max_sectors`: largest native zone append in sectors; 0 means the
    /// device has no native zone append and the host emulates it.
    pub max_append_sectors: u32,
    /// `max_sectors`: largest request the device accepts, in sectors.
    pub max_sectors: u32,
    /// `write_zeroes_max_bytes`: largest WRITE_ZEROES the device accepts; 0: the
    /// device has no WRITE_ZEROES (callers fall back to writing zero buffers).
    pub write_zeroes_max_bytes: u64,
    /// `write_zeroes_unmap_max_hw_bytes`: the device deallocates on WRITE_ZEROES
    /// (SCSI UNMAP bit, NVMe DEAC) up to this size: 0 (it cannot) or, as the kernel
    /// requires, `write_zeroes_max_bytes`.
    pub write_zeroes_unmap_max_hw_bytes: u64,
}

impl Default for GeometryParams {
    /// A 1 GiB host-managed device with 64 MiB zones and null_blk's other defaults
    /// (native zone append up to `max_sectors`, no conventional zones, no limits).
    fn default() -> Self {
        GeometryParams {
            lbs_bytes: 512,
            capacity_bytes: 1 << 30,
            zoned: true,
            zone_size_bytes: 64 << 20,
            zone_capacity_bytes: 0,
            nr_conv: 0,
            max_open: 0,
            max_active: 0,
            max_append_sectors: DEFAULT_MAX_SECTORS,
            max_sectors: DEFAULT_MAX_SECTORS,
            write_zeroes_max_bytes: DEFAULT_WRITE_ZEROES_BYTES,
            write_zeroes_unmap_max_hw_bytes: DEFAULT_WRITE_ZEROES_BYTES,
        }
    }
}

/// The default `write_zeroes_max_bytes` (and unmap limit) of the emulated devices:
/// 32 MiB, as many NVMe drives report.
pub const DEFAULT_WRITE_ZEROES_BYTES: u64 = 32 << 20;

/// A refused geometry, naming the parameter at fault (by its null_blk name).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{param}: {message}")]
pub struct GeometryError {
    /// The null_blk name of the parameter at fault.
    pub param: &'static str,
    /// What is wrong, with the values involved.
    pub message: String,
}

fn refuse(param: &'static str, message: String) -> GeometryError {
    GeometryError { param, message }
}

/// A validated geometry. Construct with [`Geometry::new`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    lbs_bytes: u32,
    nr_sectors: u64,
    max_sectors: u32,
    zoned: bool,
    zone_sectors: u64,
    zone_cap_sectors: u64,
    nr_zones: u32,
    nr_conv: u32,
    max_open: u32,
    max_active: u32,
    max_append_sectors: u32,
    max_write_zeroes_sectors: u32,
    max_hw_wzeroes_unmap_sectors: u32,
}

impl Geometry {
    /// Validates `p` and derives the zone layout. Every refusal names the parameter.
    pub fn new(p: &GeometryParams) -> Result<Geometry, GeometryError> {
        if p.lbs_bytes != 512 && p.lbs_bytes != 4096 {
            return Err(refuse("blocksize", format!("must be 512 or 4096 bytes, got {}", p.lbs_bytes)));
        }
        let lbs = u64::from(p.lbs_bytes);
        let lbs_sectors = lbs >> SECTOR_SHIFT;
        if p.capacity_bytes == 0 || p.capacity_bytes % lbs != 0 {
            return Err(refuse(
                "size",
                format!("must be a non-zero multiple of the block size ({lbs} bytes), got {} bytes", p.capacity_bytes),
            ));
        }
        let nr_sectors = p.capacity_bytes >> SECTOR_SHIFT;
        if nr_sectors > crate::rule::MAX_PACKED_SECTORS {
            // A refusal names a write pointer in a status of eight bytes.
            return Err(refuse("size", format!("at most 1 EiB ({} sectors)", crate::rule::MAX_PACKED_SECTORS)));
        }
        if p.max_sectors == 0 || u64::from(p.max_sectors) % lbs_sectors != 0 {
            return Err(refuse(
                "max_sectors",
                format!("must be a non-zero multiple of the block size ({lbs_sectors} sectors), got {}", p.max_sectors),
            ));
        }
        let mut g = Geometry {
            lbs_bytes: p.lbs_bytes,
            nr_sectors,
            max_sectors: p.max_sectors,
            zoned: p.zoned,
            zone_sectors: 0,
            zone_cap_sectors: 0,
            nr_zones: 0,
            nr_conv: 0,
            max_open: 0,
            max_active: 0,
            max_append_sectors: 0,
            max_write_zeroes_sectors: 0,
            max_hw_wzeroes_unmap_sectors: 0,
        };
        g.validate_write_zeroes(p)?;
        if p.zoned {
            g.validate_zones(p)?;
        }
        Ok(g)
    }

    fn validate_write_zeroes(&mut self, p: &GeometryParams) -> Result<(), GeometryError> {
        let lbs = u64::from(p.lbs_bytes);
        let wz = p.write_zeroes_max_bytes;
        if wz % lbs != 0 || (wz >> SECTOR_SHIFT) > u64::from(u32::MAX - u32::MAX % self.lbs_sectors()) {
            return Err(refuse(
                "write_zeroes_max_bytes",
                format!("must be a multiple of the block size ({lbs} bytes) below 2 TiB, got {wz}"),
            ));
        }
        let unmap = p.write_zeroes_unmap_max_hw_bytes;
        if unmap != 0 && unmap != wz {
            return Err(refuse(
                "write_zeroes_unmap_max_hw_bytes",
                format!("must be 0 (no unmap) or write_zeroes_max_bytes ({wz}), got {unmap}"),
            ));
        }
        self.max_write_zeroes_sectors = (wz >> SECTOR_SHIFT) as u32;
        self.max_hw_wzeroes_unmap_sectors = (unmap >> SECTOR_SHIFT) as u32;
        Ok(())
    }

    fn validate_zones(&mut self, p: &GeometryParams) -> Result<(), GeometryError> {
        let lbs = u64::from(p.lbs_bytes);
        let zsz = p.zone_size_bytes;
        if zsz == 0 || !zsz.is_power_of_two() || zsz < lbs {
            return Err(refuse(
                "zone_size",
                format!("must be a power of two of at least one block ({lbs} bytes), got {zsz} bytes"),
            ));
        }
        if zsz > p.capacity_bytes {
            return Err(refuse(
                "zone_size",
                format!(
                    "{} is larger than the device (size {})",
                    format_bytes_exact(zsz),
                    format_bytes_exact(p.capacity_bytes)
                ),
            ));
        }
        let zcap = if p.zone_capacity_bytes == 0 { zsz } else { p.zone_capacity_bytes };
        if zcap > zsz {
            return Err(refuse(
                "zone_capacity",
                format!("{} is larger than zone_size {}", format_bytes_exact(zcap), format_bytes_exact(zsz)),
            ));
        }
        if zcap % lbs != 0 {
            return Err(refuse(
                "zone_capacity",
                format!("must be a multiple of the block size ({lbs} bytes), got {zcap} bytes"),
            ));
        }
        let zone_sectors = zsz >> SECTOR_SHIFT;
        let nr_zones = self.nr_sectors.div_ceil(zone_sectors);
        let nr_zones = u32::try_from(nr_zones)
            .map_err(|_| refuse("zone_size", format!("gives {nr_zones} zones, more than 2^32")))?;
        if p.nr_conv >= nr_zones {
            return Err(refuse(
                "zone_nr_conv",
                format!("{} conventional zones leave no sequential zone (the device has {nr_zones} zones)", p.nr_conv),
            ));
        }
        if p.max_active != 0 && p.max_open > p.max_active {
            return Err(refuse(
                "zone_max_open",
                format!("{} is larger than zone_max_active {}", p.max_open, p.max_active),
            ));
        }
        // As null_blk: the append limit is aligned down to the block size and capped
        // to max_sectors and to the zone capacity. 0 means "emulate".
        let lbs_sectors = (lbs >> SECTOR_SHIFT) as u32;
        let mut max_append = p.max_append_sectors.min(p.max_sectors);
        max_append -= max_append % lbs_sectors;
        if p.max_append_sectors != 0 && max_append == 0 {
            return Err(refuse(
                "zone_append_max_sectors",
                format!(
                    "{} sectors is less than one block ({lbs_sectors} sectors); use 0 to emulate zone append",
                    p.max_append_sectors
                ),
            ));
        }
        let max_append = u64::from(max_append).min(zcap >> SECTOR_SHIFT) as u32;
        self.zone_sectors = zone_sectors;
        self.zone_cap_sectors = zcap >> SECTOR_SHIFT;
        self.nr_zones = nr_zones;
        self.nr_conv = p.nr_conv;
        self.max_open = p.max_open;
        self.max_active = p.max_active;
        self.max_append_sectors = max_append;
        Ok(())
    }

    /// Logical block size in bytes (512 or 4096): every I/O is aligned to it.
    pub fn lbs_bytes(&self) -> u32 {
        self.lbs_bytes
    }

    /// Logical block size in sectors (1 or 8).
    pub fn lbs_sectors(&self) -> u32 {
        self.lbs_bytes >> SECTOR_SHIFT
    }

    /// Capacity in sectors.
    pub fn nr_sectors(&self) -> u64 {
        self.nr_sectors
    }

    /// Largest request the device accepts, in sectors (the queue's `max_sectors`).
    pub fn max_sectors(&self) -> u32 {
        self.max_sectors
    }

    /// Largest WRITE_ZEROES in sectors (`write_zeroes_max_bytes`); 0: none.
    pub fn max_write_zeroes_sectors(&self) -> u32 {
        self.max_write_zeroes_sectors
    }

    /// Largest WRITE_ZEROES the device may deallocate instead of writing, in sectors
    /// (`write_zeroes_unmap_max_hw_bytes`); 0: it always writes zeroes.
    pub fn max_hw_wzeroes_unmap_sectors(&self) -> u32 {
        self.max_hw_wzeroes_unmap_sectors
    }

    /// Whether the device is zoned (host-managed).
    pub fn is_zoned(&self) -> bool {
        self.zoned
    }

    /// Zone size in sectors (the queue's `chunk_sectors`); 0 on a regular device.
    pub fn zone_sectors(&self) -> u64 {
        self.zone_sectors
    }

    /// Capacity of a full-size sequential zone, in sectors.
    pub fn zone_cap_sectors(&self) -> u64 {
        self.zone_cap_sectors
    }

    /// Number of zones, the runt zone included; 0 on a regular device.
    pub fn nr_zones(&self) -> u32 {
        self.nr_zones
    }

    /// Number of conventional zones at the start of the device.
    pub fn nr_conv(&self) -> u32 {
        self.nr_conv
    }

    /// Number of sequential-write-required zones.
    pub fn nr_seq_zones(&self) -> u32 {
        self.nr_zones - self.nr_conv
    }

    /// Open zone limit; 0: none.
    pub fn max_open(&self) -> u32 {
        self.max_open
    }

    /// Active zone limit; 0: none.
    pub fn max_active(&self) -> u32 {
        self.max_active
    }

    /// Largest native zone append in sectors; 0 when the device has none and zone
    /// append is emulated by the host.
    pub fn max_append_sectors(&self) -> u32 {
        self.max_append_sectors
    }

    /// Whether the host emulates zone append with plugged writes.
    pub fn emulates_zone_append(&self) -> bool {
        self.zoned && self.max_append_sectors == 0
    }

    /// Largest zone append the host accepts: the native limit, or with emulation the
    /// largest request (an emulated append is one write and is never split).
    pub fn append_limit_sectors(&self) -> u32 {
        if self.emulates_zone_append() {
            (u64::from(self.max_sectors)).min(self.zone_cap_sectors) as u32
        } else {
            self.max_append_sectors
        }
    }

    /// The zone holding `sector`.
    pub fn zone_no(&self, sector: Sector) -> ZoneNo {
        assert!(self.zoned, "zone_no on a regular device");
        assert!(sector.0 < self.nr_sectors, "sector {sector} beyond capacity {}", self.nr_sectors);
        ZoneNo((sector.0 >> self.zone_sectors.trailing_zeros()) as u32)
    }

    /// First sector of zone `z`.
    pub fn zone_start(&self, z: ZoneNo) -> Sector {
        assert!(z.0 < self.nr_zones, "zone {z} beyond {}", self.nr_zones);
        Sector(u64::from(z.0) * self.zone_sectors)
    }

    /// Length of zone `z` in sectors (smaller for a runt last zone).
    pub fn zone_len(&self, z: ZoneNo) -> u64 {
        let start = self.zone_start(z).0;
        self.zone_sectors.min(self.nr_sectors - start)
    }

    /// Writable sectors of zone `z`: its whole length for a conventional zone,
    /// `min(length, zone_capacity)` for a sequential one.
    pub fn zone_capacity(&self, z: ZoneNo) -> u64 {
        let len = self.zone_len(z);
        if z.0 < self.nr_conv { len } else { len.min(self.zone_cap_sectors) }
    }

    /// Whether zone `z` is conventional.
    pub fn zone_is_conv(&self, z: ZoneNo) -> bool {
        assert!(z.0 < self.nr_zones, "zone {z} beyond {}", self.nr_zones);
        z.0 < self.nr_conv
    }

    /// Whether `sector` is the first sector of a zone.
    pub fn is_zone_start(&self, sector: Sector) -> bool {
        self.zoned && sector.0 < self.nr_sectors && sector.0 & (self.zone_sectors - 1) == 0
    }

    /// Offset of `sector` from the start of its zone.
    pub fn offset_in_zone(&self, sector: Sector) -> u64 {
        sector.0 & (self.zone_sectors - 1)
    }

    /// Whether a sector range `[sector, sector + nr_sectors)` is aligned to the
    /// logical block size.
    pub fn is_block_aligned(&self, sector: Sector, nr_sectors: u64) -> bool {
        // The logical block size is 512 or 4096 bytes (checked at construction): a
        // mask, not a division, on the path of every BIO.
        let mask = u64::from(self.lbs_sectors()) - 1;
        (sector.0 | nr_sectors) & mask == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> GeometryParams {
        GeometryParams {
            capacity_bytes: 10 << 20,
            zone_size_bytes: 4 << 20,
            zone_capacity_bytes: 3 << 20,
            nr_conv: 1,
            ..GeometryParams::default()
        }
    }

    #[test]
    fn runt_zone_and_capacities() {
        let g = Geometry::new(&params()).unwrap();
        assert_eq!(g.nr_zones(), 3);
        assert_eq!(g.zone_sectors(), 8192);
        // conventional zone: writable to its end
        assert_eq!(g.zone_capacity(ZoneNo(0)), 8192);
        assert_eq!(g.zone_capacity(ZoneNo(1)), 6144);
        // runt: 2 MiB long, capacity min(len, zone_capacity)
        assert_eq!(g.zone_len(ZoneNo(2)), 4096);
        assert_eq!(g.zone_capacity(ZoneNo(2)), 4096);
        assert_eq!(g.zone_no(Sector(8192)), ZoneNo(1));
        assert!(g.is_zone_start(Sector(16384)));
        assert!(!g.is_zone_start(Sector(16385)));
        assert!(!g.is_zone_start(Sector(20480)));
    }

    #[test]
    fn append_limit_follows_null_blk() {
        let g = Geometry::new(&GeometryParams { max_append_sectors: 100_000, ..params() }).unwrap();
        assert_eq!(g.max_append_sectors(), DEFAULT_MAX_SECTORS);
        let g = Geometry::new(&GeometryParams { max_append_sectors: 0, ..params() }).unwrap();
        assert!(g.emulates_zone_append());
        assert_eq!(g.append_limit_sectors(), DEFAULT_MAX_SECTORS);
        let g = Geometry::new(&GeometryParams { lbs_bytes: 4096, max_append_sectors: 12, ..params() }).unwrap();
        assert_eq!(g.max_append_sectors(), 8);
    }

    #[test]
    fn write_zeroes_limits() {
        let g = Geometry::new(&params()).unwrap();
        assert_eq!(g.max_write_zeroes_sectors(), 65536);
        assert_eq!(g.max_hw_wzeroes_unmap_sectors(), 65536);
        let none = GeometryParams { write_zeroes_max_bytes: 0, write_zeroes_unmap_max_hw_bytes: 0, ..params() };
        assert_eq!(Geometry::new(&none).unwrap().max_write_zeroes_sectors(), 0);
        let e = Geometry::new(&GeometryParams { write_zeroes_unmap_max_hw_bytes: 4096, ..params() }).unwrap_err();
        assert_eq!(e.param, "write_zeroes_unmap_max_hw_bytes");
        let e = Geometry::new(&GeometryParams {
            lbs_bytes: 4096,
            write_zeroes_max_bytes: 6144,
            write_zeroes_unmap_max_hw_bytes: 0,
            ..params()
        })
        .unwrap_err();
        assert_eq!(e.param, "write_zeroes_max_bytes");
    }

    #[test]
    fn regular_device_has_no_zones() {
        let g = Geometry::new(&GeometryParams { zoned: false, ..params() }).unwrap();
        assert!(!g.is_zoned());
        assert_eq!(g.nr_zones(), 0);
        assert!(!g.emulates_zone_append());
    }
}
