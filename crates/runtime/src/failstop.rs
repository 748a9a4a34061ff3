//! Fail-stop: what a runtime does when one of its threads panics (an engine or
//! device assertion, a completion callback's panic) in a build that unwinds (tests,
//! library users; the shipped binary aborts at the panic instead).
//!
//! The engine's state is then unknown: the panic may have left it half way through
//! an update, under its lock, which it poisons. Nothing reads the engine again. The
//! runtime is failed: every BIO in flight ends with EIO (BLK_STS_IOERR, as the
//! kernel ends what a dead device held), once none of their buffers is in use any
//! more (a request on the ring until the kernel has completed it, at a worker until
//! the device returns); every later submission ends with EIO at once; and closing
//! the runtime reports the panic instead of closing the device, which is left as a
//! crash leaves it (an image recovers at its next open).
//!
//! Not waited for: a transfer on a thread's own ring (`Submitter::on_local_ring`,
//! a ublk queue's), which only that thread reaps; `zblk serve` ends the process at
//! any panic instead.

use crate::callback::Done;
use crate::pump::REAPER;
use crate::runtime::Runtime;
use crate::shared::{BioCtx, Core, Shared};
use crate::uring;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use zblk_core::bio::Status;

/// How long a failed runtime waits for the requests still out (at the kernel, at
/// a worker) before it gives up and aborts the process: their buffers cannot be
/// handed back while a transfer may still use them, and a wait for ever is the hang
/// fail-stop is there to prevent.
const QUIESCE_LIMIT: Duration = Duration::from_secs(30);

/// A request being carried out outside the engine lock (at a worker, inline, or
/// being put on a ring) holds one of these: a failed runtime ends no BIO until none
/// is held.
pub(crate) struct Busy<'a>(&'a Shared);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shared {
    /// Whether a thread of the runtime panicked: its engine is not to be touched.
    pub(crate) fn failed(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// Marks a request as being carried out, unless the runtime has failed.
    pub(crate) fn busy(&self) -> Option<Busy<'_>> {
        // SeqCst on both sides: either `fail` sees the count, or this sees the flag.
        self.busy.fetch_add(1, Ordering::SeqCst);
        let b = Busy(self);
        (!self.failed()).then_some(b)
    }

    /// The engine lock. A lock poisoned by a panic under it propagates the panic:
    /// the engine may have been left half way through an update.
    pub(crate) fn lock_core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|_| {
            panic!("the engine lock is poisoned: a runtime thread panicked inside the engine, whose state is unknown")
        })
    }

    /// The engine lock for a submission: `None` when the runtime has failed (the
    /// lock poisoned included, which fails it here if no thread of it has yet).
    pub(crate) fn lock_for_submit(&self) -> Option<MutexGuard<'_, Core>> {
        if self.failed() {
            return None;
        }
        match self.core.lock() {
            Ok(core) => Some(core),
            Err(poisoned) => {
                drop(poisoned);
                self.fail("the engine lock was poisoned by a panic on a submitting thread".into());
                None
            }
        }
    }

    /// Fails the runtime (the first reason is kept): stops the engine's use, waits
    /// until no request's buffer is in use, and ends every BIO in flight with EIO.
    pub(crate) fn fail(&self, why: String) {
        let _ = self.why.set(why);
        self.broken.store(true, Ordering::SeqCst);
        self.stopping.store(true, Ordering::Release);
        self.quiesce();
        // The lock's poisoning is ignored here on purpose: only the BIOs' contexts
        // are taken out, to end them; the engine is never read again.
        let bios = {
            let mut core = self.core.lock().unwrap_or_else(PoisonError::into_inner);
            let bios = std::mem::take(&mut core.bios);
            self.idle.notify_all();
            bios
        };
        for (_, BioCtx { done, .. }) in bios {
            end(done);
        }
    }

    /// Waits until no request is being carried out and none is on the runtime's
    /// ring; the completion thread reaps its ring itself. Aborts the process past
    /// [`QUIESCE_LIMIT`].
    fn quiesce(&self) {
        let start = Instant::now();
        let reaper = REAPER.with(|r| r.get());
        let mut batch = Vec::new();
        loop {
            let ring_out = self.uring.as_ref().map_or(0, |u| u.inflight());
            if self.busy.load(Ordering::SeqCst) == 0 && ring_out == 0 {
                return;
            }
            if start.elapsed() > QUIESCE_LIMIT {
                eprintln!("zblk: the runtime failed and its requests did not come back in {QUIESCE_LIMIT:?}: aborting");
                std::process::abort();
            }
            match (&self.uring, reaper && ring_out > 0) {
                (Some(u), true) => {
                    batch.clear();
                    if !matches!(crate::threads::reap_own(&mut batch, 1), Some(Ok(()))) {
                        eprintln!("zblk: the runtime failed and its ring cannot be reaped: aborting");
                        std::process::abort();
                    }
                    let mut n = 0;
                    for &(token, _, _) in batch.iter().filter(|c| c.0 != uring::WAKE) {
                        // SAFETY: every other token is a request pushed by push_rw,
                        // reaped once; its result is dropped with it.
                        drop(unsafe { uring::take(token) });
                        n += 1;
                    }
                    u.completed(n);
                }
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }
}

/// Ends a BIO of a failed runtime with EIO.
fn end(done: Done) {
    done.run(Err(Status::IoErr));
}

/// Runs a runtime thread's `body`; a panic fails the runtime instead of ending the
/// thread with requests left waiting for it.
pub(crate) fn run_thread(sh: Arc<Shared>, body: impl FnOnce(Arc<Shared>)) {
    let mine = sh.clone();
    let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || body(mine))) else {
        return;
    };
    let thread = std::thread::current().name().unwrap_or("a runtime thread").to_string();
    sh.fail(format!("{thread} panicked: {}", panic_text(&*payload)));
}

/// The message of a panic's payload.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic with a non-text payload".to_string())
}

impl Runtime {
    /// Why the runtime failed (a thread of it panicked), if it has: its BIOs end
    /// with EIO, and closing it panics with this.
    pub fn failure(&self) -> Option<&str> {
        self.sh().why.get().map(String::as_str)
    }
}

impl Shared {
    /// Waits until no BIO is in the engine, for a close: fails the runtime if the
    /// engine lock is poisoned (a panic under it that no thread of the runtime saw).
    /// Then checks the engine's invariants, unless the runtime has failed.
    pub(crate) fn wait_idle(&self) {
        let Ok(mut core) = self.core.lock() else {
            return self.fail("the engine lock was poisoned by a panic".into());
        };
        core.idle_waiters += 1;
        while !core.bios.is_empty() && !self.failed() {
            core = match self.idle.wait(core) {
                Ok(core) => core,
                Err(poisoned) => {
                    drop(poisoned);
                    return self.fail("the engine lock was poisoned by a panic".into());
                }
            };
        }
        core.idle_waiters -= 1;
        if !self.failed() {
            // Idle: the engine's invariants cost O(plugs) here.
            core.engine.check_invariants();
        }
    }
}
