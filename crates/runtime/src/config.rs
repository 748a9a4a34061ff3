//! What a [`Runtime`](crate::Runtime) is started with: the I/O driver ([`Backend`]:
//! io_uring or a thread pool issuing `pread`/`pwrite`), the engine's settings and
//! the number of workers; and the errors that keep it from starting.

use crate::uring::Uring;
use std::io;
use std::time::Duration;
use zblk_core::bio::Status;
use zblk_core::engine::EngineConfig;

/// Which I/O driver to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// io_uring if the kernel allows it, the thread pool otherwise.
    Auto,
    /// io_uring, or fail.
    IoUring,
    /// A pool of threads doing `pread`/`pwrite`.
    Threads,
}

/// How to run.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeConfig {
    /// Engine settings (policy, queue depth, ...).
    pub engine: EngineConfig,
    /// The I/O driver.
    pub backend: Backend,
    /// Threads for blocking work (flushes, zone management; every I/O with the
    /// thread pool). 0: the queue depth for the thread pool (at most 64), 4 with io_uring.
    pub workers: usize,
    /// How long the io_uring completion thread keeps looking for completions
    /// without sleeping after a batch (zero: it sleeps in `io_uring_enter` as soon
    /// as the ring is empty). While I/O keeps coming closer than this, no
    /// completion waits for the thread to be woken, at the price of a CPU kept
    /// busy for the window after the last one. Without a ring it does nothing.
    pub poll: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig { engine: EngineConfig::default(), backend: Backend::Auto, workers: 0, poll: Duration::ZERO }
    }
}

/// Whether this kernel lets this process use io_uring (a ring is set up and a NOP
/// goes through it); the error says why not.
pub fn io_uring_available() -> io::Result<()> {
    Uring::new(1, false).map(drop)
}

/// A runtime that could not start.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// io_uring was required and is not available.
    #[error("io_uring is not available: {0}")]
    IoUring(io::Error),
    /// A thread could not be started.
    #[error("cannot start a thread: {0}")]
    Thread(io::Error),
    /// The device's zone report, which the engine starts from, failed.
    #[error("{device}: zone report failed: {}: {status}", status.errno_name())]
    ZoneReport {
        /// The device.
        device: String,
        /// Why.
        status: Status,
    },
    /// The policy asked for cannot run on this device.
    #[error("{device}: {why}")]
    Policy {
        /// The device.
        device: String,
        /// Why (`IssuePolicy::refusal_on`).
        why: String,
    },
}
