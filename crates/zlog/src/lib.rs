//! A zone-append log on zblk's [`zblk::Handle`]: records appended from many threads
//! to the zones of any zoned target the handle opens (an image, a Linux zoned block
//! device, an NVMe generic device, a simulated preset), each told where it landed;
//! found again after a crash by scanning each zone from its start to its write
//! pointer; old zones reclaimed by reset.
//!
//! ```
//! use zblk_log::{Log, LogOptions};
//!
//! let h = zblk::Handle::open("sim:nullb:zone_size=4,size=64")?;
//! let log = Log::open(h, LogOptions::new())?;
//! let at = log.append(b"first")?; // where it landed, and its sequence number
//! log.flush()?; // durable now
//! assert_eq!(log.read(&at)?, b"first");
//! assert_eq!(log.records()?[0].payload, b"first");
//! # Ok::<(), zblk_log::LogError>(())
//! ```
//!
//! - A record is framed ([`frame`]): a header with a magic, its length, its
//!   sequence number, its zone and a CRC-32, then its payload, up to the next
//!   logical block.
//! - A record is durable once a [`Log::flush`] that began after its append returned
//!   has returned.
//! - [`Log::open`] scans every zone of the log up to its write pointer: a frame that
//!   does not check (a record torn by a crash, or corrupted on the medium) is
//!   skipped and its bytes reported ([`Recovery::damaged`]), none is invented; a
//!   [`Log::read`] of a record whose frame does not check is
//!   [`LogError::NotARecord`].
//! - [`Log::trim_to`] resets the zones whose records all precede a sequence number.
//!
//! docs/zlog.md describes the format, the recovery and the measured figures.

#![deny(missing_docs)]

pub mod frame;
pub mod planted;

mod error;
mod log;
mod scan;

pub use error::LogError;
pub use log::{Damaged, Location, Log, LogOptions, Record, Recovery};
