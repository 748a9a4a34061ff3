//! Zone write pipelining (`pipeline`): per-zone plugging that lets up to
//! `pipeline_depth` writes of a zone reach the device at once, for a device that
//! keeps a zone's writes in the order it was handed them. The engine does the rest
//! (`engine/pipe.rs`): the write pointer moves at release, acknowledgements keep zone
//! order, a failure fails what follows it in the zone.

use super::{IssuePolicy, Policy, PolicyCtx, PolicyView};
use crate::engine::plugs::PlugId;

/// Pipelining. Like per-zone plugging it keeps no state: a plug's front is released
/// whenever the plug changes, as far as the plug's depth allows.
#[derive(Debug, Default)]
pub(crate) struct Pipeline;

impl Policy for Pipeline {
    fn kind(&self) -> IssuePolicy {
        IssuePolicy::Pipeline
    }

    fn plug_changed(&mut self, q: &mut PolicyCtx<'_>, p: PlugId) {
        q.drain_front(p);
    }

    fn check(&self, q: &PolicyView<'_>) {
        let depth = q.pipe_depth();
        for p in q.plugs() {
            let (zone, piped) = (q.zone(p), q.pipelined(p));
            assert!(!q.listed(p), "pipelining holds a plug");
            assert!(piped <= depth, "zone {zone}: {piped} writes out, depth {depth}");
            assert!(piped == 0 || !q.busy(p), "zone {zone}: a reset or finish beside writes out");
        }
    }
}
