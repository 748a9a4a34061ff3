//! Submission: a BIO is validated, split, and each piece goes where it must wait.
//!
//! validate (`submit_bio_noacct()`, `blk_check_zone_append()`) → split at
//! `max_sectors` and zone boundaries (`bio_split_to_limits()`; appends are never
//! split) → a write, WRITE_ZEROES or emulated append to a sequential zone joins its
//! zone's plug; a reset or finish too (ordered with the writes); a native append
//! joins the plug to keep its place; RESET_ALL becomes a barrier; everything else is
//! handed to the issue policy, which dispatches it (or schedules it, under zone write
//! locking).

use super::bios::{BioId, FragId, Kind};
use super::plugs::{Front, PlugId};
use super::{Engine, Queue};
use crate::bio::{Bio, BioFlags, Op, Status};
use crate::geometry::Geometry;
use crate::rule::Rule;
use crate::units::ZoneNo;

impl Engine {
    /// Submits a BIO. Its completion arrives as an [`super::Action::Complete`], never
    /// synchronously, even when it is refused at once.
    pub fn submit(&mut self, bio: Bio) {
        self.enter(bio);
        self.after_input();
    }

    /// [`Engine::submit`] without the check after it (a frozen queue lets its held
    /// BIOs in through here).
    pub(super) fn enter(&mut self, bio: Bio) {
        let q = &mut self.q;
        if q.freeze.is_some() {
            // The queue is frozen for an attribute change: hold new BIOs until it is
            // drained and switched, as blk_queue_enter() waits.
            if q.bios.len() + q.frozen.len() >= q.cfg.max_bios as usize {
                q.stats.bios += 1;
                q.complete_bio_now(bio.user_data, Err(Status::Again));
            } else {
                q.frozen.push_back(bio);
            }
            return;
        }
        q.stats.bios += 1;
        if q.bios.len() >= q.cfg.max_bios as usize {
            q.complete_bio_now(bio.user_data, Err(Status::Again));
            return;
        }
        if let Err(status) = validate_bio(&q.geo, &bio) {
            q.stats.invalid += 1;
            q.complete_bio_now(bio.user_data, Err(status));
            return;
        }
        let b = q.bios.insert(bio.user_data, bio.sector);
        let plugs = q.cfg.policy.plugs();
        match bio.op {
            Op::ZoneReset | Op::ZoneFinish if plugs => {
                let f = self.q.new_frag(b, &bio, 0, 0, Kind::WpOp);
                self.submit_wp_op(f);
            }
            Op::ZoneResetAll if plugs => {
                let f = self.q.new_frag(b, &bio, 0, 0, Kind::ResetAll);
                self.submit_reset_all(f);
            }
            Op::ZoneAppend => self.submit_append(b, &bio),
            op if op.has_range() => self.submit_ranged(b, &bio),
            Op::Flush if crate::mutation::on(crate::mutation::Mutation::FlushAckEarly) => {
                let f = self.q.new_frag(b, &bio, 0, 0, Kind::Free);
                self.q.end_frag(f, Ok(bio.sector));
            }
            _ => {
                let f = self.q.new_frag(b, &bio, 0, 0, Kind::Free);
                self.q.dispatch(f);
            }
        }
        self.q.put_bio(b);
    }

    /// Checks a BIO against the geometry, as `submit_bio_noacct()` and
    /// `blk_check_zone_append()` do. Every failure is [`Status::Invalid`] except
    /// zone operations on a regular device ([`Status::NotSupported`]).
    pub fn validate(&self, bio: &Bio) -> Result<(), Status> {
        validate_bio(&self.q.geo, bio)
    }

    /// READ, WRITE, WRITE_ZEROES, DISCARD: split at `max_sectors` (WRITE_ZEROES at its
    /// own limit) and zone boundaries; sequential zone writes go through their plug,
    /// everything else to the policy.
    fn submit_ranged(&mut self, b: BioId, bio: &Bio) {
        let q = &mut self.q;
        let plugged = bio.op.is_zone_write() && q.geo.is_zoned() && q.cfg.policy.plugs();
        let wz_limits = !crate::mutation::on(crate::mutation::Mutation::WriteZeroesOverLimit);
        let mut limits = if bio.op == Op::WriteZeroes && wz_limits { q.wz_limits } else { q.limits };
        if crate::mutation::on(crate::mutation::Mutation::PieceOverMaxSectors) {
            limits.max_sectors += limits.lbs_sectors;
        }
        if !limits.needs_split(bio.sector, bio.nr_sectors) {
            return self.submit_piece(b, bio, 0, bio.nr_sectors, plugged);
        }
        q.stats.splits += 1;
        for (off, n) in limits.pieces(bio.sector, bio.nr_sectors) {
            self.submit_piece(b, bio, off, n, plugged);
        }
    }

    /// One piece of a ranged BIO: to its zone's plug, or to the policy.
    fn submit_piece(&mut self, b: BioId, bio: &Bio, off: u32, n: u32, plugged: bool) {
        let sector = bio.sector + u64::from(off);
        if plugged {
            let z = self.q.geo.zone_no(sector);
            if !self.q.geo.zone_is_conv(z) {
                let f = self.q.new_frag(b, bio, off, n, Kind::ZoneWrite);
                return self.plug_write(f, z);
            }
        }
        let f = self.q.new_frag(b, bio, off, n, Kind::Free);
        self.policy.submit_unplugged(&mut self.q, f);
    }

    /// ZONE_APPEND: emulated with a plugged write, or native.
    fn submit_append(&mut self, b: BioId, bio: &Bio) {
        let passthrough = !self.q.cfg.policy.plugs();
        if self.q.geo.emulates_zone_append() {
            let f = self.q.new_frag(b, bio, 0, bio.nr_sectors, Kind::ZoneWrite);
            if passthrough {
                // Without a plug there is no write pointer to emulate the append at.
                self.q.end_frag(f, Err(Status::NotSupported.because(Rule::NoZoneAppend)));
                return;
            }
            self.q.stats.emulated_appends += 1;
            let mut z = self.q.geo.zone_no(bio.sector);
            if crate::mutation::on(crate::mutation::Mutation::AppendSectorEarly) {
                if let Some(p) = self.q.plugs.get(z) {
                    self.q.frags[f].sector = self.q.geo.zone_start(z) + self.q.plugs[p].wp_offset;
                }
                // The sector placed early decides the plug.
                z = self.q.geo.zone_no(self.q.frags[f].sector);
            }
            self.plug_write(f, z);
            return;
        }
        if passthrough {
            let f = self.q.new_frag(b, bio, 0, bio.nr_sectors, Kind::Free);
            self.q.dispatch(f);
            return;
        }
        let f = self.q.new_frag(b, bio, 0, bio.nr_sectors, Kind::NativeAppend);
        let z = self.q.geo.zone_no(bio.sector);
        let p = match self.q.plug_of(z) {
            Ok(p) => p,
            Err(status) => return self.q.refuse(f, status),
        };
        // The write pointer will move where the host cannot follow. Writes waiting in
        // the plug cannot be ordered against the appends and are aborted, as the
        // kernel does ("Invalid mix of zone append and regular writes").
        self.abort_queued_writes(p, Status::Aborted);
        self.enqueue(p, f);
    }

    /// RESET and FINISH are ordered in their zone's plug. Writes still waiting in the
    /// plug raced with the operation and are aborted, as the kernel's
    /// `blk_zone_wplug_handle_reset_or_finish()` does.
    fn submit_wp_op(&mut self, f: FragId) {
        let z = self.q.geo.zone_no(self.q.frags[f].sector);
        let p = match self.q.plug_of(z) {
            Ok(p) => p,
            Err(_) => {
                // A READONLY or OFFLINE zone: the device gives the answer.
                self.q.frags[f].kind = Kind::Free;
                return self.q.dispatch(f);
            }
        };
        if !crate::mutation::on(crate::mutation::Mutation::ResetKeepsPlugged) {
            self.abort_queued_writes(p, Status::Aborted);
        }
        self.enqueue(p, f);
    }

    /// A sequential zone write (or emulated append) `f` to zone `z` enters the zone's
    /// plug.
    fn plug_write(&mut self, f: FragId, z: ZoneNo) {
        let p = match self.q.plug_of(z) {
            Ok(p) => p,
            Err(status) => return self.q.refuse(f, status),
        };
        let plug = &self.q.plugs[p];
        if plug.busy || !plug.queue.is_empty() {
            self.q.stats.plugged += 1;
            if plug.busy && self.q.traits.independent_plugs {
                // Nothing `after_plug_change` would do can happen: the plug's front
                // waits for the operation out, which also keeps the plug, holds back
                // a RESET_ALL, and defers any write pointer report until it
                // completes.
                return self.q.enqueue(p, f);
            }
        } else if self.q.traits.independent_plugs && self.q.front(plug, &self.q.frags[f]) == Front::Go {
            // The plug is idle and the policy would release it at once: prepare and
            // issue without queueing, as the kernel does for a write to a zone whose
            // plug is not plugged. What `after_plug_change` would do next has nothing
            // to do, except drop the plug of a write refused on an EMPTY or FULL zone
            // (a write that went keeps its plug in use).
            if !self.q.prepare_and_issue(p, f) {
                self.q.maybe_release(p);
            }
            return;
        }
        self.enqueue(p, f);
    }

    /// Puts `f` at the tail of plug `p` and lets the policy at it.
    fn enqueue(&mut self, p: PlugId, f: FragId) {
        self.q.enqueue(p, f);
        if self.q.plugs[p].busy && self.q.traits.independent_plugs {
            // As in `plug_write`: a busy plug releases nothing until its operation
            // completes.
            return;
        }
        self.after_plug_change(p);
    }
}

impl Queue {
    /// A fragment of BIO `b`: `nr_sectors` at `bio_offset` sectors into it.
    fn new_frag(&mut self, b: BioId, bio: &Bio, bio_offset: u32, nr_sectors: u32, kind: Kind) -> FragId {
        self.bios.get(b);
        let mut flags = bio.flags;
        if bio.op == Op::WriteZeroes
            && self.wzeroes_unmap_sectors == 0
            && !crate::mutation::on(crate::mutation::Mutation::NounmapNotForced)
        {
            // Unmap is disabled (or the device cannot): the device must write zeroes.
            flags = flags | BioFlags::NOUNMAP;
        }
        if bio.op == Op::WriteZeroes
            && self.wzeroes_unmap_sectors != 0
            && crate::mutation::on(crate::mutation::Mutation::NounmapDropped)
        {
            flags = flags.without(BioFlags::NOUNMAP);
        }
        let sector = bio.sector + u64::from(bio_offset);
        let f = self.frags.insert(b, bio.op, kind, sector, nr_sectors, bio_offset, flags);
        self.frags[f].ra_epoch = self.barrier.submitted;
        f
    }
}

/// Checks a BIO against a device geometry, as `submit_bio_noacct()` and
/// `blk_check_zone_append()` do: what [`Engine::validate`] checks, for callers that
/// submit to a device without an engine of its own (a stacked, bio-based device).
/// A refusal names its [`Rule`].
pub fn validate_bio(geo: &Geometry, bio: &Bio) -> Result<(), Status> {
    let invalid = |rule| Err(Status::Invalid.because(rule));
    if bio.op == Op::Flush {
        return if bio.nr_sectors == 0 { Ok(()) } else { invalid(Rule::UnexpectedLength) };
    }
    if bio.op.is_zone_mgmt() || bio.op == Op::ZoneAppend {
        if !geo.is_zoned() {
            return Err(Status::NotSupported.because(Rule::NotZoned));
        }
        if bio.op == Op::ZoneResetAll {
            return Ok(());
        }
        if bio.sector.0 >= geo.nr_sectors() {
            return invalid(Rule::BeyondEnd);
        }
        if geo.zone_is_conv(geo.zone_no(bio.sector)) {
            return invalid(Rule::Conventional);
        }
        if !geo.is_zone_start(bio.sector) {
            return invalid(Rule::NotZoneStart);
        }
    }
    if bio.op.is_zone_mgmt() {
        return if bio.nr_sectors == 0 { Ok(()) } else { invalid(Rule::UnexpectedLength) };
    }
    let n = u64::from(bio.nr_sectors);
    if n == 0 {
        return invalid(Rule::LengthZero);
    }
    if bio.sector.0.checked_add(n).is_none_or(|end| end > geo.nr_sectors()) {
        return invalid(Rule::BeyondEnd);
    }
    if !geo.is_block_aligned(bio.sector, n) {
        return invalid(Rule::NotBlockAligned);
    }
    if bio.op == Op::ZoneAppend {
        if bio.nr_sectors > geo.append_limit_sectors() {
            return invalid(Rule::AppendOverLimit);
        }
        if n > geo.zone_capacity(geo.zone_no(bio.sector)) {
            return invalid(Rule::AppendOverCapacity);
        }
    }
    if bio.op == Op::Discard && geo.is_zoned() && !geo.zone_is_conv(geo.zone_no(bio.end() - 1)) {
        return invalid(Rule::DiscardSequential);
    }
    if bio.op == Op::WriteZeroes && geo.max_write_zeroes_sectors() == 0 {
        // As submit_bio_noacct(): the caller falls back to writing zero buffers.
        return Err(Status::NotSupported.because(Rule::NoWriteZeroes));
    }
    Ok(())
}
