//! The host-side reference model of the top device: each zone's write pointer as
//! the BIOs submitted so far leave it (the order zone write plugging keeps), when
//! that prediction is certain, and the verdict on each BIO's completion.
//!
//! Under zone write pipelining (several writes of a zone on the device at once) it
//! also holds the engine to the rules that keep acknowledged data safe: a zone's
//! writes are acknowledged in the order they were submitted; a write that fails on
//! the device fails every write of its zone submitted after it and not
//! acknowledged; and the plug's write pointer goes back to the failed write's start
//! and asks the device where it is.

use super::errno::*;
use std::collections::BTreeMap;
use std::io::Write as _;
use zblk_core::bio::{Bio, Op, Request, Status};
use zblk_core::engine::PlugView;
use zblk_core::geometry::Geometry;
use zblk_core::units::{Sector, ZoneNo};

/// What the host-side model knows of one zone of the top device.
#[derive(Clone, Copy, Debug, Default)]
struct HostZone {
    /// The write pointer the BIOs submitted so far leave, offset in the zone.
    sub_wp: u64,
    /// `sub_wp` is exact: nothing since the last quiet moment could have moved the
    /// write pointer where the model cannot follow.
    certain: bool,
    /// A fault made (part of) the zone READONLY or OFFLINE.
    failed: bool,
    /// BIOs touching the zone in flight.
    inflight: u32,
    /// Bumped at everything that can change the outcome of a BIO in flight (a
    /// device error, a fault, a reset, a finish, a native append).
    epoch: u64,
    /// The kernel's recovery: after a write error the host refuses writes until
    /// the user reports the zone.
    need_report: bool,
    /// A RESET, FINISH or RESET_ALL of the zone, submitted after the last
    /// disturbance, succeeded: its write pointer is known again once nothing is in
    /// flight.
    wp_set: bool,
    /// Disturbances so far.
    disturbs: u64,
}

/// What the host-side model recorded of one BIO at its submission.
#[derive(Clone, Debug, Default)]
pub struct HostBio {
    /// The BIO as submitted.
    pub bio: Option<Bio>,
    valid: bool,
    /// Zones it touches (a RESET_ALL: every one).
    zones: Vec<u32>,
    gen_sum: u64,
    /// For a zone write: whether it should succeed (`None`: the model cannot say).
    pred_ok: Option<bool>,
    /// For an emulated append: the sector it should land at.
    pred_at: Option<u64>,
    /// The predicted write pointers (offsets) of its zones at its submission.
    pred_wps: Vec<u64>,
    /// The disturbances of its zones at its submission.
    disturbs: Vec<u64>,
    /// A request of it failed on a device (or timed out).
    pub dev_err: bool,
    /// A device refused a request of it as invalid or unsupported (EINVAL,
    /// EOPNOTSUPP), with no fault injected: a request the host must never send for
    /// a valid BIO (beyond the device's limits, or malformed).
    dev_refused: Option<(Request, Status)>,
    /// The errno of a device's answer to a request of it when no fault was injected
    /// (the first one): a BIO of one request completes with it.
    dev_errno: Option<i32>,
    /// A request of it was issued to a device.
    pub issued: bool,
    /// A FLUSH request of it executed on a device.
    pub flush_executed: bool,
    /// A RESET, FINISH or RESET_ALL arrived while it waited in its plug: it must fail.
    must_fail: Option<&'static str>,
    /// Its place in submission order (valid BIOs of a zoned top device, from 1).
    seq: u64,
    /// A valid plugged zone write (WRITE, WRITE_ZEROES or emulated append) under
    /// pipelining: acknowledged in zone order, failed by a failure before it.
    pipelined: bool,
}

/// A plugged zone write in flight under pipelining, in one zone's list.
#[derive(Clone, Debug)]
struct InFlightWrite {
    bio: Bio,
    /// It lies in that zone alone: its completion waits for nothing in another zone.
    single_zone: bool,
    /// A write submitted before it in the zone failed on the device while it was in
    /// flight: it must fail.
    doomed_by: Option<Bio>,
    /// A request of it failed on the device and the engine heard of it.
    failed: bool,
}

impl HostBio {
    /// What the model predicted at submission, for traces: (valid, zones, their
    /// write pointers, success).
    pub fn prediction(&self) -> (bool, &[u32], &[u64], Option<bool>) {
        (self.valid, &self.zones, &self.pred_wps, self.pred_ok)
    }
}

/// How the host-side model must judge a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostRules {
    /// Every disk's engine plugs zone writes and split remainders go at the head:
    /// each zone's writes reach the device in submission order.
    pub ordered: bool,
    /// Some disk's engine leaves write pointer recovery to the user.
    pub kernel_recovery: bool,
    /// Some disk's engine cannot emulate zone append (no plugging): an append may
    /// be refused with EOPNOTSUPP.
    pub append_may_be_unsupported: bool,
    /// A write BIO of at most this many sectors within one zone reaches the device
    /// in one piece (never split); with `piece_aligned`, only if it does not cross
    /// a multiple of it either (a stack splits at chunk boundaries).
    pub piece_sectors: u64,
    /// See `piece_sectors`.
    pub piece_aligned: bool,
    /// As `piece_sectors`, for WRITE_ZEROES (split at its own limit).
    pub wz_piece_sectors: u64,
    /// A zone report of the top device tells where the next write goes: each of its
    /// zones is one zone of one disk. Not so on a striped device, whose zone is made
    /// of a zone of each member: after a piece failed on one member, the members'
    /// write pointers no longer make one write pointer, and only a reset or finish
    /// of the zone makes it writable as a whole again.
    pub report_is_wp: bool,
    /// The top device is a single disk whose engine pipelines zone writes (several
    /// writes of a zone on the device at once): the pipelining rules apply.
    pub pipelined: bool,
}

/// The host-side model of the top device. See the module documentation.
#[derive(Debug)]
pub struct HostOracle {
    geo: Geometry,
    rules: HostRules,
    zones: Vec<HostZone>,
    /// Checks made.
    pub checks: u64,
    /// Check that a successful FLUSH reached the device (on unless a test shows
    /// what catches a bug without it).
    pub check_flush: bool,
    /// Check that every failed BIO's errno (what its user sees) is the one the
    /// kernel gives for its status ([`super::kernel_errno`]).
    pub check_errno: bool,
    /// Valid BIOs submitted so far.
    submitted: u64,
    /// Under pipelining, per zone: its plugged writes in flight, by submission
    /// number.
    pipe: Vec<BTreeMap<u64, InFlightWrite>>,
    /// Under pipelining, per zone: the submission number of the last RESET, FINISH
    /// or RESET_ALL of it. A write failing before it fails nothing after it: the
    /// writes behind the reset wait for it and find the zone set anew.
    wp_set_seq: Vec<u64>,
}

impl HostOracle {
    /// The model of a fresh top device.
    pub fn new(geo: &Geometry, rules: HostRules) -> HostOracle {
        let n = if geo.is_zoned() { geo.nr_zones() as usize } else { 0 };
        let zones = vec![HostZone { certain: true, ..HostZone::default() }; n];
        HostOracle {
            geo: geo.clone(),
            rules,
            pipe: vec![BTreeMap::new(); if rules.pipelined { n } else { 0 }],
            wp_set_seq: vec![0; n],
            zones,
            checks: 0,
            check_flush: true,
            check_errno: true,
            submitted: 0,
        }
    }

    /// Whether `bio` is valid, by the block layer's rules (`submit_bio_noacct()`,
    /// `blk_check_zone_append()`), from the geometry alone.
    pub fn valid(&self, bio: &Bio) -> bool {
        let g = &self.geo;
        let (s, n) = (bio.sector.0, u64::from(bio.nr_sectors));
        let lbs = u64::from(g.lbs_sectors());
        let in_range = s.checked_add(n).is_some_and(|e| e <= g.nr_sectors()) && s % lbs == 0 && n % lbs == 0;
        let seq_zone_start = |s: u64| {
            g.is_zoned() && s < g.nr_sectors() && s % g.zone_sectors() == 0 && !g.zone_is_conv(g.zone_no(Sector(s)))
        };
        match bio.op {
            Op::Flush => n == 0,
            Op::ZoneResetAll => g.is_zoned() && n == 0,
            Op::ZoneReset | Op::ZoneOpen | Op::ZoneClose | Op::ZoneFinish => n == 0 && seq_zone_start(s),
            Op::Read | Op::Write => n > 0 && in_range,
            Op::WriteZeroes => n > 0 && in_range && g.max_write_zeroes_sectors() > 0,
            Op::Discard => n > 0 && in_range && (!g.is_zoned() || g.zone_is_conv(g.zone_no(Sector(s + n - 1)))),
            Op::ZoneAppend => {
                n > 0
                    && in_range
                    && seq_zone_start(s)
                    && n <= u64::from(g.append_limit_sectors())
                    && n <= g.zone_capacity(g.zone_no(Sector(s)))
            }
        }
    }

    /// Whether `bio` reaches the device in one piece.
    fn one_piece(&self, bio: &Bio) -> bool {
        let p = if bio.op == Op::WriteZeroes { self.rules.wz_piece_sectors } else { self.rules.piece_sectors };
        let (s, n) = (bio.sector.0, u64::from(bio.nr_sectors));
        let zs = self.geo.zone_sectors();
        n <= p && s / zs == (s + n - 1) / zs && (!self.rules.piece_aligned || s / p == (s + n - 1) / p)
    }

    fn seq(&self, z: u32) -> bool {
        !self.geo.zone_is_conv(ZoneNo(z))
    }

    /// The sequential zones `bio` touches.
    fn zones_of(&self, bio: &Bio) -> Vec<u32> {
        let g = &self.geo;
        if !g.is_zoned() {
            return Vec::new();
        }
        match bio.op {
            Op::ZoneResetAll => (g.nr_conv()..g.nr_zones()).collect(),
            op if op.has_range() => {
                let first = g.zone_no(bio.sector).0;
                let last = g.zone_no(Sector(bio.sector.0 + u64::from(bio.nr_sectors).max(1) - 1)).0;
                (first..=last).filter(|&z| self.seq(z)).collect()
            }
            Op::Flush => Vec::new(),
            _ => vec![g.zone_no(bio.sector).0].into_iter().filter(|&z| self.seq(z)).collect(),
        }
    }

    fn disturb(&mut self, z: u32) {
        let hz = &mut self.zones[z as usize];
        hz.epoch += 1;
        hz.certain = false;
        hz.wp_set = false;
        hz.disturbs += 1;
        if self.rules.kernel_recovery {
            hz.need_report = true;
        }
    }

    fn gen_sum(&self, zones: &[u32]) -> u64 {
        zones.iter().map(|&z| self.zones[z as usize].epoch).sum()
    }

    /// `bio` is submitted. `inflight` are the BIOs in flight before it (to mark
    /// the writes a reset must abort); `plugs_exact` says that every zone write
    /// in flight and not issued waits in its plug (a single disk whose engine has a
    /// free tag), so that a reset or finish must abort it.
    pub fn on_submit<'a>(
        &mut self,
        bio: &Bio,
        inflight: impl Iterator<Item = &'a mut HostBio>,
        plugs_exact: bool,
    ) -> HostBio {
        self.checks += 1;
        let valid = self.valid(bio);
        let mut rec = HostBio { bio: Some(*bio), valid, ..HostBio::default() };
        if !valid || !self.geo.is_zoned() {
            return rec;
        }
        rec.zones = self.zones_of(bio);
        self.submitted += 1;
        rec.seq = self.submitted;
        if self.rules.pipelined {
            self.pipe_submitted(bio, &mut rec);
        }
        rec.pred_wps = rec.zones.iter().map(|&z| self.zones[z as usize].sub_wp).collect();
        rec.disturbs = rec.zones.iter().map(|&z| self.zones[z as usize].disturbs).collect();
        match bio.op {
            Op::Write | Op::WriteZeroes if !rec.zones.is_empty() => self.predict_write(bio, &mut rec),
            Op::ZoneAppend => self.predict_append(bio, &mut rec),
            Op::ZoneReset | Op::ZoneFinish | Op::ZoneResetAll => {
                self.predict_wp_set(bio, &rec);
                if plugs_exact {
                    self.abort_plugged_writes(bio, &rec, inflight);
                }
            }
            _ => {}
        }
        for &z in &rec.zones {
            self.zones[z as usize].inflight += 1;
        }
        rec.gen_sum = self.gen_sum(&rec.zones);
        rec
    }

    /// Under pipelining: a plugged zone write joins its zones' lists of writes in
    /// flight; a RESET, FINISH or RESET_ALL marks its zones.
    fn pipe_submitted(&mut self, bio: &Bio, rec: &mut HostBio) {
        let plugged = matches!(bio.op, Op::Write | Op::WriteZeroes)
            || (bio.op == Op::ZoneAppend && self.geo.emulates_zone_append());
        if matches!(bio.op, Op::ZoneReset | Op::ZoneFinish | Op::ZoneResetAll) {
            for &z in &rec.zones {
                self.wp_set_seq[z as usize] = rec.seq;
            }
        }
        if !plugged || rec.zones.is_empty() {
            return;
        }
        rec.pipelined = true;
        let single_zone = rec.zones.len() == 1;
        for &z in &rec.zones {
            self.pipe[z as usize]
                .insert(rec.seq, InFlightWrite { bio: *bio, single_zone, doomed_by: None, failed: false });
        }
    }

    /// A request of pipelined write `rec` failed on the device (or timed out), and
    /// the engine hears of it now: every write of the request's zone submitted after
    /// `rec` and still in flight must fail (the engine fails those on the device
    /// and aborts those waiting in the plug), up to a RESET, FINISH or RESET_ALL of
    /// the zone submitted since; unless `rec` itself failed for a failure before it,
    /// or a piece of it failed already. Not while the engine is `frozen`: a BIO submitted
    /// meanwhile waits at the queue's door, not in its plug, and meets a zone whose
    /// write pointer was read again.
    pub fn on_request_failed(&mut self, rec: &HostBio, req: &Request, frozen: bool) {
        if !rec.pipelined || frozen || !self.geo.is_zoned() || !req.op.has_range() {
            return;
        }
        let z = self.geo.zone_no(req.sector).idx();
        let Some(list) = self.pipe.get_mut(z) else { return };
        let Some(me) = list.get_mut(&rec.seq) else { return };
        if me.doomed_by.is_some() || me.failed {
            // Failing for a failure before it (or again, another piece of it): what
            // was in flight behind it was failed then; what came since waited for
            // the write pointer to be read again.
            return;
        }
        me.failed = true;
        let until = match self.wp_set_seq[z] {
            s if s > rec.seq => s,
            _ => u64::MAX,
        };
        for w in list.range_mut(rec.seq + 1..until).map(|(_, w)| w) {
            w.doomed_by.get_or_insert(rec.bio.expect("a recorded BIO"));
        }
    }

    /// A pipelined write `req` of zone `z` failed and the engine has heard of it:
    /// the zone's plug (if it still has one) must not trust a write pointer past the
    /// failed write's start. Its `wp_offset` goes back there and the zone needs a
    /// write pointer update, so that the device's write pointer decides where the
    /// next write goes (a partial write may have moved it, a lost completion's write
    /// may have landed whole).
    pub fn on_pipelined_failure(&mut self, req: &Request, plug: Option<PlugView>) -> Result<(), String> {
        self.checks += 1;
        let Some(p) = plug else { return Ok(()) };
        let start = self.geo.offset_in_zone(req.sector);
        if p.need_wp_update && p.wp_offset <= start {
            return Ok(());
        }
        Err(format!(
            "pipelined {req:?} failed, yet the plug of zone {} trusts wp_offset {} (needs update: {}): it must go back to the failed write's start ({start}) and ask the device",
            p.zone, p.wp_offset, p.need_wp_update
        ))
    }

    /// Under pipelining, pipelined write `rec` completed with `result`: if it
    /// succeeded, every write submitted before it in its zones (lying in one zone)
    /// must have completed, and no failure before it may have doomed it. It leaves
    /// the lists either way.
    fn pipe_completed(&mut self, rec: &HostBio, result: Result<Sector, Status>) -> Result<(), String> {
        let mut verdict = Ok(());
        for &z in &rec.zones {
            let list = &mut self.pipe[z as usize];
            let me = list.remove(&rec.seq).expect("a pipelined write in its zone's list");
            if result.is_err() || verdict.is_err() {
                continue;
            }
            if let Some((_, before)) = list.range(..rec.seq).find(|(_, w)| w.single_zone) {
                verdict = Err(format!(
                    "{:?} acknowledged while {:?}, submitted before it to zone {z}, is not: under pipelining a zone's writes are acknowledged in zone order",
                    me.bio, before.bio
                ));
            } else if let Some(failed) = me.doomed_by {
                verdict = Err(format!(
                    "{:?} acknowledged although {failed:?}, submitted before it to zone {z}, failed on the device while it was in flight: it must fail too",
                    me.bio
                ));
            }
        }
        verdict
    }

    /// A WRITE or WRITE_ZEROES: each piece must start at its zone's write pointer
    /// and fit. Where the model knows every zone's write pointer and the zones'
    /// writes reach the device in order, it predicts the outcome and moves the
    /// write pointers; otherwise it loses them.
    fn predict_write(&mut self, bio: &Bio, rec: &mut HostBio) {
        let g = self.geo.clone();
        let all_certain = rec.zones.iter().all(|&z| {
            let hz = &self.zones[z as usize];
            hz.certain && !hz.failed && !hz.need_report
        });
        if !(all_certain && self.rules.ordered) {
            for &z in &rec.zones.clone() {
                self.disturb(z);
            }
            return;
        }
        let end = bio.sector.0 + u64::from(bio.nr_sectors);
        let ok = rec.zones.iter().all(|&z| {
            let start = g.zone_start(ZoneNo(z)).0;
            let from = bio.sector.0.max(start);
            let to = end.min(start + g.zone_len(ZoneNo(z)));
            let hz = &self.zones[z as usize];
            from - start == hz.sub_wp && to - start <= g.zone_capacity(ZoneNo(z))
        });
        if ok {
            rec.pred_ok = Some(true);
            for &z in &rec.zones {
                let start = g.zone_start(ZoneNo(z)).0;
                let to = end.min(start + g.zone_len(ZoneNo(z)));
                self.zones[z as usize].sub_wp = to - start;
            }
        } else if self.one_piece(bio) {
            rec.pred_ok = Some(false);
        } else {
            // Split in pieces, each checked against the write pointer on
            // its own (as the kernel's plug does with a split remainder):
            // a later piece may land at the write pointer and succeed.
            for &z in &rec.zones.clone() {
                self.disturb(z);
            }
        }
    }

    /// A ZONE_APPEND: emulated on an ordered stack, it lands at the predicted write
    /// pointer if it fits; a native one lands where the device says.
    fn predict_append(&mut self, bio: &Bio, rec: &mut HostBio) {
        let g = &self.geo;
        let z = rec.zones[0];
        if g.emulates_zone_append() && self.rules.ordered && !self.rules.append_may_be_unsupported {
            let hz = self.zones[z as usize];
            if hz.certain && !hz.failed && !hz.need_report {
                let n = u64::from(bio.nr_sectors);
                let ok = hz.sub_wp + n <= g.zone_capacity(ZoneNo(z));
                rec.pred_ok = Some(ok);
                if ok {
                    rec.pred_at = Some(g.zone_start(ZoneNo(z)).0 + hz.sub_wp);
                    self.zones[z as usize].sub_wp += n;
                }
            } else {
                self.disturb(z);
            }
        } else {
            // A native append lands where the device says: the host loses
            // the write pointer until it is reported (need_wp_update).
            self.disturb(z);
        }
    }

    /// A RESET, FINISH or RESET_ALL sets its zones' write pointers (a failed zone's
    /// stays where it was).
    fn predict_wp_set(&mut self, bio: &Bio, rec: &HostBio) {
        for &z in &rec.zones {
            let cap = self.geo.zone_capacity(ZoneNo(z));
            let hz = &mut self.zones[z as usize];
            hz.epoch += 1;
            if !hz.failed {
                hz.sub_wp = if bio.op == Op::ZoneFinish { cap } else { 0 };
            }
        }
    }

    /// The valid zone writes of one zone of `rec` still waiting in their plug when
    /// its RESET, FINISH or RESET_ALL `bio` arrives must fail.
    fn abort_plugged_writes<'a>(&self, bio: &Bio, rec: &HostBio, inflight: impl Iterator<Item = &'a mut HostBio>) {
        let what = bio.op.name();
        let emulated_append = self.geo.emulates_zone_append();
        for other in inflight {
            let Some(ob) = other.bio else { continue };
            let write = matches!(ob.op, Op::Write | Op::WriteZeroes) || (ob.op == Op::ZoneAppend && emulated_append);
            if other.valid && write && !other.issued && other.zones.len() == 1 && rec.zones.contains(&other.zones[0]) {
                other.must_fail = Some(what);
            }
        }
    }

    /// A request of BIO `rec` failed on a device, timed out, or met a fault; `failed`
    /// says that a zone turned READONLY or OFFLINE; `refused` is the device's answer
    /// to `req` when no fault was injected into it.
    pub fn on_device_error(&mut self, rec: &mut HostBio, req: &Request, failed: bool, refused: Option<Status>) {
        rec.dev_err = true;
        if let Some(s) = refused {
            rec.dev_errno.get_or_insert(super::kernel_errno(s.code()));
        }
        if let Some(s) = refused.filter(|s| matches!(s.errno(), EINVAL | EOPNOTSUPP)) {
            rec.dev_refused.get_or_insert((*req, s));
        }
        for &z in &rec.zones.clone() {
            self.disturb(z);
            if failed {
                self.zones[z as usize].failed = true;
            }
        }
    }

    /// A request failed on the device in zone `z` (a checker that cannot tell which
    /// BIO it came from): what the zone's BIOs in flight answer is excused, and the
    /// write pointer is lost until the zone is quiet again.
    pub fn on_zone_error(&mut self, z: ZoneNo) {
        if self.zones.get(z.idx()).is_some() && self.seq(z.0) {
            self.disturb(z.0);
        }
    }

    /// The host restarted after a power loss: the BIOs in flight died with it and
    /// never complete; every zone's write pointer is read from the top device's
    /// zone report, `device_wp(z)` (`None` for a failed zone), as the engines built
    /// anew read it. A striped zone's members may have kept different parts of
    /// their caches: its write pointer is known again only after a RESET or FINISH.
    pub fn restart(&mut self, device_wp: &mut dyn FnMut(ZoneNo) -> Option<u64>) {
        // The pipelined writes in flight never complete: nothing is left to order.
        self.pipe.iter_mut().for_each(BTreeMap::clear);
        for z in 0..self.zones.len() {
            if !self.seq(z as u32) {
                continue;
            }
            let report_is_wp = self.rules.report_is_wp;
            let hz = &mut self.zones[z];
            // Its BIOs in flight never complete: none is counted out any more.
            hz.inflight = 0;
            hz.epoch += 1;
            hz.disturbs += 1;
            hz.need_report = false;
            hz.wp_set = false;
            match device_wp(ZoneNo(z as u32)) {
                Some(wp) => {
                    hz.sub_wp = wp;
                    hz.certain = report_is_wp;
                }
                None => hz.failed = true,
            }
        }
    }

    /// The user reported zone `z` to the engines (what the kernel's recovery waits
    /// for): heard only when nothing of the zone is in flight.
    pub fn on_user_report(&mut self, z: ZoneNo) {
        if let Some(hz) = self.zones.get_mut(z.idx()) {
            if hz.inflight == 0 {
                hz.need_report = false;
            }
        }
    }

    /// BIO `rec` completed with `result`. Returns the violation, if the host's answer
    /// is wrong. `device_wp(z)` reports zone `z` of the top device (its write
    /// pointer offset, or `None` for a failed zone), to re-synchronise a zone once
    /// nothing of it is in flight.
    pub fn on_complete(
        &mut self,
        rec: &HostBio,
        result: Result<Sector, Status>,
        device_wp: &mut dyn FnMut(ZoneNo) -> Option<u64>,
    ) -> Result<(), String> {
        self.checks += 1;
        let mut verdict = self.judge(rec, result);
        if self.check_errno {
            let bio = rec.bio.expect("a recorded BIO");
            verdict = verdict.and(super::check_errno(result).map_err(|e| format!("{bio:?} {e}")));
        }
        if rec.pipelined {
            let pipe = self.pipe_completed(rec, result);
            verdict = verdict.and(pipe);
        }
        if rec.pred_ok == Some(false) && result.is_ok() && !self.rules.report_is_wp {
            // Off the striped zone's write pointer, yet landed on the members' write
            // pointers: they no longer make one write pointer.
            for &z in &rec.zones {
                self.disturb(z);
            }
        }
        let sets_wp = matches!(rec.bio.map(|b| b.op), Some(Op::ZoneReset | Op::ZoneFinish | Op::ZoneResetAll));
        for (i, &z) in rec.zones.iter().enumerate() {
            let hz = &mut self.zones[z as usize];
            hz.inflight -= 1;
            if sets_wp && result.is_ok() && !rec.dev_err && rec.disturbs[i] == hz.disturbs {
                // A RESET or FINISH that succeeded sets the write pointer: the host
                // knows it again, and needs no report for it (the kernel's
                // disk_zone_wplug_set_wp_offset() clears NEED_WP_UPDATE).
                hz.wp_set = true;
                hz.need_report = false;
            }
            let known = self.rules.report_is_wp || hz.wp_set;
            if hz.inflight == 0 && !hz.certain && !hz.need_report && !hz.failed && known {
                match device_wp(ZoneNo(z)) {
                    Some(wp) => {
                        if std::env::var_os("ZBLK_ORACLE_DEBUG").is_some() {
                            let _ = writeln!(
                                std::io::stderr(),
                                "resync zone {z} at {wp} after {:?} wp_set {}",
                                rec.bio,
                                hz.wp_set
                            );
                        }
                        hz.sub_wp = wp;
                        hz.certain = true;
                    }
                    None => hz.failed = true,
                }
            }
        }
        verdict
    }

    fn judge(&self, rec: &HostBio, result: Result<Sector, Status>) -> Result<(), String> {
        let bio = rec.bio.expect("a recorded BIO");
        let refused_as_invalid = result == Err(Status::Invalid) || result == Err(Status::NotSupported);
        if !rec.valid {
            return if refused_as_invalid {
                Ok(())
            } else {
                Err(format!("invalid {bio:?} completed with {result:?}, not EINVAL/EOPNOTSUPP"))
            };
        }
        if let Some((req, s)) = rec.dev_refused {
            // A device error excuses what the host answers, but not a request the
            // host should never have sent: the BIO was valid.
            return Err(format!(
                "valid {bio:?}: the device refused its request {req:?} with {} ({s:?}): beyond the device's limits or malformed",
                s.errno_name()
            ));
        }
        if let (Some(want), false) = (rec.dev_errno, rec.pipelined) {
            // One request, refused by the device: the BIO completes with the device's
            // answer (the kernel's bio_endio() with the request's status), not
            // another error. Under pipelining a failure before it may fail it first.
            let got = super::errno_of(result);
            let one = bio.op.has_range() && bio.nr_sectors > 0 && rec.zones.len() <= 1 && self.one_piece(&bio);
            if one && got != want {
                return Err(format!(
                    "{bio:?}: the device answered its request with {} ({want}), its user sees {result:?} ({})",
                    name(want),
                    name(got)
                ));
            }
        }
        if result == Err(Status::Again) || rec.dev_err {
            return Ok(()); // the device's answer, checked by the device oracle
        }
        if result == Err(Status::NotSupported) && bio.op == Op::ZoneAppend && self.rules.append_may_be_unsupported {
            return Ok(());
        }
        if refused_as_invalid {
            return Err(format!("valid {bio:?} refused by the host with {result:?}"));
        }
        if let (Some(what), Ok(_)) = (rec.must_fail, result) {
            return Err(format!("{bio:?} waited in its plug when a {what} of its zone came, but was not aborted"));
        }
        if self.check_flush && bio.op == Op::Flush && result.is_ok() && !rec.flush_executed {
            return Err(format!("{bio:?} acknowledged without a flush reaching the device"));
        }
        let quiet =
            rec.gen_sum == self.gen_sum(&rec.zones) && rec.zones.iter().all(|&z| !self.zones[z as usize].failed);
        let zone_write = !rec.zones.is_empty() && bio.op.is_zone_write();
        match (zone_write, result) {
            (false, Err(s)) if quiet => Err(format!("valid {bio:?} refused by the host with {s:?}")),
            (true, Err(s)) if quiet && rec.pred_ok == Some(true) => Err(format!(
                "{bio:?} at its zone's write pointer (as the BIOs before it leave it: {:?}) refused by the host with {s:?}",
                rec.pred_wps
            )),
            // A striped device checks no write pointer of its own: a write off its
            // zone's write pointer whose pieces land at the members' write
            // pointers succeeds (docs/vopr.md, known deviations).
            (true, Ok(_)) if quiet && rec.pred_ok == Some(false) && self.rules.report_is_wp => Err(format!(
                "{bio:?} is not at its zone's write pointer ({:?}, as the BIOs before it leave it) or does not fit, yet it succeeded",
                rec.pred_wps
            )),
            (true, Ok(at)) if quiet && rec.pred_at.is_some_and(|p| p != at.0) => Err(format!(
                "emulated {bio:?} landed at {at}, the BIOs before it leave the write pointer at {}",
                rec.pred_at.unwrap_or(0)
            )),
            _ => Ok(()),
        }
    }
}
