//! The engine's invariants, checked from its own state: what each count says against
//! what the tables hold. [`Engine::check_invariants`] costs O(fragments + BIOs +
//! plugs), each list walked once, and stays on in release builds.
//!
//! When it runs:
//!
//! - when the engine goes idle (no BIO inside), in every build and every driver, in
//!   two parts. Every time, in O(1): what an idle engine's counts must be, read
//!   from the counts the engine keeps anyway (no fragment, no request out on the
//!   device nor waiting for a tag, none held by a RESET_ALL, no zone write or native
//!   append out in any plug); a count left behind fails at once, on the input that
//!   left it. Then, once [`INPUTS_PER_PLUG_CHECKED`] inputs per plug, and at least
//!   [`MIN_INPUTS_PER_CHECK`], have passed since the last walk, the whole check of
//!   an idle engine, [`Engine::check_idle`]: the same assertions with their
//!   messages, and each plug walked once (its queue and pipe empty, found by its
//!   zone, its cached condition, `wp_offset` within the capacity, released if it is
//!   an idle EMPTY or FULL zone's) and the policy's own check, O(plugs) about a
//!   hundred instructions per plug. An idle engine has no fragment, so instead of
//!   counting the fragments of every state through the tables, which walks their
//!   slots and builds maps to find nothing, it checks that the tables and lists are
//!   empty. What the walk alone sees is a plug's own state, which no input changes
//!   while the zone gets none: a plug left wrong at idle stays wrong until the walk
//!   comes, or until its zone's next write, whose path runs through the plug (a
//!   plug left busy holds that write for ever, a wrong `wp_offset` refuses it). So
//!   per input it costs a few instructions, and the walk a few more on average
//!   however many partially written zones keep plugs, small beside a request's own
//!   path through the engine even on a device that goes idle after every request
//!   (a memory device served at QD 1, where a request's whole trip costs a few
//!   thousand);
//! - when the runtime closes (the engine is idle then);
//! - after every input (submit, completion, zone report, timer, attribute write)
//!   when the environment says `ZBLK_CHECK_INVARIANTS=1`, read once per process: for
//!   tests and for chasing a bug on a real device. The simulator's checker calls it
//!   after every step anyway.
//!
//! [`Engine::set_self_check`] turns the first and the last off, for the simulator's
//! runs that show what its independent checks catch without the engine's own.

use super::bios::{FragState, Kind};
use super::plugs::{CondCache, PlugId};
use super::{Engine, Queue};
use rustc_hash::{FxHashMap, FxHashSet};

/// The fewest inputs between two walks of an idle engine's plugs (see the module's
/// doc).
const MIN_INPUTS_PER_CHECK: u64 = 256;

/// Inputs between two walks of an idle engine's plugs, per plug walked.
const INPUTS_PER_PLUG_CHECKED: u64 = 16;

/// Whether `ZBLK_CHECK_INVARIANTS=1`: every engine checks its invariants after every
/// input. Read once.
pub(super) fn every_input() -> bool {
    static EVERY_INPUT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *EVERY_INPUT.get_or_init(|| std::env::var_os("ZBLK_CHECK_INVARIANTS").is_some_and(|v| v == "1"))
}

impl Engine {
    /// Checks the engine's internal invariants and panics on a violation: every
    /// fragment is where its state says, in one list, once; counts of requests out,
    /// tags, plugged writes and appends match the tables; each BIO's outstanding
    /// pieces are its fragments; each plug's zone, `wp_offset` and cached condition
    /// agree with the plug; the policy's own invariants.
    pub fn check_invariants(&self) {
        let q = &self.q;
        assert_eq!(self.policy.kind(), q.cfg.policy, "the policy in force is not the configured one");
        assert_eq!(q.traits, super::PolicyTraits::of(&q.cfg), "stale policy traits");
        let mut census = FragCensus::of(q);
        census.check_lists(q);
        census.check_bios(q);
        check_plugs(q, &census.issued_of);
        self.policy.check(q);
    }

    /// Whether the engine checks its own invariants when it goes idle and, with
    /// `ZBLK_CHECK_INVARIANTS=1`, after every input (on by default). The simulator
    /// turns it off to show what its independent checks catch without them.
    pub fn set_self_check(&mut self, on: bool) {
        self.q.self_check = on;
    }

    /// After every input: the counts of an idle engine, in O(1), whenever it went
    /// idle; its whole check when enough inputs passed to pay for the walk of its
    /// plugs; every invariant after every input under `ZBLK_CHECK_INVARIANTS=1`.
    #[inline]
    pub(super) fn after_input(&mut self) {
        let q = &mut self.q;
        if !q.self_check {
            return;
        }
        q.inputs_unchecked += 1;
        if q.check_every_input {
            return self.check_due();
        }
        if !q.bios.is_empty() || !q.frozen.is_empty() {
            return;
        }
        // Idle: every count the engine keeps of what is inside is zero. (`&`, not
        // `&&`: six loads and compares, no branch each.)
        let drained = q.frags.is_empty()
            & (q.tags.inflight == 0)
            & q.tags.wait.is_empty()
            & q.barrier.waiting.is_empty()
            & (q.plugs.ops_out == 0)
            & (q.plugs.appends_out == 0);
        if !drained || q.inputs_unchecked >= (q.plugs.len() as u64 * INPUTS_PER_PLUG_CHECKED).max(MIN_INPUTS_PER_CHECK)
        {
            // A count left behind fails there, with its message.
            self.check_due();
        }
    }

    /// The check [`Engine::after_input`] found due: apart, so that what runs on
    /// every input stays inlined in it.
    #[cold]
    #[inline(never)]
    fn check_due(&mut self) {
        self.q.inputs_unchecked = 0;
        if self.q.check_every_input {
            self.check_invariants();
        } else {
            // Only an idle engine's check is due without ZBLK_CHECK_INVARIANTS.
            self.check_idle();
        }
    }

    /// [`Engine::check_invariants`] on an idle engine (no BIO inside, none frozen):
    /// every fragment belongs to a BIO, so there is none, and what the full check
    /// counts per state through the tables is zero: checked here as empty tables and
    /// lists, the plugs walked once. The same violations fail it, at O(plugs).
    fn check_idle(&self) {
        let q = &self.q;
        assert_eq!(self.policy.kind(), q.cfg.policy, "the policy in force is not the configured one");
        assert_eq!(q.traits, super::PolicyTraits::of(&q.cfg), "stale policy traits");
        assert!(q.frags.is_empty(), "fragments in an engine without BIOs");
        assert_eq!(q.tags.inflight, 0, "in-flight count");
        assert!(q.tags.wait.is_empty(), "fragments waiting for a tag, none in the engine");
        assert!(q.barrier.waiting.is_empty(), "fragments held by a RESET_ALL, none in the engine");
        assert_eq!(q.plugs.ops_out, 0, "zone writes out, none in the engine");
        assert_eq!(q.plugs.appends_out, 0, "native appends out, none in the engine");
        for (_, plug) in q.plugs.iter() {
            assert!(
                plug.queue.is_empty() && plug.pipe.is_empty(),
                "zone {}: fragments in its plug, none in the engine",
                plug.zone
            );
        }
        check_plugs(q, &FxHashMap::default());
        self.policy.check(q);
    }
}

/// The fragments counted by state, each BIO's fragments, and what each plug has out
/// (zone writes, native appends): what the tables must agree with.
struct FragCensus {
    inflight: usize,
    wait_tag: usize,
    held: usize,
    plugged: usize,
    /// Pipelined writes completed, waiting for their turn to be acknowledged.
    completed: usize,
    /// Per plug: (operations out other than native appends, native appends out).
    issued_of: FxHashMap<PlugId, (u32, u32)>,
    /// Per BIO (by index): its fragments.
    pieces: FxHashMap<usize, u32>,
}

impl FragCensus {
    /// Walks every fragment once, checking what its state alone says.
    fn of(q: &Queue) -> FragCensus {
        let (mut inflight, mut wait_tag, mut held, mut plugged) = (0usize, 0usize, 0usize, 0usize);
        let mut completed = 0usize;
        let mut issued_of: FxHashMap<PlugId, (u32, u32)> = FxHashMap::default();
        let mut pieces: FxHashMap<usize, u32> = FxHashMap::default();
        for (f, frag) in q.frags.iter() {
            match frag.state {
                FragState::InFlight => inflight += 1,
                FragState::WaitTag => wait_tag += 1,
                FragState::Held => held += 1,
                FragState::Completed => {
                    assert!(frag.piped && frag.held.is_some(), "fragment {f:?} completed but not a pipelined write");
                    completed += 1;
                }
                FragState::Sched => assert_eq!(frag.kind, Kind::Sched, "fragment {f:?} in a scheduler it is not of"),
                FragState::Plugged => {
                    assert!(frag.plug.is_some(), "plugged fragment {f:?} without a plug");
                    plugged += 1;
                }
            }
            *pieces.entry(frag.bio.idx()).or_insert(0) += 1;
            if let (Some(p), FragState::InFlight | FragState::WaitTag) = (frag.plug, frag.state) {
                let e = issued_of.entry(p).or_default();
                if frag.kind == Kind::NativeAppend {
                    e.1 += 1;
                } else {
                    e.0 += 1;
                }
            }
        }
        FragCensus { inflight, wait_tag, held, plugged, completed, issued_of, pieces }
    }

    /// The tags' count, and each list (tag wait list, RESET_ALL barrier, plug
    /// queues) against the fragments in its state.
    fn check_lists(&self, q: &Queue) {
        assert_eq!(self.inflight as u32, q.tags.inflight, "in-flight count");
        assert!(q.tags.inflight <= q.cfg.queue_depth, "more requests in flight than tags");
        // Each list holds fragments in its state only, each once; with the counts
        // above, every fragment in that state is in its list.
        let mut listed = FxHashSet::default();
        let mut walk = |what: &str, f, ok: bool| {
            assert!(ok, "{what}: fragment {f:?} is {:?}", q.frags[f].state);
            assert!(listed.insert(f), "{what}: fragment {f:?} listed twice");
        };
        for &f in &q.tags.wait {
            walk("tag wait list", f, q.frags[f].state == FragState::WaitTag);
        }
        for &f in &q.barrier.waiting {
            walk("RESET_ALL barrier", f, q.frags[f].state == FragState::Held);
        }
        let (mut in_plugs, mut in_pipes) = (0, 0);
        for (p, plug) in q.plugs.iter() {
            for &f in &plug.queue {
                walk("plug queue", f, q.frags[f].state == FragState::Plugged && q.frags[f].plug == Some(p));
                in_plugs += 1;
            }
            if let Some(&f) = plug.pipe.front() {
                // A completed front would have been acknowledged.
                assert_ne!(
                    q.frags[f].state,
                    FragState::Completed,
                    "zone {}: completed write at the pipe's front",
                    plug.zone
                );
            }
            for &f in &plug.pipe {
                let fr = &q.frags[f];
                let ok = fr.piped && fr.plug == Some(p) && fr.state != FragState::Plugged;
                assert!(ok, "pipe of zone {}: fragment {f:?} is {:?}", plug.zone, fr.state);
                in_pipes += usize::from(fr.state == FragState::Completed);
            }
        }
        assert_eq!(in_pipes, self.completed, "completed pipelined writes, not all in their pipe");
        assert_eq!(q.tags.wait.len(), self.wait_tag, "fragments waiting for a tag, not all in the wait list");
        assert_eq!(q.barrier.waiting.len(), self.held, "fragments held by a RESET_ALL, not all in its list");
        assert_eq!(in_plugs, self.plugged, "plugged fragments, not all in their plug's queue");
    }

    /// A BIO ends with its last piece: its outstanding pieces are its fragments
    /// (the submission's own reference is dropped before an input returns).
    fn check_bios(&mut self, q: &Queue) {
        let mut pieces = std::mem::take(&mut self.pieces);
        for (b, remaining) in q.bios.iter() {
            let frags = pieces.remove(&b.idx()).unwrap_or(0);
            assert_eq!(remaining, frags, "BIO {b:?}: {remaining} pieces outstanding, {frags} fragments");
        }
        assert!(pieces.is_empty(), "fragments of BIOs that are gone: {pieces:?}");
    }
}

/// Each plug against its zone, its cached condition and what it has out; the
/// totals of zone writes and native appends out.
fn check_plugs(q: &Queue, issued_of: &FxHashMap<PlugId, (u32, u32)>) {
    let (mut ops_out, mut appends) = (0, 0);
    for (p, plug) in q.plugs.iter() {
        let z = plug.zone;
        assert_eq!(q.plugs.get(z), Some(p), "zone {z}: its plug is not found by zone");
        assert!(!q.geo.zone_is_conv(z), "plug of conventional zone {z}");
        // The plug describes its zone; a READONLY or OFFLINE condition learnt from
        // a report while the plug was in use stays for when it goes.
        let cached = q.cond[z.idx()];
        assert!(
            matches!(cached, CondCache::Plugged | CondCache::ReadOnly | CondCache::Offline),
            "zone {z}: plugged, but its cached condition says {cached:?}"
        );
        let (issued, apps) = issued_of.get(&p).copied().unwrap_or((0, 0));
        let piped_out = plug.pipe.iter().filter(|&&f| q.frags[f].state != FragState::Completed).count() as u32;
        let expected = u32::from(plug.busy) + piped_out;
        assert_eq!(issued, expected, "zone {z}: {issued} operations out, busy={}, {piped_out} pipelined", plug.busy);
        assert_eq!(apps, plug.appends_out, "zone {z}: appends out");
        ops_out += issued;
        appends += apps;
        let cap = q.geo.zone_capacity(z);
        assert_eq!(plug.capacity, cap, "zone {z}: plug's capacity");
        assert!(plug.wp_offset <= cap, "zone {z}: wp_offset {} past capacity {cap}", plug.wp_offset);
        let idle = !plug.in_use() && !plug.report_pending;
        let releasable = plug.need_wp_update || plug.wp_offset == 0 || plug.wp_offset >= cap;
        assert!(!(idle && releasable), "plug of idle EMPTY/FULL zone {z} outlived its use: {plug:?}");
    }
    assert_eq!(ops_out, q.plugs.ops_out, "zone writes out");
    assert_eq!(appends, q.plugs.appends_out, "native appends out");
    if q.barrier.out {
        assert_eq!(q.plugs.ops_out, 0, "zone writes out beside a RESET_ALL");
    }
}

#[cfg(test)]
mod tests {
    use super::super::bios::FragId;
    use super::super::{Action, EngineConfig};
    use super::*;
    use crate::bio::{Bio, BioFlags, Op};
    use crate::geometry::{Geometry, GeometryParams};
    use crate::units::{Sector, ZoneNo};
    use std::panic::{AssertUnwindSafe, catch_unwind};

    /// 4 zones of 256 MiB, the first conventional.
    fn geo() -> Geometry {
        Geometry::new(&GeometryParams {
            capacity_bytes: 1 << 30,
            zone_size_bytes: 256 << 20,
            nr_conv: 1,
            max_append_sectors: 0,
            ..GeometryParams::default()
        })
        .unwrap()
    }

    /// An engine with a write of zone 1 on the device and `queued` more waiting in
    /// its plug behind it; returns the request out.
    fn busy_plug(queued: u64) -> (Engine, crate::bio::Request) {
        let g = geo();
        let z = g.zone_start(ZoneNo(1));
        let mut e = Engine::new_empty(&g, EngineConfig::default());
        e.set_self_check(false);
        for i in 0..=queued {
            e.submit(Bio::write(z + i, 1, i));
        }
        let mut out = None;
        while let Some(a) = e.poll_action() {
            if let Action::Issue(r) = a {
                assert!(out.replace(r).is_none(), "one write out");
            }
        }
        (e, out.expect("a write out"))
    }

    fn trips(e: &Engine) -> bool {
        catch_unwind(AssertUnwindSafe(|| e.check_invariants())).is_err()
    }

    #[test]
    fn a_bios_pieces_are_its_fragments() {
        let (mut e, _) = busy_plug(3);
        e.check_invariants();
        let (b, _) = e.q.bios.iter().next().expect("a BIO");
        e.q.bios.get(b);
        assert!(trips(&e), "a BIO with a piece more than its fragments");
    }

    #[test]
    fn a_plugged_zones_cached_condition_is_the_plugs() {
        let (mut e, _) = busy_plug(3);
        e.check_invariants();
        e.q.cond[1] = CondCache::Full;
        assert!(trips(&e), "a plugged zone cached as FULL");
    }

    #[test]
    fn a_fragment_listed_twice_is_caught() {
        let (mut e, _) = busy_plug(3);
        let p = e.q.plugs.get(ZoneNo(1)).expect("a plug");
        let f = e.q.plugs[p].queue[0];
        let last = e.q.plugs[p].queue.pop_back().expect("queued");
        e.q.plugs[p].queue.push_back(f);
        // The one taken out is still plugged, so the counts agree: only the
        // duplicate shows.
        assert_ne!(last, f);
        assert!(trips(&e), "a fragment twice in its plug's queue");
    }

    #[test]
    fn the_engine_checks_itself_when_it_goes_idle() {
        let (mut e, req) = busy_plug(0);
        e.set_self_check(true);
        // A plug of zone 2 whose cached condition was not made the plug's: wrong
        // state that only the check sees.
        e.q.plugs.insert(ZoneNo(2), 8, e.q.geo.zone_capacity(ZoneNo(2)));
        // The check at idle waits for MIN_INPUTS_PER_CHECK inputs (its cost, paid
        // for): reads while the write is out, the engine never idle.
        for i in 0..MIN_INPUTS_PER_CHECK / 2 {
            e.submit(Bio::read(Sector(0), 8, 7 + i));
            let read = std::iter::from_fn(|| e.poll_action())
                .find_map(|a| if let Action::Issue(r) = a { Some(r) } else { None })
                .expect("the read issued");
            e.complete(read.id, Ok(read.sector));
        }
        assert!(e.bios_in_engine() > 0, "the write is still out: not idle, no check yet");
        let idle = catch_unwind(AssertUnwindSafe(|| e.complete(req.id, Ok(req.sector))));
        assert!(idle.is_err(), "the check at idle did not run");
    }

    /// A count an idle engine must have at zero, left behind, fails at the end of
    /// the input that left it, whenever that is: the O(1) part of the check at idle
    /// does not wait for the walk of the plugs (which is not due: the engine walked
    /// them two inputs before).
    #[test]
    fn a_count_left_behind_fails_when_the_engine_goes_idle() {
        // A fragment whose BIO is gone (kept in the table when `keep`).
        fn orphan(e: &mut Engine, keep: bool) -> FragId {
            let b = e.q.bios.insert(99, Sector(0));
            let f = e.q.frags.insert(b, Op::Read, Kind::Free, Sector(0), 8, 0, BioFlags::NONE);
            assert!(e.q.bios.put(b, Ok(()), None).is_some(), "the BIO gone");
            if !keep {
                e.q.frags.remove(f);
            }
            f
        }
        type Break = (&'static str, fn(&mut Engine));
        let breaks: [Break; 6] = [
            ("in-flight count", |e| e.q.tags.inflight += 1),
            ("zone writes out", |e| e.q.plugs.ops_out += 1),
            ("native appends out", |e| e.q.plugs.appends_out += 1),
            ("waiting for a tag", |e| {
                let f = orphan(e, false);
                e.q.tags.wait.push_back(f);
            }),
            ("held by a RESET_ALL", |e| {
                let f = orphan(e, false);
                e.q.barrier.waiting.push_back(f);
            }),
            ("fragments in an engine without BIOs", |e| {
                orphan(e, true);
            }),
        ];
        // A sound engine idle, its plugs walked, then two inputs (a read in and
        // out): idle again, and the walk not due for MIN_INPUTS_PER_CHECK inputs.
        let idle_again = || {
            let (mut e, req) = busy_plug(0);
            e.set_self_check(true);
            e.complete(req.id, Ok(req.sector));
            e.check_due();
            e.submit(Bio::read(Sector(0), 8, 7));
            let read = std::iter::from_fn(|| e.poll_action())
                .find_map(|a| if let Action::Issue(r) = a { Some(r) } else { None })
                .expect("the read issued");
            e.complete(read.id, Ok(read.sector));
            assert_eq!((e.bios_in_engine(), e.q.inputs_unchecked), (0, 2), "idle, two inputs since the walk");
            e
        };
        // Sound, it passes the check every input ends with.
        idle_again().after_input();
        for (what, broken) in breaks {
            let mut e = idle_again();
            broken(&mut e);
            // The end of the input that left the count behind.
            let r = catch_unwind(AssertUnwindSafe(|| e.after_input()));
            let p = r.expect_err(what);
            let msg = p
                .downcast_ref::<String>()
                .map_or_else(|| p.downcast_ref::<&str>().map(|m| m.to_string()), |m| Some(m.clone()));
            let msg = msg.unwrap_or_default();
            assert!(msg.contains(what), "{what}: the check said {msg:?}");
        }
    }

    /// The check of an idle engine (its tables empty, its plugs walked once) fails
    /// where the full check fails: a sound idle engine passes both; a tag count left
    /// behind, a plug left busy or a plug of the wrong zone fails both.
    #[test]
    fn the_idle_check_agrees_with_the_full_one() {
        let idle_engine = || {
            let (mut e, req) = busy_plug(3);
            for _ in 0..4 {
                let r = if e.bios_in_engine() == 4 {
                    req
                } else {
                    std::iter::from_fn(|| e.poll_action())
                        .find_map(|a| if let Action::Issue(r) = a { Some(r) } else { None })
                        .expect("the next write issued")
                };
                e.complete(r.id, Ok(r.sector));
            }
            assert_eq!(e.bios_in_engine(), 0, "idle");
            e
        };
        let e = idle_engine();
        e.check_invariants();
        e.check_idle();
        let breaks: [fn(&mut Engine); 3] = [
            |e| e.q.tags.inflight = 1,
            |e| {
                let p = e.q.plugs.iter().next().expect("zone 1's plug").0;
                e.q.plugs[p].busy = true;
            },
            |e| {
                e.q.plugs.insert(ZoneNo(2), 8, e.q.geo.zone_capacity(ZoneNo(2)));
            },
        ];
        for (i, broken) in breaks.iter().enumerate() {
            let mut e = idle_engine();
            broken(&mut e);
            assert!(catch_unwind(AssertUnwindSafe(|| e.check_invariants())).is_err(), "break {i}: full check");
            assert!(catch_unwind(AssertUnwindSafe(|| e.check_idle())).is_err(), "break {i}: idle check");
        }
    }
}
