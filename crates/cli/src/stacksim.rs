//! A simulated stack from its text: the stack specification (`--stack`) with its
//! disks as `--dev` takes them, built into a simulator. Shared by `zblk trace` and
//! `zblk serve --stack`, so that neither command imports the other.

use crate::{CliError, devspec};
use zblk_core::engine::IssuePolicy;
use zblk_core::stack::{SplitOrder, StackConfig, StackSpec};
use zblk_sim::{ModelFactory, Sim, StackSimConfig};

/// Parses a stack specification, its disks as `--dev` takes them.
pub fn parse_stack(text: &str) -> Result<StackSpec, CliError> {
    let mut resolve =
        |t: &str| devspec::parse(t).map(|d| d.params).map_err(|e| e.0.trim_start_matches("--dev: ").to_string());
    StackSpec::parse(text, &mut resolve).map_err(|e| CliError(format!("--stack: {e}")))
}

/// Builds the simulation of `spec`, every disk's engine with `policy` (or its own).
pub fn build_sim(
    spec: &StackSpec,
    order: SplitOrder,
    policy: Option<IssuePolicy>,
    seed: u64,
    check: bool,
    models: ModelFactory<'_>,
) -> Result<Sim, CliError> {
    let built = spec
        .build(StackConfig { split_order: order, ..StackConfig::default() }, policy)
        .map_err(|e| CliError(format!("--stack: {e}")))?;
    Ok(Sim::with_stack(built, StackSimConfig { check, trace: true, ..StackSimConfig::new(seed) }, models))
}
