//! zblk's sans-IO core: what the Linux block layer does for zoned devices, as state
//! machines with no clock, no thread and no I/O inside.
//!
//! - [`engine`]: the zoned block layer of one device: validation, splitting, zone
//!   write plugs, zone append emulation, write pointer recovery, issue policies.
//! - [`stack`]: stacked devices (striped, linear) over member devices: the submission
//!   path that splits and remaps BIOs down to each disk's engine.
//! - [`zone`]: the device side's zone state machine, which every emulated device
//!   shares and which checks independently of the host's plugs.
//! - `corebench` (feature `corebench`): the engine alone under a minimal driver, to
//!   measure what it costs (`zblk corebench`).
//! - [`geometry`], [`bio`], [`units`], [`params`], [`split`]: the vocabulary;
//!   [`rule`]: the rule that refused a request, carried in its status.
//!
//! Nothing here touches the operating system: the crate has no OS dependency, and
//! every driver (the simulator, the threaded runtime) builds on it.
//! `docs/ARCHITECTURE.md` explains the engine's call-order contract.

pub mod bio;
#[cfg(feature = "corebench")]
pub mod corebench;
pub mod engine;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod geometry;
pub mod mutation;
pub mod params;
pub mod rule;
pub mod split;
pub mod stack;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod units;
pub mod zone;

pub use bio::{Bio, BioFlags, Completion, Op, ReqId, Request, Status, StatusCode};
pub use geometry::{Geometry, GeometryError, GeometryParams};
pub use rule::Rule;
pub use units::{Sector, ZoneNo};
pub use zone::{ZoneCond, ZoneInfo, ZoneSet, ZoneType};
