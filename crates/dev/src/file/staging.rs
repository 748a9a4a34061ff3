//! The new image `create` makes before it is put at its path, and the temporary
//! files that interrupted creates left.
//!
//! The new image is made **unnamed** where the file system can (`O_TMPFILE`): until
//! it is linked at the path it has no name, so a create ended by any signal
//! (SIGINT, SIGTERM, SIGKILL), a crash or a power loss leaves nothing behind; the
//! kernel frees an unnamed file, and the space it holds (all of it with
//! `--preallocate`), with its last descriptor. Removing a named temporary file from a
//! signal handler would not cover SIGKILL or a crash, and would take a process-wide
//! handler from a library.
//!
//! It has a name, `.NAME.zblk-new-PID-N` beside the path, only where it needs one:
//! on a file system without `O_TMPFILE` (some network and FUSE file systems), and
//! for the last step of `create -f`, which swaps it in for the image it replaces
//! with a rename (a rename needs a name; the name is given right before the swap).
//! The name goes when the create ends, whatever its outcome; a create killed while
//! its image had one leaves it, and the next create in that directory names it
//! ([`stale`]).
//!
//! Every new image is locked (exclusive `flock`) from the moment it exists until
//! the create ends, so that a temporary file whose lock is free is known to be
//! stale, whichever process ids were reused since.

use super::claim;
use super::error::{ImageError, io_err};
use rustix::fs::{AtFlags, CWD, FlockOperation, Mode, OFlags, flock, linkat, openat};
use rustix::io::Errno;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The part of a temporary file's name after the image's own name.
const MARK: &str = ".zblk-new-";

/// A new image being made: its descriptor, locked, and its temporary name while it
/// has one (removed when this is dropped, unless it was put at the path).
pub(super) struct Staged {
    file: File,
    dir: PathBuf,
    path: PathBuf,
    name: Option<PathBuf>,
}

impl Staged {
    /// Makes the new image's file for `path` in `dir` (its directory): unnamed where
    /// the file system allows, else under a temporary name; locked either way.
    /// `in_dir` words a failure to make a file in the directory.
    pub(super) fn new(path: &Path, dir: &Path, in_dir: impl Fn(io::Error) -> ImageError) -> Result<Staged, ImageError> {
        let mode = Mode::from_raw_mode(0o666);
        // An unnamed file is linked through /proc (see `link_at`): without /proc it
        // could not be linked at all, so it is named from the start.
        let unnamed = if std::fs::metadata("/proc/self/fd").is_ok() {
            openat(CWD, dir, OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC, mode)
        } else {
            Err(Errno::OPNOTSUPP)
        };
        let file = match unnamed {
            Ok(fd) => File::from(fd),
            // No O_TMPFILE here (EOPNOTSUPP, or EISDIR from a kernel that ignores the
            // flag and opens the directory): a named temporary file.
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => return Staged::named_from_start(path, dir, in_dir),
            Err(e) => return Err(in_dir(e.into())),
        };
        Staged { file, dir: dir.to_path_buf(), path: path.to_path_buf(), name: None }.locked()
    }

    /// [`Staged::new`] where the file system has no `O_TMPFILE`: the new image under
    /// a temporary name from the start.
    fn named_from_start(
        path: &Path,
        dir: &Path,
        in_dir: impl Fn(io::Error) -> ImageError,
    ) -> Result<Staged, ImageError> {
        let tmp = claim::temp_name(path, dir)?;
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&tmp).map_err(in_dir)?;
        // Named now, so removed when dropped, also if the lock below fails.
        Staged { file, dir: dir.to_path_buf(), path: path.to_path_buf(), name: Some(tmp) }.locked()
    }

    /// Takes the new image's lock (nobody else knows the file yet: it is free).
    fn locked(self) -> Result<Staged, ImageError> {
        flock(&self.file, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| io_err(&self.path, "lock the new image")(e.into()))?;
        Ok(self)
    }

    /// The new image's descriptor.
    pub(super) fn file(&self) -> &File {
        &self.file
    }

    /// The new image's temporary name, giving it one first if it has none (an
    /// unnamed file linked under a fresh temporary name).
    pub(super) fn named(&mut self) -> Result<PathBuf, ImageError> {
        if let Some(n) = &self.name {
            return Ok(n.clone());
        }
        let tmp = claim::temp_name(&self.path, &self.dir)?;
        self.link_at(&tmp).map_err(|e| io_err(&self.path, "link the new image")(e.into()))?;
        self.name = Some(tmp.clone());
        Ok(tmp)
    }

    /// Whether the file is unnamed (made with `O_TMPFILE`, not linked yet).
    pub(super) fn unnamed(&self) -> bool {
        self.name.is_none()
    }

    /// Gives the unnamed file the name `to`; fails with EEXIST when `to` is taken,
    /// replacing nothing.
    pub(super) fn link_at(&self, to: &Path) -> Result<(), Errno> {
        // Through /proc, which any process may do (linkat's AT_EMPTY_PATH needs
        // CAP_DAC_READ_SEARCH): the descriptor's link names the inode.
        let by_fd = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        match linkat(CWD, by_fd.as_str(), CWD, to, AtFlags::SYMLINK_FOLLOW) {
            Err(Errno::NOENT) if std::fs::metadata("/proc/self/fd").is_err() => {
                linkat(&self.file, "", CWD, to, AtFlags::EMPTY_PATH)
            }
            r => r,
        }
    }

    /// The image was put at the path: its temporary name (if it had one) is gone.
    pub(super) fn installed(&mut self) {
        self.name = None;
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(n) = self.name.take() {
            let _ = std::fs::remove_file(n);
        }
    }
}

/// A temporary file an interrupted create left: its path and the space it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleTemporary {
    /// Where it is.
    pub path: PathBuf,
    /// The bytes the file system allocated to it (all of the data region when the
    /// create preallocated).
    pub allocated_bytes: u64,
}

/// The temporary files of interrupted creates in the directory `path` is in (of any
/// image's name): named like a new image's (`.NAME.zblk-new-...`), regular files, and
/// not locked (a create in progress holds its new image's lock). Nothing is removed:
/// a file whose name only looks so is the user's to judge.
pub fn stale(path: &Path) -> Vec<StaleTemporary> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<StaleTemporary> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with('.') && n.contains(MARK)))
        .filter_map(|e| {
            let p = e.path();
            // Not followed, not blocked on: only a regular file is looked into.
            let flags = OFlags::NOFOLLOW | OFlags::NONBLOCK;
            let f = OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(&p).ok()?;
            let m = f.metadata().ok()?;
            if !m.file_type().is_file() {
                return None;
            }
            // The lock is let go with `f`, at once.
            flock(&f, FlockOperation::NonBlockingLockExclusive).ok()?;
            Some(StaleTemporary { path: p, allocated_bytes: m.blocks() * 512 })
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// `found` in words: each file and the MiB it holds.
pub fn describe(found: &[StaleTemporary]) -> String {
    let each: Vec<String> =
        found.iter().map(|t| format!("{} ({} MiB)", t.path.display(), t.allocated_bytes.div_ceil(1 << 20))).collect();
    each.join(", ")
}

/// The words a refusal for room adds when temporary files of interrupted creates
/// hold space in `path`'s directory: empty when none do.
pub(super) fn held_by_stale(path: &Path) -> String {
    let found: Vec<StaleTemporary> = stale(path).into_iter().filter(|t| t.allocated_bytes > 0).collect();
    if found.is_empty() {
        return String::new();
    }
    let total: u64 = found.iter().map(|t| t.allocated_bytes).sum();
    format!(
        "; {} temporary file{} left by interrupted creates hold{} {} MiB of the file system (remove {} to free the space): {}",
        found.len(),
        if found.len() == 1 { "" } else { "s" },
        if found.len() == 1 { "s" } else { "" },
        total.div_ceil(1 << 20),
        if found.len() == 1 { "it" } else { "them" },
        describe(&found)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_dir(e: io::Error) -> ImageError {
        io_err(Path::new("dir"), "create")(e)
    }

    #[test]
    fn an_unnamed_new_image_leaves_nothing_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let staged = Staged::new(&path, dir.path(), no_dir).unwrap();
        assert!(staged.unnamed(), "tmpfs and ext4 have O_TMPFILE");
        drop(staged);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_named_new_image_is_locked_while_made_and_its_name_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let mut staged = Staged::named_from_start(&path, dir.path(), no_dir).unwrap();
        let name = staged.named().unwrap();
        assert!(name.file_name().unwrap().to_str().unwrap().starts_with(".img.zblk-new-"));
        // Held by a create in progress: not stale.
        assert_eq!(stale(&path), []);
        drop(staged);
        assert!(!name.exists(), "the temporary name stayed");
    }

    #[test]
    fn a_temporary_file_whose_lock_is_free_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let left = dir.path().join(".other.img.zblk-new-4242-0");
        std::fs::write(&left, vec![1u8; 1 << 20]).unwrap();
        std::fs::write(dir.path().join("zblk-new-not-hidden"), b"x").unwrap();
        std::fs::create_dir(dir.path().join(".d.zblk-new-1-0")).unwrap();
        let found = stale(&dir.path().join("img"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, left);
        assert!(found[0].allocated_bytes >= 1 << 20, "{found:?}");
        assert!(
            held_by_stale(&dir.path().join("img")).contains("1 temporary file left by interrupted creates holds 1 MiB")
        );
        assert!(left.exists(), "nothing is removed");
    }
}
