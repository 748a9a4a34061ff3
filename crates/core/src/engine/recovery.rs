//! Write pointer recovery and zone reports.
//!
//! A failed write leaves its plug's `wp_offset` unknown (`need_wp_update`) and the
//! writes queued behind it aborted. With [`WpRecovery::Report`] the engine asks its
//! driver for a zone report ([`Action::ReportZone`]) as soon as nothing of the zone
//! is on the device, and releases the held writes once the answer re-synchronises
//! `wp_offset`. With [`WpRecovery::Kernel`], as Linux, writes fail with
//! [`Status::NeedWpUpdate`] until the user reports the zone. Either way a report is
//! trusted only when it cannot be older than what the host sent the zone: it is asked
//! for with nothing of the zone out, and while it is pending the zone's writes and
//! native appends wait (`plugs.rs`, `front`; a reset or finish may go: it sets the
//! write pointer itself, and the answer is then not used).

use super::plugs::{CondCache, PlugId};
use super::{Action, Engine, Queue, WpRecovery};
use crate::bio::Status;
use crate::units::ZoneNo;
use crate::zone::{ZoneCond, ZoneInfo, ZoneType};

impl Queue {
    /// With report recovery, asks for a zone report when a write waits for an unknown
    /// write pointer. Never while anything of the zone is on the device: the answer
    /// could predate it.
    #[inline]
    pub(crate) fn maybe_request_report(&mut self, p: PlugId) {
        // On every plug change; the write pointer is nearly always known.
        if self.plugs[p].need_wp_update {
            self.request_report_if_wanted(p);
        }
    }

    /// [`Queue::maybe_request_report`] of a plug whose write pointer is not known.
    #[inline(never)]
    pub(crate) fn request_report_if_wanted(&mut self, p: PlugId) {
        let plug = &self.plugs[p];
        let front_is_write = plug.queue.front().is_some_and(|&f| self.frags[f].kind == super::bios::Kind::ZoneWrite);
        let wanted = self.cfg.wp_recovery == WpRecovery::Report
            && !plug.report_pending
            && front_is_write
            && self.wp_reportable(p);
        if wanted {
            let plug = &mut self.plugs[p];
            plug.report_pending = true;
            self.stats.reports += 1;
            self.actions.push_back(Action::ReportZone(plug.zone));
        }
    }

    /// A report of zone `z`, which has no plug: learn its condition if the host does
    /// not know it, and never over what the host knows.
    fn learn_unplugged(&mut self, z: ZoneNo, info: &ZoneInfo) {
        let known = self.cond[z.idx()];
        match info.cond {
            ZoneCond::ReadOnly => self.cond[z.idx()] = CondCache::ReadOnly,
            ZoneCond::Offline => self.cond[z.idx()] = CondCache::Offline,
            _ if known != CondCache::Unknown || self.barrier.out => {}
            _ => {
                let wp_offset = info.wp_offset().expect("writable zone has a write pointer");
                let cap = self.geo.zone_capacity(z);
                self.cond[z.idx()] = match wp_offset {
                    0 => CondCache::Empty,
                    o if o >= cap => CondCache::Full,
                    o => {
                        self.plugs.insert(z, o, cap);
                        CondCache::Plugged
                    }
                };
            }
        }
    }
}

impl Engine {
    /// What the device says zone `info` looks like (an answer to
    /// [`Action::ReportZone`], or any zone report the user made). A plug waiting for
    /// its write pointer takes it from here and releases its held writes; a zone the
    /// host knows nothing of is learnt. A report is ignored where it may be older
    /// than an operation on the device, and never overrides what the host knows.
    pub fn zone_report(&mut self, info: &ZoneInfo) {
        self.learn_report(info);
        self.after_input();
    }

    fn learn_report(&mut self, info: &ZoneInfo) {
        let q = &mut self.q;
        if !q.geo.is_zoned() || info.ztype == ZoneType::Conventional {
            return;
        }
        let z = q.geo.zone_no(info.start);
        let Some(p) = q.plugs.get(z) else {
            q.learn_unplugged(z, info);
            return;
        };
        q.plugs[p].report_pending = false;
        let trusted = q.plugs[p].need_wp_update && q.wp_reportable(p);
        if trusted {
            match info.wp_offset() {
                Some(wp_offset) => {
                    let cap = q.geo.zone_capacity(z);
                    let plug = &mut q.plugs[p];
                    plug.wp_offset = wp_offset.min(cap);
                    plug.need_wp_update = false;
                }
                None => {
                    // READONLY or OFFLINE: nothing will ever be written there.
                    let (status, c) = if info.cond == ZoneCond::Offline {
                        (Status::ZoneOffline, CondCache::Offline)
                    } else {
                        (Status::ZoneReadOnly, CondCache::ReadOnly)
                    };
                    self.abort_queued_writes(p, status);
                    self.q.cond[z.idx()] = c;
                    if !self.q.plugs[p].in_use() {
                        self.q.plugs.remove(p);
                        self.unfreeze_if_drained();
                        return;
                    }
                }
            }
        }
        self.after_plug_change(p);
        // The answer may have ended the last BIOs a frozen queue waited for (writes
        // held for it, refused now): the freeze must not wait for a completion that
        // will never come.
        self.unfreeze_if_drained();
    }

    /// The driver could not report zone `z`: writes held for its write pointer fail
    /// with `status`; the write pointer stays unknown.
    pub fn zone_report_failed(&mut self, z: ZoneNo, status: Status) {
        if let Some(p) = self.q.plugs.get(z) {
            self.q.plugs[p].report_pending = false;
            if self.q.plugs[p].need_wp_update {
                self.abort_queued_writes(p, status);
            }
            self.after_plug_change(p);
        }
        self.unfreeze_if_drained();
        self.after_input();
    }
}

impl Engine {
    /// The engine a host builds for this disk when it comes back from a power loss:
    /// its settings (policy, queue depth, self-check), nothing in flight (the BIOs of
    /// the engine that lost power never complete), and every zone as `zones`, a full
    /// zone report read after the power came back, says (as [`Engine::new`] at
    /// start-up). The device's report is the only truth: what was on its way to the
    /// device may or may not have reached the medium.
    pub fn restarted(&self, zones: &[ZoneInfo]) -> Engine {
        let mut zones = zones.to_vec();
        if crate::mutation::on(crate::mutation::Mutation::RestartTrustsInFlight) {
            // Planted: a zone with writes (or a reset or finish) on the device at
            // the power loss keeps the write pointer they would leave, as if all
            // of them had landed.
            for plug in self.q.plugs.iter().map(|(_, p)| p).filter(|p| p.busy || !p.pipe.is_empty()) {
                let info = &mut zones[plug.zone.idx()];
                if !matches!(info.cond, ZoneCond::ReadOnly | ZoneCond::Offline) {
                    let cond = match plug.wp_offset {
                        0 => ZoneCond::Empty,
                        w if w >= info.capacity => ZoneCond::Full,
                        _ => ZoneCond::Closed,
                    };
                    *info = ZoneInfo::of(&self.q.geo, plug.zone, cond, plug.wp_offset);
                }
            }
        }
        let mut engine = Engine::new(&self.q.geo, self.q.cfg, &zones);
        engine.q.self_check = self.q.self_check;
        engine
    }
}
