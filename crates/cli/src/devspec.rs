//! Simulated device specifications on the command line: `PRESET[:name=value,...]`
//! (see `zblk_sim::presets`).

use crate::CliError;
use zblk_core::params::PARAMS;
use zblk_sim::presets::{DeviceSpec, PRESETS};

/// Parses a device specification.
pub fn parse(spec: &str) -> Result<DeviceSpec, CliError> {
    DeviceSpec::parse(spec).map_err(|e| CliError(format!("--dev: {e}")))
}

/// Help text listing presets and parameters.
pub fn help() -> String {
    let mut s = String::from("Presets (--dev PRESET[:name=value,...]):\n");
    for (name, what) in PRESETS {
        s.push_str(&format!("  {name:<24} {what}\n"));
    }
    s.push_str("Parameters (null_blk names):\n");
    for (name, what) in PARAMS {
        s.push_str(&format!("  {name:<24} {what}\n"));
    }
    s.push_str(&format!("  {:<24} {}\n", "write_cache", "disk presets: 1 write-back cache (default), 0 write-through"));
    s.push_str(&format!(
        "  {:<24} {}\n",
        "reset_flushes",
        "disk presets: 1 a zone reset writes the cache back first (default), 0 it drops the zone's data"
    ));
    s.push_str(&format!(
        "  {:<24} {}\n",
        "zone_resume_revs",
        "disk presets: revolutions a write pays to resume a zone left for another (default 1, 0-10)"
    ));
    s.push_str(&format!(
        "  {:<24} {}\n",
        "zone_advance",
        "disk presets: angle of each zone's start past the previous zone's, revolutions 0-<1 \
         (smr-30tb: 0.2, fitted), or 'drawn' from the layout seed (other disks)"
    ));
    s
}
