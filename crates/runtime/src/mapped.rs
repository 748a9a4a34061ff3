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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Mappings the SIGBUS handler knows (start, end): more mappings than this at once
/// are not made (their reads use `pread`).
const SLOTS: usize = 16;

static RANGES: [(AtomicUsize, AtomicUsize); SLOTS] = [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; SLOTS];

/// The page the mapping's checks and copies go by: the memory device's page.
const PAGE: usize = zblk_dev::pages::PAGE_BYTES;

/// The stretch of the file allocated at once for writes through the mapping (a huge
/// page's worth): one `fallocate` for 512 pages, then no system call for the writes
/// into them.
const CHUNK: usize = 2 << 20;

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
    /// A bit per [`CHUNK`] of the file: allocated whole (`fallocate`) while the
    /// device's count of punched holes was `epoch`.
    known: Box<[AtomicU64]>,
    epoch: AtomicU64,
    /// Held to allocate or forget chunks (a write that finds its chunks known takes
    /// no lock); false once the file system said it cannot allocate ahead (ramfs).
    allocating: Mutex<bool>,
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
        let known = (0..map.len().div_ceil(CHUNK).div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        Some(MappedFile { map, fd, writable, slot, known, epoch: AtomicU64::new(0), allocating: Mutex::new(true) })
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
        // `self`, and is read through the raw pointer only: a concurrent write of the
        // same bytes (see the module's doc) may tear what is read, as under a `pread`
        // racing a `pwrite`. `dst` is the caller's, exclusively borrowed, and not in
        // the mapping (a BIO's buffer), so the two are apart.
        unsafe { copy_by_pages(src, dst.as_mut_ptr(), dst.len()) };
        true
    }

    /// Copies `src` into the file at byte `offset`; false (and nothing copied) when
    /// the mapping is read-only, the bytes lie past it, or the file has a hole among
    /// them (then `pwrite` does it). `punched` is the device's count of the holes it
    /// punched ([`zblk_dev::DataFds::holes_punched`]).
    pub(crate) fn write(&self, offset: u64, src: &[u8], punched: Option<&AtomicU64>) -> bool {
        if !self.writable {
            return false;
        }
        let Some(dst) = self.at(offset, src.len()) else { return false };
        if !self.allocated(offset, src.len(), punched) {
            return false;
        }
        // SAFETY: `dst..dst + src.len()` lies in the mapping, which is writable and
        // lives as long as `self`, and is written through the raw pointer only (the
        // bytes reach the file's pages as a `pwrite` of them would; a concurrent
        // reader may see them torn). `src` is the caller's, borrowed shared and only
        // read, and not in the mapping.
        unsafe { copy_by_pages(src.as_ptr(), dst, src.len()) };
        true
    }

    /// Whether the file has pages for all of bytes `offset..offset + len` (within the
    /// mapping). A write into a hole (never written, or punched by a discard) through
    /// the mapping takes a new page in its page fault, and a file system that is full
    /// then raises SIGBUS where `pwrite` returns ENOSPC, an error the request can
    /// carry: so a write with a hole in its way goes by `pwrite`.
    ///
    /// The first write into a [`CHUNK`] allocates the whole of it (`fallocate`, the
    /// file's length kept), and the chunk is known allocated until the device punches
    /// a hole anywhere (its count `punched` moves): the writes into it then make no
    /// system call (asking `mincore` on every write cost a served image in the guest
    /// 11-22 % of its writes, and `mincore` counts a page allocated ahead but never
    /// written as a hole, so the writes of a preallocated image went by `pwrite`). A
    /// sparse image in memory thus takes its memory 2 MiB at a time. Where the chunk
    /// cannot be allocated (a full file system; ramfs, which does not allocate
    /// ahead), `mincore` says whether the write's own pages are in the file. Only the
    /// device punches holes (the image's lock keeps other zblk processes out); a
    /// punch that races a write of the same range, which the kernel does not send,
    /// may find the page checked before it, as it could a `mincore` of it.
    fn allocated(&self, offset: u64, len: usize, punched: Option<&AtomicU64>) -> bool {
        if len == 0 {
            return true;
        }
        let count = || punched.map_or(0, |c| c.load(Ordering::Acquire));
        let now = count();
        let (from, to) = (offset as usize, offset as usize + len);
        let chunks = from / CHUNK..=(to - 1) / CHUNK;
        if self.epoch.load(Ordering::Acquire) == now && chunks.clone().all(|c| self.is_known(c)) {
            return true;
        }
        // Recovered: the lock serialises allocations; what it guards (whether the
        // file system allocates at all) and the known bits (each set whole, after its
        // chunk was allocated) are right whatever a panicking thread left.
        let mut can_allocate = self.allocating.lock().unwrap_or_else(|p| p.into_inner());
        if self.epoch.load(Ordering::Acquire) != now {
            self.known.iter().for_each(|w| w.store(0, Ordering::Release));
            self.epoch.store(now, Ordering::Release);
        }
        for c in chunks.clone() {
            if !*can_allocate || self.is_known(c) {
                continue;
            }
            match self.allocate(c) {
                // Not if a punch began since `now` was read: its range may be gone.
                Ok(()) if count() == now => {
                    self.known[c / 64].fetch_or(1 << (c % 64), Ordering::AcqRel);
                }
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::OPNOTSUPP => *can_allocate = false,
                Err(_) => {}
            }
        }
        if chunks.clone().all(|c| self.is_known(c)) || self.resident(from, to) {
            return true;
        }
        self.not_allocated(offset, len)
    }

    /// Allocates chunk `c` of the file, its length kept.
    fn allocate(&self, c: usize) -> rustix::io::Result<()> {
        let len = CHUNK.min(self.map.len() - c * CHUNK);
        // SAFETY: the device's data descriptor, open while the device lives, which
        // outlives the runtime holding this mapping.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd) };
        rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::KEEP_SIZE, (c * CHUNK) as u64, len as u64)
    }

    fn is_known(&self, chunk: usize) -> bool {
        self.known[chunk / 64].load(Ordering::Acquire) & (1 << (chunk % 64)) != 0
    }

    /// Whether every page under bytes `from..to` of the mapping is in the file
    /// (`mincore`, which asks about those pages only, without copying; on tmpfs a
    /// page allocated ahead but never written counts as missing).
    fn resident(&self, from: usize, to: usize) -> bool {
        let first = from & !(PAGE - 1);
        let pages = (to - first).div_ceil(PAGE);
        let mut small = [0u8; CHUNK / PAGE];
        let mut large = Vec::new();
        let vec = if pages <= small.len() {
            &mut small[..pages]
        } else {
            large.resize(pages, 0);
            &mut large[..]
        };
        // SAFETY: the pages lie in the mapping (its start is page-aligned, its length
        // is mapped in whole pages, `to` is within it), `vec` holds a byte for each.
        let r = unsafe { libc::mincore(self.map.as_mut_ptr().add(first).cast(), pages * PAGE, vec.as_mut_ptr()) };
        r == 0 && vec.iter().all(|&v| v & 1 == 1)
    }

    /// A write that `pwrite` makes instead (false), unless the file was shortened by
    /// another process, which has lost the pages too: `fstat` tells that case apart,
    /// and the write stops the process as a fault in the mapping would (see the
    /// module's doc).
    fn not_allocated(&self, offset: u64, len: usize) -> bool {
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
/// `src..src + len` readable, `dst..dst + len` writable, the two apart. A range in
/// the file's mapping may be written or read meanwhile by others (the kernel,
/// another process, another copy), never through a Rust reference: the bytes may
/// then be torn (some from before a concurrent write, some from after), which the
/// caller accepts, as of a `pread` racing a `pwrite`.
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
/// Another process that punches a hole into a part of the file zblk allocated, on a
/// full file system, gets the same: the write into the hole faults.
const SHORTENED: &[u8] = b"zblk: the image's file was shortened while zblk had it mapped, or a hole was \
punched in it while its file system was full (another process changed it, ignoring the image's lock): data \
in it is gone; stopping (exit status 1). Check the image with `zblk check` before using it again.\n";

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
    use super::{CHUNK, MappedFile, copy_by_pages};
    use std::io::Write as _;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A write allocates its chunk of the file whole, once, and trusts that until
    /// the device's count of punched holes moves: then chunks are allocated again as
    /// writes come.
    #[test]
    fn a_chunk_allocated_is_trusted_until_a_hole_is_punched() {
        let Ok(file) = tempfile::tempfile_in("/dev/shm") else {
            let _ = writeln!(std::io::stderr(), "SKIPPED a_chunk_allocated_...: no /dev/shm (tmpfs)");
            return;
        };
        const C: u64 = CHUNK as u64;
        file.set_len(3 * C).unwrap();
        let allocated = || rustix::fs::fstat(&file).unwrap().st_blocks as u64 * 512;
        let map = MappedFile::new(file.as_raw_fd()).expect("a file in memory is mapped");
        let punched = AtomicU64::new(0);
        let block = [5u8; 4096];
        assert!(map.write(4096, &block, Some(&punched)) && map.is_known(0));
        assert_eq!(allocated(), C, "the first chunk, whole");
        assert!(map.write(C - 2048, &block, Some(&punched)) && map.is_known(1), "two chunks at once");
        assert!(!map.is_known(2) && allocated() == 2 * C, "the third is still a hole");
        let hole = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        rustix::fs::fallocate(&file, hole, 8192, 4096).unwrap();
        // Unsaid, the punch is not seen (the device counts every punch it makes).
        assert!(map.write(16384, &block, Some(&punched)) && allocated() == 2 * C - 4096);
        punched.fetch_add(1, Ordering::AcqRel);
        assert!(map.write(C + 4096, &block, Some(&punched)) && map.is_known(1), "allocated again");
        assert!(!map.is_known(0), "forgotten");
        assert!(map.write(8192, &block, Some(&punched)) && map.is_known(0) && allocated() == 2 * C);
        let mut back = vec![0u8; 4096];
        assert!(map.read(C - 2048, &mut back) && back == block);
        assert!(map.read(8192, &mut back) && back == block);
    }

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
