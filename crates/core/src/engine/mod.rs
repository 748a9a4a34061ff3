//! The engine: zblk's zoned block layer for one device, as a state machine.
//!
//! Inputs: [`Engine::submit`] (a BIO from a submitter), [`Engine::complete`] (the
//! device finished a request), [`Engine::zone_report`] (what the device says a zone
//! looks like), [`Engine::anticipation_expired`] (a wait the engine asked for is
//! over), attribute writes. Outputs, drained with [`Engine::poll_action`]: issue a
//! request to the device, complete a BIO to its submitter, report a zone, start a
//! timer. No clock, no thread, no I/O: the simulator and the real runtime drive the
//! same engine. `docs/ARCHITECTURE.md` states the call-order contract.
//!
//! The engine is split by concern, as the kernel spreads the same work over
//! blk-core, blk-mq, blk-zoned and the I/O schedulers:
//!
//! | file | concern | kernel |
//! |---|---|---|
//! | `submit.rs` | validation, splitting, routing | `submit_bio_noacct()`, `bio_split_to_limits()` |
//! | `bios.rs` | BIOs, fragments, typed ids | `struct bio`, `bio_chain()` |
//! | `plugs.rs` | zone write plugs, `wp_offset`, append emulation, the condition cache | `blk_zone_wplug_*` in blk-zoned.c |
//! | `pipe.rs` | zone write pipelining: several writes per zone out, acknowledged in zone order | write pipelining for devices that keep order (UFS) |
//! | `policy/` | when plugged operations go: per-zone, single issuer, batching, zone write locking, passthrough | blk-zoned.c's issuer, mq-deadline |
//! | `dispatch.rs` | device tags, issue, completion | blk-mq dispatch, `blk_mq_end_request()` |
//! | `barrier.rs` | RESET_ALL | `blk_zone_wplug_handle_reset_all()` |
//! | `recovery.rs` | write pointer recovery, zone reports | `disk_zone_wplug_sync_wp_offset()` |
//! | `attrs.rs` | `zoned_qd1_writes`, write zeroes limits, queue freeze | queue sysfs, `blk_mq_freeze_queue()` |
//! | `check.rs` | invariants | |
//!
//! `Queue` holds everything but the issue policy; the policy (one type per policy,
//! behind `policy::Policy`) owns its own state and never gets the queue itself: it
//! acts on it through a `policy::PolicyCtx`, which shows it a few facts and the
//! queue's operations.

mod attrs;
mod barrier;
mod bios;
mod check;
mod dispatch;
mod pipe;
mod plugs;
mod policy;
mod recovery;
mod submit;

#[cfg(test)]
mod pipe_scenarios;
#[cfg(test)]
mod scenarios;

pub use crate::split::SplitLimits;
pub use attrs::{AttrError, MAX_ZEROOUT_BIO_SECTORS, ZeroingMethod};
pub use policy::{IssuePolicy, POLICIES, PolicyInfo, PolicyTraits, ZoneWrites};
pub use submit::validate_bio;

use crate::bio::{Bio, Request, Status};
use crate::geometry::Geometry;
use crate::split::SplitLimits as Limits;
use crate::units::ZoneNo;
use crate::zone::{ZoneCond, ZoneInfo, ZoneType};
use barrier::Barrier;
use bios::{BioTable, FragTable};
use dispatch::Tags;
use plugs::{CondCache, PlugId, PlugTable};
use std::collections::VecDeque;

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
    /// the batch instead of costing a head switch. See [`Action::Anticipate`]. The
    /// issuer gives it up while fewer than one anticipation in eight is met (but
    /// for one chance in eight, to measure again).
    pub batch_anticipate_ns: u64,
    /// The pipelining policy: zone writes of one zone out at once (0: as many as
    /// `queue_depth`). See `engine/pipe.rs`.
    #[serde(default)]
    pub pipeline_depth: u32,
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
            pipeline_depth: 0,
        }
    }
}

/// What the engine asks its driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this request to the device, then call [`Engine::complete`] with its result.
    Issue(Request),
    /// This BIO is done: hand the completion to its submitter.
    Complete(crate::bio::Completion),
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

/// The engine's state apart from the issue policy: the request queue and the disk's
/// zone state, spread over the files named after each concern. Its fields are
/// private to `engine/`; policies never get it, only a `policy::PolicyCtx` over it
/// (`list`, `drain_front`, `dispatch`, `anticipate`, ...: see `policy/ctx.rs`).
#[derive(Debug)]
pub(crate) struct Queue {
    geo: Geometry,
    cfg: EngineConfig,
    limits: Limits,
    /// WRITE_ZEROES is split at `write_zeroes_max_bytes` instead of `max_sectors`.
    wz_limits: Limits,
    /// The user's `write_zeroes_unmap_max_bytes`, in sectors: 0 (unmap disabled) or
    /// the hardware limit.
    wzeroes_unmap_sectors: u32,
    /// Per zone, what the host knows of a sequential zone without a plug.
    cond: Vec<CondCache>,
    plugs: PlugTable,
    bios: BioTable,
    frags: FragTable,
    tags: Tags,
    barrier: Barrier,
    /// A policy change waiting for the queue to drain (the kernel freezes the
    /// queue): the policy to switch to.
    freeze: Option<IssuePolicy>,
    /// BIOs submitted while frozen, in order.
    frozen: VecDeque<Bio>,
    /// The last anticipation token handed out (kept across policy switches, so that
    /// a stale timer never matches a new anticipation).
    anticipation_token: u64,
    /// What the policy allows ([`PolicyTraits::of`] the configuration), kept here
    /// because every zone write and completion asks. Set with the policy.
    traits: PolicyTraits,
    /// The engine checks its invariants itself (`check.rs`).
    self_check: bool,
    /// Inputs since the engine last checked its invariants.
    inputs_unchecked: u64,
    /// `ZBLK_CHECK_INVARIANTS=1` (read once per process): every invariant after
    /// every input.
    check_every_input: bool,
    actions: VecDeque<Action>,
    stats: EngineStats,
}

impl Queue {
    /// Asks the driver to call back after `ns` ([`Action::Anticipate`], with a
    /// fresh token, which it returns): the batching issuer waits for a zone's next
    /// write that long before it moves the head elsewhere.
    pub(crate) fn anticipate(&mut self, ns: u64) -> u64 {
        self.anticipation_token += 1;
        let token = self.anticipation_token;
        self.stats.anticipations += 1;
        self.actions.push_back(Action::Anticipate { token, ns });
        token
    }

    /// Counts an anticipated write that came before its time was over.
    pub(crate) fn count_anticipation_hit(&mut self) {
        self.stats.anticipation_hits += 1;
    }

    /// Counts a visit of the single issuer to a plug (a head switch on a disk).
    pub(crate) fn count_issuer_visit(&mut self) {
        self.stats.issuer_visits += 1;
    }
}

/// zblk's zoned block layer, sans I/O. See the module documentation.
#[derive(Debug)]
pub struct Engine {
    q: Queue,
    policy: policy::AnyPolicy,
    /// The policy `zoned_qd1_writes` 0 selects ([`attrs::qd1_off`]).
    qd1_off: IssuePolicy,
}

impl Engine {
    /// An engine for a device whose zones are as `zones` says (a full zone report, as
    /// the kernel's revalidation reads at start-up; empty for a regular device).
    /// Partially written zones get a plug holding their write pointer.
    pub fn new(geo: &Geometry, cfg: EngineConfig, zones: &[ZoneInfo]) -> Engine {
        assert!(cfg.queue_depth > 0, "queue_depth must be at least 1");
        assert_eq!(zones.len(), geo.nr_zones() as usize, "the zone report must cover every zone");
        let mut q = Queue {
            geo: geo.clone(),
            cfg,
            limits: Limits::of(geo),
            wz_limits: Limits::of_write_zeroes(geo),
            wzeroes_unmap_sectors: geo.max_hw_wzeroes_unmap_sectors(),
            cond: Vec::with_capacity(zones.len()),
            plugs: PlugTable::default(),
            bios: BioTable::default(),
            frags: FragTable::default(),
            tags: Tags::default(),
            barrier: Barrier::default(),
            freeze: None,
            frozen: VecDeque::new(),
            anticipation_token: 0,
            traits: PolicyTraits::of(&cfg),
            self_check: true,
            inputs_unchecked: 0,
            check_every_input: check::every_input(),
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
                // A policy that does not plug (zone write locking, passthrough)
                // follows no write pointer: a plug holding one would go stale at
                // the next write. Its zone locks start from nothing, as after the
                // writes it issued since start-up.
                _ if !cfg.policy.plugs() => CondCache::Empty,
                _ => {
                    q.plugs.insert(zno, info.wp.since(info.start), q.geo.zone_capacity(zno));
                    CondCache::Plugged
                }
            };
            q.cond.push(c);
        }
        let policy = policy::build(&q.cfg);
        let qd1_off = attrs::qd1_off(q.traits, IssuePolicy::selected_by_zoned_qd1_writes(false));
        Engine { q, policy, qd1_off }
    }

    /// An engine for a device in its initial state: every sequential zone EMPTY.
    pub fn new_empty(geo: &Geometry, cfg: EngineConfig) -> Engine {
        let zones = if geo.is_zoned() { crate::zone::ZoneSet::new(geo).zones().to_vec() } else { Vec::new() };
        Engine::new(geo, cfg, &zones)
    }

    /// The geometry the engine validates against.
    pub fn geometry(&self) -> &Geometry {
        &self.q.geo
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.q.cfg
    }

    /// What the running policy allows: writes in flight per zone, acknowledgement in
    /// zone order, a single issuer, plugging. Computed when the policy is set (at
    /// construction, and when a policy switch completes after its freeze), so that
    /// callers check what the policy allows instead of which policy runs.
    pub fn policy_traits(&self) -> PolicyTraits {
        self.q.traits
    }

    /// Counters.
    pub fn stats(&self) -> EngineStats {
        let q = &self.q;
        EngineStats { plugs_allocated: q.plugs.allocated, plugs_peak: q.plugs.peak as u64, ..q.stats }
    }

    /// The next thing to do, if any. Drain it after every input.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.q.actions.pop_front()
    }

    /// Whether actions are waiting.
    pub fn has_actions(&self) -> bool {
        !self.q.actions.is_empty()
    }

    /// Requests on the device.
    pub fn inflight(&self) -> u32 {
        self.q.tags.inflight
    }

    /// BIOs inside the engine (not completed yet).
    pub fn bios_in_engine(&self) -> usize {
        self.q.bios.len()
    }

    /// Number of zone write plugs alive.
    pub fn plug_count(&self) -> usize {
        self.q.plugs.len()
    }

    fn view(&self, p: PlugId) -> PlugView {
        let plug = &self.q.plugs[p];
        PlugView {
            zone: plug.zone,
            wp_offset: plug.wp_offset,
            queued: plug.queue.len(),
            busy: plug.busy || plug.appends_out > 0 || !plug.pipe.is_empty(),
            need_wp_update: plug.need_wp_update,
            listed: plug.listed,
            report_pending: plug.report_pending,
        }
    }

    /// All plugs, for checkers.
    pub fn plugs(&self) -> impl Iterator<Item = PlugView> + '_ {
        self.q.plugs.iter().map(|(p, _)| self.view(p))
    }

    /// The plug of zone `z`, if it has one.
    pub fn plug(&self, z: ZoneNo) -> Option<PlugView> {
        self.q.plugs.get(z).map(|p| self.view(p))
    }

    /// The time asked for by [`Action::Anticipate`] with `token` has passed: if the
    /// issuer still waits for that zone, it moves on to the next plug.
    pub fn anticipation_expired(&mut self, token: u64) {
        if self.policy.anticipation_expired(&mut self.q, token) {
            self.policy.kick(&mut self.q);
            self.q.try_barrier();
        }
        self.unfreeze_if_drained();
        self.after_input();
    }

    /// Something of plug `p` changed (an operation joined it or completed, its write
    /// pointer was re-synchronised): ask for its write pointer if writes need it, let
    /// the policy release what can go, drop the plug if unused, let a waiting barrier
    /// through. `p` must not be used afterwards.
    fn after_plug_change(&mut self, p: PlugId) {
        // A policy that treats plugs independently only drains the plug's front, keeps
        // no list to update and has nothing to kick: the policy is not asked at all,
        // three calls saved on every completion.
        if self.q.traits.independent_plugs {
            // One look at the plug for what `maybe_request_report` and `drain_front`
            // ask first (asking for a report changes neither answer).
            let plug = &self.q.plugs[p];
            let (wp_unknown, queued) = (plug.need_wp_update, !plug.queue.is_empty());
            if wp_unknown {
                self.q.request_report_if_wanted(p);
            }
            if queued {
                self.q.drain_queue(p, plugs::NO_CAP);
            }
            self.q.maybe_release(p);
        } else {
            self.q.maybe_request_report(p);
            self.policy.plug_changed(&mut self.q, p);
            self.policy.plug_drained(&mut self.q, p);
            self.q.maybe_release(p);
            self.policy.kick(&mut self.q);
        }
        self.q.try_barrier();
    }

    /// Fails every write waiting in plug `p` with `status`; resets, finishes and
    /// appends keep their place. The policy sees the plug drained before the writes
    /// complete. Rare (a failed write, a reset or finish racing writes): kept out of
    /// the completion path that may call it.
    #[cold]
    fn abort_queued_writes(&mut self, p: PlugId, status: Status) {
        if self.q.plugs[p].queue.is_empty() {
            return;
        }
        let doomed = self.q.take_queued_writes(p);
        self.policy.plug_drained(&mut self.q, p);
        self.q.fail_aborted(doomed, status);
    }
}
