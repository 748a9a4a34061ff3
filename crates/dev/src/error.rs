//! Errors of opening, using and closing a device, whatever the device: every error
//! names the device (its path, or its kind for a device without one) and the cause.
//!
//! # One vocabulary
//!
//! [`DeviceErrorKind`] holds the kinds every backend shares, each defined once here:
//! a path that does not exist, a refused permission, a device in use (and how it is
//! held: [`Hold`]), a device a backend cannot use or whose own description is
//! refused, and a failed system call told by its errno ([`describe_io`]). A failed
//! system call becomes one of them in one place ([`DeviceErrorKind::of_io`]).
//!
//! A backend's own kinds stay the backend's, and it converts them to this
//! vocabulary itself: a zoned image's (not an image, a format version, truncated,
//! corrupt, a state older than the last commit) are the image backend's
//! `ImageErrorKind`, which carries the shared kinds as they are and converts its own
//! to [`DeviceErrorKind::Backend`], in its words. Nothing here depends on a backend.

use std::io;
use std::path::Path;

/// What went wrong with a device. Every error names the device.
#[derive(Debug, thiserror::Error)]
#[error("{device}: {kind}")]
pub struct DeviceError {
    /// The device's path as given (or its kind, for a device without a path).
    pub device: String,
    /// What is wrong.
    pub kind: DeviceErrorKind,
}

/// The kinds of [`DeviceError`].
#[derive(Debug, thiserror::Error)]
pub enum DeviceErrorKind {
    /// The path does not exist.
    #[error("no such file or device")]
    Missing,
    /// The device cannot be opened with the access needed.
    #[error("permission denied")]
    PermissionDenied,
    /// Another program holds the device (a mounted file system, another zblk
    /// process); how, and so what to look for, is the [`Hold`].
    #[error("{0}")]
    InUse(Hold),
    /// Not a device this driver can use: a regular file given as a block device, a
    /// block device that is not zoned. The text says what it is and what to do.
    #[error("{0}")]
    Unsupported(String),
    /// What the device says about itself is refused: an absurd or inconsistent sysfs
    /// attribute, a zone layout zblk's geometry cannot describe.
    #[error("{0}")]
    Invalid(String),
    /// A backend's own problem, in its words: a zoned image's kinds that are not
    /// shared (not an image, a format version, corruption, ...), which the image
    /// backend converts to this; downcast to its kind to tell them apart.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// A system call failed (told by its errno first: ENOSPC, EFBIG, EIO, ...).
    #[error("{op}: {}", describe_io(source))]
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

/// How a device in use is held by another program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Hold {
    /// Opened exclusively: a block device's `O_EXCL` open (a mounted file system,
    /// another zblk process) makes another fail with EBUSY.
    #[error("in use by another program (held exclusively)")]
    Exclusive,
    /// A zoned image's lock (`flock`), which the process using the image holds for as
    /// long as it has it open.
    #[error("image in use by another process")]
    ImageLock,
}

impl DeviceErrorKind {
    /// The kind of a failed system call: a missing path and a refused permission get
    /// their own kinds, as a user acts on them differently; any other failure is told
    /// by its errno.
    pub fn of_io(op: &'static str, source: io::Error) -> DeviceErrorKind {
        match source.kind() {
            io::ErrorKind::NotFound => DeviceErrorKind::Missing,
            io::ErrorKind::PermissionDenied => DeviceErrorKind::PermissionDenied,
            _ => DeviceErrorKind::Io { op, source },
        }
    }
}

impl DeviceError {
    /// An error of the device at `path`.
    pub fn new(path: &Path, kind: DeviceErrorKind) -> DeviceError {
        DeviceError { device: path.display().to_string(), kind }
    }

    /// A failed system call on the device at `path` ([`DeviceErrorKind::of_io`]);
    /// EBUSY says another program holds it exclusively.
    pub fn io(path: &Path, op: &'static str, source: io::Error) -> DeviceError {
        let kind = match DeviceErrorKind::of_io(op, source) {
            DeviceErrorKind::Io { source, .. }
                if source.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) =>
            {
                DeviceErrorKind::InUse(Hold::Exclusive)
            }
            kind => kind,
        };
        DeviceError::new(path, kind)
    }
}

/// An I/O error as the kernel names it and in words: the errno first, so that a
/// full file system or the file size limit is told from a failing disk.
pub fn describe_io(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(27) => "EFBIG: file size limit (ulimit -f) or the file system's largest file".to_string(),
        Some(28) => "ENOSPC: no space left on the file system holding the image".to_string(),
        Some(122) => "EDQUOT: disk quota exceeded".to_string(),
        Some(5) => "EIO: I/O error reported by the file system".to_string(),
        Some(30) => "EROFS: read-only file system".to_string(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_device_and_the_cause() {
        let p = Path::new("/dev/nullb0");
        let e = DeviceError::io(p, "open", io::Error::from_raw_os_error(rustix::io::Errno::BUSY.raw_os_error()));
        assert_eq!(e.to_string(), "/dev/nullb0: in use by another program (held exclusively)");
        let e = DeviceError::io(p, "open", io::Error::from(io::ErrorKind::NotFound));
        assert!(matches!(e.kind, DeviceErrorKind::Missing));
        let e = DeviceError::io(p, "BLKREPORTZONE", io::Error::from_raw_os_error(5));
        assert!(e.to_string().starts_with("/dev/nullb0: BLKREPORTZONE: "), "{e}");
        // A full file system or a file size limit is told by its errno, not as EIO.
        let e = DeviceError::io(p, "close", io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error()));
        assert!(e.to_string().starts_with("/dev/nullb0: close: ENOSPC: no space left"), "{e}");
    }
}
