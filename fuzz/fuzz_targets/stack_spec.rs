//! The `--stack` specification parser with disks as `--dev` takes them, and the
//! stack built when small (`zblk_sim::fuzzing::stack_spec`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| zblk_sim::fuzzing::stack_spec(data));
