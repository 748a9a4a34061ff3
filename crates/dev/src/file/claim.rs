//! Binding an image to its path.
//!
//! A path is only a name: between two system calls another process may rename,
//! replace or remove the file it names (`mv`, `zblk create -f`, a symbolic link
//! pointed elsewhere). So an image is claimed through one descriptor, never through
//! the path twice:
//!
//! - **Open.** The path is opened once and that descriptor locked (`flock`). Then the
//!   path must still name the same file (device and inode), and the file must still
//!   have a name; otherwise the open starts again on what the path names now (the
//!   lock it waited for may have been held by a `create -f` that replaced the file,
//!   or the file was moved away meanwhile). Every other descriptor on the image (the
//!   `O_DIRECT` one) is opened from the locked descriptor through `/proc/self/fd`,
//!   which reaches the inode and not the name, so that metadata and data always
//!   belong to one file.
//! - **Create.** The image is built in a file without a name (`O_TMPFILE`, or under
//!   a temporary name in the same directory where the file system lacks it; see
//!   [`mod@super::staging`]), then put at the path with `linkat` (or
//!   `renameat2(RENAME_NOREPLACE)`, `link(2)` where the file system lacks the flag),
//!   which fails when anything appeared at the path meanwhile. `create -f` first
//!   examines, opens and locks the file it replaces, names the new image, and swaps
//!   it in with `RENAME_EXCHANGE`: what the swap took out must be that file, or it
//!   is swapped back and the path examined again. Nothing at the path is replaced
//!   unless it was examined and locked.

use super::error::{ImageError, ImageErrorKind, err, in_use, io_err};
use super::staging::Staged;
use crate::error::DeviceErrorKind;
use rustix::fs::{CWD, FlockOperation, OFlags, RenameFlags, flock, renameat_with};
use rustix::io::Errno;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How many times an open or a create starts again after the path changed under it
/// before giving up: a path replaced that often is being replaced in a loop.
const MAX_TRIES: u32 = 16;

/// How long to wait for another holder of an image's lock.
#[derive(Clone, Copy, Debug)]
pub(super) enum Wait {
    /// Not at all: an image in use is refused at once.
    No,
    /// Until this instant (`flock -w`).
    Until(Instant),
    /// As long as it takes (`flock` without `-w`).
    Forever,
}

impl Wait {
    /// The wait `ImageOptions::lock_wait` describes, from now.
    pub(super) fn of(wait: Option<Duration>) -> Wait {
        match wait {
            None => Wait::No,
            Some(Duration::MAX) => Wait::Forever,
            Some(d) => Instant::now().checked_add(d).map_or(Wait::Forever, Wait::Until),
        }
    }
}

fn same_file(a: &Metadata, b: &Metadata) -> bool {
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// Whether `path` (symbolic links followed, as an open resolves it) still names the
/// file `file` is open on, and that file still has a name.
fn still_named(path: &Path, file: &File) -> io::Result<bool> {
    let held = file.metadata()?;
    match std::fs::metadata(path) {
        Ok(now) => Ok(same_file(&now, &held) && held.nlink() > 0),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn lock_error(path: &Path) -> impl FnOnce(io::Error) -> ImageError + '_ {
    move |e| match e {
        e if e.kind() == io::ErrorKind::WouldBlock => in_use(path),
        e => err(path, DeviceErrorKind::Io { op: "lock", source: e }.into()),
    }
}

/// Opens the image at `path` and locks it (shared when `read_only`), waiting for
/// another holder as `wait` says. The descriptor returned is locked and the path
/// named its file once the lock was taken.
pub(super) fn open_locked(path: &Path, read_only: bool, wait: Wait) -> Result<File, ImageError> {
    let not_regular = |m: &Metadata| err(path, ImageErrorKind::NotAnImage(format!("it is {}", file_kind(m))));
    for _ in 0..MAX_TRIES {
        // Only regular files are images: opening a FIFO would block, a device node
        // goes through the Linux device backend. Checked before opening (which could
        // block) and again on the descriptor.
        if let Ok(m) = std::fs::metadata(path) {
            if !m.file_type().is_file() {
                return Err(not_regular(&m));
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .custom_flags(OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .map_err(io_err(path, "open"))?;
        let m = file.metadata().map_err(io_err(path, "stat"))?;
        if !m.file_type().is_file() {
            return Err(not_regular(&m));
        }
        lock_waiting(&file, read_only, wait).map_err(lock_error(path))?;
        if still_named(path, &file).map_err(io_err(path, "stat"))? {
            return Ok(file);
        }
        // Replaced or moved away while this waited for its lock: the file the path
        // names now is the image asked for.
    }
    Err(err(path, ImageErrorKind::Replaced))
}

/// Opens the file `file` is open on once more, with `flags` added (`O_DIRECT`):
/// through `/proc/self/fd`, which reaches the inode whatever the path names now.
/// `None` when that fails (no `/proc`, a flag the file system refuses) or does not
/// reach the same file: the image then goes without that descriptor.
pub(super) fn reopen(file: &File, write: bool, flags: OFlags) -> Option<File> {
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let f = OpenOptions::new().read(true).write(write).custom_flags(flags.bits() as i32).open(by_fd).ok()?;
    let (a, b) = (f.metadata().ok()?, file.metadata().ok()?);
    same_file(&a, &b).then_some(f)
}

/// What `create` finds at `path`: `None` when nothing is there; with `force`, the
/// regular file there, opened, locked (waiting as `wait` says) and still at the path.
/// Anything else is refused: a file without `force`, and never a device node, FIFO,
/// socket, directory, or a symbolic link to anything.
pub(super) fn examine(path: &Path, force: bool, wait: Wait) -> Result<Option<File>, ImageError> {
    for _ in 0..MAX_TRIES {
        let m = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(path, "stat")(e)),
            Ok(m) => m,
        };
        if !m.file_type().is_file() {
            return Err(err(path, ImageErrorKind::NotAnImage(format!("it is {}: not replaced", file_kind(&m)))));
        }
        if !force {
            return Err(err(path, ImageErrorKind::Exists));
        }
        // O_NOFOLLOW: a symbolic link put there since the look above is not followed
        // (ELOOP), and O_NONBLOCK: nor does a FIFO put there block; either is looked
        // at again.
        let flags = OFlags::NOFOLLOW | OFlags::NONBLOCK;
        let f = match OpenOptions::new().read(true).custom_flags(flags.bits() as i32).open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) => {
                continue;
            }
            r => r.map_err(io_err(path, "open"))?,
        };
        let held = f.metadata().map_err(io_err(path, "stat"))?;
        if !held.file_type().is_file() {
            continue;
        }
        lock_waiting(&f, false, wait).map_err(lock_error(path))?;
        // The path itself (not what a link there points to) must still be this file.
        if std::fs::symlink_metadata(path).is_ok_and(|now| same_file(&now, &held)) {
            return Ok(Some(f));
        }
    }
    Err(err(path, ImageErrorKind::Replaced))
}

/// A name for the image `create` builds before putting it at `path`: beside it (a
/// rename never crosses file systems), hidden, and unique to this process and call.
pub(super) fn temp_name(path: &Path, dir: &Path) -> Result<PathBuf, ImageError> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().ok_or_else(|| err(path, ImageErrorKind::NotAnImage("no file name".into())))?;
    Ok(dir.join(format!(".{}.zblk-new-{}-{n}", name.to_string_lossy(), std::process::id())))
}

/// Puts the new image `new` at `path`, in place of `old` (the file [`examine`]
/// locked) or where nothing is, and of nothing else. When something else is there
/// now, a `create` without `force` fails (`Exists`); with `force`, the path is
/// examined again and that file, once locked, replaced.
pub(super) fn install(
    new: &mut Staged,
    path: &Path,
    mut old: Option<File>,
    force: bool,
    wait: Wait,
) -> Result<(), ImageError> {
    for _ in 0..MAX_TRIES {
        let done = match &old {
            None => put_new(new, path)?,
            // A rename swaps: the new image needs a name for it, given only now.
            Some(f) => swap_in(&new.named()?, path, f)?,
        };
        if done {
            new.installed();
            return Ok(());
        }
        if !force {
            return Err(err(path, ImageErrorKind::Exists));
        }
        old = examine(path, true, wait)?;
    }
    Err(err(path, ImageErrorKind::Replaced))
}

/// Puts `new` at `path` unless something is at `path`: `false` then.
fn put_new(new: &mut Staged, path: &Path) -> Result<bool, ImageError> {
    if new.unnamed() {
        // linkat never replaces: EEXIST when the name is taken.
        return match new.link_at(path) {
            Ok(()) => Ok(true),
            Err(Errno::EXIST) => Ok(false),
            Err(e) => Err(io_err(path, "link")(e.into())),
        };
    }
    let tmp = new.named()?;
    let tmp = tmp.as_path();
    match renameat_with(CWD, tmp, CWD, path, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(true),
        Err(Errno::EXIST) => Ok(false),
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
            // A file system without RENAME_NOREPLACE: a hard link fails as well when
            // the name is taken, and the temporary name goes after it.
            match std::fs::hard_link(tmp, path) {
                Ok(()) => {
                    std::fs::remove_file(tmp).map_err(io_err(tmp, "remove the temporary name"))?;
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(io_err(path, "link")(e)),
            }
        }
        Err(e) => Err(io_err(path, "rename")(e.into())),
    }
}

/// Swaps `tmp` in for the file `old` is open on at `path`; `false` when `path` no
/// longer names it (something else took its place, or it is gone): nothing replaced.
fn swap_in(tmp: &Path, path: &Path, old: &File) -> Result<bool, ImageError> {
    let held = old.metadata().map_err(io_err(path, "stat"))?;
    match renameat_with(CWD, tmp, CWD, path, RenameFlags::EXCHANGE) {
        Ok(()) => {
            // `tmp` now names what was at the path.
            if std::fs::symlink_metadata(tmp).is_ok_and(|m| same_file(&m, &held)) {
                // The replaced image. Should its name stay (a directory that lets
                // renames but not removals), it holds the old image, not lost data.
                let _ = std::fs::remove_file(tmp);
                return Ok(true);
            }
            // Another file was put at the path after it was examined: it goes back.
            renameat_with(CWD, tmp, CWD, path, RenameFlags::EXCHANGE)
                .map_err(|e| io_err(path, "rename back")(e.into()))?;
            Ok(false)
        }
        Err(Errno::NOENT) => Ok(false),
        Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
            // No RENAME_EXCHANGE here: the path is checked to name the locked file
            // right before the rename; a change between the two calls goes unseen.
            if !std::fs::symlink_metadata(path).is_ok_and(|m| same_file(&m, &held)) {
                return Ok(false);
            }
            std::fs::rename(tmp, path).map_err(io_err(path, "rename"))?;
            Ok(true)
        }
        Err(e) => Err(io_err(path, "rename")(e.into())),
    }
}

/// What kind of file `m` describes, in words.
pub(super) fn file_kind(m: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device (use the Linux device backend)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Takes `file`'s lock (shared or exclusive), waiting for a holder to let go as `wait`
/// says: forever with a blocking `flock` (as `flock` without `-w`), or until a time
/// (polled, as `flock -w` without its alarm signal); WouldBlock when the time is up.
fn lock_waiting(file: &File, shared: bool, wait: Wait) -> io::Result<()> {
    let until = match wait {
        Wait::No => return lock(file, shared),
        Wait::Until(t) => t,
        Wait::Forever => {
            let op = if shared { FlockOperation::LockShared } else { FlockOperation::LockExclusive };
            return loop {
                match flock(file, op) {
                    Err(Errno::INTR) => continue,
                    r => break r.map_err(io::Error::from),
                }
            };
        }
    };
    loop {
        match lock(file, shared) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

fn lock(file: &File, shared: bool) -> io::Result<()> {
    let op = if shared { FlockOperation::NonBlockingLockShared } else { FlockOperation::NonBlockingLockExclusive };
    flock(file, op).map_err(io::Error::from)
}
