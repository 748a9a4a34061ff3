//! The simulated world under a [`Sim`](super::Sim)'s handles: zblk's engine
//! (zblk_core) on an in-memory zoned device with the preset's geometry, its
//! requests completing when the preset's timing model says, in virtual time, with
//! the simulator's faults (`zblk_sim::faults`) drawn from the seed, a volatile
//! write cache and power loss.
//!
//! A request executes on the device's data and zones when it reaches the device,
//! in the order the engine issues it (as a device that keeps a zone's writes in
//! order does); its completion comes back when the timing model completes it.
//! The write cache holds what executed since the last durable point (a FLUSH once it
//! completes, for what executed before it arrived; a FUA write, a RESET or FINISH, a
//! zone failing, when they execute); a power loss keeps the durable state
//! and a prefix of the cache drawn from the seed, as the simulator's disks do
//! (docs/vopr.md), and may tear the write in progress; a read may find its data
//! silently corrupted (the medium's faults, [`super::media`]).

use std::collections::{BTreeMap, VecDeque};
use std::task::Waker;
use zblk_core::bio::{Bio, BioFlags, Op, ReqId, Request, Status};
use zblk_core::engine::{Action, Engine, EngineConfig};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_dev::buf::Buffer;
use zblk_dev::{BlockDevice, IoBuf, MemDevice};
use zblk_sim::DeviceModel;
use zblk_sim::faults::{Fault, FaultConfig, Faults, TIMEOUT_NS};

use super::media::{Media, MediaConfig, flip_on};

/// A BIO submitted and not yet taken back by its submitter.
struct Slot {
    buf: Option<Buffer>,
    done: Option<Result<Sector, Status>>,
    waker: Option<Waker>,
    /// Its future was dropped: nobody takes it back.
    abandoned: bool,
}

/// What executed since the last durable point, on top of the durable device.
struct Cache {
    durable: MemDevice,
    /// Requests executed since, with a write's data.
    log: Vec<(Request, Vec<u8>)>,
    /// Requests destaged so far (the log's first entry is number `destaged`).
    destaged: u64,
    /// FLUSHes on the device: (request id, the entries before their arrival).
    flushes: BTreeMap<u64, u64>,
}

impl Cache {
    fn destage(&mut self, n: usize) {
        self.destaged += n as u64;
        for (req, data) in self.log.drain(..n) {
            let buf = if data.is_empty() { IoBuf::None } else { IoBuf::Write(&data) };
            let _ = self.durable.execute(&req, buf);
        }
    }
}

/// Counters of a simulation, for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Virtual time now, in nanoseconds.
    pub now_ns: u64,
    /// BIOs the handles submitted.
    pub bios: u64,
    /// Requests the engine issued to the device.
    pub requests: u64,
    /// Faults injected (every kind, power losses apart).
    pub faults: u64,
    /// Faults injected, by kind (the simulator's names: "write error", "partial
    /// write", "zone READONLY", "zone OFFLINE", "read error", "lost completion",
    /// "timed out before executing").
    pub faults_by_kind: BTreeMap<&'static str, u64>,
    /// Power losses.
    pub power_losses: u64,
    /// Cached requests a power loss threw away.
    pub lost_in_cache: u64,
    /// Writes a power loss tore: a prefix of their blocks reached the medium
    /// ([`SimOptions::torn_writes`](super::SimOptions::torn_writes)).
    pub torn_writes: u64,
    /// Reads that found a byte of the medium silently changed
    /// ([`SimOptions::corrupt_read_ppm`](super::SimOptions::corrupt_read_ppm)).
    pub corrupted_reads: u64,
    /// Executor steps: task polls and device events.
    pub steps: u64,
}

pub(crate) struct World {
    pub seed: u64,
    pub geo: Geometry,
    pub cfg: EngineConfig,
    mem: MemDevice,
    cache: Option<Cache>,
    faults: Faults,
    media: Media,
    model: Box<dyn DeviceModel>,
    engine: Engine,
    /// The handles' BIOs by token.
    slots: BTreeMap<u64, Slot>,
    next_token: u64,
    /// Executed requests waiting for their completion from the model: the request
    /// and its result.
    pending: BTreeMap<u64, (Request, Result<Sector, Status>)>,
    /// Requests whose completion was lost, failed by the driver's timeout: (time,
    /// request id).
    late: VecDeque<(u64, ReqId)>,
    /// The engine's anticipation timers: (due, token).
    timers: Vec<(u64, u64)>,
    now_ns: u64,
    /// Bumped by a power loss: the handles of before are gone with the host.
    pub epoch: u64,
    pub stats: SimStats,
    /// A running digest of every event, in order.
    pub digest: u64,
    /// A scratch buffer for the model's completions.
    done: Vec<Request>,
}

impl World {
    pub fn new(
        geo: Geometry,
        cfg: EngineConfig,
        model: Box<dyn DeviceModel>,
        faults: (FaultConfig, MediaConfig),
        seed: u64,
    ) -> World {
        let (faults, media) = faults;
        let mem = MemDevice::new(&geo, true);
        let engine = Engine::new(&geo, cfg, mem.zones().map_or(&[][..], |z| z.zones()));
        let cache = faults.write_cache.then(|| Cache {
            durable: mem.clone(),
            log: Vec::new(),
            destaged: 0,
            flushes: BTreeMap::new(),
        });
        World {
            seed,
            geo,
            cfg,
            mem,
            cache,
            faults: Faults::new(faults, seed),
            media: Media::new(media, seed),
            model,
            engine,
            slots: BTreeMap::new(),
            next_token: 1,
            pending: BTreeMap::new(),
            late: VecDeque::new(),
            timers: Vec::new(),
            now_ns: 0,
            epoch: 0,
            stats: SimStats::default(),
            digest: 0xcbf2_9ce4_8422_2325,
            done: Vec::new(),
        }
    }

    /// Mixes `words` into the digest (FNV-1a over their bytes).
    pub fn mix(&mut self, words: &[u64]) {
        for w in words {
            for b in w.to_le_bytes() {
                self.digest = (self.digest ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }

    /// The device's zones now.
    pub fn report(&self) -> Result<Vec<zblk_core::zone::ZoneInfo>, Status> {
        self.mem.zones().map(|z| z.zones().to_vec()).ok_or(Status::NotSupported)
    }

    /// The zone holding `sector` now.
    pub fn report_zone(&self, sector: Sector) -> Result<zblk_core::zone::ZoneInfo, Status> {
        self.mem.report_zone(sector)
    }

    /// Submits a BIO of `op` at `sector` carrying `buf` (a write's data, a read's
    /// room); returns its token.
    pub fn submit(&mut self, op: Op, sector: Sector, buf: Option<Buffer>) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        let nr = buf.as_ref().map_or(0, |b| (b.as_slice().len() as u64 / SECTOR_SIZE) as u32);
        let bio = Bio { op, sector, nr_sectors: nr, flags: BioFlags::NONE, user_data: token };
        self.slots.insert(token, Slot { buf, done: None, waker: None, abandoned: false });
        self.stats.bios += 1;
        self.mix(&[1, op as u64, sector.0, u64::from(nr)]);
        self.engine.submit(bio);
        self.pump();
        token
    }

    /// The BIO `token`'s end, if it came: its result and buffer. Otherwise `waker`
    /// is woken when it comes.
    pub fn take(&mut self, token: u64, waker: Option<&Waker>) -> Option<(Result<Sector, Status>, Option<Buffer>)> {
        let slot = self.slots.get_mut(&token)?;
        match slot.done {
            Some(r) => {
                let slot = self.slots.remove(&token).expect("present");
                Some((r, slot.buf))
            }
            None => {
                if let Some(w) = waker {
                    slot.waker = Some(w.clone());
                }
                None
            }
        }
    }

    /// Its submitter no longer waits for BIO `token`.
    pub fn abandon(&mut self, token: u64) {
        if let Some(slot) = self.slots.get_mut(&token) {
            if slot.done.is_some() {
                self.slots.remove(&token);
            } else {
                slot.abandoned = true;
            }
        }
    }

    /// Whether BIO `token` is still known (not ended by a power loss).
    pub fn knows(&self, token: u64) -> bool {
        self.slots.contains_key(&token)
    }

    /// When the next device event is due.
    pub fn next_event(&self) -> Option<u64> {
        let t = [self.model.next_event_ns(), self.late.front().map(|l| l.0), self.timers.iter().map(|t| t.0).min()];
        t.into_iter().flatten().min()
    }

    /// Moves virtual time to the next event and carries it out; false when nothing
    /// is due.
    pub fn step(&mut self) -> bool {
        let Some(t) = self.next_event() else { return false };
        self.now_ns = self.now_ns.max(t);
        self.stats.now_ns = self.now_ns;
        let mut done = std::mem::take(&mut self.done);
        self.model.advance(self.now_ns, &mut done);
        for req in done.drain(..) {
            let result = self.pending.remove(&req.id.raw()).map_or(Err(Status::IoErr), |p| p.1);
            self.mix(&[2, self.now_ns, req.id.raw(), result.map_or(u64::MAX, |s| s.0)]);
            if let Some(c) = &mut self.cache {
                // A FLUSH done: what executed before it arrived is durable now.
                if let (Some(mark), true) = (c.flushes.remove(&req.id.raw()), result.is_ok()) {
                    let n = mark.saturating_sub(c.destaged).min(c.log.len() as u64);
                    c.destage(n as usize);
                }
            }
            self.engine.complete(req.id, result);
        }
        self.done = done;
        while self.late.front().is_some_and(|l| l.0 <= self.now_ns) {
            let (_, id) = self.late.pop_front().expect("due");
            self.mix(&[3, self.now_ns, id.raw()]);
            self.engine.complete(id, Err(Status::IoErr));
        }
        let now = self.now_ns;
        let due: Vec<u64> = self.timers.iter().filter(|t| t.0 <= now).map(|t| t.1).collect();
        self.timers.retain(|t| t.0 > now);
        for token in due {
            self.engine.anticipation_expired(token);
        }
        self.pump();
        true
    }

    /// Carries out what the engine asks.
    fn pump(&mut self) {
        while let Some(a) = self.engine.poll_action() {
            match a {
                Action::Issue(req) => self.issue(req),
                Action::Complete(c) => {
                    self.mix(&[4, c.user_data, c.result.map_or(u64::MAX, |s| s.0)]);
                    if let Some(slot) = self.slots.get_mut(&c.user_data) {
                        slot.done = Some(c.result);
                        if slot.abandoned {
                            self.slots.remove(&c.user_data);
                        } else if let Some(w) = slot.waker.take() {
                            w.wake();
                        }
                    }
                }
                Action::ReportZone(z) => match self.mem.report_zone(self.geo.zone_start(z)) {
                    Ok(info) => self.engine.zone_report(&info),
                    Err(st) => self.engine.zone_report_failed(z, st),
                },
                Action::Anticipate { token, ns } => self.timers.push((self.now_ns + ns, token)),
            }
        }
    }

    /// A request reaches the device: it executes now, with the fault drawn for it,
    /// and completes when the model says (or the driver's timeout, for a lost
    /// completion).
    fn issue(&mut self, req: Request) {
        self.stats.requests += 1;
        let fault = self.draw_fault(&req);
        self.faults.count(fault);
        let result = self.execute(&req, fault);
        self.mix(&[5, self.now_ns, req.id.raw(), req.op as u64, req.sector.0, u64::from(req.nr_sectors)]);
        if let Fault::Timeout(_) = fault {
            self.late.push_back((self.now_ns + TIMEOUT_NS, req.id));
        } else {
            self.pending.insert(req.id.raw(), (req, result));
            self.model.submit(self.now_ns, &req);
        }
    }

    fn draw_fault(&mut self, req: &Request) -> Fault {
        let seq_zone =
            self.geo.is_zoned() && req.op.has_range() && !self.geo.zone_is_conv(self.geo.zone_no(req.sector));
        let lbs = self.geo.lbs_sectors();
        let fault = match req.op {
            Op::Write | Op::ZoneAppend if seq_zone => self.faults.for_write(req.nr_sectors, lbs),
            Op::Read => self.faults.for_read(),
            _ => Fault::None,
        };
        match (fault, self.faults.for_completion()) {
            (Fault::None, Some(executed)) => Fault::Timeout(executed),
            (f, _) => f,
        }
    }

    /// Executes `req` as `fault` has it.
    fn execute(&mut self, req: &Request, fault: Fault) -> Result<Sector, Status> {
        match fault {
            Fault::ZoneReadOnly | Fault::ZoneOffline => {
                let cond = if fault == Fault::ZoneReadOnly { ZoneCond::ReadOnly } else { ZoneCond::Offline };
                self.fail_zone(self.geo.zone_no(req.sector), cond);
                self.execute_data(req)
            }
            Fault::PartialWrite(k) => {
                if k > 0 {
                    let _ = self.execute_data(&Request { nr_sectors: k, ..*req });
                }
                Err(Status::IoErr)
            }
            Fault::ReadError | Fault::Timeout(false) => Err(Status::IoErr),
            Fault::None | Fault::Timeout(true) => self.execute_data(req),
        }
    }

    /// The medium fails zone `z`: in the durable state too.
    fn fail_zone(&mut self, z: ZoneNo, cond: ZoneCond) {
        if let Some(c) = &mut self.cache {
            c.destage(c.log.len());
            c.durable.zones_mut().expect("zoned").set_failed(z, cond);
        }
        self.mem.zones_mut().expect("zoned").set_failed(z, cond);
    }

    /// Executes `req` on the device's data (its first `req.nr_sectors`), into the
    /// cache.
    fn execute_data(&mut self, req: &Request) -> Result<Sector, Status> {
        let bytes = (u64::from(req.nr_sectors) * SECTOR_SIZE) as usize;
        let off = (u64::from(req.bio_offset) * SECTOR_SIZE) as usize;
        let slot = self.slots.get_mut(&req.user_data);
        let mut flipped = None;
        let r = match (req.op, slot.and_then(|s| s.buf.as_mut())) {
            (Op::Read, Some(b)) => {
                let out = &mut b.as_mut_slice()[off..off + bytes];
                let r = self.mem.execute(req, IoBuf::Read(out));
                if r.is_ok() {
                    flipped = corrupt_read(&mut self.media, &mut self.mem, self.cache.as_mut(), req, out);
                }
                r
            }
            (Op::Write | Op::ZoneAppend, Some(b)) => {
                let data = b.as_slice()[off..off + bytes].to_vec();
                let r = self.mem.execute(req, IoBuf::Write(&data));
                if let (Some(c), Ok(_)) = (&mut self.cache, r) {
                    c.log.push((*req, data));
                }
                r
            }
            (op, _) => {
                let r = self.mem.execute(req, IoBuf::None);
                if let (Some(c), Ok(_), false) = (&mut self.cache, r, matches!(op, Op::Read | Op::Flush)) {
                    c.log.push((*req, Vec::new()));
                }
                r
            }
        };
        if let Some((s, i, x)) = flipped {
            self.stats.corrupted_reads += 1;
            self.mix(&[8, s.0, i as u64, u64::from(x)]);
        }
        if let (Op::Flush, Some(c), Ok(_)) = (req.op, &mut self.cache, r) {
            // Durable when it completes (a power loss before may lose it all).
            c.flushes.insert(req.id.raw(), c.destaged + c.log.len() as u64);
        }
        let durable = match req.op {
            Op::ZoneReset | Op::ZoneResetAll | Op::ZoneFinish => true,
            Op::Write | Op::ZoneAppend => r.is_ok() && req.flags.contains(BioFlags::FUA),
            _ => false,
        };
        if let (true, Some(c)) = (durable, &mut self.cache) {
            c.destage(c.log.len());
        }
        r
    }

    /// The power fails and comes back: what was in flight is gone (its BIOs never
    /// end), the device keeps its durable state and a prefix of its cache drawn
    /// from the seed, the write in progress maybe torn, its open zones come back
    /// CLOSED, and a new engine starts from a zone report as at start-up.
    pub fn power_loss(&mut self) {
        self.stats.power_losses += 1;
        self.slots.clear();
        let in_flight: Vec<(Request, Sector)> =
            std::mem::take(&mut self.pending).into_values().filter_map(|(req, r)| Some((req, r.ok()?))).collect();
        self.late.clear();
        self.timers.clear();
        self.model.power_loss(self.now_ns);
        let torn = match self.cache.take() {
            Some(mut c) => {
                let n = self.faults.destaged(c.log.len());
                self.stats.lost_in_cache += (c.log.len() - n) as u64;
                c.destage(n);
                // The write whose destaging the power cut: a prefix of it on the medium.
                let torn = self.media.torn_cached(c.log.first(), self.geo.lbs_sectors());
                if let Some((req, data)) = &torn {
                    let _ = c.durable.execute(req, IoBuf::Write(data));
                }
                c.log.clear();
                self.mem = c.durable.clone();
                self.cache = Some(c);
                torn.map(|(req, _)| vec![(req.sector, req.sector + u64::from(req.nr_sectors))]).unwrap_or_default()
            }
            // Without a cache, what executed is on the medium; what had not
            // completed may not all be.
            None => self.media.tear_in_flight(&mut self.mem, &in_flight),
        };
        for (zone, wp) in torn {
            self.stats.torn_writes += 1;
            self.mix(&[9, zone.0, wp.0]);
        }
        let open: Vec<ZoneNo> = self.mem.zones().map_or(Vec::new(), |zs| {
            let open = |z: &&zblk_core::zone::ZoneInfo| matches!(z.cond, ZoneCond::ImpOpen | ZoneCond::ExpOpen);
            zs.zones().iter().filter(open).map(|z| self.geo.zone_no(z.start)).collect()
        });
        for z in open {
            let r = self.mem.execute(&Request::direct(Op::ZoneClose, self.geo.zone_start(z), 0), IoBuf::None);
            assert!(r.is_ok(), "closing open zone {z} at power-on: {r:?}");
        }
        if let Some(c) = &mut self.cache {
            c.durable = self.mem.clone();
            c.flushes.clear();
        }
        self.engine = Engine::new(&self.geo, self.cfg, self.mem.zones().map_or(&[][..], |z| z.zones()));
        self.epoch += 1;
        self.mix(&[6, self.now_ns, self.stats.lost_in_cache]);
    }

    /// The counters now.
    pub fn stats(&self) -> SimStats {
        SimStats { faults: self.faults.injected, faults_by_kind: self.faults.by_kind.clone(), ..self.stats.clone() }
    }
}

/// Silent corruption of a read that succeeded (`out`, what `req` read), as the
/// medium's faults draw it: the byte changed in `out` and on the medium, the durable
/// one under a cache too (where it holds the sector). Returns the byte changed.
fn corrupt_read(
    media: &mut Media,
    mem: &mut MemDevice,
    cache: Option<&mut Cache>,
    req: &Request,
    out: &mut [u8],
) -> Option<super::media::Flip> {
    let flip = media.corruption(mem, req.sector, req.nr_sectors)?;
    let (s, i, x) = flip;
    out[(s.since(req.sector) * SECTOR_SIZE) as usize + i] ^= x;
    flip_on(mem, flip);
    if let Some(c) = cache {
        flip_on(&mut c.durable, flip);
    }
    Some(flip)
}
