//! One module per subcommand.

pub mod bench;
pub mod corebench;
pub mod sweep;
