//! A simulated stack (`stack:SPEC`) as a device the runtime drives: the stack's
//! simulation (zblk-sim, built by [`crate::spec::stack_sim`] as `zblk serve --stack`
//! builds it) decides each request's outcome (its splits and remaps, every disk's
//! engine, the disks' zones and rules), run ahead of any clock: a request completes
//! as soon as the simulation has carried it out, as a `sim:` preset's do on the
//! memory device. The data is kept here, by the top device's sectors, in the memory
//! device's page store; the disks keep zone state only.
//!
//! The simulator is not `Send` (its timing models, its trace sinks): one thread owns
//! it, and the device hands it requests over a channel, as the served stack does.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;
use zblk_core::bio::{Bio, Op, Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::stack::{SplitOrder, StackSpec};
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_dev::{DeviceError, DeviceZeroing, IoBuf, PageStore, Plan, Transfer};
use zblk_sim::{Sim, StackSimConfig, join_or_raise, null_model};

/// What the simulation's thread is asked.
enum Msg {
    /// A request: its result goes back on the sender.
    Io(Bio, Sender<Result<Sector, Status>>),
    /// The top device's zones, from the one holding `from`, at most `max`.
    Report(Sector, usize, Sender<Vec<ZoneInfo>>),
}

/// A simulated stack behind a thread: see the module documentation.
pub(crate) struct StackDevice {
    tx: Mutex<Option<Sender<Msg>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    geo: Geometry,
    name: String,
    /// The data written, by the top device's sectors.
    data: Mutex<PageStore>,
}

impl std::fmt::Debug for StackDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackDevice").field("name", &self.name).finish_non_exhaustive()
    }
}

impl StackDevice {
    /// Builds the stack `spec` (every disk's engine under `policy`, or its own) in
    /// a new thread; the error in words.
    pub fn start(spec: StackSpec, policy: Option<zblk_core::engine::IssuePolicy>, name: &str) -> Result<Self, String> {
        let (tx, rx) = mpsc::channel();
        let (geo_tx, geo_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("zblk-stack".into())
            .spawn(move || {
                let run = StackSimConfig::new(1);
                match crate::spec::stack_sim(&spec, SplitOrder::Head, policy, run, false, &mut null_model) {
                    Ok(sim) => {
                        let _ = geo_tx.send(Ok(sim.stack().info(sim.stack().top()).geometry.clone()));
                        serve(sim, rx);
                    }
                    Err(e) => {
                        let _ = geo_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| format!("starting the stack's thread: {e}"))?;
        let geo = match geo_rx.recv() {
            Ok(Ok(geo)) => geo,
            Ok(Err(why)) => {
                join_or_raise(thread);
                return Err(why);
            }
            Err(_) => {
                // Only a panic ends the thread before it answers: raised here.
                join_or_raise(thread);
                return Err("the stack's thread ended while building it".into());
            }
        };
        Ok(StackDevice {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            geo,
            name: name.into(),
            data: Mutex::new(PageStore::new()),
        })
    }

    fn data(&self) -> MutexGuard<'_, PageStore> {
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the simulation's thread. A thread that is gone panicked (a simulator
    /// assertion: an invariant broken, not an I/O error): its panic is raised again
    /// here, in the caller, so that it stops the process as any failed assertion
    /// does. `None` only after another caller took that panic.
    fn ask<T>(&self, msg: impl FnOnce(Sender<T>) -> Msg) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        let sent = self.tx.lock().unwrap_or_else(|p| p.into_inner()).as_ref()?.send(msg(tx));
        let answer = sent.ok().and_then(|()| rx.recv().ok());
        if answer.is_none() {
            if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
                join_or_raise(t);
            }
        }
        answer
    }

    /// The data side of a completed request: what it wrote, read or emptied.
    fn carry_out(&self, req: &Request, at: Sector, buf: IoBuf<'_>) {
        let mut data = self.data();
        match (req.op, buf) {
            (Op::Write | Op::ZoneAppend, IoBuf::Write(d)) => data.write(at, d),
            (Op::Read, IoBuf::Read(out)) => data.read(req.sector, out),
            (Op::WriteZeroes | Op::Discard, _) => data.zero_range(at, u64::from(req.nr_sectors)),
            (Op::ZoneReset, _) => {
                let z = self.geo.zone_no(req.sector);
                data.zero_range(self.geo.zone_start(z), self.geo.zone_len(z));
            }
            (Op::ZoneResetAll, _) => {
                let seq = (0..self.geo.nr_zones()).map(ZoneNo).filter(|&z| !self.geo.zone_is_conv(z));
                for z in seq {
                    data.zero_range(self.geo.zone_start(z), self.geo.zone_len(z));
                }
            }
            _ => {}
        }
    }
}

impl Drop for StackDevice {
    fn drop(&mut self) {
        // The thread ends when its channel closes.
        self.tx.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = self.thread.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            // A panic of the thread is raised, unless one is unwinding already (a
            // second would abort without its message).
            if std::thread::panicking() {
                let _ = t.join();
            } else {
                join_or_raise(t);
            }
        }
    }
}

/// The simulation's thread: takes requests as they come, runs the simulation from
/// event to event while any is in it, and answers each when it completes.
fn serve(mut sim: Sim, rx: Receiver<Msg>) {
    let mut waiting = Waiting::default();
    loop {
        let msg = if waiting.is_empty() { rx.recv().ok() } else { rx.try_recv().ok() };
        match msg {
            Some(Msg::Io(bio, reply)) => {
                let token = waiting.insert(reply);
                sim.submit(bio, token, 0);
                continue;
            }
            Some(Msg::Report(from, max, reply)) => {
                let top = sim.stack().top();
                let geo = sim.stack().info(top).geometry.clone();
                let first = if geo.is_zoned() { geo.zone_no(from).0 as usize } else { 0 };
                let _ = reply.send(sim.report_zones(top).iter().skip(first).take(max).copied().collect());
                continue;
            }
            None if waiting.is_empty() => return,
            None => {}
        }
        let now = sim.now_ns();
        sim.run_until(sim.next_event_ns().unwrap_or(now));
        let done = sim.take_completions();
        if done.is_empty() && sim.next_event_ns().is_none() {
            // Nothing in the simulation will end them: a stuck stack fails what it
            // holds rather than hang its callers.
            for reply in waiting.drain() {
                let _ = reply.send(Err(Status::IoErr));
            }
        }
        for c in done {
            if let Some(reply) = waiting.remove(c.token) {
                let _ = reply.send(c.result);
            }
        }
    }
}

/// The callers waiting for their requests, by token.
#[derive(Default)]
struct Waiting {
    next: u64,
    by_token: BTreeMap<u64, Sender<Result<Sector, Status>>>,
}

impl Waiting {
    fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }

    fn insert(&mut self, reply: Sender<Result<Sector, Status>>) -> u64 {
        self.next += 1;
        self.by_token.insert(self.next, reply);
        self.next
    }

    fn remove(&mut self, token: u64) -> Option<Sender<Result<Sector, Status>>> {
        self.by_token.remove(&token)
    }

    fn drain(&mut self) -> impl Iterator<Item = Sender<Result<Sector, Status>>> {
        std::mem::take(&mut self.by_token).into_values()
    }
}

impl zblk_dev::Device for StackDevice {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// A stack is not rotational (as `zblk serve --stack` says of it): the handle's
    /// engine on top plugs per zone; each disk's own engine runs the disk's policy.
    fn rotational(&self) -> bool {
        false
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn prepare(&self, _req: &Request) -> Result<Plan, Status> {
        Ok(Plan::Blocking)
    }

    fn perform(&self, req: &Request, _plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let bio = Bio { op: req.op, sector: req.sector, nr_sectors: req.nr_sectors, flags: req.flags, user_data: 0 };
        // The stack decides; a thread gone (a simulator's panic) is an I/O error.
        let at = self.ask(|tx| Msg::Io(bio, tx)).unwrap_or(Err(Status::IoErr))?;
        self.carry_out(req, at, buf);
        Ok(at)
    }

    fn finish(&self, _req: &Request, _t: Transfer, _io: std::io::Result<()>) -> Result<Sector, Status> {
        unreachable!("a simulated stack plans no transfer")
    }

    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        if !self.geo.is_zoned() {
            return Err(Status::NotSupported);
        }
        let zones = self.ask(|tx| Msg::Report(from, max, tx)).ok_or(Status::IoErr)?;
        out.extend_from_slice(&zones);
        Ok(zones.len())
    }

    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        (self.geo.max_write_zeroes_sectors() > 0).then_some(DeviceZeroing::Memory { unmap: !nounmap })
    }

    fn close(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    /// Its requests are carried out by the simulation's thread at once: no I/O.
    fn inline(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zblk_core::geometry::GeometryParams;

    #[test]
    fn a_panic_of_the_simulations_thread_is_raised_in_the_caller() {
        // A thread that panics on its first message, as a simulator assertion would:
        // the caller gets that panic, not an I/O error.
        let (tx, rx) = mpsc::channel::<Msg>();
        let thread = std::thread::spawn(move || {
            let _ = rx.recv();
            panic!("simulator invariant broken");
        });
        let p = GeometryParams { capacity_bytes: 8 << 20, zone_size_bytes: 1 << 20, ..GeometryParams::default() };
        let dev = StackDevice {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            geo: Geometry::new(&p).unwrap(),
            name: "test".into(),
            data: Mutex::new(PageStore::new()),
        };
        let asked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dev.ask(|tx| Msg::Report(Sector(0), 1, tx))));
        let panic = asked.expect_err("the thread's panic reaches the caller");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"simulator invariant broken"));
        // Taken once: the device is dropped without a second panic.
        drop(dev);
    }
}
