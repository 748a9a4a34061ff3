//! The devices of a stack and how they are put together: disks (each with its own
//! [`Engine`], where zone write plugs live, as request-based disks plug in the
//! kernel), linear devices (dm-linear: a concatenation of member ranges) and striped
//! devices (RAID0: members in turn, one chunk each). A stacked device's geometry and
//! limits are derived from its members, and every combination that cannot work is
//! refused with an error naming the device and what is wrong.

use super::limits::{Limits, min_not_zero};
use crate::engine::{Engine, EngineConfig};
use crate::geometry::{Geometry, GeometryError, GeometryParams};
use crate::units::{SECTOR_SHIFT, Sector, ZoneNo};

/// A device of a stack: an index into its device table, in creation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct DevId(pub u32);

impl DevId {
    /// The index, for per-device tables.
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// What kind of device it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DevKind {
    /// A bottom device: BIOs go through its own engine, requests to the hardware.
    Disk,
    /// A concatenation of member ranges (dm-linear).
    Linear,
    /// Members in turn, one chunk each (RAID0, dm-stripe).
    Striped,
}

/// What a device of a stack is, for reports and traces.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DevInfo {
    /// Its name: `sda`, `sdb`... for disks, `md0`... for striped devices, `dm-0`...
    /// for linear ones, as the kernel would name them.
    pub name: String,
    /// Device number (major, minor), as blktrace prints it.
    pub devno: (u32, u32),
    /// Its kind.
    pub kind: DevKind,
    /// Its geometry: capacity, block size, zones.
    pub geometry: Geometry,
    /// Its limits, stacked from its members for a stacked device.
    pub limits: Limits,
    /// Its members, in order (empty for a disk).
    pub members: Vec<DevId>,
}

/// A range of a member, as a linear device maps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearTarget {
    /// The member.
    pub dev: DevId,
    /// First sector of the range on the member.
    pub offset: Sector,
    /// Length in sectors; `None`: to the end of the member.
    pub len_sectors: Option<u64>,
}

/// A stack that cannot be built, with the device at fault and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    /// A disk's parameters.
    #[error("disk {dev}: {source}")]
    Disk {
        /// The disk.
        dev: String,
        /// What its parameters say is wrong.
        source: crate::params::ParamError,
    },
    /// A member that is not a device of this stack.
    #[error("{dev}: member {member:?} is not a device of this stack")]
    UnknownMember {
        /// The device.
        dev: String,
        /// The unknown id.
        member: DevId,
    },
    /// A stacked device without members.
    #[error("{dev}: no member devices")]
    NoMembers {
        /// The device.
        dev: String,
    },
    /// A stripe chunk that is not a power of two of at least one block, or does not
    /// fit the members' zones.
    #[error("{dev}: chunk {chunk_sectors} sectors: {why}")]
    Chunk {
        /// The device.
        dev: String,
        /// The chunk given.
        chunk_sectors: u64,
        /// What is wrong with it.
        why: String,
    },
    /// Members whose logical block sizes differ.
    #[error("{dev}: member {member} has {member_lbs}-byte blocks, member {first} has {first_lbs}-byte blocks")]
    BlockSize {
        /// The device.
        dev: String,
        /// The first member.
        first: String,
        /// Its block size in bytes.
        first_lbs: u32,
        /// The member that differs.
        member: String,
        /// Its block size in bytes.
        member_lbs: u32,
    },
    /// Members that do not agree on the zone model (zoned or not, zone size, zone
    /// capacity, conventional zones).
    #[error("{dev}: member {member}: {why}")]
    ZoneModel {
        /// The device.
        dev: String,
        /// The member at fault.
        member: String,
        /// What differs.
        why: String,
    },
    /// A linear target that is empty, misaligned, past its member, or (zoned) not on
    /// zone boundaries.
    #[error("{dev}: target {target} ({member}): {why}")]
    Target {
        /// The linear device.
        dev: String,
        /// The target's index.
        target: usize,
        /// Its member.
        member: String,
        /// What is wrong.
        why: String,
    },
    /// A `max_sectors` the device cannot have.
    #[error("{dev}: max_sectors {max_sectors}: {why}")]
    MaxSectors {
        /// The device.
        dev: String,
        /// The value given.
        max_sectors: u32,
        /// What is wrong.
        why: String,
    },
    /// The derived geometry is refused (for example, no room for one chunk).
    #[error("{dev}: {why}")]
    Geometry {
        /// The device.
        dev: String,
        /// What is wrong.
        why: String,
    },
}

/// A linear target, placed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    /// First sector on the linear device.
    pub start: Sector,
    pub len: u64,
    pub dev: DevId,
    pub offset: Sector,
}

/// How a device handles a BIO.
#[derive(Debug)]
pub(crate) enum Driver {
    Disk { engine: Box<Engine> },
    Linear { targets: Vec<Target> },
    Striped { members: Vec<DevId>, chunk_sectors: u64 },
}

impl Driver {
    /// Where `sector` of this stacked device lives: the member, the sector there, and
    /// how many sectors from `sector` stay contiguous on that member (to the end of
    /// the stripe chunk or of the linear target).
    pub fn map(&self, sector: Sector) -> (DevId, Sector, u64) {
        match self {
            Driver::Striped { members, chunk_sectors } => {
                let c = *chunk_sectors;
                let (chunk, off) = (sector.0 / c, sector.0 % c);
                let n = members.len() as u64;
                (members[(chunk % n) as usize], Sector((chunk / n) * c + off), c - off)
            }
            Driver::Linear { targets } => {
                let i = targets.partition_point(|t| t.start.0 + t.len <= sector.0);
                let t = targets.get(i).unwrap_or_else(|| panic!("sector {sector} past the last linear target"));
                let off = sector.since(t.start);
                (t.dev, t.offset + off, t.len - off)
            }
            Driver::Disk { .. } => unreachable!("a disk maps nothing"),
        }
    }
}

#[derive(Debug)]
pub(crate) struct Dev {
    pub info: DevInfo,
    pub driver: Driver,
}

/// Builds a stack bottom-up: disks first, then devices over them. A device may be
/// the member of several devices (two linear mappings of one disk); cycles cannot
/// be built, since members must exist first.
#[derive(Debug, Default)]
pub struct StackBuilder {
    pub(crate) devs: Vec<Dev>,
    counts: [u32; 3],
}

pub(crate) fn disk_name(i: u32) -> String {
    // sda..sdz, sdaa..: the kernel's sd naming.
    let mut n = i;
    let mut s = Vec::new();
    loop {
        s.push(b'a' + (n % 26) as u8);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    s.reverse();
    format!("sd{}", String::from_utf8(s).expect("ascii"))
}

impl StackBuilder {
    /// An empty stack.
    pub fn new() -> StackBuilder {
        StackBuilder::default()
    }

    /// Information on device `d`.
    pub fn info(&self, d: DevId) -> &DevInfo {
        &self.devs[d.idx()].info
    }

    fn name(&self, d: DevId) -> String {
        self.devs[d.idx()].info.name.clone()
    }

    fn push(
        &mut self,
        kind: DevKind,
        geometry: Geometry,
        limits: Limits,
        members: Vec<DevId>,
        driver: Driver,
    ) -> DevId {
        let k = kind as usize;
        let i = self.counts[k];
        self.counts[k] += 1;
        let (name, devno) = match kind {
            DevKind::Disk => (disk_name(i), (8, 16 * i)),
            DevKind::Striped => (format!("md{i}"), (9, i)),
            DevKind::Linear => (format!("dm-{i}"), (253, i)),
        };
        let id = DevId(self.devs.len() as u32);
        self.devs.push(Dev { info: DevInfo { name, devno, kind, geometry, limits, members }, driver });
        id
    }

    /// The name the next device of `kind` will get (for error messages).
    fn next_name(&self, kind: DevKind) -> String {
        let i = self.counts[kind as usize];
        match kind {
            DevKind::Disk => disk_name(i),
            DevKind::Striped => format!("md{i}"),
            DevKind::Linear => format!("dm-{i}"),
        }
    }

    /// Adds a disk of geometry `geo`, its BIOs handled by an engine configured `cfg`,
    /// in its initial state (every sequential zone EMPTY).
    pub fn disk(&mut self, geo: &Geometry, cfg: EngineConfig) -> DevId {
        let engine = Box::new(Engine::new_empty(geo, cfg));
        self.push(DevKind::Disk, geo.clone(), Limits::of_disk(geo), Vec::new(), Driver::Disk { engine })
    }

    /// The block size all of `members` share, or the error naming the one that
    /// differs (or that does not exist).
    fn common_lbs(&self, dev: &str, members: &[DevId]) -> Result<u32, StackError> {
        if let Some(&member) = members.iter().find(|m| m.idx() >= self.devs.len()) {
            return Err(StackError::UnknownMember { dev: dev.to_string(), member });
        }
        let first = self.info(members[0]);
        for &m in &members[1..] {
            let info = self.info(m);
            if info.geometry.lbs_bytes() != first.geometry.lbs_bytes() {
                return Err(StackError::BlockSize {
                    dev: dev.to_string(),
                    first: first.name.clone(),
                    first_lbs: first.geometry.lbs_bytes(),
                    member: info.name.clone(),
                    member_lbs: info.geometry.lbs_bytes(),
                });
            }
        }
        Ok(first.geometry.lbs_bytes())
    }

    /// Whether the members are zoned: all or none, else an error.
    fn common_zoned(&self, dev: &str, members: &[DevId]) -> Result<bool, StackError> {
        let zoned = self.info(members[0]).geometry.is_zoned();
        for &m in members {
            let g = &self.info(m).geometry;
            if g.is_zoned() != zoned {
                return Err(self.zone_err(dev, m, "mixes zoned and regular members".to_string()));
            }
            if zoned && g.zone_sectors() != self.info(members[0]).geometry.zone_sectors() {
                return Err(self.zone_err(
                    dev,
                    m,
                    format!(
                        "zone size {} sectors differs from {} sectors",
                        g.zone_sectors(),
                        self.info(members[0]).geometry.zone_sectors()
                    ),
                ));
            }
            if zoned && g.zone_cap_sectors() != self.info(members[0]).geometry.zone_cap_sectors() {
                return Err(self.zone_err(dev, m, "zone capacity differs from the first member's".to_string()));
            }
        }
        Ok(zoned)
    }

    fn zone_err(&self, dev: &str, m: DevId, why: String) -> StackError {
        StackError::ZoneModel { dev: dev.to_string(), member: self.name(m), why }
    }

    /// Stacks the members' limits into `own` and applies a user `max_sectors` (which
    /// may only lower what the members accept, as writing `max_sectors_kb` does).
    fn stacked_limits(
        &self,
        dev: &str,
        mut own: Limits,
        members: &[DevId],
        max_sectors: Option<u32>,
    ) -> Result<Limits, StackError> {
        for &m in members {
            own.stack(&self.info(m).limits);
        }
        if let Some(max) = max_sectors {
            let err = |why: String| StackError::MaxSectors { dev: dev.to_string(), max_sectors: max, why };
            if max == 0 || max % own.lbs_sectors != 0 {
                return Err(err(format!(
                    "must be a non-zero multiple of the block size ({} sectors)",
                    own.lbs_sectors
                )));
            }
            if max > own.max_sectors {
                return Err(err(format!("larger than the members accept ({} sectors)", own.max_sectors)));
            }
            own.max_sectors = max;
        }
        Ok(own)
    }

    fn geometry(dev: &str, p: &GeometryParams) -> Result<Geometry, StackError> {
        Geometry::new(p).map_err(|e: GeometryError| StackError::Geometry { dev: dev.to_string(), why: e.to_string() })
    }

    /// Adds a striped device (RAID0) over `members` with a stripe chunk of
    /// `chunk_sectors`: chunk `c` of the device is chunk `c / N` of member `c % N`.
    /// Each member contributes as many whole chunks as the smallest one has.
    ///
    /// Over zoned members (all zoned alike) the device is zoned: its zone `k` is zone
    /// `k` of every member, so its zone size is `N` times theirs, which needs `N` a
    /// power of two, and the chunk must divide the zone capacity so that a
    /// sequential write of the device is sequential on every member.
    pub fn striped(
        &mut self,
        members: &[DevId],
        chunk_sectors: u64,
        max_sectors: Option<u32>,
    ) -> Result<DevId, StackError> {
        let dev = self.next_name(DevKind::Striped);
        if members.is_empty() {
            return Err(StackError::NoMembers { dev });
        }
        let lbs_bytes = self.common_lbs(&dev, members)?;
        let lbs = u64::from(lbs_bytes >> SECTOR_SHIFT);
        let chunk_err = |why: &str| StackError::Chunk { dev: dev.clone(), chunk_sectors, why: why.to_string() };
        if chunk_sectors == 0 || !chunk_sectors.is_power_of_two() {
            return Err(chunk_err("must be a power of two"));
        }
        if chunk_sectors < lbs {
            return Err(chunk_err(&format!("smaller than one block ({lbs} sectors)")));
        }
        let zoned = self.common_zoned(&dev, members)?;
        let limits = self.stacked_limits(&dev, Limits::stacking(chunk_sectors), members, max_sectors)?;
        let n = members.len() as u64;
        let first = self.info(members[0]).geometry.clone();
        let mut p = GeometryParams {
            lbs_bytes,
            capacity_bytes: 0,
            zoned,
            max_sectors: limits.max_sectors,
            max_append_sectors: 0,
            write_zeroes_max_bytes: u64::from(limits.max_write_zeroes_sectors) << SECTOR_SHIFT,
            write_zeroes_unmap_max_hw_bytes: u64::from(limits.max_hw_wzeroes_unmap_sectors) << SECTOR_SHIFT,
            ..GeometryParams::default()
        };
        if zoned {
            let z = first.zone_sectors();
            if chunk_sectors > z || first.zone_cap_sectors() % chunk_sectors != 0 {
                return Err(chunk_err(&format!(
                    "must divide the members' zone size ({z} sectors) and zone capacity ({} sectors)",
                    first.zone_cap_sectors()
                )));
            }
            if !n.is_power_of_two() {
                return Err(StackError::Geometry {
                    dev,
                    why: format!("a zoned striped device needs a power-of-two number of members, not {n}"),
                });
            }
            let mut full_zones = u32::MAX;
            for &m in members {
                let g = &self.info(m).geometry;
                if g.nr_conv() != first.nr_conv() {
                    return Err(self.zone_err(&dev, m, "number of conventional zones differs".to_string()));
                }
                let whole = g.nr_sectors() / z;
                full_zones = full_zones.min(whole as u32);
                (p.max_open, p.max_active) =
                    (min_not_zero(p.max_open, g.max_open()), min_not_zero(p.max_active, g.max_active()));
            }
            if full_zones <= first.nr_conv() {
                return Err(StackError::Geometry { dev, why: "no whole sequential zone on every member".to_string() });
            }
            if p.max_active != 0 && p.max_open > p.max_active {
                p.max_open = p.max_active;
            }
            p.zone_size_bytes = (z * n) << SECTOR_SHIFT;
            p.zone_capacity_bytes = (first.zone_cap_sectors() * n) << SECTOR_SHIFT;
            p.nr_conv = first.nr_conv();
            p.capacity_bytes = (u64::from(full_zones) * z * n) << SECTOR_SHIFT;
        } else {
            let smallest = members.iter().map(|&m| self.info(m).geometry.nr_sectors()).min().expect("members");
            let rows = smallest / chunk_sectors;
            if rows == 0 {
                return Err(chunk_err(&format!("larger than the smallest member ({smallest} sectors)")));
            }
            p.capacity_bytes = (rows * chunk_sectors * n) << SECTOR_SHIFT;
        }
        let geometry = Self::geometry(&dev, &p)?;
        let driver = Driver::Striped { members: members.to_vec(), chunk_sectors };
        Ok(self.push(DevKind::Striped, geometry, limits, members.to_vec(), driver))
    }

    /// Target `i` of linear device `dev` on its member: the member's geometry, and
    /// the target's length and end there, checked to be whole blocks inside it.
    fn linear_extent(&self, dev: &str, i: usize, t: &LinearTarget) -> Result<(Geometry, u64, u64), StackError> {
        let g = self.info(t.dev).geometry.clone();
        let err = |why: String| StackError::Target { dev: dev.to_string(), target: i, member: self.name(t.dev), why };
        let lbs = u64::from(g.lbs_sectors());
        if t.offset.0 >= g.nr_sectors() {
            return Err(err(format!("offset {} is past the member's end ({} sectors)", t.offset, g.nr_sectors())));
        }
        let len = t.len_sectors.unwrap_or(g.nr_sectors() - t.offset.0);
        if len == 0 || t.offset.0 % lbs != 0 || len % lbs != 0 {
            return Err(err(format!("offset {} and length {len} must be non-zero multiples of the block", t.offset)));
        }
        let end = t.offset.0.checked_add(len).filter(|&e| e <= g.nr_sectors());
        let Some(end) = end else {
            return Err(err(format!("{}+{len} runs past the member's end ({} sectors)", t.offset, g.nr_sectors())));
        };
        Ok((g, len, end))
    }

    /// Adds a linear device (dm-linear) that concatenates `targets`.
    ///
    /// Over zoned members it is zoned with their zone model: every target must start
    /// and end on zone boundaries (only the last may end with a member's smaller last
    /// zone), and conventional zones may only come before sequential ones.
    pub fn linear(&mut self, targets: &[LinearTarget], max_sectors: Option<u32>) -> Result<DevId, StackError> {
        let dev = self.next_name(DevKind::Linear);
        if targets.is_empty() {
            return Err(StackError::NoMembers { dev });
        }
        let members: Vec<DevId> = targets.iter().map(|t| t.dev).collect();
        let lbs_bytes = self.common_lbs(&dev, &members)?;
        let zoned = self.common_zoned(&dev, &members)?;
        let limits = self.stacked_limits(&dev, Limits::stacking(0), &members, max_sectors)?;
        let mut placed = Vec::with_capacity(targets.len());
        let mut start = 0u64;
        let (mut nr_conv, mut seen_seq) = (0u32, false);
        let mut p = GeometryParams {
            lbs_bytes,
            zoned,
            max_sectors: limits.max_sectors,
            write_zeroes_max_bytes: u64::from(limits.max_write_zeroes_sectors) << SECTOR_SHIFT,
            write_zeroes_unmap_max_hw_bytes: u64::from(limits.max_hw_wzeroes_unmap_sectors) << SECTOR_SHIFT,
            ..GeometryParams::default()
        };
        p.max_append_sectors = u32::MAX;
        for (i, t) in targets.iter().enumerate() {
            let (g, len, end) = self.linear_extent(&dev, i, t)?;
            let err = |why: String| StackError::Target { dev: dev.clone(), target: i, member: self.name(t.dev), why };
            if zoned {
                let z = g.zone_sectors();
                let last = i + 1 == targets.len();
                if t.offset.0 % z != 0 || (end % z != 0 && !(last && end == g.nr_sectors())) {
                    return Err(err(format!(
                        "{}+{len} is not on zone boundaries (zone size {z} sectors); a zoned linear mapping maps whole zones",
                        t.offset
                    )));
                }
                for zi in g.zone_no(t.offset).0..=g.zone_no(Sector(end - 1)).0 {
                    let conv = g.zone_is_conv(ZoneNo(zi));
                    if conv && seen_seq {
                        return Err(err(format!(
                            "maps conventional zone {zi} after sequential zones; conventional zones must come first"
                        )));
                    }
                    seen_seq |= !conv;
                    nr_conv += u32::from(conv);
                }
                p.zone_size_bytes = z << SECTOR_SHIFT;
                p.zone_capacity_bytes = g.zone_cap_sectors() << SECTOR_SHIFT;
                p.max_open = min_not_zero(p.max_open, g.max_open());
                p.max_active = min_not_zero(p.max_active, g.max_active());
                p.max_append_sectors = p.max_append_sectors.min(g.append_limit_sectors());
            }
            placed.push(Target { start: Sector(start), len, dev: t.dev, offset: t.offset });
            start += len;
        }
        if zoned && !seen_seq {
            return Err(StackError::Geometry { dev, why: "maps only conventional zones".to_string() });
        }
        if p.max_active != 0 && p.max_open > p.max_active {
            p.max_open = p.max_active;
        }
        p.nr_conv = nr_conv;
        p.capacity_bytes = start << SECTOR_SHIFT;
        if !zoned {
            p.max_append_sectors = 0;
        }
        let geometry = Self::geometry(&dev, &p)?;
        Ok(self.push(DevKind::Linear, geometry, limits, members, Driver::Linear { targets: placed }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(params: &str) -> Geometry {
        let mut p = crate::params::DeviceParams::default();
        p.apply(params).unwrap();
        p.validate().unwrap()
    }

    #[test]
    fn names_follow_the_kernel() {
        assert_eq!(disk_name(0), "sda");
        assert_eq!(disk_name(25), "sdz");
        assert_eq!(disk_name(26), "sdaa");
        assert_eq!(disk_name(27), "sdab");
    }

    #[test]
    fn write_zeroes_and_unmap_pass_through_only_if_every_member_has_them() {
        let mut b = StackBuilder::new();
        let unmaps = geo("size=64,zoned=0");
        let writes = geo("size=64,zoned=0,write_zeroes_unmap_max_hw_bytes=0");
        let none = geo("size=64,zoned=0,write_zeroes_max_bytes=0");
        let u: Vec<DevId> = (0..2).map(|_| b.disk(&unmaps, EngineConfig::default())).collect();
        let w = b.disk(&writes, EngineConfig::default());
        let n = b.disk(&none, EngineConfig::default());
        let all_unmap = b.striped(&u, 128, None).unwrap();
        assert_eq!(b.info(all_unmap).geometry.max_hw_wzeroes_unmap_sectors(), unmaps.max_write_zeroes_sectors());
        let mixed = b.striped(&[u[0], w], 128, None).unwrap();
        let g = &b.info(mixed).geometry;
        assert_eq!((g.max_write_zeroes_sectors(), g.max_hw_wzeroes_unmap_sectors()), (65536, 0));
        let t = |d: DevId| LinearTarget { dev: d, offset: Sector(0), len_sectors: None };
        let lin = b.linear(&[t(u[1]), t(n)], None).unwrap();
        assert_eq!(b.info(lin).geometry.max_write_zeroes_sectors(), 0);
    }

    #[test]
    fn striped_mapping_and_limits() {
        let mut b = StackBuilder::new();
        let g = geo("size=64,zoned=0,max_sectors=2048");
        let d: Vec<DevId> = (0..4).map(|_| b.disk(&g, EngineConfig::default())).collect();
        let s = b.striped(&d, 128, None).unwrap();
        let info = b.info(s);
        assert_eq!(info.name, "md0");
        let wz = g.max_write_zeroes_sectors();
        let want = Limits {
            max_sectors: 2048,
            chunk_sectors: 128,
            lbs_sectors: 1,
            max_write_zeroes_sectors: wz,
            max_hw_wzeroes_unmap_sectors: wz,
        };
        assert_eq!(info.limits, want);
        assert_eq!(info.geometry.max_write_zeroes_sectors(), wz, "write zeroes passes through");
        assert_eq!(info.geometry.nr_sectors(), 4 * (64 << 11));
        let drv = &b.devs[s.idx()].driver;
        assert_eq!(drv.map(Sector(0)), (d[0], Sector(0), 128));
        assert_eq!(drv.map(Sector(130)), (d[1], Sector(2), 126));
        assert_eq!(drv.map(Sector(4 * 128 + 5)), (d[0], Sector(128 + 5), 123));
    }

    #[test]
    fn zoned_striped_and_linear() {
        let mut b = StackBuilder::new();
        let g = geo("size=64,zone_size=4,zone_nr_conv=1");
        let d: Vec<DevId> = (0..2).map(|_| b.disk(&g, EngineConfig::default())).collect();
        let s = b.striped(&d, 1024, None).unwrap();
        let sg = &b.info(s).geometry;
        assert!(sg.is_zoned());
        assert_eq!(sg.zone_sectors(), 2 * 8192);
        assert_eq!(sg.nr_zones(), 16);
        assert_eq!(sg.nr_conv(), 1);
        let e = b.striped(&d, 3000, None).unwrap_err();
        assert!(matches!(e, StackError::Chunk { .. }), "{e}");
        let l = b
            .linear(
                &[
                    LinearTarget { dev: s, offset: Sector(0), len_sectors: Some(4 * 16384) },
                    LinearTarget { dev: s, offset: Sector(8 * 16384), len_sectors: None },
                ],
                None,
            )
            .unwrap();
        let lg = &b.info(l).geometry;
        assert_eq!(lg.nr_zones(), 12);
        assert_eq!(lg.nr_conv(), 1);
        assert_eq!(b.info(l).limits.chunk_sectors, 1024);
        let bad = b.linear(&[LinearTarget { dev: s, offset: Sector(100), len_sectors: Some(16384) }], None);
        assert!(matches!(bad, Err(StackError::Target { .. })), "{bad:?}");
        let conv_after = b.linear(
            &[
                LinearTarget { dev: s, offset: Sector(16384), len_sectors: Some(16384) },
                LinearTarget { dev: s, offset: Sector(0), len_sectors: Some(16384) },
            ],
            None,
        );
        assert!(matches!(conv_after, Err(StackError::Target { .. })), "{conv_after:?}");
    }

    #[test]
    fn refusals() {
        let mut b = StackBuilder::new();
        let a = b.disk(&geo("size=64,zoned=0"), EngineConfig::default());
        let c = b.disk(&geo("size=64,zoned=0,blocksize=4096"), EngineConfig::default());
        let z = b.disk(&geo("size=64,zone_size=4"), EngineConfig::default());
        assert!(matches!(b.striped(&[a, c], 128, None), Err(StackError::BlockSize { .. })));
        assert!(matches!(b.striped(&[a, z], 128, None), Err(StackError::ZoneModel { .. })));
        assert!(matches!(b.striped(&[a], 96, None), Err(StackError::Chunk { .. })));
        assert!(matches!(b.striped(&[], 128, None), Err(StackError::NoMembers { .. })));
        assert!(matches!(b.striped(&[a, DevId(99)], 128, None), Err(StackError::UnknownMember { .. })));
        let t = LinearTarget { dev: DevId(99), offset: Sector(0), len_sectors: None };
        assert!(matches!(b.linear(&[t], None), Err(StackError::UnknownMember { .. })));
        assert!(matches!(b.striped(&[c], 4, None), Err(StackError::Chunk { .. })));
        assert!(matches!(b.striped(&[a], 128, Some(100_000)), Err(StackError::MaxSectors { .. })));
        let three: Vec<DevId> = (0..3).map(|_| b.disk(&geo("size=64,zone_size=4"), EngineConfig::default())).collect();
        assert!(matches!(b.striped(&three, 128, None), Err(StackError::Geometry { .. })));
        let msg = b.striped(&[a, c], 128, None).unwrap_err().to_string();
        assert!(msg.contains("md0") && msg.contains("sdb") && msg.contains("4096"), "{msg}");
    }
}
