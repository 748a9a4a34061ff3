//! [`PageIndex`]: which slot holds each written page of a [`super::PageStore`].
//!
//! Every write and read of a memory device looks its pages up here, so the lookup is
//! on the served device's path for every request: a hash of the page's group (64
//! pages, 256 KiB) and an index into the group's table, instead of a search down an
//! ordered tree of every page (a few hundred instructions per page once a device
//! holds a few hundred MiB). Order is only needed by the checkers that walk what is
//! stored, which sort the groups then.

use rustc_hash::FxHashMap;

/// Pages per group: a group's table costs 256 bytes, at most that much per written
/// page when writes are scattered one page per group.
const GROUP_PAGES: u64 = 64;

/// No page in this entry of a group.
const NONE: u32 = u32::MAX;

/// The slots of one group's pages.
#[derive(Clone, Debug)]
struct Group {
    slots: [u32; GROUP_PAGES as usize],
    /// Entries that are not [`NONE`]: a group is dropped when it reaches 0.
    used: u32,
}

impl Group {
    fn empty() -> Box<Group> {
        Box::new(Group { slots: [NONE; GROUP_PAGES as usize], used: 0 })
    }
}

/// Page number → slot, for the pages written.
#[derive(Clone, Debug, Default)]
pub(super) struct PageIndex {
    groups: FxHashMap<u64, Box<Group>>,
    len: usize,
    /// Groups emptied, their tables kept for the next groups written (never more
    /// than the most groups held at once, as the store's chunks). Boxed as the
    /// map holds them: a table moves between the two as a pointer.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Group>>,
}

impl PageIndex {
    /// Pages held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The slot of `page`, if written.
    pub(super) fn get(&self, page: u64) -> Option<u32> {
        let g = self.groups.get(&(page / GROUP_PAGES))?;
        let s = g.slots[(page % GROUP_PAGES) as usize];
        (s != NONE).then_some(s)
    }

    /// The slot of `page`, recorded as `new()` if it has none: one look into the
    /// index for a page written, where a [`PageIndex::get`] and then a record of
    /// the slot took two.
    pub(super) fn get_or_insert(&mut self, page: u64, new: impl FnOnce() -> u32) -> u32 {
        let spare = &mut self.spare;
        let g = self.groups.entry(page / GROUP_PAGES).or_insert_with(|| spare.pop().unwrap_or_else(Group::empty));
        let e = &mut g.slots[(page % GROUP_PAGES) as usize];
        if *e == NONE {
            let s = new();
            assert_ne!(s, NONE, "slot numbers stay below 2^32 - 1");
            *e = s;
            g.used += 1;
            self.len += 1;
        }
        *e
    }

    /// Forgets `page`, giving back its slot.
    pub(super) fn remove(&mut self, page: u64) -> Option<u32> {
        let key = page / GROUP_PAGES;
        let g = self.groups.get_mut(&key)?;
        let e = &mut g.slots[(page % GROUP_PAGES) as usize];
        if *e == NONE {
            return None;
        }
        let s = std::mem::replace(e, NONE);
        g.used -= 1;
        if g.used == 0 {
            // Kept for the next group written (all its entries are NONE again): a
            // device whose zones are written, reset and written again allocates
            // no table per 64 pages.
            if let Some(g) = self.groups.remove(&key) {
                self.spare.push(g);
            }
        }
        self.len -= 1;
        Some(s)
    }

    /// Forgets every page in `[first, last)`, calling `freed` with each slot.
    pub(super) fn remove_range(&mut self, first: u64, last: u64, mut freed: impl FnMut(u32)) {
        if first >= last {
            return;
        }
        let (g0, g1) = (first / GROUP_PAGES, (last - 1) / GROUP_PAGES);
        // A range wider than the index (a reset of every zone of a large device) is
        // walked through the groups held, not through every group it spans.
        let keys: Vec<u64> = if g1 - g0 < self.groups.len() as u64 {
            (g0..=g1).filter(|k| self.groups.contains_key(k)).collect()
        } else {
            self.groups.keys().copied().filter(|k| (g0..=g1).contains(k)).collect()
        };
        for key in keys {
            let from = (key * GROUP_PAGES).max(first);
            let to = ((key + 1) * GROUP_PAGES).min(last);
            for page in from..to {
                if let Some(s) = self.remove(page) {
                    freed(s);
                }
            }
        }
    }

    /// Every page held, in order.
    pub(super) fn pages(&self) -> impl Iterator<Item = u64> + '_ {
        let mut keys: Vec<u64> = self.groups.keys().copied().collect();
        keys.sort_unstable();
        keys.into_iter().flat_map(move |k| {
            let g = &self.groups[&k];
            (0..GROUP_PAGES).filter(move |&i| g.slots[i as usize] != NONE).map(move |i| k * GROUP_PAGES + i)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Random inserts, removals and range removals agree with an ordered map.
    #[test]
    fn agrees_with_an_ordered_map() {
        let mut idx = PageIndex::default();
        let mut model = BTreeMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000u32 {
            let page = next() % 1000;
            match next() % 8 {
                // A page held keeps its slot; a new one takes the slot given.
                0..=3 => assert_eq!(idx.get_or_insert(page, || i), *model.entry(page).or_insert(i)),
                4..=5 => assert_eq!(idx.remove(page), model.remove(&page)),
                6 => {
                    let last = page + next() % 300;
                    let mut freed = Vec::new();
                    idx.remove_range(page, last, |s| freed.push(s));
                    let doomed: Vec<u64> = model.range(page..last).map(|(k, _)| *k).collect();
                    let mut want: Vec<u32> = doomed.iter().map(|k| model.remove(k).unwrap()).collect();
                    freed.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(freed, want, "range [{page}, {last})");
                }
                _ => assert_eq!(idx.get(page), model.get(&page).copied()),
            }
            assert_eq!(idx.len(), model.len());
        }
        assert!(idx.pages().eq(model.keys().copied()), "pages in order");
        idx.remove_range(0, u64::MAX, |_| {});
        assert_eq!((idx.len(), idx.groups.len()), (0, 0), "a range wider than the index empties it");
        // The groups' tables are kept, and taken again.
        let kept = idx.spare.len();
        assert!(kept > 0, "tables kept");
        assert_eq!(idx.get_or_insert(5, || 1), 1);
        assert_eq!(idx.spare.len(), kept - 1, "a kept table taken");
    }
}
