//! Zone write plugs: the per-zone FIFO of pending writes and the host's idea of the
//! zone's write pointer (`wp_offset`), as in the kernel's `struct blk_zone_wplug`.
//!
//! A plug exists only for a zone that has writes pending or in flight, needs its write
//! pointer re-synchronised, or is partially written (then its `wp_offset` is the only
//! record of where the next write goes). A plug of an idle EMPTY or FULL zone is
//! released at once, so the number of plugs is bounded by the active zones plus the
//! zones with writes in the core.

use crate::units::ZoneNo;
use rustc_hash::FxHashMap;
use slab::Slab;
use std::collections::VecDeque;

/// Index of a plug in the [`PlugTable`].
pub(crate) type PlugIdx = usize;

/// One zone write plug.
#[derive(Debug)]
pub(crate) struct Plug {
    /// The zone it plugs.
    pub zone: ZoneNo,
    /// Where the host believes the zone's write pointer is, in sectors from the zone
    /// start. Advanced when a write is issued, not when it completes, so that the
    /// next write can be checked (and an append placed) while the previous one is in
    /// flight.
    pub wp_offset: u64,
    /// Operations waiting for their turn, oldest first (fragments, by index): writes,
    /// resets and finishes, and native appends that arrived behind them.
    pub queue: VecDeque<usize>,
    /// A write, reset or finish from this plug is issued and not yet completed (the
    /// kernel's BLK_ZONE_WPLUG_PLUGGED, minus the "list not empty" half, which is
    /// `!queue.is_empty()`).
    pub busy: bool,
    /// A write failed: `wp_offset` may be wrong until a zone report re-synchronises it
    /// (BLK_ZONE_WPLUG_NEED_WP_UPDATE). No write is issued meanwhile.
    pub need_wp_update: bool,
    /// A zone report was asked for and not answered yet (auto recovery only).
    pub report_pending: bool,
    /// The plug is on the single issuer's list.
    pub listed: bool,
    /// Batching issuer: times another plug was drained before this one since it
    /// was listed.
    pub bypassed: u32,
    /// Native zone appends of this zone on the device. While any is out, the write
    /// pointer moves where the host cannot follow: writes, resets and finishes wait.
    pub appends_out: u32,
}

impl Plug {
    /// Whether the plug holds or has issued operations: it cannot be released.
    pub fn in_use(&self) -> bool {
        self.busy || !self.queue.is_empty() || self.listed || self.appends_out > 0
    }
}

/// The plugs of one device: a slab with a hash index by zone, as the kernel's
/// `disk->zone_wplugs_hash`.
#[derive(Debug, Default)]
pub(crate) struct PlugTable {
    plugs: Slab<Plug>,
    by_zone: FxHashMap<u32, PlugIdx>,
    /// Spare queues, so that a busy device does not allocate a queue per plug.
    spare_queues: Vec<VecDeque<usize>>,
    /// Most plugs alive at once.
    pub peak: usize,
    /// Plugs ever allocated.
    pub allocated: u64,
}

impl PlugTable {
    pub fn get(&self, zone: ZoneNo) -> Option<PlugIdx> {
        self.by_zone.get(&zone.0).copied()
    }

    pub fn insert(&mut self, zone: ZoneNo, wp_offset: u64) -> PlugIdx {
        assert!(!self.by_zone.contains_key(&zone.0), "second plug for zone {zone}");
        let queue = self.spare_queues.pop().unwrap_or_default();
        let idx = self.plugs.insert(Plug {
            zone,
            wp_offset,
            queue,
            busy: false,
            need_wp_update: false,
            report_pending: false,
            listed: false,
            bypassed: 0,
            appends_out: 0,
        });
        self.by_zone.insert(zone.0, idx);
        self.allocated += 1;
        self.peak = self.peak.max(self.plugs.len());
        idx
    }

    pub fn remove(&mut self, idx: PlugIdx) {
        let plug = self.plugs.remove(idx);
        assert!(!plug.in_use(), "releasing plug of zone {} still in use: {plug:?}", plug.zone);
        self.by_zone.remove(&plug.zone.0);
        if self.spare_queues.len() < 64 {
            self.spare_queues.push(plug.queue);
        }
    }

    pub fn len(&self) -> usize {
        self.plugs.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (PlugIdx, &Plug)> {
        self.plugs.iter()
    }
}

impl std::ops::Index<PlugIdx> for PlugTable {
    type Output = Plug;
    fn index(&self, idx: PlugIdx) -> &Plug {
        &self.plugs[idx]
    }
}

impl std::ops::IndexMut<PlugIdx> for PlugTable {
    fn index_mut(&mut self, idx: PlugIdx) -> &mut Plug {
        &mut self.plugs[idx]
    }
}
