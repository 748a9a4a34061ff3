//! No plugging at all (`passthrough`): zone writes reach the device as submitted, with
//! no write pointer check and no zone append emulation. Only to measure what plugging
//! costs, and to show what breaks without it.

use super::{IssuePolicy, Policy, PolicyCtx, PolicyView};
use crate::engine::plugs::PlugId;

/// Passthrough: every request is dispatched as it comes.
#[derive(Debug, Default)]
pub(crate) struct Passthrough;

impl Policy for Passthrough {
    fn kind(&self) -> IssuePolicy {
        IssuePolicy::Passthrough
    }

    /// No operation is ever plugged; a plug left from the start-up zone report (a
    /// partially written zone) only records its write pointer.
    fn plug_changed(&mut self, _q: &mut PolicyCtx<'_>, _p: PlugId) {}

    fn check(&self, q: &PolicyView<'_>) {
        assert_eq!(q.zone_ops_out() + q.appends_out(), 0, "plugged operations out without plugging");
    }
}
