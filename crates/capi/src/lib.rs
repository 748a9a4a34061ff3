//! zblk's C face: the `zblk` library's blocking calls for C programs, declared in
//! `include/zblk.h` (made from this file by cbindgen) and built as
//! `libzblk_capi.so`. A call returns 0 or a negative errno (`-EIO`, `-EINVAL`, ...,
//! as the kernel's and liburing's calls do); [`zblk_last_error`] says why in words,
//! with the zone rule that refused a request (`EIO: write at sector 8200 is not at
//! zone 1's write pointer (sector 8192)`). A handle is shared by any number of
//! threads; only [`zblk_close`] must be the last call on it. docs/library.md, "The C
//! header", sets the calls beside libzbd's.
//!
//! Every call catches a panic of the library (a broken invariant, which fails the
//! runtime: docs/ARCHITECTURE.md, "Fail-stop") and returns `-EIO` instead of
//! unwinding into C.

#![deny(missing_docs)]

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use zblk::{Error, Handle, IssuePolicy, Options, ZoneOp};

const EINVAL: c_int = 22;
const EIO: c_int = 5;

/// An open zoned target (opaque): made by [`zblk_open`], freed by [`zblk_close`].
pub struct ZblkHandle {
    h: Handle,
}

/// How to open a target; a NULL `ZblkOptions *` is every default.
#[repr(C)]
pub struct ZblkOptions {
    /// The issue policy's name (`"zwp"`, `"qd1"`, `"batch"`, `"pipeline"`, ...), or
    /// NULL for the device's own.
    pub policy: *const c_char,
    /// Requests the device is given at once, 1 to 4096; 0 for the default (64).
    pub queue_depth: u32,
    /// Non-zero: writes, zone operations and flushes fail; an image is not repaired.
    pub read_only: c_int,
}

/// The target's geometry.
#[repr(C)]
pub struct ZblkInfo {
    /// Its size, bytes.
    pub capacity: u64,
    /// A zone's size, bytes.
    pub zone_size: u64,
    /// The logical block size, bytes: every offset and length is a multiple of it.
    pub block_size: u64,
    /// Its zones.
    pub nr_zones: u32,
}

/// A zone as the device reports it, in bytes; `zone_type` and `cond` are the kernel's
/// `BLK_ZONE_TYPE_*` and `BLK_ZONE_COND_*` values (libzbd's `ZBD_ZONE_TYPE_*` and
/// `ZBD_ZONE_COND_*`).
#[repr(C)]
pub struct ZblkZone {
    /// Its first byte.
    pub start: u64,
    /// Its size.
    pub len: u64,
    /// The bytes that can be written in it.
    pub capacity: u64,
    /// Its write pointer.
    pub wp: u64,
    /// 1 conventional, 2 sequential write required, 3 sequential write preferred.
    pub zone_type: u32,
    /// 1 EMPTY, 2 implicitly open, 3 explicitly open, 4 CLOSED, 13 READONLY, 14 FULL,
    /// 15 OFFLINE (0 for a conventional zone).
    pub cond: u32,
}

thread_local! {
    /// The words of this thread's last failed call.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs a call: 0 or its negative errno, its words kept for [`zblk_last_error`]; a
/// panic is `-EIO`.
fn call(f: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_error(&e.to_string());
            -e.errno()
        }
        Err(_) => {
            set_error("EIO: zblk failed (a thread of its runtime panicked)");
            -EIO
        }
    }
}

/// `-EINVAL` for a NULL argument, said.
fn null(what: &str) -> c_int {
    set_error(&format!("EINVAL: {what} is NULL"));
    -EINVAL
}

/// The words of the last call on this thread that failed: valid until the next
/// failing call on this thread; an empty string before any.
#[unsafe(no_mangle)]
pub extern "C" fn zblk_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The options as the library takes them.
///
/// # Safety
/// `opts` is NULL or points to a valid `ZblkOptions` whose `policy` is NULL or a
/// NUL-terminated string.
unsafe fn options(opts: *const ZblkOptions) -> Result<Options, Error> {
    let mut o = Options::new();
    // SAFETY: the caller's promise.
    let Some(opts) = (unsafe { opts.as_ref() }) else { return Ok(o) };
    if !opts.policy.is_null() {
        // SAFETY: the caller's promise.
        let name = unsafe { CStr::from_ptr(opts.policy) }.to_string_lossy();
        let policy = IssuePolicy::parse(&name).ok_or_else(|| Error::Spec {
            spec: name.to_string(),
            why: format!("no such issue policy (known: {})", IssuePolicy::ALL.map(|p| p.name()).join(", ")),
        })?;
        o = o.policy(policy);
    }
    if opts.queue_depth != 0 {
        o = o.queue_depth(opts.queue_depth);
    }
    Ok(o.read_only(opts.read_only != 0))
}

/// Opens the target `spec` names (an image path, a Linux zoned block device, an
/// NVMe generic device `/dev/ngXnY`, `sim:PRESET[:name=value,...]`, a simulated
/// stack `stack:SPEC`) with `opts` (NULL: the defaults); `*out` is the handle, or
/// NULL on failure.
///
/// # Safety
/// `spec` is a NUL-terminated string; `opts` is NULL or valid; `out` points to
/// writable memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_open(spec: *const c_char, opts: *const ZblkOptions, out: *mut *mut ZblkHandle) -> c_int {
    if out.is_null() {
        return null("out");
    }
    // SAFETY: `out` is writable, the caller's promise.
    unsafe { *out = std::ptr::null_mut() };
    if spec.is_null() {
        return null("spec");
    }
    call(|| {
        // SAFETY: the caller's promises.
        let (spec, o) = (unsafe { CStr::from_ptr(spec) }.to_string_lossy(), unsafe { options(opts) }?);
        let h = o.open(&spec)?;
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(Box::new(ZblkHandle { h })) };
        Ok(())
    })
}

/// Waits for every request on the handle, closes the target (an image commits its
/// tables) and frees the handle, even when closing fails. NULL does nothing.
///
/// # Safety
/// `h` is NULL or a handle from [`zblk_open`] not closed yet, which no other call
/// uses now or later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_close(h: *mut ZblkHandle) -> c_int {
    if h.is_null() {
        return 0;
    }
    // SAFETY: the caller's promise: the handle is ours to free.
    let h = unsafe { Box::from_raw(h) };
    call(move || h.h.close())
}

/// The handle behind a pointer, or `-EINVAL`.
///
/// # Safety
/// `h` is NULL or an open handle.
unsafe fn handle<'a>(h: *const ZblkHandle) -> Result<&'a Handle, c_int> {
    // SAFETY: the caller's promise.
    unsafe { h.as_ref() }.map(|h| &h.h).ok_or_else(|| null("the handle"))
}

/// The bytes at `buf`, or `-EINVAL` for a NULL with a length.
///
/// # Safety
/// `buf` is NULL or points to `len` readable bytes.
unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> Result<&'a [u8], c_int> {
    match (buf.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(null("the buffer")),
        // SAFETY: the caller's promise.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }),
    }
}

/// The target's geometry into `*info`.
///
/// # Safety
/// `h` is an open handle; `info` points to writable memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_info(h: *const ZblkHandle, info: *mut ZblkInfo) -> c_int {
    // SAFETY: the caller's promises.
    let (h, info) = match (unsafe { handle(h) }, unsafe { info.as_mut() }) {
        (Ok(h), Some(i)) => (h, i),
        (Err(e), _) => return e,
        (_, None) => return null("info"),
    };
    *info = ZblkInfo {
        capacity: h.capacity(),
        zone_size: h.zone_size(),
        block_size: h.block_size(),
        nr_zones: h.geometry().nr_zones(),
    };
    0
}

/// Reports zones from the one holding byte `offset`: at most `*nr_zones` of them
/// into `zones`; `*nr_zones` becomes the number reported (as libzbd's
/// `zbd_report_zones`).
///
/// # Safety
/// `h` is an open handle; `nr_zones` points to a writable count and `zones` to that
/// many writable `ZblkZone`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_report_zones(
    h: *const ZblkHandle,
    offset: u64,
    zones: *mut ZblkZone,
    nr_zones: *mut u32,
) -> c_int {
    // SAFETY: the caller's promises.
    let (h, n) = match (unsafe { handle(h) }, unsafe { nr_zones.as_mut() }) {
        (Ok(h), Some(n)) => (h, n),
        (Err(e), _) => return e,
        (_, None) => return null("nr_zones"),
    };
    if zones.is_null() && *n > 0 {
        return null("zones");
    }
    call(|| {
        let first = h.zone(offset)?.start;
        let report = h.report()?;
        let from = report.iter().position(|z| z.start == first).unwrap_or(report.len());
        let take = report[from..].len().min(*n as usize);
        for (i, z) in report[from..from + take].iter().enumerate() {
            let c = ZblkZone {
                start: z.start,
                len: z.len,
                capacity: z.capacity,
                wp: z.wp,
                zone_type: z.kind.code().into(),
                cond: z.cond.code().into(),
            };
            // SAFETY: `zones` holds `*n` entries, and `i < take <= *n`.
            unsafe { zones.add(i).write(c) };
        }
        *n = take as u32;
        Ok(())
    })
}

/// Writes `len` bytes at `offset` and waits; in a sequential zone at its write
/// pointer.
///
/// # Safety
/// `h` is an open handle; `buf` points to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_write_at(h: *const ZblkHandle, offset: u64, buf: *const c_void, len: usize) -> c_int {
    // SAFETY: the caller's promises.
    match (unsafe { handle(h) }, unsafe { bytes(buf, len) }) {
        (Ok(h), Ok(data)) => call(|| h.write_at(offset, data)),
        (Err(e), _) | (_, Err(e)) => e,
    }
}

/// Appends `len` bytes to the zone starting at byte `zone`, waits, and sets
/// `*landed` (if not NULL) to the byte offset where they landed: zone append,
/// emulated where the device has none.
///
/// # Safety
/// `h` is an open handle; `buf` points to `len` readable bytes; `landed` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_append(
    h: *const ZblkHandle,
    zone: u64,
    buf: *const c_void,
    len: usize,
    landed: *mut u64,
) -> c_int {
    // SAFETY: the caller's promises.
    match (unsafe { handle(h) }, unsafe { bytes(buf, len) }) {
        (Ok(h), Ok(data)) => call(|| {
            let at = h.append(zone, data)?;
            // SAFETY: the caller's promise.
            if let Some(l) = unsafe { landed.as_mut() } {
                *l = at;
            }
            Ok(())
        }),
        (Err(e), _) | (_, Err(e)) => e,
    }
}

/// Reads `len` bytes at `offset` into `buf` and waits (zeroes past a write pointer).
///
/// # Safety
/// `h` is an open handle; `buf` points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_read_at(h: *const ZblkHandle, offset: u64, buf: *mut c_void, len: usize) -> c_int {
    // SAFETY: the caller's promise.
    let h = match unsafe { handle(h) } {
        Ok(h) => h,
        Err(e) => return e,
    };
    if buf.is_null() && len > 0 {
        return null("the buffer");
    }
    let data: &mut [u8] = match len {
        0 => &mut [],
        // SAFETY: the caller's promise.
        _ => unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) },
    };
    call(|| h.read_at(offset, data))
}

/// A zone operation on the zone starting at byte `zone`.
///
/// # Safety
/// `h` is an open handle.
unsafe fn zone_op(h: *const ZblkHandle, op: ZoneOp, zone: u64) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { handle(h) } {
        Ok(h) => call(|| h.zone_op(op, zone)),
        Err(e) => e,
    }
}

/// Resets the zone starting at byte `zone`: its write pointer back to its start.
///
/// # Safety
/// `h` is an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_reset_zone(h: *const ZblkHandle, zone: u64) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { zone_op(h, ZoneOp::Reset, zone) }
}

/// Opens the zone starting at byte `zone` explicitly.
///
/// # Safety
/// `h` is an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_open_zone(h: *const ZblkHandle, zone: u64) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { zone_op(h, ZoneOp::Open, zone) }
}

/// Closes the zone starting at byte `zone`.
///
/// # Safety
/// `h` is an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_close_zone(h: *const ZblkHandle, zone: u64) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { zone_op(h, ZoneOp::Close, zone) }
}

/// Finishes the zone starting at byte `zone`: it becomes FULL.
///
/// # Safety
/// `h` is an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_finish_zone(h: *const ZblkHandle, zone: u64) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { zone_op(h, ZoneOp::Finish, zone) }
}

/// Makes every completed write durable, with its zone's write pointer, and waits.
///
/// # Safety
/// `h` is an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zblk_flush(h: *const ZblkHandle) -> c_int {
    // SAFETY: the caller's promise.
    match unsafe { handle(h) } {
        Ok(h) => call(|| h.flush()),
        Err(e) => e,
    }
}
