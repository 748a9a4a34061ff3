//! The polling window of a thread that reaps a ring (the runtime's completion
//! thread, `--poll`; a served ublk queue's thread): after a batch that brought
//! something, the thread looks again without sleeping for that long, so that work
//! following closer than the window never waits for the thread to be woken.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When the thread next sleeps, and how its batches came.
#[derive(Debug)]
pub struct PollWindow {
    poll: Duration,
    until: Option<Instant>,
}

impl PollWindow {
    /// A window of `poll` after each batch (zero: the thread always sleeps).
    pub fn new(poll: Duration) -> PollWindow {
        PollWindow { poll, until: None }
    }

    /// Completions the next wait asks for: none (a look) while the window is open,
    /// one (a sleep until there is one) otherwise.
    pub fn want(&self) -> u32 {
        u32::from(self.until.is_none_or(|t| Instant::now() >= t))
    }

    /// A wait that asked for `want` brought something (`got`): counted in
    /// `batches` (`[found while polling, after a wait]`), and the window opens again.
    pub fn took(&mut self, want: u32, got: bool, batches: &[AtomicU64; 2]) {
        if !got {
            return;
        }
        batches[usize::from(want != 0)].fetch_add(1, Ordering::Relaxed);
        if !self.poll.is_zero() {
            self.until = Some(Instant::now() + self.poll);
        }
    }
}
