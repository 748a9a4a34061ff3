//! Deliberate bugs in the log, planted behind a switch so that its tests can show
//! the simulation catches them (tests/sim.rs, docs/zlog.md "Tests").
//!
//! Without the `planted` feature, [`on`] is a constant `false` and every planted
//! bug compiles away. With it, the planted bug is a per-thread setting (tests run
//! on several threads at once; a simulation runs on one), off unless `set` says (with the feature).

/// A planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// [`crate::Log::flush`] and [`crate::Log::flush_async`] return at once without a
    /// FLUSH: the records appended before it are acknowledged durable while they
    /// may still be in the device's volatile cache.
    FlushNotIssued,
    /// [`crate::Log::flush_async`] submits the FLUSH and returns at once, without
    /// waiting for it: the records are acknowledged durable before the flush
    /// returns.
    FlushNotAwaited,
    /// The recovery keeps a frame whose checksum does not hold (a record torn by a
    /// failed or partial write): a torn record is taken for a record, and the frame
    /// it claims hides what lies after it.
    TornFrameKept,
}

#[cfg(feature = "planted")]
thread_local! {
    static PLANTED: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// Plants `bug` on the calling thread (`None`: the log as it is).
#[cfg(feature = "planted")]
pub fn set(bug: Option<Bug>) {
    PLANTED.with(|p| p.set(bug));
}

/// Whether `bug` is planted on the calling thread.
#[cfg(feature = "planted")]
pub fn on(bug: Bug) -> bool {
    PLANTED.with(|p| p.get()) == Some(bug)
}

/// Whether `bug` is planted: never, without the `planted` feature.
#[cfg(not(feature = "planted"))]
pub const fn on(_bug: Bug) -> bool {
    false
}
