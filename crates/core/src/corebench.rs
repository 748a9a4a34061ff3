//! The engine's own cost, measured on the engine alone: a minimal driver with no
//! simulator, no timing model and no device-side zone state. Its device is a FIFO of
//! request ids completed oldest first, at once, always successfully (a native zone
//! append is placed at the device's own write pointer, a one-line bookkeeping). What
//! a run costs is therefore what submit → (plug) → issue → complete → BIO completion
//! costs inside [`Engine`], plus this loop.
//!
//! Four shapes, each run with zone write plugging (pipelining for the last) and with
//! plugging bypassed:
//!
//! - [`Shape::Uncontended`]: 4 KiB writes round-robin over many zones (more zones
//!   than BIOs in flight), so no zone ever has two writes out: the plug is allocated,
//!   checked and released, nothing waits in it.
//! - [`Shape::Queued`]: sequential 4 KiB writes round-robin over a few zones at a
//!   deep queue, so nearly every BIO waits in its zone's plug behind the write out
//!   (the plug-queueing path: `plugged` counts them).
//! - [`Shape::Append`]: 4 KiB zone appends round-robin over a few zones at a deep
//!   queue. With plugging the device has no native append and the engine emulates
//!   it (a plugged write at `wp_offset`); the passthrough side is the same appends to
//!   a device with native zone append, passed through: what emulation costs against
//!   letting the device place the data.
//! - [`Shape::Pipelined`]: the queued shape under zone write pipelining, on a device
//!   that completes newest first: every zone has many writes out, and most
//!   completions wait for the writes before them in their zone (held, then
//!   acknowledged in zone order).
//!
//! Each of `zones` streams writes one zone sequentially; the streams take turns.
//! When a stream's zone fills, the stream moves to the longest unused zone of a few
//! spare ones, resetting it first if it holds data (by then its writes have long
//! completed: a reset overtaking queued writes would abort them, as in the kernel).
//! The wall clock is the caller's: this module only runs, so that tests run it too.

use crate::bio::{Bio, Op, ReqId};
use crate::engine::{Action, Engine, EngineConfig, EngineStats, IssuePolicy};
use crate::geometry::{Geometry, GeometryParams};
use crate::units::{Sector, ZoneNo};
use std::collections::VecDeque;

/// The workload's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Writes spread over more zones than BIOs in flight: plugs never queue.
    Uncontended,
    /// Sequential writes to a few zones at a deep queue: nearly every BIO waits in a
    /// plug.
    Queued,
    /// Zone appends to a few zones at a deep queue: emulated (plugging) or native
    /// (passthrough).
    Append,
    /// Sequential writes to a few zones at a deep queue under zone write pipelining,
    /// completed newest first: completions held for zone order.
    Pipelined,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 4] = [Shape::Uncontended, Shape::Queued, Shape::Append, Shape::Pipelined];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Uncontended => "uncontended",
            Shape::Queued => "queued",
            Shape::Append => "append",
            Shape::Pipelined => "pipelined",
        }
    }

    /// The policy that keeps zone writes in order in this shape (compared with
    /// passthrough): per-zone plugging, or pipelining for the pipelined shape.
    pub fn ordered_policy(self) -> IssuePolicy {
        if self == Shape::Pipelined { IssuePolicy::Pipeline } else { IssuePolicy::Zwp }
    }

    /// The default spec of the shape: how many zones, how deep a queue.
    pub fn spec(self, bios: u64) -> CoreBenchSpec {
        let (zones, iodepth) = match self {
            Shape::Uncontended => (1024, 16),
            Shape::Queued | Shape::Append | Shape::Pipelined => (4, 64),
        };
        CoreBenchSpec { shape: self, bios, zones, iodepth, bs_bytes: 4096 }
    }
}

/// One benchmark run's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CoreBenchSpec {
    /// The shape.
    pub shape: Shape,
    /// BIOs to complete.
    pub bios: u64,
    /// Zones written round-robin.
    pub zones: u32,
    /// BIOs in flight (also the device's queue depth, so no request waits for a tag).
    pub iodepth: u32,
    /// Bytes per BIO.
    pub bs_bytes: u32,
}

/// What one run did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CoreBenchRun {
    /// The policy.
    pub policy: IssuePolicy,
    /// BIOs completed.
    pub bios: u64,
    /// BIOs that failed (must be 0).
    pub errors: u64,
    /// Requests the engine issued.
    pub requests: u64,
    /// The engine's counters (`plugged` says how often a BIO waited in a plug).
    pub engine: EngineStats,
}

/// Zones of the device beyond the streams': where a stream moves when its zone fills.
const SPARE_ZONES: u32 = 4;

/// The device of a spec: 256 MiB zones, one per stream and a few spare, native zone
/// append only for the passthrough side of the append shape.
pub fn corebench_geometry(spec: &CoreBenchSpec, policy: IssuePolicy) -> Geometry {
    let native_append = spec.shape == Shape::Append && !policy.plugs();
    let p = GeometryParams {
        capacity_bytes: u64::from(spec.zones + SPARE_ZONES) * (256 << 20),
        zone_size_bytes: 256 << 20,
        max_append_sectors: if native_append { 2048 } else { 0 },
        ..GeometryParams::default()
    };
    Geometry::new(&p).expect("the benchmark geometry is valid")
}

/// Runs `spec` once with `policy` and returns what happened. The caller times it.
pub fn run_corebench(spec: &CoreBenchSpec, policy: IssuePolicy) -> CoreBenchRun {
    assert!(spec.iodepth > 0 && spec.zones > 0 && spec.bs_bytes >= 512, "empty benchmark {spec:?}");
    let geo = corebench_geometry(spec, policy);
    let cfg = EngineConfig { policy, queue_depth: spec.iodepth, ..EngineConfig::default() };
    let nr_zones = geo.nr_zones();
    let mut h = Harness {
        engine: Engine::new_empty(&geo, cfg),
        device: VecDeque::with_capacity(spec.iodepth as usize),
        zone_cap: geo.zone_capacity(ZoneNo(0)),
        zone_sectors: geo.zone_sectors(),
        streams: (0..spec.zones).map(|z| Stream { zone: z, offset: 0, reset_first: false }).collect(),
        spare: (spec.zones..nr_zones).collect(),
        written: vec![false; nr_zones as usize],
        device_wp: vec![0; nr_zones as usize],
        nr_sectors: spec.bs_bytes / 512,
        append: spec.shape == Shape::Append,
        newest_first: spec.shape == Shape::Pipelined,
        next_stream: 0,
        submitted: 0,
        completed: 0,
        errors: 0,
    };
    h.run(spec.bios, spec.iodepth);
    let stats = h.engine.stats();
    CoreBenchRun { policy, bios: h.completed, errors: h.errors, requests: stats.requests, engine: stats }
}

/// A sequential stream of writes (or appends) to one zone at a time.
struct Stream {
    zone: u32,
    /// Where its next write goes in the zone.
    offset: u64,
    /// It moved to a zone that holds data: its next BIO resets it.
    reset_first: bool,
}

/// The minimal driver.
struct Harness {
    engine: Engine,
    /// Requests on the device, oldest first: `(id, where a native append lands)`.
    device: VecDeque<(ReqId, Sector)>,
    zone_cap: u64,
    zone_sectors: u64,
    streams: Vec<Stream>,
    /// Zones no stream writes, the longest unused first: a stream whose zone fills
    /// takes the first. Its writes have long completed by then, so its reset never
    /// races them (a reset overtaking queued writes aborts them, as in the kernel).
    spare: VecDeque<u32>,
    /// Zones that hold data.
    written: Vec<bool>,
    /// The device's write pointer per zone, for native appends.
    device_wp: Vec<u64>,
    nr_sectors: u32,
    append: bool,
    /// The device completes its newest request first.
    newest_first: bool,
    next_stream: usize,
    submitted: u64,
    completed: u64,
    errors: u64,
}

impl Harness {
    fn run(&mut self, bios: u64, iodepth: u32) {
        while self.completed < bios {
            while self.submitted - self.completed < u64::from(iodepth) && self.submitted < bios {
                let bio = self.next_bio();
                self.submitted += 1;
                self.engine.submit(bio);
                self.drain();
            }
            let next = if self.newest_first { self.device.pop_back() } else { self.device.pop_front() };
            let (id, at) = next.expect("BIOs outstanding but nothing on the device");
            self.engine.complete(id, Ok(at));
            self.drain();
        }
    }

    /// The next BIO: the streams take turns; a stream whose zone is full moves to the
    /// longest unused zone, which it resets first if it holds data.
    fn next_bio(&mut self) -> Bio {
        let n = u64::from(self.nr_sectors);
        let i = self.next_stream;
        self.next_stream = (i + 1) % self.streams.len();
        let st = &mut self.streams[i];
        if st.offset + n > self.zone_cap {
            self.spare.push_back(st.zone);
            st.zone = self.spare.pop_front().expect("a spare zone");
            st.offset = 0;
            st.reset_first = self.written[st.zone as usize];
        }
        let start = Sector(u64::from(st.zone) * self.zone_sectors);
        if st.reset_first {
            st.reset_first = false;
            return Bio::zone_op(Op::ZoneReset, start, 0);
        }
        self.written[st.zone as usize] = true;
        let off = st.offset;
        st.offset += n;
        if self.append { Bio::append(start, self.nr_sectors, 0) } else { Bio::write(start + off, self.nr_sectors, 0) }
    }

    /// Carries out the engine's actions: requests go on the device FIFO, completions
    /// are counted.
    fn drain(&mut self) {
        while let Some(a) = self.engine.poll_action() {
            match a {
                Action::Issue(req) => {
                    let at = self.place(req.op, req.sector, req.nr_sectors);
                    self.device.push_back((req.id, at));
                }
                Action::Complete(c) => {
                    self.completed += 1;
                    self.errors += u64::from(c.result.is_err());
                }
                Action::Anticipate { token, .. } => self.engine.anticipation_expired(token),
                Action::ReportZone(z) => panic!("zone {z} reported on a device that never fails"),
            }
        }
    }

    /// Where the device executes a request: a native append at its write pointer,
    /// anything else where it says.
    fn place(&mut self, op: Op, sector: Sector, nr_sectors: u32) -> Sector {
        let z = (sector.0 / self.zone_sectors) as usize;
        match op {
            Op::ZoneAppend => {
                let at = Sector(z as u64 * self.zone_sectors + self.device_wp[z]);
                self.device_wp[z] += u64::from(nr_sectors);
                at
            }
            Op::ZoneReset => {
                self.device_wp[z] = 0;
                sector
            }
            _ => sector,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_completes_every_bio_without_error_under_both_policies() {
        for shape in Shape::ALL {
            for policy in [IssuePolicy::Zwp, IssuePolicy::Passthrough] {
                let spec = shape.spec(20_000);
                let r = run_corebench(&spec, policy);
                assert_eq!((r.bios, r.errors), (20_000, 0), "{shape:?} {policy:?}");
                assert_eq!(r.requests, 20_000, "{shape:?} {policy:?}: one request per BIO");
            }
        }
    }

    #[test]
    fn the_shapes_exercise_the_paths_they_claim() {
        let uncontended = run_corebench(&Shape::Uncontended.spec(20_000), IssuePolicy::Zwp);
        assert_eq!(uncontended.engine.plugged, 0, "uncontended writes waited in a plug");
        for shape in [Shape::Queued, Shape::Append] {
            let r = run_corebench(&shape.spec(20_000), IssuePolicy::Zwp);
            // At QD 64 over 4 zones, all but the first write of a zone visit waits.
            assert!(r.engine.plugged >= 18_000, "{shape:?}: only {} of 20000 BIOs waited in a plug", r.engine.plugged);
        }
        let emulated = run_corebench(&Shape::Append.spec(1_000), IssuePolicy::Zwp);
        assert_eq!(emulated.engine.emulated_appends, 1_000);
        let native = run_corebench(&Shape::Append.spec(1_000), IssuePolicy::Passthrough);
        assert_eq!(native.engine.emulated_appends, 0);
    }

    #[test]
    fn full_zones_are_reset() {
        // 2 zones of 256 MiB at 1 MiB: 256 writes fill a zone; 2000 BIOs wrap several times.
        for zones in [1, 2] {
            let spec = CoreBenchSpec { shape: Shape::Queued, bios: 2_000, zones, iodepth: 8, bs_bytes: 1 << 20 };
            for policy in [IssuePolicy::Zwp, IssuePolicy::Passthrough] {
                let r = run_corebench(&spec, policy);
                assert_eq!((r.bios, r.errors), (2_000, 0), "{policy:?} over {zones} zones");
                assert!(r.engine.requests > 2_000 - 2_000 / 256, "{policy:?}: the streams moved zones");
            }
        }
        // Long enough for every stream to fill a zone, move, and reset a used zone:
        // writes keep waiting in plugs throughout.
        let r = run_corebench(&Shape::Queued.spec(600_000), IssuePolicy::Zwp);
        assert_eq!(r.errors, 0);
        assert!(r.engine.plugged >= 590_000, "only {} of 600000 BIOs waited in a plug", r.engine.plugged);
    }
}
