//! Inputs the fuzz targets found crashing (fuzz/, docs/bad-inputs.md "Fuzzing"),
//! each fed to the same entry function the target calls, so that CI keeps them
//! fixed without a nightly toolchain.

use zblk_dev::fuzzing::{image_format, image_format_cleanup};

/// Table B's sector 6 given commit number 3 + 0xef << 48 with its checksum
/// recomputed, on a restarted machine, opened with `--repair`. The repair numbered
/// its commits past that, the live header kept only 46 bits of the number, and the
/// next open found the live table "older" than the durable table it had just been
/// closed with: a repair that never ends. Now a commit number past the live header's
/// range marks the table damaged.
#[test]
fn table_commit_number_past_the_live_header() {
    image_format(&[0x6e, 0xef, 0xdd, 0xef, 0xff, 0xf7, 0xff, 0xfe, 0x00]);
    image_format_cleanup();
}
