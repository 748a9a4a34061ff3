//! Positional I/O on the image file: the one place the device touches the file
//! (except the live table, which is a shared mapping, and the io_uring driver, which
//! reads and writes the data region itself through [`FileMedia::direct_fd`]).
//!
//! A trait, so that tests can put a power-loss model in between (`powercut`, built
//! with the `testing` feature) and drop the writes no `fdatasync` covered.

use super::zeroing::{FALLOC_FL_WRITE_ZEROES, FileZeroing};
use crate::buf::AlignedBuf;
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
    /// Makes `[offset, offset + len)` read as zeroes with `how` (see
    /// [`FileZeroing`]); the file keeps its length. A fallocate method the file
    /// system does not support fails with EOPNOTSUPP; `pwrite-zeroes` always works.
    fn zero_range(&self, how: FileZeroing, offset: u64, len: u64) -> io::Result<()>;
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

    /// Whether a transfer of `len` bytes at `offset` goes through the `O_DIRECT`
    /// descriptor: always, where the file allows direct I/O and the range is aligned,
    /// whatever the buffer's address (an unaligned buffer is bounced). A page must
    /// never be reached both through the page cache and directly: a direct write that
    /// cannot invalidate a cached page leaves it stale (a later buffered read returns
    /// old data) and the kernel marks the file with EIO, which the next `fdatasync`
    /// returns ("Page cache invalidation failure on direct I/O").
    fn goes_direct(&self, len: usize, offset: u64) -> bool {
        let a = self.dio_align;
        self.direct.is_some() && (len as u64) % a == 0 && offset % a == 0
    }
}

impl Media for FileMedia {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match &self.direct {
            Some(d) if self.goes_direct(buf.len(), offset) => {
                if (buf.as_ptr() as u64) % self.dio_align == 0 {
                    return d.read_exact_at(buf, offset);
                }
                let mut bounce = AlignedBuf::zeroed(buf.len());
                d.read_exact_at(&mut bounce, offset)?;
                buf.copy_from_slice(&bounce);
                Ok(())
            }
            _ => self.buffered.read_exact_at(buf, offset),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        match &self.direct {
            Some(d) if self.goes_direct(buf.len(), offset) => {
                if (buf.as_ptr() as u64) % self.dio_align == 0 {
                    return d.write_all_at(buf, offset);
                }
                d.write_all_at(&AlignedBuf::from_slice(buf), offset)
            }
            _ => self.buffered.write_all_at(buf, offset),
        }
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
        self.write_zeroes(offset, len)
    }

    fn zero_range(&self, how: FileZeroing, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let flags = match how {
            // Not with KEEP_SIZE: fallocate(2) refuses the combination (the extents
            // are written ones, which cannot lie past the end of the file).
            FileZeroing::FallocWriteZeroes => FallocateFlags::from_bits_retain(FALLOC_FL_WRITE_ZEROES),
            FileZeroing::FallocZeroRange => FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE,
            FileZeroing::PwriteZeroes => return self.write_zeroes(offset, len),
        };
        Ok(fallocate(&self.buffered, flags, offset, len)?)
    }
}

/// Bytes of zeroes written per `pwrite` when zeroes are written as data: large, so
/// that the cost is the storage's, not the system calls'.
const ZERO_CHUNK: usize = 4 << 20;

/// One shared, aligned buffer of zeroes (never written to).
fn zero_chunk() -> &'static AlignedBuf {
    static ZEROES: std::sync::OnceLock<AlignedBuf> = std::sync::OnceLock::new();
    ZEROES.get_or_init(|| AlignedBuf::zeroed(ZERO_CHUNK))
}

impl FileMedia {
    /// Writes `len` bytes of zeroes at `offset`: the unaligned head and tail through
    /// the page cache, the aligned middle with `O_DIRECT` where allowed, in large
    /// chunks (the data path of a device told to write zeroes).
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let zeroes = zero_chunk();
        let a = self.dio_align;
        let end = offset + len;
        let head_end = offset.next_multiple_of(a).min(end);
        let tail_start = (end / a * a).max(head_end);
        let mut at = offset;
        for to in [head_end, tail_start, end] {
            while at < to {
                // Middle chunks are multiples of the alignment (ZERO_CHUNK is), so
                // each goes direct; head and tail are shorter than one alignment unit.
                let n = (to - at).min(ZERO_CHUNK as u64) as usize;
                self.write_at(&zeroes[..n], at)?;
                at += n as u64;
            }
        }
        debug_assert_eq!(at, end);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::unix::fs::OpenOptionsExt;

    /// Every method zeroes exactly its range, edges on sectors, not blocks. Written
    /// zeroes with an `O_DIRECT` alignment larger than a sector: the unaligned head
    /// and tail go through the page cache, the middle direct. (A fallocate method this
    /// file system does not have is skipped.)
    #[test]
    fn every_method_zeroes_exactly_its_range() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0xffu8; 64 << 10]).unwrap();
        let buffered = OpenOptions::new().read(true).write(true).open(&p).unwrap();
        let direct = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(&p)
            .ok();
        let m = FileMedia::new(buffered, direct, 4096);
        let cases = [(512, 3 * 4096 + 1024), (4096, 8192), (1024, 1024), (8192 + 3584, 512 + 4096 + 512)];
        for (how, (off, len)) in FileZeroing::ALL.into_iter().flat_map(|h| cases.map(|c| (h, c))) {
            m.write_at(&vec![0xffu8; 64 << 10], 0).unwrap();
            match m.zero_range(how, off, len) {
                Err(e) if how.is_fallocate() && super::super::zeroing::is_not_supported(&e) => continue,
                r => r.unwrap(),
            }
            let mut got = vec![0u8; 64 << 10];
            m.read_at(&mut got, 0).unwrap();
            for (i, &b) in got.iter().enumerate() {
                let want = if (off..off + len).contains(&(i as u64)) { 0 } else { 0xff };
                assert_eq!(b, want, "{how}: zeroing {len} bytes at {off}: byte {i}");
            }
        }
    }
}
