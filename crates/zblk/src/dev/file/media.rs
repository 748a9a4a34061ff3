//! Positional I/O on the image file: the one place the device touches the file
//! (except the live table, which is a shared mapping, and the io_uring driver, which
//! reads and writes the data region itself through [`FileMedia::direct_fd`]).
//!
//! A trait, so that tests can put a [`super::powercut::PowerCut`] in between and
//! model a power loss by dropping the writes no `fdatasync` covered.

use rustix::fs::{FallocateFlags, fallocate, fdatasync};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;

/// Positional I/O on an image file.
pub trait Media: Send + Sync + fmt::Debug {
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Deallocates `[offset, offset + len)`: it reads back as zeroes, the file keeps
    /// its length (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`).
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()>;
}

/// The image file itself: a buffered descriptor for metadata and unaligned I/O, and,
/// where the file system allows it, an `O_DIRECT` one for aligned data I/O (which
/// bypasses the page cache as a device write would).
#[derive(Debug)]
pub struct FileMedia {
    buffered: File,
    direct: Option<File>,
    /// `O_DIRECT` needs offset, length and buffer address aligned to this.
    dio_align: u64,
    /// `FALLOC_FL_PUNCH_HOLE` works on this file system.
    can_punch: std::sync::atomic::AtomicBool,
}

impl FileMedia {
    /// Wraps an open image file; `direct`, if given, is the same file opened with
    /// `O_DIRECT`, usable for I/O aligned to `dio_align` bytes.
    pub fn new(buffered: File, direct: Option<File>, dio_align: u64) -> FileMedia {
        assert!(dio_align.is_power_of_two(), "O_DIRECT alignment {dio_align} is not a power of two");
        FileMedia { buffered, direct, dio_align, can_punch: std::sync::atomic::AtomicBool::new(true) }
    }

    /// The `O_DIRECT` descriptor and its alignment, if the file system allows direct I/O.
    pub fn direct_fd(&self) -> Option<(BorrowedFd<'_>, u64)> {
        self.direct.as_ref().map(|f| (f.as_fd(), self.dio_align))
    }

    /// The buffered descriptor.
    pub fn buffered_fd(&self) -> BorrowedFd<'_> {
        self.buffered.as_fd()
    }

    /// Whether a transfer of `len` bytes at `offset` from or to `addr` can go direct.
    pub fn is_dio_aligned(&self, addr: usize, len: usize, offset: u64) -> bool {
        let a = self.dio_align;
        self.direct.is_some() && (addr as u64) % a == 0 && (len as u64) % a == 0 && offset % a == 0
    }

    fn file_for(&self, addr: usize, len: usize, offset: u64) -> &File {
        match &self.direct {
            Some(d) if self.is_dio_aligned(addr, len, offset) => d,
            _ => &self.buffered,
        }
    }
}

impl Media for FileMedia {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let f = self.file_for(buf.as_ptr() as usize, buf.len(), offset);
        f.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let f = self.file_for(buf.as_ptr() as usize, buf.len(), offset);
        f.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        // Both descriptors share one inode: one fdatasync covers the writes of both.
        Ok(fdatasync(&self.buffered)?)
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        if len == 0 {
            return Ok(());
        }
        if self.can_punch.load(Ordering::Relaxed) {
            match fallocate(&self.buffered, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, offset, len) {
                Ok(()) => return Ok(()),
                Err(e) if e == rustix::io::Errno::OPNOTSUPP => self.can_punch.store(false, Ordering::Relaxed),
                Err(e) => return Err(e.into()),
            }
        }
        // A file system without hole punching: write the zeroes.
        let zeroes = vec![0u8; (1 << 20).min(len) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeroes.len() as u64) as usize;
            self.buffered.write_all_at(&zeroes[..n], offset + done)?;
            done += n as u64;
        }
        Ok(())
    }
}
