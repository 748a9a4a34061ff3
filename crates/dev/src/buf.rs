//! I/O buffers the runtime can hand to the kernel as they are: [`AlignedBuf`] (aligned
//! for `O_DIRECT`), or a plain `Vec<u8>` (which goes through the page cache when it is
//! not aligned).

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of [`AlignedBuf`]: the largest `O_DIRECT` alignment file systems ask for
/// (the page size).
pub const BUF_ALIGN: usize = 4096;

/// A zeroed, 4 KiB-aligned heap buffer: `O_DIRECT` I/O can use it without a copy.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: an AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `len` zero bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        if len == 0 {
            return AlignedBuf { ptr: NonNull::dangling(), len };
        }
        let layout = Layout::from_size_align(len, BUF_ALIGN).expect("buffer size overflows");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
        b.copy_from_slice(data);
        b
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len != 0 {
            let layout = Layout::from_size_align(self.len, BUF_ALIGN).expect("layout was valid at allocation");
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialised bytes owned by `self` (dangling
        // but aligned when `len` is 0, which slices allow).
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
}
