//! Simulated device specifications: `PRESET[:name=value,...]`, a preset followed by
//! null_blk-style parameters that override it (`nullb:zone_size=64,memory_backed=1`).

use crate::CliError;
use zblk::params::{DeviceParams, PARAMS};

/// The presets and what they are.
pub const PRESETS: &[(&str, &str)] =
    &[("nullb", "null_blk's defaults, zoned: 250 GB, 256 MB zones, native zone append, 10 us completions")];

/// Parses a device specification.
pub fn parse(spec: &str) -> Result<DeviceParams, CliError> {
    let (preset, settings) = spec.split_once(':').unwrap_or((spec, ""));
    let mut params = match preset {
        "nullb" | "null_blk" => DeviceParams::default(),
        other => {
            let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
            return Err(CliError(format!("--dev: unknown preset '{other}' (known: {})", names.join(", "))));
        }
    };
    params.apply(settings).map_err(|e| CliError(format!("--dev: {e}")))?;
    params.validate().map_err(|e| CliError(format!("--dev: {e}")))?;
    Ok(params)
}

/// Help text listing presets and parameters.
pub fn help() -> String {
    let mut s = String::from("Presets:\n");
    for (name, what) in PRESETS {
        s.push_str(&format!("  {name:<24} {what}\n"));
    }
    s.push_str("Parameters (null_blk names):\n");
    for (name, what) in PARAMS {
        s.push_str(&format!("  {name:<24} {what}\n"));
    }
    s
}
