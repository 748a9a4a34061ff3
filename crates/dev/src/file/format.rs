//! The on-disk format of a zoned image: one regular file holding two copies of the
//! superblock, two durable zone tables, a live zone table and the data region.
//!
//! ```text
//! 0                 superblock (4 KiB): magic, version, geometry, layout, the last
//!                   commit it witnessed, the image's identity, CRC32
//! 4096              its copy (the same geometry; rewritten by every commit)
//! table_offset[0]   durable zone table A  ┐ written only by a commit (after fdatasync
//! table_offset[1]   durable zone table B  ┘ of the data), alternately; every 512-byte
//!                   sector carries the commit number and its own CRC32
//! live_offset       live zone table: updated in place (shared mapping) as writes
//!                   complete; its header names the last commit it saw, its last
//!                   16 bytes the last commit completed while it was live
//! data_offset       the device's sectors: sector s is at data_offset + 512 * s
//! ```
//!
//! The data region starts at a multiple of the zone size, so that a tool that knows
//! nothing of zblk (fio with `zonemode=zbd`, `zonesize`) sees the same zone boundaries
//! when pointed at the same file with `offset=data_offset`.
//!
//! # Why every sector of a durable table is stamped
//!
//! A commit rewrites the older table. A power cut during that write may tear it: some
//! sectors new (commit n+1), the others still the old table (commit n-1). Such a
//! table was never acknowledged (a commit is acknowledged after the table's
//! `fdatasync`), so the other table is the newest acknowledged state. Damage (a
//! flipped byte) is different: the damaged table may be the newest commit, and
//! falling back to the other one would silently undo flushed writes and resets. With
//! every sector stamped with its commit number and checksummed, the two are told
//! apart: a torn table is made of sectors that each check out; a damaged one has a
//! sector that does not, and its other sectors still say which commit it held.
//!
//! # Witnesses of the last commit
//!
//! A durable table, the live header, both superblocks and the live table's last
//! bytes each say which commit they belong to, and a clean close binds the live
//! entries to the live header with a digest. The parts are written at different moments of a commit (the live header
//! announces it before its table is written, the superblocks record it after the
//! table's sync), so each part bounds the last commit in its own way; parts copied
//! back from an older image, or sectors a disk lost after acknowledging them,
//! contradict the others, and an open says so (`recovery`). Only all of them
//! rolled back together, the older image byte for byte, goes unseen: see
//! `docs/images.md`.
//!
//! # Identity
//!
//! Every image made since format 3 has an identity, 16 random bytes in both
//! superblocks, mixed into every other check value ([`ImageId`]): a part of another
//! image copied into this one fails its checks here, so it is damage, never state,
//! even when its commit numbers are newer. Where a part has room (a durable table
//! sector, the live witness, the live header's digest complement) a tag of the
//! identity lies beside its check value, so that an open can say the part is another
//! image's. Images of format 2 have none, and open as before.
//!
//! # Zone entries
//!
//! A zone entry is one little-endian `u64`: the condition code in the top byte, a
//! 16-bit check (CRC32 of the zone number, condition, write pointer and the image's
//! identity) below it,
//! and the write pointer offset (sectors from the zone start) in the low 40 bits.
//! One word, so that an entry of the live table is always updated with a single
//! store, and a forged or damaged entry does not pass for a zone's state.

use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{SECTOR_SHIFT, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneType};

mod identity;
mod live;

pub use identity::ImageId;
pub use live::{
    LIVE_WITNESS_BYTES, LiveHeader, LiveState, LiveWitness, MAX_COMMIT, decode_live_entries, entry_offset,
    failing_live_entries, live_digest, live_witness, live_witness_of_another_image, put_live_witness,
};

/// The superblock's magic bytes.
pub const MAGIC: [u8; 8] = *b"ZBLKIMG\0";
/// The format version this code writes (for an image with an identity) and reads.
pub const FORMAT_VERSION: u32 = 3;
/// The format before identities, which this code reads and writes as it was (an
/// image of it has [`ImageId::NONE`]).
pub const FORMAT_VERSION_NO_ID: u32 = 2;
/// Size of one superblock copy.
pub const SUPERBLOCK_BYTES: u64 = 4096;
/// Where the two superblock copies lie.
pub const SUPERBLOCK_OFFSETS: [u64; 2] = [0, SUPERBLOCK_BYTES];
/// Magic of a durable zone table (in its first sector).
const TABLE_MAGIC: [u8; 8] = *b"ZBLKZTB2";
/// Bytes before the first entry of the live table.
pub const TABLE_HEADER_BYTES: u64 = 64;
/// Bytes of one zone entry.
const ENTRY_BYTES: u64 = 8;
/// Bits of a zone entry holding the write pointer offset.
const WP_BITS: u32 = 40;
const WP_MASK: u64 = (1 << WP_BITS) - 1;
/// The largest zone this format records, in sectors (a write pointer offset fits 40
/// bits).
pub const MAX_ZONE_SECTORS: u64 = WP_MASK;
/// The most zones an image may have: bounds the metadata (each table 8 bytes a zone,
/// read whole at open) to 32 MiB a table.
pub const MAX_ZONES: u32 = 1 << 22;
/// Alignment of every metadata region (the largest logical block size).
const META_ALIGN: u64 = 4096;
/// The data region starts at a multiple of this (and of the zone size).
const DATA_ALIGN: u64 = 1 << 20;
/// A durable table's sector: payload, commit number, CRC32.
const TSECT: usize = 512;
const TSECT_PAYLOAD: usize = 496;
const TSECT_SEQ_AT: usize = 496;
const TSECT_CRC_AT: usize = 504;
/// Where a durable table sector holds its image's identity tag (outside its CRC).
const TSECT_TAG_AT: usize = 508;
/// Entries in one sector of a durable table (sector 0 holds the header).
const ENTRIES_PER_TSECT: u64 = (TSECT_PAYLOAD as u64) / ENTRY_BYTES;

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

fn round_up(v: u64, to: u64) -> Option<u64> {
    v.checked_next_multiple_of(to)
}

impl Layout {
    /// The layout of an image of geometry `geo`, or why the format cannot hold it
    /// (too many zones, a zone too large, a file size past `u64`).
    pub fn try_of(geo: &Geometry) -> Result<Layout, String> {
        let nr = u64::from(geo.nr_zones());
        if geo.nr_zones() > MAX_ZONES {
            return Err(format!("{nr} zones: an image holds at most {MAX_ZONES}"));
        }
        if geo.is_zoned() && geo.zone_sectors() > MAX_ZONE_SECTORS {
            return Err(format!(
                "zone size {} sectors: an image's zones hold at most {MAX_ZONE_SECTORS} sectors",
                geo.zone_sectors()
            ));
        }
        let live = TABLE_HEADER_BYTES + ENTRY_BYTES * nr;
        let durable = TSECT as u64 * (1 + nr.div_ceil(ENTRIES_PER_TSECT));
        let too_big = || "the image size overflows 64 bits".to_string();
        let table_bytes = round_up(live.max(durable), META_ALIGN).ok_or_else(too_big)?;
        assert!(
            live + LIVE_WITNESS_BYTES as u64 <= table_bytes,
            "the live table's witness overlaps its entries ({nr} zones)"
        );
        let a = 2 * SUPERBLOCK_BYTES;
        let b = a + table_bytes;
        let live = b + table_bytes;
        let meta_end = live + table_bytes;
        let zone_bytes = geo.zone_sectors().checked_mul(1 << SECTOR_SHIFT).ok_or_else(too_big)?;
        let data_offset = round_up(meta_end, DATA_ALIGN.max(zone_bytes)).ok_or_else(too_big)?;
        let data_bytes = geo.nr_sectors().checked_mul(1 << SECTOR_SHIFT).ok_or_else(too_big)?;
        let file_bytes = data_offset.checked_add(data_bytes).ok_or_else(too_big)?;
        // A file offset is an i64 for the kernel (off_t).
        if file_bytes > i64::MAX as u64 {
            return Err(format!("the image would be {file_bytes} bytes: a file holds at most {} bytes", i64::MAX));
        }
        Ok(Layout { table_offset: [a, b], table_bytes, live_offset: live, data_offset, file_bytes })
    }

    /// The layout of an image of geometry `geo`, which the format must be able to hold
    /// (a geometry read from a checked superblock, or one [`Layout::try_of`] accepted).
    pub fn of(geo: &Geometry) -> Layout {
        Layout::try_of(geo).expect("geometry checked against the format's limits")
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
    /// The image's identity ([`ImageId::NONE`] for an image of format 2).
    pub id: ImageId,
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

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Offset of the superblock's CRC32 (over the bytes before it).
const SB_CRC_AT: usize = 256;
/// Offset of the image's identity in the superblock (format 3).
const SB_ID_AT: usize = 122;

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
    /// Encodes the superblock into its 4 KiB block, witnessing `commit`: the last
    /// commit whose durable table was synced when the superblock was written (0 in
    /// images of zblk versions before the witness, whose bytes there were zero). An
    /// image with an identity is written as format 3, one without as format 2.
    pub fn encode(&self, commit: u64) -> Vec<u8> {
        let mut buf = vec![0u8; SUPERBLOCK_BYTES as usize];
        let mut p = Put { buf: &mut buf, at: 0 };
        p.bytes(&MAGIC);
        p.u32(if self.id.is_none() { FORMAT_VERSION_NO_ID } else { FORMAT_VERSION });
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
        assert!(commit <= MAX_COMMIT, "superblock commit number {commit} past {MAX_COMMIT}");
        p.u64(commit);
        assert_eq!(p.at, SB_ID_AT, "the identity follows the witness");
        p.bytes(&self.id.0);
        assert!(p.at <= SB_CRC_AT, "superblock fields overflow the CRC position");
        let crc = crc32fast::hash(&buf[..SB_CRC_AT]);
        buf[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Decodes and checks a superblock: magic, version, CRC, a valid geometry within
    /// the format's limits, a layout equal to the one the geometry gives, and the
    /// commit it witnesses (returned third).
    pub fn decode(buf: &[u8]) -> Result<(Superblock, Geometry, u64), SuperblockError> {
        if buf.len() < 8 || buf[..8] != MAGIC {
            return Err(SuperblockError::NotAnImage);
        }
        if buf.len() < SUPERBLOCK_BYTES as usize {
            return Err(SuperblockError::Corrupt(format!("superblock cut short at {} bytes", buf.len())));
        }
        let crc_ok = le32(buf, SB_CRC_AT) == crc32fast::hash(&buf[..SB_CRC_AT]);
        let mut g = Get { buf, at: 8 };
        let version = g.u32();
        // Version 1 kept its CRC at the same place; a later version may not, so a
        // version above ours is reported as such even when the CRC (as this version
        // computes it) does not match.
        let known = version == FORMAT_VERSION || version == FORMAT_VERSION_NO_ID;
        if !known && (crc_ok || (FORMAT_VERSION..1000).contains(&version)) {
            return Err(SuperblockError::Version(version));
        }
        if !crc_ok {
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
        let commit = g.u64();
        let mut id = ImageId::NONE;
        id.0.copy_from_slice(g.bytes(16));
        // Format 2 has no identity (zeroes there); format 3 always has one.
        if version == FORMAT_VERSION_NO_ID {
            id = ImageId::NONE;
        } else if id.is_none() {
            return Err(SuperblockError::Corrupt("superblock of format 3 without an identity".to_string()));
        }
        if commit > MAX_COMMIT {
            return Err(SuperblockError::Corrupt(format!(
                "superblock witnesses commit number {commit}, past the limit {MAX_COMMIT}"
            )));
        }
        let geo = Geometry::new(&params)
            .map_err(|e| SuperblockError::Corrupt(format!("superblock holds an invalid geometry: {e}")))?;
        let expect = Layout::try_of(&geo).map_err(|e| SuperblockError::Corrupt(format!("superblock geometry: {e}")))?;
        if layout != expect {
            return Err(SuperblockError::Corrupt("superblock layout does not match its geometry".to_string()));
        }
        Ok((Superblock { params, rotational, layout, id }, geo, commit))
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

fn entry_check(z: ZoneNo, code: u8, wp: u64, id: ImageId) -> u64 {
    let mut h = crc32fast::Hasher::new();
    h.update(&z.0.to_le_bytes());
    h.update(&[code]);
    h.update(&wp.to_le_bytes());
    id.mix(&mut h);
    u64::from(h.finalize() & 0xffff)
}

impl Entry {
    /// The packed word of zone `z`'s entry in image `id`.
    pub fn pack(self, z: ZoneNo, id: ImageId) -> u64 {
        assert!(self.wp_offset <= WP_MASK, "write pointer offset {} does not fit {WP_BITS} bits", self.wp_offset);
        let code = self.cond.code();
        (u64::from(code) << 56) | (entry_check(z, code, self.wp_offset, id) << WP_BITS) | self.wp_offset
    }

    /// Unpacks zone `z`'s word in image `id`; says why it is refused (unknown
    /// condition, check bits that do not match).
    pub fn unpack(word: u64, z: ZoneNo, id: ImageId) -> Result<Entry, String> {
        let code = (word >> 56) as u8;
        let wp_offset = word & WP_MASK;
        if (word >> WP_BITS) & 0xffff != entry_check(z, code, wp_offset, id) {
            return Err(format!("zone {}: entry {word:#018x} fails its check", z.0));
        }
        // The image stores the kernel's condition codes (`ZoneCond::code`).
        let cond = ZoneCond::of_code(code).ok_or_else(|| format!("zone {}: unknown condition code {code:#x}", z.0))?;
        Ok(Entry { cond, wp_offset })
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

/// What a durable table region holds, as far as its bytes tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TableRead {
    /// Every sector checks out and holds the same commit.
    Valid(Table),
    /// Every sector checks out but not all hold the same commit: a commit's table
    /// write torn by a power cut. The newest commit seen is `newest`; it was never
    /// acknowledged.
    Torn {
        /// The commit numbers its sectors hold, smallest and largest.
        seqs: (u64, u64),
    },
    /// Some sector does not check out: damage. `seq` is the newest commit number its
    /// good sectors still carry (the commit this table may have held), if any.
    Damaged {
        /// The newest commit number a good sector holds.
        seq: Option<u64>,
        /// What is wrong.
        why: String,
        /// The sectors that are another image's (they carry another identity's tag,
        /// or check out under none), in words ("every sector", "sector 1, 2"), if
        /// any: `why` names them too.
        other_image: Option<String>,
    },
}

impl TableRead {
    /// The newest commit number this table says it held, if it says one.
    pub fn claimed_seq(&self) -> Option<u64> {
        match self {
            TableRead::Valid(t) => Some(t.seq),
            TableRead::Torn { seqs } => Some(seqs.1),
            TableRead::Damaged { seq, .. } => *seq,
        }
    }
}

fn tsect_crc(sect: &[u8], j: u64, id: ImageId) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&TABLE_MAGIC);
    h.update(&j.to_le_bytes());
    h.update(&sect[..TSECT_CRC_AT]);
    id.mix(&mut h);
    h.finalize()
}

/// Whether sector `j` of a durable table, which does not check out in image `id`,
/// is another image's: it carries another identity's tag, or checks out under no
/// identity (a table of format 2) in an image that has one.
fn tsect_of_another_image(sect: &[u8], j: u64, id: ImageId) -> bool {
    let tag = le32(sect, TSECT_TAG_AT);
    (tag != 0 && tag != id.tag()) || (!id.is_none() && le32(sect, TSECT_CRC_AT) == tsect_crc(sect, j, ImageId::NONE))
}

/// Sector numbers as a short list: "0, 1, 2, 3 and 5 more".
fn sector_list(sects: &[usize]) -> String {
    let list: Vec<String> = sects.iter().take(4).map(|j| j.to_string()).collect();
    let more = if sects.len() > 4 { format!(" and {} more", sects.len() - 4) } else { String::new() };
    format!("{}{more}", list.join(", "))
}

impl Table {
    /// Encodes the table of image `id` into `table_bytes` bytes: every 512-byte
    /// sector carries the commit number, its own CRC32 and the identity's tag (sector
    /// 0: magic and zone count).
    pub fn encode(&self, table_bytes: u64, id: ImageId) -> Vec<u8> {
        let mut buf = vec![0u8; table_bytes as usize];
        {
            let mut p = Put { buf: &mut buf, at: 0 };
            p.bytes(&TABLE_MAGIC);
            p.u32(self.entries.len() as u32);
        }
        for (z, e) in self.entries.iter().enumerate() {
            let at = tentry_at(z as u64);
            buf[at..at + 8].copy_from_slice(&e.pack(ZoneNo(z as u32), id).to_le_bytes());
        }
        for (j, sect) in buf.chunks_exact_mut(TSECT).enumerate() {
            sect[TSECT_SEQ_AT..TSECT_SEQ_AT + 8].copy_from_slice(&self.seq.to_le_bytes());
            let crc = tsect_crc(sect, j as u64, id);
            sect[TSECT_CRC_AT..TSECT_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            sect[TSECT_TAG_AT..TSECT_TAG_AT + 4].copy_from_slice(&id.tag().to_le_bytes());
        }
        buf
    }

    /// Reads a table region of `nr_zones` entries of image `id`: valid, torn or
    /// damaged (with why).
    pub fn read(buf: &[u8], nr_zones: u32, id: ImageId) -> TableRead {
        let need = TSECT as u64 * (1 + u64::from(nr_zones).div_ceil(ENTRIES_PER_TSECT));
        let sects = buf.len() / TSECT;
        let (mut bad, mut other) = (Vec::new(), Vec::new());
        let mut beyond = None;
        let (mut lo, mut hi) = (u64::MAX, None::<u64>);
        for (j, sect) in buf.chunks_exact(TSECT).enumerate() {
            if le32(sect, TSECT_CRC_AT) != tsect_crc(sect, j as u64, id) {
                if tsect_of_another_image(sect, j as u64, id) {
                    other.push(j);
                } else {
                    bad.push(j);
                }
                continue;
            }
            let s = le64(sect, TSECT_SEQ_AT);
            if s > MAX_COMMIT {
                // No commit is ever numbered past what the live header records: a
                // sector that says so is damage that kept its checksum.
                beyond.get_or_insert((j, s));
                continue;
            }
            lo = lo.min(s);
            hi = Some(hi.map_or(s, |h| h.max(s)));
        }
        let damaged = |why: String| TableRead::Damaged { seq: hi, why, other_image: None };
        if (sects as u64) * (TSECT as u64) < need {
            return damaged("cut short".to_string());
        }
        if !other.is_empty() {
            let which = if other.len() == sects {
                "every sector".to_string()
            } else {
                format!("sector {}", sector_list(&other))
            };
            let also = if bad.is_empty() {
                String::new()
            } else {
                format!("; checksum mismatch in sector {}", sector_list(&bad))
            };
            return TableRead::Damaged {
                seq: hi,
                why: format!("{which} of the table belongs to another image{also}"),
                other_image: Some(which),
            };
        }
        if let Some((j, s)) = beyond {
            return damaged(format!("sector {j} of the table holds commit number {s}, past the limit {MAX_COMMIT}"));
        }
        if !bad.is_empty() {
            return damaged(format!("checksum mismatch in sector {} of the table", sector_list(&bad)));
        }
        let hi = hi.expect("a table has sectors");
        if lo != hi {
            return TableRead::Torn { seqs: (lo, hi) };
        }
        let damaged = |why: String| TableRead::Damaged { seq: Some(hi), why, other_image: None };
        if buf[..8] != TABLE_MAGIC {
            return damaged("bad magic".to_string());
        }
        let n = le32(buf, 8);
        if n != nr_zones {
            return damaged(format!("{n} entries, the geometry has {nr_zones} zones"));
        }
        let entries: Result<Vec<Entry>, String> =
            (0..u64::from(nr_zones)).map(|z| Entry::unpack(le64(buf, tentry_at(z)), ZoneNo(z as u32), id)).collect();
        match entries {
            Ok(entries) => TableRead::Valid(Table { seq: hi, entries }),
            Err(why) => damaged(why),
        }
    }

    /// Decodes a table of `nr_zones` entries of image `id`; says why it is refused
    /// (torn or damaged).
    pub fn decode(buf: &[u8], nr_zones: u32, id: ImageId) -> Result<Table, String> {
        match Table::read(buf, nr_zones, id) {
            TableRead::Valid(t) => Ok(t),
            TableRead::Torn { seqs } => Err(format!("torn write (sectors of commits {} and {})", seqs.0, seqs.1)),
            TableRead::Damaged { why, .. } => Err(why),
        }
    }
}

/// Byte offset of zone `z`'s entry in a durable table.
fn tentry_at(z: u64) -> usize {
    let sect = 1 + z / ENTRIES_PER_TSECT;
    (sect * TSECT as u64 + (z % ENTRIES_PER_TSECT) * ENTRY_BYTES) as usize
}

/// Recomputes every check value of an image's metadata held in `meta` (the file's
/// bytes from its start to the end of the live table, laid out as `layout` with
/// `nr_zones` zones): each zone entry's check bits in the three tables, each durable
/// table sector's CRC32, the live header's checks, the live digest and witness, and
/// both superblock CRCs, under the identity the first superblock copy names (none
/// unless it says format 3). Whatever the bytes say is kept, checked or not: this is
/// for tools that damage metadata on purpose and want the damage read past the
/// checksums (the fuzz targets, tests).
pub fn reseal(meta: &mut [u8], layout: &Layout, nr_zones: u32) {
    let end = (layout.live_offset + layout.table_bytes) as usize;
    assert!(meta.len() >= end, "reseal: {} bytes of metadata, the layout needs {end}", meta.len());
    let mut id = ImageId::NONE;
    if le32(meta, 8) == FORMAT_VERSION {
        id.0.copy_from_slice(&meta[SB_ID_AT..SB_ID_AT + 16]);
    }
    let tb = layout.table_bytes as usize;
    let fix = |word: u64, z: u32| -> u64 {
        let code = (word >> 56) as u8;
        let wp = word & WP_MASK;
        (word & !(0xffff << WP_BITS)) | (entry_check(ZoneNo(z), code, wp, id) << WP_BITS)
    };
    for at in layout.table_offset {
        let table = &mut meta[at as usize..at as usize + tb];
        for z in 0..nr_zones {
            let e = tentry_at(u64::from(z));
            if e + 8 <= table.len() {
                let w = fix(le64(table, e), z);
                table[e..e + 8].copy_from_slice(&w.to_le_bytes());
            }
        }
        for (j, sect) in table.chunks_exact_mut(TSECT).enumerate() {
            let crc = tsect_crc(sect, j as u64, id);
            sect[TSECT_CRC_AT..TSECT_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let live = &mut meta[layout.live_offset as usize..end];
    for z in 0..nr_zones {
        let e = entry_offset(ZoneNo(z));
        if e + 8 <= live.len() {
            let w = fix(le64(live, e), z);
            live[e..e + 8].copy_from_slice(&w.to_le_bytes());
        }
    }
    let crc = live_id_crc(live, id);
    live[LIVE_ID_CRC_AT..LIVE_ID_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    let word = le64(live, LIVE_WORD_AT);
    let (state, commit) = (word >> 62, word & ((1 << LIVE_COMMIT_BITS) - 1));
    LiveHeader::put_digest(live, commit, nr_zones, id);
    let at = live.len() - LIVE_WITNESS_BYTES;
    put_live_witness(live, LiveWitness { completed: le64(live, at), announced: le64(live, at + 8) }, id);
    let check = live_word_check(state, commit, &live[LIVE_BOOT_AT..LIVE_BOOT_AT + 36], id);
    let word = (state << 62) | (check << LIVE_COMMIT_BITS) | commit;
    live[LIVE_WORD_AT..LIVE_WORD_AT + 8].copy_from_slice(&word.to_le_bytes());
    for at in SUPERBLOCK_OFFSETS {
        let sb = &mut meta[at as usize..(at + SUPERBLOCK_BYTES) as usize];
        let crc = crc32fast::hash(&sb[..SB_CRC_AT]);
        sb[SB_CRC_AT..SB_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

use live::{LIVE_BOOT_AT, LIVE_COMMIT_BITS, LIVE_ID_CRC_AT, LIVE_WORD_AT, live_id_crc, live_word_check};

#[cfg(test)]
mod tests;
