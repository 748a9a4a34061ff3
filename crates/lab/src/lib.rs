//! The calibration lab: the published zoned-write experiments run as sweeps over the
//! simulator's devices, every issue policy side by side with the published figure
//! beside each simulated one, and the calibration of the disk timing models against
//! those figures (leave-one-out, the destage window families). Every number it
//! produces is a simulator number.
//!
//! The simulator (`zblk-sim`) holds the devices, their timing models and the presets
//! `zblk bench --dev` runs; this crate holds what is run on them to publish and to
//! fit: `zblk sweep` prints its rows, docs/calibration.md its tables.

pub mod experiments;
pub mod loo;
pub mod split;
pub mod sweeps;
pub mod zeroes;
pub mod zeroing;
