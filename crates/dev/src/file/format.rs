//! The on-disk format of a zoned image: one regular file holding a superblock, two
//! durable zone tables, a live zone table and the data region.
//!
//! ```text
//! 0                 superblock (4 KiB): magic, version, geometry, layout, CRC32
//! table_offset[0]   durable zone table A  ┐ written only by a commit (after fdatasync
//! table_offset[1]   durable zone table B  ┘ of the data), alternately, each with a CRC
//! live_offset       live zone table: updated in place (shared mapping) as writes
//!                   complete; trusted only within the boot that wrote it
//! data_offset       the device's sectors: sector s is at data_offset + 512 * s
//! ```
//!
//! The data region starts at a multiple of the zone size, so that a tool that knows
//! nothing of zblk (fio with `zonemode=zbd`, `zonesize`) sees the same zone boundaries
//! when pointed at the same file with `offset=data_offset`.
//!
//! A zone entry is one little-endian `u64`: the condition code in the top byte, the
//! write pointer offset (sectors from the zone start) in the low 56 bits. One word, so
//! that an entry of the live table is always updated with a single store.

use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{SECTOR_SHIFT, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneType};

/// The superblock's magic bytes.
pub const MAGIC: [u8; 8] = *b"ZBLKIMG\0";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the superblock.
pub const SUPERBLOCK_BYTES: u64 = 4096;
/// Magic of a durable zone table.
const TABLE_MAGIC: [u8; 8] = *b"ZBLKZTBL";
/// Magic of the live zone table.
const LIVE_MAGIC: [u8; 8] = *b"ZBLKLIVE";
/// Bytes before the first entry of a table (durable or live).
pub const TABLE_HEADER_BYTES: u64 = 64;
/// Bytes of one zone entry.
const ENTRY_BYTES: u64 = 8;
const WP_MASK: u64 = (1 << 56) - 1;
/// Alignment of every metadata region (the largest logical block size).
const META_ALIGN: u64 = 4096;
/// The data region starts at a multiple of this (and of the zone size).
const DATA_ALIGN: u64 = 1 << 20;

/// Where each part of an image lies, in bytes from the start of the file. A function of
/// the geometry alone, recomputed at open and compared with what the superblock says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    /// The two durable zone tables.
    pub table_offset: [u64; 2],
    /// Length of one table region (durable or live), header included.
    pub table_bytes: u64,
    /// The live zone table.
    pub live_offset: u64,
    /// The first byte of sector 0.
    pub data_offset: u64,
    /// The length the file must have.
    pub file_bytes: u64,
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl Layout {
    /// The layout of an image of geometry `geo`.
    pub fn of(geo: &Geometry) -> Layout {
        let table_bytes = round_up(TABLE_HEADER_BYTES + ENTRY_BYTES * u64::from(geo.nr_zones()), META_ALIGN);
        let a = SUPERBLOCK_BYTES;
        let b = a + table_bytes;
        let live = b + table_bytes;
        let meta_end = live + table_bytes;
        let zone_bytes = geo.zone_sectors() << SECTOR_SHIFT;
        let data_offset = round_up(meta_end, DATA_ALIGN.max(zone_bytes));
        Layout {
            table_offset: [a, b],
            table_bytes,
            live_offset: live,
            data_offset,
            file_bytes: data_offset + (geo.nr_sectors() << SECTOR_SHIFT),
        }
    }
}

/// What the superblock holds: the geometry as created, the device attributes and the
/// layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// The geometry parameters the image was created with.
    pub params: GeometryParams,
    /// The image stands for a rotational disk (sets `zoned_qd1_writes`' default).
    pub rotational: bool,
    /// Where the parts lie.
    pub layout: Layout,
}

/// A little-endian cursor over a byte buffer.
struct Put<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Put<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

struct Get<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Get<'_> {
    fn bytes(&mut self, n: usize) -> &[u8] {
        let b = &self.buf[self.at..self.at + n];
        self.at += n;
        b
    }
    fn u8(&mut self) -> u8 {
        self.bytes(1)[0]
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes(4).try_into().expect("4 bytes"))
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes(8).try_into().expect("8 bytes"))
    }
}

/// Offset of the superblock's CRC32 (over the bytes before it).
const SB_CRC_AT: usize = 256;

/// Why a superblock is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SuperblockError {
    /// The magic is not zblk's.
    NotAnImage,
    /// Another format version.
    Version(u32),
    /// It is zblk's but does not check out; says why.
    Corrupt(String),
}

impl Superblock {
    /// Encodes the superblock into its 4 KiB block.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = vec![0u8; SUPERBLOCK_BYTES as usize];
        let mut p = Put { buf: &mut buf, at: 0 };
        p.bytes(&MAGIC);
        p.u32(FORMAT_VERSION);
        p.u32(0); // flags: none defined
        let g = &self.params;
        p.u32(g.lbs_bytes);
        p.u64(g.capacity_bytes);
        p.u8(u8::from(g.zoned));
        p.u8(u8::from(self.rotational));
        p.u64(g.zone_size_bytes);
        p.u64(g.zone_capacity_bytes);
        p.u32(g.nr_conv);
        p.u32(g.max_open);
        p.u32(g.max_active);
        p.u32(g.max_append_sectors);
        p.u32(g.max_sectors);
        let l = &self.layout;
        p.u64(l.table_offset[0]);
        p.u64(l.table_offset[1]);
        p.u64(l.table_bytes);
        p.u64(l.live_offset);
        p.u64(l.data_offset);
        p.u64(l.file_bytes);
        assert!(p.at <= SB_CRC_AT, "superblock fields overflow the CRC position");
        let crc = crc32fast::hash(&buf[..SB_CRC_AT]);
        buf[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes and checks a superblock: magic, version, CRC, a valid geometry, and a
    /// layout equal to the one the geometry gives.
    pub fn decode(buf: &[u8]) -> Result<(Superblock, Geometry), SuperblockError> {
        if buf.len() < 8 || buf[..8] != MAGIC {
            return Err(SuperblockError::NotAnImage);
        }
        if buf.len() < SUPERBLOCK_BYTES as usize {
            return Err(SuperblockError::Corrupt(format!("superblock cut short at {} bytes", buf.len())));
        }
        let mut g = Get { buf, at: 8 };
        let version = g.u32();
        if version != FORMAT_VERSION {
            return Err(SuperblockError::Version(version));
        }
        let crc = u32::from_le_bytes(buf[SB_CRC_AT..SB_CRC_AT + 4].try_into().expect("4 bytes"));
        if crc != crc32fast::hash(&buf[..SB_CRC_AT]) {
            return Err(SuperblockError::Corrupt("superblock checksum mismatch".to_string()));
        }
        let _flags = g.u32();
        let lbs_bytes = g.u32();
        let capacity_bytes = g.u64();
        let zoned = g.u8() != 0;
        let rotational = g.u8() != 0;
        let params = GeometryParams {
            lbs_bytes,
            capacity_bytes,
            zoned,
            zone_size_bytes: g.u64(),
            zone_capacity_bytes: g.u64(),
            nr_conv: g.u32(),
            max_open: g.u32(),
            max_active: g.u32(),
            max_append_sectors: g.u32(),
            max_sectors: g.u32(),
            // Zeroing is the host file system's business, probed at open, not
            // recorded in the image.
            ..GeometryParams::default()
        };
        let layout = Layout {
            table_offset: [g.u64(), g.u64()],
            table_bytes: g.u64(),
            live_offset: g.u64(),
            data_offset: g.u64(),
            file_bytes: g.u64(),
        };
        let geo = Geometry::new(&params)
            .map_err(|e| SuperblockError::Corrupt(format!("superblock holds an invalid geometry: {e}")))?;
        if layout != Layout::of(&geo) {
            return Err(SuperblockError::Corrupt("superblock layout does not match its geometry".to_string()));
        }
        Ok((Superblock { params, rotational, layout }, geo))
    }
}

/// One zone as the tables record it: condition and write pointer offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The zone's condition.
    pub cond: ZoneCond,
    /// Sectors from the zone start.
    pub wp_offset: u64,
}

impl Entry {
    /// The packed word.
    pub fn pack(self) -> u64 {
        assert!(self.wp_offset <= WP_MASK, "write pointer offset {} does not fit 56 bits", self.wp_offset);
        (u64::from(self.cond.code()) << 56) | self.wp_offset
    }

    /// Unpacks a word; `None` for an unknown condition code.
    pub fn unpack(word: u64) -> Option<Entry> {
        let code = (word >> 56) as u8;
        let cond = [
            ZoneCond::NotWp,
            ZoneCond::Empty,
            ZoneCond::ImpOpen,
            ZoneCond::ExpOpen,
            ZoneCond::Closed,
            ZoneCond::Full,
            ZoneCond::ReadOnly,
            ZoneCond::Offline,
        ]
        .into_iter()
        .find(|c| c.code() == code)?;
        Some(Entry { cond, wp_offset: word & WP_MASK })
    }

    /// The entry of a zone descriptor.
    pub fn of(info: &ZoneInfo) -> Entry {
        let wp_offset = if info.ztype == ZoneType::Conventional { 0 } else { info.wp.since(info.start) };
        Entry { cond: info.cond, wp_offset }
    }

    /// The zone descriptor of zone `z` of `geo` with this entry.
    pub fn info(self, geo: &Geometry, z: ZoneNo) -> ZoneInfo {
        ZoneInfo::of(geo, z, self.cond, self.wp_offset)
    }
}

/// A durable zone table: a commit sequence number and one entry per zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Incremented by every commit; the valid table with the larger one is current.
    pub seq: u64,
    /// One entry per zone.
    pub entries: Vec<Entry>,
}

/// Offset of a table header's CRC32.
const TABLE_CRC_AT: usize = 20;

impl Table {
    /// Encodes the table into `table_bytes` bytes: header, entries, CRC32 over both.
    pub fn encode(&self, table_bytes: u64) -> Vec<u8> {
        let mut buf = vec![0u8; table_bytes as usize];
        let mut p = Put { buf: &mut buf, at: 0 };
        p.bytes(&TABLE_MAGIC);
        p.u64(self.seq);
        p.u32(self.entries.len() as u32);
        let mut p = Put { buf: &mut buf, at: TABLE_HEADER_BYTES as usize };
        for e in &self.entries {
            p.u64(e.pack());
        }
        let end = p.at;
        let crc = crc32fast::hash(&buf[..end]);
        buf[TABLE_CRC_AT..TABLE_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes a table of `nr_zones` entries; says why it is refused.
    pub fn decode(buf: &[u8], nr_zones: u32) -> Result<Table, String> {
        let end = (TABLE_HEADER_BYTES + ENTRY_BYTES * u64::from(nr_zones)) as usize;
        if buf.len() < end {
            return Err("cut short".to_string());
        }
        if buf[..8] != TABLE_MAGIC {
            return Err("bad magic".to_string());
        }
        let mut g = Get { buf, at: 8 };
        let seq = g.u64();
        let n = g.u32();
        if n != nr_zones {
            return Err(format!("{n} entries, the geometry has {nr_zones} zones"));
        }
        let crc = g.u32();
        let mut copy = buf[..end].to_vec();
        copy[TABLE_CRC_AT..TABLE_CRC_AT + 4].fill(0);
        if crc != crc32fast::hash(&copy) {
            return Err("checksum mismatch".to_string());
        }
        let entries = decode_entries(&buf[TABLE_HEADER_BYTES as usize..end])?;
        Ok(Table { seq, entries })
    }
}

fn decode_entries(buf: &[u8]) -> Result<Vec<Entry>, String> {
    buf.chunks_exact(ENTRY_BYTES as usize)
        .enumerate()
        .map(|(z, w)| {
            let word = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            Entry::unpack(word).ok_or_else(|| format!("zone {z}: unknown condition code {:#x}", word >> 56))
        })
        .collect()
}

/// State of the live table, in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveState {
    /// Being rewritten, or never written: not to be trusted.
    Invalid,
    /// An open image's table: entries follow every completed write.
    Live,
    /// Written at a clean close: equal to the newest durable table.
    Clean,
}

/// The live table's header: its state and the boot it was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveHeader {
    /// Whether the entries can be trusted (within `boot_id`).
    pub state: LiveState,
    /// `/proc/sys/kernel/random/boot_id` of the boot that wrote the entries.
    pub boot_id: [u8; 36],
}

/// Byte offsets inside the live header.
const LIVE_STATE_AT: usize = 8;
const LIVE_BOOT_AT: usize = 16;

impl LiveHeader {
    /// Reads the header at the start of the live table region.
    pub fn decode(buf: &[u8]) -> LiveHeader {
        let state = if buf[..8] != LIVE_MAGIC {
            LiveState::Invalid
        } else {
            match u32::from_le_bytes(buf[LIVE_STATE_AT..LIVE_STATE_AT + 4].try_into().expect("4 bytes")) {
                1 => LiveState::Live,
                2 => LiveState::Clean,
                _ => LiveState::Invalid,
            }
        };
        let mut boot_id = [0u8; 36];
        boot_id.copy_from_slice(&buf[LIVE_BOOT_AT..LIVE_BOOT_AT + 36]);
        LiveHeader { state, boot_id }
    }

    /// Writes the magic and the boot id (not the state) into `buf`.
    pub fn put_identity(buf: &mut [u8], boot_id: &[u8; 36]) {
        buf[..8].copy_from_slice(&LIVE_MAGIC);
        buf[LIVE_BOOT_AT..LIVE_BOOT_AT + 36].copy_from_slice(boot_id);
    }

    /// Writes the state word into `buf` (one aligned 4-byte store).
    pub fn put_state(buf: &mut [u8], state: LiveState) {
        let v: u32 = match state {
            LiveState::Invalid => 0,
            LiveState::Live => 1,
            LiveState::Clean => 2,
        };
        buf[LIVE_STATE_AT..LIVE_STATE_AT + 4].copy_from_slice(&v.to_le_bytes());
    }
}

/// Decodes the live table's entries (the region after its header).
pub fn decode_live_entries(region: &[u8], nr_zones: u32) -> Result<Vec<Entry>, String> {
    let end = (TABLE_HEADER_BYTES + ENTRY_BYTES * u64::from(nr_zones)) as usize;
    if region.len() < end {
        return Err("cut short".to_string());
    }
    decode_entries(&region[TABLE_HEADER_BYTES as usize..end])
}

/// Byte offset of zone `z`'s entry in a table region.
pub fn entry_offset(z: ZoneNo) -> usize {
    (TABLE_HEADER_BYTES + ENTRY_BYTES * u64::from(z.0)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> (GeometryParams, Geometry) {
        let p = GeometryParams {
            capacity_bytes: 40 << 20,
            zone_size_bytes: 8 << 20,
            zone_capacity_bytes: 6 << 20,
            nr_conv: 1,
            ..GeometryParams::default()
        };
        let g = Geometry::new(&p).unwrap();
        (p, g)
    }

    #[test]
    fn layout_aligns_data_to_zones() {
        let (_, g) = geo();
        let l = Layout::of(&g);
        assert_eq!(l.table_offset[0], 4096);
        assert_eq!(l.data_offset % (8 << 20), 0);
        assert_eq!(l.file_bytes, l.data_offset + (40 << 20));
    }

    #[test]
    fn superblock_round_trip_and_refusals() {
        let (p, g) = geo();
        let sb = Superblock { params: p, rotational: true, layout: Layout::of(&g) };
        let buf = sb.encode();
        let (back, g2) = Superblock::decode(&buf).unwrap();
        assert_eq!(back, sb);
        assert_eq!(g2, g);
        let mut bad = buf.clone();
        bad[40] ^= 1;
        assert!(matches!(Superblock::decode(&bad), Err(SuperblockError::Corrupt(_))));
        let mut bad = buf.clone();
        bad[8] = 9;
        assert_eq!(Superblock::decode(&bad), Err(SuperblockError::Version(9)));
        assert_eq!(Superblock::decode(b"hello world"), Err(SuperblockError::NotAnImage));
    }

    #[test]
    fn table_round_trip_and_checksum() {
        let (_, g) = geo();
        let entries: Vec<Entry> = (0..g.nr_zones())
            .map(|z| Entry {
                cond: if z == 0 { ZoneCond::NotWp } else { ZoneCond::Closed },
                wp_offset: u64::from(z) * 8,
            })
            .collect();
        let t = Table { seq: 7, entries };
        let l = Layout::of(&g);
        let buf = t.encode(l.table_bytes);
        assert_eq!(Table::decode(&buf, g.nr_zones()).unwrap(), t);
        let mut bad = buf.clone();
        bad[70] ^= 0x10;
        assert_eq!(Table::decode(&bad, g.nr_zones()).unwrap_err(), "checksum mismatch");
        assert!(Table::decode(&buf, 3).is_err());
    }

    #[test]
    fn entries_pack_into_one_word() {
        let e = Entry { cond: ZoneCond::ExpOpen, wp_offset: 12345 };
        assert_eq!(Entry::unpack(e.pack()), Some(e));
        assert_eq!(Entry::unpack(0x77 << 56), None);
    }
}
