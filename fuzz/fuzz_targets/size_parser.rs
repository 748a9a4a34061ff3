//! The size and suffix parser on arbitrary text (`zblk_core::fuzzing::size`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| zblk_core::fuzzing::size(data));
