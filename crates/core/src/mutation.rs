//! Deliberate bugs for the mutation check of `zblk vopr` (docs/vopr.md): each is a
//! known way to get zone write plugging wrong, planted behind a switch so that the
//! simulator's checks can be shown to catch it.
//!
//! Without the `mutations` feature, [`on`] is a constant `false` and every planted
//! bug compiles away. With it, the active mutation is a per-thread setting (tests
//! and `zblk vopr` run seeds on several threads at once), off unless [`set`] says.

/// A planted bug. See docs/vopr.md for what each breaks and how it is caught.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Mutation {
    /// A plug releases its next write while the previous one is still on the device.
    TwoWritesReleased,
    /// An emulated zone append takes its sector when it enters the plug, before the
    /// writes ahead of it have moved the plug's `wp_offset`.
    AppendSectorEarly,
    /// The device's active-zone limit lets one zone too many become active.
    ActiveLimitOffByOne,
    /// RESET and FINISH leave the writes waiting in the plug queued ahead of them.
    ResetKeepsPlugged,
    /// The device's implicit close takes the most recently opened implicitly open
    /// zone instead of null_blk's round-robin choice (which is closer to the
    /// oldest).
    ImplicitCloseWrongZone,
    /// A stacked device puts split remainders at the tail of the submission list.
    SplitRemainderTail,
    /// FLUSH is acknowledged at once, without reaching the device.
    FlushAckEarly,
    /// RESET_ALL goes to the device without waiting for the zone writes out.
    ResetAllNoWait,
    /// A BIO is split one logical block past `max_sectors`: a piece larger than the
    /// device takes.
    PieceOverMaxSectors,
    /// WRITE_ZEROES is split at `max_sectors` instead of its own limit
    /// (`write_zeroes_max_bytes`), which may be smaller.
    WriteZeroesOverLimit,
    /// A WRITE_ZEROES request loses its BIO's NOUNMAP: the device may unmap what
    /// the user asked to have written as zeroes.
    NounmapDropped,
    /// `write_zeroes_unmap_max_bytes` 0 (unmap disabled, or a device that cannot)
    /// no longer adds NOUNMAP to WRITE_ZEROES.
    NounmapNotForced,
    /// A successful RESET or FINISH after a write error leaves the zone's write
    /// pointer unknown (NEED_WP_UPDATE) instead of setting it.
    RecoveryIgnoresReset,
    /// Zone write pipelining acknowledges a write as soon as the device completes
    /// it, before the writes ahead of it in its zone.
    PipeAckOutOfOrder,
    /// Zone write pipelining leaves the write pointer past a failed write (where
    /// the writes after it moved it) and trusts it, instead of going back to the
    /// failed write's start and asking the device.
    PipeWpPastFailed,
    /// Zone write pipelining fails only the write that failed on the device: the
    /// writes after it in its zone, already on the device, are acknowledged with
    /// what the device answered them (the write pointer still goes back).
    PipeFailureSpared,
    /// At a restart after a power loss, the engine rebuilt for a disk takes, for a
    /// zone with writes (or a reset or finish) on the device when the power failed,
    /// the write pointer they would leave (as if every one of them had reached the
    /// medium) instead of the one the zone report gives.
    RestartTrustsInFlight,
    /// An image records, at a flush, a zone's write pointer past writes still in
    /// flight (the accepted write pointer instead of the completed one): a power
    /// cut then leaves a hole under the durable write pointer.
    FlushCoversHole,
    /// A plugged write aborted (an earlier write of its zone failed, or a reset or
    /// finish of its zone came while it waited) is told to its user as EAGAIN, not
    /// EIO: the status is right, its errno (`Status::errno`) wrong, and a user
    /// retries a write that cannot succeed.
    AbortedAsEagain,
    /// The set-up of a vopr seed (drawing its device or stack, building the
    /// simulation) panics, for one seed in three: not a bug of the block layer but of
    /// the checker's harness, to show that such a seed is reported as its own
    /// failure and the run goes on.
    SeedSetupPanics,
    /// The single issuer moves to the next listed plug after every operation it
    /// issues (round robin between the zones) instead of draining the plug at the
    /// head of its list. Every write is still valid: only the order in which the
    /// device receives them tells, which the comparison with the kernel's single
    /// issuer in the Linux 7.3 VM sees (crates/cli/tests/seeds_vm73.rs).
    IssuerOnePerVisit,
    /// An image's recovery counts the commit the live header announces as complete
    /// after a restart, though its table may never have been written (a power cut
    /// between the announcement and the table's sync): the newest durable table
    /// looks older than a commit that happened, and a sound image is refused for
    /// writing.
    AnnouncedAsComplete,
    /// An image's recovery after an unclean stop leaves what the file holds past
    /// each recovered write pointer (unflushed writes dropped, a write in flight)
    /// instead of discarding it, as it says it does.
    StaleTailKept,
    /// A write's or append's failure reaches its BIO as EIO (BLK_STS_IOERR)
    /// whatever the device answered: the open and active limits' ETOOMANYREFS and
    /// EOVERFLOW are lost on the way, and a file system cannot tell a zone resource
    /// limit from a media error.
    DeviceStatusLost,
    /// Zone write pipelining lets a FUA write join the writes of its zone on the
    /// device instead of waiting for them: an image makes it durable with the zone's
    /// write pointer as it stands then, below the writes still out, so a power cut
    /// after its acknowledgement loses it.
    FuaJoinsPipeline,
    /// The runtime's io_uring completion thread panics under the engine lock when it
    /// has reaped a completion, as an engine assertion fires there: the process must
    /// stop with the assertion's message (fail-stop, docs/ARCHITECTURE.md), not hang.
    PanicOnCompletion,
    /// A runtime worker thread panics under the engine lock when it takes a request,
    /// as a device or engine assertion fires there.
    PanicOnWorker,
    /// A ublk queue's thread of `zblk serve` panics when the kernel brings it a
    /// request: the server stops, and the device waits for `zblk serve --recover`.
    PanicOnServeQueue,
    /// A ublk queue of `zblk serve` on batched commands leaves one request out of a
    /// commit of several: the kernel never hears of it, and its submitter waits for
    /// ever (or until its own timeout).
    CommitDropsOne,
}

impl Mutation {
    /// Every mutation.
    pub const ALL: [Mutation; 29] = [
        Mutation::TwoWritesReleased,
        Mutation::AppendSectorEarly,
        Mutation::ActiveLimitOffByOne,
        Mutation::ResetKeepsPlugged,
        Mutation::ImplicitCloseWrongZone,
        Mutation::SplitRemainderTail,
        Mutation::FlushAckEarly,
        Mutation::ResetAllNoWait,
        Mutation::PieceOverMaxSectors,
        Mutation::WriteZeroesOverLimit,
        Mutation::NounmapDropped,
        Mutation::NounmapNotForced,
        Mutation::RecoveryIgnoresReset,
        Mutation::PipeAckOutOfOrder,
        Mutation::PipeWpPastFailed,
        Mutation::PipeFailureSpared,
        Mutation::RestartTrustsInFlight,
        Mutation::FlushCoversHole,
        Mutation::AbortedAsEagain,
        Mutation::SeedSetupPanics,
        Mutation::IssuerOnePerVisit,
        Mutation::AnnouncedAsComplete,
        Mutation::StaleTailKept,
        Mutation::DeviceStatusLost,
        Mutation::FuaJoinsPipeline,
        Mutation::PanicOnCompletion,
        Mutation::PanicOnWorker,
        Mutation::PanicOnServeQueue,
        Mutation::CommitDropsOne,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutation::TwoWritesReleased => "two-writes-released",
            Mutation::AppendSectorEarly => "append-sector-early",
            Mutation::ActiveLimitOffByOne => "active-limit-off-by-one",
            Mutation::ResetKeepsPlugged => "reset-keeps-plugged",
            Mutation::ImplicitCloseWrongZone => "implicit-close-wrong-zone",
            Mutation::SplitRemainderTail => "split-remainder-tail",
            Mutation::FlushAckEarly => "flush-ack-early",
            Mutation::ResetAllNoWait => "reset-all-no-wait",
            Mutation::PieceOverMaxSectors => "piece-over-max-sectors",
            Mutation::WriteZeroesOverLimit => "write-zeroes-over-limit",
            Mutation::NounmapDropped => "nounmap-dropped",
            Mutation::NounmapNotForced => "nounmap-not-forced",
            Mutation::RecoveryIgnoresReset => "recovery-ignores-reset",
            Mutation::PipeAckOutOfOrder => "pipe-ack-out-of-order",
            Mutation::PipeWpPastFailed => "pipe-wp-past-failed",
            Mutation::PipeFailureSpared => "pipe-failure-spared",
            Mutation::RestartTrustsInFlight => "restart-trusts-in-flight",
            Mutation::FlushCoversHole => "flush-covers-hole",
            Mutation::AbortedAsEagain => "aborted-as-eagain",
            Mutation::SeedSetupPanics => "seed-setup-panics",
            Mutation::IssuerOnePerVisit => "issuer-one-per-visit",
            Mutation::AnnouncedAsComplete => "announced-as-complete",
            Mutation::StaleTailKept => "stale-tail-kept",
            Mutation::DeviceStatusLost => "device-status-lost",
            Mutation::FuaJoinsPipeline => "fua-joins-pipeline",
            Mutation::PanicOnCompletion => "panic-on-completion",
            Mutation::PanicOnWorker => "panic-on-worker",
            Mutation::PanicOnServeQueue => "panic-on-serve-queue",
            Mutation::CommitDropsOne => "commit-drops-one",
        }
    }

    /// Whether it plants a bug in zone write pipelining or in an image's durable
    /// state: the simulator meets the first only on its disks that keep a zone's
    /// writes in order (a part of the seeds), the runtime over images
    /// (`zblk vopr --runtime`, the image's crash tests) meets both.
    pub fn pipelining(self) -> bool {
        matches!(
            self,
            Mutation::PipeAckOutOfOrder
                | Mutation::PipeWpPastFailed
                | Mutation::PipeFailureSpared
                | Mutation::FlushCoversHole
                | Mutation::FuaJoinsPipeline
        )
    }

    /// Whether only the kernel meets it: an order of valid writes, which a comparison
    /// with the kernel's sees, or a request a served device never completes, which
    /// the kernel's submitter waits for. The simulator's checks and `zblk vopr` do not
    /// look for it.
    pub fn kernel_only(self) -> bool {
        matches!(self, Mutation::IssuerOnePerVisit | Mutation::CommitDropsOne)
    }

    /// Whether only an image meets it: the simulator has no image.
    pub fn image_only(self) -> bool {
        matches!(
            self,
            Mutation::FlushCoversHole
                | Mutation::AnnouncedAsComplete
                | Mutation::StaleTailKept
                | Mutation::FuaJoinsPipeline
        )
    }

    /// Whether it plants a bug in the checker's harness rather than in what the
    /// checks look at: nothing is there to catch, only a seed to report.
    pub fn harness_only(self) -> bool {
        self == Mutation::SeedSetupPanics
    }

    /// Whether it plants a panic on one of the threads of a runtime or a server, for
    /// the fail-stop tests (the process must end, not hang): no check catches it,
    /// the process's end is the point.
    pub fn planted_panic(self) -> bool {
        matches!(self, Mutation::PanicOnCompletion | Mutation::PanicOnWorker | Mutation::PanicOnServeQueue)
    }

    /// The mutation named `name`.
    pub fn parse(name: &str) -> Option<Mutation> {
        Mutation::ALL.into_iter().find(|m| m.name() == name)
    }
}

#[cfg(feature = "mutations")]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutation>> = const { std::cell::Cell::new(None) };
}

/// The mutation active on every thread ([`set_global`]), as its index in
/// [`Mutation::ALL`], or `u8::MAX`.
#[cfg(feature = "mutations")]
static GLOBAL: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(u8::MAX);

/// Whether the planted bug `m` is active on this thread.
#[cfg(feature = "mutations")]
#[inline]
pub fn on(m: Mutation) -> bool {
    ACTIVE.with(|a| a.get() == Some(m)) || GLOBAL.load(std::sync::atomic::Ordering::Relaxed) == m as u8
}

/// Activates `m` (or none) on every thread of the process: for the runtime, whose
/// engine and device run on whichever thread submits or completes. A test binary
/// that uses it must not run other tests beside it.
#[cfg(feature = "mutations")]
pub fn set_global(m: Option<Mutation>) {
    GLOBAL.store(m.map_or(u8::MAX, |m| m as u8), std::sync::atomic::Ordering::Relaxed);
}

/// Whether the planted bug `m` is active: never, without the `mutations` feature.
#[cfg(not(feature = "mutations"))]
#[inline(always)]
pub const fn on(_m: Mutation) -> bool {
    false
}

/// Without the `mutations` feature there is nothing to activate: only `None` is
/// accepted (check [`AVAILABLE`] first).
#[cfg(not(feature = "mutations"))]
pub fn set_global(m: Option<Mutation>) {
    assert!(m.is_none(), "planting {m:?} needs the `mutations` feature");
}

/// Activates `m` (or none) on this thread.
#[cfg(feature = "mutations")]
pub fn set(m: Option<Mutation>) {
    ACTIVE.with(|a| a.set(m));
}

/// Without the `mutations` feature there is nothing to activate: only `None` is
/// accepted (check [`AVAILABLE`] first).
#[cfg(not(feature = "mutations"))]
pub fn set(m: Option<Mutation>) {
    assert!(m.is_none(), "planting {m:?} needs the `mutations` feature");
}

/// Whether this build can plant bugs (the `mutations` feature).
pub const AVAILABLE: bool = cfg!(feature = "mutations");
