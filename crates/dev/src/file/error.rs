//! What goes wrong with a zoned image: [`ImageError`] names the image file and says
//! what is wrong with it, from a path that does not exist to metadata that does not
//! check out (a superblock of another format version, a torn or corrupt zone table,
//! a state older than the last commit).
//!
//! The kinds every device shares (a missing path, a refused permission, an image in
//! use, a failed system call) are the device vocabulary's ([`DeviceErrorKind`]),
//! carried as [`ImageErrorKind::Device`]; the others are the image's own. Here too an
//! image's error becomes a [`DeviceError`]: the shared kinds as they are, the image's
//! own as [`DeviceErrorKind::Backend`], in the image's words.

use crate::error::{DeviceError, DeviceErrorKind, Hold};
use std::io;
use std::path::Path;
use zblk_core::geometry::GeometryError;

/// What went wrong with an image file. Every error names the file.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {kind}")]
pub struct ImageError {
    /// The image's path, as given.
    pub path: String,
    /// What is wrong.
    pub kind: ImageErrorKind,
}

/// The kinds of [`ImageError`].
#[derive(Debug, thiserror::Error)]
pub enum ImageErrorKind {
    /// A kind every device shares: the file does not exist, cannot be opened with
    /// the access needed, is in use ([`Hold::ImageLock`]), or a system call on it
    /// failed. Said of a file: a missing image is "no such file".
    #[error("{}", shared_words(.0))]
    Device(DeviceErrorKind),
    /// The directory the file would be created in does not exist (the error's path
    /// is the directory's).
    #[error("no such directory")]
    NoDirectory,
    /// The file is not a zblk image.
    #[error("not a zblk image ({0})")]
    NotAnImage(String),
    /// A zblk image of a format version this code does not read.
    #[error(
        "image format version {found}, made by {} zblk (this zblk reads versions 2 to {supported}{})",
        if found > supported { "a newer" } else { "an older" },
        if found > supported { ": use a newer zblk" } else { ": copy its data out with the zblk that made it, and recreate it" }
    )]
    WrongVersion {
        /// The version in the file.
        found: u32,
        /// The version this code reads.
        supported: u32,
    },
    /// A zblk image whose metadata does not check out.
    #[error("corrupt image: {0}")]
    Corrupt(String),
    /// Opening for writing would build on a state that may be older than the last
    /// commit (a flush or a reset may be undone): says which commit and what may be
    /// lost.
    #[error("refusing to open for writing: {0}")]
    MayLoseData(String),
    /// The file is shorter than its geometry needs.
    #[error("truncated image: the file has {len} bytes, its geometry needs {need}")]
    Truncated {
        /// The file's length.
        len: u64,
        /// The length the superblock's geometry needs.
        need: u64,
    },
    /// `create` would overwrite an existing file (there when it looked, or put there
    /// while it made the image).
    #[error("file exists (remove it first, or force)")]
    Exists,
    /// The path was replaced again and again while the image's lock was waited for
    /// or the image made: which file is meant cannot be told.
    #[error("the path was replaced again and again meanwhile: refused")]
    Replaced,
    /// The geometry asked for at creation is refused.
    #[error("invalid geometry: {0}")]
    Geometry(#[from] GeometryError),
    /// The geometry asked for is past a limit of the image format (named).
    #[error("cannot create: {0}")]
    Limit(String),
    /// The data region could not be allocated at creation (`--preallocate`): why.
    #[error("cannot preallocate: {0}")]
    Preallocate(String),
}

/// A shared kind's words for an image, which is a file: the device vocabulary's
/// missing path ("no such file or device") is, for an image, "no such file".
fn shared_words(kind: &DeviceErrorKind) -> String {
    match kind {
        DeviceErrorKind::Missing => "no such file".to_string(),
        kind => kind.to_string(),
    }
}

impl From<DeviceErrorKind> for ImageErrorKind {
    fn from(kind: DeviceErrorKind) -> ImageErrorKind {
        ImageErrorKind::Device(kind)
    }
}

impl From<ImageError> for DeviceError {
    /// The device's error for an image's: a shared kind as it is (said as of any
    /// device), one of the image's own kinds as [`DeviceErrorKind::Backend`], in the
    /// image's words.
    fn from(e: ImageError) -> DeviceError {
        let kind = match e.kind {
            ImageErrorKind::Device(kind) => kind,
            own => DeviceErrorKind::Backend(Box::new(own)),
        };
        DeviceError { device: e.path, kind }
    }
}

/// An error of the image at `path`.
pub(super) fn err(path: &Path, kind: ImageErrorKind) -> ImageError {
    ImageError { path: path.display().to_string(), kind }
}

/// A failed system call `op` on the image at `path`, as the device vocabulary
/// names it ([`DeviceErrorKind::of_io`]).
pub(super) fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> ImageError + 'a {
    move |source| err(path, DeviceErrorKind::of_io(op, source).into())
}

/// Another process holds the image at `path` (its lock is taken).
pub(super) fn in_use(path: &Path) -> ImageError {
    err(path, DeviceErrorKind::InUse(Hold::ImageLock).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_kinds_in_an_image_s_words_and_the_device_s() {
        let e = io_err(Path::new("img"), "open")(io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(e.to_string(), "img: no such file");
        assert!(matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::Missing)));
        let img = ImageError { path: "img".into(), kind: DeviceErrorKind::InUse(Hold::ImageLock).into() };
        assert_eq!(DeviceError::from(img).to_string(), "img: image in use by another process");
        let own = err(Path::new("img"), ImageErrorKind::NotAnImage("empty file".into()));
        let e = DeviceError::from(own);
        assert_eq!(e.to_string(), "img: not a zblk image (empty file)");
        assert!(matches!(e.kind, DeviceErrorKind::Backend(_)));
    }
}
