//! Simulated device presets and their specifications: `PRESET[:name=value,...]`,
//! a preset followed by null_blk-style parameters that override it
//! (`nullb:zone_size=64,memory_backed=1`, `smr-30tb:write_cache=0`).

use super::driver::{Sim, SimConfig};
use super::hdd::{HddModel, HddParams};
use super::model::{DeviceModel, NullModel};
use super::ssd::{SsdModel, SsdParams};
use zblk_core::params::{DeviceParams, LatencyDist, ParamError};

/// The presets, with what they are.
pub const PRESETS: &[(&str, &str)] = &[
    ("nullb", "null_blk's defaults, zoned: 250 GB, 256 MB zones, native zone append, 10 us completions"),
    (
        "smr-30tb",
        "30 TB host-managed SMR SATA disk, 256 MiB zones, 7200 rpm, on an AHCI port: max_sectors=1344 (HDD \
         model; see docs/calibration.md)",
    ),
    (
        "smr-20tb",
        "20 TB host-managed SMR SATA disk, 256 MiB zones, max 128 open zones, on an AHCI port: \
         max_sectors=1344 (HDD model)",
    ),
    ("zns", "2 TB NVMe ZNS SSD, 2 GiB zones of 1077 MiB capacity, 14 open/active zones, native zone append"),
    ("ssd", "2 TB conventional NVMe SSD (not zoned)"),
    ("hdd", "20 TB conventional 7200 rpm SATA disk (not zoned, HDD model), on an AHCI port: max_sectors=1344"),
];

/// Parameters of the timing model beside the device parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelParams {
    /// The null device's latency (`completion_nsec`, `completion_dist`).
    Null,
    /// A hard disk.
    Hdd(HddParams),
    /// A flash SSD.
    Ssd(SsdParams),
}

/// A simulated device: what the host sees (geometry, queue) and how it behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSpec {
    /// Preset name.
    pub preset: String,
    /// Geometry, limits and queue, by null_blk's names.
    pub params: DeviceParams,
    /// The timing model's parameters.
    pub model: ModelParams,
}

/// Fitted: the application's completion-to-next-submission turnaround (fio reaping a
/// completion and issuing the next I/O through a system call), the host side of the
/// disk presets. See docs/calibration.md.
pub const HOST_LATENCY_NS: u64 = 18_000;

/// The largest request the host sends a SATA disk, in sectors: 672 KiB. An AHCI
/// port's command table holds 168 scatter-gather entries (`AHCI_MAX_SG` in the
/// kernel's `drivers/ata/ahci.h`), and a direct write from a user buffer in 4 KiB
/// pages (fio's default `mem=malloc`) takes one entry per page, so the block layer
/// splits a 1 MiB write into 672 KiB + 352 KiB. Per-zone plugging issues the
/// second part only when the first completes; the single issuer issues both in a
/// row (docs/calibration.md, *Revision 2*). `max_sectors=` overrides it.
pub const AHCI_MAX_SECTORS: u32 = 168 * 8;

/// The zoned device seen by the host for a disk: its capacity in 256 MiB zones,
/// emulated zone append, the NCQ depth, rotational, no data kept, requests split
/// at [`AHCI_MAX_SECTORS`].
pub fn smr_device(disk: &HddParams, max_open: u32) -> DeviceParams {
    let zone = disk.zone_bytes.max(256 << 20);
    let mut p = DeviceParams::default();
    p.geometry.capacity_bytes = disk.capacity_bytes / zone * zone;
    p.geometry.zoned = disk.zone_bytes != 0;
    p.geometry.zone_size_bytes = zone;
    p.geometry.max_append_sectors = 0;
    p.geometry.max_open = max_open;
    p.memory_backed = false;
    p.rotational = true;
    p.hw_queue_depth = disk.ncq_depth;
    p.completion_dist = LatencyDist::Fixed;
    // SATA disks zero by writing (WRITE SAME without unmap on an SMR zone).
    p.geometry.write_zeroes_unmap_max_hw_bytes = 0;
    p.geometry.max_sectors = AHCI_MAX_SECTORS;
    p
}

impl DeviceSpec {
    /// The preset called `name`, unmodified.
    pub fn preset(name: &str) -> Result<DeviceSpec, ParamError> {
        let (params, model) = match name {
            "nullb" | "null_blk" => (DeviceParams::default(), ModelParams::Null),
            "smr-30tb" => {
                let disk = HddParams::smr_30tb();
                (smr_device(&disk, 0), ModelParams::Hdd(disk))
            }
            "smr-20tb" => {
                let disk = HddParams::smr_20tb();
                (smr_device(&disk, 128), ModelParams::Hdd(disk))
            }
            "hdd" => {
                let disk = HddParams::cmr_hdd(20_000_000_000_000);
                let mut p = smr_device(&disk, 0);
                p.geometry.zoned = false;
                (p, ModelParams::Hdd(disk))
            }
            "zns" => {
                let ssd = SsdParams::zns();
                let mut p = DeviceParams::default();
                p.apply("size=2T,zone_size=2G,zone_capacity=1077,zone_max_open=14,zone_max_active=14")?;
                p.apply("zone_append_max_sectors=512,hw_queue_depth=256,completion_dist=fixed")?;
                (p, ModelParams::Ssd(ssd))
            }
            "ssd" => {
                let ssd = SsdParams::ssd();
                let mut p = DeviceParams::default();
                p.apply("size=2T,zoned=0,hw_queue_depth=256")?;
                (p, ModelParams::Ssd(ssd))
            }
            other => {
                let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
                return Err(ParamError {
                    param: "preset".to_string(),
                    message: format!("unknown preset '{other}' (known: {})", names.join(", ")),
                });
            }
        };
        Ok(DeviceSpec { preset: name.to_string(), params, model })
    }

    /// Parses `PRESET[:name=value,...]`. Besides null_blk's parameters, the disk
    /// presets take `write_cache=0|1`, and the SMR mechanisms of
    /// docs/calibration.md for ablation: `reset_flushes=0|1` (M1) and
    /// `zone_resume_revs=R` (M2, revolutions, 0 to 10), and the layout's
    /// `zone_advance=A` (revolutions, 0 to below 1, or `drawn` to draw it from the
    /// layout seed; docs/calibration.md, *Revision 3*).
    pub fn parse(spec: &str) -> Result<DeviceSpec, ParamError> {
        let (preset, settings) = spec.split_once(':').unwrap_or((spec, ""));
        let mut d = DeviceSpec::preset(preset)?;
        let mut rest = Vec::new();
        let refuse = |param: &str, message: String| ParamError { param: param.to_string(), message };
        for item in settings.split([',', ' ']).filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                Some((name @ ("reset_flushes" | "zone_resume_revs" | "zone_advance"), v)) => {
                    let ModelParams::Hdd(h) = &mut d.model else {
                        return Err(refuse(name, format!("only the disk presets have it ('{preset}' is not one)")));
                    };
                    if name == "reset_flushes" {
                        h.reset_flushes = match v {
                            "1" => true,
                            "0" => false,
                            _ => return Err(refuse(name, format!("'{v}' is not 0 or 1"))),
                        };
                    } else if name == "zone_advance" {
                        h.zone_advance = match (v, v.parse::<f64>()) {
                            ("drawn", _) => None,
                            (_, Ok(a)) if (0.0..1.0).contains(&a) => Some(a),
                            _ => {
                                return Err(refuse(
                                    name,
                                    format!("'{v}' is not 'drawn' or a number of revolutions from 0 to below 1"),
                                ));
                            }
                        };
                    } else {
                        h.zone_resume_revs = match v.parse::<f64>() {
                            Ok(r) if (0.0..=10.0).contains(&r) => r,
                            _ => {
                                return Err(refuse(name, format!("'{v}' is not a number of revolutions from 0 to 10")));
                            }
                        };
                    }
                }
                Some(("write_cache", v)) => {
                    let ModelParams::Hdd(h) = &mut d.model else {
                        return Err(ParamError {
                            param: "write_cache".to_string(),
                            message: format!("only the disk presets have a write cache ('{preset}' is not one)"),
                        });
                    };
                    h.write_cache = match v {
                        "1" => true,
                        "0" => false,
                        _ => {
                            return Err(ParamError {
                                param: "write_cache".to_string(),
                                message: format!("'{v}' is not 0 or 1"),
                            });
                        }
                    };
                }
                _ => rest.push(item),
            }
        }
        d.params.apply(&rest.join(","))?;
        d.params.validate()?;
        Ok(d)
    }

    /// Whether the device is a hard disk (sets `zoned_qd1_writes`' default).
    pub fn rotational(&self) -> bool {
        self.params.rotational || matches!(self.model, ModelParams::Hdd(_))
    }

    /// The host turnaround the preset was calibrated with: the fitted
    /// [`HOST_LATENCY_NS`] for the disk models, none for the others.
    pub fn host_latency_ns(&self) -> u64 {
        match self.model {
            ModelParams::Hdd(_) => HOST_LATENCY_NS,
            _ => 0,
        }
    }

    /// The disk model's parameters, for a disk preset: the preset's disk with the
    /// geometry the device has (capacity, zones, NCQ depth). The device parameters are
    /// the one source of the geometry: a preset derives them from its disk once
    /// ([`smr_device`]), overrides change only them, and the model reads them here.
    pub fn hdd_params(&self) -> Option<HddParams> {
        let ModelParams::Hdd(h) = &self.model else { return None };
        let g = &self.params.geometry;
        Some(HddParams {
            capacity_bytes: g.capacity_bytes,
            zone_bytes: if g.zoned { g.zone_size_bytes } else { 0 },
            ncq_depth: self.params.hw_queue_depth,
            ..h.clone()
        })
    }

    /// The timing model, seeded.
    pub fn model(&self, seed: u64) -> Box<dyn DeviceModel> {
        match &self.model {
            ModelParams::Null => {
                Box::new(NullModel::new(self.params.completion_nsec, self.params.completion_dist, seed))
            }
            ModelParams::Hdd(_) => {
                let h = self.hdd_params().expect("a disk preset");
                Box::new(HddModel::new(HddParams { layout_seed: h.layout_seed ^ seed, ..h }))
            }
            ModelParams::Ssd(s) => Box::new(SsdModel::new(s.clone())),
        }
    }

    /// A simulation of this device with `cfg` (whose device parameters are replaced
    /// by the spec's).
    pub fn sim(&self, cfg: &SimConfig) -> Result<Sim, ParamError> {
        let cfg = SimConfig { device: self.params.clone(), ..cfg.clone() };
        Sim::with_model(&cfg, self.model(cfg.seed))
    }
}

impl Default for DeviceSpec {
    fn default() -> Self {
        DeviceSpec { preset: "nullb".to_string(), params: DeviceParams::default(), model: ModelParams::Null }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_builds_a_valid_device() {
        for (name, _) in PRESETS {
            let d = DeviceSpec::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            let geo = d.params.validate().unwrap();
            let _ = d.model(1);
            assert_eq!(d.rotational(), name.contains("smr") || *name == "hdd", "{name}");
            if *name != "ssd" && *name != "hdd" {
                assert!(geo.is_zoned(), "{name}");
            }
        }
    }

    #[test]
    fn overrides_and_refusals() {
        let d = DeviceSpec::parse("smr-30tb:write_cache=0,size=1T,hw_queue_depth=8").unwrap();
        let h = d.hdd_params().expect("a disk");
        assert!(!h.write_cache);
        assert_eq!((h.capacity_bytes, h.zone_bytes, h.ncq_depth), (1 << 40, 256 << 20, 8));
        let h = DeviceSpec::parse("smr-30tb:zoned=0").unwrap().hdd_params().expect("a disk");
        assert_eq!(h.zone_bytes, 0, "a disk the device shows unzoned has no zones in the model");
        let e = DeviceSpec::parse("nullb:write_cache=0").unwrap_err();
        assert_eq!(e.param, "write_cache");
        let e = DeviceSpec::parse("smr-30tb:write_cache=2").unwrap_err();
        assert_eq!(e.param, "write_cache");
        let d = DeviceSpec::parse("smr-20tb:reset_flushes=0,zone_resume_revs=0.5").unwrap();
        let ModelParams::Hdd(h) = &d.model else { panic!() };
        assert!(!h.reset_flushes && h.zone_resume_revs == 0.5);
        let d = DeviceSpec::parse("smr-30tb:zone_advance=drawn").unwrap();
        let ModelParams::Hdd(h) = &d.model else { panic!() };
        assert_eq!(h.zone_advance, None);
        let d = DeviceSpec::parse("smr-20tb:zone_advance=0.35").unwrap();
        let ModelParams::Hdd(h) = &d.model else { panic!() };
        assert_eq!(h.zone_advance, Some(0.35));
        for bad in [
            "zone_advance=1",
            "zone_advance=-0.1",
            "zone_advance=NaN",
            "zone_advance=",
            "zone_advance=random",
            "zone_resume_revs=-1",
            "zone_resume_revs=NaN",
            "zone_resume_revs=1e9",
            "zone_resume_revs=",
            "reset_flushes=yes",
        ] {
            let e = DeviceSpec::parse(&format!("smr-30tb:{bad}")).unwrap_err();
            assert!(bad.starts_with(&e.param), "{bad}: {e:?}");
        }
        let e = DeviceSpec::parse("nullb:zone_resume_revs=1").unwrap_err();
        assert_eq!(e.param, "zone_resume_revs");
        let e = DeviceSpec::parse("floppy").unwrap_err();
        assert!(e.message.contains("smr-30tb"));
        let e = DeviceSpec::parse("zns:zone_size=3").unwrap_err();
        assert_eq!(e.param, "zone_size");
    }
}
