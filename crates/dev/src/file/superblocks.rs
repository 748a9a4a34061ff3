//! Reading an image's two superblock copies at open: each checked, a damaged one
//! named and rewritten from the other, one of another image (another identity) told
//! by the rest of the metadata, two valid ones that disagree otherwise refused.

use super::error::{ImageError, ImageErrorKind, err, io_err};
use super::format::{self, Superblock, SuperblockError};
use super::media::Media;
use super::recovery::{Found, read_tables};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use zblk_core::geometry::Geometry;

/// What the superblock copies say.
pub(super) struct Superblocks {
    /// The superblock (both valid copies hold it).
    pub(super) sb: Superblock,
    /// Its geometry.
    pub(super) geo: Geometry,
    /// The newest commit a valid copy witnesses (the copies are rewritten one after
    /// the other, so they may differ by one commit).
    pub(super) commit: u64,
    /// What to say (and rewrite) when one copy is damaged.
    pub(super) repair: Option<String>,
    /// Both copies valid, the second naming another identity than the first (`sb`):
    /// its superblock and commit, until [`settle_identity`] tells which is the
    /// image's.
    pub(super) other_copy: Option<(Superblock, u64)>,
}

/// Reads both superblock copies and picks a valid one.
pub(super) fn read_superblocks(path: &Path, file: &File, len: u64) -> Result<Superblocks, ImageError> {
    let mut decoded = Vec::new();
    for at in format::SUPERBLOCK_OFFSETS {
        let n = len.saturating_sub(at).min(format::SUPERBLOCK_BYTES) as usize;
        let mut head = vec![0u8; n];
        file.read_exact_at(&mut head, at).map_err(io_err(path, "read superblock"))?;
        decoded.push(Superblock::decode(&head));
    }
    let kind = |e: &SuperblockError| match e {
        SuperblockError::NotAnImage if len == 0 => ImageErrorKind::NotAnImage("empty file".to_string()),
        SuperblockError::NotAnImage => ImageErrorKind::NotAnImage("no zblk superblock".to_string()),
        SuperblockError::Version(found) => {
            ImageErrorKind::WrongVersion { found: *found, supported: format::FORMAT_VERSION }
        }
        SuperblockError::Corrupt(_) if len < format::SUPERBLOCK_BYTES => {
            ImageErrorKind::Truncated { len, need: 2 * format::SUPERBLOCK_BYTES }
        }
        SuperblockError::Corrupt(why) => ImageErrorKind::Corrupt(why.clone()),
    };
    let describe = |e: &SuperblockError| match e {
        SuperblockError::NotAnImage => "no zblk magic".to_string(),
        SuperblockError::Version(v) => format!("format version {v}"),
        SuperblockError::Corrupt(why) => why.clone(),
    };
    match (&decoded[0], &decoded[1]) {
        (Ok((a, ga, ca)), Ok((b, _, cb))) => {
            if a != b && (Superblock { id: b.id, ..a.clone() }) == *b {
                let other_copy = Some((b.clone(), *cb));
                return Ok(Superblocks { sb: a.clone(), geo: ga.clone(), commit: *ca, repair: None, other_copy });
            }
            if a != b {
                return Err(err(
                    path,
                    ImageErrorKind::Corrupt(
                        "the two superblock copies are both valid and hold different geometries (only the commit \
                         they witness is ever rewritten): which geometry is right cannot be told"
                            .to_string(),
                    ),
                ));
            }
            Ok(Superblocks { sb: a.clone(), geo: ga.clone(), commit: *ca.max(cb), repair: None, other_copy: None })
        }
        (Ok((a, g, c)), Err(e)) | (Err(e), Ok((a, g, c))) => {
            let which = if decoded[0].is_ok() { "second" } else { "first" };
            Ok(Superblocks {
                sb: a.clone(),
                geo: g.clone(),
                commit: *c,
                repair: Some(format!("{which} superblock copy: {}; rewritten from the other", describe(e))),
                other_copy: None,
            })
        }
        (Err(e0), Err(e1)) => {
            // The first copy's error names the file best, unless only the second is
            // a zblk superblock at all.
            let e = if matches!(e0, SuperblockError::NotAnImage) && !matches!(e1, SuperblockError::NotAnImage) {
                e1
            } else {
                e0
            };
            let mut k = kind(e);
            if let ImageErrorKind::Corrupt(why) = &mut k {
                *why =
                    format!("both superblock copies are unusable (first: {}; second: {})", describe(e0), describe(e1));
            }
            Err(err(path, k))
        }
    }
}

/// Reads the zone tables under the identity of the superblocks: when the two copies
/// name different identities ([`Superblocks::other_copy`]), the one under which more
/// of the rest of the metadata checks out (tables, live header, live witness) is the
/// image's, and the other copy is another image's: named among the parts of another
/// image, and rewritten. When neither wins, which image the rest belongs to cannot
/// be told: refused.
pub(super) fn settle_identity(path: &Path, media: &dyn Media, sbs: &mut Superblocks) -> Result<Found, ImageError> {
    let read = |sb: &Superblock, commit: u64| {
        read_tables(media, &sbs.geo, &sb.layout, commit, sb.id).map_err(io_err(path, "read zone tables"))
    };
    let first = read(&sbs.sb, sbs.commit)?;
    let Some((other, other_commit)) = sbs.other_copy.take() else { return Ok(first) };
    let second = read(&other, other_commit)?;
    let (a, b) = (first.parts_checking_out(), second.parts_checking_out());
    let (mut found, which, lost) = match a.cmp(&b) {
        std::cmp::Ordering::Greater => (first, "second", other.id),
        std::cmp::Ordering::Less => {
            let lost = sbs.sb.id;
            (sbs.sb, sbs.commit) = (other, other_commit);
            (second, "first", lost)
        }
        std::cmp::Ordering::Equal => {
            return Err(err(
                path,
                ImageErrorKind::Corrupt(format!(
                    "the two superblock copies are both valid and name different images (identities {} and {}): \
                     a superblock of another image was copied into this one, and the rest of the metadata does \
                     not tell which image it is",
                    sbs.sb.id, other.id
                )),
            ));
        }
    };
    found.note_other_image(format!("the {which} superblock copy (identity {lost})"));
    sbs.repair = Some(format!("{which} superblock copy: another image's (identity {lost}); rewritten from the other"));
    Ok(found)
}
