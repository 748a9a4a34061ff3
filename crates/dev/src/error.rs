//! Errors of opening, using and closing a device, whatever the device: every error
//! names the device (its path, or its kind for a device without one) and the cause.

use crate::file::{ImageError, ImageErrorKind};
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
    /// Another program holds the device exclusively (a mounted file system, another
    /// zblk process).
    #[error("in use by another program (held exclusively)")]
    InUse,
    /// Not a device this driver can use: a regular file given as a block device, a
    /// block device that is not zoned. The text says what it is and what to do.
    #[error("{0}")]
    Unsupported(String),
    /// What the device says about itself is refused: an absurd or inconsistent sysfs
    /// attribute, a zone layout zblk's geometry cannot describe.
    #[error("{0}")]
    Invalid(String),
    /// A zoned image's own problems: not an image, a format version, corruption.
    #[error(transparent)]
    Image(ImageErrorKind),
    /// A system call failed (told by its errno first: ENOSPC, EFBIG, EIO, ...).
    #[error("{op}: {}", crate::file::describe_io(source))]
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

impl DeviceError {
    /// An error of the device at `path`.
    pub fn new(path: &Path, kind: DeviceErrorKind) -> DeviceError {
        DeviceError { device: path.display().to_string(), kind }
    }

    /// A failed system call on the device at `path`: a missing path and a refused
    /// permission get their own kinds, as a user acts on them differently.
    pub fn io(path: &Path, op: &'static str, source: io::Error) -> DeviceError {
        let kind = match source.kind() {
            io::ErrorKind::NotFound => DeviceErrorKind::Missing,
            io::ErrorKind::PermissionDenied => DeviceErrorKind::PermissionDenied,
            _ if source.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) => DeviceErrorKind::InUse,
            _ => DeviceErrorKind::Io { op, source },
        };
        DeviceError::new(path, kind)
    }
}

impl From<ImageError> for DeviceError {
    fn from(e: ImageError) -> DeviceError {
        let kind = match e.kind {
            ImageErrorKind::Missing => DeviceErrorKind::Missing,
            ImageErrorKind::PermissionDenied => DeviceErrorKind::PermissionDenied,
            ImageErrorKind::Io { op, source } => DeviceErrorKind::Io { op, source },
            other => DeviceErrorKind::Image(other),
        };
        DeviceError { device: e.path, kind }
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
        let img = ImageError { path: "img".into(), kind: ImageErrorKind::InUse };
        assert_eq!(DeviceError::from(img).to_string(), "img: image in use by another process");
    }
}
