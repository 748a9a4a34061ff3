//! The runtime's threads: workers carrying out what the ring cannot (flushes, zone
//! management, every request with the thread pool), the timer that expires the
//! batching issuer's anticipations (the engine has no clock), and the io_uring
//! completion thread that reaps the ring and feeds completions back in batches.

use crate::poll::PollWindow;
use crate::pump::{REAPER, iobuf};
use crate::shared::{Job, Shared, Timer};
use crate::uring::{self, Completions, WAKE};
use crossbeam_channel::Receiver;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Expires anticipations when their time has come (earliest first).
pub(crate) fn timer_loop(sh: Arc<Shared>, rx: Receiver<Timer>) {
    use std::cmp::Reverse;
    let mut armed: std::collections::BinaryHeap<Reverse<(std::time::Instant, u64)>> = Default::default();
    loop {
        let msg = match armed.peek() {
            None => rx.recv().ok(),
            Some(Reverse((at, _))) => match rx.recv_timeout(at.saturating_duration_since(std::time::Instant::now())) {
                Ok(m) => Some(m),
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
        // SAFETY: the buffer is the request's part of its BIO's buffer, valid and
        // untouched by anyone else until the BIO completes (after this request).
        let r = sh.device.perform(&req, plan, unsafe { iobuf(req.op, buf) });
        results.push((req.id, r));
        sh.complete_many(&mut results);
    }
}

/// Reaps the runtime's ring and feeds what completed back into the engine, a batch
/// per wait, until woken to stop.
///
/// With `poll`, after a batch the thread looks again without sleeping (an
/// `io_uring_enter` that waits for nothing) for that long: completions that follow
/// each other closer than that never wait for the thread to be woken.
pub(crate) fn completion_loop(sh: Arc<Shared>, mut cq: Completions, poll: Duration) {
    REAPER.with(|r| r.set(true));
    let u = sh.uring.as_ref().expect("completion thread without a ring");
    let mut batch = Vec::new();
    let mut results = Vec::new();
    let mut window = PollWindow::new(poll);
    loop {
        batch.clear();
        let want = window.want();
        let r = cq.reap(&mut batch, want);
        assert!(r.is_ok(), "io_uring wait failed: {r:?}");
        window.took(want, !batch.is_empty(), &sh.batches);
        let mut stop = false;
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
            let n = results.len();
            sh.complete_many(&mut results);
            u.completed(n);
        }
        if stop {
            return;
        }
    }
}
