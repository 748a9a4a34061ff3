//! Per-zone plugging (`zwp`), the kernel's scheme since 6.10: each plug releases its
//! next operation as soon as the previous one completes, zones independent of each
//! other. At most one write per zone is on the device; writes to different zones
//! interleave freely.

use super::{IssuePolicy, Policy, PolicyCtx, PolicyView};
use crate::engine::plugs::PlugId;

/// Per-zone plugging. It keeps no state of its own: a plug's front is released
/// whenever the plug changes.
#[derive(Debug, Default)]
pub(crate) struct Zwp;

impl Policy for Zwp {
    fn kind(&self) -> IssuePolicy {
        IssuePolicy::Zwp
    }

    fn plug_changed(&mut self, q: &mut PolicyCtx<'_>, p: PlugId) {
        q.drain_front(p);
    }

    fn check(&self, q: &PolicyView<'_>) {
        assert!(q.plugs().all(|p| !q.listed(p)), "per-zone plugging holds a plug");
    }
}
