//! The data pattern simulated writes carry, so that a read (or a peek at the device)
//! says which write put a sector there and which sector of that write it was.
//!
//! Sector `k` of a BIO stamped `stamp` holds 32 pairs of words
//! `[stamp, (k << 8) | m]`, `m` the pair number. A sector misplaced by a wrong split
//! offset, or an append reported at the wrong sector, reads back with the wrong `k`
//! or the wrong stamp.

use zblk_core::units::SECTOR_SIZE;

/// Where a sector's content comes from: the stamp of the BIO and the sector's index
/// in it.
pub type Origin = (u64, u32);

/// The stamp of a buffer of zeroes (what `dd if=/dev/zero` writes): no pattern.
pub const ZEROES: u64 = 0;

/// Fills `buf` (whole sectors) with the pattern of `stamp` from BIO sector `first_k`
/// (with zeroes for [`ZEROES`]).
pub fn fill(stamp: u64, first_k: u32, buf: &mut [u8]) {
    if stamp == ZEROES {
        buf.fill(0);
        return;
    }
    for (i, sector) in buf.chunks_exact_mut(SECTOR_SIZE as usize).enumerate() {
        let k = u64::from(first_k) + i as u64;
        for (m, pair) in sector.chunks_exact_mut(16).enumerate() {
            pair[..8].copy_from_slice(&stamp.to_le_bytes());
            pair[8..].copy_from_slice(&((k << 8) | m as u64).to_le_bytes());
        }
    }
}

/// What one sector holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// All zeroes.
    Zeroes,
    /// A pattern sector: sector `k` of the write stamped `stamp`.
    Data(Origin),
    /// Anything else: a torn or foreign sector.
    Garbage,
}

/// Decodes one sector.
pub fn decode(sector: &[u8]) -> Decoded {
    assert_eq!(sector.len() as u64, SECTOR_SIZE);
    if sector.iter().all(|&b| b == 0) {
        return Decoded::Zeroes;
    }
    let stamp = u64::from_le_bytes(sector[..8].try_into().expect("8 bytes"));
    let k = u64::from_le_bytes(sector[8..16].try_into().expect("8 bytes")) >> 8;
    let Ok(k) = u32::try_from(k) else { return Decoded::Garbage };
    let mut expect = [0u8; SECTOR_SIZE as usize];
    fill(stamp, k, &mut expect);
    if expect.as_slice() == sector { Decoded::Data((stamp, k)) } else { Decoded::Garbage }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut buf = vec![0u8; 2048];
        fill(42, 7, &mut buf);
        for (i, s) in buf.chunks(512).enumerate() {
            assert_eq!(decode(s), Decoded::Data((42, 7 + i as u32)));
        }
        assert_eq!(decode(&[0u8; 512]), Decoded::Zeroes);
        buf[100] ^= 1;
        assert_eq!(decode(&buf[..512]), Decoded::Garbage);
    }
}
