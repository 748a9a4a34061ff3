//! A simulated device (a preset's engine and timing model, or a stack of them)
//! paced to wall-clock time: virtual time follows wall time. Each request enters the
//! simulation at the wall time it arrives, and its completion goes back to the
//! kernel once wall time reaches the time the model completes it.
//!
//! One thread owns the simulation (it is single-threaded and deterministic for a
//! given arrival schedule): it sleeps until the next request arrives or the model's
//! next event is due, whichever comes first, runs the simulation up to the wall time
//! it woke at, and calls back what completed.
//!
//! The simulator keeps zone state but no data (its disks are not memory-backed): the
//! data the kernel writes is kept here, in a sparse map of 4 KiB pages holding only
//! what was written, bounded by a limit, or not at all (reads then return zeroes).

use super::served::{BLK_ZONE_BYTES, Done, DoneFn, Reply, Req, Served, encode_zone, outcome, report_count};
use crate::CliError;
use crate::out::errln;
use slab::Slab;
use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zblk_core::bio::{Bio, Op, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneType;
use zblk_sim::Sim;

/// Bytes of one page of the data store.
const PAGE: u64 = 4096;
const SECTORS_PER_PAGE: u64 = PAGE / SECTOR_SIZE;

/// The written data of a simulated device: 4 KiB pages by page number, only those
/// written, at most `limit` bytes of them (`None`: no data kept at all).
#[derive(Debug)]
pub(crate) struct DataStore {
    pages: BTreeMap<u64, Box<[u8]>>,
    limit: Option<u64>,
}

impl DataStore {
    /// A store keeping at most `limit` bytes of pages, or no data (`None`).
    pub(crate) fn new(limit: Option<u64>) -> DataStore {
        DataStore { pages: BTreeMap::new(), limit }
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE
    }

    /// Whether data is kept.
    pub(crate) fn keeps_data(&self) -> bool {
        self.limit.is_some()
    }

    /// Whether `more` bytes of new pages would go past the limit.
    pub(crate) fn would_exceed(&self, more: u64) -> bool {
        self.limit.is_some_and(|l| self.bytes().saturating_add(more) > l)
    }

    /// Stores `data` at `sector`.
    pub(crate) fn write(&mut self, sector: Sector, data: &[u8]) {
        if !self.keeps_data() {
            return;
        }
        let mut at = sector.0 * SECTOR_SIZE;
        let mut rest = data;
        while !rest.is_empty() {
            let (page, off) = (at / PAGE, (at % PAGE) as usize);
            let n = rest.len().min(PAGE as usize - off);
            let p = self.pages.entry(page).or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            p[off..off + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            at += n as u64;
        }
    }

    /// Reads into `buf` from `sector`: zeroes where nothing was written.
    pub(crate) fn read(&self, sector: Sector, buf: &mut [u8]) {
        let mut at = sector.0 * SECTOR_SIZE;
        let mut rest = &mut buf[..];
        while !rest.is_empty() {
            let (page, off) = (at / PAGE, (at % PAGE) as usize);
            let n = rest.len().min(PAGE as usize - off);
            match self.pages.get(&page) {
                Some(p) => rest[..n].copy_from_slice(&p[off..off + n]),
                None => rest[..n].fill(0),
            }
            rest = &mut rest[n..];
            at += n as u64;
        }
    }

    /// Forgets `nr` sectors from `start` (a zone reset): they read as zeroes again.
    /// Zones are whole pages (a zone size is a power of two of at least 4 KiB here).
    pub(crate) fn discard(&mut self, start: Sector, nr: u64) {
        let (first, end) = (start.0 / SECTORS_PER_PAGE, (start.0 + nr).div_ceil(SECTORS_PER_PAGE));
        let keys: Vec<u64> = self.pages.range(first..end).map(|(k, _)| *k).collect();
        for k in keys {
            self.pages.remove(&k);
        }
    }
}

/// How a paced simulation is made, inside its own thread (the simulator is not
/// `Send`).
pub(crate) type SimBuilder = Box<dyn FnOnce() -> Result<Sim, CliError> + Send>;

/// What the pacing thread receives.
enum Msg {
    Req(Req, DoneFn),
}

/// A simulation paced to wall time, served to the ublk queues.
pub(crate) struct PacedSim {
    tx: Mutex<Sender<Msg>>,
    geo: Geometry,
}

/// What the pacing thread says about its device once it is built.
pub(crate) struct PacedInfo {
    /// The top device's geometry.
    pub geo: Geometry,
    /// The timing models, one line per disk.
    pub models: Vec<String>,
}

impl PacedSim {
    /// Builds the simulation in a new thread and starts pacing it. The thread ends
    /// once every [`PacedSim`] handle is dropped.
    pub(crate) fn start(
        build: SimBuilder,
        store: DataStore,
    ) -> Result<(Arc<PacedSim>, PacedInfo, JoinHandle<()>), CliError> {
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
                Pacer::new(sim, store).run(rx);
            })
            .map_err(|e| CliError(format!("starting the simulation's thread: {e}")))?;
        let info = match info_rx.recv() {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(CliError::msg("internal error: the simulation's thread ended"));
            }
        };
        let geo = info.geo.clone();
        Ok((Arc::new(PacedSim { tx: Mutex::new(tx), geo }), info, thread))
    }
}

impl Served for PacedSim {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn submit(&self, req: Req, done: DoneFn) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Err(mpsc::SendError(Msg::Req(_, done))) = tx.send(Msg::Req(req, done)) {
            done(Reply { result: Err(libc::EIO), buf: Vec::new(), copy_out: 0 });
        }
    }
}

/// A request inside the simulation.
struct Pending {
    op: Op,
    sector: Sector,
    buf: Vec<u8>,
    done: DoneFn,
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
}

impl Pacer {
    fn new(sim: Sim, store: DataStore) -> Pacer {
        Pacer { sim, store, pending: Slab::new(), writing: 0, limit_said: false, start: Instant::now() }
    }

    /// Wall time since the start, which virtual time follows.
    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn run(mut self, rx: Receiver<Msg>) {
        loop {
            let msg = match self.sim.next_event_ns() {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(t) => match t.checked_sub(self.now()) {
                    Some(wait) if wait > 0 => rx.recv_timeout(Duration::from_nanos(wait)),
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
                Err(RecvTimeoutError::Disconnected) => return,
            }
            self.sim.run_until(self.now());
            self.deliver();
        }
    }

    /// A request enters the simulation now.
    fn take(&mut self, Msg::Req(req, done): Msg) {
        match req {
            Req::Report { first, nr_zones, mut buf } => {
                let geo = self.sim.stack().info(self.sim.stack().top()).geometry.clone();
                let count = report_count(&geo, first, nr_zones, buf.len());
                let zones = self.sim.report_zones(self.sim.stack().top());
                for (i, z) in zones.iter().skip(first as usize).take(count).enumerate() {
                    encode_zone(z, &mut buf[i * BLK_ZONE_BYTES..(i + 1) * BLK_ZONE_BYTES]);
                }
                let n = count * BLK_ZONE_BYTES;
                done(Reply { result: Ok(Done::Bytes(n as i32)), buf, copy_out: n });
            }
            Req::Io { op, sector, flags, buf } => {
                let nr = (buf.len() as u64 / SECTOR_SIZE) as u32;
                let writes = matches!(op, Op::Write | Op::ZoneAppend);
                if writes && self.store.would_exceed(self.writing + buf.len() as u64) {
                    if !self.limit_said {
                        self.limit_said = true;
                        errln!(
                            "zblk: the data limit ({} bytes held) is reached: further writes fail with ENOSPC \
                             (raise --data-limit, or serve with --no-data)",
                            self.store.bytes()
                        );
                    }
                    done(Reply { result: Err(libc::ENOSPC), buf, copy_out: 0 });
                    return;
                }
                if writes {
                    self.writing += buf.len() as u64;
                }
                let key = self.pending.insert(Pending { op, sector, buf, done });
                let bio = match op {
                    Op::Read => Bio::read(sector, nr, 0),
                    Op::Write => Bio::write(sector, nr, 0),
                    Op::ZoneAppend => Bio::append(sector, nr, 0),
                    Op::Flush => Bio::flush(0),
                    op => Bio::zone_op(op, sector, 0),
                };
                self.sim.submit(bio.with_flags(flags), key as u64, 0);
            }
        }
    }

    /// Hands back what completed.
    fn deliver(&mut self) {
        for c in self.sim.take_completions() {
            let Some(p) = self.pending.try_remove(c.token as usize) else {
                continue;
            };
            let Pending { op, sector, mut buf, done } = p;
            if matches!(op, Op::Write | Op::ZoneAppend) {
                self.writing -= buf.len() as u64;
            }
            match (op, c.result) {
                (Op::Write | Op::ZoneAppend, Ok(at)) => self.store.write(at, &buf),
                (Op::Read, Ok(_)) => self.store.read(sector, &mut buf),
                (Op::ZoneReset, Ok(_)) => {
                    let geo = self.sim.stack().info(self.sim.stack().top()).geometry.clone();
                    self.store.discard(sector, geo.zone_sectors());
                }
                (Op::ZoneResetAll, Ok(_)) => self.discard_sequential(),
                _ => {}
            }
            let (result, copy_out) = outcome(op, buf.len(), c.result.map_err(|s: Status| s));
            done(Reply { result, buf, copy_out });
        }
    }

    /// Forgets the data of every sequential zone (RESET_ALL).
    fn discard_sequential(&mut self) {
        let top = self.sim.stack().top();
        let geo = self.sim.stack().info(top).geometry.clone();
        let seq: Vec<u32> = self
            .sim
            .report_zones(top)
            .iter()
            .enumerate()
            .filter(|(_, z)| z.ztype != ZoneType::Conventional)
            .map(|(i, _)| i as u32)
            .collect();
        for z in seq {
            self.store.discard(geo.zone_start(ZoneNo(z)), geo.zone_sectors());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_keeps_only_what_is_written() {
        let mut s = DataStore::new(Some(1 << 20));
        s.write(Sector(1), &[7u8; 1024]);
        assert_eq!(s.bytes(), PAGE);
        let mut b = vec![1u8; 2048];
        s.read(Sector(0), &mut b);
        assert!(b[..512].iter().all(|&x| x == 0));
        assert!(b[512..1536].iter().all(|&x| x == 7));
        assert!(b[1536..].iter().all(|&x| x == 0));
        s.write(Sector(7), &[9u8; 1024]);
        assert_eq!(s.bytes(), 2 * PAGE);
        s.discard(Sector(0), 8);
        assert_eq!(s.bytes(), PAGE);
        assert!(s.would_exceed((1 << 20) - PAGE + 1));
        assert!(!s.would_exceed((1 << 20) - PAGE));
    }

    #[test]
    fn without_data_reads_are_zeroes() {
        let mut s = DataStore::new(None);
        s.write(Sector(0), &[7u8; 4096]);
        let mut b = vec![1u8; 4096];
        s.read(Sector(0), &mut b);
        assert!(b.iter().all(|&x| x == 0));
        assert!(!s.would_exceed(u64::MAX));
    }

    fn paced(spec: &str) -> (Arc<PacedSim>, JoinHandle<()>) {
        let spec = crate::devspec::parse(spec).unwrap();
        let build: SimBuilder = Box::new(move || {
            spec.sim(&zblk_sim::SimConfig::new(spec.params.clone(), 1)).map_err(|e| CliError(e.to_string()))
        });
        let (p, _, t) = PacedSim::start(build, DataStore::new(Some(1 << 20))).unwrap();
        (p, t)
    }

    fn call(p: &PacedSim, req: Req) -> Reply {
        let (tx, rx) = mpsc::channel();
        p.submit(req, Box::new(move |r| tx.send(r).unwrap()));
        rx.recv().unwrap()
    }

    #[test]
    fn written_data_reads_back_and_a_reset_forgets_it() {
        let (p, t) = paced("nullb:zone_size=4,size=64,completion_nsec=1000");
        let w = call(&p, Req::Io { op: Op::Write, sector: Sector(0), flags: Default::default(), buf: vec![5u8; 8192] });
        assert_eq!(w.result, Ok(Done::Bytes(8192)));
        let a = call(
            &p,
            Req::Io { op: Op::ZoneAppend, sector: Sector(0), flags: Default::default(), buf: vec![6u8; 4096] },
        );
        assert_eq!(a.result, Ok(Done::Appended(4096, 16)));
        let r = call(&p, Req::Io { op: Op::Read, sector: Sector(0), flags: Default::default(), buf: vec![0u8; 16384] });
        assert_eq!((r.result, r.copy_out), (Ok(Done::Bytes(16384)), 16384));
        assert!(r.buf[..8192].iter().all(|&x| x == 5) && r.buf[8192..12288].iter().all(|&x| x == 6));
        assert!(r.buf[12288..].iter().all(|&x| x == 0));
        // Off the write pointer: the model's device refuses it, as a drive would.
        let bad =
            call(&p, Req::Io { op: Op::Write, sector: Sector(0), flags: Default::default(), buf: vec![1u8; 4096] });
        assert_eq!(bad.result, Err(libc::EIO));
        let rep = call(&p, Req::Report { first: 0, nr_zones: 2, buf: vec![0u8; 4096] });
        assert_eq!(rep.copy_out, 2 * BLK_ZONE_BYTES);
        assert_eq!(u64::from_ne_bytes(rep.buf[16..24].try_into().unwrap()), 24, "zone 0's write pointer");
        let z = call(&p, Req::Io { op: Op::ZoneReset, sector: Sector(0), flags: Default::default(), buf: Vec::new() });
        assert_eq!(z.result, Ok(Done::Bytes(0)));
        let r = call(&p, Req::Io { op: Op::Read, sector: Sector(0), flags: Default::default(), buf: vec![1u8; 4096] });
        assert!(r.buf.iter().all(|&x| x == 0));
        // Past the data limit (1 MiB): ENOSPC, and nothing reaches the device.
        let big =
            call(&p, Req::Io { op: Op::Write, sector: Sector(0), flags: Default::default(), buf: vec![1u8; 2 << 20] });
        assert_eq!(big.result, Err(libc::ENOSPC));
        drop(p);
        t.join().unwrap();
    }

    /// Pacing waits for the model: ten writes one after the other on a device whose
    /// every command takes 20 ms of model time take at least 200 ms of wall time. (A
    /// lower bound only: a busy machine makes it slower, never faster.)
    #[test]
    fn a_paced_device_takes_at_least_its_model_time() {
        let (p, t) = paced("nullb:zone_size=4,size=64,completion_nsec=20000000");
        let start = Instant::now();
        for i in 0..10u64 {
            let w = Req::Io { op: Op::Write, sector: Sector(8 * i), flags: Default::default(), buf: vec![1u8; 4096] };
            assert_eq!(call(&p, w).result, Ok(Done::Bytes(4096)));
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(200), "10 commands of 20 ms each completed in {took:?}");
        drop(p);
        t.join().unwrap();
    }

    #[test]
    fn a_striped_stack_serves_data_across_its_members() {
        let spec = crate::stacksim::parse_stack("striped:chunk=64k[2*nullb:zone_size=4,size=64,completion_nsec=1000]")
            .unwrap();
        let build: SimBuilder = Box::new(move || {
            let built = spec
                .build(zblk_core::stack::StackConfig::default(), Some(zblk_core::engine::IssuePolicy::Zwp))
                .map_err(|e| CliError(e.to_string()))?;
            Ok(Sim::with_stack(built, zblk_sim::StackSimConfig::new(1), &mut zblk_sim::null_model))
        });
        let (p, info, t) = PacedSim::start(build, DataStore::new(Some(1 << 20))).unwrap();
        assert_eq!((info.geo.zone_sectors(), info.geo.nr_zones()), (16384, 16), "8 MiB zones over two members");
        let data: Vec<u8> = (0..256 * 1024).map(|i| (i / 512) as u8).collect();
        let w = call(&p, Req::Io { op: Op::Write, sector: Sector(0), flags: Default::default(), buf: data.clone() });
        assert_eq!(w.result, Ok(Done::Bytes(256 * 1024)));
        let r =
            call(&p, Req::Io { op: Op::Read, sector: Sector(0), flags: Default::default(), buf: vec![0; 256 * 1024] });
        assert_eq!(r.buf, data);
        drop(p);
        t.join().unwrap();
    }
}
