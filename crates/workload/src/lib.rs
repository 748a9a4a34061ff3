//! Workloads for zblk, sans IO: fio-like job descriptions and the generator that
//! turns them into BIOs (with fio's `zonemode=zbd` rules), the self-describing data
//! pattern of written blocks, and fio-style statistics. The simulator and the real
//! runtime drive the same generator, one in virtual time, the other in wall-clock
//! time.

pub mod fio;
pub mod job;
pub mod pattern;
pub mod stats;
pub mod token;

pub use fio::{FioAction, FioDone, FioGen, FioIo};
pub use job::{JobError, JobResult, JobSpec, Rw, ZoneMode};
