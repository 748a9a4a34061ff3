//! Units: sectors, zone numbers and byte sizes, kept apart by type.
//!
//! The block layer counts in 512-byte sectors whatever the logical block size is, so
//! every position on a device is a [`Sector`]; lengths of I/Os are `nr_sectors`
//! (`u32`, as the kernel's `bio_sectors()`), and byte quantities carry `_bytes` in
//! their names. Conversions are explicit and checked.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// Size of a sector in bytes: the unit of every address, whatever the block size.
pub const SECTOR_SIZE: u64 = 512;
/// `log2(SECTOR_SIZE)`.
pub const SECTOR_SHIFT: u32 = 9;

/// A position on a device, in 512-byte sectors from its start.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Sector(pub u64);

impl Sector {
    /// Sector zero.
    pub const ZERO: Sector = Sector(0);

    /// The byte offset of this sector.
    pub fn bytes(self) -> u64 {
        self.0 << SECTOR_SHIFT
    }

    /// The sector at `bytes`, if `bytes` is a whole number of sectors.
    pub fn from_bytes(bytes: u64) -> Option<Sector> {
        (bytes % SECTOR_SIZE == 0).then_some(Sector(bytes >> SECTOR_SHIFT))
    }

    /// Distance in sectors from `earlier` to `self`; panics if `earlier` is after `self`.
    pub fn since(self, earlier: Sector) -> u64 {
        assert!(earlier.0 <= self.0, "sector {earlier} is after {self}");
        self.0 - earlier.0
    }
}

impl Add<u64> for Sector {
    type Output = Sector;
    fn add(self, nr_sectors: u64) -> Sector {
        Sector(self.0 + nr_sectors)
    }
}

impl AddAssign<u64> for Sector {
    fn add_assign(&mut self, nr_sectors: u64) {
        self.0 += nr_sectors;
    }
}

impl Sub<u64> for Sector {
    type Output = Sector;
    fn sub(self, nr_sectors: u64) -> Sector {
        Sector(self.0 - nr_sectors)
    }
}

impl fmt::Debug for Sector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

impl fmt::Display for Sector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The number of a zone, counted from zero at the device start.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ZoneNo(pub u32);

impl ZoneNo {
    /// The zone number as an index into per-zone arrays.
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for ZoneNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "z{}", self.0)
    }
}

impl fmt::Display for ZoneNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Bytes to sectors; `None` when `bytes` is not a whole number of sectors.
pub fn bytes_to_sectors(bytes: u64) -> Option<u64> {
    (bytes % SECTOR_SIZE == 0).then_some(bytes >> SECTOR_SHIFT)
}

/// Sectors to bytes.
pub fn sectors_to_bytes(nr_sectors: u64) -> u64 {
    nr_sectors << SECTOR_SHIFT
}

/// A size with an optional binary suffix failed to parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size '{text}': {why}")]
pub struct SizeError {
    /// The text that was given.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Parses a byte size as fio and util-linux write them: a number with an optional
/// suffix `k`, `m`, `g`, `t`, `p` (powers of 1024, as fio's default `kb_base=1024`),
/// optionally followed by `i` and/or `b` (`4k`, `4KiB`, `1M`, `1MB` are all binary).
/// A plain number is bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let err = |why| SizeError { text: text.to_string(), why };
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    if digits.is_empty() {
        return Err(err("expected a number, e.g. 4096, 4k, 1M"));
    }
    let value: u64 = digits.parse().map_err(|_| err("number too large"))?;
    let suffix = suffix.to_ascii_lowercase();
    // One unit letter, then at most one of `i`, `b`, `ib` (4k, 4K, 4Ki, 4kb, 4KiB);
    // `b` alone is bytes. Anything else ("4kbb", "4kii", "4ib") is refused.
    let unit = ["ib", "i", "b"].iter().find_map(|s| suffix.strip_suffix(s)).unwrap_or(&suffix);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return Err(err("unknown suffix (use k, M, G, T, P)")),
    };
    if unit.is_empty() && !matches!(suffix.as_str(), "" | "b") {
        return Err(err("unknown suffix (use k, M, G, T, P)"));
    }
    value.checked_mul(1u64 << shift).ok_or_else(|| err("size too large"))
}

/// Formats a byte count with the largest binary unit that divides it exactly
/// (`4096` → `4KiB`), falling back to bytes.
pub fn format_bytes_exact(bytes: u64) -> String {
    const UNITS: [(&str, u32); 5] = [("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (name, shift) in UNITS {
        if bytes >= (1 << shift) && bytes % (1 << shift) == 0 {
            return format!("{}{}", bytes >> shift, name);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_fio() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("4kb").unwrap(), 4096);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("30T").unwrap(), 30 << 40);
        assert_eq!(parse_size("512b").unwrap(), 512);
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("4x").is_err());
        assert!(parse_size("4kk").is_err());
        assert_eq!(parse_size("4Ki").unwrap(), 4096);
        for garbage in ["4kbb", "4kii", "4ib", "4kbi", "4i", "4bb", "4k4", "4 k b"] {
            assert!(parse_size(garbage).is_err(), "{garbage}");
        }
        assert!(parse_size("-4k").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("16777216P").is_err());
    }

    #[test]
    fn sector_conversions() {
        assert_eq!(Sector::from_bytes(4096), Some(Sector(8)));
        assert_eq!(Sector::from_bytes(4095), None);
        assert_eq!(Sector(8).bytes(), 4096);
        assert_eq!(Sector(10).since(Sector(4)), 6);
        assert_eq!(format_bytes_exact(4096), "4KiB");
        assert_eq!(format_bytes_exact(1 << 20), "1MiB");
        assert_eq!(format_bytes_exact(1000), "1000B");
    }

    #[test]
    #[should_panic(expected = "is after")]
    fn since_backwards_is_a_bug() {
        let _ = Sector(1).since(Sector(2));
    }
}
