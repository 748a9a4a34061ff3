//! A handle's tie to its simulation: its calls submitted to the simulated world,
//! a blocking one running the world until its request ends, an async one a future
//! the world's completions wake.

use super::world::World;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use zblk_core::bio::{Op, Status};
use zblk_core::units::Sector;
use zblk_core::zone::ZoneInfo;
use zblk_dev::buf::Buffer;

/// Why a simulated call failed: the handle is gone (closed, or its host died in a
/// power loss), or the request failed with a status.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SimErr {
    Closed,
    Status(Status),
}

/// What a request ends with: where it landed, and its buffer back.
pub(crate) type SimDone = Result<(Sector, Option<Buffer>), SimErr>;

/// A handle's simulated device, as of the host it belongs to.
#[derive(Debug)]
pub(crate) struct SimLink {
    world: Arc<Mutex<World>>,
    /// The world's power-loss epoch this handle's host lives in.
    pub epoch: u64,
    closed: AtomicBool,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World").field("seed", &self.seed).finish_non_exhaustive()
    }
}

impl SimLink {
    pub fn new(world: Arc<Mutex<World>>, epoch: u64) -> SimLink {
        SimLink { world, epoch, closed: AtomicBool::new(false) }
    }

    /// The world, if this handle's host is alive.
    fn world(&self) -> Result<MutexGuard<'_, World>, SimErr> {
        let w = self.world.lock().unwrap_or_else(|p| p.into_inner());
        if self.closed.load(Ordering::Acquire) || w.epoch != self.epoch {
            return Err(SimErr::Closed);
        }
        Ok(w)
    }

    /// No call after this one.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether [`SimLink::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The zones now.
    pub fn report(&self) -> Result<Vec<ZoneInfo>, SimErr> {
        self.world()?.report().map_err(SimErr::Status)
    }

    /// The zone holding `sector` now.
    pub fn report_zone(&self, sector: Sector) -> Result<ZoneInfo, SimErr> {
        self.world()?.report_zone(sector).map_err(SimErr::Status)
    }

    /// Submits `op` at `sector` with `buf` and runs the world until it ends.
    pub fn call(&self, op: Op, sector: Sector, buf: Option<Buffer>) -> SimDone {
        let mut w = self.world()?;
        let token = w.submit(op, sector, buf);
        loop {
            if let Some((r, buf)) = w.take(token, None) {
                return r.map(|at| (at, buf)).map_err(SimErr::Status);
            }
            assert!(w.step(), "zblk::sim seed {}: a request that never ends ({op:?} at {sector:?})", w.seed);
        }
    }

    /// Submits `op` at `sector` with `buf` now; the future ends with it.
    pub fn submit(&self, op: Op, sector: Sector, buf: Option<Buffer>) -> Result<SimIo, SimErr> {
        let mut w = self.world()?;
        let token = w.submit(op, sector, buf);
        Ok(SimIo { world: self.world.clone(), epoch: self.epoch, token: Some(token) })
    }
}

/// A simulated request in flight: ends when the world completes it.
pub(crate) struct SimIo {
    world: Arc<Mutex<World>>,
    epoch: u64,
    /// `None` once taken.
    token: Option<u64>,
}

impl Future for SimIo {
    type Output = SimDone;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<SimDone> {
        let Some(token) = self.token else { return Poll::Ready(Err(SimErr::Closed)) };
        let mut w = self.world.lock().unwrap_or_else(|p| p.into_inner());
        if w.epoch != self.epoch || !w.knows(token) {
            drop(w);
            self.token = None;
            return Poll::Ready(Err(SimErr::Closed));
        }
        match w.take(token, Some(cx.waker())) {
            Some((r, buf)) => {
                drop(w);
                self.token = None;
                Poll::Ready(r.map(|at| (at, buf)).map_err(SimErr::Status))
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for SimIo {
    fn drop(&mut self) {
        if let Some(token) = self.token {
            let mut w = self.world.lock().unwrap_or_else(|p| p.into_inner());
            if w.epoch == self.epoch {
                w.abandon(token);
            }
        }
    }
}
