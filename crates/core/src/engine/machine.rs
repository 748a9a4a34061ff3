//! The engine: zblk's zoned block layer as a state machine.
//!
//! Inputs: [`Engine::submit`] (a BIO from a submitter), [`Engine::complete`] (a device
//! finished a request), [`Engine::zone_report`] (what the device says a zone looks
//! like). Outputs, drained with [`Engine::poll_action`]: issue a request to the
//! device, complete a BIO to its submitter, report a zone. No clock, no thread, no
//! I/O: the simulator and the real runtime drive the same engine.
//!
//! Inside, per BIO: validate → split → (sequential zone write?) plug → issue policy →
//! dispatch (bounded by the device queue depth). See `docs/ARCHITECTURE.md` for the
//! call-order contract.

use super::plug::{PlugIdx, PlugTable};
use super::zwl::ZwlSched;
use crate::bio::{Bio, BioFlags, Completion, Op, ReqId, Request, Status};
use crate::geometry::Geometry;
use crate::split::SplitLimits;
use crate::units::{SECTOR_SIZE, Sector, ZoneNo};
use crate::zone::{ZoneCond, ZoneInfo, ZoneType};
use slab::Slab;
use std::collections::VecDeque;

/// How zone writes are released from their plugs to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IssuePolicy {
    /// Per-zone plugging (`zwp`): at most one write in flight per sequential zone,
    /// zones independent of each other. The kernel's default since 6.10.
    Zwp,
    /// Single issuer (`qd1`, the kernel's `zoned_qd1_writes=1`): one write of the
    /// whole device in flight; plugs with pending writes wait on a FIFO list and the
    /// issuer drains the head plug completely before moving to the next.
    Qd1,
    /// zblk's single issuer (`batch`): as `qd1`, but the next plug to drain is the one
    /// with the most data waiting (the largest batch per zone visit, so the fewest
    /// head switches per byte); among equals, the nearest zone ahead of the last one
    /// drained (a C-SCAN sweep, so the switches that remain are short seeks). A plug
    /// passed over `batch_max_bypass` times goes first: the bound keeps a shallow
    /// plug's writes from waiting behind more than that many other plugs' drains.
    Batch,
    /// Legacy zone write locking (`zwl`): no plugs; a request-level zone lock inside
    /// an mq-deadline-like scheduler with a limited number of tags. See
    /// `core/zwl.rs`.
    Zwl,
    /// No plugging at all: writes go to the device as submitted, with no write
    /// pointer check and no zone append emulation. Only for measuring what plugging
    /// costs, and for showing what goes wrong without it.
    Passthrough,
}

impl IssuePolicy {
    /// Every policy.
    pub const ALL: [IssuePolicy; 5] =
        [IssuePolicy::Zwp, IssuePolicy::Qd1, IssuePolicy::Batch, IssuePolicy::Zwl, IssuePolicy::Passthrough];

    /// The short name used on the command line and in JSON (`zwp`, `qd1`, ...).
    pub fn name(self) -> &'static str {
        match self {
            IssuePolicy::Zwp => "zwp",
            IssuePolicy::Qd1 => "qd1",
            IssuePolicy::Batch => "batch",
            IssuePolicy::Zwl => "zwl",
            IssuePolicy::Passthrough => "passthrough",
        }
    }

    /// Parses a policy name.
    pub fn parse(name: &str) -> Option<IssuePolicy> {
        IssuePolicy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether zone writes go through zone write plugs.
    pub fn plugs(self) -> bool {
        matches!(self, IssuePolicy::Zwp | IssuePolicy::Qd1 | IssuePolicy::Batch)
    }

    /// Whether one context issues every zone write of the device.
    pub fn single_issuer(self) -> bool {
        matches!(self, IssuePolicy::Qd1 | IssuePolicy::Batch)
    }
}

/// A queue attribute change the engine refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    /// `zoned_qd1_writes` is meaningless (always 0) on a regular device.
    #[error("zoned_qd1_writes: the device is not zoned (the attribute is always 0 and cannot be set)")]
    NotZoned,
    /// Only 0 and 1 are valid.
    #[error("zoned_qd1_writes: {0} is not 0 or 1")]
    BadValue(u64),
    /// `write_zeroes_unmap_max_bytes` above what the device can do.
    #[error("write_zeroes_unmap_max_bytes: {value} is above the hardware limit write_zeroes_unmap_max_hw_bytes ({hw})")]
    AboveHardware {
        /// The value asked for.
        value: u64,
        /// `write_zeroes_unmap_max_hw_bytes`.
        hw: u64,
    },
    /// `write_zeroes_unmap_max_bytes` other than 0 or the hardware limit.
    #[error("write_zeroes_unmap_max_bytes: {value} is neither 0 (disable unmap) nor the hardware limit ({hw})")]
    BadUnmapLimit {
        /// The value asked for.
        value: u64,
        /// `write_zeroes_unmap_max_hw_bytes`.
        hw: u64,
    },
}

/// How a WRITE_ZEROES makes its range read as zeroes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZeroingMethod {
    /// The device deallocates the range (SCSI UNMAP bit, NVMe DEAC): no media writes.
    Unmap,
    /// The device writes zeroes (WRITE_ZEROES with NOUNMAP): full media writes, no
    /// data over the link.
    WriteZeroes,
    /// The device has no WRITE_ZEROES: the caller writes buffers of zeroes.
    ZeroBuffers,
}

impl ZeroingMethod {
    /// `unmap`, `write-zeroes` or `zero-buffers`.
    pub fn name(self) -> &'static str {
        match self {
            ZeroingMethod::Unmap => "unmap",
            ZeroingMethod::WriteZeroes => "write-zeroes",
            ZeroingMethod::ZeroBuffers => "zero-buffers",
        }
    }
}

/// What the engine does when a zone write fails and its write pointer is no longer
/// known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WpRecovery {
    /// Ask the driver for a zone report ([`Action::ReportZone`]) and hold new writes
    /// to the zone in its plug until the answer re-synchronises `wp_offset`.
    Report,
    /// As the kernel: fail new writes to the zone ([`Status::NeedWpUpdate`]) until
    /// the user reports the zone ([`Engine::zone_report`]).
    Kernel,
}

/// Engine settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineConfig {
    /// Zone write issue policy.
    pub policy: IssuePolicy,
    /// Write pointer recovery after a write error.
    pub wp_recovery: WpRecovery,
    /// Requests the device accepts at once (its tags). Requests beyond wait in a FIFO.
    pub queue_depth: u32,
    /// BIOs the engine holds at once; a BIO beyond fails with [`Status::Again`].
    pub max_bios: u32,
    /// Zone write locking: scheduler tags (mq-deadline's `nr_requests`); 0 means twice
    /// the queue depth, the kernel's default.
    pub zwl_sched_tags: u32,
    /// The batching issuer: how many times a listed plug may see another plug,
    /// listed after it, drained first.
    pub batch_max_bypass: u32,
    /// The batching issuer: when a plug drains while other plugs wait, keep the
    /// zone's turn this long (ns) for the next write to the same zone, as the
    /// anticipatory I/O scheduler waits for a process's next read (0: never). A
    /// submitter that writes a zone again right after its completion then extends
    /// the batch instead of costing a head switch. See [`Action::Anticipate`].
    pub batch_anticipate_ns: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: IssuePolicy::Zwp,
            wp_recovery: WpRecovery::Report,
            queue_depth: 64,
            max_bios: 1 << 20,
            zwl_sched_tags: 0,
            batch_max_bypass: 8,
            batch_anticipate_ns: 50_000,
        }
    }
}

fn zwl_tags(cfg: &EngineConfig) -> u32 {
    if cfg.zwl_sched_tags == 0 { 2 * cfg.queue_depth } else { cfg.zwl_sched_tags }
}

/// What the engine asks its driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this request to the device, then call [`Engine::complete`] with its result.
    Issue(Request),
    /// This BIO is done: hand the completion to its submitter.
    Complete(Completion),
    /// Report this zone from the device and hand the answer to
    /// [`Engine::zone_report`] (or [`Engine::zone_report_failed`]).
    ReportZone(ZoneNo),
    /// The batching issuer holds the device for the zone it just drained: call
    /// [`Engine::anticipation_expired`] with `token` once `ns` nanoseconds have
    /// passed, unless the engine has moved on by then (a stale token is ignored).
    /// The engine has no clock; its driver owns time.
    Anticipate {
        /// Which anticipation this is.
        token: u64,
        /// How long to wait.
        ns: u64,
    },
}

/// Counters of what the engine has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EngineStats {
    /// BIOs submitted.
    pub bios: u64,
    /// BIOs refused by validation.
    pub invalid: u64,
    /// Requests issued to the device.
    pub requests: u64,
    /// BIOs split into more than one request.
    pub splits: u64,
    /// Zone writes that had to wait in a plug behind another write.
    pub plugged: u64,
    /// Writes failed by the host before reaching the device (not at `wp_offset`,
    /// zone full, write pointer unknown).
    pub refused: u64,
    /// Plugged writes aborted by an earlier error, a reset or a finish.
    pub aborted: u64,
    /// Zone writes that failed on the device.
    pub write_errors: u64,
    /// Zone reports asked for.
    pub reports: u64,
    /// Zone appends turned into writes.
    pub emulated_appends: u64,
    /// Zone write plugs allocated.
    pub plugs_allocated: u64,
    /// Most plugs alive at once.
    pub plugs_peak: u64,
    /// Single issuer: plugs taken off the head of its list to drain (zone visits);
    /// zone writes per visit is the batch the disk sees between head switches.
    pub issuer_visits: u64,
    /// Batching issuer: anticipation windows opened after a plug drained.
    pub anticipations: u64,
    /// Of which a write to the same zone arrived in time and extended the batch.
    pub anticipation_hits: u64,
}

/// A read-only view of a zone write plug, for checkers and tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlugView {
    /// The zone.
    pub zone: ZoneNo,
    /// The host's write pointer offset.
    pub wp_offset: u64,
    /// Writes waiting in the plug.
    pub queued: usize,
    /// A write from the plug is issued and not completed.
    pub busy: bool,
    /// The write pointer must be re-synchronised by a zone report.
    pub need_wp_update: bool,
    /// On the single issuer's list.
    pub listed: bool,
    /// A zone report was asked for and not answered.
    pub report_pending: bool,
}

/// What the host knows of a sequential zone that has no plug (the kernel keeps the
/// same per-zone condition cache, `disk->zones_cond`). A zone with a plug is
/// described by the plug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CondCache {
    NotWp,
    Empty,
    Full,
    /// Not known: a native zone append or a failed zone operation moved the write
    /// pointer to where the host cannot tell.
    Unknown,
    ReadOnly,
    Offline,
}

#[derive(Debug)]
struct BioSlot {
    user_data: u64,
    /// Fragments not ended yet, plus one while the BIO is still being split.
    remaining: u32,
    status: Option<Status>,
    result: Sector,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FragState {
    /// Waiting in a zone write plug.
    Plugged,
    /// Held behind a RESET_ALL barrier.
    Held,
    /// In the zone write locking scheduler, or waiting for one of its tags.
    Sched,
    /// Released, waiting for a device tag.
    WaitTag,
    /// On the device.
    InFlight,
}

/// What a fragment is to the plugs: it decides where it waits and what its
/// completion changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Not ordered by any plug: reads, flushes, discards, opens, closes, writes to
    /// conventional zones, everything under the passthrough policy.
    Free,
    /// WRITE, WRITE_ZEROES or emulated ZONE_APPEND to a sequential zone: checked
    /// against (or placed at) `wp_offset`, one at a time per plug.
    ZoneWrite,
    /// RESET or FINISH of a zone: ordered in the plug like a write, because the device
    /// must see it after the writes before it and before the writes after it.
    WpOp,
    /// Native ZONE_APPEND: needs no write pointer, but must not overtake a write or a
    /// reset of its zone, nor be overtaken by one.
    NativeAppend,
    /// RESET_ALL: a barrier for every zone write of the device.
    ResetAll,
    /// Any I/O under zone write locking: it goes through the ZWL scheduler.
    Zwl,
}

/// The single decision about the operation at the front of a plug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Front {
    /// Release it now.
    Go,
    /// Not yet: something before it is on the device, or the write pointer is unknown.
    Wait,
    /// It can never succeed: fail it without sending it.
    Refuse(Status),
}

/// A piece of a BIO: what becomes one request.
#[derive(Debug)]
struct Frag {
    bio: usize,
    op: Op,
    kind: Kind,
    sector: Sector,
    nr_sectors: u32,
    bio_offset: u32,
    flags: BioFlags,
    state: FragState,
    /// The plug that orders this fragment (ZoneWrite, WpOp, NativeAppend).
    plug: Option<PlugIdx>,
    /// The BIO is a zone append: its completion reports the sector written.
    append: bool,
    /// Generation of the slab slot, so that a stale request id is caught.
    generation: u32,
}

/// zblk's zoned block layer, sans I/O. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    geo: Geometry,
    cfg: EngineConfig,
    limits: SplitLimits,
    /// WRITE_ZEROES is split at `write_zeroes_max_bytes` instead of `max_sectors`.
    wz_limits: SplitLimits,
    /// The user's `write_zeroes_unmap_max_bytes`, in sectors: 0 (unmap disabled) or
    /// the hardware limit.
    wzeroes_unmap_sectors: u32,
    cond: Vec<CondCache>,
    plugs: PlugTable,
    bios: Slab<BioSlot>,
    frags: Slab<Frag>,
    next_gen: u32,
    /// Requests waiting for a device tag, oldest first.
    wait_tag: VecDeque<usize>,
    inflight: u32,
    /// Plugged writes, resets and finishes released and not completed (waiting for a
    /// tag or on the device). At most one under the single issuer.
    zone_writes: u32,
    /// Native appends released and not completed.
    appends_out: u32,
    /// The single issuer's list of plugs with pending operations, in arrival order.
    issuer: VecDeque<PlugIdx>,
    /// RESET_ALL requests waiting for every zone write to drain, oldest first.
    barriers: VecDeque<usize>,
    /// A RESET_ALL is on the device.
    barrier_out: bool,
    /// The plug at the head of the issuer list is being drained (the batching issuer
    /// chooses the next one only when this is false).
    in_service: bool,
    /// The zone the batching issuer visited last (where its sweep is).
    last_visited: u32,
    /// The batching issuer keeps the device for this zone until the token's
    /// anticipation expires or a write to the zone arrives.
    anticipating: Option<(ZoneNo, u64)>,
    /// The last anticipation token handed out.
    anticipation_token: u64,
    /// Zone write locking's scheduler, under that policy.
    zwl: Option<ZwlSched>,
    /// A queue attribute change waiting for the queue to drain (the kernel freezes
    /// the queue): the policy to switch to.
    freeze: Option<IssuePolicy>,
    /// BIOs submitted while frozen, in order.
    frozen: VecDeque<Bio>,
    actions: VecDeque<Action>,
    stats: EngineStats,
}

impl Engine {
    /// An engine for a device whose zones are as `zones` says (a full zone report, as
    /// the kernel's revalidation reads at start-up; empty for a regular device).
    /// Partially written zones get a plug holding their write pointer.
    pub fn new(geo: &Geometry, cfg: EngineConfig, zones: &[ZoneInfo]) -> Engine {
        assert!(cfg.queue_depth > 0, "queue_depth must be at least 1");
        assert_eq!(zones.len(), geo.nr_zones() as usize, "the zone report must cover every zone");
        let mut e = Engine {
            geo: geo.clone(),
            cfg,
            limits: SplitLimits::of(geo),
            wz_limits: SplitLimits::of_write_zeroes(geo),
            wzeroes_unmap_sectors: geo.max_hw_wzeroes_unmap_sectors(),
            cond: Vec::with_capacity(zones.len()),
            plugs: PlugTable::default(),
            bios: Slab::new(),
            frags: Slab::new(),
            next_gen: 0,
            wait_tag: VecDeque::new(),
            inflight: 0,
            zone_writes: 0,
            appends_out: 0,
            issuer: VecDeque::new(),
            barriers: VecDeque::new(),
            barrier_out: false,
            in_service: false,
            last_visited: 0,
            anticipating: None,
            anticipation_token: 0,
            zwl: (cfg.policy == IssuePolicy::Zwl).then(|| ZwlSched::new(zwl_tags(&cfg))),
            freeze: None,
            frozen: VecDeque::new(),
            actions: VecDeque::new(),
            stats: EngineStats::default(),
        };
        for (z, info) in zones.iter().enumerate() {
            let zno = ZoneNo(z as u32);
            assert_eq!(info.start, geo.zone_start(zno), "zone report out of order");
            let c = match (info.ztype, info.cond) {
                (ZoneType::Conventional, _) => CondCache::NotWp,
                (_, ZoneCond::Full) => CondCache::Full,
                (_, ZoneCond::ReadOnly) => CondCache::ReadOnly,
                (_, ZoneCond::Offline) => CondCache::Offline,
                (_, ZoneCond::NotWp) => panic!("sequential zone {z} reported NOT_WP"),
                _ if info.wp == info.start => CondCache::Empty,
                _ => {
                    e.plugs.insert(zno, info.wp.since(info.start));
                    CondCache::Empty // the plug describes the zone
                }
            };
            e.cond.push(c);
        }
        e
    }

    /// An engine for a device in its initial state: every sequential zone EMPTY.
    pub fn new_empty(geo: &Geometry, cfg: EngineConfig) -> Engine {
        let zones = if geo.is_zoned() { crate::zone::ZoneSet::new(geo).zones().to_vec() } else { Vec::new() };
        Engine::new(geo, cfg, &zones)
    }

    /// The geometry the engine validates against.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> EngineStats {
        EngineStats { plugs_allocated: self.plugs.allocated, plugs_peak: self.plugs.peak as u64, ..self.stats }
    }

    /// The next thing to do, if any. Drain it after every input.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Whether actions are waiting.
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// Requests on the device.
    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    /// BIOs inside the engine (not completed yet).
    pub fn bios_in_engine(&self) -> usize {
        self.bios.len()
    }

    /// Number of zone write plugs alive.
    pub fn plug_count(&self) -> usize {
        self.plugs.len()
    }

    fn view(&self, p: PlugIdx) -> PlugView {
        let plug = &self.plugs[p];
        PlugView {
            zone: plug.zone,
            wp_offset: plug.wp_offset,
            queued: plug.queue.len(),
            busy: plug.busy || plug.appends_out > 0,
            need_wp_update: plug.need_wp_update,
            listed: plug.listed,
            report_pending: plug.report_pending,
        }
    }

    /// All plugs, for checkers.
    pub fn plugs(&self) -> impl Iterator<Item = PlugView> + '_ {
        self.plugs.iter().map(|(p, _)| self.view(p))
    }

    /// The plug of zone `z`, if it has one.
    pub fn plug(&self, z: ZoneNo) -> Option<PlugView> {
        self.plugs.get(z).map(|p| self.view(p))
    }

    // ----------------------------------------------------------------- submission

    /// Submits a BIO. Its completion arrives as an [`Action::Complete`], never
    /// synchronously, even when it is refused at once.
    pub fn submit(&mut self, bio: Bio) {
        if self.freeze.is_some() {
            // The queue is frozen for an attribute change: hold new BIOs until it is
            // drained and switched, as blk_queue_enter() waits.
            if self.bios.len() + self.frozen.len() >= self.cfg.max_bios as usize {
                self.stats.bios += 1;
                self.complete_bio_now(bio.user_data, Err(Status::Again));
            } else {
                self.frozen.push_back(bio);
            }
            return;
        }
        self.stats.bios += 1;
        if self.bios.len() >= self.cfg.max_bios as usize {
            self.complete_bio_now(bio.user_data, Err(Status::Again));
            return;
        }
        if let Err(status) = self.validate(&bio) {
            self.stats.invalid += 1;
            self.complete_bio_now(bio.user_data, Err(status));
            return;
        }
        let b = self.bios.insert(BioSlot { user_data: bio.user_data, remaining: 1, status: None, result: bio.sector });
        let plugs = self.cfg.policy.plugs();
        match bio.op {
            Op::ZoneReset | Op::ZoneFinish if plugs => {
                let f = self.new_frag(b, &bio, 0, 0, Kind::WpOp);
                self.submit_wp_op(f);
            }
            Op::ZoneResetAll if plugs => {
                let f = self.new_frag(b, &bio, 0, 0, Kind::ResetAll);
                self.submit_reset_all(f);
            }
            Op::ZoneAppend => self.submit_append(b, &bio),
            op if op.has_range() => self.submit_ranged(b, &bio),
            _ => {
                let f = self.new_frag(b, &bio, 0, 0, Kind::Free);
                self.dispatch(f);
            }
        }
        self.put_bio(b);
    }

    fn complete_bio_now(&mut self, user_data: u64, result: Result<Sector, Status>) {
        self.actions.push_back(Action::Complete(Completion { user_data, result }));
    }

    /// Checks a BIO against the geometry, as `submit_bio_noacct()` and
    /// `blk_check_zone_append()` do. Every failure is [`Status::Invalid`] except
    /// zone operations on a regular device ([`Status::NotSupported`]).
    pub fn validate(&self, bio: &Bio) -> Result<(), Status> {
        validate_bio(&self.geo, bio)
    }

    fn new_frag(&mut self, b: usize, bio: &Bio, bio_offset: u32, nr_sectors: u32, kind: Kind) -> usize {
        self.bios[b].remaining += 1;
        self.next_gen = self.next_gen.wrapping_add(1);
        let mut flags = bio.flags;
        if bio.op == Op::WriteZeroes && self.wzeroes_unmap_sectors == 0 {
            // Unmap is disabled (or the device cannot): the device must write zeroes.
            flags = flags | BioFlags::NOUNMAP;
        }
        self.frags.insert(Frag {
            bio: b,
            op: bio.op,
            kind,
            sector: bio.sector + u64::from(bio_offset),
            nr_sectors,
            bio_offset,
            flags,
            state: FragState::WaitTag,
            plug: None,
            append: bio.op == Op::ZoneAppend,
            generation: self.next_gen,
        })
    }

    /// READ, WRITE, WRITE_ZEROES, DISCARD: split at `max_sectors` and zone boundaries;
    /// sequential zone writes go through their plug, everything else straight to
    /// dispatch.
    fn submit_ranged(&mut self, b: usize, bio: &Bio) {
        let plugged = bio.op.is_zone_write() && self.geo.is_zoned() && self.cfg.policy.plugs();
        let limits = if bio.op == Op::WriteZeroes { self.wz_limits } else { self.limits };
        if limits.needs_split(bio.sector, bio.nr_sectors) {
            self.stats.splits += 1;
        }
        for (off, n) in limits.pieces(bio.sector, bio.nr_sectors) {
            let sector = bio.sector + u64::from(off);
            if plugged && !self.geo.zone_is_conv(self.geo.zone_no(sector)) {
                let f = self.new_frag(b, bio, off, n, Kind::ZoneWrite);
                self.plug_write(f);
            } else if self.cfg.policy == IssuePolicy::Zwl {
                let f = self.new_frag(b, bio, off, n, Kind::Zwl);
                self.zwl_submit(f);
            } else {
                let f = self.new_frag(b, bio, off, n, Kind::Free);
                self.dispatch(f);
            }
        }
    }

    /// ZONE_APPEND: emulated with a plugged write, or native.
    fn submit_append(&mut self, b: usize, bio: &Bio) {
        let passthrough = !self.cfg.policy.plugs();
        if self.geo.emulates_zone_append() {
            let f = self.new_frag(b, bio, 0, bio.nr_sectors, Kind::ZoneWrite);
            if passthrough {
                // Without a plug there is no write pointer to emulate the append at.
                self.end_frag(f, Err(Status::NotSupported));
                return;
            }
            self.stats.emulated_appends += 1;
            self.plug_write(f);
            return;
        }
        if passthrough {
            let f = self.new_frag(b, bio, 0, bio.nr_sectors, Kind::Free);
            self.dispatch(f);
            return;
        }
        let f = self.new_frag(b, bio, 0, bio.nr_sectors, Kind::NativeAppend);
        let z = self.geo.zone_no(bio.sector);
        let p = match self.plug_of(z) {
            Ok(p) => p,
            Err(status) => return self.refuse(f, status),
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
    fn submit_wp_op(&mut self, f: usize) {
        let z = self.geo.zone_no(self.frags[f].sector);
        let p = match self.plug_of(z) {
            Ok(p) => p,
            Err(_) => {
                // A READONLY or OFFLINE zone: the device gives the answer.
                self.frags[f].kind = Kind::Free;
                return self.dispatch(f);
            }
        };
        self.abort_queued_writes(p, Status::Aborted);
        self.enqueue(p, f);
    }

    /// RESET_ALL: aborts every waiting write, then waits until no zone write is out
    /// and executes alone. Zone writes submitted meanwhile wait behind it.
    fn submit_reset_all(&mut self, f: usize) {
        for p in self.plug_indices() {
            self.abort_queued_writes(p, Status::Aborted);
            self.maybe_release(p);
        }
        self.frags[f].state = FragState::Held;
        self.barriers.push_back(f);
        self.try_barrier();
    }

    fn plug_indices(&self) -> Vec<PlugIdx> {
        self.plugs.iter().map(|(p, _)| p).collect()
    }

    fn barrier_active(&self) -> bool {
        self.barrier_out || !self.barriers.is_empty()
    }

    fn try_barrier(&mut self) {
        if self.barrier_out || self.zone_writes > 0 || self.appends_out > 0 {
            return;
        }
        if let Some(f) = self.barriers.pop_front() {
            self.barrier_out = true;
            self.dispatch(f);
        }
    }

    // ------------------------------------------------------- zone write locking

    /// A fragment enters the zone write locking scheduler.
    fn zwl_submit(&mut self, f: usize) {
        let frag = &mut self.frags[f];
        frag.state = FragState::Sched;
        let write = frag.op.is_zone_write();
        let sector = frag.sector.0;
        self.zwl.as_mut().expect("zwl scheduler").admit(f, sector, write);
        self.zwl_pump();
    }

    /// Dispatches from the zone write locking scheduler while the device has tags.
    fn zwl_pump(&mut self) {
        while self.inflight < self.cfg.queue_depth {
            let geo = &self.geo;
            let frags = &self.frags;
            let zone_of = |sector: u64| {
                let z = geo.zone_no(Sector(sector));
                (geo.is_zoned() && !geo.zone_is_conv(z)).then_some(z.0)
            };
            let len_of = |f: usize| u64::from(frags[f].nr_sectors);
            let Some(f) = self.zwl.as_mut().expect("zwl scheduler").next(zone_of, len_of) else { break };
            self.issue(f);
        }
    }

    /// A zone write locking request completed: free its tag and zone lock, admit a
    /// waiter, dispatch more.
    fn zwl_done(&mut self, op: Op, sector: Sector) {
        let locked = (op.is_zone_write() && self.geo.is_zoned())
            .then(|| self.geo.zone_no(sector))
            .filter(|z| !self.geo.zone_is_conv(*z))
            .map(|z| z.0);
        if let Some(w) = self.zwl.as_mut().expect("zwl scheduler").done(locked) {
            let (sector, write) = (self.frags[w].sector.0, self.frags[w].op.is_zone_write());
            let admitted = self.zwl.as_mut().expect("zwl scheduler").admit(w, sector, write);
            assert!(admitted, "a freed tag must admit its waiter");
        }
        self.zwl_pump();
    }

    // ------------------------------------------------------------ attributes

    /// The queue attribute `zoned_qd1_writes`: 1 when one context issues every zone
    /// write (the single issuer), 0 otherwise, and always 0 on a regular device.
    pub fn zoned_qd1_writes(&self) -> u8 {
        u8::from(self.geo.is_zoned() && self.freeze.unwrap_or(self.cfg.policy).single_issuer())
    }

    /// Writes `zoned_qd1_writes`: 1 selects the single issuer, 0 per-zone plugging.
    /// As the kernel, the queue is frozen: new BIOs wait, everything in the engine
    /// drains under the current policy, then the policy switches and the waiting BIOs
    /// go in order. Nothing is lost or reordered. Refused on a regular device.
    pub fn set_zoned_qd1_writes(&mut self, value: u64) -> Result<(), AttrError> {
        if !self.geo.is_zoned() {
            return Err(AttrError::NotZoned);
        }
        let policy = match value {
            0 => IssuePolicy::Zwp,
            1 => IssuePolicy::Qd1,
            v => return Err(AttrError::BadValue(v)),
        };
        self.set_policy(policy);
        Ok(())
    }

    /// Switches the issue policy at run time, freezing the queue until it drains (see
    /// [`Engine::set_zoned_qd1_writes`]).
    pub fn set_policy(&mut self, policy: IssuePolicy) {
        if self.freeze.is_none() && policy == self.cfg.policy {
            return;
        }
        self.freeze = Some(policy);
        self.maybe_unfreeze();
    }

    /// The queue attribute `write_zeroes_unmap_max_bytes`: how large a WRITE_ZEROES
    /// the device may deallocate instead of writing; 0 when unmap is disabled or the
    /// device cannot unmap.
    pub fn write_zeroes_unmap_max_bytes(&self) -> u64 {
        u64::from(self.wzeroes_unmap_sectors) * SECTOR_SIZE
    }

    /// Writes `write_zeroes_unmap_max_bytes`: 0 disables unmapped write zeroes (every
    /// WRITE_ZEROES then carries NOUNMAP and the device writes zeroes), the hardware
    /// limit enables them again. As the kernel, other values are refused. Applies to
    /// BIOs submitted from now on.
    pub fn set_write_zeroes_unmap_max_bytes(&mut self, bytes: u64) -> Result<(), AttrError> {
        let hw = u64::from(self.geo.max_hw_wzeroes_unmap_sectors()) * SECTOR_SIZE;
        if bytes > hw {
            return Err(AttrError::AboveHardware { value: bytes, hw });
        }
        if bytes != 0 && bytes != hw {
            return Err(AttrError::BadUnmapLimit { value: bytes, hw });
        }
        self.wzeroes_unmap_sectors = (bytes / SECTOR_SIZE) as u32;
        Ok(())
    }

    /// How a WRITE_ZEROES submitted now makes its range read as zeroes.
    /// `nounmap`: the caller forbids deallocation (REQ_NOUNMAP).
    pub fn zeroing_method(&self, nounmap: bool) -> ZeroingMethod {
        if self.geo.max_write_zeroes_sectors() == 0 {
            ZeroingMethod::ZeroBuffers
        } else if nounmap || self.wzeroes_unmap_sectors == 0 {
            ZeroingMethod::WriteZeroes
        } else {
            ZeroingMethod::Unmap
        }
    }

    /// Whether an attribute change is waiting for the queue to drain.
    pub fn frozen(&self) -> bool {
        self.freeze.is_some()
    }

    fn maybe_unfreeze(&mut self) {
        if self.freeze.is_none() || !self.bios.is_empty() {
            return;
        }
        let policy = self.freeze.take().expect("checked");
        assert!(self.plugs.iter().all(|(_, p)| !p.in_use()), "plugs in use across a policy switch");
        assert!(self.issuer.is_empty() && self.zone_writes == 0 && self.appends_out == 0, "work across a switch");
        self.cfg.policy = policy;
        self.in_service = false;
        self.anticipating = None;
        self.zwl = (policy == IssuePolicy::Zwl).then(|| ZwlSched::new(zwl_tags(&self.cfg)));
        if !policy.plugs() {
            // Without plugs the host keeps no write pointers: forget partial zones.
            for p in self.plug_indices() {
                let z = self.plugs[p].zone;
                self.cond[z.idx()] = CondCache::Unknown;
                self.plugs.remove(p);
            }
        }
        let held: Vec<Bio> = self.frozen.drain(..).collect();
        for bio in held {
            self.submit(bio);
        }
    }

    // ---------------------------------------------------------------- zone plugs

    /// The plug of zone `z`, allocated if needed with its write pointer from the
    /// condition cache; a READONLY or OFFLINE zone gets none.
    fn plug_of(&mut self, z: ZoneNo) -> Result<PlugIdx, Status> {
        if let Some(p) = self.plugs.get(z) {
            return Ok(p);
        }
        let (wp_offset, known) = match self.cond[z.idx()] {
            CondCache::Empty => (0, true),
            CondCache::Full => (self.geo.zone_capacity(z), true),
            CondCache::Unknown => (0, false),
            CondCache::ReadOnly => return Err(Status::ZoneReadOnly),
            CondCache::Offline => return Err(Status::ZoneOffline),
            CondCache::NotWp => unreachable!("plug for conventional zone {z}"),
        };
        let p = self.plugs.insert(z, wp_offset);
        self.plugs[p].need_wp_update = !known;
        Ok(p)
    }

    fn refuse(&mut self, f: usize, status: Status) {
        self.stats.refused += 1;
        self.frags[f].plug = None;
        self.end_frag(f, Err(status));
    }

    /// A sequential zone write (or emulated append) enters its zone's plug.
    fn plug_write(&mut self, f: usize) {
        let z = self.geo.zone_no(self.frags[f].sector);
        let p = match self.plug_of(z) {
            Ok(p) => p,
            Err(status) => return self.refuse(f, status),
        };
        let plug = &self.plugs[p];
        if plug.busy || !plug.queue.is_empty() {
            self.stats.plugged += 1;
        }
        self.enqueue(p, f);
    }

    /// Puts `f` at the tail of plug `p` and lets the policy at it. `p` must not be
    /// used afterwards.
    fn enqueue(&mut self, p: PlugIdx, f: usize) {
        let frag = &mut self.frags[f];
        frag.plug = Some(p);
        frag.state = FragState::Plugged;
        self.plugs[p].queue.push_back(f);
        self.after_plug_change(p);
    }

    /// With report recovery, asks for a zone report when a write waits for an unknown
    /// write pointer. Never while anything of the zone is on the device: the answer
    /// could predate it.
    fn maybe_request_report(&mut self, p: PlugIdx) {
        let plug = &self.plugs[p];
        let front_is_write = plug.queue.front().is_some_and(|&f| self.frags[f].kind == Kind::ZoneWrite);
        let wanted = self.cfg.wp_recovery == WpRecovery::Report
            && plug.need_wp_update
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

    /// Whether a zone report now describes plug `p`'s zone after everything the host
    /// sent it: nothing of the zone on the device, no RESET_ALL out. A report is asked
    /// for, and trusted, only then.
    fn wp_reportable(&self, p: PlugIdx) -> bool {
        let plug = &self.plugs[p];
        !plug.busy && plug.appends_out == 0 && !self.barrier_out
    }

    /// What to do with fragment `f` at the front of plug `p`.
    fn front(&self, p: PlugIdx, f: usize) -> Front {
        let plug = &self.plugs[p];
        if self.barrier_active() || plug.busy {
            return Front::Wait;
        }
        match self.frags[f].kind {
            // An append needs no write pointer, only not to overtake what is before it.
            Kind::NativeAppend => Front::Go,
            Kind::WpOp if plug.appends_out == 0 => Front::Go,
            Kind::ZoneWrite if plug.appends_out == 0 && !plug.need_wp_update => Front::Go,
            Kind::ZoneWrite if plug.appends_out == 0 && self.cfg.wp_recovery == WpRecovery::Kernel => {
                // As the kernel: no write until the user reports the zone.
                Front::Refuse(Status::NeedWpUpdate)
            }
            Kind::WpOp | Kind::ZoneWrite => Front::Wait,
            k => unreachable!("{k:?} in a plug"),
        }
    }

    /// Takes off plug `p` what may go now, as far as it goes: releases it, or refuses
    /// it. Returns whether the plug's front still waits (false: the queue is empty or
    /// a zone write was released).
    fn drain_front(&mut self, p: PlugIdx) {
        while let Some(&f) = self.plugs[p].queue.front() {
            match self.front(p, f) {
                Front::Wait => break,
                Front::Refuse(status) => {
                    self.plugs[p].queue.pop_front();
                    self.refuse(f, status);
                }
                Front::Go => {
                    self.plugs[p].queue.pop_front();
                    self.release(p, f);
                    if self.cfg.policy.single_issuer() && self.zone_writes > 0 {
                        break;
                    }
                }
            }
        }
    }

    /// Per-zone plugging releases what plug `p` can release now; the single issuer
    /// lists the plug (at the tail) if it has work. Never frees a plug.
    fn schedule(&mut self, p: PlugIdx) {
        match self.cfg.policy {
            IssuePolicy::Zwp => self.drain_front(p),
            IssuePolicy::Qd1 | IssuePolicy::Batch => {
                let plug = &mut self.plugs[p];
                if !plug.listed && !plug.queue.is_empty() {
                    plug.listed = true;
                    plug.bypassed = 0;
                    self.issuer.push_back(p);
                }
            }
            IssuePolicy::Zwl | IssuePolicy::Passthrough => unreachable!("no plugs without plugging"),
        }
    }

    /// Takes plug `p` off the single issuer's list if it has nothing queued and
    /// nothing out: drained plugs leave the list (new work re-lists them at the tail).
    fn unlist_if_drained(&mut self, p: PlugIdx) {
        let plug = &mut self.plugs[p];
        if plug.listed && plug.queue.is_empty() && !plug.busy {
            plug.listed = false;
            if self.issuer.front() == Some(&p) {
                self.issuer.pop_front();
                self.in_service = false;
                let zone = self.plugs[p].zone;
                self.maybe_anticipate(zone);
            } else {
                self.issuer.retain(|&q| q != p);
            }
        }
    }

    fn run_issuer(&mut self) {
        if self.cfg.policy.single_issuer() {
            self.issuer_kick();
        }
    }

    /// The single issuer: while no zone write is out, take the next operation of the
    /// plug at the head of the list; a plug leaves the list once drained (or blocked,
    /// until what blocks it kicks it again).
    fn issuer_kick(&mut self) {
        while self.zone_writes == 0 && !self.barrier_active() {
            if self.issuer.is_empty() {
                break;
            }
            if let Some((zone, _)) = self.anticipating {
                // Only the anticipated zone may go; it continues its visit.
                let Some(i) = self.issuer.iter().position(|&q| self.plugs[q].zone == zone) else { break };
                self.anticipating = None;
                self.stats.anticipation_hits += 1;
                let q = self.issuer.remove(i).expect("index in range");
                // Every plug waiting is passed over once more.
                for &w in &self.issuer {
                    self.plugs[w].bypassed += 1;
                }
                self.issuer.push_front(q);
                self.in_service = true;
            }
            if !self.in_service {
                self.choose_next_plug();
            }
            let p = *self.issuer.front().expect("checked non-empty");
            self.drain_front(p);
            if self.zone_writes == 0 {
                // Drained, or blocked until what blocks it kicks it again.
                self.plugs[p].listed = false;
                self.issuer.pop_front();
                self.in_service = false;
                self.maybe_release(p);
            }
        }
    }

    /// Puts the plug the issuer drains next at the head of its list: the oldest
    /// (`qd1`), or for `batch` the one with the most sectors waiting, the nearest
    /// zone ahead of the last one visited among equals (a C-SCAN sweep: short seeks,
    /// every zone reached within one pass), unless the oldest has been passed over
    /// `batch_max_bypass` times.
    fn choose_next_plug(&mut self) {
        self.stats.issuer_visits += 1;
        self.in_service = true;
        if self.cfg.policy != IssuePolicy::Batch {
            return;
        }
        let max = self.cfg.batch_max_bypass;
        let best = match self.issuer.iter().position(|&p| self.plugs[p].bypassed >= max) {
            // A plug passed over too often goes first (the oldest such).
            Some(i) => i,
            None => {
                let nr_zones = u64::from(self.geo.nr_zones());
                let last = u64::from(self.last_visited);
                let key = |p: PlugIdx| -> (u64, std::cmp::Reverse<u64>) {
                    let waiting = self.plugs[p].queue.iter().map(|&f| u64::from(self.frags[f].nr_sectors)).sum();
                    let ahead = (u64::from(self.plugs[p].zone.0) + nr_zones - last) % nr_zones;
                    (waiting, std::cmp::Reverse(ahead))
                };
                (0..self.issuer.len()).max_by_key(|&i| key(self.issuer[i])).expect("non-empty list")
            }
        };
        for i in 0..best {
            let p = self.issuer[i];
            self.plugs[p].bypassed += 1;
        }
        if best != 0 {
            let p = self.issuer.remove(best).expect("index in range");
            self.issuer.push_front(p);
        }
        self.last_visited = self.plugs[self.issuer[0]].zone.0;
    }

    /// The batching issuer just drained `zone`'s plug by a completion: if other
    /// plugs wait, hold the device for the zone's next write a little (see
    /// `EngineConfig::batch_anticipate_ns`). Never during a barrier or a freeze,
    /// which wait for the device to drain, not for new writes, and never once a
    /// waiting plug has been passed over `batch_max_bypass` times: a write that
    /// extends the visit passes every waiting plug over once more.
    fn maybe_anticipate(&mut self, zone: ZoneNo) {
        let ns = self.cfg.batch_anticipate_ns;
        let max = self.cfg.batch_max_bypass;
        if self.cfg.policy != IssuePolicy::Batch
            || ns == 0
            || self.issuer.is_empty()
            || self.barrier_active()
            || self.freeze.is_some()
            || self.issuer.iter().any(|&w| self.plugs[w].bypassed >= max)
        {
            return;
        }
        self.anticipation_token += 1;
        let token = self.anticipation_token;
        self.anticipating = Some((zone, token));
        self.stats.anticipations += 1;
        self.actions.push_back(Action::Anticipate { token, ns });
    }

    /// The time asked for by [`Action::Anticipate`] with `token` has passed: if the
    /// issuer still waits for that zone, it moves on to the next plug.
    pub fn anticipation_expired(&mut self, token: u64) {
        if self.anticipating.is_some_and(|(_, t)| t == token) {
            self.anticipating = None;
            self.run_issuer();
            self.try_barrier();
        }
    }

    /// Sends fragment `f`, just taken off plug `p`, on its way to the device.
    fn release(&mut self, p: PlugIdx, f: usize) {
        match self.frags[f].kind {
            Kind::NativeAppend => {
                // From here the write pointer moves where the host cannot follow.
                self.plugs[p].need_wp_update = true;
                self.plugs[p].appends_out += 1;
                self.appends_out += 1;
                self.dispatch(f);
            }
            Kind::WpOp => {
                self.plugs[p].busy = true;
                self.zone_writes += 1;
                self.dispatch(f);
            }
            Kind::ZoneWrite => self.prepare_and_issue(p, f),
            k => unreachable!("{k:?} in a plug"),
        }
    }

    /// The kernel's `blk_zone_wplug_prepare_bio()`: check the write against
    /// `wp_offset` (or place an emulated append there), advance `wp_offset`, issue.
    /// A write that cannot succeed is failed here and never reaches the device.
    fn prepare_and_issue(&mut self, p: PlugIdx, f: usize) {
        let plug = &self.plugs[p];
        let z = plug.zone;
        let cap = self.geo.zone_capacity(z);
        let frag = &self.frags[f];
        let n = u64::from(frag.nr_sectors);
        let check = if plug.wp_offset >= cap {
            Err(Status::ZoneFull)
        } else if !frag.append && self.geo.offset_in_zone(frag.sector) != plug.wp_offset {
            Err(Status::Unaligned)
        } else if plug.wp_offset + n > cap {
            Err(Status::ZoneFull)
        } else {
            Ok(())
        };
        if let Err(status) = check {
            return self.refuse(f, status);
        }
        let at = self.geo.zone_start(z) + plug.wp_offset;
        let frag = &mut self.frags[f];
        if frag.append {
            // Zone append emulation: a write at the write pointer; the completion
            // reports this sector.
            frag.op = Op::Write;
            frag.sector = at;
        }
        let plug = &mut self.plugs[p];
        plug.wp_offset += n;
        plug.busy = true;
        self.zone_writes += 1;
        self.dispatch(f);
    }

    /// Fails every write waiting in plug `p` with `status`; resets, finishes and
    /// appends keep their place.
    fn abort_queued_writes(&mut self, p: PlugIdx, status: Status) {
        if self.plugs[p].queue.is_empty() {
            return;
        }
        let queue = std::mem::take(&mut self.plugs[p].queue);
        let (doomed, kept): (VecDeque<usize>, VecDeque<usize>) =
            queue.into_iter().partition(|&f| self.frags[f].kind == Kind::ZoneWrite);
        self.plugs[p].queue = kept;
        self.unlist_if_drained(p);
        for f in doomed {
            self.stats.aborted += 1;
            self.frags[f].plug = None;
            self.end_frag(f, Err(status));
        }
    }

    /// Releases plug `p` if nothing needs it: nothing queued, out or listed, no report
    /// pending, and the zone EMPTY or FULL (or its write pointer unknown, which the
    /// condition cache can say as well as the plug).
    fn maybe_release(&mut self, p: PlugIdx) {
        let plug = &self.plugs[p];
        if plug.in_use() || plug.report_pending {
            return;
        }
        let z = plug.zone;
        let c = if plug.need_wp_update {
            CondCache::Unknown
        } else if plug.wp_offset == 0 {
            CondCache::Empty
        } else if plug.wp_offset >= self.geo.zone_capacity(z) {
            CondCache::Full
        } else {
            return; // partially written: the plug is the record of the write pointer
        };
        self.cond[z.idx()] = c;
        self.plugs.remove(p);
    }

    // ------------------------------------------------------------------- dispatch

    fn dispatch(&mut self, f: usize) {
        if self.inflight < self.cfg.queue_depth {
            self.issue(f);
        } else {
            self.frags[f].state = FragState::WaitTag;
            self.wait_tag.push_back(f);
        }
    }

    fn issue(&mut self, f: usize) {
        let frag = &mut self.frags[f];
        frag.state = FragState::InFlight;
        self.inflight += 1;
        self.stats.requests += 1;
        let id = ReqId((u64::from(frag.generation) << 32) | f as u64);
        let user_data = self.bios[frag.bio].user_data;
        self.actions.push_back(Action::Issue(Request {
            id,
            op: frag.op,
            sector: frag.sector,
            nr_sectors: frag.nr_sectors,
            flags: frag.flags,
            user_data,
            bio_offset: frag.bio_offset,
        }));
    }

    // ----------------------------------------------------------------- completion

    /// The device finished request `id`: `Ok(sector)` with the sector it was executed
    /// at (for a native zone append, where the data landed), or the error status.
    ///
    /// Panics on an id that is not on the device: that is a driver bug.
    pub fn complete(&mut self, id: ReqId, result: Result<Sector, Status>) {
        let f = (id.0 & 0xffff_ffff) as usize;
        let frag = self.frags.get(f).filter(|fr| u64::from(fr.generation) == id.0 >> 32);
        let frag = frag.unwrap_or_else(|| panic!("completion of unknown request {id:?}"));
        assert_eq!(frag.state, FragState::InFlight, "completion of request {id:?} not in flight");
        let (kind, op, plug, sector) = (frag.kind, frag.op, frag.plug, frag.sector);
        self.inflight -= 1;
        self.end_frag(f, result);
        while self.inflight < self.cfg.queue_depth {
            let Some(next) = self.wait_tag.pop_front() else { break };
            self.issue(next);
        }
        let failed = result.is_err();
        match kind {
            Kind::ZoneWrite | Kind::WpOp => {
                let p = plug.expect("plugged operation without plug");
                self.zone_write_done(p, kind, op, failed);
            }
            Kind::NativeAppend => self.append_done(plug.expect("native append without plug")),
            Kind::ResetAll => self.barrier_done(failed),
            Kind::Zwl => self.zwl_done(op, sector),
            Kind::Free if self.zwl.is_some() => self.zwl_pump(),
            Kind::Free => {}
        }
        self.maybe_unfreeze();
    }

    /// A plugged write, reset or finish finished. A failed write loses the write
    /// pointer and dooms the writes behind it (the kernel's NEED_WP_UPDATE); a reset
    /// or finish that succeeded sets it exactly. Then the policy releases what is next.
    fn zone_write_done(&mut self, p: PlugIdx, kind: Kind, op: Op, failed: bool) {
        let z = self.plugs[p].zone;
        let plug = &mut self.plugs[p];
        assert!(plug.busy, "completion for idle plug of zone {z}");
        plug.busy = false;
        self.zone_writes -= 1;
        match (kind, failed) {
            (Kind::ZoneWrite, true) => {
                self.stats.write_errors += 1;
                self.plugs[p].need_wp_update = true;
                self.abort_queued_writes(p, Status::Aborted);
            }
            (Kind::WpOp, true) => self.plugs[p].need_wp_update = true,
            (Kind::WpOp, false) => {
                let plug = &mut self.plugs[p];
                plug.wp_offset = if op == Op::ZoneReset { 0 } else { self.geo.zone_capacity(z) };
                plug.need_wp_update = false;
            }
            _ => {}
        }
        self.after_plug_change(p);
    }

    fn append_done(&mut self, p: PlugIdx) {
        self.plugs[p].appends_out -= 1;
        self.appends_out -= 1;
        self.after_plug_change(p);
    }

    /// Something of plug `p` completed: ask for its write pointer if writes need it,
    /// release what can go, drop the plug if unused, let a waiting barrier through.
    /// `p` must not be used afterwards.
    fn after_plug_change(&mut self, p: PlugIdx) {
        self.maybe_request_report(p);
        self.schedule(p);
        self.unlist_if_drained(p);
        self.maybe_release(p);
        self.run_issuer();
        self.try_barrier();
    }

    /// A RESET_ALL finished: every sequential zone is EMPTY (or, if it failed, its
    /// write pointer is unknown). Zone writes held behind it go.
    fn barrier_done(&mut self, failed: bool) {
        assert!(self.barrier_out, "RESET_ALL completion without a barrier out");
        self.barrier_out = false;
        for z in self.geo.nr_conv()..self.geo.nr_zones() {
            let z = ZoneNo(z);
            if failed {
                self.forget_wp(z);
            } else if let Some(p) = self.plugs.get(z) {
                let plug = &mut self.plugs[p];
                plug.wp_offset = 0;
                plug.need_wp_update = false;
            } else if !matches!(self.cond[z.idx()], CondCache::ReadOnly | CondCache::Offline) {
                self.cond[z.idx()] = CondCache::Empty;
            }
        }
        self.try_barrier();
        let plugs = self.plug_indices();
        if !self.barrier_active() {
            for &p in &plugs {
                self.maybe_request_report(p);
                self.schedule(p);
            }
        }
        for p in plugs {
            self.maybe_release(p);
        }
        self.run_issuer();
    }

    fn forget_wp(&mut self, z: ZoneNo) {
        if let Some(p) = self.plugs.get(z) {
            self.plugs[p].need_wp_update = true;
        } else if !matches!(self.cond[z.idx()], CondCache::ReadOnly | CondCache::Offline) {
            self.cond[z.idx()] = CondCache::Unknown;
        }
    }

    fn end_frag(&mut self, f: usize, result: Result<Sector, Status>) {
        let frag = self.frags.remove(f);
        let slot = &mut self.bios[frag.bio];
        match result {
            Err(s) => {
                slot.status.get_or_insert(s);
            }
            // Native append: where the device put the data. Emulated append: the
            // sector of the write it became.
            Ok(sector) if frag.append => slot.result = sector,
            Ok(_) => {}
        }
        self.put_bio(frag.bio);
    }

    fn put_bio(&mut self, b: usize) {
        let slot = &mut self.bios[b];
        slot.remaining -= 1;
        if slot.remaining == 0 {
            let slot = self.bios.remove(b);
            let result = match slot.status {
                Some(s) => Err(s),
                None => Ok(slot.result),
            };
            self.complete_bio_now(slot.user_data, result);
        }
    }

    // ------------------------------------------------------------------ reports

    /// What the device says zone `info` looks like (an answer to
    /// [`Action::ReportZone`], or any zone report the user made). A plug waiting for
    /// its write pointer takes it from here and releases its held writes; a zone the
    /// host knows nothing of is learnt. A report is ignored where it may be older
    /// than an operation on the device, and never overrides what the host knows.
    pub fn zone_report(&mut self, info: &ZoneInfo) {
        if !self.geo.is_zoned() || info.ztype == ZoneType::Conventional {
            return;
        }
        let z = self.geo.zone_no(info.start);
        let Some(p) = self.plugs.get(z) else {
            self.learn_unplugged(z, info);
            return;
        };
        let plug = &mut self.plugs[p];
        plug.report_pending = false;
        let trusted = plug.need_wp_update && self.wp_reportable(p);
        if trusted {
            let plug = &mut self.plugs[p];
            match info.wp_offset() {
                Some(wp_offset) => {
                    plug.wp_offset = wp_offset.min(self.geo.zone_capacity(z));
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
                    self.cond[z.idx()] = c;
                    if !self.plugs[p].in_use() {
                        self.plugs.remove(p);
                        return;
                    }
                }
            }
        }
        self.after_plug_change(p);
    }

    fn learn_unplugged(&mut self, z: ZoneNo, info: &ZoneInfo) {
        let known = self.cond[z.idx()];
        match info.cond {
            ZoneCond::ReadOnly => self.cond[z.idx()] = CondCache::ReadOnly,
            ZoneCond::Offline => self.cond[z.idx()] = CondCache::Offline,
            _ if known != CondCache::Unknown || self.barrier_out => {}
            _ => {
                let wp_offset = info.wp_offset().expect("writable zone has a write pointer");
                let cap = self.geo.zone_capacity(z);
                self.cond[z.idx()] = match wp_offset {
                    0 => CondCache::Empty,
                    o if o >= cap => CondCache::Full,
                    o => {
                        self.plugs.insert(z, o);
                        CondCache::Empty // the plug describes the zone
                    }
                };
            }
        }
    }

    /// The driver could not report zone `z`: writes held for its write pointer fail
    /// with `status`; the write pointer stays unknown.
    pub fn zone_report_failed(&mut self, z: ZoneNo, status: Status) {
        if let Some(p) = self.plugs.get(z) {
            self.plugs[p].report_pending = false;
            if self.plugs[p].need_wp_update {
                self.abort_queued_writes(p, status);
            }
            self.after_plug_change(p);
        }
    }

    // --------------------------------------------------------------- invariants

    /// Checks the engine's internal invariants and panics on a violation. Costs
    /// O(plugs + requests); the simulator's checker calls it after every step.
    pub fn check_invariants(&self) {
        if self.anticipating.is_some() {
            // Only the batching issuer waits for a zone, and never with a zone write
            // out: the wait is for the next one.
            assert_eq!(self.cfg.policy, IssuePolicy::Batch, "anticipation under {:?}", self.cfg.policy);
            assert_eq!(self.zone_writes, 0, "anticipating with a zone write out");
        }
        let mut inflight = 0;
        let mut issued_of: std::collections::HashMap<PlugIdx, (u32, u32)> = Default::default();
        for (f, frag) in self.frags.iter() {
            match frag.state {
                FragState::InFlight => inflight += 1,
                FragState::WaitTag => {
                    assert!(self.wait_tag.contains(&f), "request {f} waits for a tag it is not queued for")
                }
                FragState::Held => assert!(self.barriers.contains(&f), "held fragment {f} lost"),
                FragState::Sched => assert!(self.zwl.is_some(), "fragment {f} in a ZWL scheduler that does not exist"),
                FragState::Plugged => {
                    let p = frag.plug.expect("plugged fragment without plug");
                    assert!(self.plugs[p].queue.contains(&f), "fragment {f} not in its plug's queue");
                }
            }
            if let (Some(p), FragState::InFlight | FragState::WaitTag) = (frag.plug, frag.state) {
                let e = issued_of.entry(p).or_default();
                if frag.kind == Kind::NativeAppend {
                    e.1 += 1;
                } else {
                    e.0 += 1;
                }
            }
        }
        assert_eq!(inflight, self.inflight, "in-flight count");
        assert!(self.inflight <= self.cfg.queue_depth, "more requests in flight than tags");
        let (mut zone_writes, mut appends) = (0, 0);
        for (p, plug) in self.plugs.iter() {
            let (issued, apps) = issued_of.get(&p).copied().unwrap_or((0, 0));
            assert_eq!(issued, u32::from(plug.busy), "zone {}: {issued} operations out, busy={}", plug.zone, plug.busy);
            assert_eq!(apps, plug.appends_out, "zone {}: appends out", plug.zone);
            zone_writes += issued;
            appends += apps;
            let cap = self.geo.zone_capacity(plug.zone);
            assert!(plug.wp_offset <= cap, "zone {}: wp_offset {} past capacity {cap}", plug.zone, plug.wp_offset);
            let idle = !plug.in_use() && !plug.report_pending;
            let releasable = plug.need_wp_update || plug.wp_offset == 0 || plug.wp_offset >= cap;
            assert!(!(idle && releasable), "plug of idle EMPTY/FULL zone {} outlived its use: {plug:?}", plug.zone);
            assert_eq!(plug.listed, self.issuer.contains(&p), "zone {}: listed flag", plug.zone);
        }
        assert_eq!(zone_writes, self.zone_writes, "zone writes out");
        assert_eq!(appends, self.appends_out, "native appends out");
        if self.barrier_out {
            assert_eq!(self.zone_writes, 0, "zone writes out beside a RESET_ALL");
        }
        if self.cfg.policy.single_issuer() {
            assert!(self.zone_writes <= 1, "single issuer with {} zone writes out", self.zone_writes);
        }
        if let Some(z) = &self.zwl {
            let out = self.frags.iter().filter(|(_, fr)| fr.kind == Kind::Zwl && fr.state != FragState::Sched).count();
            let held = self.frags.iter().filter(|(_, fr)| fr.state == FragState::Sched).count();
            let (queued, waiting) = z.queued();
            assert_eq!(z.tags_used() as usize, out + queued, "ZWL tags: in scheduler + dispatched");
            assert_eq!(held, queued + waiting, "ZWL fragments lost");
        }
    }
}

/// Checks a BIO against a device geometry, as `submit_bio_noacct()` and
/// `blk_check_zone_append()` do: what [`Engine::validate`] checks, for callers that
/// submit to a device without an engine of its own (a stacked, bio-based device).
pub fn validate_bio(geo: &Geometry, bio: &Bio) -> Result<(), Status> {
    if bio.op == Op::Flush {
        return if bio.nr_sectors == 0 { Ok(()) } else { Err(Status::Invalid) };
    }
    if bio.op.is_zone_mgmt() || bio.op == Op::ZoneAppend {
        if !geo.is_zoned() {
            return Err(Status::NotSupported);
        }
        if bio.op == Op::ZoneResetAll {
            return Ok(());
        }
        if !geo.is_zone_start(bio.sector) || geo.zone_is_conv(geo.zone_no(bio.sector)) {
            return Err(Status::Invalid);
        }
    }
    if bio.op.is_zone_mgmt() {
        return if bio.nr_sectors == 0 { Ok(()) } else { Err(Status::Invalid) };
    }
    let n = u64::from(bio.nr_sectors);
    let in_range = bio.sector.0.checked_add(n).is_some_and(|end| end <= geo.nr_sectors());
    if n == 0 || !in_range || !geo.is_block_aligned(bio.sector, n) {
        return Err(Status::Invalid);
    }
    if bio.op == Op::ZoneAppend {
        let z = geo.zone_no(bio.sector);
        if bio.nr_sectors > geo.append_limit_sectors() || n > geo.zone_capacity(z) {
            return Err(Status::Invalid);
        }
    }
    if bio.op == Op::Discard && geo.is_zoned() && !geo.zone_is_conv(geo.zone_no(bio.end() - 1)) {
        return Err(Status::Invalid);
    }
    if bio.op == Op::WriteZeroes && geo.max_write_zeroes_sectors() == 0 {
        // As submit_bio_noacct(): the caller falls back to writing zero buffers.
        return Err(Status::NotSupported);
    }
    Ok(())
}
