//! Entry points of the fuzz targets under `fuzz/` for the parsers of this crate, as
//! plain functions: the targets call them on libFuzzer's inputs, and a stable test
//! replays the committed corpora through them, so that CI runs every input found
//! worth keeping without a nightly toolchain. Each function panics only on a bug (an
//! assertion about the parser's own contract); inputs it refuses are fine.

use crate::params::DeviceParams;
use crate::units::{format_bytes_exact, parse_size};

/// The size and suffix parser ([`parse_size`]) on arbitrary text: never a panic, and
/// a parsed size printed back exactly (with a binary suffix) parses to the same
/// value.
pub fn size(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(v) = parse_size(text) {
        let back = format_bytes_exact(v);
        assert_eq!(parse_size(&back).ok(), Some(v), "{text:?} -> {v} -> {back:?}");
    }
}

/// The `-p name=value,...` parameter parser ([`DeviceParams::apply`]) on arbitrary
/// text over null_blk's defaults, then the geometry it gives validated and queried as
/// `zblk create` and the simulator do: never a panic, and a valid geometry holds its
/// own invariants (zones tile the capacity, limits within the zone).
pub fn params(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut p = DeviceParams::default();
    if p.apply(text).is_err() {
        return;
    }
    let Ok(geo) = p.validate() else { return };
    if geo.is_zoned() {
        assert!(geo.nr_zones() >= 1, "{text:?}: a zoned geometry with no zone");
        let last = crate::units::ZoneNo(geo.nr_zones() - 1);
        let end = geo.zone_start(last).0 + geo.zone_len(last);
        assert_eq!(end, geo.nr_sectors(), "{text:?}: zones do not tile the capacity");
        assert!(geo.zone_capacity(last) <= geo.zone_len(last), "{text:?}: capacity past the zone's end");
        assert_eq!(geo.zone_no(crate::units::Sector(geo.nr_sectors() - 1)), last, "{text:?}: last sector's zone");
        assert!(geo.nr_conv() <= geo.nr_zones(), "{text:?}: more conventional zones than zones");
    }
    assert!(geo.nr_sectors() > 0, "{text:?}: an empty device");
}
