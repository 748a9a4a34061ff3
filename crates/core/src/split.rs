//! Splitting a BIO at the device's limits, as the kernel's `bio_split_to_limits()`:
//! no request longer than `max_sectors`, none crossing a `chunk_sectors` boundary
//! (the zone size on a zoned device, the stripe chunk on a striped one).
//!
//! A pure helper: it yields `(offset_in_bio, nr_sectors)` pieces in ascending order
//! and allocates nothing.

use crate::units::Sector;

/// The limits a BIO is split at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitLimits {
    /// Largest piece, in sectors. Must be a multiple of `lbs_sectors`.
    pub max_sectors: u32,
    /// Pieces never cross a multiple of this (a power of two); 0 for none.
    pub chunk_sectors: u64,
    /// Logical block size in sectors: every piece stays aligned to it.
    pub lbs_sectors: u32,
}

impl SplitLimits {
    /// The limits of a device geometry: `max_sectors`, zone boundaries.
    pub fn of(geo: &crate::geometry::Geometry) -> SplitLimits {
        SplitLimits {
            max_sectors: geo.max_sectors(),
            chunk_sectors: geo.zone_sectors(),
            lbs_sectors: geo.lbs_sectors(),
        }
    }

    /// The limits of WRITE_ZEROES on a device: `write_zeroes_max_bytes` (it carries
    /// no data, so `max_sectors` does not apply), zone boundaries. Only meaningful
    /// when the device has WRITE_ZEROES.
    pub fn of_write_zeroes(geo: &crate::geometry::Geometry) -> SplitLimits {
        let max = geo.max_write_zeroes_sectors();
        SplitLimits {
            max_sectors: if max == 0 { geo.max_sectors() } else { max },
            chunk_sectors: geo.zone_sectors(),
            lbs_sectors: geo.lbs_sectors(),
        }
    }

    /// The largest piece that may start at `sector`: the kernel's `get_max_io_size()`.
    pub fn max_piece_at(&self, sector: Sector) -> u32 {
        let mut max = u64::from(self.max_sectors);
        if self.chunk_sectors != 0 {
            assert!(self.chunk_sectors.is_power_of_two(), "chunk_sectors {} not a power of two", self.chunk_sectors);
            let to_boundary = self.chunk_sectors - (sector.0 & (self.chunk_sectors - 1));
            max = max.min(to_boundary);
        }
        let lbs = u64::from(self.lbs_sectors);
        // Logical blocks are 512 or 4096 bytes: a mask, not a division, on the hot path.
        max = if lbs.is_power_of_two() { max & !(lbs - 1) } else { max - max % lbs };
        assert!(max > 0, "no room for a block at {sector} with {self:?}");
        max as u32
    }

    /// Whether a range must be split.
    pub fn needs_split(&self, sector: Sector, nr_sectors: u32) -> bool {
        nr_sectors > self.max_piece_at(sector)
    }

    /// The pieces of `[sector, sector + nr_sectors)`, in ascending order.
    pub fn pieces(&self, sector: Sector, nr_sectors: u32) -> Pieces {
        Pieces { limits: *self, sector, done: 0, nr_sectors }
    }
}

/// Iterator over the pieces of a split range: `(offset_in_bio, nr_sectors)`.
#[derive(Clone, Debug)]
pub struct Pieces {
    limits: SplitLimits,
    sector: Sector,
    done: u32,
    nr_sectors: u32,
}

impl Iterator for Pieces {
    type Item = (u32, u32);

    fn next(&mut self) -> Option<(u32, u32)> {
        if self.done == self.nr_sectors {
            return None;
        }
        let at = self.sector + u64::from(self.done);
        let n = self.limits.max_piece_at(at).min(self.nr_sectors - self.done);
        let piece = (self.done, n);
        self.done += n;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_chunk_and_max() {
        let l = SplitLimits { max_sectors: 2048, chunk_sectors: 4096, lbs_sectors: 8 };
        let p: Vec<_> = l.pieces(Sector(3072), 4096).collect();
        assert_eq!(p, vec![(0, 1024), (1024, 2048), (3072, 1024)]);
        assert!(!l.needs_split(Sector(0), 2048));
        assert!(l.needs_split(Sector(3072), 2048));
    }

    #[test]
    fn no_chunk_means_max_only() {
        let l = SplitLimits { max_sectors: 8, chunk_sectors: 0, lbs_sectors: 1 };
        let p: Vec<_> = l.pieces(Sector(5), 20).collect();
        assert_eq!(p, vec![(0, 8), (8, 8), (16, 4)]);
    }

    #[test]
    fn pieces_cover_the_range_exactly() {
        for start in 0..64u64 {
            for len in 1..100u32 {
                let l = SplitLimits { max_sectors: 12, chunk_sectors: 16, lbs_sectors: 1 };
                let mut next = 0;
                for (off, n) in l.pieces(Sector(start), len) {
                    assert_eq!(off, next);
                    assert!(n <= 12);
                    let s = start + u64::from(off);
                    assert_eq!(s / 16, (s + u64::from(n) - 1) / 16, "piece crosses a chunk");
                    next += n;
                }
                assert_eq!(next, len);
            }
        }
    }
}
