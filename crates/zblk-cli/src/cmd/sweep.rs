//! `zblk sweep EXPERIMENT`: the published experiments, run on simulated devices,
//! every policy side by side, with tables, plots and JSON rows.

use crate::CliError;
use clap::{Args, ValueEnum};

/// Runs one of the published experiments on simulated devices and prints the
/// simulated numbers beside the published ones where they exist.
#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Which experiment.
    #[arg(value_enum)]
    pub experiment: Experiment,
    /// Print one JSON array of rows instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Directory for plots (PNG and SVG).
    #[arg(long, default_value = "target/zblk-plots")]
    pub out: std::path::PathBuf,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The experiments.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Experiment {
    /// Split order on a striped device: sequential reads with split remainders at
    /// the head or the tail of the BIO list, member seeks and throughput.
    Split,
}

/// Runs `zblk sweep`.
pub fn run(a: &SweepArgs) -> Result<(), CliError> {
    match a.experiment {
        Experiment::Split => super::sweep_split::run(a),
    }
}
