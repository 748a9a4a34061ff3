//! [`PageStore`]: sparse data in 4 KiB pages, only those written (null_blk's
//! memory backing). The in-memory device keeps its data here, and so does a simulated
//! device served to the kernel (its timing model keeps zone state, not data).
//!
//! Pages live in chunks of [`CHUNK_PAGES`], and a page freed by a reset, a discard or
//! an unmapped WRITE_ZEROES goes back to the store's free list for the next write to
//! take, instead of back to the allocator: a served device writes and resets pages at
//! the kernel's pace, and an allocator that returns a page to the system on every free
//! makes every later write fault it in again (and extend its heap with a system call),
//! which costs more than the copy itself. The store never holds more memory than its
//! largest amount of data so far, rounded up to a chunk.

mod index;

use index::PageIndex;
use zblk_core::units::{SECTOR_SIZE, Sector};

/// Bytes per page (null_blk uses the page size too).
pub const PAGE_BYTES: usize = 4096;
const SECTORS_PER_PAGE: u64 = PAGE_BYTES as u64 / SECTOR_SIZE;

/// Pages per chunk of memory the store takes from the allocator at once (2 MiB).
pub const CHUNK_PAGES: usize = 512;

type Page = [u8; PAGE_BYTES];

/// What [`PageStore::slices`] gives for bytes never written.
static ZEROES: [u8; 16 * PAGE_BYTES] = [0; 16 * PAGE_BYTES];

/// Calls `f` with `len` bytes of zeroes, in slices of a static run of them.
pub fn zeroes(len: usize, mut f: impl FnMut(&[u8])) {
    for at in (0..len).step_by(ZEROES.len()) {
        f(&ZEROES[..ZEROES.len().min(len - at)]);
    }
}

/// Bytes of a chunk: 2 MiB, the size of a transparent huge page.
const CHUNK_BYTES: usize = CHUNK_PAGES * PAGE_BYTES;

/// [`CHUNK_PAGES`] zeroed pages, mapped from the system: its pages come zeroed and
/// are not written again, and where the system's transparent huge pages are on
/// (`always`) a 2 MiB anonymous mapping, which the kernel aligns to 2 MiB, is one huge
/// page, faulted in at once instead of one fault per first write of each 4 KiB page.
/// (Not asked for with `madvise` where they are off by default: there the kernel
/// compacts memory to find one, which costs more than the faults it saves.)
struct Chunk(std::ptr::NonNull<Page>);

// SAFETY: a chunk owns its mapping exclusively, like a `Box<[Page]>`.
unsafe impl Send for Chunk {}
// SAFETY: shared references only give out `&[Page]`.
unsafe impl Sync for Chunk {}

impl Chunk {
    fn zeroed() -> Chunk {
        use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous};
        // SAFETY: a new private anonymous mapping aliases nothing.
        let p = unsafe {
            mmap_anonymous(std::ptr::null_mut(), CHUNK_BYTES, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE)
        };
        let p = match p {
            Ok(p) => p,
            // As the global allocator does when memory runs out.
            Err(_) => std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(CHUNK_BYTES, PAGE_BYTES).expect("a chunk's layout is valid"),
            ),
        };
        Chunk(std::ptr::NonNull::new(p.cast::<Page>()).expect("mmap never maps address 0"))
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `zeroed`, unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.0.as_ptr().cast(), CHUNK_BYTES) };
    }
}

impl std::ops::Deref for Chunk {
    type Target = [Page];
    fn deref(&self) -> &[Page] {
        // SAFETY: the chunk holds CHUNK_PAGES initialised pages.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr(), CHUNK_PAGES) }
    }
}

impl std::ops::DerefMut for Chunk {
    fn deref_mut(&mut self) -> &mut [Page] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_ptr(), CHUNK_PAGES) }
    }
}

impl Clone for Chunk {
    fn clone(&self) -> Chunk {
        let mut c = Chunk::zeroed();
        c.copy_from_slice(self);
        c
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Chunk({CHUNK_PAGES} pages)")
    }
}

/// Sparse data by 4 KiB page: a page exists once a byte of it is written, and every
/// byte of no page reads as zero.
#[derive(Debug, Clone, Default)]
pub struct PageStore {
    /// Page number → slot, only for pages written.
    map: PageIndex,
    /// The slots: slot `s` is page `s % CHUNK_PAGES` of chunk `s / CHUNK_PAGES`.
    chunks: Vec<Chunk>,
    /// Slots holding no page, with whether they still read as zeroes (a slot never
    /// used), so that a page a write covers only in part starts from zeroes.
    free: Vec<(u32, bool)>,
}

impl PageStore {
    /// An empty store: everything reads as zeroes.
    pub fn new() -> PageStore {
        PageStore::default()
    }

    /// Bytes of memory holding data (whole pages).
    pub fn resident_bytes(&self) -> u64 {
        (self.map.len() * PAGE_BYTES) as u64
    }

    /// The sectors the store holds pages for, in order (each page's first sector and
    /// its length in sectors): every sector outside reads as zeroes.
    pub fn stored(&self) -> impl Iterator<Item = (Sector, u64)> + '_ {
        self.map.pages().map(|p| (Sector(p * SECTORS_PER_PAGE), SECTORS_PER_PAGE))
    }

    fn slot_mut(&mut self, s: u32) -> &mut Page {
        &mut self.chunks[s as usize / CHUNK_PAGES][s as usize % CHUNK_PAGES]
    }

    /// The page `page` for writing, taken from the free list (or a new chunk) if it
    /// has none; zeroed unless `whole` (the caller overwrites all of it).
    fn page_mut(&mut self, page: u64, whole: bool) -> &mut Page {
        // One look into the index, which gives the page's slot or records the one
        // taken for it.
        let (chunks, free) = (&mut self.chunks, &mut self.free);
        let mut stale = false;
        let s = self.map.get_or_insert(page, || {
            if free.is_empty() {
                let first = u32::try_from(chunks.len() * CHUNK_PAGES).expect("fewer than 2^32 pages");
                chunks.push(Chunk::zeroed());
                free.extend((first..first + CHUNK_PAGES as u32).rev().map(|s| (s, true)));
            }
            let (s, zero) = free.pop().expect("a free slot");
            stale = !zero && !whole;
            s
        });
        if stale {
            self.slot_mut(s).fill(0);
        }
        self.slot_mut(s)
    }

    /// Calls `f(page, byte offset in it, bytes)` for each page piece of `len` bytes
    /// from `sector`, in order.
    fn pieces(sector: Sector, len: usize, mut f: impl FnMut(u64, usize, usize)) {
        let mut done = 0;
        let mut at = sector.0 * SECTOR_SIZE;
        while done < len {
            let (page, off) = (at / PAGE_BYTES as u64, (at % PAGE_BYTES as u64) as usize);
            let n = (PAGE_BYTES - off).min(len - done);
            f(page, off, n);
            done += n;
            at += n as u64;
        }
    }

    /// Copies `buf.len()` bytes from `sector` into `buf`: zeroes where nothing was
    /// written.
    pub fn read(&self, sector: Sector, buf: &mut [u8]) {
        let mut done = 0;
        self.slices(sector, buf.len(), |part| {
            buf[done..done + part.len()].copy_from_slice(part);
            done += part.len();
        });
    }

    /// Calls `f` with the `len` bytes from `sector`, in order, as slices of the store:
    /// of its pages (pages next to each other in a chunk, as pages written in order
    /// are, in one slice) and of a static run of zeroes where nothing was written.
    /// For a reader that copies them on itself (a served device hands them to the
    /// kernel as one vectored write) instead of through a buffer of its own.
    pub fn slices(&self, sector: Sector, len: usize, mut f: impl FnMut(&[u8])) {
        // The run not yet given to `f`: bytes [from, to) of chunk `c`, or `to - from`
        // zeroes for `c == usize::MAX`.
        let (mut c, mut from, mut to) = (usize::MAX, 0, 0);
        let mut flush = |c: usize, from: usize, to: usize| {
            if c != usize::MAX {
                f(&self.chunks[c].as_flattened()[from..to]);
            } else {
                zeroes(to - from, &mut f);
            }
        };
        PageStore::pieces(sector, len, |page, off, n| {
            let (pc, pfrom) = match self.map.get(page) {
                Some(s) => (s as usize / CHUNK_PAGES, s as usize % CHUNK_PAGES * PAGE_BYTES + off),
                None => (usize::MAX, to),
            };
            if pc != c || pfrom != to {
                flush(c, from, to);
                (c, from) = (pc, pfrom);
            }
            to = pfrom + n;
        });
        if from < to {
            flush(c, from, to);
        }
    }

    /// Stores `data` at `sector`, allocating the pages it touches.
    pub fn write(&mut self, sector: Sector, data: &[u8]) {
        let mut done = 0;
        PageStore::pieces(sector, data.len(), |page, off, n| {
            self.page_mut(page, n == PAGE_BYTES)[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
        });
    }

    /// Bytes of pages a write of `len` bytes at `sector` would allocate.
    pub fn new_bytes(&self, sector: Sector, len: usize) -> u64 {
        let mut more = 0;
        PageStore::pieces(sector, len, |page, _, _| {
            if self.map.get(page).is_none() {
                more += PAGE_BYTES as u64;
            }
        });
        more
    }

    /// Writes zeroes over `[sector, sector + nr_sectors)`, allocating its pages (a
    /// WRITE_ZEROES with NOUNMAP: the memory stays in use).
    pub fn fill_zeroes(&mut self, sector: Sector, nr_sectors: u64) {
        let len = usize::try_from(nr_sectors * SECTOR_SIZE).expect("range fits in memory");
        PageStore::pieces(sector, len, |page, off, n| {
            self.page_mut(page, false)[off..off + n].fill(0);
        });
    }

    /// Makes `[sector, sector + nr_sectors)` read as zeroes, freeing whole pages and
    /// zeroing the partial pages at the edges (a discard, an unmapped WRITE_ZEROES, a
    /// zone reset).
    pub fn zero_range(&mut self, sector: Sector, nr_sectors: u64) {
        let end = sector.0 + nr_sectors;
        let first_full = sector.0.div_ceil(SECTORS_PER_PAGE);
        let last_full = end / SECTORS_PER_PAGE; // exclusive
        if first_full < last_full {
            let free = &mut self.free;
            self.map.remove_range(first_full, last_full, |s| free.push((s, false)));
        }
        let mut zero_edge = |from: u64, to: u64| {
            if from >= to {
                return;
            }
            if let Some(s) = self.map.get(from / SECTORS_PER_PAGE) {
                let a = ((from % SECTORS_PER_PAGE) * SECTOR_SIZE) as usize;
                let b = a + ((to - from) * SECTOR_SIZE) as usize;
                self.slot_mut(s)[a..b].fill(0);
            }
        };
        if first_full >= last_full {
            // The range sits inside one or two pages.
            let mid = (sector.0 / SECTORS_PER_PAGE + 1) * SECTORS_PER_PAGE;
            zero_edge(sector.0, mid.min(end));
            zero_edge(mid.min(end), end);
        } else {
            zero_edge(sector.0, first_full * SECTORS_PER_PAGE);
            zero_edge(last_full * SECTORS_PER_PAGE, end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_what_is_written_and_reads_zeroes_elsewhere() {
        let mut s = PageStore::new();
        assert_eq!(s.new_bytes(Sector(1), 1024), PAGE_BYTES as u64);
        s.write(Sector(1), &[7u8; 1024]);
        assert_eq!(s.resident_bytes(), PAGE_BYTES as u64);
        assert_eq!(s.new_bytes(Sector(1), 1024), 0);
        assert_eq!(s.new_bytes(Sector(7), 1024), PAGE_BYTES as u64, "crosses into the next page");
        let mut b = vec![1u8; 2048];
        s.read(Sector(0), &mut b);
        assert!(b[..512].iter().all(|&x| x == 0));
        assert!(b[512..1536].iter().all(|&x| x == 7));
        assert!(b[1536..].iter().all(|&x| x == 0));
        s.write(Sector(7), &[9u8; 1024]);
        assert_eq!(s.resident_bytes(), 2 * PAGE_BYTES as u64);
        assert_eq!(s.stored().collect::<Vec<_>>(), vec![(Sector(0), 8), (Sector(8), 8)]);
        s.zero_range(Sector(0), 8);
        assert_eq!(s.resident_bytes(), PAGE_BYTES as u64);
    }

    #[test]
    fn a_freed_page_is_reused_and_reads_zeroes_where_not_written() {
        let mut s = PageStore::new();
        s.write(Sector(0), &[7u8; PAGE_BYTES]);
        s.zero_range(Sector(0), 8);
        assert_eq!(s.resident_bytes(), 0);
        // The freed slot takes the next page; the part a write leaves reads zeroes,
        // not the 7s it held before.
        s.write(Sector(17), &[9u8; 512]);
        let mut b = vec![1u8; PAGE_BYTES];
        s.read(Sector(16), &mut b);
        assert!(b[..512].iter().all(|&x| x == 0) && b[512..1024].iter().all(|&x| x == 9));
        assert!(b[1024..].iter().all(|&x| x == 0), "a reused page starts from zeroes");
        assert_eq!(s.chunks.len(), 1, "no new chunk while a slot is free");
        // More pages than a chunk holds: a second chunk.
        s.write(Sector(1024), &vec![3u8; (CHUNK_PAGES + 1) * PAGE_BYTES]);
        assert_eq!(s.chunks.len(), 2);
        let mut b = vec![0u8; PAGE_BYTES];
        s.read(Sector(1024 + 8 * CHUNK_PAGES as u64), &mut b);
        assert!(b.iter().all(|&x| x == 3));
    }

    #[test]
    fn unaligned_partial_zeroing() {
        let mut s = PageStore::new();
        s.write(Sector(0), &[7u8; 8192]);
        s.zero_range(Sector(3), 2);
        let mut out = vec![0; 8192];
        s.read(Sector(0), &mut out);
        for i in 0..16 {
            let expect = if (3..5).contains(&i) { 0 } else { 7 };
            assert!(out[i * 512..(i + 1) * 512].iter().all(|&b| b == expect), "sector {i}");
        }
        s.zero_range(Sector(6), 9);
        s.read(Sector(0), &mut out);
        for i in 0..16 {
            let expect = if (3..5).contains(&i) || (6..15).contains(&i) { 0 } else { 7 };
            assert!(out[i * 512..(i + 1) * 512].iter().all(|&b| b == expect), "sector {i}");
        }
        assert_eq!(s.resident_bytes(), 2 * PAGE_BYTES as u64, "no whole page in either range");
        s.fill_zeroes(Sector(64), 9);
        assert_eq!(s.resident_bytes(), 4 * PAGE_BYTES as u64, "NOUNMAP zeroes allocate");
    }
}
