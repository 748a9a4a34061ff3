//! Queue attributes the user may read and write at run time, as in sysfs:
//! `zoned_qd1_writes` (the single issuer) and `write_zeroes_unmap_max_bytes`; and the
//! queue freeze an issue policy change needs.
//!
//! Changing the policy freezes the queue as the kernel does (`blk_mq_freeze_queue()`):
//! new BIOs wait inside the engine, everything already in it drains under the old
//! policy, the policy switches, then the waiting BIOs go in, in order. Nothing is
//! lost or reordered.

use super::plugs::CondCache;
use super::policy::{self, IssuePolicy, PolicyTraits};
use super::{Engine, Queue};
use crate::bio::Bio;
use crate::units::SECTOR_SIZE;

/// A queue attribute change the engine refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    /// `zoned_qd1_writes` is meaningless (always 0) on a regular device.
    #[error("zoned_qd1_writes: the device is not zoned (the attribute is always 0 and cannot be set)")]
    NotZoned,
    /// Only 0 and 1 are valid.
    #[error("zoned_qd1_writes: {0} is not 0 or 1")]
    BadValue(u64),
    /// `write_zeroes_unmap_max_bytes` above what the device can do.
    #[error("write_zeroes_unmap_max_bytes: {value} is above the hardware limit write_zeroes_unmap_max_hw_bytes ({hw})")]
    AboveHardware {
        /// The value asked for.
        value: u64,
        /// `write_zeroes_unmap_max_hw_bytes`.
        hw: u64,
    },
    /// `write_zeroes_unmap_max_bytes` other than 0 or the hardware limit.
    #[error("write_zeroes_unmap_max_bytes: {value} is neither 0 (disable unmap) nor the hardware limit ({hw})")]
    BadUnmapLimit {
        /// The value asked for.
        value: u64,
        /// `write_zeroes_unmap_max_hw_bytes`.
        hw: u64,
    },
}

/// The largest WRITE_ZEROES BIO a zeroer (`blkdev_issue_zeroout()`: the runtime's
/// `write_zeroes`, the lab's simulated zeroer) submits at once; the engine splits it
/// further at `write_zeroes_max_bytes` and zone ends. 1 TiB: a whole number of 4 KiB
/// blocks within a BIO's 32-bit sector count.
pub const MAX_ZEROOUT_BIO_SECTORS: u64 = 1 << 31;

/// How a WRITE_ZEROES makes its range read as zeroes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZeroingMethod {
    /// The device deallocates the range (SCSI UNMAP bit, NVMe DEAC): no media writes.
    Unmap,
    /// The device writes zeroes (WRITE_ZEROES with NOUNMAP): full media writes, no
    /// data over the link.
    WriteZeroes,
    /// The device has no WRITE_ZEROES: the caller writes buffers of zeroes.
    ZeroBuffers,
}

impl ZeroingMethod {
    /// `unmap`, `write-zeroes` or `zero-buffers`.
    pub fn name(self) -> &'static str {
        match self {
            ZeroingMethod::Unmap => "unmap",
            ZeroingMethod::WriteZeroes => "write-zeroes",
            ZeroingMethod::ZeroBuffers => "zero-buffers",
        }
    }
}

impl Engine {
    /// The queue attribute `zoned_qd1_writes`: 1 when one context issues every zone
    /// write (the single issuer), 0 otherwise, and always 0 on a regular device.
    pub fn zoned_qd1_writes(&self) -> u8 {
        u8::from(self.q.geo.is_zoned() && self.q.freeze.unwrap_or(self.q.cfg.policy).single_issuer())
    }

    /// Writes `zoned_qd1_writes`: 1 selects the single issuer; 0 the plugging policy
    /// without one that the engine last ran (per-zone plugging, or pipelining on an
    /// engine that pipelined). As the kernel's attribute, writing the value it reads
    /// changes nothing: a pipelining engine written 0 keeps pipelining, a batching
    /// one written 1 keeps batching. A change freezes the queue for the switch (see
    /// the module documentation). Refused on a regular device.
    pub fn set_zoned_qd1_writes(&mut self, value: u64) -> Result<(), AttrError> {
        if !self.q.geo.is_zoned() {
            return Err(AttrError::NotZoned);
        }
        if value > 1 {
            return Err(AttrError::BadValue(value));
        }
        if value == u64::from(self.zoned_qd1_writes()) {
            return Ok(());
        }
        let policy = if value == 1 { IssuePolicy::selected_by_zoned_qd1_writes(true) } else { self.qd1_off };
        self.set_policy(policy);
        Ok(())
    }

    /// Switches the issue policy at run time, freezing the queue until it drains.
    pub fn set_policy(&mut self, policy: IssuePolicy) {
        if self.q.freeze.is_none() && policy == self.q.cfg.policy {
            return;
        }
        self.q.freeze = Some(policy);
        self.maybe_unfreeze();
        self.after_input();
    }

    /// The queue attribute `write_zeroes_unmap_max_bytes`: how large a WRITE_ZEROES
    /// the device may deallocate instead of writing; 0 when unmap is disabled or the
    /// device cannot unmap.
    pub fn write_zeroes_unmap_max_bytes(&self) -> u64 {
        u64::from(self.q.wzeroes_unmap_sectors) * SECTOR_SIZE
    }

    /// Writes `write_zeroes_unmap_max_bytes`: 0 disables unmapped write zeroes (every
    /// WRITE_ZEROES then carries NOUNMAP and the device writes zeroes), the hardware
    /// limit enables them again. As the kernel, other values are refused. Applies to
    /// BIOs submitted from now on.
    pub fn set_write_zeroes_unmap_max_bytes(&mut self, bytes: u64) -> Result<(), AttrError> {
        let hw = u64::from(self.q.geo.max_hw_wzeroes_unmap_sectors()) * SECTOR_SIZE;
        if bytes > hw {
            return Err(AttrError::AboveHardware { value: bytes, hw });
        }
        if bytes != 0 && bytes != hw {
            return Err(AttrError::BadUnmapLimit { value: bytes, hw });
        }
        self.q.wzeroes_unmap_sectors = (bytes / SECTOR_SIZE) as u32;
        Ok(())
    }

    /// How a WRITE_ZEROES submitted now makes its range read as zeroes.
    /// `nounmap`: the caller forbids deallocation (REQ_NOUNMAP).
    pub fn zeroing_method(&self, nounmap: bool) -> ZeroingMethod {
        if self.q.geo.max_write_zeroes_sectors() == 0 {
            ZeroingMethod::ZeroBuffers
        } else if nounmap || self.q.wzeroes_unmap_sectors == 0 {
            ZeroingMethod::WriteZeroes
        } else {
            ZeroingMethod::Unmap
        }
    }

    /// Whether an attribute change is waiting for the queue to drain.
    pub fn frozen(&self) -> bool {
        self.q.freeze.is_some()
    }

    /// Completes a policy switch once the queue has drained.
    /// Completes a policy switch if the queue is frozen and drained: after any input
    /// that can end BIOs without a device completion (a zone report that refuses
    /// held writes, an expired anticipation).
    pub(crate) fn unfreeze_if_drained(&mut self) {
        if self.q.freeze.is_some() {
            self.maybe_unfreeze();
        }
    }

    pub(crate) fn maybe_unfreeze(&mut self) {
        if self.q.freeze.is_none() || !self.q.bios.is_empty() {
            return;
        }
        let policy = self.q.freeze.take().expect("checked");
        assert!(self.q.plugs.iter().all(|(_, p)| !p.in_use()), "plugs in use across a policy switch");
        assert!(
            self.policy.is_idle() && self.q.plugs.ops_out == 0 && self.q.plugs.appends_out == 0,
            "work across a switch"
        );
        self.q.cfg.policy = policy;
        self.q.traits = PolicyTraits::of(&self.q.cfg);
        self.qd1_off = qd1_off(self.q.traits, self.qd1_off);
        self.policy = policy::build(&self.q.cfg);
        if !self.q.traits.plugs {
            self.q.forget_plugs();
        }
        let held: Vec<Bio> = self.q.frozen.drain(..).collect();
        for bio in held {
            self.enter(bio);
        }
    }
}

/// The policy `zoned_qd1_writes` 0 selects once a policy allowing `traits` is set:
/// that policy if it plugs without a single issuer (so that turning the single
/// issuer off brings back the per-zone policy it replaced, pipelining included),
/// else still `before`.
pub(super) fn qd1_off(traits: PolicyTraits, before: IssuePolicy) -> IssuePolicy {
    if traits.plugs && !traits.single_issuer { traits.policy } else { before }
}

impl Queue {
    /// Without plugs the host keeps no write pointers: partially written zones are
    /// forgotten.
    fn forget_plugs(&mut self) {
        for p in self.plugs.ids() {
            let z = self.plugs[p].zone;
            if !matches!(self.cond[z.idx()], CondCache::ReadOnly | CondCache::Offline) {
                self.cond[z.idx()] = CondCache::Unknown;
            }
            self.plugs.remove(p);
        }
    }
}
