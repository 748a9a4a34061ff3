//! A target named by one string, as [`Handle::open`](crate::Handle::open) takes it:
//!
//! - `sim:PRESET[:name=value,...]`: a simulated preset with null_blk's parameter
//!   names, as `zblk bench --dev` takes it (`sim:nullb:zone_size=64`, `sim:smr-30tb`);
//! - `stack:SPEC`: a simulated stack of simulated disks, as `zblk trace --stack` takes
//!   it (`stack:linear[nullb:zone_size=64; nullb:zone_size=64]`,
//!   `stack:striped:chunk=64k[2*nullb:zone_size=64]`), built by [`stack_sim`] as
//!   `zblk serve --stack` builds it: a handle's engine on the stack's top device, the
//!   stack's own engine on each disk, the data in memory; not under [`crate::sim`];
//! - anything else, a path: a character device is an NVMe generic device
//!   (`/dev/ng0n1`), a block device a Linux zoned block device (`/dev/nullb0`,
//!   `/dev/sdb`), anything else a zoned image (`./sim:x` names a file called `sim:x`).
//!
//! ```
//! use zblk::spec::{PathKind, Target};
//!
//! assert!(matches!(Target::parse("sim:nullb:zone_size=64").unwrap(), Target::Sim(_)));
//! assert!(matches!(Target::parse("img.zbd").unwrap(), Target::Path(_)));
//! assert_eq!(PathKind::of("img.zbd".as_ref()), PathKind::Image);
//! let e = Target::parse("sim:nosuch").unwrap_err();
//! assert_eq!(e.errno(), 22); // EINVAL
//! ```

use crate::Error;
use std::path::{Path, PathBuf};
use zblk_core::engine::IssuePolicy;
use zblk_core::stack::{SplitOrder, StackConfig, StackSpec};
use zblk_dev::{linux, nvme};
use zblk_sim::presets::DeviceSpec;
use zblk_sim::{ModelFactory, Sim, StackSimConfig};

/// What a target string names.
#[derive(Debug)]
pub enum Target {
    /// A simulated preset, its parameters applied.
    Sim(Box<DeviceSpec>),
    /// A simulated stack of simulated disks.
    Stack(Box<StackSpec>),
    /// A path: an image, a Linux zoned block device or an NVMe generic device
    /// ([`PathKind::of`] tells which when it is opened).
    Path(PathBuf),
}

impl Target {
    /// Parses a target string; a spec that does not parse is [`Error::Spec`].
    pub fn parse(text: &str) -> Result<Target, Error> {
        let bad = |why: String| Error::Spec { spec: text.to_string(), why };
        if let Some(dev) = text.strip_prefix("sim:") {
            return DeviceSpec::parse(dev).map(|d| Target::Sim(Box::new(d))).map_err(|e| bad(e.to_string()));
        }
        if let Some(stack) = text.strip_prefix("stack:") {
            return parse_stack(stack).map(|s| Target::Stack(Box::new(s))).map_err(bad);
        }
        if text.is_empty() {
            return Err(bad("no target: give an image path, a device, sim:PRESET or stack:SPEC".into()));
        }
        Ok(Target::Path(PathBuf::from(text)))
    }
}

/// Parses a stack specification, its disks as `sim:` (and `zblk bench --dev`) takes
/// them; the error in words.
pub fn parse_stack(text: &str) -> Result<StackSpec, String> {
    let mut resolve = |t: &str| DeviceSpec::parse(t).map(|d| d.params).map_err(|e| e.to_string());
    StackSpec::parse(text, &mut resolve).map_err(|e| e.to_string())
}

/// The simulation of the stack `spec`, the one construction of a simulated stack
/// that `zblk trace --stack`, `zblk serve --stack` and a handle on `stack:SPEC` share:
/// the stack built with BIOs split in `order`, every disk's engine under `policy`
/// (or the disk's own), each disk timed by the model `models` makes; with
/// `disk_data` false no disk keeps data (its owner keeps what it writes, by the top
/// device's sectors, and the simulator keeps zone state and timing only). The error
/// in words.
pub fn stack_sim(
    spec: &StackSpec,
    order: SplitOrder,
    policy: Option<IssuePolicy>,
    run: StackSimConfig,
    disk_data: bool,
    models: ModelFactory<'_>,
) -> Result<Sim, String> {
    let mut built =
        spec.build(StackConfig { split_order: order, ..StackConfig::default() }, policy).map_err(|e| e.to_string())?;
    if !disk_data {
        for (_, p) in &mut built.disks {
            p.memory_backed = false;
        }
    }
    Ok(Sim::with_stack(built, run, models))
}

/// What a path is opened as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    /// A character device: an NVMe ZNS namespace's generic device (`/dev/ngXnY`);
    /// any other character device is refused when opened, saying what it is.
    Nvme,
    /// A block device: a Linux zoned block device (a regular one is refused when
    /// opened: zblk's engine is for zoned devices).
    Linux,
    /// Anything else: a zoned image (a file that is not one is refused by the
    /// image's checks).
    Image,
}

impl PathKind {
    /// What `path` is opened as, by what the file system says it is.
    pub fn of(path: &Path) -> PathKind {
        if nvme::is_char_device(path) {
            PathKind::Nvme
        } else if linux::is_block_device(path) {
            PathKind::Linux
        } else {
            PathKind::Image
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_a_bad_one_says_why() {
        assert!(matches!(Target::parse("sim:smr-30tb").unwrap(), Target::Sim(d) if d.preset == "smr-30tb"));
        let stack = Target::parse("stack:linear[nullb:zone_size=64; nullb:zone_size=64]").unwrap();
        assert!(matches!(stack, Target::Stack(_)));
        assert!(matches!(Target::parse("/dev/ng0n1").unwrap(), Target::Path(p) if p == Path::new("/dev/ng0n1")));
        for bad in ["sim:", "sim:nullb:zone_size=3", "sim:nullb:nosuch=1", "stack:linear[", "stack:", ""] {
            let e = Target::parse(bad).unwrap_err();
            assert!(matches!(&e, Error::Spec { spec, .. } if spec == bad), "{bad}: {e}");
            assert_eq!(e.errno(), 22, "{bad}");
            assert!(e.to_string().starts_with(bad), "{e}");
        }
    }

    #[test]
    fn paths_are_told_apart_by_their_kind() {
        assert_eq!(PathKind::of(Path::new("/dev/null")), PathKind::Nvme, "a character device");
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(PathKind::of(&dir.path().join("img.zbd")), PathKind::Image);
    }
}
