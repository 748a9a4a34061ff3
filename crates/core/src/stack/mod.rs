//! Stacked devices: striped (RAID0) and linear (dm-linear) devices over member
//! devices, which may themselves be stacked, zoned members included.
//!
//! A stack is a sans-IO state machine like [`crate::engine::Engine`], one level up:
//! [`Stack::submit`] takes a BIO for any device of the stack, runs the kernel's
//! submission loop (the per-context BIO list of `submit_bio_noacct()`, where a
//! stacked device's split remainders and remapped BIOs wait their turn) and hands
//! the BIOs that reach the bottom to each disk's own engine, where zone write plugs
//! live. What comes out ([`StackAction`]) is requests for the disks, completions
//! for the submitters and zone reports to make.
//!
//! - [`limits`]: queue limits and how a stacked device derives them from its
//!   members (`blk_stack_limits()`).
//! - [`StackBuilder`]: devices and their derived geometry; every combination that
//!   cannot work is an error naming the device.
//! - [`StackSpec`]: a stack as a tree, or as text (`striped:chunk=64k[8*nullb:...]`).
//! - [`trace`]: blktrace-like events, blkparse-style lines, seek histograms.
//!
//! [`SplitOrder`] selects where split remainders go on the BIO list: at the head
//! (ascending order on the members) or at the tail (the historical behaviour, kept
//! to show its effect). The simulator of a whole stack is `zblk_sim` (one simulator for single devices and stacks).

mod device;
pub mod limits;
mod spec;
mod submit;
pub mod trace;

pub use device::{DevId, DevInfo, DevKind, LinearTarget, StackBuilder, StackError};
pub use limits::Limits;
pub use spec::{BuiltStack, DiskResolver, SpecError, StackSpec, TargetSpec, nullb_disk};
pub use submit::{SplitOrder, Stack, StackAction, StackConfig, StackStats};
pub use trace::{SeekHist, SeekTracker, TraceAction, TraceEvent, TraceWriter};
