//! The single issuer's list, shared by `qd1` and `batch`: one context issues every
//! zone write of the device, so at most one zone write (or reset, or finish) is out.
//! Plugs with pending operations wait on a list; the issuer drains the plug at its
//! head completely, one operation at a time, then takes the next. A plug that gets
//! new work while not listed goes to the tail. Which plug comes next, and whether the
//! issuer waits for a drained zone's next write, is the [`Choice`] of each policy.

use super::{IssuePolicy, Policy, PolicyCtx, PolicyView};
use crate::engine::plugs::PlugId;
use crate::units::ZoneNo;
use std::collections::VecDeque;
use std::fmt;

/// What a choice says before the issuer takes a plug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Go on as usual.
    Open,
    /// The choice moved the plug it was waiting for to the head: its visit goes on.
    Continue,
    /// Issue nothing now.
    Stop,
}

/// The part of a single issuer that differs between policies.
pub(crate) trait Choice: fmt::Debug + Send {
    /// Which policy this is.
    fn kind(&self) -> IssuePolicy;

    /// Plug `p` joined the tail of the list.
    fn listed(&mut self, _p: PlugId) {}

    /// Called before the issuer takes a plug, with the list of waiting plugs.
    fn gate(&mut self, _q: &mut PolicyCtx<'_>, _list: &mut VecDeque<PlugId>) -> Gate {
        Gate::Open
    }

    /// A new visit starts: put the plug to drain next at the head of `list` (FIFO:
    /// leave it as it is).
    fn choose(&mut self, _q: &PolicyCtx<'_>, _list: &mut VecDeque<PlugId>) {}

    /// The plug of `zone`, at the head, drained by a completion; `list` holds the
    /// plugs still waiting.
    fn drained(&mut self, _q: &mut PolicyCtx<'_>, _list: &VecDeque<PlugId>, _zone: ZoneNo) {}

    /// An anticipation's time is over. Returns whether it was still awaited.
    fn expired(&mut self, _token: u64) -> bool {
        false
    }

    /// Invariants of the choice's own state.
    fn check(&self, _q: &PolicyView<'_>) {}
}

/// A single issuer with the choice `C`.
#[derive(Debug)]
pub(crate) struct SingleIssuer<C> {
    /// Plugs with pending operations, in arrival order (or the choice's order).
    list: VecDeque<PlugId>,
    /// The plug at the head is being drained (a new plug is chosen only when false).
    in_service: bool,
    choice: C,
}

impl<C: Choice> SingleIssuer<C> {
    pub fn new(choice: C) -> SingleIssuer<C> {
        SingleIssuer { list: VecDeque::new(), in_service: false, choice }
    }
}

impl<C: Choice> Policy for SingleIssuer<C> {
    fn kind(&self) -> IssuePolicy {
        self.choice.kind()
    }

    /// Lists the plug (at the tail) if it has work and is not listed.
    fn plug_changed(&mut self, q: &mut PolicyCtx<'_>, p: PlugId) {
        if !q.listed(p) && q.has_queued(p) {
            q.list(p);
            self.list.push_back(p);
            self.choice.listed(p);
        }
    }

    /// A drained plug leaves the list (new work lists it again at the tail).
    fn plug_drained(&mut self, q: &mut PolicyCtx<'_>, p: PlugId) {
        if !(q.listed(p) && !q.has_queued(p) && !q.busy(p)) {
            return;
        }
        q.unlist(p);
        if self.list.front() == Some(&p) {
            self.list.pop_front();
            self.in_service = false;
            let zone = q.zone(p);
            self.choice.drained(q, &self.list, zone);
        } else {
            self.list.retain(|&w| w != p);
        }
    }

    /// While no zone write is out, takes the next operation of the plug at the head
    /// of the list; a plug leaves the list once drained (or blocked, until what
    /// blocks it lists it again).
    fn kick(&mut self, q: &mut PolicyCtx<'_>) {
        // A plug whose front waits behind a RESET_ALL leaves the list (it is listed
        // again when the RESET_ALL completes); what was submitted before a waiting
        // RESET_ALL goes ahead of it.
        while q.zone_ops_out() == 0 && !q.barrier_out() && !self.list.is_empty() {
            match self.choice.gate(q, &mut self.list) {
                Gate::Stop => break,
                Gate::Continue => self.in_service = true,
                Gate::Open => {}
            }
            if !self.in_service {
                q.count_issuer_visit();
                self.in_service = true;
                self.choice.choose(q, &mut self.list);
            }
            let p = *self.list.front().expect("checked non-empty");
            q.drain_front_within(p, 1);
            if crate::mutation::on(crate::mutation::Mutation::IssuerOnePerVisit)
                && q.zone_ops_out() > 0
                && q.has_queued(p)
            {
                // Planted: the visit ends after one operation, the plug goes to the tail.
                self.list.rotate_left(1);
                self.in_service = false;
            }
            if q.zone_ops_out() == 0 {
                // Drained, or blocked until what blocks it kicks it again.
                q.unlist(p);
                self.list.pop_front();
                self.in_service = false;
                q.maybe_release(p);
            }
        }
    }

    fn anticipation_expired(&mut self, _q: &mut PolicyCtx<'_>, token: u64) -> bool {
        self.choice.expired(token)
    }

    fn is_idle(&self) -> bool {
        self.list.is_empty()
    }

    fn check(&self, q: &PolicyView<'_>) {
        // Every listed plug carries the flag, once; as many plugs carry it.
        let mut seen = rustc_hash::FxHashSet::default();
        for &p in &self.list {
            assert!(q.listed(p), "zone {}: on the list, not flagged listed", q.zone(p));
            assert!(seen.insert(p), "zone {}: listed twice", q.zone(p));
        }
        let flagged = q.plugs().filter(|&p| q.listed(p)).count();
        assert_eq!(flagged, self.list.len(), "plugs flagged listed, not all on the list");
        assert!(q.zone_ops_out() <= 1, "single issuer with {} zone writes out", q.zone_ops_out());
        self.choice.check(q);
    }
}
