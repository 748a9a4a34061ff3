//! The runtime's threads: workers carrying out what the ring cannot (flushes, zone
//! management, every request with the thread pool), the timer that expires the
//! batching issuer's anticipations (the engine has no clock), and the io_uring
//! completion thread that reaps the ring and feeds completions back in batches.

use crate::poll::PollWindow;
use crate::pump::{REAPER, iobuf};
use crate::shared::{Job, Shared, Timer};
use crate::uring::{self, Completions, Uring, WAKE};
use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use zblk_core::mutation::{self, Mutation};

/// Expires anticipations when their time has come (earliest first).
pub(crate) fn timer_loop(sh: Arc<Shared>, rx: Receiver<Timer>) {
    use std::cmp::Reverse;
    let mut armed: std::collections::BinaryHeap<Reverse<(std::time::Instant, u64)>> = Default::default();
    loop {
        let msg = match armed.peek() {
            None => rx.recv().ok(),
            Some(Reverse((at, _))) => match rx.recv_timeout(at.saturating_duration_since(std::time::Instant::now())) {
                Ok(m) => Some(m),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) if sh.failed() => return,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    let now = std::time::Instant::now();
                    let mut core = sh.lock_core();
                    while let Some(&Reverse((at, token))) = armed.peek() {
                        if at > now {
                            break;
                        }
                        armed.pop();
                        core.engine.anticipation_expired(token);
                    }
                    sh.pump(core);
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => None,
            },
        };
        match msg {
            Some(Timer::Arm { at, token }) => armed.push(Reverse((at, token))),
            Some(Timer::Stop) | None => return,
        }
    }
}

/// Carries out requests the ring does not take, one at a time, until told to stop.
pub(crate) fn worker_loop(sh: Arc<Shared>, rx: Receiver<Job>) {
    let mut results = Vec::with_capacity(1);
    while let Ok(Job::Run { req, plan, buf }) = rx.recv() {
        // A failed runtime's requests are dropped: their BIOs end with EIO.
        let Some(busy) = sh.busy() else { continue };
        planted_panic(&sh, Mutation::PanicOnWorker, "a worker took a request");
        // SAFETY: the buffer is the request's part of its BIO's buffer, valid and
        // untouched by anyone else until the BIO completes (after this request).
        let r = sh.device.perform(&req, plan, unsafe { iobuf(req.op, buf) });
        drop(busy);
        results.push((req.id, r));
        sh.complete_many(&mut results);
    }
}

/// The planted bug `m` (zblk_core::mutation): an assertion that fires under the
/// engine lock, as an engine's would, poisoning it.
fn planted_panic(sh: &Shared, m: Mutation, when: &str) {
    if mutation::on(m) {
        let _core = sh.lock_core();
        panic!("planted bug {}: assertion failed when {when}", m.name());
    }
}

/// Counts the requests of a reaped batch complete when it goes, however: a panic
/// while they are fed back (an engine assertion) leaves them reaped, their
/// transfers over, and a failed runtime waits only for the ring's other requests.
struct Reaped<'a>(&'a Uring, usize);

impl Drop for Reaped<'_> {
    fn drop(&mut self) {
        if self.1 > 0 {
            self.0.completed(self.1);
        }
    }
}

std::thread_local! {
    /// The ring's completion queue, held by the completion thread for as long as the
    /// thread lives: its loop reaps from it, and so does a failed runtime's drain on
    /// the same thread after the loop panicked (the queue outlives the unwinding).
    static COMPLETIONS: std::cell::RefCell<Option<Completions>> = const { std::cell::RefCell::new(None) };
}

/// Reaps this thread's own completion queue ([`Completions::reap`]); `None` on a
/// thread that holds none (only the completion thread does).
pub(crate) fn reap_own(out: &mut Vec<(u64, i32, u64)>, want: u32) -> Option<std::io::Result<()>> {
    COMPLETIONS.with(|c| c.borrow_mut().as_mut().map(|cq| cq.reap(out, want)))
}

/// Reaps the runtime's ring and feeds what completed back into the engine, a batch
/// per wait, until woken to stop.
///
/// With `poll`, after a batch the thread looks again without sleeping (an
/// `io_uring_enter` that waits for nothing) for that long: completions that follow
/// each other closer than that never wait for the thread to be woken.
pub(crate) fn completion_loop(sh: Arc<Shared>, cq: Completions, poll: Duration) {
    REAPER.with(|r| r.set(true));
    COMPLETIONS.with(|c| *c.borrow_mut() = Some(cq));
    let u = sh.uring.as_ref().expect("completion thread without a ring");
    let mut batch = Vec::new();
    let mut results = Vec::new();
    let mut window = PollWindow::new(poll);
    loop {
        batch.clear();
        let want = window.want();
        let r = reap_own(&mut batch, want).expect("the completion thread holds its ring's completions");
        assert!(r.is_ok(), "io_uring wait failed: {r:?}");
        window.took(want, !batch.is_empty(), &sh.batches);
        let mut stop = false;
        let _reaped = Reaped(u, batch.iter().filter(|c| c.0 != WAKE).count());
        for &(token, res, big) in &batch {
            if token == WAKE {
                stop |= sh.stopping.load(Ordering::Acquire);
                continue;
            }
            // SAFETY: every other token is a request's box, leaked by push_rw or
            // push_cmd as its entry's user data; the kernel posts one completion per
            // entry, so each is taken back once.
            let r = unsafe { uring::take(token) };
            let result = match sh.device.uring_cmd() {
                Some(pc) if r.passthrough => pc.complete(&r.req, res, big),
                _ => sh.finish_transfer(&r, res),
            };
            results.push((r.req.id, result));
        }
        if !results.is_empty() {
            planted_panic(&sh, Mutation::PanicOnCompletion, "the completion thread reaped a completion");
            sh.complete_many(&mut results);
        }
        if stop {
            return;
        }
    }
}
