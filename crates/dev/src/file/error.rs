//! What goes wrong with a zoned image: [`ImageError`] names the image file and says
//! what is wrong with it, from a path that does not exist to metadata that does not
//! check out (a superblock of another format version, a torn or corrupt zone table,
//! a state older than the last commit).

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
    /// The file does not exist.
    #[error("no such file")]
    Missing,
    /// The directory the file would be created in does not exist (the error's path
    /// is the directory's).
    #[error("no such directory")]
    NoDirectory,
    /// The file cannot be opened with the access needed.
    #[error("permission denied")]
    PermissionDenied,
    /// The file is not a zblk image.
    #[error("not a zblk image ({0})")]
    NotAnImage(String),
    /// A zblk image of a format version this code does not read.
    #[error(
        "image format version {found}, made by {} zblk (this zblk reads version {supported}{})",
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
    /// Another process holds the image open (its lock is taken).
    #[error("image in use by another process")]
    InUse,
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
    /// An I/O error on the file.
    #[error("{op}: {}", describe_io(source))]
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: io::Error,
    },
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

pub(super) fn err(path: &Path, kind: ImageErrorKind) -> ImageError {
    ImageError { path: path.display().to_string(), kind }
}

pub(super) fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> ImageError + 'a {
    move |source| match source.kind() {
        io::ErrorKind::NotFound => err(path, ImageErrorKind::Missing),
        io::ErrorKind::PermissionDenied => err(path, ImageErrorKind::PermissionDenied),
        _ => err(path, ImageErrorKind::Io { op, source }),
    }
}
