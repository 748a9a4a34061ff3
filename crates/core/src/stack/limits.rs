//! Queue limits of stacked devices: the part of the kernel's `struct queue_limits`
//! that splitting uses, and how a stacked device derives them from its members
//! (`blk_set_stacking_limits()` then `blk_stack_limits()` once per member).

use crate::engine::SplitLimits;
use crate::geometry::Geometry;
use crate::units::Sector;

/// What a device splits BIOs at, and what it tells whoever stacks on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// Largest BIO the device takes in one piece, in sectors (a multiple of
    /// `lbs_sectors`). The block layer's generic split (`bio_split_to_limits()`)
    /// cuts at it.
    pub max_sectors: u32,
    /// Boundary no piece may cross, in sectors (a power of two), 0 for none: the zone
    /// size of a zoned disk, the stripe chunk of a striped device, and for a stacked
    /// device the greatest common divisor of its own and its members' boundaries, so
    /// that a piece that respects it respects every member's.
    pub chunk_sectors: u64,
    /// Logical block size in sectors: the largest of the members'.
    pub lbs_sectors: u32,
    /// Largest WRITE_ZEROES, in sectors: the smallest of the members' (0 if any
    /// member has none: the feature passes through only if every member has it).
    pub max_write_zeroes_sectors: u32,
    /// Largest WRITE_ZEROES the device may deallocate, in sectors: the smallest of
    /// the members' (0 if any member cannot unmap).
    pub max_hw_wzeroes_unmap_sectors: u32,
}

impl Limits {
    /// The limits of a disk: its `max_sectors`, its zone size as `chunk_sectors`.
    pub fn of_disk(geo: &Geometry) -> Limits {
        Limits {
            max_sectors: geo.max_sectors(),
            chunk_sectors: geo.zone_sectors(),
            lbs_sectors: geo.lbs_sectors(),
            max_write_zeroes_sectors: geo.max_write_zeroes_sectors(),
            max_hw_wzeroes_unmap_sectors: geo.max_hw_wzeroes_unmap_sectors(),
        }
    }

    /// The starting point of a stacked device before its members are stacked in, as
    /// `blk_set_stacking_limits()`: no size limit, no boundary, 512-byte blocks.
    /// `chunk_sectors` is the device's own boundary (its stripe chunk), 0 for none.
    pub fn stacking(chunk_sectors: u64) -> Limits {
        Limits {
            max_sectors: 0,
            chunk_sectors,
            lbs_sectors: 1,
            max_write_zeroes_sectors: u32::MAX,
            max_hw_wzeroes_unmap_sectors: u32::MAX,
        }
    }

    /// Stacks member limits `bottom` into `self`, as `blk_stack_limits()`:
    /// `max_sectors` is the smallest non-zero one, `chunk_sectors` the greatest
    /// common divisor of the non-zero ones, the block size the largest.
    pub fn stack(&mut self, bottom: &Limits) {
        self.max_sectors = min_not_zero(self.max_sectors, bottom.max_sectors);
        if bottom.chunk_sectors != 0 {
            self.chunk_sectors = gcd(self.chunk_sectors, bottom.chunk_sectors);
        }
        self.lbs_sectors = self.lbs_sectors.max(bottom.lbs_sectors);
        self.max_write_zeroes_sectors = self.max_write_zeroes_sectors.min(bottom.max_write_zeroes_sectors);
        self.max_hw_wzeroes_unmap_sectors = self.max_hw_wzeroes_unmap_sectors.min(bottom.max_hw_wzeroes_unmap_sectors);
    }

    /// The block layer's generic split of a bio-based device: `max_sectors` only.
    /// The boundary is the driver's business (see [`Limits::boundary_split`]); that
    /// the two are separate steps, each resubmitting its remainder, is what makes
    /// split order matter.
    pub fn generic_split(&self) -> SplitLimits {
        SplitLimits { max_sectors: self.max_sectors, chunk_sectors: 0, lbs_sectors: self.lbs_sectors }
    }

    /// The generic split of a BIO of operation `op`: WRITE_ZEROES carries no data and
    /// is cut at `max_write_zeroes_sectors` instead of `max_sectors`.
    pub fn generic_split_for(&self, op: crate::bio::Op) -> SplitLimits {
        match op {
            crate::bio::Op::WriteZeroes if self.max_write_zeroes_sectors != 0 => {
                let lbs = self.lbs_sectors;
                let max = self.max_write_zeroes_sectors - self.max_write_zeroes_sectors % lbs;
                SplitLimits { max_sectors: max.max(lbs), chunk_sectors: 0, lbs_sectors: lbs }
            }
            _ => self.generic_split(),
        }
    }

    /// The driver's own split: at `chunk_sectors` boundaries, any length.
    pub fn boundary_split(&self) -> SplitLimits {
        let lbs = self.lbs_sectors;
        SplitLimits { max_sectors: u32::MAX - u32::MAX % lbs, chunk_sectors: self.chunk_sectors, lbs_sectors: lbs }
    }

    /// Sectors from `sector` to the next `chunk_sectors` boundary (`u64::MAX` if
    /// there is none).
    pub fn to_boundary(&self, sector: Sector) -> u64 {
        if self.chunk_sectors == 0 {
            return u64::MAX;
        }
        self.chunk_sectors - (sector.0 & (self.chunk_sectors - 1))
    }
}

/// The smaller of two limits where 0 means "no limit" (the kernel's `min_not_zero`).
pub fn min_not_zero(a: u32, b: u32) -> u32 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (x, y) => x.min(y),
    }
}

/// Greatest common divisor, with `gcd(0, x) == x`.
pub fn gcd(a: u64, b: u64) -> u64 {
    let (mut a, mut b) = (a, b);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(max_sectors: u32, chunk_sectors: u64, lbs_sectors: u32, wz: u32, unmap: u32) -> Limits {
        Limits {
            max_sectors,
            chunk_sectors,
            lbs_sectors,
            max_write_zeroes_sectors: wz,
            max_hw_wzeroes_unmap_sectors: unmap,
        }
    }

    #[test]
    fn stacking_follows_blk_stack_limits() {
        let mut t = Limits::stacking(128);
        t.stack(&lim(2048, 0, 1, 65536, 65536));
        assert_eq!(t, lim(2048, 128, 1, 65536, 65536));
        t.stack(&lim(1024, 64, 8, 8192, 0));
        // The smallest write-zeroes limit; unmap only if every member unmaps.
        assert_eq!(t, lim(1024, 64, 8, 8192, 0));
        let mut u = Limits::stacking(0);
        u.stack(&lim(512, 4096, 1, 0, 0));
        assert_eq!(u.chunk_sectors, 4096);
        assert_eq!(u.max_write_zeroes_sectors, 0, "a member without WRITE_ZEROES takes it away");
        assert_eq!(min_not_zero(0, 0), 0);
        assert_eq!(gcd(0, 0), 0);
        assert_eq!(gcd(96, 64), 32);
    }

    #[test]
    fn two_steps() {
        let l = lim(2048, 1024, 8, 65536, 0);
        assert_eq!(l.generic_split().max_piece_at(Sector(512)), 2048);
        assert_eq!(l.generic_split_for(crate::bio::Op::WriteZeroes).max_piece_at(Sector(512)), 65536);
        assert_eq!(l.generic_split_for(crate::bio::Op::Write).max_piece_at(Sector(512)), 2048);
        assert_eq!(l.boundary_split().max_piece_at(Sector(512)), 512);
        assert_eq!(l.to_boundary(Sector(1000)), 24);
        assert_eq!(Limits::stacking(0).to_boundary(Sector(5)), u64::MAX);
    }
}
