//! Reads and writes of a file in memory (tmpfs, ramfs) through a shared mapping of it:
//! the thread that carries a transfer on the spot ([`crate::local`]) copies the data
//! out of, or into, the page cache itself, where a `pread` or `pwrite` would cost a
//! system call and the kernel's own copy (and, in a guest emulated without hardware
//! help, the kernel's `rep movs` copy costs many times the C library's vector copy). A
//! served image's transfer then costs what the memory device's does: one copy between
//! the tag's buffer and the file's pages, and the one system call that moves the data
//! between the tag's buffer and the kernel's request.
//!
//! The mapping is read-write when the descriptor is open for writing, read-only
//! otherwise (then writes use `pwrite`). The file's pages are the page cache's, which
//! `pread`, `pwrite` and `fallocate` (zeroing, unmapping) on the same file see and
//! change coherently: a copy into the mapping is a write to the file as `pwrite`'s is.
//!
//! A shared mapping has one hazard a `pread` has not: if another process shortens the
//! file (ignoring the image's lock), touching a page past its new end raises SIGBUS.
//! The data is gone then whatever zblk does; what zblk owes is a clear word instead of
//! a bare "Bus error". So a SIGBUS handler is installed with the first mapping: a
//! fault inside one of the runtime's mappings prints what happened and exits with
//! status 1; any other SIGBUS goes to the action there was before (by default the
//! process dies with a core dump, as without the handler).

use std::os::fd::RawFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Mappings the SIGBUS handler knows (start, end): more mappings than this at once
/// are not made (their reads use `pread`).
const SLOTS: usize = 16;

static RANGES: [(AtomicUsize, AtomicUsize); SLOTS] = [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; SLOTS];

/// The page the mapping's checks and copies go by: the memory device's page.
const PAGE: usize = zblk_dev::pages::PAGE_BYTES;

/// The SIGBUS action before zblk's, for faults outside its mappings.
static PREVIOUS: OnceLock<Option<libc::sigaction>> = OnceLock::new();

/// A file in memory mapped shared (read-write when its descriptor allows),
/// registered with the SIGBUS handler.
pub(crate) struct MappedFile {
    map: memmap2::MmapRaw,
    /// The descriptor mapped (the device's, open while it lives): asked where the
    /// file's holes are before a write through the mapping.
    fd: RawFd,
    writable: bool,
    slot: usize,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = if self.writable { "read-write" } else { "read-only" };
        write!(f, "MappedFile({} bytes, {how})", self.map.len())
    }
}

impl MappedFile {
    /// Maps the whole of the file behind `fd` as it is now, read-write if `fd` is open
    /// for writing; `None` when it cannot be (then transfers use `pread` and
    /// `pwrite`, as before).
    pub(crate) fn new(fd: RawFd) -> Option<MappedFile> {
        if PREVIOUS.get_or_init(install).is_none() {
            return None;
        }
        // A shared mapping of the device's data descriptor. The only way the mapped
        // bytes become invalid is another process shortening the file, which the
        // SIGBUS handler turns into a clear exit (see the module's doc); concurrent
        // transfers through the descriptor are seen as the page cache holds them, as
        // `pread` and `pwrite` would see them. A descriptor open read-only refuses a
        // writable mapping (EACCES): map it read-only then.
        let opts = memmap2::MmapOptions::new();
        let (map, writable) = match opts.map_raw(fd) {
            Ok(map) => (map, true),
            Err(_) => (opts.map_raw_read_only(fd).ok()?, false),
        };
        if map.len() == 0 {
            return None;
        }
        let (start, end) = (map.as_ptr() as usize, map.as_ptr() as usize + map.len());
        let slot = RANGES
            .iter()
            .position(|(s, _)| s.compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire).is_ok())?;
        RANGES[slot].1.store(end, Ordering::Release);
        Some(MappedFile { map, fd, writable, slot })
    }

    /// The address of bytes `offset..offset + len` of the file in the mapping, or
    /// `None` when they lie past it (the file grew since it was mapped).
    fn at(&self, offset: u64, len: usize) -> Option<*mut u8> {
        let from = usize::try_from(offset).ok()?;
        let to = from.checked_add(len)?;
        // SAFETY: `from <= to <= len()`, so the pointer stays within the mapping.
        (to <= self.map.len()).then(|| unsafe { self.map.as_mut_ptr().add(from) })
    }

    /// Copies `dst.len()` bytes from byte `offset` of the file into `dst`; false (and
    /// nothing copied) when they lie past the mapping (the file grew since).
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> bool {
        let Some(src) = self.at(offset, dst.len()) else { return false };
        // SAFETY: `src..src + dst.len()` lies in the mapping, which lives as long as
        // `self`; the bytes are the page cache's, which a write of the same range in
        // flight meanwhile may change under the copy, as under a `pread` racing a
        // `pwrite` (the read sees some of either; bytes, not Rust values, are moved).
        unsafe { copy_by_pages(src, dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies `src` into the file at byte `offset`; false (and nothing copied) when
    /// the mapping is read-only, the bytes lie past it, or the file has a hole among
    /// them (then `pwrite` does it).
    pub(crate) fn write(&self, offset: u64, src: &[u8]) -> bool {
        if !self.writable {
            return false;
        }
        let Some(dst) = self.at(offset, src.len()) else { return false };
        if !self.allocated(offset, dst, src.len()) {
            return false;
        }
        // SAFETY: as for `read`; the mapping is writable and shared, so the bytes
        // reach the file's pages as a `pwrite` of them would.
        unsafe { copy_by_pages(src.as_ptr(), dst, src.len()) };
        true
    }

    /// Whether the file has pages in memory for all of bytes `offset..offset + len`
    /// (`dst` their place in the mapping). A write into a hole (never written, or
    /// punched by a discard) through the mapping takes a new page in its page fault,
    /// and a file system that is full then raises SIGBUS where `pwrite` returns
    /// ENOSPC, an error the request can carry: so a write with a hole in its way goes
    /// by `pwrite`. `mincore` asks about those pages only, without copying (`lseek`'s
    /// SEEK_HOLE was tried first: it searches on to the next hole, through the rest of
    /// a file that has none, and cost a served image 85 % of its writes). A file
    /// shortened by another process has lost the pages too: `fstat` tells that case
    /// apart, and the write stops the process as a fault in the mapping would (see the
    /// module's doc).
    fn allocated(&self, offset: u64, dst: *mut u8, len: usize) -> bool {
        let first = dst as usize & !(PAGE - 1);
        let pages = (dst as usize + len - first).div_ceil(PAGE);
        let mut small = [0u8; 64];
        let mut large = Vec::new();
        let vec = if pages <= small.len() {
            &mut small[..pages]
        } else {
            large.resize(pages, 0);
            &mut large[..]
        };
        // SAFETY: `first..first + pages * PAGE` lies in the mapping (page-aligned, as
        // the mapping's start and length in pages are), `vec` holds a byte per page.
        let r = unsafe { libc::mincore(first as *mut libc::c_void, pages * PAGE, vec.as_mut_ptr()) };
        if r == 0 && vec.iter().all(|&v| v & 1 == 1) {
            return true;
        }
        // SAFETY: the device's data descriptor, open while the device lives, which
        // outlives the runtime holding this mapping.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) };
        if rustix::fs::fstat(fd).is_ok_and(|st| (st.st_size as u64) < offset.saturating_add(len as u64)) {
            stop_shortened();
        }
        false
    }
}

/// Copies `len` bytes from `src` to `dst` a 4 KiB page at a time, as the memory
/// device's page store does. Natively one large `memcpy` is faster (on a CPU with
/// FSRM, 5.8 against 7.9 us for 128 KiB), but the C library makes a copy above a few
/// KiB with `rep movsb`, which a CPU emulated without hardware help (the kernel VM's
/// guest) carries out a byte at a time: a served image's 128 KiB write then spent most
/// of its time in that one instruction.
///
/// # Safety
///
/// `src..src + len` readable, `dst..dst + len` writable, the two apart.
unsafe fn copy_by_pages(src: *const u8, dst: *mut u8, len: usize) {
    let mut done = 0;
    while done < len {
        let n = PAGE.min(len - done);
        // SAFETY: `done + n <= len`, within both ranges (the caller's promise).
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), n) };
        done += n;
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // The range leaves the handler's table before the mapping goes (end first, so
        // that the handler never sees a range it should not).
        RANGES[self.slot].1.store(0, Ordering::Release);
        RANGES[self.slot].0.store(0, Ordering::Release);
    }
}

/// Installs the handler; the action it replaces, or `None` if it could not.
fn install() -> Option<libc::sigaction> {
    // SAFETY: sigaction with a zeroed (then filled) action and a place for the old one.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        (libc::sigaction(libc::SIGBUS, &act, &mut old) == 0).then_some(old)
    }
}

/// What the handler says before exiting (async-signal-safe: one `write`).
const SHORTENED: &[u8] = b"zblk: the image's file was shortened while zblk had it mapped (another process \
truncated it, ignoring the image's lock): the data past its new end is gone; stopping (exit status 1). \
Check the image with `zblk check` before using it again.\n";

/// Says that the image's file was shortened under its mapping and exits with status
/// 1, from the SIGBUS handler or from a write that finds the file's end moved.
fn stop_shortened() -> ! {
    // SAFETY: write and _exit are async-signal-safe.
    unsafe {
        libc::write(2, SHORTENED.as_ptr().cast(), SHORTENED.len());
        libc::_exit(1);
    }
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let ours = RANGES.iter().any(|(s, e)| {
        let (s, e) = (s.load(Ordering::Acquire), e.load(Ordering::Acquire));
        s != 0 && (s..e).contains(&addr)
    });
    if ours {
        stop_shortened();
    }
    // Not ours: the previous action takes the fault when the instruction runs again.
    // SAFETY: restoring the action sigaction gave back, or the default one (a fault
    // while the handler was being installed).
    unsafe {
        match PREVIOUS.get() {
            Some(Some(old)) => libc::sigaction(libc::SIGBUS, old, std::ptr::null_mut()),
            _ => {
                libc::signal(libc::SIGBUS, libc::SIG_DFL);
                0
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::copy_by_pages;

    /// Every byte of lengths around the page size arrives, in order, and nothing past
    /// the length is written.
    #[test]
    fn a_copy_by_pages_moves_every_byte_and_no_more() {
        for len in [0, 1, 512, 4095, 4096, 4097, 3 * 4096 + 512, 32 * 4096] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
            let mut dst = vec![0xee_u8; len + 64];
            // SAFETY: both ranges hold `len` bytes and are apart.
            unsafe { copy_by_pages(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert_eq!(&dst[..len], &src[..], "length {len}");
            assert!(dst[len..].iter().all(|&b| b == 0xee), "length {len}: written past the end");
        }
    }
}
