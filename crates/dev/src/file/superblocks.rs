//! Reading an image's two superblock copies at open: each checked, a damaged one
//! named and rewritten from the other, two valid ones that disagree refused.

use super::error::{ImageError, ImageErrorKind, err, io_err};
use super::format::{self, Superblock, SuperblockError};
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
                return Err(err(
                    path,
                    ImageErrorKind::Corrupt(format!(
                        "the two superblock copies are both valid and name different images (identities {} and \
                         {}): a superblock of another image was copied into this one, and which image the rest of \
                         the metadata is cannot be told from them",
                        a.id, b.id
                    )),
                ));
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
            Ok(Superblocks { sb: a.clone(), geo: ga.clone(), commit: *ca.max(cb), repair: None })
        }
        (Ok((a, g, c)), Err(e)) | (Err(e), Ok((a, g, c))) => {
            let which = if decoded[0].is_ok() { "second" } else { "first" };
            Ok(Superblocks {
                sb: a.clone(),
                geo: g.clone(),
                commit: *c,
                repair: Some(format!("{which} superblock copy: {}; rewritten from the other", describe(e))),
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
