//! The image open path over damaged metadata: superblocks, durable tables and the
//! live table of a small valid image edited by the input (checksums recomputed when
//! the input asks), then opened, reported, read, written, closed and reopened. See
//! `zblk_dev::fuzzing`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| zblk_dev::fuzzing::image_format(data));
