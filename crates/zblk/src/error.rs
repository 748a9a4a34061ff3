//! The library's errors: typed values, each with the errno the kernel would give
//! ([`Error::errno`]) and, for a refused request, the zone rule that refused it
//! ([`Error::rule`]), said in the words the `zblk` command uses ([`crate::explain`]).

use zblk_core::bio::{Op, Status};
use zblk_core::rule::Rule;
use zblk_dev::DeviceErrorKind;
use zblk_dev::file::{ImageError, ImageErrorKind};
use zblk_runtime::single::RangeError;

/// The kernel's errnos the library gives where no request's status says one.
mod errno {
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EACCES: i32 = 13;
    pub const EBUSY: i32 = 16;
    pub const EINVAL: i32 = 22;
    pub const ENODEV: i32 = 19;
    pub const EOPNOTSUPP: i32 = 95;
}

/// Why a call of the library failed.
///
/// ```
/// let e = zblk::Handle::open("sim:nullb:nosuch=1").unwrap_err();
/// assert!(matches!(e, zblk::Error::Spec { .. }));
/// assert_eq!(e.errno(), 22); // EINVAL
/// assert!(e.to_string().starts_with("sim:nullb:nosuch=1: "));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The target string names nothing zblk opens (a bad preset, parameter or stack
    /// specification, an empty string). EINVAL.
    #[error("{spec}: {why}")]
    Spec {
        /// The string given.
        spec: String,
        /// Why it is refused.
        why: String,
    },
    /// The target names something zblk cannot run the handle on yet (a simulated
    /// stack: docs/library.md). EOPNOTSUPP.
    #[error("{spec}: {why}")]
    Unsupported {
        /// The string given.
        spec: String,
        /// What is missing.
        why: String,
    },
    /// The target could not be opened or started: missing, in use, not zoned, a
    /// corrupt image, no io_uring where it was required. The source is the device's
    /// own error (`zblk_dev::DeviceError`, `zblk_dev::file::ImageError`,
    /// `zblk_runtime::RuntimeError`), to downcast.
    #[error("{source}")]
    Open {
        /// The errno: the system call's where one failed, else the one that says the
        /// kind (ENOENT, EACCES, EBUSY, EINVAL for a file that is no image or a
        /// device that is not zoned, EIO).
        errno: i32,
        /// The device's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An option or a request is out of the bounds the library keeps to protect the
    /// caller (queue depth, the bytes of one request). EINVAL.
    #[error("{what} {value} is out of bounds: {bounds}")]
    Limit {
        /// What is out of bounds.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The bounds, in words.
        bounds: String,
    },
    /// A request's range refused before it was submitted: an offset or a length not
    /// on the device's logical blocks, an empty request, a range past the device's
    /// end. EINVAL.
    #[error("{message}")]
    Range {
        /// Why.
        range: RangeError,
        /// The errno's name, then why, in words.
        message: String,
    },
    /// A request the engine or the device refused or failed: its status (the
    /// kernel's errno, and the zone rule when the place that decided named one).
    #[error("{message}")]
    Io {
        /// The operation.
        op: Op,
        /// Its byte offset (the zone's start for a zone operation or an append).
        offset: u64,
        /// Its length in bytes (0 without data).
        len: u64,
        /// Its status: [`Status::errno`], [`Status::rule`].
        status: Status,
        /// The errno's name, then the rule in words (`EIO: write at sector 8200 is
        /// not at zone 1's write pointer (sector 8192)`).
        message: String,
    },
    /// A zone report failed: its status (the kernel's errno).
    #[error("{message}")]
    Report {
        /// Its status.
        status: Status,
        /// The errno's name, then why.
        message: String,
    },
    /// The handle was closed ([`Handle::close`](crate::Handle::close)). ENODEV.
    #[error("the handle is closed")]
    Closed,
    /// Closing the device failed (an image that could not commit its tables): what
    /// was written before the close's flush stays as a crash leaves it. The source is
    /// the device's error.
    #[error("{source}")]
    Close {
        /// The errno (as for [`Error::Open`]).
        errno: i32,
        /// The device's error.
        source: zblk_dev::DeviceError,
    },
}

impl Error {
    /// The errno the kernel would give (positive: 5 is EIO, 22 EINVAL).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Spec { .. } | Error::Limit { .. } | Error::Range { .. } => errno::EINVAL,
            Error::Unsupported { .. } => errno::EOPNOTSUPP,
            Error::Open { errno, .. } | Error::Close { errno, .. } => *errno,
            Error::Io { status, .. } | Error::Report { status, .. } => status.errno(),
            Error::Closed => errno::ENODEV,
        }
    }

    /// The zone rule that refused the request, when the place that decided named one
    /// (an unaligned range is [`Rule::NotBlockAligned`], a range past the end
    /// [`Rule::BeyondEnd`], an empty one [`Rule::LengthZero`]).
    pub fn rule(&self) -> Option<Rule> {
        match self {
            Error::Io { status, .. } | Error::Report { status, .. } => status.rule(),
            Error::Range { range, .. } => Some(match range {
                RangeError::LengthZero => Rule::LengthZero,
                RangeError::BeyondEnd { .. } => Rule::BeyondEnd,
                RangeError::OffsetNotSector | RangeError::OffsetNotBlock { .. } | RangeError::LengthNotBlock { .. } => {
                    Rule::NotBlockAligned
                }
            }),
            _ => None,
        }
    }

    /// The request's status, for a request the engine or the device refused or failed.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Io { status, .. } | Error::Report { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// A device error at opening or closing, with the errno of its kind.
    pub(crate) fn of_image(e: ImageError) -> Error {
        let errno = match &e.kind {
            ImageErrorKind::Device(k) => device_errno(k),
            ImageErrorKind::NoDirectory => errno::ENOENT,
            ImageErrorKind::Exists => errno::EBUSY,
            _ => errno::EINVAL,
        };
        Error::Open { errno, source: Box::new(e) }
    }

    /// A device error at opening, with the errno of its kind.
    pub(crate) fn of_device(e: zblk_dev::DeviceError) -> Error {
        Error::Open { errno: device_errno(&e.kind), source: Box::new(e) }
    }

    /// A device error at closing, with the errno of its kind.
    pub(crate) fn of_close(e: zblk_dev::DeviceError) -> Error {
        Error::Close { errno: device_errno(&e.kind), source: e }
    }
}

/// The errno of a device error's kind: the system call's where one failed.
fn device_errno(k: &DeviceErrorKind) -> i32 {
    match k {
        DeviceErrorKind::Missing => errno::ENOENT,
        DeviceErrorKind::PermissionDenied => errno::EACCES,
        DeviceErrorKind::InUse(_) => errno::EBUSY,
        DeviceErrorKind::Unsupported(_) | DeviceErrorKind::Invalid(_) => errno::EINVAL,
        DeviceErrorKind::Io { source, .. } => source.raw_os_error().unwrap_or(errno::EIO),
        DeviceErrorKind::Backend(_) => errno::EIO,
    }
}
