//! zblk as a library: one [`Handle`] on any zoned target, opened from one string,
//! with zblk's zoned block layer under it (zone write plugging, zone append
//! emulation, write pointer recovery, the single issuer for disks), from any number
//! of threads, blocking or async.
//!
//! ```
//! let h = zblk::Handle::open("sim:nullb:zone_size=64")?; // or "img.zbd", "/dev/nullb0", "/dev/ng0n1"
//! let zone = h.zone_size(); // the second zone's first byte
//! let at = h.append(zone, &[0xab; 4096])?; // where the record landed
//! let mut back = [0u8; 4096];
//! h.read_at(at, &mut back)?;
//! assert_eq!(back, [0xab; 4096]);
//! # Ok::<(), zblk::Error>(())
//! ```
//!
//! - [`Handle`]: the target ([`Handle::open`], [`Options`] to choose the issue policy,
//!   the queue depth, read-only, the I/O driver), its blocking calls
//!   ([`Handle::report`], [`Handle::write_at`], [`Handle::append`],
//!   [`Handle::read_at`], the zone operations, [`Handle::flush`],
//!   [`Handle::close`]) and its asynchronous ones ([`Handle::append_async`], ...:
//!   futures any executor polls, see [`asynch`]).
//! - [`spec`]: the target strings: a path (an image, a Linux zoned block device, an
//!   NVMe generic device), `sim:PRESET[:name=value,...]`, `stack:SPEC`.
//! - [`sim`]: deterministic tests of a program's own code: the same [`Handle`] on a
//!   simulated device in virtual time, async tasks on a seeded single-threaded
//!   executor, faults and power loss drawn from the seed, a failing seed replayed.
//! - [`Error`]: every failure as a value with the kernel's errno and, for a refused
//!   request, the zone rule that refused it; [`explain`] words them.
//! - The bounds that protect a caller: [`MAX_QUEUE_DEPTH`], [`MAX_IO_BYTES`] and
//!   [`Options::max_io_bytes`]; offsets and lengths on the device's logical blocks.
//!
//! docs/library.md says what is built and what is not yet, and how the handle
//! behaves with threads, async code and errors.

#![deny(missing_docs)]

pub mod asynch;
pub mod explain;
pub mod sim;
pub mod spec;

mod error;
mod handle;
mod options;
mod stacked;

pub use error::Error;
pub use handle::{Handle, Zone, ZoneOp};
pub use options::{MAX_IO_BYTES, MAX_QUEUE_DEPTH, Options};
pub use zblk_core::engine::IssuePolicy;
pub use zblk_core::zone::{ZoneCond, ZoneType};
pub use zblk_runtime::{AlignedBuf, Backend, Buffer};

/// The README's library section, run as a doc test: the snippet a user starts from
/// is the one tested.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeSnippet;
