//! A simulated stack from its text: the stack specification (`--stack`) with its
//! disks as `--dev` takes them, built into a simulator. Shared by `zblk trace` and
//! `zblk serve --stack`, so that neither command imports the other.

use crate::CliError;
use zblk_core::engine::IssuePolicy;
use zblk_core::stack::{SplitOrder, StackConfig, StackSpec};
use zblk_sim::{ModelFactory, Sim, StackSimConfig};

/// Parses a stack specification, its disks as `--dev` takes them.
/// (The parser is the library's, `zblk::spec::parse_stack`.)
pub fn parse_stack(text: &str) -> Result<StackSpec, CliError> {
    zblk::spec::parse_stack(text).map_err(|e| CliError(format!("--stack: {e}")))
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
