//! How an image makes a range read as zeroes (WRITE_ZEROES), and the probe that
//! decides it at open.
//!
//! Zeroing is a property of the host file system, not of the image: the same image
//! copied to another file system may zero differently. So nothing about it is
//! recorded in the superblock; every open probes the file, best method first:
//!
//! 1. `fallocate(FALLOC_FL_WRITE_ZEROES)` (Linux 6.17+): the file system allocates
//!    *written* extents and zeroes them, through the disk's unmapped write zeroes;
//!    it refuses (EOPNOTSUPP) when the disk cannot unmap;
//! 2. `fallocate(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)`: *unwritten* extents,
//!    a metadata change (partial blocks at the edges are zeroed in the page cache);
//! 3. writing buffers of zeroes (`pwrite`): full data writes, always possible.
//!
//! The first two are the image's "unmap" path (a WRITE_ZEROES without NOUNMAP): no
//! data moves. The third is its "write zeroes" path (NOUNMAP, or no fallocate
//! zeroing on this file system).
//!
//! The probe zeroes a range nobody reads, so that it can never destroy data: the
//! padding between the metadata and the data region of the image (see
//! [`super::format::Layout`]), or, when there is none or the image is opened
//! read-only, an unnamed temporary file (`O_TMPFILE`) in the image's directory, on
//! the same file system.

use super::media::{FileMedia, Media};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

/// `FALLOC_FL_WRITE_ZEROES` (Linux 6.17, `include/uapi/linux/falloc.h`); rustix does
/// not name it yet.
pub const FALLOC_FL_WRITE_ZEROES: u32 = 0x80;

/// The `write_zeroes_max_bytes` of an image: the largest WRITE_ZEROES request. Large,
/// because a fallocate call costs about the same for 4 KiB as for 1 GiB; a multiple of
/// every logical block size.
pub const IMAGE_WRITE_ZEROES_MAX_BYTES: u64 = 1 << 30;

/// Bytes zeroed by the probe: one page, the largest logical block size.
pub const PROBE_BYTES: u64 = 4096;

/// How the image zeroes a range of its file, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileZeroing {
    /// `fallocate(FALLOC_FL_WRITE_ZEROES)`: written, zeroed extents; the file system
    /// zeroes them with the disk's unmapped write zeroes.
    FallocWriteZeroes,
    /// `fallocate(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE)`: unwritten extents.
    FallocZeroRange,
    /// `pwrite` of zero buffers: the zeroes are written as data.
    PwriteZeroes,
}

impl FileZeroing {
    /// Every method, in probe order.
    pub const ALL: [FileZeroing; 3] =
        [FileZeroing::FallocWriteZeroes, FileZeroing::FallocZeroRange, FileZeroing::PwriteZeroes];

    /// `fallocate-write-zeroes`, `fallocate-zero-range` or `pwrite-zeroes`.
    pub fn name(self) -> &'static str {
        match self {
            FileZeroing::FallocWriteZeroes => "fallocate-write-zeroes",
            FileZeroing::FallocZeroRange => "fallocate-zero-range",
            FileZeroing::PwriteZeroes => "pwrite-zeroes",
        }
    }

    /// The method named `name` (as [`FileZeroing::name`] gives it).
    pub fn from_name(name: &str) -> Option<FileZeroing> {
        FileZeroing::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the method is a fallocate call (a metadata operation: no data written
    /// by the caller), that is, the image's unmap path.
    pub fn is_fallocate(self) -> bool {
        self != FileZeroing::PwriteZeroes
    }

    /// The method to fall back to when this one is refused.
    pub fn next(self) -> Option<FileZeroing> {
        match self {
            FileZeroing::FallocWriteZeroes => Some(FileZeroing::FallocZeroRange),
            FileZeroing::FallocZeroRange => Some(FileZeroing::PwriteZeroes),
            FileZeroing::PwriteZeroes => None,
        }
    }

    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(c: u8) -> FileZeroing {
        FileZeroing::ALL[usize::from(c)]
    }
}

impl std::fmt::Display for FileZeroing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How an image sets up its WRITE_ZEROES at open ([`super::ImageOptions::zeroing`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZeroingSetup {
    /// Probe the file system, best method first (the default).
    #[default]
    Probe,
    /// Use this method without probing (to compare methods). A fallocate method the
    /// file system refuses still falls back at run time.
    Use(FileZeroing),
    /// The image offers no WRITE_ZEROES at all (`write_zeroes_max_bytes` 0), as a
    /// device without the command: callers write zero buffers themselves.
    NoWriteZeroes,
}

/// What the probe found, for [`super::FileImage::zeroing_probe`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProbeResult {
    /// The method the unmap path starts with.
    pub method: FileZeroing,
    /// Where the probe ran, and what each method it tried answered, in words.
    pub detail: String,
}

/// Where the probe may zero.
pub(super) enum ProbePlace<'a> {
    /// `[offset, offset + PROBE_BYTES)` of the image, a range nothing reads.
    Image(&'a dyn Media, u64),
    /// A temporary file in this directory.
    TempFileIn(&'a Path),
}

/// Tries each fallocate method on `place`, best first; the first that works is the
/// answer, `pwrite-zeroes` if none does.
pub(super) fn probe(place: ProbePlace<'_>) -> ProbeResult {
    let tmp;
    let (media, offset, where_): (&dyn Media, u64, String) = match place {
        ProbePlace::Image(m, off) => (m, off, "probed on the image's metadata padding".to_string()),
        ProbePlace::TempFileIn(dir) => match temp_file(dir) {
            Ok(f) => {
                tmp = FileMedia::new(f, None, 4096);
                (&tmp, 0, format!("probed on a temporary file in the image's directory ({})", dir.display()))
            }
            Err(e) => {
                // Nowhere harmless to try: start with the best method and let the
                // first WRITE_ZEROES settle it (a refused method falls back at run time).
                return ProbeResult {
                    method: FileZeroing::FallocWriteZeroes,
                    detail: format!(
                        "not probed (no temporary file in {}: {e}); fallocate is tried first and falls back \
                         at the first refusal",
                        dir.display()
                    ),
                };
            }
        },
    };
    let mut said = Vec::new();
    for m in [FileZeroing::FallocWriteZeroes, FileZeroing::FallocZeroRange] {
        match media.zero_range(m, offset, PROBE_BYTES) {
            Ok(()) => {
                said.push(format!("{m}: works"));
                return ProbeResult { method: m, detail: format!("{}; {where_}", said.join(", ")) };
            }
            Err(e) => said.push(format!("{m}: {}", refusal(&e))),
        }
    }
    ProbeResult { method: FileZeroing::PwriteZeroes, detail: format!("{}; {where_}", said.join(", ")) }
}

/// A refusal in words: EOPNOTSUPP as "not supported", anything else as the error.
fn refusal(e: &io::Error) -> String {
    if is_not_supported(e) { "not supported (EOPNOTSUPP)".to_string() } else { format!("failed ({e})") }
}

/// Whether `e` says the file system does not support the operation.
pub fn is_not_supported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error())
}

/// An unnamed file in `dir` (gone when closed), one page long.
fn temp_file(dir: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags, open};
    let fd = open(dir, OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    let f = File::from(fd);
    f.set_len(PROBE_BYTES)?;
    Ok(f)
}

/// The unmap path's method, shared by the threads of an image: starts as probed,
/// moves down (never up) when the file system refuses it at run time.
#[derive(Debug)]
pub(super) struct Current(AtomicU8);

impl Current {
    pub(super) fn new(m: FileZeroing) -> Current {
        Current(AtomicU8::new(m.code()))
    }

    pub(super) fn get(&self) -> FileZeroing {
        FileZeroing::from_code(self.0.load(Ordering::Acquire))
    }

    /// `m` was refused: from now on, the method after it (unless another thread
    /// already moved further down).
    pub(super) fn refused(&self, m: FileZeroing) {
        if let Some(next) = m.next() {
            let _ = self.0.fetch_max(next.code(), Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_order() {
        for m in FileZeroing::ALL {
            assert_eq!(FileZeroing::from_name(m.name()), Some(m));
        }
        assert_eq!(FileZeroing::from_name("dd"), None);
        assert_eq!(FileZeroing::FallocWriteZeroes.next(), Some(FileZeroing::FallocZeroRange));
        assert!(!FileZeroing::PwriteZeroes.is_fallocate());
        let c = Current::new(FileZeroing::FallocWriteZeroes);
        c.refused(FileZeroing::FallocZeroRange);
        assert_eq!(c.get(), FileZeroing::PwriteZeroes);
        c.refused(FileZeroing::FallocWriteZeroes);
        assert_eq!(c.get(), FileZeroing::PwriteZeroes, "never moves back up");
    }

    #[test]
    fn probe_on_a_temporary_file_finds_a_method() {
        let dir = tempfile::tempdir().unwrap();
        let r = probe(ProbePlace::TempFileIn(dir.path()));
        assert!(r.detail.contains("temporary file"), "{r:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the temporary file has no name");
        let missing = dir.path().join("nope");
        let r = probe(ProbePlace::TempFileIn(&missing));
        assert_eq!(r.method, FileZeroing::FallocWriteZeroes);
        assert!(r.detail.contains("not probed"), "{r:?}");
    }
}
