//! The `-p name=value,...` device parameter parser and the geometry it gives
//! (`zblk_core::fuzzing::params`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| zblk_core::fuzzing::params(data));
