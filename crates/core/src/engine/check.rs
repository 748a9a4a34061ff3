//! The engine's invariants, checked from its own state: what each count says against
//! what the tables hold. The simulator's checker calls [`Engine::check_invariants`]
//! after every step; it costs O(plugs + requests) and stays on in release builds.

use super::Engine;
use super::bios::{FragState, Kind};
use super::plugs::PlugId;
use super::policy::Policy;
use rustc_hash::FxHashMap;

impl Engine {
    /// Checks the engine's internal invariants and panics on a violation.
    pub fn check_invariants(&self) {
        let q = &self.q;
        assert_eq!(self.policy.kind(), q.cfg.policy, "the policy in force is not the configured one");
        let mut inflight = 0;
        let mut issued_of: FxHashMap<PlugId, (u32, u32)> = FxHashMap::default();
        for (f, frag) in q.frags.iter() {
            match frag.state {
                FragState::InFlight => inflight += 1,
                FragState::WaitTag => {
                    assert!(q.tags.wait.contains(&f), "request {f:?} waits for a tag it is not queued for")
                }
                FragState::Held => assert!(q.barrier.waiting.contains(&f), "held fragment {f:?} lost"),
                FragState::Sched => assert_eq!(frag.kind, Kind::Sched, "fragment {f:?} in a scheduler it is not of"),
                FragState::Plugged => {
                    let p = frag.plug.expect("plugged fragment without plug");
                    assert!(q.plugs[p].queue.contains(&f), "fragment {f:?} not in its plug's queue");
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
        assert_eq!(inflight, q.tags.inflight, "in-flight count");
        assert!(q.tags.inflight <= q.cfg.queue_depth, "more requests in flight than tags");
        let (mut ops_out, mut appends) = (0, 0);
        for (p, plug) in q.plugs.iter() {
            let (issued, apps) = issued_of.get(&p).copied().unwrap_or((0, 0));
            assert_eq!(issued, u32::from(plug.busy), "zone {}: {issued} operations out, busy={}", plug.zone, plug.busy);
            assert_eq!(apps, plug.appends_out, "zone {}: appends out", plug.zone);
            ops_out += issued;
            appends += apps;
            let cap = q.geo.zone_capacity(plug.zone);
            assert_eq!(plug.capacity, cap, "zone {}: plug's capacity", plug.zone);
            assert!(plug.wp_offset <= cap, "zone {}: wp_offset {} past capacity {cap}", plug.zone, plug.wp_offset);
            let idle = !plug.in_use() && !plug.report_pending;
            let releasable = plug.need_wp_update || plug.wp_offset == 0 || plug.wp_offset >= cap;
            assert!(!(idle && releasable), "plug of idle EMPTY/FULL zone {} outlived its use: {plug:?}", plug.zone);
        }
        assert_eq!(ops_out, q.plugs.ops_out, "zone writes out");
        assert_eq!(appends, q.plugs.appends_out, "native appends out");
        if q.barrier.out {
            assert_eq!(q.plugs.ops_out, 0, "zone writes out beside a RESET_ALL");
        }
        self.policy.check(q);
    }
}
