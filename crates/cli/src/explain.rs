//! Errors that explain, as the command says them: the words are the library's
//! (`zblk::explain`, one wording for the library's errors and the command's
//! messages); here a refused range becomes the command's error, naming the image or
//! device.

use crate::CliError;
use zblk_runtime::single::RangeError;

pub use zblk::explain::explain;

/// A request's range refused before it was submitted (`name`: the image or
/// device), in words; `zero` follows "length 0" (what was empty, or why that is
/// refused).
pub fn range(name: &str, offset: u64, length: u64, e: RangeError, zero: &str) -> CliError {
    CliError(format!("{name}: {}", zblk::explain::range(offset, length, e, zero)))
}
