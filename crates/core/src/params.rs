//! Device parameters by null_blk's names (`zone_size`, `zone_capacity`,
//! `zone_nr_conv`, `zone_max_open`, `zone_max_active`, `zone_append_max_sectors`,
//! `memory_backed`, `blocksize`, `hw_queue_depth`, `completion_nsec`, ...), the
//! convention users know for describing an emulated zoned device.
//!
//! As in null_blk, `size`, `zone_size` and `zone_capacity` are in MB when given as a
//! plain number; zblk also accepts a size suffix (`zone_size=64k`, `size=30T`).

use crate::geometry::{Geometry, GeometryError, GeometryParams};
use crate::units::parse_size;
use std::fmt::Write as _;

/// How the simulated null device draws completion latencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatencyDist {
    /// Always `completion_nsec`.
    Fixed,
    /// Uniform in `[0, 2 * completion_nsec]`: completions reorder across zones.
    Uniform,
    /// Exponential with mean `completion_nsec`: a long tail.
    Exp,
}

/// Everything that describes an emulated device: its geometry and how it behaves.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceParams {
    /// Size, zones, limits.
    pub geometry: GeometryParams,
    /// `memory_backed`: store data (reads return it) or drop it.
    pub memory_backed: bool,
    /// `rotational`: a hard disk (sets the default of `zoned_qd1_writes`).
    pub rotational: bool,
    /// `hw_queue_depth`: requests the device accepts at once.
    pub hw_queue_depth: u32,
    /// `completion_nsec`: mean completion latency of the simulated null device.
    pub completion_nsec: u64,
    /// `completion_dist` (zblk): how latencies are drawn around `completion_nsec`.
    pub completion_dist: LatencyDist,
}

impl Default for DeviceParams {
    /// null_blk's defaults, zoned: 250 GB, 256 MB zones, 512 B blocks, native zone
    /// append, queue depth 64, 10 µs completions.
    fn default() -> Self {
        DeviceParams {
            geometry: GeometryParams {
                capacity_bytes: 250 << 30,
                zone_size_bytes: 256 << 20,
                ..GeometryParams::default()
            },
            memory_backed: false,
            rotational: false,
            hw_queue_depth: 64,
            completion_nsec: 10_000,
            completion_dist: LatencyDist::Fixed,
        }
    }
}

/// A refused parameter, named as the user wrote it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{param}: {message}")]
pub struct ParamError {
    /// The parameter at fault.
    pub param: String,
    /// What is wrong.
    pub message: String,
}

impl From<GeometryError> for ParamError {
    fn from(e: GeometryError) -> Self {
        ParamError { param: e.param.to_string(), message: e.message }
    }
}

/// The most zones a device described by parameters may have: the host keeps a plug
/// and the device a zone state for each (an image holds the same number).
pub const MAX_ZONES: u32 = 1 << 22;

/// The parameter names [`DeviceParams::apply`] accepts, with what they mean.
pub const PARAMS: &[(&str, &str)] = &[
    ("size", "device capacity, MB (or with a suffix: 30T)"),
    ("gb", "device capacity, GB"),
    ("blocksize", "logical block size, bytes: 512 or 4096"),
    ("zoned", "1: host-managed zoned device, 0: regular device"),
    ("zone_size", "zone size, MB (or with a suffix: 64k), a power of two"),
    ("zone_capacity", "writable part of each zone, MB (or with a suffix); 0: the zone size"),
    ("zone_nr_conv", "number of conventional zones at the start"),
    ("zone_max_open", "limit on open zones; 0: none"),
    ("zone_max_active", "limit on open + closed zones; 0: none"),
    ("zone_append_max_sectors", "largest native zone append, sectors; 0: no native append (emulated)"),
    ("max_sectors", "largest request, sectors"),
    (
        "write_zeroes_max_bytes",
        "largest WRITE_ZEROES, bytes (or with a suffix: 32M); 0: none (zero buffers are written)",
    ),
    (
        "write_zeroes_unmap_max_hw_bytes",
        "the device deallocates on WRITE_ZEROES (UNMAP/DEAC): 0, or write_zeroes_max_bytes",
    ),
    ("memory_backed", "1: store data, 0: drop it"),
    ("rotational", "1: a hard disk (zoned_qd1_writes defaults to 1)"),
    ("hw_queue_depth", "requests the device accepts at once"),
    ("completion_nsec", "simulated completion latency, ns"),
    ("completion_dist", "fixed, uniform (0..2x) or exp: how latencies vary"),
];

fn parse_u<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ParamError> {
    value
        .parse()
        .map_err(|_| ParamError { param: key.to_string(), message: format!("'{value}' is not a valid number") })
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ParamError> {
    match value {
        "1" | "y" | "Y" | "true" => Ok(true),
        "0" | "n" | "N" | "false" => Ok(false),
        _ => Err(ParamError { param: key.to_string(), message: format!("'{value}' is not 0 or 1") }),
    }
}

/// A size in MB as null_blk takes it, or with an explicit suffix.
fn parse_mb(key: &str, value: &str) -> Result<u64, ParamError> {
    let err = |m: String| ParamError { param: key.to_string(), message: m };
    if value.chars().all(|c| c.is_ascii_digit()) {
        let mb: u64 = parse_u(key, value)?;
        return mb.checked_mul(1 << 20).ok_or_else(|| err(format!("{value} MB is too large")));
    }
    parse_size(value).map_err(|e| err(e.to_string()))
}

/// A size in bytes (sysfs' `*_bytes` attributes), or with a suffix.
fn parse_bytes(key: &str, value: &str) -> Result<u64, ParamError> {
    parse_size(value).map_err(|e| ParamError { param: key.to_string(), message: e.to_string() })
}

impl DeviceParams {
    /// Applies `key=value` settings separated by commas or spaces, as null_blk's
    /// module parameters are written: `zone_size=64,zone_capacity=48 zone_nr_conv=4`.
    /// An unknown name is refused with the list of known ones.
    pub fn apply(&mut self, settings: &str) -> Result<(), ParamError> {
        let mut seen: Vec<&str> = Vec::new();
        for item in settings.split([',', ' ', '\t', '\n']).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(ParamError { param: item.to_string(), message: "expected name=value".to_string() });
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(ParamError { param: key.to_string(), message: "given twice".to_string() });
            }
            seen.push(key);
            self.set(key, value)?;
        }
        Ok(())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), ParamError> {
        let g = &mut self.geometry;
        match key {
            "size" => g.capacity_bytes = parse_mb(key, value)?,
            "gb" => {
                let gb: u64 = parse_u(key, value)?;
                g.capacity_bytes = gb.checked_mul(1 << 30).ok_or_else(|| ParamError {
                    param: key.to_string(),
                    message: format!("{value} GB is too large"),
                })?;
            }
            "blocksize" => g.lbs_bytes = parse_u(key, value)?,
            "zoned" => g.zoned = parse_bool(key, value)?,
            "zone_size" => g.zone_size_bytes = parse_mb(key, value)?,
            "zone_capacity" => g.zone_capacity_bytes = parse_mb(key, value)?,
            "zone_nr_conv" => g.nr_conv = parse_u(key, value)?,
            "zone_max_open" => g.max_open = parse_u(key, value)?,
            "zone_max_active" => g.max_active = parse_u(key, value)?,
            "zone_append_max_sectors" => g.max_append_sectors = parse_u(key, value)?,
            "max_sectors" => g.max_sectors = parse_u(key, value)?,
            "write_zeroes_max_bytes" => {
                g.write_zeroes_max_bytes = parse_bytes(key, value)?;
                // A device that unmaps keeps unmapping up to its new limit.
                if g.write_zeroes_unmap_max_hw_bytes != 0 {
                    g.write_zeroes_unmap_max_hw_bytes = g.write_zeroes_max_bytes;
                }
            }
            "write_zeroes_unmap_max_hw_bytes" => g.write_zeroes_unmap_max_hw_bytes = parse_bytes(key, value)?,
            "memory_backed" => self.memory_backed = parse_bool(key, value)?,
            "rotational" => self.rotational = parse_bool(key, value)?,
            "hw_queue_depth" => {
                self.hw_queue_depth = parse_u(key, value)?;
                if self.hw_queue_depth == 0 {
                    return Err(ParamError { param: key.to_string(), message: "must be at least 1".to_string() });
                }
            }
            "completion_nsec" => self.completion_nsec = parse_u(key, value)?,
            "completion_dist" => {
                self.completion_dist = match value {
                    "fixed" => LatencyDist::Fixed,
                    "uniform" => LatencyDist::Uniform,
                    "exp" => LatencyDist::Exp,
                    _ => {
                        return Err(ParamError {
                            param: key.to_string(),
                            message: format!("'{value}' is not one of fixed, uniform, exp"),
                        });
                    }
                }
            }
            _ => {
                let mut known = String::new();
                for (name, _) in PARAMS {
                    let _ = write!(known, "{name} ");
                }
                return Err(ParamError {
                    param: key.to_string(),
                    message: format!("unknown parameter; known: {}", known.trim_end()),
                });
            }
        }
        Ok(())
    }

    /// The validated geometry, within [`MAX_ZONES`].
    pub fn validate(&self) -> Result<Geometry, ParamError> {
        let geo = Geometry::new(&self.geometry)?;
        if geo.nr_zones() > MAX_ZONES {
            return Err(ParamError {
                param: "zone_size".to_string(),
                message: format!(
                    "{} zones: a device holds at most {MAX_ZONES} (every zone is kept in memory); use larger zones",
                    geo.nr_zones()
                ),
            });
        }
        Ok(geo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_blk_names_and_units() {
        let mut p = DeviceParams::default();
        p.apply("size=1024,zone_size=64 zone_capacity=48,zone_nr_conv=2 zone_max_open=8,zone_max_active=12").unwrap();
        let g = p.validate().unwrap();
        assert_eq!(g.nr_zones(), 16);
        assert_eq!(g.zone_cap_sectors(), 48 << 11);
        assert_eq!(g.nr_conv(), 2);
        assert_eq!((g.max_open(), g.max_active()), (8, 12));
        p.apply("zone_size=64k,zone_capacity=0,size=1M,blocksize=4096,zone_append_max_sectors=0").unwrap();
        let g = p.validate().unwrap();
        assert_eq!(g.zone_sectors(), 128);
        assert!(g.emulates_zone_append());
        assert_eq!(g.lbs_bytes(), 4096);
    }

    #[test]
    fn zone_count_is_bounded() {
        // 2^30 zones: validating once meant allocating every zone's state (tens of
        // GiB) in whatever built the device; found with the stack_spec fuzz target.
        let mut p = DeviceParams::default();
        p.apply("size=4T,zone_size=4k").unwrap();
        let e = p.validate().unwrap_err();
        assert_eq!(e.param, "zone_size");
        assert!(e.message.contains("at most 4194304"), "{e}");
        let mut p = DeviceParams::default();
        p.apply("size=4T,zone_size=1M").unwrap();
        assert_eq!(p.validate().unwrap().nr_zones(), MAX_ZONES);
    }

    #[test]
    fn refusals_name_the_parameter() {
        let cases = [
            ("bogus=1", "bogus"),
            ("zone_size", "zone_size"),
            ("zone_size=abc", "zone_size"),
            ("memory_backed=2", "memory_backed"),
            ("zone_size=1,zone_size=2", "zone_size"),
            ("hw_queue_depth=0", "hw_queue_depth"),
            ("completion_dist=normal", "completion_dist"),
            ("gb=99999999999999", "gb"),
        ];
        for (text, param) in cases {
            let err = DeviceParams::default().apply(text).unwrap_err();
            assert_eq!(err.param, param, "{text}: {err}");
        }
    }
}
