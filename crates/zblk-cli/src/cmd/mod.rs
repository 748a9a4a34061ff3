//! One module per subcommand.

pub mod bench;
pub mod corebench;
pub mod sweep;
pub mod sweep_split;
pub mod trace;
