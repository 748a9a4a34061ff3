//! The stack as a sans-IO state machine: the submission path of bio-based stacked
//! devices, down to the engines of the disks.
//!
//! [`Stack::submit`] is the kernel's `submit_bio_noacct()`: the BIO goes on the
//! per-context BIO list (`current->bio_list`) and the list is drained in a loop
//! (`__submit_bio_noacct()`): take the head, call its device's submit function. A
//! stacked device's submit function never recurses into its members: what it submits
//! (split remainders, BIOs remapped to members) goes on the list and is processed
//! after it returns. A disk's submit function hands the BIO to the disk's engine,
//! which splits at the disk's limits, plugs zone writes and issues requests.
//!
//! A stacked device splits in two steps, each resubmitting its remainder: the block
//! layer's generic split at `max_sectors` (`bio_split_to_limits()`), then the
//! driver's own split at its chunk or target boundary (raid0's chunk split, dm's
//! `max_io_len`). Where the remainder goes is the point: at the **tail** of the list
//! (the historical behaviour) a remainder of the first split is processed after the
//! remainder of the second, so a large BIO reaches the members out of order; at the
//! **head** ([`SplitOrder::Head`]) every remainder is processed before anything
//! queued earlier, and the members see ascending LBAs.
//!
//! Outputs are [`StackAction`]s, as the engine's: issue a request to a disk, complete
//! a BIO to its submitter, report a zone of a disk. Requests carry the submitter's
//! `user_data` and their offset in the submitter's BIO, so a driver finds the data in
//! the buffer of the BIO it submitted (see `docs/ARCHITECTURE.md`, "Who owns
//! buffers").

use super::device::{Dev, DevId, DevInfo, DevKind, Driver, StackBuilder};
use super::trace::{TraceAction, TraceEvent};
use crate::bio::{Bio, BioAccount, BioFlags, Completion, Op, ReqId, Request, Status};
use crate::engine::{Action, Engine, validate_bio};
use crate::units::{Sector, ZoneNo};
use crate::zone::ZoneInfo;
use slab::Slab;
use std::collections::VecDeque;

/// Where a split remainder is resubmitted on the per-context BIO list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitOrder {
    /// At the head: recursive splits reach the members in ascending order.
    Head,
    /// At the tail, behind what was submitted earlier: the historical behaviour,
    /// kept to show what it does (`split_order=tail`).
    Tail,
}

impl SplitOrder {
    /// The name used on the command line and in JSON: `head` or `tail`.
    pub fn name(self) -> &'static str {
        match self {
            SplitOrder::Head => "head",
            SplitOrder::Tail => "tail",
        }
    }

    /// Parses `head` or `tail`.
    pub fn parse(name: &str) -> Option<SplitOrder> {
        [SplitOrder::Head, SplitOrder::Tail].into_iter().find(|o| o.name() == name)
    }
}

/// Stack settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct StackConfig {
    /// Where split remainders go on the BIO list.
    pub split_order: SplitOrder,
    /// BIOs the stack holds at once; beyond, a BIO fails with [`Status::Again`].
    pub max_bios: u32,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig { split_order: SplitOrder::Head, max_bios: 1 << 20 }
    }
}

/// What the stack asks its driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackAction {
    /// Send `req` to disk `dev`, then call [`Stack::complete`] with `(dev, req.id)`.
    /// `req.user_data` is the submitter's BIO, `req.bio_offset` the request's offset
    /// in that BIO.
    Issue {
        /// The disk.
        dev: DevId,
        /// The request.
        req: Request,
    },
    /// A submitted BIO is done.
    Complete(Completion),
    /// Report `zone` of disk `dev` and hand the answer to [`Stack::zone_report`].
    ReportZone {
        /// The disk.
        dev: DevId,
        /// The zone.
        zone: ZoneNo,
    },
    /// Disk `dev`'s batching issuer waits for a zone's next write: call
    /// [`Stack::anticipation_expired`] with `token` after `ns` nanoseconds (see
    /// [`Action::Anticipate`]).
    Anticipate {
        /// The disk.
        dev: DevId,
        /// Which anticipation.
        token: u64,
        /// How long.
        ns: u64,
    },
}

/// Counters of what the stack has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StackStats {
    /// BIOs submitted.
    pub bios: u64,
    /// BIOs refused at submission.
    pub invalid: u64,
    /// Splits made by stacked devices.
    pub splits: u64,
    /// BIOs remapped from a stacked device to a member.
    pub remaps: u64,
    /// BIOs handed to disk engines.
    pub disk_bios: u64,
    /// Requests issued to disks.
    pub requests: u64,
    /// Disk BIOs that failed as unaligned writes (refused by the disk's zone write
    /// plug, or by the disk).
    pub unaligned: u64,
    /// Disk BIOs that failed, whatever the status.
    pub disk_errors: u64,
}

/// A submitted BIO, until every piece of it is done: BIOs on the list or in a disk
/// engine.
#[derive(Debug)]
struct TopBio {
    acct: BioAccount,
    submitter: u32,
}

/// A BIO on the per-context list: a submitted BIO or a piece of one, addressed to
/// `dev`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    dev: DevId,
    op: Op,
    sector: Sector,
    nr_sectors: u32,
    flags: BioFlags,
    top: usize,
    /// Offset of this piece in the submitted BIO.
    top_offset: u32,
    /// For a zone append: submitted-device sector minus this device's sector, so the
    /// sector the disk reports maps back.
    append_delta: i64,
}

/// A BIO in a disk engine.
#[derive(Debug)]
struct Piece {
    top: usize,
    top_offset: u32,
    append_delta: i64,
    append: bool,
}

/// A stack of devices, sans I/O. See the module documentation.
#[derive(Debug)]
pub struct Stack {
    devs: Vec<Dev>,
    top: DevId,
    cfg: StackConfig,
    tops: Slab<TopBio>,
    pieces: Slab<Piece>,
    /// The per-context BIO list; empty outside [`Stack::submit`].
    list: VecDeque<Entry>,
    actions: VecDeque<StackAction>,
    /// Events, when recording (see [`Stack::record_events`]).
    events: Option<Vec<TraceEvent>>,
    stats: StackStats,
}

impl StackBuilder {
    /// The stack, with `top` the device submitters use.
    pub fn build(self, top: DevId, cfg: StackConfig) -> Stack {
        assert!(top.idx() < self.devs.len(), "top device {top:?} does not exist");
        Stack {
            devs: self.devs,
            top,
            cfg,
            tops: Slab::new(),
            pieces: Slab::new(),
            list: VecDeque::new(),
            actions: VecDeque::new(),
            events: None,
            stats: StackStats::default(),
        }
    }
}

impl Stack {
    /// The device submitters use.
    pub fn top(&self) -> DevId {
        self.top
    }

    /// The configuration.
    pub fn config(&self) -> &StackConfig {
        &self.cfg
    }

    /// Every device, in creation order (members before the devices over them).
    pub fn devices(&self) -> impl Iterator<Item = (DevId, &DevInfo)> {
        self.devs.iter().enumerate().map(|(i, d)| (DevId(i as u32), &d.info))
    }

    /// Device `d`.
    pub fn info(&self, d: DevId) -> &DevInfo {
        &self.devs[d.idx()].info
    }

    /// The engine of disk `d` (`None` for a stacked device).
    pub fn engine(&self, d: DevId) -> Option<&Engine> {
        match &self.devs[d.idx()].driver {
            Driver::Disk { engine } => Some(engine),
            _ => None,
        }
    }

    /// The engine of disk `d`, to change its settings as a user would (zone reports,
    /// `zoned_qd1_writes`, the policy). What the engine decides from such a change
    /// waits in it until [`Stack::pump_disk`] (or the next call of the stack on that
    /// disk) collects it. Panics if `d` is not a disk.
    pub fn engine_mut(&mut self, d: DevId) -> &mut Engine {
        let dev = &mut self.devs[d.idx()];
        match &mut dev.driver {
            Driver::Disk { engine } => engine,
            _ => panic!("{} is not a disk", dev.info.name),
        }
    }

    /// Counters.
    pub fn stats(&self) -> StackStats {
        self.stats
    }

    /// BIOs submitted and not completed.
    pub fn bios_in_flight(&self) -> usize {
        self.tops.len()
    }

    /// Starts (or stops) recording [`TraceEvent`]s: BIOs queued to each device,
    /// splits, remaps, requests issued. Times are left 0 for the driver to fill.
    pub fn record_events(&mut self, on: bool) {
        self.events = on.then(Vec::new);
    }

    /// Takes the events recorded since the last call, in the order they happened.
    pub fn take_events(&mut self, into: &mut Vec<TraceEvent>) {
        if let Some(ev) = &mut self.events {
            into.append(ev);
        }
    }

    /// The next thing to do, if any. Drain it after every input.
    pub fn poll_action(&mut self) -> Option<StackAction> {
        self.actions.pop_front()
    }

    /// Where `sector` of device `dev` lives on a disk.
    pub fn map_to_disk(&self, dev: DevId, sector: Sector) -> (DevId, Sector) {
        let (mut d, mut s) = (dev, sector);
        while !matches!(self.devs[d.idx()].driver, Driver::Disk { .. }) {
            let (m, ms, _) = self.devs[d.idx()].driver.map(s);
            (d, s) = (m, ms);
        }
        (d, s)
    }

    fn event(&mut self, dev: DevId, action: TraceAction, e: &Entry) {
        let submitter = self.tops[e.top].submitter;
        if let Some(ev) = &mut self.events {
            ev.push(TraceEvent {
                time_ns: 0,
                dev,
                action,
                op: e.op,
                flags: e.flags,
                sector: e.sector,
                nr_sectors: e.nr_sectors,
                submitter,
                bio_offset: e.top_offset,
            });
        }
    }

    // ----------------------------------------------------------------- submission

    /// Submits `bio` to device `dev` on behalf of `submitter` (a number naming the
    /// submitting context, for traces). The whole BIO list is processed before this
    /// returns; the completion comes as a [`StackAction::Complete`], never from
    /// inside `submit`. A BIO the device cannot take (out of range, misaligned, an
    /// operation it does not support, a device not of this stack) completes with
    /// the status saying so.
    pub fn submit(&mut self, dev: DevId, bio: Bio, submitter: u32) {
        assert!(self.list.is_empty(), "submit re-entered");
        self.stats.bios += 1;
        if self.tops.len() >= self.cfg.max_bios as usize {
            self.actions
                .push_back(StackAction::Complete(Completion { user_data: bio.user_data, result: Err(Status::Again) }));
            return;
        }
        let checked = if dev.idx() < self.devs.len() { self.validate(dev, &bio) } else { Err(Status::Invalid) };
        if let Err(status) = checked {
            self.stats.invalid += 1;
            self.actions.push_back(StackAction::Complete(Completion { user_data: bio.user_data, result: Err(status) }));
            return;
        }
        let top = self.tops.insert(TopBio { acct: BioAccount::new(bio.user_data, bio.sector), submitter });
        self.list.push_back(Entry {
            dev,
            op: bio.op,
            sector: bio.sector,
            nr_sectors: bio.nr_sectors,
            flags: bio.flags,
            top,
            top_offset: 0,
            append_delta: 0,
        });
        self.run_list();
    }

    /// `submit_bio_noacct()`'s checks against the device's geometry. A striped
    /// device has no zone append: an append cannot be spread over members.
    fn validate(&self, dev: DevId, bio: &Bio) -> Result<(), Status> {
        let info = &self.devs[dev.idx()].info;
        if bio.op == Op::ZoneAppend && info.kind == DevKind::Striped {
            return Err(Status::NotSupported);
        }
        validate_bio(&info.geometry, bio)
    }

    /// `__submit_bio_noacct()`: the head of the list goes to its device's submit
    /// function until the list is empty.
    fn run_list(&mut self) {
        while let Some(e) = self.list.pop_front() {
            self.event(e.dev, TraceAction::Queue, &e);
            match self.devs[e.dev.idx()].info.kind {
                DevKind::Disk => self.submit_disk(e),
                DevKind::Linear | DevKind::Striped => self.submit_stacked(e),
            }
        }
    }

    /// A stacked device's submit function.
    fn submit_stacked(&mut self, e: Entry) {
        match e.op {
            Op::Read | Op::Write | Op::WriteZeroes | Op::Discard => self.submit_ranged(e),
            // A zone append cannot be spread over members: a striped device fails it
            // wherever it comes from (a linear device over it remaps appends to it).
            Op::ZoneAppend if self.devs[e.dev.idx()].info.kind == DevKind::Striped => {
                self.end_entry(e.top, Err(Status::NotSupported))
            }
            Op::ZoneAppend => self.remap_whole(e),
            Op::Flush => {
                let members = self.devs[e.dev.idx()].info.members.clone();
                self.fan_out(e, members.iter().map(|&m| (m, Sector::ZERO)).collect());
            }
            Op::ZoneResetAll => {
                // As the block layer emulates it: a reset of every sequential zone.
                let geo = &self.devs[e.dev.idx()].info.geometry;
                let zones = (geo.nr_conv()..geo.nr_zones()).map(|z| geo.zone_start(ZoneNo(z))).collect::<Vec<_>>();
                let resets = zones.into_iter().map(|s| (e.dev, s)).collect();
                self.fan_out(Entry { op: Op::ZoneReset, ..e }, resets);
            }
            Op::ZoneReset | Op::ZoneOpen | Op::ZoneClose | Op::ZoneFinish => self.submit_zone_op(e),
        }
    }

    /// READ, WRITE, WRITE_ZEROES, DISCARD: split at `max_sectors`, then at the
    /// driver's boundary, then remap what is left to the member.
    fn submit_ranged(&mut self, mut e: Entry) {
        let limits = self.devs[e.dev.idx()].info.limits;
        let n = limits.generic_split_for(e.op).max_piece_at(e.sector);
        if e.nr_sectors > n {
            e = self.split(e, n);
        }
        let (_, _, contiguous) = self.devs[e.dev.idx()].driver.map(e.sector);
        let n = limits.to_boundary(e.sector).min(contiguous);
        if u64::from(e.nr_sectors) > n {
            e = self.split(e, n as u32);
        }
        self.remap_whole(e);
    }

    /// `bio_split()` + `submit_bio_noacct(remainder)`: cuts the first `n` sectors
    /// off `e`, resubmits the rest at the head or tail of the list, returns the front.
    fn split(&mut self, e: Entry, n: u32) -> Entry {
        assert!(n > 0 && n < e.nr_sectors, "split of {} sectors at {n}", e.nr_sectors);
        self.stats.splits += 1;
        self.event(e.dev, TraceAction::Split { at: e.sector + u64::from(n) }, &e);
        let rest =
            Entry { sector: e.sector + u64::from(n), nr_sectors: e.nr_sectors - n, top_offset: e.top_offset + n, ..e };
        self.tops[e.top].acct.add_piece();
        match self.cfg.split_order {
            SplitOrder::Head if crate::mutation::on(crate::mutation::Mutation::SplitRemainderTail) => {
                self.list.push_back(rest)
            }
            SplitOrder::Head => self.list.push_front(rest),
            SplitOrder::Tail => self.list.push_back(rest),
        }
        Entry { nr_sectors: n, ..e }
    }

    /// Remaps `e`, which lies within one chunk or target, to its member and submits
    /// it there (at the tail of the list, as any BIO a submit function submits).
    fn remap_whole(&mut self, e: Entry) {
        let (member, ms, contiguous) = self.devs[e.dev.idx()].driver.map(e.sector);
        assert!(u64::from(e.nr_sectors) <= contiguous, "remap of {e:?} crosses a boundary");
        let delta = e.sector.0 as i64 - ms.0 as i64;
        let m = Entry { dev: member, sector: ms, append_delta: e.append_delta + delta, ..e };
        self.remapped(&e, m);
    }

    /// `m`, made from `e` by its device's driver, goes to the list (blktrace's
    /// remap event, on the member).
    fn remapped(&mut self, e: &Entry, m: Entry) {
        self.stats.remaps += 1;
        self.event(m.dev, TraceAction::Remap { from: e.dev, from_sector: e.sector }, &m);
        self.list.push_back(m);
    }

    /// Zone RESET, OPEN, CLOSE, FINISH: to the zone on the member of a linear device,
    /// to the zone on every member of a striped one.
    fn submit_zone_op(&mut self, e: Entry) {
        let dev = &self.devs[e.dev.idx()];
        match &dev.driver {
            Driver::Linear { .. } => self.remap_whole(e),
            Driver::Striped { members, .. } => {
                let geo = &dev.info.geometry;
                let member_zone = geo.zone_sectors() / members.len() as u64;
                let z = u64::from(geo.zone_no(e.sector).0);
                let targets = members.iter().map(|&m| (m, Sector(z * member_zone))).collect();
                self.fan_out(e, targets);
            }
            Driver::Disk { .. } => unreachable!("zone op on a disk in the stacked path"),
        }
    }

    /// Submits one copy of `e` per `(device, sector)`; a copy to `e`'s own device is
    /// a BIO it submits to itself (the emulated RESET_ALL), others are remaps.
    fn fan_out(&mut self, e: Entry, targets: Vec<(DevId, Sector)>) {
        if targets.is_empty() {
            return self.end_entry(e.top, Ok(()));
        }
        for _ in 1..targets.len() {
            self.tops[e.top].acct.add_piece();
        }
        for (dev, sector) in targets {
            let c = Entry { dev, sector, ..e };
            if dev == e.dev {
                self.list.push_back(c);
            } else {
                self.remapped(&e, c);
            }
        }
    }

    /// A disk's submit function: into its engine.
    fn submit_disk(&mut self, e: Entry) {
        self.stats.disk_bios += 1;
        let piece = self.pieces.insert(Piece {
            top: e.top,
            top_offset: e.top_offset,
            append_delta: e.append_delta,
            append: e.op == Op::ZoneAppend,
        });
        let bio = Bio { op: e.op, sector: e.sector, nr_sectors: e.nr_sectors, flags: e.flags, user_data: piece as u64 };
        self.engine_mut(e.dev).submit(bio);
        self.pump_disk(e.dev);
    }

    /// Collects what disk `dev`'s engine decided into the stack's actions (every
    /// call of the stack does it; after a change through [`Stack::engine_mut`] the
    /// driver does).
    pub fn pump_disk(&mut self, dev: DevId) {
        while let Some(a) = self.engine_mut(dev).poll_action() {
            match a {
                Action::Issue(req) => {
                    let p = &self.pieces[req.user_data as usize];
                    let top = &self.tops[p.top];
                    let req =
                        Request { user_data: top.acct.user_data, bio_offset: p.top_offset + req.bio_offset, ..req };
                    self.stats.requests += 1;
                    if let Some(ev) = &mut self.events {
                        ev.push(TraceEvent::of_request(dev, TraceAction::Issue, &req, top.submitter));
                    }
                    self.actions.push_back(StackAction::Issue { dev, req });
                }
                Action::Complete(c) => self.piece_done(c.user_data as usize, c.result),
                Action::ReportZone(zone) => self.actions.push_back(StackAction::ReportZone { dev, zone }),
                Action::Anticipate { token, ns } => self.actions.push_back(StackAction::Anticipate { dev, token, ns }),
            }
        }
    }

    fn piece_done(&mut self, piece: usize, result: Result<Sector, Status>) {
        let p = self.pieces.remove(piece);
        match result {
            Err(s) => {
                self.stats.disk_errors += 1;
                if s == Status::Unaligned {
                    self.stats.unaligned += 1;
                }
            }
            Ok(at) if p.append => self.tops[p.top].acct.set_result(Sector((at.0 as i64 + p.append_delta) as u64)),
            Ok(_) => {}
        }
        self.end_entry(p.top, result.map(|_| ()));
    }

    fn end_entry(&mut self, top: usize, result: Result<(), Status>) {
        if self.tops[top].acct.end_piece(result) {
            let t = self.tops.remove(top);
            self.actions.push_back(StackAction::Complete(t.acct.completion()));
        }
    }

    // ----------------------------------------------------------------- completion

    /// Disk `dev` finished request `id` (see [`Engine::complete`]).
    pub fn complete(&mut self, dev: DevId, id: ReqId, result: Result<Sector, Status>) {
        self.engine_mut(dev).complete(id, result);
        self.pump_disk(dev);
    }

    /// The host comes back from a power loss: every BIO in flight is forgotten
    /// (none of them completes: what waited for them died with the host), the
    /// actions not carried out yet with them, and each disk's engine is built anew
    /// ([`Engine::restarted`]) from `zones(disk)`, the disk's full zone report read
    /// after the power came back.
    pub fn restart(&mut self, zones: &mut dyn FnMut(DevId) -> Vec<ZoneInfo>) {
        self.tops.clear();
        self.pieces.clear();
        self.list.clear();
        self.actions.clear();
        for i in 0..self.devs.len() {
            let dev = DevId(i as u32);
            if let Driver::Disk { engine } = &mut self.devs[i].driver {
                **engine = engine.restarted(&zones(dev));
            }
        }
    }

    /// What disk `dev` says one of its zones looks like (see [`Engine::zone_report`]).
    pub fn zone_report(&mut self, dev: DevId, info: &ZoneInfo) {
        self.engine_mut(dev).zone_report(info);
        self.pump_disk(dev);
    }

    /// Disk `dev` could not report zone `z` (see [`Engine::zone_report_failed`]).
    pub fn zone_report_failed(&mut self, dev: DevId, z: ZoneNo, status: Status) {
        self.engine_mut(dev).zone_report_failed(z, status);
        self.pump_disk(dev);
    }

    /// The time asked for by [`StackAction::Anticipate`] has passed.
    pub fn anticipation_expired(&mut self, dev: DevId, token: u64) {
        self.engine_mut(dev).anticipation_expired(token);
        self.pump_disk(dev);
    }

    /// Zone `z` of device `dev`, assembled from its disks' zones, which `report`
    /// gives (`report(disk, sector)` describes the disk's zone holding `sector`). A
    /// linear device shows the member's zone moved to its own address; a striped
    /// zone is written where its members' zones are, its write pointer the sum of
    /// theirs, and its condition the most telling of theirs.
    pub fn report_zone(
        &self,
        dev: DevId,
        z: ZoneNo,
        report: &mut dyn FnMut(DevId, Sector) -> Result<ZoneInfo, Status>,
    ) -> Result<ZoneInfo, Status> {
        let d = &self.devs[dev.idx()];
        let geo = &d.info.geometry;
        if !geo.is_zoned() || z.0 >= geo.nr_zones() {
            return Err(Status::Invalid);
        }
        let start = geo.zone_start(z);
        match &d.driver {
            Driver::Disk { .. } => report(dev, start),
            Driver::Linear { .. } => {
                let (m, ms, _) = d.driver.map(start);
                let mg = &self.devs[m.idx()].info.geometry;
                let mi = self.report_zone(m, mg.zone_no(ms), report)?;
                let delta = start.0 as i64 - mi.start.0 as i64;
                Ok(ZoneInfo { start, wp: Sector((mi.wp.0 as i64 + delta) as u64), ..mi })
            }
            Driver::Striped { members, .. } => {
                let mut infos = Vec::with_capacity(members.len());
                for &m in members {
                    infos.push(self.report_zone(m, z, report)?);
                }
                Ok(combine_striped_zone(start, geo.zone_len(z), geo.zone_capacity(z), &infos))
            }
        }
    }

    // --------------------------------------------------------------- invariants

    /// Checks the stack's invariants and those of every disk engine; panics on a
    /// violation.
    pub fn check_invariants(&self) {
        assert!(self.list.is_empty(), "BIO list not empty outside submit");
        let mut per_top = vec![0u32; self.tops.capacity()];
        for (_, p) in self.pieces.iter() {
            assert!(self.tops.contains(p.top), "piece of a completed BIO");
            per_top[p.top] += 1;
        }
        for (t, top) in self.tops.iter() {
            assert_eq!(top.acct.remaining(), per_top[t], "BIO {t}: pending count against pieces in the disks");
        }
        let (mut in_disks, mut frozen) = (0, false);
        for d in &self.devs {
            if let Driver::Disk { engine } = &d.driver {
                engine.check_invariants();
                in_disks += engine.bios_in_engine();
                frozen |= engine.frozen();
            }
        }
        if frozen {
            // A frozen engine (an attribute change draining it) holds new BIOs
            // aside, outside the count of its BIOs: they are pieces all the same.
            assert!(in_disks <= self.pieces.len(), "more BIOs in the disk engines than pieces");
        } else {
            assert_eq!(in_disks, self.pieces.len(), "pieces against BIOs in the disk engines");
        }
    }
}

/// A striped zone from its members' zones: conventional if theirs are; OFFLINE or
/// READONLY if any is; FULL or EMPTY if all are; otherwise open if any is open
/// (explicitly if any is), else CLOSED. The write pointer is the sum of the
/// members' offsets (all writes go through the stripe in order, so they are a prefix
/// of the stripe's rows).
fn combine_striped_zone(start: Sector, len: u64, capacity: u64, infos: &[ZoneInfo]) -> ZoneInfo {
    use crate::zone::{ZoneCond as C, ZoneType};
    let conds: Vec<C> = infos.iter().map(|i| i.cond).collect();
    let any = |c: C| conds.contains(&c);
    let all = |c: C| conds.iter().all(|&x| x == c);
    let ztype = infos[0].ztype;
    let cond = if ztype == ZoneType::Conventional {
        C::NotWp
    } else if any(C::Offline) {
        C::Offline
    } else if any(C::ReadOnly) {
        C::ReadOnly
    } else if all(C::Full) {
        C::Full
    } else if all(C::Empty) {
        C::Empty
    } else if any(C::ExpOpen) {
        C::ExpOpen
    } else if any(C::ImpOpen) {
        C::ImpOpen
    } else {
        C::Closed
    };
    let wp = match cond {
        C::NotWp | C::Full => start + len,
        _ => start + infos.iter().map(|i| i.wp_offset().unwrap_or(0)).sum::<u64>(),
    };
    ZoneInfo { start, len, capacity, wp, ztype, cond }
}
