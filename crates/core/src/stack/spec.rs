//! Stack specifications: a tree of devices, written as text on the command line.
//!
//! ```text
//! spec    := stacked | disk
//! stacked := ("striped" | "linear") [":" key=value,...] "[" member (";" member)* "]"
//! member  := [count "*"] spec ["@" offset ["+" length]]
//! disk    := anything else, e.g. nullb:size=1024,zone_size=64 (resolved by the caller)
//! ```
//!
//! `striped` takes `chunk=` (bytes, with a suffix: `64k`) and `max_sectors=`;
//! `linear` takes `max_sectors=`; its members may name a range of themselves with
//! `@offset+length` (bytes, with suffixes; the length defaults to the rest of the
//! member). `count*` repeats a member (each copy a device of its own). Examples:
//!
//! ```text
//! striped:chunk=64k[8*nullb:size=1024,zoned=0,max_sectors=2048]
//! linear[nullb:size=512,zone_size=64@128m+256m; nullb:size=512,zone_size=64]
//! striped:chunk=512k[linear[2*nullb:size=256,zoned=0]; linear[2*nullb:size=256,zoned=0]]
//! ```

use super::device::{DevId, LinearTarget, StackBuilder, StackError};
use super::submit::{Stack, StackConfig};
use crate::engine::{EngineConfig, IssuePolicy};
use crate::params::DeviceParams;
use crate::units::{SECTOR_SHIFT, Sector, parse_size};

/// A stack described as a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackSpec {
    /// A disk.
    Disk(DeviceParams),
    /// A linear device over `targets`.
    Linear {
        /// A `max_sectors` below what the members accept.
        max_sectors: Option<u32>,
        /// The member ranges, in order.
        targets: Vec<TargetSpec>,
    },
    /// A striped device over `members`.
    Striped {
        /// The stripe chunk, bytes.
        chunk_bytes: u64,
        /// A `max_sectors` below what the members accept.
        max_sectors: Option<u32>,
        /// The members, in order.
        members: Vec<StackSpec>,
    },
}

/// A member range of a linear device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetSpec {
    /// The member.
    pub dev: StackSpec,
    /// First byte of the range on the member.
    pub offset_bytes: u64,
    /// Length in bytes; `None`: to the member's end.
    pub len_bytes: Option<u64>,
}

/// A specification that does not parse, with where and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("stack spec at byte {at}: {message}")]
pub struct SpecError {
    /// Byte offset in the text.
    pub at: usize,
    /// What is wrong.
    pub message: String,
}

/// A built stack and the parameters of its disks (for the simulator: data store
/// and timing).
#[derive(Debug)]
pub struct BuiltStack {
    /// The stack.
    pub stack: Stack,
    /// Every disk with its parameters, in creation order.
    pub disks: Vec<(DevId, DeviceParams)>,
}

/// Resolves the text of a disk to its parameters.
pub type DiskResolver<'a> = &'a mut dyn FnMut(&str) -> Result<DeviceParams, String>;

/// The most copies `count*` may make.
const MAX_COUNT: u32 = 1024;

/// The most zones all the disks of a stack may have together: each costs memory in
/// its disk's engine and device, as [`crate::params::MAX_ZONES`] bounds one disk.
pub const MAX_STACK_ZONES: u64 = 1 << 22;

/// The most disks a specification may build (each has an engine and a device).
pub const MAX_DISKS: usize = 4096;

struct Parser<'a, 'r> {
    text: &'a str,
    pos: usize,
    resolve: DiskResolver<'r>,
}

impl StackSpec {
    /// Parses `text` (see the module documentation); `resolve` turns the text of a
    /// disk into its parameters.
    pub fn parse(text: &str, resolve: DiskResolver<'_>) -> Result<StackSpec, SpecError> {
        let mut p = Parser { text, pos: 0, resolve };
        let spec = p.spec()?;
        p.ws();
        if p.pos != text.len() {
            return Err(p.err(format!("unexpected '{}'", &text[p.pos..])));
        }
        Ok(spec)
    }

    /// Builds the stack bottom-up; the top of the tree is the device submitters use.
    /// Disks get an engine with their `hw_queue_depth`, and the single issuer if
    /// they are rotational and zoned (the kernel's `zoned_qd1_writes` default),
    /// unless `policy` says otherwise.
    pub fn build(&self, cfg: StackConfig, policy: Option<IssuePolicy>) -> Result<BuiltStack, StackError> {
        let disks = self.nr_disks();
        if disks > MAX_DISKS {
            return Err(StackError::Geometry {
                dev: "stack".to_string(),
                why: format!("{disks} disks, more than {MAX_DISKS}"),
            });
        }
        let zones = self.nr_zones();
        if zones > MAX_STACK_ZONES {
            return Err(StackError::Geometry {
                dev: "stack".to_string(),
                why: format!("{zones} zones in all its disks, more than {MAX_STACK_ZONES}"),
            });
        }
        let mut b = StackBuilder::new();
        let mut disks = Vec::new();
        let top = self.add(&mut b, &mut disks, policy)?;
        Ok(BuiltStack { stack: b.build(top, cfg), disks })
    }

    /// How many zones the tree's disks have in all (saturating; a disk whose geometry
    /// is invalid counts none: building refuses it anyway).
    pub fn nr_zones(&self) -> u64 {
        match self {
            StackSpec::Disk(p) => p.validate().map_or(0, |g| u64::from(g.nr_zones())),
            StackSpec::Linear { targets, .. } => targets.iter().fold(0u64, |n, t| n.saturating_add(t.dev.nr_zones())),
            StackSpec::Striped { members, .. } => members.iter().fold(0u64, |n, m| n.saturating_add(m.nr_zones())),
        }
    }

    /// How many disks the tree has (saturating).
    pub fn nr_disks(&self) -> usize {
        match self {
            StackSpec::Disk(_) => 1,
            StackSpec::Linear { targets, .. } => targets.iter().fold(0usize, |n, t| n.saturating_add(t.dev.nr_disks())),
            StackSpec::Striped { members, .. } => members.iter().fold(0usize, |n, m| n.saturating_add(m.nr_disks())),
        }
    }

    fn add(
        &self,
        b: &mut StackBuilder,
        disks: &mut Vec<(DevId, DeviceParams)>,
        policy: Option<IssuePolicy>,
    ) -> Result<DevId, StackError> {
        match self {
            StackSpec::Disk(params) => {
                let geo = params
                    .validate()
                    .map_err(|source| StackError::Disk { dev: super::device::disk_name(disks.len() as u32), source })?;
                let default = IssuePolicy::default_for(geo.is_zoned(), params.rotational, false);
                let cfg = EngineConfig {
                    policy: policy.unwrap_or(default),
                    queue_depth: params.hw_queue_depth,
                    ..EngineConfig::default()
                };
                let d = b.disk(&geo, cfg);
                disks.push((d, params.clone()));
                Ok(d)
            }
            StackSpec::Linear { max_sectors, targets } => {
                let mut placed = Vec::with_capacity(targets.len());
                for t in targets {
                    let dev = t.dev.add(b, disks, policy)?;
                    placed.push(LinearTarget {
                        dev,
                        offset: Sector(t.offset_bytes >> SECTOR_SHIFT),
                        len_sectors: t.len_bytes.map(|l| l >> SECTOR_SHIFT),
                    });
                }
                b.linear(&placed, *max_sectors)
            }
            StackSpec::Striped { chunk_bytes, max_sectors, members } => {
                let mut ids = Vec::with_capacity(members.len());
                for m in members {
                    ids.push(m.add(b, disks, policy)?);
                }
                b.striped(&ids, chunk_bytes >> SECTOR_SHIFT, *max_sectors)
            }
        }
    }
}

impl Parser<'_, '_> {
    fn err(&self, message: String) -> SpecError {
        SpecError { at: self.pos, message }
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        self.ws();
        if self.rest().starts_with(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }

    /// Text up to (not including) any of `stops`, trimmed.
    fn until(&mut self, stops: &[char]) -> (usize, &str) {
        self.ws();
        let start = self.pos;
        let rest = self.rest();
        let n = rest.find(stops).unwrap_or(rest.len());
        self.pos += n;
        (start, self.text[start..start + n].trim())
    }

    fn spec(&mut self) -> Result<StackSpec, SpecError> {
        self.ws();
        for kind in ["striped", "linear"] {
            let rest = self.rest();
            if rest.starts_with(kind) && rest[kind.len()..].trim_start().starts_with([':', '[']) {
                self.pos += kind.len();
                return self.stacked(kind);
            }
        }
        let (at, text) = self.until(&['[', ']', ';', '@']);
        if text.is_empty() {
            return Err(SpecError { at, message: "expected a device".to_string() });
        }
        let text = text.to_string();
        (self.resolve)(&text).map(StackSpec::Disk).map_err(|m| SpecError { at, message: format!("'{text}': {m}") })
    }

    fn stacked(&mut self, kind: &str) -> Result<StackSpec, SpecError> {
        let (mut chunk, mut max_sectors) = (None, None);
        if self.eat(':') {
            let (at, params) = self.until(&['[']);
            for item in params.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let err = |m: String| SpecError { at, message: format!("{kind}: {m}") };
                let Some((key, value)) = item.split_once('=') else {
                    return Err(err(format!("'{item}': expected name=value")));
                };
                match (kind, key.trim()) {
                    ("striped", "chunk") => {
                        let bytes = parse_size(value).map_err(|e| err(format!("chunk: {e}")))?;
                        if bytes == 0 || bytes % (1 << SECTOR_SHIFT) != 0 {
                            return Err(err(format!("chunk: {bytes} bytes is not a non-zero number of sectors")));
                        }
                        chunk = Some(bytes);
                    }
                    (_, "max_sectors") => {
                        let v =
                            value.trim().parse().map_err(|_| err(format!("max_sectors: '{value}' is not a number")))?;
                        max_sectors = Some(v);
                    }
                    (_, other) => return Err(err(format!("unknown parameter '{other}'"))),
                }
            }
        }
        if !self.eat('[') {
            return Err(self.err(format!("{kind}: expected '[' and its members")));
        }
        let mut members = Vec::new();
        loop {
            self.member(kind, &mut members)?;
            if self.eat(';') {
                continue;
            }
            if self.eat(']') {
                break;
            }
            return Err(self.err(format!("{kind}: expected ';' or ']'")));
        }
        match kind {
            "striped" => {
                let Some(chunk_bytes) = chunk else {
                    return Err(self.err("striped: chunk=SIZE is required".to_string()));
                };
                let members = members.into_iter().map(|t: TargetSpec| t.dev).collect();
                Ok(StackSpec::Striped { chunk_bytes, max_sectors, members })
            }
            _ => Ok(StackSpec::Linear { max_sectors, targets: members }),
        }
    }

    fn member(&mut self, kind: &str, out: &mut Vec<TargetSpec>) -> Result<(), SpecError> {
        self.ws();
        let digits = self.rest().find(|c: char| !c.is_ascii_digit()).unwrap_or(0);
        let mut count = 1;
        if digits > 0 && self.rest()[digits..].trim_start().starts_with('*') {
            let at = self.pos;
            count = self.rest()[..digits].parse::<u32>().unwrap_or(0);
            if count == 0 || count > MAX_COUNT {
                return Err(SpecError { at, message: format!("count must be 1 to {MAX_COUNT}") });
            }
            self.pos += digits;
            self.eat('*');
        }
        let dev = self.spec()?;
        let (mut offset_bytes, mut len_bytes) = (0, None);
        if self.eat('@') {
            if kind != "linear" {
                return Err(self.err(format!("{kind}: members take no @offset (only linear members do)")));
            }
            let (at, range) = self.until(&[';', ']']);
            let (off, len) = match range.split_once('+') {
                Some((o, l)) => (o, Some(l)),
                None => (range, None),
            };
            let size = |t: &str| parse_size(t.trim()).map_err(|e| SpecError { at, message: e.to_string() });
            offset_bytes = size(off)?;
            len_bytes = len.map(size).transpose()?;
            for b in std::iter::once(offset_bytes).chain(len_bytes) {
                if b % (1 << SECTOR_SHIFT) != 0 {
                    return Err(SpecError { at, message: format!("{b} bytes is not a whole number of sectors") });
                }
            }
        }
        // Bounded before copying, so that nested counts cannot make a huge tree.
        let total =
            out.iter().fold(dev.nr_disks().saturating_mul(count as usize), |n, t| n.saturating_add(t.dev.nr_disks()));
        if total > MAX_DISKS {
            return Err(self.err(format!("{kind}: more than {MAX_DISKS} disks")));
        }
        for _ in 0..count {
            out.push(TargetSpec { dev: dev.clone(), offset_bytes, len_bytes });
        }
        Ok(())
    }
}

/// Resolves `nullb[:params]` (null_blk's defaults and parameter names): the disk
/// resolver for tests and library users without presets of their own.
pub fn nullb_disk(text: &str) -> Result<DeviceParams, String> {
    let (preset, settings) = text.split_once(':').unwrap_or((text, ""));
    if preset != "nullb" {
        return Err(format!("unknown disk '{preset}' (known: nullb)"));
    }
    let mut p = DeviceParams::default();
    p.apply(settings).map_err(|e| e.to_string())?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<StackSpec, SpecError> {
        StackSpec::parse(t, &mut nullb_disk)
    }

    #[test]
    fn parses_nested_stacks() {
        let s = parse("striped:chunk=64k[8*nullb:size=1024,zoned=0,max_sectors=2048]").unwrap();
        let StackSpec::Striped { chunk_bytes, members, max_sectors } = &s else { panic!("{s:?}") };
        assert_eq!((*chunk_bytes, members.len(), *max_sectors), (65536, 8, None));
        let built = s.build(StackConfig::default(), None).unwrap();
        assert_eq!(built.disks.len(), 8);
        assert_eq!(built.stack.info(built.stack.top()).name, "md0");
        let l = parse("linear[nullb:size=512,zone_size=64 @ 128m+256m; nullb:size=512,zone_size=64]").unwrap();
        let StackSpec::Linear { targets, .. } = &l else { panic!() };
        assert_eq!((targets[0].offset_bytes, targets[0].len_bytes), (128 << 20, Some(256 << 20)));
        let built = l.build(StackConfig::default(), None).unwrap();
        let g = &built.stack.info(built.stack.top()).geometry;
        assert_eq!(g.nr_zones(), 4 + 8);
        let nested = parse(
            "striped:chunk=512k,max_sectors=1024[linear[2*nullb:size=256,zoned=0]; linear[2*nullb:size=256,zoned=0]]",
        )
        .unwrap();
        let built = nested.build(StackConfig::default(), None).unwrap();
        assert_eq!(built.disks.len(), 4);
        assert_eq!(built.stack.info(built.stack.top()).limits.max_sectors, 1024);
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let cases = [
            ("", "expected a device"),
            ("striped[nullb]", "chunk=SIZE is required"),
            ("linear:max_sectors=8", "expected '['"),
            ("striped:chunk=1000[nullb]", "not a non-zero number of sectors"),
            ("striped:chunk=64k,foo=1[nullb]", "unknown parameter 'foo'"),
            ("striped:chunk=64k[nullb@1m]", "only linear members"),
            ("linear[nullb:zone_size=x]", "zone_size"),
            ("linear[0*nullb]", "count must be"),
            ("linear[nullb; ]", "expected a device"),
            ("linear[nullb] x", "unexpected"),
            ("hdd", "unknown disk"),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err();
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
        let many = parse("linear[1024*linear[1024*linear[1024*nullb:size=1,zoned=0]]]").unwrap_err();
        assert!(many.to_string().contains("more than 4096 disks"), "{many}");
        let spec = StackSpec::Linear {
            max_sectors: None,
            targets: vec![
                TargetSpec { dev: StackSpec::Disk(DeviceParams::default()), offset_bytes: 0, len_bytes: None };
                5000
            ],
        };
        let e = spec.build(StackConfig::default(), None).unwrap_err();
        assert!(e.to_string().contains("more than 4096"), "{e}");
        let chunk = parse("striped:chunk=96k[2*nullb:zoned=0]").unwrap();
        let e = chunk.build(StackConfig::default(), None).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
        // Each disk within its own limit, too many zones together (found with the
        // stack_spec fuzz target as an allocation of tens of GiB, before the limits).
        let zones = parse("linear[2*nullb:size=512g,zone_size=128k]").unwrap();
        let e = zones.build(StackConfig::default(), None).unwrap_err();
        assert!(e.to_string().contains("more than 4194304"), "{e}");
    }
}
