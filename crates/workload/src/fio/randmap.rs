//! fio's random map and the zone scan that comes with it (`io_u.c`'s
//! `get_next_rand_block()`, `filesetup.c`'s `fio_file_reset()`, `zbd.c`'s
//! `zbd_file_reset()` and `zbd_process_swd()`).
//!
//! Without `norandommap`, fio draws a random write's block from a map of the blocks
//! of its range not yet used in this cycle: a random block, or when that one is used
//! the next free one after it (`axmap_next_free()`). In zbd mode the block only names
//! the zone (the write goes to its write pointer), so the map decides how a job's
//! writes spread over the zones: each zone gets exactly its share in a cycle, and the
//! cycle's end crowds the last writes into the zones that still have free blocks.
//!
//! A time-based job that has used up its map starts a new cycle with
//! `fio_file_reset()`, which in zbd mode calls `zbd_file_reset()`; so does every
//! writing job when it starts. That counts the data in the job's zones
//! (`zbd_process_swd()`) under every zone lock of its range at once: it takes them in
//! zone order, each as any write takes it (its own I/O quiesced first when another
//! job holds it), keeps each until it has them all, then lets them all go. Every
//! other job that wants one of those zones meanwhile waits, so the scan lines the
//! jobs up behind the scanning one: the served host's long holdings of the zones at
//! small K begin there (docs/linux73.md).

use super::*;

/// The largest map a job keeps (blocks of its range): 4 Mi blocks, 512 KiB of bits.
/// fio keeps one of any size; a larger range here draws its zones uniformly instead
/// (`norandommap`'s way), which over so many blocks differs from the map only in a
/// cycle's last writes, hours of model time away.
pub(super) const MAX_MAP_BLOCKS: u64 = 1 << 22;

/// The blocks of a job's range used in the current cycle.
#[derive(Debug, Clone)]
pub(super) struct RandMap {
    used: Vec<u64>,
    blocks: u64,
    /// Blocks a zone (the job's block size into the zone size): block `b` is in the
    /// `b / per_zone`-th zone of the job's range.
    per_zone: u64,
    pub(super) free: u64,
}

impl RandMap {
    /// A map of `blocks` blocks, `per_zone` a zone, all free.
    pub(super) fn new(blocks: u64, per_zone: u64) -> RandMap {
        assert!(blocks > 0 && blocks <= MAX_MAP_BLOCKS && per_zone > 0, "random map of {blocks} blocks");
        RandMap { used: vec![0; blocks.div_ceil(64) as usize], blocks, per_zone, free: blocks }
    }

    /// Every block free again: a new cycle.
    pub(super) fn reset(&mut self) {
        self.used.fill(0);
        self.free = self.blocks;
    }

    fn is_used(&self, b: u64) -> bool {
        self.used[(b / 64) as usize] & (1 << (b % 64)) != 0
    }

    /// The first free block at or after `b`, wrapping to the start.
    fn next_free(&self, b: u64) -> u64 {
        let words = self.used.len();
        let (w0, bit) = ((b / 64) as usize, b % 64);
        // The first word without the bits below `b`, then every word in turn; a word's
        // bits past `blocks` are never free (the map's last word is checked against it).
        for i in 0..=words {
            let w = (w0 + i) % words;
            let mut free = !self.used[w];
            if i == 0 {
                free &= !0u64 << bit;
            }
            while free != 0 {
                let at = w as u64 * 64 + u64::from(free.trailing_zeros());
                if at < self.blocks {
                    return at;
                }
                free &= free - 1;
            }
        }
        unreachable!("a map with {} free blocks has none", self.free)
    }

    /// fio's `__get_next_rand_offset()` with a map: a random block, or the next free
    /// one after it if it is used; `None` when the cycle is over.
    pub(super) fn pick(&mut self, rng: &mut ChaCha8Rng) -> Option<u64> {
        if self.free == 0 {
            return None;
        }
        let mut b = rng.random_range(0..self.blocks);
        if self.is_used(b) {
            b = self.next_free((b + 1) % self.blocks);
        }
        self.used[(b / 64) as usize] |= 1 << (b % 64);
        self.free -= 1;
        Some(b)
    }
}

impl FioGen {
    /// Job `j`'s map for its zones, when it is a random writer in zbd mode with a
    /// range small enough to map.
    pub(super) fn map_for(spec: &JobSpec, geo: &Geometry, first: u32, last: u32) -> Option<RandMap> {
        if spec.zonemode != ZoneMode::Zbd || !spec.rw.is_write() || !spec.rw.is_random() || last < first {
            return None;
        }
        let per_zone = (geo.zone_sectors() / (spec.bs_bytes >> SECTOR_SHIFT).max(1)).max(1);
        let blocks = u64::from(last - first + 1).checked_mul(per_zone)?;
        (blocks <= MAX_MAP_BLOCKS).then(|| RandMap::new(blocks, per_zone))
    }

    /// The zone of job `j`'s next random write from its map; when the map is used
    /// up, a new cycle's scan ([`Next::Rescan`]) for a time-based job, else the end
    /// of the job (its range is written).
    pub(super) fn next_mapped_zone(&mut self, j: usize, first: u32) -> Next {
        let time_based = self.spec(j).runtime_ns.is_some();
        let job = &mut self.jobs[j];
        let map = job.map.as_mut().expect("a mapped job");
        match map.pick(&mut job.rng) {
            Some(b) => Next::Zone(ZoneNo(first + (b / map.per_zone) as u32)),
            None if time_based => {
                map.reset();
                job.scan = Some(first);
                Next::Rescan
            }
            None => Next::Stop,
        }
    }

    /// Goes on with job `j`'s scan of its zones (`zbd_process_swd()`): takes their
    /// locks in order, each kept until all are held, then lets them all go. Returns
    /// whether the scan is over (the job may submit); false while it waits for a lock.
    pub(super) fn scan(&mut self, j: usize) -> bool {
        let (first, last) = self.zone_range(j);
        loop {
            let z = self.jobs[j].scan.expect("a scanning job");
            match self.jobs[j].state {
                // Handed the lock it waited for: held (pinned) like the others.
                JobState::Granted(g) if g.0 == z => {
                    self.jobs[j].state = JobState::Running;
                    self.jobs[j].scan = Some(z + 1);
                    continue;
                }
                JobState::Running => {}
                _ => return false,
            }
            if z > last {
                self.end_scan(j, first, last);
                return true;
            }
            if !self.acquire(j, ZoneNo(z)) {
                return false;
            }
            self.zbd.as_mut().expect("zbd").locks[z as usize].pinned = true;
            self.jobs[j].scan = Some(z + 1);
        }
    }

    /// Job `j` lets go of the zones its scan holds (`zbd_process_swd()`'s unlock
    /// loop, or a job that ends while scanning).
    pub(super) fn end_scan(&mut self, j: usize, first: u32, last: u32) {
        let upto = self.jobs[j].scan.take().map_or(last, |s| (s.max(first) - 1).min(last));
        for z in first..=upto {
            let lock = &mut self.zbd.as_mut().expect("zbd").locks[z as usize];
            if lock.owner == Some(j) && lock.pinned {
                lock.pinned = false;
                self.maybe_release(ZoneNo(z));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_uses_every_block_once_then_ends() {
        for blocks in [1u64, 2, 63, 64, 65, 130, 1000] {
            let mut m = RandMap::new(blocks, 1);
            let mut rng = ChaCha8Rng::seed_from_u64(blocks);
            let mut seen = vec![false; blocks as usize];
            for _ in 0..blocks {
                let b = m.pick(&mut rng).expect("a free block");
                assert!(!seen[b as usize], "block {b} of {blocks} drawn twice in a cycle");
                seen[b as usize] = true;
            }
            assert_eq!(m.pick(&mut rng), None, "{blocks} blocks: the cycle is over");
            m.reset();
            assert!(m.pick(&mut rng).is_some(), "a new cycle after the reset");
        }
    }

    #[test]
    fn a_used_block_gives_the_next_free_one_after_it() {
        let mut m = RandMap::new(130, 1);
        for b in [5u64, 6, 7, 129] {
            m.used[(b / 64) as usize] |= 1 << (b % 64);
        }
        assert_eq!(m.next_free(5), 8);
        assert_eq!(m.next_free(129), 0, "wraps past the last block");
        assert_eq!(m.next_free(70), 70);
    }
}
