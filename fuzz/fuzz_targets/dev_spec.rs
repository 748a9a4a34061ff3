//! The `--dev PRESET[:name=value,...]` device specification parser
//! (`zblk_sim::fuzzing::dev_spec`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| zblk_sim::fuzzing::dev_spec(data));
