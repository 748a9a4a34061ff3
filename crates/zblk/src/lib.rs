//! zblk: a userspace zoned block layer.
//!
//! Zoned devices (host-managed SMR disks, NVMe ZNS SSDs) accept a write to a
//! sequential zone only at the zone's write pointer. zblk does in userspace what the
//! Linux block layer does for them: zone write plugging, zone append emulation,
//! write pointer recovery, single-issuer QD=1 writes for rotational disks.
//!
//! - [`core`]: the sans-IO engine (no clock, no threads, no I/O).
//! - [`dev`]: devices that execute requests (in-memory, file-backed zoned images).
//! - [`runtime`]: the real-time driver: threads, io_uring, blocking and asynchronous
//!   APIs over a file-backed image.
//! - [`sim`]: a deterministic simulator driving the engine in virtual time, with
//!   device timing models, fio-like workloads and a checker.
//! - [`stack`]: stacked devices (striped, linear) over member devices, the
//!   submission path that splits and remaps BIOs down to each disk's engine, and
//!   I/O traces with seek histograms.
//! - [`geometry`], [`zone`], [`bio`], [`units`], [`params`]: the vocabulary.
//!
//! `docs/ARCHITECTURE.md` explains the layout and the engine's call-order contract.

pub mod bio;
pub mod core;
pub mod dev;
pub mod geometry;
pub mod params;
pub mod runtime;
pub mod sim;
pub mod stack;
pub mod units;
pub mod zone;

pub use bio::{Bio, BioFlags, Completion, Op, ReqId, Request, Status};
pub use geometry::{Geometry, GeometryError, GeometryParams};
pub use units::{Sector, ZoneNo};
pub use zone::{ZoneCond, ZoneInfo, ZoneSet, ZoneType};
