//! One module per subcommand.

pub mod bench;
pub mod check;
pub mod corebench;
pub mod create;
pub mod fallocate;
pub mod imgbench;
pub mod info;
pub mod io;
pub mod serve;
pub mod sweep;
pub mod trace;
pub mod vopr;
pub mod zones;
