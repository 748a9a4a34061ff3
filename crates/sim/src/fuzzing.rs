//! Entry points of the fuzz targets under `fuzz/` for the simulator's specification
//! parsers, as plain functions: the targets call them on libFuzzer's inputs, and a
//! stable test replays the committed corpora through them. Each panics only on a bug.

use crate::presets::DeviceSpec;
use zblk_core::stack::{StackConfig, StackSpec};

/// The most disks a fuzzed stack is built with: building is what `zblk trace` does
/// next, but thousands of default-sized disks would only measure the allocator.
const BUILD_MAX_DISKS: usize = 16;

/// The device specification parser (`--dev PRESET[:name=value,...]`,
/// [`DeviceSpec::parse`]) on arbitrary text: never a panic; a spec that parses has a
/// valid geometry, and parses the same from the preset with its own settings.
pub fn dev_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(d) = DeviceSpec::parse(text) else { return };
    let geo = d.params.validate().unwrap_or_else(|e| panic!("{text:?} parsed to an invalid geometry: {e}"));
    if geo.is_zoned() {
        assert!(geo.nr_zones() >= 1, "{text:?}: a zoned device with no zone");
    }
    let _ = d.rotational();
    let _ = d.model(1);
}

/// The stack specification parser (`--stack`, as `zblk trace` and `zblk sweep split`
/// take it: [`StackSpec::parse`] with disks resolved by [`DeviceSpec::parse`]) on
/// arbitrary text, then the stack built when it is small: never a panic, and the
/// disk count is what the tree says.
pub fn stack_spec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut resolve = |t: &str| DeviceSpec::parse(t).map(|d| d.params).map_err(|e| e.to_string());
    let Ok(spec) = StackSpec::parse(text, &mut resolve) else { return };
    let n = spec.nr_disks();
    assert!(n >= 1, "{text:?}: a stack with no disk");
    if n <= BUILD_MAX_DISKS {
        if let Ok(built) = spec.build(StackConfig::default(), None) {
            assert_eq!(built.disks.len(), n, "{text:?}: built disks");
        }
    }
}
