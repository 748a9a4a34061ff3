//! The checker: what must hold at every step of a simulation, checked from outside
//! the engine, on both sides of the host/device boundary.
//!
//! - Device side: a plugged zone write never fails for being unaligned or past the
//!   zone (the host must have refused it first); never two writes in flight to one
//!   sequential zone under per-zone plugging, never two zone writes of the device
//!   under the single issuer.
//! - Data: every read returns what the device was last told to store there (zeroes
//!   past a write pointer); a completed write is found, sector by sector, where its
//!   completion says it is; each zone append reports a distinct and correct sector.
//! - Plugs: the engine's own invariants hold; a plug of an idle zone has the device's
//!   write pointer; plugs are bounded by the active zones plus the zones with writes
//!   in flight or queued.
//!
//! A violation panics with the seed, so that the run can be replayed.

use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;
use zblk_core::bio::{BioFlags, Op, ReqId, Request, Status};
use zblk_core::engine::{Engine, PolicyTraits};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_dev::MemDevice;
use zblk_workload::pattern::{self, Decoded, Origin};

/// What the device holds in a sector, as far as the checker knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Held {
    /// Sector `k` of the write stamped `stamp`.
    Data(Origin),
    /// Written by a write that failed half-way: content not known.
    Unknown,
}

/// Step-by-step checker of a simulation. See the module documentation.
#[derive(Debug)]
pub struct Checker {
    seed: u64,
    geo: Geometry,
    /// What the engine's policy allows, as of the last request it issued.
    traits: PolicyTraits,
    /// Device content model: absent sectors read as zeroes.
    shadow: BTreeMap<u64, Held>,
    /// Zone writes issued and not executed, per zone.
    writes_out: FxHashMap<ZoneNo, u32>,
    zone_writes_out: u32,
    /// Zone operations (reset/finish/native append) issued and not executed, per zone;
    /// while one is out, host and device write pointers may legitimately differ.
    wp_movers_out: FxHashMap<ZoneNo, u32>,
    reset_all_out: u32,
    /// Bumped when a zone's content is thrown away (reset) or rewritten, so that a
    /// BIO that raced with it is not checked against stale expectations.
    reset_epoch: Vec<u64>,
    /// Zones a fault made READONLY or OFFLINE: RESET_ALL leaves them alone.
    failed: Vec<bool>,
    /// Appends reported per zone since its last reset: (start, end).
    appends: FxHashMap<ZoneNo, Vec<(u64, u64)>>,
    /// Checks made, for the report.
    pub checks: u64,
    /// A failed check is a violation (off only to show what the other checks catch
    /// without the checker; it still follows the run).
    pub enabled: bool,
    /// Executions so far: each request the device executed has a number.
    exec_seq: u64,
    /// Sector → the number of the last execution that changed it.
    touched: FxHashMap<u64, u64>,
    /// The device executes a request when it arrives and completes it later: a
    /// request is out (for the writes in flight per zone, and for the write
    /// pointer movers) until [`Checker::on_done`], not until its execution.
    pub done_at_completion: bool,
    /// Zones where a plugged write failed on the device while writes of the zone
    /// were out under pipelining: the writes behind it, already on the device, fail
    /// there as unaligned, as null_blk answers them, until none is out.
    pipe_broken: FxHashSet<ZoneNo>,
    /// Pipelined writes issued while their plug waited for a write pointer update:
    /// released before a write ahead of them failed, they waited for a tag, and
    /// fail on the device as unaligned.
    issued_doomed: FxHashSet<ReqId>,
    /// Zone → the number of the last execution that reset it.
    reset_seq: Vec<u64>,
    /// Sectors whose write is durable (acknowledged before a FLUSH that completed,
    /// or FUA): sector → (what it holds, the executions up to its acknowledgement).
    durable: BTreeMap<u64, (Origin, u64)>,
}

/// A sector of a write acknowledged to the host, to be made durable: (sector,
/// what it holds, the executions up to the acknowledgement).
pub type Acked = (u64, Origin, u64);

impl Checker {
    /// A checker for a fresh device (no data), whose engine's policy allows
    /// `traits` ([`zblk_core::engine::Engine::policy_traits`]).
    pub fn new(geo: &Geometry, traits: PolicyTraits, seed: u64) -> Checker {
        Checker {
            seed,
            geo: geo.clone(),
            traits,
            shadow: BTreeMap::new(),
            writes_out: FxHashMap::default(),
            zone_writes_out: 0,
            wp_movers_out: FxHashMap::default(),
            reset_all_out: 0,
            reset_epoch: vec![0; geo.nr_zones() as usize],
            failed: vec![false; geo.nr_zones() as usize],
            appends: FxHashMap::default(),
            checks: 0,
            enabled: true,
            exec_seq: 0,
            touched: FxHashMap::default(),
            reset_seq: vec![0; geo.nr_zones() as usize],
            durable: BTreeMap::new(),
            done_at_completion: false,
            pipe_broken: FxHashSet::default(),
            issued_doomed: FxHashSet::default(),
        }
    }

    fn fail(&self, what: String) {
        if self.enabled {
            panic!("checker violation (seed {}): {what}", self.seed);
        }
    }

    fn seq_zone(&self, sector: Sector) -> Option<ZoneNo> {
        if !self.geo.is_zoned() {
            return None;
        }
        let z = self.geo.zone_no(sector);
        (!self.geo.zone_is_conv(z)).then_some(z)
    }

    /// A plugged zone write: WRITE or WRITE_ZEROES to a sequential zone (a native
    /// append is not plugged).
    fn plugged_write_zone(&self, req: &Request) -> Option<ZoneNo> {
        matches!(req.op, Op::Write | Op::WriteZeroes).then(|| self.seq_zone(req.sector)).flatten()
    }

    fn wp_mover_zone(&self, op: Op, sector: Sector) -> Option<ZoneNo> {
        match op {
            Op::ZoneReset | Op::ZoneFinish | Op::ZoneAppend => self.seq_zone(sector),
            _ => None,
        }
    }

    /// A valid BIO was submitted. Resets, finishes and native appends move the host's
    /// write pointer at submission, before the device sees them: from here to their
    /// execution, host and device write pointers may differ.
    pub fn on_submit(&mut self, bio: &zblk_core::bio::Bio) {
        let native_append = bio.op == Op::ZoneAppend && !self.geo.emulates_zone_append();
        if bio.op != Op::ZoneAppend || native_append {
            if let Some(z) = self.wp_mover_zone(bio.op, bio.sector) {
                *self.wp_movers_out.entry(z).or_insert(0) += 1;
            }
        }
        if bio.op == Op::ZoneResetAll {
            self.reset_all_out += 1;
        }
    }

    /// The engine issued `req` to the device, under a policy that allows `traits`
    /// (which change when `zoned_qd1_writes` is written), for a BIO submitted with
    /// `bio_flags` while the engine's `write_zeroes_unmap_max_bytes` was 0
    /// (`unmap_disabled`) or not.
    pub fn on_issue(&mut self, req: &Request, traits: PolicyTraits, bio_flags: BioFlags, unmap_disabled: bool) {
        self.checks += 1;
        self.traits = traits;
        self.check_request(req, bio_flags, unmap_disabled);
        if let Some(z) = self.plugged_write_zone(req) {
            let n = self.writes_out.entry(z).or_insert(0);
            *n += 1;
            self.zone_writes_out += 1;
            let (n, total) = (*n, self.zone_writes_out);
            if let Some(most) = traits.zone_writes_in_flight.filter(|&most| n as usize > most) {
                self.fail(format!("{n} writes in flight to zone {z} under {} (at most {most})", traits.policy.name()));
            }
            if let Some(most) = traits.device_zone_writes_in_flight.filter(|&most| total as usize > most) {
                let name = traits.policy.name();
                self.fail(format!("{total} zone writes in flight on the device under {name} (at most {most})"));
            }
        }
    }

    /// Pipelined write `req`, about to be issued, was released before a write ahead
    /// of it in its zone failed: its plug waits for a write pointer update (and
    /// releases nothing new meanwhile), and the device refuses it as unaligned.
    pub fn issued_after_failure(&mut self, req: &Request) {
        self.issued_doomed.insert(req.id);
    }

    /// A request against the device's advertised limits and flags: no READ or WRITE
    /// above `max_sectors`, no native append above the zone append limit, no
    /// WRITE_ZEROES above `write_zeroes_max_bytes`, no write across a zone boundary
    /// (`chunk_sectors`); a WRITE_ZEROES carries NOUNMAP exactly when its BIO did or
    /// unmap is disabled (`write_zeroes_unmap_max_bytes` 0: the device may not
    /// deallocate).
    fn check_request(&mut self, req: &Request, bio_flags: BioFlags, unmap_disabled: bool) {
        let g = &self.geo;
        let limit = match req.op {
            Op::Read | Op::Write => Some(("max_sectors", g.max_sectors())),
            Op::ZoneAppend => Some(("zone_append_max_sectors", g.max_append_sectors())),
            Op::WriteZeroes => Some(("write_zeroes_max_sectors", g.max_write_zeroes_sectors())),
            _ => None,
        };
        if let Some((name, max)) = limit.filter(|&(_, max)| req.nr_sectors > max) {
            self.fail(format!("request {req:?} is larger than the device's {name} ({max})"));
        }
        let writes = matches!(req.op, Op::Write | Op::WriteZeroes | Op::ZoneAppend);
        if writes && g.is_zoned() && req.nr_sectors > 0 && req.end().0 <= g.nr_sectors() {
            let (first, last) = (g.zone_no(req.sector), g.zone_no(req.end() - 1));
            if first != last {
                self.fail(format!("request {req:?} crosses from zone {first} into zone {last}"));
            }
        }
        if req.op == Op::WriteZeroes {
            let want = bio_flags.contains(BioFlags::NOUNMAP) || unmap_disabled;
            if req.flags.contains(BioFlags::NOUNMAP) != want {
                self.fail(format!(
                    "request {req:?} {} NOUNMAP, its BIO had {bio_flags:?} and unmap is {}",
                    if want { "lacks" } else { "carries" },
                    if unmap_disabled { "disabled" } else { "allowed" }
                ));
            }
        }
    }

    /// The device executed `req` with `result`; for a write that failed half-way,
    /// `partial` sectors were written first. `stamp` is the BIO's data stamp.
    pub fn on_execute(&mut self, req: &Request, result: Result<Sector, Status>, partial: u32, stamp: u64) {
        self.checks += 1;
        self.exec_seq += 1;
        let seq = self.exec_seq;
        match (req.op, result) {
            (Op::Write | Op::ZoneAppend | Op::WriteZeroes | Op::Discard, Ok(at)) => {
                for s in at.0..at.0 + u64::from(req.nr_sectors) {
                    self.touched.insert(s, seq);
                }
            }
            (Op::Write, Err(_)) => {
                for s in req.sector.0..req.sector.0 + u64::from(partial) {
                    self.touched.insert(s, seq);
                }
            }
            (Op::ZoneReset, Ok(_)) => self.reset_seq[self.geo.zone_no(req.sector).idx()] = seq,
            (Op::ZoneResetAll, Ok(_)) => {
                for z in self.geo.nr_conv()..self.geo.nr_zones() {
                    self.reset_seq[z as usize] = seq;
                }
            }
            _ => {}
        }
        if let Some(z) = self.plugged_write_zone(req) {
            let refused = result == Err(Status::Unaligned) || result == Err(Status::ZoneFull);
            // Under pipelining a write behind a failed one may be on its way to the
            // device already: it arrives off the write pointer and fails there,
            // unaligned, as null_blk answers it; the engine fails it anyway.
            let doomed = self.issued_doomed.remove(&req.id);
            let pipelined = self.traits.acks_in_zone_order;
            let behind_failed = pipelined && (doomed || self.pipe_broken.contains(&z));
            if self.traits.plugs && refused && !behind_failed {
                self.fail(format!("device refused plugged write {req:?}: {:?}", result.unwrap_err()));
            }
            if pipelined && result.is_err() {
                self.pipe_broken.insert(z);
            }
        }
        if !self.done_at_completion {
            self.on_done(req);
        }
        match (req.op, result) {
            (Op::Write | Op::ZoneAppend, Ok(at)) if stamp == zblk_workload::pattern::ZEROES => {
                // A buffer of zeroes: the sectors read as zeroes, as after WRITE_ZEROES.
                self.forget(at.0, at.0 + u64::from(req.nr_sectors));
                self.bump_if_conv(at, req.nr_sectors);
            }
            (Op::Write | Op::ZoneAppend, Ok(at)) => {
                for j in 0..u64::from(req.nr_sectors) {
                    self.shadow.insert(at.0 + j, Held::Data((stamp, req.bio_offset + j as u32)));
                }
                self.bump_if_conv(at, req.nr_sectors);
            }
            (Op::Write, Err(_)) if partial > 0 => {
                for j in 0..u64::from(partial) {
                    self.shadow.insert(req.sector.0 + j, Held::Unknown);
                }
            }
            (Op::WriteZeroes | Op::Discard, Ok(at)) => {
                self.forget(at.0, at.0 + u64::from(req.nr_sectors));
                self.bump_if_conv(at, req.nr_sectors);
            }
            (Op::ZoneReset, Ok(_)) => self.zone_reset(self.geo.zone_no(req.sector)),
            (Op::ZoneResetAll, Ok(_)) => {
                for z in self.geo.nr_conv()..self.geo.nr_zones() {
                    if !self.failed[z as usize] {
                        self.zone_reset(ZoneNo(z));
                    }
                }
            }
            _ => {}
        }
    }

    /// `req` is no longer out: the device executed it or, on a device that executes
    /// a request when it arrives ([`Checker::done_at_completion`]), completed it.
    pub fn on_done(&mut self, req: &Request) {
        if let Some(z) = self.plugged_write_zone(req) {
            let n = self.writes_out.get_mut(&z).expect("executed a write never issued");
            *n -= 1;
            if *n == 0 {
                self.writes_out.remove(&z);
                self.pipe_broken.remove(&z);
            }
            self.zone_writes_out -= 1;
        }
        self.wp_mover_ended(req, "executed a zone op never submitted");
    }

    /// `req`, if it moves write pointers (a zone operation, a RESET_ALL), is no longer
    /// counted out; `never` says what finding it not counted would mean.
    fn wp_mover_ended(&mut self, req: &Request, never: &str) {
        if let Some(z) = self.wp_mover_zone(req.op, req.sector) {
            let n = self.wp_movers_out.get_mut(&z).unwrap_or_else(|| panic!("{never}"));
            *n -= 1;
            if *n == 0 {
                self.wp_movers_out.remove(&z);
            }
        }
        if req.op == Op::ZoneResetAll {
            self.reset_all_out -= 1;
        }
    }

    /// The device executed `req` (or aborted it) but its completion was lost: until
    /// the driver's timeout ends it, the engine still counts it out, so the host's
    /// write pointer may differ from the device's as before its execution.
    pub fn completion_lost(&mut self, req: &Request) {
        if self.done_at_completion {
            return; // out until the engine hears of it (`on_done`)
        }
        if let Some(z) = self.wp_mover_zone(req.op, req.sector) {
            *self.wp_movers_out.entry(z).or_insert(0) += 1;
        }
        if req.op == Op::ZoneResetAll {
            self.reset_all_out += 1;
        }
    }

    /// The timeout of a request whose completion was lost reached the engine.
    pub fn completion_timed_out(&mut self, req: &Request) {
        if self.done_at_completion {
            return;
        }
        self.wp_mover_ended(req, "timed out a zone op never lost");
    }

    fn bump_if_conv(&mut self, at: Sector, nr_sectors: u32) {
        if self.geo.is_zoned() && self.seq_zone(at).is_none() {
            let z = self.geo.zone_no(at);
            self.reset_epoch[z.idx()] += 1;
            let last = self.geo.zone_no(at + u64::from(nr_sectors) - 1);
            self.reset_epoch[last.idx()] += 1;
        }
    }

    fn forget(&mut self, from: u64, to: u64) {
        let doomed: Vec<u64> = self.shadow.range(from..to).map(|(k, _)| *k).collect();
        for k in doomed {
            self.shadow.remove(&k);
        }
    }

    fn zone_reset(&mut self, z: ZoneNo) {
        let start = self.geo.zone_start(z).0;
        self.forget(start, start + self.geo.zone_len(z));
        self.reset_epoch[z.idx()] += 1;
        self.appends.remove(&z);
    }

    /// A fault turned a zone READONLY or OFFLINE, or a read hit its data: nothing to
    /// track but its writes in flight, which the device will fail.
    pub fn on_zone_failed(&mut self, z: ZoneNo) {
        self.reset_epoch[z.idx()] += 1;
        self.failed[z.idx()] = true;
    }

    /// The device executed read `req` into `buf`: compare with the model.
    pub fn on_read_data(&mut self, req: &Request, buf: &[u8]) {
        for (j, actual) in buf.chunks_exact(SECTOR_SIZE as usize).enumerate() {
            self.checks += 1;
            let s = req.sector.0 + j as u64;
            let expect = match self.shadow.get(&s) {
                Some(Held::Unknown) => continue,
                Some(Held::Data(o)) => Decoded::Data(*o),
                None => Decoded::Zeroes,
            };
            let got = pattern::decode(actual);
            if got != expect {
                self.fail(format!("sector {s} read {got:?}, expected {expect:?} (request {req:?})"));
            }
        }
    }

    /// The sum of the reset epochs of the zones `[sector, sector + nr_sectors)` spans:
    /// unchanged at completion means nothing threw the BIO's data away meanwhile.
    pub fn epoch_of(&self, sector: Sector, nr_sectors: u32) -> u64 {
        if !self.geo.is_zoned() || nr_sectors == 0 || sector.0 >= self.geo.nr_sectors() {
            return 0;
        }
        let end = (sector.0 + u64::from(nr_sectors)).min(self.geo.nr_sectors());
        let first = self.geo.zone_no(sector).0;
        let last = self.geo.zone_no(Sector(end - 1)).0;
        (first..=last).map(|z| self.reset_epoch[z as usize]).sum()
    }

    /// A write or append BIO completed successfully at `at`: its data must be there,
    /// sector by sector; an append's sector must not overlap another append's.
    pub fn on_write_bio_done(&mut self, op: Op, at: Sector, nr_sectors: u32, stamp: u64, epoch: u64) {
        if self.epoch_of(at, nr_sectors) != epoch {
            return; // the zone was reset (or overwritten) meanwhile: another incarnation
        }
        self.check_written(op, at, nr_sectors, stamp, 0);
    }

    /// Part of a completed write or append BIO, whose sector `first_k` landed at
    /// `at` on this device (a stacked device spreads a BIO over disks): its data
    /// must be there, sector by sector; an append's sector must not overlap another
    /// append's. The caller has checked that no reset or overwrite raced with it
    /// (see [`Checker::epoch_of`]).
    pub fn check_written(&mut self, op: Op, at: Sector, nr_sectors: u32, stamp: u64, first_k: u32) {
        if op == Op::ZoneAppend {
            self.check_append_distinct(at, nr_sectors);
        }
        for i in 0..nr_sectors {
            self.checks += 1;
            let (s, k) = (at.0 + u64::from(i), first_k + i);
            match self.shadow.get(&s) {
                None if stamp == zblk_workload::pattern::ZEROES => {}
                Some(Held::Data(o)) if *o == (stamp, k) => {}
                other => self.fail(format!(
                    "{op} completed at {at}+{nr_sectors} (from its sector {first_k}), but sector {s} holds {other:?}, not ({stamp}, {k})"
                )),
            }
        }
    }

    /// Part of a write or append BIO was acknowledged to the host: sectors
    /// `[at, at + nr_sectors)`, from its sector `first_k`. The sectors that still
    /// hold its data, to be made durable by a FLUSH (see [`Checker::make_durable`]).
    pub fn acked(&self, at: Sector, nr_sectors: u32, stamp: u64, first_k: u32) -> Vec<Acked> {
        if stamp == zblk_workload::pattern::ZEROES {
            return Vec::new();
        }
        (0..nr_sectors)
            .filter_map(|i| {
                let (s, o) = (at.0 + u64::from(i), (stamp, first_k + i));
                (self.shadow.get(&s) == Some(&Held::Data(o))).then_some((s, o, self.exec_seq))
            })
            .collect()
    }

    /// Acknowledged sectors are durable now (a FLUSH issued after their
    /// acknowledgement completed, or their write was FUA): a power loss must keep
    /// them, unless something executed later changed them.
    pub fn make_durable(&mut self, sectors: &[Acked]) {
        for &(s, o, seq) in sectors {
            self.durable.insert(s, (o, seq));
        }
    }

    /// The power failed and came back with `dev` as it is now: every durable
    /// sector that nothing executed later changed must hold its data below its
    /// zone's write pointer; then the content model restarts from the device.
    pub fn power_loss(&mut self, dev: &MemDevice) {
        // The requests out when the power failed never complete: the host that
        // waited for them is gone, and the engine built anew knows none of them.
        // Those that executed are in the device's content, read back below.
        self.writes_out.clear();
        self.zone_writes_out = 0;
        self.pipe_broken.clear();
        self.issued_doomed.clear();
        // The same for the zone operations out, and those counted at submission
        // and refused before the device (an append where zone write locking has
        // none).
        self.wp_movers_out.clear();
        self.reset_all_out = 0;
        let zones = dev.zones();
        let geo = self.geo.clone();
        let seq_zone = |s: u64| {
            let z = geo.is_zoned().then(|| geo.zone_no(Sector(s)))?;
            (!geo.zone_is_conv(z)).then_some(z)
        };
        // Sectors changed after they were made durable may hold either: not checked.
        let changed = |s: u64, seq: u64| {
            self.touched.get(&s).is_some_and(|&t| t > seq)
                || (self.geo.is_zoned() && self.reset_seq[self.geo.zone_no(Sector(s)).idx()] > seq)
        };
        let keep: BTreeMap<u64, (Origin, u64)> =
            self.durable.iter().filter(|&(&s, &(_, seq))| !changed(s, seq)).map(|(&s, &v)| (s, v)).collect();
        let mut sector = [0u8; SECTOR_SIZE as usize];
        for (&s, &(o, _)) in &keep {
            self.checks += 1;
            if let (Some(z), Some(zones)) = (seq_zone(s), zones) {
                let zone = zones.zone(z);
                if zone.cond == ZoneCond::Offline {
                    continue; // nothing of an OFFLINE zone can be read
                }
                if zone.cond != ZoneCond::Full && s >= zone.wp.0 {
                    self.fail(format!(
                        "after a power loss, durable sector {s} (holding {o:?}) is past zone {z}'s write pointer {}",
                        zone.wp
                    ));
                }
            }
            dev.peek(Sector(s), &mut sector);
            let got = pattern::decode(&sector);
            if got != Decoded::Data(o) {
                self.fail(format!("after a power loss, durable sector {s} reads {got:?}, not {o:?}"));
            }
        }
        self.durable = keep;
        // The content, as the device has it now.
        self.shadow.clear();
        for (first, n) in dev.stored() {
            for s in first.0..first.0 + n {
                if s >= geo.nr_sectors() {
                    break;
                }
                if let (Some(z), Some(zones)) = (seq_zone(s), zones) {
                    let zone = zones.zone(z);
                    if zone.cond != ZoneCond::Full && s >= zone.wp.0 {
                        continue; // past the write pointer: reads as zeroes
                    }
                }
                dev.peek(Sector(s), &mut sector);
                match pattern::decode(&sector) {
                    Decoded::Zeroes => {}
                    Decoded::Data(o) => {
                        self.shadow.insert(s, Held::Data(o));
                    }
                    Decoded::Garbage => {
                        self.shadow.insert(s, Held::Unknown);
                    }
                }
            }
        }
        for e in &mut self.reset_epoch {
            *e += 1;
        }
        self.appends.clear();
    }

    fn check_append_distinct(&mut self, at: Sector, nr_sectors: u32) {
        let z = self.geo.zone_no(at);
        let (a, b) = (at.0, at.0 + u64::from(nr_sectors));
        let start = self.geo.zone_start(z).0;
        if a < start || b > start + self.geo.zone_capacity(z) {
            self.fail(format!("append reported at {at}+{nr_sectors}, outside zone {z}"));
        }
        let list = self.appends.entry(z).or_default();
        let overlap = list.iter().find(|&&(x, y)| a < y && x < b).copied();
        list.push((a, b));
        if let Some((x, y)) = overlap {
            self.fail(format!("append at {a}..{b} overlaps append at {x}..{y} in zone {z}"));
        }
    }

    /// After every step: the engine's own invariants, the device's zone accounting,
    /// plug bounds, and idle plugs agreeing with the device's write pointers.
    pub fn check_engine(&mut self, engine: &Engine, dev: &MemDevice) {
        engine.check_invariants();
        self.check_plugs(engine, dev);
    }

    /// [`Checker::check_engine`] without the engine's own invariants, for a caller
    /// that has checked them (a stack checks those of its disks' engines).
    pub fn check_plugs(&mut self, engine: &Engine, dev: &MemDevice) {
        self.checks += 1;
        let Some(zones) = dev.zones() else { return };
        // The device's own zone accounting, recounted from scratch: the counters the
        // open/active limits are decided on must match the conditions.
        zones.check_invariants();
        let mut busy = 0;
        let mut failed = 0;
        for plug in engine.plugs() {
            let zone = zones.zone(plug.zone);
            if matches!(zone.cond, ZoneCond::ReadOnly | ZoneCond::Offline) {
                failed += 1;
                continue;
            }
            // A reset, finish, append or RESET_ALL the device executed but the
            // engine has not heard of (its completion lost, or not handled yet).
            let moving = self.reset_all_out > 0 || self.wp_movers_out.contains_key(&plug.zone);
            if plug.busy || plug.queued > 0 || plug.need_wp_update || moving {
                busy += 1;
                continue;
            }
            let device_wp = zone.wp.since(zone.start).min(zone.capacity);
            if plug.wp_offset != device_wp {
                self.fail(format!(
                    "idle plug of zone {} has wp_offset {}, the device's write pointer is at {}",
                    plug.zone, plug.wp_offset, device_wp
                ));
            }
        }
        let bound = zones.nr_active() as usize + busy + failed;
        if engine.plug_count() > bound {
            let idle: Vec<_> = engine.plugs().filter(|p| !p.busy && p.queued == 0 && !p.need_wp_update).collect();
            self.fail(format!(
                "{} plugs alive, more than {} active zones + {busy} busy + {failed} failed; idle plugs: {idle:?}",
                engine.plug_count(),
                zones.nr_active()
            ));
        }
    }
}
