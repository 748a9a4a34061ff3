//! A simulated device (a preset's engine and timing model, or a stack of them)
//! paced to wall-clock time: virtual time follows wall time, stretched by a time
//! scale. Each request enters the simulation at the (scaled) wall time it arrives, and
//! its completion goes back to the kernel once wall time reaches the time the model
//! completes it.
//!
//! One thread owns the simulation (it is single-threaded and deterministic for a
//! given arrival schedule): it sleeps until the next request arrives or the model's
//! next event is due, whichever comes first, runs the simulation up to the wall time
//! it woke at, and calls back what completed.
//!
//! The simulator keeps zone state but no data (its disks are not memory-backed): the
//! data the kernel writes is kept here, in the memory device's page store
//! ([`zblk_dev::PageStore`]: only what was written), bounded by a limit, or not at all
//! (reads then return zeroes).
//!
//! A time scale N stretches every time of the model N times: a request the model
//! takes 8 ms for takes 8 N ms of wall time. The host's own costs per request (the
//! kernel, the guest of a VM, this process) stay what they are, so with N large
//! enough they become small beside the model's, and what the kernel measures, scaled
//! back by N, is what the model does under the kernel.

use crate::served::{CopyOut, Done, Reply, ReplyTo, Req, Served, encode_zone, outcome, report_count};
use crate::{BLK_ZONE_BYTES, ServeError, say};
use slab::Slab;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zblk_core::bio::{Bio, BioFlags, Op, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneType;
use zblk_dev::PageStore;
use zblk_dev::buf::AlignedBuf;
use zblk_sim::{Sim, join_or_raise};

/// The written data of a simulated device: the memory device's sparse page store, at
/// most `limit` bytes of it (`None`: no data kept at all).
#[derive(Debug)]
pub struct DataStore {
    pages: PageStore,
    limit: Option<u64>,
}

impl DataStore {
    /// A store keeping at most `limit` bytes of pages, or no data (`None`).
    pub fn new(limit: Option<u64>) -> DataStore {
        DataStore { pages: PageStore::new(), limit }
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.pages.resident_bytes()
    }

    /// Whether data is kept.
    pub fn keeps_data(&self) -> bool {
        self.limit.is_some()
    }

    /// Whether `more` bytes of new pages would go past the limit.
    pub fn would_exceed(&self, more: u64) -> bool {
        self.limit.is_some_and(|l| self.bytes().saturating_add(more) > l)
    }

    /// Stores `data` at `sector`.
    pub fn write(&mut self, sector: Sector, data: &[u8]) {
        if self.keeps_data() {
            self.pages.write(sector, data);
        }
    }

    /// Reads into `buf` from `sector`: zeroes where nothing was written.
    pub fn read(&self, sector: Sector, buf: &mut [u8]) {
        self.pages.read(sector, buf);
    }

    /// Makes `nr` sectors from `start` read as zeroes: a zone reset, a discard, an
    /// unmapped WRITE_ZEROES (their pages are freed), or with `nounmap` a
    /// WRITE_ZEROES that writes its zeroes (pages stay allocated).
    pub fn zero(&mut self, start: Sector, nr: u64, nounmap: bool) {
        match nounmap && self.keeps_data() {
            true => self.pages.fill_zeroes(start, nr),
            false => self.pages.zero_range(start, nr),
        }
    }
}

/// How a paced simulation is made, inside its own thread (the simulator is not
/// `Send`).
pub type SimBuilder = Box<dyn FnOnce() -> Result<Sim, ServeError> + Send>;

/// What the pacing thread receives.
enum Msg {
    Req(Req, ReplyTo),
    /// The server is stopping ([`Served::stop`]): no more pacing.
    Stop,
}

/// How long a stopping simulation may run its model ahead, as fast as it goes, to
/// complete the requests it holds; what it has not completed by then fails (EIO).
/// Simulating is far faster than the model's time (a deep queue of the SMR model's
/// 1 MiB writes takes milliseconds), so this bound is met only by a model that never
/// completes what it holds.
const STOP_RUN_AHEAD: Duration = Duration::from_millis(200);

/// A simulation paced to wall time, served to the ublk queues.
pub struct PacedSim {
    tx: Mutex<Sender<Msg>>,
    geo: Geometry,
    keeps_data: bool,
}

/// What the pacing thread says about its device once it is built.
pub struct PacedInfo {
    /// The top device's geometry.
    pub geo: Geometry,
    /// The timing models, one line per disk.
    pub models: Vec<String>,
}

impl PacedSim {
    /// Builds the simulation in a new thread and starts pacing it, every time of its
    /// model stretched `time_scale` times (1: real time). The thread ends once every
    /// [`PacedSim`] handle is dropped.
    pub fn start(
        build: SimBuilder,
        store: DataStore,
        time_scale: u32,
    ) -> Result<(Arc<PacedSim>, PacedInfo, JoinHandle<()>), ServeError> {
        assert!(time_scale >= 1, "a time scale stretches, it never shrinks");
        let keeps_data = store.keeps_data();
        let (tx, rx) = mpsc::channel();
        let (info_tx, info_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("zblk-paced".into())
            .spawn(move || {
                let sim = match build() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = info_tx.send(Err(e));
                        return;
                    }
                };
                let geo = sim.stack().info(sim.stack().top()).geometry.clone();
                let models = sim
                    .model_descriptions()
                    .into_iter()
                    .map(|(d, m)| format!("{}: {m}", sim.stack().info(d).name))
                    .collect();
                let _ = info_tx.send(Ok(PacedInfo { geo, models }));
                Pacer::new(sim, store, time_scale).run(rx);
            })
            .map_err(|e| ServeError(format!("starting the simulation's thread: {e}")))?;
        let info = match info_rx.recv() {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => {
                join_or_raise(thread);
                return Err(e);
            }
            Err(_) => {
                join_or_raise(thread);
                return Err(ServeError("internal error: the simulation's thread ended".into()));
            }
        };
        let geo = info.geo.clone();
        Ok((Arc::new(PacedSim { tx: Mutex::new(tx), geo, keeps_data }), info, thread))
    }
}

impl Served for PacedSim {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn keeps_data(&self) -> bool {
        self.keeps_data
    }

    fn submit(&self, req: Req, done: ReplyTo) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Err(mpsc::SendError(Msg::Req(req, done))) = tx.send(Msg::Req(req, done)) {
            let buf = match req {
                Req::Io { buf, .. } | Req::Report { buf, .. } => buf,
            };
            done.reply(Reply { result: Err(libc::EIO), buf, copy_out: CopyOut::Nothing });
        }
    }

    /// The model runs ahead of wall time from now on: what it holds completes at once
    /// (or fails, past [`STOP_RUN_AHEAD`]), and so does every later request.
    fn stop(&self) {
        // (A thread that has ended holds nothing.)
        let _ = self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(Msg::Stop);
    }
}

/// A request inside the simulation.
struct Pending {
    op: Op,
    sector: Sector,
    nr_sectors: u32,
    flags: BioFlags,
    buf: AlignedBuf,
    done: ReplyTo,
}

/// The host's turnaround, as the served device sees it: from handing back a completion
/// that leaves nothing in flight to the arrival of the next request. At queue depth 1
/// it is what the host (the kernel, the program, a VM) costs per request, beside the
/// model's own time; a time scale divides it in model time.
#[derive(Debug, Default)]
struct Turnaround {
    idle_since: Option<Instant>,
    gaps_ns: Vec<u64>,
}

impl Turnaround {
    /// Samples kept (enough for a median and a 90th percentile).
    const MAX_SAMPLES: usize = 1 << 20;

    fn idle(&mut self) {
        self.idle_since = Some(Instant::now());
    }

    fn arrival(&mut self, idle: bool) {
        let since = self.idle_since.take();
        if let (true, Some(t)) = (idle, since)
            && self.gaps_ns.len() < Self::MAX_SAMPLES
        {
            self.gaps_ns.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
    }

    /// `N requests, median X us, p90 Y us of wall time (...)`, or `None` without a
    /// sample.
    fn summary(&mut self, scale: u64) -> Option<String> {
        if self.gaps_ns.is_empty() {
            return None;
        }
        self.gaps_ns.sort_unstable();
        let at = |q: f64| self.gaps_ns[((self.gaps_ns.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        let (median, p90) = (at(0.5), at(0.9));
        let model = match scale {
            1 => String::new(),
            n => format!(", {:.1} us and {:.1} us of model time at time scale {n}", median / n as f64, p90 / n as f64),
        };
        Some(format!(
            "host turnaround (a completion leaving nothing in flight to the next request): {} requests, median \
             {median:.1} us, p90 {p90:.1} us of wall time{model}",
            self.gaps_ns.len()
        ))
    }
}

/// The pacing thread's state.
struct Pacer {
    sim: Sim,
    store: DataStore,
    pending: Slab<Pending>,
    /// Bytes of writes in the simulation, counted against the data limit.
    writing: u64,
    /// Whether the data limit was reported on standard error already.
    limit_said: bool,
    start: Instant,
    /// Wall nanoseconds per nanosecond of the model.
    scale: u64,
    turnaround: Turnaround,
    /// The server is stopping: requests are no longer paced.
    stopping: bool,
}

impl Pacer {
    fn new(sim: Sim, store: DataStore, scale: u32) -> Pacer {
        let scale = u64::from(scale);
        let start = Instant::now();
        Pacer {
            sim,
            store,
            pending: Slab::new(),
            writing: 0,
            limit_said: false,
            start,
            scale,
            turnaround: Turnaround::default(),
            stopping: false,
        }
    }

    /// The model's time: wall time since the start, divided by the time scale.
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX) / self.scale
    }

    fn run(mut self, rx: Receiver<Msg>) {
        loop {
            let msg = match self.sim.next_event_ns() {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(_) if self.stopping => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(t) => match t.checked_sub(self.now()) {
                    Some(wait) if wait > 0 => rx.recv_timeout(Duration::from_nanos(wait.saturating_mul(self.scale))),
                    _ => Err(RecvTimeoutError::Timeout),
                },
            };
            match msg {
                Ok(m) => {
                    self.sim.run_until(self.now());
                    self.deliver();
                    self.take(m);
                    // Requests that arrived meanwhile enter at the same instant.
                    while let Ok(m) = rx.try_recv() {
                        self.take(m);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                // Every queue has stopped: nobody waits for what is in flight.
                Err(RecvTimeoutError::Disconnected) => {
                    if let Some(t) = self.turnaround.summary(self.scale) {
                        say(&t);
                    }
                    return;
                }
            }
            self.sim.run_until(self.now());
            self.deliver();
            if self.stopping {
                self.run_ahead();
            }
        }
    }

    /// Once stopping: runs the model ahead of wall time, as fast as it simulates,
    /// until it holds nothing, and fails what it still holds after
    /// [`STOP_RUN_AHEAD`].
    fn run_ahead(&mut self) {
        let until = Instant::now() + STOP_RUN_AHEAD;
        while !self.pending.is_empty() && Instant::now() < until {
            let Some(t) = self.sim.next_event_ns() else { break };
            self.sim.run_until(t);
            self.deliver();
        }
        for (_, p) in std::mem::take(&mut self.pending) {
            p.done.reply(Reply { result: Err(libc::EIO), buf: p.buf, copy_out: CopyOut::Nothing });
        }
        self.writing = 0;
    }

    fn top_geometry(&self) -> Geometry {
        self.sim.stack().info(self.sim.stack().top()).geometry.clone()
    }

    /// A request enters the simulation now (or, once stopping, is no longer paced).
    fn take(&mut self, msg: Msg) {
        let (req, done) = match msg {
            Msg::Req(req, done) => (req, done),
            Msg::Stop => {
                self.stopping = true;
                return;
            }
        };
        self.turnaround.arrival(self.pending.is_empty());
        let len = req.data_len();
        let (op, sector, nr_sectors, flags, buf) = match req {
            Req::Report { first, nr_zones, mut buf } => {
                let count = report_count(&self.top_geometry(), first, nr_zones, buf.len());
                let zones = self.sim.report_zones(self.sim.stack().top());
                for (i, z) in zones.iter().skip(first as usize).take(count).enumerate() {
                    encode_zone(z, &mut buf[i * BLK_ZONE_BYTES..(i + 1) * BLK_ZONE_BYTES]);
                }
                let n = count * BLK_ZONE_BYTES;
                return done.reply(Reply { result: Ok(Done::Bytes(n as i32)), buf, copy_out: CopyOut::Buf(n) });
            }
            Req::Io { op, sector, nr_sectors, flags, buf } => (op, sector, nr_sectors, flags, buf),
        };
        let writes = matches!(op, Op::Write | Op::ZoneAppend);
        if writes && self.store.would_exceed(self.writing + len as u64) {
            if !self.limit_said {
                self.limit_said = true;
                say(&format!(
                    "the data limit ({} bytes held) is reached: further writes fail with ENOSPC (raise                      --data-limit, or serve with --no-data)",
                    self.store.bytes()
                ));
            }
            return done.reply(Reply { result: Err(libc::ENOSPC), buf, copy_out: CopyOut::Nothing });
        }
        if writes {
            self.writing += len as u64;
        }
        let key = self.pending.insert(Pending { op, sector, nr_sectors, flags, buf, done });
        let bio = match op {
            Op::Read => Bio::read(sector, nr_sectors, 0),
            Op::Write => Bio::write(sector, nr_sectors, 0),
            Op::ZoneAppend => Bio::append(sector, nr_sectors, 0),
            Op::WriteZeroes | Op::Discard => Bio { op, sector, nr_sectors, flags, user_data: 0 },
            Op::Flush => Bio::flush(0),
            op => Bio::zone_op(op, sector, 0),
        };
        self.sim.submit(bio.with_flags(flags), key as u64, 0);
    }

    /// Hands back what completed.
    fn deliver(&mut self) {
        for c in self.sim.take_completions() {
            let Some(p) = self.pending.try_remove(c.token as usize) else {
                continue;
            };
            let Pending { op, sector, nr_sectors, flags, mut buf, done } = p;
            let len = if op.has_data() { nr_sectors as usize * SECTOR_SIZE as usize } else { 0 };
            if matches!(op, Op::Write | Op::ZoneAppend) {
                self.writing -= len as u64;
            }
            match (op, c.result) {
                (Op::Write | Op::ZoneAppend, Ok(at)) => self.store.write(at, &buf[..len]),
                (Op::Read, Ok(_)) => self.store.read(sector, &mut buf[..len]),
                (Op::WriteZeroes, Ok(at)) => {
                    self.store.zero(at, u64::from(nr_sectors), flags.contains(BioFlags::NOUNMAP))
                }
                (Op::Discard, Ok(_)) => self.store.zero(sector, u64::from(nr_sectors), false),
                (Op::ZoneReset, Ok(_)) => {
                    let zone = self.top_geometry().zone_sectors();
                    self.store.zero(sector, zone, false);
                }
                (Op::ZoneResetAll, Ok(_)) => self.discard_sequential(),
                _ => {}
            }
            let (result, copy_out) = outcome(op, len, c.result.map_err(|s: Status| s));
            done.reply(Reply { result, buf, copy_out });
            if self.pending.is_empty() {
                self.turnaround.idle();
            }
        }
    }

    /// Forgets the data of every sequential zone (RESET_ALL).
    fn discard_sequential(&mut self) {
        let top = self.sim.stack().top();
        let geo = self.top_geometry();
        let seq: Vec<u32> = self
            .sim
            .report_zones(top)
            .iter()
            .enumerate()
            .filter(|(_, z)| z.ztype != ZoneType::Conventional)
            .map(|(i, _)| i as u32)
            .collect();
        for z in seq {
            self.store.zero(geo.zone_start(ZoneNo(z)), geo.zone_sectors(), false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = zblk_dev::pages::PAGE_BYTES as u64;

    #[test]
    fn the_store_keeps_at_most_its_limit() {
        let mut s = DataStore::new(Some(1 << 20));
        s.write(Sector(1), &[7u8; 1024]);
        s.write(Sector(7), &[9u8; 1024]);
        assert_eq!(s.bytes(), 2 * PAGE);
        s.zero(Sector(0), 8, false);
        assert_eq!(s.bytes(), PAGE, "a reset or discard frees whole pages");
        s.zero(Sector(0), 8, true);
        assert_eq!(s.bytes(), 2 * PAGE, "NOUNMAP zeroes are written");
        assert!(s.would_exceed((1 << 20) - 2 * PAGE + 1));
        assert!(!s.would_exceed((1 << 20) - 2 * PAGE));
    }

    #[test]
    fn without_data_reads_are_zeroes() {
        let mut s = DataStore::new(None);
        s.write(Sector(0), &[7u8; 4096]);
        s.zero(Sector(8), 8, true);
        let mut b = vec![1u8; 8192];
        s.read(Sector(0), &mut b);
        assert!(b.iter().all(|&x| x == 0));
        assert_eq!(s.bytes(), 0);
        assert!(!s.would_exceed(u64::MAX));
    }

    fn paced_scaled(spec: &str, scale: u32) -> (Arc<PacedSim>, JoinHandle<()>) {
        let spec = zblk_sim::presets::DeviceSpec::parse(spec).unwrap();
        let build: SimBuilder = Box::new(move || {
            spec.sim(&zblk_sim::SimConfig::new(spec.params.clone(), 1)).map_err(|e| ServeError(e.to_string()))
        });
        let (p, _, t) = PacedSim::start(build, DataStore::new(Some(1 << 20)), scale).unwrap();
        (p, t)
    }

    fn paced(spec: &str) -> (Arc<PacedSim>, JoinHandle<()>) {
        paced_scaled(spec, 1)
    }

    fn call(p: &PacedSim, req: Req) -> Reply {
        let (tx, rx) = mpsc::channel();
        p.submit(req, ReplyTo::call(move |r| tx.send(r).unwrap()));
        rx.recv().unwrap()
    }

    /// A request of `op` at `sector`: `data` written, or `data.len()` bytes read.
    fn io(op: Op, sector: u64, data: &[u8]) -> Req {
        let nr_sectors = (data.len() as u64 / SECTOR_SIZE) as u32;
        Req::Io { op, sector: Sector(sector), nr_sectors, flags: BioFlags::NONE, buf: AlignedBuf::from_slice(data) }
    }

    #[test]
    fn written_data_reads_back_and_a_reset_forgets_it() {
        let (p, t) = paced("nullb:zone_size=4,size=64,completion_nsec=1000");
        let w = call(&p, io(Op::Write, 0, &[5u8; 8192]));
        assert_eq!(w.result, Ok(Done::Bytes(8192)));
        let a = call(&p, io(Op::ZoneAppend, 0, &[6u8; 4096]));
        assert_eq!(a.result, Ok(Done::Appended(4096, 16)));
        let r = call(&p, io(Op::Read, 0, &[0u8; 16384]));
        assert_eq!((r.result, r.copy_out.buf_bytes()), (Ok(Done::Bytes(16384)), 16384));
        assert!(r.buf[..8192].iter().all(|&x| x == 5) && r.buf[8192..12288].iter().all(|&x| x == 6));
        assert!(r.buf[12288..].iter().all(|&x| x == 0));
        // Off the write pointer: the model's device refuses it, as a drive would.
        let bad = call(&p, io(Op::Write, 0, &[1u8; 4096]));
        assert_eq!(bad.result, Err(libc::EIO));
        let rep = call(&p, Req::Report { first: 0, nr_zones: 2, buf: AlignedBuf::zeroed(4096) });
        assert_eq!(rep.copy_out.buf_bytes(), 2 * BLK_ZONE_BYTES);
        assert_eq!(u64::from_ne_bytes(rep.buf[16..24].try_into().unwrap()), 24, "zone 0's write pointer");
        let z = call(&p, io(Op::ZoneReset, 0, &[]));
        assert_eq!(z.result, Ok(Done::Bytes(0)));
        let r = call(&p, io(Op::Read, 0, &[1u8; 4096]));
        assert!(r.buf.iter().all(|&x| x == 0));
        // Past the data limit (1 MiB): ENOSPC, and nothing reaches the device.
        let big = call(&p, io(Op::Write, 0, &vec![1u8; 2 << 20]));
        assert_eq!(big.result, Err(libc::ENOSPC));
        drop(p);
        t.join().unwrap();
    }

    #[test]
    fn write_zeroes_at_the_write_pointer_read_back_as_zeroes() {
        let (p, t) = paced("nullb:zone_size=4,size=64,completion_nsec=1000");
        assert_eq!(call(&p, io(Op::Write, 0, &[5u8; 4096])).result, Ok(Done::Bytes(4096)));
        let wz = Req::Io {
            op: Op::WriteZeroes,
            sector: Sector(8),
            nr_sectors: 8,
            flags: BioFlags::NOUNMAP,
            buf: AlignedBuf::zeroed(0),
        };
        assert_eq!(call(&p, wz).result, Ok(Done::Bytes(0)));
        let r = call(&p, io(Op::Read, 0, &[1u8; 8192]));
        assert!(r.buf[..4096].iter().all(|&x| x == 5) && r.buf[4096..].iter().all(|&x| x == 0));
        let rep = call(&p, Req::Report { first: 0, nr_zones: 1, buf: AlignedBuf::zeroed(4096) });
        assert_eq!(u64::from_ne_bytes(rep.buf[16..24].try_into().unwrap()), 16, "WRITE_ZEROES moves the write pointer");
        drop(p);
        t.join().unwrap();
    }

    /// Pacing waits for the model: ten writes one after the other on a device whose
    /// every command takes 20 ms of model time take at least 200 ms of wall time, and
    /// at a time scale of 3, at least 600 ms. (Lower bounds only: a busy machine makes
    /// it slower, never faster.)
    #[test]
    fn a_paced_device_takes_at_least_its_model_time_times_the_scale() {
        for scale in [1u32, 3] {
            let (p, t) = paced_scaled("nullb:zone_size=4,size=64,completion_nsec=20000000", scale);
            let start = Instant::now();
            for i in 0..10u64 {
                assert_eq!(call(&p, io(Op::Write, 8 * i, &[1u8; 4096])).result, Ok(Done::Bytes(4096)));
            }
            let took = start.elapsed();
            let least = Duration::from_millis(200 * u64::from(scale));
            assert!(took >= least, "scale {scale}: 10 commands of 20 ms each completed in {took:?}");
            drop(p);
            t.join().unwrap();
        }
    }

    /// A stop ends what the model holds at once, whatever its time: a write of an
    /// hour (a command of a minute at a time scale of 60) completes within a second
    /// of the stop, and so does one sent after it. Without the stop, neither
    /// completes in that second.
    #[test]
    fn a_stop_ends_what_the_model_holds_at_once() {
        let (p, t) = paced_scaled("nullb:zone_size=4,size=64,completion_nsec=60000000000", 60);
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        p.submit(io(Op::Write, 0, &[1u8; 4096]), ReplyTo::call(move |r| tx.send(r).unwrap()));
        assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "an hour's write completed at once");
        let start = Instant::now();
        p.stop();
        let r = rx.recv_timeout(Duration::from_secs(1)).expect("the stop ended the write held");
        assert_eq!(r.result, Ok(Done::Bytes(4096)), "the model ran ahead and completed it");
        p.submit(io(Op::Write, 8, &[2u8; 4096]), ReplyTo::call(move |r| tx2.send(r).unwrap()));
        let r = rx.recv_timeout(Duration::from_secs(1)).expect("a request after the stop is not paced");
        assert_eq!(r.result, Ok(Done::Bytes(4096)));
        assert!(start.elapsed() < Duration::from_secs(1), "{:?}", start.elapsed());
        drop(p);
        t.join().unwrap();
    }

    #[test]
    fn the_turnaround_counts_only_gaps_with_nothing_in_flight() {
        let mut t = Turnaround::default();
        assert_eq!(t.summary(1), None);
        t.idle();
        std::thread::sleep(Duration::from_millis(2));
        t.arrival(true);
        // A request arriving while another is in flight is no turnaround.
        t.idle();
        t.arrival(false);
        t.arrival(true);
        assert_eq!(t.gaps_ns.len(), 1);
        assert!(t.gaps_ns[0] >= 2_000_000, "{:?}", t.gaps_ns);
        let s = t.summary(4).unwrap();
        assert!(s.contains("1 requests") && s.contains("of model time at time scale 4"), "{s}");
    }

    #[test]
    fn a_striped_stack_serves_data_across_its_members() {
        let text = "striped:chunk=64k[2*nullb:zone_size=4,size=64,completion_nsec=1000]";
        let mut resolve =
            |t: &str| zblk_sim::presets::DeviceSpec::parse(t).map(|d| d.params).map_err(|e| e.to_string());
        let spec = zblk_core::stack::StackSpec::parse(text, &mut resolve).unwrap();
        let build: SimBuilder = Box::new(move || {
            let built = spec
                .build(zblk_core::stack::StackConfig::default(), Some(zblk_core::engine::IssuePolicy::Zwp))
                .map_err(|e| ServeError(e.to_string()))?;
            Ok(Sim::with_stack(built, zblk_sim::StackSimConfig::new(1), &mut zblk_sim::null_model))
        });
        let (p, info, t) = PacedSim::start(build, DataStore::new(Some(1 << 20)), 1).unwrap();
        assert_eq!((info.geo.zone_sectors(), info.geo.nr_zones()), (16384, 16), "8 MiB zones over two members");
        let data: Vec<u8> = (0..256 * 1024).map(|i| (i / 512) as u8).collect();
        assert_eq!(call(&p, io(Op::Write, 0, &data)).result, Ok(Done::Bytes(256 * 1024)));
        let r = call(&p, io(Op::Read, 0, &vec![0; 256 * 1024]));
        assert_eq!(&r.buf[..], &data[..]);
        drop(p);
        t.join().unwrap();
    }
}
