//! What the kernel says about a block device in sysfs: its size (`<dev>/size`) and
//! its queue limits (`<dev>/queue/*`, `Documentation/ABI/stable/sysfs-block`). Read
//! from a directory given as a path, so that tests can hand in a fake tree; every
//! value is checked, and a refusal names the attribute file, the value and why.

use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A block device's limits as sysfs gives them, checked.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct QueueLimits {
    /// `size`: capacity in 512-byte sectors.
    pub nr_sectors: u64,
    /// `queue/chunk_sectors`: the zone size in sectors (a power of two).
    pub chunk_sectors: u64,
    /// `queue/nr_zones`.
    pub nr_zones: u32,
    /// `queue/max_open_zones`: 0 is no limit.
    pub max_open_zones: u32,
    /// `queue/max_active_zones`: 0 is no limit.
    pub max_active_zones: u32,
    /// `queue/zone_append_max_bytes`: what the device could append natively. Kept to
    /// show it: userspace has no zone append on a raw block device, so zblk emulates.
    pub zone_append_max_bytes: u64,
    /// `queue/logical_block_size`: 512 or 4096.
    pub logical_block_size: u32,
    /// `queue/max_sectors_kb`: the largest request, in KiB.
    pub max_sectors_kb: u32,
    /// `queue/rotational`.
    pub rotational: bool,
    /// `queue/write_zeroes_max_bytes`: 0 when the device has no WRITE_ZEROES.
    pub write_zeroes_max_bytes: u64,
    /// `queue/write_zeroes_unmap_max_hw_bytes` (Linux 6.17+; `None` before): the
    /// device deallocates on WRITE_ZEROES up to this size.
    pub write_zeroes_unmap_max_hw_bytes: Option<u64>,
    /// `queue/dma_alignment`: the mask an `O_DIRECT` buffer's address must clear
    /// (`None` on kernels without the attribute: the logical block size then).
    pub dma_alignment: Option<u32>,
    /// `queue/write_cache`: `write back` or `write through` (`None` if absent).
    pub write_cache: Option<String>,
}

/// Why sysfs is refused.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// `queue/zoned` says the device is not host-managed.
    #[error("not a zoned block device ({path} is \"{value}\"): zblk drives host-managed zoned block devices only")]
    NotZoned {
        /// The attribute file.
        path: PathBuf,
        /// What it says.
        value: String,
    },
    /// A required attribute is not there.
    #[error("{path} is missing (is this the sysfs directory of a zoned block device?)")]
    Missing {
        /// The attribute file.
        path: PathBuf,
    },
    /// An attribute's value is absurd or contradicts another.
    #[error("{path}: \"{value}\": {why}")]
    Invalid {
        /// The attribute file.
        path: PathBuf,
        /// What it says.
        value: String,
        /// Why it is refused.
        why: String,
    },
    /// An attribute could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The attribute file.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
}

/// The sysfs directory of a device: `/sys/dev/block/MAJOR:MINOR`.
pub fn device_dir(major: u32, minor: u32) -> PathBuf {
    PathBuf::from(format!("/sys/dev/block/{major}:{minor}"))
}

/// One attribute file of a device directory.
struct Attr {
    path: PathBuf,
    value: String,
}

impl Attr {
    fn invalid(&self, why: impl Into<String>) -> SysfsError {
        SysfsError::Invalid { path: self.path.clone(), value: self.value.clone(), why: why.into() }
    }

    fn parse<T: FromStr>(&self) -> Result<T, SysfsError> {
        self.value.parse().map_err(|_| self.invalid(format!("not a number in 0..={}", type_max::<T>())))
    }
}

fn type_max<T>() -> &'static str {
    match std::mem::size_of::<T>() {
        4 => "4294967295",
        _ => "18446744073709551615",
    }
}

/// The attribute `name` of `dir` (trimmed), or `None` if the file does not exist.
fn read_attr(dir: &Path, name: &str) -> Result<Option<Attr>, SysfsError> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let value = String::from_utf8_lossy(&bytes).trim().to_string();
            Ok(Some(Attr { path, value }))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SysfsError::Io { path, source }),
    }
}

fn required(dir: &Path, name: &str) -> Result<Attr, SysfsError> {
    read_attr(dir, name)?.ok_or_else(|| SysfsError::Missing { path: dir.join(name) })
}

fn number<T: FromStr>(dir: &Path, name: &str) -> Result<(T, Attr), SysfsError> {
    let a = required(dir, name)?;
    Ok((a.parse()?, a))
}

fn optional_number<T: FromStr>(dir: &Path, name: &str) -> Result<Option<(T, Attr)>, SysfsError> {
    match read_attr(dir, name)? {
        Some(a) => Ok(Some((a.parse()?, a))),
        None => Ok(None),
    }
}

/// Reads and checks the limits of the zoned block device whose sysfs directory is
/// `dev_dir` (`/sys/block/nullb0`, `/sys/dev/block/MAJOR:MINOR`, or a fake tree).
/// A device that is not host-managed is refused first, with [`SysfsError::NotZoned`].
pub fn read(dev_dir: &Path) -> Result<QueueLimits, SysfsError> {
    let q = dev_dir.join("queue");
    let zoned = required(&q, "zoned")?;
    match zoned.value.as_str() {
        "host-managed" => {}
        "none" | "host-aware" => return Err(SysfsError::NotZoned { path: zoned.path, value: zoned.value }),
        _ => return Err(zoned.invalid("not one of none, host-aware, host-managed")),
    }
    let (lbs, a) = number::<u32>(&q, "logical_block_size")?;
    if lbs != 512 && lbs != 4096 {
        return Err(a.invalid("zblk handles logical blocks of 512 and 4096 bytes"));
    }
    let lbs_sectors = u64::from(lbs / 512);
    let (nr_sectors, a) = number::<u64>(dev_dir, "size")?;
    if nr_sectors == 0 {
        return Err(a.invalid("the device has no capacity"));
    }
    if nr_sectors.checked_mul(512).is_none() || nr_sectors % lbs_sectors != 0 {
        return Err(a.invalid(format!("not a capacity in {lbs}-byte blocks that fits in 64-bit bytes")));
    }
    let (chunk_sectors, a) = number::<u64>(&q, "chunk_sectors")?;
    if !chunk_sectors.is_power_of_two() || chunk_sectors < lbs_sectors || chunk_sectors > nr_sectors {
        return Err(a.invalid(format!(
            "the zone size must be a power of two of at least one block and at most the device ({nr_sectors} sectors)"
        )));
    }
    let (nr_zones, a) = number::<u32>(&q, "nr_zones")?;
    let expect = nr_sectors.div_ceil(chunk_sectors);
    if u64::from(nr_zones) != expect {
        return Err(a.invalid(format!("size / chunk_sectors gives {expect} zones")));
    }
    let (max_open_zones, _) = number::<u32>(&q, "max_open_zones")?;
    let (max_active_zones, a) = number::<u32>(&q, "max_active_zones")?;
    if max_active_zones != 0 && max_open_zones > max_active_zones {
        return Err(a.invalid(format!("below max_open_zones ({max_open_zones})")));
    }
    let (zone_append_max_bytes, _) = number::<u64>(&q, "zone_append_max_bytes")?;
    let (max_sectors_kb, a) = number::<u32>(&q, "max_sectors_kb")?;
    if u64::from(max_sectors_kb) * 2 < lbs_sectors || max_sectors_kb > u32::MAX / 2 {
        return Err(a.invalid(format!("not a request size of at least one block ({lbs} bytes) below 2 TiB")));
    }
    let rotational = required(&q, "rotational")?;
    let rotational = match rotational.value.as_str() {
        "0" => false,
        "1" => true,
        _ => return Err(rotational.invalid("not 0 or 1")),
    };
    let (write_zeroes_max_bytes, a) = number::<u64>(&q, "write_zeroes_max_bytes")?;
    if write_zeroes_max_bytes % u64::from(lbs) != 0 || write_zeroes_max_bytes / 512 > u64::from(u32::MAX) {
        return Err(a.invalid(format!("not a multiple of the logical block size ({lbs} bytes) below 2 TiB")));
    }
    let write_zeroes_unmap_max_hw_bytes =
        optional_number::<u64>(&q, "write_zeroes_unmap_max_hw_bytes")?.map(|(v, _)| v);
    let dma_alignment = match optional_number::<u32>(&q, "dma_alignment")? {
        // The attribute is a mask: the alignment less one.
        Some((mask, a)) if mask >= 4096 || !(mask + 1).is_power_of_two() => {
            return Err(a.invalid("not an alignment mask (2^n - 1) below 4096"));
        }
        other => other.map(|(v, _)| v),
    };
    let write_cache = read_attr(&q, "write_cache")?.map(|a| a.value);
    Ok(QueueLimits {
        nr_sectors,
        chunk_sectors,
        nr_zones,
        max_open_zones,
        max_active_zones,
        zone_append_max_bytes,
        logical_block_size: lbs,
        max_sectors_kb,
        rotational,
        write_zeroes_max_bytes,
        write_zeroes_unmap_max_hw_bytes,
        dma_alignment,
        write_cache,
    })
}

impl QueueLimits {
    /// The largest request in sectors, a whole number of logical blocks (the kernel
    /// rounds `max_sectors` down to the block size; `max_sectors_kb` halves it again).
    pub fn max_sectors(&self) -> u32 {
        let lbs_sectors = self.logical_block_size / 512;
        let s = self.max_sectors_kb * 2;
        s - s % lbs_sectors
    }

    /// The alignment `O_DIRECT` needs of buffers, lengths and offsets: the logical
    /// block size, or the DMA alignment where larger.
    pub fn direct_alignment(&self) -> u64 {
        let dma = self.dma_alignment.map_or(0, |m| u64::from(m) + 1);
        u64::from(self.logical_block_size).max(dma)
    }

    /// `write_zeroes_unmap_max_hw_bytes` as zblk's geometry takes it: the whole
    /// WRITE_ZEROES limit when the device deallocates up to it, else 0 (no unmap). A
    /// kernel without the attribute says nothing of unmapping: 0.
    pub fn write_zeroes_unmap_bytes(&self) -> u64 {
        match self.write_zeroes_unmap_max_hw_bytes {
            Some(u) if self.write_zeroes_max_bytes > 0 && u >= self.write_zeroes_max_bytes => {
                self.write_zeroes_max_bytes
            }
            _ => 0,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// null_blk's attributes in a Linux 6.12 guest (`zoned=1 zone_size=64 gb=1
    /// zone_max_open=4`), plus the 6.17 unmap attribute.
    pub(crate) const NULLB: &[(&str, &str)] = &[
        ("size", "2097152"),
        ("queue/zoned", "host-managed"),
        ("queue/chunk_sectors", "131072"),
        ("queue/nr_zones", "16"),
        ("queue/max_open_zones", "4"),
        ("queue/max_active_zones", "0"),
        ("queue/zone_append_max_bytes", "130560"),
        ("queue/logical_block_size", "512"),
        ("queue/max_sectors_kb", "127"),
        ("queue/rotational", "0"),
        ("queue/write_zeroes_max_bytes", "0"),
        ("queue/write_zeroes_unmap_max_hw_bytes", "0"),
        ("queue/dma_alignment", "511"),
        ("queue/write_cache", "write through"),
    ];

    /// A fake sysfs device directory holding `attrs` (each value written with a
    /// newline, as the kernel does).
    pub(crate) fn fake(attrs: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("queue")).unwrap();
        for (name, value) in attrs {
            std::fs::write(dir.path().join(name), format!("{value}\n")).unwrap();
        }
        dir
    }

    fn with(changes: &[(&str, Option<&str>)]) -> Vec<(&'static str, String)> {
        let mut attrs: Vec<(&'static str, String)> = NULLB.iter().map(|(n, v)| (*n, v.to_string())).collect();
        for (name, value) in changes {
            let i = attrs.iter().position(|(n, _)| n == name).expect("a known attribute");
            match value {
                Some(v) => attrs[i].1 = v.to_string(),
                None => {
                    attrs.remove(i);
                }
            }
        }
        attrs
    }

    fn read_with(changes: &[(&str, Option<&str>)]) -> Result<QueueLimits, SysfsError> {
        let attrs = with(changes);
        let refs: Vec<(&str, &str)> = attrs.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let dir = fake(&refs);
        read(dir.path())
    }

    #[test]
    fn every_attribute_is_read() {
        let l = read_with(&[]).unwrap();
        assert_eq!(
            l,
            QueueLimits {
                nr_sectors: 2 << 20,
                chunk_sectors: 131072,
                nr_zones: 16,
                max_open_zones: 4,
                max_active_zones: 0,
                zone_append_max_bytes: 130560,
                logical_block_size: 512,
                max_sectors_kb: 127,
                rotational: false,
                write_zeroes_max_bytes: 0,
                write_zeroes_unmap_max_hw_bytes: Some(0),
                dma_alignment: Some(511),
                write_cache: Some("write through".to_string()),
            }
        );
        assert_eq!(l.max_sectors(), 254);
        assert_eq!(l.direct_alignment(), 512);
        let l = read_with(&[
            ("queue/logical_block_size", Some("4096")),
            ("queue/max_sectors_kb", Some("1023")),
            ("queue/rotational", Some("1")),
            ("queue/max_active_zones", Some("8")),
            ("queue/write_zeroes_max_bytes", Some("33554432")),
            ("queue/write_zeroes_unmap_max_hw_bytes", Some("33554432")),
        ])
        .unwrap();
        assert_eq!(l.max_sectors(), 2040, "rounded down to whole 4 KiB blocks");
        assert_eq!(l.direct_alignment(), 4096);
        assert!(l.rotational);
        assert_eq!(l.max_active_zones, 8);
        assert_eq!(l.write_zeroes_unmap_bytes(), 32 << 20);
    }

    #[test]
    fn optional_attributes_may_be_missing() {
        let l = read_with(&[
            ("queue/write_zeroes_unmap_max_hw_bytes", None),
            ("queue/dma_alignment", None),
            ("queue/write_cache", None),
            ("queue/write_zeroes_max_bytes", Some("1048576")),
        ])
        .unwrap();
        assert_eq!((l.write_zeroes_unmap_max_hw_bytes, l.dma_alignment, &l.write_cache), (None, None, &None));
        assert_eq!(l.write_zeroes_unmap_bytes(), 0, "no attribute: no unmap");
        assert_eq!(l.direct_alignment(), 512);
    }

    #[test]
    fn a_missing_required_attribute_is_named() {
        for (name, _) in NULLB.iter().take(11) {
            let e = read_with(&[(name, None)]).unwrap_err();
            assert!(matches!(e, SysfsError::Missing { .. }), "{name}: {e}");
            assert!(e.to_string().contains(name) && e.to_string().contains("is missing"), "{name}: {e}");
        }
        let e = read(Path::new("/nonexistent/sysfs/dir")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/sysfs/dir/queue/zoned is missing"), "{e}");
    }

    #[test]
    fn a_device_that_is_not_zoned_is_refused() {
        for value in ["none", "host-aware"] {
            let e = read_with(&[("queue/zoned", Some(value)), ("queue/chunk_sectors", Some("0"))]).unwrap_err();
            assert!(matches!(e, SysfsError::NotZoned { .. }), "{e}");
            let msg = e.to_string();
            assert!(msg.starts_with("not a zoned block device") && msg.contains(value), "{msg}");
            assert!(msg.contains("queue/zoned"), "{msg}");
        }
    }

    #[test]
    fn absurd_values_are_refused_with_a_message() {
        let cases: &[(&str, &str, &str)] = &[
            ("queue/zoned", "sideways", "not one of none"),
            ("size", "0", "no capacity"),
            ("size", "18446744073709551615", "fits in 64-bit bytes"),
            ("size", "-5", "not a number"),
            ("queue/logical_block_size", "1024", "512 and 4096"),
            ("queue/logical_block_size", "0", "512 and 4096"),
            ("queue/chunk_sectors", "0", "power of two"),
            ("queue/chunk_sectors", "100000", "power of two"),
            ("queue/chunk_sectors", "4194304", "at most the device"),
            ("queue/nr_zones", "15", "gives 16 zones"),
            ("queue/nr_zones", "4294967296", "not a number"),
            ("queue/max_open_zones", "lots", "not a number"),
            ("queue/max_active_zones", "2", "below max_open_zones (4)"),
            ("queue/zone_append_max_bytes", "", "not a number"),
            ("queue/max_sectors_kb", "0", "at least one block"),
            ("queue/max_sectors_kb", "4294967295", "below 2 TiB"),
            ("queue/rotational", "2", "not 0 or 1"),
            ("queue/write_zeroes_max_bytes", "1000", "multiple of the logical block size"),
            ("queue/write_zeroes_max_bytes", "18446744073709551104", "below 2 TiB"),
            ("queue/write_zeroes_unmap_max_hw_bytes", "1.5", "not a number"),
            ("queue/dma_alignment", "500", "alignment mask"),
            ("queue/dma_alignment", "65535", "alignment mask"),
        ];
        for (name, value, why) in cases {
            let e = read_with(&[(name, Some(value))]).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, SysfsError::Invalid { .. }), "{name}={value}: {msg}");
            assert!(msg.contains(name) && msg.contains(&format!("\"{value}\"")) && msg.contains(why), "{msg}");
        }
    }

    #[test]
    fn garbage_in_any_attribute_never_panics() {
        let garbage = [
            "",
            " ",
            "\n\n",
            "-1",
            "abc",
            "0x10",
            "1e9",
            "99999999999999999999999",
            "4294967296",
            "0",
            "1",
            "\u{fffd}",
        ];
        for (name, _) in NULLB {
            for g in garbage {
                let _ = read_with(&[(name, Some(g))]);
            }
        }
        // Not UTF-8 at all.
        let dir = fake(NULLB);
        std::fs::write(dir.path().join("queue/nr_zones"), [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(read(dir.path()), Err(SysfsError::Invalid { .. })));
    }
}
