//! I/O buffers the runtime can hand to the kernel as they are: [`AlignedBuf`] (aligned
//! for `O_DIRECT`), or a plain `Vec<u8>` (which goes through the page cache when it is
//! not aligned).

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

/// Alignment of [`AlignedBuf`]: the largest `O_DIRECT` alignment file systems ask for
/// (the page size).
pub const BUF_ALIGN: usize = 4096;

/// A zeroed, 4 KiB-aligned heap buffer: `O_DIRECT` I/O can use it without a copy.
/// Either its own allocation or a part of a [`Region`] (which it keeps alive).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// The region this buffer is a part of (`None`: the allocation is its own).
    region: Option<Arc<Region>>,
}

// SAFETY: an AlignedBuf owns its allocation, or its part of a region, exclusively,
// like a Vec<u8> (the region it keeps is Send and Sync itself).
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `len` zero bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        AlignedBuf { ptr: alloc_aligned(len), len, region: None }
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.copy_from_slice(data);
        b
    }
}

/// `len` zeroed bytes aligned to [`BUF_ALIGN`] (dangling when `len` is 0), to free
/// with [`free_aligned`].
fn alloc_aligned(len: usize) -> NonNull<u8> {
    if len == 0 {
        return NonNull::dangling();
    }
    let layout = Layout::from_size_align(len, BUF_ALIGN).expect("buffer size overflows");
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc_zeroed(layout) };
    NonNull::new(ptr).unwrap_or_else(|| handle_alloc_error(layout))
}

/// Frees what [`alloc_aligned`] gave for `len`.
fn free_aligned(ptr: NonNull<u8>, len: usize) {
    if len != 0 {
        let layout = Layout::from_size_align(len, BUF_ALIGN).expect("layout was valid at allocation");
        // SAFETY: allocated in `alloc_aligned` with this layout.
        unsafe { dealloc(ptr.as_ptr(), layout) };
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // A part of a region is freed with the region, when its last part goes.
        if self.region.is_none() {
            free_aligned(self.ptr, self.len);
        }
    }
}

/// One aligned allocation cut into [`AlignedBuf`]s ([`Region::carve`]), which keep it
/// alive: a range of memory whose address and length stay fixed while any of its
/// buffers lives. For an io_uring ring's registered buffers (the kernel pins the
/// region's pages once, where an `O_DIRECT` transfer from a buffer of its own pins
/// them on every request). The region itself gives no access to its bytes: its
/// buffers do, each to its own part.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region's bytes are only reached through its buffers, each its own part.
unsafe impl Send for Region {}
// SAFETY: as above: a `&Region` reads no byte.
unsafe impl Sync for Region {}

impl Region {
    /// One zeroed region holding a buffer of each of `sizes` (each rounded up to
    /// [`BUF_ALIGN`] in the region, so that every buffer starts aligned), and the
    /// buffers, in the order of `sizes`.
    pub fn carve(sizes: &[usize]) -> (Arc<Region>, Vec<AlignedBuf>) {
        let span = |n: usize| n.div_ceil(BUF_ALIGN) * BUF_ALIGN;
        let len = sizes.iter().map(|&n| span(n)).sum();
        let region = Arc::new(Region { ptr: alloc_aligned(len), len });
        let mut at = 0;
        let bufs = sizes
            .iter()
            .map(|&n| {
                // SAFETY: `at + n <= len`: the parts are laid out one after the other
                // within the allocation, none overlapping another.
                let ptr = unsafe { NonNull::new_unchecked(region.ptr.as_ptr().add(at)) };
                at += span(n);
                AlignedBuf { ptr, len: n, region: Some(region.clone()) }
            })
            .collect();
        (region, bufs)
    }

    /// The region's address.
    pub fn addr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[ptr, ptr + len)` lies within the region: its offset in it.
    pub fn offset_of(&self, ptr: *const u8, len: usize) -> Option<usize> {
        let off = (ptr as usize).checked_sub(self.ptr.as_ptr() as usize)?;
        (off.checked_add(len)? <= self.len).then_some(off)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        free_aligned(self.ptr, self.len);
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({} bytes)", self.len)
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialised bytes owned by `self`, its own
        // allocation or its part of a region, which no other buffer of the region
        // overlaps (dangling, or the region's end, when `len` is 0, which slices
        // allow).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// The data of an asynchronous I/O, owned by the runtime until the I/O completes and
/// handed back in its `IoDone` (`zblk_runtime`).
#[derive(Debug)]
pub enum Buffer {
    /// Any vector; not aligned for `O_DIRECT` in general.
    Vec(Vec<u8>),
    /// An aligned buffer.
    Aligned(AlignedBuf),
}

impl Buffer {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Buffer::Vec(v) => v,
            Buffer::Aligned(a) => a,
        }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Buffer::Vec(v) => v,
            Buffer::Aligned(a) => a,
        }
    }
}

impl From<Vec<u8>> for Buffer {
    fn from(v: Vec<u8>) -> Buffer {
        Buffer::Vec(v)
    }
}

impl From<AlignedBuf> for Buffer {
    fn from(a: AlignedBuf) -> Buffer {
        Buffer::Aligned(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::zeroed(8192);
        assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[5] = 7;
        assert_eq!(AlignedBuf::from_slice(&b)[5], 7);
        assert_eq!(AlignedBuf::zeroed(0).len(), 0);
    }

    /// A region's buffers are aligned, apart, inside it, and keep it alive.
    #[test]
    fn a_region_is_cut_into_aligned_buffers_that_keep_it() {
        let (region, mut bufs) = Region::carve(&[4096, 100, 8192, 0]);
        assert_eq!(region.len(), 4096 + 4096 + 8192);
        let mut at = Vec::new();
        for (i, b) in bufs.iter_mut().enumerate() {
            assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
            b.fill(i as u8 + 1);
            at.push(region.offset_of(b.as_ptr(), b.len()));
        }
        assert_eq!(at, [Some(0), Some(4096), Some(8192), Some(16384)]);
        assert_eq!(bufs.iter().map(|b| b.len()).collect::<Vec<_>>(), [4096, 100, 8192, 0]);
        assert!(bufs[0].iter().all(|&x| x == 1) && bufs[1].iter().all(|&x| x == 2));
        assert_eq!(region.offset_of(region.addr().wrapping_add(1), region.len()), None);
        assert_eq!(region.offset_of(std::ptr::null(), 1), None);
        let weak = Arc::downgrade(&region);
        drop(region);
        let last = bufs.pop();
        drop(bufs);
        assert!(weak.upgrade().is_some(), "a buffer keeps its region");
        drop(last);
        assert!(weak.upgrade().is_none());
    }
}
