//! A record's frame on the device: a header, the payload, zeroes up to the next
//! logical block (a zone append carries whole blocks).
//!
//! The header, little-endian, 32 bytes:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `ZLOG` |
//! | 4..8 | CRC-32 of bytes 8..32 and the payload |
//! | 8..12 | payload length |
//! | 12..16 | zero (reserved) |
//! | 16..24 | sequence number |
//! | 24..32 | the byte offset of the zone it was appended to |
//!
//! The zone's offset binds a frame to its zone: a frame copied elsewhere (a payload
//! that holds a record of another zone) does not check.

/// The magic at the start of every frame.
pub const MAGIC: [u8; 4] = *b"ZLOG";
/// The header's bytes.
pub const HEADER: u64 = 32;

/// A frame's header, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub crc: u32,
    pub len: u64,
    pub seq: u64,
}

/// The bytes a frame of `payload` bytes takes on a device of `block`-byte blocks.
pub(crate) fn frame_len(payload: u64, block: u64) -> u64 {
    (HEADER + payload).div_ceil(block) * block
}

/// The frame of record `seq` with `payload`, appended to the zone at `zone`.
pub(crate) fn encode(seq: u64, zone: u64, payload: &[u8], block: u64) -> Vec<u8> {
    let mut f = vec![0u8; frame_len(payload.len() as u64, block) as usize];
    f[0..4].copy_from_slice(&MAGIC);
    f[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    f[16..24].copy_from_slice(&seq.to_le_bytes());
    f[24..32].copy_from_slice(&zone.to_le_bytes());
    f[HEADER as usize..HEADER as usize + payload.len()].copy_from_slice(payload);
    let crc = checksum(&f[8..HEADER as usize], payload);
    f[4..8].copy_from_slice(&crc.to_le_bytes());
    f
}

/// The header at the start of `block` if it is one of a record of the zone at
/// `zone` (magic, zone, reserved bytes); its checksum is checked with the payload.
pub(crate) fn header(block: &[u8], zone: u64) -> Option<Header> {
    let word =
        |r: std::ops::Range<usize>| block.get(r).map(|b| b.iter().rev().fold(0u64, |a, &x| a << 8 | u64::from(x)));
    if block.get(0..4)? != MAGIC || word(12..16)? != 0 || word(24..32)? != zone {
        return None;
    }
    Some(Header { crc: word(4..8)? as u32, len: word(8..12)?, seq: word(16..24)? })
}

/// The payload of the frame `frame` whose header is `h`, if its checksum holds.
pub(crate) fn payload<'a>(frame: &'a [u8], h: &Header) -> Option<&'a [u8]> {
    let end = usize::try_from(HEADER + h.len).ok()?;
    let payload = frame.get(HEADER as usize..end)?;
    (checksum(&frame[8..HEADER as usize], payload) == h.crc).then_some(payload)
}

fn checksum(header_tail: &[u8], payload: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(header_tail);
    c.update(payload);
    c.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_any_flipped_bit_is_caught() {
        let f = encode(7, 1 << 20, b"hello", 512);
        assert_eq!(f.len(), 512);
        let h = header(&f, 1 << 20).unwrap();
        assert_eq!((h.len, h.seq), (5, 7));
        assert_eq!(payload(&f, &h), Some(&b"hello"[..]));
        assert_eq!(header(&f, 2 << 20), None, "another zone's frame");
        for bit in 0..(HEADER as usize + 5) * 8 {
            let mut g = f.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            let ok = header(&g, 1 << 20).and_then(|h| payload(&g, &h).map(<[u8]>::to_vec));
            assert_eq!(ok, None, "bit {bit} flipped");
        }
    }

    #[test]
    fn frames_take_whole_blocks() {
        assert_eq!(frame_len(0, 512), 512);
        assert_eq!(frame_len(480, 512), 512);
        assert_eq!(frame_len(481, 512), 1024);
        assert_eq!(frame_len(4064, 4096), 4096);
    }
}
