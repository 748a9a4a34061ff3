//! Capped pipelining (`capped`): as zone write pipelining, up to `pipeline_depth`
//! writes of a zone out at once, but no more than the registry's
//! `device_zone_writes` zone writes of the whole device (a device that keeps a
//! zone's writes in order but takes only so many writes at a time). A plug with
//! work waits on a list while the device is at its cap; each completion releases
//! the oldest waiting plugs' fronts, as far as the cap lets them.

use super::{IssuePolicy, Policy, PolicyCtx, PolicyView};
use crate::engine::EngineConfig;
use crate::engine::plugs::PlugId;
use std::collections::VecDeque;

/// Capped pipelining: its waiting plugs, oldest first, and the cap.
#[derive(Debug)]
pub(crate) struct Capped {
    waiting: VecDeque<PlugId>,
    cap: u32,
}

impl Capped {
    pub fn new(cfg: &EngineConfig) -> Capped {
        let cap = cfg.policy.info().device_zone_writes.expect("a device-wide cap in the registry");
        Capped { waiting: VecDeque::new(), cap }
    }
}

impl Policy for Capped {
    fn kind(&self) -> IssuePolicy {
        IssuePolicy::Capped
    }

    /// A plug with work joins the tail of the list (`kick` drains it).
    fn plug_changed(&mut self, q: &mut PolicyCtx<'_>, p: PlugId) {
        if !q.listed(p) && q.has_queued(p) {
            q.list(p);
            self.waiting.push_back(p);
        }
    }

    /// A plug whose queue emptied (released, refused or aborted) leaves the list at
    /// once: a listed plug is held, and would never be released.
    fn plug_drained(&mut self, q: &mut PolicyCtx<'_>, p: PlugId) {
        if q.listed(p) && !q.has_queued(p) {
            q.unlist(p);
            self.waiting.retain(|&w| w != p);
        }
    }

    /// Oldest first, each waiting plug releases what its zone and the cap let go;
    /// a plug with nothing left queued leaves the list.
    fn kick(&mut self, q: &mut PolicyCtx<'_>) {
        let mut i = 0;
        while i < self.waiting.len() && q.zone_ops_out() < self.cap {
            let p = self.waiting[i];
            q.drain_front_within(p, self.cap);
            if q.has_queued(p) {
                i += 1;
            } else {
                q.unlist(p);
                self.waiting.remove(i);
                q.maybe_release(p);
            }
        }
    }

    fn is_idle(&self) -> bool {
        self.waiting.is_empty()
    }

    fn check(&self, q: &PolicyView<'_>) {
        assert!(q.zone_ops_out() <= self.cap, "{} zone writes out, cap {}", q.zone_ops_out(), self.cap);
        let listed = q.plugs().filter(|&p| q.listed(p)).count();
        assert_eq!(listed, self.waiting.len(), "plugs flagged listed, not all waiting");
        for &p in &self.waiting {
            assert!(q.listed(p), "zone {}: waiting, not flagged listed", q.zone(p));
        }
    }
}
