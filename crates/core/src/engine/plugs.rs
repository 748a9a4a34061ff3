//! Zone write plugs (the kernel's `struct blk_zone_wplug`) and the per-zone condition
//! cache of zones that have none (`disk->zones_cond`).
//!
//! A plug exists only for a zone that has operations pending or out, needs its write
//! pointer re-synchronised, or is partially written (then its `wp_offset` is the only
//! record of where the next write goes). A plug of an idle EMPTY or FULL zone is
//! released at once, so the number of plugs is bounded by the active zones plus the
//! zones with work in the engine.
//!
//! What a plug orders: beyond the kernel, which plugs only writes, every operation
//! that moves a zone's write pointer, because the device must see them in
//! submission order (see [`super::bios::Kind`]). [`Queue::front`] is the one place that
//! decides, for the operation at the head of a plug, whether it goes, waits or is
//! refused; [`Queue::drain_front`] acts on it. How plugs take turns is the issue
//! policy's business (`super::policy`).

use super::Queue;
use super::bios::{FragId, FragState, Kind};
use crate::bio::{Op, Status};
use crate::rule::Rule;
use crate::units::ZoneNo;
use slab::Slab;
use std::collections::VecDeque;

/// [`Queue::drain_front`] with no device-wide cap: the zone writes out never reach it.
pub(crate) const NO_CAP: u32 = u32::MAX;

/// A zone write plug, by its slot in the [`PlugTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PlugId(u32);

impl PlugId {
    /// The slot number, for tables indexed by plug.
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

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
    /// The zone's capacity in sectors, kept here because every write checks against
    /// it (the kernel keeps it in the plug too).
    pub capacity: u64,
    /// Operations waiting for their turn, oldest first: writes, resets and finishes,
    /// and native appends that arrived behind them.
    pub queue: VecDeque<FragId>,
    /// A write, reset or finish from this plug is released and not yet completed (the
    /// kernel's BLK_ZONE_WPLUG_PLUGGED, minus the "list not empty" half, which is
    /// `!queue.is_empty()`).
    pub busy: bool,
    /// A write failed: `wp_offset` may be wrong until a zone report re-synchronises it
    /// (BLK_ZONE_WPLUG_NEED_WP_UPDATE). No write is released meanwhile.
    pub need_wp_update: bool,
    /// A zone report was asked for and not answered yet (report recovery only).
    pub report_pending: bool,
    /// The issue policy holds the plug (the single issuer's list): a reference, as a
    /// plug on the kernel's list holds one. Only the policy sets and clears it.
    pub listed: bool,
    /// Native zone appends of this zone on the device. While any is out, the write
    /// pointer moves where the host cannot follow: writes, resets and finishes wait.
    pub appends_out: u32,
    /// Pipelined zone writes released and not acknowledged, in zone order (the
    /// pipelining policy only; `engine/pipe.rs`). The front is always still out: a
    /// completed front is acknowledged at once.
    pub pipe: VecDeque<FragId>,
}

impl Plug {
    /// Whether the plug holds or has released operations, or the policy holds it: it
    /// cannot be released.
    pub fn in_use(&self) -> bool {
        self.busy || !self.pipe.is_empty() || !self.queue.is_empty() || self.listed || self.appends_out > 0
    }
}

/// What the host knows of a sequential zone that has no plug (the kernel keeps the
/// same per-zone condition cache, `disk->zones_cond`). A zone with a plug is
/// described by the plug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CondCache {
    NotWp,
    /// The zone has a plug, which describes it.
    Plugged,
    Empty,
    Full,
    /// Not known: a native zone append or a failed zone operation moved the write
    /// pointer to where the host cannot tell.
    Unknown,
    ReadOnly,
    Offline,
}

/// The single decision about the operation at the front of a plug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Front {
    /// Release it now.
    Go,
    /// Not yet: something before it is on the device, or the write pointer is unknown.
    Wait,
    /// It can never succeed: fail it without sending it.
    Refuse(Status),
}

/// Whether a zone write may be pipelined: a plain WRITE or an emulated append
/// without FUA or PREFLUSH. A device executes those from the moment it accepts them
/// in issue order (an image accepts a transfer when it is prepared). A FUA or
/// PREFLUSH write, or a WRITE_ZEROES, is one the device carries out whole on a
/// thread that may block, and accepts there, later: a write issued after it could
/// reach the device first; and a FUA write is made durable with the zone's write
/// pointer as it stands when it completes, which a write before it still out would
/// hold below it. Such a write goes alone, as under per-zone plugging: once nothing
/// of its zone is out, and nothing joins it.
fn pipelinable(frag: &super::bios::Frag) -> bool {
    use crate::bio::BioFlags;
    use crate::mutation::{Mutation, on};
    matches!(frag.op, Op::Write | Op::ZoneAppend)
        && (!frag.flags.contains(BioFlags::FUA) || on(Mutation::FuaJoinsPipeline))
        && !frag.flags.contains(BioFlags::PREFLUSH)
}

/// No plug for this zone.
const NO_PLUG: u32 = u32::MAX;

/// The plugs of one device: a slab with an index by zone (the kernel keeps a hash,
/// `disk->zone_wplugs_hash`), and what they have on the device.
#[derive(Debug, Default)]
pub(crate) struct PlugTable {
    plugs: Slab<Plug>,
    /// Per zone, its plug's slot or [`NO_PLUG`]: an index, not the kernel's hash,
    /// because a lookup per BIO must cost nothing (4 bytes a zone: 450 KiB for a
    /// 30 TB disk of 256 MiB zones).
    by_zone: Vec<u32>,
    /// Spare queues, so that a busy device does not allocate a queue per plug.
    spare_queues: Vec<VecDeque<FragId>>,
    /// Spare pipes, likewise.
    spare_pipes: Vec<VecDeque<FragId>>,
    /// Plugged writes, resets and finishes released and not completed (waiting for a
    /// tag or on the device). At most one under a single issuer.
    pub ops_out: u32,
    /// Native appends released and not completed.
    pub appends_out: u32,
    /// Most plugs alive at once.
    pub peak: usize,
    /// Plugs ever allocated.
    pub allocated: u64,
}

impl PlugTable {
    /// The plug of zone `zone`, if it has one.
    pub fn get(&self, zone: ZoneNo) -> Option<PlugId> {
        match self.by_zone.get(zone.idx()) {
            Some(&i) if i != NO_PLUG => Some(PlugId(i)),
            _ => None,
        }
    }

    /// A new plug for `zone`, which must have none.
    pub fn insert(&mut self, zone: ZoneNo, wp_offset: u64, capacity: u64) -> PlugId {
        assert!(self.get(zone).is_none(), "second plug for zone {zone}");
        let queue = self.spare_queues.pop().unwrap_or_default();
        let pipe = self.spare_pipes.pop().unwrap_or_default();
        let idx = self.plugs.insert(Plug {
            zone,
            wp_offset,
            capacity,
            queue,
            busy: false,
            need_wp_update: false,
            report_pending: false,
            listed: false,
            appends_out: 0,
            pipe,
        });
        let p = PlugId(u32::try_from(idx).ok().filter(|&i| i != NO_PLUG).expect("more than 2^32 - 1 plugs"));
        if self.by_zone.len() <= zone.idx() {
            self.by_zone.resize(zone.idx() + 1, NO_PLUG);
        }
        self.by_zone[zone.idx()] = p.0;
        self.allocated += 1;
        self.peak = self.peak.max(self.plugs.len());
        p
    }

    /// Frees plug `p`, which must not be in use.
    pub fn remove(&mut self, p: PlugId) {
        let plug = self.plugs.remove(p.0 as usize);
        assert!(!plug.in_use(), "releasing plug of zone {} still in use: {plug:?}", plug.zone);
        self.by_zone[plug.zone.idx()] = NO_PLUG;
        if self.spare_queues.len() < 64 {
            self.spare_queues.push(plug.queue);
        }
        if self.spare_pipes.len() < 64 && plug.pipe.capacity() > 0 {
            self.spare_pipes.push(plug.pipe);
        }
    }

    /// Plugs alive.
    pub fn len(&self) -> usize {
        self.plugs.len()
    }

    /// Every plug, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (PlugId, &Plug)> {
        self.plugs.iter().map(|(i, p)| (PlugId(i as u32), p))
    }

    /// Every plug id, in slot order (a snapshot, for loops that change plugs).
    pub fn ids(&self) -> Vec<PlugId> {
        self.plugs.iter().map(|(i, _)| PlugId(i as u32)).collect()
    }
}

impl std::ops::Index<PlugId> for PlugTable {
    type Output = Plug;
    fn index(&self, p: PlugId) -> &Plug {
        &self.plugs[p.0 as usize]
    }
}

impl std::ops::IndexMut<PlugId> for PlugTable {
    fn index_mut(&mut self, p: PlugId) -> &mut Plug {
        &mut self.plugs[p.0 as usize]
    }
}

impl Queue {
    /// The plug of zone `z`, allocated if needed with its write pointer from the
    /// condition cache; a READONLY or OFFLINE zone gets none.
    #[inline]
    pub(crate) fn plug_of(&mut self, z: ZoneNo) -> Result<PlugId, Status> {
        match self.plugs.get(z) {
            Some(p) => Ok(p),
            None => self.new_plug(z),
        }
    }

    /// [`Queue::plug_of`] for a zone without a plug: kept out of line, so that the
    /// lookup every zone write does stays small.
    #[inline(never)]
    fn new_plug(&mut self, z: ZoneNo) -> Result<PlugId, Status> {
        let cap = self.geo.zone_capacity(z);
        let (wp_offset, known) = match self.cond[z.idx()] {
            CondCache::Empty => (0, true),
            CondCache::Full => (cap, true),
            CondCache::Unknown => (0, false),
            CondCache::ReadOnly => return Err(Status::ZoneReadOnly),
            CondCache::Offline => return Err(Status::ZoneOffline),
            CondCache::NotWp => unreachable!("plug for conventional zone {z}"),
            CondCache::Plugged => unreachable!("zone {z} is plugged without a plug"),
        };
        let p = self.plugs.insert(z, wp_offset, cap);
        self.plugs[p].need_wp_update = !known;
        self.cond[z.idx()] = CondCache::Plugged;
        Ok(p)
    }

    /// Fails fragment `f` without sending it (a write that can never succeed). Rare:
    /// kept out of the zone write paths that may call it.
    #[cold]
    pub(crate) fn refuse(&mut self, f: FragId, status: Status) {
        self.stats.refused += 1;
        self.frags[f].plug = None;
        self.end_frag(f, Err(status));
    }

    /// Puts `f` at the tail of plug `p`. The caller then lets the policy at it.
    pub(crate) fn enqueue(&mut self, p: PlugId, f: FragId) {
        let frag = &mut self.frags[f];
        frag.plug = Some(p);
        frag.state = FragState::Plugged;
        self.plugs[p].queue.push_back(f);
    }

    /// Whether a zone report now describes plug `p`'s zone after everything the host
    /// sent it: nothing of the zone on the device, no RESET_ALL out. A report is asked
    /// for, and trusted, only then.
    pub(crate) fn wp_reportable(&self, p: PlugId) -> bool {
        let plug = &self.plugs[p];
        !plug.busy && plug.appends_out == 0 && plug.pipe.is_empty() && !self.barrier.out
    }

    /// What to do with fragment `frag` at the front of plug `plug` (both looked up by
    /// the caller, which has them at hand).
    #[inline]
    pub(crate) fn front(&self, plug: &Plug, frag: &super::bios::Frag) -> Front {
        let kind = frag.kind;
        let busy = (plug.busy
            && !(kind == Kind::ZoneWrite && crate::mutation::on(crate::mutation::Mutation::TwoWritesReleased)))
            // Pipelined writes out: another plain write may join them up to the
            // depth; anything else waits until they are all acknowledged (see
            // `pipelinable`).
            || (!plug.pipe.is_empty()
                && (kind != Kind::ZoneWrite || plug.pipe.len() >= self.pipe_depth() || !pipelinable(frag)));
        // Behind a RESET_ALL not done yet (one submitted before this operation).
        if frag.ra_epoch > self.barrier.done || busy {
            return Front::Wait;
        }
        match kind {
            // An append needs no write pointer, only not to overtake what is before it,
            // nor a report of the zone asked for before it: the device may read the
            // zone before the append lands and answer after it completed, a write
            // pointer the host would then trust below the device's.
            Kind::NativeAppend if !plug.report_pending => Front::Go,
            Kind::WpOp if plug.appends_out == 0 => Front::Go,
            Kind::ZoneWrite if plug.appends_out == 0 && !plug.need_wp_update => Front::Go,
            Kind::ZoneWrite if plug.appends_out == 0 && self.cfg.wp_recovery == super::WpRecovery::Kernel => {
                // As the kernel: no write until the user reports the zone.
                Front::Refuse(Status::NeedWpUpdate)
            }
            Kind::WpOp | Kind::ZoneWrite | Kind::NativeAppend => Front::Wait,
            k => unreachable!("{k:?} in a plug"),
        }
    }

    /// Takes off plug `p` what may go now, as far as it goes: releases it, or refuses
    /// it. Stops once `device_cap` zone writes (resets and finishes included) of the
    /// whole device are out: 1 for a single issuer, [`NO_CAP`] for none.
    #[inline]
    pub(crate) fn drain_front(&mut self, p: PlugId, device_cap: u32) {
        // After a completion the plug often has nothing queued (a zone written by one
        // submitter at a time): nothing to drain, decided without a call.
        if !self.plugs[p].queue.is_empty() {
            self.drain_queue(p, device_cap);
        }
    }

    /// [`Queue::drain_front`] of a plug with something queued.
    #[inline(never)]
    pub(crate) fn drain_queue(&mut self, p: PlugId, device_cap: u32) {
        loop {
            let plug = &self.plugs[p];
            // A busy plug waits whatever its front is: the common case, decided
            // before looking at the front.
            if plug.busy && !crate::mutation::on(crate::mutation::Mutation::TwoWritesReleased) {
                return;
            }
            let Some(&f) = plug.queue.front() else { return };
            let frag = &self.frags[f];
            let kind = frag.kind;
            match self.front(plug, frag) {
                Front::Wait => return,
                Front::Refuse(status) => {
                    self.plugs[p].queue.pop_front();
                    self.refuse(f, status);
                }
                Front::Go => {
                    self.plugs[p].queue.pop_front();
                    self.release(p, f, kind);
                    if self.plugs.ops_out >= device_cap {
                        return;
                    }
                }
            }
        }
    }

    /// Sends fragment `f` (of kind `kind`), just taken off plug `p`, on its way to the
    /// device.
    pub(crate) fn release(&mut self, p: PlugId, f: FragId, kind: Kind) {
        match kind {
            Kind::NativeAppend => {
                // From here the write pointer moves where the host cannot follow.
                let plug = &mut self.plugs[p];
                plug.need_wp_update = true;
                plug.appends_out += 1;
                self.plugs.appends_out += 1;
                self.dispatch(f);
            }
            Kind::WpOp => {
                self.plugs[p].busy = true;
                self.plugs.ops_out += 1;
                self.dispatch(f);
            }
            Kind::ZoneWrite => {
                self.prepare_and_issue(p, f);
            }
            k => unreachable!("{k:?} in a plug"),
        }
    }

    /// The kernel's `blk_zone_wplug_prepare_bio()`: check the write against
    /// `wp_offset` (or place an emulated append there), advance `wp_offset`, issue.
    /// A write that cannot succeed is failed here and never reaches the device.
    /// `f` is plug `p`'s from here on, whether it waited in the plug or not.
    /// Returns whether it went (else it was refused, and the plug may be unused).
    pub(crate) fn prepare_and_issue(&mut self, p: PlugId, f: FragId) -> bool {
        // One lookup of each for the whole preparation: this runs for every zone
        // write.
        let plug = &mut self.plugs[p];
        let frag = &mut self.frags[f];
        let cap = plug.capacity;
        let n = u64::from(frag.nr_sectors);
        // The write pointer as a sector: only a refusal or an emulated append needs it.
        let wp = |geo: &crate::geometry::Geometry| geo.zone_start(plug.zone) + plug.wp_offset;
        let check = if plug.wp_offset >= cap {
            Err(Status::ZoneFull.because(Rule::ZoneFull))
        } else if !frag.append && self.geo.offset_in_zone(frag.sector) != plug.wp_offset {
            Err(Status::Unaligned.because(Rule::NotAtWp { wp: wp(&self.geo) }))
        } else if plug.wp_offset + n > cap {
            Err(Status::ZoneFull.because(Rule::PastCapacity { wp: wp(&self.geo) }))
        } else {
            Ok(())
        };
        if let Err(status) = check {
            self.refuse(f, status);
            return false;
        }
        frag.plug = Some(p);
        if frag.append {
            let zone_start = self.geo.zone_start(plug.zone);
            let mut at = wp(&self.geo);
            if crate::mutation::on(crate::mutation::Mutation::AppendSectorEarly) && frag.sector != zone_start {
                at = frag.sector;
            }
            // Zone append emulation: a write at the write pointer; the completion
            // reports this sector.
            frag.op = Op::Write;
            frag.sector = at;
        }
        let piped = self.traits.acks_in_zone_order && pipelinable(frag);
        frag.piped = piped;
        if piped {
            frag.flags = frag.flags | crate::bio::BioFlags::PIPELINED;
        }
        plug.wp_offset += n;
        if piped {
            // The write pointer moved at submission: the next write of the zone may
            // go while this one is out; its acknowledgement keeps zone order.
            plug.pipe.push_back(f);
        } else {
            plug.busy = true;
        }
        self.plugs.ops_out += 1;
        self.dispatch(f);
        true
    }

    /// Takes every write waiting in plug `p` out of it (resets, finishes and appends
    /// keep their place) and returns them, to be failed once the policy has seen the
    /// plug change ([`Queue::fail_aborted`]).
    pub(crate) fn take_queued_writes(&mut self, p: PlugId) -> VecDeque<FragId> {
        let queue = std::mem::take(&mut self.plugs[p].queue);
        let (doomed, kept): (VecDeque<FragId>, VecDeque<FragId>) =
            queue.into_iter().partition(|&f| self.frags[f].kind == Kind::ZoneWrite);
        self.plugs[p].queue = kept;
        doomed
    }

    /// Fails plugged writes taken out by [`Queue::take_queued_writes`].
    pub(crate) fn fail_aborted(&mut self, doomed: VecDeque<FragId>, status: Status) {
        for f in doomed {
            self.stats.aborted += 1;
            self.frags[f].plug = None;
            self.end_frag(f, Err(status));
        }
    }

    /// A plugged write, reset or finish of plug `p` completed. A reset or finish that
    /// succeeded sets the write pointer exactly; a failed one loses it. Returns
    /// whether a write failed: the writes queued behind it can no longer be aligned
    /// and must be aborted (the kernel's NEED_WP_UPDATE).
    pub(crate) fn zone_op_done(&mut self, p: PlugId, kind: Kind, op: Op, failed: bool) -> bool {
        let plug = &mut self.plugs[p];
        assert!(plug.busy, "completion for idle plug of zone {}", plug.zone);
        plug.busy = false;
        match (kind, failed) {
            (Kind::ZoneWrite, true) => {
                plug.need_wp_update = true;
                self.plugs.ops_out -= 1;
                self.stats.write_errors += 1;
                return true;
            }
            (Kind::WpOp, true) => plug.need_wp_update = true,
            (Kind::WpOp, false) => {
                let cap = plug.capacity;
                plug.wp_offset = if op == Op::ZoneReset { 0 } else { cap };
                if !crate::mutation::on(crate::mutation::Mutation::RecoveryIgnoresReset) {
                    plug.need_wp_update = false;
                }
            }
            _ => {}
        }
        self.plugs.ops_out -= 1;
        false
    }

    /// A native append of plug `p` completed.
    pub(crate) fn append_done(&mut self, p: PlugId) {
        self.plugs[p].appends_out -= 1;
        self.plugs.appends_out -= 1;
    }

    /// Releases plug `p` if nothing needs it: nothing queued, out or held, no report
    /// pending, and the zone EMPTY or FULL (or its write pointer unknown, which the
    /// condition cache can say as well as the plug).
    #[inline]
    pub(crate) fn maybe_release(&mut self, p: PlugId) {
        let plug = &self.plugs[p];
        if plug.in_use() || plug.report_pending {
            return;
        }
        self.release_idle(p);
    }

    /// Puts plug `p` on the single issuer's list: the policy keeps the list, the
    /// plug carries the mark the engine's checks read.
    pub(crate) fn list(&mut self, p: PlugId) {
        self.plugs[p].listed = true;
    }

    /// Takes plug `p` off the single issuer's list.
    pub(crate) fn unlist(&mut self, p: PlugId) {
        self.plugs[p].listed = false;
    }

    /// [`Queue::maybe_release`] of a plug with nothing queued, out or held.
    fn release_idle(&mut self, p: PlugId) {
        let plug = &self.plugs[p];
        let z = plug.zone;
        let c = if matches!(self.cond[z.idx()], CondCache::ReadOnly | CondCache::Offline) {
            // Learnt from a report while the plug was in use: nothing will be
            // written there again.
            self.cond[z.idx()]
        } else if plug.need_wp_update {
            CondCache::Unknown
        } else if plug.wp_offset == 0 {
            CondCache::Empty
        } else if plug.wp_offset >= plug.capacity {
            CondCache::Full
        } else {
            return; // partially written: the plug is the record of the write pointer
        };
        self.cond[z.idx()] = c;
        self.plugs.remove(p);
    }

    /// Sectors waiting in plug `p` (the batching issuer drains the deepest first).
    pub(crate) fn queued_sectors(&self, p: PlugId) -> u64 {
        self.plugs[p].queue.iter().map(|&f| u64::from(self.frags[f].nr_sectors)).sum()
    }
}
