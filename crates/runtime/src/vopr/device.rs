//! The runtime vopr's device: an image with media errors drawn from the seed, whose
//! every decision (a transfer prepared or finished, a request carried out whole, the
//! power going off) is taken under one lock, predicted by the model of an image
//! ([`super::model`]) and compared with what the image answered, and logged with
//! its place on the run's clock for the replay of the host's side.

use super::model::{ImageModel, Predicted};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use zblk_core::bio::{Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneInfo;
use zblk_dev::IoBuf;
use zblk_dev::device::{DataFds, Device, DeviceZeroing, Plan, Transfer};
use zblk_dev::error::DeviceError;
use zblk_dev::file::powercut::PowerCut;
use zblk_sim::oracle::kernel_errno;

/// One decision of the device, as the replay of the host's side reads it.
#[derive(Clone, Debug)]
pub(super) struct DevEvent {
    /// Its place on the run's clock.
    pub seq: u64,
    /// The request.
    pub req: Request,
    /// Where it executes (for a transfer, where the image accepted it).
    pub at: u64,
    /// Its outcome: where it executed, or the errno.
    pub result: Predicted,
    /// The outcome is the request's last (a refusal, a finished transfer, a request
    /// carried out whole), not an acceptance.
    pub last: bool,
    /// The zone it is in and that zone's write pointer offset after it, as a report
    /// gives it.
    pub wp: Option<(u32, Option<u64>)>,
    /// Writes it revoked (absolute starts): they completed, and fail now.
    pub revoked: Vec<u64>,
}

/// What the lock guards.
#[derive(Debug)]
struct Decisions {
    model: ImageModel,
    events: Vec<DevEvent>,
    /// The first difference between the image and the model.
    violation: Option<String>,
    power: Option<PowerCut>,
}

/// An image failing reads and writes with an I/O error at seeded random points, as a
/// medium would (the transfer is ended with EIO whether or not the data moved, and
/// the image handles it as any failed transfer), checked by the model of an image.
pub struct FaultyDevice<D: Device> {
    inner: D,
    rng: Mutex<ChaCha8Rng>,
    write_ppm: u32,
    read_ppm: u32,
    enabled: AtomicBool,
    injected: AtomicU64,
    /// Hand no descriptors to the driver: every transfer goes through `perform`, and
    /// so through the media (where a power-cut model sees it).
    no_fds: bool,
    clock: Arc<AtomicU64>,
    decisions: Mutex<Decisions>,
    /// Zones a write error hit, and zones a read error hit, since the last look.
    hit: Mutex<(BTreeSet<u32>, BTreeSet<u32>)>,
}

impl<D: Device> std::fmt::Debug for FaultyDevice<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyDevice").field("name", &self.inner.name()).finish_non_exhaustive()
    }
}

/// The faulty device's own records (its random source, its decisions, the zones it
/// hit). Poisoning is recovered: they are the check's, never committed anywhere, and
/// a panic on any thread of a round already fails the seed (`vopr/mod.rs` catches
/// it as the seed's failure), whatever the records say after it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

impl<D: Device> FaultyDevice<D> {
    /// `inner` (a freshly created image) failing `write_ppm` of its writes and
    /// `read_ppm` of its reads (parts per million), drawn from `seed`; `power` the
    /// model of its file's power, if the run cuts it (no descriptors are then handed
    /// to the driver); `clock` the run's clock.
    pub(super) fn new(
        inner: D,
        (write_ppm, read_ppm): (u32, u32),
        seed: u64,
        power: Option<PowerCut>,
        clock: Arc<AtomicU64>,
    ) -> FaultyDevice<D> {
        let model = ImageModel::new(inner.geometry());
        FaultyDevice {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed ^ 0x3ed1_a000)),
            write_ppm,
            read_ppm,
            enabled: AtomicBool::new(true),
            injected: AtomicU64::new(0),
            no_fds: power.is_some(),
            clock,
            decisions: Mutex::new(Decisions { model, events: Vec::new(), violation: None, power }),
            hit: Mutex::new((BTreeSet::new(), BTreeSet::new())),
            inner,
        }
    }

    /// Turns fault injection on or off (off while the checker reads back).
    pub(super) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Faults injected so far.
    pub(super) fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// The zones write errors and read errors hit since the last call.
    pub(super) fn take_hit(&self) -> (BTreeSet<u32>, BTreeSet<u32>) {
        std::mem::take(&mut *lock(&self.hit))
    }

    /// The decisions logged since the last call, and the first difference between
    /// the image and the model, if any.
    pub(super) fn take_events(&self) -> (Vec<DevEvent>, Option<String>) {
        let mut d = lock(&self.decisions);
        (std::mem::take(&mut d.events), d.violation.clone())
    }

    /// Cuts the power: from now on the media fail every operation.
    pub(super) fn power_off(&self) {
        let mut d = lock(&self.decisions);
        if let Some(p) = &d.power {
            p.power_off();
            d.model.power_off = true;
        }
    }

    /// The image's zones as the model has them must be its report.
    pub(super) fn compare_zones(&self) -> Result<(), String> {
        let d = lock(&self.decisions);
        let mut zones = Vec::new();
        self.inner.report_zones(Sector::ZERO, usize::MAX, &mut zones).map_err(|e| format!("report: {e:?}"))?;
        d.model.compare(&zones).map_err(|e| format!("device model: {e}"))
    }

    /// Whether to fail a transfer of `req` (`write`: a write's).
    fn inject(&self, req: &Request, write: bool) -> bool {
        if !self.enabled.load(Ordering::SeqCst) {
            return false;
        }
        let ppm = if write { self.write_ppm } else { self.read_ppm };
        if ppm == 0 || lock(&self.rng).random_range(0..1_000_000) >= ppm {
            return false;
        }
        self.injected.fetch_add(1, Ordering::SeqCst);
        let geo = self.inner.geometry();
        if geo.is_zoned() {
            let z = geo.zone_no(req.sector).0;
            let mut hit = lock(&self.hit);
            if write {
                hit.0.insert(z)
            } else {
                hit.1.insert(z)
            };
        }
        true
    }

    /// Compares the image's answer `got` to `req` with the model's `want` and logs
    /// the decision.
    #[allow(clippy::too_many_arguments)]
    fn decided(
        &self,
        d: &mut Decisions,
        req: &Request,
        at: Option<Sector>,
        got: Result<Sector, Status>,
        want: Result<(Predicted, Vec<u64>), String>,
        last: bool,
    ) {
        let got_p: Predicted = got.map(|s| s.0).map_err(|s| kernel_errno(s.code()));
        let (want, revoked) = match want {
            Ok(w) => w,
            Err(v) => {
                d.violation.get_or_insert(format!("device model: {v}"));
                (got_p, Vec::new())
            }
        };
        if got_p != want && d.violation.is_none() {
            d.violation = Some(format!(
                "device model: the image answered {req:?} with {got:?}, the model of an image predicts {}",
                match want {
                    Ok(at) => format!("success at {at}"),
                    Err(e) => zblk_sim::oracle::errno::name(e),
                }
            ));
        }
        let geo = self.inner.geometry();
        let at = at.map_or(got_p.unwrap_or(req.sector.0), |s| s.0);
        let wp = (geo.is_zoned() && req.op.has_range()).then(|| {
            let z = geo.zone_no(Sector(at));
            (z.0, d.model.host_wp(z))
        });
        let seq = self.clock.fetch_add(1, Ordering::SeqCst);
        let last = last || got_p.is_err();
        d.events.push(DevEvent { seq, req: *req, at, result: got_p, last, wp, revoked });
    }
}

impl<D: Device> Device for FaultyDevice<D> {
    fn geometry(&self) -> &Geometry {
        self.inner.geometry()
    }
    fn rotational(&self) -> bool {
        self.inner.rotational()
    }
    fn keeps_zone_order(&self) -> bool {
        // A failed transfer is ended as the device ends any: the order is the image's.
        self.inner.keeps_zone_order()
    }
    fn name(&self) -> String {
        format!("{} (faulty)", self.inner.name())
    }
    fn data_fds(&self) -> DataFds<'_> {
        let fds = self.inner.data_fds();
        if self.no_fds { DataFds { direct: None, buffered: None, ..fds } } else { fds }
    }
    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        let mut d = lock(&self.decisions);
        let r = self.inner.prepare(req);
        let transfer = ImageModel::is_transfer(req);
        match (r, transfer) {
            (Ok(Plan::Blocking), false) => {}
            (Ok(Plan::Transfer(t)), true) => {
                let want = Ok((d.model.accept(req), Vec::new()));
                self.decided(&mut d, req, None, Ok(t.at), want, false);
            }
            (Err(s), true) => {
                let want = Ok((d.model.accept(req), Vec::new()));
                self.decided(&mut d, req, None, Err(s), want, true);
            }
            (r, _) => {
                let v = format!("device model: the image prepared {req:?} as {r:?}; a transfer expected: {transfer}");
                d.violation.get_or_insert(v);
            }
        }
        r
    }
    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let Plan::Transfer(t) = plan else {
            let mut d = lock(&self.decisions);
            let r = self.inner.perform(req, plan, buf);
            let want = d.model.blocking(req);
            self.decided(&mut d, req, None, r, want, true);
            return r;
        };
        let fail = self.inject(req, t.write);
        if fail && t.write {
            // A medium error takes its time (retries): the writes issued after it to
            // the same zone, on other workers, complete first, as a pipelined zone's
            // writes may.
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut d = lock(&self.decisions);
        let r = if fail { self.inner.finish(req, t, Err(eio())) } else { self.inner.perform(req, plan, buf) };
        let ok = !fail && !d.model.power_off;
        let want = d.model.finish(req, t.at.0, ok);
        self.decided(&mut d, req, Some(t.at), r, want, true);
        r
    }
    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        let io = if self.inject(req, t.write) { Err(eio()) } else { io };
        let mut d = lock(&self.decisions);
        let ok = io.is_ok();
        let r = self.inner.finish(req, t, io);
        let want = d.model.finish(req, t.at.0, ok);
        self.decided(&mut d, req, Some(t.at), r, want, true);
        r
    }
    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        self.inner.report_zones(from, max, out)
    }
    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        self.inner.zeroing(nounmap)
    }
    fn close(&self) -> Result<(), DeviceError> {
        self.inner.close()
    }
}

/// A shared device handed to the runtime while the run keeps a handle on it.
pub(super) struct ArcDevice<D: Device>(pub(super) Arc<FaultyDevice<D>>);

impl<D: Device> Device for ArcDevice<D> {
    fn geometry(&self) -> &Geometry {
        self.0.geometry()
    }
    fn rotational(&self) -> bool {
        self.0.rotational()
    }
    fn keeps_zone_order(&self) -> bool {
        self.0.keeps_zone_order()
    }
    fn name(&self) -> String {
        self.0.name()
    }
    fn data_fds(&self) -> DataFds<'_> {
        self.0.data_fds()
    }
    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        self.0.prepare(req)
    }
    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        self.0.perform(req, plan, buf)
    }
    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        self.0.finish(req, t, io)
    }
    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        self.0.report_zones(from, max, out)
    }
    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        self.0.zeroing(nounmap)
    }
    fn close(&self) -> Result<(), DeviceError> {
        self.0.close()
    }
}
