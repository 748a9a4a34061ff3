//! Reads of a file in memory (tmpfs, ramfs) through a mapping of it: the thread that
//! carries a read on the spot ([`crate::local`]) copies the data out of the page
//! cache itself, where a `pread` would cost a system call and the kernel's own copy.
//! A served image's read then costs what the memory device's does: one copy into the
//! tag's buffer and the one system call that hands it to the kernel.
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

/// The SIGBUS action before zblk's, for faults outside its mappings.
static PREVIOUS: OnceLock<Option<libc::sigaction>> = OnceLock::new();

/// A file in memory mapped read-only, registered with the SIGBUS handler.
pub(crate) struct MappedFile {
    map: memmap2::Mmap,
    slot: usize,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MappedFile({} bytes)", self.map.len())
    }
}

impl MappedFile {
    /// Maps the whole of the file behind `fd` as it is now; `None` when it cannot be
    /// (then reads use `pread`, as before).
    pub(crate) fn new(fd: RawFd) -> Option<MappedFile> {
        if PREVIOUS.get_or_init(install).is_none() {
            return None;
        }
        // SAFETY: a read-only shared mapping of the device's data descriptor. The only
        // way the mapped bytes become invalid is another process shortening the file,
        // which the SIGBUS handler turns into a clear exit (see the module's doc);
        // concurrent writes through the descriptor are seen as the page cache holds
        // them, as a `pread` would see them.
        let map = unsafe { memmap2::MmapOptions::new().map(fd) }.ok()?;
        if map.is_empty() {
            return None;
        }
        let (start, end) = (map.as_ptr() as usize, map.as_ptr() as usize + map.len());
        let slot = RANGES
            .iter()
            .position(|(s, _)| s.compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire).is_ok())?;
        RANGES[slot].1.store(end, Ordering::Release);
        Some(MappedFile { map, slot })
    }

    /// Copies `dst.len()` bytes from byte `offset` of the file into `dst`; false (and
    /// nothing copied) when they lie past the mapping (the file grew since).
    pub(crate) fn read(&self, offset: u64, dst: &mut [u8]) -> bool {
        let Ok(from) = usize::try_from(offset) else { return false };
        match from.checked_add(dst.len()).and_then(|to| self.map.get(from..to)) {
            Some(src) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
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

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let ours = RANGES.iter().any(|(s, e)| {
        let (s, e) = (s.load(Ordering::Acquire), e.load(Ordering::Acquire));
        s != 0 && (s..e).contains(&addr)
    });
    if ours {
        // SAFETY: write and _exit are async-signal-safe.
        unsafe {
            libc::write(2, SHORTENED.as_ptr().cast(), SHORTENED.len());
            libc::_exit(1);
        }
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
