//! Inputs the fuzz targets found crashing (fuzz/, docs/bad-inputs.md "Fuzzing"),
//! each fed to the same entry function the target calls, so that CI keeps them
//! fixed without a nightly toolchain.

use zblk_core::stack::StackSpec;
use zblk_sim::presets::DeviceSpec;

/// A disk of 2^30 zones (4 TiB in 4 KiB zones): the stack was built, allocating
/// every zone's state (tens of GiB) until the process died. Now a device holds at
/// most 2^22 zones, and a stack as many in all its disks.
#[test]
fn a_disk_of_a_billion_zones_is_refused() {
    let text = "nullb:size=4T,zone_size=4k";
    let e = DeviceSpec::parse(text).unwrap_err();
    assert!(e.to_string().contains("at most 4194304"), "{e}");
    let mut resolve = |t: &str| DeviceSpec::parse(t).map(|d| d.params).map_err(|e| e.to_string());
    let e = StackSpec::parse(text, &mut resolve).unwrap_err();
    assert!(e.to_string().contains("at most 4194304"), "{e}");
    // The refusals first: without them this would allocate until killed.
    zblk_sim::fuzzing::stack_spec(text.as_bytes());
    zblk_sim::fuzzing::dev_spec(text.as_bytes());
}
