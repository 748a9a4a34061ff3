//! Issue policies: how operations leave zone write plugs (or, without plugs, how
//! requests reach the device).
//!
//! The engine ([`super::Queue`]) keeps BIOs, plugs, write pointers, tags and
//! recovery; a policy only decides *when* what is plugged goes out, and owns the
//! state that decision needs (the single issuer's list, the plug in service, the
//! batching issuer's anticipation, zone write locking's scheduler). The engine calls
//! it at fixed points, the way a QUIC connection consults its congestion controller:
//!
//! | hook | when |
//! |---|---|
//! | [`Policy::plug_changed`] | an operation joined plug `p`, or one of its operations completed, or its write pointer was re-synchronised |
//! | [`Policy::plug_drained`] | plug `p` may have nothing left (after the above, or after its queued writes were aborted) |
//! | [`Policy::kick`] | something finished or changed: issue what is now possible |
//! | [`Policy::anticipation_expired`] | an [`super::Action::Anticipate`] the policy asked for is over |
//! | [`Policy::submit_unplugged`] / [`Policy::unplugged_done`] | a request no plug orders enters / completes |
//! | [`Policy::check`] | the checker verifies the policy's invariants |
//!
//! What each policy is called, what it is for and what it allows (its
//! [`PolicyTraits`]: plugging, a single issuer, writes in flight per zone,
//! acknowledgement in zone order, plugs drained on their own) lives in one table,
//! [`registry::POLICIES`]; the engine computes the traits when the policy is set,
//! and the engine, the simulator's checker and the command line read them instead
//! of naming policies. This file holds the hooks and the engine's dispatch to the
//! implementations (`docs/ARCHITECTURE.md` walks through adding a policy).

mod batch;
mod ctx;
mod issuer;
mod passthrough;
mod pipeline;
mod qd1;
mod registry;
mod zwl;
mod zwp;

#[cfg(test)]
mod scenarios;

pub use registry::{IssuePolicy, POLICIES, PolicyInfo, PolicyTraits, ZoneWrites};

use super::bios::{FragId, Kind};
use super::plugs::PlugId;
use super::{EngineConfig, Queue};
use crate::bio::Op;
use crate::units::Sector;
pub(crate) use ctx::{PolicyCtx, PolicyView};
use std::fmt;

/// The policy's implementation for `cfg.policy`.
pub(crate) fn build(cfg: &EngineConfig) -> AnyPolicy {
    match cfg.policy {
        IssuePolicy::Zwp => AnyPolicy::Zwp(zwp::Zwp),
        IssuePolicy::Qd1 => AnyPolicy::Qd1(issuer::SingleIssuer::new(qd1::Fifo)),
        IssuePolicy::Batch => AnyPolicy::Batch(issuer::SingleIssuer::new(batch::Batching::new(cfg))),
        IssuePolicy::Zwl => AnyPolicy::Zwl(zwl::ZoneWriteLocking::new(cfg)),
        IssuePolicy::Passthrough => AnyPolicy::Passthrough(passthrough::Passthrough),
        IssuePolicy::Pipeline => AnyPolicy::Pipeline(pipeline::Pipeline),
    }
}

/// Every policy, as one type the engine holds: a `match` per hook instead of a
/// virtual call, so that the hooks a policy does not use (most of them, for
/// per-zone plugging) cost nothing on the hot path.
#[derive(Debug)]
pub(crate) enum AnyPolicy {
    Zwp(zwp::Zwp),
    Qd1(issuer::SingleIssuer<qd1::Fifo>),
    Batch(issuer::SingleIssuer<batch::Batching>),
    Zwl(zwl::ZoneWriteLocking),
    Passthrough(passthrough::Passthrough),
    Pipeline(pipeline::Pipeline),
}

/// Calls `$body` with `$p` bound to the policy inside `$any`.
macro_rules! each_policy {
    ($any:expr, $p:ident => $body:expr) => {
        match $any {
            AnyPolicy::Zwp($p) => $body,
            AnyPolicy::Qd1($p) => $body,
            AnyPolicy::Batch($p) => $body,
            AnyPolicy::Zwl($p) => $body,
            AnyPolicy::Passthrough($p) => $body,
            AnyPolicy::Pipeline($p) => $body,
        }
    };
}

/// The engine's calls into its policy: each hands the policy a [`PolicyCtx`] over
/// the queue (a [`PolicyView`] to check it), never the queue itself.
impl AnyPolicy {
    pub fn kind(&self) -> IssuePolicy {
        each_policy!(self, p => p.kind())
    }
    #[inline]
    pub fn plug_changed(&mut self, q: &mut Queue, plug: PlugId) {
        let q = &mut PolicyCtx::new(q);
        each_policy!(self, p => p.plug_changed(q, plug))
    }
    #[inline]
    pub fn plug_drained(&mut self, q: &mut Queue, plug: PlugId) {
        let q = &mut PolicyCtx::new(q);
        each_policy!(self, p => p.plug_drained(q, plug))
    }
    #[inline]
    pub fn kick(&mut self, q: &mut Queue) {
        let q = &mut PolicyCtx::new(q);
        each_policy!(self, p => p.kick(q))
    }
    pub fn anticipation_expired(&mut self, q: &mut Queue, token: u64) -> bool {
        let q = &mut PolicyCtx::new(q);
        each_policy!(self, p => p.anticipation_expired(q, token))
    }
    #[inline]
    pub fn submit_unplugged(&mut self, q: &mut Queue, f: FragId) {
        let q = &mut PolicyCtx::new(q);
        each_policy!(self, p => p.submit_unplugged(q, f))
    }
    #[inline]
    pub fn unplugged_done(&mut self, q: &mut Queue, done: UnpluggedDone) {
        let q = &mut PolicyCtx::new(q);
        each_policy!(self, p => p.unplugged_done(q, done))
    }
    pub fn is_idle(&self) -> bool {
        each_policy!(self, p => p.is_idle())
    }
    pub fn check(&self, q: &Queue) {
        let q = &PolicyView::view(q);
        each_policy!(self, p => p.check(q))
    }
}

/// A request that no plug ordered, as it completes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnpluggedDone {
    /// [`Kind::Free`], or [`Kind::Sched`] if the policy's scheduler dispatched it.
    pub kind: Kind,
    /// Its operation.
    pub op: Op,
    /// Its sector.
    pub sector: Sector,
}

/// An issue policy: see the module documentation for when each hook runs. Every hook
/// gets a [`PolicyCtx`], never the engine's [`Queue`]: a policy reads what the
/// handle shows and changes the engine only through its operations: listing and
/// unlisting a plug (`list`, `unlist`), releasing a plug's front (`drain_front`),
/// dispatching (`dispatch`, `issue`), holding a request in its scheduler
/// (`hold_in_scheduler`), releasing an idle plug (`maybe_release`), anticipating
/// (`anticipate`) and counting what it did.
pub(crate) trait Policy: fmt::Debug + Send {
    /// Which policy this is.
    fn kind(&self) -> IssuePolicy;

    /// Plug `p` changed: release what it can release now, or note that it has work.
    /// Never frees the plug. A policy whose registry entry declares
    /// `independent_plugs` only drains the plug's front here and does nothing in
    /// `plug_drained` and `kick`: the engine then does that itself, without calling
    /// it (see [`PolicyTraits::independent_plugs`]).
    fn plug_changed(&mut self, q: &mut PolicyCtx<'_>, p: PlugId);

    /// Plug `p` may be drained (nothing queued, nothing out): forget it if so.
    fn plug_drained(&mut self, _q: &mut PolicyCtx<'_>, _p: PlugId) {}

    /// Issue what can be issued now (the single issuer's turn).
    fn kick(&mut self, _q: &mut PolicyCtx<'_>) {}

    /// The time asked for by the anticipation `token` has passed. Returns whether the
    /// policy was still waiting for it (the engine then kicks the policy).
    fn anticipation_expired(&mut self, _q: &mut PolicyCtx<'_>, _token: u64) -> bool {
        false
    }

    /// A fragment no plug orders enters: dispatch it (the default), or keep it in
    /// the policy's own scheduler.
    fn submit_unplugged(&mut self, q: &mut PolicyCtx<'_>, f: FragId) {
        q.dispatch(f);
    }

    /// A request no plug ordered completed; its tag is free again.
    fn unplugged_done(&mut self, _q: &mut PolicyCtx<'_>, _done: UnpluggedDone) {}

    /// Whether the policy holds nothing (checked before a policy switch).
    fn is_idle(&self) -> bool {
        true
    }

    /// Checks the policy's invariants against the engine's state; panics on a
    /// violation.
    fn check(&self, q: &PolicyView<'_>);
}
