//! The real-time driver: the same [`Engine`] the simulator drives, driven by threads
//! against any [`Device`] (a zoned image, a Linux zoned block device, memory), with
//! io_uring (or a thread pool doing `pread`/`pwrite` where io_uring is not available).
//!
//! ```text
//!  submitters ──submit──▶ [engine lock: submit, drain actions] ──▶ prepare + queue I/O
//!                                                                      │ io_uring / workers
//!  callbacks ◀── [engine lock: complete, drain actions] ◀── finish ◀──┘ completion thread
//! ```
//!
//! The engine is a state machine: it is locked only around `submit`, `complete`,
//! `zone_report` and the draining of its actions, never across I/O. Device-side checks
//! ([`Device::prepare`]) and the I/O itself happen outside that lock, so any number
//! of threads submit at once and the completion thread feeds completions in batches.
//!
//! A request the device plans as a data transfer goes on the ring when the device
//! offers a descriptor that suits its buffer ([`Device::data_fds`]); everything else
//! (blocking operations, devices without descriptors, the thread-pool driver) goes to
//! worker threads, which call [`Device::perform`].
//!
//! Two APIs: blocking calls ([`Runtime::write_at`], [`Runtime::append`],
//! [`Runtime::read_at`], [`Runtime::zone_op`], [`Runtime::flush`]) that borrow the
//! caller's buffer and wait; and asynchronous submission of an [`Io`] that owns its
//! buffer, ending with a callback ([`Runtime::submit`]) or a future
//! ([`Runtime::submit_async`]), the buffer handed back in the [`IoDone`].
//!
//! Single I/Os of any length in constant memory ([`single`]: a write streamed in
//! chunks that never cross a zone, an append read whole, a read in chunks with a
//! CRC32), with typed errors that say what a failed one left.
//!
//! Zeroing: [`Runtime::write_zeroes`] (as the kernel's `blkdev_issue_zeroout()`:
//! WRITE_ZEROES, or zero buffers on a device without it), the
//! `write_zeroes_unmap_max_bytes` attribute, and [`zeroing`]'s timing functions.
//!
//! Where things are: `runtime` holds the [`Runtime`] handle (choosing the driver,
//! starting and stopping the threads), `shared` the state all threads share (the
//! engine under its lock, the BIO contexts, the plug of [`Runtime::batch`]), `pump`
//! the carrying out of the engine's actions outside the lock, `threads` the worker,
//! timer and io_uring completion loops, `callback` how a BIO ends, `io` the
//! asynchronous API, `blocking` the blocking calls, `zeroout` the zeroing of ranges,
//! `local` a caller's own ring and `uring` the runtime's.
//!
//! [`Engine`]: zblk_core::engine::Engine
//! [`Device`]: zblk_dev::Device
//! [`Device::prepare`]: zblk_dev::Device::prepare
//! [`Device::data_fds`]: zblk_dev::Device::data_fds
//! [`Device::perform`]: zblk_dev::Device::perform

pub mod bench;
pub mod single;
#[cfg(feature = "vopr")]
pub mod vopr;
pub mod zeroing;

mod blocking;
mod callback;
mod config;
mod failstop;
mod io;
mod local;
mod mapped;
mod poll;
mod pump;
mod runtime;
mod shared;
mod threads;
mod uring;
mod zeroout;

pub use callback::Completion;
pub use config::{Backend, RuntimeConfig, RuntimeError, io_uring_available};
pub use io::{Io, IoDone, IoFuture, Submitter};
pub use local::LocalIo;
pub use poll::PollWindow;
pub use runtime::Runtime;
pub use uring::RingStats;
pub use zblk_dev::buf::{AlignedBuf, Buffer};
pub use zeroout::{ZeroingFlags, ZeroingReport};
