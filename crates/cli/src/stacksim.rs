//! A simulated stack from its text: the stack specification (`--stack`) with its
//! disks as `--dev` takes them. Shared by `zblk trace` and `zblk serve --stack`, so
//! that neither command imports the other; both build the simulation with the
//! library's `zblk::spec::stack_sim`, as a handle on `stack:SPEC` does.

use crate::CliError;
use zblk_core::stack::StackSpec;

/// Parses a stack specification, its disks as `--dev` takes them.
/// (The parser is the library's, `zblk::spec::parse_stack`.)
pub fn parse_stack(text: &str) -> Result<StackSpec, CliError> {
    zblk::spec::parse_stack(text).map_err(|e| CliError(format!("--stack: {e}")))
}
