//! The live zone table's format: its header (state, last commit, boot, digest), its
//! entries and the witness in its last bytes.

use super::{ENTRY_BYTES, Entry, ImageId, TABLE_HEADER_BYTES, le32, le64};
use zblk_core::units::ZoneNo;

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

/// The live table's header: its state, the last commit it saw, the boot it was
/// written in, and the digest of the entries a clean close left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveHeader {
    /// Whether the entries can be trusted (within `boot_id`).
    pub state: LiveState,
    /// The newest commit made while this table was live (after a clean close: the
    /// commit it equals). `None` when the header does not check out.
    pub commit: Option<u64>,
    /// `/proc/sys/kernel/random/boot_id` of the boot that wrote the entries.
    pub boot_id: [u8; 36],
    /// What the last clean close stored of the entries ([`live_digest`]), if a
    /// digest is recorded (none in images of earlier zblk versions). It speaks for
    /// the entries only while the state is [`LiveState::Clean`].
    pub digest: Option<u32>,
    /// The header does not check out and is another image's: it carries another
    /// identity's tag, or checks out under none (an image of format 2's).
    pub other_image: bool,
}

/// Byte offsets inside the live header. The state and the commit number share one
/// word (`STATE_WORD_AT`), so that each change is a single aligned store that a
/// killed process leaves either old or new; the word has its own check bits.
pub(super) const LIVE_WORD_AT: usize = 8;
pub(super) const LIVE_BOOT_AT: usize = 16;
pub(super) const LIVE_ID_CRC_AT: usize = 52;
/// The digest of the entries a clean close left, and its bitwise complement xor the
/// image's identity tag ([`ImageId::tag`]: none in format 2), which tells another
/// image's header from a damaged one (a header of an earlier zblk holds zeroes
/// there: no digest).
const LIVE_DIGEST_AT: usize = 56;
const LIVE_DIGEST_NOT_AT: usize = 60;
pub(super) const LIVE_COMMIT_BITS: u32 = 46;
/// Magic of the live zone table.
const LIVE_MAGIC: [u8; 8] = *b"ZBLKLIV2";
/// The largest commit number: the live header holds it in 46 bits. A table that
/// claims a larger one is damaged; a commit past it is refused (at one commit a
/// microsecond, two years of commits).
pub const MAX_COMMIT: u64 = (1 << LIVE_COMMIT_BITS) - 1;

pub(super) fn live_word_check(state: u64, commit: u64, boot: &[u8], id: ImageId) -> u64 {
    let mut h = crc32fast::Hasher::new();
    h.update(&state.to_le_bytes());
    h.update(&commit.to_le_bytes());
    h.update(boot);
    id.mix(&mut h);
    u64::from(h.finalize() & 0xffff)
}

pub(super) fn live_id_crc(buf: &[u8], id: ImageId) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&buf[..8]);
    h.update(&buf[LIVE_BOOT_AT..LIVE_BOOT_AT + 36]);
    id.mix(&mut h);
    h.finalize()
}

impl LiveHeader {
    /// Reads the header at the start of the live table region of image `id`. A
    /// header that does not check out reads as [`LiveState::Invalid`] with no commit.
    pub fn decode(buf: &[u8], id: ImageId) -> LiveHeader {
        let mut boot_id = [0u8; 36];
        boot_id.copy_from_slice(&buf[LIVE_BOOT_AT..LIVE_BOOT_AT + 36]);
        let (d, not) = (le32(buf, LIVE_DIGEST_AT), le32(buf, LIVE_DIGEST_NOT_AT));
        let tag = if d == 0 && not == 0 { 0 } else { not ^ !d };
        let digest = (tag == id.tag()).then_some(d);
        let mut invalid = LiveHeader { state: LiveState::Invalid, commit: None, boot_id, digest, other_image: false };
        // A header that does not check out is another image's when it carries
        // another identity's tag, or checks out under no identity (format 2) in an
        // image that has one; damage to one byte cannot do both.
        let of_another = |word_ok: bool| {
            (tag != 0 && tag != id.tag())
                || (!id.is_none() && word_ok && le32(buf, LIVE_ID_CRC_AT) == live_id_crc(buf, ImageId::NONE))
        };
        if buf[..8] != LIVE_MAGIC || le32(buf, LIVE_ID_CRC_AT) != live_id_crc(buf, id) {
            invalid.other_image = buf[..8] == LIVE_MAGIC && of_another(true);
            return invalid;
        }
        let word = le64(buf, LIVE_WORD_AT);
        let state = word >> 62;
        let check = (word >> LIVE_COMMIT_BITS) & 0xffff;
        let commit = word & ((1 << LIVE_COMMIT_BITS) - 1);
        if check != live_word_check(state, commit, &boot_id, id) {
            invalid.other_image = of_another(false);
            return invalid;
        }
        let state = match state {
            1 => LiveState::Live,
            2 => LiveState::Clean,
            _ => LiveState::Invalid,
        };
        LiveHeader { state, commit: Some(commit), boot_id, digest, other_image: false }
    }

    /// Stores in `buf` (a live table region of `nr_zones` entries) the digest of its
    /// entries as commit `commit` leaves them: what a clean close does before it
    /// marks the table clean.
    pub fn put_digest(buf: &mut [u8], commit: u64, nr_zones: u32, id: ImageId) {
        let d = live_digest(buf, commit, nr_zones, id);
        buf[LIVE_DIGEST_AT..LIVE_DIGEST_AT + 4].copy_from_slice(&d.to_le_bytes());
        buf[LIVE_DIGEST_NOT_AT..LIVE_DIGEST_NOT_AT + 4].copy_from_slice(&(!d ^ id.tag()).to_le_bytes());
    }

    /// Writes the magic and the boot id (not the state) of image `id` into `buf`.
    pub fn put_identity(buf: &mut [u8], boot_id: &[u8; 36], id: ImageId) {
        buf[..8].copy_from_slice(&LIVE_MAGIC);
        buf[LIVE_BOOT_AT..LIVE_BOOT_AT + 36].copy_from_slice(boot_id);
        let crc = live_id_crc(buf, id);
        buf[LIVE_ID_CRC_AT..LIVE_ID_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Writes the state and commit word of image `id` into `buf` (one aligned
    /// 8-byte store).
    pub fn put_state(buf: &mut [u8], state: LiveState, commit: u64, id: ImageId) {
        let s: u64 = match state {
            LiveState::Invalid => 0,
            LiveState::Live => 1,
            LiveState::Clean => 2,
        };
        assert!(commit <= MAX_COMMIT, "commit number {commit} past {MAX_COMMIT}");
        let word = (s << 62)
            | (live_word_check(s, commit, &buf[LIVE_BOOT_AT..LIVE_BOOT_AT + 36], id) << LIVE_COMMIT_BITS)
            | commit;
        buf[LIVE_WORD_AT..LIVE_WORD_AT + 8].copy_from_slice(&word.to_le_bytes());
    }
}

/// The digest of a live table region's `nr_zones` entries as commit `commit`
/// leaves them in image `id`: CRC32 of the commit number, the entries' bytes and the
/// identity. A clean close stores it in the header, so that entries and header copied
/// back from different moments (or a sector of entries a disk lost) do not pass for
/// the state the close left.
pub fn live_digest(region: &[u8], commit: u64, nr_zones: u32, id: ImageId) -> u32 {
    let end = (TABLE_HEADER_BYTES + ENTRY_BYTES * u64::from(nr_zones)) as usize;
    let mut h = crc32fast::Hasher::new();
    h.update(&commit.to_le_bytes());
    h.update(&region[TABLE_HEADER_BYTES as usize..end.min(region.len())]);
    id.mix(&mut h);
    h.finalize()
}

/// What the live table's last bytes witness: the last commit completed while it was
/// live (stored once the commit's table is synced) and the last commit announced
/// (stored with each announcement, just before the header's word). The entries and
/// these bytes lie in one region that an open rewrites whole, so that entries copied
/// back from another moment come with another witness, which then disagrees with the
/// header. Zeroes in images of earlier zblk versions: no witness. The region always
/// has room past its last entry: it is as long as a durable table, whose sectors
/// carry more than entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LiveWitness {
    /// The last commit completed (its table synced) while the table was live.
    pub completed: u64,
    /// The last commit announced while the table was live.
    pub announced: u64,
}

/// Bytes of the live table's witness, at the end of its region: the two commit
/// numbers, a CRC32 of them and the identity, and the identity's tag
/// ([`ImageId::tag`], outside the CRC: it only tells another image's witness from a
/// damaged one).
pub const LIVE_WITNESS_BYTES: usize = 24;

fn live_witness_crc(w: LiveWitness, id: ImageId) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&LIVE_MAGIC);
    h.update(&w.completed.to_le_bytes());
    h.update(&w.announced.to_le_bytes());
    id.mix(&mut h);
    h.finalize()
}

/// Stores `w` at the end of a live table region of image `id`.
pub fn put_live_witness(region: &mut [u8], w: LiveWitness, id: ImageId) {
    let at = region.len() - LIVE_WITNESS_BYTES;
    region[at..at + 8].copy_from_slice(&w.completed.to_le_bytes());
    region[at + 8..at + 16].copy_from_slice(&w.announced.to_le_bytes());
    region[at + 16..at + 20].copy_from_slice(&live_witness_crc(w, id).to_le_bytes());
    region[at + 20..at + 24].copy_from_slice(&id.tag().to_le_bytes());
}

/// What a live table region's witness holds, if it checks out in image `id`.
pub fn live_witness(region: &[u8], id: ImageId) -> Option<LiveWitness> {
    let at = region.len().checked_sub(LIVE_WITNESS_BYTES)?;
    let w = LiveWitness { completed: le64(region, at), announced: le64(region, at + 8) };
    let ok = le32(region, at + 16) == live_witness_crc(w, id) && w.completed.max(w.announced) <= MAX_COMMIT;
    ok.then_some(w)
}

/// Whether a live table region's witness, which does not check out in image `id`,
/// is another image's: it carries another identity's tag, or checks out under no
/// identity (an image of format 2) in an image that has one. Zeroes (no witness)
/// are no image's.
pub fn live_witness_of_another_image(region: &[u8], id: ImageId) -> bool {
    let Some(at) = region.len().checked_sub(LIVE_WITNESS_BYTES) else { return false };
    let w = LiveWitness { completed: le64(region, at), announced: le64(region, at + 8) };
    let tag = le32(region, at + 20);
    let crc = le32(region, at + 16);
    if live_witness(region, id).is_some() || region[at..].iter().all(|&b| b == 0) {
        return false;
    }
    (tag != 0 && tag != id.tag()) || (!id.is_none() && crc == live_witness_crc(w, ImageId::NONE))
}

/// Decodes the live table's entries (the region after its header) of image `id`;
/// says which entry is refused.
pub fn decode_live_entries(region: &[u8], nr_zones: u32, id: ImageId) -> Result<Vec<Entry>, String> {
    let end = (TABLE_HEADER_BYTES + ENTRY_BYTES * u64::from(nr_zones)) as usize;
    if region.len() < end {
        return Err("cut short".to_string());
    }
    (0..nr_zones).map(|z| Entry::unpack(le64(region, entry_offset(ZoneNo(z))), ZoneNo(z), id)).collect()
}

/// The zones whose live entries fail their checks in image `id` (an entry another
/// image wrote fails them, its check bits mixing another identity).
pub fn failing_live_entries(region: &[u8], nr_zones: u32, id: ImageId) -> Vec<u32> {
    (0..nr_zones)
        .filter(|&z| {
            let at = entry_offset(ZoneNo(z));
            at + 8 <= region.len() && Entry::unpack(le64(region, at), ZoneNo(z), id).is_err()
        })
        .collect()
}

/// Byte offset of zone `z`'s entry in the live table region.
pub fn entry_offset(z: ZoneNo) -> usize {
    (TABLE_HEADER_BYTES + ENTRY_BYTES * u64::from(z.0)) as usize
}
